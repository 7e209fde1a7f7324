-- Lines for compiled code (make bench, the trace lines section): how well
-- a profile made with the JIT compiler on agrees with one made with it
-- off, and what each mode of `trace_lines` costs the program.
--
-- Each program runs in a process of its own, profiled from a chunk given
-- to -e before it (the profile is completed when the VM closes), once
-- with -joff and once with the JIT on in each mode. Agreement is
-- 1 - the total variation distance between the two distributions of
-- allocated bytes (allocations and reallocations, new sizes): by place
-- (the line, or for an event left to its trace, the trace's start), and
-- with stack_depth = 16 by stack (the names of the frames). The VM's own
-- events (INTERNAL) are left out of both: the compiler's exist only with
-- the JIT on.
--
--   escaping  bench/programs/escaping.lua: every allocation escapes, so
--             no trace sinks one (targets: 0.95 for 'exact', 0.90 for a
--             full profile's default, 0.95 by stack)
--   luacheck  luacheck (Debian's lua-check) over its own sources
--             (targets 0.85 by line and 0.95 by stack for the default;
--             skipped without it)
--   dkjson    bench/programs/dkjson.lua: dkjson (Debian's lua-dkjson)
--             decoding and encoding, its traces stitched around string
--             functions (targets 0.95 by line and by stack for the
--             default; skipped without it)
--
-- By stack, the JIT-on stacks must be no longer than stack_depth: the
-- line says how many bytes had a longer one (a defect whatever the
-- agreement).
--
-- Then, per program, the bytes the JIT compiler allocated in each mode
-- (INTERNAL (JIT compiler), from the runs with stacks) against those with
-- trace starts, which change nothing in compiled code (target: at most
-- 1.05 times for the default). On x86_64 every run preloads
-- build/fixed_seed.so, so that the JIT compiler's random choices repeat.
--
-- Then the cost to the program: CPU time of each program unprofiled and
-- profiled in each mode, JIT on, the median of BENCH_TRACE_ROUNDS runs
-- (default 5; 0: the agreements alone).
--
--   BENCH_TRACE_LINES=off           without this section
--   BENCH_TRACE_PROGRAMS='dkjson'   these programs alone (default: all)
--   BENCH_TRACE_MODES='default'     these modes alone (default: all)
--   BENCH_TRACE_LINES=only          this section alone
--   BENCH_TRACE_MISSES=N            the N places where each mode's
--                                   profile by line differs most from
--                                   the JIT-off one, with both shares,
--                                   then the N stacks
--   BENCH_TRACE_HOSTS='luajit openresty-sid tarantool-master-gc64 ...'
--                                   the agreements under each of these
--                                   (`luajit`: the Lua running the bench,
--                                   other names: build/hosts/NAME/luajit
--                                   with its own jit.* modules, and for
--                                   an arm64 one its own module); the costs
--                                   are measured under the first only
--                                   (default: `luajit`)
--   HOSTS_DIR                       where those hosts are (default
--                                   build/hosts)
local reader = require('memprof.read.stream')
local toolkit = require('toolkit')
local shell_quote, read_all, median = toolkit.shell_quote, toolkit.read_all,
  toolkit.median

local M = {}

local ROUNDS = tonumber(os.getenv('BENCH_TRACE_ROUNDS')) or 5
-- Places by line printed per program and mode, where they disagree most.
local MISSES = tonumber(os.getenv('BENCH_TRACE_MISSES')) or 0
local STACK_DEPTH = 16
-- Where the hosts of BENCH_TRACE_HOSTS are (make's HOSTS_DIR).
local HOSTS_DIR = os.getenv('HOSTS_DIR') or 'build/hosts'

-- The modes compared with the JIT off: the options given to start.
local MODES = {
  { name = 'default', options = 'nil', line_target = 0.90 },
  { name = 'exact', options = "{ trace_lines = 'exact' }", line_target = 0.95 },
  { name = 'walk', options = "{ trace_lines = 'walk' }" },
  { name = 'resume', options = "{ trace_lines = 'resume' }" },
  { name = 'start', options = '{ trace_lines = false }' },
}

-- Whether the list in environment variable `var` names `name` (no list:
-- everything).
local function wanted(var, name)
  local list = os.getenv(var)
  return not list or (' ' .. list .. ' '):find(' ' .. name .. ' ', 1, true)
end

local function installed(path)
  local file = io.open(path)
  if file then file:close() end
  return file ~= nil
end

local function programs()
  local luacheck = installed('/usr/bin/luacheck') and
    installed('/usr/share/lua/5.1/luacheck/init.lua')
  local list = {
    { name = 'escaping', words = 'bench/programs/escaping.lua', usable = true,
      stack_target = 0.95 },
    { name = 'luacheck', usable = luacheck,
      words = '/usr/bin/luacheck --no-cache -q /usr/share/lua/5.1/luacheck',
      missing = 'luacheck (Debian\'s lua-check) is not installed',
      line_targets = { default = 0.85 }, stack_target = 0.95 },
    { name = 'dkjson', words = 'bench/programs/dkjson.lua',
      usable = installed('/usr/share/lua/5.1/dkjson.lua'),
      missing = 'dkjson (Debian\'s lua-dkjson) is not installed',
      line_targets = { default = 0.95 }, stack_target = 0.95 },
  }
  local chosen = {}
  for _, program in ipairs(list) do
    if wanted('BENCH_TRACE_PROGRAMS', program.name) then
      chosen[#chosen + 1] = program
    end
  end
  return chosen
end

-- The chunk that starts the profiler before the program, with the mode's
-- options and, for stacks, stack_depth added.
local function starter(options, depth)
  if depth then
    options = options == 'nil' and '{}' or options
    options = string.format('(function(o) o.stack_depth = %d return o end)(%s)',
      depth, options)
  end
  return "local memprof = require('memprof') " ..
    "assert(memprof.start(os.getenv('MEMPROF_BENCH_PROFILE'), " .. options ..
    '))'
end

-- Runs the program once; returns CPU seconds, or nil and what it printed.
-- `lua` is a host: its binary and the environment it runs in.
local function run(lua, flags, program, profile, options, depth)
  local times, output = os.tmpname(), os.tmpname()
  local words = program.words
  if options then
    words = '-e ' .. shell_quote(starter(options, depth)) .. ' ' .. words
  end
  os.remove(profile)
  os.execute(string.format('%sMEMPROF_BENCH_PROFILE=%s /usr/bin/time ' ..
    '-f "%%U %%S" -o %s timeout 600 %s %s %s > /dev/null 2>%s',
    lua.env, shell_quote(profile), shell_quote(times), lua.binary, flags,
    words, shell_quote(output)))
  local user, system = read_all(times):match('([%d.]+) ([%d.]+)%s*$')
  local said = read_all(output)
  os.remove(times)
  os.remove(output)
  if not user or said:find('(command line)', 1, true) then
    return nil, said
  end
  return tonumber(user) + tonumber(system)
end

local function stack_key(ev)
  local frames, names = ev.stack, {}
  if not frames then return ev.site.name end
  for i = 1, #frames do names[i] = frames[i].name end
  return table.concat(names, ' <- ')
end

-- Allocated bytes of a profile by place (or stack), without INTERNAL;
-- by stack, also the bytes whose stack is longer than `depth`, and the
-- bytes the JIT compiler allocated (INTERNAL (JIT compiler): the extended
-- format, which stack_depth gives, says what the VM was doing).
local function distribution(path, by_stack, depth)
  local stream = reader.open(path)
  local bytes, total, too_deep, compiler = {}, 0, 0, 0
  for ev in stream:each() do
    if ev.kind ~= 'free' and ev.site.internal_kind == 'JIT compiler' then
      compiler = compiler + ev.nsize
    end
    if ev.kind ~= 'free' and ev.site.source ~= 'internal' then
      local key = by_stack and stack_key(ev) or ev.site.name
      bytes[key] = (bytes[key] or 0) + ev.nsize
      total = total + ev.nsize
      if depth and ev.stack and #ev.stack > depth then
        too_deep = too_deep + ev.nsize
      end
    end
  end
  stream:close()
  return bytes, total, too_deep, compiler
end

-- The places (or stacks) whose share differs most between the JIT-off
-- profile `a` and the JIT-on profile `b`, `count` of them, printed with
-- both shares (BENCH_TRACE_MISSES).
local function print_misses(a, atotal, b, btotal, count)
  local diffs = {}
  for key, n in pairs(a) do
    diffs[#diffs + 1] = { key = key, off = n / atotal,
      on = (b[key] or 0) / btotal }
  end
  for key, n in pairs(b) do
    if not a[key] then
      diffs[#diffs + 1] = { key = key, off = 0, on = n / btotal }
    end
  end
  table.sort(diffs, function(x, y)
    return math.abs(x.off - x.on) > math.abs(y.off - y.on)
  end)
  for i = 1, math.min(count, #diffs) do
    local d = diffs[i]
    print(string.format('    JIT off %.4f, on %.4f: %s', d.off, d.on, d.key))
  end
end

-- 1 - total variation distance of two distributions.
local function agreement(a, atotal, b, btotal)
  if atotal == 0 or btotal == 0 then return 0 end
  local sum = 0
  for key, n in pairs(a) do
    local m = b[key]
    if m then sum = sum + math.min(n / atotal, m / btotal) end
  end
  return sum
end

-- Agreement of one mode with the JIT off, by line and by stack.
local function compare(lua, program, mode, off, off_stacks, profile)
  local cpu, err = run(lua, '', program, profile, mode.options)
  if not cpu then return nil, err end
  local on, on_total = distribution(profile)
  local by_line = agreement(off.bytes, off.total, on, on_total)
  if MISSES > 0 then
    print_misses(off.bytes, off.total, on, on_total, MISSES)
  end
  local by_stack, too_deep, compiler
  if off_stacks then
    cpu, err = run(lua, '', program, profile, mode.options, STACK_DEPTH)
    if not cpu then return nil, err end
    local bytes, total
    bytes, total, too_deep, compiler = distribution(profile, true,
      STACK_DEPTH)
    by_stack = agreement(off_stacks.bytes, off_stacks.total, bytes, total)
    if MISSES > 0 then
      print('    by stack:')
      print_misses(off_stacks.bytes, off_stacks.total, bytes, total, MISSES)
    end
  end
  os.remove(profile)
  return by_line, by_stack, too_deep, compiler
end

local function verdict(value, target)
  if not target or not value then return '' end
  return string.format(' (target %.2f: %s)', target,
    value >= target and 'met' or 'MISSED')
end

-- Prints one mode's agreements with the JIT off; returns the bytes the JIT
-- compiler allocated in its run with stacks.
local function report_mode(lua, program, mode, off, off_stacks, profile)
  local by_line, by_stack, too_deep, compiler = compare(lua, program, mode,
    off, off_stacks, profile)
  if not by_line then
    print(string.format('%-9s %-8s not run: %s', program.name, mode.name,
      ((by_stack or ''):match('[^\n]*'))))
    return
  end
  local target = program.line_targets and program.line_targets[mode.name]
    or (not program.line_targets and mode.line_target)
  local line = string.format('%-9s %-8s by line %.3f%s', program.name,
    mode.name, by_line, verdict(by_line, target))
  if by_stack then
    local stack_target = mode.name == 'default' and program.stack_target
    line = line .. string.format(', by stack %.3f%s', by_stack,
      verdict(by_stack, stack_target))
    if too_deep > 0 then
      line = line .. string.format(' (%d bytes on stacks deeper than %d: ' ..
        'MISSED)', too_deep, STACK_DEPTH)
    end
  end
  print(line)
  return compiler
end

-- The JIT compiler's allocations in each mode, against those with trace
-- starts (`trace_lines = false`, which changes nothing in compiled code).
local function report_compiler(program, compiler)
  local base = compiler.start
  local parts = {}
  for _, mode in ipairs(MODES) do
    local bytes = compiler[mode.name]
    if bytes then
      local part = string.format('%s %d', mode.name, bytes)
      if base and base > 0 then
        part = part .. string.format(' (%.3fx)', bytes / base)
      end
      parts[#parts + 1] = part
    end
  end
  if #parts > 0 then
    print(string.format('%-9s JIT compiler\'s bytes: %s', program.name,
      table.concat(parts, ', ')))
  end
end

local function agreements(lua, program, profile)
  assert(run(lua, '-joff', program, profile, 'nil'))
  local off = {}
  off.bytes, off.total = distribution(profile)
  local off_stacks
  if program.stack_target then
    assert(run(lua, '-joff', program, profile, 'nil', STACK_DEPTH))
    off_stacks = {}
    off_stacks.bytes, off_stacks.total = distribution(profile, true)
  end
  local compiler = {}
  for _, mode in ipairs(MODES) do
    if wanted('BENCH_TRACE_MODES', mode.name) then
      compiler[mode.name] = report_mode(lua, program, mode, off, off_stacks,
        profile)
    end
  end
  report_compiler(program, compiler)
end

-- CPU time of the program unprofiled and in each mode (JIT on).
local function costs(lua, program, profile)
  local cpu = { off = {} }
  for _, mode in ipairs(MODES) do cpu[mode.name] = {} end
  for round = 1, ROUNDS do
    cpu.off[round] = run(lua, '', program, profile, nil)
    for _, mode in ipairs(MODES) do
      cpu[mode.name][round] = run(lua, '', program, profile, mode.options) or
        0 / 0
    end
  end
  os.remove(profile)
  local off = median(cpu.off)
  local parts = { string.format('%-9s unprofiled %.2f s CPU', program.name,
    off) }
  for _, mode in ipairs(MODES) do
    parts[#parts + 1] = string.format('%s %.3fx', mode.name,
      median(cpu[mode.name]) / off)
  end
  print(table.concat(parts, ', '))
end

-- The hosts of BENCH_TRACE_HOSTS: `luajit` is the Lua running the bench
-- (with the environment it runs in); another name is a source-built host,
-- run with this tree's module and Lua files, its own jit.* modules
-- (jit.vmdef names its ops) and Debian's Lua modules (luacheck's).
local function hosts(lua)
  local list = {}
  -- The JIT compiler's random choices fixed (x86_64 hosts; make bench
  -- builds it), so that its allocations compare between modes.
  local seed = installed('build/fixed_seed.so') and
    'LD_PRELOAD=./build/fixed_seed.so ' or ''
  for name in (os.getenv('BENCH_TRACE_HOSTS') or 'luajit'):gmatch('[^%s,]+')
  do
    if name == 'luajit' then
      list[#list + 1] = { name = name, binary = lua, env = seed }
    else
      local dir = HOSTS_DIR .. '/' .. name
      local binary = dir .. '/luajit'
      local file = io.open(binary)
      if not file then
        error('no host ' .. name .. ' (' .. binary .. '): make hosts')
      end
      file:close()
      -- (An arm64 host has its own build of the module and of Debian's
      -- C modules: .ci/build-hosts.)
      local cpath = './build/?.so;/usr/lib/x86_64-linux-gnu/lua/5.1/?.so'
      local env = seed
      file = io.open(dir .. '/memprof.so')
      if file then
        file:close()
        env = ''
        cpath = dir .. '/?.so;' .. dir ..
          '/deps/usr/lib/aarch64-linux-gnu/lua/5.1/?.so'
      end
      list[#list + 1] = { name = name, binary = binary, env = env ..
        string.format('LUA_CPATH=%s LUA_PATH=%s ', shell_quote(cpath),
        shell_quote('./lua/?.lua;' .. dir .. '/lua/?.lua;' ..
          '/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua')) }
    end
  end
  return list
end

function M.run(lua)
  local profile = os.tmpname()
  local usable, list = {}, hosts(lua)
  for _, host in ipairs(list) do
    print(string.format('\ntrace lines on %s: agreement with the JIT off ' ..
      '(1 - total variation distance of allocated bytes, INTERNAL left out):',
      host.name))
    usable = {}
    for _, program in ipairs(programs()) do
      if program.usable then
        agreements(host, program, profile)
        usable[#usable + 1] = program
      else
        print(program.name .. ': skipped, ' .. program.missing)
      end
    end
  end
  if ROUNDS < 1 then
    os.remove(profile)
    return
  end
  print(string.format('trace lines on %s: CPU time with the JIT on, the ' ..
    'median of %d runs, profiled over unprofiled:', list[1].name, ROUNDS))
  for _, program in ipairs(usable) do costs(list[1], program, profile) end
  os.remove(profile)
end

return M
