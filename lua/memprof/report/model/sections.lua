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
--               out; key: function(site) -> row name (default
--               site.name); focus, ignore: what the analysis kept
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
--     its bytes: { rows = columns (memprof.report.model.named_rows) of
--     count, plus, minus; numbers = the rows, in order }
--   model:heap_listing() -> every row of the heap that allocated or whose
--     blocks were released, by live bytes: columns of holds, allocs,
--     reallocs, frees and allocated_bytes (false: nothing allocated);
--     rows.before, the row of the blocks allocated before the profile
--   model:group(listing, i)   the group of row i (its id, its name)
--   model:overrides(kind, listing, i) -> { groups, blocks } of the rows
--     whose blocks row i's events released, the most blocks first, then
--     by name; nil for none
--   model:allocated() -> shown, rest: alloc and realloc together, records
--     of group, bytes, count sorted by bytes (count with sort = 'count'),
--     at most top; rest = { rows, bytes, count }
--
-- Rows are grouped by name: sites with the same name (a function
-- reloaded at another address, say) are one row.  They are kept in
-- columns (an array per figure, by row number): a large profile has a
-- row per place, and only the rows shown are made records.

local record = require('memprof.record')
local layout = require('memprof.report.layout')
local named_rows = require('memprof.report.model.named_rows')
local group_of = require('memprof.report.rows').group_of

local M = {}

local function site_name(site)
  return site.name
end

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

-- The rows shown (records, at most opts.top) and the rest: how many,
-- and the sums of `fields` over them.
local function split_rows(rows, numbers, fields, shape, opts)
  local top = opts.top
  local shown_count = #numbers
  if top and top < shown_count then
    shown_count = top
  end
  local shown = {}
  for k = 1, shown_count do
    shown[k] = named_rows.record(rows, numbers[k], fields, shape)
  end
  local rest = { count = #numbers - shown_count, sums = {} }
  for _, field in ipairs(fields) do
    local sum, column = 0, rows[field]
    for k = shown_count + 1, #numbers do
      sum = sum + column[numbers[k]]
    end
    rest.sums[field] = sum
  end
  if rest.count > 0 and opts.left_out then
    opts.left_out.rows = opts.left_out.rows + rest.count
  end
  return shown, rest
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

-- The details of a row shown (see above): overrides_at(slot) lists the
-- sites whose blocks the events of the key in that slot released.
local function details_of(row, key, overrides_at, opts, compiled)
  local names, override_sites = named_rows.overrides(row.slots,
    overrides_at, key)
  table.sort(names)
  local overrides, rest = layout.split_top(names, opts.top, opts.left_out)
  return { sites = keys_of(row), overrides = overrides,
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
  opts = opts or {}
  return setmetatable({ result = result, opts = opts,
    key = opts.key or site_name }, Model)
end

local function keep_all()
  return true
end

-- The rows of a section of events, every one, and their numbers sorted
-- by `by` (a field of EVENT_FIELDS).
local function event_rows(self, kind, by)
  local figures = self.result.sites.of_kind[kind]
  local rows = named_rows.group(figures.keys, figures, self.key,
    EVENT_FIELDS)
  local column = rows[by]
  return rows, named_rows.sorted(rows, keep_all, function(i)
    return column[i]
  end)
end

function Model:events(kind)
  local result, opts, key = self.result, self.opts, self.key
  local spec = SECTIONS[kind]
  local bytes = spec.bytes
  local by = opts.sort == 'count' and 'count' or bytes
  local rows, numbers = event_rows(self, kind, by)
  local shown, rest = split_rows(rows, numbers, EVENT_FIELDS, EventRow, opts)
  local compiled = compiled_of(result, kind, opts)
  local sites = result.sites
  local function overrides_at(slot)
    return sites:overrides_at(kind, slot)
  end
  local details = {}
  for i, row in ipairs(shown) do
    details[i] = details_of(row, key, overrides_at, opts, compiled)
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

-- Whether row i of the heap's rows is the blocks allocated before the
-- profile.
local function is_before(rows, i)
  return rows.keys[rows.first[i]].source == 'before'
end

function Model:heap()
  local heap, opts = self.result.heap, self.opts
  local by_blocks = opts.sort == 'count'
  local rows = named_rows.group(heap.keys, heap, self.key, HEAP_FIELDS)
  local before = nil
  local holds, allocs, frees = rows.holds, rows.allocs, rows.frees
  local numbers = named_rows.sorted(rows, function(i)
    if is_before(rows, i) then
      before = named_rows.record(rows, i, HEAP_FIELDS, HeapRow)
      return false
    end
    return holds[i] ~= 0
  end, by_blocks and function(i)
    return allocs[i] - frees[i]
  end or function(i)
    return holds[i]
  end)
  local shown, rest = split_rows(rows, numbers, HEAP_FIELDS, HeapRow, opts)
  return { by_blocks = by_blocks, shown = shown, rest = rest,
    shown_bytes = layout.sum_of(shown, 'holds'), before = before,
    total = heap.total }
end

-- The listings: every row of a section in columns, for the formats that
-- list them all (JSON) or sum them otherwise (HTML).  Each is
-- { rows = the columns (memprof.report.model.named_rows), numbers = the
-- rows listed, in order }, and model:group(listing, i) is the group of
-- row i, model:overrides(kind, listing, i) the rows whose blocks its
-- events released.

-- Every row of a section of events with events, by its bytes.
function Model:event_listing(kind)
  local rows, numbers = event_rows(self, kind, SECTIONS[kind].bytes)
  local count, kept = rows.count, {}
  for _, i in ipairs(numbers) do
    if count[i] > 0 then
      kept[#kept + 1] = i
    end
  end
  return { rows = rows, numbers = kept }
end

function Model:group(listing, i)
  return named_rows.group_of(listing.rows, i, self.result.grouper)
end

-- { groups, blocks } by position, the most blocks first, then by name;
-- nil for a row without any.
function Model:overrides(kind, listing, i)
  local sites = self.result.sites
  local names, owners, blocks = named_rows.overrides(
    named_rows.slots(listing.rows, i), function(slot)
      return sites:overrides_at(kind, slot)
    end, self.key, true)
  if #names == 0 then
    return nil
  end
  table.sort(names, function(a, b)
    if blocks[a] ~= blocks[b] then
      return blocks[a] > blocks[b]
    end
    return a < b
  end)
  local grouper, list = self.result.grouper, { groups = {}, blocks = {} }
  for k, name in ipairs(names) do
    list.groups[k] = group_of(grouper, owners[name])
    list.blocks[k] = blocks[name]
  end
  return list
end

-- The heap's rows with what they allocated (alloc and realloc):
-- allocated_bytes, false for a row that allocated nothing.
local function allocated_rows(self, fields)
  local result = self.result
  local rows, index = named_rows.group(result.heap.keys, result.heap,
    self.key, fields)
  for _, kind in ipairs({ 'alloc', 'realloc' }) do
    local figures = result.sites.of_kind[kind]
    named_rows.add(rows, index, figures.keys, figures, self.key,
      { { 'allocated_bytes', 'plus' } })
  end
  return rows
end

-- Every row of the heap that allocated or whose blocks were released,
-- by live bytes; its figures: holds (the row of the blocks allocated
-- before the profile, rows.before, holds none: its holds are minus the
-- bytes released), allocs, reallocs, frees, allocated_bytes.
function Model:heap_listing()
  local rows = allocated_rows(self, HEAP_FIELDS)
  local holds, allocs, frees = rows.holds, rows.allocs, rows.frees
  local numbers = named_rows.sorted(rows, function(i)
    if is_before(rows, i) then
      rows.before = i
    end
    return allocs[i] > 0 or frees[i] > 0
  end, function(i)
    return i == rows.before and 0 or holds[i]
  end)
  return { rows = rows, numbers = numbers }
end

-- The rows that allocated (alloc and realloc together): the rows shown,
-- records of group, bytes (allocated) and count (events), sorted by
-- bytes (count with sort = 'count') and at most opts.top; the rest
-- { rows = how many, bytes, count = their sums }.
local AllocatedRow = record.shape({ 'group', 'bytes', 'count' })

function Model:allocated()
  local opts = self.opts
  local rows = allocated_rows(self, { 'allocs' })
  local bytes, count = rows.allocated_bytes, rows.allocs
  local by = opts.sort == 'count' and count or bytes
  local function keep(i)
    return bytes[i] ~= false
  end
  local function value(i)
    return by[i]
  end
  local numbers = opts.top and named_rows.first(rows, keep, value, opts.top)
    or named_rows.sorted(rows, keep, value)
  local shown = {}
  local rest = { rows = 0, bytes = 0, count = 0 }
  for k, i in ipairs(numbers) do
    shown[k] = AllocatedRow.make({ self:group({ rows = rows }, i), bytes[i],
      count[i] })
    rest.rows, rest.bytes = rest.rows - 1, rest.bytes - bytes[i]
    rest.count = rest.count - count[i]
  end
  for i = 1, rows.n do
    if keep(i) then
      rest.rows, rest.bytes = rest.rows + 1, rest.bytes + bytes[i]
      rest.count = rest.count + count[i]
    end
  end
  return shown, rest
end

M.keys_of = keys_of

return M
