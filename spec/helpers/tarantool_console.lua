-- Test helpers: run a Tarantool application that listens on its
-- administrative console (a Unix socket), and talk to it as an operator
-- does with `tarantoolctl enter`: one command per line, one YAML answer
-- per command. The application finds memprof in the tree (build/ and
-- lua/), as an installed module would be found.
--
--   local console = require('helpers.tarantool_console')
--   local ok, why = console.available()  -- false and why: skip the spec
--   local app = console.start({
--     source = 'lua code',   -- the application; console.listen is added
--     time_limit = 60,       -- seconds tarantool may run at most
--   })
--   app.dir                  -- its directory (deleted by stop)
--   app:path('p.bin')        -- a file in app.dir
--   app:session({ 'cmd', 'cmd' }) -> { 'answer', 'answer' }
--                            -- each answer is the YAML document the
--                            -- console wrote ("---\n- true\n...\n")
--   app:log() -> what the application wrote to stdout and stderr
--   app:stop()               -- idempotent; call it in finally()
--
-- tarantool runs under timeout(1), so it never outlives time_limit even
-- if stop() is never reached; every session is a tarantool process of its
-- own, under timeout(1) too.
local command = require('helpers.command')

local M = {}

local TARANTOOL = 'tarantool'
local SOCKET = 'console.sock'

M.root = command.ROOT

function M.available()
  if not command.have(TARANTOOL) then
    return false, 'tarantool is not on PATH'
  end
  local f = io.open(M.root .. '/build/memprof.so', 'rb')
  if not f then
    return false, 'build/memprof.so is not built'
  end
  f:close()
  return true
end

-- The client: reads commands from stdin, one per line, and writes each
-- answer of the console, whole, to stdout.
local CLIENT = [[
local socket = require('socket')
local s = socket.tcp_connect('unix/', arg[1], 10)
if not s then
  io.stderr:write('cannot connect to ', arg[1], '\n')
  os.exit(1)
end
s:read('\n') -- the greeting: two lines
s:read('\n')
for line in io.lines() do
  s:write(line .. '\n')
  local answer = s:read('\n...\n', 30)
  if not answer or answer == '' then
    io.stderr:write('no answer to ', line, '\n')
    os.exit(1)
  end
  io.write(answer, '\0')
end
s:close()
os.exit(0)
]]

local App = {}
App.__index = App

function App:path(name)
  return self.dir .. '/' .. name
end

function App:log()
  return command.read_file(self:path('app.log')) or ''
end

-- Waits until the console's socket exists (the application is up).
local function wait_for_socket(app)
  for _ = 1, 200 do
    local code = command.run('test -S ' .. command.quote(app:path(SOCKET)))
    if code == 0 then
      return true
    end
    command.run('sleep 0.05')
  end
  error('the console did not start; the application wrote:\n' .. app:log())
end

function M.start(opts)
  local app = setmetatable({ dir = command.temp_dir() }, App)
  command.write_file(app:path('app.lua'), opts.source .. string.format(
    '\nrequire(\'console\').listen(\'unix/:\' .. %q)\n', app:path(SOCKET)))
  command.write_file(app:path('client.lua'), CLIENT)
  local env = string.format('LUA_CPATH=%s LUA_PATH=%s ',
    command.quote(M.root .. '/build/?.so;;'),
    command.quote(M.root .. '/lua/?.lua;;'))
  local line = command.CLEAN_ENV .. 'cd ' .. command.quote(app.dir) ..
    ' && { ' .. env .. 'timeout ' .. (opts.time_limit or 60) .. ' ' ..
    TARANTOOL .. ' app.lua > app.log 2>&1 & echo $! > app.pid; }'
  local code = command.run(line)
  assert(code == 0, 'cannot start tarantool: ' .. line)
  app.pid = (command.read_file(app:path('app.pid')) or ''):match('%d+')
  wait_for_socket(app)
  return app
end

-- Sends the commands, in one connection, and returns the answers.
function App:session(commands)
  local input = self:path('commands.txt')
  command.write_file(input, table.concat(commands, '\n') .. '\n')
  local code, out, err = command.run(command.CLEAN_ENV .. 'cd ' ..
    command.quote(self.dir) .. ' && timeout 60 ' .. TARANTOOL ..
    ' client.lua ' .. command.quote(self:path(SOCKET)) .. ' < commands.txt')
  assert(code == 0, 'the console session failed: ' .. tostring(err) ..
    '\nthe application wrote:\n' .. self:log())
  local answers = {}
  for answer in out:gmatch('([^%z]*)%z') do
    answers[#answers + 1] = answer
  end
  return answers
end

function App:stop()
  if self.pid then
    command.run('kill ' .. self.pid .. ' 2>/dev/null; sleep 0.1')
    self.pid = nil
  end
  if self.dir then
    command.remove_tree(self.dir)
    self.dir = nil
  end
end

return M
