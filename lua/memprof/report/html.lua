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
-- The page has no reference to anything outside it: the style and the
-- script (html/page.css and html/page.js beside this module, see
-- M.resource) are inline, and the data the script draws (the flame graphs,
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
local report_rows = require('memprof.report.rows')
local columns = require('memprof.analysis.columns')
local flame = require('memprof.report.flame')
local record_shape = require('memprof.record').shape
local sampling = require('memprof.analysis.sampling')
local html_text = require('memprof.report.html.text')
local data_module = require('memprof.report.html.data')
local holders_section = require('memprof.report.html.holders_section')
local peak_model = require('memprof.report.model.peak')
local leaks_model = require('memprof.report.model.leaks')
local temporary_model = require('memprof.report.model.temporary')
local paths = require('memprof.report.paths')
local grouping = require('memprof.report.model.grouping')

local M = {}

local format, concat = string.format, table.concat
local escape, human_size, with_commas = html_text.escape,
  html_text.human_size, html_text.with_commas
local percent, percent_text, human_time, size_html = html_text.percent,
  html_text.percent_text, html_text.human_time, html_text.size_html
local page_data, totals, chart_scales = data_module.page_data,
  data_module.totals, data_module.chart_scales
local write_json, CHART = data_module.write_json, data_module.CHART

-- Rows per table when opts.top is not given.
M.DEFAULT_TOP = 40
-- Stacks listed under a row of the live-at-end table.
M.STACKS_PER_ROW = 3
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

-- HTML helpers ---------------------------------------------------------------

-- A row's name: its title line, and for a stack the callers, hidden in
-- a <details> when there are more than two.
local function name_html(group)
  local lines = layout.title_lines(group)
  local parts = { '<span class="site">', escape(lines[1]), '</span>' }
  local source = layout.row_source_text(group)
  if source then
    parts[#parts + 1] = '<code class="source">' .. escape(source) ..
      '</code>'
  end
  if #lines == 1 then
    return concat(parts)
  end
  local callers = {}
  for i = 2, #lines do
    callers[#callers + 1] = '<span class="caller">' .. escape(lines[i]) ..
      '</span>'
  end
  if #callers <= 2 then
    return concat(parts) .. concat(callers)
  end
  return concat(parts) .. format('<details class="callers"><summary>%d ' ..
    'callers</summary>%s</details>', #callers, concat(callers))
end

-- A share cell: a bar and the percentage.
local function share_cell(part, whole)
  local width = math.max(0, math.min(100, percent(part, whole)))
  return format('<td class="share"><span class="bar"><span style="width:' ..
    '%.1f%%"></span></span><span class="pct">%s</span></td>', width,
    percent_text(part, whole))
end

local function number_cell(number)
  return '<td class="num">' .. with_commas(number) .. '</td>'
end

local function size_cell(bytes)
  return '<td class="num">' .. size_html(bytes) .. '</td>'
end

local function table_html(id, caption, heads, body_rows, foot_rows)
  local parts = { format('<div class="table-wrap"><table id="%s">' ..
    '<caption>%s</caption><thead><tr>', id, caption) }
  for i, head in ipairs(heads) do
    parts[#parts + 1] = format('<th scope="col"%s>%s</th>',
      i > 1 and ' class="num"' or '', head)
  end
  parts[#parts + 1] = '</tr></thead><tbody>'
  for _, row in ipairs(body_rows) do
    parts[#parts + 1] = '<tr>' .. row .. '</tr>'
  end
  parts[#parts + 1] = '</tbody><tfoot>'
  for _, row in ipairs(foot_rows) do
    parts[#parts + 1] = '<tr>' .. row .. '</tr>'
  end
  parts[#parts + 1] = '</tfoot></table></div>'
  return concat(parts, '\n')
end

local function empty_table(id, caption, text)
  return format('<div class="table-wrap" id="%s"><p class="table-title">' ..
    '%s</p><p class="empty">%s</p></div>', id, caption, text)
end

local function more_label(count)
  return format('<th scope="row" class="more">… and %d more %s</th>', count,
    count == 1 and 'row' or 'rows')
end

-- The field table rows are sorted by: bytes_field, or count_field when
-- the options say sort = 'count'.
local function sort_field(settings, bytes_field, count_field)
  return settings.sort == 'count' and count_field or bytes_field
end

-- The tables -----------------------------------------------------------------

-- Allocated bytes and allocations per row (alloc and realloc together),
-- in columns by group id (memprof.analysis.columns: a profile may have a
-- row per place).  Returns the rows shown (records, at most settings.top,
-- sorted by sort_field, then by name) and the rest: { rows = how many,
-- bytes =, count = their sums }.
local AllocatedRow = record_shape({ 'group', 'bytes', 'count' })

local function allocated_rows(result, settings)
  local grouper = result.grouper
  local set = columns.new(AllocatedRow)
  local bytes, count = set.columns.bytes, set.columns.count
  for _, kind in ipairs({ 'alloc', 'realloc' }) do
    local figures = result.sites.of_kind[kind]
    local plus, events = figures.plus, figures.count
    for slot, key in ipairs(figures.keys) do
      local group = report_rows.group_of(grouper, key)
      local id = group.id
      if not set:has(group) then
        set:add(group)
      end
      bytes[id] = bytes[id] + plus[slot]
      count[id] = count[id] + events[slot]
    end
  end
  return set:top({ by = sort_field(settings, 'bytes', 'count'),
    top = settings.top, sums = { 'bytes', 'count' } })
end

-- The body rows of a table of bytes, a count (row[count_field]) and a
-- share of `total`: the rows shown, and in the foot one row summing the
-- rest.
local function share_rows(shown, rest, count_field, total)
  local body = {}
  for i, row in ipairs(shown) do
    body[i] = '<th scope="row">' .. name_html(row.group) .. '</th>' ..
      size_cell(row.bytes) .. number_cell(row[count_field]) ..
      share_cell(row.bytes, total)
  end
  local foot = {}
  if rest.rows > 0 then
    foot[1] = more_label(rest.rows) .. size_cell(rest.bytes) ..
      number_cell(rest[count_field]) .. share_cell(rest.bytes, total)
  end
  return body, foot
end

local function allocated_table(result, settings, sums)
  local shown, rest = allocated_rows(result, settings)
  if #shown == 0 then
    return empty_table('table-allocated', 'Sites by allocated bytes',
      'Nothing was allocated during the profile.')
  end
  local body, foot = share_rows(shown, rest, 'count', sums.allocated)
  foot[#foot + 1] = '<th scope="row">Total</th>' ..
    size_cell(sums.allocated) .. number_cell(sums.allocations) ..
    share_cell(sums.allocated, sums.allocated)
  return table_html('table-allocated', 'Sites by allocated bytes',
    { 'Site', 'Allocated', 'Allocations', 'Share' }, body, foot)
end

local function stack_list_html(stacks)
  if #stacks == 0 then
    return ''
  end
  local shown, rest = layout.split_top(stacks, M.STACKS_PER_ROW)
  local items = {}
  for i, record in ipairs(shown) do
    local names = {}
    for k, frame in ipairs(record.stack.frames) do
      local source = layout.source_text(frame)
      names[k] = escape(frame.name) .. (source and ' <code class="source">' ..
        escape(source) .. '</code>' or '')
    end
    items[i] = format('<li><span class="stack-size">%s in %s</span>' ..
      '<span class="frames">%s</span></li>', human_size(record.bytes),
      layout.plural(record.count, 'block'), concat(names, '<br>'))
  end
  if #rest > 0 then
    local sums = layout.sum(rest, { 'count', 'bytes' })
    items[#items + 1] = format('<li class="more">… and %d more: %s in %s' ..
      '</li>', #rest, human_size(sums.bytes), layout.plural(sums.count,
      'block'))
  end
  return format('<details class="stacks"><summary>allocated from %s' ..
    '</summary><ol>%s</ol></details>', layout.plural(#stacks, 'stack'),
    concat(items))
end

local function live_table(result, settings)
  local leaks = leaks_model.new(result.leaks)
  if leaks.empty then
    return empty_table('table-live', 'Live at end',
      'Every block allocated during the profile was freed.')
  end
  local shown, rest = leaks:rows(settings)
  local body = {}
  for i, row in ipairs(shown) do
    body[i] = '<th scope="row">' .. name_html(row.group) ..
      holders_section.link(result.holders, row.group) ..
      stack_list_html(row.stacks) .. '</th>' .. size_cell(row.bytes) ..
      number_cell(row.count) .. share_cell(row.bytes, leaks.bytes)
  end
  local foot = {}
  if rest.rows > 0 then
    foot[1] = more_label(rest.rows) .. size_cell(rest.bytes) ..
      number_cell(rest.count) .. share_cell(rest.bytes, leaks.bytes)
  end
  foot[#foot + 1] = '<th scope="row">Total live at end</th>' ..
    size_cell(leaks.bytes) .. number_cell(leaks.count) ..
    share_cell(leaks.bytes, leaks.bytes)
  return table_html('table-live', 'Live at end: blocks never freed, by ' ..
    'where they were allocated. ' ..
    escape(leaks.note), { 'Site', 'Live', 'Blocks', 'Share' }, body, foot)
end

local function peak_caption(model)
  if model.at_start then
    return 'Peak: the heap never grew past its size at the start'
  end
  local text = format('Peak holders: %s after event %s',
    model:amount(human_size), with_commas(model.event))
  if model.has_time then
    text = text .. ', at ' .. human_time(model.time or 0)
  end
  if model.whole_heap then
    text = text .. format(', of which %s allocated before the profile',
      human_size(model.before.live_bytes))
  end
  return text
end

-- The row of the blocks allocated before the profile: still live at the
-- peak (when the heap at the start is known), or freed before it.
local function peak_before_row(model)
  local before = model.before
  local name = '<th scope="row">' .. escape(before.name)
  if before.kind == 'live' then
    return name .. ', still live</th>' .. size_cell(before.live_bytes) ..
      '<td></td>' .. share_cell(before.live_bytes, model.bytes)
  elseif before.kind == 'freed' then
    return name .. ', freed before the peak</th>' ..
      size_cell(before.freed_bytes) .. number_cell(before.freed_blocks) ..
      '<td></td>'
  end
  return nil
end

local function peak_table(result, settings)
  local model = peak_model.new(result.peak, result.stream)
  if model.empty then
    return empty_table('table-peak', escape(peak_caption(model)),
      'Nothing was live at the peak.')
  end
  local total = model.bytes
  local shown, rest = model:rows(settings)
  local body, foot = share_rows(shown, rest, 'blocks', total)
  foot[#foot + 1] = peak_before_row(model)
  foot[#foot + 1] = '<th scope="row">Total at the peak</th>' ..
    size_cell(total) .. '<td></td>' .. share_cell(total, total)
  return table_html('table-peak', escape(peak_caption(model)),
    { 'Site', 'Live at the peak', 'Blocks', 'Share' }, body, foot)
end

local function temporary_cells(row)
  return size_cell(row.temporary_bytes) .. number_cell(row.temporary_blocks)
    .. size_cell(row.freed_bytes) .. size_cell(row.live_bytes) ..
    share_cell(row.temporary_bytes, row.bytes)
end

local function temporary_table(result, settings)
  local temporary = temporary_model.new(result.temporary)
  local caption = 'Temporary blocks: ' .. temporary.meaning
  local shown, rest = temporary:rows(settings)
  if #shown == 0 then
    return empty_table('table-temporary', caption,
      'No block was freed that soon.')
  end
  local body = {}
  for i, row in ipairs(shown) do
    body[i] = '<th scope="row">' .. name_html(row.group) .. '</th>' ..
      temporary_cells(row)
  end
  local foot = {}
  if rest.rows > 0 then
    foot[1] = more_label(rest.rows) .. temporary_cells(rest)
  end
  foot[#foot + 1] = '<th scope="row">Total (every row)</th>' ..
    temporary_cells(temporary.totals)
  return table_html('table-temporary', caption, { 'Site', 'Temporary',
    'Blocks', 'Freed later', 'Live at end', 'Temporary share' }, body, foot)
end

-- The page's style and script ----------------------------------------------

-- The style and the script are files of their own, next to this module
-- (html/page.css, html/page.js), so that they can be read and checked
-- as CSS and JavaScript; every page has them inline.  They are found
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
  local paths = {}
  local dir = module_dir()
  if dir then
    paths[1] = dir .. '/html/' .. name
  end
  for template in package.path:gmatch('[^;]+') do
    local prefix = template:match('^(.*)%?%.lua$')
    if prefix then
      paths[#paths + 1] = prefix .. 'memprof/report/html/' .. name
    end
  end
  return paths
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

-- The text of html/NAME, which must not close the element it sits in.
function M.resource(name)
  local text = resources[name]
  if not text then
    text = read_resource(name)
    local closing = name:match('%.css$') and '</style' or '</script'
    if text:lower():find(closing, 1, true) then
      error(format("the HTML page's %s holds %s", name, closing), 0)
    end
    resources[name] = text
  end
  return text
end

-- The template: head and style -----------------------------------------------

local function head_html(result)
  return concat({
    '<!DOCTYPE html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<meta name="generator" content="memprof-report">',
    '<title>memprof: ' .. escape(result.stream.name or 'profile') ..
      '</title>',
    '<style>',
    M.resource('page.css') .. '</style>',
    '</head>',
    '<body>',
  }, '\n') .. '\n'
end

-- The template: header, warnings, summary ------------------------------------

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
      ' named from there on')
  end
  local focus = layout.focus_note(opts)
  if focus ~= '' then
    facts[#facts + 1] = fact('blocks', escape(focus))
  end
  return '<ul class="facts">' .. concat(facts) .. '</ul>'
end

local function header_html(result, opts)
  local name = result.stream.name or 'profile'
  local path = ''
  if basename(name) ~= name then
    path = '<span class="path">' .. escape(name) .. '</span>'
  end
  return concat({
    '<header class="top"><div class="top-inner">',
    '<span class="brand">memprof</span>',
    '<h1 id="file-name">' .. escape(basename(name)) .. '</h1>',
    path,
    facts_html(result, opts),
    '</div></header>',
    '<nav class="sections" aria-label="Sections"><ul>',
    '<li><a href="#flame-graphs">Flame graphs</a></li>',
    '<li><a href="#heap-over-time">Heap over time</a></li>',
    '<li><a href="#top-tables">Top tables</a></li>',
    '</ul></nav>',
  }, '\n') .. '\n'
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

local function live_card(result)
  local leaks = result.leaks
  if not leaks then
    return card('Live at end', size_html(result.heap.total),
      'net bytes of the stream')
  end
  return card('Live at end', size_html(leaks.bytes),
    layout.plural(leaks.count, 'block'))
end

local function summary_html(result, sums, opts)
  local cards = {
    card('Allocated', size_html(sums.allocated),
      with_commas(sums.allocations) .. ' allocations'),
    card('Freed', size_html(sums.freed), with_commas(sums.frees) ..
      ' frees, ' .. with_commas(sums.reallocs) .. ' reallocs'),
    live_card(result),
    peak_card(result),
    card('Net', size_html(sums.net), 'allocated − freed'),
  }
  -- The share of compiled code, where its events say so (not in a sample,
  -- whose sizes are not the estimates).
  local compiled = result.stream.compiled_bytes or 0
  if compiled > 0 and sums.allocated > 0 and not result.stream.sample_bytes
      and not opts.focus and not opts.ignore then
    cards[#cards + 1] = card('Compiled code',
      format('%d%%', math.floor(100 * compiled / sums.allocated + 0.5)),
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

-- The template: flame graphs -------------------------------------------------

local function flame_panel(graph, name, selected)
  local note = graph.note and format('<p class="note" id="note-%s">%s</p>',
    name, escape(graph.note)) or ''
  return format('<div class="flame-panel" role="tabpanel" ' ..
    'id="panel-%s" aria-labelledby="tab-%s"%s>%s<div class="flame-bar" ' ..
    'id="bar-%s"></div><div class="flame" id="flame-%s" data-graph="%s">' ..
    '</div></div>', name, name, selected and '' or ' hidden', note, name,
    name, name)
end

local function tab_button(name, title, selected)
  return format('<button type="button" role="tab" id="tab-%s" ' ..
    'aria-controls="panel-%s" aria-selected="%s" tabindex="%s">%s</button>',
    name, name, tostring(selected), selected and '0' or '-1', title)
end

local LEGEND = '<div class="legend" aria-hidden="true">' ..
  '<span><i style="background:hsl(28,85%,64%)"></i>Lua</span>' ..
  '<span><i style="background:hsl(205,70%,68%)"></i>C function</span>' ..
  '<span><i style="background:hsl(140,50%,60%)"></i>JIT trace</span>' ..
  '<span><i style="background:hsl(220,10%,74%)"></i>VM internal</span>' ..
  '<span><i class="other" style="background-color:hsl(220,8%,82%)"></i>' ..
  'other: frames too small to draw, merged</span>' ..
  '<span>Click a frame to zoom into it, <kbd>Esc</kbd> to zoom out; ' ..
  '<kbd>/</kbd> to search.</span></div>'

local function flames_html(data)
  return concat({
    '<section class="panel" id="flame-graphs" aria-labelledby="flame-title">',
    '<div class="panel-head"><h2 id="flame-title">Flame graphs</h2>',
    '<div class="tabs" role="tablist" aria-label="Flame graph">',
    tab_button('allocated', 'Allocated bytes', true),
    tab_button('live', 'Live at end', false),
    '</div>',
    '<label class="search"><span class="muted">Search</span>' ..
      '<input type="search" id="flame-search" placeholder="frame name, ' ..
      'e.g. string.rep" autocomplete="off" spellcheck="false"></label>',
    '</div>',
    '<p class="note">Callers on top, callees below; a frame\'s width is ' ..
      'its share of the bytes.</p>',
    flame_panel(data.graphs.allocated, 'allocated', true),
    flame_panel(data.graphs.live, 'live', false),
    '<noscript><p class="empty">The flame graphs need JavaScript; the ' ..
      'tables below show the same sites.</p></noscript>',
    LEGEND,
    '</section>',
  }, '\n') .. '\n'
end

-- The template: the heap over time -------------------------------------------

local function fixed(number)
  return format('%.1f', number)
end

-- The area under the highest values, as SVG path data (steps).
local function area_path(rows, scales)
  local base = fixed(scales.y(0))
  local parts = { 'M', fixed(scales.x(rows[1].start)), base }
  for _, row in ipairs(rows) do
    local y = fixed(scales.y(row.high))
    parts[#parts + 1] = 'L' .. fixed(scales.x(row.start)) .. ' ' .. y
    parts[#parts + 1] = 'L' .. fixed(scales.x(row.stop)) .. ' ' .. y
  end
  parts[#parts + 1] = 'L' .. fixed(scales.x(rows[#rows].stop)) .. ' ' ..
    base .. 'Z'
  return concat(parts, ' ')
end

local function outline_path(rows, scales)
  local parts = {}
  for i, row in ipairs(rows) do
    local y = fixed(scales.y(row.high))
    parts[#parts + 1] = (i == 1 and 'M' or 'L') .. fixed(scales.x(row.start))
      .. ' ' .. y
    parts[#parts + 1] = 'L' .. fixed(scales.x(row.stop)) .. ' ' .. y
  end
  return concat(parts, ' ')
end

local function grid_svg(scales)
  local parts = { '<g class="grid">' }
  local axis = { '<g class="axis">' }
  local left, right = CHART.left, CHART.width - CHART.right
  for _, tick in ipairs(scales.yticks) do
    local y = fixed(scales.y(tick.value))
    parts[#parts + 1] = format('<line x1="%d" x2="%d" y1="%s" y2="%s"/>',
      left, right, y, y)
    axis[#axis + 1] = format('<text x="%d" y="%s" text-anchor="end" ' ..
      'dy="4">%s</text>', left - 8, y, tick.label)
  end
  local bottom = CHART.height - CHART.bottom
  for _, tick in ipairs(scales.xticks) do
    axis[#axis + 1] = format('<text x="%s" y="%d" text-anchor="middle">' ..
      '%s</text>', fixed(scales.x(tick.value)), bottom + 18, tick.label)
  end
  parts[#parts + 1] = '</g>'
  axis[#axis + 1] = '</g>'
  return concat(parts) .. concat(axis)
end

-- The label of the peak on the chart (model: of the peak view, or nil
-- when it was not computed: then the chart's highest row).
local function peak_label(model, bytes, time)
  local what = 'peak'
  if model then
    what = model.name
    if model.whole_heap then
      bytes = model.bytes
    end
    if model.at_start then
      return format('%s %s at the start', what, human_size(bytes))
    end
  end
  return format('%s %s at %s', what, human_size(bytes), human_time(time))
end

-- The peak: a dashed line at its time, a dot at its height, a label.
local function peak_marker_svg(result, chart, scales)
  local peak_row = chart.shown.rows[chart.shown.peak_row]
  local peak = result.peak
  local bytes = peak and peak.bytes or peak_row.high
  local time = peak and peak.time or peak_row.start
  local x = math.max(scales.x(peak_row.start), math.min(scales.x(time),
    scales.x(peak_row.stop)))
  local y = scales.y(bytes)
  local on_the_right = x > CHART.width * 0.7
  return format('<g class="peak" id="peak-marker"><line x1="%s" x2="%s" ' ..
    'y1="%d" y2="%d"/><circle cx="%s" cy="%s" r="4.5"/><text x="%s" ' ..
    'y="%s" text-anchor="%s">%s</text></g>', fixed(x), fixed(x), CHART.top,
    CHART.height - CHART.bottom, fixed(x), fixed(y),
    fixed(x + (on_the_right and -8 or 8)), fixed(math.max(y - 8, 14)),
    on_the_right and 'end' or 'start', escape(peak_label(peak and
      peak_model.new(peak, result.stream), bytes, time)))
end

local function chart_svg(result, chart)
  local rows = chart.shown.rows
  local scales = chart_scales(rows)
  local plot_w = CHART.width - CHART.left - CHART.right
  local plot_h = CHART.height - CHART.top - CHART.bottom
  return concat({
    format('<svg id="chart-svg" viewBox="0 0 %d %d" role="img" ' ..
      'tabindex="0" aria-label="Live bytes over time; the peak is %s">',
      CHART.width, CHART.height, human_size(result.peak and
      result.peak.bytes or 0)),
    grid_svg(scales),
    '<path class="area" d="' .. area_path(rows, scales) .. '"/>',
    '<path class="outline" d="' .. outline_path(rows, scales) .. '"/>',
    peak_marker_svg(result, chart, scales),
    format('<line class="guide" id="chart-guide" x1="0" x2="0" y1="%d" ' ..
      'y2="%d" visibility="hidden"/>', CHART.top, CHART.height - CHART.bottom),
    format('<rect class="overlay" id="chart-overlay" x="%d" y="%d" ' ..
      'width="%d" height="%d"/>', CHART.left, CHART.top, plot_w, plot_h),
    '</svg>',
  }, '\n')
end

local function chart_note(chart)
  return format('<p class="note">Live bytes (allocated minus freed since ' ..
    'the start): the highest value in each %s. Hover or use the arrow ' ..
    'keys on the chart for details.</p>', human_time(chart.shown.width))
end

local function timeline_html(result, chart)
  local body
  if chart then
    body = chart_note(chart) .. '<div class="chart">' ..
      chart_svg(result, chart) .. '</div>'
  elseif result.stream.has_time then
    body = '<p class="empty">The timeline view was not computed.</p>'
  else
    body = '<p class="empty" id="no-time-marks">This profile has no time ' ..
      'marks, so the heap cannot be drawn over time. Record with ' ..
      '<code>memprof.start(path, {timestamps = true})</code>.</p>'
  end
  return concat({
    '<section class="panel" id="heap-over-time" ' ..
      'aria-labelledby="time-title">',
    '<div class="panel-head"><h2 id="time-title">Heap over time</h2></div>',
    body,
    '</section>',
  }, '\n') .. '\n'
end

-- The template: tables, aliases, data, script --------------------------------

local function aliases_html(stream)
  local aliases = stream.aliases or {}
  if #aliases == 0 then
    return ''
  end
  local parts = { '<details class="aliases"><summary>Aliases of multi-line ' ..
    'chunk names</summary>' }
  for _, alias in ipairs(aliases) do
    parts[#parts + 1] = format('<p class="mono">%s:</p><pre>%s</pre>',
      escape(alias.name), escape(alias.chunkname))
  end
  parts[#parts + 1] = '</details>'
  return concat(parts)
end

-- The table of a view, made by make(result, settings), or, when the
-- analysis did not compute the view, an empty table that says so.
local function view_table(result, settings, view, id, caption, make)
  if not result[view] then
    return empty_table(id, caption,
      format('The %s view was not computed.', view))
  end
  return make(result, settings)
end

local function tables_html(result, sums, settings)
  return concat({
    '<section class="panel" id="top-tables" aria-labelledby="tables-title">',
    '<div class="panel-head"><h2 id="tables-title">Top tables</h2></div>',
    format('<p class="note">Rows are grouped %s. Sizes are in bytes ' ..
      '(KiB = 1024 B); hover over a size for the exact number.</p>',
      grouping.by(result.grouper.mode) or 'by line'),
    '<div class="tables">',
    allocated_table(result, settings, sums),
    view_table(result, settings, 'leaks', 'table-live', 'Live at end',
      live_table),
    view_table(result, settings, 'peak', 'table-peak', 'Peak holders',
      peak_table),
    view_table(result, settings, 'temporary', 'table-temporary',
      'Temporary blocks', temporary_table),
    '</div>',
    aliases_html(result.stream),
    '</section>',
  }, '\n') .. '\n'
end

local function write_data(out, data)
  out:write('<script type="application/json" id="memprof-data">')
  write_json(out, data)
  out:write('</script>\n')
end

local FOOTER = '<footer>Generated by memprof-report. This page is one ' ..
  'file with no external resources.</footer>\n' ..
  '<div class="tooltip" id="tooltip" role="tooltip" hidden></div>\n'

-- The template: the script ---------------------------------------------------

local function script_html()
  return '<script>\n' .. M.resource('page.js') .. '</script>\n</body>\n' ..
    '</html>\n'
end

-- The page -------------------------------------------------------------------

function M.write(result, out, opts)
  out = out or io.stdout
  opts = opts or {}
  local settings = { top = not opts.all and (opts.top or M.DEFAULT_TOP) or
    nil, sort = opts.sort }
  local data, chart = page_data(result, { max_frames = M.MAX_FRAMES,
    chart_rows = M.CHART_ROWS })
  local sums = totals(result)
  local prefix = paths.common_prefix(result.stream)
  if prefix then
    out = paths.shortening(out, prefix)
  end
  out:write(head_html(result))
  out:write(header_html(result, opts))
  out:write('<main>\n')
  out:write(warnings_html(result))
  out:write(summary_html(result, sums, opts))
  out:write(flames_html(data))
  out:write(timeline_html(result, chart))
  out:write(tables_html(result, sums, settings))
  out:write(holders_section.html(result.holders))
  out:write('</main>\n')
  out:write(FOOTER)
  write_data(out, data)
  out:write(script_html())
end

M.render = layout.renderer(M.write)

return M
