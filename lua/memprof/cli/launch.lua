-- memprof.cli.launch: what bin/memprof-report and bin/memprof do before
-- anything else: make sure they run on LuaJIT when it is installed.
--
--   launch.on_luajit(arg) -> nil: go on (this Lua is LuaJIT); or the
--     exit code of the same script run again under luajit, to exit
--     with; or 1, when no luajit can be found or this run is already the
--     second one, once a message that says so is written to stderr
--   launch.exit_code(...) -> the exit code of a child from os.execute's
--     results (Lua 5.1's wait status, or 5.2's true|nil, how, code)
--   launch.shell_quote(word) -> the word quoted for sh
--
-- Why: LuaRocks installs a script behind a wrapper that runs it with the
-- Lua LuaRocks was configured for, often plain Lua 5.1, where reading a
-- profile takes about 14 times as long as under LuaJIT (no FFI, no JIT).
-- A script started that way (or by hand: `lua5.1 memprof-report ...`)
-- runs itself again as
--
--   luajit -e CHUNK SCRIPT ARGS...
--
-- found along PATH, and exits with its status.  CHUNK gives the new run
-- this run's package.path and package.cpath (where LuaRocks' wrapper or
-- the script found the library) and marks it as a second run, so that a
-- `luajit` on PATH that is no LuaJIT (a link to lua5.1, say) is run once
-- and never again.  Each argument is quoted for the shell, so the script
-- gets exactly the words it was given.  The first run waits for the
-- second (os.execute): stdin, stdout and stderr are the same files, and
-- a signal that kills the second gives 128 + N.

local M = {}

local format = string.format

-- The name under which the chunk marks a second run.
local AGAIN = 'memprof.cli.launch.again'

function M.shell_quote(word)
  return "'" .. word:gsub("'", "'\\''") .. "'"
end

function M.exit_code(status, how, code)
  if type(status) == 'number' then
    -- Lua 5.1: the wait status from system().
    if status % 256 == 0 then
      return math.floor(status / 256) % 256
    end
    return 128 + status % 128
  end
  if how == 'signal' then
    return 128 + code
  end
  return code or (status and 0 or 1)
end

-- The first `name` along PATH that can be opened, or nil.
local function find_on_path(name)
  for dir in (os.getenv('PATH') or ''):gmatch('[^:]+') do
    local path = dir .. '/' .. name
    local file = io.open(path, 'rb')
    if file then
      file:close()
      return path
    end
  end
  return nil
end

-- The command line that runs the script again under `luajit`.
local function command_line(luajit, args)
  local chunk = format('package.path = %q package.cpath = %q ' ..
    'package.loaded[%q] = true', package.path, package.cpath, AGAIN)
  local words = { M.shell_quote(luajit), '-e', M.shell_quote(chunk),
    M.shell_quote(args[0]) }
  for i = 1, #args do
    words[#words + 1] = M.shell_quote(args[i])
  end
  return table.concat(words, ' ')
end

-- The message of a run that cannot reach LuaJIT.
function M.luajit_only(program)
  return format('%s: runs on LuaJIT only (luajit, OpenResty\'s luajit2 ' ..
    'or Tarantool); this is %s, and no luajit on PATH is LuaJIT\n', program,
    tostring(_VERSION))
end

function M.on_luajit(args)
  if rawget(_G, 'jit') or type(args) ~= 'table' or not args[0] then
    return nil
  end
  local luajit = not package.loaded[AGAIN] and find_on_path('luajit')
  if luajit then
    return M.exit_code(os.execute(command_line(luajit, args)))
  end
  io.stderr:write(M.luajit_only(args[0]:match('[^/]*$')))
  return 1
end

return M
