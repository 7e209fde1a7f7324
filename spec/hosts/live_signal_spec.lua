-- Specs for `memprof live` end to end: SIGINT on a terminal (a pseudo-
-- terminal made by `script`) gives the terminal back.  Needs
-- build/memprof.so and script.

local D = require('helpers.live_driver')

describe('memprof live on a terminal', function()
  local run

  before_each(function()
    run = D.new()
  end)

  after_each(function()
    run:finish()
  end)

  it('gives the terminal back on SIGINT', function()
    run:start_leaker(10)
    run:start_live({ tty = true, after = 'stty -a; echo "stty done"',
      args = { '--interval=0.2' } })
    assert.is_truthy(run:wait_for(function(text)
      return #D.frames(text) >= 2
    end, 5), run:output())
    run:signal('INT')
    assert.is_true(run:exited(3))
    local tail, output = run:terminal_after_quit()
    assert.is_truthy(tail, output)
    assert.is_truthy(tail:find(' icanon ', 1, true), tail)
    assert.is_truthy(tail:find(' echo ', 1, true), tail)
    -- Nothing said: a quit asked for.
    assert.is_nil(output:find('memprof live:', 1, true))
  end)
end)
