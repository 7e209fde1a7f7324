-- Benchmark runner: cost of profiling per workload, and parser speed.
--
--   make bench                      all workloads
--   luajit bench/run.lua NAME ...   some of them (LUA_PATH/CPATH as in make)
--
-- For each workload, runs with profiling off and on alternately (ROUNDS
-- each), and prints the median times, the median of the differences
-- between each profiled run and the unprofiled run before it, as added
-- time per event (wall time, which is what the program feels, and CPU
-- time of the whole process, which includes the background writer), the
-- stream's bytes per event, and how fast the reader parses it; and the
-- time sampled recording at the default rate adds per allocator call
-- (timed between its start and its stop; those two are timed apart).
-- Then, with valgrind, the instructions the module executes per event
-- (bench/callgrind.lua).
--
--   BENCH_CALLGRIND=off             without the callgrind section
--   BENCH_CALLGRIND=only            the callgrind section alone
--   BENCH_CALLGRIND_SCALE           its workloads' scale (default 0.1)
--   BENCH_CALLGRIND_SEED            the seed of LuaJIT's PRNG in its runs
--                                   (default 1)
--
-- Then, side by side with the built-in misc.memprof of Tarantool's fork on
-- its own binary (hosts of build/hosts; bench/side_by_side.lua): the
-- instructions per event under callgrind, and the CPU time per event:
--   BENCH_SIDE=off                  without the side-by-side section
--   BENCH_SIDE=only                 the side-by-side section alone
--   BENCH_SIDE_HOSTS                the hosts (default: Tarantool master's
--                                   and 2.11's, non-GC64 and GC64)
--   BENCH_SIDE_WORKLOADS            default: trees tables closures
--                                   coroutines json
--   BENCH_SIDE_ROUNDS               timed rounds (default 7; 0: no timing)
--   BENCH_SIDE_SCALE                the timed runs' scale (default 1)
--   BENCH_SIDE_MODULE_DIR           where its runs load memprof.so from
--                                   (default ./build: another build's, to
--                                   compare before and after a change)
--
-- Then the slowdown of whole programs (bench/programs.lua):
--   BENCH_PROGRAMS=off              without the programs section
--   BENCH_PROGRAMS=only             the programs section alone
--
-- Then the reporter's speed and peak memory (bench/reporter.lua):
--   BENCH_REPORTER=off              without the reporter section
--   BENCH_REPORTER=only             the reporter section alone
--
-- Then lines for compiled code: agreement with the JIT off and the cost
-- of each mode of trace_lines (bench/trace_lines.lua):
--   BENCH_TRACE_LINES=off           without the trace lines section
--   BENCH_TRACE_LINES=only          the trace lines section alone
--
-- Then the heap walk of a heap snapshot (bench/heap_walk.lua):
--   BENCH_HEAP=off                  without the heap section
--   BENCH_HEAP=only                 the heap section alone
--
-- Then the CPU time of the first start of a process, per build
-- (bench/first_start.lua; BENCH_START_HOSTS names the builds):
--   BENCH_START=off                 without the first start section
--   BENCH_START=only                the first start section alone
local memprof = require('memprof')
local reader = require('memprof.read.stream')
local callgrind = require('callgrind')
local side_by_side = require('side_by_side')
local reporter = require('reporter')
local programs = require('programs')
local trace_lines = require('trace_lines')
local heap_walk = require('heap_walk')
local first_start = require('first_start')
local toolkit = require('toolkit')
local median = toolkit.median
local file_size = toolkit.file_size

local ROUNDS = tonumber(os.getenv('BENCH_ROUNDS')) or 7
local SCALE = tonumber(os.getenv('BENCH_SCALE')) or 1
-- Callgrind runs about 50 times slower: a tenth of the work still gives
-- each workload more than 100k events.
local CALLGRIND = os.getenv('BENCH_CALLGRIND') or 'on'
local CALLGRIND_SCALE = tonumber(os.getenv('BENCH_CALLGRIND_SCALE')) or 0.1
local CALLGRIND_SEED = tonumber(os.getenv('BENCH_CALLGRIND_SEED')) or 1
local REPORTER = os.getenv('BENCH_REPORTER') or 'on'
local PROGRAMS = os.getenv('BENCH_PROGRAMS') or 'on'
local TRACE_LINES = os.getenv('BENCH_TRACE_LINES') or 'on'
local HEAP = os.getenv('BENCH_HEAP') or 'on'
local START = os.getenv('BENCH_START') or 'on'
local SIDE = os.getenv('BENCH_SIDE') or 'on'
local TARGET_NS_PER_EVENT = 20
local TARGET_PARSER_MBS = 30
local WORKLOADS = { 'trees', 'strings', 'tables', 'closures', 'coroutines',
  'mixed' }

-- A monotonic wall clock (through the FFI), or CPU time without it.
local wall_clock = os.clock
do
  local ok, ffi = pcall(require, 'ffi')
  if ok then
    ffi.cdef([[
      struct memprof_bench_timespec { long tv_sec; long tv_nsec; };
      int clock_gettime(int clock, struct memprof_bench_timespec *ts);
    ]])
    local ts = ffi.new('struct memprof_bench_timespec')
    local CLOCK_MONOTONIC = 1
    wall_clock = function()
      ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
      return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
    end
  end
end

-- Runs fn; returns its wall time and CPU time in seconds. `fresh` is a
-- file removed first: a profile goes to a new file, as it would in a
-- program, and not over the last run's, whose truncation at start (and
-- on ext4 the flush at close that follows a truncation) costs tens of
-- milliseconds for the larger workloads.
local function timed(fn, fresh)
  if fresh then os.remove(fresh) end
  collectgarbage()
  collectgarbage()
  local w0, c0 = wall_clock(), os.clock()
  fn()
  return wall_clock() - w0, os.clock() - c0
end

-- Reads the whole stream; returns events and seconds.
local function parse(path)
  local t0 = os.clock()
  local stream = reader.open(path)
  local n = 0
  while stream:next() do n = n + 1 end
  return n, os.clock() - t0
end

-- The extended format's options measured beside the default format.
local EXTENDED = { stack_depth = tonumber(os.getenv('BENCH_STACK_DEPTH')) or 16 }
-- Sampled recording at the default rate (docs/sampling.md), measured
-- beside the full recording: added time per allocator call (the full
-- profile's events) and slowdown.
local SAMPLED = { sample_bytes = true, seed = 1 }

local function profiled(work, path, options)
  return function()
    assert(memprof.start(path, options))
    work(SCALE)
    assert(memprof.stop())
  end
end

-- A sampled run, timed in two parts: the work while the profile records
-- (what each allocator call costs) and the start and stop around it (a
-- cost paid once, whatever the length of the run). Returns the wall and
-- CPU time of the work, and the CPU time of the start and stop.
local function sampled_run(work, path)
  os.remove(path)
  collectgarbage()
  collectgarbage()
  local c0 = os.clock()
  assert(memprof.start(path, SAMPLED))
  local w1, c1 = wall_clock(), os.clock()
  work(SCALE)
  local w2, c2 = wall_clock(), os.clock()
  assert(memprof.stop())
  local c3 = os.clock()
  return w2 - w1, c2 - c1, (c1 - c0) + (c3 - c2)
end

local function measure(name, path, ext_path, smp_path)
  local work = dofile('bench/workloads/' .. name .. '.lua')
  local off, on, ext, cpu_off, cpu_on = {}, {}, {}, {}, {}
  local smp, cpu_smp, smp_ends = {}, {}, {}
  work(SCALE) -- Warm up the JIT compiler.
  for i = 1, ROUNDS do
    off[i], cpu_off[i] = timed(function() work(SCALE) end)
    on[i], cpu_on[i] = timed(profiled(work, path), path)
    ext[i] = timed(profiled(work, ext_path, EXTENDED), ext_path)
    smp[i], cpu_smp[i], smp_ends[i] = sampled_run(work, smp_path)
  end
  local events, parse_time = parse(path)
  local bytes = file_size(path)
  local ext_events = parse(ext_path)
  local ext_bytes = file_size(ext_path)
  -- Each profiled run is compared with the unprofiled run next to it, so
  -- that slow drifts of the machine cancel out.
  local added, cpu_added, ext_added, smp_added = {}, {}, {}, {}
  local cpu_smp_added = {}
  for i = 1, ROUNDS do
    added[i] = on[i] - off[i]
    cpu_added[i] = cpu_on[i] - cpu_off[i]
    ext_added[i] = ext[i] - off[i]
    smp_added[i] = smp[i] - off[i]
    cpu_smp_added[i] = cpu_smp[i] - cpu_off[i]
  end
  return {
    name = name, events = events, bytes = bytes,
    off = median(off), on = median(on),
    ns_per_event = median(added) / events * 1e9,
    cpu_ns_per_event = median(cpu_added) / events * 1e9,
    bytes_per_event = bytes / events,
    parse_mbs = bytes / parse_time / 1e6,
    parse_eps = events / parse_time,
    ext_ns_per_event = median(ext_added) / ext_events * 1e9,
    ext_bytes_per_event = ext_bytes / ext_events,
    smp_ns_per_call = median(smp_added) / events * 1e9,
    smp_cpu_ns_per_call = median(cpu_smp_added) / events * 1e9,
    smp_slowdown = (median(smp) + median(smp_ends)) / median(off),
    smp_ends_ms = median(smp_ends) * 1e3,
  }
end

local function report(results)
  print(string.format('%-11s %9s %8s %8s %9s %8s %8s %8s %10s %11s',
    'workload', 'events', 'off ms', 'on ms', 'slowdown', 'ns/event',
    'cpu ns/ev', 'B/event', 'parse MB/s', 'parse ev/s'))
  local worst_ns, worst_mbs = -math.huge, math.huge
  for _, r in ipairs(results) do
    print(string.format(
      '%-11s %9d %8.1f %8.1f %8.2fx %8.1f %8.1f %8.2f %10.1f %11.0f',
      r.name, r.events, r.off * 1e3, r.on * 1e3, r.on / r.off,
      r.ns_per_event, r.cpu_ns_per_event, r.bytes_per_event, r.parse_mbs,
      r.parse_eps))
    worst_ns = math.max(worst_ns, r.ns_per_event)
    worst_mbs = math.min(worst_mbs, r.parse_mbs)
  end
  print(string.format('\nextended format, stack_depth = %d:',
    EXTENDED.stack_depth))
  print(string.format('%-11s %10s %10s %10s %10s %10s', 'workload',
    'ns/event', 'x default', 'B/event', 'x default', ''))
  local worst_time, worst_bytes = 0, 0
  for _, r in ipairs(results) do
    local t, b = r.ext_ns_per_event / r.ns_per_event,
      r.ext_bytes_per_event / r.bytes_per_event
    print(string.format('%-11s %10.1f %9.2fx %10.2f %9.2fx', r.name,
      r.ext_ns_per_event, t, r.ext_bytes_per_event, b))
    worst_time, worst_bytes = math.max(worst_time, t), math.max(worst_bytes, b)
  end
  print(string.format('worst: %.2fx the time (target <= 2): %s; %.2fx the ' ..
    'bytes (target <= 1.5): %s', worst_time,
    worst_time <= 2 and 'met' or 'MISSED', worst_bytes,
    worst_bytes <= 1.5 and 'met' or 'MISSED'))
  print(string.format('\nsampled, one sample per %d bytes on average:',
    524288))
  print('(sampled ns and cpu: time added per allocator call while the ' ..
    'profile records; start+stop: the CPU time of the start and the stop; ' ..
    'the slowdown counts both)')
  print(string.format('%-11s %12s %10s %12s %12s %14s %10s', 'workload',
    'full ns/call', 'full', 'sampled ns', 'sampled cpu', 'start+stop ms',
    'sampled'))
  local worst_smp = -math.huge
  for _, r in ipairs(results) do
    print(string.format('%-11s %12.1f %9.2fx %12.2f %12.2f %14.2f %9.3fx',
      r.name, r.ns_per_event, r.on / r.off, r.smp_ns_per_call,
      r.smp_cpu_ns_per_call, r.smp_ends_ms, r.smp_slowdown))
    worst_smp = math.max(worst_smp, r.smp_cpu_ns_per_call)
  end
  -- CPU time: a few ns per call are below the noise of wall time.
  print(string.format('worst CPU time added by sampling: %.2f ns per ' ..
    'allocator call (target <= 2): %s', worst_smp,
    worst_smp <= 2 and 'met' or 'MISSED'))
  print(string.format('worst added wall time: %.1f ns/event (target <= %d): %s',
    worst_ns, TARGET_NS_PER_EVENT,
    worst_ns <= TARGET_NS_PER_EVENT and 'met' or 'MISSED'))
  print(string.format('slowest parser: %.1f MB/s (target >= %d): %s',
    worst_mbs, TARGET_PARSER_MBS,
    worst_mbs >= TARGET_PARSER_MBS and 'met' or 'MISSED'))
end

local function timings(names)
  local path, ext_path, smp_path = os.tmpname(), os.tmpname(), os.tmpname()
  local results = {}
  print(string.format('%s, %d rounds, scale %d, medians of wall time (%s)',
    jit and jit.version or _VERSION, ROUNDS, SCALE,
    wall_clock == os.clock and 'CPU time: no FFI' or 'monotonic clock'))
  for _, name in ipairs(names) do
    results[#results + 1] = measure(name, path, ext_path, smp_path)
  end
  os.remove(path)
  os.remove(ext_path)
  os.remove(smp_path)
  report(results)
end

local function instructions(names)
  callgrind.run(names, {
    scale = CALLGRIND_SCALE,
    seed = CALLGRIND_SEED,
    seed_library = 'build/fixed_seed.so',
    stack_depth = EXTENDED.stack_depth,
    lua = arg and arg[-1] or 'luajit',
    module = 'callgrind',
    -- Events are counted as for the timings.
    count_events = function(path) return (parse(path)) end,
  })
end

local function side(lua)
  local pipe = assert(io.popen('pwd'))
  local dir = pipe:read('*l')
  pipe:close()
  side_by_side.run({
    scale = CALLGRIND_SCALE,
    timed_scale = tonumber(os.getenv('BENCH_SIDE_SCALE')) or 1,
    rounds = tonumber(os.getenv('BENCH_SIDE_ROUNDS')) or 7,
    seed = CALLGRIND_SEED,
    seed_library = dir .. '/build/fixed_seed.so',
    hosts_dir = 'build/hosts',
    module = 'side_by_side',
    count_events = function(path) return (parse(path)) end,
  })
end

local function main(args)
  local names = #args > 0 and args or WORKLOADS
  local lua = arg and arg[-1] or 'luajit'
  local only = REPORTER == 'only' or CALLGRIND == 'only' or
    PROGRAMS == 'only' or TRACE_LINES == 'only' or HEAP == 'only' or
    START == 'only' or SIDE == 'only'
  if not only or CALLGRIND == 'only' then
    if CALLGRIND ~= 'only' then timings(names) end
    if CALLGRIND ~= 'off' then instructions(names) end
  end
  if SIDE ~= 'off' and (not only or SIDE == 'only') then
    side(lua)
  end
  if PROGRAMS ~= 'off' and (not only or PROGRAMS == 'only') then
    programs.run(lua)
  end
  if REPORTER ~= 'off' and (not only or REPORTER == 'only') then
    reporter.run(lua)
  end
  if TRACE_LINES ~= 'off' and (not only or TRACE_LINES == 'only') then
    trace_lines.run(lua)
  end
  if HEAP ~= 'off' and (not only or HEAP == 'only') then
    heap_walk.run(lua)
  end
  if START ~= 'off' and (not only or START == 'only') then
    first_start.run(lua)
  end
end

main({ ... })
