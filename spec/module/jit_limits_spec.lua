-- memprof.cli.report.raise_jit_limits: the reporter raises the JIT's
-- limits so that a report of a long profile keeps its traces. What the
-- limits change depends on the LuaJIT build it runs on (OpenResty's
-- defaults are larger), so this runs under every host of the matrix.
local cli = require('memprof.cli.report')
local C = require('helpers.command')

-- Files a test writes, removed after it.
local temp_files = {}
local function temp_file(bytes)
  local p = os.tmpname()
  temp_files[#temp_files + 1] = p
  C.write_file(p, bytes)
  return p
end
local function remove_temp_files()
  for _, p in ipairs(temp_files) do os.remove(p) end
  temp_files = {}
end

describe('memprof.cli.report.raise_jit_limits', function()
  if not rawget(_G, 'jit') then
    it('does nothing without a JIT compiler', function()
      assert.is_nil(cli.raise_jit_limits())
    end)
    return
  end

  -- 1,200 hot loops, each a trace, in a fresh process (the specs before
  -- leave traces and settings behind): past the default limit of 1,000
  -- traces, LuaJIT throws all of them away and numbers them from 1 again.
  local SCRIPT = [[
if arg[1] == 'raise' then
  require('memprof.cli.report').raise_jit_limits()
end
local util = require('jit.util')
local keep = {}
for i = 1, 1200 do
  keep[i] = loadstring('local s = 0 for j = 1, 100 do s = s + j * ' ..
    i .. ' end return s')
  keep[i]()
end
local kept = 0
for trace = 1, 1200 do
  if util.traceinfo(trace) then
    kept = kept + 1
  end
end
io.write(kept)
]]

  it('lets LuaJIT keep 1,200 traces without throwing them away',
    function()
      assert.are.same({ 'maxmcode=65536', 'maxtrace=20000',
        'maxside=1000' }, cli.JIT_LIMITS)
      local script = temp_file(SCRIPT)
      local lua = os.getenv('MEMPROF_TEST_LUA') or 'luajit'
      local kept = {}
      for i, how in ipairs({ 'raise', 'default' }) do
        local code, out = C.run('LUA_PATH=\'./lua/?.lua;;\' ' ..
          C.command(lua, script, how))
        kept[i] = { code, tonumber(out) }
      end
      remove_temp_files()
      -- With LuaJIT's default limits, only the traces made after the flush
      -- (about 200) are left. OpenResty's luajit2 has larger defaults
      -- (8,000 traces): there the limits change nothing.
      local build = os.getenv('MEMPROF_TEST_BUILD') or ''
      if build:find('^OpenResty') then
        assert.are.same({ { 0, 1200 }, { 0, 1200 } }, kept)
      else
        assert.are.same({ { 0, 1200 }, { 0, true } },
          { kept[1], { kept[2][1], kept[2][2] < 1000 } })
      end
    end)
end)
