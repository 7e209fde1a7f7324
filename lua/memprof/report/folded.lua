-- memprof.report.folded: collapsed stacks for flame graphs, the input
-- of flamegraph.pl, inferno and speedscope:
--
--   main chunk of @app.lua:10;@log.lua:5;string.format 300
--
-- one line per stack, its frames outermost first, separated by ';',
-- then a space and the stack's value for one metric.
--
--   folded.write(result, out, opts)
--     result  from memprof.analysis.analyze.run() with group 'stack' (or 'line'
--             for a stream without stacks) and the peak view
--     opts    metric: 'alloc-bytes' (default) | 'alloc-count' |
--               'live-bytes' | 'peak-bytes'
--             group: 'function' names frames by their function
--               ('function at @log.lua:3') instead of their line
--   folded.lines(result, opts) -> { { path = 'a;b', value = n }, ... }
--
-- Metrics, per stack: bytes allocated (allocations and reallocations),
-- allocation events, bytes live at the end, bytes live at the peak.
-- An event in a trace has the stack the reader gives it (the trace,
-- below the callers of the function where it starts: see
-- memprof.read.trace_stacks).  An event without a stack (the VM itself, a
-- trace whose function no stack passes through, or a whole stream
-- recorded without stacks) is one frame, its place.  Stacks with a
-- value of 0 or less are left out: the pseudo-row of blocks allocated
-- before profiling has negative live bytes, so the live and peak
-- graphs add up to the memory allocated during the profile.  Stacks
-- that end up with the same frames (two sites of one name, or frames
-- named by function) are one line.  A ';' in a name is written as ','
-- and a line break as a space, so that every line parses.

local rows = require('memprof.analysis.rows')
local groups = require('memprof.analysis.groups')
local grouping = require('memprof.report.model.grouping')

local M = {}

M.METRICS = { 'alloc-bytes', 'alloc-count', 'live-bytes', 'peak-bytes' }
M.DEFAULT_METRIC = 'alloc-bytes'

local frames_of = groups.frames_of

local function clean_name(name)
  return (name:gsub(';', ','):gsub('[\r\n]', ' '))
end

-- A function giving the name of a frame in a line, made once per
-- frame (a profile has far fewer frames than stacks).
local function namer(by_function)
  local names = {}
  return function(frame)
    local name = names[frame]
    if not name then
      name = frame.name
      if by_function and frame.func then
        name = frame.func.name
      end
      name = clean_name(name)
      names[frame] = name
    end
    return name
  end
end

-- Compares the lines of two rows (their frames, innermost first) as
-- their texts 'outer;...;inner' compare, without making the texts: a
-- profile with stacks has a text of hundreds of bytes for each of
-- hundreds of thousands of rows.  Returns -1, 0 (the same names) or 1.
-- No name holds a ';': where two differ, the rest of the text is the
-- name and a ';' when more frames follow.
local function compare_lines(a, b, name_of)
  local i, j = #a, #b
  while i >= 1 and j >= 1 do
    local x, y = name_of(a[i]), name_of(b[j])
    if x ~= y then
      if i > 1 then x = x .. ';' end
      if j > 1 then y = y .. ';' end
      return x < y and -1 or 1
    end
    i, j = i - 1, j - 1
  end
  if i >= 1 then
    return 1
  end
  return j >= 1 and -1 or 0
end

-- 'outer;...;inner' for the frames of a row.
local function line_of(frames, name_of)
  local names = {}
  for i = #frames, 1, -1 do
    names[#names + 1] = name_of(frames[i])
  end
  return table.concat(names, ';')
end

-- Calls fn(group, value) for every row, with the value of the metric.
local function each_value(result, metric, fn)
  if metric == 'peak-bytes' then
    assert(result.peak, 'the peak-bytes metric needs the peak view')
    local bytes = result.peak.columns.bytes
    for _, group in ipairs(result.peak.groups) do
      fn(group, bytes[group.id])
    end
    return
  end
  local field = ({ ['alloc-bytes'] = 'allocated_bytes',
    ['alloc-count'] = 'allocated_events',
    ['live-bytes'] = 'live_bytes' })[metric]
  assert(field, 'unknown metric')
  local figures = rows.figures(result)
  local values = figures.columns[field]
  for _, group in ipairs(figures.groups) do
    fn(group, values[group.id])
  end
end

-- Calls emit(line, value) for each line with a value above zero, in
-- order of the lines' texts; rows with the same line are summed.  Only
-- the frames and values of the rows are kept, and one line's text at a
-- time is made.
local function each_line(result, opts, emit)
  local name_of = namer(opts.group == 'function')
  local frames, values = {}, {}
  each_value(result, opts.metric or M.DEFAULT_METRIC, function(group, value)
    if value > 0 then
      frames[#frames + 1] = frames_of(group)
      values[#frames] = value
    end
  end)
  local order = {}
  for i = 1, #frames do
    order[i] = i
  end
  table.sort(order, function(a, b)
    local c = compare_lines(frames[a], frames[b], name_of)
    if c ~= 0 then
      return c < 0
    end
    return a < b
  end)
  local i = 1
  while i <= #order do
    local first, sum = order[i], values[order[i]]
    i = i + 1
    while i <= #order and
        compare_lines(frames[first], frames[order[i]], name_of) == 0 do
      sum = sum + values[order[i]]
      i = i + 1
    end
    emit(line_of(frames[first], name_of), sum)
  end
end

function M.lines(result, opts)
  local lines = {}
  each_line(result, opts or {}, function(path, value)
    lines[#lines + 1] = { path = path, value = value }
  end)
  return lines
end

-- The analysis it needs (see memprof.cli.report): rows by stack when the
-- stream can have stacks, and the peak; no overrides (not shown).
function M.analysis(_, stream, reader)
  local extended = stream.version == reader.EXTENDED_VERSION
  return { group = extended and 'stack' or 'line', views = { peak = true },
    cumulative = false, overrides = false }
end

-- With --output=PREFIX: one file per metric (only opts.metric's, if
-- given), PREFIX.METRIC.folded.
function M.outputs(opts)
  local metrics = opts.metric and { opts.metric } or M.METRICS
  local list = {}
  for i, metric in ipairs(metrics) do
    local copy = {}
    for k, v in pairs(opts) do
      copy[k] = v
    end
    copy.metric = metric
    list[i] = { path = opts.output .. '.' .. metric .. '.folded', opts = copy }
  end
  return list
end

-- What to say on stderr about the result.
function M.notes(result)
  return grouping.stack_notes(result, 'stack')
end

function M.write(result, out, opts)
  out = out or io.stdout
  each_line(result, opts or {}, function(path, value)
    out:write(path, ' ', string.format('%.0f', value), '\n')
  end)
end

return M
