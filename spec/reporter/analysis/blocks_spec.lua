-- memprof.analysis.address_map and memprof.analysis.blocks: the map of
-- live addresses, and the block tracker that keeps what is known of
-- each live block and hands the passes what a release released.

local address_map = require('memprof.analysis.address_map')
local blocks = require('memprof.analysis.blocks')
local heap = require('memprof.analysis.heap')

-- A deterministic sequence of numbers in [0, n) (a linear congruential
-- generator), so that the specs do the same on every run.
local function sequence(seed)
  local state = seed
  return function(n)
    state = (state * 1103515245 + 12345) % 2147483648
    return state % n
  end
end

-- Sites as the reader makes them (the passes find them by their id,
-- which a site keeps first).
local Site = require('memprof.read.stream').Site
local SITE_A = Site.make({ 1, 'lua', '@a.lua:1' })
local SITE_B = Site.make({ 2, 'lua', '@a.lua:2' })

local function alloc(addr, size, site)
  return { kind = 'alloc', naddr = addr, nsize = size, oaddr = 0,
    osize = 0, site = site, nweight = 1, oweight = 1 }
end

local function free(addr, size, site)
  return { kind = 'free', naddr = 0, nsize = 0, oaddr = addr, osize = size,
    site = site, nweight = 1, oweight = 1 }
end

local function realloc(oaddr, osize, naddr, nsize, site)
  return { kind = 'realloc', naddr = naddr, nsize = nsize, oaddr = oaddr,
    osize = osize, site = site, nweight = 1, oweight = 1 }
end

-- A tracker and a heap pass fed together, as analyze.run feeds them:
-- pair:feed(ev) -> the id of the released block's owner; pair.facts:
-- the facts of the last event.
local function pair(opts)
  opts = opts or {}
  local p = { tracker = blocks.new({ facts = opts.facts }),
    heap = heap.new() }
  function p:feed(ev)
    local owner_id, facts = self.tracker.track(ev.kind, ev.site, ev.stack,
      ev.oaddr, ev.osize, ev.naddr, ev.nsize, ev.nweight, 0)
    self.heap:feed(ev.kind, ev.site, ev.stack, ev.osize, ev.nsize,
      ev.oweight, ev.nweight, owner_id, facts)
    self.facts = facts
    return owner_id
  end
  function p:finish()
    self.tracker:finish()
    self.heap:finish(nil, self.tracker)
  end
  return p
end

-- The live blocks of a pair as { addr, size, site name, born }.
local function blocks_of(pass)
  local list = {}
  for i, block in ipairs(pass.tracker:live_blocks()) do
    list[i] = { block.addr, block.size, block.site.name, block.born }
  end
  return list
end

-- The figures of each site of a heap pass, as
-- { { site name, holds, allocs, reallocs, frees }, ... }.
local function stats_of(pass)
  local list = {}
  for i, record in ipairs(pass.heap:stats_list()) do
    list[i] = { record.site.name, record.holds, record.allocs,
      record.reallocs, record.frees }
  end
  return list
end

do
  describe('address map', function()
    it('puts, gets and removes addresses', function()
      local map = address_map.new()
      assert.are.equal(7, map:put(0x1000, 7))
      assert.are.equal(9, map:put(0x2000, 9))
      -- An address already in the map keeps its slot.
      assert.are.equal(7, map:put(0x1000, 8))
      assert.are.same({ 7, 9, 2 }, { map:get(0x1000), map:get(0x2000),
        map:count() })
      assert.is_nil(map:get(0x3000))
      assert.are.equal(7, map:remove(0x1000))
      assert.is_nil(map:remove(0x1000))
      assert.is_nil(map:remove(0x3000))
      assert.is_nil(map:get(0x1000))
      assert.are.same({ 9, 1 }, { map:get(0x2000), map:count() })
      -- The same address removed, then put again with another slot.
      assert.are.equal(3, map:put(0x1000, 3))
      assert.are.same({ 3, 2 }, { map:get(0x1000), map:count() })
      map:free()
    end)

    it('keeps 5000 addresses through its growth, and lists them',
      function()
        local map = address_map.new()
        for i = 1, 5000 do
          map:put(0x7f0000000000 + i * 48, i)
        end
        -- 1024 buckets at first, doubled whenever more than half full.
        assert.are.equal(14, map.state.bits)
        local wrong, listed, sum = 0, 0, 0
        for i = 1, 5000 do
          if map:get(0x7f0000000000 + i * 48) ~= i then
            wrong = wrong + 1
          end
        end
        map:each(function(addr, slot)
          listed = listed + 1
          sum = sum + slot
          if addr ~= 0x7f0000000000 + slot * 48 then
            wrong = wrong + 1
          end
        end)
        assert.are.same({ 0, 5000, 5000 * 5001 / 2, 5000 },
          { wrong, listed, sum, map:count() })
        map:free()
      end)

    it('tells apart addresses above 2^32, up to 2^47, with the same low ' ..
      'bits', function()
      local map = address_map.new()
      local addrs = { 0x10, 2 ^ 32 + 0x10, 2 ^ 40 + 0x10, 2 ^ 47 + 0x10,
        2 ^ 47 - 16, 2 ^ 47, 2 ^ 32, 0xfffffff0, 2 ^ 33 + 0xfffffff0 }
      for i, addr in ipairs(addrs) do
        assert.are.equal(i, map:put(addr, i))
      end
      local found = {}
      for i, addr in ipairs(addrs) do
        found[i] = map:get(addr)
      end
      assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9 }, found)
      assert.are.equal(4, map:remove(2 ^ 47 + 0x10))
      assert.are.same({ 1, 2, 3, 5, 6 }, { map:get(0x10),
        map:get(2 ^ 32 + 0x10), map:get(2 ^ 40 + 0x10), map:get(2 ^ 47 - 16),
        map:get(2 ^ 47) })
      assert.is_nil(map:get(2 ^ 47 + 0x10))
      map:free()
    end)

    it('agrees with a Lua table over 200,000 random puts and removes',
      function()
        local map = address_map.new()
        local model, count = {}, 0
        local random = sequence(42)
        local mismatches = 0
        for step = 1, 200000 do
          -- 3,000 aligned addresses, some above 2^32.
          local addr = random(3000) * 16 + random(2) * 2 ^ 36
          if random(3) == 0 then
            if map:remove(addr) ~= model[addr] then
              mismatches = mismatches + 1
            end
            if model[addr] then
              count = count - 1
            end
            model[addr] = nil
          else
            local expected = model[addr] or step
            if map:put(addr, step) ~= expected then
              mismatches = mismatches + 1
            end
            if not model[addr] then
              count = count + 1
            end
            model[addr] = expected
          end
        end
        for addr, slot in pairs(model) do
          if map:get(addr) ~= slot then
            mismatches = mismatches + 1
          end
        end
        assert.are.same({ 0, count }, { mismatches, map:count() })
        map:free()
      end)
  end)
end

do
  describe('address map, colliding addresses', function()
    -- Addresses whose search starts at the same bucket, `home`, in a map
    -- of 1024 buckets.
    local function colliding(map, home, count)
      local list, addr = {}, 0
      while #list < count do
        addr = addr + 16
        if map:home(addr) == home then
          list[#list + 1] = addr
        end
      end
      return list
    end

    for _, home in ipairs({ 5, 1023 }) do
      it('finds 100 addresses of one bucket (' .. home .. ') after ' ..
        'removing every other, the run wrapping at the end: ' ..
        tostring(home == 1023), function()
        local map = address_map.new()
        local addrs = colliding(map, home, 100)
        for i, addr in ipairs(addrs) do
          map:put(addr, i)
        end
        assert.are.equal(10, map.state.bits)
        local removed = 0
        for i = 1, 100, 2 do
          if map:remove(addrs[i]) == i then
            removed = removed + 1
          end
        end
        local found, gone = 0, 0
        for i, addr in ipairs(addrs) do
          local slot = map:get(addr)
          if i % 2 == 0 and slot == i then
            found = found + 1
          elseif i % 2 == 1 and slot == nil then
            gone = gone + 1
          end
        end
        -- Every bucket after the run is empty again.
        local used = 0
        for i = 0, map.state.mask do
          if map.state.buckets[i].slot ~= 0 then
            used = used + 1
          end
        end
        assert.are.same({ 50, 50, 50, 50, 50 },
          { removed, found, gone, used, map:count() })
        map:free()
      end)
    end

    it('gives 64 neighbouring 16-byte blocks the 64 buckets of one ' ..
      'aligned run, below and above 2^32', function()
      local map = address_map.new()
      local runs = {}
      for n, base in ipairs({ 0x12340400, 0x7f3a12345c00 }) do
        local homes = {}
        for k = 0, 63 do
          homes[k + 1] = map:home(base + 16 * k)
        end
        table.sort(homes)
        local consecutive = 0
        for k = 2, 64 do
          if homes[k] == homes[k - 1] + 1 then
            consecutive = consecutive + 1
          end
        end
        runs[n] = { homes[1] % 64, consecutive }
      end
      assert.are.same({ { 0, 63 }, { 0, 63 } }, runs)
      map:free()
    end)

    it('frees its memory when the tracker finishes', function()
      local pass = pair()
      pass:feed(alloc(0x10, 8, SITE_A))
      assert.is_true(pass.tracker.map.state.buckets ~= nil)
      pass:finish()
      assert.is_true(pass.tracker.map.state.buckets == nil)
      assert.are.same({ { 0x10, 8, '@a.lua:1', 1 } }, blocks_of(pass))
    end)

    it('lists the live blocks with their sites and stacks after it drops ' ..
      'its indexes', function()
        local pass = pair()
        local stack = { id = 7, frames = { SITE_B } }
        local ev = alloc(0x10, 8, SITE_A)
        ev.stack = stack
        pass:feed(ev)
        pass:feed(alloc(0x20, 16, SITE_B))
        pass:feed(alloc(0x30, 24, SITE_A))
        pass:feed(free(0x20, 16, SITE_A))
        pass:finish()
        assert.are.same({ nil, nil }, { pass.heap.slot_of_id,
          pass.tracker.stack_index })
        local listed = {}
        pass.tracker:each_live_block(function(addr, size, site, block_stack)
          listed[#listed + 1] = { addr, size, site.name,
            block_stack and block_stack.id or 0 }
        end)
        table.sort(listed, function(a, b) return a[1] < b[1] end)
        assert.are.same({ { 0x10, 8, '@a.lua:1', 7 },
          { 0x30, 24, '@a.lua:1', 0 } }, listed)
      end)
  end)
end

do
  describe('block tracker', function()
    it('reuses an address freed and allocated again', function()
      local pass = pair()
      pass:feed(alloc(0x20, 8, SITE_A))
      assert.are.equal(1, pass:feed(free(0x20, 8, SITE_B)))
      assert.are.same({ 8, 0, 1, 0 }, { pass.facts.size, pass.facts.age,
        pass.facts.weight, pass.facts.total })
      pass:feed(alloc(0x20, 24, SITE_B))
      assert.are.equal(2, pass:feed(realloc(0x20, 24, 2 ^ 40, 40, SITE_A)))
      assert.are.same({ 24, 0, SITE_B }, { pass.facts.size, pass.facts.age,
        pass.facts.owner })
      pass:feed(alloc(0x20, 16, SITE_B))
      pass:finish()
      assert.are.same({ { 0x20, 16, '@a.lua:2', 4 },
        { 2 ^ 40, 40, '@a.lua:1', 3 } }, blocks_of(pass))
      assert.are.same({ 2, 56, 56, 4 }, { pass.tracker.slot_count,
        pass.heap.total, pass.tracker.total, pass.tracker.allocations })
    end)

    it('keeps one slot for an address allocated twice (a lost free)',
      function()
        local pass = pair()
        pass:feed(alloc(0x30, 8, SITE_A))
        pass:feed(alloc(0x30, 12, SITE_B))
        pass:finish()
        assert.are.same({ { 0x30, 12, '@a.lua:2', 2 } }, blocks_of(pass))
        assert.are.equal(1, pass.tracker.slot_count)
      end)
  end)
end

-- Without the blocks' facts (facts = false), the map holds each live
-- address's site: the figures and owners are those of a full tracker.
do
  describe('block tracker without the facts', function()
    it('gives the owners and figures of a full pass over 5,000 events',
      function()
        local full = pair()
        local bare = pair({ facts = false })
        local random = sequence(11)
        local live, sizes, owners = {}, {}, { 0, 0, 0 }
        local sites, produced, unlike, released = { SITE_A, SITE_B }, 0, 0, 0
        for _ = 1, 5000 do
          local addr = random(300) * 16 + 2 ^ 40
          local ev
          -- (The low bits of the sequence repeat: its halves are drawn
          -- from ranges of 1000.)
          if not live[addr] or random(1000) < 250 then
            -- (An address live already: the stream lost its free.)
            ev = alloc(addr, random(100) + 1,
              sites[random(1000) < 500 and 1 or 2])
          elseif random(1000) < 500 then
            ev = free(addr, sizes[addr], SITE_B)
          else
            ev = realloc(addr, sizes[addr],
              addr + (random(1000) < 500 and 2 ^ 20 or 0), random(100) + 1,
              SITE_A)
          end
          if random(1000) < 20 then
            -- A block allocated before the profile.
            ev = free(2 ^ 30 + random(1000), 7, SITE_A)
          end
          live[ev.oaddr], live[ev.naddr] = nil, true
          sizes[ev.naddr] = ev.nsize
          if ev.kind ~= 'free' then
            produced = produced + 1
          end
          -- (Counted here and asserted once: an assertion per event
          -- made luassert's tables of garbage by the hundred thousand.)
          local owner = full:feed(ev)
          if bare:feed(ev) ~= owner then
            unlike = unlike + 1
          end
          if bare.facts ~= nil then
            released = released + 1
          end
          local i = owner == 1 and 1 or owner == 2 and 2 or owner == 0 and 3
          if i then
            owners[i] = owners[i] + 1
          end
        end
        assert.are.same({ 0, 0 }, { unlike, released })
        -- (The tracker's total and allocations are copied at finish.)
        assert.are.same({ 0, 0 }, { bare.tracker.total,
          bare.tracker.allocations })
        full:finish()
        bare:finish()
        assert.are.same({ full.tracker.total, full.tracker.allocations },
          { bare.tracker.total, bare.tracker.allocations })
        local fed, message = pcall(bare.tracker.track, 'alloc', SITE_A, nil,
          0, 0, 16, 8, 1, 0)
        assert.are.same({ false, 'memprof.analysis.blocks: an event ' ..
          'tracked after finish()' }, { fed, message })
        assert.are.equal(produced, bare.tracker.allocations)
        -- Every kind of owner was met (the counts of this sequence).
        assert.are.same({ 1065, 996, 117 }, owners)
        local stats = stats_of(bare)
        assert.are.same(stats_of(full), stats)
        assert.are.equal(3, #stats)
        local ok, err = pcall(bare.tracker.live_blocks, bare.tracker)
        assert.is_false(ok)
        assert.truthy(err:find('the live blocks are not kept', 1, true))
      end)

    it('charges a block whose free was lost to its last site', function()
      local pass = pair({ facts = false })
      pass:feed(alloc(0x30, 8, SITE_A))
      pass:feed(alloc(0x30, 12, SITE_B))
      assert.are.equal(2, pass:feed(free(0x30, 12, SITE_A)))
      assert.are.equal(0, pass:feed(free(0x30, 12, SITE_A)))
      pass:finish()
      assert.are.same({ 8, 0, -12 }, pass.heap.holds)
      assert.are.same({ 1, 1, 0 }, pass.heap.allocs)
      assert.are.same({ 0, 1, 1 }, pass.heap.frees)
    end)
  end)
end

-- The live blocks' facts, kept by slot in C memory.
do
  it('keeps the site, stack, size, weight and birth of 3,000 live ' ..
    'blocks, freed and reused', function()
    local pass = pair()
    local stacks = { { id = 1, frames = {} }, { id = 2, frames = {} } }
    for i = 1, 3000 do
      local ev = alloc(0x100000 + i * 64, i, i % 2 == 0 and SITE_A or SITE_B)
      ev.stack = stacks[i % 3 + 1]
      ev.nweight = i % 5 + 1
      pass:feed(ev)
    end
    -- Every third block is freed, the last first (block 3, freed last,
    -- is released with its facts), then 500 new blocks take their slots.
    for i = 3000, 3, -3 do
      pass:feed(free(0x100000 + i * 64, i, SITE_A))
    end
    assert.are.same({ 3, 4, 2997, 1 }, { pass.facts.size,
      pass.facts.weight, pass.facts.age, pass.facts.owner_stack.id })
    for i = 1, 500 do
      pass:feed(alloc(0x900000 + i * 64, 7, SITE_B))
    end
    pass:finish()
    local count, bytes, born, weight, by_site, by_stack = 0, 0, 0, 0, {}, {}
    pass.tracker:each_live_block(function(_, size, site, stack, birth, w)
      count, bytes, born, weight = count + 1, bytes + size, born + birth,
        weight + w
      by_site[site.name] = (by_site[site.name] or 0) + 1
      local id = stack and stack.id or 0
      by_stack[id] = (by_stack[id] or 0) + 1
    end)
    -- 2,000 of the first blocks (sizes and births 1..3000 less the
    -- multiples of 3), then 500 of 7 bytes born 3001..3500.
    local kept_sum = 3000 * 3001 / 2 - 3 * 1000 * 1001 / 2
    local kept_weight = 0
    for i = 1, 3000 do
      if i % 3 ~= 0 then
        kept_weight = kept_weight + i % 5 + 1
      end
    end
    assert.are.same({ 2500, kept_sum + 3500, kept_sum + 500 * 3250.5,
      kept_weight + 500 }, { count, bytes, born, weight })
    assert.are.same({ ['@a.lua:1'] = 1000, ['@a.lua:2'] = 1500 }, by_site)
    assert.are.same({ [0] = 1500, [2] = 1000 }, by_stack)
    assert.are.equal(3000, pass.tracker.slot_count)
  end)
end

-- The tracker puts and removes addresses through the map's state (a
-- pointer to its C record).
do
  it('puts and removes addresses through its state', function()
      local map = address_map.new()
      local state = map.state
      assert.are.same({ 1, 1, 2 }, { map.state_put(state, 0x10, 1),
        map.state_put(state, 0x10, 5), map.state_put(state, 0x20, 2) })
      assert.are.same({ 1, 2 }, { map.state_remove(state, 0x10),
        map:get(0x20) })
      assert.is_nil(map.state_remove(state, 0x10))
      assert.are.same({ 1, nil }, { map:count(), map:get(0x10) })
      map:free()
    end)
end

describe('block tracker after finish()', function()
  it('counts its total and allocations, and refuses events after finish()',
    function()
      local pass = pair()
      pass:feed(alloc(0x10, 8, SITE_A))
      pass:feed(alloc(0x20, 16, SITE_B))
      assert.are.same({ 24 }, { pass.facts.total })
      pass:feed(free(0x10, 8, SITE_B))
      assert.are.same({ 16 }, { pass.facts.total })
      pass:finish()
      local ok, err = pcall(pass.feed, pass, alloc(0x30, 8, SITE_A))
      assert.are.same({ false, 'memprof.analysis.blocks: an event tracked ' ..
        'after finish()' }, { ok, err:match('memprof%.analysis%.blocks: .*$') })
      -- (Two slots used; the freed one is kept for the next block.)
      assert.are.same({ 2, 16, 2, 16 }, { pass.tracker.slot_count,
        pass.tracker.total, pass.tracker.allocations, pass.heap.total })
    end)
end)
