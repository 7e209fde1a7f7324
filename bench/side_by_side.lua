-- Side by side with the built-in profiler of Tarantool's LuaJIT fork
-- (misc.memprof), on that fork's own binary, in instructions under
-- callgrind and in CPU time. Required by bench/run.lua.
--
-- For each host of build/hosts that has misc.memprof (BENCH_SIDE_HOSTS)
-- and each workload (trees, tables, closures, coroutines of
-- bench/workloads/, and the json program of bench/programs/), three runs
-- under `valgrind --tool=callgrind`, each in a process of its own, with
-- the same fixed seed (build/fixed_seed.so): not profiled, profiled by the
-- built-in, profiled by memprof (Tarantool's format, the default). Each
-- run warms the workload up (and starts and stops its profiler once, so
-- that memprof's calibration, paid once per process, is behind), then:
--
--   os.clock()  start(path)  os.clock()  work  stop()  os.clock()
--
-- with --dump-after=lj_cf_os_clock, which cuts the run's counts at each
-- marker: the second part is the start, the third the work and the stop.
-- Instructions per event: the self cost of each profiler's own code in
-- the third part (memprof.so's functions, the writer thread's included;
-- the built-in's functions in the luajit binary, BUILTIN_FUNCTIONS),
-- divided by the events in its profile; then the same with the whole
-- start added (every instruction of the second part: what a user pays
-- for a start, once the process has calibrated), the figure the target
-- is about. Neither counts the kernel. Also printed: the third part's
-- total minus the unprofiled run's, per event, which counts everything
-- but moves with the JIT's decisions (the heap's addresses differ from
-- run to run).
--
-- Callgrind counts no work of the kernel: the built-in writes its stream
-- with write() on the program's thread, memprof on a thread of its own.
-- So the section also times CPU per event (user and system, every thread:
-- os.clock), in one process per host and workload, not under callgrind:
-- BENCH_SIDE_ROUNDS rounds (default 7) of the work not profiled, profiled
-- by the built-in and profiled by memprof, alternately; the median of
-- each profiled run's CPU time of the start, the work and the stop minus
-- that of the unprofiled run of its round, per event (and without the
-- start). The first start of memprof in the process (its calibration) is
-- printed apart.
--
-- json: at each allocation in a C function (lua-cjson's), the built-in of
-- these builds writes the symbol table of every loaded object again
-- (lj_symtab.c's count of dumped objects is never updated): 7.9 GB of
-- profile for 4 of the program's 400 rounds, some 7 s of CPU a round. It
-- cannot run under callgrind (memprof's figures alone are printed there);
-- it is timed on one round (JSON_TIMED_SCALE), its stream written to
-- /dev/null, and its cost divided by the events of memprof's profile of
-- the same round: both record every allocator call of the same work, so
-- the same events are counted for both, and each pays what a user pays.
--
-- BENCH_SIDE_TRACE_LINES=walk (or another trace_lines mode) starts memprof
-- with that mode instead of the default, to see what a mode costs; the
-- target is about the default.
local M = {}

local toolkit = require('toolkit')
local shell_quote = toolkit.shell_quote
local read_all = toolkit.read_all
local reader = require('callgrind_reader')

-- Each run under callgrind is stopped after this many seconds.
local CHILD_TIMEOUT_S = 900
-- The project's target: memprof at most half the built-in's cost.
local TARGET_RATIO = 0.5
local WORKLOADS = { 'trees', 'tables', 'closures', 'coroutines', 'json' }
-- Workloads where the built-in runs away (see json above): not run under
-- callgrind; timed at their own scale, the built-in's stream written to
-- /dev/null, its events counted as memprof's.
local BUILTIN_RUNS_AWAY = { json = true }
-- One of json's 400 rounds.
local JSON_TIMED_SCALE = 1 / 400
-- Under callgrind, json runs at a tenth of the others' scale (40 of its
-- 400 rounds).
local CALLGRIND_FACTOR = { json = 0.1 }
local HOSTS = { 'tarantool-master-nongc64', 'tarantool-master-gc64',
  'tarantool-2.11-nongc64', 'tarantool-2.11-gc64' }
local DEBIAN_CPATH = '/usr/lib/x86_64-linux-gnu/lua/5.1/?.so'
local DEBIAN_PATH = '/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua'

local function execute(cmd)
  local status = os.execute(cmd)
  return status == 0 or status == true
end

-- ---- The child: what runs under callgrind ---------------------------------

-- The work of a workload at a scale, as a function.
local function workload(name)
  if name ~= 'json' then return dofile('bench/workloads/' .. name .. '.lua') end
  local chunk = assert(loadfile('bench/programs/json.lua'))
  return function(scale)
    local saved_write = io.write
    arg = { [0] = 'bench/programs/json.lua', tostring(scale) }
    io.write = function() end -- (its checksum)
    chunk()
    io.write = saved_write
  end
end

-- The profiler of a run: start(path) and stop(), or nil (not profiled).
local function profiler(kind)
  if kind == 'builtin' then
    local builtin = misc.memprof -- luacheck: ignore (Tarantool's global)
    return function(path) assert(builtin.start(path)) end,
      function() assert(builtin.stop()) end
  elseif kind == 'memprof' then
    local memprof = require('memprof')
    local mode = os.getenv('BENCH_SIDE_TRACE_LINES')
    local options = mode and mode ~= '' and { trace_lines = mode } or nil
    return function(path) assert(memprof.start(path, options)) end,
      function() assert(memprof.stop()) end
  end
end

function M.child(kind, name, scale, path)
  local work = workload(name)
  local start, stop = profiler(kind)
  work(scale)
  if start then
    start(path)
    stop()
  end
  os.clock()
  if start then start(path) end
  os.clock()
  work(scale)
  if stop then stop() end
  os.clock()
end

-- The timed child: rounds of the work not profiled, then profiled by
-- each profiler, alternately; prints one line of figures for the parent.
-- builtin_to_null: the built-in's stream goes to /dev/null, and its
-- events are counted as memprof's (see BUILTIN_RUNS_AWAY).
function M.timed_child(name, scale, rounds, dir, builtin_to_null)
  local stream_reader = require('memprof.read.stream')
  local work = workload(name)
  local kinds = { 'builtin', 'memprof' }
  local starts, stops = {}, {}
  for _, kind in ipairs(kinds) do starts[kind], stops[kind] = profiler(kind) end
  work(scale)
  local c0 = os.clock()
  starts.memprof(dir .. '/first.bin')
  local first = os.clock() - c0
  stops.memprof()
  os.remove(dir .. '/first.bin')
  local added, start_cpu, whole, events = {}, {}, {}, {}
  for _, kind in ipairs(kinds) do
    added[kind], start_cpu[kind], whole[kind] = {}, {}, {}
  end
  for round = 1, rounds do
    collectgarbage()
    local t0 = os.clock()
    work(scale)
    local off = os.clock() - t0
    for _, kind in ipairs(kinds) do
      local path = string.format('%s/%s-%d.bin', dir, kind, round)
      local to_null = builtin_to_null and kind == 'builtin'
      collectgarbage()
      local t1 = os.clock()
      starts[kind](to_null and '/dev/null' or path)
      local t2 = os.clock()
      work(scale)
      stops[kind]()
      local t3 = os.clock()
      added[kind][round] = (t3 - t2) - off
      start_cpu[kind][round] = t2 - t1
      whole[kind][round] = (t3 - t1) - off
      if not events[kind] and not to_null then
        local stream, n = stream_reader.open(path), 0
        while stream:next() do n = n + 1 end
        events[kind] = n
      end
      os.remove(path)
    end
  end
  if builtin_to_null then events.builtin = events.memprof end
  local median = require('toolkit').median
  io.write(string.format('%.17g %.17g %d %.17g %.17g %d %.17g %.17g %.17g\n',
    first, median(added.builtin), events.builtin, median(start_cpu.builtin),
    median(added.memprof), events.memprof, median(start_cpu.memprof),
    median(whole.builtin), median(whole.memprof)))
end

-- ---- Running ---------------------------------------------------------------

-- The built-in's own functions in Tarantool's luajit (lj_memprof.c,
-- lj_wbuf.c, lj_symtab.c, the line look-up of its Lua events, and the
-- writer of lib_misc.c).
local BUILTIN_FUNCTIONS = { '^memprof_', '^lj_memprof_', '^lj_wbuf_',
  '^lj_symtab_', '^write_c_symtab$', '^buffer_writer_default$',
  '^lj_utils_write_uleb128$', '^lj_debug_frameline$', '^lj_debug_line$',
  '^lj_cf_misc_memprof_' }

local function is_builtin_function(name)
  for _, pattern in ipairs(BUILTIN_FUNCTIONS) do
    if name:match(pattern) then return true end
  end
  return false
end

-- What a function of a run counts as: memprof's own code (memprof.so),
-- the built-in's (BUILTIN_FUNCTIONS in the luajit binary), or neither.
local function classify(ob, _, fn)
  local object = reader.basename(ob)
  if object == 'memprof.so' then return 'memprof' end
  if object == 'luajit' and is_builtin_function(fn) then return 'builtin' end
  return nil
end

-- Reads a part of a callgrind run (bench/callgrind_reader.lua): its total,
-- and the self cost of each profiler's own code.
local function read_dump(path)
  local r = reader.read(path, classify)
  return { total = r.total, memprof = r.cost.memprof or 0,
    builtin = r.cost.builtin or 0 }
end

-- The environment of a run on a host.
local function host_env(host, config)
  return table.concat({ 'env',
    'LD_PRELOAD=' .. shell_quote(config.seed_library),
    'MEMPROF_BENCH_SEED=' .. string.format('%d', config.seed),
    'LUA_CPATH=' .. shell_quote((os.getenv('BENCH_SIDE_MODULE_DIR') or './build') ..
      '/?.so;' .. DEBIAN_CPATH),
    'LUA_PATH=' .. shell_quote('./lua/?.lua;./bench/?.lua;' ..
      config.hosts_dir .. '/' .. host .. '/lua/?.lua;' .. DEBIAN_PATH) }, ' ')
end

-- Runs one workload under callgrind with a host; returns the instructions
-- of the start and of the work with the stop.
local function measure(host, kind, name, dir, config)
  local profile = dir .. '/profile.bin'
  local out, log = dir .. '/cg.out', dir .. '/valgrind.log'
  local lua = config.hosts_dir .. '/' .. host .. '/luajit'
  local code = string.format('require(%q).child(%q, %q, %.17g, %q)',
    config.module, kind, name, config.scale * (CALLGRIND_FACTOR[name] or 1),
    profile)
  local cmd = table.concat({ host_env(host, config), 'timeout', CHILD_TIMEOUT_S, 'valgrind --tool=callgrind',
    '--dump-after=lj_cf_os_clock',
    '--callgrind-out-file=' .. shell_quote(out), shell_quote(lua),
    '-e', shell_quote(code), '>', shell_quote(log), '2>&1' }, ' ')
  if not execute(cmd) then
    error(string.format('callgrind run of %s on %s (%s) failed:\n%s', name,
      host, kind, (read_all(log) or ''):sub(-2000)), 0)
  end
  local start, work = read_dump(out .. '.2'), read_dump(out .. '.3')
  local r = { start = start.total, work = work.total,
    own = kind == 'memprof' and work.memprof or work.builtin }
  if kind ~= 'off' then r.events = config.count_events(profile) end
  execute('rm -f ' .. shell_quote(out) .. '* ' .. shell_quote(log) .. ' ' ..
    shell_quote(profile))
  return r
end

-- Times one workload on a host (see timed_child).
local function timed(host, name, dir, config)
  local out = dir .. '/timed.out'
  local away = BUILTIN_RUNS_AWAY[name] or false
  local code = string.format('require(%q).timed_child(%q, %.17g, %d, %q, %s)',
    config.module, name, away and JSON_TIMED_SCALE or config.timed_scale,
    config.rounds, dir, tostring(away))
  local cmd = table.concat({ host_env(host, config), 'timeout',
    CHILD_TIMEOUT_S, shell_quote(config.hosts_dir .. '/' .. host .. '/luajit'),
    '-e', shell_quote(code), '>', shell_quote(out), '2>&1' }, ' ')
  local ok = execute(cmd)
  local text = read_all(out) or ''
  os.remove(out)
  local v = {}
  for word in text:gmatch('%S+') do v[#v + 1] = tonumber(word) end
  if not ok or #v ~= 9 then
    error(string.format('timed run of %s on %s failed:\n%s', name, host,
      text:sub(-2000)), 0)
  end
  local t = { first = v[1], away = away,
    builtin = { per_event = v[2] / v[3], events = v[3], start = v[4],
      with_start = v[8] / v[3] },
    memprof = { per_event = v[5] / v[6], events = v[6], start = v[7],
      with_start = v[9] / v[6] } }
  t.ratio = t.memprof.with_start / t.builtin.with_start
  t.ratio_work = t.memprof.per_event / t.builtin.per_event
  return t
end

-- The figures of one profiler's run under callgrind: per event, its own
-- code's instructions (the work and the stop), the same with the whole
-- start added, and the process's instructions added to the unprofiled
-- run's.
local function figures(m, off)
  return { events = m.events, start = m.start,
    per_event = (m.work - off.work) / m.events, own = m.own / m.events,
    with_start = (m.own + m.start) / m.events }
end

local function measure_all(host, name, dir, config)
  local off = measure(host, 'off', name, dir, config)
  local r = { host = host, name = name }
  if BUILTIN_RUNS_AWAY[name] then
    r.memprof = figures(measure(host, 'memprof', name, dir, config), off)
  else
    for _, kind in ipairs({ 'builtin', 'memprof' }) do
      r[kind] = figures(measure(host, kind, name, dir, config), off)
    end
    r.ratio = r.memprof.with_start / r.builtin.with_start
    r.ratio_work = r.memprof.own / r.builtin.own
  end
  if config.rounds > 0 then r.timed = timed(host, name, dir, config) end
  return r
end

-- The worst row by a ratio (rows without it are left out).
local function worst_of(rows, ratio_of)
  local worst
  for _, r in ipairs(rows) do
    local ratio = ratio_of(r)
    if ratio and (not worst or ratio > ratio_of(worst)) then worst = r end
  end
  return worst
end

local function report(results, config, seconds)
  print(string.format('\nside by side with the built-in misc.memprof ' ..
    '(callgrind, scale %g, seed %d): instructions per event of each ' ..
    'profiler\'s own code (memprof.so; the built-in\'s functions), the ' ..
    'work and the stop (own), and with the whole of a later start added ' ..
    '(+start; the ratio is of these); added: the whole process\'s ' ..
    'instructions of the work minus an unprofiled run\'s, per event (JIT ' ..
    'decisions differ between runs: noisy); the start in instructions:',
    config.scale, config.seed))
  print(string.format('%-24s %-10s %7s %7s %7s %7s %7s %7s %7s %7s %6s %6s %9s %8s',
    'host', 'workload', 'events', 'b-in', '+start', 'added', 'events',
    'memprof', '+start', 'added', 'ratio', 'r.work', 'start b-in', 'start'))
  for _, r in ipairs(results) do
    local b, m = r.builtin, r.memprof
    if b then
      print(string.format(
        '%-24s %-10s %7d %7.1f %7.1f %7.1f %7d %7.1f %7.1f %7.1f %6.3f %6.3f %9d %8d',
        r.host, r.name, b.events, b.own, b.with_start, b.per_event, m.events,
        m.own, m.with_start, m.per_event, r.ratio, r.ratio_work, b.start,
        m.start))
    else
      print(string.format(
        '%-24s %-10s %7s %7s %7s %7s %7d %7.1f %7.1f %7.1f %6s %6s %9s %8d',
        r.host, r.name, '-', '-', '-', '-', m.events, m.own, m.with_start,
        m.per_event, '-', '-', '-', m.start))
    end
  end
  local noted = {}
  for _, r in ipairs(results) do
    if not r.builtin and not noted[r.name] then
      noted[r.name] = true
      print(string.format('(%s: the built-in writes its symbol table again ' ..
        'at each allocation in a C function, see bench/side_by_side.lua; ' ..
        'memprof alone here, both in CPU time)', r.name))
    end
  end
  local worst = worst_of(results, function(r) return r.ratio end)
  local mode = os.getenv('BENCH_SIDE_TRACE_LINES')
  if mode and mode ~= '' then
    print(string.format('(memprof with trace_lines = %q, not the default: ' ..
      'the verdicts below are not the target\'s)', mode))
  end
  if worst then
    print(string.format('memprof at most %.1f of the built-in\'s ' ..
      'instructions per event, the start included, on every workload: %s ' ..
      '(worst %.3f, %s on %s)', TARGET_RATIO,
      worst.ratio <= TARGET_RATIO and 'met' or 'MISSED', worst.ratio,
      worst.name, worst.host))
  end
  if config.rounds == 0 then return end
  print(string.format('\nside by side, CPU time (user and system, every ' ..
    'thread; scale %g, json %g; medians of %d alternated rounds): ns the ' ..
    'profile adds per event, the start, the work and the stop (with ' ..
    'start), and without the start; starts in ms',
    config.timed_scale, JSON_TIMED_SCALE, config.rounds))
  print(string.format('%-24s %-10s %10s %10s %9s %9s %7s %7s %10s %10s %10s',
    'host', 'workload', 'b-in+st', 'ours+st', 'b-in', 'ours', 'ratio',
    'r.work', 'start b-in', 'start ours', 'first ours'))
  for _, r in ipairs(results) do
    local t = r.timed
    if t then
      print(string.format(
        '%-24s %-10s %10.1f %10.1f %9.1f %9.1f %7.3f %7.3f %10.2f %10.2f %10.1f',
        r.host, r.name .. (t.away and '*' or ''), t.builtin.with_start * 1e9,
        t.memprof.with_start * 1e9, t.builtin.per_event * 1e9,
        t.memprof.per_event * 1e9, t.ratio, t.ratio_work,
        t.builtin.start * 1e3, t.memprof.start * 1e3, t.first * 1e3))
    end
  end
  worst = worst_of(results, function(r) return r.timed and r.timed.ratio end)
  if not worst then return end
  print('(*: the built-in\'s stream to /dev/null, its events counted as ' ..
    'memprof\'s of the same work; see bench/side_by_side.lua)')
  print(string.format('memprof at most %.1f of the built-in\'s CPU per ' ..
    'event, the start included, on every workload: %s (worst %.3f, %s on ' ..
    '%s); %d s', TARGET_RATIO,
    worst.timed.ratio <= TARGET_RATIO and 'met' or 'MISSED',
    worst.timed.ratio, worst.name, worst.host, seconds))
end

-- One row's figures on a line: instructions per event (built-in, then
-- memprof: own code, with the start), the ratio; CPU ns per event with
-- the start, the ratio.
local function progress(r)
  local b, m, t = r.builtin, r.memprof, r.timed
  return string.format('side by side: %s %s: instructions %s / %.1f ' ..
    '%.1f, ratio %s; CPU ns %s / %s, ratio %s\n', r.host, r.name,
    b and string.format('%.1f %.1f', b.own, b.with_start) or '-', m.own,
    m.with_start, r.ratio and string.format('%.3f', r.ratio) or '-',
    t and string.format('%.1f', t.builtin.with_start * 1e9) or '-',
    t and string.format('%.1f', t.memprof.with_start * 1e9) or '-',
    t and string.format('%.3f', t.ratio) or '-')
end

-- Whether a host's luajit has misc.memprof.
local function has_builtin(lua)
  local pipe = io.popen(shell_quote(lua) .. ' -e ' .. shell_quote(
    'io.write(type(misc) == "table" and type(misc.memprof) == "table" ' ..
    'and "yes" or "no")') .. ' 2>/dev/null')
  local out = pipe and pipe:read('*a')
  if pipe then pipe:close() end
  return out == 'yes'
end

local function list(env, default)
  if not env or env == '' then return default end
  local t = {}
  for word in env:gmatch('%S+') do t[#t + 1] = word end
  return t
end

-- config: scale (callgrind's), timed_scale, rounds (0: no timing), seed,
-- seed_library (absolute), hosts_dir, module (this module's name for
-- require) and count_events(path).
function M.run(config)
  if not execute('command -v valgrind >/dev/null 2>&1') then
    print('\nside by side: skipped, valgrind is not installed')
    return
  end
  local hosts = {}
  for _, host in ipairs(list(os.getenv('BENCH_SIDE_HOSTS'), HOSTS)) do
    local lua = config.hosts_dir .. '/' .. host .. '/luajit'
    if has_builtin(lua) then
      hosts[#hosts + 1] = host
    else
      print('\nside by side: ' .. host .. ' skipped, no misc.memprof in ' ..
        lua)
    end
  end
  local names = list(os.getenv('BENCH_SIDE_WORKLOADS'), WORKLOADS)
  local pipe = assert(io.popen('mktemp -d /tmp/memprof-side-XXXXXX'))
  local dir = pipe:read('*l')
  pipe:close()
  assert(dir and dir ~= '', 'mktemp -d failed')
  local started = os.time()
  local ok, results = pcall(function()
    local rows = {}
    for _, host in ipairs(hosts) do
      for _, name in ipairs(names) do
        local r = measure_all(host, name, dir, config)
        rows[#rows + 1] = r
        -- (A run of every host takes an hour: its rows, as they come.)
        io.stderr:write(progress(r))
      end
    end
    return rows
  end)
  execute('rm -rf ' .. shell_quote(dir))
  if not ok then error(results, 0) end
  report(results, config, os.difftime(os.time(), started))
end

return M
