-- memprof.report.html.chart: the heap over time on the HTML page, as
-- SVG: the area under the highest values, their outline, the grid and
-- the axes, the peak's marker and label (memprof.report.model.peak).
-- The rows and scales are memprof.report.html.data's.
--
--   chart.html(result, chart) -> the body of the panel: a note and the
--     chart, or, without one (chart nil), why there is none

local html_text = require('memprof.report.html.text')
local data_module = require('memprof.report.html.data')
local peak_model = require('memprof.report.model.peak')

local M = {}

local format, concat = string.format, table.concat
local escape, human_size, human_time = html_text.escape,
  html_text.human_size, html_text.human_time
local chart_scales, CHART = data_module.chart_scales, data_module.CHART

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

-- The body of the heap-over-time panel: the chart, or why there is
-- none.
function M.html(result, chart)
  if chart then
    return chart_note(chart) .. '<div class="chart">' ..
      chart_svg(result, chart) .. '</div>'
  elseif result.stream.has_time then
    return '<p class="empty">The timeline view was not computed.</p>'
  end
  return '<p class="empty" id="no-time-marks">This profile has no time ' ..
    'marks, so the heap cannot be drawn over time. Record with ' ..
    '<code>memprof.start(path, {timestamps = true})</code>.</p>'
end

return M
