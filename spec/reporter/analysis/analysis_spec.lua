-- Specs for the analysis passes (memprof.analysis.heap, memprof.analysis.sites) and the
-- driver (memprof.analysis.analyze).

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local heap = require('memprof.analysis.heap')
local B = require('helpers.stream_builder')
local crafted = B.crafted

local BEFORE = heap.BEFORE_PROFILING.name

local function run(builder, opts)
  return analyze.run(reader.from_string(builder:bytes(), 'out.bin'), opts)
end

-- Heap stats by site name: { name = { holds, allocs, reallocs, frees } }.
local function heap_by_name(result)
  local by_name = {}
  for _, stats in ipairs(result.heap:stats_list()) do
    local row = by_name[stats.site.name] or { 0, 0, 0, 0 }
    row[1] = row[1] + stats.holds
    row[2] = row[2] + stats.allocs
    row[3] = row[3] + stats.reallocs
    row[4] = row[4] + stats.frees
    by_name[stats.site.name] = row
  end
  return by_name
end

-- Sites records of one kind by name: { name = { count, plus, minus,
-- overrides = { name = count } } }.
local function sites_by_name(result, kind)
  local by_name = {}
  for _, record in ipairs(result.sites.kinds[kind]) do
    local row = by_name[record.site.name] or { 0, 0, 0, overrides = {} }
    row[1] = row[1] + record.count
    row[2] = row[2] + record.plus
    row[3] = row[3] + record.minus
    for _, owner in ipairs(record.overrides) do
      row.overrides[owner.name] = (row.overrides[owner.name] or 0) +
        record.override_count[owner]
    end
    by_name[record.site.name] = row
  end
  return by_name
end


describe('heap pass', function()
  it('tracks holds, allocs, reallocs and frees per site', function()
    local result = run(crafted())
    assert.are.same({
      ['@test.lua:5'] = { 128, 3, 0, 1 },
      ['@test.lua:6'] = { 0, 1, 0, 1 },
      ['@test.lua:7'] = { 128, 1, 1, 0 },
      [BEFORE] = { -100, 0, 0, 1 },
      ['TRACE started at @test.lua:5'] = { 16, 1, 0, 0 },
      ['io_write'] = { 0, 1, 0, 1 },
    }, heap_by_name(result))
    assert.are.equal(172, result.heap.total)
  end)

  it('lists the live blocks with the site that gave them their size',
    function()
      local blocks = run(crafted()).blocks:live_blocks()
      local list = {}
      for i, block in ipairs(blocks) do
        list[i] = { block.addr, block.size, block.site.name }
      end
      assert.are.same({
        { 0x2000, 64, '@test.lua:5' },
        { 0x3000, 64, '@test.lua:5' },
        { 0x5000, 128, '@test.lua:7' },
        { 0x6000, 16, 'TRACE started at @test.lua:5' },
      }, list)
    end)

  it('forgets the live blocks after the passes when asked', function()
    -- The passes' finish still sees them: the cumulative view counts
    -- the live blocks of each function.
    local result = run(crafted(), { live_blocks = false, group = 'function' })
    local live = 0
    for _, row in ipairs(result.cumulative.rows) do
      live = live + row.live_blocks
    end
    assert.are.equal(4, live)
    local ok, err = pcall(result.blocks.live_blocks, result.blocks)
    assert.is_false(ok)
    assert.truthy(err:find('the live blocks are not kept ' ..
      '(memprof.analysis.analyze option live_blocks = false)', 1, true))
    assert.are.equal(4, #run(crafted(), { group = 'function' }).blocks
      :live_blocks())
  end)

  it('keeps no facts of each block when only the heap and sites passes ' ..
    'need them, with the same figures', function()
      local function figures(result)
        local list = {}
        for i, stats in ipairs(result.heap:stats_list()) do
          list[i] = { stats.site.name, stats.holds, stats.allocs,
            stats.reallocs, stats.frees }
        end
        return list
      end
      -- The facts the passes are handed, by pass.
      local function facts_seen(opts)
        local seen = {}
        opts.passes = opts.passes or {}
        opts.passes[#opts.passes + 1] = { name = 'spy', pass = {
          feed = function(_, _, _, _, _, _, _, _, _, facts)
            seen[#seen + 1] = type(facts)
          end } }
        return seen
      end
      local bare = run(crafted(), { live_blocks = false })
      local full = run(crafted())
      assert.are.same({ false, true }, { bare.blocks.keeps_facts,
        full.blocks.keeps_facts })
      assert.are.same(figures(full), figures(bare))
      assert.are.equal(6, #figures(bare))
      for _, kind in ipairs({ 'alloc', 'realloc', 'free' }) do
        assert.are.same(sites_by_name(full, kind), sites_by_name(bare, kind))
      end
      assert.are.same({ full.heap.total, 172 }, { bare.heap.total,
        full.heap.total })
      -- Any other pass, a view or rows by group need them.
      for _, opts in ipairs({ { views = { leaks = true } },
          { group = 'function' }, {} }) do
        opts.live_blocks = false
        local seen = facts_seen(opts)
        run(crafted(), opts)
        assert.are.same({ 10, 'table' }, { #seen, seen[1] })
      end
    end)

  it('reads the events as values, and a stream that has only next()',
    function()
      -- A stream whose next() and next_values() are counted.
      local function counted(builder, values)
        local stream = reader.from_string(builder:bytes(), 'out.bin')
        local calls = { next = 0, next_values = 0 }
        local proxy = setmetatable({}, { __index = stream })
        for _, name in ipairs({ 'next', 'next_values' }) do
          proxy[name] = function(self)
            calls[name] = calls[name] + 1
            return stream[name](self)
          end
        end
        if not values then
          proxy.next_values = false
        end
        return proxy, calls
      end
      local stream, calls = counted(crafted(), true)
      local valued = analyze.run(stream, { live_blocks = false })
      -- (next() twice: after each of the stream's two symbol events the
      -- reader reads on with it, and gives its event as values.)
      assert.are.same({ next = 2, next_values = 11 }, calls)
      local full = run(crafted())
      assert.are.same(heap_by_name(full), heap_by_name(valued))
      assert.are.equal(full.heap.total, valued.heap.total)
      for _, kind in ipairs({ 'alloc', 'realloc', 'free' }) do
        assert.are.same(sites_by_name(full, kind),
          sites_by_name(valued, kind))
      end
      -- Every analysis reads values: a sampled one, a view, a grouping.
      for _, opts in ipairs({ { views = { peak = true } },
          { group = 'function' }, {} }) do
        stream, calls = counted(opts.views and B.sampled() or crafted(), true)
        analyze.run(stream, opts)
        assert.are.equal(0, calls.next - (opts.views and 0 or 2))
      end
      -- A stream with next() only is read through it (10 events and the
      -- end, and after the 2 symbol events).
      stream, calls = counted(crafted(), false)
      local nexted = analyze.run(stream)
      assert.are.same({ next = 13, next_values = 0 }, calls)
      assert.are.same(heap_by_name(full), heap_by_name(nexted))
    end)

  it('charges blocks released but never allocated to a pseudo-site',
    function()
      local s = B.new():events()
      s:free(B.internal(), 0x10, 40):realloc(B.internal(), 0x20, 8, 0x30, 16)
      s:free(B.internal(), 0x30, 16):epilogue()
      local result = run(s)
      assert.are.same({ [BEFORE] = { -48, 0, 0, 2 },
        INTERNAL = { 0, 1, 1, 1 } }, heap_by_name(result))
      assert.are.equal(-48, result.heap.total)
    end)

  it('follows a block through several reallocations', function()
    local s = B.new():lfunc(0x100, '@a.lua', 1):events()
    s:alloc(B.lua(0x100, 1), 0xa0, 10)
    s:realloc(B.lua(0x100, 2), 0xa0, 10, 0xb0, 20)
    s:realloc(B.lua(0x100, 3), 0xb0, 20, 0xa0, 40)
    s:realloc(B.lua(0x100, 3), 0xa0, 40, 0xa0, 80) -- grown in place
    s:epilogue()
    local result = run(s)
    assert.are.same({
      ['@a.lua:1'] = { 0, 1, 0, 1 },
      ['@a.lua:2'] = { 0, 1, 1, 1 },
      ['@a.lua:3'] = { 80, 2, 2, 1 },
    }, heap_by_name(result))
    local blocks = result.blocks:live_blocks()
    assert.are.equal(1, #blocks)
    assert.are.same({ 0xa0, 80, '@a.lua:3' }, { blocks[1].addr,
      blocks[1].size, blocks[1].site.name })
  end)
end)

describe('heap pass, block facts', function()
  it('hands the passes a release record of the released block', function()
    local seen = {}
    local pass = { feed = function(_, kind, _, _, _, _, _, _, owner_id,
        facts)
      seen[#seen + 1] = { kind, owner_id or -1,
        owner_id and facts.owner.name or '-',
        owner_id and facts.owner_stack and facts.owner_stack.id or 0,
        owner_id and facts.age or -1, owner_id and facts.size or 0,
        facts.total, facts.offset > 0 }
    end }
    local s = B.new():lfunc(0x100, '@a.lua', 1):events({ version = B.EXTENDED })
    s:stack(1, { B.lua(0x100, 2), B.lua(0x100, 9) })
    s:alloc(B.lua(0x100, 2, 1), 0x10, 8)
    s:alloc(B.lua(0x100, 3), 0x20, 16)
    s:realloc(B.lua(0x100, 4), 0x10, 8, 0x30, 24)
    s:free(B.internal(), 0x20, 16)
    s:free(B.internal(), 0x30, 24)
    s:free(B.internal(), 0x40, 4)
    s:epilogue()
    local result = run(s, { passes = { { name = 'log', pass = pass } } })
    local ids = {}
    for _, stats in ipairs(result.heap:stats_list()) do
      ids[stats.site.name] = stats.site[1]
    end
    assert.are.same({
      { 'alloc', -1, '-', 0, -1, 0, 8, true },
      { 'alloc', -1, '-', 0, -1, 0, 24, true },
      { 'realloc', ids['@a.lua:2'], '@a.lua:2', 1, 1, 8, 40, true },
      { 'free', ids['@a.lua:3'], '@a.lua:3', 0, 1, 16, 24, true },
      { 'free', ids['@a.lua:4'], '@a.lua:4', 0, 0, 24, 0, true },
      { 'free', 0, BEFORE, 0, -1, 0, -4, true },
    }, seen)
  end)

  it('lists live blocks with their stack and birth', function()
    local s = B.new():lfunc(0x100, '@a.lua', 1):events({ version = B.EXTENDED })
    s:stack(1, { B.lua(0x100, 2) })
    s:alloc(B.lua(0x100, 2, 1), 0x10, 8)
    s:alloc(B.lua(0x100, 3), 0x20, 16)
    s:epilogue()
    local blocks = run(s).blocks:live_blocks()
    assert.are.same({ { 0x10, 8, '@a.lua:2', 1, 1 }, { 0x20, 16, '@a.lua:3',
      0, 2 } }, { { blocks[1].addr, blocks[1].size, blocks[1].site.name,
        blocks[1].stack.id, blocks[1].born }, { blocks[2].addr, blocks[2].size,
        blocks[2].site.name, blocks[2].stack and 1 or 0, blocks[2].born } })
  end)

  it('stays right after dropping the addresses of many freed blocks',
    function()
      local s = B.new():lfunc(0x100, '@a.lua', 1):events()
      s:alloc(B.lua(0x100, 1), 0x10, 5)
      for i = 1, 70000 do
        s:alloc(B.lua(0x100, 2), 0x1000 + i * 16, 16)
        s:free(B.internal(), 0x1000 + i * 16, 16)
      end
      -- An address freed long ago is used again.
      s:alloc(B.lua(0x100, 3), 0x1000 + 16, 7)
      s:epilogue()
      local result = run(s)
      local list = {}
      for i, block in ipairs(result.blocks:live_blocks()) do
        list[i] = { block.addr, block.size, block.site.name }
      end
      assert.are.same({ { 0x10, 5, '@a.lua:1' }, { 0x1010, 7, '@a.lua:3' } },
        list)
      assert.are.equal(12, result.heap.total)
      assert.are.equal(2, result.blocks.slot_count)
    end)
end)

describe('sites pass', function()
  it('counts events and bytes per kind and site, with overrides', function()
    local result = run(crafted())
    assert.are.same({
      ['@test.lua:5'] = { 3, 192, 0, overrides = {} },
      ['@test.lua:6'] = { 1, 32, 0, overrides = {} },
      ['TRACE started at @test.lua:5'] = { 1, 16, 0, overrides = {} },
      ['io_write'] = { 1, 48, 0, overrides = {} },
    }, sites_by_name(result, 'alloc'))
    assert.are.same({
      ['@test.lua:7'] = { 1, 128, 32, overrides = { ['@test.lua:6'] = 1 } },
    }, sites_by_name(result, 'realloc'))
    assert.are.same({
      INTERNAL = { 2, 0, 164, overrides = { ['@test.lua:5'] = 1,
        [BEFORE] = 1 } },
      io_write = { 1, 0, 48, overrides = { io_write = 1 } },
    }, sites_by_name(result, 'free'))
  end)

  it('keeps no overrides when asked, and the same figures', function()
    local result = run(crafted(), { overrides = false })
    assert.are.same({
      ['@test.lua:7'] = { 1, 128, 32, overrides = {} },
    }, sites_by_name(result, 'realloc'))
    assert.are.same({
      INTERNAL = { 2, 0, 164, overrides = {} },
      io_write = { 1, 0, 48, overrides = {} },
    }, sites_by_name(result, 'free'))
    assert.are.same({ 4, 1, 2 }, { #result.sites.kinds.alloc,
      #result.sites.kinds.realloc, #result.sites.kinds.free })
  end)

  it('keeps the figures of each kind in columns by slot, with the ' ..
    'overrides of each slot', function()
      local sites = run(crafted()).sites
      local realloc = sites.of_kind.realloc
      assert.are.same({ '@test.lua:7' }, { realloc.keys[1].name })
      assert.are.same({ { 1 }, { 128 }, { 32 } }, { realloc.count,
        realloc.plus, realloc.minus })
      local owners, blocks = sites:overrides_at('realloc', 1)
      assert.are.same({ '@test.lua:6' }, { owners[1].name })
      assert.are.equal(1, #owners)
      assert.are.equal(1, blocks[owners[1]])
      local free = sites.of_kind.free
      local names = {}
      for slot, key in ipairs(free.keys) do
        names[key.name] = { free.count[slot], free.plus[slot],
          free.minus[slot] }
      end
      assert.are.same({ INTERNAL = { 2, 0, 164 }, io_write = { 1, 0, 48 } },
        names)
      assert.is_nil(sites:overrides_at('alloc', 1))
    end)

  it('keeps records in order of first appearance', function()
    local records = run(crafted()).sites.kinds.alloc
    local list = {}
    for i, record in ipairs(records) do
      list[i] = record.site.name
    end
    assert.are.same({ '@test.lua:5', '@test.lua:6',
      'TRACE started at @test.lua:5', 'io_write' }, list)
  end)

  it('refuses events after finish()', function()
    local result = run(crafted())
    local ok, err = pcall(result.sites.feed, result.sites, 'alloc',
      result.heap.keys[1], nil, 0, 8, 1, 1)
    assert.are.same({ false, 'memprof.analysis.sites: an event fed after finish()' },
      { ok, err:match('memprof%.analysis%.sites: .*$') })
  end)

  it('is fed alone, without a tracker or another pass', function()
    local sites = require('memprof.analysis.sites')
    local pass = sites.new()
    local a, b = { 1, name = 'a' }, { 2, name = 'b' }
    pass:feed('alloc', a, nil, 0, 8, 1, 1)
    pass:feed('realloc', b, nil, 8, 16, 1, 1, 1)
    pass:feed('free', b, nil, 16, 0, 1, 1, 2)
    pass:feed('free', b, nil, 4, 0, 1, 1, 0)
    pass:finish()
    local owners, blocks = pass:overrides_at('free', 1)
    assert.are.same({ { 'b', BEFORE }, 1, 1 }, { { owners[1].name,
      owners[2].name }, blocks[owners[1]], blocks[owners[2]] })
    owners = pass:overrides_at('realloc', 1)
    assert.are.same({ 'a' }, { owners[1].name })
    assert.are.same({ { 1 }, { 16 }, { 8 } }, { pass.of_kind.realloc.count,
      pass.of_kind.realloc.plus, pass.of_kind.realloc.minus })
  end)
end)

describe('analyze.run', function()
  it('drops the indexes only events need once the stream is read, and ' ..
    'keeps every figure', function()
      local result = run(crafted())
      assert.are.same({ nil, nil, nil, nil, nil }, {
        result.sites.of_kind.alloc.slot_of_id,
        result.sites.of_kind.realloc.slot_of_id,
        result.sites.of_kind.free.slot_of_id, result.heap.slot_of_id,
        result.blocks.stack_index })
      assert.are.same({ 4, 1, 2 }, { #result.sites.kinds.alloc,
        #result.sites.kinds.realloc, #result.sites.kinds.free })
      assert.are.same({
        ['@test.lua:7'] = { 1, 128, 32, overrides = { ['@test.lua:6'] = 1 } },
      }, sites_by_name(result, 'realloc'))
    end)

  it('feeds extra passes every event with the owner of released blocks',
    function()
      local seen = {}
      local pass = {
        feed = function(_, kind, site, _, _, _, _, _, owner_id, facts)
          seen[#seen + 1] = kind .. ' ' .. site.name .. ' ' ..
            (owner_id and facts.owner.name or '-')
        end,
        finish = function(_, stream)
          return { events = stream.events }
        end,
      }
      local result = run(crafted(), { passes = { { name = 'log', pass = pass } } })
      assert.are.same({
        'alloc @test.lua:5 -', 'alloc @test.lua:5 -', 'alloc @test.lua:5 -',
        'alloc @test.lua:6 -', 'realloc @test.lua:7 @test.lua:6',
        'free INTERNAL @test.lua:5', 'free INTERNAL ' .. BEFORE,
        'alloc TRACE started at @test.lua:5 -', 'alloc io_write -',
        'free io_write io_write',
      }, seen)
      assert.are.same({ events = 10 }, result.log)
      assert.is_table(result.sites)
      assert.is_table(result.heap)
      assert.are.equal('out.bin', result.stream.name)
    end)

  it('reads a stream that returns a table of its own for each event as ' ..
    'one that reuses its table', function()
      local reused = run(crafted())
      local stream = reader.from_string(crafted():bytes(), 'out.bin')
      local tables = {}
      local copying = setmetatable({ next = function()
        local ev = stream:next()
        if not ev then
          return nil
        end
        local copy = {}
        for key, value in pairs(ev) do
          copy[key] = value
        end
        tables[copy] = true
        return copy
      end, next_values = false }, { __index = stream })
      local copied = analyze.run(copying)
      local count = 0
      for _ in pairs(tables) do
        count = count + 1
      end
      assert.are.equal(10, count)
      assert.are.same(heap_by_name(reused), heap_by_name(copied))
      assert.are.equal(reused.heap.total, copied.heap.total)
      for _, kind in ipairs({ 'alloc', 'realloc', 'free' }) do
        assert.are.same(sites_by_name(reused, kind),
          sites_by_name(copied, kind))
      end
      assert.are.same({
        INTERNAL = { 2, 0, 164, overrides = { ['@test.lua:5'] = 1,
          [BEFORE] = 1 } },
        io_write = { 1, 0, 48, overrides = { io_write = 1 } },
      }, sites_by_name(copied, 'free'))
    end)

  it('feeds two extra passes after the sites pass, in their order, ' ..
    'every event', function()
    local order = {}
    local function logger(name)
      return { feed = function(_, kind, _, _, _, _, _, _, owner_id, facts)
        order[#order + 1] = name .. ' ' .. kind .. ' ' ..
          (owner_id and facts.owner.name or '-') .. ' ' ..
          tostring(facts.total)
      end }
    end
    local result = run(crafted(), { passes = {
      { name = 'first', pass = logger('first') },
      { name = 'second', pass = logger('second') } } })
    assert.are.same({ 20, 'first alloc - 64', 'second alloc - 64',
      'first realloc @test.lua:6 320', 'second realloc @test.lua:6 320',
      'first free io_write 172', 'second free io_write 172' },
      { #order, order[1], order[2], order[9], order[10], order[19],
        order[20] })
    assert.are.same({ 7, 10 }, { result.sites.kinds.alloc[1].count +
      result.sites.kinds.alloc[2].count + result.sites.kinds.alloc[3].count +
      result.sites.kinds.alloc[4].count + result.sites.kinds.realloc[1].count,
      result.stream.events })
  end)

  it('stops at a truncated stream and keeps its warning', function()
    local bytes = crafted():bytes()
    local stream = reader.from_string(bytes:sub(1, -3), 'out.bin')
    local result = analyze.run(stream)
    assert.are.equal(9, result.stream.events)
    assert.matches('in the middle of an event', result.stream.warning)
  end)
end)

-- The holds invariant on random streams ------------------------------------

-- A deterministic generator (Park-Miller), the same under LuaJIT and Lua 5.1.
local function random_generator(seed)
  local state = seed
  return function(n)
    state = state * 16807 % 2147483647
    return state % n + 1
  end
end

-- A random stream of `count` events, with the results a correct analysis
-- must give, computed here independently by following the blocks.
local function random_stream(seed, count)
  local random = random_generator(seed)
  local s = B.new()
  local names = { lua = {}, c = {}, trace = {} }
  local protos = { 0x1000, 0x2000, 0x3000, 0x4000 }
  local generation = 0
  local function define_lfunc(addr, as_event)
    generation = generation + 1
    local chunkname = ('@gen%d.lua'):format(generation)
    names.lua[addr] = chunkname
    if as_event then
      s:define_lfunc(addr, chunkname, 1)
    else
      s:lfunc(addr, chunkname, 1)
    end
  end
  local function define_cfunc(addr, as_event)
    generation = generation + 1
    local name = 'cfunc' .. generation
    names.c[addr] = name
    if as_event then
      s:define_cfunc(addr, name)
    else
      s:cfunc(addr, name)
    end
  end
  local function define_trace(traceno)
    local proto, line = protos[random(#protos)], random(50)
    names.trace[traceno] = ('TRACE started at %s:%d'):format(
      names.lua[proto], line)
    s:define_trace(traceno, proto, line)
  end
  for _, addr in ipairs(protos) do
    define_lfunc(addr, false)
  end
  define_cfunc(0x10000, false)
  define_cfunc(0x20000, false)
  s:events()
  for traceno = 1, 3 do
    define_trace(traceno)
  end

  local function location()
    local pick = random(10)
    if pick <= 3 then
      return B.internal(), 'INTERNAL'
    elseif pick <= 7 then
      local addr, line = protos[random(#protos)], random(30)
      return B.lua(addr, line), names.lua[addr] .. ':' .. line
    elseif pick <= 8 then
      local addr = random(2) * 0x10000
      return B.c(addr), names.c[addr]
    else
      local traceno = random(3)
      return B.trace(traceno), names.trace[traceno]
    end
  end

  local expected = { total = 0, holds = {}, live = {}, kinds = {
    alloc = {}, realloc = {}, free = {} } }
  local owner_of, size_of = {}, {}
  local live_addrs = {}
  local next_addr, free_addrs = 0x7f0000000000, {}
  local function charge(name, bytes)
    expected.holds[name] = (expected.holds[name] or 0) + bytes
  end
  local function tally(kind, name, plus, minus)
    local row = expected.kinds[kind][name] or { 0, 0, 0 }
    row[1], row[2], row[3] = row[1] + 1, row[2] + plus, row[3] + minus
    expected.kinds[kind][name] = row
  end
  local function new_block(name, size)
    local addr
    if #free_addrs > 0 and random(2) == 1 then
      addr = table.remove(free_addrs)
    else
      next_addr = next_addr + 16 * random(100)
      addr = next_addr
    end
    owner_of[addr], size_of[addr] = name, size
    live_addrs[#live_addrs + 1] = addr
    charge(name, size)
    return addr
  end
  -- A block to release: a live one, or one from before the profile.
  local function old_block()
    if #live_addrs == 0 or random(8) == 1 then
      return 0x100000 + 16 * random(1000), random(500), BEFORE
    end
    local i = random(#live_addrs)
    local addr = live_addrs[i]
    live_addrs[i] = live_addrs[#live_addrs]
    live_addrs[#live_addrs] = nil
    local owner, size = owner_of[addr], size_of[addr]
    owner_of[addr], size_of[addr] = nil, nil
    free_addrs[#free_addrs + 1] = addr
    return addr, size, owner
  end

  for _ = 1, count do
    local action = random(20)
    if action == 1 then
      define_lfunc(protos[random(#protos)], true)
    elseif action == 2 then
      define_cfunc(random(2) * 0x10000, true)
    elseif action == 3 then
      define_trace(random(3))
    end
    local loc, name = location()
    local kind = random(10)
    if kind <= 5 then
      local size = random(2000)
      s:alloc(loc, new_block(name, size), size)
      tally('alloc', name, size, 0)
      expected.total = expected.total + size
    elseif kind <= 7 then
      local oaddr, osize, owner = old_block()
      charge(owner, -osize)
      local nsize = random(4000)
      local naddr = new_block(name, nsize)
      s:realloc(loc, oaddr, osize, naddr, nsize)
      tally('realloc', name, nsize, osize)
      expected.total = expected.total + nsize - osize
    else
      local oaddr, osize, owner = old_block()
      charge(owner, -osize)
      s:free(loc, oaddr, osize)
      tally('free', name, 0, osize)
      expected.total = expected.total - osize
    end
  end
  if random(2) == 1 then
    s:epilogue()
  end
  for addr, name in pairs(owner_of) do
    expected.live[#expected.live + 1] = { addr, size_of[addr], name }
  end
  table.sort(expected.live, function(a, b) return a[1] < b[1] end)
  return s, expected
end

describe('the holds invariant', function()
  for _, seed in ipairs({ 1, 42, 20240521, 987654321 }) do
    it('holds on a random stream (seed ' .. seed .. ')', function()
      local s, expected = random_stream(seed, 700)
      local result = run(s)
      assert.are.equal(700, result.stream.events)

      -- The total from the events, computed here independently.
      local from_events = 0
      local stream = reader.from_string(s:bytes())
      for ev in stream:each() do
        from_events = from_events + ev.nsize - ev.osize
      end
      assert.are.equal(expected.total, from_events)

      local sum, negative = 0, 0
      for _, stats in ipairs(result.heap:stats_list()) do
        sum = sum + stats.holds
        if stats.holds < 0 then
          negative = negative + 1
        end
      end
      assert.are.equal(expected.total, sum)
      assert.are.equal(expected.total, result.heap.total)
      assert.is_true(negative > 0) -- the pseudo-site at least

      local holds = {}
      for name, row in pairs(heap_by_name(result)) do
        if row[1] ~= 0 then
          holds[name] = row[1]
        end
      end
      local expected_holds = {}
      for name, bytes in pairs(expected.holds) do
        if bytes ~= 0 then
          expected_holds[name] = bytes
        end
      end
      assert.are.same(expected_holds, holds)

      for kind, rows in pairs(expected.kinds) do
        local got = {}
        for name, row in pairs(sites_by_name(result, kind)) do
          got[name] = { row[1], row[2], row[3] }
        end
        assert.are.same(rows, got)
      end

      local live = {}
      for i, block in ipairs(result.blocks:live_blocks()) do
        live[i] = { block.addr, block.size, block.site.name }
      end
      assert.are.same(expected.live, live)
    end)
  end
end)
