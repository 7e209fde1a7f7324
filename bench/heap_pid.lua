-- The pause of `memprof heap PID` (make bench, after the heap walk): a
-- plain luajit process holding 1,000,000 tables, waiting in
-- os.execute('sleep'), snapshotted from outside ROUNDS times; prints the
-- median pause (its threads stopped to resumed, as memprof heap reports
-- it), the bytes copied, and the walk of the copy (the process runs on
-- meanwhile). Target: a pause of at most 1 s.
--
--   BENCH_HEAP_PID=off            without this part
local toolkit = require('toolkit')
local shell_quote = toolkit.shell_quote

local M = {}

local OBJECTS = 1000000
local ROUNDS = 5
local TARGET_SECONDS = 1

local TARGET = [[
local dir, n = arg[1], tonumber(arg[2])
graph = {}
for i = 1, n do graph[i] = { i } end
collectgarbage('collect')
local f = assert(io.open(dir .. '/ready', 'w'))
f:write('ready')
f:close()
while true do os.execute('sleep 0.1') end
]]


local median = toolkit.median

-- Starts the target; returns its process id.
local function start(lua, dir)
  local f = assert(io.open(dir .. '/target.lua', 'w'))
  f:write(TARGET)
  f:close()
  return toolkit.start_daemon(string.format('%s %s/target.lua %s %d', lua,
    dir, dir, OBJECTS), dir, 300, 1200)
end

function M.run(lua)
  if os.getenv('BENCH_HEAP_PID') == 'off' then
    return
  end
  local dir = toolkit.temp_dir()
  local pid = start(lua, dir)
  print('\nmemprof heap PID of a process holding ' .. OBJECTS .. ' tables')
  local pauses, walks, copied, failed = {}, {}, nil, nil
  for _ = 1, pid and ROUNDS or 0 do
    local pipe = assert(io.popen(lua .. ' bin/memprof heap ' .. pid ..
      ' -o ' .. shell_quote(dir .. '/p.heap') .. ' 2>&1'))
    local out = pipe:read('*a')
    pipe:close()
    local pause, bytes, walk = out:match('stopped ([%d.]+) ms %(%d+ ' ..
      'stops?, (%d+) bytes copied%); the walk took ([%d.]+) ms')
    if not pause then
      failed = out
      break
    end
    pauses[#pauses + 1] = tonumber(pause) / 1000
    walks[#walks + 1] = tonumber(walk) / 1000
    copied = tonumber(bytes)
  end
  if pid then
    os.execute('kill ' .. pid)
  end
  os.execute('rm -rf ' .. shell_quote(dir))
  if not pid or failed then
    print('  failed: ' .. tostring(failed or 'the target did not start'))
    return
  end
  local pause = median(pauses)
  print(string.format('  pause: %.3f s (median of %d; target %d s): %s; ' ..
    '%.1f MB copied', pause, ROUNDS, TARGET_SECONDS,
    pause <= TARGET_SECONDS and 'ok' or 'OVER', copied / 1e6))
  print(string.format('  walk of the copy (the process runs meanwhile): ' ..
    '%.3f s', median(walks)))
end

return M
