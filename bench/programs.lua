-- The cost of profiling whole programs (make bench): each program runs in
-- a process of its own, not profiled, fully profiled and sampled at the
-- default rate, in turn (ROUNDS times each), under /usr/bin/time; prints
-- the medians of wall and CPU time (user + system) and the slowdowns.
-- The sampled mode's target: at most 3% more CPU time.
--
--   json      bench/programs/json.lua: lua-cjson decoding and encoding a
--             document of 2,000 records (skipped without lua-cjson)
--   luacheck  luacheck (Debian's lua-check) over its own sources
--             (skipped without it)
--
--   BENCH_PROGRAMS=off            without this section
--   BENCH_PROGRAMS=only           this section alone
--   BENCH_PROGRAM_ROUNDS          runs of each mode (default 5)
--
-- The profiler starts from a chunk given to -e before the program, as
-- `memprof run` does, and the profile is completed when the VM closes.
local toolkit = require('toolkit')
local shell_quote, read_all, median = toolkit.shell_quote, toolkit.read_all,
  toolkit.median

local M = {}

local ROUNDS = tonumber(os.getenv('BENCH_PROGRAM_ROUNDS')) or 5
local TARGET_SLOWDOWN = 1.03

local MODES = {
  { name = 'off' },
  { name = 'full', options = 'nil' },
  { name = 'sampled', options = '{ sample_bytes = true }' },
}

-- The programs: a name, the words after the interpreter, and whether it
-- can run here (or why not).
local function programs(lua)
  local function runs(words)
    local code = os.execute('timeout 60 ' .. lua .. ' ' .. words ..
      ' > /dev/null 2>&1')
    return code == 0 or code == true
  end
  return {
    { name = 'json', words = 'bench/programs/json.lua',
      usable = runs('-e "require(\'cjson\')"'),
      missing = 'lua-cjson is not installed' },
    { name = 'luacheck',
      words = '/usr/bin/luacheck --no-cache -q /usr/share/lua/5.1/luacheck',
      usable = io.open('/usr/bin/luacheck') ~= nil and
        io.open('/usr/share/lua/5.1/luacheck/init.lua') ~= nil,
      missing = 'luacheck (Debian\'s lua-check) is not installed' },
  }
end

-- The chunk that starts the profiler before the program.
local function starter(options)
  return table.concat({
    "local memprof = require('memprof')",
    "assert(memprof.start(os.getenv('MEMPROF_BENCH_PROFILE'), " .. options ..
      '))',
  }, ' ')
end

-- One run: wall and CPU seconds.
local function run_once(lua, program, mode, profile, times)
  os.remove(profile)
  local words = program.words
  if mode.options then
    words = '-e ' .. shell_quote(starter(mode.options)) .. ' ' .. words
  end
  local line = string.format('MEMPROF_BENCH_PROFILE=%s /usr/bin/time ' ..
    '-f "%%e %%U %%S" -o %s timeout 600 %s %s > /dev/null 2>&1',
    shell_quote(profile), shell_quote(times), lua, words)
  os.execute(line)
  local wall, user, system = read_all(times):match('([%d.]+) ([%d.]+) ([%d.]+)')
  assert(wall, 'no times from: ' .. line)
  os.remove(profile)
  return tonumber(wall), tonumber(user) + tonumber(system)
end

local function measure(lua, program)
  local profile, times = os.tmpname(), os.tmpname()
  local wall, cpu = {}, {}
  for _, mode in ipairs(MODES) do
    wall[mode.name], cpu[mode.name] = {}, {}
  end
  run_once(lua, program, MODES[1], profile, times) -- warm the file cache
  for round = 1, ROUNDS do
    for _, mode in ipairs(MODES) do
      wall[mode.name][round], cpu[mode.name][round] =
        run_once(lua, program, mode, profile, times)
    end
  end
  os.remove(profile)
  os.remove(times)
  local result = { name = program.name }
  for _, mode in ipairs(MODES) do
    result[mode.name] = { wall = median(wall[mode.name]),
      cpu = median(cpu[mode.name]) }
  end
  return result
end

local function report(results)
  print(string.format('%-9s %9s %9s %10s %10s %12s %12s', 'program',
    'off s', 'off cpu s', 'full cpu', 'full wall', 'sampled cpu',
    'sampled wall'))
  local worst = -math.huge
  for _, r in ipairs(results) do
    local function ratio(mode, field) return r[mode][field] / r.off[field] end
    print(string.format('%-9s %9.2f %9.2f %9.3fx %9.3fx %11.3fx %11.3fx',
      r.name, r.off.wall, r.off.cpu, ratio('full', 'cpu'),
      ratio('full', 'wall'), ratio('sampled', 'cpu'),
      ratio('sampled', 'wall')))
    worst = math.max(worst, ratio('sampled', 'cpu'))
  end
  if #results > 0 then
    print(string.format('worst CPU slowdown of sampled recording: %.1f%% ' ..
      '(target <= %.0f%%): %s', (worst - 1) * 100,
      (TARGET_SLOWDOWN - 1) * 100, worst <= TARGET_SLOWDOWN and 'met' or
      'MISSED'))
  end
end

function M.run(lua)
  print(string.format('\nprograms, %d rounds of each mode, medians ' ..
    '(sampled: one sample per 524288 bytes on average):', ROUNDS))
  local results = {}
  for _, program in ipairs(programs(lua)) do
    if program.usable then
      results[#results + 1] = measure(lua, program)
    else
      print(program.name .. ': skipped, ' .. program.missing)
    end
  end
  report(results)
end

return M
