-- The hostile cases of `memprof attach PID` and `memprof detach PID`
-- (docs/attach.md): each exits 1 with a message naming what refused, and
-- leaves the target running. Targets run under timeout and are killed
-- after each test.
local C = require('helpers.command')
local D = require('helpers.daemon')
local A = require('helpers.attach')
local start, running = D.start, D.running
local daemon, answers, memprof = A.daemon, A.answers, A.memprof

if not C.have('luajit') or not C.have('timeout') then
  return
end

describe('memprof attach PID, refused', function()
  local s = A.session()
  before_each(s.setup)
  after_each(s.teardown)

  it('refuses a VM whose own code runs a profile', function()
    s.pid = daemon(s.dir, string.format([[
package.cpath = %q .. '/build/?.so;' .. package.cpath
assert(require('memprof').start(dir .. '/own.bin'))]], C.ROOT))
    local code, _, err = memprof('attach', '-o', s.dir .. '/a.bin',
      tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof attach: a profile started by the program\'s ' ..
      'own code runs in this VM (its allocator is memprof\'s hook); stop ' ..
      'it there first\n', err)
    assert.is_nil(C.read_file(s.dir .. '/a.bin'))
    assert.is_true(answers(s.dir))
  end)

  it('refuses a process that is not LuaJIT, one that never waits, and ' ..
      'one that does not exist, leaving them running', function()
    C.write_file(s.dir .. '/ready', 'ready')
    s.pid = start(s.dir, 'sleep 30')
    for _ = 1, 100 do -- Until the shell has become sleep.
      local _, exe = C.run('readlink /proc/' .. s.pid .. '/exe')
      if exe == '/usr/bin/sleep\n' then
        break
      end
      os.execute('sleep 0.02')
    end
    local code, _, err = memprof('attach', '-o', s.dir .. '/a.bin',
      tostring(s.pid))
    assert.are.equal(1, code)
    assert.matches('^memprof attach: process ' .. s.pid ..
      ' %(/usr/bin/sleep%) does not run LuaJIT: none of the %d+ files it ' ..
      'maps code of %(its executable and libraries%) defines a luaJIT_ ' ..
      'symbol or lua_newstate; it runs on untouched\n$', err)
    -- Refused before any stop: memprof.so was never loaded there.
    assert.is_nil(C.read_file('/proc/' .. s.pid .. '/maps'):find(
      'memprof.so', 1, true))
    assert.is_true(running(s.pid))
    C.write_file(s.dir .. '/busy.lua', 'io.open(arg[1] .. "/ready", "w")' ..
      ':close() local t = {} while true do t[1] = {} end')
    os.remove(s.dir .. '/ready')
    s.others[1] = start(s.dir, 'luajit ' .. s.dir .. '/busy.lua ' .. s.dir)
    code, _, err = memprof('attach', '-o', s.dir .. '/a.bin',
      tostring(s.others[1]))
    assert.are.equal(1, code)
    assert.are.equal('memprof attach: process ' .. s.others[1] ..
      ' was never ' ..
      'at a safe moment in 25 stops (the last time: no thread was waiting ' ..
      'in a system call (epoll_wait, poll, a sleep, a read)); it runs on ' ..
      'untouched\n', err)
    assert.is_true(running(s.others[1]))
    local _, shell = C.run('sh -c \'echo $$\'')
    code, _, err = memprof('attach', tostring(tonumber(shell)))
    assert.are.equal(1, code)
    assert.are.equal('memprof attach: no process ' .. tonumber(shell) .. '\n',
      err)
    assert.is_nil(C.read_file(s.dir .. '/a.bin'))
  end)

  it('explains a refusal to trace another user\'s process', function()
    if not (C.have('setpriv') and C.run('test "$(id -u)" = 0') == 0 and
        C.run('setpriv --reuid=nobody --regid=nogroup --clear-groups test ' ..
          '-r ' .. C.quote(C.ROOT .. '/build/memprof.so')) == 0) then
      return -- Needs root, and a tree user nobody can read.
    end
    s.pid = daemon(s.dir)
    local code, _, err = C.run('setpriv --reuid=nobody --regid=nogroup ' ..
      '--clear-groups --inh-caps=-all ' .. C.command('luajit',
        C.ROOT .. '/bin/memprof', 'attach', tostring(s.pid), '-o',
        '/tmp/never.bin'))
    assert.are.equal(1, code)
    assert.are.equal('memprof attach: process ' .. s.pid ..
      ' runs as user 0 ' ..
      'and memprof as user 65534, without CAP_SYS_PTRACE: run memprof as ' ..
      'user 0, or as root\n', err)
    assert.is_true(answers(s.dir))
  end)

  it('prints its usage, and refuses arguments that are not one process id',
      function()
    local code, out, err = memprof('attach', '--help')
    assert.are.equal(0, code, err)
    assert.truthy(out:find('^Usage: memprof attach %[OPTIONS%] PID\n'), out)
    assert.truthy(out:find('\n  --duration=S  ', 1, true), out)
    code, out, err = memprof('detach', '--help')
    assert.are.equal(0, code, err)
    assert.truthy(out:find('^Usage: memprof detach %[%-%-vm=N%] PID\n'), out)
    assert.truthy(out:find('\n  --vm=N  ', 1, true), out)
    for _, cmd in ipairs({ 'attach', 'detach' }) do
      code, _, err = memprof(cmd, '12', '13')
      assert.are.equal(1, code)
      assert.are.equal('memprof ' .. cmd .. ': expected one process id, ' ..
        'found 12 13 (see memprof ' .. cmd .. ' --help)\n', err)
    end
  end)
end)
