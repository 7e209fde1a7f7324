-- memprof.report.model.sections: the default sections of the text
-- report, decided once: the rows of ALLOCATIONS, REALLOCATIONS and
-- DEALLOCATIONS and of the HEAP SUMMARY, their order, the rows shown and
-- the rest, the overrides of each row, the share of compiled code.  The
-- text report only lays them out.
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
--                override_sites = a set of name -> site, compiled = the
--                whole percentage of its bytes allocated (plus) by
--                compiled code, or nil }
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
--
-- Rows are grouped by name: sites with the same name (a function
-- reloaded at another address, say) are one row.  They are kept in
-- columns (an array per figure, by row number): a large profile has a
-- row per place, and only the rows shown are made records.

local record = require('memprof.record')
local layout = require('memprof.report.layout')

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

-- Groups the keys of a pass (sites, or groups; key i is in slot i) by
-- name: one row per name, with the figures summed (values[field][slot]).
-- A row keeps the slot of its first key, and a list of the others' only
-- when there are any (most names have one site).
local function group_by_name(keys, values, key, fields)
  local rows = { n = 0, keys = keys, name = {}, first = {}, more = {} }
  for _, field in ipairs(fields) do
    rows[field] = {}
  end
  local index = {}
  for slot, item in ipairs(keys) do
    local name = key(item)
    local i = index[name]
    if not i then
      i = rows.n + 1
      rows.n = i
      index[name] = i
      rows.name[i], rows.first[i], rows.more[i] = name, slot, false
      for _, field in ipairs(fields) do
        rows[field][i] = 0
      end
    else
      local more = rows.more[i] or {}
      more[#more + 1] = slot
      rows.more[i] = more
    end
    for _, field in ipairs(fields) do
      local column = rows[field]
      column[i] = column[i] + values[field][slot]
    end
  end
  return rows
end

-- Row i of the columns as a record of `shape`.
local function row_of(rows, i, fields, shape)
  local keys = rows.keys
  local first = keys[rows.first[i]]
  local slots, more = { rows.first[i] }, false
  if rows.more[i] then
    more = {}
    for k, slot in ipairs(rows.more[i]) do
      slots[k + 1], more[k] = slot, keys[slot]
    end
  end
  local row = shape.make({ rows.name[i], first, first.frames, more, slots,
    0, 0, 0, 0 })
  for _, field in ipairs(fields) do
    row[field] = rows[field][i]
  end
  return row
end

-- The numbers of the rows that keep(i) keeps, by value(i), largest
-- first, then by name.
local function sorted_numbers(rows, keep, value)
  local numbers = {}
  for i = 1, rows.n do
    if keep(i) then
      numbers[#numbers + 1] = i
    end
  end
  local names = rows.name
  table.sort(numbers, function(a, b)
    local va, vb = value(a), value(b)
    if va ~= vb then
      return va > vb
    end
    return names[a] < names[b]
  end)
  return numbers
end

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
    shown[k] = row_of(rows, numbers[k], fields, shape)
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

local function sorted_keys(set)
  local keys = {}
  for k in pairs(set) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
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
  local override_sites = {}
  for _, slot in ipairs(row.slots) do
    for _, owner in ipairs(overrides_at(slot) or {}) do
      override_sites[key(owner)] = owner
    end
  end
  local overrides, rest = layout.split_top(sorted_keys(override_sites),
    opts.top, opts.left_out)
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

function Model:events(kind)
  local result, opts, key = self.result, self.opts, self.key
  local spec = SECTIONS[kind]
  local bytes = spec.bytes
  local by = opts.sort == 'count' and 'count' or bytes
  local figures = result.sites.of_kind[kind]
  local rows = group_by_name(figures.keys, figures, key, EVENT_FIELDS)
  local column = rows[by]
  local numbers = sorted_numbers(rows, function() return true end,
    function(i) return column[i] end)
  local shown, rest = split_rows(rows, numbers, EVENT_FIELDS, EventRow, opts)
  local compiled = compiled_of(result, kind, opts)
  local sites = result.sites
  local function overrides_at(slot)
    return (sites:overrides_at(kind, slot))
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

function Model:heap()
  local heap, opts = self.result.heap, self.opts
  local by_blocks = opts.sort == 'count'
  local rows = group_by_name(heap.keys, heap, self.key, HEAP_FIELDS)
  local before = nil
  local holds, allocs, frees = rows.holds, rows.allocs, rows.frees
  local numbers = sorted_numbers(rows, function(i)
    if rows.keys[rows.first[i]].source == 'before' then
      before = row_of(rows, i, HEAP_FIELDS, HeapRow)
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

M.keys_of = keys_of

return M
