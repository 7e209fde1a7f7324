-- The Lua API (start, stop, is_running, misc.memprof) and every way a
-- profile can end: stop, lua_close, exit without close, a write error.
local h = require('helpers.profile')
local C = require('helpers.command')
local memprof = require('memprof')
local reader = require('memprof.read.stream')

local EINVAL, ENOENT, ENOSPC, ENOTDIR = 22, 2, 28, 20

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- A child script that loads the module from this tree.
local function script(body)
  return 'package.cpath = ' .. string.format('%q', package.cpath) .. '\n' ..
    'package.path = ' .. string.format('%q', package.path) .. '\n' .. body
end

-- The profile at path parses completely: no warning, its events listed.
local function read_clean(path)
  local events, stream = h.read(path)
  assert.is_nil(stream.warning)
  return events
end

describe('memprof.start and memprof.stop', function()
  after_each(function()
    if memprof.is_running() then memprof.stop() end
  end)

  it('start returns true and stop returns true', function()
    local path = h.tmpname()
    assert.is_false(memprof.is_running())
    assert.equal(true, memprof.start(path))
    assert.is_true(memprof.is_running())
    assert.equal(true, memprof.stop())
    assert.is_false(memprof.is_running())
    read_clean(path)
    os.remove(path)
  end)

  it('refuses a second start without touching the second file', function()
    local path, other = h.tmpname(), h.tmpname()
    assert.is_true(memprof.start(path))
    assert.same({ nil, 'profiler is running already', EINVAL },
      { memprof.start(other) })
    assert.is_false(exists(other))
    assert.is_true(memprof.stop())
    os.remove(path)
  end)

  it('refuses stop when not running', function()
    assert.same({ nil, 'profiler is not running', EINVAL }, { memprof.stop() })
  end)

  it('reports a file that cannot be opened as PATH: strerror', function()
    assert.same({ nil, '/nonexistent/dir/out.bin: No such file or directory',
      ENOENT }, { memprof.start('/nonexistent/dir/out.bin') })
    assert.same({ nil, '/dev/null/out.bin: Not a directory', ENOTDIR },
      { memprof.start('/dev/null/out.bin') })
    assert.is_false(memprof.is_running())
  end)

  it('refuses a path with a NUL byte and creates no file', function()
    local path = h.tmpname()
    assert.same({ nil, "the profile's path has a NUL byte (at byte " ..
      #path .. ' of ' .. (#path + 5) .. ')', EINVAL },
      { memprof.start(path .. '\0tail') })
    assert.is_false(exists(path))
    assert.is_false(memprof.is_running())
  end)

  it('refuses a FIFO nobody reads at once, and writes to one read',
    function()
    local fifo = h.tmpname('.fifo')
    assert.equal(0, C.run('mkfifo ' .. C.quote(fifo)))
    -- In a child with a time limit: an open that waits for a reader
    -- would hang it.
    local out, code = h.run_script(script(string.format([[
local memprof = require('memprof')
print(memprof.start(%q))
print(memprof.is_running())
]], fifo)))
    assert.equal(0, code)
    assert.equal(fifo .. ': No such device or address\t6\nfalse\n',
      out:gsub('^nil\t', ''))
    -- With a reader, the profile goes through the FIFO as through a file.
    local copy = h.tmpname()
    out, code = h.run_script(script(string.format([[
local reader = io.popen('timeout 60 cat ' .. %q .. ' > ' .. %q, 'w')
local memprof = require('memprof')
-- cat opens its end of the FIFO when it gets to it: until then, start
-- answers at once that nobody reads.
local ok, msg
for _ = 1, 200 do
  ok, msg = memprof.start(%q)
  if ok then break end
  os.execute('sleep 0.05')
end
assert(ok, msg)
local t = {}
assert(memprof.stop())
reader:close()
print(#assert(io.open(%q, 'rb')):read('*a') > 0)
]], fifo, copy, fifo, copy)))
    assert.equal(0, code, out)
    assert.equal('true\n', out)
    os.remove(fifo)
    os.remove(copy)
  end)

  it('raises on a path that is not a string', function()
    assert.has_error(function() memprof.start() end,
      "bad argument #1 to 'start' (string expected, got no value)")
    assert.has_error(function() memprof.start({}) end,
      "bad argument #1 to 'start' (string expected, got table)")
  end)

  it('refuses unknown options and creates no file', function()
    local path = h.tmpname()
    assert.same({ nil, "unknown option 'bogus'", EINVAL },
      { memprof.start(path, { bogus = 1 }) })
    assert.same({ nil, 'options must be a table, got number', EINVAL },
      { memprof.start(path, 5) })
    assert.is_false(exists(path))
    assert.is_false(memprof.is_running())
  end)

  it("takes trace_lines 'start' as memprof run's --trace-lines does, " ..
    'false too, and names the spellings of what it refuses', function()
      for _, mode in ipairs({ 'start', false }) do
        local path = h.tmpname()
        assert.is_true(memprof.start(path, { trace_lines = mode }))
        assert.is_true(memprof.stop())
        os.remove(path)
      end
      local path = h.tmpname()
      local must = "option 'trace_lines' must be 'exact', 'walk', 'resume' " ..
        "or 'start' (or false, the same as 'start'), got "
      assert.same({ nil, must .. "the string 'false'", EINVAL },
        { memprof.start(path, { trace_lines = 'false' }) })
      assert.same({ nil, must .. 'a boolean', EINVAL },
        { memprof.start(path, { trace_lines = true }) })
      assert.is_false(exists(path))
    end)

  it('refuses a collect_at_stop that is not a boolean', function()
    local path = h.tmpname()
    assert.same({ nil, "option 'collect_at_stop' must be a boolean, got " ..
      'number', EINVAL }, { memprof.start(path, { collect_at_stop = 1 }) })
    assert.is_false(exists(path))
  end)

  -- Stopped, the collector keeps every byte of garbage; running, it frees
  -- garbage eight times the heap long before that much is made.
  it('leaves a stopped collector stopped after collect_at_stop', function()
    local function garbage_kept()
      local before = collectgarbage('count')
      local made = 8 * before
      for i = 1, made do
        local _ = string.rep('x', 1000) .. i -- Over 1 KiB each.
      end
      return collectgarbage('count') - before >= made
    end
    local path = h.tmpname()
    collectgarbage('stop')
    local started = memprof.start(path, { collect_at_stop = true })
    local stopped = memprof.stop()
    local kept = garbage_kept()
    collectgarbage('restart')
    assert(memprof.start(path, { collect_at_stop = true }))
    assert(memprof.stop())
    local kept_running = garbage_kept()
    os.remove(path)
    assert.same({ true, true, true, false },
      { started, stopped, kept, kept_running })
  end)

  -- The event stream's version (byte 11) and whether a note follows its
  -- header.
  local function version_and_note(options)
    local path = h.tmpname()
    assert(memprof.start(path, options))
    assert(memprof.stop())
    local file = assert(io.open(path, 'rb'))
    local bytes = file:read('*a')
    file:close()
    os.remove(path)
    return bytes:byte(12), bytes:byte(16) == 0x1c
  end

  it('writes the extended format, with the heap at the start, for ' ..
    'collect_at_stop = true, and Tarantool\'s for false', function()
      assert.same({ 100, true },
        { version_and_note({ collect_at_stop = true }) })
      assert.same({ 3, false },
        { version_and_note({ collect_at_stop = false }) })
      assert.same({ 3, false }, { version_and_note(nil) })
      assert.same({ 100, true }, { version_and_note({ timestamps = true }) })
    end)

  it('truncates an existing file at start', function()
    local path = h.tmpname()
    local f = assert(io.open(path, 'wb'))
    f:write(string.rep('x', 100000))
    f:close()
    collectgarbage()
    assert.is_true(memprof.start(path))
    assert.is_true(memprof.stop())
    local events = read_clean(path)
    assert.is_true(#events < 100, #events .. ' events')
    os.remove(path)
  end)

  it('profiles again after a stop', function()
    for _ = 1, 3 do
      local path = h.tmpname()
      assert.is_true(memprof.start(path))
      local t = {}
      assert.is_true(memprof.stop())
      assert.is_true(#read_clean(path) >= 1)
      os.remove(path)
      t = nil
    end
  end)
end)

describe('misc.memprof', function()
  it('is installed into the global misc table', function()
    assert.is_table(misc)
    assert.is_function(misc.memprof.start)
    assert.is_function(misc.memprof.stop)
    if tostring(misc.memprof.start):match('^function: builtin#') then
      -- The VM's own (Tarantool's fork), kept: builtin_memprof_spec.lua.
      return
    end
    local path = h.tmpname()
    assert.is_true(misc.memprof.start(path))
    assert.same({ nil, 'profiler is running already', EINVAL },
      { memprof.start(path) })
    assert.is_true(memprof.stop())
    os.remove(path)
  end)

  it('never replaces an existing misc.memprof', function()
    local out, code = h.run_script(script([[
local mine = { start = 'mine' }
misc = { memprof = mine }
local memprof = require('memprof')
print(misc.memprof == mine, misc.memprof.start, type(memprof.start))
]]))
    assert.equal(0, code)
    assert.equal('true\tmine\tfunction\n', out)
  end)

  it('creates misc when there is none', function()
    local out, code = h.run_script(script([[
misc = nil
require('memprof')
print(type(misc), type(misc.memprof.start), type(misc.memprof.stop))
]]))
    assert.equal(0, code)
    assert.equal('table\tfunction\tfunction\n', out)
  end)
end)

describe('the end of a profile', function()
  local WORK = [[
local keep = {} jit.off()
for i = 1, 5000 do keep[i] = { tostring(i) } end
]]

  it('is complete after lua_close while profiling', function()
    local path = h.tmpname()
    local out, code = h.run_script(script(string.format([[
local memprof = require('memprof')
assert(memprof.start(%q))
%s
os.exit(3, true) -- Closes the state first.
]], path, WORK)))
    assert.equal('', out)
    assert.equal(3, code)
    -- Two header lines, require, start, then the loop at line 6 makes one
    -- table per iteration (strings like "1" may exist already).
    local by_size = {}
    for _, ev in ipairs(read_clean(path)) do
      if ev.kind == 'alloc' and ev.line == 6 then
        by_size[ev.nsize] = (by_size[ev.nsize] or 0) + 1
      end
    end
    local most = 0
    for _, n in pairs(by_size) do most = math.max(most, n) end
    assert.equal(5000, most)
    os.remove(path)
  end)

  it('is complete when the script ends without stop', function()
    local path = h.tmpname()
    local out, code = h.run_script(script(string.format([[
local memprof = require('memprof')
assert(memprof.start(%q))
%s]], path, WORK)))
    assert.equal('', out)
    assert.equal(0, code)
    assert.is_true(#read_clean(path) >= 10000)
    os.remove(path)
  end)

  it('is complete after os.exit without closing the state', function()
    local path = h.tmpname()
    local out, code = h.run_script(script(string.format([[
local memprof = require('memprof')
assert(memprof.start(%q))
%s
os.exit(7)
]], path, WORK)))
    assert.equal('', out)
    assert.equal(7, code)
    assert.is_true(#read_clean(path) >= 10000)
    os.remove(path)
  end)

  it('reports a write error at stop and the program goes on', function()
    assert.is_true(memprof.start('/dev/full'))
    local t = {}
    for i = 1, 100 do t[i] = {} end
    assert.same({ nil, '/dev/full: No space left on device', ENOSPC },
      { memprof.stop() })
    assert.is_false(memprof.is_running())
    assert.equal(100, #t)
  end)

  -- In a child (before, it waited for ever in the allocator), under a
  -- time limit: the child holds the FIFO's read end and never reads.
  -- (MEMPROF_STALL_SECONDS=3: the bound of 10 seconds made shorter.)
  it('ends a profile into a FIFO whose reader never reads after ' ..
    'MEMPROF_STALL_SECONDS', function()
    local dir = C.temp_dir()
    local fifo = dir .. '/fifo'
    assert.equal(0, (C.run('mkfifo ' .. C.quote(fifo))))
    local out, code = h.run_script(script(string.format([[
local ffi = require('ffi')
ffi.cdef('int open(const char *, int, ...);')
jit.off()
local memprof = require('memprof')
assert(ffi.C.open(%q, 2048) >= 0) -- O_RDONLY | O_NONBLOCK
local t = os.time()
print(memprof.start(%q))
keep = {}
for i = 1, 300000 do keep[i] = { i } end -- Far more than a pipe holds.
print(memprof.stop())
print('waited', os.time() - t >= 2) -- (3 s waited: at least 2 by os.time)
]], fifo, fifo)), 'MEMPROF_STALL_SECONDS=3')
    C.remove_tree(dir)
    assert.same({ 'true\nnil\t' .. fifo .. ': the reader took no byte for ' ..
      '3 seconds (a write waits no longer)\t110\nwaited\ttrue\n', 0 },
      { out, code })
  end)

  it('stops writing after a write error in the middle of a profile',
    function()
    assert.is_true(memprof.start('/dev/full'))
    -- Far more than the 1 MiB write buffer.
    local t = {}
    for i = 1, 200000 do t[i % 1000 + 1] = { i } end
    local sum = 0
    for i = 1, 1000 do sum = sum + t[i][1] end
    assert.equal(199000 * 1000 + 500500, sum)
    assert.same({ nil, '/dev/full: No space left on device', ENOSPC },
      { memprof.stop() })
    -- And profiling works again afterwards.
    local path = h.tmpname()
    assert.is_true(memprof.start(path))
    assert.is_true(memprof.stop())
    read_clean(path)
    os.remove(path)
  end)
end)

describe('fork() while profiling', function()
  -- After the two header lines of script(), the child allocates 1000
  -- tables at line 12 and ends in one of three ways; the parent allocates
  -- 10 tables at line 16 after waiting for it.
  local function forked(child_exit)
    local path = h.tmpname()
    local out, code = h.run_script(script(string.format([[
local ffi = require('ffi')
ffi.cdef('int fork(void); int waitpid(int, int *, int);')
local memprof = require('memprof')
jit.off()
assert(memprof.start(%q))
local before = {}
local pid = ffi.C.fork()
if pid == 0 then
  local kept = {}
  for i = 1, 1000 do kept[i] = {} end
  %s
end
local status = ffi.new('int[1]') ffi.C.waitpid(pid, status, 0)
for i = 1, 10 do local t = {} end
print('child status', status[0])
assert(memprof.stop())
]], path, child_exit)))
    return path, out, code
  end

  for _, case in ipairs({
    { 'exits without closing the state', 'os.exit(0)' },
    { 'closes its state', 'os.exit(0, true)' },
    { 'calls stop() first', 'print(memprof.stop()) os.exit(0)' },
  }) do
    it('keeps the parent file intact when the child ' .. case[1], function()
      local path, out, code = forked(case[2])
      assert.equal(0, code)
      assert.matches('child status\t0\n$', out)
      local events = read_clean(path)
      local lines = {}
      for _, ev in ipairs(events) do
        if ev.source == 'lua' and ev.kind == 'alloc' then
          lines[ev.line] = (lines[ev.line] or 0) + 1
        end
      end
      assert.is_nil(lines[12]) -- Nothing of the child's.
      assert.equal(10, lines[16])
      os.remove(path)
    end)
  end
end)

describe('fork() with a path that does not name the process', function()
  local FORKED = 'nil\tprofiler is not running in this process: it was ' ..
    'started before fork(), and a path without %p is not followed into a ' ..
    'child\t' .. EINVAL

  -- Starts a profile into `path`, forks, and runs `child` (Lua code) in the
  -- child, which then exits; the parent waits, then says whether it still
  -- runs and stops. Returns the output and exit code.
  local function forked(path, child)
    return h.run_script(script(string.format([[
local ffi = require('ffi')
ffi.cdef('int fork(void); int waitpid(int, int *, int);')
local memprof = require('memprof')
assert(memprof.start(%q))
local pid = ffi.C.fork()
if pid == 0 then
  %s
  os.exit(0)
end
local status = ffi.new('int[1]') ffi.C.waitpid(pid, status, 0)
print('parent running', memprof.is_running())
print('parent stop', memprof.stop())
]], path, child)))
  end

  it('tells the child that no profile runs there', function()
    local path = h.tmpname()
    local out, code = forked(path, string.format([[
  local kept = {}
  for i = 1, 100 do kept[i] = {} end
  print('child running', memprof.is_running())
  print('child stats', memprof.stats())
  print('child stop', memprof.stop())
  print('child stop again', memprof.stop())
  print('child start', memprof.start(%q))
  print('child running', memprof.is_running())
  print('child stop', memprof.stop())]], path .. '.child'))
    assert.equal(0, code, out)
    assert.equal(table.concat({
      'child running\tfalse',
      'child stats\t' .. FORKED,
      -- stats() ended it in the child: stop finds nothing more.
      'child stop\tnil\tprofiler is not running\t' .. EINVAL,
      'child stop again\tnil\tprofiler is not running\t' .. EINVAL,
      'child start\ttrue',
      'child running\ttrue',
      'child stop\ttrue',
      'parent running\ttrue',
      'parent stop\ttrue',
    }, '\n') .. '\n', out)
    read_clean(path)
    read_clean(path .. '.child')
    os.remove(path)
    os.remove(path .. '.child')
  end)

  it('says so at stop in the child', function()
    local path = h.tmpname()
    local out, code = forked(path, "print('child stop', memprof.stop())")
    assert.equal(0, code, out)
    assert.equal('child stop\t' .. FORKED ..
      '\nparent running\ttrue\nparent stop\ttrue\n', out)
    read_clean(path)
    os.remove(path)
  end)
end)

describe('fork() with a path that names the process (%p)', function()
  -- After the two header lines of script(), the child makes 1000 tables at
  -- line 13 (1002 allocations there: the table that keeps them and its
  -- first array part too) and ends in one of three ways; the parent allocates
  -- 10 tables at line 18 after waiting for it. before_fork runs in the
  -- parent right before fork(). The script prints both files' names and
  -- what stop returned.
  local function forked(template, options, child_exit, before_fork)
    return h.run_script(script(string.format([[
local ffi = require('ffi')
ffi.cdef('int fork(void); int getpid(void); int waitpid(int, int *, int);')
local memprof = require('memprof')
jit.off()
local template = %q
assert(memprof.start(template, %s))
print('parent file', (template:gsub('%%%%p', ffi.C.getpid())))
%s
local pid = ffi.C.fork()
if pid == 0 then
  local kept = {} for i = 1, 1000 do kept[i] = {} end
  print('child file', (template:gsub('%%%%p', ffi.C.getpid())))
  %s
end
local status = ffi.new('int[1]') ffi.C.waitpid(pid, status, 0)
for i = 1, 10 do local t = {} end
print('child status', status[0])
print('parent stop', memprof.stop())
]], template, options, before_fork or '', child_exit)))
  end

  local function files(out)
    return out:match('parent file\t([^\n]+)'),
      out:match('child file\t([^\n]+)')
  end

  -- Allocations of Lua tables by line; every place must be named (its
  -- function described in this stream), never LFUNC 0x...
  local function table_lines(events)
    local lines = {}
    for _, ev in ipairs(events) do
      if ev.source == 'lua' and ev.kind == 'alloc' then
        assert.not_matches('^LFUNC', ev.name)
        lines[ev.line] = (lines[ev.line] or 0) + 1
      end
    end
    return lines
  end

  for _, case in ipairs({
    { 'exits without closing the state', 'os.exit(0)' },
    { 'closes its state', 'os.exit(0, true)' },
    { 'calls stop() first', 'print("child stop", memprof.stop()) os.exit(0)' },
  }) do
    it('gives the child a complete file of its own when it ' .. case[1],
      function()
      local out, code = forked(h.tmpname('-%p.bin'), 'nil', case[2])
      local parent, child = files(out)
      os.remove(parent)
      local child_events = read_clean(child)
      os.remove(child)
      assert.equal(0, code)
      assert.matches('child status\t0\nparent stop\ttrue\n$', out)
      assert.not_equal(parent, child)
      -- Only what the child did after fork().
      local lines = table_lines(child_events)
      assert.equal(1002, lines[13])
      assert.is_nil(lines[18])
      if case[2]:find('stop') then
        assert.matches('child stop\ttrue\n', out)
      end
    end)
  end

  it('keeps the parent file free of the child\'s events', function()
    local out = forked(h.tmpname('-%p.bin'), 'nil', 'os.exit(0)')
    local parent, child = files(out)
    local lines = table_lines(read_clean(parent))
    os.remove(parent)
    os.remove(child)
    assert.is_nil(lines[13])
    assert.equal(10, lines[18])
  end)

  it('starts the child\'s stream afresh: stack ids from 1, its own clock',
    function()
    -- The parent waits 0.3 s between start and fork(): the child's clock
    -- starts at fork(), so its first mark comes well before 0.3 s.
    local out = forked(h.tmpname('-%p.bin'),
      '{ stack_depth = 4, timestamps = true }', 'os.exit(0)',
      'os.execute("sleep 0.3")')
    local parent, child = files(out)
    os.remove(parent)
    local stream = reader.open(child)
    local ids, first_time, tables = {}, nil, 0
    for ev in function() return stream:next() end do
      first_time = first_time or ev.time
      if ev.stack then ids[ev.stack.id] = true end
      if ev.kind == 'alloc' and ev.site.line == 13 then
        tables = tables + 1
      end
    end
    os.remove(child)
    assert.is_nil(stream.warning)
    assert.equal(1002, tables)
    assert.is_true(first_time < 0.3e9)
    assert.is_true(ids[1])
  end)

  -- The child's live table starts empty: the parent sampled (at one
  -- sample per byte) the 500 tables it made before fork(), which the
  -- child collects, yet the child's stream frees only blocks it
  -- allocated itself.
  it('gives the child of a sampled profile a sampled file of its own',
    function()
    local out, code = forked(h.tmpname('-%p.bin'),
      '{ sample_bytes = 1, seed = 7 }',
      'junk = nil collectgarbage() os.exit(0)',
      'junk = {} for i = 1, 500 do junk[i] = {} end')
    local parent, child = files(out)
    local parent_stream = reader.open(parent)
    os.remove(parent)
    local events, stream = h.read(child)
    os.remove(child)
    local allocated, foreign = {}, 0
    for _, ev in ipairs(events) do
      if ev.kind ~= 'alloc' and not allocated[ev.oaddr] then
        foreign = foreign + 1
      end
      if ev.kind ~= 'alloc' then allocated[ev.oaddr] = nil end
      if ev.kind ~= 'free' then allocated[ev.naddr] = true end
    end
    local lines = table_lines(events)
    assert.equal(0, code)
    assert.is_nil(stream.warning)
    assert.same({ 1, 1, 1002, nil, 0 }, { parent_stream.sample_bytes,
      stream.sample_bytes, lines[13], lines[18], foreign })
    assert.is_true(stream.heap_at_start > 0)
  end)

  -- Each child seeds its sampler with the profile's seed mixed with its
  -- process id: two children that make the same strings of 1 to 3000
  -- bytes at one sample per 4 KB sample different ones.
  it('seeds the sampler of each child afresh', function()
    local out = h.run_script(script([[
local ffi = require('ffi')
ffi.cdef('int fork(void); int getpid(void); int waitpid(int, int *, int);')
local memprof = require('memprof')
jit.off()
local template = ]] .. string.format('%q', h.tmpname('-%p.bin')) .. [[

collectgarbage('stop')
assert(memprof.start(template, { sample_bytes = 4096, seed = 7 }))
for child = 1, 2 do
  local pid = ffi.C.fork()
  if pid == 0 then
    local keep = {}
    for i = 1, 3000 do keep[i] = string.rep('x', i) end
    memprof.stop()
    print('child file', (template:gsub('%%p', ffi.C.getpid())))
    os.exit(0)
  end
  ffi.C.waitpid(pid, nil, 0)
end
memprof.stop()
os.remove((template:gsub('%%p', ffi.C.getpid())))
]]))
    local sizes = {}
    for path in out:gmatch('child file\t([^\n]+)') do
      local list = {}
      for _, ev in ipairs(read_clean(path)) do
        if ev.kind == 'alloc' and ev.line == 14 then
          list[#list + 1] = ev.nsize
        end
      end
      os.remove(path)
      sizes[#sizes + 1] = table.concat(list, ' ')
    end
    assert.equal(2, #sizes)
    assert.is_true(#sizes[1] > 0 and #sizes[2] > 0)
    assert.not_equal(sizes[1], sizes[2])
  end)

  it('names the file of this process in the message of a failed start',
    function()
    local out = h.run_script(script([[
local ffi = require('ffi')
ffi.cdef('int getpid(void);')
local memprof = require('memprof')
local ok, message = memprof.start('/nonexistent-dir/out-%p-%%p.bin')
print(ok, message == '/nonexistent-dir/out-' .. ffi.C.getpid() ..
  '-%p.bin: No such file or directory')
]]))
    assert.equal('nil\ttrue\n', out)
  end)

  it('records nothing in a child when %p is escaped as %%p', function()
    local template = h.tmpname('-%%p.bin')
    local parent = template:gsub('%%%%', '%%')
    local out, code = forked(template, 'nil', 'os.exit(0)')
    local lines = table_lines(read_clean(parent))
    os.remove(parent)
    assert.equal(0, code)
    assert.matches('child status\t0\nparent stop\ttrue\n$', out)
    assert.is_nil(lines[13])
    assert.equal(10, lines[18])
  end)

  it('says in the child\'s stop why it could not go on', function()
    local dir = h.tmpname('-dir')
    assert(os.execute('mkdir ' .. dir))
    -- The directory goes before fork(): the child cannot open its file.
    local out = forked(dir .. '/out-%p.bin', 'nil',
      'print("child stop", memprof.stop()) os.exit(0)',
      'os.execute("rm -r ' .. dir .. '")')
    local _, child = files(out)
    assert.equal(nil, io.open(dir))
    assert.is_truthy(out:find('child stop\tnil\t' .. child ..
      ': No such file or directory\t2\n', 1, true))
    assert.matches('parent stop\ttrue\n', out)
  end)
end)

describe('fork() under LeakSanitizer', function()
  -- LeakSanitizer's exit check in a child waits for locks of the thread
  -- bookkeeping; one held by the writer thread at fork() (it was being
  -- created) was never released there, and the child hung.
  local function libasan()
    local pipe = io.popen('gcc -print-file-name=libasan.so 2>/dev/null')
    local name = pipe and pipe:read('*l')
    if pipe then pipe:close() end
    return name and name:find('^/') and name or nil
  end

  it('never hangs a child that exits, with or without allocating',
    function()
    local asan = libasan()
    if not asan or h.lua ~= 'luajit' then
      pending('needs gcc\'s libasan.so and luajit')
      return
    end
    local path = h.tmpname()
    local out, code = h.run_script(script(string.format([[
local ffi = require('ffi')
ffi.cdef('int fork(void); int waitpid(int, int *, int);')
local memprof = require('memprof')
local ended = 0
for round = 1, 30 do
  assert(memprof.start(%q, round %% 2 == 0 and { timestamps = true } or nil))
  local pid = ffi.C.fork()
  if pid == 0 then
    if round %% 3 == 0 then local t = {} for i = 1, 100 do t[i] = {} end end
    os.exit(0)
  end
  local status = ffi.new('int[1]')
  ffi.C.waitpid(pid, status, 0)
  if status[0] == 0 then ended = ended + 1 end
  assert(memprof.stop())
end
print('children that ended well', ended)
]], path)), 'LD_PRELOAD=' .. asan .. ' ASAN_OPTIONS=detect_leaks=1 ' ..
      'LSAN_OPTIONS=exitcode=0')
    os.remove(path)
    assert.equal(0, code)
    assert.equal('children that ended well\t30', out:match('children[^\n]*'))
  end)
end)

describe('memory of the module itself', function()
  -- Our sources: a valgrind record that mentions one of them is ours.
  local OURS = require('helpers.sources').patterns(C.ROOT)

  -- Under the sanitizers' run (make test-sanitizers) children preload
  -- libasan, which valgrind cannot run.
  local sanitized = os.getenv('MEMPROF_TEST_SANITIZERS') ~= nil

  local function valgrind(body)
    if sanitized then
      pending('valgrind cannot run with the sanitizers preloaded')
      return nil
    end
    local file = h.tmpname('.lua')
    local f = assert(io.open(file, 'w'))
    f:write(script(body))
    f:close()
    local pipe = assert(io.popen(C.CLEAN_ENV .. 'valgrind --leak-check=full ' ..
      '--show-leak-kinds=definite,possible ' .. h.lua .. ' ' .. file ..
      ' 2>&1; echo "exit=$?"'))
    local out = pipe:read('*a')
    pipe:close()
    os.remove(file)
    return out, tonumber(out:match('exit=(%d+)%s*$'))
  end

  -- The error and leak records (blank-line separated) that involve our
  -- code. The host itself (Tarantool, say) may have records of its own.
  local function our_records(out)
    local found = {}
    for record in (out .. '\n'):gmatch('(.-)\n==%d+== \n') do
      for _, pattern in ipairs(OURS) do
        if record:find(pattern) and not record:find('LEAK SUMMARY') then
          found[#found + 1] = record
          break
        end
      end
    end
    return found
  end

  it('leaks nothing on stop, on a write error or at lua_close', function()
    local path = h.tmpname()
    local out, code = valgrind(string.format([[
local memprof = require('memprof')
for round = 1, 3 do
  assert(memprof.start(%q))
  local t = {}
  for i = 1, 20000 do t[i %% 100 + 1] = { tostring(i) } end
  assert(memprof.stop())
end
assert(memprof.start('/dev/full'))
for i = 1, 100000 do local _ = { i } end
assert(not memprof.stop())
assert(memprof.start(%q))
local u = { 'left running at close' }
os.exit(0, true)
]], path, path))
    if not out then return end
    assert.equal(0, code, out)
    assert.matches('ERROR SUMMARY:', out)
    assert.same({}, our_records(out))
    read_clean(path)
    os.remove(path)
  end)
end)

describe('the max_bytes option', function()
  local EFBIG = 27

  after_each(function()
    if memprof.is_running() then memprof.stop() end
  end)

  -- The allocations at the line of `allocate` below.
  local function allocations(events)
    local n = 0
    for _, ev in ipairs(events) do
      if ev.name == '@capped.lua:2' and ev.kind == 'alloc' then n = n + 1 end
    end
    return n
  end

  -- Allocates `count` tables at line 2 of a chunk of its own.
  local allocate = h.chunk('local keep = {}\nfor i = 1, ... do keep[i] = {} ' ..
    'end\nreturn #keep', '@capped.lua')
  jit.off(allocate)

  for _, case in ipairs({
    { 'the default format, in one buffer', nil, 100000, 30000 },
    { 'stacks and time marks, over several buffers',
      { stack_depth = 8, timestamps = true }, 3000000, 400000 },
  }) do
    it('stops recording at the cap, ' .. case[1], function()
      local path = h.tmpname()
      local options = { max_bytes = case[3] }
      for k, v in pairs(case[2] or {}) do options[k] = v end
      assert.is_true(memprof.start(path, options))
      -- The program goes on past the cap.
      assert.equal(case[4], allocate(case[4]))
      assert.is_true(memprof.is_running())
      assert.same({ nil, path .. ': profile reached max_bytes (' .. case[3] ..
        ')', EFBIG }, { memprof.stop() })
      -- The file ends with the last whole event before the cap, then the
      -- epilogue: no event is larger than 200 bytes here.
      local size = #C.read_file(path)
      assert.is_true(size <= case[3] and size > case[3] - 200,
        'size ' .. size)
      local at = allocations(read_clean(path))
      assert.is_true(at > 0 and at < case[4], at .. ' events')
      os.remove(path)
    end)
  end

  it('changes nothing when the profile stays below it', function()
    local path = h.tmpname()
    assert.is_true(memprof.start(path, { max_bytes = 1000000 }))
    assert.equal(100, allocate(100))
    assert.is_true(memprof.stop())
    assert.equal(101, allocations(read_clean(path)))
    os.remove(path)
  end)

  it('refuses values that are not a whole number from 64 to 2^53', function()
    for _, value in ipairs({ 63, 2 ^ 53 + 2, 1000.5, 'x', -1 }) do
      local ok, message, err = memprof.start(h.tmpname(), { max_bytes = value })
      assert.is_nil(ok)
      assert.equal("option 'max_bytes' must be an integer from 64 to 2^53, " ..
        'got ' .. (type(value) == 'number' and tostring(value) or 'string'),
        message)
      assert.equal(EINVAL, err)
    end
  end)
end)
