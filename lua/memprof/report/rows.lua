-- memprof.report.rows: the figures of each row of an analysis, with the
-- sites and heap passes merged into the rows of the analysis' grouping,
-- in columns by group id (a large profile has a row per place: a column
-- takes 8 bytes a row, a record per row many times that).
--
--   local rows = require('memprof.report.rows')
--   local figures = rows.figures(result [, opts])  -- memprof.analysis.analyze.run
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
--     live_blocks      its blocks still live
--   and with opts.all, every field of rows.FIELDS:
--     alloc_events, alloc_bytes          allocation events, bytes allocated
--     realloc_events, realloc_bytes      reallocations, their new bytes
--     realloc_old_bytes                  the bytes they released
--     free_events, freed_bytes           deallocations at this row
--     released_blocks  its blocks freed or reallocated away (anywhere)
--     released_bytes   their bytes
--   figures.before   the id of the row of the blocks allocated before the
--                    profile, or nil: it produced nothing, so it holds
--                    nothing (live 0) and only has released blocks and
--                    bytes
-- No figure is negative.
--   figures.overrides  with opts.overrides (and opts.all): per kind
--                    ('realloc', 'free'), by group id, the rows whose
--                    blocks the row's events released, in order of first
--                    appearance: { groups = { group, ... }, blocks = {
--                    blocks of each } } (nil for a row without any)

local record_array = require('memprof.record').array

local M = {}

local FIELDS = { 'alloc_events', 'alloc_bytes', 'realloc_events',
  'realloc_bytes', 'realloc_old_bytes', 'free_events', 'freed_bytes',
  'allocated_events', 'allocated_bytes', 'live_bytes', 'live_blocks',
  'released_blocks', 'released_bytes' }
M.FIELDS = FIELDS

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

-- The overrides of one kind by group id (see above).
local function overrides_of(grouper, sites, kind)
  local by_id = {}
  for slot, key in ipairs(sites.of_kind[kind].keys) do
    local owners, owner_blocks = sites:overrides_at(kind, slot)
    if owners then
      local id = M.group_of(grouper, key).id
      local entry = by_id[id]
      if not entry then
        entry = { groups = {}, blocks = {}, at = {} }
        by_id[id] = entry
      end
      local groups, blocks, at = entry.groups, entry.blocks, entry.at
      for _, owner in ipairs(owners) do
        local group = M.group_of(grouper, owner)
        local i = at[group]
        if not i then
          i = #groups + 1
          groups[i], blocks[i], at[group] = group, 0, i
        end
        blocks[i] = blocks[i] + owner_blocks[owner]
      end
    end
  end
  for _, entry in pairs(by_id) do
    entry.at = nil
  end
  return by_id
end

-- The heap's figures: live bytes and blocks, and with `all` the
-- released blocks and the id of the row before the profile.
local function add_heap(figures, grouper, heap, all)
  local live_bytes, live_blocks = figures.live_bytes, figures.live_blocks
  local released_blocks = figures.released_blocks
  local released_bytes = figures.released_bytes
  local holds, allocs, frees = heap.holds, heap.allocs, heap.frees
  for from, key in ipairs(heap.keys) do
    local group = M.group_of(grouper, key)
    local id = group.id
    if group.source == 'before' then
      figures.before = id
      if all then
        released_bytes[id] = released_bytes[id] - holds[from]
      end
    else
      live_bytes[id] = live_bytes[id] + holds[from]
      live_blocks[id] = live_blocks[id] + allocs[from] - frees[from]
    end
    if all then
      released_blocks[id] = released_blocks[id] + frees[from]
    end
  end
end

-- The columns that add others up: allocated = alloc + realloc, and
-- released bytes = allocated - live (but for the row before the
-- profile).  Without `all`, the alloc columns become the allocated ones.
local function add_totals(figures, all)
  local alloc_events, alloc_bytes = figures.alloc_events, figures.alloc_bytes
  local realloc_events = figures.realloc_events
  local realloc_bytes = figures.realloc_bytes
  local events, bytes = alloc_events, alloc_bytes
  if all then
    events, bytes = zeros(figures.list), zeros(figures.list)
  end
  for _, group in ipairs(figures.list) do
    local id = group.id
    events[id] = alloc_events[id] + realloc_events[id]
    bytes[id] = alloc_bytes[id] + realloc_bytes[id]
  end
  figures.allocated_events, figures.allocated_bytes = events, bytes
  if not all then
    figures.alloc_events, figures.alloc_bytes = nil, nil
    figures.realloc_events, figures.realloc_bytes = nil, nil
    return
  end
  local live, released = figures.live_bytes, figures.released_bytes
  for _, group in ipairs(figures.list) do
    local id = group.id
    if id ~= figures.before then
      released[id] = bytes[id] - live[id]
    end
  end
end

-- The columns summed from the sites pass, by kind: { column, field of
-- the record }; with `all` the whole list, else the first four.
local SITE_SUMS = {
  { 'alloc_events', 'alloc', 'count' }, { 'alloc_bytes', 'alloc', 'plus' },
  { 'realloc_events', 'realloc', 'count' },
  { 'realloc_bytes', 'realloc', 'plus' },
  { 'realloc_old_bytes', 'realloc', 'minus' },
  { 'free_events', 'free', 'count' }, { 'freed_bytes', 'free', 'minus' },
}

function M.figures(result, opts)
  local all = opts and opts.all
  local grouper, sites = result.grouper, result.sites
  local list = groups_with_figures(result)
  local figures = { list = list }
  for i, sum in ipairs(SITE_SUMS) do
    if all or i <= 4 then
      local column, kind = zeros(list), sum[2]
      local of_kind = sites.of_kind[kind]
      sum_into(column, grouper, of_kind.keys, of_kind[sum[3]])
      figures[sum[1]] = column
    end
  end
  figures.live_bytes, figures.live_blocks = zeros(list), zeros(list)
  if all then
    figures.released_blocks, figures.released_bytes = zeros(list),
      zeros(list)
  end
  add_heap(figures, grouper, result.heap, all)
  add_totals(figures, all)
  if all and opts.overrides then
    figures.overrides = { realloc = overrides_of(grouper, sites, 'realloc'),
      free = overrides_of(grouper, sites, 'free') }
  end
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
