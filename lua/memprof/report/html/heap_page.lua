-- memprof.report.html.heap_page: what the pages of heap snapshots share
-- (report/holders_html.lua, report/heap_growth_html.lua): the page, its
-- template html/heap_page.html filled as the profile's page is
-- (report/html.lua's write_template), its style html/holders.css; cells,
-- tables and sections.

local html = require('memprof.report.html')
local text = require('memprof.report.html.text')
local json_text = require('memprof.encode.json_text')
local tables = require('memprof.report.html.tables')

local M = {}

local format = string.format
local escape, human_size, commas = text.escape, text.human_size,
  text.with_commas

-- Rows per table without --top or --all.
M.DEFAULT_TOP = 100

-- The rows shown for opts.top and opts.all.
function M.top(opts)
  return not opts.all and (opts.top or M.DEFAULT_TOP) or nil
end

function M.num_cell(n) return '<td class="num">' .. commas(n) .. '</td>' end

function M.size_cell(bytes)
  return format('<td class="num" title="%s bytes">%s</td>', commas(bytes),
    human_size(bytes))
end

-- A table of `heads` (numeric[i]: column i holds numbers) and `rows`
-- (each the cells of a row), with a row in its foot that says how many
-- more there are: the profile's page's table (report/html/tables.lua).
function M.table(heads, numeric, rows, more)
  local foot = {}
  if more > 0 then
    foot[1] = format('<td colspan="%d">… and %s more rows (--all shows ' ..
      'every row)</td>', #heads, commas(more))
  end
  return tables.table_html(nil, nil, heads, rows, foot, numeric)
end

-- How many rows of a list to show, and how many are left out.
function M.first(rows, top)
  local n = top and math.min(top, #rows) or #rows
  return n, #rows - n
end

function M.section(id, title, note, body)
  return format('<section id="%s"><h2>%s</h2><p class="note">%s</p>%s' ..
    '</section>\n', id, title, note, body)
end

-- Writes the page: page.title (a text), page.heading and page.facts
-- (html), page.sections (html: the sections, each ending its line),
-- page.document (a JSON value: the page's data, in a script element of
-- id page.data_id).
function M.write(out, page)
  html.write_template(out, 'heap_page.html', {
    title = escape(page.title),
    style = html.resource('holders.css'),
    heading = page.heading,
    facts = page.facts,
    sections = page.sections,
    data_id = page.data_id,
    data = function(to)
      json_text.write(to, page.document, { script = true })
    end,
  })
end

return M
