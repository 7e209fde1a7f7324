-- memprof.report.holders_html: the report of a heap snapshot
-- (memprof.report.holders' model) as a page of its own (docs/holders.md):
-- the template here, its style in report/html/holders.css, and its data,
-- the JSON document of report/holders_json.lua, in the page.

local html = require('memprof.report.html')
local text = require('memprof.report.html.text')
local holders = require('memprof.report.holders')
local holders_json = require('memprof.report.holders_json')
local json_text = require('memprof.encode.json_text')

local M = {}

local format, concat = string.format, table.concat
local escape, human_size, commas = text.escape, text.human_size,
  text.with_commas

-- Rows per table without --top or --all.
M.DEFAULT_TOP = 100

-- Holders listed under each type and place.
M.MAIN_HOLDERS = 5

local function num(n) return '<td class="num">' .. commas(n) .. '</td>' end

local function size(bytes)
  return format('<td class="num" title="%s bytes">%s</td>', commas(bytes),
    human_size(bytes))
end

local function table_html(heads, rows, more, columns)
  local out = { '<table><thead><tr>' }
  for _, h in ipairs(heads) do out[#out + 1] = '<th>' .. h .. '</th>' end
  out[#out + 1] = '</tr></thead><tbody>'
  for _, row in ipairs(rows) do out[#out + 1] = '<tr>' .. row .. '</tr>' end
  if more > 0 then
    out[#out + 1] = format('<tr><td colspan="%d">… and %s more rows ' ..
      '(--all shows every row)</td></tr>', columns, commas(more))
  end
  out[#out + 1] = '</tbody></table>'
  return concat(out)
end

local function first(rows, top)
  local n = top and math.min(top, #rows) or #rows
  return n, #rows - n
end

local function holder_rows(model, top)
  local n, more = first(model.holders, top)
  local rows = {}
  for i = 1, n do
    local row = model.holders[i]
    rows[i] = '<td class="mono">' .. escape(row.pattern) .. '</td><td>' ..
      escape(holders.objects_text(row.objects, row.types)) .. '</td>' ..
      size(row.bytes) .. size(row.retained) .. '<td class="mono">' ..
      escape(holders.place_text(row) or '') .. '</td>'
  end
  return table_html({ 'Path from a root', 'Objects', 'Bytes', 'Retained',
    'Allocated' }, rows, more, 5)
end

local function main_holders(row)
  local items = {}
  for i = 1, math.min(M.MAIN_HOLDERS, #row.holders) do
    local h = row.holders[i]
    items[i] = format('<li><span class="mono">%s</span>: %s, %s</li>',
      escape(h.pattern), holders.count_of(h.objects, 'object'),
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
  return table_html({ head, 'Objects', 'Bytes' }, rows, more, 3)
end

local function section(id, title, note, body)
  return format('<section id="%s"><h2>%s</h2><p class="note">%s</p>%s' ..
    '</section>\n', id, title, note, body)
end

local function facts(h)
  local parts = { format('%s objects, %s, %s references from %s roots',
    commas(h.objects), human_size(h.bytes), commas(h.references),
    commas(h.roots)), h.gc64 and 'GC64' or 'not GC64' }
  if h.traces then
    parts[#parts + 1] = commas(h.traces) .. ' JIT traces alive'
  end
  if h.cdata_sizes_unknown then
    parts[#parts + 1] = holders.CDATA_UNKNOWN
  end
  parts[#parts + 1] = holders.profile_text(h)
  return escape(concat(parts, '; '))
end

-- Writes the page; opts.top (rows per table), opts.all.
function M.write(model, out, opts)
  opts = opts or {}
  local top = not opts.all and (opts.top or M.DEFAULT_TOP) or nil
  local h = model.header
  out:write('<!DOCTYPE html>\n<html lang="en">\n<head>\n',
    '<meta charset="utf-8">\n',
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
    '<meta name="generator" content="memprof-report">\n',
    '<title>memprof: ', escape(h.file), '</title>\n<style>\n',
    html.resource('holders.css'), '</style>\n</head>\n<body>\n',
    '<header><h1>Heap snapshot ', escape(h.file), '</h1><p>', facts(h),
    '</p></header>\n<main>\n')
  out:write(section('holders', 'What holds the memory', 'Objects grouped ' ..
    'by their path from a root (the entries of a large table are [*]), ' ..
    'the most bytes first; retained: what would be freed if they went.',
    holder_rows(model, top)))
  out:write(section('by-type', 'Objects by type', 'Each type with the ' ..
    'paths that hold most of its bytes.',
    counted_rows(model.by_type, 'type', 'Type', top)))
  if model.by_place then
    out:write(section('by-place', 'Objects by allocation place', 'Each ' ..
      'place of the profile with its callers and the paths that hold ' ..
      'what it allocated.', counted_rows(model.by_place, 'place', 'Place',
        top)))
  end
  out:write('</main>\n<footer>Generated by memprof-report. This page is ' ..
    'one file with no external resources.</footer>\n',
    '<script type="application/json" id="memprof-heap-data">')
  local writer = json_text.writer(out, { script = true })
  writer:value(holders_json.document(model))
  writer:finish()
  out:write('</script>\n</body>\n</html>\n')
end

return M
