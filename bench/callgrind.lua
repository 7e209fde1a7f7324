-- Instructions per event of the module itself, counted with callgrind.
--
-- Required by bench/run.lua. For each workload, three runs under
-- `valgrind --tool=callgrind`, each in a process of its own:
--
--   specialised  the default format, with the hook this VM gets (the one
--                specialised to its build family's constant offsets)
--   generic      the default format with MEMPROF_HOOK=generic, which forces
--                the hook a layout unlike every mode table gets
--   extended     the extended format (stack_depth as in bench/run.lua)
--   sampled      sampled recording at the default rate (sample_bytes =
--                true, seed 1)
--
-- The figure is the self cost (Ir) of the module's hot path, divided by the
-- events in the profile; for sampled recording, divided by the allocator
-- calls (the events of the specialised run, which sees the same JIT
-- decisions), as most calls are not recorded. The hot path is every function of memprof.so
-- compiled from a file of src/ other than the calibration and the binding
-- (see HOT_PATH_EXCLUDED). Unlike the timings, these counts do not depend on
-- the machine's load.
--
-- LuaJIT seeds the PRNG its JIT compiler draws from with random bytes, so
-- which traces a workload gets can differ from run to run (trees: from
-- about 125 to 185 instructions per event). The runs preload
-- build/fixed_seed.so
-- (bench/support/fixed_seed.c), which makes those bytes depend on a seed
-- only: a run is repeatable, and the three runs of a workload see the same
-- JIT decisions.
local M = {}

-- Sources of memprof.so whose functions are not on the hot path: the
-- calibration (vm_layout.c, vm_discover.c, vm_dump.c, vm_learn.c,
-- vm_trace_*.c, vm_vmdef.c) runs at the first start in a process (and a check of the
-- layout at each start), the binding (binding.c) at start and stop.
local HOT_PATH_EXCLUDED = {
  ['vm_layout.c'] = true, ['vm_discover.c'] = true, ['vm_learn.c'] = true,
  ['vm_trace_calib.c'] = true, ['vm_trace_search.c'] = true,
  ['vm_trace_frames.c'] = true, ['vm_dump.c'] = true, ['binding.c'] = true,
  ['vm_vmdef.c'] = true,
}
local CALIBRATION = { ['vm_layout.c'] = true, ['vm_discover.c'] = true,
  ['vm_learn.c'] = true, ['vm_trace_calib.c'] = true,
  ['vm_trace_search.c'] = true, ['vm_trace_frames.c'] = true,
  ['vm_dump.c'] = true, ['vm_vmdef.c'] = true }

-- Instructions of calibration sources in a measured run above which it
-- is noted (they are left out either way).
local CALIBRATION_NOTE_OVER = 100000

-- The project's target for the generic hook.
local TARGET_GENERIC_RATIO = 1.10

-- Each run under callgrind (about 50 times slower than natively) is
-- stopped after this many seconds.
local CHILD_TIMEOUT_S = 900

local toolkit = require('toolkit')
local shell_quote = toolkit.shell_quote
local read_all = toolkit.read_all
local reader = require('callgrind_reader')

-- os.execute's success in Lua 5.1/LuaJIT (status 0) and in 5.2+ (true).
local function execute(cmd)
  local status = os.execute(cmd)
  return status == 0 or status == true
end

-- ---- The child: what runs under callgrind ---------------------------------

-- Runs one workload in the process callgrind watches. The JIT compiler is
-- warmed up first, as in the timed runs. Then the profiler is started and
-- stopped once, which calibrates this VM (the layout is verified at the
-- first start, by vm_layout.c and vm_discover.c). The parent passes
-- --zero-before=l_start (memprof.start's C function, src/binding.c), so
-- callgrind's counters are zeroed at each memprof.start: what is left at
-- exit is the measured start, the workload and the stop, without the
-- warm-up and the calibration.
function M.child(name, scale, path, stack_depth, sampled)
  local memprof = require('memprof')
  local work = dofile('bench/workloads/' .. name .. '.lua')
  local options = stack_depth > 0 and { stack_depth = stack_depth } or {}
  if sampled then options = { sample_bytes = true, seed = 1 } end
  -- MEMPROF_BENCH_TRACE_LINES=exact|resume|start: events of compiled code
  -- by line or at the trace's start (default: memprof.start's).
  local tl = os.getenv('MEMPROF_BENCH_TRACE_LINES')
  if tl == 'start' then
    options.trace_lines = false
  elseif tl then
    options.trace_lines = tl
  end
  work(scale)
  assert(memprof.start(path, options))
  assert(memprof.stop())
  assert(memprof.start(path, options))
  work(scale)
  assert(memprof.stop())
end

-- ---- Reading callgrind's output -------------------------------------------

-- The source of src/ a function was compiled from, or nil.
local function source_in_src(file)
  return file:match('^src/([^/]+%.c)$') or file:match('/src/([^/]+%.c)$')
end

-- What a function of a run counts as: the hot path (memprof.so's functions
-- from a file of src/ but those of HOT_PATH_EXCLUDED), the calibration, or
-- neither (nil).
local function classify(ob, fl)
  local source = reader.basename(ob) == 'memprof.so' and source_in_src(fl)
  if source and not HOT_PATH_EXCLUDED[source] then return 'hot' end
  if source and CALIBRATION[source] then return 'calibration' end
  return nil
end

-- Reads a callgrind output file (bench/callgrind_reader.lua). Returns the
-- self cost (Ir) of the hot path and of the calibration, the set of hook
-- functions that ran, and the total.
local function read_callgrind(path)
  local r = reader.read(path, classify)
  local result = { hot = r.cost.hot or 0,
    calibration = r.cost.calibration or 0, total = r.total, hooks = {} }
  for fn, ir in pairs(r.functions.hot or {}) do
    if fn:match('^hook_') and ir > 0 then result.hooks[fn] = true end
  end
  return result
end

-- ---- Running ---------------------------------------------------------------

-- Which hook family a set of hook function names belongs to.
local function hook_kind(hooks)
  local generic, specialised = false, false
  for fn in pairs(hooks) do
    if fn:match('^hook_generic') then generic = true else specialised = true end
  end
  if generic == specialised then return nil end
  return generic and 'generic' or 'specialised'
end

local VARIANTS = {
  specialised = { env = '-u MEMPROF_HOOK', hook = 'specialised' },
  generic = { env = 'MEMPROF_HOOK=generic', hook = 'generic' },
  extended = { env = '-u MEMPROF_HOOK', hook = 'specialised',
    extended = true },
  sampled = { env = '-u MEMPROF_HOOK', hook = 'specialised', sampled = true },
}

-- The environment of a run: the variant's, and the fixed seed (the seed
-- library first, before whatever the caller preloads).
local function run_env(variant, config)
  local preload = config.seed_library
  if os.getenv('LD_PRELOAD') then
    preload = preload .. ' ' .. os.getenv('LD_PRELOAD')
  end
  return table.concat({ 'env', variant.env,
    'LD_PRELOAD=' .. shell_quote(preload),
    'MEMPROF_BENCH_SEED=' .. string.format('%d', config.seed) }, ' ')
end

-- Runs one workload under callgrind in dir; returns its events and the
-- instructions per event of the hot path.
local function measure(name, variant_name, dir, config)
  local variant = VARIANTS[variant_name]
  local profile, out, log = dir .. '/profile.bin', dir .. '/callgrind.out',
    dir .. '/valgrind.log'
  local code = string.format('require(%q).child(%q, %.17g, %q, %d, %s)',
    config.module, name, config.scale, profile,
    variant.extended and config.stack_depth or 0, tostring(variant.sampled))
  local cmd = table.concat({ run_env(variant, config), 'timeout',
    CHILD_TIMEOUT_S,
    'valgrind --tool=callgrind --zero-before=l_start',
    '--callgrind-out-file=' .. shell_quote(out), shell_quote(config.lua),
    '-e', shell_quote(code), '>', shell_quote(log), '2>&1' }, ' ')
  if not execute(cmd) then
    error(string.format('callgrind run of %s (%s) failed:\n%s', name,
      variant_name, read_all(log):sub(-2000)), 0)
  end
  local cost = read_callgrind(out)
  local events = config.count_events(profile)
  os.remove(profile)
  os.remove(out)
  os.remove(log)
  local kind = hook_kind(cost.hooks)
  if kind ~= variant.hook then
    error(string.format('%s (%s): expected the %s hook, the hooks that ran ' ..
      'are %s', name, variant_name, variant.hook,
      kind or 'a mixture (or none)'), 0)
  end
  -- Every start checks the learned layout against its VM (some 10,000
  -- instructions of vm_layout.c); a calibration costs millions.
  if cost.calibration > CALIBRATION_NOTE_OVER then
    io.stderr:write(string.format('note: %s (%s): calibration code ran in ' ..
      'the measured run (%d instructions, left out)\n', name, variant_name,
      cost.calibration))
  end
  return { events = events, hot = cost.hot, per_event = cost.hot / events }
end

local function measure_workload(name, dir, config)
  local r = { name = name }
  for _, variant in ipairs({ 'specialised', 'generic', 'extended',
    'sampled' }) do
    r[variant] = measure(name, variant, dir, config)
  end
  r.ratio = r.generic.per_event / r.specialised.per_event
  r.sampled_per_call = r.sampled.hot / r.specialised.events
  return r
end

local function report(results, config, seconds)
  print(string.format('\ninstructions per event of the module (callgrind, ' ..
    'scale %g, seed %d; self cost of src/ without calibration and ' ..
    'binding; sampled/call: sampled recording at the default rate, per ' ..
    'allocator call):', config.scale, config.seed))
  print(string.format('%-11s %9s %12s %9s %9s %9s %13s', 'workload',
    'events', 'specialised', 'generic', 'ratio', 'extended', 'sampled/call'))
  local worst
  for _, r in ipairs(results) do
    print(string.format('%-11s %9d %12.1f %9.1f %8.3fx %9.1f %13.1f', r.name,
      r.specialised.events, r.specialised.per_event, r.generic.per_event,
      r.ratio, r.extended.per_event, r.sampled_per_call))
    if not worst or r.ratio > worst.ratio then worst = r end
  end
  print(string.format('generic hook at most %d%% more instructions per ' ..
    'event than the specialised one, in every workload: %s (worst %.3fx, ' ..
    '%s); %d s under callgrind',
    math.floor((TARGET_GENERIC_RATIO - 1) * 100 + 0.5),
    worst.ratio <= TARGET_GENERIC_RATIO and 'met' or 'MISSED', worst.ratio,
    worst.name, seconds))
end

local function absolute(path)
  if path:sub(1, 1) == '/' then return path end
  local pipe = assert(io.popen('pwd'))
  local dir = pipe:read('*l')
  pipe:close()
  return dir .. '/' .. path
end

-- Runs the section for the workloads in names. config: scale, seed,
-- seed_library (build/fixed_seed.so), stack_depth, lua (the interpreter),
-- module (this module's name for require) and count_events(path) (events
-- in a profile, as bench/run.lua counts them).
function M.run(names, config)
  if not execute('command -v valgrind >/dev/null 2>&1') then
    print('\ninstructions per event: skipped, valgrind is not installed')
    return
  end
  local f = io.open(config.seed_library, 'rb')
  if not f then
    print('\ninstructions per event: skipped, ' .. config.seed_library ..
      ' is missing (make build/fixed_seed.so)')
    return
  end
  f:close()
  -- The runs preload it by path, from wherever they are.
  config = setmetatable({ seed_library = absolute(config.seed_library) },
    { __index = config })
  local pipe = assert(io.popen('mktemp -d'))
  local dir = pipe:read('*l')
  pipe:close()
  assert(dir and dir ~= '', 'mktemp -d failed')
  local start = os.time()
  local ok, results = pcall(function()
    local list = {}
    for _, name in ipairs(names) do
      list[#list + 1] = measure_workload(name, dir, config)
    end
    return list
  end)
  execute('rm -rf ' .. shell_quote(dir))
  if not ok then error(results, 0) end
  report(results, config, os.difftime(os.time(), start))
end

return M
