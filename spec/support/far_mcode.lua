-- arm64: compiled code out of BL's reach of every helper, so that each of
-- its helper calls is a `BLR Xn` (spec/module/trace_lines_spec.lua).
-- LuaJIT places machine code within +-128 MB of its interpreter, else
-- anywhere (lj_mcode.c, mcode_alloc): every gap of that range and more is
-- filled with inaccessible mappings before the first trace, so that the
-- machine code lands elsewhere. Then a loop calling table.concat on one
-- line is profiled into arg[1] (stack_depth 4). Prints `far N`, the
-- distance in MB from the interpreter to the trace's machine code.
local ffi = require('ffi')
local memprof = require('memprof')
local jutil = require('jit.util')

ffi.cdef [[
void *mmap(void *addr, size_t length, int prot, int flags, int fd, long off);
]]

-- No machine code while the range is filled (a trace compiled meanwhile
-- would take a gap); what there was is freed.
jit.off()
jit.flush()

local MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x100000
local SPAN = 2 ^ 28 -- Twice BL's reach.

-- The mappings of the process, sorted, and the executable's code.
local regions, code_lo, code_hi = {}, nil, nil
for line in io.lines('/proc/self/maps') do
  local lo, hi, perms, path = line:match(
    '^(%x+)%-(%x+) (%S+) %S+ %S+ %S+%s*(.*)$')
  lo, hi = tonumber(lo, 16), tonumber(hi, 16)
  regions[#regions + 1] = { lo, hi }
  if perms:find('x', 1, true) and path:find('luajit', 1, true) and
      not code_lo then
    code_lo, code_hi = lo, hi
  end
end
assert(code_lo, 'no executable mapping of luajit')
table.sort(regions, function(a, b) return a[1] < b[1] end)

local from, to = code_lo - SPAN, code_hi + SPAN
local at = from
local function fill(lo, hi)
  if hi <= lo then return end
  local p = ffi.C.mmap(ffi.cast('void *', lo), hi - lo, 0,
    MAP_PRIVATE + MAP_ANONYMOUS + MAP_FIXED_NOREPLACE, -1, 0)
  assert(tonumber(ffi.cast('uintptr_t', p)) == lo,
    string.format('mmap of 0x%x..0x%x: %s, errno %d', lo, hi, tostring(p),
      ffi.errno()))
end
for _, r in ipairs(regions) do
  if r[2] > at and r[1] < to then
    fill(at, math.min(r[1], to))
    at = math.max(at, r[2])
  end
end
fill(at, to)
jit.on() -- Machine code from now on: out of the range.

local run = assert(loadstring([[
local parts, keep = { 'a', 0 }, {}
for k = 1, 64 do keep[k] = false end
return function(n)
  for i = 1, n do
    parts[2] = i
    keep[i % 64 + 1] = table.concat(parts, ',') --@concat
  end
end
]], '@far_case.lua'))()
run(200) -- Compiled before the profile starts.
assert(memprof.start(arg[1], { trace_lines = 'exact', stack_depth = 4 }))
run(20000)
local _, addr = jutil.tracemc(1) -- (The stop flushes the traces.)
assert(memprof.stop())
assert(addr, 'no trace compiled')
print(string.format('far %d', math.floor(math.abs(addr - code_lo) / 2 ^ 20)))
