-- memprof.analysis.node_index: the node number of each object address of a
-- heap snapshot's graph, for analysis/dominators.lua.
--
--   local index = node_index.new()
--   index:put(addrs, v)      -- v's address is addrs[v] (an FFI array)
--   index:get(addrs, addr)   -- the node of addr, or nil
--
-- An open-addressing hash table whose buckets hold node numbers only (4
-- bytes each, 0: empty): a bucket's key is read from the caller's array
-- of addresses, which may be reallocated between calls (it is passed to
-- each).  Linear probing, doubled when half full, so that a node costs 8
-- to 16 bytes; the hash keeps neighbouring addresses in neighbouring
-- buckets, so that the look-ups of a walk's records, which reach objects
-- allocated together, touch cache lines used just before.  Addresses are
-- never removed.

local ffi = require('ffi')
local bit = require('bit')

local M = {}

local band, bxor, rshift, tobit = bit.band, bit.bxor, bit.rshift, bit.tobit
local floor = math.floor
local INT32S = ffi.typeof('int32_t[?]')
local TWO_32 = 4294967296
local ODD = 0x9E3779B1
local MIN_BITS = 10

-- The bucket where addr's search starts: the low 32 bits less the 3 that
-- alignment leaves at zero, folded by `bits`, and the high ones mixed in
-- by an odd multiplier (exact: the product is below 2^53).
local function home(addr, bits, mask)
  local low = rshift(tobit(addr), 3)
  local high = tobit(floor(addr / TWO_32) * ODD)
  return band(bxor(low, rshift(low, bits), rshift(high, 32 - bits)), mask)
end

local Index = {}
Index.__index = Index

function M.new()
  return setmetatable({ bits = MIN_BITS, mask = 2 ^ MIN_BITS - 1,
    count = 0, buckets = INT32S(2 ^ MIN_BITS) }, Index)
end

-- Puts v into the first empty bucket from i on.
local function fill(buckets, mask, v, i)
  if buckets[i] == 0 then
    buckets[i] = v
    return
  end
  return fill(buckets, mask, v, band(i + 1, mask))
end

local function place(buckets, bits, mask, addr, v)
  return fill(buckets, mask, v, home(addr, bits, mask))
end

-- Twice as many buckets, each node placed again.
local function grow(self, addrs)
  local old, size = self.buckets, self.mask + 1
  local bits = self.bits + 1
  local mask = 2 ^ bits - 1
  local buckets = INT32S(mask + 1)
  for i = 0, size - 1 do
    local v = old[i]
    if v ~= 0 then place(buckets, bits, mask, addrs[v], v) end
  end
  self.buckets, self.bits, self.mask = buckets, bits, mask
end

-- Adds node v (> 0, not yet in the index), whose address is addrs[v].
function Index:put(addrs, v)
  self.count = self.count + 1
  if self.count * 2 > self.mask + 1 then grow(self, addrs) end
  place(self.buckets, self.bits, self.mask, addrs[v], v)
end

-- The node at bucket i or after it in its run, or nil.  (A function that
-- calls itself in tail position, not a loop: LuaJIT compiles a loop that
-- runs often as a trace of its own, which the callers' traces then leave
-- for, and gives up on when it runs once or twice.)
local function probe(buckets, mask, addrs, addr, i)
  local v = buckets[i]
  if v == 0 then return nil end
  if addrs[v] == addr then return v end
  return probe(buckets, mask, addrs, addr, band(i + 1, mask))
end

function Index:get(addrs, addr)
  local mask = self.mask
  return probe(self.buckets, mask, addrs, addr, home(addr, self.bits, mask))
end

return M
