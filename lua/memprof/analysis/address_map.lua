-- memprof.analysis.address_map: block addresses to slot numbers, in C
-- memory.
--
--   local map = address_map.new()
--   map:get(addr) -> slot or nil
--   map:put(addr, slot) -> the slot of addr if it is in the map, else
--                          addr gets `slot` (returned)
--   map:remove(addr) -> its slot (taken out of the map) or nil
--   map:count()      -> live addresses
--   map:each(fn)     -> fn(addr, slot) for each, in no particular order
--   map:free()       -> frees the C memory; the map is not used after
--   map.state, map.state_put(state, addr, slot),
--   map.state_remove(state, addr)   -- put and remove for the hot path:
--       state is a pointer to a C record of the buckets, size and count
--       (bits, mask, live, limit), which LuaJIT's code reads as a constant
--
--   local index = address_map.index()  -- the same table for numbered
--                          -- addresses that are never removed (the
--                          -- nodes of a heap snapshot's graph)
--   index:put(addrs, v)    -- v's address is addrs[v] (an FFI array)
--   index:get(addrs, addr) -- the number of addr, or nil
--
-- An open-addressing hash table (16-byte buckets of an address and its
-- slot; linear probing, deletion by shifting the entries after it back,
-- doubled when half full; the hash keeps neighbouring blocks in
-- neighbouring buckets), taken with malloc and freed as soon as the
-- stream is done, so that it is neither in the VM's heap nor left for
-- its collector.  Slot 0 marks an empty bucket: slots start at 1.
--
-- The index is that table with 4-byte buckets of numbers only: a
-- bucket's key is read from the caller's array of addresses, which may
-- be reallocated between calls (it is passed to each), so that an
-- address costs 8 to 16 bytes.  The same home and the same probing.

local ffi = require('ffi')

local M = {}

pcall(ffi.cdef, [[
  void *malloc(size_t size);
  void free(void *ptr);
]])
-- A bucket: an address, its slot (0: empty) and its home (home_of,
-- below: kept so that a removal, which moves entries back, computes the
-- home of none), in one 16-byte record so that a lookup touches one
-- cache line.
pcall(ffi.cdef, [[
  typedef struct { double addr; uint32_t slot; uint32_t home; }
    memprof_heap_bucket;
]])
local bit = require('bit')
local band, bxor, rshift, tobit = bit.band, bit.bxor, bit.rshift, bit.tobit
local arshift = bit.arshift
local floor = math.floor
local C = ffi.C
local bucket_pointer = ffi.typeof('memprof_heap_bucket *')
local MIN_BITS = 10
local TWO_32 = 4294967296
local GOLDEN = 0x9E3779B1

-- The bucket where addr's search starts (0 .. mask, mask = 2^bits - 1).
-- Addresses are exact as doubles (below 2^53).  The low 32 bits, less
-- the 4 that alignment leaves at zero, are folded twice by `bits` (so
-- that addresses 2^(bits+4) or 2^(2*bits+4) apart do not share a home);
-- the high ones, multiplied by a 32-bit odd constant (exact: the
-- product is below 2^53), add their top bits.  Blocks near each other
-- in memory thus get buckets near each other: an allocator hands out
-- and takes back neighbouring blocks, so most searches touch cache
-- lines used just before; a multiplicative hash of the whole address
-- would scatter them.
local function home_of(addr, bits, mask)
  local x = rshift(tobit(addr), 4)
  local y = rshift(x, bits)
  local high = tobit(floor(addr / TWO_32) * GOLDEN)
  return band(bxor(x, y, rshift(y, bits), rshift(high, 32 - bits)), mask)
end

local Map = {}
Map.__index = Map

-- The map's figures: its buckets and the numbers that go with them.
-- The functions below take a pointer to it (M.new keeps one as an
-- upvalue of the heap's feed): LuaJIT makes a pointer held that way a
-- constant, and reads each field with one load, where a field of a
-- Lua table costs a look-up of its key and a check of its type.
pcall(ffi.cdef, [[
  typedef struct { memprof_heap_bucket *buckets;
    int32_t bits, mask, live, limit; } memprof_heap_map;
]])
local map_record = ffi.typeof('memprof_heap_map[1]')
local map_pointer = ffi.typeof('memprof_heap_map *')

-- The buckets are taken with malloc and freed by free(), or by the
-- finalizer (C's free itself: no Lua code runs in the collector) of
-- the map's `owner`, for a map dropped before its end.  grow(), which
-- has the pointer only, finds the map here.  (Weak values: a map
-- dropped takes its entry away.)
local map_of = setmetatable({}, { __mode = 'v' })

-- An array of 2^bits empty buckets for map (its owner), or raises.
local function allocate(map, bits)
  local size = 2 ^ bits
  local buckets = C.malloc(size * 16)
  if buckets == nil then
    error(string.format('no memory for an address map of %d entries',
      size), 0)
  end
  ffi.fill(buckets, size * 16)
  map.owner = ffi.gc(ffi.cast(bucket_pointer, buckets), C.free)
  return map.owner
end

-- Frees the buckets map.owner has (before new ones, or for good).
local function release(map)
  local owner = map.owner
  if owner then
    map.owner = false
    map.state.buckets = nil
    C.free(ffi.gc(owner, nil))
  end
end

function M.new()
  local record = map_record()
  local m = ffi.cast(map_pointer, record)
  -- (record keeps the memory of the pointer `state` alive.)
  local map = setmetatable({ record = record, state = m, owner = false },
    Map)
  map_of[m] = map
  m.buckets, m.bits = allocate(map, MIN_BITS), MIN_BITS
  m.mask, m.live, m.limit = 2 ^ MIN_BITS - 1, 0, 2 ^ (MIN_BITS - 1)
  return map
end

-- (The functions of events read the buckets as m.buckets[i], never
-- keeping m.buckets in a local: a pointer read from a record is a new
-- cdata object once it is kept, which LuaJIT's code makes only when it
-- leaves the trace with it, at every switch from a trace to another.)

-- The runs of buckets are walked by functions that call themselves
-- (in tail position: no stack grows), not by loops.  LuaJIT compiles a
-- loop that runs often as a trace of its own, and its code for an
-- event that comes to the loop then jumps to that trace and, after
-- it, goes on in the interpreter: the rest of the event and the passes
-- after the heap.  A function whose own trace returns (most runs are
-- short: the map is at most half full) is compiled into the callers'
-- code instead.

-- The bucket of addr when it is not at its home (i): the run after
-- it is searched.  Returns the bucket, or nil and the first empty one.
local function search(m, addr, i)
  i = band(i + 1, m.mask)
  if m.buckets[i].slot == 0 then
    return nil, i
  end
  if m.buckets[i].addr == addr then
    return i
  end
  return search(m, addr, i)
end

-- The bucket of addr and its slot, or nil.
local function find(m, addr)
  local i = home_of(addr, m.bits, m.mask)
  local slot = m.buckets[i].slot
  if slot == 0 then
    return nil
  end
  if m.buckets[i].addr ~= addr then
    i = search(m, addr, i)
    if not i then
      return nil
    end
    slot = m.buckets[i].slot
  end
  return i, slot
end

local function get(m, addr)
  local _, slot = find(m, addr)
  return slot
end

-- Puts addr (not in the map) into the first empty bucket of its run.
local function place(b, mask, bits, addr, slot)
  local home = home_of(addr, bits, mask)
  local i = home
  while b[i].slot ~= 0 do
    i = band(i + 1, mask)
  end
  b[i].addr, b[i].slot, b[i].home = addr, slot, home
end

-- Twice as many buckets, with every entry placed again.
local function grow(m)
  local map = map_of[m]
  local old, old_size, old_owner = m.buckets, m.mask + 1, map.owner
  local bits = m.bits + 1
  local b = allocate(map, bits)
  local mask = 2 ^ bits - 1
  for i = 0, old_size - 1 do
    local slot = old[i].slot
    if slot ~= 0 then
      place(b, mask, bits, old[i].addr, slot)
    end
  end
  C.free(ffi.gc(old_owner, nil))
  m.buckets, m.bits = b, bits
  m.mask, m.limit = mask, 2 ^ (bits - 1)
end

-- The slot of addr if it is in the map; else addr gets `slot`, which
-- is returned.
local function put(m, addr, slot)
  local home = home_of(addr, m.bits, m.mask)
  local i = home
  local found = m.buckets[i].slot
  if found ~= 0 then
    if m.buckets[i].addr == addr then
      return found
    end
    local at, empty = search(m, addr, i)
    if at then
      return m.buckets[at].slot
    end
    i = empty
  end
  local live = m.live + 1
  m.live = live
  if live > m.limit then
    grow(m)
    place(m.buckets, m.mask, m.bits, addr, slot)
  else
    m.buckets[i].addr, m.buckets[i].slot = addr, slot
    m.buckets[i].home = home
  end
  return slot
end

-- Empties bucket `hole`, then moves back each entry of the run after
-- it (from bucket i) whose home is not between the emptied bucket and
-- the entry, so that every entry stays reachable from its home without
-- tombstones.  (A function calling itself: see search.)  Whether the
-- entry moves is not a branch: an entry that stays is copied onto
-- itself.  Each branch of the code for an event makes LuaJIT compile
-- the rest of the event once more, for the events that take it.
local function shift_back(m, hole, i)
  if m.buckets[i].slot == 0 then
    m.buckets[hole].slot = 0
    return
  end
  local mask = m.mask
  -- Distances from the entry's home to the hole and to the entry:
  -- `moves` is -1 if the first is the shorter, else 0.
  local home = m.buckets[i].home
  local moves = arshift(band(hole - home, mask) - band(i - home, mask), 31)
  local to = i + band(hole - i, moves)
  m.buckets[to].addr = m.buckets[i].addr
  m.buckets[to].slot = m.buckets[i].slot
  m.buckets[to].home = home
  return shift_back(m, hole + band(i - hole, moves), band(i + 1, mask))
end

-- Takes addr out of the map; returns its slot, or nil.
local function remove(m, addr)
  local i, slot = find(m, addr)
  if not i then
    return nil
  end
  m.live = m.live - 1
  shift_back(m, i, band(i + 1, m.mask))
  return slot
end

Map.state_put, Map.state_remove = put, remove

function Map:get(addr)
  return get(self.state, addr)
end

function Map:put(addr, slot)
  return put(self.state, addr, slot)
end

function Map:remove(addr)
  return remove(self.state, addr)
end

-- The bucket where the search for addr starts.
function Map:home(addr)
  return home_of(addr, self.state.bits, self.state.mask)
end

function Map:count()
  return self.state.live
end

function Map:each(fn)
  local m = self.state
  local b = m.buckets
  for i = 0, m.mask do
    if b[i].slot ~= 0 then
      fn(b[i].addr, b[i].slot)
    end
  end
end

-- Frees the C memory now; the map must not be used after.
function Map:free()
  release(self)
end

-- The index ------------------------------------------------------------------

local INT32S = ffi.typeof('int32_t[?]')

local Index = {}
Index.__index = Index

function M.index()
  return setmetatable({ bits = MIN_BITS, mask = 2 ^ MIN_BITS - 1,
    count = 0, buckets = INT32S(2 ^ MIN_BITS) }, Index)
end

-- Puts v into the first empty bucket from i on (a function calling
-- itself, not a loop: see search).
local function fill(buckets, mask, v, i)
  if buckets[i] == 0 then
    buckets[i] = v
    return
  end
  return fill(buckets, mask, v, band(i + 1, mask))
end

local function index_place(buckets, bits, mask, addr, v)
  return fill(buckets, mask, v, home_of(addr, bits, mask))
end

-- Twice as many buckets, each number placed again.
local function index_grow(self, addrs)
  local old, size = self.buckets, self.mask + 1
  local bits = self.bits + 1
  local mask = 2 ^ bits - 1
  local buckets = INT32S(mask + 1)
  for i = 0, size - 1 do
    local v = old[i]
    if v ~= 0 then
      index_place(buckets, bits, mask, addrs[v], v)
    end
  end
  self.buckets, self.bits, self.mask = buckets, bits, mask
end

-- Adds v (> 0, not yet in the index), whose address is addrs[v].
function Index:put(addrs, v)
  self.count = self.count + 1
  if self.count * 2 > self.mask + 1 then
    index_grow(self, addrs)
  end
  index_place(self.buckets, self.bits, self.mask, addrs[v], v)
end

-- The number at bucket i or after it in its run, or nil.  (A function
-- calling itself, not a loop: see search.)
local function probe(buckets, mask, addrs, addr, i)
  local v = buckets[i]
  if v == 0 then
    return nil
  end
  if addrs[v] == addr then
    return v
  end
  return probe(buckets, mask, addrs, addr, band(i + 1, mask))
end

function Index:get(addrs, addr)
  local mask = self.mask
  return probe(self.buckets, mask, addrs, addr, home_of(addr, self.bits,
    mask))
end

return M
