-- memprof.diff: what changed between two profiles, row by row.
--
--   local diff = require('memprof.diff')
--   local changes = diff.compare(before, after [, opts])
--     before, after   results of memprof.analyze.run() with the same
--                     grouping
--     opts.sort       'bytes' (default): by the change in bytes
--                     allocated; 'count': by the change in allocations
--
-- Rows are matched by name: the addresses of functions differ from run
-- to run, their names (file and line, C symbol) do not.  For each row
-- of either profile, with `before` and `after` values (0 when the row
-- is absent) and their difference `change`:
--   allocated_bytes    bytes allocated (allocations and reallocations)
--   allocated_events   allocation and reallocation events
--   live_bytes         bytes of the row's blocks live at the end
-- Result:
--   {
--     rows = { { name, group (from after, or before when gone),
--                status = 'changed' | 'new' | 'gone',
--                allocated_bytes = { before, after, change }, ... }, ... },
--                          -- rows that changed, by growth: largest
--                          -- increase first, largest decrease last
--     unchanged = <number of rows with no change>,
--     totals = { allocated_bytes = { before, after, change }, ... },
--   }
-- The totals cover every row; their live bytes are the net bytes of each
-- stream (the rows' live bytes less what was freed of the blocks
-- allocated before the profile, which no row holds).

local rows = require('memprof.report.rows')

local M = {}

M.FIELDS = { 'allocated_bytes', 'allocated_events', 'live_bytes' }

local SORT_FIELD = { bytes = 'allocated_bytes', count = 'allocated_events' }

local function by_name(list)
  local map = {}
  for _, row in ipairs(list) do
    map[row.name] = row
  end
  return map
end

local function change_of(old, new)
  local entry = {}
  for _, field in ipairs(M.FIELDS) do
    local before = old and old[field] or 0
    local after = new and new[field] or 0
    entry[field] = { before = before, after = after, change = after - before }
  end
  return entry
end

local function changed(entry)
  for _, field in ipairs(M.FIELDS) do
    if entry[field].change ~= 0 then
      return true
    end
  end
  return false
end

local function status_of(old, new)
  if not old then
    return 'new'
  elseif not new then
    return 'gone'
  end
  return 'changed'
end

-- Every name of both lists: those of `after` in order, then the gone.
local function all_names(before_list, after_list, before_map)
  local names, seen = {}, {}
  for _, row in ipairs(after_list) do
    names[#names + 1] = row.name
    seen[row.name] = true
  end
  for _, row in ipairs(before_list) do
    if not seen[row.name] and before_map[row.name] then
      names[#names + 1] = row.name
      seen[row.name] = true
    end
  end
  return names
end

local function sort_changes(list, field)
  table.sort(list, function(a, b)
    local ca, cb = a[field].change, b[field].change
    if ca ~= cb then
      return ca > cb
    end
    if a.live_bytes.change ~= b.live_bytes.change then
      return a.live_bytes.change > b.live_bytes.change
    end
    return a.name < b.name
  end)
end

function M.compare(before, after, opts)
  opts = opts or {}
  local before_list, after_list = rows.collect(before), rows.collect(after)
  local before_map, after_map = by_name(before_list), by_name(after_list)
  local list, unchanged = {}, 0
  local totals = change_of(nil, nil)
  for _, name in ipairs(all_names(before_list, after_list, before_map)) do
    local old, new = before_map[name], after_map[name]
    local entry = change_of(old, new)
    for _, field in ipairs(M.FIELDS) do
      local total = totals[field]
      total.before = total.before + entry[field].before
      total.after = total.after + entry[field].after
      total.change = total.change + entry[field].change
    end
    if changed(entry) then
      entry.name = name
      entry.group = (new or old).group
      entry.status = status_of(old, new)
      list[#list + 1] = entry
    else
      unchanged = unchanged + 1
    end
  end
  sort_changes(list, SORT_FIELD[opts.sort or 'bytes'])
  -- No row holds what was freed of the blocks allocated before each
  -- profile: the total live is each stream's net bytes.
  totals.live_bytes = { before = before.heap.total, after = after.heap.total,
    change = after.heap.total - before.heap.total }
  return { rows = list, unchanged = unchanged, totals = totals }
end

return M
