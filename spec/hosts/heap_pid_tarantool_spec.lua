-- `memprof heap PID` and `memprof attach PID` of a Tarantool instance
-- started from its own script (not through its console), serving HTTP
-- requests that leak: run by luajit, memprof learns the layout of the
-- LuaJIT inside Tarantool's binary in a helper process of that binary
-- (memprof.so preloaded into it) and walks the copy in its own process,
-- where the binary's fixed addresses are free (docs/attach.md). The
-- leaking holder is at the top of the snapshot, the profile names the
-- handler's line, and every request before, during and after is served.
local C = require('helpers.command')
local D = require('helpers.daemon')
if not C.have('tarantool') or not C.have('luajit') or
    not C.have('timeout') or not C.have('curl') then
  return
end

-- The JIT off: Tarantool's build charges compiled code to trace starts.
-- Line 11 is the leak.
local SCRIPT = [[
jit.off()
local fiber, socket = require('fiber'), require('socket')
local dir = arg[1]
app = { sessions = {} }
local served = 0
local function handle(s)
  while true do
    local head = s:read('\r\n\r\n', 10)
    if head == nil or head == '' then break end
    served = served + 1
    app.sessions[served] = { id = served, agent = string.rep('a', 2000) .. served }
    s:write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok')
  end
  s:close()
end
local server = assert(socket.tcp_server('127.0.0.1', 0, handle))
local f = io.open(dir .. '/port', 'w')
f:write(server:name().port)
f:close()
io.open(dir .. '/ready', 'w'):close()
while true do fiber.sleep(1) end
]]

-- Requests one after another in the background until dir/stop exists,
-- each one's HTTP status a line of dir/codes.
local function traffic(dir, port)
  assert(os.execute(string.format(
    "timeout 50 sh -c 'while [ ! -e %s/stop ]; do curl -s --noproxy \"*\" " ..
    "-m 5 -o /dev/null -w \"%%{http_code}\\n\" http://127.0.0.1:%s/ " ..
    ">>%s/codes; done; echo done >%s/stopped' >/dev/null 2>&1 &",
    dir, port, dir, dir)))
end

local function codes(dir)
  local list = {}
  for code in (C.read_file(dir .. '/codes') or ''):gmatch('[^\n]+') do
    list[#list + 1] = code
  end
  return list
end

local function wait_codes(dir, n)
  for _ = 1, 200 do
    if #codes(dir) >= n then
      return
    end
    os.execute('sleep 0.05')
  end
  error('fewer than ' .. n .. ' requests answered')
end

local function memprof(...)
  return C.run(C.command('luajit', C.ROOT .. '/bin/memprof', ...))
end

local function report(...)
  local code, out, err = C.run(C.command(C.ROOT .. '/bin/memprof-report',
    ...))
  assert.are.equal(0, code, err)
  return out
end

-- The first row of WHAT HOLDS THE MEMORY.
local function top_holder(out)
  return out:match('WHAT HOLDS THE MEMORY[^\n]*\n([^\n]+)')
end

describe('memprof heap PID and attach PID of a Tarantool instance', function()
  it('names the leaking holder and the handler\'s line under traffic; ' ..
      'every request is served', function()
    local dir = C.temp_dir()
    C.write_file(dir .. '/tt.lua', SCRIPT)
    local pid = D.start(dir, 'tarantool ' .. dir .. '/tt.lua ' .. dir)
    finally(function()
      C.write_file(dir .. '/stop', 'stop')
      D.wait_for(dir .. '/stopped', 10)
      os.execute('kill -9 ' .. pid .. ' 2>/dev/null')
      C.remove_tree(dir)
    end)
    traffic(dir, C.read_file(dir .. '/port'))
    wait_codes(dir, 40)

    local heap = dir .. '/t.heap'
    local code, out, err = memprof('heap', '-o', heap, tostring(pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('memprof heap: wrote ' .. heap .. ': the heap of ' ..
      'process ' .. pid .. ' (VM 1 of 1, main thread 0x', 1, true), out)
    local snapshot = report(heap)
    assert.truthy(snapshot:find('by process ' .. pid .. ',', 1, true), snapshot)
    assert.truthy(top_holder(snapshot):find(
      '^_G%.app%.sessions%[%*%]%.agent: %d+ strings, [%d,]+B$'), snapshot)
    local before = #codes(dir)

    local profile = dir .. '/t.bin'
    code, out, err = memprof('attach', '--duration=5', '--stack-depth=2',
      '-o', profile, tostring(pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('memprof attach: detached from process ' .. pid,
      1, true), out)
    assert.is_true(#codes(dir) > before + 10, 'requests during the attach')
    local leaks = report('--leaks', profile)
    assert.truthy(leaks:find('\n@…/tt.lua:11: %d+ blocks, [%d,]+B\n'), leaks)

    local during = #codes(dir)
    wait_codes(dir, during + 5)
    C.write_file(dir .. '/stop', 'stop')
    assert.truthy(D.wait_for(dir .. '/stopped', 10))
    for i, status in ipairs(codes(dir)) do
      assert.are.equal('200', status, 'request ' .. i)
    end
    assert.is_true(D.running(pid))
  end)
end)
