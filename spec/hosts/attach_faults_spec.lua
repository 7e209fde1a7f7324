-- `memprof attach PID` when something fails half-way (fault.h, through
-- build/faults/memprof.so): the thread taken over is put back and the
-- target runs on, or the target is gone, and the message says which; and
-- a target that exits or forks while attached.
local C = require('helpers.command')
local D = require('helpers.daemon')
local A = require('helpers.attach')
local wait_for, start, running, state = D.wait_for, D.start, D.running,
  D.state
local daemon, answers, memprof, report = A.daemon, A.answers, A.memprof,
  A.report

if not C.have('luajit') or not C.have('timeout') then
  return
end

describe('memprof attach PID, failing', function()
  local s = A.session()
  before_each(s.setup)
  after_each(s.teardown)

  -- memprof attach through build/faults/memprof.so (fault.h), with env.
  local function with_fault(env, target)
    return C.run(env .. ' ' .. C.command('luajit', '-e', string.format([[
package.path = %q .. '/lua/?.lua;' .. package.path
os.exit(require('memprof.cli.attach').main({ %q, '-o', %q }, io.stdout,
  io.stderr, { load = function(_, entry)
    return package.loadlib(%q, entry) end }))]], C.ROOT, tostring(target),
      s.dir .. '/a.bin', C.ROOT .. '/build/faults/memprof.so')))
  end

  it('puts the thread back when the call faults in the target, which ' ..
      'runs on', function()
    A.write_daemon(s.dir)
    s.pid = start(s.dir, 'env MEMPROF_FAULT_ATTACH_CRASH=1 luajit ' .. s.dir ..
      '/daemon.lua ' .. s.dir)
    local code, _, err = with_fault('', s.pid)
    assert.are.equal(1, code)
    assert.truthy(err:find('^memprof attach: the call in thread ' .. s.pid ..
      ' raised signal 11 at 0x%x+\n$'), err)
    assert.is_nil(C.read_file(s.dir .. '/a.bin'))
    assert.is_true(answers(s.dir))
    assert.is_true(running(s.pid))
  end)

  it('fails cleanly when the target exits while it is stopped', function()
    s.pid = daemon(s.dir)
    local code, _, err = with_fault('MEMPROF_FAULT_REMOTE_EXIT=1', s.pid)
    assert.are.equal(1, code)
    assert.are.equal('memprof attach: process ' .. s.pid .. ' exited while ' ..
      'it was stopped\n', err)
    -- (Gone once its parent, timeout, has reaped it.)
    for _ = 1, 100 do
      if state(s.pid) ~= 'Z' then
        break
      end
      os.execute('sleep 0.02')
    end
    assert.is_nil(state(s.pid))
    assert.is_nil(C.read_file(s.dir .. '/a.bin'))
  end)

  it('says so when the target exits while attached', function()
    s.pid = daemon(s.dir, nil, "if io.open(dir .. '/exit') then os.exit(0) end")
    local profile = s.dir .. '/x.bin'
    local code, _, err = memprof('attach', '-o', profile, tostring(s.pid))
    assert.are.equal(0, code, err)
    -- Two pings: at least one round of requests in between, profiled.
    assert.is_true(answers(s.dir))
    assert.is_true(answers(s.dir))
    C.write_file(s.dir .. '/exit', 'exit')
    for _ = 1, 100 do
      if not state(s.pid) then
        break
      end
      os.execute('sleep 0.02')
    end
    code, _, err = memprof('detach', tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof detach: no process ' .. s.pid .. '\n', err)
    -- Its exit completed the profile: no warning of a cut stream.
    local out
    code, out, err = C.run(C.command(C.ROOT .. '/bin/memprof-report', profile))
    assert.are.equal(0, code, err)
    assert.are.equal('', err)
    assert.truthy(out:find('\n@…/daemon.lua:4: %d+ events'), out)
  end)

  it('leaves the profile with the parent when the target forks', function()
    s.pid = daemon(s.dir, "local ffi = require('ffi')\n" ..
      "ffi.cdef('int fork(void); int getpid(void);')",
      "if io.open(dir .. '/fork') and not forked then forked = true\n" ..
      "  if ffi.C.fork() == 0 then write('child', ffi.C.getpid()) end end")
    local profile = s.dir .. '/f.bin'
    local code, _, err = memprof('attach', '-o', profile, tostring(s.pid))
    assert.are.equal(0, code, err)
    C.write_file(s.dir .. '/fork', 'fork')
    local child = assert(tonumber(wait_for(s.dir .. '/child', 10)))
    s.others[1] = child
    code, _, err = memprof('detach', tostring(child))
    assert.are.equal(1, code)
    assert.are.equal('memprof detach: no profile ran (in a child after ' ..
      'fork(), the profile stays with the parent)\n', err)
    assert.is_true(running(child))
    code, _, err = memprof('detach', tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(report('--leaks', profile):find('\n@…/daemon.lua:5: '))
  end)
end)
