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
local heap = require('memprof.analysis.heap')
local leaks_module = require('memprof.analysis.leaks')
local sampling = require('memprof.analysis.sampling')
local timeline = require('memprof.analysis.timeline')
local utf8 = require('memprof.encode.utf8')
local json_text = require('memprof.encode.json_text')

local M = {}

local format, concat, floor = string.format, table.concat, math.floor

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

-- Text -----------------------------------------------------------------------

-- Text with every byte that is not valid UTF-8 replaced by U+FFFD (chunk
-- names are bytes, the page is UTF-8).
local function clean_text(text)
  return utf8.clean(tostring(text))
end

local HTML_ESCAPES = { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;',
  ['"'] = '&quot;', ["'"] = '&#39;' }

local function escape(text)
  return (clean_text(text):gsub('[&<>"\']', HTML_ESCAPES))
end

-- 1536 -> '1.50 KiB': three significant digits (up to TiB).
local function human_size(bytes)
  local scaled, unit = layout.scale_size(bytes, 5)
  if unit == 'B' then
    return format('%d B', bytes)
  end
  local magnitude = math.abs(scaled)
  local decimals = magnitude < 10 and 2 or magnitude < 100 and 1 or 0
  return format('%.' .. decimals .. 'f %s', scaled, unit)
end

-- 1234567 -> '1,234,567'.
local function with_commas(number)
  local text = format('%d', number)
  local sign, digits = text:match('^(-?)(%d+)$')
  digits = digits:reverse():gsub('(%d%d%d)', '%1,'):reverse()
  return sign .. digits:gsub('^,', '')
end

local function percent(part, whole)
  if whole == 0 then
    return 0
  end
  return part / whole * 100
end

local function percent_text(part, whole)
  local value = percent(part, whole)
  if value ~= 0 and math.abs(value) < 0.1 then
    return '&lt;0.1%'
  end
  return format('%.1f%%', value)
end

-- Nanoseconds in the unit that suits `scale` (ns): '850 µs', '12.3 ms'.
local function time_unit(scale)
  if scale >= 1e9 then
    return 1e9, 's'
  elseif scale >= 1e6 then
    return 1e6, 'ms'
  end
  return 1e3, 'µs'
end

local function human_time(ns)
  if ns == 0 then
    return '0 ms'
  end
  local unit, name = time_unit(ns)
  local scaled = ns / unit
  local decimals = scaled < 10 and 2 or scaled < 100 and 1 or 0
  return format('%.' .. decimals .. 'f %s', scaled, name)
end

-- A size with its exact number of bytes as a tooltip.
local function size_html(bytes)
  return format('<span title="%s bytes">%s</span>', with_commas(bytes),
    human_size(bytes))
end

-- JSON -----------------------------------------------------------------------

-- The page's data is JSON inside a <script> element ('<', '>' and '&'
-- escaped), its fractions with 6 digits (memprof.encode.json_text).
local JSON = { script = true, float = '%.6g' }

local array = json_text.array

local function json_string(text)
  return json_text.string(text, JSON)
end

-- Writes the JSON text of value to out, in pieces (the frame table of a
-- large profile is tens of MB of text).
local function write_json(out, value)
  local writer = json_text.writer(out, JSON)
  writer:value(value)
  writer:finish()
end

-- The flame pass and the paths of the graphs: memprof.report.flame.

function M.flame_pass()
  return flame.pass()
end

function M.passes()
  return { { name = 'flame', pass = M.flame_pass() } }
end

-- Stacks for the flame graphs, from the result -------------------------------

-- Appends the path of a row of the report: its stack, or the row alone
-- (the site itself when the row is a site without a stack).
local function append_group(paths, group, bytes, count)
  if group.frames then
    flame.append(paths, nil, group, bytes, count)
  else
    flame.append(paths, group.note == 'no stack' and group.site or group,
      nil, bytes, count)
  end
end

-- Allocated bytes per row of the sites pass (per stack when the rows are
-- stacks).
local function allocated_by_row(result)
  local paths = flame.paths()
  for _, kind in ipairs({ 'alloc', 'realloc' }) do
    local figures = result.sites.of_kind[kind]
    local plus, count = figures.plus, figures.count
    for slot, key in ipairs(figures.keys) do
      append_group(paths, key, plus[slot], count[slot])
    end
  end
  return paths
end

local function live_from_leaks(leaks)
  local paths = flame.paths()
  local counts, bytes = leaks.columns.count, leaks.columns.bytes
  for _, group in ipairs(leaks.groups) do
    -- The blocks that no stack accounts for go under the row's name.
    local id = group.id
    local count, size = counts[id], bytes[id]
    leaks_module.each_stack(leaks, group, function(stack, stack_count,
        stack_bytes)
      flame.append(paths, nil, stack, stack_bytes, stack_count)
      count, size = count - stack_count, size - stack_bytes
    end)
    if count > 0 then
      append_group(paths, group, size, count)
    end
  end
  return paths
end

local function live_from_heap(heap_pass)
  local paths = flame.paths()
  local holds, allocs, frees = heap_pass.holds, heap_pass.allocs,
    heap_pass.frees
  for slot, key in ipairs(heap_pass.keys) do
    if holds[slot] > 0 and key.source ~= 'before' then
      append_group(paths, key, holds[slot], allocs[slot] - frees[slot])
    end
  end
  return paths
end

local function stack_records(result)
  if result.flame then
    return result.flame.allocated, result.flame.live
  end
  local live
  if result.leaks then
    live = live_from_leaks(result.leaks)
  else
    live = live_from_heap(result.heap)
  end
  return allocated_by_row(result), live
end

local GROUPING_WORDS = { line = 'line', ['function'] = 'function',
  caller = 'calling line', stack = 'call stack' }

-- Why a graph is not made of whole call stacks, or nil.
local function flame_note(result, which)
  local stream = result.stream
  if not stream.has_stacks then
    return 'This profile has no call stacks, so each frame is one site. ' ..
      'Record with memprof.start(path, {stack_depth = N}) to see who ' ..
      'called what.'
  end
  local mode = result.grouper.mode
  if which == 'allocated' and not result.flame and mode ~= 'stack' then
    return format('The analysis kept these bytes per %s, not per call ' ..
      'stack: each frame is one row of the report. Generate the page ' ..
      'with memprof-report --format=html for whole stacks.',
      GROUPING_WORDS[mode])
  end
  return nil
end

-- Flame trees ----------------------------------------------------------------

-- Interns frames by name, numbered from 0 (a large profile has hundreds
-- of thousands of frames: two arrays and an index).  The page's frames
-- table lists only the frames the graphs show, numbered as they are
-- written (shown_number): a graph shows at most M.MAX_FRAMES.
local function new_frame_table()
  return { names = {}, sources = {}, id_of = {},
    shown = { number_of = {}, ids = {} } }
end

-- Once the graphs are made: the names and sources of the frames shown,
-- in the order of their numbers, and no more the others'.
local function keep_shown(frames)
  local shown = frames.shown
  local names, sources = {}, {}
  for i, id in ipairs(shown.ids) do
    names[i], sources[i] = frames.names[id + 1], frames.sources[id + 1]
  end
  frames.names, frames.sources, frames.id_of = names, sources, false
  shown.number_of, shown.ids = false, false
end

-- The JSON value of the page's frames table (after keep_shown): the list
-- of { name =, source = } of the frames shown, written frame by frame.
local function frames_json(frames)
  return json_text.custom(function(writer)
    writer:part('[')
    local names, sources = frames.names, frames.sources
    for i = 1, #names do
      writer:part((i > 1 and ',{"name":' or '{"name":') ..
        json_string(names[i]) .. ',"source":' .. json_string(sources[i]) ..
        '}')
    end
    writer:part(']')
  end)
end

-- The number of `key` in a list numbered from 0 (its place in `list`,
-- less one), found in `index`; a new key is appended.  Returns the
-- number, and whether the key is new.
local function intern(index, list, key)
  local number = index[key]
  if number then
    return number, false
  end
  number = #list
  list[number + 1] = key
  index[key] = number
  return number, true
end

local function frame_id(frames, site)
  local id, new = intern(frames.id_of, frames.names, clean_text(site.name))
  if new then
    frames.sources[id + 1] = site.source or 'lua'
  end
  return id
end

-- The number of frame `id` in the page's frames table, given when a
-- graph first shows it.
local function shown_number(frames, id)
  return (intern(frames.shown.number_of, frames.shown.ids, id))
end

-- The tree of the paths (memprof.report.flame) as JSON text (written as
-- it is), how many of its frames were merged, and its top.
local function flame_tree(paths, frames)
  local text, merged, top = flame.tree(paths, {
    frame_id = function(site)
      return frame_id(frames, site)
    end,
    name_of = function(id)
      return frames.names[id + 1]
    end,
    number_of = function(id)
      return shown_number(frames, id)
    end,
    max_nodes = M.MAX_FRAMES, json = JSON })
  return json_text.raw(text), merged, top
end

-- What the graphs count, and the names of their roots.
local FLAME_TITLES = {
  allocated = { counted = 'allocations', root = 'all allocations' },
  live = { counted = 'blocks', root = 'all live blocks' },
}

-- The share of a tree's bytes in frames of compiled code (an "other"
-- box has no frame).
local function trace_share(top, frames)
  local bytes = 0
  for i, id in ipairs(top.frames) do
    if frames.sources[id + 1] == 'trace' then
      bytes = bytes + top.sizes[i]
    end
  end
  return percent(bytes, top.bytes)
end

-- A note for a tree mostly made of traces without callers.
local function trace_note(top, frames)
  local share = trace_share(top, frames)
  if share < 5 then
    return nil
  end
  return format('%.0f%% of these bytes were allocated by compiled code ' ..
    '(JIT traces) whose callers the profile does not give: each place ' ..
    'where traces start is one frame.', share)
end

local function flame_graph(result, name, records, frames)
  local titles = FLAME_TITLES[name]
  local root, dropped, top = flame_tree(records, frames)
  local notes = {}
  notes[#notes + 1] = flame_note(result, name)
  notes[#notes + 1] = trace_note(top, frames)
  if dropped > 0 then
    notes[#notes + 1] = format('The %s smallest frames are merged into ' ..
      '"other" boxes, to keep the page light.', with_commas(dropped))
  end
  return { counted = titles.counted, root_name = titles.root, root = root,
    note = #notes > 0 and concat(notes, ' ') or nil }
end

local function flame_graphs(result, frames)
  local allocated, live = stack_records(result)
  local graphs = { allocated = flame_graph(result, 'allocated', allocated,
    frames) }
  -- A tree of a large profile takes tens of MB while it is made, then
  -- is garbage: the collector would not have freed the first before the
  -- second is made, nor the second before the tables of the page are.
  collectgarbage('collect')
  graphs.live = flame_graph(result, 'live', live, frames)
  keep_shown(frames)
  collectgarbage('collect')
  return graphs
end

-- Summary figures ------------------------------------------------------------

local function sum_kind(result, kind, field)
  local figures = result.sites.of_kind[kind]
  local total, values = 0, figures[field]
  for slot = 1, #figures.keys do
    total = total + values[slot]
  end
  return total
end

local function totals(result)
  local t = {
    allocated = sum_kind(result, 'alloc', 'plus') +
      sum_kind(result, 'realloc', 'plus'),
    allocations = sum_kind(result, 'alloc', 'count') +
      sum_kind(result, 'realloc', 'count'),
    freed = sum_kind(result, 'realloc', 'minus') +
      sum_kind(result, 'free', 'minus'),
    frees = sum_kind(result, 'free', 'count'),
    reallocs = sum_kind(result, 'realloc', 'count'),
    net = result.heap.total,
    events = result.stream.events,
  }
  if result.stream.has_time then
    t.duration = result.timeline and result.timeline.duration or
      result.stream.time
  end
  return t
end

-- Chart geometry and scales --------------------------------------------------

local CHART = { width = 1000, height = 280, left = 76, right = 24, top = 28,
  bottom = 40 }

-- The smallest of 1, 2, 5 times a power of ten that is at least `raw`.
local function nice_step(raw)
  if raw <= 0 then
    return 1
  end
  local power = 10 ^ floor(math.log(raw) / math.log(10))
  for _, factor in ipairs({ 1, 2, 5, 10 }) do
    if factor * power >= raw * (1 - 1e-9) then
      return factor * power
    end
  end
  return 10 * power
end

-- Ticks of a byte axis from low to high: { value, label } with round
-- values in the unit of the largest.
local function byte_ticks(low, high)
  local _, name, unit = layout.scale_size(math.max(math.abs(low),
    math.abs(high)), 5)
  local step = nice_step((high - low) / unit / 4) * unit
  local ticks = {}
  local value = floor(low / step) * step
  repeat
    local label = value == 0 and '0' or
      format('%g %s', value / unit, name)
    ticks[#ticks + 1] = { value = value, label = label }
    value = value + step
  until ticks[#ticks].value >= high - step * 1e-9 and #ticks >= 2
  return ticks
end

local function time_ticks(stop)
  local unit, name = time_unit(stop)
  local step = nice_step(stop / unit / 6) * unit
  local ticks = {}
  local value = 0
  while value <= stop * (1 + 1e-9) do
    ticks[#ticks + 1] = { value = value,
      label = format('%g %s', value / unit, name) }
    value = value + step
  end
  return ticks
end

-- The chart's scales: x(ns) and y(bytes) in the SVG's units.
local function chart_scales(rows)
  local low, high = 0, 0
  for _, row in ipairs(rows) do
    low = math.min(low, row.high, row.last)
    high = math.max(high, row.high)
  end
  if high == low then
    high = low + 1024
  end
  local yticks = byte_ticks(low, high)
  local bottom_value, top_value = yticks[1].value, yticks[#yticks].value
  local stop = rows[#rows].stop
  local plot_w = CHART.width - CHART.left - CHART.right
  local plot_h = CHART.height - CHART.top - CHART.bottom
  return {
    stop = stop, yticks = yticks, xticks = time_ticks(stop),
    x = function(ns)
      return CHART.left + ns / stop * plot_w
    end,
    y = function(bytes)
      return CHART.top + (top_value - bytes) / (top_value - bottom_value) *
        plot_h
    end,
  }
end

-- The page's data ------------------------------------------------------------

local function timeline_data(result)
  if not (result.timeline and result.stream.has_time) then
    return nil
  end
  local shown = timeline.rows(result.timeline, M.CHART_ROWS)
  local rows = array()
  for i, row in ipairs(shown.rows) do
    rows[i] = array({ row.start, row.stop, row.high, row.last, row.events })
  end
  return { rows = rows, width = shown.width, peak_row = shown.peak_row - 1,
    plot = { width = CHART.width, left = CHART.left, right = CHART.right },
    shown = shown }
end

local function page_data(result)
  local frames = new_frame_table()
  local graphs = flame_graphs(result, frames)
  local data = {
    file = result.stream.name or '',
    frames = frames_json(frames),
    graphs = graphs,
  }
  local chart = timeline_data(result)
  if chart then
    data.timeline = { rows = chart.rows, width = chart.width,
      peak_row = chart.peak_row, plot = chart.plot }
  end
  return data, chart
end

-- HTML helpers ---------------------------------------------------------------

-- A row's name: its title line, and for a stack the callers, hidden in
-- a <details> when there are more than two.
local function name_html(group)
  local lines = layout.title_lines(group)
  local parts = { '<span class="site">', escape(lines[1]), '</span>' }
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
      names[k] = escape(frame.name)
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
  local leaks = result.leaks
  if not leaks then
    return empty_table('table-live', 'Live at end',
      'The leaks view was not computed.')
  end
  if #leaks.groups == 0 then
    return empty_table('table-live', 'Live at end',
      'Every block allocated during the profile was freed.')
  end
  local shown, rest = leaks:top({ by = sort_field(settings, 'bytes',
    'count'), top = settings.top, sums = { 'bytes', 'count' } })
  local body = {}
  for i, row in ipairs(shown) do
    body[i] = '<th scope="row">' .. name_html(row.group) ..
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
    escape(layout.collection_note(leaks.collected_at_stop)), { 'Site', 'Live', 'Blocks', 'Share' },
    body, foot)
end

-- What the peak is: the VM's whole heap when the stream records the heap
-- at the start, else the growth above it.
local function peak_amount(peak)
  if peak.heap_bytes then
    return format('%s %s', peak.estimate and 'estimated peak heap' or
      'peak heap', human_size(peak.heap_bytes))
  end
  return format('%s above the heap at the start (not recorded in this ' ..
    'profile)', human_size(peak.bytes))
end

local function peak_caption(result)
  local peak = result.peak
  if peak.event == 0 then
    return 'Peak: the heap never grew past its size at the start'
  end
  local text = format('Peak holders: %s after event %s', peak_amount(peak),
    with_commas(peak.event))
  if result.stream.has_time then
    text = text .. ', at ' .. human_time(peak.time or 0)
  end
  if peak.heap_bytes then
    text = text .. format(', of which %s allocated before the profile',
      human_size(peak.before.live_bytes))
  end
  return text
end

-- The row of the blocks allocated before the profile: still live at the
-- peak (when the heap at the start is known), or freed before it.
local function peak_before_row(peak)
  local before = peak.before
  local name = '<th scope="row">' .. escape(heap.BEFORE_PROFILING.name)
  if before.live_bytes then
    return name .. ', still live</th>' .. size_cell(before.live_bytes) ..
      '<td></td>' .. share_cell(before.live_bytes, peak.heap_bytes)
  end
  if before.freed_blocks == 0 then
    return nil
  end
  return name .. ', freed before the peak</th>' ..
    size_cell(before.freed_bytes) .. number_cell(before.freed_blocks) ..
    '<td></td>'
end

local function peak_table(result, settings)
  local peak = result.peak
  if not peak then
    return empty_table('table-peak', 'Peak holders',
      'The peak view was not computed.')
  end
  if #peak.groups == 0 then
    return empty_table('table-peak', escape(peak_caption(result)),
      'Nothing was live at the peak.')
  end
  local total = peak.heap_bytes or peak.bytes
  -- The rows are in order of bytes.
  local shown, rest = peak:top({ by = settings.sort == 'count' and 'blocks',
    top = settings.top, sums = { 'bytes', 'blocks' } })
  local body, foot = share_rows(shown, rest, 'blocks', total)
  foot[#foot + 1] = peak_before_row(peak)
  foot[#foot + 1] = '<th scope="row">Total at the peak</th>' ..
    size_cell(total) .. '<td></td>' .. share_cell(total, total)
  return table_html('table-peak', escape(peak_caption(result)),
    { 'Site', 'Live at the peak', 'Blocks', 'Share' }, body, foot)
end

local function temporary_caption(limit)
  if limit == 0 then
    return 'Temporary blocks: freed before any other allocation'
  end
  return format('Temporary blocks: freed within %s',
    layout.plural(limit, 'other allocation'))
end

local function temporary_cells(row)
  return size_cell(row.temporary_bytes) .. number_cell(row.temporary_blocks)
    .. size_cell(row.freed_bytes) .. size_cell(row.live_bytes) ..
    share_cell(row.temporary_bytes, row.bytes)
end

local function temporary_table(result, settings)
  local temporary = result.temporary
  if not temporary then
    return empty_table('table-temporary', 'Temporary blocks',
      'The temporary view was not computed.')
  end
  local caption = temporary_caption(temporary.limit)
  local shown, rest = temporary:top({ keep = 'temporary_blocks',
    by = sort_field(settings, 'temporary_bytes', 'temporary_blocks'),
    top = settings.top, sums = { 'bytes', 'temporary_bytes',
      'temporary_blocks', 'freed_bytes', 'live_bytes' } })
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

local VERSION_NAMES = { [3] = "Tarantool's format",
  [100] = 'extended: stacks and time marks' }

local GROUPING_NAMES = { line = 'by line', ['function'] = 'by function',
  caller = 'by caller', stack = 'by stack' }

local function fact(label, value)
  return format('<li>%s <b>%s</b></li>', label, value)
end

local function facts_html(result)
  local stream = result.stream
  local version = stream.version or '?'
  local facts = {
    fact('format', escape(version) .. (VERSION_NAMES[version] and
      ' (' .. VERSION_NAMES[version] .. ')' or '')),
    fact('events', with_commas(stream.events or 0)),
    fact('call stacks', stream.has_stacks and 'yes' or 'no'),
    fact('time marks', stream.has_time and 'yes' or 'no'),
    fact('rows grouped', GROUPING_NAMES[result.grouper.mode] or
      escape(result.grouper.mode)),
  }
  if stream.sample_bytes then
    local note = sampling.note(stream.sample_bytes):gsub('^sampled: ', '')
    facts[#facts + 1] = fact('sampled', escape(note))
  end
  if stream.warning then
    facts[#facts + 1] = fact('stream', 'truncated')
  end
  return '<ul class="facts">' .. concat(facts) .. '</ul>'
end

local function header_html(result)
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
    facts_html(result),
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
  local peak = result.peak
  if not peak then
    return card('Peak', '–', 'not computed')
  end
  local detail = format('after event %s', with_commas(peak.event))
  if peak.event == 0 then
    detail = 'at the start'
  elseif result.stream.has_time then
    detail = 'at ' .. human_time(peak.time or 0)
  end
  if peak.heap_bytes then
    return card(peak.estimate and 'Estimated peak heap' or 'Peak heap',
      size_html(peak.heap_bytes), detail)
  end
  return card('Peak above start', size_html(peak.bytes), detail)
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

local function summary_html(result, sums)
  local cards = {
    card('Allocated', size_html(sums.allocated),
      with_commas(sums.allocations) .. ' allocations'),
    card('Freed', size_html(sums.freed), with_commas(sums.frees) ..
      ' frees, ' .. with_commas(sums.reallocs) .. ' reallocs'),
    live_card(result),
    peak_card(result),
    card('Net', size_html(sums.net), 'allocated − freed'),
  }
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

local function peak_label(peak, bytes, time)
  local what = 'peak'
  if peak and peak.heap_bytes then
    what, bytes = peak.estimate and 'estimated peak heap' or 'peak heap',
      peak.heap_bytes
  end
  if peak and peak.event == 0 then
    return format('%s %s at the start', what, human_size(bytes))
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
    on_the_right and 'end' or 'start', escape(peak_label(peak, bytes, time)))
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

local function tables_html(result, sums, settings)
  return concat({
    '<section class="panel" id="top-tables" aria-labelledby="tables-title">',
    '<div class="panel-head"><h2 id="tables-title">Top tables</h2></div>',
    format('<p class="note">Rows are grouped %s. Sizes are in bytes ' ..
      '(KiB = 1024 B); hover over a size for the exact number.</p>',
      GROUPING_NAMES[result.grouper.mode] or 'by line'),
    '<div class="tables">',
    allocated_table(result, settings, sums),
    live_table(result, settings),
    peak_table(result, settings),
    temporary_table(result, settings),
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
  local data, chart = page_data(result)
  local sums = totals(result)
  out:write(head_html(result))
  out:write(header_html(result))
  out:write('<main>\n')
  out:write(warnings_html(result))
  out:write(summary_html(result, sums))
  out:write(flames_html(data))
  out:write(timeline_html(result, chart))
  out:write(tables_html(result, sums, settings))
  out:write('</main>\n')
  out:write(FOOTER)
  write_data(out, data)
  out:write(script_html())
end

M.render = layout.renderer(M.write)

return M
