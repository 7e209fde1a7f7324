-- arm64: the target of a trace's `BLR Xn` (a helper out of `BL`'s reach),
-- found from the instructions that load Xn before it (src/trace_lines_a64.c,
-- tl_a64_const), so that built-in frames and the store-after-return
-- correction apply there as after a `BL`. The decoding reads memory only:
-- build/a64_const_check runs it on any host, on sequences as LuaJIT's
-- arm64 emitter writes them and on ones where Xn cannot be known.
local C = require('helpers.command')

describe('the target of an arm64 BLR', function()
  local code, out = C.run('build/a64_const_check')
  local results = {}
  for status, name in out:gmatch('(%S+) ([^\n]+)') do
    results[name] = status
  end

  local function found(name)
    it('is found: ' .. name, function()
      assert.equal('ok', results[name], out)
    end)
  end

  local function unknown(name)
    it('is not known: ' .. name, function()
      assert.equal('ok', results['no: ' .. name], out)
    end)
  end

  it('is checked on every case, with no wrong answer', function()
    assert.equal(0, code, out)
    local n = 0
    for _ in pairs(results) do n = n + 1 end
    assert.equal(20, n, out)
  end)

  found('MOVZ and three MOVKs')
  found('MOVN and a MOVK')
  found('the last MOVK of a fragment wins')
  found('32-bit MOVZ and MOVK')
  found('reads, stores and FP writes of the register between')
  found('ADR')
  found('ADRP and ADD')
  found('LDR literal')
  found('a move from a callee-saved register, across a call')
  found('an addition to another constant')
  found('a subtraction from another constant')
  unknown('a call clobbers X9 after its load')
  unknown('a load writes it')
  unknown('a load pair\'s second register')
  unknown('a store written back to it as a base')
  unknown('an FP register moved to it')
  unknown('a vector element moved to it')
  unknown('after an unconditional branch')
  unknown('no load before the start of the code')
  unknown('MOVK without its MOVZ')
end)
