-- busted's terminal output, then the slowest spec files and specs of the
-- run with their times (`busted -o spec/support/timed_output.lua`; the
-- Makefile's suites use it): wall time, and CPU time of the process and
-- the children it waited for (what a busy machine does not inflate).
-- SPEC_SLOWEST sets how many are listed (default 10; 0 lists none),
-- SPEC_SLOWEST_BY=cpu sorts them by CPU time, and SPEC_TIMES_FILE names a
-- file to which every spec file's and spec's times are appended, a line
-- each ("file" or "spec", wall, CPU, name; split by tabs), for
-- spec/support/busted_each to rank the specs of many runs.

-- CPU seconds of this process and its reaped children (/proc/self/stat:
-- utime, stime, cutime, cstime, in clock ticks of 1/100 s on Linux).
local function cpu_seconds()
  local f = io.open('/proc/self/stat', 'r')
  if not f then return 0 end
  local stat = f:read('*l') or ''
  f:close()
  local fields, n = {}, 0
  -- (The command name, field 2, is in parentheses and may hold spaces.)
  for word in stat:gsub('^.*%) ', ''):gmatch('%S+') do
    n = n + 1
    fields[n] = word
  end
  local ticks = 0
  for i = 12, 15 do ticks = ticks + (tonumber(fields[i]) or 0) end
  return ticks / 100
end

return function(options)
  local busted = require('busted')
  local handler = require('busted.outputHandlers.utfTerminal')(options)
  local shown = tonumber(os.getenv('SPEC_SLOWEST') or '') or 10
  local key = os.getenv('SPEC_SLOWEST_BY') == 'cpu' and 3 or 1
  local tests, files = {}, {}
  local cpu_at = {}

  local function on_start(element)
    cpu_at[element] = cpu_seconds()
    return nil, true
  end

  local function entry(element, name)
    local cpu = cpu_seconds() - (cpu_at[element] or 0)
    cpu_at[element] = nil
    return { element.duration or 0, name, cpu }
  end

  local function on_test_end(element)
    tests[#tests + 1] = entry(element, handler.getFullName(element))
    return nil, true
  end

  local function on_file_end(element)
    files[#files + 1] = entry(element, element.name)
    return nil, true
  end

  local function slowest(list, title)
    table.sort(list, function(a, b) return a[key] > b[key] end)
    io.write(title, ' (wall, CPU)\n')
    for i = 1, math.min(shown, #list) do
      io.write(string.format('%8.2f s %7.2f s  %s\n', list[i][1], list[i][3],
        list[i][2]))
    end
  end

  local function append_times(path)
    local f = io.open(path, 'a')
    if not f then return end
    for _, kind in ipairs({ { 'file', files }, { 'spec', tests } }) do
      for _, e in ipairs(kind[2]) do
        f:write(string.format('%s\t%.3f\t%.2f\t%s\n', kind[1], e[1], e[3],
          (e[2]:gsub('[\t\n]', ' '))))
      end
    end
    f:close()
  end

  local function on_suite_end()
    local times_file = os.getenv('SPEC_TIMES_FILE')
    if times_file then append_times(times_file) end
    if shown > 0 then
      io.write('\n')
      slowest(files, 'Slowest spec files:')
      slowest(tests, 'Slowest specs:')
    end
    return nil, true
  end

  busted.subscribe({ 'test', 'start' }, on_start)
  busted.subscribe({ 'file', 'start' }, on_start)
  busted.subscribe({ 'test', 'end' }, on_test_end)
  busted.subscribe({ 'file', 'end' }, on_file_end)
  busted.subscribe({ 'suite', 'end' }, on_suite_end)
  return handler
end
