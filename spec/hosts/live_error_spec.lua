-- Specs for `memprof live` end to end: an error (a bad byte in the
-- profile) on a terminal (a pseudo-terminal made by `script`) gives the
-- terminal back, then says what is wrong.  Needs script.

local C = require('helpers.command')
local D = require('helpers.live_driver')

describe('memprof live on a terminal', function()
  local run

  before_each(function()
    run = D.new()
  end)

  after_each(function()
    run:finish()
  end)

  it('gives the terminal back before it says what is wrong with a file',
      function()
    -- A header that no version has, after a whole symbol table.
    C.write_file(run.profile, 'ljs\3\0\0\0\x80ljm\3\0\0\0\x03')
    run:start_live({ tty = true, after = 'echo "exit $?"; stty -a; echo "stty done"' })
    local tail, output = run:terminal_after_quit(5)
    assert.is_truthy(tail, output)
    assert.are.equal('memprof live: ' .. run.profile .. ': byte 15: ' ..
      'expected an event header with a source (0x05-0x13 or 0x80), found ' ..
      '0x03\r\nexit 1\r\n', tail:match('^(.-)speed'):match('^(.*exit 1\r\n)'))
    assert.is_truthy(tail:find(' icanon ', 1, true), tail)
    assert.is_truthy(tail:find(' echo ', 1, true), tail)
  end)
end)
