-- memprof.report.chrome: the heap over time as a Chrome trace (the Trace
-- Event Format's JSON object form), for chrome://tracing, Perfetto's UI
-- (ui.perfetto.dev) and speedscope.
--
--   chrome.write(result, out, opts)   -- result of memprof.analysis.analyze.run()
--   chrome.document(result) -> the trace as Lua tables
--   chrome.analysis(opts, stream, reader) -> the analysis it needs
--
-- The trace has one process (pid 1, named "memprof: FILE") with one
-- thread (tid 1, "heap"): a counter track "live heap" (phase "C", the
-- net bytes since the start, from the timeline view) and an instant
-- event "peak" (phase "i") at the heap's high-water mark, whose args
-- name the rows that held it.  Timestamps are microseconds.
--
-- The timeline keeps, per stretch of time (a slot), the highest value
-- after an event in it and the value after its last event; the counter
-- takes the highest value at the start of the slot and the last one
-- from its middle, and ends at the end of the profile.  Without time
-- marks, events are placed by their number (event n at n microseconds):
-- "otherData" says which clock was used, and so does the process name.

local json = require('memprof.report.json')
local timeline = require('memprof.analysis.timeline')

local M = {}

M.PID, M.TID = 1, 1
M.COUNTER = 'live heap'
-- Rows of the peak named in the args of its instant event.
M.PEAK_ROWS = 10

-- The trace shows no cumulative rows: the analysis leaves them out.
M.CUMULATIVE = false

M.CLOCKS = {
  time = 'time marks',
  events = 'event numbers as microseconds (the profile has no time marks)',
}


function M.analysis(opts, stream, reader)
  return { group = opts.group, views = { peak = true,
      timeline = stream.version == reader.EXTENDED_VERSION },
    passes = { { name = 'event_timeline',
      pass = timeline.new({ clock = 'events' }) } } }
end

local function metadata(name, value)
  return { name = name, ph = 'M', pid = M.PID, tid = M.TID,
    args = { name = value } }
end

local function counter(ts, bytes)
  return { name = M.COUNTER, ph = 'C', ts = ts, pid = M.PID, tid = M.TID,
    args = { bytes = bytes } }
end

-- The counter events of a timeline result (times in ns).
local function counter_events(line)
  local events, ts = {}, nil
  local function add(at_ns, bytes)
    ts = at_ns / 1000
    events[#events + 1] = counter(ts, bytes)
  end
  local slots = timeline.occupied_slots(line)
  local resolution = line.resolution
  if #slots == 0 or slots[1] > 1 then
    add(0, 0)
  end
  local last = 0
  for _, slot in ipairs(slots) do
    local start = (slot - 1) * resolution
    add(start, line.high[slot])
    last = line.last[slot]
    if last ~= line.high[slot] then
      add(start + resolution / 2, last)
    end
  end
  if line.duration / 1000 > ts then
    add(line.duration, last)
  end
  return events
end

local function peak_event(peak, clock)
  local ts
  if clock == 'time' then
    ts = (peak.time or 0) / 1000
  else
    ts = peak.event
  end
  local held_by = {}
  for _, row in ipairs((peak:top({ top = M.PEAK_ROWS }))) do
    held_by[row.group.name] = row.bytes
  end
  -- heap_bytes: the VM's whole heap at the peak, when the stream records
  -- the heap at the start (bytes is the growth since the start);
  -- estimate: true in a sampled profile, whose peak is an estimate.
  return { name = 'peak', ph = 'i', s = 'p', ts = ts, pid = M.PID,
    tid = M.TID, args = { bytes = peak.bytes, event = peak.event,
      heap_bytes = peak.heap_bytes, held_by = held_by,
      estimate = peak.estimate or nil } }
end

function M.document(result)
  local stream = result.stream
  local clock = stream.has_time and result.timeline and 'time' or 'events'
  local line = clock == 'time' and result.timeline or result.event_timeline
  local process = 'memprof: ' .. stream.name
  if clock == 'events' then
    process = process .. ' (time axis: event numbers)'
  end
  local events = { metadata('process_name', process),
    metadata('thread_name', 'heap') }
  for _, event in ipairs(counter_events(line)) do
    events[#events + 1] = event
  end
  if result.peak then
    events[#events + 1] = peak_event(result.peak, clock)
  end
  return {
    traceEvents = json.array(events),
    displayTimeUnit = 'ms',
    otherData = { memprof_file = stream.name, clock = M.CLOCKS[clock],
      events = stream.events, net_bytes = result.heap.total,
      sample_bytes = stream.sample_bytes },
  }
end

function M.notes(result)
  if result.stream.has_time then
    return {}
  end
  return { 'the profile has no time marks: the time axis shows event ' ..
    'numbers as microseconds (record with memprof.start(path, ' ..
    '{timestamps = true}) for time)' }
end

function M.write(result, out)
  out = out or io.stdout
  out:write(json.encode(M.document(result)), '\n')
end

return M
