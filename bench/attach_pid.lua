-- `memprof attach PID` (make bench, after the heap walk): a plain luajit
-- daemon that handles requests (spec/helpers/attach.lua's, its cache
-- bounded),
-- attached to ROUNDS times by `memprof attach`: the wall time from the
-- command's start to the first event in the file (the writer flushes once
-- a second), and the target's pause; then CYCLES attach/detach cycles
-- through memprof.cli.attach in this process, and the target's resident
-- memory before the first attach, after the first cycle and after the
-- last, with what grew from before the first attach split into anonymous
-- memory and pages of files (memprof.so, the C library: shared, clean).
-- Targets: a first event within 2 s; RSS after the cycles within 5% of
-- before the first attach (the issue's): the bench says for which targets
-- the growth it measured is within that.
--
--   BENCH_ATTACH=off              without this part
--   BENCH_ATTACH_CYCLES           the cycles (default 100)
local toolkit = require('toolkit')
local shell_quote = toolkit.shell_quote
local A = require('helpers.attach')

local M = {}

local ROUNDS = 5
local CYCLES = tonumber(os.getenv('BENCH_ATTACH_CYCLES') or '100')

local read = toolkit.read

local function now()
  local pipe = io.popen('date +%s.%N')
  local t = tonumber(pipe:read('*l'))
  pipe:close()
  return t
end

local function rss_kb(pid)
  local status = read('/proc/' .. pid .. '/status') or ''
  return tonumber(status:match('VmRSS:%s+(%d+)'))
end

local function start(lua, dir)
  local f = assert(io.open(dir .. '/daemon.lua', 'w'))
  -- Its cache bounded: the resident memory measured is memprof's.
  f:write((A.DAEMON:gsub('%-%- BEFORE', ''):gsub('%-%- INSIDE', '')
    :gsub('cache%[#cache %+ 1%]', 'cache[request %% 1000 + 1]')))
  f:close()
  return toolkit.start_daemon(lua .. ' ' .. dir .. '/daemon.lua ' .. dir, dir,
    600, 400)
end

-- Seconds from the command's start to the first event in the file, and
-- the pause the command reports.
local function first_event(lua, pid, path)
  local t0 = now()
  local pipe = assert(io.popen(lua .. ' bin/memprof attach -o ' ..
    shell_quote(path) .. ' ' .. pid .. ' 2>&1'))
  local out = pipe:read('*a')
  pipe:close()
  local pause = out:match('it was stopped ([%d.]+) ms')
  if not pause then
    return nil, out
  end
  local headers = #(read(path) or '')
  local seconds
  for _ = 1, 500 do
    if #(read(path) or '') > headers then
      seconds = now() - t0
      break
    end
    os.execute('sleep 0.01')
  end
  os.execute(lua .. ' bin/memprof detach ' .. pid .. ' >/dev/null 2>&1')
  return seconds, tonumber(pause) / 1000
end

function M.run(lua)
  if os.getenv('BENCH_ATTACH') == 'off' then
    return
  end
  local attach = require('memprof.cli.attach')
  local dir = toolkit.temp_dir()
  local pid = start(lua, dir)
  print('\nmemprof attach PID of a luajit daemon (' ..
    (pid and rss_kb(pid) or '?') .. ' kB resident)')
  local firsts, pauses, failed = {}, {}, nil
  local before = pid and { A.settled(pid) }
  for _ = 1, pid and ROUNDS or 0 do
    local seconds, pause = first_event(lua, pid, dir .. '/p.bin')
    if not seconds then
      failed = pause or 'no event within 5 s'
      break
    end
    firsts[#firsts + 1], pauses[#pauses + 1] = seconds, pause
  end
  local after_first, after
  for i = 1, (pid and not failed) and CYCLES or 0 do
    local path, why = attach.start(pid, { output = dir .. '/c.bin',
      dir = 'bin' })
    if path then
      path, why = attach.stop(pid, { dir = 'bin' })
    end
    if not path then
      failed = why
      break
    end
    if i == 1 then
      after_first = rss_kb(pid)
    end
  end
  after = pid and { A.settled(pid) }
  if pid then
    os.execute('kill ' .. pid)
  end
  os.execute('rm -rf ' .. shell_quote(dir))
  if not pid or failed then
    print('  failed: ' .. tostring(failed or 'the target did not start'))
    return
  end
  local first = toolkit.median(firsts)
  print(string.format('  attach to first event: %.3f s (median of %d; ' ..
    'target 2 s): %s; the target stopped %.1f ms', first, ROUNDS,
    first <= 2 and 'ok' or 'OVER', toolkit.median(pauses) * 1000))
  local grown = after[1] - before[1]
  print(string.format('  resident memory: %d kB before the first attach, ' ..
    '%d kB after one attach/detach cycle, %d kB after %d more: %+d kB ' ..
    '(%+.1f%%) from before the first attach, %+.1f%% from after the ' ..
    'first cycle', before[1], after_first, after[1], CYCLES - 1, grown,
    grown * 100 / before[1], (after[1] - after_first) * 100 / after_first))
  if before[2] and after[2] then
    print(string.format('  of which anonymous %+d kB, pages of files ' ..
      '(memprof.so, the C library: shared and clean) %+d kB', after[2] -
      before[2], after[3] - before[3]))
  end
  print(string.format('  within 5%% of before the first attach (target): ' ..
    '%s for this %d kB daemon; for any target of %d kB or more',
    grown <= before[1] * 0.05 and 'ok' or 'OVER', before[1],
    math.max(grown, 0) * 20))
end

return M
