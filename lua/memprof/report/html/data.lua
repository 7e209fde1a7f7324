-- memprof.report.html.data: what the HTML page shows besides its
-- tables, as data: the flame graphs' trees and frames, the heap over
-- time and the chart's scales.  The page's
-- template (memprof.report.html) writes them as HTML, SVG and JSON.
--
--   data.page_data(result, limits) -> the JSON value the page's script
--     draws ({ file, frames, graphs, timeline }), and the chart's rows
--     (or nil without a timeline); limits: { max_frames = N (frames of
--     a flame graph), chart_rows = N (rows of the heap over time) }
--   data.chart_scales(rows)   -> the chart's ticks and its x(ns), y(bytes)
--   data.CHART                -> the chart's geometry
--   data.write_json(out, value) -> the page's JSON, written in pieces

local layout = require('memprof.report.layout')
local flame = require('memprof.report.flame')
local leaks_module = require('memprof.analysis.leaks')
local timeline_model = require('memprof.report.model.timeline')
local json_text = require('memprof.encode.json_text')
local html_text = require('memprof.report.html.text')
local grouping = require('memprof.report.model.grouping')
local record_intern = require('memprof.record').intern

local M = {}

local format, concat, floor = string.format, table.concat, math.floor
local clean_text, with_commas = html_text.clean_text, html_text.with_commas
local percent, time_unit = html_text.percent, html_text.time_unit

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
function M.write_json(out, value)
  local writer = json_text.writer(out, JSON)
  writer:value(value)
  writer:finish()
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
      grouping.unit(mode))
  end
  return nil
end

-- Flame trees ----------------------------------------------------------------

-- Interns frames by name, numbered from 0 (a large profile has hundreds
-- of thousands of frames: two arrays and an index).  The page's frames
-- table lists only the frames the graphs show, numbered as they are
-- written (shown_number): a graph shows at most limits.max_frames.
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
  local id, new = record_intern(list, index, key)
  return id - 1, new
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
local function flame_tree(paths, frames, limits)
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
    max_nodes = limits.max_frames, json = JSON })
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

local function flame_graph(result, name, records, frames, limits)
  local titles = FLAME_TITLES[name]
  local root, dropped, top = flame_tree(records, frames, limits)
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

local function flame_graphs(result, frames, limits)
  local allocated, live = stack_records(result)
  local graphs = { allocated = flame_graph(result, 'allocated', allocated,
    frames, limits) }
  -- A tree of a large profile takes tens of MB while it is made, then
  -- is garbage: the collector would not have freed the first before the
  -- second is made, nor the second before the tables of the page are.
  collectgarbage('collect')
  graphs.live = flame_graph(result, 'live', live, frames, limits)
  keep_shown(frames)
  collectgarbage('collect')
  return graphs
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
function M.chart_scales(rows)
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

local function timeline_data(result, limits)
  local shown = timeline_model.new(result.timeline, result.stream,
    limits.chart_rows).shown
  if not shown then
    return nil
  end
  local rows = array()
  for i, row in ipairs(shown.rows) do
    rows[i] = array({ row.start, row.stop, row.high, row.last, row.events })
  end
  return { rows = rows, width = shown.width, peak_row = shown.peak_row - 1,
    plot = { width = CHART.width, left = CHART.left, right = CHART.right },
    shown = shown }
end

function M.page_data(result, limits)
  local frames = new_frame_table()
  local graphs = flame_graphs(result, frames, limits)
  local data = {
    file = result.stream.name or '',
    frames = frames_json(frames),
    graphs = graphs,
  }
  local chart = timeline_data(result, limits)
  if chart then
    data.timeline = { rows = chart.rows, width = chart.width,
      peak_row = chart.peak_row, plot = chart.plot }
  end
  return data, chart
end

M.CHART = CHART

return M
