-- memprof.report.rows: the figures of each row of an analysis, with the
-- sites and heap passes merged into the rows of the analysis' grouping,
-- in columns by group id (a large profile has a row per place: a column
-- takes 8 bytes a row, a record per row many times that).
--
--   local rows = require('memprof.report.rows')
--   local figures = rows.figures(result)  -- memprof.analysis.analyze.run
--
-- The sites and heap passes keep one record per site when the rows are
-- lines (two sites with one name, a function loaded twice, are one
-- row), and one per group otherwise; here every record is counted in
-- its group (result.grouper), so each row appears once.
--   figures.list     the groups that have figures, in order of their ids
--   figures[FIELD]   an array indexed by group id, for each FIELD:
--     allocated_events, allocated_bytes   events that produced a block
--                      (alloc, realloc), their bytes
--     live_bytes       what the row's blocks hold at the end: bytes it
--                      produced minus those of its blocks later released
--                      (0 for the blocks allocated before the profile)
--     live_blocks      its blocks still live
-- No figure is negative.  (The default sections' rows, as every format
-- shows them, are memprof.report.model.sections'.)

local record_array = require('memprof.record').array

local M = {}

-- The group of a key of the sites or heap passes: a group already, or a
-- site (rows by line).
function M.group_of(grouper, key)
  if key.mode then
    return key
  end
  return grouper:key(key)
end

-- An array of zeros by group id, for the ids of `list` (in order),
-- with room for them made at once (memprof.record.array).
local function zeros(list)
  local last = list[#list]
  local column = record_array(last and last.id or 0)
  for _, group in ipairs(list) do
    column[group.id] = 0
  end
  return column
end

-- Sums values[slot] into column[group id], for the keys (sites or
-- groups) of the sites pass of one kind, key i in slot i.
local function sum_into(column, grouper, keys, values)
  for slot, key in ipairs(keys) do
    local id = M.group_of(grouper, key).id
    column[id] = column[id] + values[slot]
  end
end

-- The groups of the sites' and heap's records, in order of their ids.
local function groups_with_figures(result)
  local grouper = result.grouper
  local seen, list = {}, {}
  local function note(key)
    seen[M.group_of(grouper, key).id] = true
  end
  for _, kind in ipairs({ 'alloc', 'realloc', 'free' }) do
    for _, key in ipairs(result.sites.of_kind[kind].keys) do
      note(key)
    end
  end
  for _, key in ipairs(result.heap.keys) do
    note(key)
  end
  for _, group in ipairs(grouper.list) do
    if seen[group.id] then
      list[#list + 1] = group
    end
  end
  return list
end

-- The heap's figures: live bytes and blocks.
local function add_heap(figures, grouper, heap)
  local live_bytes, live_blocks = figures.live_bytes, figures.live_blocks
  local holds, allocs, frees = heap.holds, heap.allocs, heap.frees
  for from, key in ipairs(heap.keys) do
    local group = M.group_of(grouper, key)
    if group.source ~= 'before' then
      local id = group.id
      live_bytes[id] = live_bytes[id] + holds[from]
      live_blocks[id] = live_blocks[id] + allocs[from] - frees[from]
    end
  end
end

function M.figures(result)
  local grouper, sites = result.grouper, result.sites
  local list = groups_with_figures(result)
  local events, bytes = zeros(list), zeros(list)
  for _, kind in ipairs({ 'alloc', 'realloc' }) do
    local of_kind = sites.of_kind[kind]
    sum_into(events, grouper, of_kind.keys, of_kind.count)
    sum_into(bytes, grouper, of_kind.keys, of_kind.plus)
  end
  local figures = { list = list, allocated_events = events,
    allocated_bytes = bytes, live_bytes = zeros(list),
    live_blocks = zeros(list) }
  add_heap(figures, grouper, result.heap)
  return figures
end

-- The notes (for stderr) of an export made of UNITs ('stack', 'sample'):
-- without call stacks in the profile, each of them is one frame.
function M.stack_notes(result, unit)
  if result.stream.has_stacks then
    return {}
  end
  return { 'the profile has no call stacks: each ' .. unit .. ' is one ' ..
    'frame, the place of the events (record with memprof.start(path, ' ..
    '{stack_depth = N}) for stacks)' }
end

-- The frames of a row's group, innermost first: a stack's, or the one
-- place a group of another mode is named after.
function M.frames_of(group)
  if group.frames then
    return group.frames
  end
  return { group.site or group }
end

return M
