-- memprof.report.rows: the figures of each row of an analysis, with the
-- sites and heap passes merged into the rows of the analysis' grouping.
--
--   local rows = require('memprof.report.rows')
--   local list = rows.collect(result)   -- result of memprof.analyze.run
--
-- The sites and heap passes keep one record per site when the rows are
-- lines (two sites with one name, a function loaded twice, are one
-- row), and one per group otherwise; here every record is counted in
-- its group (result.grouper), so each row appears once.  The list is
-- in order of the groups' ids; each row:
--   group            the memprof.groups group
--   name             its name
--   alloc_events, alloc_bytes          allocation events, bytes allocated
--   realloc_events, realloc_bytes      reallocations, their new bytes
--   realloc_old_bytes                  the bytes they released
--   free_events, freed_bytes           deallocations at this row
--   allocated_events = alloc_events + realloc_events (events that
--                      produced a block), allocated_bytes = alloc_bytes +
--                      realloc_bytes
--   live_bytes       what the row's blocks hold at the end: bytes it
--                    produced minus those of its blocks later released
--   live_blocks      its blocks still live (allocated_events minus
--                    released blocks)
--   released_blocks  its blocks freed or reallocated away (anywhere)
--   released_bytes   their bytes
--   before           true for the row of the blocks allocated before the
--                    profile: it produced nothing, so it holds nothing
--                    (live 0) and only has released blocks and bytes
-- No figure is negative.
--   overrides        per kind ('realloc', 'free'): { { group =, blocks = },
--                    ... } the rows whose blocks the events released (the
--                    rows without any share one table of empty lists:
--                    never modify it); rows.collect(result, { overrides =
--                    false }) leaves them out
-- A row is a memprof.record (its fields by position: a large profile has
-- a row per place); rows.Row is its shape.
--
--   rows.figures(result) -> the figures that folded and pprof need, in
--                           columns: { list = the groups (the rows of
--                           collect(), in its order), and arrays indexed
--                           by group id: allocated_events,
--                           allocated_bytes, live_bytes, live_blocks }
--   (the same numbers as collect() gives, summed in the same order,
--   without a record per row)

local record = require('memprof.record')

local M = {}

local FIELDS = { 'alloc_events', 'alloc_bytes', 'realloc_events',
  'realloc_bytes', 'realloc_old_bytes', 'free_events', 'freed_bytes',
  'allocated_events', 'allocated_bytes', 'live_bytes', 'live_blocks',
  'released_blocks', 'released_bytes' }
M.FIELDS = FIELDS

local ROW_FIELDS = {}
for i, field in ipairs(FIELDS) do
  ROW_FIELDS[i] = field
end
for _, field in ipairs({ 'group', 'name', 'overrides', 'override_at',
  'before' }) do
  ROW_FIELDS[#ROW_FIELDS + 1] = field
end
local Row = record.shape(ROW_FIELDS)
M.Row = Row
-- An entry of a row's overrides.
local Override = record.shape({ 'group', 'blocks' })
M.Override = Override
local BLOCKS = Override.index.blocks

-- The group of a key of the sites or heap passes: a group already, or a
-- site (rows by line).
function M.group_of(grouper, key)
  if key.mode then
    return key
  end
  return grouper:key(key)
end

-- The overrides of the rows that have none.
local NO_OVERRIDES = { realloc = {}, free = {} }

-- A row of zeros (the 13 FIELDS), then group, name, overrides,
-- override_at and before.
local function new_row(group)
  return Row.make({ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, group,
    group.name, NO_OVERRIDES, false, nil })
end
assert(#FIELDS == 13 and Row.index.before == 18)

local Collector = {}
Collector.__index = Collector

function Collector:row(key)
  local group = M.group_of(self.grouper, key)
  local row = self.by_group[group.id]
  if not row then
    row = new_row(group)
    self.by_group[group.id] = row
  end
  return row
end

function Collector:add_overrides(row, kind, record)
  if #record.overrides == 0 then
    return
  end
  if not row.override_at then
    row.overrides = { realloc = {}, free = {} }
    row.override_at = { realloc = {}, free = {} }
  end
  local at = row.override_at[kind]
  local list = row.overrides[kind]
  for _, owner in ipairs(record.overrides) do
    local group = M.group_of(self.grouper, owner)
    local entry = at[group]
    if not entry then
      entry = Override.make({ group, 0 })
      at[group] = entry
      list[#list + 1] = entry
    end
    entry[BLOCKS] = entry[BLOCKS] + record.override_count[owner]
  end
end

local EVENT_FIELDS = {
  alloc = { 'alloc_events', 'alloc_bytes' },
  realloc = { 'realloc_events', 'realloc_bytes', 'realloc_old_bytes' },
  free = { 'free_events', nil, 'freed_bytes' },
}

function Collector:add_events(kind, records)
  local fields = EVENT_FIELDS[kind]
  for _, record in ipairs(records) do
    local row = self:row(record.site)
    row[fields[1]] = row[fields[1]] + record.count
    if fields[2] then
      row[fields[2]] = row[fields[2]] + record.plus
    end
    if fields[3] then
      row[fields[3]] = row[fields[3]] + record.minus
    end
    if kind ~= 'alloc' and self.overrides then
      self:add_overrides(row, kind, record)
    end
  end
end

function Collector:add_heap(stats_list)
  for _, stats in ipairs(stats_list) do
    local row = self:row(stats.site)
    if row.group.source == 'before' then
      row.before = true
      row.released_bytes = row.released_bytes - stats.holds
    else
      row.live_bytes = row.live_bytes + stats.holds
      row.live_blocks = row.live_blocks + stats.allocs - stats.frees
    end
    row.released_blocks = row.released_blocks + stats.frees
  end
end

-- opts.overrides = false: leave out the overrides (every row has the
-- shared empty lists), for the reports that do not show them.
function M.collect(result, opts)
  local self = setmetatable({ grouper = result.grouper, by_group = {},
    overrides = not (opts and opts.overrides == false) }, Collector)
  for _, kind in ipairs({ 'alloc', 'realloc', 'free' }) do
    self:add_events(kind, result.sites.kinds[kind])
  end
  self:add_heap(result.heap.sites)
  local list = {}
  for _, group in ipairs(result.grouper.list) do
    local row = self.by_group[group.id]
    if row then
      row.allocated_events = row.alloc_events + row.realloc_events
      row.allocated_bytes = row.alloc_bytes + row.realloc_bytes
      if not row.before then
        row.released_bytes = row.allocated_bytes - row.live_bytes
      end
      row.override_at = nil
      list[#list + 1] = row
    end
  end
  return list
end

-- An array of zeros by group id, for the ids of `list`.
local function zeros(list)
  local column = {}
  for _, group in ipairs(list) do
    column[group.id] = 0
  end
  return column
end

-- Sums records[i][from] into column[group id], for the sites pass'
-- records of one kind.
local function sum_into(column, grouper, records, from)
  for _, item in ipairs(records) do
    local id = M.group_of(grouper, item.site).id
    column[id] = column[id] + item[from]
  end
end

function M.figures(result)
  local grouper = result.grouper
  local seen, list = {}, {}
  local function note(key)
    seen[M.group_of(grouper, key).id] = true
  end
  for _, kind in ipairs({ 'alloc', 'realloc', 'free' }) do
    for _, item in ipairs(result.sites.kinds[kind]) do
      note(item.site)
    end
  end
  for _, stats in ipairs(result.heap.sites) do
    note(stats.site)
  end
  for _, group in ipairs(grouper.list) do
    if seen[group.id] then
      list[#list + 1] = group
    end
  end
  seen = nil
  local kinds = result.sites.kinds
  local alloc_events, alloc_bytes = zeros(list), zeros(list)
  local realloc_events, realloc_bytes = zeros(list), zeros(list)
  sum_into(alloc_events, grouper, kinds.alloc, 'count')
  sum_into(alloc_bytes, grouper, kinds.alloc, 'plus')
  sum_into(realloc_events, grouper, kinds.realloc, 'count')
  sum_into(realloc_bytes, grouper, kinds.realloc, 'plus')
  local live_bytes, live_blocks = zeros(list), zeros(list)
  for _, stats in ipairs(result.heap.sites) do
    local group = M.group_of(grouper, stats.site)
    if group.source ~= 'before' then
      local id = group.id
      live_bytes[id] = live_bytes[id] + stats.holds
      live_blocks[id] = live_blocks[id] + stats.allocs - stats.frees
    end
  end
  -- allocated = alloc + realloc, as collect() adds them.
  for _, group in ipairs(list) do
    local id = group.id
    alloc_events[id] = alloc_events[id] + realloc_events[id]
    alloc_bytes[id] = alloc_bytes[id] + realloc_bytes[id]
  end
  return { list = list, allocated_events = alloc_events,
    allocated_bytes = alloc_bytes, live_bytes = live_bytes,
    live_blocks = live_blocks }
end

-- The sums of the numeric fields over rows.
function M.totals(list)
  local totals = {}
  for _, field in ipairs(FIELDS) do
    totals[field] = 0
  end
  for _, row in ipairs(list) do
    for _, field in ipairs(FIELDS) do
      totals[field] = totals[field] + row[field]
    end
  end
  return totals
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

return M
