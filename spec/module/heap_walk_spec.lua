-- Heap snapshots: memprof.snapshot(path, {format = 'heap'}) (src/heapwalk.c,
-- src/heap_layout.c, src/heap_objects.c) read back by memprof.read.heap_snapshot (through
-- helpers/heap_load.lua), on known graphs.
local h = require('helpers.profile')
local memprof = require('memprof')
local load = require('helpers.heap_load')

-- The address LuaJIT prints for a table, function, thread or userdata.
local function addr(v)
  return tonumber(tostring(v):match('0x(%x+)'), 16)
end

-- A snapshot of this VM now, loaded, with indexes: references by source
-- and by target, strings by text.
local function snapshot(options)
  local path = h.tmpname('.heap')
  local ok, msg = memprof.snapshot(path, options or { format = 'heap' })
  assert(ok, msg)
  local s = load(path)
  os.remove(path)
  s.from, s.to, s.strings = {}, {}, {}
  for _, r in ipairs(s.refs) do
    s.from[r.from] = s.from[r.from] or {}
    table.insert(s.from[r.from], r)
    s.to[r.to] = s.to[r.to] or {}
    table.insert(s.to[r.to], r)
  end
  for _, o in ipairs(s.list) do
    if o.type == 'string' and not o.truncated then
      assert.is_nil(s.strings[o.text], 'two string objects hold ' .. o.text)
      s.strings[o.text] = o
    end
  end
  return s
end

-- The references from `from` of a kind (and a name, for fields: the key's
-- text; for upvalues and stack slots: their name).
local function refs(s, from, kind, name)
  local out = {}
  for _, r in ipairs(s.from[from] or {}) do
    local rname = r.name
    if r.kind == 'field' then rname = s.objects[r.key].text end
    if r.kind == kind and (name == nil or rname == name) then
      out[#out + 1] = r
    end
  end
  return out
end

-- The one target of a field `name` of table `from`.
local function field(s, from, name)
  local found = refs(s, from, 'field', name)
  assert.equal(1, #found, 'fields named ' .. name)
  return found[1].to
end

local function root(s, name)
  local found = {}
  for _, r in ipairs(s.from[0] or {}) do
    if r.kind == 'root' and r.name == name then found[#found + 1] = r.to end
  end
  assert.equal(1, #found, 'roots named ' .. name)
  return found[1]
end

describe('heap snapshots', function()
  -- The suite's VM holds the garbage of every earlier spec until a cycle
  -- ends, and a loaded snapshot is large: a VM limited to its low address
  -- space (Tarantool 2.6) ran out without a collection before each test.
  -- (A test's own garbage is made after it, and stays until its walk.)
  before_each(function()
    collectgarbage()
    collectgarbage()
  end)

  setup(function()
    jit.off()
    jit.flush()
  end)

  teardown(function()
    jit.on()
  end)

  after_each(function()
    if memprof.is_running() then memprof.stop() end
    package.loaded.catalog = nil
  end)

  it('finds a module-level cache from the registry', function()
    local cache = {}
    package.loaded.catalog = { rendered_cache = cache }
    for i = 1, 3 do cache['page' .. i] = ('<p>body %d</p>'):rep(i) end
    local s = snapshot()
    local registry = root(s, 'registry')
    assert.equal(addr(debug.getregistry()), registry)
    local loaded = field(s, registry, '_LOADED')
    local catalog = field(s, loaded, 'catalog')
    assert.equal(addr(package.loaded.catalog), catalog)
    assert.equal(addr(cache), field(s, catalog, 'rendered_cache'))
    local bodies = refs(s, addr(cache), 'field')
    assert.equal(3, #bodies)
    for i = 1, 3 do
      local body = s.objects[field(s, addr(cache), 'page' .. i)]
      assert.equal('string', body.type)
      assert.equal(('<p>body %d</p>'):rep(i), body.text)
    end
    assert.equal('table', s.objects[addr(cache)].type)
    assert.equal(0, s.objects[addr(cache)].asize)
    assert.equal(4, s.objects[addr(cache)].nodes)
  end)

  it("names a closure's upvalue and reaches its value", function()
    local history = {}
    local function record(x) history[#history + 1] = x end
    record('a')
    local s = snapshot()
    local uv = refs(s, addr(record), 'upvalue', 'history')
    assert.equal(1, #uv)
    assert.equal(1, uv[1].index)
    assert.equal('upvalue', s.objects[uv[1].to].type)
    local value = refs(s, uv[1].to, 'upvalue_value')
    assert.equal(1, #value)
    assert.equal(addr(history), value[1].to)
    local proto = refs(s, addr(record), 'proto')
    assert.equal(1, #proto)
    assert.equal('proto', s.objects[proto[1].to].type)
  end)

  it("names a suspended coroutine's local", function()
    local co = coroutine.create(function()
      local pending = { 'waiting' }
      coroutine.yield(tostring(pending))
      return pending
    end)
    local _, pending = coroutine.resume(co)
    local s = snapshot()
    assert.equal('thread', s.objects[addr(co)].type)
    local slots = refs(s, addr(co), 'stack', 'pending')
    assert.equal(1, #slots)
    assert.equal(addr(pending), slots[1].to)
    assert.is_true(slots[1].level >= 1)
  end)

  it("names the running thread's locals", function()
    local keeper = { 'kept by a local' }
    local s = snapshot()
    local running = root(s, 'running thread')
    local slots = refs(s, running, 'stack', 'keeper')
    assert.equal(1, #slots)
    assert.equal(addr(keeper), slots[1].to)
  end)

  it("follows a metatable's __index table", function()
    local base = { greet = function() end }
    local obj = setmetatable({}, { __index = base })
    local s = snapshot()
    local mt = refs(s, addr(obj), 'metatable')
    assert.equal(1, #mt)
    assert.equal(addr(getmetatable(obj)), mt[1].to)
    assert.equal(addr(base), field(s, mt[1].to, '__index'))
  end)

  it('finds a global through the thread and the registry', function()
    _G.heap_spec_global = { 'a global' }
    local s = snapshot()
    local env = refs(s, root(s, 'running thread'), 'env')
    assert.equal(1, #env)
    assert.equal(addr(_G), env[1].to)
    assert.equal(addr(_G.heap_spec_global), field(s, addr(_G),
      'heap_spec_global'))
    _G.heap_spec_global = nil
  end)

  it('flags a weak-keyed table and never follows its keys', function()
    local weak = setmetatable({}, { __mode = 'k' })
    local held = {}
    weak[held] = 1
    -- In a function of its own: no slot of this one keeps the key.
    local function add(w) w[{}] = { 'value of a key held by nothing else' } end
    add(weak)
    local s = snapshot()
    local w = s.objects[addr(weak)]
    assert.is_true(w.weak_keys)
    assert.is_false(w.weak_values)
    local keys = refs(s, addr(weak), 'key')
    assert.equal(2, #keys)
    local absent = 0
    for _, r in ipairs(keys) do
      assert.is_true(r.weak)
      if s.objects[r.to] == nil then absent = absent + 1 end
    end
    assert.equal(1, absent) -- the key only the weak table holds
    assert.is_not_nil(s.objects[addr(held)])
    -- A weak key's value is held strongly (LuaJIT has no ephemerons).
    local values = refs(s, addr(weak), 'by_key')
    assert.equal(1, #values)
    assert.is_false(values[1].weak)
  end)

  it('writes a cycle once and both of its references', function()
    local a = {}
    local b = { a = a }
    a.b = b
    local s = snapshot()
    assert.equal(addr(b), field(s, addr(a), 'b'))
    assert.equal(addr(a), field(s, addr(b), 'a'))
    local seen = {}
    for _, o in ipairs(s.list) do
      assert.is_nil(seen[o.addr])
      seen[o.addr] = true
    end
  end)

  it('sees both holders of a table reachable by two paths', function()
    local shared = {}
    local p1, p2 = { x = shared }, { y = shared }
    local s = snapshot()
    local holders = {}
    for _, r in ipairs(s.to[addr(shared)]) do
      if r.kind == 'field' then holders[r.from] = s.objects[r.key].text end
    end
    assert.same({ [addr(p1)] = 'x', [addr(p2)] = 'y' }, holders)
  end)

  it('has one object for a string that many tables share', function()
    local text = 'a string shared by fifty tables'
    local tables = {}
    for i = 1, 50 do tables[i] = { name = text .. '' } end
    local s = snapshot()
    local str = s.strings[text]
    local n = 0
    for _, r in ipairs(s.to[str.addr]) do
      if r.kind == 'field' and s.objects[r.key].text == 'name' then
        n = n + 1
      end
    end
    assert.equal(50, n)
    assert.equal(50, #refs(s, addr(tables), 'index'))
  end)

  it('sizes tables and strings as the allocator saw them', function()
    local chunk = h.chunk([[
local t = { 1, 2, 3, 4, 5, a = 1, b = 2, c = 3 }
local s = string.rep('size me ', 40)
return t, s
]], '@sized.lua')
    local t, str
    local events = h.profile(function() t, str = chunk() end)
    local s = snapshot()
    assert.equal(h.net(h.at(events, '@sized.lua:1')), s.objects[addr(t)].size)
    local o = s.strings[str] or nil
    assert.is_nil(o) -- longer than the text a snapshot keeps
    for _, obj in ipairs(s.list) do
      if obj.type == 'string' and obj.len == #str and obj.truncated and
          str:sub(1, #obj.text) == obj.text then
        o = obj
      end
    end
    local allocated
    for _, ev in ipairs(h.at(events, '@sized.lua:2', 'alloc')) do
      if ev.naddr == o.addr then allocated = ev.nsize end
    end
    assert.equal(allocated, o.size)
    assert.equal(200, #o.text)
  end)

  it('sizes functions, upvalues, threads and userdata as the allocator saw ' ..
    'them', function()
    local chunk = h.chunk([[
local t = {}
local f = function() end
local g = function() return t end
local co = coroutine.create(f)
local u = newproxy(false)
return f, g, co, u
]], '@sized2.lua')
    local f, g, co, u
    local events = h.profile(function() f, g, co, u = chunk() end)
    local s = snapshot()
    local function net(line)
      return h.net(h.at(events, '@sized2.lua:' .. line))
    end
    assert.equal(net(2), s.objects[addr(f)].size)
    local uv = refs(s, addr(g), 'upvalue')[1].to
    assert.equal(net(3), s.objects[addr(g)].size + s.objects[uv].size)
    assert.equal(net(4), s.objects[addr(co)].size)
    local ud
    for _, o in ipairs(s.list) do
      if o.type == 'userdata' and o.addr + o.size - o.len == addr(u) then
        ud = o
      end
    end
    assert.equal(net(5), ud.size)
  end)

  it('notes when and in which process it was taken', function()
    local before = os.time()
    local s = snapshot()
    local after = os.time()
    assert.is_true(s.header.time >= before and s.header.time <= after,
      'taken at ' .. s.header.time .. ', called at ' .. before)
    local f = assert(io.open('/proc/self/stat'))
    local pid = tonumber(f:read('*l'):match('^(%d+)'))
    f:close()
    assert.equal(pid, s.header.pid)
  end)

  it('sizes cdata as the allocator saw them', function()
    local ffi = require('ffi')
    local I = ffi.typeof('int64_t')
    local S = ffi.typeof('struct { int x; double y[3]; }')
    local V = ffi.typeof('int[?]')
    local chunk = h.chunk([[
local ffi, I, S, V = ...
local a = ffi.new(I, 5)
local b = a + 1
local s = ffi.new(S)
local v = ffi.new(V, 100)
local k = loadstring('return 0x123456789LL')
return a, b, s, v, k
]], '@cdata.lua')
    local vals
    local events = h.profile(function() vals = { chunk(ffi, I, S, V) } end)
    local s = snapshot()
    assert.is_false(s.header.cdata_sizes_unknown)
    -- The one cdata object in the block allocated at a line.
    local function at_line(line)
      local allocs = h.at(events, '@cdata.lua:' .. line, 'alloc')
      local found = {}
      for _, ev in ipairs(allocs) do
        for _, o in ipairs(s.list) do
          if o.type == 'cdata' and o.addr >= ev.naddr and
              o.addr < ev.naddr + ev.nsize then
            found[#found + 1] = { o = o, ev = ev }
          end
        end
      end
      assert.equal(1, #found, 'cdata allocated at line ' .. line)
      return found[1].o, found[1].ev
    end
    for line, payload in pairs({ [2] = 8, [3] = 8, [4] = ffi.sizeof(S) }) do
      local o, ev = at_line(line)
      assert.equal(o.addr, ev.naddr)
      assert.equal(ev.nsize, o.size)
      assert.equal(h.net(h.at(events, '@cdata.lua:' .. line)), o.size)
      assert.is_true(o.size > payload)
    end
    -- A VLA: its block starts with the length header, below the object.
    local o, ev = at_line(5)
    assert.equal(ev.nsize, o.size)
    assert.is_true(o.addr > ev.naddr)
    assert.equal(h.net(h.at(events, '@cdata.lua:5')), o.size)
    -- A 64-bit constant, a prototype's constant made by the parser.
    local pt = refs(s, addr(vals[5]), 'proto')[1].to
    local k = refs(s, pt, 'constant')
    assert.equal(1, #k)
    local kobj, made = s.objects[k[1].to], nil
    for _, e in ipairs(events) do
      if e.kind == 'alloc' and e.naddr == kobj.addr then made = e end
    end
    assert.equal('cdata', kobj.type)
    assert.equal(made.nsize, kobj.size)
    assert.equal(s.objects[select(2, at_line(2)).naddr].size, kobj.size)
  end)

  it('allocates nothing in the VM and runs no metamethod', function()
    local path = h.tmpname('.heap')
    local options = { format = 'heap' }
    local called = 0
    local trap = setmetatable({}, {
      __index = function() called = called + 1 end,
      __pairs = function() called = called + 1 end,
      __mode = 'k',
    })
    collectgarbage('stop')
    local before = collectgarbage('count')
    local ok = memprof.snapshot(path, options)
    local after = collectgarbage('count')
    collectgarbage('restart')
    assert.is_true(ok)
    assert.equal(before, after)
    assert.equal(0, called)
    local s = load(path)
    os.remove(path)
    assert.is_true(s.objects[addr(trap)].weak_keys)
  end)

  it('notes a running profile and records no event of its own', function()
    local path = h.tmpname('.heap')
    local chunk = h.chunk('local snapshot, path, options = ...\n' ..
      'return snapshot(path, options)\n', '@snap.lua')
    local options = { format = 'heap' }
    local ok
    local events = h.profile(function()
      ok = chunk(memprof.snapshot, path, options)
    end)
    assert.is_true(ok)
    assert.same({}, h.at(events, '@snap.lua:2'))
    local s = load(path)
    os.remove(path)
    assert.is_true(s.header.profile.written > 0)
    local plain = snapshot()
    assert.is_nil(plain.header.profile)
  end)

  it('follows userdata, C closures and frames of vararg functions', function()
    local proxy = newproxy(true)
    getmetatable(proxy).__index = { 'proxied' }
    -- tostring names a built-in by its number: a table finds it.
    local holder = {
      wrapped = coroutine.wrap(function() coroutine.yield() end),
    }
    holder.wrapped()
    local varargs = coroutine.create(function(...)
      local inner = { ... }
      coroutine.yield(inner)
    end)
    local _, inner = coroutine.resume(varargs, { 'first' }, { 'second' })
    local s = snapshot()
    -- tostring shows a userdata's payload, which follows its header.
    local ud
    for _, o in ipairs(s.list) do
      if o.type == 'userdata' and o.addr + o.size - o.len == addr(proxy) then
        ud = o
      end
    end
    assert.equal(0, ud.len)
    local mt = refs(s, ud.addr, 'metatable')
    assert.equal(addr(getmetatable(proxy)), mt[1].to)
    assert.equal(1, #refs(s, ud.addr, 'env'))
    -- coroutine.wrap's function is a C closure holding its thread.
    local fn = s.objects[field(s, addr(holder), 'wrapped')]
    assert.is_true(fn.ffid > 0)
    local up = refs(s, fn.addr, 'upvalue')
    assert.equal(1, #up)
    assert.equal('thread', s.objects[up[1].to].type)
    assert.equal('', up[1].name)
    -- A vararg function's frame: its local, and its varargs.
    assert.equal(addr(inner), refs(s, addr(varargs), 'stack', 'inner')[1].to)
    assert.equal(2, #refs(s, addr(varargs), 'stack', '(vararg)'))
  end)

  it('writes the line each Lua frame of a thread runs', function()
    local lines = {}
    local co = coroutine.create(h.chunk([[
local lines = ...
local function inner()
  lines.inner = debug.getinfo(1, 'l').currentline + 1
  coroutine.yield()
end
local function varargs(...)
  lines.varargs = debug.getinfo(1, 'l').currentline + 1
  inner(...)
end
lines.body = debug.getinfo(1, 'l').currentline + 1
varargs(1, 2)
]], '@frames.lua'))
    coroutine.resume(co, lines)
    local s = snapshot()
    local by_level = {}
    for _, r in ipairs(refs(s, addr(co), 'frame_function')) do
      by_level[r.level] = by_level[r.level] or {}
      table.insert(by_level[r.level], r.line or 0)
    end
    -- coroutine.yield, a C function, runs no line; a vararg frame's two
    -- parts (the chunk's and varargs') the same one.
    assert.same({ { 0 }, { lines.inner }, { lines.varargs, lines.varargs },
      { lines.body, lines.body } }, by_level)
  end)

  it('walks functions without debug info', function()
    local stripped = loadstring(string.dump(function()
      local hidden = { 'no name' }
      coroutine.yield(hidden)
    end, true))
    local co = coroutine.create(stripped)
    local _, hidden = coroutine.resume(co)
    local s = snapshot()
    local slots = refs(s, addr(co), 'stack')
    local found
    for _, r in ipairs(slots) do
      if r.to == addr(hidden) then found = r end
    end
    assert.equal('', found.name)
    assert.is_true(found.level >= 1)
  end)

  it('writes every reference between objects it wrote', function()
    local s = snapshot()
    assert.equal(#s.list, s.epilogue.objects)
    assert.equal(#s.refs, s.epilogue.refs)
    for _, r in ipairs(s.refs) do
      if r.from ~= 0 then assert.is_not_nil(s.objects[r.from]) end
      if not r.weak then assert.is_not_nil(s.objects[r.to]) end
      if r.kind == 'field' then
        assert.equal('string', s.objects[r.key].type)
      end
    end
    -- Bounded C memory: the walk's tables for this many objects.
    assert.is_true(s.epilogue.c_bytes < 200000 + 100 * #s.list)
  end)

  it('is in misc.memprof too, where the module installed it', function()
    local misc = _G.misc
    if tostring(misc.memprof.start):match('^function: builtin#') then
      return -- The host's own misc.memprof (Tarantool) is kept.
    end
    local path = h.tmpname('.heap')
    assert.is_true(misc.memprof.snapshot(path, { format = 'heap' }))
    local s = load(path)
    os.remove(path)
    assert.is_true(#s.list > 0)
  end)

  it('counts the JIT traces alive', function()
    if not (jit and jit.status()) then return end
    jit.on()
    local loop = h.chunk('local t = {} for i = 1, 1000 do t[i % 7] = i end',
      '@hot.lua')
    loop()
    loop()
    local hot = snapshot()
    jit.flush()
    jit.off()
    local none = snapshot()
    if not memprof.info().traces then -- the trace array is not verified
      assert.same({}, { hot.header.traces, none.header.traces })
      return
    end
    assert.is_true(hot.header.traces >= 1)
    assert.equal(0, none.header.traces)
  end)

  -- Whether this build's traces are visited, and if not the header's
  -- reason: every build whose trace array is verified visits them.
  local function traces_expected()
    if not memprof.info().traces then
      return false, 'the trace array is not verified'
    end
    return true
  end

  local function tracek_addr(traceno, ref)
    return addr((require('jit.util').tracek(traceno, ref)))
  end

  it('finds what only a compiled trace keeps, held by that trace',
    function()
    local loop, holder = h.chunk([[
      local holder = { f = function(x) return x + 1 end }
      local function loop(n)
        local s = 0
        for i = 1, n do s = s + holder.f(i) end
        return s
      end
      return loop, holder]], '@kept.lua')()
    jit.on()
    finally(function() jit.off() end)
    loop(300)
    jit.off()
    local closure = addr(holder.f)
    holder.f = nil -- Now only the trace's constant holds it.
    local s = snapshot()
    local visited, why = traces_expected()
    assert.equal(visited, s.header.traces_visited)
    assert.equal(why, s.header.traces_why)
    assert.is_true(s.header.traces >= 1)
    if not visited then -- Not seen, as before traces were visited.
      assert.is_nil(s.objects[closure])
      for _, o in ipairs(s.list) do assert.not_equal('trace', o.type) end
      return
    end
    local held = s.to[closure]
    assert.equal(1, #held)
    assert.equal('constant', held[1].kind)
    local trace = s.objects[held[1].from]
    assert.equal('trace', trace.type)
    assert.is_true(trace.size > 0)
    -- The constant is the IR reference jit.util.tracek reads it at (in a
    -- frame of its own, which no later snapshot sees).
    assert.equal(closure, tracek_addr(trace.traceno, -held[1].index))
    -- The trace is held by the prototype it starts in, and holds it.
    local pt = refs(s, addr(loop), 'proto')[1].to
    assert.same({ trace.addr }, (function()
      local out = {}
      for _, r in ipairs(refs(s, pt, 'trace')) do out[#out + 1] = r.to end
      return out
    end)())
    assert.equal(pt, refs(s, trace.addr, 'proto')[1].to)
    assert.equal(1, #s.to[trace.addr])
    -- After jit.flush() no trace holds it, and it is gone.
    jit.flush()
    local after = snapshot()
    assert.is_nil(after.objects[closure])
    assert.is_nil(after.objects[trace.addr])
    assert.same({}, refs(after, pt, 'trace'))
    assert.equal(0, after.header.traces)
  end)

  it('shows a side trace held by its root trace', function()
    local loop, holder = h.chunk([[
      local holder = { f = function(x) return x + 1 end,
        g = function(x) return x - 1 end }
      local function loop(n)
        local s = 0
        for i = 1, n do
          if i > 100 then s = s + holder.g(i) else s = s + holder.f(i) end
        end
        return s
      end
      return loop, holder]], '@side.lua')()
    jit.on()
    finally(function() jit.off() end)
    loop(300) -- The root trace takes f; its exit to g becomes a side trace.
    jit.off()
    local g = addr(holder.g)
    holder.g = nil
    local s = snapshot()
    if not traces_expected() then
      assert.is_nil(s.objects[g])
      return
    end
    local held = s.to[g]
    assert.equal(1, #held)
    assert.equal('constant', held[1].kind)
    local side = s.objects[held[1].from]
    assert.equal('trace', side.type)
    local by = s.to[side.addr]
    assert.equal(1, #by)
    assert.equal('trace', by[1].kind)
    local root = s.objects[by[1].from]
    assert.equal('trace', root.type)
    assert.not_equal(root.traceno, side.traceno)
    local pt = refs(s, addr(loop), 'proto')[1].to
    local held_by_pt = {}
    for _, r in ipairs(refs(s, pt, 'trace')) do
      held_by_pt[#held_by_pt + 1] = r.to
    end
    assert.same({ root.addr }, held_by_pt)
    -- The root trace holds f, which the table holds too.
    local f = addr(holder.f)
    assert.equal(1, #refs(s, addr(holder), 'field', 'f'))
    local from_root = 0
    for _, r in ipairs(s.to[f]) do
      if r.from == root.addr then from_root = from_root + 1 end
    end
    assert.equal(1, from_root)
    jit.flush()
  end)

  it("writes a stitched trace's reference to itself", function()
    local loop = h.chunk([[
      local clock = os.clock
      return function(n)
        local s = 0
        for i = 1, n do s = s + clock() end
        return s
      end]], '@stitched.lua')()
    jit.on()
    finally(function()
      jit.off()
      jit.flush()
    end)
    loop(300) -- A call the compiler does not compile: the trace stitches.
    jit.off()
    local s = snapshot()
    if not traces_expected() then return end
    local pt = refs(s, addr(loop), 'proto')[1].to
    local own = 0
    for _, r in ipairs(refs(s, pt, 'trace')) do
      for _, c in ipairs(refs(s, r.to, 'constant')) do
        if c.to == r.to then own = own + 1 end
      end
    end
    assert.equal(1, own)
  end)

  it('walks coroutines that yielded inside a stitched trace', function()
    -- coroutine.yield is not compiled: the trace stitches, and each
    -- coroutine's stack keeps the continuation, its slot holding the trace.
    local make = h.chunk([[
      local list = {}
      for i = 1, 300 do
        list[i] = coroutine.create(function(x)
          local pending = { x }
          coroutine.yield(pending)
        end)
        coroutine.resume(list[i], i)
      end
      return list]], '@yielding.lua')
    jit.on()
    finally(function()
      jit.off()
      jit.flush()
    end)
    local list = make()
    jit.off()
    local s = snapshot()
    local found = 0
    for i, co in ipairs(list) do
      local slots = refs(s, addr(co), 'stack', 'pending')
      if #slots == 1 and s.objects[slots[1].to].type == 'table' then
        found = found + 1
      end
      assert.equal('thread', s.objects[addr(co)].type, i)
    end
    assert.equal(#list, found)
    if not traces_expected() then return end
    local stitched = 0
    for _, co in ipairs(list) do
      for _, r in ipairs(refs(s, addr(co), 'stack')) do
        if s.objects[r.to].type == 'trace' then stitched = stitched + 1 end
      end
    end
    assert.is_true(stitched > 0)
  end)

  it('collects first with collect = true', function()
    local weak = setmetatable({}, { __mode = 'v' })
    collectgarbage('stop')
    local function fill(w) w[1] = { 'garbage' } end
    fill(weak)
    local before = snapshot()
    local after = snapshot({ format = 'heap', collect = true })
    collectgarbage('restart')
    local dead = refs(before, addr(weak), 'index')
    assert.equal(1, #dead)
    assert.is_true(dead[1].weak)
    assert.is_nil(before.objects[dead[1].to])
    assert.same({}, refs(after, addr(weak), 'index'))
  end)
end)

describe('heap snapshot refusals', function()
  it('refuses a bad path and leaves no file', function()
    local path = '/nonexistent-dir/heap.bin'
    local ok, msg, err = memprof.snapshot(path, { format = 'heap' })
    assert.is_nil(ok)
    assert.equal(path .. ': No such file or directory', msg)
    assert.equal(2, err)
  end)

  it("never replaces the running profile's own file", function()
    local path = h.tmpname()
    assert.is_true(memprof.start(path))
    local result = { memprof.snapshot(path, { format = 'heap' }) }
    assert.is_true(memprof.stop())
    local events = h.read(path)
    os.remove(path)
    assert.same({ nil, "a snapshot cannot replace the running profile's " ..
      'own file: ' .. path, 22 }, result)
    assert.is_true(#events > 0)
  end)

  it('refuses bad options before opening the file', function()
    local path = h.tmpname('.heap')
    local cases = {
      { { format = 'heaps' }, "option 'format' must be 'pprof', 'memprof' " ..
        "or 'heap', got 'heaps'" },
      { { format = 'heap', collect = 1 },
        "option 'collect' must be a boolean, got number" },
      { { format = 'pprof', collect = true },
        "option 'collect' is for format 'heap' only" },
    }
    for _, case in ipairs(cases) do
      local ok, msg, err = memprof.snapshot(path, case[1])
      assert.is_nil(ok)
      assert.equal(case[2], msg)
      assert.equal(22, err)
      assert.is_nil(io.open(path))
    end
  end)
end)

describe('the heap snapshot reader', function()
  local good

  teardown(function()
    good = nil -- a whole snapshot: later specs' snapshots would show it
  end)

  -- The snapshot of a fresh VM (a child's: this suite's heap would make
  -- a file a hundred times larger, read a hundred times below).
  setup(function()
    local path = h.tmpname('.heap')
    local out, code = h.run_script('package.cpath = ' ..
      string.format('%q', package.cpath) .. '\n' ..
      "jit.off() jit.flush() -- no trace: the header's count is one byte\n" ..
      "assert(require('memprof').snapshot(" .. string.format('%q', path) ..
      ", { format = 'heap' }))\n")
    assert.are.same({ '', 0 }, { out, code })
    local f = assert(io.open(path, 'rb'))
    good = f:read('*a')
    f:close()
    os.remove(path)
  end)

  -- The header of a snapshot's bytes.
  local function heap_header(bytes)
    local path = h.tmpname('.heap')
    local f = assert(io.open(path, 'wb'))
    f:write(bytes)
    f:close()
    local s = load(path)
    os.remove(path)
    return s.header
  end

  -- A number's unsigned LEB128 bytes.
  local function uleb(v)
    local out = {}
    repeat
      local b = v % 128
      v = (v - b) / 128
      out[#out + 1] = string.char(v > 0 and b + 128 or b)
    until v == 0
    return table.concat(out)
  end

  -- Reads `bytes` as a snapshot; returns the error.
  local function read_error(bytes)
    local path = h.tmpname('.heap')
    local f = assert(io.open(path, 'wb'))
    f:write(bytes)
    f:close()
    local ok, err = pcall(load, path)
    os.remove(path)
    assert.is_false(ok)
    return (err:gsub('^[^:]*: ', ''))
  end

  it('names the byte where a cut file ends', function()
    local step = math.max(1, math.floor(#good / 97))
    for cut = 0, #good - 1, step do
      local err = read_error(good:sub(1, cut))
      assert.matches('^byte ' .. cut .. ': the file is truncated: expected ',
        err)
    end
    assert.matches('^byte ' .. (#good - 1) .. ': the file is truncated: ' ..
      'expected the end magic "end"$', read_error(good:sub(1, -2)))
  end)

  it('reads a version 1 file, written before traces were visited',
    function()
    local header = heap_header(good)
    local why = header.traces_why
    local skip = 1 + (why and #uleb(#why) + #why or 0)
    -- Its header alone: the records of version 1 had no frame's line.
    local path = h.tmpname('.heap')
    local f = assert(io.open(path, 'wb'))
    f:write('ljh\1' .. good:sub(5, 7) .. good:sub(8 + skip))
    f:close()
    local r = require('memprof.read.heap_snapshot').open(path)
    local old = r.header
    r:close()
    os.remove(path)
    assert.is_false(old.traces_visited)
    assert.is_nil(old.traces_why)
    assert.same({ header.time, header.pid, header.traces },
      { old.time, old.pid, old.traces })
  end)

  it('names the byte of a corrupt header or record', function()
    assert.equal('byte 0: expected the magic "ljh" of a heap snapshot, ' ..
      'got "ljm"', read_error('ljm' .. good:sub(4)))
    assert.equal('byte 3: expected version 1 to 3, got 9',
      read_error('ljh\9' .. good:sub(5)))
    -- Magic, version, flags, profile note 0, traces, whether they were
    -- visited (or why not), time, pid.
    local header = heap_header(good)
    local why = header.traces_why
    local n = 8 + (why and #uleb(#why) + #why or 0) + #uleb(header.time) +
      #uleb(header.pid)
    local body = good:sub(1, n)
    local function at(k, text) return 'byte ' .. (n + k) .. ': ' .. text end
    assert.equal(at(0, 'expected a record (1: object, 2: reference, ' ..
      '127: end), got 9'), read_error(body .. '\9'))
    assert.equal(at(3, 'expected a reference kind from 1 to 18, got 99'),
      read_error(body .. '\2\0\0\99'))
    assert.equal(at(2, 'expected an object type, got 3'),
      read_error(body .. '\1\8\3\0'))
    assert.equal(at(4, 'the epilogue counts 1 objects and 0 references, ' ..
      'the file has 0 and 0'), read_error(body .. '\127\1\0\0end'))
  end)
end)
