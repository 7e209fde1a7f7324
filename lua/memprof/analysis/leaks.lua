-- memprof.analysis.leaks: the blocks still live at the end of the profile, by
-- where they were allocated, as an analysis pass.
--
-- A block belongs to the event that gave it its current size: its
-- allocation, or its last reallocation.  Blocks allocated before the
-- profile started are not known, so they are not listed; frees of such
-- blocks are summed in `before_profiling` so that the figures reconcile
-- with the stream.
--
--   local pass = leaks.new(grouper)     -- a memprof.analysis.groups grouper
--   -- analyze.run feeds it, then finish(stream, tracker) gives a
--   -- memprof.analysis.rows set of leaks.Row, its rows sorted by bytes, then
--   -- count, then name (figures: count, the blocks, and bytes), with:
--   {
--     count = <blocks live at the end>,
--     bytes = <their bytes>,
--     before_profiling = <bytes of blocks allocated before profiling
--                         and freed during it, as a negative number>,
--     total = <net bytes of the stream>,   -- = bytes + before_profiling
--     collected_at_stop = <true when garbage was collected at stop, so
--                          that every live block was reachable>,
--   }
-- A row's record (set:row(group), set.rows) has `stacks`: the stacks of
-- its blocks, { { stack = <stack>, count = <blocks>, bytes = <bytes> },
-- ... } by bytes, then count, then frames (empty for blocks without
-- stacks, and in stack mode).  Without records: leaks.stack_count(set,
-- group) says how many, leaks.stack_at(set, group, i) gives the i-th
-- as stack, count, bytes, and leaks.each_stack(set, group, fn) calls
-- fn(stack, count, bytes) for each, in that order.

local record_shape = require('memprof.record').shape
local rows = require('memprof.analysis.rows')
local name_less = require('memprof.analysis.groups').name_less
local ID = require('memprof.analysis.groups').ID

local M = {}

-- A row and the record of one of its stacks are memprof.records.
local Row = record_shape({ 'group', 'count', 'bytes', 'stacks' })
M.Row = Row
local StackRecord = record_shape({ 'stack', 'count', 'bytes' })
M.StackRecord = StackRecord
local COUNT, BYTES = StackRecord.index.count, StackRecord.index.bytes

-- A row keeps its stacks in columns too (a profile with stacks may have
-- a stack per row): its one stack and that stack's figures, or, when it
-- has several, their records in a list (with, while the blocks are
-- counted, a table by stack once there are more than LISTED_STACKS).
local LISTED_STACKS = 4

local Leaks = {}
Leaks.__index = Leaks

function M.new(grouper)
  return setmetatable({ grouper = grouper }, Leaks)
end

-- Nothing to do per event: the block tracker keeps the live blocks.
function Leaks.feed()
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

-- The order of rows and of their stacks: whether a (bytes_a, count_a)
-- comes before b, the most bytes first, then the most blocks; nil when
-- both are the same (the caller's names decide).
local function most_first(bytes_a, bytes_b, count_a, count_b)
  if bytes_a ~= bytes_b then
    return bytes_a > bytes_b
  end
  if count_a ~= count_b then
    return count_a > count_b
  end
  return nil
end

-- Sorts stack records by bytes, then count, then frames.
local function sort_stacks(records)
  table.sort(records, function(a, b)
    local first = most_first(a[BYTES], b[BYTES], a[COUNT], b[COUNT])
    if first == nil then
      return stack_name(a) < stack_name(b)
    end
    return first
  end)
end

-- The stacks of a row that has none: one empty list for all of them,
-- never modified.
local NO_STACKS = {}

-- The record of `stack` in a list of records, or nil.
local function find_stack(list, by_stack, stack)
  if by_stack then
    return by_stack[stack]
  end
  for _, record in ipairs(list) do
    if record[1] == stack then
      return record
    end
  end
  return nil
end

-- A new record of `stack` (no blocks yet) at the end of row `id`'s
-- list; a list longer than LISTED_STACKS gets an index by stack.
function Leaks:new_stack_record(id, list, stack)
  local record = StackRecord.make({ stack, 0, 0 })
  list[#list + 1] = record
  local by_stack = self.by_stack[id]
  if by_stack then
    by_stack[stack] = record
  elseif #list > LISTED_STACKS then
    by_stack = {}
    for _, listed in ipairs(list) do
      by_stack[listed[1]] = listed
    end
    self.by_stack[id] = by_stack
  end
  return record
end

-- Counts a block with a stack in row `id`.
function Leaks:add_stack(id, stack, size, weight)
  local one = self.stack
  if one[id] == nil and self.stack_list[id] == nil then
    one[id], self.stack_count[id], self.stack_bytes[id] = stack, weight, size
    return
  end
  if one[id] == stack then
    self.stack_count[id] = self.stack_count[id] + weight
    self.stack_bytes[id] = self.stack_bytes[id] + size
    return
  end
  local list = self.stack_list[id]
  if not list then
    list = { StackRecord.make({ one[id], self.stack_count[id],
      self.stack_bytes[id] }) }
    self.stack_list[id] = list
    one[id], self.stack_count[id], self.stack_bytes[id] = nil, nil, nil
  end
  local record = find_stack(list, self.by_stack[id], stack) or
    self:new_stack_record(id, list, stack)
  record[COUNT] = record[COUNT] + weight
  record[BYTES] = record[BYTES] + size
end

-- The row of `group` as a record, with its stacks.
local function row_of(set, group)
  local id = group.id
  local stacks = set.stack_list[id]
  if not stacks then
    local stack = set.stack[id]
    stacks = stack and { StackRecord.make({ stack, set.stack_count[id],
      set.stack_bytes[id] }) } or NO_STACKS
  end
  return Row.make({ group, set.columns.count[id], set.columns.bytes[id],
    stacks })
end

function M.stack_count(set, group)
  local id = group.id
  local list = set.stack_list[id]
  if list then
    return #list
  end
  return set.stack[id] and 1 or 0
end

function M.stack_at(set, group, i)
  local id = group.id
  local list = set.stack_list[id]
  if list then
    local record = list[i]
    return record[1], record[COUNT], record[BYTES]
  end
  return set.stack[id], set.stack_count[id], set.stack_bytes[id]
end

function M.each_stack(set, group, fn)
  for i = 1, M.stack_count(set, group) do
    fn(M.stack_at(set, group, i))
  end
end

function Leaks:finish(stream, tracker)
  local set = rows.new(Row, { 'count', 'bytes' })
  local counts, bytes = set.columns.count, set.columns.bytes
  self.stack, self.stack_count, self.stack_bytes = {}, {}, {}
  self.stack_list, self.by_stack = {}, {}
  local grouper = self.grouper
  local with_stacks = grouper.mode ~= 'stack'
  local count_sum, bytes_sum = 0, 0
  tracker:each_live_block(function(_, size, site, stack, _, weight)
    local group = grouper:key(site, stack)
    local id = group.id
    if counts[id] == nil then
      set:add(group)
    end
    counts[id] = counts[id] + weight
    bytes[id] = bytes[id] + size
    if stack and with_stacks then
      self:add_stack(id, stack, size, weight)
    end
    count_sum = count_sum + weight
    bytes_sum = bytes_sum + size
  end)
  for _, list in pairs(self.stack_list) do
    sort_stacks(list)
  end
  table.sort(set.groups, function(a, b)
    local x, y = a[ID], b[ID]
    local first = most_first(bytes[x], bytes[y], counts[x], counts[y])
    if first == nil then
      return name_less(a, b)
    end
    return first
  end)
  set.stack, set.stack_count, set.stack_bytes = self.stack,
    self.stack_count, self.stack_bytes
  set.stack_list = self.stack_list
  set.row = row_of
  set.count, set.bytes, set.total = count_sum, bytes_sum, tracker.total
  set.collected_at_stop = stream.collected_at_stop or false
  set.before_profiling = tracker.total - bytes_sum
  return set
end

return M
