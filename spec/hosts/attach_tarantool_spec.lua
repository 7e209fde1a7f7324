-- `memprof attach PID` of a Tarantool instance started from its own script
-- (not through its console): memprof.so, loaded into it, runs on the
-- LuaJIT inside Tarantool's binary, whose data lies at fixed addresses
-- (`memprof heap PID` refuses it; attach copies nothing). The profile
-- names the leaking line, and the instance runs on.
local C = require('helpers.command')
local D = require('helpers.daemon')
if not C.have('tarantool') or not C.have('luajit') or
    not C.have('timeout') then
  return
end

-- The JIT off: Tarantool's build charges compiled code to trace starts.
local SCRIPT = [[
jit.off()
local fiber = require('fiber')
local dir = arg[1]
local cache, n = {}, 0
io.open(dir .. '/ready', 'w'):close()
while true do
  for _ = 1, 100 do
    n = n + 1
    local s = string.rep('y', 50) .. n
    if n % 10 == 0 then cache[#cache + 1] = s .. '!' end
  end
  fiber.sleep(0.02)
end
]]

describe('memprof attach PID of a Tarantool instance', function()
  it('names the leaking line, and the instance runs on', function()
    local dir = C.temp_dir()
    C.write_file(dir .. '/tt.lua', SCRIPT)
    local pid = D.start(dir, 'tarantool ' .. dir .. '/tt.lua ' .. dir)
    finally(function()
      os.execute('kill -9 ' .. pid .. ' 2>/dev/null')
      C.remove_tree(dir)
    end)
    local profile = dir .. '/t.bin'
    local code, out, err = C.run(C.command('luajit', C.ROOT .. '/bin/memprof',
      'attach', '--duration=1', '--stack-depth=2', '-o', profile,
      tostring(pid)))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('memprof attach: detached from process ' .. pid,
      1, true), out)
    code, out, err = C.run(C.command(C.ROOT .. '/bin/memprof-report',
      '--leaks', profile))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('\n@…/tt.lua:10: %d+ blocks, [%d,]+B\n'), out)
    assert.truthy(out:find('@…/tt.lua:9: %d+ blocks, [%d,]+B\n'), out)
    assert.is_true(D.running(pid))
  end)
end)
