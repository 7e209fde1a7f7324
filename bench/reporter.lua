-- The reporter's speed and memory (make bench, the reporter section).
--
-- Makes three kinds of profile, then times bin/memprof-report on each in
-- a process of its own, under /usr/bin/time (wall and CPU time, peak
-- RSS):
--   large        a profile of bench/workloads (mixed and trees, each run
--                BENCH_REPORTER_SCALE times, default 9: about 600 MB, the
--                size the target is set for, 570 MB; on a smaller file
--                the JIT compiler's start weighs more) in the default
--                format, then with stacks (stack_depth 16): the text
--                report's throughput (MB of profile a second of wall
--                time, and of CPU time: user and system), the median of
--                BENCH_REPORTER_ROUNDS runs (default 5)
--                and memprof live's reading of the one with stacks
--                (bench/live_read.lua), by line and by stack
--   places       400,000 distinct places (bench/places.lua), without and
--                with stacks: the peak RSS of every format, once each
-- and compares them with the targets (500 MB for the places; 200 MB/s
-- for the text report of the default format, of CPU time: the wall time
-- of a machine shared with other jobs moves with their load, by a fifth
-- and more from one run to the next; the one with stacks has none).
-- Every child has a time limit.
--
--   BENCH_REPORTER=off      make bench without this section
--   BENCH_REPORTER=only     this section alone

local places = require('places')
local toolkit = require('toolkit')
local shell_quote = toolkit.shell_quote
local read_all = toolkit.read_all
local file_size = toolkit.file_size
local median = toolkit.median

local M = {}

local SCALE = tonumber(os.getenv('BENCH_REPORTER_SCALE')) or 9
local ROUNDS = tonumber(os.getenv('BENCH_REPORTER_ROUNDS')) or 5
local PLACES = 400000
local TARGET_PLACES_MB = 500
local TARGET_TEXT_MBS = 200
local CHILD_TIMEOUT_S = 900

-- The formats measured on the places, with their options.
local FORMATS = {
  { 'text', '' },
  { 'json', '--format=json' },
  { 'folded', '--format=folded' },
  { 'pprof', '--format=pprof' },
  { 'html', '--format=html' },
  { 'leaks', '--leaks' },
  { 'peak', '--peak' },
  { 'diff', '--diff' },
}

-- Runs memprof-report with `args` on `path` (the output goes to
-- /dev/null); returns its wall time in seconds, peak RSS in MB and CPU
-- time in seconds, or nil and why not.
local function report(args, path, lua)
  local times = os.tmpname()
  local files = shell_quote(path)
  if args == '--diff' then
    files = files .. ' ' .. files
  elseif args == '--format=pprof' then
    args = args .. ' --output=/dev/null'
  end
  local cmd = string.format('/usr/bin/time -f "%%e %%M %%U %%S" -o %s ' ..
    'timeout %d ' ..
    '%s bin/memprof-report %s %s > /dev/null 2>&1', times, CHILD_TIMEOUT_S,
    lua, args, files)
  local status = os.execute(cmd)
  local wall, kb, user, system = read_all(times):match(
    '([%d.]+) (%d+) ([%d.]+) ([%d.]+)')
  os.remove(times)
  if (status ~= 0 and status ~= true) or not wall then
    return nil, 'failed: ' .. cmd
  end
  return tonumber(wall), tonumber(kb) / 1024, tonumber(user) + tonumber(system)
end

-- A profile of the workloads, `depth` frames deep (0: default format).
local function large_profile(path, depth)
  local memprof = require('memprof')
  local mixed = dofile('bench/workloads/mixed.lua')
  local trees = dofile('bench/workloads/trees.lua')
  assert(memprof.start(path, depth > 0 and { stack_depth = depth } or nil))
  for _ = 1, SCALE do
    mixed(1)
    trees(1)
  end
  assert(memprof.stop())
end

local function throughput(path, label, lua)
  local size = file_size(path)
  local walls, rss, cpus = {}, {}, {}
  for i = 1, ROUNDS do
    local wall, mb, cpu = report('', path, lua)
    if not wall then
      print(label .. ': ' .. mb)
      return nil
    end
    walls[i], rss[i], cpus[i] = wall, mb, cpu
  end
  local mbs = size / 1e6 / median(cpus)
  print(string.format('%-18s %8.1f MB %6.2f s %8.1f MB/s %6.2f s %8.1f MB/s ' ..
    '%6.0f MB', label, size / 1e6, median(walls), size / 1e6 / median(walls),
    median(cpus), mbs, median(rss)))
  return mbs
end

-- memprof live's reading of the profile at path (bench/live_read.lua),
-- by line and by stack: CPU time, MB of profile and events a second of
-- it, peak RSS.
local function live_reading(path, label, lua)
  local size = file_size(path)
  for _, grouping in ipairs({ 'line', 'stack' }) do
    local times = os.tmpname()
    local out = os.tmpname()
    local cmd = string.format('/usr/bin/time -f "%%M" -o %s timeout %d %s ' ..
      'bench/live_read.lua %s %s > %s 2>&1', times, CHILD_TIMEOUT_S, lua,
      shell_quote(path), grouping, out)
    local status = os.execute(cmd)
    local cpu, events = read_all(out):match('^([%d.]+) (%d+)')
    local kb = read_all(times):match('(%d+)')
    os.remove(times)
    os.remove(out)
    if (status ~= 0 and status ~= true) or not cpu or not kb then
      print(label .. ', memprof live by ' .. grouping .. ': failed: ' .. cmd)
    else
      cpu, events = tonumber(cpu), tonumber(events)
      print(string.format('%-18s %-6s %6.2f s CPU %8.1f MB/s %6.2f us/event ' ..
        '%6.0f MB', label, grouping, cpu, size / 1e6 / cpu,
        cpu * 1e6 / events, tonumber(kb) / 1024))
    end
  end
end

local function large(lua)
  local path = os.tmpname()
  print(string.format('text report of a large profile (scale %d; medians ' ..
    'of %d runs; the wall time depends on the load of the machine):',
    SCALE, ROUNDS))
  print(string.format('%-18s %11s %8s %13s %8s %13s %9s', 'profile', 'size',
    'wall', 'by wall', 'CPU', 'by CPU', 'peak RSS'))
  large_profile(path, 0)
  local default = throughput(path, 'default format', lua)
  large_profile(path, 16)
  throughput(path, 'stack_depth = 16', lua)
  print('\nmemprof live reading the same profiles (CPU time, peak RSS):')
  live_reading(path, 'stack_depth = 16', lua)
  os.remove(path)
  if default then
    print(string.format('text report, default format: %.1f MB/s of CPU ' ..
      'time (target >= %d): %s', default, TARGET_TEXT_MBS,
      default >= TARGET_TEXT_MBS and 'met' or 'MISSED'))
  end
end

local function many_places(lua)
  local path = os.tmpname()
  local largest, largest_of = 0, nil
  print(string.format('\n%d distinct places (bench/places.lua), peak RSS ' ..
    'and wall time of each format:', PLACES))
  print(string.format('%-8s %-8s %12s %12s', 'stacks', 'format', 'peak RSS',
    'wall time'))
  for _, stacks in ipairs({ false, true }) do
    places.write(path, { places = PLACES, stacks = stacks })
    for _, entry in ipairs(FORMATS) do
      local wall, mb = report(entry[2], path, lua)
      if not wall then
        print(entry[1] .. ': ' .. mb)
      else
        print(string.format('%-8s %-8s %9.0f MB %10.1f s',
          stacks and 'yes' or 'no', entry[1], mb, wall))
        if mb > largest then
          largest, largest_of = mb, entry[1] .. (stacks and ' (stacks)' or '')
        end
      end
    end
  end
  os.remove(path)
  print(string.format('largest: %.0f MB, %s (target < %d MB): %s', largest,
    largest_of or '-', TARGET_PLACES_MB,
    largest < TARGET_PLACES_MB and 'met' or 'MISSED'))
end

function M.run(lua)
  if not io.open('/usr/bin/time', 'rb') then
    print('\nreporter: skipped (no /usr/bin/time: apt-get install time)')
    return
  end
  print('\nthe reporter (bin/memprof-report):')
  large(lua)
  many_places(lua)
end

return M
