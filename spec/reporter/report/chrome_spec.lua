-- Specs for memprof.report.chrome: the trace is decoded with lua-cjson,
-- checked against the rules of the Trace Event Format (the JSON object
-- form read by chrome://tracing and Perfetto), and its values checked.
-- Runs under LuaJIT and plain Lua 5.1.

local cjson = require('cjson')
local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local chrome = require('memprof.report.chrome')
local layout = require('memprof.report.layout')
local B = require('helpers.stream_builder')
local C = require('helpers.command')

local function render(builder)
  local stream = reader.from_string(builder:bytes(), 'out.bin')
  local result = analyze.run(stream, chrome.analysis({}, stream, reader))
  return layout.render(function(out)
    chrome.write(result, out)
  end)
end

-- The rules of the format, for the phases the export uses.  Returns a
-- list of the problems found (empty when the trace is valid).
local PHASES = { M = true, C = true, i = true }
local METADATA_NAMES = { process_name = true, thread_name = true }

local function check_event(event, problems, last_ts)
  local function problem(text)
    problems[#problems + 1] = string.format('event %s: %s',
      tostring(event.name), text)
  end
  if type(event.name) ~= 'string' then problem('name is not a string') end
  if not PHASES[event.ph] then problem('unknown phase ' .. tostring(event.ph)) end
  if type(event.pid) ~= 'number' then problem('pid is not a number') end
  if type(event.tid) ~= 'number' then problem('tid is not a number') end
  if type(event.args) ~= 'table' then problem('args is not an object') end
  if event.ph == 'M' then
    if not METADATA_NAMES[event.name] then problem('unknown metadata') end
    if type(event.args.name) ~= 'string' then problem('args.name') end
    if event.ts ~= nil then problem('metadata with a timestamp') end
    return
  end
  if type(event.ts) ~= 'number' or event.ts < 0 then
    problem('ts is not a non-negative number')
    return
  end
  if event.ph == 'C' then
    for key, value in pairs(event.args) do
      if type(value) ~= 'number' then
        problem('counter value ' .. key .. ' is not a number')
      end
    end
    local track = event.pid .. '/' .. event.name
    if last_ts[track] and event.ts < last_ts[track] then
      problem('ts goes back on track ' .. track)
    end
    last_ts[track] = event.ts
  elseif event.ph == 'i' and event.s ~= 'g' and event.s ~= 'p' and
      event.s ~= 't' then
    problem('instant event without a scope')
  end
end

local function check_trace(trace)
  local problems = {}
  if type(trace.traceEvents) ~= 'table' then
    return { 'no traceEvents array' }
  end
  if trace.displayTimeUnit ~= 'ms' and trace.displayTimeUnit ~= 'ns' then
    problems[#problems + 1] = 'displayTimeUnit is not ms or ns'
  end
  local last_ts = {}
  for _, event in ipairs(trace.traceEvents) do
    check_event(event, problems, last_ts)
  end
  return problems
end

-- The counter's points: { { ts, bytes }, ... }.
local function counter_points(trace)
  local points = {}
  for _, event in ipairs(trace.traceEvents) do
    if event.ph == 'C' then
      points[#points + 1] = { event.ts, event.args.bytes }
    end
  end
  return points
end

local function events_of(trace, phase)
  local list = {}
  for _, event in ipairs(trace.traceEvents) do
    if event.ph == phase then
      list[#list + 1] = event
    end
  end
  return list
end

describe('chrome trace', function()
  it('says that the peak of a sampled profile is an estimate', function()
    local s = B.new():lfunc(0x100, '@a.lua', 0)
      :events({ version = B.EXTENDED, sample_bytes = 100 })
      :note(B.HEAP_AT_START, 5000)
      :alloc(B.lua(0x100, 3), 0x1000, 10000)
      :epilogue()
    assert.are.same({ { name = 'peak', ph = 'i', s = 'p', ts = 1, pid = 1,
      tid = 1, args = { bytes = 10000, event = 1, heap_bytes = 15000,
        estimate = true, held_by = { ['@a.lua:3'] = 10000 } } } },
      events_of(cjson.decode(render(s)), 'i'))
  end)

  it('is valid and has the heap over time from the time marks', function()
    local text = render(B.peak_payload())
    local trace = cjson.decode(text)
    assert.are.same({}, check_trace(trace))
    assert.are.equal('ms', trace.displayTimeUnit)
    assert.are.same({
      { name = 'process_name', ph = 'M', pid = 1, tid = 1,
        args = { name = 'memprof: out.bin' } },
      { name = 'thread_name', ph = 'M', pid = 1, tid = 1,
        args = { name = 'heap' } },
    }, events_of(trace, 'M'))
    -- Events at 1 ms (300B, then 270B), 2 ms (570B), 3 ms (420B, then
    -- 320B); the end at 4 ms.
    assert.are.same({ { 0, 0 }, { 1000, 300 }, { 1005, 270 }, { 2000, 570 },
      { 3000, 420 }, { 3005, 320 }, { 4000, 320 } }, counter_points(trace))
    assert.are.same({ { name = 'peak', ph = 'i', s = 'p', ts = 2000, pid = 1,
      tid = 1, args = { bytes = 570, event = 5, held_by = {
        ['@p.lua:3'] = 400, ['@p.lua:2'] = 200 } } } }, events_of(trace, 'i'))
    assert.are.same({ memprof_file = 'out.bin', clock = 'time marks',
      events = 8, net_bytes = 320 }, trace.otherData)
    -- Numbers are written as numbers.
    assert.truthy(text:find('"bytes":570', 1, true))
    assert.is_nil(text:find('"ts":"', 1, true))
  end)

  it('uses event numbers as microseconds without time marks', function()
    local trace = cjson.decode(render(B.crafted()))
    assert.are.same({}, check_trace(trace))
    assert.are.equal('memprof: out.bin (time axis: event numbers)',
      events_of(trace, 'M')[1].args.name)
    -- Events 1-9 in the first 10 microseconds (highest 320B, last
    -- 220B), event 10 in the next.
    assert.are.same({ { 0, 320 }, { 5, 220 }, { 10, 172 } },
      counter_points(trace))
    local peak = events_of(trace, 'i')[1]
    assert.are.equal(5, peak.ts)
    assert.are.equal(320, peak.args.bytes)
    assert.are.equal('event numbers as microseconds (the profile has no ' ..
      'time marks)', trace.otherData.clock)
  end)

  it('starts at zero for a profile without events', function()
    local trace = cjson.decode(render(B.new():events():epilogue()))
    assert.are.same({}, check_trace(trace))
    assert.are.same({ { 0, 0 } }, counter_points(trace))
    assert.are.same({ bytes = 0, event = 0, held_by = {} },
      events_of(trace, 'i')[1].args)
  end)

  it('finds problems in invalid traces', function()
    assert.are.same({ 'no traceEvents array' }, check_trace({}))
    assert.are.same({ 'event live heap: ts goes back on track 1/live heap',
      'event x: counter value v is not a number',
      'event p: instant event without a scope' }, check_trace({
      displayTimeUnit = 'ms', traceEvents = {
        { name = 'live heap', ph = 'C', ts = 5, pid = 1, tid = 1,
          args = { bytes = 1 } },
        { name = 'live heap', ph = 'C', ts = 4, pid = 1, tid = 1,
          args = { bytes = 1 } },
        { name = 'x', ph = 'C', ts = 1, pid = 1, tid = 1,
          args = { v = '1' } },
        { name = 'p', ph = 'i', ts = 1, pid = 1, tid = 1, args = {} },
      } }))
  end)
end)

describe('memprof-report --format=chrome', function()
  it('writes the trace and says which clock it used', function()
    local path = os.tmpname()
    C.write_file(path, B.crafted():bytes())
    local code, stdout, stderr = C.run(C.command('./bin/memprof-report',
      '--format=chrome', path))
    os.remove(path)
    assert.are.equal(0, code)
    assert.are.equal('memprof-report: note: the profile has no time marks: ' ..
      'the time axis shows event numbers as microseconds (record with ' ..
      'memprof.start(path, {timestamps = true}) for time)\n', stderr)
    local trace = cjson.decode(stdout)
    assert.are.same({}, check_trace(trace))
    assert.are.equal(path, trace.otherData.memprof_file)
  end)
end)
