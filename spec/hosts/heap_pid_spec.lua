-- `memprof heap PID` (docs/attach.md): its command line, two VMs, and the
-- hostile cases, each of which must leave the target running, exit 1 with
-- a message naming what failed, and leave no file. Targets run under
-- `timeout` and are killed at the end of each test. The snapshot of each
-- LuaJIT build against the one the process takes of itself is
-- spec/module/heap_pid_spec.lua's.
local C = require('helpers.command')
local D = require('helpers.daemon')
local ITEMS, wait_for, start, start_daemon = D.ITEMS, D.wait_for, D.start,
  D.start_daemon
local state, running, answers = D.state, D.running, D.answers
local memprof_heap, graph_rows = D.memprof_heap, D.graph_rows

local LUAJIT = os.getenv('MEMPROF_TEST_LUA') or 'luajit'
if LUAJIT ~= 'luajit' or not C.have('luajit') or not C.have('timeout') then
  return -- The CLI runs under the same luajit as its targets.
end

-- Two VMs in one process: the second made through the FFI.
local TWO_VMS = [[
local ffi = require('ffi')
ffi.cdef[=[
typedef struct lua_State lua_State;
lua_State *luaL_newstate(void);
void luaL_openlibs(lua_State *L);
int luaL_loadstring(lua_State *L, const char *s);
int lua_pcall(lua_State *L, int nargs, int nresults, int errfunc);
]=]
local L2 = ffi.C.luaL_newstate()
ffi.C.luaL_openlibs(L2)
assert(ffi.C.luaL_loadstring(L2,
  'second = {} for i = 1, 500 do second[i] = { i } end') == 0)
assert(ffi.C.lua_pcall(L2, 0, 0, 0) == 0)
first = {}
for i = 1, 300 do first[i] = { i, i } end
local f = assert(io.open(arg[1] .. '/ready', 'w'))
f:write('ready')
f:close()
while true do os.execute('sleep 0.05') end
]]

-- A target that never stops running Lua code.
local BUSY = [[
local dir = arg[1]
local f = assert(io.open(dir .. '/ready', 'w'))
f:write('ready')
f:close()
local t = {}
while true do
  for i = 1, 1000 do t[i] = i end
end
]]

-- Whether this runs as root with setpriv, in a tree that user nobody can
-- read (memprof then runs as nobody).
local function as_nobody()
  return C.have('setpriv') and C.run('test "$(id -u)" = 0') == 0 and
    C.run('setpriv --reuid=nobody --regid=nogroup --clear-groups ' ..
      C.command('luajit', C.ROOT .. '/bin/memprof', '--version') ..
      ' >/dev/null') == 0 and
    C.run('setpriv --reuid=nobody --regid=nogroup --clear-groups test -r ' ..
      C.quote(C.ROOT .. '/build/memprof.so')) == 0
end

local function files_in(dir)
  local _, out = C.run('ls ' .. C.quote(dir))
  return out
end

describe('memprof heap PID', function()
  local dir, pid

  before_each(function()
    dir = C.temp_dir()
    assert(os.execute('chmod 777 ' .. C.quote(dir)))
    pid = nil
  end)

  after_each(function()
    if pid then
      os.execute('kill -9 ' .. pid .. ' 2>/dev/null')
    end
    C.remove_tree(dir)
  end)

  it('writes memprof-PID.heap by default, and runs as the same user ' ..
      'without privileges', function()
    if not as_nobody() then
      return -- Needs root, and a tree user nobody can read.
    end
    pid = start_daemon(dir, nil, 'nobody')
    local code, _, err = C.run('cd ' .. C.quote(dir) .. ' && setpriv ' ..
      '--reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all ' ..
      C.command('luajit', C.ROOT .. '/bin/memprof', 'heap', tostring(pid)))
    assert.are.equal(0, code, err)
    local rows = graph_rows(dir .. '/memprof-' .. pid .. '.heap')
    assert.are.equal('_G.graph.index: 1 table, 24,640B, retaining 56,244B',
      rows[5])
    assert.are.equal('_G.graph.items: 1 table, 8,264B', rows[6])
    assert.are.equal(tostring(ITEMS), answers(dir))
  end)

  -- A device is written in place, never renamed over (a root's
  -- `-o /dev/null` once replaced /dev/null with a regular file): a
  -- /dev/null of the spec's own, made with mknod, stays the device.
  it('writes into a device in place, which stays a device', function()
    if C.run('mknod ' .. C.quote(dir .. '/null') .. ' c 1 3') ~= 0 then
      return -- Needs root.
    end
    pid = start_daemon(dir)
    local code, out, err = memprof_heap({ tostring(pid), '-o',
      dir .. '/null' })
    assert.are.equal(0, code, err)
    assert.truthy(out:find(dir .. '/null', 1, true), out)
    local _, kind = C.run('stat -c %F ' .. C.quote(dir .. '/null'))
    assert.are.equal('character special file\n', kind)
    assert.are.equal('daemon.lua\nnull\nout\npid\nready\n', files_in(dir))
    assert.are.equal(tostring(ITEMS), answers(dir))
  end)

  it('finds each VM of a process with two', function()
    C.write_file(dir .. '/two.lua', TWO_VMS)
    pid = start(dir, 'luajit ' .. dir .. '/two.lua ' .. dir)
    local rows = {}
    for vm = 1, 2 do
      local path = dir .. '/vm' .. vm .. '.heap'
      local code, out, err = memprof_heap({ '--vm=' .. vm, tostring(pid),
        '-o', path })
      assert.are.equal(0, code, err)
      assert.truthy(out:find('(VM ' .. vm .. ' of 2, ', 1, true), out)
      assert.truthy(out:find('process ' .. pid .. ' has 2 LuaJIT VMs: ' ..
        '--vm=N for another\n', 1, true), out)
      local _, report = graph_rows(path)
      for line in report:gmatch('[^\n]+') do
        if line:match('^_G%.first') or line:match('^_G%.second') then
          rows[#rows + 1] = line
        end
      end
    end
    table.sort(rows)
    assert.are.same({
      '_G.first: 1 table, 4,168B, retaining 30,568B',
      '_G.first[*]: 300 tables, 26,400B',
      '_G.second: 1 table, 4,168B, retaining 48,168B',
      '_G.second[*]: 500 tables, 44,000B',
    }, rows)
    local code, _, err = memprof_heap({ '--vm=3', tostring(pid), '-o',
      dir .. '/vm3.heap' })
    assert.are.equal(1, code)
    assert.are.equal('memprof heap: process ' .. pid ..
      ' has 2 LuaJIT VMs, not 3\n', err)
    assert.is_nil(C.read_file(dir .. '/vm3.heap'))
  end)

  -- Starts line and waits until its shell has become the program at exe.
  local function start_exec(line, exe)
    pid = start(dir, line)
    for _ = 1, 100 do
      local _, at = C.run('readlink /proc/' .. pid .. '/exe')
      if at == exe .. '\n' then
        return pid
      end
      os.execute('sleep 0.02')
    end
    error(line .. ' did not start')
  end

  it('refuses a process that is not LuaJIT, saying so, and leaves it ' ..
      'running', function()
    C.write_file(dir .. '/ready', 'ready')
    start_exec('sleep 30', '/usr/bin/sleep')
    local code, _, err = memprof_heap({ tostring(pid), '-o', dir .. '/x.heap' })
    assert.are.equal(1, code)
    assert.matches('^memprof heap: process ' .. pid .. ' %(/usr/bin/sleep%) ' ..
      'does not run LuaJIT: none of the %d+ files it maps code of %(its ' ..
      'executable and libraries%) defines a luaJIT_ symbol or lua_newstate; ' ..
      'it runs on untouched\n$', err)
    assert.are.equal('out\npid\nready\n', files_in(dir))
    assert.is_true(running(pid))
  end)

  it('tells a Lua that is not LuaJIT from a process without Lua', function()
    if not C.have('lua5.1') then
      return
    end
    C.write_file(dir .. '/ready', 'ready')
    local _, path = C.run('readlink -f "$(command -v lua5.1)"')
    local exe = path:gsub('\n$', '')
    start_exec('lua5.1 -e "while true do os.execute(\\"sleep 1\\") end"',
      exe)
    local code, _, err = memprof_heap({ tostring(pid), '-o', dir .. '/x.heap' })
    assert.are.equal(1, code)
    -- Its executable defines lua_newstate, not the rest of LuaJIT's API.
    assert.are.equal("memprof heap: check 'LuaJIT API' failed: the " ..
      'executable of process ' .. pid .. ' exports no lua_upvalueid, which ' ..
      'memprof.so needs to learn its layout\n', err)
    assert.is_true(running(pid))
  end)

  it('prints its usage, and refuses arguments that are not one process id',
      function()
    local code, out, err = memprof_heap({ '--help' })
    assert.are.equal(0, code, err)
    assert.are.equal([[
Usage: memprof heap [OPTIONS] PID

Write a heap snapshot of running process PID, read from outside:
every thread is stopped for as long as its memory takes to copy
(ptrace), then runs on; no code is run in it and nothing in it is
written.  Its LuaJIT must be the build memprof runs on, or a shared
libluajit (then loaded by a helper process).  Read the file with
memprof-report (holders, retained sizes, --diff).

Options:
  -o, --output=FILE      write the snapshot there (default memprof-PID.heap)
  --vm=N                 of a process with several LuaJIT VMs, the Nth (default 1)
  -h, --help             show this help and exit

]], out)
    for _, args in ipairs({ {}, { '12', '13' }, { 'nginx' }, { '0' } }) do
      code, _, err = memprof_heap(args)
      assert.are.equal(1, code)
      assert.are.equal('memprof heap: expected one process id, found ' ..
        (#args == 0 and 'none' or table.concat(args, ' ')) ..
        ' (see memprof heap --help)\n', err)
    end
  end)

  it('refuses a process that does not exist', function()
    local _, out = C.run('sh -c \'echo $$\'')
    local gone = tonumber(out) -- That shell has exited.
    local code, _, err = memprof_heap({ tostring(gone), '-o',
      dir .. '/x.heap' })
    assert.are.equal(1, code)
    assert.are.equal('memprof heap: no process ' .. gone .. '\n', err)
    assert.are.equal('', files_in(dir))
  end)

  -- memprof heap PID through build/faults/memprof.so, with the fault of
  -- env (fault.h).
  local function with_fault(env, target)
    return C.run(env .. ' ' .. C.command('luajit', '-e', string.format([[
package.path = %q .. '/lua/?.lua;' .. package.path
os.exit(require('memprof.cli.heap_pid').main({ %q, '-o', %q }, io.stdout,
  io.stderr, { load = function(_, entry)
    return package.loadlib(%q, entry) end }))]], C.ROOT, tostring(target),
      dir .. '/x.heap', C.ROOT .. '/build/faults/memprof.so')))
  end

  it('fails cleanly when the process exits while it is read', function()
    pid = start_daemon(dir)
    local code, _, err = with_fault('MEMPROF_FAULT_REMOTE_EXIT=1', pid)
    assert.are.equal(1, code)
    assert.are.equal('memprof heap: process ' .. pid ..
      ' exited while it was being read\n', err)
    assert.is_nil(state(pid))
    assert.are.equal('daemon.lua\nout\npid\nready\n', files_in(dir))
  end)

  it('fails cleanly when the walk of the copy faults, and leaves the ' ..
      'process running', function()
    pid = start_daemon(dir)
    local code, _, err = with_fault('MEMPROF_FAULT_REMOTE_CRASH=1', pid)
    assert.are.equal(1, code)
    assert.are.equal('memprof heap: the reader of process ' .. pid ..
      '\'s copy ended (signal 11) before it finished; process ' .. pid ..
      ' runs on untouched\n', err)
    assert.are.equal('daemon.lua\nout\npid\nready\n', files_in(dir))
    assert.are.equal(tostring(ITEMS), answers(dir))
  end)

  it('explains a refusal to trace another user\'s process, and leaves it ' ..
      'running', function()
    if not as_nobody() then
      return -- Needs root, and a tree user nobody can read.
    end
    pid = start_daemon(dir)
    local code, _, err = C.run('setpriv --reuid=nobody --regid=nogroup ' ..
      '--clear-groups --inh-caps=-all ' .. C.command('luajit',
        C.ROOT .. '/bin/memprof', 'heap', tostring(pid), '-o',
        dir .. '/x.heap'))
    assert.are.equal(1, code)
    assert.are.equal('memprof heap: process ' .. pid .. ' runs as user 0 ' ..
      'and memprof as user 65534, without CAP_SYS_PTRACE: run memprof as ' ..
      'user 0, or as root\n', err)
    assert.are.equal('daemon.lua\nout\npid\nready\n', files_in(dir))
    assert.are.equal(tostring(ITEMS), answers(dir))
  end)

  it('refuses a Tarantool, whose data is at fixed addresses, and leaves ' ..
      'it running', function()
    if not C.have('tarantool') then
      return
    end
    C.write_file(dir .. '/tt.lua', "local fiber = require('fiber')\n" ..
      "io.open(arg[1] .. '/ready', 'w'):close()\n" ..
      "while true do fiber.sleep(0.05) end\n")
    pid = start(dir, 'tarantool ' .. dir .. '/tt.lua ' .. dir)
    local code, _, err = memprof_heap({ tostring(pid), '-o', dir .. '/x.heap' },
      nil, 'tarantool')
    assert.are.equal(1, code)
    assert.truthy(err:find("^memprof heap: check 'address space' failed: " ..
      "the target's memory at 0x%x+%-0x%x+ /usr/bin/tarantool overlaps " ..
      "memprof's own; that file is mapped at a fixed address %(not built " ..
      "as position%-independent%), in memprof's process too\n$"), err)
    assert.are.equal('out\npid\nready\ntt.lua\n', files_in(dir))
    assert.is_true(running(pid))
  end)

  it('refuses a process another tracer traces, and leaves it running',
      function()
    if not C.have('strace') then
      return
    end
    pid = start_daemon(dir)
    assert(os.execute('timeout 20 strace -p ' .. pid ..
      ' -o /dev/null 2>/dev/null &'))
    local tracer
    for _ = 1, 100 do
      tracer = C.read_file('/proc/' .. pid .. '/status'):match(
        'TracerPid:%s+(%d+)')
      if tracer ~= '0' then
        break
      end
      os.execute('sleep 0.05')
    end
    local code, _, err = memprof_heap({ tostring(pid), '-o', dir .. '/x.heap' })
    os.execute('kill ' .. tracer)
    assert.are.equal(1, code)
    assert.are.equal('memprof heap: process ' .. pid .. ' is already ' ..
      'traced by process ' .. tracer .. ' (a debugger, strace?): a process ' ..
      'has one tracer at a time\n', err)
    assert.are.equal('daemon.lua\nout\npid\nready\n', files_in(dir))
    assert.are.equal(tostring(ITEMS), answers(dir))
  end)

  it('gives up on a process that always runs Lua code, and leaves it ' ..
      'running', function()
    C.write_file(dir .. '/busy.lua', BUSY)
    pid = start(dir, 'luajit ' .. dir .. '/busy.lua ' .. dir)
    local code, _, err = memprof_heap({ tostring(pid), '-o', dir .. '/x.heap' })
    assert.are.equal(1, code)
    assert.truthy(err:find('memprof heap: process ' .. pid .. ' was never ' ..
      'at a safe moment in 25 stops (the last time: ', 1, true), err)
    assert.truthy(err:find('); it runs on untouched\n', 1, true), err)
    assert.is_true(running(pid))
    assert.are.equal('busy.lua\nout\npid\nready\n', files_in(dir))
  end)
end)
