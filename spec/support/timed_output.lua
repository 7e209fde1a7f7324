-- busted's terminal output, then the slowest spec files and specs of the
-- run with their times (`busted -o spec/support/timed_output.lua`; the
-- Makefile's suites use it). SPEC_SLOWEST sets how many are listed
-- (default 10; 0 lists none).
return function(options)
  local busted = require('busted')
  local handler = require('busted.outputHandlers.utfTerminal')(options)
  local shown = tonumber(os.getenv('SPEC_SLOWEST') or '') or 10
  local tests, files = {}, {}

  local function full_name(element)
    return handler.getFullName(element)
  end

  local function on_test_end(element)
    tests[#tests + 1] = { element.duration or 0, full_name(element) }
    return nil, true
  end

  local function on_file_end(element)
    files[#files + 1] = { element.duration or 0, element.name }
    return nil, true
  end

  local function slowest(list, title)
    table.sort(list, function(a, b) return a[1] > b[1] end)
    io.write(title, '\n')
    for i = 1, math.min(shown, #list) do
      io.write(string.format('%8.2f s  %s\n', list[i][1], list[i][2]))
    end
  end

  local function on_suite_end()
    if shown > 0 then
      io.write('\n')
      slowest(files, 'Slowest spec files:')
      slowest(tests, 'Slowest specs:')
    end
    return nil, true
  end

  busted.subscribe({ 'test', 'end' }, on_test_end)
  busted.subscribe({ 'file', 'end' }, on_file_end)
  busted.subscribe({ 'suite', 'end' }, on_suite_end)
  return handler
end
