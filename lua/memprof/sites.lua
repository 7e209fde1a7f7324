-- memprof.sites: per-site aggregation of events, as an analysis pass.
--
-- For each event kind ('alloc', 'realloc', 'free') and each site:
--   count      number of events
--   plus       bytes allocated (nsize)
--   minus      bytes freed (osize)
--   overrides  for realloc and free: the sites that had produced the
--              released blocks, in order of first appearance, with
--              override_count[site] = number of blocks (a record without
--              any, every alloc record, shares two empty tables: never
--              modify them)
--
--   local pass = sites.new([opts])  -- opts.grouper: a memprof.groups
--                                   -- grouper; records are then per group
--                                   -- opts.overrides = false: no record
--                                   -- has any (for the formats that do
--                                   -- not show them: a deallocating
--                                   -- site such as the collector has an
--                                   -- entry per row whose blocks it freed)
--   pass:feed(ev, owner, heap)  -- owner: as returned by heap:feed(ev);
--                               -- heap: the heap pass (for the stack of
--                               -- the released block)
--   pass.kinds.alloc          -- list of records, in order of first appearance
--   pass:finish()   -- after the last event: drops the index of records
--                   -- by site (an entry per place and kind), which only
--                   -- events need; no event can be fed after
--
-- A record's `site` is the site (or the group, with a grouper); `group`
-- is the same table.  Overrides are sites (or groups) too.  A record is
-- a memprof.record (a large profile has a record per place): sites.Record
-- is its shape.

local record_shape = require('memprof.record').shape

local M = {}

local Record = record_shape({ 'site', 'group', 'count', 'plus', 'minus',
  'overrides', 'override_count' })
M.Record = Record
local COUNT, PLUS, MINUS = Record.index.count, Record.index.plus,
  Record.index.minus
local OVERRIDES, OVERRIDE_COUNT = Record.index.overrides,
  Record.index.override_count

M.KINDS = { 'alloc', 'realloc', 'free' }

local Sites = {}
Sites.__index = Sites

function M.new(opts)
  opts = opts or {}
  local self = setmetatable({ kinds = {}, by_kind = {},
    grouper = opts.grouper or false,
    overrides = opts.overrides ~= false }, Sites)
  for _, kind in ipairs(M.KINDS) do
    self.kinds[kind] = {}
    self.by_kind[kind] = {}
  end
  return self
end

-- The overrides of records that have none (each record gets tables of
-- its own at its first override).
local NO_OVERRIDES, NO_OVERRIDE_COUNT = {}, {}

function Sites:record(kind, site)
  local records = self.by_kind[kind]
  local record = records[site]
  if not record then
    record = Record.make({ site, site, 0, 0, 0, NO_OVERRIDES,
      NO_OVERRIDE_COUNT })
    records[site] = record
    local list = self.kinds[kind]
    list[#list + 1] = record
  end
  return record
end

function Sites:feed(ev, owner, heap)
  local kind = ev.kind
  local key = ev.site
  local grouper = self.grouper
  if grouper then
    key = grouper:key(key, ev.stack)
    if owner then
      owner = grouper:key(owner, heap and heap.released_stack)
    end
  end
  local record = self.by_kind[kind][key] or self:record(kind, key)
  record[COUNT] = record[COUNT] +
    (kind == 'free' and ev.oweight or ev.nweight)
  record[PLUS] = record[PLUS] + ev.nsize
  record[MINUS] = record[MINUS] + ev.osize
  if owner and self.overrides then
    local overrides = record[OVERRIDES]
    if overrides == NO_OVERRIDES then
      overrides = {}
      record[OVERRIDES], record[OVERRIDE_COUNT] = overrides, {}
    end
    local override_count = record[OVERRIDE_COUNT]
    local count = override_count[owner]
    if not count then
      count = 0
      overrides[#overrides + 1] = owner
    end
    override_count[owner] = count + ev.oweight
  end
end

-- Returns nothing: the analysis keeps the pass as its result.
function Sites:finish()
  self.by_kind = nil
end

return M
