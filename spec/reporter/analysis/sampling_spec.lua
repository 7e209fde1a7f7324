-- The estimates of sampled profiles (memprof.analysis.sampling): the weight of a
-- sampled block and the scheme it assumes. Their accuracy against a
-- recording of every event of the same program is specified in
-- spec/module/sample_accuracy_spec.lua.
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
