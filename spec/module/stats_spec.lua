-- memprof.stats(): the totals the hook keeps since start (binding.c,
-- the counters of src/hook.c), against the stream they describe.
local h = require('helpers.profile')
local memprof = require('memprof')
local sampling = require('memprof.analysis.sampling')

local SOURCES = { 'internal', 'lua', 'c', 'trace' }

-- The stream's totals, as stats() gives them: by source, then overall.
local function stream_totals(events, weigh, last)
  local totals = {}
  for _, source in ipairs(SOURCES) do
    totals[source] = { allocs = 0, frees = 0, reallocs = 0, allocated = 0,
      freed = 0 }
  end
  for i = 1, last or #events do
    local ev = events[i]
    local t = totals[ev.source]
    local n = weigh and weigh(ev) or 1
    t[ev.kind .. 's'] = t[ev.kind .. 's'] + n
    t.allocated = t.allocated + ev.nsize * (weigh and weigh(ev, 'new') or 1)
    t.freed = t.freed + ev.osize * (weigh and weigh(ev, 'old') or 1)
  end
  return totals
end

describe('memprof.stats', function()
  setup(function()
    jit.off()
  end)

  teardown(function()
    jit.on()
  end)

  -- Some payloads run a full collection while they are profiled: the
  -- suite's own garbage is collected first, or their profile has a free
  -- for each block of it (a quarter of a GB of garbage left by the specs
  -- before, read back as events, ran a VM without GC64 out of memory).
  before_each(function()
    collectgarbage()
  end)

  after_each(function()
    if memprof.is_running() then memprof.stop() end
    collectgarbage('restart')
  end)

  it('fails when no profile runs', function()
    local ok, msg, err = memprof.stats()
    assert.are.same({ nil, 'profiler is not running', 22 }, { ok, msg, err })
  end)

  it('counts the events of Lua code as the stream records them', function()
    local path = h.tmpname()
    local payload = h.chunk([[
local t = {}
for i = 1, 300 do t[i] = { i } end
local s = string.rep('x', 5000)
t = nil
collectgarbage()
local marker = {}
return s, marker
]], '@payload.lua')
    assert.is_true(memprof.start(path))
    payload()
    local stats = memprof.stats()
    assert.is_true(memprof.stop())
    local events = h.read(path)
    os.remove(path)
    -- The stream up to the marker, the last allocation before stats().
    local marker = h.at(events, '@payload.lua:6')[1]
    local last
    for i, ev in ipairs(events) do
      if ev == marker then last = i end
    end
    local totals = stream_totals(events, nil, last)
    assert.are.same(totals.lua, stats.sources.lua)
    assert.are.same(totals.trace, stats.sources.trace)
    assert.is_true(stats.sources.lua.allocs > 300)
    assert.are.equal(stats.allocated - stats.freed, stats.net)
    local sum = 0
    for _, source in ipairs(SOURCES) do
      sum = sum + stats.sources[source].allocated
    end
    assert.are.equal(stats.allocated, sum)
    assert.is_nil(stats.sample_bytes)
    assert.is_nil(stats.live_bytes)
  end)

  it('counts internal events, which carry a kind in the extended ' ..
    'format, under internal', function()
    local path = h.tmpname()
    local payload = h.chunk([[
local t = {}
for i = 1, 300 do t[i] = { i } end
t = nil
collectgarbage()
collectgarbage('stop')
local marker = {}
return marker
]], '@internal.lua')
    assert.is_true(memprof.start(path, { timestamps = true }))
    payload()
    local stats = memprof.stats()
    assert.is_true(memprof.stop())
    collectgarbage('restart')
    local events = h.read(path)
    os.remove(path)
    local marker = h.at(events, '@internal.lua:6')[1]
    local last, collector = nil, 0
    for i, ev in ipairs(events) do
      if ev == marker then last = i end
      if not last and ev.name == 'INTERNAL (garbage collector)' then
        collector = collector + 1
      end
    end
    local totals = stream_totals(events, nil, last)
    assert.are.same(totals.internal, stats.sources.internal)
    -- The collection freed the 300 tables of line 2, and the events of
    -- the collector are named by their kind.
    assert.is_true(stats.sources.internal.frees >= 300)
    assert.is_true(collector >= 300)
  end)

  it('grows by the bytes of the events of one line', function()
    local ok, table_new = pcall(require, 'table.new')
    if not ok then
      table_new = function(n) local t = {} for i = 1, n do t[i] = 0 end return t end
    end
    local path = h.tmpname()
    local payload = h.chunk([[
local table_new = ...
local t = table_new(1000, 0)
return t
]], '@new.lua')
    collectgarbage('stop')
    assert.is_true(memprof.start(path))
    local before = memprof.stats()
    local t = payload(table_new)
    local after = memprof.stats()
    assert.is_true(memprof.stop())
    collectgarbage('restart')
    local events = h.read(path)
    os.remove(path)
    local line = stream_totals(h.at(events, '@new.lua:2')).lua
    assert.is_true(line.allocated > 8000)
    assert.are.equal(line.allocated,
      after.sources.lua.allocated - before.sources.lua.allocated)
    assert.are.equal(line.allocs,
      after.sources.lua.allocs - before.sources.lua.allocs)
    assert.are.equal(1000, #t + 1000 - #t)
  end)

  it('counts the allocator calls dropped after the size cap', function()
    local path = h.tmpname()
    collectgarbage('stop')
    assert.is_true(memprof.start(path, { max_bytes = 64 }))
    local t = {}
    for i = 1, 100 do t[i] = false end -- Past 64 bytes of stream.
    -- (A first call interns the names of its fields, which later calls
    -- find: in a fresh VM it allocates more than the calls measured.)
    memprof.stats()
    local d0 = memprof.stats().dropped
    local d1 = memprof.stats().dropped -- stats()'s own tables, k calls
    for i = 1, 100 do t[i] = {} end -- One allocator call each.
    local last = memprof.stats()
    local d2 = last.dropped
    memprof.stop()
    collectgarbage('restart')
    local size = #assert(io.open(path, 'rb')):read('*a')
    os.remove(path)
    assert.is_true(d0 > 0)
    assert.are.equal((d1 - d0) + 100, d2 - d1)
    -- The stream up to the cut, then the epilogue at stop.
    assert.are.equal(size - 1, last.bytes_written)
    assert.is_true(size <= 64)
  end)

  it('counts no event past the size cap', function()
    local path = h.tmpname()
    collectgarbage('stop')
    assert.is_true(memprof.start(path, { max_bytes = 64, stack_depth = 8 }))
    local t = {}
    for i = 1, 5000 do t[i] = {} end
    local stats = memprof.stats()
    memprof.stop()
    collectgarbage('restart')
    local size = #assert(io.open(path, 'rb')):read('*a')
    local totals = stream_totals(h.read(path))
    os.remove(path)
    for _, source in ipairs(SOURCES) do
      assert.are.same(totals[source], stats.sources[source])
    end
    assert.are.equal(size - 1, stats.bytes_written)
    assert.is_true(size <= 64)
  end)

  it('says how many bytes the profile has written so far', function()
    local path = h.tmpname()
    assert.is_true(memprof.start(path, { stack_depth = 4 }))
    local first = memprof.stats().bytes_written
    local t = {}
    for i = 1, 1000 do t[i] = { i } end
    local second = memprof.stats().bytes_written
    assert.is_true(memprof.stop())
    local size = #assert(io.open(path, 'rb')):read('*a')
    os.remove(path)
    -- The two headers at least; then each of the 1000 events.
    assert.is_true(first >= 15)
    assert.is_true(second - first > 1000 * 4)
    assert.is_true(second <= size)
  end)

  it('estimates with sampling, as the reports do', function()
    local path = h.tmpname()
    local payload = h.chunk([[
local keep = {}
for i = 1, 2000 do keep[i] = string.rep('s', 100 + i % 300) .. i end
for i = 1, 1000 do keep[i] = nil end
collectgarbage()
return keep
]], '@sampled.lua')
    assert.is_true(memprof.start(path, { sample_bytes = 1000, seed = 3 }))
    local keep = payload()
    -- Stopped before any assertion: luassert's `assert.is_true` makes Lua
    -- objects when it is looked up, and one of them may be sampled.
    local stats = memprof.stats()
    local stopped = memprof.stop()
    assert.is_true(stopped)
    local events, stream = h.read(path)
    os.remove(path)
    assert.are.equal(1000, stats.sample_bytes)
    -- stats() itself allocated after its totals were read.
    assert.is_true(#events >= stats.samples)
    local function weigh(ev, which)
      if which == 'old' or (which == nil and ev.kind == 'free') then
        return sampling.weight(ev.osize, 1000)
      end
      return sampling.weight(ev.nsize, 1000)
    end
    local lua = stream_totals(events, weigh).lua
    for _, field in ipairs({ 'allocs', 'frees', 'reallocs', 'allocated',
      'freed' }) do
      assert.is_true(math.abs(lua[field] - stats.sources.lua[field]) <= 1,
        field .. ': ' .. lua[field] .. ' in the stream, ' ..
        stats.sources.lua[field] .. ' in stats')
    end
    assert.are.equal(1000, stream.sample_bytes)
    assert.is_true(stats.live_bytes > 100 * 1000)
    assert.is_true(stats.live_blocks > 900 and stats.live_blocks < 1100 + 50)
    assert.are.equal(1000, #keep + 1000 - #keep)
  end)
end)
