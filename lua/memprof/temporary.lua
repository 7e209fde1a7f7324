-- memprof.temporary: short-lived blocks, as an analysis pass.
--
-- A block's age when it is released (freed, or reallocated away) is the
-- number of allocation events (allocs and reallocs) between the event
-- that produced it and the release.  A block is temporary when its age
-- is at most `limit`: with limit 1, a block freed before any other
-- allocation, or after just one, is temporary.  Every block produced
-- during the profile is counted once, in one of three classes:
--   temporary   released at an age of at most `limit`
--   freed       released later
--   live        still live at the end
-- so for each group, and in total, blocks = temporary + freed + live
-- (counts and bytes).  Blocks allocated before profiling are not counted.
--
--   local pass = temporary.new(grouper, limit)
--   -- analyze.run feeds it (after the heap), then finish(stream, heap):
--   {
--     limit = <limit>,
--     rows = {                           -- in order of first appearance
--       { group = <group>,
--         blocks = <blocks produced>, bytes = <their bytes>,
--         temporary_blocks = ..., temporary_bytes = ...,
--         freed_blocks = ..., freed_bytes = ...,
--         live_blocks = ..., live_bytes = ... },
--       ...
--     },
--     totals = { blocks, bytes, temporary_blocks, ... }  -- the same fields
--   }
-- Bytes are the size each block was produced with.  A row is a
-- memprof.record (a large profile has a row per place): temporary.Row is
-- its shape.

local record = require('memprof.record')

local M = {}

M.FIELDS = { 'blocks', 'bytes', 'temporary_blocks', 'temporary_bytes',
  'freed_blocks', 'freed_bytes', 'live_blocks', 'live_bytes' }

local Row = record.shape({ 'blocks', 'bytes', 'temporary_blocks',
  'temporary_bytes', 'freed_blocks', 'freed_bytes', 'live_blocks',
  'live_bytes', 'group' })
M.Row = Row
local BLOCKS, BYTES = Row.index.blocks, Row.index.bytes
local TEMPORARY_BLOCKS, TEMPORARY_BYTES = Row.index.temporary_blocks,
  Row.index.temporary_bytes
local FREED_BLOCKS, FREED_BYTES = Row.index.freed_blocks,
  Row.index.freed_bytes

local Temporary = {}
Temporary.__index = Temporary

function M.new(grouper, limit)
  return setmetatable({ grouper = grouper, limit = limit or 1, rows = {},
    by_group = {} }, Temporary)
end

local function new_counts(fields)
  for _, field in ipairs(M.FIELDS) do
    fields[field] = 0
  end
  return fields
end

function Temporary:row(group)
  local row = self.by_group[group]
  if not row then
    row = Row.make({ 0, 0, 0, 0, 0, 0, 0, 0, group })
    self.by_group[group] = row
    self.rows[#self.rows + 1] = row
  end
  return row
end

function Temporary:feed(ev, owner, heap)
  local grouper = self.grouper
  local age = heap.released_age
  if owner and age then
    local row = self:row(grouper:key(owner, heap.released_stack))
    if age <= self.limit then
      row[TEMPORARY_BLOCKS] = row[TEMPORARY_BLOCKS] + ev.oweight
      row[TEMPORARY_BYTES] = row[TEMPORARY_BYTES] + heap.released_size
    else
      row[FREED_BLOCKS] = row[FREED_BLOCKS] + ev.oweight
      row[FREED_BYTES] = row[FREED_BYTES] + heap.released_size
    end
  end
  if ev.kind ~= 'free' then
    local site, stack = ev.site, ev.stack
    local row = self.by_group[grouper:key(site, stack)] or
      self:row(grouper:key(site, stack))
    row[BLOCKS] = row[BLOCKS] + ev.nweight
    row[BYTES] = row[BYTES] + ev.nsize
  end
end

function Temporary:finish(_, heap)
  local grouper = self.grouper
  heap:each_live_block(function(_, size, site, stack, _, weight)
    local row = self:row(grouper:key(site, stack))
    row.live_blocks = row.live_blocks + weight
    row.live_bytes = row.live_bytes + size
  end)
  local totals = new_counts({})
  for _, row in ipairs(self.rows) do
    for _, field in ipairs(M.FIELDS) do
      totals[field] = totals[field] + row[field]
    end
  end
  return { limit = self.limit, rows = self.rows, totals = totals }
end

return M
