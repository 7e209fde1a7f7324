-- `memprof attach PID` on the LuaJIT build under test (MEMPROF_TEST_LUA):
-- a daemon of that build, which never loaded memprof, profiled from this
-- VM (memprof.attach_process and detach_process), so that the entry point
-- memprof.so runs in the target finds and checks the VM on every build
-- (GC64 or not, Tarantool's fork). The JIT is off in the daemon: builds
-- before 2021-03 charge compiled code to trace starts.
local C = require('helpers.command')
local A = require('helpers.attach')
local memprof = require('memprof')

local LUA = require('helpers.profile').lua
-- qemu-user does not emulate ptrace.
if jit.arch ~= 'x64' or not C.have('timeout') then
  return
end

local function read_all(path)
  local code, out, err = C.run(C.command('luajit',
    C.ROOT .. '/bin/memprof-report', path))
  assert(code == 0, err)
  return out
end

describe('memprof attach PID', function()
  local s = A.session()
  before_each(s.setup)
  after_each(s.teardown)

  it('profiles a daemon of this build and puts its allocator back',
      function()
    s.pid = A.daemon(s.dir, 'jit.off()', nil, LUA)
    local path = s.dir .. '/p.bin'
    local info, err = memprof.attach_process(s.pid, path, { stack_depth = 2 })
    assert.truthy(info, err)
    assert.are.equal(path, info.file)
    assert.are.equal(1, info.vms)
    assert.is_true(A.answers(s.dir))
    assert.is_true(A.answers(s.dir))
    local again, why, errno = memprof.attach_process(s.pid, s.dir .. '/q.bin')
    assert.is_nil(again)
    assert.are.equal('memprof is attached already (its profile to ' ..
      path .. ' runs): memprof detach first', why)
    assert.are.equal(114, errno) -- EALREADY
    local stopped
    stopped, err = memprof.detach_process(s.pid)
    assert.truthy(stopped, err)
    assert.are.equal(path, stopped.file)
    assert.are.equal(info.main_thread, stopped.main_thread)
    local report = read_all(path)
    assert.truthy(report:find('\n@…/daemon.lua:4: %d+ events'), report)
    assert.truthy(report:find('\n@…/daemon.lua:5: %d+ events'), report)
    -- Put back: the file grows no more, and a new attach is not refused.
    local size = #C.read_file(path)
    assert.is_true(A.answers(s.dir))
    assert.are.equal(size, #C.read_file(path))
    info, err = memprof.attach_process(s.pid, s.dir .. '/r.bin')
    assert.truthy(info, err)
    assert.truthy(memprof.detach_process(s.pid))
    assert.is_true(A.answers(s.dir))
  end)

  it('refuses options it does not know, and a relative path', function()
    local info, why, errno = memprof.attach_process(1, '/x.bin',
      { trace_lines = 'sometimes' })
    assert.is_nil(info)
    assert.are.equal('bad options (stack_depth 0 to 64; trace_lines ' ..
      'exact, walk, resume or start)', why)
    assert.are.equal(22, errno)
    local ok, message = pcall(memprof.attach_process, 1, 'x.bin')
    assert.is_false(ok)
    assert.truthy(message:find('an absolute path shorter than 1024 bytes',
      1, true), message)
  end)
end)
