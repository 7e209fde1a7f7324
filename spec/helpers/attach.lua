-- Test helpers for `memprof attach PID` (spec/module/attach_spec.lua,
-- spec/hosts/attach_*_spec.lua): each test's directory and targets, killed
-- and removed after it; a luajit daemon that leaks, started under timeout;
-- whether it answers; the two-VM host; the tools.
local C = require('helpers.command')
local D = require('helpers.daemon')
local wait_for, start = D.wait_for, D.start

local M = {}

-- A test's state: s.dir, a fresh directory, and the targets it starts
-- (s.pid, s.others) killed after it. Each spec file runs
-- before_each(s.setup) and after_each(s.teardown).
function M.session()
  local s = { others = {} }
  function s.setup()
    s.dir, s.pid, s.others = C.temp_dir(), nil, {}
  end
  function s.teardown()
    local all = { s.pid }
    for i, p in ipairs(s.others) do
      all[i + 1] = p
    end
    for i = 1, table.maxn(all) do
      if all[i] then
        os.execute('kill -9 ' .. all[i] .. ' 2>/dev/null')
      end
    end
    C.remove_tree(s.dir)
  end
  return s
end

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

-- spec/support/two_vm_host.c (x86_64), if built.
M.TWO_VM_HOST = C.ROOT .. '/build/two_vm_host'

-- Its closed VM's allocator, in a plugin it unloads.
M.ARENA_PLUGIN = C.ROOT .. '/build/arena_plugin.so'

-- Starts it in dir (with `closed`, after it made, closed and unloaded the
-- VM of ARENA_PLUGIN); returns its process id and the --vm number (VMs are
-- numbered by their main thread's address) of its VM 1 and VM 2.
function M.two_vms(dir, closed)
  -- It lives 300 s (teardown ends it): 50 attach cycles took over a
  -- minute on a loaded machine, and the default 60 s ended it mid-spec.
  local pid = start(dir, M.TWO_VM_HOST .. ' ' .. dir ..
    (closed and ' ' .. M.ARENA_PLUGIN or ''), nil, 300)
  local one = tonumber(C.read_file(dir .. '/vm1'))
  local two = tonumber(C.read_file(dir .. '/vm2'))
  return pid, one < two and 1 or 2, two < one and 1 or 2
end

-- Whether the two-VM host answers a ping: VM 1's leaked pages and VM 2's
-- rounds so far (nil if it did not answer).
function M.two_vms_answer(dir)
  os.remove(dir .. '/pong')
  C.write_file(dir .. '/ping', 'ping')
  local text = wait_for(dir .. '/pong', 10)
  local leaked, rounds = (text or ''):match('^(%d+) (%d+)$')
  return tonumber(leaked), tonumber(rounds)
end

-- Attaches to pid's VM number vm and detaches, n times, in one child
-- luajit (memprof.cli.attach's start and stop, the profile to dir/c.bin).
-- Returns the cycles done, the stops the detaches took and the first
-- failure's message (or nil).
function M.cycles(pid, vm, n, dir)
  local code, out, err = C.run(C.command('luajit', '-e', string.format([[
package.path = %q .. '/lua/?.lua;' .. package.path
package.cpath = %q .. '/build/?.so;' .. package.cpath
local attach = require('memprof.cli.attach')
local done, stops = 0, 0
for _ = 1, %d do
  local path, info = attach.start(%d, { output = %q, vm = %d })
  if not path then io.write('attach: ', info) break end
  path, info = attach.stop(%d)
  if not path then io.write('detach: ', info) break end
  done, stops = done + 1, stops + info.tries
  io.stderr:write(done, ' ', stops, '\n')
end]], C.ROOT, C.ROOT, n, pid, dir .. '/c.bin', vm, pid)))
  assert(code == 0, err)
  local done, stops = err:match('(%d+) (%d+)\n$')
  return tonumber(done or 0), tonumber(stops or 0), out ~= '' and out or nil
end

-- Resident kB of pid: all its mappings, anonymous, of files (nil when
-- smaps_rollup cannot be read).
function M.resident(pid)
  local text = C.read_file('/proc/' .. pid .. '/smaps_rollup') or ''
  local all = tonumber(text:match('\nRss:%s+(%d+)'))
  local anon = tonumber(text:match('Anonymous:%s+(%d+)'))
  return all, anon, all and anon and all - anon
end

-- M.resident of pid once its own memory has settled (a daemon whose cache
-- is bounded stops growing within a second): two readings 0.3 s apart
-- alike, or the last of 30.
function M.settled(pid)
  local last = { M.resident(pid) }
  for _ = 1, 30 do
    os.execute('sleep 0.3')
    local now = { M.resident(pid) }
    if now[1] == last[1] then
      return (table.unpack or unpack)(now, 1, 3)
    end
    last = now
  end
  return (table.unpack or unpack)(last, 1, 3)
end

return M
