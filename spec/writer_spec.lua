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

-- A profiled child that allocates, then idles: its file is current within
-- about a second, and stays so when it is killed with SIGKILL.
describe('the file of a running profile', function()
  local h = require('helpers.profile')
  local reader = require('memprof.read.stream')

  local CHILD = [[
package.cpath = %q
package.path = %q
local ffi = require('ffi')
ffi.cdef('int getpid(void);')
jit.off()
local memprof = require('memprof')
assert(memprof.start(%q, %s))
local keep = {}
for i = 1, 30000 do keep[i] = {} end
io.write(ffi.C.getpid(), '\n')
io.flush()
while true do end
]]

  -- The events of a cut file at the loop's line, and the reader's warning.
  local function count(path)
    local stream = reader.open(path)
    local n = 0
    while true do
      local ev = stream:next()
      if not ev then break end
      if ev.kind == 'alloc' and ev.site.line == 9 then n = n + 1 end
    end
    return n, stream.warning
  end

  local function path_of(warning)
    return warning:match('^(.-): ')
  end

  local function run(options)
    local path, script = h.tmpname(), h.tmpname('.lua')
    local f = assert(io.open(script, 'w'))
    f:write(CHILD:format(package.cpath, package.path, path, options))
    f:close()
    local pipe = assert(io.popen('exec timeout -s KILL 60 ' .. h.lua ..
      ' ' .. script))
    local pid = assert(tonumber(pipe:read('*l')), 'the child started')
    os.execute('sleep 1.6')
    local ok, idle = pcall(count, path)
    os.execute('kill -9 ' .. pid)
    pipe:close()
    local killed, warning
    if ok then ok, killed, warning = pcall(count, path) end
    os.remove(path)
    os.remove(script)
    assert(ok, ok or killed or idle)
    return idle, killed, warning
  end

  for _, options in ipairs({ 'nil', '{ stack_depth = 4, timestamps = true }' })
  do
    it('holds every event older than a second, options ' .. options,
      function()
      local idle, killed, warning = run(options)
      -- 30000 tables and the first array part of the table holding them.
      assert.equal(30001, idle)
      assert.equal(30001, killed)
      assert.equal(path_of(warning) .. ': the stream has no epilogue (the ' ..
        'profile was not stopped cleanly); the report covers all',
        warning:match('^(.-) %d+ events$'))
    end)
  end
end)
