-- memprof.sites: per-site aggregation of events, as an analysis pass.
--
-- For each event kind ('alloc', 'realloc', 'free') and each site:
--   count      number of events
--   plus       bytes allocated (nsize)
--   minus      bytes freed (osize)
--   overrides  for realloc and free: the sites that had produced the
--              released blocks, in order of first appearance, with the
--              number of blocks of each
--
--   local pass = sites.new([opts])  -- opts.grouper: a memprof.groups
--                                   -- grouper; figures are then per
--                                   -- group
--                                   -- opts.overrides = false: no
--                                   -- overrides are kept (for the
--                                   -- formats that do not show them: a
--                                   -- deallocating site such as the
--                                   -- collector has an entry per row
--                                   -- whose blocks it freed)
--   pass:feed(ev, owner, heap)  -- owner: as returned by heap:feed(ev);
--                               -- heap: the heap pass (for the stack of
--                               -- the released block)
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
-- index of slots is by the keys' ids (key[1], as in memprof.heap).
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
  error('memprof.sites: an event fed after finish()', 2)
end

function Sites:finish()
  for _, kind in ipairs(M.KINDS) do
    self.of_kind[kind].slot_of_id = nil
  end
  -- (The feed holds the indexes.)
  self.feed = finished
end

-- The figures of one event in the columns of its kind (slot: its key's
-- slot there), and its released block's owner in the overrides when
-- they are kept (owner not nil).  (The overrides are counted here, not
-- in a function of their own: a call for each release made the text
-- report of a large profile slower.)
local function account(figures, slot, weight, ev, owner)
  local count, plus, minus = figures.count, figures.plus, figures.minus
  count[slot] = count[slot] + weight
  plus[slot] = plus[slot] + ev.nsize
  minus[slot] = minus[slot] + ev.osize
  if owner then
    local by_slot = figures.overrides
    local overrides = by_slot[slot]
    if not overrides then
      overrides = { {}, {} }
      by_slot[slot] = overrides
    end
    local blocks = overrides[2]
    local blocks_of_owner = blocks[owner]
    if not blocks_of_owner then
      blocks_of_owner = 0
      local list = overrides[1]
      list[#list + 1] = owner
    end
    blocks[owner] = blocks_of_owner + ev.oweight
  end
end

-- pass:feed(ev, owner, heap): a closure of each pass's own, made by
-- M.new, whose grouper, kinds' figures and indexes are its upvalues:
-- LuaJIT's code for an event then looks up no field of the pass, and
-- the grouper and keep_overrides, known for good, cost no test.
function make_feed(self)
  local grouper, keep_overrides = self.grouper, self.keep_overrides
  local allocs, reallocs, frees = self.allocs, self.reallocs, self.frees
  local alloc_slots, realloc_slots = allocs.slot_of_id, reallocs.slot_of_id
  local free_slots = frees.slot_of_id
  return function(_, ev, owner, heap)
    local kind = ev.kind
    local key = ev.site
    if grouper then
      key = grouper:key(key, ev.stack)
      if owner then
        owner = grouper:key(owner, heap and heap.released_stack)
      end
    end
    if not keep_overrides then
      owner = nil
    end
    local id = key[1]
    if kind == 'alloc' then
      account(allocs, alloc_slots[id] or add(allocs, key), ev.nweight, ev,
        owner)
    elseif kind == 'free' then
      account(frees, free_slots[id] or add(frees, key), ev.oweight, ev,
        owner)
    else
      account(reallocs, realloc_slots[id] or add(reallocs, key), ev.nweight,
        ev, owner)
    end
  end
end

return M
