-- The reporter runs on LuaJIT only: under plain Lua its library and its
-- commands say so (make test-lua51 runs this spec under lua5.1; the
-- commands' way back to LuaJIT is in spec/hosts/launch_spec.lua).  Needs
-- Debian's lua5.1.
local C = require('helpers.command')

local LUA51 = '/usr/bin/lua5.1'

describe('under plain Lua', function()
  it("the reader's library refuses to load, and says why", function()
    local code, stdout, stderr = C.run(C.command(LUA51, '-e',
      "package.path = './lua/?.lua;' .. package.path " ..
      "io.write(select(2, pcall(require, 'memprof.read.stream')))"))
    assert.are.same({ 0, '', "memprof's reader runs on LuaJIT only " ..
      "(luajit, OpenResty's luajit2 or Tarantool), not on Lua 5.1" },
      { code, stderr, stdout })
  end)

  it('memprof-report says it needs LuaJIT when PATH has none', function()
    local code, stdout, stderr = C.run('env PATH=/nonexistent ' ..
      C.command(LUA51, 'bin/memprof-report', '--version'))
    assert.are.same({ 1, '', "memprof-report: runs on LuaJIT only " ..
      "(luajit, OpenResty's luajit2 or Tarantool); this is Lua 5.1, and " ..
      'no luajit on PATH is LuaJIT\n' }, { code, stdout, stderr })
  end)
end)
