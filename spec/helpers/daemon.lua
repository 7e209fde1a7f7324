-- Test helpers for `memprof heap PID`: a daemon that holds a known graph
-- and snapshots itself, started in the background under timeout; whether
-- a process runs on and answers; the tool itself, and the rows of a
-- report that hold the graph.
local C = require('helpers.command')

local M = {}

M.ITEMS = 1000

-- A daemon that holds a known graph, writes its own heap snapshot
-- (arg[2], unless '-'), says ready, then sleeps in C (os.execute) until
-- killed; it answers a ping file with a pong file that counts its graph.
M.DAEMON = [[
local dir, own, n = arg[1], arg[2], tonumber(arg[3])
graph = { items = {}, index = {} }
for i = 1, n do
  local item = { id = i, name = 'item' .. i, tags = { 'a', 'b' } }
  graph.items[i] = item
  graph.index['k' .. i] = item
end
collectgarbage('collect')
if own ~= '-' then
  assert(require('memprof').snapshot(own, { format = 'heap' }))
end
local function write(name, text)
  local f = assert(io.open(dir .. '/' .. name .. '.tmp', 'w'))
  f:write(text)
  f:close()
  os.rename(dir .. '/' .. name .. '.tmp', dir .. '/' .. name)
end
write('ready', 'ready')
while true do
  os.execute('sleep 0.05')
  local ping = io.open(dir .. '/ping')
  if ping then
    ping:close()
    os.remove(dir .. '/ping')
    local count = 0
    for _ in pairs(graph.index) do count = count + 1 end
    write('pong', tostring(count))
  end
end
]]

function M.wait_for(path, seconds)
  for _ = 1, seconds * 20 do
    local text = C.read_file(path)
    if text then
      return text
    end
    os.execute('sleep 0.05')
  end
  return nil
end

-- Starts `line` (a shell command) in the background, as `user` (or this
-- user), under timeout (`seconds`, default 60); returns its process id
-- once it wrote dir/ready.
function M.start(dir, line, user, seconds)
  local as = user and ('setpriv --reuid=' .. user ..
    ' --regid=nogroup --clear-groups ') or ''
  local wrapped = string.format(
    "%stimeout %d sh -c 'echo $$ > %s/pid; exec %s' >%s/out 2>&1 &", as,
    seconds or 60, dir, line, dir)
  assert(os.execute(C.CLEAN_ENV .. wrapped))
  assert(M.wait_for(dir .. '/ready', 20) and M.wait_for(dir .. '/pid', 20),
    'the target did not start: ' .. tostring(C.read_file(dir .. '/out')))
  return tonumber(C.read_file(dir .. '/pid'))
end

function M.start_daemon(dir, own, user, lua)
  C.write_file(dir .. '/daemon.lua', M.DAEMON)
  return M.start(dir, string.format(
    "env LUA_CPATH=%s/build/?.so\\;\\; %s %s/daemon.lua %s %s %d",
    C.ROOT, lua or 'luajit', dir, dir, own or '-', M.ITEMS), user)
end

function M.state(pid)
  local status = C.read_file('/proc/' .. pid .. '/status')
  return status and status:match('State:%s+(%a)')
end

-- Whether pid runs: it exists, and is neither stopped nor traced.
function M.running(pid)
  local s = M.state(pid)
  return s ~= nil and s ~= 'T' and s ~= 't' and s ~= 'Z'
end

-- Whether the daemon answers a ping with the size of its graph.
function M.answers(dir)
  os.remove(dir .. '/pong')
  C.write_file(dir .. '/ping', 'ping')
  return M.wait_for(dir .. '/pong', 10)
end

function M.memprof_heap(args, env, lua)
  return C.run((env or '') .. ' LUA_CPATH=' .. C.quote(C.ROOT ..
    '/build/?.so;;') .. ' ' .. C.command(lua or 'luajit',
    C.ROOT .. '/bin/memprof', 'heap', unpack(args)))
end

-- The rows of a report that hold the graph (the thread's own frames
-- differ between the two snapshots).
function M.graph_rows(path)
  local code, out, err = C.run(C.command(C.ROOT .. '/bin/memprof-report',
    path))
  assert(code == 0, err)
  local rows = {}
  for line in out:gmatch('[^\n]+') do
    if line:match('^_G%.graph') then
      rows[#rows + 1] = line
    end
  end
  return rows, out
end

return M
