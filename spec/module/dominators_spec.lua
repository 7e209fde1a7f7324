-- What holds the memory of a heap snapshot: dominators, retained sizes and
-- paths (lua/memprof/analysis/dominators.lua) on known graphs.
local h = require('helpers.profile')
local memprof = require('memprof')
local load = require('helpers.heap_load')
local dom = require('memprof.analysis.dominators')

local OPTIONS = { format = 'heap' }

local function addr(v)
  return tonumber(tostring(v):match('0x(%x+)'), 16)
end

local function analyse()
  local path = h.tmpname('.heap')
  assert(memprof.snapshot(path, OPTIONS))
  local a, s = dom.analyse_file(path), load(path)
  os.remove(path)
  return a, s
end

-- Collects until a collection frees nothing more (the collector also
-- shrinks its buffers and stacks a step at a time).
local function settle()
  local last
  repeat
    last = collectgarbage('count')
    collectgarbage()
  until collectgarbage('count') == last
end

local function size(s, a)
  return s.objects[a].size
end

describe('dominators of a heap snapshot', function()
  setup(function()
    jit.off()
    jit.flush() -- what traces keep is freed with their prototypes only
  end)

  teardown(function()
    jit.on()
  end)

  after_each(function()
    package.loaded.catalog = nil
  end)

  it('retains what a full collection frees when the holder goes', function()
    local make = h.chunk([[
local holder = {}
for i = 1, 200 do
  holder[i] = { name = 'unique name ' .. i, list = { i, i + 1 } }
end
return holder
]], '@holder.lua')
    -- One made and dropped first: if the string table is to shrink when
    -- 200 strings go (the collector halves it below a quarter full), it
    -- shrinks now, not inside the measure.
    make()
    settle()
    local holder = make()
    local at = addr(holder)
    local path = h.tmpname('.heap')
    settle()
    assert(memprof.snapshot(path, OPTIONS))
    local before = collectgarbage('count')
    holder = nil
    settle()
    local freed = (before - collectgarbage('count')) * 1024
    local a = dom.analyse_file(path)
    os.remove(path)
    assert.is_true(freed > 200 * 3 * 32)
    assert.equal(freed, a.retained[at])
    assert.is_nil(holder)
  end)

  it('retains a cycle with its holder', function()
    local c = { x = {} }
    c.x.b = { a = c.x }
    local an, s = analyse()
    local a, b = c.x, c.x.b
    assert.equal(addr(c), an.idom[addr(a)])
    assert.equal(addr(a), an.idom[addr(b)])
    assert.equal(size(s, addr(c)) + size(s, addr(a)) + size(s, addr(b)),
      an.retained[addr(c)])
  end)

  it('lets neither of two holders retain what both hold', function()
    local shared = { 'shared' }
    local p1, p2 = { x = shared }, { y = shared }
    local an, s = analyse()
    assert.are_not.equal(addr(p1), an.idom[addr(shared)])
    assert.are_not.equal(addr(p2), an.idom[addr(shared)])
    assert.equal(size(s, addr(p1)), an.retained[addr(p1)])
    assert.equal(size(s, addr(p2)), an.retained[addr(p2)])
  end)

  it('never makes a weak table a holder', function()
    local weak = setmetatable({}, { __mode = 'v' })
    local obj = { 'held by a local' }
    weak[1] = obj
    local an, s = analyse()
    -- The weak table and its metatable, which nothing else holds.
    assert.equal(size(s, addr(weak)) + size(s, addr(getmetatable(weak))),
      an.retained[addr(weak)])
    assert.are_not.equal(addr(weak), an.idom[addr(obj)])
    assert.is_nil(an.path(addr(obj)):find('[1]', 1, true))
  end)

  it("names a closure's upvalue on the path to what it holds", function()
    local make = h.chunk([[
local history = {}
return function(x) history[#history + 1] = { x } end, tostring(history)
]], '@record.lua')
    local record, name = make()
    for i = 1, 5 do record(i) end
    local at = addr(name)
    local line = debug.getinfo(1, 'l').currentline + 1
    local an, s = analyse()
    -- The local of this function's frame, at the line of the snapshot.
    local here = debug.getinfo(1, 'S')
    assert.equal('main thread<local record in function at ' ..
      here.source .. ':' .. here.linedefined .. ', line ' .. line ..
      '><upvalue history>', an.path(at))
    -- The upvalue object and the table share a pattern: one group, whose
    -- bytes are the upvalue's (which retains the table).
    local uv = an.idom[at]
    for _, g in ipairs(an.groups) do
      if g.pattern == an.pattern[at] then
        assert.same({ upvalue = 1, table = 1 }, g.types)
        assert.equal(an.retained[uv], g.retained)
      end
    end
    local items = 0
    for _, r in ipairs(s.refs) do
      if r.from == at and r.kind == 'index' then
        items = items + size(s, r.to)
      end
    end
    -- The function, its upvalue, the table and its items.
    assert.is_true(an.retained[addr(record)] >=
      size(s, addr(record)) + size(s, at) + items)
  end)

  it('retains what a compiled trace keeps with the function it starts in',
    function()
    if not memprof.info().traces then
      return -- Traces are not visited (heap_walk_spec checks the header).
    end
    local loop, holder = h.chunk([[
      local holder = { f = function(x) return x + 1 end }
      local function loop(n)
        local s = 0
        for i = 1, n do s = s + holder.f(i) end
        return s
      end
      return loop, holder]], '@kept.lua')()
    jit.on()
    finally(function()
      jit.off()
      jit.flush()
    end)
    loop(300)
    jit.off()
    local closure = addr(holder.f)
    holder.f = nil
    local at = addr(loop)
    local path = h.tmpname('.heap')
    settle()
    assert(memprof.snapshot(path, OPTIONS))
    local before = collectgarbage('count')
    loop = nil
    settle()
    local freed = (before - collectgarbage('count')) * 1024
    local s, an = load(path), dom.analyse_file(path)
    os.remove(path)
    local trace = an.idom[closure]
    assert.equal('trace', s.objects[trace].type)
    assert.matches('<local loop in function at [^>]+, line %d+>' ..
      '<proto><trace><constant %d+>$', an.path(closure))
    -- The function, its prototype, the trace and the closure it keeps.
    assert.equal(freed, an.retained[at])
    assert.is_true(an.retained[at] >= size(s, at) + size(s, trace) +
      size(s, closure))
    assert.is_nil(loop)
  end)

  it('names the byte of a cut file', function()
    local path = h.tmpname('.heap')
    assert(memprof.snapshot(path, OPTIONS))
    local f = assert(io.open(path, 'rb'))
    local bytes = f:read('*a')
    f:close()
    f = assert(io.open(path, 'wb'))
    f:write(bytes:sub(1, 100))
    f:close()
    local ok, err = pcall(dom.analyse_file, path)
    os.remove(path)
    assert.is_false(ok)
    assert.matches(': byte 100: the file is truncated: expected ', err)
  end)

  it('groups the entries of a module-level cache under one pattern', function()
    local cache = {}
    package.loaded.catalog = { rendered_cache = cache }
    local bytes = 0
    for i = 1, 30 do cache['page' .. i] = ('<li>' .. i .. '</li>'):rep(40) end
    local an, s = analyse()
    for _, body in pairs(cache) do
      for _, o in ipairs(s.list) do
        if o.type == 'string' and o.len == #body and
            body:sub(1, #o.text) == o.text then
          bytes = bytes + o.size
        end
      end
    end
    local group
    for _, g in ipairs(an.groups) do
      if g.pattern == 'package.loaded["catalog"].rendered_cache[*]' then
        group = g
      end
    end
    assert.is_not_nil(group)
    assert.equal(30, group.objects)
    assert.same({ string = 30 }, group.types)
    assert.equal(bytes, group.retained)
    assert.equal('package.loaded["catalog"].rendered_cache',
      an.pattern[addr(cache)])
    assert.equal(0, an.idom[addr(debug.getregistry())])
  end)
end)
