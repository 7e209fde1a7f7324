-- spec/support/valgrind_ours.lua: what `make test-valgrind` fails on.
local C = require('helpers.command')

local function check(log)
  local dir = C.temp_dir()
  C.write_file(dir .. '/log', log)
  local code, out = C.run('luajit spec/support/valgrind_ours.lua ' ..
    C.quote(dir .. '/log'))
  C.remove_tree(dir)
  return code, out
end

local VM_ERROR = [[
==7== Memcheck, a memory error detector
==7== 
==7== Conditional jump or move depends on uninitialised value(s)
==7==    at 0x4A1B2C: lj_str_new (lj_str.c:120)
==7==    by 0x4A2000: lua_pushstring (lj_api.c:700)
==7== 
]]

local OUR_ERROR = [[
==7== Invalid read of size 8
==7==    at 0x5B10: vm_locate (vm_inspect.h:210)
==7==    by 0x5C20: hook_gc64 (hook.c:360)
==7==    by 0x4A3000: lj_mem_realloc (in /usr/bin/luajit)
==7== 
]]

local SUMMARY = '==7== ERROR SUMMARY: 1 errors from 1 contexts\n'

describe('the memcheck log check', function()
  it('counts the VM\'s own errors without failing', function()
    local code, out = check(VM_ERROR .. SUMMARY)
    assert.equal(0, code)
    assert.equal('valgrind: 1 error records, 0 in the module (ERROR ' ..
      'SUMMARY: 1 errors from 1 contexts)\n', out)
  end)

  it('fails on an error in the module and prints it', function()
    local code, out = check(VM_ERROR .. OUR_ERROR .. SUMMARY)
    assert.equal(1, code)
    assert.equal('valgrind: 2 error records, 1 in the module (ERROR ' ..
      'SUMMARY: 1 errors from 1 contexts)\n' ..
      'Invalid read of size 8\n   at 0x5B10: vm_locate (vm_inspect.h:210)\n' ..
      '   by 0x5C20: hook_gc64 (hook.c:360)\n' ..
      '   by 0x4A3000: lj_mem_realloc (in /usr/bin/luajit)\n\n', out)
  end)

  it('fails on a log that valgrind did not finish', function()
    local code = check(VM_ERROR)
    assert.equal(1, code)
  end)
end)
