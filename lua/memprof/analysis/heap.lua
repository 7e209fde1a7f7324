-- memprof.analysis.heap: the live heap, as an analysis pass.
--
-- Tracks every block allocated during the profile (its address, size,
-- the site and stack of the event that gave the block its current size,
-- and that event's number among the allocation events) and, per site
-- (or per group, see below):
--   holds     bytes produced at the site minus bytes of its blocks later
--             freed or reallocated away (can be negative, see below)
--   allocs    events at the site that produced a block (alloc, realloc)
--   reallocs  how many of those were reallocations
--   frees     blocks of the site later freed or reallocated away
--
-- A realloc releases the old block (charged to the site that produced
-- it) and produces a new one at the realloc site.  A block released but
-- never allocated during the profile is charged to the pseudo-site
-- heap.BEFORE_PROFILING, whose holds go negative.  Holds are computed
-- from the sizes in the events, so the sum of holds over all sites is
-- exactly the net bytes of the stream: alloc nsize + realloc nsize -
-- realloc osize - free osize.
--
--   local pass = heap.new([opts])   -- opts.grouper: a memprof.analysis.groups
--                                   -- grouper; the stats are then per
--                                   -- group of (site, stack)
--   local owner = pass:feed(ev)   -- site that produced the released block
--   pass.feed_values(kind, site, oaddr, osize, naddr, nsize, oweight,
--     nweight) -> owner   -- the same, the event as values (no self):
--                         -- with opts.blocks = false only (else false)
--   pass.keys    -- the sites (or groups) in order of first appearance:
--                -- key i is in slot i
--   pass.holds, pass.allocs, pass.reallocs, pass.frees
--                -- their figures, by slot (a large profile has a site
--                -- per place: columns, not a record per site)
--   pass:stats_list()  -- the figures as records (heap.Stats), in the
--                      -- order of keys: `site` (the site, or the
--                      -- group), `group` (the same table) and the four
--   pass.total   -- net bytes of the stream
--   pass.keeps_blocks  -- false with opts.blocks = false (see M.new)
--   pass:live_blocks(), pass:each_live_block(fn)
--   pass:forget_blocks()  -- then the two above raise an error
--   pass:finish()  -- after the last event: frees the address map and
--                  -- the indexes only events need (a large profile has
--                  -- an entry per place in each), so that the formats
--                  -- can reuse their memory
--
-- While the passes after it see an event, the heap also says about the
-- block the event released (realloc, free):
--   pass.released_stack   the stack of the event that produced it, or nil
--   pass.released_born    the number of that event among the allocation
--                         events, or nil (blocks allocated before the profile)
--   pass.released_age     how many allocation events happened after it
--                         and before this release, or nil
--   pass.released_size    its size when it was produced, or nil
--   pass.released_weight  how many blocks it stands for (1 unless the
--                         profile is sampled: memprof.analysis.sampling), or nil
-- and pass.allocations is the number of allocation events (alloc and
-- realloc) so far, the current one included: an event's birth number.
--
-- Live blocks are kept in slots: the address maps to a slot number, and
-- the block's facts (its address too, so the live blocks can be listed
-- without the map) are kept by slot: under LuaJIT in one FFI record per
-- slot (address, size, birth, weight, and numbers for the site and
-- stack), in plain Lua in one array per fact.  The address map is one of
-- two kinds (M.address_map):
--   'ffi'    under LuaJIT: an open-addressing hash table in C memory
--            (16-byte buckets of an address and its slot; linear
--            probing, deletion by shifting the entries after it back,
--            doubled when half full; the hash keeps neighbouring blocks
--            in neighbouring buckets), taken with malloc and freed
--            as soon as the stream is done (pass:finish()), so that it is
--            neither in the VM's heap nor left for its collector
--   'plain'  a Lua table (plain Lua 5.1): a released address is marked
--            dead (slot 0) rather than removed, since removing keys from
--            a large Lua table makes it rehash often; when dead addresses
--            outnumber live ones, the table is rebuilt with the live ones
-- Both have get(addr) -> slot or nil; put(addr, slot) -> the slot of
-- addr if it is in the map, else addr gets `slot` (returned);
-- remove(addr) -> its slot (taken out of the map) or nil; count() (live
-- addresses); each(fn) (fn(addr, slot) for each, in no particular
-- order); and free() (the C memory; the map is not used after).  The
-- heap's feed calls put and remove as map.state_put(map.state, addr,
-- slot) and map.state_remove(map.state, addr): for the FFI map, state is
-- a pointer to a C record of the map's buckets, size and count (bits,
-- mask, live, limit), which LuaJIT's code for an event reads as a
-- constant; for the plain map, state is the map.

local record_shape = require('memprof.record').shape

local M = {}

-- The stats of a site or group as a record (stats_list()).  `group` is
-- the same value as `site`, kept as a field of its own because the
-- reports read either name.
local Stats = record_shape({ 'site', 'group', 'holds', 'allocs',
  'reallocs', 'frees' })
M.Stats = Stats

M.BEFORE_PROFILING = require('memprof.read.stream').Site.make({ 0, 'before',
  '(blocks allocated before the profile)' })

local BEFORE_PROFILING = M.BEFORE_PROFILING

-- The plain address map ----------------------------------------------------

local PlainMap = {}
PlainMap.__index = PlainMap

-- Dead addresses are dropped once there are more than this many and
-- more than live ones.
local MIN_DEAD_TO_DROP = 65536

local function new_plain_map()
  local map = setmetatable({ slot_of = {}, live = 0, dead = 0,
    rebuilds = 0 }, PlainMap)
  map.state = map
  return map
end

function PlainMap:get(addr)
  local slot = self.slot_of[addr]
  if slot == 0 then
    return nil
  end
  return slot
end

function PlainMap:put(addr, slot)
  local slot_of = self.slot_of
  local found = slot_of[addr]
  if found then
    if found ~= 0 then
      return found
    end
    self.dead = self.dead - 1
  end
  slot_of[addr] = slot
  self.live = self.live + 1
  return slot
end

function PlainMap:remove(addr)
  local slot_of = self.slot_of
  local slot = slot_of[addr]
  if not slot or slot == 0 then
    return nil
  end
  slot_of[addr] = 0
  self.live = self.live - 1
  local dead = self.dead + 1
  self.dead = dead
  if dead > MIN_DEAD_TO_DROP and dead > self.live then
    self:drop_dead()
  end
  return slot
end

-- Rebuild the table with the live addresses only.
function PlainMap:drop_dead()
  local live = {}
  for addr, slot in pairs(self.slot_of) do
    if slot ~= 0 then
      live[addr] = slot
    end
  end
  self.slot_of = live
  self.dead = 0
  self.rebuilds = self.rebuilds + 1
end

function PlainMap:count()
  return self.live
end

function PlainMap:each(fn)
  for addr, slot in pairs(self.slot_of) do
    if slot ~= 0 then
      fn(addr, slot)
    end
  end
end

function PlainMap:free()
  self.slot_of, self.live, self.dead = {}, 0, 0
end

PlainMap.state_put, PlainMap.state_remove = PlainMap.put, PlainMap.remove

-- The FFI address map ------------------------------------------------------

local new_ffi_map

local ok_ffi, ffi = false, nil
if jit then
  ok_ffi, ffi = pcall(require, 'ffi')
end
if ok_ffi then
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
  -- lines used just before.  A multiplicative hash of the whole address,
  -- which scatters neighbours, made the map four times slower on profiles
  -- of real programs.
  local function home_of(addr, bits, mask)
    local x = rshift(tobit(addr), 4)
    local y = rshift(x, bits)
    local high = tobit(floor(addr / TWO_32) * GOLDEN)
    return band(bxor(x, y, rshift(y, bits), rshift(high, 32 - bits)), mask)
  end

  local FfiMap = {}
  FfiMap.__index = FfiMap

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

  function new_ffi_map()
    local record = map_record()
    local m = ffi.cast(map_pointer, record)
    -- (record keeps the memory of the pointer `state` alive.)
    local map = setmetatable({ record = record, state = m, owner = false },
      FfiMap)
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

  local function get(m, addr)
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
    local mask = m.mask
    local i = home_of(addr, m.bits, mask)
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
    m.live = m.live - 1
    shift_back(m, i, band(i + 1, mask))
    return slot
  end

  FfiMap.state_put, FfiMap.state_remove = put, remove

  function FfiMap:get(addr)
    return get(self.state, addr)
  end

  function FfiMap:put(addr, slot)
    return put(self.state, addr, slot)
  end

  function FfiMap:remove(addr)
    return remove(self.state, addr)
  end

  -- The bucket where the search for addr starts.
  function FfiMap:home(addr)
    return home_of(addr, self.state.bits, self.state.mask)
  end

  function FfiMap:count()
    return self.state.live
  end

  function FfiMap:each(fn)
    local m = self.state
    local b = m.buckets
    for i = 0, m.mask do
      if b[i].slot ~= 0 then
        fn(b[i].addr, b[i].slot)
      end
    end
  end

  -- Frees the C memory now; the map must not be used after.
  function FfiMap:free()
    release(self)
  end
end

-- A new address map: kind 'ffi' or 'plain', or nil for the best one
-- available.  Returns the map and its kind.
function M.address_map(kind)
  if kind == 'ffi' or (kind == nil and new_ffi_map) then
    assert(new_ffi_map, 'the FFI address map needs LuaJIT')
    return new_ffi_map(), 'ffi'
  end
  return new_plain_map(), 'plain'
end

-- The facts of the live blocks, by slot --------------------------------------
--
-- Both kinds have set(slot, addr, size, site, stack, weight, born,
-- key_slot); take(slot) -> site, stack (or nil), born, size, weight,
-- key_slot (or nil), and the slot is free; each(slot_count, fn) calls
-- fn(addr, size, site, stack, born, weight) for each slot in use, in slot
-- order.  key_slot is the heap's slot of the block's site when the heap
-- groups by line (nil otherwise): the FFI records keep it as the site's
-- number, and give it back, which saves the heap two look-ups of the
-- site in hash tables per block; the plain arrays ignore it.

-- Plain Lua: one array per fact.
local PlainBlocks = {}
PlainBlocks.__index = PlainBlocks

local function new_plain_blocks()
  return setmetatable({
    addr_at = {},     -- slot -> address, or false (a free slot)
    site_at = {},     -- slot -> site
    size_at = {},     -- slot -> size
    weight_at = {},   -- slot -> blocks it stands for (memprof.analysis.sampling)
    stack_at = {},    -- slot -> stack, or false
    born_at = {},     -- slot -> number of the allocation event
  }, PlainBlocks)
end

function PlainBlocks:set(slot, addr, size, site, stack, weight, born)
  -- (key_slot, the last argument, is not kept: see above.)
  self.addr_at[slot] = addr
  self.site_at[slot] = site
  self.size_at[slot] = size
  self.weight_at[slot] = weight
  self.stack_at[slot] = stack or false
  self.born_at[slot] = born
end

function PlainBlocks:take(slot)
  self.addr_at[slot] = false
  return self.site_at[slot], self.stack_at[slot] or nil, self.born_at[slot],
    self.size_at[slot], self.weight_at[slot]
end

function PlainBlocks:each(slot_count, fn)
  local addr_at, site_at, size_at, stack_at, born_at = self.addr_at,
    self.site_at, self.size_at, self.stack_at, self.born_at
  local weight_at = self.weight_at
  for slot = 1, slot_count do
    local addr = addr_at[slot]
    if addr then
      fn(addr, size_at[slot], site_at[slot], stack_at[slot] or nil,
        born_at[slot], weight_at[slot])
    end
  end
end

-- Under LuaJIT: one record per slot in an FFI array (doubled as needed;
-- in the VM's heap, as the Lua arrays are, and freed by the collector
-- with the pass, without a finalizer), so that releasing a block reads
-- one record instead of six Lua arrays; the site and stack are numbers
-- into lists of the sites and stacks seen (intern).  By line, the sites'
-- list is the heap's keys (new_ffi_blocks(keys)): the heap gives each
-- block its site's slot, and no index of the sites is needed.
local new_ffi_blocks
if ok_ffi then
  pcall(ffi.cdef, [[
    typedef struct { double addr, size, born, weight; int32_t site, stack; }
      memprof_heap_block;
  ]])
  -- Where the records are, for set and take: a pointer to this is a
  -- constant in their compiled code (see memprof_heap_map).
  pcall(ffi.cdef, [[
    typedef struct { memprof_heap_block *records; int32_t capacity; }
      memprof_heap_blocks;
  ]])
  local block_array = ffi.typeof('memprof_heap_block[?]')
  local blocks_record = ffi.typeof('memprof_heap_blocks[1]')
  local blocks_pointer = ffi.typeof('memprof_heap_blocks *')
  local BLOCK_SIZE = ffi.sizeof('memprof_heap_block')
  local MIN_BLOCKS = 1024

  local FfiBlocks = {}
  FfiBlocks.__index = FfiBlocks

  -- (ffi.new fills the records with zeros: a record of site 0 is free.)
  local function allocate_blocks(count)
    return block_array(count)
  end

  -- Room for slots up to `slot` (records are indexed by slot from 0).
  -- self.records keeps the array alive; `at` points into it.
  local function grow(self, at, slot)
    local capacity = self.capacity
    while capacity <= slot do
      capacity = capacity * 2
    end
    local records = allocate_blocks(capacity)
    ffi.copy(records, self.records, self.capacity * BLOCK_SIZE)
    self.records, self.capacity = records, capacity
    at.records, at.capacity = records, capacity
  end

  -- The number of a site or stack in a record, from 1, given at its
  -- first block. (Numbering them by their ids in the stream, to save the
  -- index, made the text report of a stack profile twice as slow: the
  -- stacks of compiled code have no id, and a look-up that branches on
  -- it costs more than the index's.)
  local function intern(list, index, value)
    local i = #list + 1
    list[i] = value
    index[value] = i
    return i
  end

  -- set and take are closures of each blocks' own, whose lists and
  -- indexes are upvalues (no look-up of a field of the blocks for each
  -- event); finish() drops them with the indexes.
  local function setter(self, at)
    local site_list, site_index = self.site_list, self.site_index
    local stack_list, stack_index = self.stack_list, self.stack_index
    return function(_, slot, addr, size, site, stack, weight, born,
        key_slot)
      if slot >= at.capacity then
        grow(self, at, slot)
      end
      -- (at.records[slot] each time, not kept in a local: see
      -- memprof_heap_map's functions.)
      at.records[slot].addr, at.records[slot].size = addr, size
      at.records[slot].born, at.records[slot].weight = born, weight
      at.records[slot].site = key_slot or site_index[site] or
        intern(site_list, site_index, site)
      if stack then
        at.records[slot].stack = stack_index[stack] or
          intern(stack_list, stack_index, stack)
      else
        at.records[slot].stack = 0
      end
    end
  end

  -- (take holds `at` without the blocks, whose record keeps its memory:
  -- it is reached only through the blocks, or through the heap that has
  -- them, until finish() drops it.)
  local function taker(self, at)
    local site_list, stack_list, by_key = self.site_list, self.stack_list,
      self.by_key
    return function(_, slot)
      local site = at.records[slot].site
      at.records[slot].site = 0
      return site_list[site], stack_list[at.records[slot].stack] or nil,
        at.records[slot].born, at.records[slot].size,
        at.records[slot].weight, by_key and site or nil
    end
  end

  function new_ffi_blocks(site_list)
    local self = setmetatable({ records = allocate_blocks(MIN_BLOCKS),
      capacity = MIN_BLOCKS, site_list = site_list or { [0] = false },
      site_index = {}, by_key = site_list ~= nil,
      stack_list = { [0] = false }, stack_index = {},
      record = blocks_record() }, FfiBlocks)
    local at = ffi.cast(blocks_pointer, self.record)
    at.records, at.capacity = self.records, self.capacity
    self.set, self.take = setter(self, at), taker(self, at)
    return self
  end

  -- After the last event: the indexes are needed only to number the
  -- sites and stacks of new blocks.
  function FfiBlocks:finish()
    self.site_index, self.stack_index = nil, nil
    self.set, self.take = nil, nil
  end

  function FfiBlocks:each(slot_count, fn)
    local records, site_list, stack_list = self.records, self.site_list,
      self.stack_list
    for slot = 1, slot_count do
      local record = records[slot]
      if record.site ~= 0 then
        fn(record.addr, record.size, site_list[record.site],
          stack_list[record.stack] or nil, record.born, record.weight)
      end
    end
  end
end

-- The pass's methods, set as fields of each pass (M.new): the pass has
-- no metatable, so that storing nil into released_* (as for most
-- releases of a profile without stacks) costs LuaJIT's code no look-up
-- of __newindex in it.
local Heap = {}

-- The heap's own counts, which each event reads and changes: under
-- LuaJIT a record in FFI memory, reached through a pointer that the
-- compiled feed holds as a constant (one load a field, no check of its
-- type); in plain Lua a table.  pass.total and pass.allocations are
-- copies, written with each event for the passes after the heap (with
-- opts.blocks = false, at finish only).
local new_counts
if ok_ffi then
  pcall(ffi.cdef, [[
    typedef struct { double total, allocations; int32_t free_count,
      slot_count; } memprof_heap_counts;
  ]])
  local counts_record = ffi.typeof('memprof_heap_counts[1]')
  local counts_pointer = ffi.typeof('memprof_heap_counts *')
  -- Returns the pointer and the record that keeps its memory.
  function new_counts()
    local record = counts_record()
    return ffi.cast(counts_pointer, record), record
  end
else
  function new_counts()
    return { total = 0, allocations = 0, free_count = 0, slot_count = 0 }
  end
end

local make_feed

-- opts.address_map: the kind of address map ('ffi' or 'plain'; the
-- best one available by default).  opts.blocks = false: the pass keeps
-- no facts of each live block, only its site (by line only: not with a
-- grouper), so that the released_* fields stay nil and the live blocks
-- cannot be listed; the figures are the same.  It makes each event
-- cheaper, for the analyses that need neither (memprof.analysis.analyze).
function M.new(opts)
  opts = opts or {}
  assert(opts.blocks ~= false or not opts.grouper,
    'memprof.analysis.heap: blocks = false needs the rows by line')
  local map, map_kind = M.address_map(opts.address_map)
  local counts, counts_record = new_counts()
  local self = {
    keys = {},        -- sites (or groups), in order of first appearance
    slot_of_id = {},  -- a key's id -> its slot (its place in keys)
    holds = {}, allocs = {}, reallocs = {}, frees = {},  -- by slot
    grouper = opts.grouper or false,
    total = 0,
    allocations = 0,
    -- Created as false, then set to nil below, so that the table has
    -- their slots: storing nil into a missing key is slow.
    released_stack = false,
    released_born = false,
    released_age = false,
    released_size = false,
    released_weight = false,
    -- live blocks
    slot_of = map,    -- address map: address -> slot
    map_kind = map_kind,
    -- slot -> the block's facts: FFI records with the FFI map
    blocks = false,
    free_slots = {},  -- slots to reuse
    counts = counts,  -- see new_counts
    counts_record = counts_record or false,
    slot_count = 0,   -- slots used (set by finish())
    feed = false,
    feed_values = false,  -- with opts.blocks = false (see make_feed)
  }
  self.keeps_blocks = opts.blocks ~= false
  if not self.keeps_blocks then
    self.free_slots = false
  elseif map_kind ~= 'ffi' then
    self.blocks = new_plain_blocks()
  elseif self.grouper then
    self.blocks = new_ffi_blocks()
  else
    self.blocks = new_ffi_blocks(self.keys)
  end
  for name, method in pairs(Heap) do
    self[name] = method
  end
  self.feed = make_feed(self)
  self.released_stack, self.released_born = nil, nil
  self.released_age, self.released_size = nil, nil
  self.released_weight = nil
  return self
end

-- The figures of every site or group as records, in order of keys.
function Heap:stats_list()
  local list = {}
  for slot, key in ipairs(self.keys) do
    list[slot] = Stats.make({ key, key, self.holds[slot], self.allocs[slot],
      self.reallocs[slot], self.frees[slot] })
  end
  return list
end

-- pass:feed(ev): account one event.  For realloc and free, returns the
-- site that had produced the released block (BEFORE_PROFILING if
-- unknown).  A closure of each pass's own, made by M.new: the tables,
-- the map's and blocks' functions and the counts are its upvalues, so
-- that LuaJIT's code for an event looks up no field of the pass (when
-- events take different branches, as allocations and frees do, it runs
-- the start of its compiled loop again for each, every look-up
-- included).  The helpers are local functions of it for the same reason.
function make_feed(self)
  local keys, slot_of_id = self.keys, self.slot_of_id
  local holds, allocs = self.holds, self.allocs
  local reallocs, frees = self.reallocs, self.frees
  local grouper, counts, free_slots = self.grouper, self.counts,
    self.free_slots
  local map = self.slot_of
  local map_state, map_put, map_remove = map.state, map.state_put,
    map.state_remove
  local blocks = self.blocks
  local blocks_set, blocks_take = blocks and blocks.set, blocks and
    blocks.take

  -- The slot of a site or group seen for the first time, its figures 0.
  -- (Slots, not the keys' ids, index the figures: the sites that
  -- allocate are a part of all, and figures indexed by a sparse id would
  -- be kept in the hash part of each column, one hash look-up per
  -- column.)  The index of slots is by the keys' ids, which sites and
  -- groups keep first (key[1]): dense, so mostly an array of 8 bytes a
  -- key, where an index by the keys themselves is a hash table of 24 to
  -- 48.
  local function add_key(key)
    local slot = #keys + 1
    keys[slot] = key
    slot_of_id[key[1]] = slot
    holds[slot], allocs[slot], reallocs[slot], frees[slot] = 0, 0, 0, 0
    return slot
  end

  -- Forget the block at addr; returns its site (nil if unknown) and its
  -- site's slot if the blocks keep it, and sets the released_* fields.
  -- Called before the current event, if it is a realloc, is counted in
  -- allocations.
  local function release(addr)
    local slot = map_remove(map_state, addr)
    if not slot then
      self.released_stack, self.released_born = nil, nil
      self.released_age, self.released_size = nil, nil
      self.released_weight = nil
      return nil
    end
    local site, stack, born, size, weight, key_slot =
      blocks_take(blocks, slot)
    self.released_stack = stack
    self.released_born = born
    self.released_age = counts.allocations - born
    self.released_size = size
    self.released_weight = weight
    local count = counts.free_count + 1
    counts.free_count = count
    free_slots[count] = slot
    return site, key_slot
  end

  -- A new block at addr, in the last freed slot or a new one.  (An
  -- address already live keeps its slot: the stream lost the free of its
  -- previous block.)
  local function produce(addr, size, site, stack, weight, born, key_slot)
    local count = counts.free_count
    local new
    if count > 0 then
      new = free_slots[count]
    else
      new = counts.slot_count + 1
    end
    local slot = map_put(map_state, addr, new)
    if slot == new then
      if count > 0 then
        counts.free_count = count - 1
      else
        counts.slot_count = new
      end
    end
    blocks_set(blocks, slot, addr, size, site, stack, weight, born,
      key_slot)
  end

  -- The figures of the key in `slot` for the release of the event's old
  -- block (osize bytes, `weight` blocks), and for the block it produces
  -- (born: its number).
  local function count_release(slot, osize, weight)
    holds[slot] = holds[slot] - osize
    frees[slot] = frees[slot] + weight
  end

  local function count_produce(slot, kind, nsize, weight)
    local born = counts.allocations + 1
    counts.allocations = born
    holds[slot] = holds[slot] + nsize
    allocs[slot] = allocs[slot] + weight
    if kind == 'realloc' then
      reallocs[slot] = reallocs[slot] + weight
    end
    return born
  end

  local function count_total(nsize, osize)
    counts.total = counts.total + nsize - osize
  end

  if not blocks then
    -- Without the blocks' facts (opts.blocks = false, by line), the map
    -- gives each live address the slot of its site.  (No pass after the
    -- heap reads its total and allocations: they are copied at finish.)
    -- The event comes as values: pass.feed_values(kind, site, oaddr,
    -- osize, naddr, nsize, oweight, nweight) -> owner, for a loop that
    -- reads them without the reader's event table (memprof.analysis.analyze).
    local function feed_values(kind, site, oaddr, osize, naddr, nsize,
        oweight, nweight)
      local owner
      if kind ~= 'alloc' then
        local slot = map_remove(map_state, oaddr)
        if slot then
          owner = keys[slot]
        else
          owner = BEFORE_PROFILING
          slot = slot_of_id[owner[1]] or add_key(owner)
        end
        count_release(slot, osize, oweight)
      end
      if kind ~= 'free' then
        local slot = slot_of_id[site[1]] or add_key(site)
        count_produce(slot, kind, nsize, nweight)
        if map_put(map_state, naddr, slot) ~= slot then
          -- (The stream lost the free of the block that had naddr.)
          map_remove(map_state, naddr)
          map_put(map_state, naddr, slot)
        end
      end
      count_total(nsize, osize)
      return owner
    end
    self.feed_values = feed_values
    return function(_, ev)
      return feed_values(ev.kind, ev.site, ev.oaddr, ev.osize, ev.naddr,
        ev.nsize, ev.oweight, ev.nweight)
    end
  end

  return function(_, ev)
    local kind = ev.kind
    local owner
    if kind ~= 'alloc' then
      local slot
      owner, slot = release(ev.oaddr)
      if not owner then
        owner = BEFORE_PROFILING
      end
      if not slot then
        local key = owner
        if grouper then
          key = grouper:key(owner, self.released_stack)
        end
        slot = slot_of_id[key[1]] or add_key(key)
      end
      count_release(slot, ev.osize, ev.oweight)
    end
    if kind ~= 'free' then
      local site, stack = ev.site, ev.stack
      local key = site
      if grouper then
        key = grouper:key(site, stack)
      end
      local slot = slot_of_id[key[1]] or add_key(key)
      local born = count_produce(slot, kind, ev.nsize, ev.nweight)
      self.allocations = born
      produce(ev.naddr, ev.nsize, site, stack, ev.nweight, born,
        not grouper and slot or nil)
    end
    count_total(ev.nsize, ev.osize)
    self.total = counts.total
    return owner
  end
end

-- Feeding after finish() is an error (the map is freed).
local function finished()
  error('memprof.analysis.heap: an event fed after finish()', 2)
end

-- Frees the address map once the stream is done (the analysis calls it
-- after the last event); the live blocks can still be listed, but no
-- event can be fed after.
function Heap:finish()
  self.total, self.allocations = self.counts.total, self.counts.allocations
  self.slot_of:free()
  self.slot_of_id = nil
  self.slot_count = self.counts.slot_count
  -- (The feed holds the indexes and the map.)
  self.feed = finished
  if self.feed_values then
    self.feed_values = finished
  end
  if self.blocks and self.blocks.finish then
    self.blocks:finish()
  end
end

-- Forgets the live blocks (memprof.analysis.analyze does it, with the option
-- live_blocks = false, once every pass has finished): their facts take
-- a record each, and the reports need none.
function Heap:forget_blocks()
  self.blocks, self.free_slots = false, false
end

-- Calls fn(addr, size, site, stack, born, weight) for every block still
-- live, in no particular order (stack is nil when the event had none;
-- weight is how many blocks it stands for, 1 unless sampled).
function Heap:each_live_block(fn)
  if not self.blocks then
    error('the heap pass has forgotten its live blocks (memprof.analysis.analyze ' ..
      'option live_blocks = false)', 2)
  end
  self.blocks:each(self.counts.slot_count, fn)
end

-- The blocks still live at the end, sorted by address:
-- { { addr = ..., size = ..., site = ..., stack = ..., born = ... }, ... }
function Heap:live_blocks()
  local blocks = {}
  self:each_live_block(function(addr, size, site, stack, born)
    blocks[#blocks + 1] = { addr = addr, size = size, site = site,
      stack = stack, born = born }
  end)
  table.sort(blocks, function(a, b) return a.addr < b.addr end)
  return blocks
end

return M
