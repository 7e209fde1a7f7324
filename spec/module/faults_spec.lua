-- Failed allocations in the middle of an event, with the module built for
-- fault injection (src/fault.h: build/faults/memprof.so, which make test
-- builds): the symbol table fails to keep the prototypes of the chunk
-- named by MEMPROF_FAULT_SOURCE. The event that needed it is not recorded,
-- the profile halts, and memprof.stats() counts exactly what the file
-- holds, also when the real allocation of that event fails too (the
-- allocator below ours, spec/support/alloc_wrapper.c, fails it).
local h = require('helpers.profile')
local C = require('helpers.command')

local FAULTS = C.ROOT .. '/build/faults/?.so'
local KINDS = { 'allocs', 'frees', 'reallocs' }

-- Runs the profiled script in a child; `fail` makes the allocator below
-- ours fail the concatenation of faulty.lua's line 2. Prints the totals of
-- stats() taken right after, then stop()'s results.
local function run(path, options, fail)
  return h.run_script(string.format([[
package.cpath = %q .. ';' .. package.cpath
package.path = %q
local W = require('alloc_wrapper')
local memprof = require('memprof')
jit.off()
W.install()
local big = string.rep('x', 2 ^ 20)
local chunk = assert(loadstring('local big = ...\nlocal s = big .. big\nreturn #s',
  '@faulty.lua'))
collectgarbage()
collectgarbage('stop')
assert(memprof.start(%q, %s))
W.fail_from(%d)
local ok, result = pcall(chunk, big)
W.fail_from(0)
local st = memprof.stats()
print('call', ok, result)
print('stats', st.allocs, st.frees, st.reallocs, st.dropped)
print('running', memprof.is_running())
print('stop', memprof.stop())
]], FAULTS, package.path, path, options, fail and 2 ^ 20 or 0),
    'MEMPROF_FAULT_SOURCE=@faulty.lua')
end

-- Whether this VM survives the failed allocation of the spec without
-- memprof: LuaJIT v2.1.0-beta3 with GC64 crashes on it by itself (a
-- segmentation fault), which says nothing of the module.
local function vm_survives_failure()
  local out, code = h.run_script(string.format([[
package.cpath = %q .. ';' .. package.cpath
package.path = %q
local W = require('alloc_wrapper')
jit.off()
W.install()
local big = string.rep('x', 2 ^ 20)
local chunk = assert(loadstring('local big = ...\nlocal s = big .. big\nreturn #s',
  '@faulty.lua'))
collectgarbage()
collectgarbage('stop')
W.fail_from(2 ^ 20)
local ok, result = pcall(chunk, big)
W.fail_from(0)
print('call', ok, result)
]], FAULTS, package.path))
  return code == 0 and out:find('call\tfalse\tnot enough memory\n', 1,
    true) ~= nil
end

-- The events of the file by kind.
local function file_totals(path)
  local events = h.read(path)
  local n = { allocs = 0, frees = 0, reallocs = 0, faulty = 0 }
  for _, ev in ipairs(events) do
    n[ev.kind .. 's'] = n[ev.kind .. 's'] + 1
    if ev.name and ev.name:find('^@faulty.lua') then
      n.faulty = n.faulty + 1
    end
  end
  return n
end

describe('a symbol that cannot be kept in the middle of an event', function()
  for _, case in ipairs({
    { 'and the allocation succeeds', false, 'call\ttrue\t2097152' },
    { 'and the allocation fails too', true, 'call\tfalse\tnot enough memory' },
  }) do
    for _, options in ipairs({ 'nil', '{ stack_depth = 8 }',
      '{ sample_bytes = 1 }' }) do
      it('halts without the event, ' .. case[1] .. ', options ' .. options,
        function()
        if case[2] and not vm_survives_failure() then
          pending('this VM crashes on a failed allocation without memprof')
          return
        end
        local path = h.tmpname()
        local out, code = run(path, options, case[2])
        assert.equal(0, code, out)
        assert.matches(case[3] .. '\n', out, 1, true)
        -- The halt's reason, at stop.
        assert.matches('stop\tnil\t' .. path .. ': Cannot allocate memory\t12',
          out, 1, true)
        local stats = { out:match('stats\t(%d+)\t(%d+)\t(%d+)\t(%d+)') }
        assert.equal(4, #stats, out)
        local file = file_totals(path)
        os.remove(path)
        assert.equal(0, file.faulty)
        for i, kind in ipairs(KINDS) do
          assert.equal(file[kind], tonumber(stats[i]), kind)
        end
        -- The call that halted it and every one after it.
        assert.is_true(tonumber(stats[4]) >= 1)
      end)
    end
  end
end)

-- A heap snapshot on a build whose trace layout cannot be verified (the
-- heap calibration reads trace constants 8 bytes off): the walk leaves
-- traces out, as before it visited them, and the header says why.
describe('a heap snapshot where traces cannot be verified', function()
  it('leaves traces out and says why', function()
    local path = h.tmpname('.heap')
    local out, code = h.run_script(string.format([[
package.cpath = %q .. ';' .. package.cpath
package.path = %q
local memprof = require('memprof')
local load = require('helpers.heap_load')
local holder = { f = function(x) return x + 1 end }
local function loop(n)
  local s = 0
  for i = 1, n do s = s + holder.f(i) end
  return s
end
jit.on()
loop(300)
jit.off()
local closure = tonumber(tostring(holder.f):match('0x(%%x+)'), 16)
holder.f = nil
assert(memprof.snapshot(%q, { format = 'heap' }))
local s = load(%q)
local traces = 0
for _, o in ipairs(s.list) do
  if o.type == 'trace' then traces = traces + 1 end
end
print('visited', s.header.traces_visited, s.header.traces_why)
print('alive', s.header.traces, 'objects', traces,
  'closure', s.objects[closure] ~= nil, 'loop', loop ~= nil)
]], FAULTS, package.path, path, path), 'MEMPROF_FAULT_TRACES=1')
    os.remove(path)
    assert.equal(0, code, out)
    if not require('memprof').info().traces then
      assert.matches('visited\tfalse\tthe trace array is not verified\n',
        out, 1, true)
      return
    end
    assert.matches("visited\tfalse\ttrace %d+'s constant %d+ does not " ..
      'read as jit.util.tracek gives it\n', out)
    -- The loop's trace is alive, and not in the file; nor is what only
    -- it keeps.
    assert.matches('alive\t[1-9]%d*\tobjects\t0\tclosure\tfalse\tloop\t', out)
  end)
end)

-- A slot of global_State that holds, when the first pass looks, a copy of
-- the trace array with a bogus size (on Tarantool GC64 builds a buffer
-- pointer was once taken for J->trace): the second pass refuses it, and
-- the search goes on to J->trace, as the same build finds without it.
describe('a slot that looks like the trace array in the first pass', function()
  local function layout(env)
    local out, code = h.run_script(string.format([[
package.cpath = %q .. ';' .. package.cpath
package.path = %q
local i = require('memprof').info({ trace_lines = true })
local o, t = i.offsets, i.trace_lines
print('traces', i.traces, o.g_trace, o.g_sizetrace, o.tr_traceno,
  o.tr_startpt, o.tr_startpc, o.g_parent, i.trace_exits)
print('lines', t.exact, t.stacks, t.exits, t.why)
print('calibrations', i.calibrations)
]], FAULTS, package.path), env)
    assert.equal(0, code, out)
    return out
  end

  it('is refused, and J->trace found and verified', function()
    local plain = layout('')
    if not require('memprof').info().traces then
      assert.matches('traces\tfalse\t%-1', plain)
      return
    end
    assert.matches('traces\ttrue\t[1-9]%d*\t', plain)
    assert.equal(plain, layout('MEMPROF_FAULT_TRACE_DECOY=1'))
  end)
end)

-- A chunk name that no slot of the places' prototypes holds (seen twice in
-- CI under load, never reproduced): the refusal says which candidate was
-- went furthest and, for each place, how far its prototype's slots went.
describe('a chunk name no prototype holds', function()
  it('is refused, naming what each prototype held', function()
    local out, code = h.run_script(string.format([[
package.cpath = %q .. ';' .. package.cpath
print(require('memprof').info().error)
]], FAULTS), 'MEMPROF_FAULT_CHUNKNAME=1')
    assert.equal(0, code, out)
    local o = require('memprof').info().offsets
    local place = "place N %(prototype 0x%x+, source '=memprof%.calibratioo'%): " ..
      'pt%+' .. o.pt_chunkname .. ' leads to a string that reads ' ..
      'otherwise %(20 bytes at 0x%x+%)'
    assert.matches("^check 'prototype fields' failed: no slot of a Lua " ..
      'function leads to a prototype whose chunk name fits %(furthest: ' ..
      'fn%+' .. o.fn_pc .. ', a prototype of ' .. o.pt_size .. ' bytes; ' ..
      place:gsub('N', '1') .. '; ' .. place:gsub('N', '2') .. '%)\n$', out)
  end)
end)

-- jit.vmdef's names are read from the module's text when it has the shape
-- LuaJIT's build generates, else by running the module: both give the
-- same numbers, which every refinement checks against jit.util (a wrong
-- number there turns a refinement off, and the two would differ).
describe("jit.vmdef's names", function()
  local function refinements(env)
    local out, code = h.run_script(string.format([[
package.cpath = %q .. ';' .. package.cpath
package.path = %q
local t = require('memprof').info({ trace_lines = true }).trace_lines
print('refined', t.resume, t.stores_after_calls, t.builtin_frames,
  t.format_frames, t.after_returns, t.walk, t.why)
]], FAULTS, package.path), env)
    assert.equal(0, code, out)
    return out
  end

  it('read from the text are those of the module run', function()
    local text = refinements('')
    local t = require('memprof').info({ trace_lines = true }).trace_lines
    if t.resume and t.stacks then
      assert.matches('^refined\ttrue\ttrue\ttrue\t', text)
    end
    assert.equal(text, refinements('MEMPROF_FAULT_VMDEF_TEXT=1'))
  end)
end)

-- Where process_vm_readv is refused, fault-safe reads go through a pipe,
-- whose write and read a signal can interrupt (its handler installed
-- without SA_RESTART): each is tried again, a bounded number of times.
-- MEMPROF_FAULT_PIPE_EINTR=N takes the pipe and interrupts each call N
-- times first.
describe('fault-safe reads through the pipe', function()
  local function profile(interrupts)
    local path = h.tmpname()
    local out, code = h.run_script(string.format([[
package.cpath = %q .. ';' .. package.cpath
local memprof = require('memprof')
jit.off()
print('start', memprof.start(%q))
local made = assert(loadstring(
  'local t = {} for i = 1, 100 do t[i] = {} end return t', '@made.lua'))
made()
print('stop', memprof.stop())
]], FAULTS, path), 'MEMPROF_FAULT_PIPE_EINTR=' .. interrupts)
    return out, code, path
  end

  -- The allocations the profile at path records at made.lua's line.
  local function made(path)
    local n = 0
    for _, ev in ipairs(h.read(path)) do
      if ev.kind == 'alloc' and ev.name == '@made.lua:1' then n = n + 1 end
    end
    os.remove(path)
    return n
  end

  it('are tried again when a signal interrupts them', function()
    local out, code, path = profile(1)
    assert.equal(0, code, out)
    assert.equal('start\ttrue\nstop\ttrue\n', out)
    local through_pipe = made(path)
    -- The same profile as through process_vm_readv.
    out, code, path = profile(0)
    assert.equal(0, code, out)
    assert.equal(made(path), through_pipe)
    assert.is_true(through_pipe >= 101, through_pipe)
  end)

  it('fail, and never hang, when every try is interrupted', function()
    local out, code, path = profile(1000)
    os.remove(path)
    assert.equal(0, code, out)
    assert.matches("^start\tnil\tcannot verify this VM's layout: check " ..
      "'[^']+' failed: [^\n]+\t95\nstop\tnil\tprofiler is not running\t22\n$",
      out)
  end)
end)
