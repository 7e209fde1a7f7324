-- Specs for memprof.encode.utf8: which bytes are valid UTF-8, and how the
-- others are replaced.  Runs under LuaJIT and plain Lua 5.1.

local utf8 = require('memprof.encode.utf8')

local R = '\239\191\189'

describe('utf8', function()
  it('keeps ASCII and valid sequences of every length as they are', function()
    for _, text in ipairs({ '', '@app.lua:12', 'caf\195\169',
        '\226\130\172 \240\159\152\128', '\244\143\191\191',
        '\237\159\191', '\224\160\128' }) do
      assert.are.equal(text, utf8.clean(text))
    end
  end)

  it('replaces each byte of a bad sequence by U+FFFD', function()
    local cases = {
      { '@bad\255.lua', '@bad' .. R .. '.lua' },
      -- Latin-1 e acute before an ASCII letter
      { 'caf\233s', 'caf' .. R .. 's' },
      -- an overlong '/', a surrogate, a code point past U+10FFFF
      { '\192\175', R .. R },
      { '\237\160\128', R .. R .. R },
      { '\244\144\128\128', R .. R .. R .. R },
      -- a sequence cut short, in the middle and at the end
      { '\226\130x', R .. R .. 'x' },
      { 'a\240\159\152', 'a' .. R .. R .. R },
      -- a lone continuation byte between valid sequences
      { '\195\169\128\195\169', '\195\169' .. R .. '\195\169' },
    }
    for _, case in ipairs(cases) do
      assert.are.equal(case[2], utf8.clean(case[1]))
      -- What it gives is valid: cleaned again, it is kept as it is.
      assert.are.equal(case[2], utf8.clean(case[2]))
    end
  end)
end)
