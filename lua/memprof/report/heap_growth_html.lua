-- memprof.report.heap_growth_html: what grew between two heap snapshots
-- (`memprof-report --diff --format=html OLD.heap NEW.heap`,
-- docs/holders.md) as a page of its own, a snapshot's page
-- (report/html/heap_page.lua): the sections "What grew" and "Other
-- changes" of report/model/heap_growth.lua's model, and the model's JSON
-- document (report/heap_growth_json.lua) as the page's data.

local page = require('memprof.report.html.heap_page')
local growth_json = require('memprof.report.heap_growth_json')
local words = require('memprof.report.heap_words')
local text = require('memprof.report.html.text')

local M = {}

local format = string.format
local escape, human_size, commas = text.escape, text.human_size,
  text.with_commas
local num, size = page.num_cell, page.size_cell

-- A growth with its sign: '+1.95 KiB', '-500 B'.
local function signed(bytes)
  return format('<td class="num" title="%s bytes">%s%s</td>', commas(bytes),
    bytes >= 0 and '+' or '', human_size(bytes))
end

local function objects_now(row)
  if #row.types == 0 then return '0 objects' end
  return words.objects_text(row.objects, row.types)
end

-- A table of the first rows (at most top): each row's path, then the
-- cells cells_of(row) makes.
local function rows_table(rows, top, heads, numeric, cells_of)
  local n, more = page.first(rows, top)
  local cells = {}
  for i = 1, n do
    cells[i] = '<td class="mono">' .. escape(rows[i].pattern) .. '</td>' ..
      cells_of(rows[i])
  end
  return page.table(heads, numeric, cells, more)
end

local function grew_cells(row)
  return num(row.new_objects) .. '<td>' .. escape(objects_now(row)) ..
    '</td>' .. num(row.old_objects) .. signed(row.growth) ..
    size(row.retained)
end

local function grew_rows(rows, top)
  return rows_table(rows, top, { 'Path from a root', 'New objects',
    'Objects now', 'Before', 'Retained growth', 'Retained now' },
    { false, true, false, true, true, true }, grew_cells)
end

local function other_cells(row)
  return signed(row.growth) .. size(row.retained) .. num(row.objects) ..
    num(row.old_objects)
end

local function other_rows(rows, top)
  return rows_table(rows, top, { 'Path from a root', 'Retained growth',
    'Retained now', 'Objects now', 'Before' }, nil, other_cells)
end

local function facts(model)
  local old, new = model.old, model.new
  local change = new.bytes - old.bytes
  return escape(format('before: %s objects, %s; after: %s objects, %s ' ..
    '(%s%s)', commas(old.objects), human_size(old.bytes),
    commas(new.objects), human_size(new.bytes), change >= 0 and '+' or '',
    human_size(change)))
end

-- Writes the page; opts.top (rows per table), opts.all.
function M.write(model, out, opts)
  local top = page.top(opts or {})
  local old, new = escape(model.old.file), escape(model.new.file)
  page.write(out, { title = model.old.file .. ' to ' .. model.new.file,
    heading = 'Heap growth from ' .. old .. ' to ' .. new,
    facts = facts(model),
    sections = page.section('what-grew', 'What grew', 'The paths that ' ..
      'hold objects the older snapshot did not have, the largest growth ' ..
      'of retained bytes first (retained: what would be freed if they ' ..
      'went).', #model.grew > 0 and grew_rows(model.grew, top) or
      '<p>No new objects.</p>') ..
      page.section('other-changes', 'Other changes', 'The paths to ' ..
      'those, and the groups that changed without new objects.',
      #model.other > 0 and other_rows(model.other, top) or '<p>None.</p>'),
    data_id = 'memprof-heap-growth-data',
    document = growth_json.document(model) })
end

return M
