-- memprof.analysis.heap: the live heap by site, as an analysis pass.
--
-- Per site (or per group, see below):
--   holds     bytes produced at the site minus bytes of its blocks later
--             freed or reallocated away (can be negative, see below)
--   allocs    events at the site that produced a block (alloc, realloc)
--   reallocs  how many of those were reallocations
--   frees     blocks of the site later freed or reallocated away
--
-- A realloc releases the old block (charged to the site that produced
-- it, its owner: memprof.analysis.blocks) and produces a new
-- one at the realloc site.  A block released but never allocated during
-- the profile is charged to the pseudo-site heap.BEFORE_PROFILING, whose
-- holds go negative.  Holds are computed from the sizes in the events,
-- so the sum of holds over all sites is exactly the net bytes of the
-- stream: alloc nsize + realloc nsize - realloc osize - free osize.
--
--   local pass = heap.new([opts])   -- opts.grouper: a memprof.analysis.groups
--                                   -- grouper; the stats are then per
--                                   -- group of (site, stack)
--   pass:feed(kind, site, stack, osize, nsize, oweight, nweight, owner_id,
--     facts)  -- the protocol of every pass (memprof.analysis.analyze)
--                -- the protocol of every pass (memprof.analysis.analyze)
--   pass.keys    -- the sites (or groups) in order of first appearance:
--                -- key i is in slot i
--   pass.holds, pass.allocs, pass.reallocs, pass.frees
--                -- their figures, by slot (a large profile has a site
--                -- per place: columns, not a record per site)
--   pass:stats_list()  -- the figures as records (heap.Stats), in the
--                      -- order of keys: `site` (the site, or the
--                      -- group), `group` (the same table) and the four
--   pass.total   -- net bytes of the stream (set by finish)
--   pass:finish(stream, tracker)  -- after the last event: drops the
--                      -- index only events need

local record_shape = require('memprof.record').shape
local blocks = require('memprof.analysis.blocks')

local M = {}

-- The stats of a site or group as a record (stats_list()).  `group` is
-- the same value as `site`, kept as a field of its own because the
-- reports read either name.
local Stats = record_shape({ 'site', 'group', 'holds', 'allocs',
  'reallocs', 'frees' })
M.Stats = Stats

M.BEFORE_PROFILING = blocks.BEFORE_PROFILING
local BEFORE_PROFILING = M.BEFORE_PROFILING

local Heap = {}
Heap.__index = Heap

local make_feed

function M.new(opts)
  opts = opts or {}
  local self = setmetatable({
    keys = {},        -- sites (or groups), in order of first appearance
    slot_of_id = {},  -- a key's id -> its slot (its place in keys)
    holds = {}, allocs = {}, reallocs = {}, frees = {},  -- by slot
    grouper = opts.grouper or false,
    total = 0,
    feed = false,
  }, Heap)
  self.feed = make_feed(self)
  return self
end

-- The figures of every site or group as records, in order of keys.
function Heap:stats_list()
  local list = {}
  for slot, key in ipairs(self.keys) do
    list[slot] = Stats.make({ key, key, self.holds[slot], self.allocs[slot],
      self.reallocs[slot], self.frees[slot] })
  end
  return list
end

-- pass:feed(...): a closure of each pass's own, made by M.new, whose
-- columns and index are its upvalues: LuaJIT's code for an event then
-- looks up no field of the pass.
function make_feed(self)
  local keys, slot_of_id = self.keys, self.slot_of_id
  local holds, allocs = self.holds, self.allocs
  local reallocs, frees = self.reallocs, self.frees
  local grouper = self.grouper

  -- The slot of a site or group seen for the first time, its figures 0.
  -- (Slots, not the keys' ids, index the figures: the sites that
  -- allocate are a part of all, and figures indexed by a sparse id would
  -- be kept in the hash part of each column.)  The index of slots is by
  -- the keys' ids, which sites and groups keep first (key[1]): dense, so
  -- mostly an array.
  local function add_key(key)
    local slot = #keys + 1
    keys[slot] = key
    slot_of_id[key[1]] = slot
    holds[slot], allocs[slot], reallocs[slot], frees[slot] = 0, 0, 0, 0
    return slot
  end

  -- The slot of the owner of a released block, by line: a site seen
  -- before, when it produced the block, or the blocks of before the
  -- profile (id 0).
  local function owner_slot(id)
    return slot_of_id[id] or add_key(BEFORE_PROFILING)
  end

  return function(_, kind, site, stack, osize, nsize, oweight, nweight,
      owner_id, facts)
    if owner_id then
      local slot
      if grouper then
        local key = grouper:key(facts.owner, facts.owner_stack)
        slot = slot_of_id[key[1]] or add_key(key)
      else
        slot = owner_slot(owner_id)
      end
      holds[slot] = holds[slot] - osize
      frees[slot] = frees[slot] + oweight
    end
    if kind ~= 'free' then
      local key = site
      if grouper then
        key = grouper:key(site, stack)
      end
      local slot = slot_of_id[key[1]] or add_key(key)
      holds[slot] = holds[slot] + nsize
      allocs[slot] = allocs[slot] + nweight
      if kind == 'realloc' then
        reallocs[slot] = reallocs[slot] + nweight
      end
    end
  end
end

-- Feeding after finish() is an error (the index is gone).
local function finished()
  error('memprof.analysis.heap: an event fed after finish()', 2)
end

function Heap:finish(_, tracker)
  self.total = tracker.total
  self.slot_of_id = nil
  self.feed = finished
end

return M
