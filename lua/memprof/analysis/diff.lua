-- memprof.analysis.diff: what changed between two profiles, row by row.
--
--   local diff = require('memprof.analysis.diff')
--   local changes = diff.compare(before, after [, opts])
--     before, after   results of memprof.analysis.analyze.run() with the same
--                     grouping, or their diff.figures(result): what the
--                     comparison needs of a profile, so that one profile's
--                     analysis can be dropped before the other is read
--     opts.sort       'live' (default): by the change in bytes live at
--                     the end (what a leak hunter asks); 'bytes': by the
--                     change in bytes allocated; 'count': by the change
--                     in allocations
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
--     rows = { { name, group (the name, and the frames of a stack, as
--                            { name =, frames = { { name = }, ... } },
--                            from after, or before when gone),
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

local rows = require('memprof.analysis.rows')

local M = {}

M.FIELDS = { 'allocated_bytes', 'allocated_events', 'live_bytes' }

local SORT_FIELD = { live = 'live_bytes', bytes = 'allocated_bytes',
  count = 'allocated_events' }
-- The field that breaks a tie of the sort field.
local TIE_FIELD = { live = 'allocated_bytes', bytes = 'live_bytes',
  count = 'live_bytes' }

-- The figures of one profile's rows, all that compare() needs of it:
-- lists by row of the names, the FIELDS and the names of the frames of
-- each row of a stack (false for the others), the row of each name, and
-- the stream's net bytes.  Its size grows with the rows only, so that
-- the rest of the analysis can be dropped before the next profile is read.
function M.figures(result)
  local figures = { names = {}, frame_names = {}, row_of = {},
    total = result.heap.total }
  for _, field in ipairs(M.FIELDS) do
    figures[field] = {}
  end
  -- The rows' figures in columns by group id (rows.figures), not a
  -- record per row: a large profile has a row per place.
  local by_group = rows.figures(result)
  local columns = by_group.columns
  for i, group in ipairs(by_group.groups) do
    local name = group.name
    figures.names[i] = name
    figures.row_of[name] = i
    for _, field in ipairs(M.FIELDS) do
      figures[field][i] = columns[field][group.id]
    end
    local frames = group.frames
    local frame_names = false
    if frames then
      frame_names = {}
      for j, frame in ipairs(frames) do
        frame_names[j] = frame.name
      end
    end
    figures.frame_names[i] = frame_names
  end
  return figures
end

local function figures_of(profile)
  if profile.row_of then
    return profile
  end
  return M.figures(profile)
end

-- What a row of the report is named by (layout.write_title): its name,
-- and for a stack its frames.
local function title_of(figures, i)
  local frame_names = figures.frame_names[i]
  local frames = nil
  if frame_names then
    frames = {}
    for j, name in ipairs(frame_names) do
      frames[j] = { name = name }
    end
  end
  return { name = figures.names[i], frames = frames }
end

-- The value of `field` of row i (0 when there is no row).
local function value_of(figures, field, i)
  if not i then
    return 0
  end
  return figures[field][i]
end

local function change_of(old, old_i, new, new_i)
  local entry = {}
  for _, field in ipairs(M.FIELDS) do
    local before = value_of(old, field, old_i)
    local after = value_of(new, field, new_i)
    entry[field] = { before = before, after = after, change = after - before }
  end
  return entry
end

local function changed(old, old_i, new, new_i)
  for _, field in ipairs(M.FIELDS) do
    if value_of(old, field, old_i) ~= value_of(new, field, new_i) then
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

-- Calls fn(name) for every name of both profiles: those of `after` in
-- order, then those of `before` that `after` has not.
local function each_name(before, after, fn)
  for _, name in ipairs(after.names) do
    fn(name)
  end
  for _, name in ipairs(before.names) do
    if not after.row_of[name] then
      fn(name)
    end
  end
end

local function sort_changes(list, field, tie)
  table.sort(list, function(a, b)
    local ca, cb = a[field].change, b[field].change
    if ca ~= cb then
      return ca > cb
    end
    if a[tie].change ~= b[tie].change then
      return a[tie].change > b[tie].change
    end
    return a.name < b.name
  end)
end

local function add_to_totals(totals, before, old_i, after, new_i)
  for _, field in ipairs(M.FIELDS) do
    local total = totals[field]
    local old_value = value_of(before, field, old_i)
    local new_value = value_of(after, field, new_i)
    total.before = total.before + old_value
    total.after = total.after + new_value
    total.change = total.change + new_value - old_value
  end
end

-- before and after: results of memprof.analysis.analyze.run(), or their
-- figures (M.figures).
function M.compare(before, after, opts)
  opts = opts or {}
  before, after = figures_of(before), figures_of(after)
  local list, unchanged = {}, 0
  local totals = change_of(nil, nil, nil, nil)
  each_name(before, after, function(name)
    local old_i, new_i = before.row_of[name], after.row_of[name]
    add_to_totals(totals, before, old_i, after, new_i)
    if changed(before, old_i, after, new_i) then
      local entry = change_of(before, old_i, after, new_i)
      entry.name = name
      if new_i then
        entry.group = title_of(after, new_i)
      else
        entry.group = title_of(before, old_i)
      end
      entry.status = status_of(old_i, new_i)
      list[#list + 1] = entry
    else
      unchanged = unchanged + 1
    end
  end)
  local sort = opts.sort or 'live'
  sort_changes(list, SORT_FIELD[sort], TIE_FIELD[sort])
  -- No row holds what was freed of the blocks allocated before each
  -- profile: the total live is each stream's net bytes.
  totals.live_bytes = { before = before.total, after = after.total,
    change = after.total - before.total }
  return { rows = list, unchanged = unchanged, totals = totals }
end

return M
