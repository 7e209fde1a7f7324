-- The first start of a process (make bench, the first start section): the
-- CPU time of the first memprof.start of a fresh process, or of its first
-- heap snapshot (os.clock around the call, which learns the build's layout
-- and checks the VM), and the reads it made (memprof.info().reads), under
-- each build named. Each kind is run in BENCH_START_ROUNDS processes
-- (default 7); the median and the minimum are printed (a shared machine's
-- load only adds to CPU time: the minimum is the nearest to a quiet one),
-- and the slowest median of the starts beside the target (10 ms), then
-- that of the first heap snapshots.
--
--   BENCH_START=off                 without this section
--   BENCH_START=only                this section alone
--   BENCH_START_HOSTS='luajit luajit2 tarantool upstream-2017-gc64 ...'
--                                   the builds (default: BENCH_TRACE_HOSTS,
--                                   else every x86_64 build of CI there is
--                                   here: `luajit`, `luajit2`, `tarantool`
--                                   and build/hosts/*): `luajit` is the Lua
--                                   running the bench, `luajit2` OpenResty's
--                                   in build/luajit2, `tarantool` the one on
--                                   PATH, other names build/hosts/NAME
local toolkit = require('toolkit')
local shell_quote, median = toolkit.shell_quote, toolkit.median

local M = {}

local ROUNDS = tonumber(os.getenv('BENCH_START_ROUNDS')) or 7
local TARGET_MS = 10

local KINDS = {
  { name = 'default', call = 'start', options = 'nil' },
  { name = 'trace_lines=false', call = 'start',
    options = '{ trace_lines = false }' },
  { name = 'sampled', call = 'start',
    options = '{ sample_bytes = true, seed = 1 }' },
  { name = 'heap snapshot', call = 'heap', options = 'nil' },
}

-- The child: one first call, timed; prints its CPU ms and reads.
local CHILD = [[
local memprof = require('memprof')
local path = os.tmpname()
local c0 = os.clock()
local ok, err
if CALL == 'heap' then
  ok, err = memprof.snapshot(path, { format = 'heap' })
else
  ok, err = memprof.start(path, OPTIONS)
end
local c1 = os.clock()
assert(ok, err)
if CALL ~= 'heap' then assert(memprof.stop()) end
os.remove(path)
io.write(string.format('first %.3f %d\n', (c1 - c0) * 1e3,
  memprof.info().reads))
]]

local function host(name, lua)
  local paths = './lua/?.lua;'
  if name == 'luajit' then return { name = name, binary = lua, env = '' } end
  if name == 'luajit2' then
    return { name = name, binary = 'build/luajit2/usr/bin/luajit',
      env = 'LUA_CPATH=' .. shell_quote('./build/?.so;;') .. ' LUA_PATH=' ..
        shell_quote(paths .. ';') .. ' ' }
  end
  if name == 'tarantool' then
    return { name = name, binary = 'tarantool',
      env = 'LUA_CPATH=' .. shell_quote('./build/?.so;;') .. ' LUA_PATH=' ..
        shell_quote(paths .. ';') .. ' ' }
  end
  local dir = 'build/hosts/' .. name
  local file = io.open(dir .. '/luajit')
  if not file then
    error('no host ' .. name .. ' (' .. dir .. '/luajit): make hosts')
  end
  file:close()
  return { name = name, binary = dir .. '/luajit', env = 'LUA_CPATH=' ..
    shell_quote('./build/?.so;;') .. ' LUA_PATH=' ..
    shell_quote(paths .. dir .. '/lua/?.lua;;') .. ' ' }
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

-- The CI builds present: luajit, luajit2 and tarantool if installed, and
-- each x86_64 build of build/hosts (the arm64 ones run under qemu).
local function ci_builds()
  local names = { 'luajit' }
  if exists('build/luajit2/usr/bin/luajit') then
    names[#names + 1] = 'luajit2'
  end
  local found = os.execute('command -v tarantool >/dev/null 2>&1')
  if found == 0 or found == true then
    names[#names + 1] = 'tarantool'
  end
  local pipe = io.popen('ls build/hosts 2>/dev/null')
  for name in pipe:read('*a'):gmatch('%S+') do
    if not name:find('arm64', 1, true) and
      exists('build/hosts/' .. name .. '/luajit') then
      names[#names + 1] = name
    end
  end
  pipe:close()
  return table.concat(names, ' ')
end

local function hosts(lua)
  local list = {}
  local names = os.getenv('BENCH_START_HOSTS') or
    os.getenv('BENCH_TRACE_HOSTS') or ci_builds()
  for name in names:gmatch('[^%s,]+') do list[#list + 1] = host(name, lua) end
  return list
end

-- One fresh process; returns the CPU ms and the reads, or nil.
local function once(h, kind, script)
  local source = CHILD:gsub('CALL', string.format('%q', kind.call))
    :gsub('OPTIONS', kind.options)
  local f = assert(io.open(script, 'w'))
  f:write(source)
  f:close()
  local pipe = assert(io.popen(h.env .. 'timeout 120 ' ..
    shell_quote(h.binary) .. ' ' .. shell_quote(script) .. ' 2>&1'))
  local out = pipe:read('*a')
  pipe:close()
  local ms, reads = out:match('first (%S+) (%d+)')
  if not ms then
    print(string.format('  %s, %s: failed: %s', h.name, kind.name, out))
    return nil
  end
  return tonumber(ms), tonumber(reads)
end

function M.run(lua)
  local script = os.tmpname()
  local worst, worst_heap = -math.huge, -math.huge
  print(string.format('\nfirst start of a process: CPU ms (os.clock around ' ..
    'the call), the median and the minimum of %d processes, and its ' ..
    'reads (memprof.info().reads):', ROUNDS))
  print(string.format('%-26s %-18s %8s %8s %8s', 'build', 'first', 'median',
    'min', 'reads'))
  for _, h in ipairs(hosts(lua)) do
    for _, kind in ipairs(KINDS) do
      local ms, reads = {}, {}
      for i = 1, ROUNDS do
        ms[i], reads[i] = once(h, kind, script)
        if not ms[i] then break end
      end
      if #ms == ROUNDS then
        local m = median(ms)
        if kind.call == 'heap' then
          worst_heap = math.max(worst_heap, m)
        else
          worst = math.max(worst, m)
        end
        print(string.format('%-26s %-18s %8.1f %8.1f %8d', h.name, kind.name,
          m, math.min(unpack(ms)), median(reads)))
      end
    end
  end
  os.remove(script)
  print(string.format('slowest first start (median): %.1f ms CPU ' ..
    '(target <= %d): %s', worst, TARGET_MS,
    worst <= TARGET_MS and 'met' or 'MISSED'))
  print(string.format('slowest first heap snapshot (median): %.1f ms CPU',
    worst_heap))
end

return M
