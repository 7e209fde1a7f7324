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
--       ...                             -- stacks, and in stack mode)
--     },
--     count = <blocks live at the end>,
--     bytes = <their bytes>,
--     before_profiling = <bytes of blocks allocated before profiling
--                         and freed during it, as a negative number>,
--     total = <net bytes of the stream>,   -- = bytes + before_profiling
--     collected_at_stop = <true when garbage was collected at stop, so
--                          that every live block was reachable>,
--   }

local M = {}

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
    if a.bytes ~= b.bytes then
      return a.bytes > b.bytes
    end
    if a.count ~= b.count then
      return a.count > b.count
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

function Leaks:add_block(row, size, stack, weight)
  row.count = row.count + weight
  row.bytes = row.bytes + size
  if stack and self.grouper.mode ~= 'stack' then
    local record = row.by_stack[stack]
    if not record then
      record = { stack = stack, count = 0, bytes = 0 }
      row.by_stack[stack] = record
      row.stacks[#row.stacks + 1] = record
    end
    record.count = record.count + weight
    record.bytes = record.bytes + size
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
      row = { group = group, count = 0, bytes = 0, stacks = {},
        by_stack = {} }
      by_group[group] = row
      rows[#rows + 1] = row
    end
    self:add_block(row, size, stack, weight)
    result.count = result.count + weight
    result.bytes = result.bytes + size
  end)
  for _, row in ipairs(rows) do
    row.by_stack = nil
    sort_records(row.stacks, stack_name)
  end
  sort_records(rows, row_name)
  result.before_profiling = heap.total - result.bytes
  return result
end

return M
