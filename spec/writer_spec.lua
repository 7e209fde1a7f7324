-- The writer's LEB128 encoders (src/writer.h), checked by a C program
-- against a plain byte loop, and its choice of PDEP for this CPU.
local C = require('helpers.command')

-- What /proc/cpuinfo says of the first CPU: vendor, family, flags.
local function cpu()
  local info = C.read_file('/proc/cpuinfo') or ''
  return {
    vendor = info:match('vendor_id%s*:%s*(%S+)'),
    family = tonumber(info:match('cpu family%s*:%s*(%d+)')),
    bmi2 = (info:match('flags%s*:[^\n]*') or ''):find(' bmi2', 1, true) ~= nil,
  }
end

describe('LEB128 encoding', function()
  local this = cpu()

  it('matches the byte loop for every length, with shifts and with PDEP',
    function()
      local code, out = C.run('build/leb128_check')
      assert.equal(0, code)
      local lines = {}
      for line in out:gmatch('[^\n]+') do lines[#lines + 1] = line end
      -- Both bounds of 65 bit lengths, and 100000 random numbers.
      assert.equal('shifts: 100130 numbers match', lines[2])
      assert.equal(this.bmi2 and 'pdep: 100130 numbers match' or
        'pdep: not on this CPU', lines[3])
    end)

  it('uses PDEP only where it is fast: BMI2, and not AMD before Zen 3',
    function()
      local _, out = C.run('build/leb128_check')
      local slow = (this.vendor == 'AuthenticAMD' or
        this.vendor == 'HygonGenuine') and (this.family or 0) < 0x19
      local want = this.bmi2 and not slow and 'yes' or 'no'
      assert.equal('fast pdep: ' .. want, out:match('^[^\n]+'))
    end)
end)
