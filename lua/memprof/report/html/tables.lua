-- memprof.report.html.tables: the top tables of the HTML page, laid out
-- from the row models: sites by allocated bytes (the default sections'
-- memprof.report.model.sections), live at end
-- (memprof.report.model.leaks), the peak's holders (model.peak), the
-- temporary blocks (model.temporary), and the aliases of multi-line
-- chunk names.  memprof.report.html puts them into the page's template.
--
--   tables.html(result, sums, settings) -> the tables, one per line
--     sums      the profile's totals (memprof.report.model.totals)
--     settings  top: rows per table (nil: every row); sort: 'bytes' or
--               'count'
--   tables.aliases(stream) -> the aliases' <details>, or ''

local layout = require('memprof.report.layout')
local sections_model = require('memprof.report.model.sections')
local html_text = require('memprof.report.html.text')
local holders_section = require('memprof.report.html.holders_section')
local peak_model = require('memprof.report.model.peak')
local leaks_model = require('memprof.report.model.leaks')
local temporary_model = require('memprof.report.model.temporary')

local M = {}

local format, concat = string.format, table.concat
local escape, human_size, with_commas = html_text.escape,
  html_text.human_size, html_text.with_commas
local percent, percent_text, human_time, size_html = html_text.percent,
  html_text.percent_text, html_text.human_time, html_text.size_html

-- Stacks listed under a row of the live-at-end table.
M.STACKS_PER_ROW = 3

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

-- The one table of every page (the profile's, a heap snapshot's): `heads`
-- (html), the rows of its body and of its foot (each its cells, html);
-- `id` and `caption` when it has them; numeric[i]: whether column i holds
-- numbers, its head aligned as they are (default: every column but the
-- first).
local function table_html(id, caption, heads, body_rows, foot_rows, numeric)
  local parts = { format('<div class="table-wrap"><table%s>%s<thead><tr>',
    id and format(' id="%s"', id) or '',
    caption and '<caption>' .. caption .. '</caption>' or '') }
  for i, head in ipairs(heads) do
    local number = numeric and numeric[i] or not numeric and i > 1
    parts[#parts + 1] = format('<th scope="col"%s>%s</th>',
      number and ' class="num"' or '', head)
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

M.table_html = table_html

local function empty_table(id, caption, text)
  return format('<div class="table-wrap" id="%s"><p class="table-title">' ..
    '%s</p><p class="empty">%s</p></div>', id, caption, text)
end

local function more_label(count)
  return format('<th scope="row" class="more">… and %d more %s</th>', count,
    count == 1 and 'row' or 'rows')
end

-- The tables -----------------------------------------------------------------

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
  local shown, rest = sections_model.new(result, { top = settings.top,
    sort = settings.sort }):allocated()
  if #shown == 0 then
    return empty_table('table-allocated', 'Sites by allocated bytes',
      'Nothing was allocated during the profile.')
  end
  local body, foot = share_rows(shown, rest, 'count', sums.allocated_bytes)
  foot[#foot + 1] = '<th scope="row">Total</th>' ..
    size_cell(sums.allocated_bytes) .. number_cell(sums.allocations) ..
    share_cell(sums.allocated_bytes, sums.allocated_bytes)
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


function M.html(result, sums, settings)
  return concat({
    allocated_table(result, settings, sums),
    view_table(result, settings, 'leaks', 'table-live', 'Live at end',
      live_table),
    view_table(result, settings, 'peak', 'table-peak', 'Peak holders',
      peak_table),
    view_table(result, settings, 'temporary', 'table-temporary',
      'Temporary blocks', temporary_table),
  }, '\n')
end

M.aliases = aliases_html

return M
