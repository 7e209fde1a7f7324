-- The estimates of sampled profiles (memprof.analysis.sampling): the weight of a
-- sampled block, the scheme it assumes, and the accuracy of the reports
-- against a recording of every event of the same program.
local sampling = require('memprof.analysis.sampling')
local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local B = require('helpers.stream_builder')

describe('sampling weights', function()
  it('is 1 / (1 - exp(-size / mean))', function()
    assert.are.equal(1 / (1 - math.exp(-1)), sampling.weight(1024, 1024))
    assert.are.equal(1 / (1 - math.exp(-0.5)), sampling.weight(50, 100))
    -- Far above the mean, every block is sampled.
    assert.are.equal(1, sampling.weight(100 * 1024, 1024))
  end)

  it('keeps its precision far below the mean', function()
    -- 1 - exp(-x) would lose digits here: the weight is mean/size + 1/2.
    local w = sampling.weight(16, 2 ^ 40)
    assert.is_true(math.abs(w - (2 ^ 40 / 16 + 0.5)) < 1e-3)
  end)

  it('gives each block a whole weight whose mean is the weight', function()
    -- w = 100.50083...: 100 or 101 by address, 101 for about half.
    local w = sampling.weight(1, 100)
    local sum, n = 0, 100000
    for i = 1, n do
      local whole = sampling.block_weight(0x10000 + 16 * i, 1, 100)
      assert.is_true(whole == 100 or whole == 101)
      sum = sum + whole
    end
    assert.is_true(math.abs(sum / n - w) < 0.01)
    -- The address decides: the same block always weighs the same.
    assert.are.equal(101, sampling.block_weight(2, 1, 100))
    assert.are.equal(100, sampling.block_weight(1, 1, 100))
  end)

  it('matches the scheme: a block is sampled with probability ' ..
    '1 - exp(-size / mean)', function()
    -- The countdown of src/sample.c, in Lua: exponential distances, whole
    -- bytes, a new distance after each sample.
    math.randomseed(12345)
    local mean = 1000
    local function distance()
      return math.ceil(-math.log(1 - math.random()) * mean)
    end
    local countdown = distance()
    for _, size in ipairs({ 10, 300, 1000, 4000 }) do
      local sampled, n = 0, 200000
      for _ = 1, n do
        countdown = countdown - size
        if countdown <= 0 then
          sampled = sampled + 1
          countdown = distance()
        end
      end
      -- Within four standard deviations of a binomial count.
      local p = 1 / sampling.weight(size, mean)
      local expected = n * p
      assert.is_true(math.abs(sampled - expected) <
        4 * math.sqrt(n * p * (1 - p)) + 1,
        size .. ': ' .. sampled .. ' sampled, expected ' .. expected)
    end
  end)
end)

describe('scaled events', function()
  -- One sample per 100 bytes: a block of 10000 bytes stands for itself
  -- (w = 1), one of 1 byte at address 2 for 101 blocks and at address 1
  -- for 100 (w = 100.5008).
  local function sampled_stream()
    return B.new():lfunc(0x100, '@a.lua', 1)
      :events({ version = B.EXTENDED, sample_bytes = 100 })
      :alloc(B.lua(0x100, 3), 0x1000, 10000)
      :alloc(B.lua(0x100, 3), 2, 1)
      :alloc(B.lua(0x100, 4), 1, 1)
      :free(B.lua(0x100, 5), 2, 1)
      :epilogue():bytes()
  end

  it('counts each sampled block as the blocks it stands for', function()
    local result = analyze.run(reader.from_string(sampled_stream(),
      'out.bin'))
    local rows = {}
    for _, record in ipairs(result.sites.kinds.alloc) do
      rows[record.site.name] = { record.count, record.plus }
    end
    assert.are.same({ ['@a.lua:3'] = { 102, 10101 },
      ['@a.lua:4'] = { 100, 100 } }, rows)
    local freed = result.sites.kinds.free[1]
    assert.are.same({ '@a.lua:5', 101, 101 },
      { freed.site.name, freed.count, freed.minus })
    -- Live: 10000 bytes (1 block) at line 3, 100 bytes (100) at line 4.
    assert.are.equal(10100, result.heap.total)
  end)

  it('leaves a profile that is not sampled as it is', function()
    local bytes = B.new():lfunc(0x100, '@a.lua', 1):events()
      :alloc(B.lua(0x100, 3), 2, 1):epilogue():bytes()
    local result = analyze.run(reader.from_string(bytes, 'out.bin'))
    local record = result.sites.kinds.alloc[1]
    assert.are.same({ 1, 1 }, { record.count, record.plus })
  end)
end)

describe('the accuracy of a sampled profile', function()
  local h = require('helpers.profile')

  -- Twelve places that allocate from 0.2 to 7 MB each, in blocks from 16
  -- bytes to 20 KB; one block in five is kept to the end. The collector
  -- runs only at the end: otherwise whether a string is interned anew
  -- depends on whether its twin was collected yet, which depends on the
  -- order of the sweep, which LuaJIT's random string hash seed changes.
  local PROGRAM = [[
collectgarbage('stop')
local keep, n = {}, 0
local function hold(x) n = n + 1; if n % 5 == 0 then keep[#keep + 1] = x end end
for i = 1, 40000 do hold(string.rep('a', 24 + i % 97) .. i) end
for i = 1, 60000 do hold({}) end
for i = 1, 20000 do hold({ i, i + 1, i + 2, i + 3 }) end
for i = 1, 3000 do local t = {} for j = 1, i % 200 do t[j] = j end hold(t) end
for i = 1, 30000 do hold(tostring(i) .. ':' .. tostring(i * 7)) end
for i = 1, 20000 do hold(function() return i end) end
for i = 1, 300 do hold(string.rep('b', 5000 + i * 50)) end
for i = 1, 8000 do hold({ x = i, y = i, z = i, name = 'p' .. i }) end
for i = 1, 5000 do local parts = {} for j = 1, 10 do parts[j] = j * i end hold(table.concat(parts, ',')) end
for i = 1, 15000 do hold(string.format('%08d-%s', i, 'row')) end
for i = 1, 2000 do hold(setmetatable({}, { __index = keep })) end
collectgarbage()
collectgarbage('restart')
return keep
]]

  -- Before the profile, the child grows the VM's string table so that
  -- PROGRAM's strings never make it grow again. Otherwise whether the
  -- table grows inside the profile, and at which line, depends on the
  -- strings the host made at its start and on whether the collector was
  -- sweeping strings when PROGRAM stopped it (LuaJIT does not grow the
  -- table then): Tarantool's start differs from one machine to the next,
  -- and the growths, 448 KiB on line 4, then fell in some of the runs
  -- compared and not in others.
  local PRELUDE = [[
collectgarbage()
collectgarbage('stop')
local strings = {}
for i = 1, 2 ^ 19 do strings[i] = 'made before the profile ' .. i end
]]

  -- Profiles PROGRAM in a child with `options`; returns the bytes
  -- allocated by place and the bytes of the blocks live at stop that
  -- were allocated during the profile.
  local function profile(options)
    local path = h.tmpname()
    local out, code = h.run_script('package.cpath = ' ..
      string.format('%q', package.cpath) .. '\njit.off()\n' .. PRELUDE ..
      "local memprof = require('memprof')\n" ..
      'local program = assert(loadstring(' .. string.format('%q', PROGRAM) ..
      ", '@prog.lua'))\n" ..
      'assert(memprof.start(' .. string.format('%q', path) .. ', ' ..
      options .. '))\nprogram()\nassert(memprof.stop())\n')
    assert.are.same({ '', 0 }, { out, code })
    local result = analyze.run(reader.open(path))
    os.remove(path)
    assert.is_nil(result.stream.warning)
    local allocated = {}
    for _, kind in ipairs({ 'alloc', 'realloc' }) do
      for _, record in ipairs(result.sites.kinds[kind]) do
        local name = record.site.name
        allocated[name] = (allocated[name] or 0) + record.plus
      end
    end
    local live = 0
    result.blocks:each_live_block(function(_, size) live = live + size end)
    return allocated, live, result.stream
  end

  it('estimates the top 10 places and the live bytes within 10%', function()
    -- (In the extended format too, so that internal events are named alike.)
    local truth, truth_live = profile('{ timestamps = true }')
    local places = {}
    for name in pairs(truth) do places[#places + 1] = name end
    table.sort(places, function(a, b) return truth[a] > truth[b] end)
    -- Each of the ten gets a thousand samples or more.
    assert.is_true(truth[places[10]] > 512 * 1000)
    for _, seed in ipairs({ 1, 2, 3 }) do
      local estimate, live, stream =
        profile('{ sample_bytes = 512, seed = ' .. seed .. ' }')
      assert.are.equal(512, stream.sample_bytes)
      for i = 1, 10 do
        local name = places[i]
        local ratio = (estimate[name] or 0) / truth[name]
        assert.is_true(ratio > 0.9 and ratio < 1.1, string.format(
          'seed %d, %s: %d estimated, %d allocated', seed, name,
          estimate[name] or 0, truth[name]))
      end
      local ratio = live / truth_live
      assert.is_true(ratio > 0.9 and ratio < 1.1, string.format(
        'seed %d: %d live estimated, %d live', seed, live, truth_live))
    end
  end)
end)
