-- Test helpers for `memprof attach PID` (spec/hosts/attach_spec.lua,
-- attach_refusals_spec.lua): a luajit daemon that leaks, started under
-- timeout; whether it answers; the tools.
local C = require('helpers.command')
local D = require('helpers.daemon')
local wait_for, start = D.wait_for, D.start

local M = {}

-- Handles 100 requests every 20 ms; one page in ten stays in a cache (the
-- leak, line 5); answers dir/ping with the cache's size in dir/pong.
M.DAEMON = [[
local dir = arg[1]
local cache = {}
local function handle(request)
  local page = string.rep('x', 100) .. request
  if request % 10 == 0 then cache[#cache + 1] = page .. '!' end
  return #page
end
local function write(name, text)
  local f = assert(io.open(dir .. '/' .. name .. '.tmp', 'w'))
  f:write(text)
  f:close()
  os.rename(dir .. '/' .. name .. '.tmp', dir .. '/' .. name)
end
-- BEFORE
write('ready', 'ready')
local request = 0
while true do
  for _ = 1, 100 do request = request + 1; handle(request) end
  os.execute('sleep 0.02')
  local ping = io.open(dir .. '/ping')
  if ping then
    ping:close()
    os.remove(dir .. '/ping')
    write('pong', tostring(#cache))
  end
  -- INSIDE
end
]]

-- Writes the daemon (with code before its loop and inside it) into dir.
function M.write_daemon(dir, before, inside)
  local text = M.DAEMON:gsub('%-%- BEFORE', function() return before or '' end)
    :gsub('%-%- INSIDE', function() return inside or '' end)
  C.write_file(dir .. '/daemon.lua', text)
end

-- Starts it (under lua, default luajit); returns its process id.
function M.daemon(dir, before, inside, lua)
  M.write_daemon(dir, before, inside)
  return start(dir, (lua or 'luajit') .. ' ' .. dir .. '/daemon.lua ' .. dir)
end

-- Whether the daemon answers a ping (its cache's size, which grows).
function M.answers(dir)
  os.remove(dir .. '/pong')
  C.write_file(dir .. '/ping', 'ping')
  local n = tonumber(wait_for(dir .. '/pong', 10))
  return n ~= nil and n > 0
end

function M.memprof(...)
  return C.run(C.command('luajit', C.ROOT .. '/bin/memprof', ...))
end

function M.report(...)
  local code, out, err = C.run(C.command(C.ROOT .. '/bin/memprof-report',
    ...))
  assert(code == 0, err)
  return out
end

function M.size(path)
  local f = assert(io.open(path, 'rb'))
  local n = f:seek('end')
  f:close()
  return n
end


return M
