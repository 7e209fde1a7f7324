-- Specs for `memprof live` on a terminal, end to end: a luajit child
-- profiles itself with a planted leak, and memprof live watches its
-- profile under a pseudo-terminal (`script` of util-linux), keys written
-- through a FIFO.  Needs build/memprof.so and script.

local C = require('helpers.command')
local D = require('helpers.live_driver')

-- The first row of a frame (the line after the column headings).
local function first_row(frame)
  for i, line in ipairs(frame) do
    if line:match('^%s+LIVE%s') or line:match('^%s+ALLOC/s%s') then
      return frame[i + 1]
    end
  end
  return nil
end

describe('memprof live on a terminal', function()
  local run

  before_each(function()
    run = D.new()
  end)

  after_each(function()
    run:finish()
  end)

  it('shows the leaking line first, switches views and quits with q',
      function()
    assert.is_true(C.have('script'))
    run:start_leaker(10)
    -- After memprof live, the terminal's settings as stty says them.
    run:start_live({ tty = true, after = 'stty -a; echo "stty done"' })
    -- The leak first within 3 refreshes (the writer writes a second
    -- after the start; a refresh a second).
    local output = run:wait_for(function(text)
      local frames = D.frames(text)
      for i = 1, math.min(3, #frames) do
        local row = first_row(frames[i])
        if row and row:match(' ' .. D.LEAK_LINE:gsub('%p', '%%%0') .. '$') then
          return true
        end
      end
      return #frames >= 3
    end, 8)
    assert.is_truthy(output, run:output())
    local frames = D.frames(output)
    local found = false
    for i = 1, math.min(3, #frames) do
      local row = first_row(frames[i])
      found = found or (row and row:sub(-#D.LEAK_LINE) == D.LEAK_LINE)
    end
    assert.is_true(found, output)
    -- The alternate screen, the cursor hidden, then the frames.
    assert.are.equal('\27[?1049h\27[?25l\27[H', output:sub(1, 17))
    local heading = frames[1][5]
    assert.are.equal('      LIVE     BLOCKS   GROWTH/s    ALLOC/s  LINE', heading)
    assert.are.equal('l live  a allocated  1 line  2 function  3 stack  q quit',
      frames[1][#frames[1]])

    -- a: places by bytes allocated a second, drawn at once.
    local before = #frames
    run:keys('a')
    output = run:wait_for(function(text)
      local all = D.frames(text)
      return #all > before and all[#all][3]:match('^lines by bytes ' ..
        'allocated per second; ') ~= nil
    end, 3)
    assert.is_truthy(output, run:output())
    frames = D.frames(output)
    assert.are.equal('   ALLOC/s  ALLOCATED       LIVE   GROWTH/s  LINE',
      frames[#frames][5])

    -- q: the screen and the terminal's settings given back.
    run:keys('q')
    assert.is_true(run:exited(3))
    local tail
    tail, output = run:terminal_after_quit()
    assert.is_truthy(tail, output)
    assert.is_truthy(tail:find(' icanon ', 1, true), tail)
    assert.is_truthy(tail:find(' echo ', 1, true), tail)
    assert.is_nil(tail:find('-icanon', 1, true))
  end)
end)
