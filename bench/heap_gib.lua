-- The heap snapshot of a 1 GiB heap (make bench with BENCH_HEAP_GIB=on;
-- about a minute and 3 GB of memory): in a process of its own, a program
-- builds about 1 GiB of live objects of mixed kinds (1,500,000 records of
-- a table, a string, an array, a closure and its upvalue; 3,400 strings of
-- 64 KiB in a cache; 3,400 arrays of 8,192 numbers; 20,000 cdata arrays),
-- which collectgarbage('count') confirms, and snapshots it once; then
-- memprof-report's text report of it in a process of its own.  Prints the
-- heap's size, the walk's wall and CPU time and C memory per object, the
-- file's size, and the report's wall and CPU time and peak RSS (with the
-- bytes of it per object).
local toolkit = require('toolkit')
local shell_quote = toolkit.shell_quote

local M = {}

local RECORDS, PAGES, ARRAYS, CDATA = 1500000, 3400, 3400, 20000

local CHILD = [[
local memprof = require('memprof')
local heap = require('memprof.read.heap_snapshot')
local ffi = require('ffi')
local path = arg[1]
local records, pages, arrays, cdata = tonumber(arg[2]), tonumber(arg[3]),
  tonumber(arg[4]), tonumber(arg[5])
ffi.cdef('struct heap_gib_ts { long s; long ns; };' ..
  'int clock_gettime(int, struct heap_gib_ts *);')
local ts = ffi.new('struct heap_gib_ts')
local function wall()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.s) + tonumber(ts.ns) * 1e-9
end
local app = { records = {}, cache = {}, arrays = {}, cdata = {} }
package.loaded.app = app
for i = 1, records do
  local name = 'record ' .. i
  app.records[i] = { name = name, tags = { i, i + 1 },
    get = function() return name end }
end
for i = 1, pages do
  app.cache['page' .. i] = string.rep('x', 65520) .. i
end
for i = 1, arrays do
  local a = {}
  for k = 1, 8192 do a[k] = k end
  app.arrays[i] = a
end
for i = 1, cdata do app.cdata[i] = ffi.new('int[?]', 16) end
collectgarbage()
collectgarbage()
local kib = collectgarbage('count')
local w, c = wall(), os.clock()
assert(memprof.snapshot(path, { format = 'heap' }))
w, c = wall() - w, os.clock() - c
app, package.loaded.app = nil, nil
collectgarbage()
local r = heap.open(path)
while r:next_values() do end
r:close()
local f = assert(io.open(path, 'rb'))
local bytes = f:seek('end')
f:close()
print(string.format('%.1f %d %d %d %.3f %.3f %d', kib / 1024,
  r.epilogue.objects, r.epilogue.refs, r.epilogue.c_bytes, w, c, bytes))
]]

-- report_cost: heap_walk's (wall time, peak RSS in MB and CPU time of
-- memprof-report on a snapshot).
function M.run(lua, report_cost)
  local script, path = os.tmpname(), os.tmpname()
  local f = assert(io.open(script, 'w'))
  f:write(CHILD)
  f:close()
  local pipe = assert(io.popen('timeout 900 ' .. lua .. ' ' ..
    shell_quote(script) .. ' ' .. shell_quote(path) .. ' ' ..
    table.concat({ RECORDS, PAGES, ARRAYS, CDATA }, ' ') .. ' 2>&1'))
  local out = pipe:read('*a')
  pipe:close()
  os.remove(script)
  local mib, objects, refs, c_bytes, wall, cpu, bytes = out:match(
    '^([%d.]+) (%d+) (%d+) (%d+) ([%d.]+) ([%d.]+) (%d+)')
  print('\nHeap snapshot of a 1 GiB heap')
  if not mib then
    os.remove(path)
    print('  failed: ' .. out)
    return
  end
  local seconds, mb, report_cpu = report_cost(lua, path)
  os.remove(path)
  objects = tonumber(objects)
  print(string.format('  heap: %.1f MiB of live objects (collectgarbage), ' ..
    '%d objects, %d references', tonumber(mib), objects, tonumber(refs)))
  print(string.format('  walk: %.2f s wall, %.2f s CPU; C memory %.1f ' ..
    'bytes per object; file %.1f MB', tonumber(wall), tonumber(cpu),
    tonumber(c_bytes) / objects, tonumber(bytes) / 1e6))
  if not seconds then
    print('  memprof-report failed: ' .. tostring(mb))
    return
  end
  print(string.format('  memprof-report (text): %.1f s wall, %.1f s CPU, ' ..
    'at most %.0f MB (%.0f bytes per object)', seconds, report_cpu, mb,
    mb * 1048576 / objects))
end

return M
