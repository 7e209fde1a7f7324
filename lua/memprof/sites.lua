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
--   pass:feed(ev, owner, heap)  -- owner: as returned by heap:feed(ev);
--                               -- heap: the heap pass (for the stack of
--                               -- the released block)
--   pass.kinds.alloc          -- list of records, in order of first appearance
--
-- A record's `site` is the site (or the group, with a grouper); `group`
-- is the same table.  Overrides are sites (or groups) too.

local M = {}

M.KINDS = { 'alloc', 'realloc', 'free' }

local Sites = {}
Sites.__index = Sites

function M.new(opts)
  opts = opts or {}
  local self = setmetatable({ kinds = {}, by_kind = {},
    grouper = opts.grouper or false }, Sites)
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
    record = { site = site, group = site, count = 0, plus = 0, minus = 0,
      overrides = NO_OVERRIDES, override_count = NO_OVERRIDE_COUNT }
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
  record.count = record.count +
    (kind == 'free' and ev.oweight or ev.nweight)
  record.plus = record.plus + ev.nsize
  record.minus = record.minus + ev.osize
  if owner then
    if record.overrides == NO_OVERRIDES then
      record.overrides, record.override_count = {}, {}
    end
    local count = record.override_count[owner]
    if not count then
      count = 0
      record.overrides[#record.overrides + 1] = owner
    end
    record.override_count[owner] = count + ev.oweight
  end
end

return M
