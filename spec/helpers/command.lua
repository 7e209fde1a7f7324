-- Test helpers: run commands and handle files.
--
--   local C = require('helpers.command')
--   local code, stdout, stderr = C.run('ls /')     -- a shell command line
--   C.command('./bin/memprof-report', '--leaks', path)  -- quoted words
--   C.write_file(path, bytes), C.read_file(path) -> bytes or nil
--   C.quote(word)               -- for the shell
--   C.temp_dir() -> a new directory; C.remove_tree(dir)
--   C.have(program) -> whether `program` is on PATH
--   C.ROOT                      -- the tree's root directory, absolute
--   C.count(text, pattern)      -- how many times a Lua pattern matches
--   C.CLEAN_ENV .. line         -- a shell line that starts no VM with the
--                                  suite's per-build settings

local M = {}

function M.quote(word)
  return "'" .. tostring(word):gsub("'", "'\\''") .. "'"
end

-- Returns the path, to pass on.
function M.write_file(path, bytes)
  local file = assert(io.open(path, 'wb'))
  file:write(bytes)
  file:close()
  return path
end

function M.read_file(path)
  local file = io.open(path, 'rb')
  if not file then
    return nil
  end
  local data = file:read('*a')
  file:close()
  return data
end

-- Per-build settings of the VM running the suite (a layout override, a
-- forced hook) are for that VM only: every child VM a spec starts (another
-- build, Neovim, nginx, a C host) runs without them unless the spec sets
-- them on its own command line.
M.CLEAN_ENV = 'unset MEMPROF_LAYOUT_OVERRIDE MEMPROF_HOOK MEMPROF_CALIBRATE; '

-- Runs a shell command line; returns its exit code, stdout and stderr.
function M.run(command_line)
  local err_path = os.tmpname()
  local pipe = assert(io.popen(M.CLEAN_ENV .. command_line .. ' 2>' .. err_path ..
    '; echo "exit:$?"'))
  local output = pipe:read('*a')
  pipe:close()
  local stderr = M.read_file(err_path)
  os.remove(err_path)
  local stdout, code = output:match('^(.*)exit:(%d+)\n$')
  return tonumber(code), stdout, stderr
end

-- A command line of quoted words.
function M.command(...)
  local words = {}
  for i = 1, select('#', ...) do
    words[i] = M.quote((select(i, ...)))
  end
  return table.concat(words, ' ')
end

function M.temp_dir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute('mkdir ' .. M.quote(dir)))
  return dir
end

function M.remove_tree(dir)
  os.execute('rm -rf ' .. M.quote(dir))
end

function M.have(program)
  local code = M.run('command -v ' .. M.quote(program) .. ' >/dev/null')
  return code == 0
end

-- The rockspec's fields, as LuaRocks reads them.
function M.rockspec()
  local env = {}
  local chunk = assert(loadfile('rockspec/memprof-scm-1.rockspec'))
  setfenv(chunk, env)
  chunk()
  return env
end

-- How many times the Lua pattern matches in text.
function M.count(text, pattern)
  local n = 0
  for _ in text:gmatch(pattern) do
    n = n + 1
  end
  return n
end

-- The tree's root, from this file's path (spec/helpers/command.lua).
local function tree_root()
  local source = debug.getinfo(1, 'S').source:gsub('^@', '')
  local dir = source:match('^(.*)/spec/helpers/[^/]*$') or '.'
  local code, out = M.run('cd ' .. M.quote(dir) .. ' && pwd')
  assert(code == 0, 'cannot find the tree root from ' .. source)
  return (out:gsub('\n$', ''))
end

M.ROOT = tree_root()

return M
