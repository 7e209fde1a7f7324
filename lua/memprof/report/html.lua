-- memprof.report.html: the report as one self-contained HTML page.
--
--   html.write(result, out, opts)
--     result  from memprof.analysis.analyze.run(), ideally with every view
--             ({ leaks = true, peak = true, temporary = true,
--             timeline = true }) and the passes of html.passes()
--     out     a file handle (default io.stdout)
--     opts    top: at most this many rows per table (default 40); the
--               others are summed on a row "… and K more rows"
--             all: every row in every table (top is ignored)
--             sort: 'bytes' (default) or 'count': the order of the rows
--             (other options of the text reports are ignored: the page
--             always has every view the result has, sizes in B/KiB/MiB
--             with the exact number of bytes on hover)
--   html.render(result, opts) -> the same, as a string
--   html.passes() -> { { name = 'flame', pass = ... } }, to give to
--             analyze.run as opts.passes: it keeps the bytes allocated
--             and live per call stack whatever the grouping of the rows
--
-- The page is its template (html/page.html beside this module) with its
-- slots filled: the facts and figures of the profile, the tables
-- (memprof.report.html.tables), the chart (memprof.report.html.chart).
-- It has no reference to anything outside it: the style and the script
-- (html/page.css and html/page.js, see M.resource) are inline, and the data the script draws (the flame graphs,
-- the heap over time) is embedded as JSON in which every '<' is written
-- '\u003c', so it can never close its <script> element.  Everything but
-- the flame graphs and the tooltips is plain HTML and SVG, readable with
-- scripts off.  docs/html.md describes the page.
--
-- Flame graphs: without html.passes() in the analysis, the allocated
-- bytes are drawn per row of the report (per stack only when the rows
-- are grouped by stack) and the live bytes from the LIVE AT END view's
-- stacks; a note on the page says so.

local layout = require('memprof.report.layout')
local flame = require('memprof.report.flame')
local sampling = require('memprof.analysis.sampling')
local html_text = require('memprof.report.html.text')
local data_module = require('memprof.report.html.data')
local tables = require('memprof.report.html.tables')
local chart_html = require('memprof.report.html.chart')
local holders_section = require('memprof.report.html.holders_section')
local peak_model = require('memprof.report.model.peak')
local leaks_model = require('memprof.report.model.leaks')
local paths = require('memprof.report.paths')
local grouping = require('memprof.report.model.grouping')
local totals_model = require('memprof.report.model.totals')

local M = {}

local format, concat = string.format, table.concat
local escape, with_commas = html_text.escape, html_text.with_commas
local human_time, size_html = html_text.human_time, html_text.size_html
local page_data = data_module.page_data
local write_json = data_module.write_json

-- Rows per table when opts.top is not given.
M.DEFAULT_TOP = 40
-- Rows of the heap-over-time chart, at most.
M.CHART_ROWS = 400
-- Frames of a flame graph, at most: the smallest are left out beyond.
M.MAX_FRAMES = 30000

-- The page shows no cumulative rows: the analysis leaves them out.
M.CUMULATIVE = false

-- The flame pass and the paths of the graphs: memprof.report.flame.

function M.flame_pass()
  return flame.pass()
end

function M.passes()
  return { { name = 'flame', pass = M.flame_pass() } }
end

-- The page's template, style and script ------------------------------------

-- The page's template, its style and its script are files of their own,
-- next to this module (html/page.html, html/page.css, html/page.js), so
-- that they can be read and checked as HTML, CSS and JavaScript; every
-- page has the style and the script inline.  They are found
-- beside this file (the source tree, make install, LuaRocks), else
-- along package.path; read once.

local resources = {}

-- The directory of this module's file, or nil.
local function module_dir()
  local source = debug.getinfo(1, 'S').source
  return source:match('^@(.*)/[^/]*$')
end

-- Where a resource may be: beside this module, then in the memprof
-- directory of each ?.lua template of package.path.
local function resource_paths(name)
  local places = {}
  local dir = module_dir()
  if dir then
    places[1] = dir .. '/html/' .. name
  end
  for template in package.path:gmatch('[^;]+') do
    local prefix = template:match('^(.*)%?%.lua$')
    if prefix then
      places[#places + 1] = prefix .. 'memprof/report/html/' .. name
    end
  end
  return places
end

local function read_resource(name)
  local tried = resource_paths(name)
  for _, path in ipairs(tried) do
    local file = io.open(path, 'rb')
    if file then
      local text = file:read('*a')
      file:close()
      return text
    end
  end
  error(format("the HTML page's %s is missing (looked for %s)", name,
    concat(tried, ', ')), 0)
end

-- The text of html/NAME; a style or a script must not close the
-- element it sits in.
function M.resource(name)
  local text = resources[name]
  if not text then
    text = read_resource(name)
    local closing = name:match('%.css$') and '</style' or
      name:match('%.js$') and '</script'
    if closing and text:lower():find(closing, 1, true) then
      error(format("the HTML page's %s holds %s", name, closing), 0)
    end
    resources[name] = text
  end
  return text
end

-- The header's facts, warnings, summary -------------------------------------

local function basename(path)
  return path:match('([^/]+)$') or path
end

-- The format's name; what the file holds is said by the facts after it
-- (an extended file may have neither stacks nor time marks).
local VERSION_NAMES = { [3] = "Tarantool's", [100] = 'extended' }

local function fact(label, value)
  return format('<li>%s <b>%s</b></li>', label, value)
end

local function facts_html(result, opts)
  local stream = result.stream
  local version = stream.version or '?'
  local facts = {
    fact('format', VERSION_NAMES[version] and
      format('%s (%s)', VERSION_NAMES[version], escape(version)) or
      escape(version)),
    fact('events', with_commas(stream.events or 0)),
    fact('call stacks', stream.has_stacks and 'yes' or 'no'),
    fact('time marks', stream.has_time and 'yes' or 'no'),
    fact('rows grouped', grouping.by(result.grouper.mode) or
      escape(result.grouper.mode)),
  }
  if stream.sample_bytes then
    local note = sampling.note(stream.sample_bytes):gsub('^sampled: ', '')
    facts[#facts + 1] = fact('sampled', escape(note))
  end
  if stream.warning then
    facts[#facts + 1] = fact('stream', 'truncated')
  end
  local prefix = paths.common_prefix(stream)
  if prefix then
    facts[#facts + 1] = fact('files under', escape(prefix) ..
      ' named from there on as ' .. paths.MARK)
  end
  local focus = layout.focus_note(opts)
  if focus ~= '' then
    facts[#facts + 1] = fact('blocks', escape(focus))
  end
  return '<ul class="facts">' .. concat(facts) .. '</ul>'
end

local function warnings_html(result)
  local warning = result.stream.warning
  if not warning then
    return ''
  end
  return format('<div class="warning" role="alert" id="warning"><b>The ' ..
    'stream is incomplete:</b> %s. Everything before the cut is ' ..
    'reported.</div>\n', escape(warning))
end

local function card(label, value, detail)
  return format('<div class="card"><div class="label">%s</div>' ..
    '<div class="value">%s</div><div class="detail">%s</div></div>', label,
    value, detail or '')
end

local function peak_card(result)
  if not result.peak then
    return card('Peak', '–', 'not computed')
  end
  local model = peak_model.new(result.peak, result.stream)
  local detail = format('after event %s', with_commas(model.event))
  if model.at_start then
    detail = 'at the start'
  elseif model.has_time then
    detail = 'at ' .. human_time(model.time or 0)
  end
  return card(model.title, size_html(model.bytes), detail)
end

local function live_card(result, sums)
  if not result.leaks then
    return card('Live at end', size_html(sums.net_bytes),
      'net bytes of the stream')
  end
  local leaks = leaks_model.new(result.leaks)
  return card('Live at end', size_html(leaks.bytes),
    layout.plural(leaks.count, 'block'))
end

local function summary_html(result, sums, opts)
  local cards = {
    card('Allocated', size_html(sums.allocated_bytes),
      with_commas(sums.allocations) .. ' allocations'),
    card('Freed', size_html(sums.freed_bytes), with_commas(sums.free_events) ..
      ' frees, ' .. with_commas(sums.realloc_events) .. ' reallocs'),
    live_card(result, sums),
    peak_card(result),
    card('Net', size_html(sums.net_bytes), 'allocated − freed'),
  }
  -- The share of compiled code, where its events say so (not in a sample,
  -- whose sizes are not the estimates).
  local compiled = result.stream.compiled_bytes or 0
  local known = not result.stream.sample_bytes and not opts.focus and
    not opts.ignore
  if compiled > 0 and sums.allocated_bytes > 0 and known then
    cards[#cards + 1] = card('Compiled code',
      format('%d%%', math.floor(100 * compiled / sums.allocated_bytes + 0.5)),
      'of the bytes allocated, ' .. size_html(compiled) ..
      ', charged to their lines')
  end
  if sums.duration then
    cards[#cards + 1] = card('Duration', human_time(sums.duration),
      with_commas(sums.events) .. ' events')
  else
    cards[#cards + 1] = card('Events', with_commas(sums.events),
      'no time marks')
  end
  return '<section class="cards" aria-label="Totals">' .. concat(cards) ..
    '</section>\n'
end

-- The template ---------------------------------------------------------------

-- The pieces of a template: its text and its slots, {{name}}, in order.
-- A slot alone on its line stands for whole lines: its text ends with a
-- newline, or is empty (the line goes); another stands for text within
-- its line.
local function pieces_of(template)
  local pieces, at = {}, 1
  while true do
    local from, to, name = template:find('{{([%w_]+)}}', at)
    if not from then
      pieces[#pieces + 1] = template:sub(at)
      return pieces
    end
    local line_start = from == 1 or template:sub(from - 1, from - 1) == '\n'
    if line_start and template:sub(to + 1, to + 1) == '\n' then
      to = to + 1
    end
    pieces[#pieces + 1] = template:sub(at, from - 1)
    pieces[#pieces + 1] = { name }
    at = to + 1
  end
end

local templates = {}

-- A template with its parts in place: a line {{>NAME}} stands for the
-- resource NAME (page_head.html: the head both pages share).
local function with_parts(template)
  return (template:gsub('{{>([%w_%.]+)}}\n', function(name)
    return M.resource(name)
  end))
end

-- Writes the template `name` (a resource: page.html, the profile's page;
-- heap_page.html, a heap snapshot's; their head page_head.html) with its
-- slots filled from `fill`:
-- text, or a function(out) that writes it.
function M.write_template(out, name, fill)
  local pieces = templates[name]
  if not pieces then
    pieces = pieces_of(with_parts(M.resource(name)))
    templates[name] = pieces
  end
  for _, piece in ipairs(pieces) do
    if type(piece) == 'string' then
      out:write(piece)
    else
      local value = fill[piece[1]]
      if type(value) == 'function' then
        value(out)
      else
        out:write((assert(value, piece[1])))
      end
    end
  end
end

-- The note of a flame graph, or ''.
local function flame_note(graph, name)
  return graph.note and format('<p class="note" id="note-%s">%s</p>',
    name, escape(graph.note)) or ''
end

-- The page -------------------------------------------------------------------

function M.write(result, out, opts)
  out = out or io.stdout
  opts = opts or {}
  local settings = { top = not opts.all and (opts.top or M.DEFAULT_TOP) or
    nil, sort = opts.sort }
  local data, chart = page_data(result, { max_frames = M.MAX_FRAMES,
    chart_rows = M.CHART_ROWS })
  local sums = totals_model.new(result)
  local prefix = paths.common_prefix(result.stream)
  if prefix then
    out = paths.shortening(out, prefix)
  end
  local name = result.stream.name or 'profile'
  M.write_template(out, 'page.html', {
    title = escape(name),
    style = M.resource('page.css'),
    file_name = escape(basename(name)),
    path = (basename(name) ~= name and '<span class="path">' ..
      escape(name) .. '</span>' or '') .. '\n',
    facts = facts_html(result, opts) .. '\n',
    warning = warnings_html(result),
    summary = summary_html(result, sums, opts),
    allocated_note = flame_note(data.graphs.allocated, 'allocated'),
    live_note = flame_note(data.graphs.live, 'live'),
    timeline = chart_html.html(result, chart) .. '\n',
    grouping = grouping.by(result.grouper.mode) or 'by line',
    tables = tables.html(result, sums, settings) .. '\n',
    aliases = tables.aliases(result.stream) .. '\n',
    holders = holders_section.html(result.holders),
    data = function(to)
      write_json(to, data)
    end,
    script = M.resource('page.js'),
  })
end

M.render = layout.renderer(M.write)

return M
