-- memprof.report.text: the default text report (the layout of
-- Tarantool's memprof report).
--
--   text.write(result, out, opts)
--     result  from memprof.analysis.analyze.run()
--     out     a file handle (default io.stdout)
--     opts    views: a set of views ({ leaks = true, ... }); when it
--               has any, the text of those views is written instead
--               (memprof.report.views, which takes top, sort and
--               human_readable too)
--             leak_only: only the HEAP SUMMARY (and ALIASES)
--             human_readable: sizes in B/KiB/MiB/GiB
--             key: function(site) -> row name (default: site.name)
--             top: at most this many rows per section, and names per
--               Overrides list; the other rows are summed on a line
--               "... and K more: ...", the other names counted
--             left_out: a table whose field rows grows by the number of
--               rows that top leaves out
--             sort: 'bytes' (default) or 'count'; 'bytes' sorts the
--               event sections by bytes allocated (+), or freed (-) for
--               DEALLOCATIONS, and the heap summary by holds; 'count'
--               the event sections by events (Tarantool's order) and
--               the heap summary by live blocks (allocs - frees).  Each
--               section's title says its order.
--
-- Rows are grouped by name: sites with the same name (a function
-- reloaded at another address, say) are reported as one row.  When the
-- analysis grouped the rows otherwise (analyze.run's opts.group), the
-- report starts with a line saying what the rows are, and a row of a
-- stack is written as its innermost frame followed by one line per
-- caller ("called from NAME").
--
-- Sections ALLOCATIONS, REALLOCATIONS, DEALLOCATIONS: one row per site
-- with its event count and bytes allocated (+) and freed (-), sorted by
-- bytes or count, then name; realloc and free rows list under
-- "Overrides:" the sites that had produced the released blocks.
--
-- HEAP SUMMARY: every site whose holds are not zero, by holds (then
-- name), then the blocks allocated before the profile and released
-- during it (their own line: they hold nothing), then the TOTAL (the net
-- bytes of the stream).  "N allocs" counts
-- the events at the site that produced a block, alloc or realloc; when
-- all of them were reallocations the row ends with "(all allocs were
-- reallocations)", when only some were, with "(K of the allocs were
-- reallocations)": a reallocated block belongs to the site that gave it
-- its current size.
--
-- CUMULATIVE (rows grouped by function or by stack, with the analysis'
-- result.cumulative): every row with its callees' events, by bytes
-- allocated (events with --sort=count), the blocks of those still live,
-- and its own events (memprof.analysis.cumulative says what counts).
--
-- ALIASES: the multi-line chunk names used by the rows above.

local M = {}

local layout = require('memprof.report.layout')
local views = require('memprof.report.views')
local record = require('memprof.record')
local paths = require('memprof.report.paths')

local format = string.format

M.format_size = layout.format_size

local function site_name(site)
  return site.name
end

-- The summed fields of the rows of each kind, after name, first,
-- frames, more and slots (below); a row is a memprof.record of the shape.
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
-- The rows are kept in columns (an array per field, indexed by row
-- number): a large profile has a row per place, and only the rows shown
-- (top) are made records of the row's shape (row_of).  A row keeps the
-- slot of its first key, and a list of the others' only when there are
-- any (most names have one site): the sites and overrides of a row are
-- gathered for the rows shown only (details_of).
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

-- Row i of the columns as a record of `shape`: `first` is its first key,
-- `more` the others (or false), `slots` the slots of all.
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

-- The numbers of the rows that keep(i) keeps, sorted as
-- layout.sort_rows sorts rows: by value(i), largest first, then by name.
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

-- The rows to show (records, at most opts.top) and the rest: how many,
-- and the sums of `fields` over them; the rest's count is added to
-- opts.left_out.rows.
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

-- The sites of a row, and the names of the sites whose blocks its
-- events released (a set of name -> site): overrides_at(slot) gives the
-- list of those of the key in one slot, or nil.
local function details_of(row, key, overrides_at)
  local overrides = {}
  for _, slot in ipairs(row.slots) do
    for _, owner in ipairs(overrides_at(slot) or {}) do
      overrides[key(owner)] = owner
    end
  end
  return keys_of(row), overrides
end

-- Rows for one event kind of the sites pass, grouped by name and
-- sorted: the rows shown and the rest (split_rows).
local function event_rows(sites, kind, key, sort_field, opts)
  local figures = sites.of_kind[kind]
  local rows = group_by_name(figures.keys, figures, key, EVENT_FIELDS)
  local column = rows[sort_field]
  local numbers = sorted_numbers(rows, function() return true end,
    function(i) return column[i] end)
  return split_rows(rows, numbers, EVENT_FIELDS, EventRow, opts)
end

-- Heap rows with nonzero holds, grouped by name and sorted (shown and
-- the rest, as split_rows), and the row of the blocks allocated before
-- the profile (or nil), which holds nothing and is kept apart.
-- sort_count: by live blocks (allocs - frees), not holds.
local function heap_rows(heap, key, sort_count, opts)
  local rows = group_by_name(heap.keys, heap, key, HEAP_FIELDS)
  local before = nil
  local holds, allocs, frees = rows.holds, rows.allocs, rows.frees
  local numbers = sorted_numbers(rows, function(i)
    if rows.keys[rows.first[i]].source == 'before' then
      before = row_of(rows, i, HEAP_FIELDS, HeapRow)
      return false
    end
    return holds[i] ~= 0
  end, sort_count and function(i)
    return allocs[i] - frees[i]
  end or function(i)
    return holds[i]
  end)
  local shown, rest = split_rows(rows, numbers, HEAP_FIELDS, HeapRow, opts)
  return shown, rest, before
end

local function sorted_keys(set)
  local keys = {}
  for k in pairs(set) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

local function note_used_aliases(used, sites)
  for _, site in pairs(sites) do
    layout.note_aliases(used, site)
  end
end

local SECTIONS = {
  { kind = 'alloc', title = 'ALLOCATIONS', bytes = 'plus',
    order = 'by bytes allocated' },
  { kind = 'realloc', title = 'REALLOCATIONS', bytes = 'plus',
    order = 'by bytes allocated' },
  { kind = 'free', title = 'DEALLOCATIONS', bytes = 'minus',
    order = 'by bytes freed' },
}

-- A whole percentage of `part` in `whole`.
local function percent(part, whole)
  return math.floor(100 * part / whole + 0.5)
end

-- A section's title with the order of its rows, and the share of its
-- bytes that compiled code allocated, where the report knows it.
local function section_title(section, opts, compiled, total)
  local order = opts.sort == 'count' and 'by events' or section.order
  if compiled and compiled.total > 0 and total > 0 then
    order = format('%s; %d%% of the bytes by compiled code', order,
      percent(compiled.total, total))
  end
  return format('%s (%s)', section.title, order)
end

-- The bytes compiled code allocated in a section's rows, by row, or nil
-- when the report cannot say: no such events, rows not by line, a
-- sample (its sizes are not the estimates), a filter (which the reader's
-- counts do not follow). `total`: all of them.
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

-- ' (N% compiled)' for a row some of whose bytes compiled code
-- allocated.
local function compiled_note(compiled, row, bytes)
  local part = compiled and compiled.of(row) or 0
  if part == 0 or bytes == 0 then
    return ''
  end
  local share = percent(part, bytes)
  return share == 0 and '\t(<1% compiled)' or
    format('\t(%d%% compiled)', share)
end

-- Writes a section of events: the rows shown, then a line summing the
-- rest (event_rows); overrides_at(slot) lists the sites whose blocks the
-- events of the key in that slot released, or nil.
local function write_events(out, shown, rest, section, opts, used_aliases,
    overrides_at, compiled)
  local size = layout.sizer(opts)
  local key = opts.key or site_name
  local total = layout.sum_of(shown, section.bytes) + rest.sums[section.bytes]
  out:write(section_title(section, opts, compiled, total), '\n')
  for _, row in ipairs(shown) do
    layout.write_title(out, row, format(': %d events\t+%s\t-%s%s', row.count,
      size(row.plus), size(row.minus), compiled_note(compiled, row, row.plus)))
    local sites, overrides_by_name = details_of(row, key, overrides_at)
    local overrides, rest_of_list = layout.split_top(
      sorted_keys(overrides_by_name), opts.top, opts.left_out)
    if #overrides > 0 then
      out:write('\tOverrides:\n')
      for _, name in ipairs(overrides) do
        out:write('\t\t', name, '\n')
      end
      if #rest_of_list > 0 then
        out:write(format('\t\t... and %d more\n', #rest_of_list))
      end
      out:write('\n') -- As Tarantool's report: a blank line after the list.
    end
    note_used_aliases(used_aliases, sites)
    note_used_aliases(used_aliases, overrides_by_name)
  end
  if rest.count > 0 then
    local sums = rest.sums
    local bytes = section.bytes
    out:write(format('... and %d more: %d events\t+%s\t-%s%s\n', rest.count,
      sums.count, size(sums.plus), size(sums.minus),
      layout.rest_share(sums[bytes], layout.sum_of(shown, bytes))))
  end
  out:write('\n')
end

local function realloc_note(row)
  if row.reallocs == 0 then
    return ''
  end
  if row.reallocs == row.allocs then
    return ' (all allocs were reallocations)'
  end
  return format(' (%d of the allocs were reallocations)', row.reallocs)
end

local function write_heap(out, shown, rest, before, total, opts,
    used_aliases)
  local size = layout.sizer(opts)
  out:write(opts.sort == 'count' and 'HEAP SUMMARY (by live blocks):\n' or
    'HEAP SUMMARY (by bytes held):\n')
  for _, row in ipairs(shown) do
    layout.write_title(out, row, format(' holds %s: %d allocs, %d frees%s',
      size(row.holds), row.allocs, row.frees, realloc_note(row)))
    note_used_aliases(used_aliases, keys_of(row))
  end
  if rest.count > 0 then
    local sums = rest.sums
    out:write(format('... and %d more hold %s: %d allocs, %d frees%s\n',
      rest.count, size(sums.holds), sums.allocs, sums.frees,
      layout.rest_share(sums.holds, layout.sum_of(shown, 'holds'))))
  end
  if before then
    out:write(format('%s: %d freed or reallocated during the profile, %s\n',
      before.name, before.frees, size(-before.holds)))
  end
  out:write(format('TOTAL holds %s (net bytes of the stream)\n', size(total)))
  out:write('\n')
end

local CUMULATIVE_TITLES = {
  ['function'] = 'CUMULATIVE: each function with the functions it called, ' ..
    'by bytes allocated (self: its own events)',
  stack = 'CUMULATIVE: each stack with the functions called from its ' ..
    'innermost line, by bytes allocated (self: its own events)',
}

local function write_cumulative(out, cumulative, opts, used_aliases)
  local size = layout.sizer(opts)
  local rows = layout.sort_rows(cumulative.rows,
    opts.sort == 'count' and 'events' or 'bytes', function(row)
      return row.group.name
    end)
  local shown, rest = layout.split_top(rows, opts.top, opts.left_out)
  out:write(CUMULATIVE_TITLES[cumulative.mode], '\n')
  for _, row in ipairs(shown) do
    layout.write_title(out, row.group, format(': with callees %d events ' ..
      '+%s, live %s in %s; self %d events +%s', row.events,
      size(row.bytes), size(row.live_bytes),
      layout.plural(row.live_blocks, 'block'), row.self_events,
      size(row.self_bytes)))
    layout.note_aliases(used_aliases, row.group)
  end
  if #rest > 0 then
    out:write(format('... and %d more\n', #rest))
  end
  out:write('\n')
end

function M.write(result, out, opts)
  out = out or io.stdout
  opts = opts or {}
  local prefix = paths.common_prefix(result.stream)
  if prefix then
    out:write(paths.note(prefix), '\n\n')
    out = paths.shortening(out, prefix)
  end
  layout.write_sampling(out, result.stream)
  layout.write_focus(out, opts)
  if opts.views and next(opts.views) then
    return views.write(result, out, opts)
  end
  local key = opts.key or site_name
  local used_aliases = {}
  if result.grouper then
    layout.write_grouping(out, result.grouper.mode)
  end
  if not opts.leak_only then
    for _, section in ipairs(SECTIONS) do
      local sort_field = opts.sort == 'count' and 'count' or section.bytes
      local shown, rest = event_rows(result.sites, section.kind, key,
        sort_field, opts)
      write_events(out, shown, rest, section, opts, used_aliases,
        function(slot)
          return (result.sites:overrides_at(section.kind, slot))
        end, compiled_of(result, section.kind, opts))
    end
  end
  local shown, rest, before = heap_rows(result.heap, key,
    opts.sort == 'count', opts)
  write_heap(out, shown, rest, before, result.heap.total, opts,
    used_aliases)
  if result.cumulative and not opts.leak_only then
    write_cumulative(out, result.cumulative, opts, used_aliases)
  end
  layout.write_aliases(out, result.stream.aliases, used_aliases)
end

-- The report as a string (for tests and embedding).
M.render = layout.renderer(M.write)

return M
