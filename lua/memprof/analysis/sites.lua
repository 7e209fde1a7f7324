-- memprof.analysis.sites: per-site aggregation of events, as an analysis pass.
--
-- For each event kind ('alloc', 'realloc', 'free') and each site:
--   count      number of events
--   plus       bytes allocated (nsize)
--   minus      bytes freed (osize)
--   overrides  for realloc and free: the sites that had produced the
--              released blocks, in order of first appearance, with the
--              number of blocks of each
--
--   local pass = sites.new([opts])  -- opts.grouper: a memprof.analysis.groups
--                                   -- grouper; figures are then per
--                                   -- group
--                                   -- opts.overrides = false: no
--                                   -- overrides are kept (for the
--                                   -- formats that do not show them: a
--                                   -- deallocating site such as the
--                                   -- collector has an entry per row
--                                   -- whose blocks it freed)
--   pass:feed(kind, site, stack, osize, nsize, oweight, nweight, owner_id,
--     facts)
--                               -- the protocol of every pass (see
--                               -- memprof.analysis.analyze)
--   pass.of_kind.alloc          -- the figures of each kind:
--     keys                      -- the sites (or groups), in order of
--                               -- first appearance: key i is in slot i
--     count[slot], plus[slot], minus[slot]   -- the figures, by slot
--                               -- (columns: a large profile has a site
--                               -- per place)
--   pass:overrides_at(kind, slot) -> the overrides of a key: a list of
--                               -- sites (or groups), and a table of
--                               -- their blocks by site; or nil
--   pass:finish()   -- after the last event: drops the index of slots by
--                   -- key, which only events need
--   pass.kinds.alloc            -- the figures as records (sites.Record),
--                               -- in the order of keys, made when first
--                               -- read: `site` (the site, or the group),
--                               -- `group` (the same table), count, plus,
--                               -- minus, overrides and override_count
--                               -- (a record without overrides has two
--                               -- empty tables shared by all: never
--                               -- modify them)

local record_shape = require('memprof.record').shape
local BEFORE_PROFILING = require('memprof.analysis.blocks').BEFORE_PROFILING

local M = {}

local Record = record_shape({ 'site', 'group', 'count', 'plus', 'minus',
  'overrides', 'override_count' })
M.Record = Record

M.KINDS = { 'alloc', 'realloc', 'free' }

local Sites = {}
Sites.__index = Sites

local make_feed

-- The overrides of records that have none.
local NO_OVERRIDES, NO_OVERRIDE_COUNT = {}, {}

-- The records of one kind (pass.kinds[kind]).
local function records_of(self, kind)
  local list = {}
  local figures = self.of_kind[kind]
  local count, plus, minus = figures.count, figures.plus, figures.minus
  for slot, key in ipairs(figures.keys) do
    local overrides = figures.overrides[slot]
    list[slot] = Record.make({ key, key, count[slot], plus[slot], minus[slot],
      overrides and overrides[1] or NO_OVERRIDES,
      overrides and overrides[2] or NO_OVERRIDE_COUNT })
  end
  return list
end

function M.new(opts)
  opts = opts or {}
  local self = setmetatable({ of_kind = {}, grouper = opts.grouper or false,
    keep_overrides = opts.overrides ~= false }, Sites)
  for _, kind in ipairs(M.KINDS) do
    -- overrides: by slot, { list of owners, blocks by owner }
    self.of_kind[kind] = { keys = {}, slot_of_id = {}, count = {},
      plus = {}, minus = {}, overrides = {} }
  end
  -- The same tables under names of their own, for feed(): a constant
  -- key is found without hashing the kind.
  self.allocs, self.reallocs, self.frees = self.of_kind.alloc,
    self.of_kind.realloc, self.of_kind.free
  self.feed = make_feed(self)
  self.kinds = setmetatable({}, { __index = function(kinds, kind)
    local list = records_of(self, kind)
    rawset(kinds, kind, list)
    return list
  end })
  return self
end

-- The slot of a site (or group) seen for the first time in events of
-- `kind` (figures): its figures are 0.  (Slots, not the keys' ids, index
-- the figures: each kind has some of the sites, and figures indexed by
-- a sparse id would be kept in the hash part of each column.)  The
-- index of slots is by the keys' ids (key[1], as in memprof.analysis.heap).
local function add(figures, key)
  local keys = figures.keys
  local slot = #keys + 1
  keys[slot] = key
  figures.slot_of_id[key[1]] = slot
  figures.count[slot], figures.plus[slot], figures.minus[slot] = 0, 0, 0
  return slot
end

function Sites:overrides_at(kind, slot)
  local overrides = self.of_kind[kind].overrides[slot]
  if overrides then
    return overrides[1], overrides[2]
  end
  return nil
end

-- Feeding after finish() is an error (the indexes are gone).
local function finished()
  error('memprof.analysis.sites: an event fed after finish()', 2)
end

-- The blocks of each owner, counted by the owner's id while events are
-- fed (see count_owner), keyed by the owner itself once they are done.
-- By line, the owners are listed by id while events are fed: each is a
-- site that produced a block, so a key of allocs or reallocs, or the
-- blocks of before the profile (id 0).
local function key_by_owner(by_slot, site_of_id)
  for _, overrides in pairs(by_slot) do
    local list, blocks_by_id, by_owner = overrides[1], overrides[2], {}
    for i, owner in ipairs(list) do
      if type(owner) == 'number' then
        owner = site_of_id[owner]
        list[i] = owner
      end
      by_owner[owner] = blocks_by_id[owner[1]]
    end
    overrides[2] = by_owner
  end
end

function Sites:finish()
  local site_of_id = { [0] = BEFORE_PROFILING }
  for _, kind in ipairs({ 'alloc', 'realloc' }) do
    for _, key in ipairs(self.of_kind[kind].keys) do
      site_of_id[key[1]] = key
    end
  end
  for _, kind in ipairs(M.KINDS) do
    self.of_kind[kind].slot_of_id = nil
    key_by_owner(self.of_kind[kind].overrides, site_of_id)
  end
  -- (The feed holds the indexes.)
  self.feed = finished
end

-- The released block's owner (its id, and the owner itself or, by line,
-- nil) in the overrides of the key in `slot` (by slot: { list of
-- owners, blocks by owner }), for `weight` blocks.  An owner's blocks
-- are counted by its id, as the heap's slots are (key[1]): the ids of
-- sites are dense, so a deallocating site's counts are mostly an array,
-- where a table keyed by the owners themselves is a hash table searched
-- for each release.  finish() keys them by owner.
local function count_owner(by_slot, slot, id, owner, weight)
  local overrides = by_slot[slot]
  if not overrides then
    overrides = { {}, {} }
    by_slot[slot] = overrides
  end
  local blocks = overrides[2]
  local blocks_of_owner = blocks[id]
  if not blocks_of_owner then
    blocks_of_owner = 0
    local list = overrides[1]
    list[#list + 1] = owner or id
  end
  blocks[id] = blocks_of_owner + weight
end

-- pass:feed(...): a closure of each pass's own, made by M.new, whose
-- grouper, kinds' columns and indexes are its upvalues: LuaJIT's code
-- for an event then looks up no field of the pass, and the grouper and
-- keep_overrides, known for good, cost no test.  Each kind adds to the
-- columns it changes only (an allocation frees no bytes, a free
-- allocates none), and only a release has an owner.
function make_feed(self)
  local grouper, keep_overrides = self.grouper, self.keep_overrides
  local allocs, reallocs, frees = self.allocs, self.reallocs, self.frees
  local alloc_slots, realloc_slots = allocs.slot_of_id, reallocs.slot_of_id
  local free_slots = frees.slot_of_id
  local alloc_count, alloc_plus = allocs.count, allocs.plus
  local free_count, free_minus = frees.count, frees.minus
  local realloc_count, realloc_plus = reallocs.count, reallocs.plus
  local realloc_minus = reallocs.minus
  local free_overrides = frees.overrides
  local realloc_overrides = reallocs.overrides

  -- The released block's owner in the overrides of the key in `slot`.
  local function count_release(overrides, slot, owner_id, facts, weight)
    if grouper then
      local owner = grouper:key(facts.owner, facts.owner_stack)
      return count_owner(overrides, slot, owner[1], owner, weight)
    end
    return count_owner(overrides, slot, owner_id, nil, weight)
  end

  return function(_, kind, site, stack, osize, nsize, oweight, nweight,
      owner_id, facts)
    local key = site
    if grouper then
      key = grouper:key(site, stack)
    end
    local id = key[1]
    if kind == 'alloc' then
      local slot = alloc_slots[id] or add(allocs, key)
      alloc_count[slot] = alloc_count[slot] + nweight
      alloc_plus[slot] = alloc_plus[slot] + nsize
    elseif kind == 'free' then
      local slot = free_slots[id] or add(frees, key)
      free_count[slot] = free_count[slot] + oweight
      free_minus[slot] = free_minus[slot] + osize
      if keep_overrides then
        count_release(free_overrides, slot, owner_id, facts, oweight)
      end
    else
      local slot = realloc_slots[id] or add(reallocs, key)
      realloc_plus[slot] = realloc_plus[slot] + nsize
      realloc_count[slot] = realloc_count[slot] + nweight
      realloc_minus[slot] = realloc_minus[slot] + osize
      if keep_overrides then
        count_release(realloc_overrides, slot, owner_id, facts,
          oweight)
      end
    end
  end
end

return M
