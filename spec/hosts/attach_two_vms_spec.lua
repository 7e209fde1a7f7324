-- `memprof attach PID` of a process with two VMs, one per thread
-- (spec/support/two_vm_host.c): VM 1 on the main thread, which waits in
-- a sleep between rounds, VM 2 on a second thread that allocates all the
-- time through an allocator of the host's (the C library's, counted).
-- Both VMs are profiled at once, each into its own file (--vm=N); a detach
-- never frees
-- the profile under VM 2's thread while it is inside the allocator hook,
-- outside memprof.so's code (in the host's allocator, the C library): it
-- tries again later, and says so when that thread never leaves. (x86_64.)
local C = require('helpers.command')
local D = require('helpers.daemon')
local A = require('helpers.attach')
local memprof, report, two_vms, answer = A.memprof, A.report, A.two_vms,
  A.two_vms_answer

if jit.arch ~= 'x64' or not C.read_file(A.TWO_VM_HOST) or
    not C.have('timeout') then
  return
end

-- The host answers, VM 2 has gone on since `since` rounds (within ten
-- answers: a thread let out of the host's allocator wakes within 10 ms),
-- and its allocator holds what VM 2 counts (else dir/bad says what
-- differs).
local function runs_on(s, since)
  local leaked, rounds
  for _ = 1, 10 do
    leaked, rounds = answer(s.dir)
    assert.is_not_nil(leaked, C.read_file(s.dir .. '/out'))
    if rounds > since then
      break
    end
  end
  assert.is_true(rounds > since)
  assert.is_nil(C.read_file(s.dir .. '/bad'))
  assert.is_true(D.running(s.pid))
  return rounds
end

describe('memprof attach PID of a process with two VMs', function()
  local s = A.session()
  before_each(s.setup)
  after_each(s.teardown)

  it('profiles both VMs at once, each into its own file; detach --vm=N ' ..
      'stops one, detach every one; both run on', function()
    local one, two
    s.pid, one, two = two_vms(s.dir)
    local rounds = runs_on(s, 0)
    local p1, p2, p3 = s.dir .. '/p1.bin', s.dir .. '/p2.bin',
      s.dir .. '/p3.bin'
    local code, out, err = memprof('attach', '--vm=' .. one, '-o', p1,
      tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('(VM ' .. one .. ' of 2, main thread ' ..
      C.read_file(s.dir .. '/vm1') .. ')', 1, true), out)
    assert.truthy(out:find('\nmemprof attach: process ' .. s.pid ..
      ' has 2 LuaJIT VMs: --vm=N for another\n', 1, true), out)
    -- The same VM twice, or another VM into the same file: refused.
    code, _, err = memprof('attach', '--vm=' .. one, '-o', p3,
      tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof attach: memprof is attached already (its ' ..
      'profile to ' .. p1 .. ' runs): memprof detach first\n', err)
    code, _, err = memprof('attach', '--vm=' .. two, '-o', p1,
      tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof attach: ' .. p1 .. ' is the profile of ' ..
      'another VM attached (main thread ' .. C.read_file(s.dir .. '/vm1') ..
      '): give this one another file (-o)\n', err)
    code, out, err = memprof('attach', '--vm=' .. two, '-o', p2,
      tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('(VM ' .. two .. ' of 2, main thread ' ..
      C.read_file(s.dir .. '/vm2') .. ')', 1, true), out)
    rounds = runs_on(s, rounds)
    code, out, err = memprof('detach', '--vm=' .. one, tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.are.equal('memprof detach: detached from process ' .. s.pid ..
      ': wrote ' .. p1 .. '\nmemprof detach: see memprof-report ' .. p1 ..
      '\n', out)
    rounds = runs_on(s, rounds)
    code, _, err = memprof('detach', '--vm=' .. one, tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof detach: memprof is not attached to VM ' .. one ..
      ' of this process\n', err)
    code, _, err = memprof('attach', '--vm=' .. one, '-o', p3,
      tostring(s.pid))
    assert.are.equal(0, code, err)
    rounds = runs_on(s, rounds)
    code, out, err = memprof('detach', tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('detached from process ' .. s.pid .. ': wrote ' ..
      p2 .. '\n', 1, true), out)
    assert.truthy(out:find('detached from process ' .. s.pid .. ': wrote ' ..
      p3 .. '\n', 1, true), out)
    code, _, err = memprof('detach', tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof detach: memprof is not attached to this ' ..
      'process\n', err)
    runs_on(s, rounds)
    assert.truthy(report('--top=50', p3):find('\n@vm1.lua:6: %d+ events'))
    -- Each profile holds its own VM's places only: VM 1's leaking line, VM
    -- 2's tables and the strings of its C function.
    p1 = report('--top=50', p1)
    assert.truthy(p1:find('\n@vm1.lua:6: %d+ events'), p1)
    assert.is_nil(p1:find('vm2.lua', 1, true), p1)
    assert.is_nil(p1:find('churn', 1, true), p1)
    p2 = report('--top=50', p2)
    assert.truthy(p2:find('\n@vm2.lua:5: %d+ events'), p2)
    assert.truthy(p2:find('\nchurn: %d+ events'), p2)
    assert.is_nil(p2:find('vm1.lua', 1, true), p2)
  end)

  it('does not detach while VM 2\'s thread waits inside the hook (in the ' ..
      'host\'s allocator), and detaches once it is out', function()
    local _, two
    s.pid, _, two = two_vms(s.dir)
    local profile = s.dir .. '/p2.bin'
    local code, _, err = memprof('attach', '--vm=' .. two, '-o', profile,
      tostring(s.pid))
    assert.are.equal(0, code, err)
    -- VM 2's next allocation from C waits in the allocator while dir/hold
    -- exists: its thread sleeps in the C library, under memprof's hook.
    C.write_file(s.dir .. '/hold', 'hold')
    C.write_file(s.dir .. '/park', 'park')
    assert.are.equal('parked', D.wait_for(s.dir .. '/parked', 10))
    local _, parked = answer(s.dir)
    code, _, err = memprof('detach', tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof detach: process ' .. s.pid .. ' was never at ' ..
      'a safe moment in 25 stops (the last time: a thread was inside ' ..
      'memprof\'s allocator hook of the VM); it runs on untouched\n', err)
    assert.is_true(D.running(s.pid))
    local _, still = answer(s.dir)
    assert.are.equal(parked, still) -- VM 2 waited all along.
    os.remove(s.dir .. '/hold')
    local rounds = runs_on(s, still)
    code, _, err = memprof('detach', tostring(s.pid))
    assert.are.equal(0, code, err)
    runs_on(s, rounds)
    assert.truthy(report(profile):find('\nchurn: %d+ events'))
  end)

  it('counts no VM closed in the host (whole in its arena, its allocator ' ..
      'unloaded): memprof heap and attach find 2', function()
    s.pid = two_vms(s.dir, true)
    local closed = C.read_file(s.dir .. '/vm3')
    local maps = C.read_file('/proc/' .. s.pid .. '/maps')
    assert.truthy(closed:find('^0x%x+$'), closed)
    assert.truthy(maps:find('two_vm_host', 1, true))
    assert.is_nil(maps:find('arena_plugin', 1, true), maps)
    local heap = s.dir .. '/x.heap'
    local code, out, err = memprof('heap', '-o', heap, tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find(' (VM 1 of 2, main thread ', 1, true), out)
    code, _, err = memprof('heap', '--vm=3', '-o', heap, tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof heap: process ' .. s.pid .. ' has 2 LuaJIT ' ..
      'VMs, not 3\n', err)
    code, out, err = memprof('attach', '--duration=1', '-o',
      s.dir .. '/p.bin', tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find(' (VM 1 of 2, main thread ', 1, true), out)
    runs_on(s, 0)
  end)

  it('detaches safely while VM 2 allocates on its own thread: 50 cycles, ' ..
      'and the host runs on, its allocator holding what VM 2 counts',
      function()
    local _, two
    s.pid, _, two = two_vms(s.dir)
    local rounds = runs_on(s, 0)
    local done, stops, failure = A.cycles(s.pid, two, 50, s.dir)
    assert.is_nil(failure)
    assert.are.equal(50, done)
    assert.is_true(stops >= 50)
    runs_on(s, rounds)
  end)
end)
