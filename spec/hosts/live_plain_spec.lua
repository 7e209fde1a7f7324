-- Specs for `memprof live` end to end: the plain text mode (stdout not a
-- terminal) with keys from a FIFO, on a luajit child that profiles
-- itself with a planted leak.  Needs build/memprof.so.

local D = require('helpers.live_driver')

-- The whole plain frames of an output: each begins with the title line,
-- and a blank line follows it (the next frame begins with one).
local function plain_frames(output)
  local frames = {}
  local text = '\n\n' .. output
  local at = text:find('\n\nmemprof live ', 1, true)
  while at do
    local next_at = text:find('\n\nmemprof live ', at + 2, true)
    if not next_at then
      break
    end
    frames[#frames + 1] = text:sub(at + 2, next_at)
    at = next_at
  end
  return frames
end

describe('memprof live', function()
  local run

  before_each(function()
    run = D.new()
  end)

  after_each(function()
    run:finish()
  end)

  it('prints plain frames, takes keys from stdin, ends with the profile',
      function()
    run:start_leaker(10)
    run:start_live({ args = { '--interval=0.3', '--top=3' } })
    -- 2 then Enter: rows by function, from the next frame on.
    run:keys('2\n')
    local output = run:wait_for(function(text)
      local frames = plain_frames(text)
      return #frames >= 1 and
        frames[#frames]:find('  leak (@leaker.lua:7)\n', 1, true) ~= nil
    end, 5)
    assert.is_truthy(output, run:output())
    -- No escape sequence, and frames of 3 rows at most.
    assert.is_nil(output:find('\27', 1, true))
    local frames = plain_frames(output)
    local last = frames[#frames]
    assert.is_truthy(last:find('\nfunctions by live bytes; ', 1, true), last)
    assert.are.equal('      LIVE     BLOCKS   GROWTH/s    ALLOC/s  FUNCTION',
      last:match('\n( +LIVE[^\n]*)'))
    local rows = 0
    for line in last:match('\n +LIVE[^\n]*\n(.*)$'):gmatch('[^\n]+') do
      if not line:find('... and ', 1, true) then
        rows = rows + 1
      end
    end
    assert.are.equal(3, rows)
    -- The profile stops (its epilogue): the last frame says so, and
    -- memprof live ends.
    run:stop_leaker()
    assert.is_true(run:exited(4))
    output = run:output()
    frames = plain_frames(output .. '\nmemprof live ')
    assert.is_truthy(frames[#frames]:match('^memprof live .- the profile ' ..
      'ended\n'), frames[#frames])
  end)
end)
