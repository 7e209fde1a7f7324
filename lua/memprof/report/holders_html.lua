-- memprof.report.holders_html: the report of a heap snapshot
-- (report/model/holders.lua's model) as a page of its own
-- (docs/holders.md): report/html/heap_page.lua's page, and its data, the
-- JSON document of report/holders_json.lua, in the page.

local page = require('memprof.report.html.heap_page')
local text = require('memprof.report.html.text')
local words = require('memprof.report.heap_words')
local holders_json = require('memprof.report.holders_json')

local M = {}

local format, concat = string.format, table.concat
local escape, human_size, commas = text.escape, text.human_size,
  text.with_commas
local num, size, first, table_html = page.num_cell, page.size_cell,
  page.first, page.table

-- Holders listed under each type and place.
M.MAIN_HOLDERS = 5

local function holder_rows(model, top)
  local n, more = first(model.holders, top)
  local rows = {}
  for i = 1, n do
    local row = model.holders[i]
    rows[i] = '<td class="mono">' .. escape(row.pattern) .. '</td><td>' ..
      escape(words.objects_text(row.objects, row.types)) .. '</td>' ..
      size(row.bytes) .. size(row.retained) .. '<td class="mono">' ..
      escape(words.place_text(row) or '') .. '</td>'
  end
  return table_html({ 'Path from a root', 'Objects', 'Bytes', 'Retained',
    'Allocated' }, { false, false, true, true }, rows, more)
end

local function main_holders(row)
  local items = {}
  for i = 1, math.min(M.MAIN_HOLDERS, #row.holders) do
    local h = row.holders[i]
    items[i] = format('<li><span class="mono">%s</span>: %s, %s</li>',
      escape(h.pattern), words.count_of(h.objects, 'object'),
      human_size(h.bytes))
  end
  if #row.holders > M.MAIN_HOLDERS then
    items[#items + 1] = format('<li>… and %s more paths</li>',
      commas(#row.holders - M.MAIN_HOLDERS))
  end
  return '<ul class="holders">' .. concat(items) .. '</ul>'
end

local function counted_rows(list, name_key, head, top)
  local n, more = first(list, top)
  local rows = {}
  for i = 1, n do
    local row = list[i]
    local callers = row.callers and '<br>from ' .. escape(row.callers) or ''
    rows[i] = '<td><span class="mono">' .. escape(row[name_key]) ..
      '</span>' .. callers .. main_holders(row) .. '</td>' ..
      num(row.objects) .. size(row.bytes)
  end
  return table_html({ head, 'Objects', 'Bytes' }, nil, rows, more)
end

local function facts(h)
  local parts = { format('%s objects, %s, %s references from %s roots',
    commas(h.objects), human_size(h.bytes), commas(h.references),
    commas(h.roots)), h.gc64 and 'GC64' or 'not GC64' }
  if h.traces then
    parts[#parts + 1] = commas(h.traces) .. ' JIT traces alive'
  end
  if h.cdata_sizes_unknown then
    parts[#parts + 1] = words.CDATA_UNKNOWN
  end
  parts[#parts + 1] = words.profile_text(h)
  return escape(concat(parts, '; '))
end

local function sections(model, top)
  local parts = { page.section('holders', 'What holds the memory',
    'Objects grouped by their path from a root (the entries of a large ' ..
    'table are [*]), the most bytes first; retained: what would be freed ' ..
    'if they went.', holder_rows(model, top)),
    page.section('by-type', 'Objects by type', 'Each type with the ' ..
    'paths that hold most of its bytes.',
    counted_rows(model.by_type, 'type', 'Type', top)) }
  if model.by_place then
    parts[3] = page.section('by-place', 'Objects by allocation place',
      'Each place of the profile with its callers and the paths that ' ..
      'hold what it allocated.', counted_rows(model.by_place, 'place',
      'Place', top))
  end
  return concat(parts)
end

-- Writes the page; opts.top (rows per table), opts.all.
function M.write(model, out, opts)
  local h = model.header
  page.write(out, { title = h.file, heading = 'Heap snapshot ' ..
    escape(h.file), facts = facts(h), sections = sections(model,
    page.top(opts or {})), data_id = 'memprof-heap-data',
    document = holders_json.document(model) })
end

return M
