-- `memprof attach PID` puts back every register of the thread it takes
-- over: spec/support/attach_regs_host.c's one thread holds known values in
-- callee-saved and vector registers across a sleep made without the C
-- library, and writes DIR/bad when one differs after it. Attached and
-- detached three times, it never does, and runs on. (x86_64.)
local C = require('helpers.command')
local D = require('helpers.daemon')

local HOST = C.ROOT .. '/build/attach_regs_host'
if jit.arch ~= 'x64' or not C.read_file(HOST) or not C.have('timeout') then
  return
end

local function count(dir)
  return tonumber(C.read_file(dir .. '/count') or '0')
end

describe('memprof attach PID', function()
  it('puts back the registers of the thread it takes over', function()
    local dir = C.temp_dir()
    local pid = D.start(dir, HOST .. ' ' .. dir)
    finally(function()
      os.execute('kill -9 ' .. pid .. ' 2>/dev/null')
      C.remove_tree(dir)
    end)
    for i = 1, 3 do
      local code, _, err = C.run(C.command('luajit',
        C.ROOT .. '/bin/memprof', 'attach', '-o', dir .. '/p' .. i .. '.bin',
        tostring(pid)))
      assert.are.equal(0, code, err)
      code, _, err = C.run(C.command('luajit', C.ROOT .. '/bin/memprof',
        'detach', tostring(pid)))
      assert.are.equal(0, code, err)
    end
    local before = count(dir)
    for _ = 1, 100 do -- Ten more sleeps, checked.
      if count(dir) >= before + 10 then
        break
      end
      os.execute('sleep 0.05')
    end
    assert.is_true(count(dir) >= before + 10)
    assert.is_nil(C.read_file(dir .. '/bad'))
    assert.is_true(D.running(pid))
  end)
end)
