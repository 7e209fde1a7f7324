-- memprof.analysis.columns: the figures of a view's rows, one array per figure,
-- indexed by the id of the row's group.
--
-- A large profile has a row per place in each view, and a row kept as a
-- table of its own costs a table header and an array on top of its
-- figures: about 140 bytes for a row of eight numbers, against 64 in
-- columns.  A view keeps its rows here and makes a row as a record
-- (memprof.record) only when a report reads it: the text views read the
-- few rows they print, json and html make and drop the record of each
-- row as they write it.
--
--   local columns = require('memprof.analysis.columns')
--   local set = columns.new(Row [, figures])  -- Row: a record shape
--                                   -- with a 'group' field; its other
--                                   -- fields (or `figures`) are columns
--   local id = set:add(group)       -- a new row, every figure 0
--   set.columns.bytes[id] = ...     -- a figure, by group id
--   set:has(group)                  -- whether the group has a row
--   set.groups                      -- the groups of the rows, in order
--   set:row(group)                  -- the row as a new record
--   set.rows                        -- every row as a record, in the
--                                   -- order of set.groups: made when
--                                   -- first read (for scripts and specs;
--                                   -- reports use the functions below)
--   columns.sort_groups(list, values)  -- a list of groups by
--                                   -- values[group.id], largest first,
--                                   -- then by name
--   columns.first_groups(list, values, count)  -- its first `count`
--                                   -- groups in that order (a new list;
--                                   -- `list` is not sorted)
--   set:top(opts) -> shown, rest    -- see below
--
-- A set whose rows have fields that are not columns gives row() a
-- function of its own (set.row = function(set, group) ... end).

local name_less = require('memprof.analysis.groups').name_less
local ID = require('memprof.analysis.groups').ID

local M = {}

local Set = {}

local function index(self, key)
  local method = Set[key]
  if method then
    return method
  end
  if key == 'rows' then
    local rows = {}
    for i, group in ipairs(self.groups) do
      rows[i] = self:row(group)
    end
    rawset(self, 'rows', rows)
    return rows
  end
  return nil
end

local META = { __index = index }

-- A set of rows of the shape Row, with a column for each of `figures`
-- (default: every field of Row but group).
function M.new(Row, figures)
  if not figures then
    figures = {}
    for _, field in ipairs(Row.fields) do
      if field ~= 'group' then
        figures[#figures + 1] = field
      end
    end
  end
  local set = { shape = Row, figures = figures, groups = {}, columns = {} }
  for _, field in ipairs(figures) do
    set.columns[field] = {}
  end
  return setmetatable(set, META)
end

function Set:has(group)
  return self.columns[self.figures[1]][group.id] ~= nil
end

-- A new row for `group`, its figures 0; returns the group's id.
function Set:add(group)
  local id = group.id
  local groups = self.groups
  groups[#groups + 1] = group
  local columns = self.columns
  for _, field in ipairs(self.figures) do
    columns[field][id] = 0
  end
  return id
end

-- The row of `group` as a record of the set's shape.
function Set:row(group)
  local id, columns = group.id, self.columns
  local values = {}
  for i, field in ipairs(self.shape.fields) do
    if field == 'group' then
      values[i] = group
    else
      values[i] = columns[field][id]
    end
  end
  return self.shape.make(values)
end

-- Whether group a comes before group b: by values[id], largest first,
-- then by name (groups.name_less: the names of stack groups are not
-- joined).
local function before(values, a, b)
  local va, vb = values[a[ID]], values[b[ID]]
  if va ~= vb then
    return va > vb
  end
  return name_less(a, b)
end

-- Sorts a list of groups by values[id], largest first, then by name.
local function sort_groups(list, values)
  table.sort(list, function(a, b)
    return before(values, a, b)
  end)
  return list
end
M.sort_groups = sort_groups

-- The first `count` groups of `list` in the order of sort_groups, as a
-- new list, without sorting the whole list (a report shows its first
-- rows of a list that may have a row per place): each group is compared
-- with the last of those found so far, and most go no further.
function M.first_groups(list, values, count)
  local first, n = {}, 0
  if count < 1 then
    return first
  end
  for _, group in ipairs(list) do
    if n < count or before(values, group, first[n]) then
      local i = n < count and n + 1 or n
      while i > 1 and before(values, group, first[i - 1]) do
        first[i] = first[i - 1]
        i = i - 1
      end
      first[i] = group
      n = n < count and n + 1 or n
    end
  end
  return first
end

-- The rows a report prints.  opts:
--   by       the figure the rows are sorted by, largest first, then by
--            the group's name (nil: the order of self.groups)
--   keep     a figure: only rows where it is above 0 (default every row)
--   top      how many rows are shown (nil: all)
--   sums     the figures summed over the rows not shown
-- Returns the rows shown, as records, and the rest: { rows = rows not
-- shown, [figure] = sum, ... }.  self.groups keeps its order.  (With
-- `top`, the rows shown are found without sorting every row:
-- first_groups.)
function Set:top(opts)
  local columns = self.columns
  local kept = self.groups
  if opts.keep then
    local values = columns[opts.keep]
    kept = {}
    for _, group in ipairs(self.groups) do
      if values[group.id] > 0 then
        kept[#kept + 1] = group
      end
    end
  end
  local first = kept
  if opts.by and opts.top then
    first = M.first_groups(kept, columns[opts.by], opts.top)
  elseif opts.by then
    first = {}
    for i, group in ipairs(kept) do
      first[i] = group
    end
    sort_groups(first, columns[opts.by])
  end
  local shown_count = math.min(#first, opts.top or #first)
  local shown, is_shown = {}, {}
  for i = 1, shown_count do
    shown[i] = self:row(first[i])
    is_shown[first[i]] = true
  end
  local rest = { rows = #kept - shown_count }
  for _, field in ipairs(opts.sums or {}) do
    local values, sum = columns[field], 0
    for _, group in ipairs(kept) do
      if not is_shown[group] then
        sum = sum + values[group.id]
      end
    end
    rest[field] = sum
  end
  return shown, rest
end

return M
