-- memprof.report.folded: collapsed stacks for flame graphs, the input
-- of flamegraph.pl, inferno and speedscope:
--
--   main chunk of @app.lua:10;@log.lua:5;string.format 300
--
-- one line per stack, its frames outermost first, separated by ';',
-- then a space and the stack's value for one metric.
--
--   folded.write(result, out, opts)
--     result  from memprof.analyze.run() with group 'stack' (or 'line'
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
-- memprof.trace_stacks).  An event without a stack (the VM itself, a
-- trace whose function no stack passes through, or a whole stream
-- recorded without stacks) is one frame, its place.  Stacks with a
-- value of 0 or less are left out: the pseudo-row of blocks allocated
-- before profiling has negative live bytes, so the live and peak
-- graphs add up to the memory allocated during the profile.  Stacks
-- that end up with the same frames (two sites of one name, or frames
-- named by function) are one line.  A ';' in a name is written as ','
-- and a line break as a space, so that every line parses.

local rows = require('memprof.report.rows')

local M = {}

M.METRICS = { 'alloc-bytes', 'alloc-count', 'live-bytes', 'peak-bytes' }
M.DEFAULT_METRIC = 'alloc-bytes'

-- The frames of a row, innermost first.
local function frames_of(group)
  if group.frames then
    return group.frames
  end
  return { group.site or group }
end

local function frame_name(frame, by_function)
  local name = frame.name
  if by_function and frame.func then
    name = frame.func.name
  end
  return (name:gsub(';', ','):gsub('[\r\n]', ' '))
end

-- 'outer;...;inner' for a row.
local function path_of(group, by_function)
  local frames = frames_of(group)
  local names = {}
  for i = #frames, 1, -1 do
    names[#names + 1] = frame_name(frames[i], by_function)
  end
  return table.concat(names, ';')
end

-- { { group = ..., value = ... }, ... } for a metric.
-- Calls fn(group, value) for every row, with the value of the metric.
local function each_value(result, metric, fn)
  if metric == 'peak-bytes' then
    assert(result.peak, 'the peak-bytes metric needs the peak view')
    for _, row in ipairs(result.peak.rows) do
      fn(row.group, row.bytes)
    end
    return
  end
  local field = ({ ['alloc-bytes'] = 'allocated_bytes',
    ['alloc-count'] = 'allocated_events',
    ['live-bytes'] = 'live_bytes' })[metric]
  assert(field, 'unknown metric')
  local figures = rows.figures(result)
  local values = figures[field]
  for _, group in ipairs(figures.list) do
    fn(group, values[group.id])
  end
end

-- The paths with a value above zero, sorted, and the value of each:
-- two lists and a map from path to its position, not a table per line.
local function sorted_paths(result, opts)
  local by_function = opts.group == 'function'
  local paths, value_of = {}, {}
  each_value(result, opts.metric or M.DEFAULT_METRIC, function(group, value)
    if value > 0 then
      local path = path_of(group, by_function)
      local sum = value_of[path]
      if not sum then
        sum = 0
        paths[#paths + 1] = path
      end
      value_of[path] = sum + value
    end
  end)
  table.sort(paths)
  return paths, value_of
end

function M.lines(result, opts)
  local paths, value_of = sorted_paths(result, opts or {})
  local lines = {}
  for i, path in ipairs(paths) do
    lines[i] = { path = path, value = value_of[path] }
  end
  return lines
end

-- The analysis it needs (see memprof.cli): rows by stack when the
-- stream can have stacks, and the peak.
function M.analysis(_, stream, reader)
  local extended = stream.version == reader.EXTENDED_VERSION
  return { group = extended and 'stack' or 'line', views = { peak = true },
    cumulative = false }
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
  return rows.stack_notes(result, 'stack')
end

function M.write(result, out, opts)
  out = out or io.stdout
  local paths, value_of = sorted_paths(result, opts or {})
  for _, path in ipairs(paths) do
    out:write(path, ' ', string.format('%.0f', value_of[path]), '\n')
  end
end

return M
