-- memprof.leaks: the blocks still live at the end of the profile, by
-- where they were allocated, as an analysis pass.
--
-- A block belongs to the event that gave it its current size: its
-- allocation, or its last reallocation.  Blocks allocated before the
-- profile started are not known, so they are not listed; frees of such
-- blocks are summed in `before_profiling` so that the figures reconcile
-- with the stream.
--
--   local pass = leaks.new(grouper)     -- a memprof.groups grouper
--   -- analyze.run feeds it, then finish(stream, heap) gives the result:
--   {
--     rows = {                          -- by bytes, then count, then name
--       { group = <group>, count = <blocks>, bytes = <bytes>,
--         stacks = {                    -- the stacks of those blocks
--           { stack = <stack>, count = <blocks>, bytes = <bytes> }, ...
--         } },                          -- (empty for blocks without
--       ...                             -- stacks, and in stack mode: one
--                                       -- list shared by those rows,
--                                       -- never to be modified)
--     },
--     count = <blocks live at the end>,
--     bytes = <their bytes>,
--     before_profiling = <bytes of blocks allocated before profiling
--                         and freed during it, as a negative number>,
--     total = <net bytes of the stream>,   -- = bytes + before_profiling
--     collected_at_stop = <true when garbage was collected at stop, so
--                          that every live block was reachable>,
--   }

local record_shape = require('memprof.record').shape

local M = {}

-- A row and the record of one of its stacks are memprof.records (a
-- large profile has a row per place).
local Row = record_shape({ 'group', 'count', 'bytes', 'stacks', 'by_stack' })
M.Row = Row
local StackRecord = record_shape({ 'stack', 'count', 'bytes' })
M.StackRecord = StackRecord
-- The same positions in both.
local COUNT, BYTES = Row.index.count, Row.index.bytes
local STACKS, BY_STACK = Row.index.stacks, Row.index.by_stack

-- A row looks its stacks up in a list while it has this many at most,
-- then in a table by stack.
local LISTED_STACKS = 4

local Leaks = {}
Leaks.__index = Leaks

function M.new(grouper)
  return setmetatable({ grouper = grouper }, Leaks)
end

-- Nothing to do per event: the heap pass keeps the live blocks.
function Leaks.feed()
end

-- Sorts records by bytes, then count, then `name_of(record)`.
local function sort_records(records, name_of)
  table.sort(records, function(a, b)
    if a[BYTES] ~= b[BYTES] then
      return a[BYTES] > b[BYTES]
    end
    if a[COUNT] ~= b[COUNT] then
      return a[COUNT] > b[COUNT]
    end
    return name_of(a) < name_of(b)
  end)
end

local function row_name(row)
  return row.group.name
end

local function stack_name(record)
  local names = {}
  for i, frame in ipairs(record.stack.frames) do
    names[i] = frame.name
  end
  -- A stack made for events in compiled code has an index, not an id.
  local stack = record.stack
  local id = stack.id or 'inferred ' .. stack.index
  return table.concat(names, '\n') .. '\n' .. id
end

-- The record of `stack` in a row, or nil.
local function find_stack(row, stack)
  local by_stack = row[BY_STACK]
  if by_stack then
    return by_stack[stack]
  end
  for _, record in ipairs(row[STACKS]) do
    if record[1] == stack then
      return record
    end
  end
  return nil
end

-- The stacks of a row that has none: one empty list for all of them
-- (a row per place in a profile without stacks), never modified.
local NO_STACKS = {}

local function add_stack(row, stack)
  local record = StackRecord.make({ stack, 0, 0 })
  local stacks = row[STACKS]
  if stacks == NO_STACKS then
    stacks = {}
    row[STACKS] = stacks
  end
  stacks[#stacks + 1] = record
  local by_stack = row[BY_STACK]
  if by_stack then
    by_stack[stack] = record
  elseif #stacks > LISTED_STACKS then
    by_stack = {}
    for _, listed in ipairs(stacks) do
      by_stack[listed[1]] = listed
    end
    row[BY_STACK] = by_stack
  end
  return record
end

function Leaks:add_block(row, size, stack, weight)
  row[COUNT] = row[COUNT] + weight
  row[BYTES] = row[BYTES] + size
  if stack and self.grouper.mode ~= 'stack' then
    local record = find_stack(row, stack) or add_stack(row, stack)
    record[COUNT] = record[COUNT] + weight
    record[BYTES] = record[BYTES] + size
  end
end

function Leaks:finish(stream, heap)
  local rows, by_group = {}, {}
  local result = { rows = rows, count = 0, bytes = 0, total = heap.total,
    collected_at_stop = stream.collected_at_stop or false }
  heap:each_live_block(function(_, size, site, stack, _, weight)
    local group = self.grouper:key(site, stack)
    local row = by_group[group]
    if not row then
      row = Row.make({ group, 0, 0, NO_STACKS, false })
      by_group[group] = row
      rows[#rows + 1] = row
    end
    self:add_block(row, size, stack, weight)
    result.count = result.count + weight
    result.bytes = result.bytes + size
  end)
  for _, row in ipairs(rows) do
    row[BY_STACK] = nil
    if #row[STACKS] > 1 then
      sort_records(row[STACKS], stack_name)
    end
  end
  sort_records(rows, row_name)
  result.before_profiling = heap.total - result.bytes
  return result
end

return M
