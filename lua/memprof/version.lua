-- memprof.version: memprof's version, kept here and nowhere else (the
-- rockspec's version and CHANGELOG.md agree with it: see
-- spec/reporter/version_spec.lua).
--
--   version.VERSION             '0.1.0-dev': a version still in the
--                               making ends in -dev
--   version.interpreter()       what runs this Lua: 'LuaJIT 2.1.0-beta3',
--                               or 'Lua 5.1' on plain Lua
--   version.line(program)       'memprof-report 0.1.0-dev (LuaJIT ...)',
--                               what --version prints

local M = {}

M.VERSION = '0.1.0-dev'

function M.interpreter()
  local jit = rawget(_G, 'jit')
  if type(jit) == 'table' and jit.version then
    return jit.version
  end
  return _VERSION
end

function M.line(program)
  return program .. ' ' .. M.VERSION .. ' (' .. M.interpreter() .. ')'
end

return M
