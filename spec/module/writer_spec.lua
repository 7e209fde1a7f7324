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

-- A process that dies right after start leaves a profile with no event,
-- never an empty file: start returns once the prologue is in the file.
describe('the file of a profile that dies at once', function()
  local h = require('helpers.profile')
  local C = require('helpers.command')

  -- The script kills itself (SIGKILL) or ends with _exit() right after
  -- start; with %p, a forked child ends with _exit() right away.
  local function run(template, options, ending, forked)
    local out, code = h.run_script(string.format([[
package.cpath = %q
package.path = %q
local ffi = require('ffi')
ffi.cdef('int getpid(void); int kill(int, int); void _exit(int); ' ..
  'int fork(void); int waitpid(int, int *, int);')
local memprof = require('memprof')
assert(memprof.start(%q, %s))
if %s then
  local pid = ffi.C.fork()
  if pid == 0 then ffi.C._exit(0) end
  print('parent', ffi.C.getpid(), 'child', pid)
  local status = ffi.new('int[1]') ffi.C.waitpid(pid, status, 0)
  assert(memprof.stop())
  os.exit(0)
end
%s
]], package.cpath, package.path, template, options, tostring(forked),
      ending))
    return out, code
  end

  -- The file is a whole prologue and nothing after it that counts.
  local function assert_empty_profile(path)
    local bytes = C.read_file(path)
    assert.is_truthy(bytes and #bytes >= 15, path)
    assert.equal('ljs', bytes:sub(1, 3))
    local events, stream = h.read(path)
    assert.equal(0, #events)
    assert.matches('the stream has no epilogue', stream.warning, 1, true)
  end

  for _, case in ipairs({
    { 'killed', 'ffi.C.kill(ffi.C.getpid(), 9)', 137 },
    { 'ended by _exit', 'ffi.C._exit(3)', 3 },
  }) do
    for _, options in ipairs({ 'nil', '{ stack_depth = 4, timestamps = true }',
      '{ sample_bytes = 4096 }' }) do
      it('holds the prologue when ' .. case[1] .. ', options ' .. options,
        function()
        local path = h.tmpname()
        local _, code = run(path, options, case[2], false)
        assert.equal(case[3], code)
        assert_empty_profile(path)
        os.remove(path)
      end)
    end
  end

  it('holds the prologue of a %p child ended by _exit', function()
    local template = h.tmpname('-%p.bin')
    local out, code = run(template, 'nil', '', true)
    assert.equal(0, code, out)
    local parent, child = out:match('parent\t(%d+)\tchild\t(%d+)')
    assert(child, out)
    local child_path = template:gsub('%%p', child)
    assert_empty_profile(child_path)
    os.remove(child_path)
    os.remove((template:gsub('%%p', parent)))
  end)
end)

-- The writer's two 1 MB buffers are mapped, not malloc'd: glibc raises its
-- mmap threshold to the size of the largest mmapped block freed, so a
-- profile would leave a program's later large allocations in its heap.
-- A fresh luajit (this process's threshold depends on what ran before).
describe('the writer\'s buffers', function()
  it('leave the C library\'s mmap threshold as it was', function()
    if not C.have('luajit') then
      return
    end
    local code, out, err = C.run('LUA_CPATH=' .. C.quote(C.ROOT ..
      '/build/?.so;;') .. ' ' .. C.command('luajit', '-e', [[
local ffi = require('ffi')
ffi.cdef('struct mi { size_t arena, ordblks, smblks, hblks, hblkhd, ' ..
  'usmblks, fsmblks, uordblks, fordblks, keepcost; }; ' ..
  'struct mi mallinfo2(void); void *malloc(size_t); void free(void *);')
if not pcall(function() return ffi.C.mallinfo2 end) then
  io.write('no mallinfo2') os.exit(0)
end
local memprof = require('memprof')
local path = os.tmpname()
assert(memprof.start(path))
for _ = 1, 1000 do local t = {} end
assert(memprof.stop())
os.remove(path)
local p = ffi.C.malloc(512 * 1024)
local m = ffi.C.mallinfo2()
ffi.C.free(p)
io.write(tonumber(m.arena) == 0 and 'no arena' or
  tonumber(m.hblkhd) >= 512 * 1024 and 'mapped' or 'in the heap')]]))
    assert.are.equal(0, code, err)
    if out == 'no mallinfo2' or out == 'no arena' then
      return -- Not glibc, or valgrind's allocator.
    end
    assert.are.equal('mapped', out)
  end)
end)
