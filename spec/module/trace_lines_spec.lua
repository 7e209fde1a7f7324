-- Compiled code by line (the start option trace_lines): an event made
-- while a trace runs is charged to the Lua line (and inlined frames) that
-- made it. Each case is a loop whose allocations escape (nothing is sunk
-- but where a case says so); its bytes by line with the JIT compiler on
-- must equal those of the same code run by the interpreter.
local memprof = require('memprof')
local reader = require('memprof.read.stream')
local h = require('helpers.profile')
local C = require('helpers.command')

local LUA = os.getenv('MEMPROF_TEST_LUA') or 'luajit'
local MEMPROF = os.getenv('PWD') .. '/bin/memprof'

local info = memprof.info({ trace_lines = true })
local tl = info.trace_lines
local CHUNK = '@tl_case.lua'

-- The line of the tag `--@name` in code.
local function line_of(code, name)
  local n = 1
  for text in (code .. '\n'):gmatch('([^\n]*)\n') do
    if text:find('--@' .. name, 1, true) then
      return n
    end
    n = n + 1
  end
  error('no tag ' .. name)
end

-- Reads a profile: bytes allocated by line of the case's chunk, the same
-- for events of compiled code, their traces, and the events.
local function read(path)
  local stream = reader.open(path)
  local r = { bytes = {}, compiled = {}, count = {}, traces = {}, events = {},
    version = stream.version, trace_sites = 0, exit_internal = 0 }
  for ev in stream:each() do
    local site = ev.site
    if ev.kind ~= 'free' and site.source == 'lua' and
        site.chunkname == CHUNK then
      local line, grow = site.line, ev.nsize - ev.osize
      r.bytes[line] = (r.bytes[line] or 0) + grow
      if ev.trace then
        r.compiled[line] = (r.compiled[line] or 0) + grow
        r.count[line] = (r.count[line] or 0) + 1
        r.traces[ev.trace] = true
      end
      r.events[#r.events + 1] = { line = line, trace = ev.trace,
        stack = ev.stack, kind = ev.kind, size = grow }
    elseif site.source == 'trace' and ev.kind ~= 'free' then
      r.trace_sites = r.trace_sites + 1
    elseif site.internal_kind == 'trace exit' and ev.kind ~= 'free' then
      r.exit_internal = r.exit_internal + 1
    end
  end
  r.compiled_code = stream.compiled_code
  r.compiled_bytes = stream.compiled_bytes
  os.remove(path)
  return r
end

-- The line of this file where profile() calls the case's loop.
local PCALL_LINE
do
  local n = 0
  for text in io.lines('spec/module/trace_lines_spec.lua') do
    n = n + 1
    if text:find('local ok, err = pcall(run, n or 3000)', 1, true) then
      PCALL_LINE = n
    end
  end
end

-- Runs run(n) of the chunk `code` under a profile with `opts`, with the
-- JIT compiler on or off for the chunk.
local function profile(code, opts, compiled, n)
  local run = assert(loadstring(code, CHUNK))()
  jit.flush()
  if not compiled then
    jit.off(run, true)
  end
  local path = h.tmpname()
  collectgarbage()
  assert(memprof.start(path, opts))
  if not compiled then
    jit.off()
  end
  local ok, err = pcall(run, n or 3000)
  jit.on()
  assert(memprof.stop())
  assert(ok, err)
  jit.on(run, true)
  return read(path)
end

-- The JIT-on profile of code, tried again (at most three times) when the
-- loop did not run compiled at every tagged line (a recording can abort).
local function compiled_profile(code, tags, opts, n)
  local r
  for _ = 1, 3 do
    jit.off()
    jit.on()
    r = profile(code, opts, true, n)
    local all = true
    for _, tag in ipairs(tags) do
      all = all and (r.compiled[line_of(code, tag)] or 0) > 0
    end
    if all then
      break
    end
  end
  return r
end

-- Every event of compiled code is at a tagged line, and every tagged line
-- has some; none is left at a trace's start.
local function all_at_tags(r, code, tags)
  local lines = {}
  for _, tag in ipairs(tags) do
    local line = line_of(code, tag)
    lines[line] = true
    assert.is_true((r.compiled[line] or 0) > 0,
      tag .. ': no compiled event at line ' .. line)
  end
  for line in pairs(r.compiled) do
    assert.is_true(lines[line], 'a compiled event at line ' .. line)
  end
  assert.equal(0, r.trace_sites)
  assert.equal(0, r.exit_internal)
end

-- The bytes at each tagged line agree with the interpreter's (where the
-- interpreter and compiled code make blocks of one size), and every event
-- of compiled code is at a tagged line.
local function agrees(code, tags, opts, n, sizes_differ)
  -- (The extended format, where an event says it ran compiled.)
  opts = opts or { trace_lines = 'exact', timestamps = true }
  local on = compiled_profile(code, tags, opts, n)
  all_at_tags(on, code, tags)
  if sizes_differ then
    return on
  end
  local off = profile(code, opts, false, n)
  assert.is_nil(next(off.compiled), 'the interpreter made no trace event')
  for _, tag in ipairs(tags) do
    local line = line_of(code, tag)
    assert.equal(off.bytes[line], on.bytes[line], tag .. ' at line ' .. line)
  end
  return on, off
end

local function case(body, prelude)
  return (prelude or '') .. [[
local keep = {}
for k = 1, 64 do keep[k] = false end
return function(n)
  for i = 1, n do
]] .. body .. [[
  end
  return keep
end
]]
end

if not tl.resume then
  describe('compiled code by line, on a build without it', function()
    it('says why and keeps trace starts', function()
      assert.is_string(tl.why)
      assert.is_false(tl.exact)
      assert.is_false(tl.walk)
      if jit.arch == 'x64' then
        assert.truthy(tl.why:find('no snapshot offsets in this build ' ..
          '(before 2021-03)', 1, true), tl.why)
      end
      local code = case('    keep[i % 64 + 1] = {i, i} --@t\n')
      local r
      for _ = 1, 3 do
        r = profile(code, nil, true)
        if r.trace_sites > 0 then break end
      end
      assert.is_true(r.trace_sites > 0, 'events at trace starts')
      assert.is_nil(next(r.compiled))
    end)

    it('refuses an explicit trace_lines it cannot do, naming why', function()
      for _, mode in ipairs({ 'exact', 'walk', 'resume' }) do
        local path = h.tmpname()
        local ok, err, code = memprof.start(path, { trace_lines = mode })
        assert.is_nil(ok)
        assert.equal(("option 'trace_lines' = '%s' is not supported by " ..
          "this build: %s (memprof.info().trace_lines; 'start' charges " ..
          "compiled code to its trace's start)"):format(mode, tl.why), err)
        assert.is_number(code)
        assert.is_nil(io.open(path))
      end
    end)

    it('says in the profile and its report why events are at trace starts',
      function()
        local code = case('    keep[i % 64 + 1] = {i, i} --@t\n')
        local r = profile(code, { stack_depth = 2 }, true)
        local why = tl.why:find('no snapshot offsets', 1, true) and
          'no_mcofs' or 'not_verified'
        assert.same({ mode = 'start', why = why }, r.compiled_code)
        local layout = require('memprof.report.layout')
        local note = layout.compiled_note(r)
        assert.truthy(note:find('^Compiled code: its allocations are ' ..
          'charged to the start of their trace %(the TRACE rows%), as '), note)
        if why == 'no_mcofs' then
          assert.truthy(note:find('Tarantool 2.6 and 2.11', 1, true), note)
        end
        r = profile(code, { stack_depth = 2, trace_lines = false }, true)
        assert.same({ mode = 'start', why = 'asked' }, r.compiled_code)
      end)
  end)
  return
end

describe('compiled code by line', function()
  local ballast
  setup(function()
    jit.on()
    -- The string table grows (a block of its own, charged to the line
    -- that made the string) once for the first run only: made large
    -- enough here for every run.
    ballast = {}
    for i = 1, 40000 do
      ballast[i] = 'ballast' .. i
    end
  end)

  teardown(function()
    ballast = nil
  end)

  it('says in memprof.info() what the build supports', function()
    assert.is_true(tl.resume)
    assert.is_boolean(tl.exact)
    assert.is_boolean(tl.walk)
    assert.is_boolean(tl.exits)
    assert.is_boolean(tl.stacks)
    assert.is_boolean(tl.stores_after_calls)
    assert.is_boolean(tl.builtin_frames)
    -- (Its ops' kinds are jit.vmdef's names, checked against the ops
    -- jit.util.funcbc shows.)
    assert.equal(pcall(require, 'jit.vmdef'), tl.after_returns)
    assert.is_true(not tl.format_frames or tl.builtin_frames)
    assert.is_number(tl.offsets.snap_mcofs)
    assert.is_number(tl.offsets.bc_funcf)
  end)

  it('unwinds the C frames of a call path once, on arm64 only', function()
    -- arm64 finds the return address into a trace by unwinding the C
    -- frames between the hook and the trace with libgcc's unwinder; later
    -- events replay the frames it learned. x86-64 reads a fixed slot.
    local code = case([[
    keep[i % 64 + 1] = {i, i} --@t
    keep[i % 64 + 1] = 'k' .. i --@s
]])
    local run = assert(loadstring(code, CHUNK))()
    jit.flush()
    local path = h.tmpname()
    assert(memprof.start(path, { trace_lines = 'exact', timestamps = true }))
    local ok, err = pcall(run, 20000)
    local st = memprof.stats()
    assert(memprof.stop())
    assert(ok, err)
    local r, compiled = read(path), 0
    for _, n in pairs(r.count) do
      compiled = compiled + n
    end
    assert.is_true(compiled > 30000, compiled .. ' events of compiled code')
    if jit.arch == 'arm64' then
      assert.is_true(st.unwinds > 0 and st.unwinds * 100 < compiled,
        st.unwinds .. ' unwinds')
    else
      assert.equal(0, st.unwinds)
    end
  end)

  it('charges a table constructor to its line', function()
    agrees(case('    keep[i % 64 + 1] = {i, i, i} --@t\n'), { 't' })
  end)

  it('charges the growth of a table to its line', function()
    -- (Keys of the hash part: each new one goes through lj_tab_newkey.)
    agrees(case('    grow[i + 0.5] = i --@grow\n', 'local grow = {}\n'),
      { 'grow' })
  end)

  it('charges a string concatenation to its line', function()
    agrees(case("    keep[i % 64 + 1] = 'k' .. i .. 'v' --@s\n"), { 's' })
  end)

  it('charges string.format to its line', function()
    agrees(case("    keep[i % 64 + 1] = string.format('%d:%d', i, i) --@f\n"),
      { 'f' })
  end)

  it('charges tostring to its line', function()
    agrees(case('    keep[i % 64 + 1] = tostring(i + 0.5) --@s\n'), { 's' })
  end)

  it('charges table.concat to its line', function()
    agrees(case([[
    local t = {i, i + 1} --@t
    keep[i % 64 + 1] = t
    keep[(i + 1) % 64 + 1] = table.concat(t, ',') --@c
]]), { 't', 'c' })
  end)

  -- Bytes by stack (frame names, the innermost first) of the events at a
  -- line; only those of compiled code if `compiled`.
  local function stacks_at(r, line, compiled)
    local bytes = {}
    for _, ev in ipairs(r.events) do
      if ev.line == line and (ev.trace or not compiled) then
        local names = {}
        -- (Up to the pcall of profile(), whose callers differ.)
        for _, f in ipairs(ev.stack.frames) do
          if f.name == 'pcall' then break end
          names[#names + 1] = f.name
        end
        local key = table.concat(names, ' <- ')
        bytes[key] = (bytes[key] or 0) + ev.size
      end
    end
    return bytes
  end

  -- The JIT-on and JIT-off stacks of each tagged line are the same, with
  -- some events of compiled code at each; returns the JIT-on profile.
  local function same_stacks(code, tags)
    local opts = { trace_lines = 'exact', stack_depth = 8 }
    local on, off = agrees(code, tags, opts)
    for _, tag in ipairs(tags) do
      local line = line_of(code, tag)
      assert.is_true(next(stacks_at(on, line, true)) ~= nil, tag)
      assert.same(stacks_at(off, line), stacks_at(on, line), tag)
    end
    return on
  end

  it('gives a tail-called function at a trace\'s base its callers', function()
    -- The trace stitched after string.find starts in `outer`, whose frame
    -- the tail call gives to `inner`: the stack's slot still holds outer.
    local code = [[
local find = string.find
local function inner(i)
  return { i } --@t
end
local function outer(i)
  local at = find('a b', '%s')
  return inner(i + at)
end
local keep = {}
for k = 1, 64 do keep[k] = false end
return function(n)
  for i = 1, n do
    keep[i % 64 + 1] = outer(i) --@call
  end
  return keep
end
]]
    local on = same_stacks(code, { 't' })
    local line = line_of(code, 't')
    for key in pairs(stacks_at(on, line, true)) do
      assert.equal(('@tl_case.lua:%d <- @tl_case.lua:%d'):format(line,
        line_of(code, 'call')), key)
    end
  end)

  it('charges a new key stored in a loop\'s copied body to the store',
    function()
      if not tl.after_returns or not tl.stores_after_calls then
        pending('jit.vmdef or lj_tab_newkey is not known in this build')
        return
      end
      -- The loop's body, copied, keeps no snapshot for the store of the
      -- inlined recursive call: its region was the comparison's.
      local code = [[
local function infer(def, read_only)
  local deep = not def.other or read_only
  if def.fields then
    for _, field in pairs(def.fields) do
      local ro = read_only
      if field.read_only ~= nil then --@cmp
        ro = field.read_only
      end
      infer(field, ro)
      deep = deep and ro and field.deep
    end
  end
  if deep then
    def.deep = true --@store
  end
end
return function(n)
  local keep
  for i = 1, n / 30 do
    local fields = {} --@list
    for k = 1, 30 do
      fields['f' .. k] = {} --@leaf
    end
    local def = { fields = fields } --@def
    infer(def, true)
    keep = def
  end
  return keep
end
]]
      local opts = { trace_lines = 'exact', stack_depth = 8 }
      local on = compiled_profile(code, { 'store' }, opts)
      local off = profile(code, opts, false)
      local store = line_of(code, 'store')
      assert.is_nil(on.compiled[line_of(code, 'cmp')])
      assert.is_true(on.count[store] > 1000)
      assert.equal(off.bytes[store], on.bytes[store])
      assert.same(stacks_at(off, store), stacks_at(on, store))
    end)

  it('cuts the stacks of compiled code at stack_depth', function()
    -- A walk of the frames below a trace was cut at another depth than
    -- the interpreter's, and each reused the other's.
    local code = [[
local function build(d)
  if d == 0 then return { 0 } end --@leaf
  local t = { build(d - 1), d } --@t
  return t
end
local keep = {}
for k = 1, 64 do keep[k] = false end
return function(n)
  for i = 1, n do
    keep[i % 64 + 1] = build(6)
  end
  return keep
end
]]
    for _, depth in ipairs({ 2, 4, 8 }) do
      local on = compiled_profile(code, { 't', 'leaf' },
        { trace_lines = 'exact', stack_depth = depth })
      local off = profile(code, { trace_lines = 'exact', stack_depth = depth },
        false)
      local deepest, compiled = 0, 0
      for _, ev in ipairs(on.events) do
        deepest = math.max(deepest, #ev.stack.frames)
        compiled = compiled + (ev.trace and 1 or 0)
      end
      assert.is_true(compiled > 1000, compiled .. ' compiled events')
      assert.equal(depth, deepest)
      for _, tag in ipairs({ 't', 'leaf' }) do
        local line = line_of(code, tag)
        local all_on, all_off = stacks_at(on, line), stacks_at(off, line)
        assert.same(all_off, all_on, tag .. ' at depth ' .. depth)
      end
    end
  end)

  it('gives table.concat\'s string the built-in\'s frame', function()
    if not tl.builtin_frames then
      pending('table.concat\'s helpers are not verified in this build')
      return
    end
    local code = case([[
    local t = {i, i + 1} --@t
    keep[i % 64 + 1] = t
    keep[(i + 1) % 64 + 1] = table.concat(t, ',') --@c
]])
    local on = same_stacks(code, { 't', 'c' })
    for key in pairs(stacks_at(on, line_of(code, 'c'), true)) do
      assert.equal(1, select(2, key:gsub('^table%.concat <%- ', '')), key)
    end
    for key in pairs(stacks_at(on, line_of(code, 't'), true)) do
      assert.is_nil(key:find('table.concat', 1, true), key)
    end
  end)

  it('gives a built-in called by a tail call its caller\'s frame', function()
    if not tl.builtin_frames or not tl.after_returns then
      pending('table.concat\'s helpers or jit.vmdef are not verified')
      return
    end
    -- The interpreter's table.concat takes the frame of `join`, which
    -- returns its call: the string is the loop's line's, as its stack.
    local code = case([[
    local t = {i, i + 1} --@t
    keep[i % 64 + 1] = t
    keep[(i + 1) % 64 + 1] = join(t) --@c
]], "local concat = table.concat\n" ..
      "local function join(t) return concat(t, ',') end\n")
    local on = same_stacks(code, { 't', 'c' })
    local line, seen = line_of(code, 'c'), 0
    for _, ev in ipairs(on.events) do
      if ev.trace and ev.line == line then
        assert.equal('table.concat', ev.stack.frames[1].name)
        assert.equal('@tl_case.lua:' .. line, ev.stack.frames[2].name)
        seen = seen + 1
      end
    end
    assert.is_true(seen > 1000, seen .. ' compiled events')
  end)

  it('gives a built-in tail-called in a trace\'s base frame its caller\'s',
    function()
      if not tl.builtin_frames or not tl.after_returns or not tl.stacks then
        pending('table.concat\'s helpers, jit.vmdef or the stacks of ' ..
          'compiled code are not verified')
        return
      end
      if not info.gc64 then
        pending('only FR2 (GC64) snapshots say where their frames lie')
        return
      end
      -- The side trace of join's loop runs join's tail call: join is its
      -- base frame, and the interpreter's table.concat takes join's frame.
      local code = [[
local concat = table.concat
local function join(t, n, i)
  local buffer = { i }
  for k = 1, n do buffer[k + 1] = t[k] end --@b
  return concat(buffer, ',')
end
local keep = {}
for k = 1, 64 do keep[k] = false end
local t = { 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h' }
return function(n)
  for i = 1, n do
    keep[i % 64 + 1] = join(t, 8, i) --@c
  end
  return keep
end
]]
      local opts = { trace_lines = 'exact', stack_depth = 8 }
      local on = compiled_profile(code, { 'c' }, opts)
      local off = profile(code, opts, false)
      local line = line_of(code, 'c')
      assert.is_true((on.count[line] or 0) > 1000, 'compiled events at the call')
      assert.equal(off.bytes[line], on.bytes[line])
      assert.same(stacks_at(off, line), stacks_at(on, line))
      for key in pairs(stacks_at(on, line)) do
        assert.equal('table.concat <- @tl_case.lua:' .. line, key)
      end
    end)

  it('gives string.format\'s string the built-in\'s frame', function()
    if not tl.format_frames then
      pending('string.format\'s helpers are not verified in this build')
      return
    end
    -- (`%5.1f` calls a helper only string.format's recorder emits.)
    local code = case([[
    keep[i % 64 + 1] = string.format('%5.1f', i + 0.5) --@f
    keep[(i + 1) % 64 + 1] = 'k' .. i --@s
]])
    local on = same_stacks(code, { 'f', 's' })
    for key in pairs(stacks_at(on, line_of(code, 'f'), true)) do
      assert.equal(1, select(2, key:gsub('^string%.format <%- ', '')), key)
    end
    for key in pairs(stacks_at(on, line_of(code, 's'), true)) do
      assert.is_nil(key:find('string.format', 1, true), key)
    end
    -- An integer's `%d` is put as a concatenation puts it: without the
    -- guard on string.format's call proven, no frame.
    code = case([[
    keep[i % 64 + 1] = string.format('%d!', i) --@d
]])
    on = compiled_profile(code, { 'd' },
      { trace_lines = 'exact', stack_depth = 8 })
    all_at_tags(on, code, { 'd' })
    local line = line_of(code, 'd')
    local want = (tl.format_puts and 'string.format <- ' or '') ..
      '@tl_case.lua:' .. line
    for key in pairs(stacks_at(on, line, true)) do
      assert.equal(want, key)
    end
  end)

  it('gives string.format of integers its frame, not a concatenation of them',
    function()
    -- (Where string.format's helpers are proven, dual-number builds, such
    -- as arm64's, prove its guard too: their integers are always puts.)
    if jit.arch == 'arm64' and tl.format_frames then
      assert.is_true(tl.format_puts)
    end
    if not tl.format_puts then
      pending('string.format\'s guard is not verified in this build')
      return
    end
    -- (Dual-number builds, arm64's, put each integer of both as TOSTR and
    -- BUFPUT: the same IR.)
    local code = case([[
    keep[i % 64 + 1] = string.format('%d:%d', i, i) --@f
    keep[(i + 1) % 64 + 1] = i .. '-' .. i --@s
]])
    local on = same_stacks(code, { 'f', 's' })
    local f, s = line_of(code, 'f'), line_of(code, 's')
    for key in pairs(stacks_at(on, f, true)) do
      assert.equal('string.format <- @tl_case.lua:' .. f, key)
    end
    for key in pairs(stacks_at(on, s, true)) do
      assert.equal('@tl_case.lua:' .. s, key)
    end
  end)

  it('knows the helper a BLR calls: machine code out of BL\'s reach (arm64)',
    function()
      if jit.arch ~= 'arm64' then
        pending('arm64 only (x86-64 calls a far helper by its address in ' ..
          'the instruction before: spec of table.concat\'s frame)')
        return
      end
      if not tl.builtin_frames then
        pending('table.concat\'s helpers are not verified in this build')
        return
      end
      -- A process whose machine code lies far from LuaJIT's helpers, so
      -- that every helper call is a BLR (spec/support/far_mcode.lua).
      local path = h.tmpname()
      local code, out, err = C.run('timeout 300 ' ..
        C.command(LUA, 'spec/support/far_mcode.lua', path))
      assert.equal(0, code, err)
      assert.is_true(tonumber(out:match('^far (%d+)')) > 128, out)
      local stream = reader.open(path)
      local compiled, framed = 0, 0
      for ev in stream:each() do
        if ev.kind ~= 'free' and ev.site.chunkname == '@far_case.lua' then
          assert.equal(6, ev.site.line)
          if ev.trace then
            compiled = compiled + 1
            framed = framed + (ev.stack[1].name == 'table.concat' and 1 or 0)
          end
        end
      end
      stream:close()
      os.remove(path)
      assert.is_true(compiled > 10000, compiled .. ' events of compiled code')
      assert.equal(compiled, framed)
    end)

  it('gives a concatenation (a helper shared with built-ins) no frame',
    function()
    local code = case([[
    keep[i % 64 + 1] = 'k' .. i --@s
]])
    local on = same_stacks(code, { 's' })
    local line = line_of(code, 's')
    for key in pairs(stacks_at(on, line, true)) do
      assert.equal('@tl_case.lua:' .. line, key)
    end
    -- Compiled code makes one string of table.concat's and the
    -- concatenation's: the interpreter makes two. Not table.concat's.
    code = case([[
    local t = {i, 'b'} --@t
    keep[i % 64 + 1] = t
    keep[(i + 1) % 64 + 1] = table.concat(t, ',') .. '!' --@c
]])
    on = compiled_profile(code, { 't', 'c' },
      { trace_lines = 'exact', stack_depth = 8 })
    all_at_tags(on, code, { 't', 'c' })
    line = line_of(code, 'c')
    local seen = 0
    for _, ev in ipairs(on.events) do
      if ev.trace and ev.line == line then
        assert.equal('@tl_case.lua:' .. line, ev.stack.frames[1].name)
        seen = seen + 1
      end
    end
    assert.is_true(seen > 1000, seen .. ' compiled events')
  end)

  it('charges cdata to its line', function()
    -- (Compiled code makes smaller cdata objects than the interpreter.)
    local code = case("    keep[i % 64 + 1] = ffi.new('int[4]') --@c\n",
      "local ffi = require('ffi')\n")
    local on = agrees(code, { 'c' }, nil, nil, true)
    assert.is_true(on.count[line_of(code, 'c')] > 2500)
  end)

  it('charges an inlined callee to its line, with its caller in the stack',
    function()
    local code = case([[
    keep[i % 64 + 1] = make(i) --@call
]], [[
local function make(i)
  local t = {i, i} --@inner
  return t
end
]])
    local on = agrees(code, { 'inner' },
      { trace_lines = 'exact', stack_depth = 8 })
    local inner, call = line_of(code, 'inner'), line_of(code, 'call')
    local seen = 0
    for _, ev in ipairs(on.events) do
      if ev.trace and ev.line == inner then
        local frames = ev.stack.frames
        assert.equal(inner, frames[1].line)
        assert.equal(CHUNK, frames[2].chunkname)
        assert.equal(call, frames[2].line)
        -- Below the trace: the interpreter's frames (pcall in profile()).
        if tl.stacks then
          assert.equal('pcall', frames[3].name)
          assert.equal(PCALL_LINE, frames[4].line)
        else
          assert.is_nil(frames[3])
        end
        seen = seen + 1
      end
    end
    assert.is_true(seen > 1000, seen .. ' compiled events in the callee')
  end)

  it('charges a new key stored right after an inlined call to the store',
    function()
    if not tl.stores_after_calls then
      pending('lj_tab_newkey is not known in this build')
      return
    end
    -- Its snapshot is the callee's last one (LuaJIT's loop optimisation
    -- drops the store's own): the helper called tells it apart.
    agrees(case([[
    local t = {i} --@t
    t.name = label(i) --@store
    keep[i % 64 + 1] = t
]], [[
local function label(i)
  return 'item' .. i --@label
end
]]), { 't', 'store', 'label' })
  end)

  -- A snapshot region of the looping part can run on past an inlined
  -- callee's return into its caller (no guard keeps the snapshots in
  -- between): the last snapshot left is the callee's, at its return.
  local function after_return_pending()
    if not tl.after_returns then
      pending('jit.vmdef is not found')
      return true
    end
    return false
  end

  local after_return = [[
local function label(i)
  return 'item' .. i --@label
end
local function record(i)
  local t = {i} --@t
  t.name = label(i) --@store
  return t
end
]]

  it('charges what follows an inlined call\'s return to its line',
    function()
    if after_return_pending() then return end
    local code = case([[
    local r = record(i)
    r.number = tostring(i + 0.5) --@after
    keep[i % 64 + 1] = r
]], after_return)
    local tags = { 't', 'store', 'label', 'after' }
    local on = agrees(code, tags, { trace_lines = 'exact', stack_depth = 8 })
    local after, seen = line_of(code, 'after'), 0
    for _, ev in ipairs(on.events) do
      if ev.trace and ev.line == after then
        -- The caller's frame, then those below the trace (if this build
        -- has them): the callee has returned.
        local below = ev.stack.frames[2]
        assert.equal(after, ev.stack.frames[1].line)
        assert.is_true(below == nil or below.chunkname ~= CHUNK)
        seen = seen + 1
      end
    end
    assert.is_true(seen > 2500, seen .. ' compiled events after the return')
  end)

  it('charges string.format and a store after an inlined call\'s return',
    function()
    if after_return_pending() then return end
    -- (Builds whose buffer puts are no guards leave string.format's
    -- calls in the callee's region too.)
    agrees(case([[
    local r = record(i)
    r.text = string.format('%d:%d', i, i) --@format
    r.number = tostring(i + 0.5) --@number
    keep[i % 64 + 1] = r
]], after_return), { 't', 'store', 'label', 'format', 'number' })
  end)

  it('charges a callee inlined after an inlined call\'s return to its line',
    function()
    if after_return_pending() then return end
    -- (The callee's region can run on into a second callee's code: its
    -- events are that callee's, its line and frame.)
    local code = case([[
    local r = record(i)
    r.text = tag(i) --@call
    keep[i % 64 + 1] = r
]], after_return .. [[
local function tag(i)
  return 'tag' .. i --@tag
end
]])
    -- (r.text fits in the hash part made for t.name.)
    local on = agrees(code, { 't', 'store', 'label', 'tag' },
      { trace_lines = 'exact', stack_depth = 8 })
    local tag, call, seen = line_of(code, 'tag'), line_of(code, 'call'), 0
    for _, ev in ipairs(on.events) do
      if ev.trace and ev.line == tag then
        assert.equal(call, ev.stack.frames[2].line)
        seen = seen + 1
      end
    end
    assert.is_true(seen > 2500, seen .. ' compiled events in the callee')
  end)

  it('charges a side trace to its line', function()
    local code = case([[
    if i % 4 == 0 then
      keep[i % 64 + 1] = {i} --@side
    else
      keep[i % 64 + 1] = {i, i} --@root
    end
]])
    local on = agrees(code, { 'side', 'root' })
    local traces = 0
    for _ in pairs(on.traces) do traces = traces + 1 end
    assert.is_true(traces >= 2, traces .. ' traces')
  end)

  it('charges the looping part of a loop trace to its line', function()
    local code = case('    keep[i % 64 + 1] = {i, i} --@t\n')
    local on = agrees(code, { 't' }, nil, 5000)
    -- Only the rounds before the loop was compiled ran elsewhere.
    assert.is_true(on.count[line_of(code, 't')] > 4500)
  end)

  it('charges a sunk table made at a trace exit to its line', function()
    if not tl.exits then
      pending('trace exits are not verified in this build')
      return
    end
    -- On one line: the exit's place is the line of the table too. Only
    -- the tables that escape are made: one round in 40.
    local code = case('    local t = {i, i} if i % 40 == 0 then ' ..
      'keep[i % 64 + 1] = t end --@sunk\n')
    local on = agrees(code, { 'sunk' }, nil, nil, true)
    assert.is_true(on.count[line_of(code, 'sunk')] >= 60)
  end)

  it('charges the resume point without per-line snapshots', function()
    -- One line per statement that allocates after a store: the resume
    -- point is the allocating line itself.
    agrees(case([[
    keep[i % 64 + 1] = i
    keep[i % 64 + 1] = {i, i} --@t
]]), { 't' }, { trace_lines = 'resume', timestamps = true })
  end)

  describe("with trace_lines 'walk'", function()
    local walk = { trace_lines = 'walk', timestamps = true }

    -- The lines of code whose compiled events are not all at `line`.
    local function elsewhere(r, line)
      local n = 0
      for l, count in pairs(r.compiled) do
        if l ~= line then n = n + count end
      end
      return n
    end

    it('charges a table made lines after the resume point to its line',
      function()
      if not tl.walk then return pending('no walk on this build') end
      -- No store or guard before the constructor: the loop's snapshot
      -- resumes on the body's first line, where 'resume' charges it.
      local code = case([[
    local a = i + 1
    local b = a * 2
    keep[i % 64 + 1] = {a, b} --@t
]])
      local line = line_of(code, 't')
      local resume = compiled_profile(code, { 't' },
        { trace_lines = 'resume', timestamps = true })
      assert.is_true(elsewhere(resume, line) > 1000,
        'resume: ' .. elsewhere(resume, line) .. ' events elsewhere')
      agrees(code, { 't' }, walk)
    end)

    it('charges a new key and a string to their lines past an inlined call',
      function()
      if not tl.walk then return pending('no walk on this build') end
      local code = case([[
    local t = make(i) --@make
    t.name = 'k' .. i --@s
]], [[
local function make(i)
  local t = {} --@t
  t[1] = i --@k
  return t
end
]])
      local on = agrees(code, { 't', 'k', 's' }, walk)
      assert.is_nil(on.compiled[line_of(code, 'make')])
    end)

    -- record calls point through an immutable upvalue; point returns a
    -- table before any snapshot of a trace that inlines it.
    local POINT_RECORD = [[
local function point(x, y)
  return { x = x, y = y } --@t
end
local function record(i)
  local r = { i } --@r
  r.where = point(i, -i) --@k
  return r
end
]]

    it('enters a callee called through an upvalue before any snapshot',
      function()
      if not tl.walk_upvalues then
        return pending('no walk through upvalues on this build')
      end
      -- point is inlined into record, itself inlined, and returns before
      -- any snapshot: no snapshot names it, its closure is record's
      -- immutable upvalue, a constant of the trace (FR2: two slots below
      -- record's frame; else its function slot, flagged SNAP_FRAME).
      local code = case([[
    keep[i % 64 + 1] = record(i)
]], POINT_RECORD)
      agrees(code, { 'r', 't', 'k' }, walk)
    end)

    it('enters a callee called through an upvalue of the base frame',
      function()
      if not tl.walk_upvalues then
        return pending('no walk through upvalues on this build')
      end
      -- The loop is not compiled: record gets a trace of its own, from its
      -- entry, so record is that trace's base frame (no snapshot holds its
      -- closure: the Lua stack's function slot does). The upvalue's
      -- callee was once read only in an inlined frame, and point's table
      -- went to the call (line @k) whenever record's hot counter, shared
      -- with other bytecode by a hash of its address, fired first.
      local code = POINT_RECORD .. [[
local keep = {}
for k = 1, 64 do keep[k] = false end
local function run(n)
  for i = 1, n do
    keep[i % 64 + 1] = record(i)
  end
  return keep
end
jit.off(run)
return run
]]
      agrees(code, { 'r', 't', 'k' }, walk)
    end)

    it('gives a built-in called through an upvalue its frame', function()
      if not tl.walk_upvalues or not tl.stacks then
        return pending('no walk through upvalues or stacks on this build')
      end
      -- tostr and sub are immutable upvalues holding built-ins that
      -- compiled code runs inline: the string each makes is charged to its
      -- call, under the built-in's frame, as the interpreter's stack has it.
      local code = case([[
    local n = tostr(i + 0.5) --@n
    keep[i % 64 + 1] = n
    keep[(i + 1) % 64 + 1] = sub(n, 1, -2) --@s
]], 'local tostr, sub = tostring, string.sub\n')
      local on, off = agrees(code, { 'n', 's' },
        { trace_lines = 'walk', stack_depth = 8 })
      for _, tag in ipairs({ 'n', 's' }) do
        local line = line_of(code, tag)
        assert.is_true(next(stacks_at(on, line, true)) ~= nil, tag)
        assert.same(stacks_at(off, line), stacks_at(on, line), tag)
      end
    end)

    it('charges a new key past a constructor\'s numbered stores to its store',
      function()
      if not tl.walk then return pending('no walk on this build') end
      -- The snapshot after the constructor's stores is merged into the one
      -- after the new key, so the key's region resumes at the constructor,
      -- whose stores (TSETB, a number key) the walk once took for it.
      agrees(case([[
    local t = { i, i + 1, i + 2 } --@t
    t.name = i --@k
    keep[i % 64 + 1] = t
]]), { 't', 'k' }, walk)
    end)

    it('follows the way of a branch the trace took', function()
      if not tl.walk then return pending('no walk on this build') end
      agrees(case([[
    local k = i % 64 + 1
    if k > 0 then
      keep[k] = {k} --@t
    else
      keep[k] = false
    end
]]), { 't' }, walk)
    end)

    it('follows loops around to a table made in the next round', function()
      if not tl.walk then return pending('no walk on this build') end
      -- The loop over pairs gets a trace of its own; side traces run from
      -- its exit through the loops' ends, the next rounds and the
      -- constructor back to that trace, in one snapshot's region (the walk
      -- once stopped at the first loop op, and the table stayed on the
      -- line of pairs, as luacheck's detect_uninit_accesses.lua:10 did).
      -- Sizes differ with the JIT on: it sinks some.
      local code = case([[
    keep[i % 64 + 1] = scan(lines[i % 50 + 1])
]], [[
local function scan(line)
  local n = 0
  for _, item in ipairs(line.items) do
    for _, key in ipairs({ 'accesses', 'mutations' }) do --@t
      local code = key == 'accesses' and '321' or '341'
      local map = item[key]
      if map then
        for v in pairs(map) do
          if item.used[v] then n = n + #code end
        end
      end
    end
  end
  return n
end
local lines = {}
for l = 1, 50 do
  local items = {}
  for j = 1, 20 do
    local v = 'v' .. j -- (A string: no key hashed by an address.)
    items[j] = { accesses = j % 3 == 0 and { [v] = true } or nil,
      mutations = j % 2 == 0 and { [v] = true } or nil,
      used = { [v] = j % 5 == 0 } }
  end
  lines[l] = { items = items }
end
]])
      local on = compiled_profile(code, { 't' }, walk)
      if next(on.compiled) == nil then
        -- (Seen in CI, under a heavy load, on Tarantool's builds: no
        -- compiled event in three runs; the cause is not known.)
        return pending('compiled code ran none of the loops in three runs')
      end
      all_at_tags(on, code, { 't' })
    end)

    it('follows a branch to a compiled function the trace links to',
      function()
      if not tl.walk then return pending('no walk on this build') end
      -- g is compiled first, from its entry, and stitches around gsub: the
      -- loop's trace inlines f and links to g's trace, its last snapshot
      -- resuming at g's header. Both ways of `if prev` reach it, and both
      -- hold a new key; the way taken reaches it with the key on @k.
      local code = case([[
    if i == 1 then warm() end
    local t = {} --@t
    keep[i % 64 + 1] = f(t, i > 0)
]], [[
local function g(s)
  return (s:gsub('x', 'y'))
end
local function f(t, prev)
  if prev then
    t.a = 1 --@k
  end
  t.b = g('x')
  return t
end
local function warm()
  for _ = 1, 500 do g('x') end
end
jit.off(warm)
]])
      agrees(code, { 't', 'k' }, walk)
    end)

    it('charges a table to a function tail-called before a stitch',
      function()
      if not tl.walk then return pending('no walk on this build') end
      -- string.find with a pattern is not compiled: the trace stitches
      -- around it, and its last snapshot (a continuation's) does not
      -- resolve; the tail call's callee is in its function slot.
      local code = case([[
    keep[i % 64 + 1] = value('ab,cd;ef', 1)
]], [[
local function scan(s, i)
  local buf, n = {}, 0 --@t
  while true do
    local p = s:find('[,;]', i)
    if not p then return buf end
    n = n + 1
    buf[n] = p --@k
    i = p + 1
  end
end
local function value(s, i)
  i = i + 1
  return scan(s, i)
end
]])
      agrees(code, { 't', 'k' }, walk)
    end)

    it('says so in the profile and its report', function()
      if not tl.walk then return pending('no walk on this build') end
      local layout = require('memprof.report.layout')
      local r = profile(case('    keep[i % 64 + 1] = {i, i} --@t\n'), walk,
        true)
      assert.same({ mode = 'walk', why = 'asked' }, r.compiled_code)
      assert.equal('Compiled code: its allocations are charged to their ' ..
        'lines and inlined frames, found from where the interpreter would ' ..
        "resume (trace_lines 'walk').", layout.compiled_note(r))
    end)
  end)

  it('keeps trace starts with trace_lines = false', function()
    local r = profile(case('    keep[i % 64 + 1] = {i, i} --@t\n'),
      { trace_lines = false, timestamps = true }, true)
    assert.is_nil(next(r.compiled))
    assert.is_true(r.trace_sites > 1000)
  end)

  it('says in the profile how compiled code was attributed', function()
    local layout = require('memprof.report.layout')
    local code = case('    keep[i % 64 + 1] = {i, i} --@t\n')
    local r = compiled_profile(code, { 't' }, { timestamps = true })
    assert.same({ mode = tl.exact and 'exact' or 'resume',
      why = tl.exact and 'asked' or 'no_prof_mode' }, r.compiled_code)
    assert.is_true(r.compiled_bytes > 0)
    if tl.exact then
      assert.equal('Compiled code: its allocations are charged to their ' ..
        "lines and inlined frames (trace_lines 'exact'). For them the JIT " ..
        'compiler keeps a snapshot per line: INTERNAL (JIT compiler) ' ..
        'counts those too (a third to a half more than without them on ' ..
        "the programs measured; trace_lines 'walk' adds none).",
        layout.compiled_note(r))
    end
    r = profile(code, { timestamps = true, trace_lines = 'resume' }, true)
    assert.same({ mode = 'resume', why = 'asked' }, r.compiled_code)
    r = profile(code, { timestamps = true, sample_bytes = 64 }, true)
    assert.same({ mode = 'resume', why = 'asked' }, r.compiled_code)
    r = profile(code, { timestamps = true, trace_lines = false }, true)
    assert.same({ mode = 'start', why = 'asked' }, r.compiled_code)
    assert.equal('Compiled code: its allocations are charged to the start ' ..
      "of their trace (the TRACE rows) (trace_lines 'start').",
      layout.compiled_note(r))
    r = profile(code, nil, true)
    assert.equal(3, r.version)
    assert.is_nil(r.compiled_code)
  end)

  it('writes Lua-line events in Tarantool\'s format', function()
    local code = case('    keep[i % 64 + 1] = {i, i} --@t\n')
    local r = compiled_profile(code, {}, nil)
    assert.equal(3, r.version)
    assert.equal(0, r.trace_sites)
    local off = profile(code, nil, false)
    assert.equal(off.bytes[line_of(code, 't')], r.bytes[line_of(code, 't')])
  end)

  it('follows traces flushed and their numbers reused', function()
    local a = case('    keep[i % 64 + 1] = {i} --@a\n')
    local b = case('\n\n    keep[i % 64 + 1] = {i, i, i} --@b\n')
    local run_a = assert(loadstring(a, CHUNK))()
    local run_b = assert(loadstring(b, CHUNK))()
    local r
    for _ = 1, 3 do
      jit.flush()
      local path = h.tmpname()
      assert(memprof.start(path, { trace_lines = 'exact', stack_depth = 2 }))
      run_a(3000)
      jit.flush()
      run_b(3000)
      assert(memprof.stop())
      r = read(path)
      if (r.compiled[line_of(a, 'a')] or 0) > 0 and
          (r.compiled[line_of(b, 'b')] or 0) > 0 then
        break
      end
    end
    local traces = { [line_of(a, 'a')] = {}, [line_of(b, 'b')] = {} }
    for _, ev in ipairs(r.events) do
      assert.is_table(traces[ev.line], 'no event at line ' .. ev.line)
      if ev.trace then
        traces[ev.line][ev.trace] = true
      end
    end
    -- The second loop's trace took the first one's number.
    local reused = false
    for n in pairs(traces[line_of(b, 'b')]) do
      reused = reused or traces[line_of(a, 'a')][n] == true
    end
    assert.is_true(reused)
    local off_a = profile(a, nil, false)
    local off_b = profile(b, nil, false)
    assert.equal(off_a.bytes[line_of(a, 'a')], r.bytes[line_of(a, 'a')])
    assert.equal(off_b.bytes[line_of(b, 'b')], r.bytes[line_of(b, 'b')])
  end)

  it('is chosen with memprof run --trace-lines', function()
    if jit.arch ~= 'x64' then
      -- memprof run loads build/memprof.so, built for x86-64 here.
      pending('memprof run needs the module built for this machine')
      return
    end
    local dir = C.temp_dir()
    C.write_file(dir .. '/loop.lua', [[
local keep = {}
for k = 1, 64 do keep[k] = false end
for i = 1, 3000 do
  keep[i % 64 + 1] = {i, i}
end
]])
    local function report(mode)
      -- (The report goes to stderr, the script's output to stdout.)
      local code, _, err = C.run('cd ' .. C.quote(dir) ..
        ' && timeout 120 ' ..
        C.command(LUA, MEMPROF, 'run', '--lua=' .. LUA,
          '--trace-lines=' .. mode, 'loop.lua'))
      assert.equal(0, code, err)
      return err
    end
    local exact, start = report('exact'), report('start')
    local code, _, err = C.run('cd ' .. C.quote(dir) .. ' && timeout 120 ' ..
      C.command(LUA, MEMPROF, 'run', '--lua=' .. LUA, '--trace-lines=line',
        'loop.lua'))
    C.remove_tree(dir)
    assert.truthy(exact:find('\n@loop.lua:4: 3000 events\t+', 1, true), exact)
    assert.is_nil(exact:find('TRACE started', 1, true))
    assert.truthy(start:find('\nTRACE started at @loop.lua:3 ', 1, true),
      start)
    assert.equal(1, code)
    assert.truthy(err:find("option '--trace-lines': expected exact, walk, " ..
      'resume or start, found line', 1, true), err)
  end)
  -- Runs `body` in a child LUA that has loaded the module this spec runs
  -- with (memprof) and `spin`; PATH in body is a profile's path in a
  -- directory of its own. Returns its exit code, output and errors.
  local function in_child(body)
    local dir = C.temp_dir()
    local prelude = string.format('package.cpath = %q\n' ..
      "local memprof, PATH = require('memprof'), %q\n" ..
      'local function spin(n) local x = 0 for i = 1, n do x = x + i end ' ..
      'return x end\n', package.cpath, dir .. '/p.bin')
    local code, out, err = C.run(C.command(LUA, '-e', prelude .. body))
    C.remove_tree(dir)
    return code, out, err
  end
  -- A flush of 'exact' starts the hot counters again (as jit.on after
  -- jit.off does): an outer loop whose counter ran out right after it,
  -- before its inner loop was compiled again, aborted its recording (an
  -- unwind, which made the C unwinder's pages resident in a target
  -- attached to: spec/hosts/attach_rss_spec.lua). 40 rounds of a loop
  -- before the start and 40 after it compile it (LuaJIT's hotloop is
  -- 56) only if its counter was not started again; 60 after the stop do.
  it('starts the hot counters again when it flushes the traces', function()
    if not tl.exact then
      return
    end
    local code, out, err = in_child([[
local started = 0
jit.attach(function(what) if what == 'start' then started = started + 1 end end,
  'trace')
spin(40)
assert(memprof.start(PATH, { trace_lines = 'exact' }))
spin(40)
local during = started
assert(memprof.stop())
spin(60)
io.write(during, ' ', started)]])
    assert.are.equal(0, code, err)
    assert.are.equal('0 1', out)
  end)
  -- LuaJIT refuses luaJIT_setmode in a finalizer with an error: the flush
  -- and the counters' start run in one protected call, and a start and a
  -- stop of 'exact' from a __gc metamethod succeed (the traces then stay).
  it('starts and stops in a finalizer, where LuaJIT refuses a flush',
      function()
    if not tl.exact then
      return
    end
    local code, out, err = in_child([[
local results = {}
spin(100)
local u = newproxy(true)
getmetatable(u).__gc = function()
  local ok, r, e = pcall(memprof.start, PATH, { trace_lines = 'exact' })
  results[#results + 1] = tostring(ok) .. ':' .. tostring(r or e)
  spin(100)
  ok, r, e = pcall(memprof.stop)
  results[#results + 1] = tostring(ok) .. ':' .. tostring(r or e)
end
u = nil
collectgarbage()
collectgarbage()
io.write(table.concat(results, ' '))]])
    assert.are.equal(0, code, err)
    assert.are.equal('true:true true:true', out)
  end)
end)
