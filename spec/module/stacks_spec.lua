-- The extended format as the module writes it: call stacks, time marks,
-- and the options that ask for them.
local C = require('helpers.command')
local h = require('helpers.profile')
local memprof = require('memprof')
local reader = require('memprof.read.stream')

local EINVAL = 22

-- Profiles fn with options; returns the events (each with its stack as a
-- list of frame names, innermost first) and the stream.
local function profile(options, fn)
  local path = h.tmpname()
  assert(memprof.start(path, options))
  fn()
  assert(memprof.stop())
  local stream = reader.open(path)
  local events = {}
  while true do
    local ev = stream:next()
    if not ev then break end
    local frames
    if ev.stack then
      frames = {}
      for i, site in ipairs(ev.stack.frames) do frames[i] = site.name end
    end
    events[#events + 1] = { kind = ev.kind, name = ev.site.name,
      nsize = ev.nsize, stack = frames and table.concat(frames, ' < '),
      stack_id = ev.stack and ev.stack.id, time = ev.time }
  end
  os.remove(path)
  return events, stream
end

-- Counts of events at `name` by stack, leaving out the payload's main
-- chunk creating its functions (its stack goes on into this spec).
local function by_stack(events, name)
  local counts = {}
  for _, ev in ipairs(events) do
    if ev.name == name and ev.kind == 'alloc' and
      not (ev.stack or ''):find('stacks_spec.lua', 1, true) then
      counts[ev.stack or '-'] = (counts[ev.stack or '-'] or 0) + 1
    end
  end
  return counts
end

local function version_byte(options)
  local path = h.tmpname()
  assert(memprof.start(path, options))
  assert(memprof.stop())
  local f = assert(io.open(path, 'rb'))
  local data = f:read('*a')
  f:close()
  os.remove(path)
  return data:byte(12)
end

describe('options of memprof.start', function()
  it('write Tarantool\'s format without options, version 100 with them',
    function()
    assert.equal(3, version_byte(nil))
    assert.equal(3, version_byte({}))
    assert.equal(100, version_byte({ stack_depth = 4 }))
    assert.equal(100, version_byte({ timestamps = true }))
  end)

  it('are refused when unknown or of the wrong type, and nothing starts',
    function()
    local path = h.tmpname()
    for _, case in ipairs({
      { { stack = 4 }, "unknown option 'stack'" },
      { { stack_depth = 0 },
        "option 'stack_depth' must be an integer from 1 to 64, got 0" },
      { { stack_depth = 65 },
        "option 'stack_depth' must be an integer from 1 to 64, got 65" },
      { { stack_depth = 2.5 },
        "option 'stack_depth' must be an integer from 1 to 64, got 2.5" },
      { { stack_depth = '8' },
        "option 'stack_depth' must be an integer from 1 to 64, got string" },
      { { timestamps = 'yes' },
        "option 'timestamps' must be a boolean, got string" },
      { { true }, 'option names must be strings, got number' },
    }) do
      assert.same({ nil, case[2], EINVAL }, { memprof.start(path, case[1]) })
      assert.is_false(memprof.is_running())
    end
    local f = io.open(path, 'rb')
    assert.is_nil(f)
  end)
end)

describe('call stacks', function()
  setup(function() jit.off() end)
  teardown(function() jit.on() end)

  it('tell apart three callers of one helper', function()
    local payload = h.chunk([[
local function helper() local t = {} return t end
local function a() local r = helper() return r end
local function b() local r = helper() return r end
local function c() local r = helper() return r end
for i = 1, 10 do a() end
for i = 1, 20 do b() end
for i = 1, 30 do c() end
]], '@callers.lua')
    local events = profile({ stack_depth = 3 }, payload)
    assert.same({
      ['@callers.lua:1 < @callers.lua:2 < @callers.lua:5'] = 10,
      ['@callers.lua:1 < @callers.lua:3 < @callers.lua:6'] = 20,
      ['@callers.lua:1 < @callers.lua:4 < @callers.lua:7'] = 30,
    }, by_stack(events, '@callers.lua:1'))
  end)

  it('start with the built-in, then the Lua line that called it', function()
    local payload = h.chunk([[
local function helper(n) local s = string.rep('z', n) return s end
for i = 1, 5 do helper(100 + i) end
]], '@builtin.lua')
    local events = profile({ stack_depth = 3 }, payload)
    local counts = by_stack(events, '@builtin.lua:1')
    assert.equal(5, counts['string.rep < @builtin.lua:1 < @builtin.lua:2'])
  end)

  it('name each built-in by its own name', function()
    local payload = h.chunk([[
local function f(i) local s = string.format('built-in names %d', i) local t = table.concat({s, s}) return t end
for i = 1, 3 do f(i * 1000) end
]], '@builtins.lua')
    local events = profile({ stack_depth = 2 }, payload)
    local counts = by_stack(events, '@builtins.lua:1')
    assert.equal(3, counts['string.format < @builtins.lua:1'])
    assert.equal(3, counts['table.concat < @builtins.lua:1'])
  end)

  it('hold at most stack_depth frames, innermost first', function()
    local payload = h.chunk([[
local function rec(n) if n == 0 then return {} end local t = rec(n - 1) return t end
return rec(10)
]], '@deep.lua')
    local events = profile({ stack_depth = 4 }, payload)
    assert.same({ ['@deep.lua:1 < @deep.lua:1 < @deep.lua:1 < @deep.lua:1'] =
      1 }, by_stack(events, '@deep.lua:1'))
  end)

  it('name C functions and list a vararg function once', function()
    local cmod = require('test_cmodule')
    local payload = h.chunk([[
local cmod = ...
local function spread(...) local t = cmod.make_tables(select('#', ...)) return t end
spread(1, 2, 3)
]], '@cfunc.lua')
    local events = profile({ stack_depth = 3 }, function() payload(cmod) end)
    assert.same({ ['test_cmodule_make_tables < @cfunc.lua:2 < @cfunc.lua:3'] =
      4 }, by_stack(events, 'test_cmodule_make_tables'))
  end)

  it('are the coroutine\'s own frames inside a coroutine', function()
    local payload = h.chunk([[
local function inner() local t = {} return t end
local co = coroutine.wrap(function() local x = inner() return x end)
co()
]], '@co.lua')
    local events = profile({ stack_depth = 8 }, payload)
    assert.same({ ['@co.lua:1 < @co.lua:2'] = 1 }, by_stack(events, '@co.lua:1'))
  end)

  it('define a stack seen many times once', function()
    local payload = h.chunk(
      'local function f() local t = {} return t end\nfor i = 1, 1000 do f() end',
      '@repeat.lua')
    local events = profile({ stack_depth = 2 }, payload)
    local first, n = nil, 0
    for _, ev in ipairs(events) do
      if ev.stack == '@repeat.lua:1 < @repeat.lua:2' then
        first = first or ev.stack_id
        assert.equal(first, ev.stack_id)
        n = n + 1
      end
    end
    assert.equal(1000, n)
  end)
end)

-- Loads the sources in turn as @reload.lua, `n` times in all, each time
-- calling the chunk (it returns a table, kept), dropping it and
-- collecting; with stacks. Returns the allocations at each line of
-- @reload.lua ({ ids = { [stack id] = events }, count =, bytes = } by
-- line), and the text of `memprof-report --leaks`.
local function reload(sources, n)
  local path = h.tmpname()
  local keep = {}
  assert(memprof.start(path, { stack_depth = 4 }))
  for i = 1, n do
    local f = loadstring(sources[(i - 1) % #sources + 1], '@reload.lua')
    keep[i] = f()
    f = nil
    collectgarbage()
  end
  assert(memprof.stop())
  local stream = reader.open(path)
  local at = {}
  while true do
    local ev = stream:next()
    if not ev then break end
    local line = ev.site.name:match('^@reload%.lua:(%d+)$')
    if ev.kind == 'alloc' and line then
      local t = at[tonumber(line)] or { ids = {}, count = 0, bytes = 0 }
      at[tonumber(line)] = t
      t.ids[ev.stack.id] = (t.ids[ev.stack.id] or 0) + 1
      t.count, t.bytes = t.count + 1, t.bytes + ev.nsize
    end
  end
  local _, leaks = C.run(C.command('./bin/memprof-report', '--leaks', path))
  os.remove(path)
  return at, leaks
end

-- The keys of a table, sorted.
local function keys(t)
  local list = {}
  for k in pairs(t) do list[#list + 1] = k end
  table.sort(list)
  return list
end

describe('a stack whose code is loaded again', function()
  setup(function() jit.off() end)
  teardown(function() jit.on() end)

  -- The table is made at line 2 (in g, called from line 5), the closure
  -- of g at line 4 (where its definition ends).
  local SOURCE = 'local function g()\n  local t = {}\n  return t\nend\n' ..
    'local t = g()\nreturn t'

  it('keeps its id after its prototypes are collected', function()
    local at, leaks = reload({ SOURCE }, 30)
    assert.same({ 2, 4 }, keys(at))
    assert.same({ 30, 30 }, { at[2].count, at[4].count })
    assert.same({ 1, 1 }, { #keys(at[2].ids), #keys(at[4].ids) })
    -- The --leaks view lists the stack once, with all 30 blocks.
    local _, listed = leaks:gsub('\t\t@reload%.lua:2\n', '')
    assert.equal(1, listed)
    local bytes = require('memprof.words').commas(at[2].bytes)
    assert.truthy(leaks:find(string.format('@reload.lua:2: 30 blocks, %sB\n' ..
      '\t30 blocks, %sB allocated at:\n\t\t@reload.lua:2\n' ..
      '\t\t@reload.lua:5\n', bytes, bytes), 1, true), leaks)
  end)

  it('gets another id where the code there changed', function()
    -- The same code six lines down: its table is made at line 8.
    local at = reload({ SOURCE, string.rep('\n', 6) .. SOURCE }, 30)
    assert.same({ 2, 4, 8, 10 }, keys(at))
    assert.same({ 15, 15 }, { at[2].count, at[8].count })
    local two, eight = keys(at[2].ids), keys(at[8].ids)
    assert.same({ 1, 1 }, { #two, #eight })
    assert.are_not.equal(two[1], eight[1])
  end)
end)

describe('the stack tables', function()
  it('forget all stacks past MEMPROF_MAX_STACKS, and define those seen ' ..
    'again anew', function()
    -- The callee makes a table at each of its lines 2 to 101; the caller
    -- calls it from its lines 2 to 13 that `from` and `to` select: 100
    -- stacks of two frames per caller line.
    local callee, caller = { 'local x' }, { 'local f, from, to = ...' }
    for _ = 1, 100 do callee[#callee + 1] = 'x = {}' end
    for i = 1, 12 do
      caller[#caller + 1] = string.format(
        'if from <= %d and %d <= to then f() end', i, i)
    end
    local path, script = h.tmpname(), h.tmpname('.lua')
    C.write_file(script, string.format([[
jit.off()
local f = loadstring(%q, '@bound_callee.lua')
local run = loadstring(%q, '@bound_caller.lua')
local memprof = require('memprof')
assert(memprof.start(%q, { stack_depth = 2 }))
run(f, 1, 12)  -- 1200 stacks: the first 1000 are forgotten,
run(f, 1, 1)   -- so these 100 are defined again,
run(f, 12, 12) -- and these are known.
assert(memprof.stop())
]], table.concat(callee, '\n'), table.concat(caller, '\n'), path))
    local code, out, err = C.run('MEMPROF_MAX_STACKS=1000 timeout 120 ' ..
      h.lua .. ' ' .. C.quote(script))
    os.remove(script)
    assert.equal(0, code, out .. err)
    local stream = reader.open(path)
    local ids, events = {}, 0
    while true do
      local ev = stream:next()
      if not ev then break end
      if ev.kind == 'alloc' and ev.site.chunkname == '@bound_callee.lua' then
        ids[ev.stack.id] = true
        events = events + 1
      end
    end
    os.remove(path)
    assert.equal(1400, events)
    assert.equal(1300, #keys(ids))
  end)
end)

describe('time marks', function()
  it('put increasing times on events, from 0 to the stop', function()
    -- Under valgrind the writer thread's ticks come when valgrind lets it
    -- run, not every millisecond.
    if os.getenv('MEMPROF_TEST_VALGRIND') then
      pending('time marks follow valgrind\'s scheduling, not the clock')
      return
    end
    local events, stream = profile({ timestamps = true }, function()
      local keep = {}
      for step = 1, 3 do
        local t0 = os.clock()
        while os.clock() - t0 < 0.01 do end -- 10 ms of CPU
        keep[step] = {}
      end
    end)
    assert.is_true(stream.has_time)
    local last, seen = -1, 0
    for _, ev in ipairs(events) do
      assert.is_number(ev.time)
      assert.is_true(ev.time >= last)
      last = ev.time
      seen = seen + 1
    end
    assert.is_true(seen >= 3)
    assert.is_true(last >= 20e6, 'the last event came after ' .. last .. ' ns')
  end)
end)
