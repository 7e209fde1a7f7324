-- The node index of heap snapshot addresses (memprof.analysis.address_map's index):
-- every address put is found with its node, through growth and runs of
-- colliding buckets, and an address not put is not.
local ffi = require('ffi')
local bit = require('bit')
local address_map = require('memprof.analysis.address_map')

-- Addresses of three kinds: neighbours 16 bytes apart, addresses 2^32
-- apart (the same low bits), and ones 2^13 apart, which share a home
-- before the address is folded.
local function addresses(n)
  local list = {}
  for i = 1, n do
    local kind = i % 3
    if kind == 0 then
      list[i] = 0x7f0000001000 + 16 * i
    elseif kind == 1 then
      list[i] = 0x550000000040 + 2 ^ 32 * i
    else
      list[i] = 0x600000000000 + 2 ^ 13 * i
    end
  end
  return list
end

describe('the node index of heap snapshot addresses', function()
  it('finds every address put, with its node, through growth', function()
    local n = 5000
    local list = addresses(n)
    local addrs = ffi.new('double[?]', n + 2)
    local index = address_map.index()
    for v = 2, n + 1 do
      addrs[v] = list[v - 1]
      index:put(addrs, v)
      -- Each address is there as soon as it is put.
      assert.equal(v, index:get(addrs, list[v - 1]))
    end
    assert.equal(n, index.count)
    -- Doubled while half full: 5,000 nodes in 16,384 buckets.
    assert.equal(16383, index.mask)
    for v = 2, n + 1 do
      assert.equal(v, index:get(addrs, list[v - 1]))
    end
    -- Addresses next to those put, and 0, are not in it.
    for i = 1, n do
      assert.is_nil(index:get(addrs, list[i] + 8))
    end
    assert.is_nil(index:get(addrs, 0))
  end)

  it('finds the nodes of a run that wraps past the last bucket', function()
    local addrs = ffi.new('double[?]', 8)
    local index = address_map.index()
    -- Below 2^32, an address's home in 2^10 buckets is its low bits less
    -- 4, folded twice by 10: these five all have the last bucket's.
    for v = 2, 6 do
      local k = v - 2
      addrs[v] = (k * 1024 + bit.bxor(1023, k)) * 16
      index:put(addrs, v)
    end
    assert.equal(1023, index.mask)
    assert.same({ 2, 3, 4, 5, 6 }, { index.buckets[1023],
      index.buckets[0], index.buckets[1], index.buckets[2],
      index.buckets[3] })
    for v = 2, 6 do
      assert.equal(v, index:get(addrs, addrs[v]))
    end
    assert.is_nil(index:get(addrs, 1023 * 16 + 16))
  end)
end)
