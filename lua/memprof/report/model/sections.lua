-- memprof.report.model.sections: the default sections, decided once for
-- every format: the rows of ALLOCATIONS, REALLOCATIONS and DEALLOCATIONS
-- and of the HEAP SUMMARY, their order, the rows shown and the rest, the
-- overrides of each row, the share of compiled code.  The text report
-- lays out events() and heap(), the JSON document lists every row
-- (event_listing, heap_listing), the HTML page sums alloc and realloc
-- (allocated).
--
--   local model = sections_model.new(result, opts)
--     result  from memprof.analysis.analyze.run()
--     opts    sort: 'bytes' (default) or 'count'; top: rows shown per
--               section, and names per list of overrides; left_out: a
--               table whose field rows grows by the rows top leaves
--               out; focus, ignore: what the analysis kept
--   model:events(kind)   kind: 'alloc', 'realloc' or 'free' -> {
--     title      'ALLOCATIONS', 'REALLOCATIONS', 'DEALLOCATIONS'
--     by         the figure the rows are sorted by: 'plus', 'minus'
--                (bytes) or 'count' (events, with sort = 'count')
--     bytes      the figure of the section's bytes: 'plus' or 'minus'
--     compiled   the whole percentage of the section's bytes that
--                compiled code allocated, or nil when the report cannot
--                say (compiled_of below)
--     shown      the rows shown: records of name, first (key), frames,
--                more (the other keys, or false), slots, count, plus,
--                minus
--     details    by row shown: { sites = its keys, overrides = the names
--                of the rows whose blocks its events released, sorted
--                and at most top, overrides_more = how many more,
--                override_sites = a set of name -> a key of that row,
--                compiled = the whole percentage of its bytes allocated
--                (plus) by compiled code, or nil }
--     rest       { count = rows not shown, sums = { count, plus, minus } }
--     shown_bytes, total   the section's bytes in the rows shown, in all
--   }
--   model:heap() -> {
--     by_blocks  true when sorted by live blocks (sort = 'count'), else
--                by bytes held
--     shown      rows with holds other than 0: records of name, first,
--                frames, more, slots, holds, allocs, reallocs, frees
--     rest       { count, sums = { holds, allocs, reallocs, frees } }
--     shown_bytes  the holds of the rows shown
--     before     the row of the blocks allocated before the profile, or
--                nil: it holds nothing, and is apart from the others
--     total      the net bytes of the stream
--   }
--   model:event_listing(kind) -> every row of a section with events, by
--     its bytes: { set = the rows (memprof.analysis.rows) with columns
--     count, plus, minus; ids = the ids of the rows' groups, in order }
--   model:heap_listing() -> every row of the heap that allocated or whose
--     blocks were released, by live bytes: columns holds, allocs,
--     reallocs, frees and allocated_bytes (false: nothing allocated);
--     listing.before, the id of the row of the blocks allocated before
--     the profile
--   model:group(id)   the group of a row (its id, its name)
--   model:overrides(kind, listing, id) -> { groups, blocks } of the rows
--     whose blocks the row's events released, the most blocks first, then
--     by name; nil for none
--   model:allocated() -> shown, rest: alloc and realloc together, records
--     of group, bytes, count sorted by bytes (count with sort = 'count'),
--     at most top; rest = { rows, bytes, count }
--
-- The rows are those of memprof.analysis.rows, one per group of the
-- analysis' grouping: sites with the same name (a function reloaded at
-- another address, say) are one row.  Only the rows shown are made
-- records.

local record = require('memprof.record')
local layout = require('memprof.report.layout')
local rows = require('memprof.analysis.rows')

local group_of = rows.group_of
local ID = require('memprof.analysis.groups').ID

local M = {}

-- The summed figures of the rows of each kind, after name, first,
-- frames, more and slots.
local EVENT_FIELDS = { 'count', 'plus', 'minus' }
local HEAP_FIELDS = { 'holds', 'allocs', 'reallocs', 'frees' }

local function row_shape(fields)
  local names = { 'name', 'first', 'frames', 'more', 'slots' }
  for _, field in ipairs(fields) do
    names[#names + 1] = field
  end
  return record.shape(names)
end

local EventRow, HeapRow = row_shape(EVENT_FIELDS), row_shape(HEAP_FIELDS)

-- A row of a pass's set as the record of `shape`: the name, the first
-- key (a site or a group), its frames, the other keys (or false), the
-- slots, the figures.
local function pass_row(self, group)
  local id, keys = group[ID], self.keys
  local first = keys[self.first[id]]
  local more = false
  if self.more[id] then
    more = {}
    for k, slot in ipairs(self.more[id]) do
      more[k] = keys[slot]
    end
  end
  local row = self.shape.make({ first.name, first, first.frames, more,
    self:slots(group), 0, 0, 0, 0 })
  for _, field in ipairs(self.figures) do
    row[field] = self.columns[field][id]
  end
  return row
end

-- The rows of a pass (memprof.analysis.rows), made records by pass_row.
local function pass_rows(grouper, keys, values, fields, shape)
  local set = rows.of_pass(grouper, keys, values, fields, shape)
  set.keys, set.row = keys, pass_row
  return set
end

-- The rows shown (records, at most opts.top) and the rest: how many,
-- and the sums of `fields` over them.
local function split_rows(set, order, fields, opts)
  local shown, rest = set:top({ by = order.by, keep = order.keep,
    top = opts.top, sums = fields })
  local sums = {}
  for _, field in ipairs(fields) do
    sums[field] = rest[field]
  end
  if rest.rows > 0 and opts.left_out then
    opts.left_out.rows = opts.left_out.rows + rest.rows
  end
  return shown, { count = rest.rows, sums = sums }
end

-- The keys of a row, in order.
local function keys_of(row)
  local list = { row.first }
  for _, more in ipairs(row.more or {}) do
    list[#list + 1] = more
  end
  return list
end

-- A whole percentage of `part` in `whole`.
local function percent(part, whole)
  return math.floor(100 * part / whole + 0.5)
end

-- The bytes compiled code allocated in a section's rows, or nil when
-- the report cannot say: no such events, rows not by line, a sample
-- (its sizes are not the estimates), a filter (which the reader's counts
-- do not follow).  { total, of(row) }.
local function compiled_of(result, kind, opts)
  local stream = result.stream
  local by_site = stream.compiled and stream.compiled[kind]
  if not by_site or stream.compiled_bytes == 0 or stream.sample_bytes or
      (result.grouper and result.grouper.mode ~= 'line') or opts.focus or
      opts.ignore then
    return nil
  end
  local total = 0
  for _, bytes in pairs(by_site) do
    total = total + bytes
  end
  return { total = total, of = function(row)
    local sum = 0
    for _, site in ipairs(keys_of(row)) do
      sum = sum + (by_site[site] or 0)
    end
    return sum
  end }
end

-- The share of a row's bytes by compiled code: nil when none.
local function compiled_share(compiled, row, bytes)
  local part = compiled and compiled.of(row) or 0
  if part == 0 or bytes == 0 then
    return nil
  end
  return percent(part, bytes)
end

-- The rows whose blocks the events of `slots` released (overrides_at(slot)
-- -> owners, their blocks by owner): their groups in order of first
-- appearance, and the blocks of each, by group.
local function overrides(grouper, slots, overrides_at)
  local list, blocks = {}, {}
  for _, slot in ipairs(slots) do
    local owners, owner_blocks = overrides_at(slot)
    for _, owner in ipairs(owners or {}) do
      local group = group_of(grouper, owner)
      if not blocks[group] then
        list[#list + 1], blocks[group] = group, 0
      end
      blocks[group] = blocks[group] + owner_blocks[owner]
    end
  end
  return list, blocks
end

-- The details of a row shown (see above): overrides_at(slot) lists the
-- sites whose blocks the events of the key in that slot released.
local function details_of(row, overrides_at, opts, compiled)
  -- The names of the rows of the owners (a key is named as its row),
  -- sorted as strings: the collector's row may list every other row.
  local names, override_sites = {}, {}
  for _, slot in ipairs(row.slots) do
    for _, owner in ipairs(overrides_at(slot) or {}) do
      local name = owner.name
      if not override_sites[name] then
        names[#names + 1], override_sites[name] = name, owner
      end
    end
  end
  table.sort(names)
  local shown, rest = layout.split_top(names, opts.top, opts.left_out)
  return { sites = keys_of(row), overrides = shown,
    overrides_more = #rest, override_sites = override_sites,
    compiled = compiled_share(compiled, row, row.plus) }
end

local SECTIONS = {
  alloc = { title = 'ALLOCATIONS', bytes = 'plus' },
  realloc = { title = 'REALLOCATIONS', bytes = 'plus' },
  free = { title = 'DEALLOCATIONS', bytes = 'minus' },
}
M.KINDS = { 'alloc', 'realloc', 'free' }

local Model = {}
Model.__index = Model

function M.new(result, opts)
  return setmetatable({ result = result, opts = opts or {} }, Model)
end

-- The rows of a section of events.
local function event_rows(self, kind)
  local figures = self.result.sites.of_kind[kind]
  return pass_rows(self.result.grouper, figures.keys, figures, EVENT_FIELDS,
    EventRow)
end

function Model:events(kind)
  local result, opts = self.result, self.opts
  local spec = SECTIONS[kind]
  local bytes = spec.bytes
  local by = opts.sort == 'count' and 'count' or bytes
  local set = event_rows(self, kind)
  local shown, rest = split_rows(set, { by = by }, EVENT_FIELDS, opts)
  local compiled = compiled_of(result, kind, opts)
  local sites = result.sites
  local function overrides_at(slot)
    return sites:overrides_at(kind, slot)
  end
  local details = {}
  for i, row in ipairs(shown) do
    details[i] = details_of(row, overrides_at, opts, compiled)
  end
  local shown_bytes = layout.sum_of(shown, bytes)
  local total = shown_bytes + rest.sums[bytes]
  local section = { title = spec.title, by = by, bytes = bytes,
    shown = shown, details = details, rest = rest,
    shown_bytes = shown_bytes, total = total }
  if compiled and compiled.total > 0 and total > 0 then
    section.compiled = percent(compiled.total, total)
  end
  return section
end

-- A column of values by group id, for the rows of a set.
local function derived(set, value)
  local column = {}
  for _, group in ipairs(set.groups) do
    local id = group[ID]
    column[id] = value(id)
  end
  return column
end

function Model:heap()
  local result, opts = self.result, self.opts
  local heap = result.heap
  local by_blocks = opts.sort == 'count'
  local set = pass_rows(result.grouper, heap.keys, heap, HEAP_FIELDS,
    HeapRow)
  local before = nil
  local c = set.columns
  local holds, allocs, frees = c.holds, c.allocs, c.frees
  local by = 'holds'
  if by_blocks then
    by = derived(set, function(id)
      return allocs[id] - frees[id]
    end)
  end
  local shown, rest = split_rows(set, { by = by, keep = function(group)
    if group.source == 'before' then
      before = set:row(group)
      return false
    end
    return holds[group[ID]] ~= 0
  end }, HEAP_FIELDS, opts)
  return { by_blocks = by_blocks, shown = shown, rest = rest,
    shown_bytes = layout.sum_of(shown, 'holds'), before = before,
    total = heap.total }
end

-- The listings: every row of a section in columns, for the formats that
-- list them all (JSON) or sum them otherwise (HTML).  Each is
-- { set = the rows (memprof.analysis.rows), ids = the ids of the rows
-- listed, in order }, and model:group(id) is the group of a row,
-- model:overrides(kind, listing, id) the rows whose blocks its events
-- released.

-- The ids of a list of groups.
local function ids_of(list)
  local ids = {}
  for i, group in ipairs(list) do
    ids[i] = group[ID]
  end
  return ids
end

-- Every row of a section of events with events, by its bytes.
function Model:event_listing(kind)
  local set = event_rows(self, kind)
  return { set = set, ids = ids_of((set:ordered({
    by = SECTIONS[kind].bytes, keep = 'count' }))) }
end

function Model:group(id)
  return self.result.grouper.list[id]
end

-- { groups, blocks } by position, the most blocks first, then by name;
-- nil for a row without any.
function Model:overrides(kind, listing, id)
  local sites = self.result.sites
  local list, blocks = overrides(self.result.grouper,
    listing.set:slots(self:group(id)), function(slot)
      return sites:overrides_at(kind, slot)
    end)
  if #list == 0 then
    return nil
  end
  -- Sorted by name as strings (the collector's row may list every other
  -- row), the blocks of each by name.
  local names, group_named, blocks_of = {}, {}, {}
  for k, group in ipairs(list) do
    local name = group.name
    names[k], group_named[name], blocks_of[name] = name, group, blocks[group]
  end
  table.sort(names, function(a, b)
    if blocks_of[a] ~= blocks_of[b] then
      return blocks_of[a] > blocks_of[b]
    end
    return a < b
  end)
  local groups, counts = {}, {}
  for k, name in ipairs(names) do
    groups[k], counts[k] = group_named[name], blocks_of[name]
  end
  return { groups = groups, blocks = counts }
end

-- The heap's rows with what they allocated (alloc and realloc):
-- allocated_bytes, false for a row that allocated nothing.
local function allocated_rows(self, fields)
  local result = self.result
  local grouper = result.grouper
  local set = pass_rows(grouper, result.heap.keys, result.heap, fields,
    row_shape(fields))
  for _, kind in ipairs({ 'alloc', 'realloc' }) do
    local figures = result.sites.of_kind[kind]
    set:sum_pass(grouper, figures.keys, figures,
      { { 'allocated_bytes', 'plus' } })
  end
  return set
end

-- Every row of the heap that allocated or whose blocks were released,
-- by live bytes; its figures: holds (the row of the blocks allocated
-- before the profile, listing.before, holds none: its holds are minus
-- the bytes released), allocs, reallocs, frees, allocated_bytes.
function Model:heap_listing()
  local set = allocated_rows(self, HEAP_FIELDS)
  local c = set.columns
  local holds, allocs, frees = c.holds, c.allocs, c.frees
  local before = nil
  for _, group in ipairs(set.groups) do
    if group.source == 'before' then
      before = group[ID]
    end
  end
  local order = set:ordered({ keep = function(group)
    local id = group[ID]
    return allocs[id] > 0 or frees[id] > 0
  end, by = derived(set, function(id)
    return id == before and 0 or holds[id]
  end) })
  return { set = set, ids = ids_of(order), before = before }
end

-- The rows that allocated (alloc and realloc together): the rows shown,
-- records of group, bytes (allocated) and count (events), sorted by
-- bytes (count with sort = 'count') and at most opts.top; the rest
-- { rows = how many, bytes, count = their sums }.
local AllocatedRow = record.shape({ 'group', 'bytes', 'count' })

function Model:allocated()
  local opts = self.opts
  local set = allocated_rows(self, { 'allocs' })
  local bytes, count = set.columns.allocated_bytes, set.columns.allocs
  set.row = function(_, group)
    local id = group[ID]
    return AllocatedRow.make({ group, bytes[id], count[id] })
  end
  local shown, rest = set:top({ keep = function(group)
    return bytes[group[ID]] ~= false
  end, by = opts.sort == 'count' and count or bytes, top = opts.top,
    sums = { 'allocated_bytes', 'allocs' } })
  return shown, { rows = rest.rows, bytes = rest.allocated_bytes,
    count = rest.allocs }
end

M.keys_of = keys_of

return M
