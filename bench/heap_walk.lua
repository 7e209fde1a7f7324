-- The heap walk's cost (make bench): in a process of its own, a heap of
-- about 1,000,000 objects (records of a table, a unique string, an array
-- and a closure with its upvalue), snapshotted ROUNDS times with
-- memprof.snapshot(path, {format = 'heap'}); prints the medians of wall
-- and CPU time, the C memory the walk held per object (from the file's
-- epilogue), the file's size, and the time the reader and the dominator
-- analysis (streamed from the file) take over it, the Lua memory its
-- result holds and the process's peak RSS (the heap of 1,000,000 objects
-- included); then memprof-report's text report of the snapshot in a
-- process of its own, alone and with --profile (of a snapshot taken
-- during a profile that ran while the heap was made, before the timed
-- walks): its wall time and peak RSS. Targets: at most 1 s
-- and 100 bytes of C memory per object for the walk; at most 10 s and
-- 1 GB for the report.
--
--   BENCH_HEAP=off                without this section
--   BENCH_HEAP=only               this section alone
--   BENCH_HEAP_RECORDS            records (default 200,000: 5 objects each)
--   BENCH_HEAP_GIB=on             then a heap of 1 GiB (bench/heap_gib.lua)
--   BENCH_HEAP_PID=off            without `memprof heap PID`'s pause
--                                 (bench/heap_pid.lua, after the rest)
--   BENCH_HEAP_LIST               the depth of the list whose snapshot is
--                                 reported last (default 2,000,000:
--                                 `{ next = ... }`; the same targets)
local toolkit = require('toolkit')
local shell_quote = toolkit.shell_quote

local M = {}

local TARGET_SECONDS = 1
local TARGET_BYTES_PER_OBJECT = 100
local TARGET_REPORT_SECONDS = 10
local TARGET_REPORT_MB = 1024

-- memprof-report's text report of the snapshot at arg[1], to /dev/null
-- (with the words after it as options).
local REPORT = [[
local cli = require('memprof.cli.report')
local null = assert(io.open('/dev/null', 'w'))
os.exit(cli.main({ arg[1], arg[2] }, null, io.stderr))
]]

-- The wall time, peak RSS (MB) and CPU time (user and system) of
-- memprof-report on the snapshot at path (`option`: an option, or nil),
-- or nil and what went wrong.
function M.report_cost(lua, path, option)
  local script = os.tmpname()
  local f = assert(io.open(script, 'w'))
  f:write(REPORT)
  f:close()
  local pipe = assert(io.popen('timeout 600 /usr/bin/time -f ' ..
    '"report %e %M %U %S" ' .. lua .. ' ' .. shell_quote(script) .. ' ' ..
    shell_quote(path) .. ' ' .. (option and shell_quote(option) or '') ..
    ' 2>&1'))
  local out = pipe:read('*a')
  local ok = pipe:close()
  os.remove(script)
  local seconds, rss, user, sys = out:match('report ([%d.]+) (%d+) ' ..
    '([%d.]+) ([%d.]+)')
  if not (ok and seconds) then return nil, out end
  return tonumber(seconds), tonumber(rss) / 1024, tonumber(user) +
    tonumber(sys)
end

local CHILD = [[
local memprof = require('memprof')
local heap = require('memprof.read.heap_snapshot')
local dom = require('memprof.analysis.dominators')
local records, rounds, path = tonumber(arg[1]), tonumber(arg[2]), arg[3]
-- The profile that runs while the heap is made, and a snapshot taken
-- during it (arg[5], for the report's --profile); the timed walks come
-- after it.
assert(memprof.start(arg[4]))
local ffi = require('ffi')
ffi.cdef('struct heap_bench_ts { long s; long ns; };' ..
  'int clock_gettime(int, struct heap_bench_ts *);')
local ts = ffi.new('struct heap_bench_ts')
local function wall()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.s) + tonumber(ts.ns) * 1e-9
end
local keep = {}
for i = 1, records do
  keep[i] = { name = 'record ' .. i, tags = { i },
    get = function() return i end }
end
collectgarbage()
collectgarbage()
assert(memprof.snapshot(arg[5], { format = 'heap' }))
assert(memprof.stop())
local walls, cpus = {}, {}
for r = 1, rounds do
  local w, c = wall(), os.clock()
  assert(memprof.snapshot(path, { format = 'heap' }))
  walls[r], cpus[r] = wall() - w, os.clock() - c
end
table.sort(walls)
table.sort(cpus)
local f = assert(io.open(path, 'rb'))
local bytes = f:seek('end')
f:close()
keep = nil
collectgarbage()
local c = os.clock()
local r = heap.open(path)
while r:next_values() do end
local read = os.clock() - c
r:close()
collectgarbage()
local base = collectgarbage('count')
c = os.clock()
local result = dom.analyse_file(path)
local analysis = os.clock() - c
collectgarbage()
local lua_mb = (collectgarbage('count') - base) / 1024
assert(result.groups[1])
print(string.format('%d %d %.4f %.4f %d %d %.2f %.2f %.0f', r.epilogue.objects,
  r.epilogue.refs, walls[math.floor((rounds + 1) / 2)],
  cpus[math.floor((rounds + 1) / 2)],
  r.epilogue.c_bytes, bytes, read, analysis, lua_mb))
]]

-- A snapshot of a process holding a list `depth` deep (arg[1]) at arg[2].
local LIST = [[
local memprof = require('memprof')
local list
for _ = 1, tonumber(arg[1]) do list = { next = list } end
assert(memprof.snapshot(arg[2], { format = 'heap' }))
]]

-- memprof-report's text report of a snapshot of a deep list: the path
-- patterns and dominators of a graph as deep as it is large.
local function deep_list(lua, report_line)
  local depth = tonumber(os.getenv('BENCH_HEAP_LIST')) or 2000000
  local script, path = os.tmpname(), os.tmpname()
  local f = assert(io.open(script, 'w'))
  f:write(LIST)
  f:close()
  local ok = os.execute('timeout 600 ' .. lua .. ' ' .. shell_quote(script) ..
    ' ' .. depth .. ' ' .. shell_quote(path))
  os.remove(script)
  if ok ~= 0 and ok ~= true then
    os.remove(path)
    return report_line(string.format('of a list %d deep', depth), nil,
      'the snapshot failed')
  end
  local seconds, mb, cpu = M.report_cost(lua, path)
  os.remove(path)
  report_line(string.format('of a list %d deep (text)', depth), seconds, mb,
    cpu)
end

function M.run(lua)
  local records = tonumber(os.getenv('BENCH_HEAP_RECORDS')) or 200000
  local rounds = 5
  local script = os.tmpname()
  local path = os.tmpname()
  local profile, joined = os.tmpname(), os.tmpname()
  local f = assert(io.open(script, 'w'))
  f:write(CHILD)
  f:close()
  local pipe = assert(io.popen('timeout 600 /usr/bin/time -f "rss %M" ' ..
    lua .. ' ' .. shell_quote(script) .. ' ' .. records .. ' ' .. rounds ..
    ' ' .. shell_quote(path) .. ' ' .. shell_quote(profile) .. ' ' ..
    shell_quote(joined) .. ' 2>&1'))
  local out = pipe:read('*a')
  pipe:close()
  os.remove(script)
  local report_seconds, report_mb, report_cpu = M.report_cost(lua, path)
  local joined_seconds, joined_mb, joined_cpu = M.report_cost(lua, joined,
    '--profile=' .. profile)
  os.remove(path)
  os.remove(profile)
  os.remove(joined)
  local objects, refs, wall, cpu, c_bytes, bytes, read, analysis, lua_mb =
    out:match('^(%d+) (%d+) ([%d.]+) ([%d.]+) (%d+) (%d+) ([%d.]+) ([%d.]+) ' ..
      '(%d+)')
  print('\nHeap snapshot of ' .. (objects or '?') .. ' objects')
  if not objects then
    print('  failed: ' .. out)
    return
  end
  objects, wall, cpu = tonumber(objects), tonumber(wall), tonumber(cpu)
  local per_object = tonumber(c_bytes) / objects
  print(string.format('  walk: %.3f s wall, %.3f s CPU (median of %d; ' ..
    'target %d s): %s', wall, cpu, rounds, TARGET_SECONDS,
    wall <= TARGET_SECONDS and 'ok' or 'OVER'))
  print(string.format('  C memory: %d bytes, %.1f per object (target %d): %s',
    tonumber(c_bytes), per_object, TARGET_BYTES_PER_OBJECT,
    per_object <= TARGET_BYTES_PER_OBJECT and 'ok' or 'OVER'))
  print(string.format('  file: %.1f MB, %s references', tonumber(bytes) / 1e6,
    refs))
  print(string.format('  read back (next_values): %s s CPU; dominators, ' ..
    'retained sizes and patterns (analyse_file): %s s CPU; the analysis ' ..
    'holds %s MB of Lua memory; the process at most %.0f MB', read, analysis,
    lua_mb, (tonumber(out:match('rss (%d+)')) or 0) / 1024))
  local function report_line(what, seconds, mb, cpu_seconds)
    if not seconds then
      print('  memprof-report ' .. what .. ' failed: ' .. tostring(mb))
      return
    end
    print(string.format('  memprof-report %s: %.2f s wall, %.2f s CPU ' ..
      '(target %d s), at most %.0f MB (target %d MB): %s', what, seconds,
      cpu_seconds, TARGET_REPORT_SECONDS, mb, TARGET_REPORT_MB,
      (seconds <= TARGET_REPORT_SECONDS and mb <= TARGET_REPORT_MB) and 'ok'
      or 'OVER'))
  end
  report_line('(text)', report_seconds, report_mb, report_cpu)
  report_line('--profile (text, joined with the profile)', joined_seconds,
    joined_mb, joined_cpu)
  deep_list(lua, report_line)
  if os.getenv('BENCH_HEAP_GIB') == 'on' then
    require('heap_gib').run(lua, M.report_cost)
  end
  require('heap_pid').run(lua)
  require('attach_pid').run(lua)
end

return M
