-- memprof.report.heap_growth_html: what grew between two heap snapshots
-- (`memprof-report --diff --format=html OLD.heap NEW.heap`,
-- docs/holders.md) as a page of its own, in the style of a snapshot's page
-- (report/holders_html.lua, report/html/holders.css): the sections "What
-- grew" and "Other changes" of report/heap_growth.lua's model, and that
-- model's JSON document as the page's data.

local page = require('memprof.report.holders_html')
local growth = require('memprof.report.heap_growth')
local holders = require('memprof.report.holders')
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
  return holders.objects_text(row.objects, row.types)
end

local function grew_rows(rows, top)
  local n, more = page.first(rows, top)
  local cells = {}
  for i = 1, n do
    local row = rows[i]
    cells[i] = '<td class="mono">' .. escape(row.pattern) .. '</td>' ..
      num(row.new_objects) .. '<td>' .. escape(objects_now(row)) ..
      '</td>' .. num(row.old_objects) .. signed(row.growth) ..
      size(row.retained)
  end
  return page.table({ 'Path from a root', 'New objects', 'Objects now',
    'Before', 'Retained growth', 'Retained now' }, cells, more, 6)
end

local function other_rows(rows, top)
  local n, more = page.first(rows, top)
  local cells = {}
  for i = 1, n do
    local row = rows[i]
    cells[i] = '<td class="mono">' .. escape(row.pattern) .. '</td>' ..
      signed(row.growth) .. size(row.retained) .. num(row.objects) ..
      num(row.old_objects)
  end
  return page.table({ 'Path from a root', 'Retained growth', 'Retained now',
    'Objects now', 'Before' }, cells, more, 5)
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
  opts = opts or {}
  local top = not opts.all and (opts.top or page.DEFAULT_TOP) or nil
  local old, new = escape(model.old.file), escape(model.new.file)
  page.open_page(out, model.old.file .. ' to ' .. model.new.file,
    'Heap growth from ' .. old .. ' to ' .. new, facts(model))
  out:write(page.section('what-grew', 'What grew', 'The paths that hold ' ..
    'objects the older snapshot did not have, the largest growth of ' ..
    'retained bytes first (retained: what would be freed if they went).',
    #model.grew > 0 and grew_rows(model.grew, top) or
    '<p>No new objects.</p>'))
  out:write(page.section('other-changes', 'Other changes', 'The paths to ' ..
    'those, and the groups that changed without new objects.',
    #model.other > 0 and other_rows(model.other, top) or '<p>None.</p>'))
  page.close_page(out, 'memprof-heap-growth-data', growth.document(model))
end

return M
