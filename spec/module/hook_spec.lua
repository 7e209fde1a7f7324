-- Attribution of every allocator call: which Lua line, C function,
-- built-in, trace or VM-internal activity caused it.
local h = require('helpers.profile')
local memprof = require('memprof')

local info = memprof.info()
local STRING_HEADER = info.offsets.str_size

-- The size of a string's block: the header, then the characters and a
-- terminator, which upstream LuaJIT rounds up to 4 bytes and Tarantool's
-- fork (built with smart strings) does not. Which rule applies is seen
-- from a string.rep called through pcall, reported as the built-in.
local STRING_ROUNDED
local function string_block(len)
  if STRING_ROUNDED then
    return STRING_HEADER + len + 4 - (len + 4) % 4
  end
  return STRING_HEADER + len + 1
end

local function learn_string_rounding()
  local events = h.profile(function() pcall(string.rep, 'r', 17) end)
  local at = h.at(events, 'string.rep', 'alloc')
  assert(#at == 1, 'one string allocated by string.rep')
  STRING_ROUNDED = at[1].nsize == STRING_HEADER + 20
  assert(STRING_ROUNDED or at[1].nsize == STRING_HEADER + 18,
    'a string of 17 characters takes ' .. at[1].nsize .. ' bytes')
end

-- The keys of a set, sorted.
local function sorted_names(set)
  local names = {}
  for name in pairs(set) do
    names[#names + 1] = name
  end
  table.sort(names)
  return names
end

-- Size of an empty table's block, measured once.
local function empty_table_size()
  local events = h.profile(h.chunk('local t = {}\nreturn t', '@empty.lua'))
  local at = h.at(events, '@empty.lua:1', 'alloc')
  assert(#at == 1, 'one allocation for {}')
  return at[1].nsize
end

describe('allocator hook', function()
  local TABLE

  setup(function()
    jit.off()
    jit.flush()
    TABLE = empty_table_size()
    learn_string_rounding()
  end)

  teardown(function()
    jit.on()
  end)

  it('charges string.rep to the calling line, one event per string', function()
    local payload = h.chunk([[
local s
for i = 1, 20 do s = string.rep('a', 100 + i) end
return s
]], '@strings.lua')
    collectgarbage()
    local _ = string.rep('b', 4096) -- The temporary buffer is big enough.
    local events = h.profile(payload)
    local at = h.at(events, '@strings.lua:2')
    assert.equal(20, #at)
    local sizes = h.sizes(at)
    for i = 1, 20 do
      assert.equal('alloc', at[i].kind)
      assert.equal(string_block(100 + i), sizes[i])
    end
    assert.equal(0, #h.at(events, '@strings.lua:1'))
  end)

  it('charges a table and its separate array part to the same line', function()
    local payload = h.chunk([[
local e = {}
local t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
return e, t
]], '@tables.lua')
    local events = h.profile(payload)
    assert.same({ TABLE }, h.sizes(h.at(events, '@tables.lua:1', 'alloc')))
    -- Over 16 slots, the array part is a block of its own: the table and
    -- its array part are two allocations at the same line.
    local at = h.at(events, '@tables.lua:2')
    assert.equal(2, #at)
    assert.equal('alloc', at[1].kind)
    assert.equal('alloc', at[2].kind)
    assert.equal(TABLE, at[1].nsize)
    assert.equal(0, at[2].nsize % 8)
    assert.is_true(at[2].nsize >= 21 * 8)
  end)

  it('accounts for every byte: net of the stream equals the heap change',
    function()
    local payload = h.chunk([[
local keep = {}
for i = 1, 3000 do
  keep[i % 100 + 1] = { tostring(i), function() return i end }
  if i % 1000 == 0 then collectgarbage() end
end
return keep
]], '@mixed.lua')
    local events, _, before, after = h.profile(payload)
    local frees = #h.at(events, 'INTERNAL', 'free')
    assert.is_true(frees > 1000, 'the collector freed blocks: ' .. frees)
    assert.equal((after - before) * 1024, h.net(events))
  end)

  it('records sizes and addresses exactly on each side of every LEB128 ' ..
    'length, allocated and freed', function()
    -- Block sizes around 2^7, 2^14 and 2^21: one, two, three and four
    -- bytes of LEB128 (the hook writes addresses and sizes as words).
    local lens = {}
    for _, block in ipairs({ 0x80, 0x4000, 0x200000 }) do
      for d = -3, 3 do lens[#lens + 1] = block - STRING_HEADER - 1 + d end
    end
    local payload = h.chunk([[
local lens, keep = ..., {}
for i = 1, #lens do
  keep[i] = string.rep('z', lens[i])
end
keep = nil
collectgarbage()
collectgarbage()
]], '@leb.lua')
    collectgarbage()
    local events = h.profile(payload, lens)
    local allocated, count = {}, {}
    for _, ev in ipairs(h.at(events, '@leb.lua:3', 'alloc')) do
      allocated[ev.naddr] = ev.nsize
      count[ev.nsize] = (count[ev.nsize] or 0) + 1
    end
    for _, len in ipairs(lens) do
      local size = string_block(len)
      assert.is_true((count[size] or 0) > 0, 'a block of ' .. size .. ' bytes')
      count[size] = count[size] - 1
    end
    -- Each string's free names its block's address and size as allocated.
    local wanted = {}
    for _, len in ipairs(lens) do wanted[string_block(len)] = true end
    local freed = 0
    for _, ev in ipairs(h.at(events, 'INTERNAL', 'free')) do
      if allocated[ev.oaddr] and wanted[ev.osize] then
        assert.equal(allocated[ev.oaddr], ev.osize)
        freed = freed + 1
      end
    end
    assert.equal(#lens, freed)
  end)

  it('charges allocations in a coroutine to the coroutine lines', function()
    local payload = h.chunk([[
local co = coroutine.create(function()
  local t = {}
  coroutine.yield(t)
  local u = {}
  return u
end)
local _, a = coroutine.resume(co)
local _, b = coroutine.resume(co)
return a, b
]], '@coro.lua')
    local events = h.profile(payload)
    assert.same({ TABLE }, h.sizes(h.at(events, '@coro.lua:2', 'alloc')))
    assert.same({ TABLE }, h.sizes(h.at(events, '@coro.lua:4', 'alloc')))
    assert.equal(0, #h.at(events, '@coro.lua:3'))
    assert.equal(0, #h.at(events, '@coro.lua:7'))
  end)

  it('survives a 20000-deep recursion: stack growth is one realloc chain',
    function()
    local payload = h.chunk([[
local function rec(n) if n == 0 then return {} end return (rec(n - 1)) end
return rec(20000)
]], '@deep.lua')
    local events = h.profile(payload)
    local stack = {}
    for _, ev in ipairs(events) do
      if ev.kind == 'realloc' and ev.source == 'internal' then
        stack[#stack + 1] = ev
      end
    end
    assert.is_true(#stack >= 5, 'the stack grew ' .. #stack .. ' times')
    for i = 2, #stack do
      assert.equal(stack[i - 1].naddr, stack[i].oaddr)
      assert.equal(stack[i - 1].nsize, stack[i].osize)
      assert.is_true(stack[i].nsize > stack[i].osize)
    end
    assert.is_true(stack[#stack].nsize >= 20000 * 2 * 8)
    -- The closure and its upvalue (main chunk), the innermost table (rec).
    assert.equal(3, #h.at(events, '@deep.lua:1', 'alloc'))
  end)

  it('names a chunk loaded while profiling by its chunk name', function()
    local events = h.profile(function()
      local f = loadstring('local t = {}\nlocal u = {1}\nreturn t, u',
        '=loaded while profiling')
      f()
    end)
    assert.same({ TABLE }, h.sizes(h.at(events, '=loaded while profiling:1')))
    assert.equal(1, #h.at(events, '=loaded while profiling:2', 'alloc'))
  end)

  it('finds the line afresh when a new prototype takes a freed one\'s place',
    function()
      -- Both chunks have the same size and code, so one can take the
      -- other's address once it is collected; their table is made at the
      -- same instruction, on line 1 or on line 3.
      local events = h.profile(function()
        for i = 1, 40 do
          local f = loadstring((i % 2 == 0 and '\n\n' or '') ..
            'local t = {} return t', '=same place')
          f()
          f = nil
          collectgarbage()
        end
      end)
      assert.equal(20, #h.at(events, '=same place:1', 'alloc'))
      assert.equal(20, #h.at(events, '=same place:3', 'alloc'))
    end)

  it('finds a built-in\'s calling line afresh when a new prototype takes ' ..
    'a freed one\'s place', function()
      -- As above, but the string is made by a built-in, charged to the
      -- line of its call instruction, which both chunks have at the same
      -- offset of their bytecode (the hook keeps the last one's line).
      -- Loaded and collected through pcall, so that no other built-in is
      -- charged to a Lua line in between.
      local _ = string.rep('b', 4096) -- The temporary buffer is big enough.
      local events = h.profile(function()
        for i = 1, 40 do
          local _, f = pcall(loadstring, (i % 2 == 0 and '\n\n' or '') ..
            'local s = string.rep("m", 61) return s', '=same call')
          f()
          f = nil
          pcall(collectgarbage)
        end
      end)
      assert.same(h.sizes(h.at(events, '=same call:1', 'alloc')),
        (function()
          local sizes = {}
          for i = 1, 20 do sizes[i] = string_block(61) end
          return sizes
        end)())
      assert.equal(20, #h.at(events, '=same call:3', 'alloc'))
    end)

  it('names a C function of a C module', function()
    local cmod = require('test_cmodule')
    local events = h.profile(function() cmod.make_tables(5) end)
    local at = h.at(events, 'test_cmodule_make_tables')
    assert.equal(6, #at)
    for _, ev in ipairs(at) do
      assert.equal('alloc', ev.kind)
      assert.equal('c', ev.source)
    end
    assert.same({ TABLE, TABLE, TABLE, TABLE, TABLE },
      { at[2].nsize, at[3].nsize, at[4].nsize, at[5].nsize, at[6].nsize })
  end)

  it('charges Lua code called from C to its own lines', function()
    local cmod = require('test_cmodule')
    local payload = h.chunk('local t = {}\nreturn t', '@called from C.lua')
    local events = h.profile(function() cmod.call(payload) end)
    assert.same({ TABLE }, h.sizes(h.at(events, '@called from C.lua:1')))
  end)

  it('names a built-in that was not called from Lua', function()
    local events = h.profile(function() pcall(string.rep, 'x', 300) end)
    local at = h.at(events, 'string.rep', 'alloc')
    assert.same({ string_block(300) }, h.sizes(at))
    assert.equal('c', at[1].source)
  end)

  it('tells apart built-ins written in C, reported on their own', function()
    -- Both share the VM entry of C built-ins: only their ids differ.
    local events = h.profile(function()
      pcall(string.format, 'told apart %d', 1234567)
      pcall(table.concat, { 'told apart ', 'concatenated' })
    end)
    assert.equal(1, #h.at(events, 'string.format', 'alloc'))
    assert.equal(1, #h.at(events, 'table.concat', 'alloc'))
  end)

  it('reports frees made by the collector as internal', function()
    local payload = h.chunk([[
local list = {}
for i = 1, 50 do list[i] = {} end
return list
]], '@garbage.lua')
    -- (The suite's garbage first, or the profile has a free for each of
    -- its blocks: half a GB of event copies read back.)
    collectgarbage()
    local events = h.profile(function()
      local list = payload()
      list = nil
      collectgarbage()
      return list
    end)
    -- Only frees after the table's allocation count: the collector may
    -- free older objects at those addresses before the loop reuses them.
    local born, freed = {}, 0
    for _, ev in ipairs(events) do
      if ev.kind == 'alloc' and ev.nsize == TABLE and
        ev.name == '@garbage.lua:2' then
        born[ev.naddr] = true
      elseif ev.kind == 'free' and born[ev.oaddr] then
        assert.equal('internal', ev.source)
        born[ev.oaddr] = nil
        freed = freed + 1
      end
    end
    assert.equal(50, freed)
  end)

  -- 40 strings of 777 characters, garbage before the profile starts.
  local function make_garbage()
    local list = {}
    for i = 1, 40 do list[i] = ('g'):rep(770) .. ('%07d'):format(i) end
    return #list
  end

  local function collector_frees(options)
    collectgarbage()
    make_garbage()
    local events = h.profile_with(options, collectgarbage)
    local frees, names = 0, {}
    for _, ev in ipairs(events) do
      if ev.kind == 'free' and ev.osize == string_block(777) then
        frees = frees + 1
        names[ev.name] = true
      end
    end
    return frees, sorted_names(names)
  end

  it('names the collector in the extended format: its frees are ' ..
    'INTERNAL (garbage collector)', function()
      local frees, names = collector_frees({ timestamps = true })
      assert.equal(40, frees)
      assert.are.same({ 'INTERNAL (garbage collector)' }, names)
    end)

  it('writes no kind of internal event in Tarantool\'s format', function()
    local frees, names = collector_frees(nil)
    assert.equal(40, frees)
    assert.are.same({ 'INTERNAL' }, names)
  end)

  it('names the resize of the running coroutine\'s stack INTERNAL ' ..
    '(interpreter) in the extended format', function()
      local payload = h.chunk([[
local function deep(n) if n == 0 then return 0 end return 1 + deep(n - 1) end
return deep(20000)
]], '@deep.lua')
      local events = h.profile_with({ timestamps = true }, function()
        return coroutine.wrap(payload)()
      end)
      local grown = 0
      for _, ev in ipairs(events) do
        if ev.name == 'INTERNAL (interpreter)' then
          assert.equal('realloc', ev.kind)
          assert.is_true(ev.nsize > ev.osize)
          grown = grown + 1
        end
      end
      assert.is_true(grown >= 5, grown .. ' stack resizes')
    end)
end)

-- A loop's hot counter is shared with the other loops whose bytecode
-- hashes to the same slot, and jit.flush() leaves the counters as they
-- were: a loop run before, in this test or another, can leave it near
-- its threshold (a loop meant to run ten times in the interpreter is
-- then compiled) or set high by a penalty (a loop whose recording
-- aborted; the next hot loop is then not compiled). So each run starts
-- with fresh counters: the VM resets them all when the JIT is turned
-- on. A loop can still be compiled late (once, under qemu, the loop of
-- the sunk objects' spec after about 600 of its 1000 rounds), so
-- make_events() runs again, three times at most, until compiled(events)
-- says the loop was compiled.
local function with_compiled_loop(make_events, compiled)
  local events
  for _ = 1, 3 do
    jit.off()
    jit.on()
    events = make_events()
    if compiled(events) then break end
  end
  return events
end

-- arm64's compiled code does not store the running trace's number (its VM
-- stores 0 instead, docs/builds.md): allocations there are charged to
-- trace 0, named as such; trace exits still name the trace they leave.
local NUMBERLESS = jit.arch == 'arm64'
local UNKNOWN_TRACE = 'TRACE (compiled code, trace not known)'

describe('allocator hook with the JIT compiler on', function()
  local traces, on_trace_event

  setup(function()
    jit.on()
    jit.flush()
    traces = {}
    local jutil = require('jit.util')
    on_trace_event = function(what, tr, func, pc)
      if what == 'start' then
        local fi = jutil.funcinfo(func, pc)
        traces[tr] = fi.source .. ':' .. fi.currentline
      end
    end
    jit.attach(on_trace_event, 'trace')
  end)

  teardown(function()
    jit.attach(on_trace_event) -- Detaches it.
    jit.flush()
  end)

  it('charges allocations of compiled code to the trace and its start line',
    function()
    local payload = h.chunk([[
local t = {}
for i = 1, 2000 do t[i] = {i, i} end
return t
]], '@jit.lua')
    -- (The trace's start, not its lines: spec/module/trace_lines_spec.lua.)
    local events = h.profile_with({ trace_lines = false }, payload)
    local at_line = h.at(events, '@jit.lua:2', 'alloc')
    local size = at_line[1].nsize -- The first {1, 1}.
    local interpreted, compiled = 0, 0
    for _, ev in ipairs(events) do
      if ev.kind == 'alloc' and ev.nsize == size then
        assert.is_not.equal('internal', ev.source)
        if ev.name == '@jit.lua:2' then
          interpreted = interpreted + 1
        elseif ev.source == 'trace' and NUMBERLESS then
          assert.same({ 0, UNKNOWN_TRACE }, { ev.traceno, ev.name })
          compiled = compiled + 1
        elseif ev.source == 'trace' then
          assert.equal(traces[ev.traceno], '@jit.lua:2')
          assert.equal(string.format('TRACE [%d] started at @jit.lua:2',
            ev.traceno), ev.name)
          compiled = compiled + 1
        end
      end
    end
    assert.is_true(compiled > 1000, compiled .. ' allocations on trace')
    assert.equal(2000, interpreted + compiled)
  end)

  it('charges objects a trace had sunk, made real at its exits, to it',
    function()
    local payload = h.chunk([[
local keep = {}
for i = 1, 1000 do local t = {i, i} if i % 10 == 0 then keep[#keep + 1] = t end end
return keep
]], '@sink.lua')
    local kept
    local function run()
      jit.flush()
      return h.profile_with({ trace_lines = false },
        function() kept = payload() end)
    end
    -- How many kept tables were made on trace; every kept table's
    -- allocation is recorded, at the loop's line or on its trace.
    local function on_trace(events)
      local born, count = {}, 0
      for _, ev in ipairs(events) do
        if ev.kind == 'alloc' then born[ev.naddr] = ev end
      end
      for _, t in ipairs(kept) do
        local addr = tonumber(tostring(t):match('0x%x+'))
        local ev = born[addr]
        assert.is_table(ev, 'the allocation of a kept table is recorded')
        if ev.source == 'trace' and NUMBERLESS and ev.traceno == 0 then
          assert.equal(UNKNOWN_TRACE, ev.name) -- Made on trace, not sunk.
          count = count + 1
        elseif ev.source == 'trace' then
          assert.equal(traces[ev.traceno], '@sink.lua:2')
          count = count + 1
        else
          assert.equal('@sink.lua:2', ev.name)
        end
      end
      return count
    end
    -- The loop is compiled after about 56 of its 1000 rounds.
    local events = with_compiled_loop(run, function(evs)
      return on_trace(evs) >= 80
    end)
    assert.equal(100, #kept)
    local count = on_trace(events)
    assert.is_true(count >= 80, count .. ' kept tables made on trace')
  end)

  it('describes a trace number again after jit.flush()', function()
    if NUMBERLESS then
      pending('compiled code has no trace number on arm64')
      return
    end
    local function flush_between()
      local a = h.chunk('local t = {}\nfor i = 1, 2000 do t[i] = {i} end\n',
        '@flush_a.lua')
      local b = h.chunk(
        'local t = {}\nfor i = 1, 2000 do t[i] = {i, i} end\n', '@flush_b.lua')
      return h.profile_with({ trace_lines = false }, function()
        jit.flush()
        a()
        jit.flush()
        b()
      end)
    end
    -- A loop left to the interpreter makes all its 2000 tables at line 2;
    -- both must have been compiled.
    local events = with_compiled_loop(flush_between, function(evs)
      return #h.at(evs, '@flush_a.lua:2', 'alloc') < 2000 and
        #h.at(evs, '@flush_b.lua:2', 'alloc') < 2000
    end)
    local number = {}
    for _, ev in ipairs(events) do
      local n, where = ev.name:match('^TRACE %[(%d+)%] started at (.*)$')
      if n then
        number[where] = number[where] or tonumber(n)
        assert.equal(number[where], tonumber(n))
      end
    end
    assert.is_number(number['@flush_a.lua:2'])
    assert.equal(number['@flush_a.lua:2'], number['@flush_b.lua:2'])
  end)

  -- The loop is compiled twice (jit.flush() between two calls): two
  -- traces that start at one line, as in a long program whose traces
  -- are flushed when the machine code area is full.
  it('reports the traces of a hot loop as one row, under its callers',
    function()
    if NUMBERLESS then
      pending('compiled code has no trace number on arm64')
      return
    end
    local reader = require('memprof.read.stream')
    local analyze = require('memprof.analysis.analyze')
    local text = require('memprof.report.text')
    local payload = h.chunk([[
local function fill(t, n)
  for i = 1, n do t[#t + 1] = { i } end
end
local t = {}
fill(t, 10)
fill(t, 3000)
jit.flush()
fill(t, 3000)
return t
]], '@hot.lua')
    local path = h.tmpname()
    local function run()
      jit.flush()
      assert(memprof.start(path, { stack_depth = 8, trace_lines = false }))
      local ok, err = pcall(payload)
      assert(memprof.stop())
      assert(ok, err)
      return h.read(path)
    end
    -- What each trace did, read with split_traces (a site per trace).
    local function on_traces(evs)
      local sites, count, bytes, traced = {}, 0, 0, 0
      for _, ev in ipairs(evs) do
        local in_loop = ev.name:find('^TRACE %[%d+%] started at @hot%.lua:2$')
        if in_loop and ev.kind == 'alloc' then
          if not sites[ev.site] then traced = traced + 1 end
          sites[ev.site] = true
          count, bytes = count + 1, bytes + ev.nsize
        end
      end
      return count, bytes, traced
    end
    -- A recording that aborts (a collection step while recording) leaves
    -- more of the loop to the interpreter: such a run is tried again.
    local events = with_compiled_loop(run, function(evs)
      local count, _, traced = on_traces(evs)
      return count > 4000 and traced >= 2
    end)
    local count, bytes, traced = on_traces(events)
    assert.is_true(traced >= 2, traced .. ' traces')
    assert.is_true(count > 4000, count .. ' allocations on traces')
    -- Merged: one row, with the number of traces and their sums.
    local result = analyze.run(reader.open(path))
    local merged = string.format('TRACE started at @hot.lua:2 (%s): %d ' ..
      'events\t+%sB\t-0B\n', traced == 1 and '1 trace' or traced ..
      ' traces', count, require('memprof.words').commas(bytes))
    local report = text.render(result, {})
    assert.truthy(report:find('\n' .. merged, 1, true), report)
    assert.is_nil(report:find('TRACE [', 1, true))
    -- Their events carry a stack: the trace, then fill's caller, line 6
    -- or line 8. Never line 5: with fresh hot counters, ten rounds do not
    -- make the loop hot.
    local stream, callers = reader.open(path), {}
    for ev in stream:each() do
      if ev.site.source == 'trace' and ev.kind == 'alloc' and
          ev.site.name == 'TRACE started at @hot.lua:2' then
        assert.equal(ev.site, ev.stack.frames[1])
        assert.is_true(ev.stack.inferred)
        local caller = ev.stack.frames[2].name
        callers[caller] = (callers[caller] or 0) + 1
      end
    end
    os.remove(path)
    assert.are.same({ '@hot.lua:6', '@hot.lua:8' }, sorted_names(callers))
    assert.equal(count, callers['@hot.lua:6'] + callers['@hot.lua:8'])
  end)

  it('reports what the trace compiler allocates as internal', function()
    local function compile()
      local payload = h.chunk(
        'local x = 0\nfor i = 1, 1000 do x = x + i end\nreturn x',
        '@compile.lua')
      return h.profile(function()
        jit.flush()
        payload()
      end)
    end
    jit.attach(on_trace_event) -- Its own allocations would be Lua code.
    local events = with_compiled_loop(compile, function(evs)
      return #evs > 0
    end)
    jit.attach(on_trace_event, 'trace')
    assert.is_true(#events > 0, 'compiling a trace allocates')
    for _, ev in ipairs(events) do
      assert.equal('internal', ev.source)
    end
  end)

  -- The events of a hot loop run under jit.on or jit.off, in the
  -- extended format, by place name.
  local function loop_events(on)
    local payload = h.chunk(
      'local x = 0\nfor i = 1, 1000 do x = x + i end\nreturn x',
      '@compile.lua')
    -- With the JIT off before the profile starts, nothing can be compiled
    -- or aborted in it.
    if not on then
      jit.flush()
      jit.off()
    end
    local events = h.profile_with({ timestamps = true }, function()
      if on then jit.flush() end
      payload()
    end)
    jit.on()
    local by_name = {}
    for _, ev in ipairs(events) do
      by_name[ev.name] = (by_name[ev.name] or 0) + 1
    end
    return events, by_name
  end

  it('names what the trace compiler allocates INTERNAL (JIT compiler) in ' ..
    'the extended format', function()
      jit.attach(on_trace_event) -- Its own allocations would be Lua code.
      local compiled = with_compiled_loop(function()
        return select(2, loop_events(true))
      end, function(by_name)
        return by_name['TRACE started at @compile.lua:2'] ~= nil or
          by_name['INTERNAL (JIT compiler)'] ~= nil
      end)
      local interpreted = select(2, loop_events(false))
      jit.attach(on_trace_event, 'trace')
      assert.is_true((compiled['INTERNAL (JIT compiler)'] or 0) > 0,
        'compiling a trace allocates')
      assert.is_nil(interpreted['INTERNAL (JIT compiler)'])
    end)
end)

describe('allocator hook in coroutines, finalizers and errors', function()
  local TABLE

  setup(function()
    jit.off()
    TABLE = empty_table_size()
  end)

  teardown(function()
    jit.on()
  end)

  it('survives deep recursion inside a coroutine', function()
    local payload = h.chunk([[
local function rec(n) if n == 0 then return {} end return (rec(n - 1)) end
return coroutine.wrap(function() return rec(10000) end)()
]], '@codeep.lua')
    local events = h.profile(payload)
    local grew = 0
    for _, ev in ipairs(events) do
      if ev.kind == 'realloc' and ev.source == 'internal' then
        grew = grew + 1
      end
    end
    assert.is_true(grew >= 4, 'the coroutine stack grew ' .. grew .. ' times')
    local at = h.at(events, '@codeep.lua:1', 'alloc')
    assert.equal(TABLE, at[#at].nsize) -- The innermost table, last.
  end)

  it('charges allocations in a __gc finalizer to the finalizer', function()
    local payload = h.chunk([[
local function finalizer() local t = {} end
for i = 1, 10 do local u = newproxy(true) getmetatable(u).__gc = finalizer end
collectgarbage()
]], '@gc.lua')
    local events = h.profile(payload)
    local tables = 0
    for _, ev in ipairs(h.at(events, '@gc.lua:1', 'alloc')) do
      if ev.nsize == TABLE then tables = tables + 1 end
    end
    assert.equal(10, tables) -- One per finalizer run.
    assert.equal(11, #h.at(events, '@gc.lua:1', 'alloc')) -- And the closure.
    -- The collector frees the proxies themselves (the metatables' growth,
    -- in Lua code, frees old parts too).
    for _, ev in ipairs(events) do
      if ev.kind == 'free' and ev.source ~= 'internal' then
        assert.equal('@gc.lua:2', ev.name)
      end
    end
  end)

  it('keeps attribution right after errors through pcall and coroutines',
    function()
    local payload = h.chunk([[
local ok = pcall(function() local t = {} error('raised in pcall') end)
local after_pcall = {}
local co = coroutine.create(function() local u = {} error('raised in a coroutine') end)
local resumed = coroutine.resume(co)
local after_resume = {}
return ok, resumed, after_pcall, after_resume
]], '@errors.lua')
    local events = h.profile(payload)
    assert.same({ TABLE }, h.sizes(h.at(events, '@errors.lua:2', 'alloc')))
    assert.same({ TABLE }, h.sizes(h.at(events, '@errors.lua:5', 'alloc')))
    -- The error messages are made by error(), charged to the raising line.
    local msg1 = #h.at(events, '@errors.lua:1', 'alloc')
    local msg3 = #h.at(events, '@errors.lua:3', 'alloc')
    assert.is_true(msg1 >= 3, msg1 .. ' allocations at line 1')
    assert.is_true(msg3 >= 3, msg3 .. ' allocations at line 3')
    assert.equal(0, #h.at(events, 'INTERNAL', 'alloc'))
  end)
end)

-- The notes of the extended format: the heap when the profile starts, and
-- a collection of garbage at stop. The collector is stopped, so that only
-- the program's own calls free anything.
describe('heap at the start and collection at stop', function()
  local analyze = require('memprof.analysis.analyze')
  local reader = require('memprof.read.stream')
  local views = require('memprof.report.views')

  setup(function()
    jit.off()
    jit.flush()
  end)

  teardown(function()
    collectgarbage('restart')
    jit.on()
  end)

  local function heap_now()
    return collectgarbage('count') * 1024
  end

  local function analysis(path)
    local result = analyze.run(reader.open(path), { views = { peak = true,
      leaks = true } })
    os.remove(path)
    return result
  end

  it('gives the peak as the VM\'s whole heap, heap at the start included',
    function()
      collectgarbage()
      collectgarbage('stop')
      local kept = {}
      for i = 1, 100 do kept[i] = {} end -- Allocated before the profile.
      local path = h.tmpname()
      assert(memprof.start(path, { timestamps = true }))
      local y = string.rep('y', 100000)
      local at_peak = heap_now()
      y = nil
      collectgarbage()
      collectgarbage('stop')
      local z = string.rep('z', 50000)
      local at_end = heap_now()
      assert(memprof.stop())
      collectgarbage('restart')
      local result = analysis(path)
      assert.is_true(#kept == 100 and y == nil and #z == 50000)
      assert.equal(at_peak, result.peak.heap_bytes)
      assert.equal(at_end, result.stream.heap_at_start + result.heap.total)
      assert.equal(result.peak.heap_bytes,
        result.stream.heap_at_start + result.peak.bytes)
      local text = views.render(result, { views = { peak = true } })
      local commas = require('memprof.words').commas
      assert.truthy(text:find(('PEAK (by bytes): peak heap %sB after ' ..
        'event %d '):format(
        commas(at_peak), result.peak.event), 1, true), text)
      assert.truthy(text:find((', of which %sB allocated before the ' ..
        'profile. Held by:\n'):format(commas(result.peak.before.live_bytes)),
        1, true), text)
    end)

  -- 10 strings of 777 characters kept, 30 dropped, all made in the
  -- profile; the blocks of that size live at its end.
  local function strings_live_at_end(options)
    collectgarbage()
    collectgarbage('stop')
    local path = h.tmpname()
    assert(memprof.start(path, options))
    local kept = {}
    for i = 1, 10 do kept[i] = ('k'):rep(770) .. ('%07d'):format(i) end
    for i = 1, 30 do kept[11] = ('d'):rep(770) .. ('%07d'):format(i) end
    kept[11] = nil
    assert(memprof.stop())
    local after = heap_now()
    collectgarbage('restart')
    local c_events = 0
    for _, ev in ipairs(h.read(path)) do
      if ev.source == 'c' then c_events = c_events + 1 end
    end
    local result = analysis(path)
    local live = 0
    result.blocks:each_live_block(function(_, size)
      if size == string_block(777) then live = live + 1 end
    end)
    return live, result, after, c_events
  end

  it('collects garbage at stop with collect_at_stop, and notes it',
    function()
      local live, result, after, c_events = strings_live_at_end({
        collect_at_stop = true })
      assert.equal(10, live)
      -- Nothing of stop itself: the collection runs in a function made when
      -- the module was loaded, and no C code of the program allocates.
      assert.equal(0, c_events)
      assert.equal(100, result.stream.version)
      assert.is_true(result.stream.collected_at_stop)
      assert.equal(after, result.stream.heap_after_collection)
      assert.is_true(result.leaks.collected_at_stop)
      local text = views.render(result, { views = { leaks = true } })
      assert.truthy(text:find('\nGarbage was collected at stop: these ' ..
        'blocks were reachable.\n', 1, true), text)
    end)

  it('says when garbage was not collected at stop', function()
    local live, result = strings_live_at_end({ timestamps = true })
    assert.equal(40, live)
    assert.is_false(result.stream.collected_at_stop)
    assert.is_nil(result.stream.heap_after_collection)
    local text = views.render(result, { views = { leaks = true } })
    assert.truthy(text:find('\nThe profile ended without a collection at ' ..
      'stop (only memprof.stop() with collect_at_stop = true collects; a ' ..
      'profile completed at lua_close or exit does not): some of these ' ..
      'blocks may be unreachable.\n', 1, true), text)
  end)
end)
