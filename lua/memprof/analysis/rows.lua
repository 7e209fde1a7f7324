-- memprof.analysis.rows: the one row model of a profile's reports.  A row
-- is one group of the analysis' grouping (memprof.analysis.groups interns
-- groups by name, so a row is one name whatever the mode), and its
-- figures live in columns: one array per figure, indexed by the group's
-- id.  Every profile format reads its rows from here: the views' sets
-- (leaks, peak, temporary), the default sections (text, json, html:
-- memprof.report.model.sections lays them out), the figures of folded,
-- pprof and --diff.
--
-- A large profile has a row per place, and a row kept as a table of its
-- own costs a table header and an array on top of its figures: about 140
-- bytes for a row of eight numbers, against 64 in columns.  A row
-- becomes a record (memprof.record) only when a report reads it.
--
--   local rows = require('memprof.analysis.rows')
--   local set = rows.new(Row [, figures])  -- Row: a record shape
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
--   set:top(opts) -> shown, rest    -- see below
--   rows.sort_groups(list, values)  -- a list of groups by
--                                   -- values[group.id], largest first,
--                                   -- then by name
--   rows.first_groups(list, values, count)  -- its first `count`
--                                   -- groups in that order (a new list;
--                                   -- `list` is not sorted)
--
-- The rows of a pass (memprof.analysis.sites, memprof.analysis.heap), whose
-- keys are sites (rows by line: two sites of one name, a function loaded
-- twice, are one row) or groups:
--   rows.group_of(grouper, key)     -- the group of a pass's key
--   rows.of_pass(grouper, keys, values, fields [, Row]) -> a set whose
--                                   -- columns `fields` sum values[field]
--                                   -- [slot] of the keys of each row;
--                                   -- set.first[id] is the slot of a
--                                   -- row's first key, set.more[id] the
--                                   -- others' (nil: most rows have one)
--   set:sum_pass(grouper, keys, values, sums)  -- another pass's figures
--                                   -- summed into the rows of its keys:
--                                   -- sums = { { column, field of values
--                                   -- }, ... }; a column is false for a
--                                   -- row none of whose keys has any
--   set:slots(group)                -- the slots of a row's keys, in order
--   rows.figures(result)            -- the rows of the whole analysis
--                                   -- (heap and sites passes) with the
--                                   -- four figures of folded, pprof and
--                                   -- --diff; see below
--
-- A set whose rows have fields that are not columns gives row() a
-- function of its own (set.row = function(set, group) ... end).

local groups_module = require('memprof.analysis.groups')
local record = require('memprof.record')

local name_less = groups_module.name_less
local ID = groups_module.ID
local array = record.array

local M = {}

local Set = {}

local function index(self, key)
  local method = Set[key]
  if method then
    return method
  end
  if key == 'rows' then
    local list = {}
    for i, group in ipairs(self.groups) do
      list[i] = self:row(group)
    end
    rawset(self, 'rows', list)
    return list
  end
  return nil
end

local META = { __index = index }

-- A set of rows of the shape Row, with a column for each of `figures`
-- (default: every field of Row but group); `size`, the highest group id
-- expected, gives the columns room at once.
function M.new(Row, figures, size)
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
    set.columns[field] = size and array(size) or {}
  end
  return setmetatable(set, META)
end

function Set:has(group)
  return self.columns[self.figures[1]][group[ID]] ~= nil
end

-- A new row for `group`, its figures 0; returns the group's id.
function Set:add(group)
  local id = group[ID]
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
  local id, columns = group[ID], self.columns
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
-- joined).  Names are unique within a grouping: the order is total.
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

-- The groups of the rows `keep` keeps: a figure (rows where it is above
-- 0), a function(group) -> boolean, or nil (every row, self.groups
-- itself).
local function kept_groups(self, keep)
  if not keep then
    return self.groups
  end
  local list = {}
  if type(keep) == 'function' then
    for _, group in ipairs(self.groups) do
      if keep(group) then
        list[#list + 1] = group
      end
    end
    return list
  end
  local values = self.columns[keep]
  for _, group in ipairs(self.groups) do
    if values[group[ID]] > 0 then
      list[#list + 1] = group
    end
  end
  return list
end

-- The groups `keep` keeps (see kept_groups), in order: by `by`, a figure
-- or an array of values by group id, largest first, then by name (nil:
-- the order of self.groups); at most `top` of them (the whole list
-- otherwise, and the number kept).  With `top`, the first ones are found
-- without sorting every row.
function Set:ordered(opts)
  local kept = kept_groups(self, opts.keep)
  local by = opts.by
  if type(by) == 'string' then
    by = self.columns[by]
  end
  local first = kept
  if by and opts.top then
    first = M.first_groups(kept, by, opts.top)
  elseif by then
    first = {}
    for i, group in ipairs(kept) do
      first[i] = group
    end
    sort_groups(first, by)
  elseif opts.top then
    first = {}
    for i = 1, math.min(#kept, opts.top) do
      first[i] = kept[i]
    end
  end
  return first, #kept, kept
end

-- The rows a report prints.  opts:
--   by       the figure the rows are sorted by, largest first, then by
--            the group's name (nil: the order of self.groups), or an
--            array of values by group id
--   keep     a figure: only rows where it is above 0, or a
--            function(group) -> whether to keep its row (default every
--            row)
--   top      how many rows are shown (nil: all)
--   sums     the figures summed over the rows not shown
-- Returns the rows shown, as records, and the rest: { rows = rows not
-- shown, [figure] = sum, ... }.  self.groups keeps its order.
function Set:top(opts)
  local first, kept_count, kept = self:ordered(opts)
  local shown_count = math.min(#first, opts.top or #first)
  local shown, is_shown = {}, {}
  for i = 1, shown_count do
    shown[i] = self:row(first[i])
    is_shown[first[i]] = true
  end
  local columns = self.columns
  local rest = { rows = kept_count - shown_count }
  for _, field in ipairs(opts.sums or {}) do
    local values, sum = columns[field], 0
    for _, group in ipairs(kept) do
      if not is_shown[group] then
        sum = sum + values[group[ID]]
      end
    end
    rest[field] = sum
  end
  return shown, rest
end

-- The rows of a pass -------------------------------------------------------

-- The group of a key of the sites or heap passes: a group already, or a
-- site (rows by line).
local function group_of(grouper, key)
  if key.mode then
    return key
  end
  return grouper:key(key)
end
M.group_of = group_of

-- The highest group id of a pass's keys (rows by line get their groups
-- here: the passes keep sites), or nil when the keys' rows are too few
-- for columns of that size (a section of a few rows in a profile of
-- many places: its columns stay small tables).
local function dense_size(grouper, keys)
  -- The groups made here all stay: the collector, paused meanwhile,
  -- would only mark the rest of the analysis again and again.
  local running = collectgarbage('isrunning') == true
  if running then
    collectgarbage('stop')
  end
  local last = 0
  for _, key in ipairs(keys) do
    local id = group_of(grouper, key)[ID]
    if id > last then
      last = id
    end
  end
  if running then
    collectgarbage('restart')
  end
  return 2 * #keys >= last and last or nil
end

function M.of_pass(grouper, keys, values, fields, Row)
  local size = dense_size(grouper, keys)
  local set = M.new(Row or record.shape(fields), fields, size)
  local columns, first, more = set.columns, size and array(size) or {}, {}
  set.first, set.more = first, more
  for slot, key in ipairs(keys) do
    local group = group_of(grouper, key)
    local id = group[ID]
    if first[id] == nil then
      set:add(group)
      first[id] = slot
    else
      local list = more[id]
      if not list then
        list = {}
        more[id] = list
      end
      list[#list + 1] = slot
    end
    for _, field in ipairs(fields) do
      local column = columns[field]
      column[id] = column[id] + values[field][slot]
    end
  end
  return set
end

function Set:sum_pass(grouper, keys, values, sums)
  local columns = self.columns
  for _, sum in ipairs(sums) do
    if not columns[sum[1]] then
      local column = {}
      for _, group in ipairs(self.groups) do
        column[group[ID]] = false
      end
      columns[sum[1]] = column
    end
  end
  for slot, key in ipairs(keys) do
    local id = group_of(grouper, key)[ID]
    if columns[self.figures[1]][id] == nil then
      error('memprof.analysis.rows: no row for ' .. group_of(grouper,
        key).name, 2)
    end
    for _, sum in ipairs(sums) do
      local column = columns[sum[1]]
      column[id] = (column[id] or 0) + values[sum[2]][slot]
    end
  end
  return self
end

function Set:slots(group)
  local id = group[ID]
  local slots = { self.first[id] }
  for k, slot in ipairs(self.more[id] or {}) do
    slots[k + 1] = slot
  end
  return slots
end

-- The rows of the whole analysis -------------------------------------------
--
-- rows.figures(result) (result: memprof.analysis.analyze.run()) -> a set
-- of every group the sites and heap passes have figures for, in order of
-- their ids, with the columns:
--   allocated_events, allocated_bytes   events that produced a block
--                    (alloc, realloc), their bytes
--   live_bytes       what the row's blocks hold at the end: bytes it
--                    produced minus those of its blocks later released
--                    (0 for the blocks allocated before the profile)
--   live_blocks      its blocks still live
-- No figure is negative.

M.FIGURES = { 'allocated_events', 'allocated_bytes', 'live_bytes',
  'live_blocks' }
local Figures = record.shape({ 'group', 'allocated_events', 'allocated_bytes',
  'live_bytes', 'live_blocks' })

-- The ids of the groups of the sites' and heap's keys.
local function ids_with_figures(result)
  local grouper, seen = result.grouper, {}
  for _, kind in ipairs({ 'alloc', 'realloc', 'free' }) do
    for _, key in ipairs(result.sites.of_kind[kind].keys) do
      seen[group_of(grouper, key)[ID]] = true
    end
  end
  for _, key in ipairs(result.heap.keys) do
    seen[group_of(grouper, key)[ID]] = true
  end
  return seen
end

-- The heap's figures: live bytes and blocks.
local function add_heap(set, grouper, heap)
  local live_bytes, live_blocks = set.columns.live_bytes,
    set.columns.live_blocks
  local holds, allocs, frees = heap.holds, heap.allocs, heap.frees
  for from, key in ipairs(heap.keys) do
    local group = group_of(grouper, key)
    if group.source ~= 'before' then
      local id = group[ID]
      live_bytes[id] = live_bytes[id] + holds[from]
      live_blocks[id] = live_blocks[id] + allocs[from] - frees[from]
    end
  end
end

function M.figures(result)
  local grouper, sites = result.grouper, result.sites
  local seen = ids_with_figures(result)
  local set = M.new(Figures, M.FIGURES, #grouper.list)
  for _, group in ipairs(grouper.list) do
    if seen[group[ID]] then
      set:add(group)
    end
  end
  local columns = set.columns
  for _, kind in ipairs({ 'alloc', 'realloc' }) do
    local of_kind = sites.of_kind[kind]
    for slot, key in ipairs(of_kind.keys) do
      local id = group_of(grouper, key)[ID]
      columns.allocated_events[id] = columns.allocated_events[id] +
        of_kind.count[slot]
      columns.allocated_bytes[id] = columns.allocated_bytes[id] +
        of_kind.plus[slot]
    end
  end
  add_heap(set, grouper, result.heap)
  return set
end

return M
