-- memprof.analysis.blocks: what is known of each live block, by address.
--
-- The tracker sees every event before the passes, and hands them what
-- the event released: the passes never look at each other.
--
--   local tracker = blocks.new([opts])
--   local owner_id, facts = tracker.track(kind, site, stack, oaddr, osize,
--     naddr, nsize, nweight, offset)
--     owner_id nil for an alloc; for a realloc or free the id (site[1])
--              of the site of the event that produced the released
--              block, or 0 when the block is not known (allocated before
--              the profile: the site blocks.BEFORE_PROFILING)
--     facts    the tracker's record of the event (one table, reused:
--              copy what you keep), or nil with opts.facts = false:
--                owner   the site of owner_id
--                owner_stack  the stack of the event that produced the
--                        released block
--                age     allocation events (allocs and reallocs) after
--                        that one and before this release
--                size    the released block's size when it was produced
--                weight  how many blocks it stands for (1 unless the
--                        profile is sampled: memprof.analysis.sampling)
--                        (these four for a realloc or free only, nil for
--                        a block not known)
--                total   net bytes of the stream, this event included
--                time    the last time mark before the event (nil before
--                        any), read from opts.stream
--                offset  the event's offset in the file
--                event   the event's number in the file, from 1 (what
--                        memprof.analysis.focus leaves out counts too)
--   tracker.total, tracker.allocations   -- net bytes and allocation
--                        events, brought up to date by finish()
--   tracker:finish()     -- after the last event: frees the address map
--   tracker:each_live_block(fn)  -- fn(addr, size, site, stack, born,
--                        weight) for each block live at the end, in no
--                        particular order
--   tracker:live_blocks() -- the same as a list sorted by address:
--                        { { addr, size, site, stack, born }, ... }
--   tracker:forget()     -- drops the live blocks' facts (the two above
--                        then raise an error)
--
-- opts.facts = false: the tracker keeps only the site of each block
-- (its owner) and gives no facts, which makes each event cheaper; the
-- live blocks cannot be listed.  opts.sites: the stream's sites by id (stream.sites), where
-- the tracker finds a block's site; without it the tracker keeps its
-- own list.
--
-- A block lives in a slot: the address map (memprof.analysis.address_map)
-- gives its slot, and the block's facts are one FFI record per slot
-- (address, size, birth, weight, and the numbers of its site and
-- stack).  Without the facts, the map gives the id of the block's site.

local ffi = require('ffi')
local address_map = require('memprof.analysis.address_map')

local M = {}

M.BEFORE_PROFILING = require('memprof.read.stream').Site.make({ 0, 'before',
  '(blocks allocated before the profile)' })

local BEFORE_PROFILING = M.BEFORE_PROFILING

pcall(ffi.cdef, [[
  typedef struct { double addr, size, born, weight; int32_t site, stack; }
    memprof_block;
  typedef struct { memprof_block *records; int32_t capacity; }
    memprof_block_records;
  typedef struct { double total, allocations; int32_t free_count,
    slot_count; } memprof_block_counts;
]])
local record_array = ffi.typeof('memprof_block[?]')
local records_record = ffi.typeof('memprof_block_records[1]')
local records_pointer = ffi.typeof('memprof_block_records *')
local counts_record = ffi.typeof('memprof_block_counts[1]')
local counts_pointer = ffi.typeof('memprof_block_counts *')
local RECORD_SIZE = ffi.sizeof('memprof_block')
local MIN_RECORDS = 1024

local Tracker = {}
Tracker.__index = Tracker

-- The number of a stack in a record, from 1, given at its first block:
-- stacks of compiled code have no id in the stream.
local function intern(list, index, value)
  local i = #list + 1
  list[i] = value
  index[value] = i
  return i
end

-- Room for slots up to `slot` (records are indexed by slot from 0).
-- self.records keeps the array alive; `at` points into it.  (ffi.new
-- fills records with zeros: a record of site 0 is free.)
local function grow(self, at, slot)
  local capacity = self.capacity
  while capacity <= slot do
    capacity = capacity * 2
  end
  local records = record_array(capacity)
  ffi.copy(records, self.records, self.capacity * RECORD_SIZE)
  self.records, self.capacity = records, capacity
  at.records, at.capacity = records, capacity
end

-- tracker.track for a tracker that keeps the facts.  A closure of each
-- tracker's own: its tables, the map's functions, the records and the
-- counts (reached through pointers that LuaJIT's code holds as
-- constants) are upvalues, so that an event looks up no field.
local function full_track(self)
  local at, counts, facts, stream = self.at, self.counts, self.facts,
    self.stream
  local free_slots = self.free_slots
  local site_of_id, remember = self.site_of_id, self.remember
  local stack_list, stack_index = self.stack_list, self.stack_index
  local map_state, map_put, map_remove = self.map.state,
    self.map.state_put, self.map.state_remove

  -- Forgets the block at addr, and puts what was known of it into the
  -- facts; returns the id of its owner.  (At records[slot] each time, never kept
  -- in a local: a pointer kept is a new cdata object at each exit from
  -- compiled code.)
  local function take(addr)
    local slot = map_remove(map_state, addr)
    if not slot then
      facts.owner, facts.owner_stack = BEFORE_PROFILING, nil
      facts.age, facts.size, facts.weight = nil, nil, nil
      return 0
    end
    facts.owner_stack = stack_list[at.records[slot].stack] or nil
    facts.age = counts.allocations - at.records[slot].born
    facts.size, facts.weight = at.records[slot].size,
      at.records[slot].weight
    local id = at.records[slot].site
    facts.owner = site_of_id[id]
    at.records[slot].site = 0
    local count = counts.free_count + 1
    counts.free_count = count
    free_slots[count] = slot
    return id
  end

  -- A new block at addr, in the last freed slot or a new one.  (An
  -- address already live keeps its slot: the stream lost the free of
  -- its previous block.)
  local function produce(addr, size, site, stack, weight)
    local born = counts.allocations + 1
    counts.allocations = born
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
    if slot >= at.capacity then
      grow(self, at, slot)
    end
    local id = site[1]
    if remember then
      site_of_id[id] = site
    end
    at.records[slot].addr, at.records[slot].size = addr, size
    at.records[slot].born, at.records[slot].weight = born, weight
    at.records[slot].site = id
    if stack then
      at.records[slot].stack = stack_index[stack] or
        intern(stack_list, stack_index, stack)
    else
      at.records[slot].stack = 0
    end
  end

  return function(kind, site, stack, oaddr, osize, naddr, nsize, nweight,
      offset)
    local owner_id = nil
    if kind ~= 'alloc' then
      owner_id = take(oaddr)
    end
    if kind ~= 'free' then
      produce(naddr, nsize, site, stack, nweight)
    end
    local total = counts.total + nsize - osize
    counts.total = total
    facts.total, facts.time, facts.offset = total, stream.time, offset
    facts.event = facts.event + 1
    return owner_id, facts
  end
end

-- tracker.track for a tracker without the facts: the map gives each
-- live address the id of its site.
local function owner_track(self)
  local counts = self.counts
  local map_state, map_put, map_remove = self.map.state,
    self.map.state_put, self.map.state_remove
  return function(kind, site, _, oaddr, osize, naddr, nsize)
    local owner_id
    if kind ~= 'alloc' then
      owner_id = map_remove(map_state, oaddr) or 0
    end
    if kind ~= 'free' then
      counts.allocations = counts.allocations + 1
      local id = site[1]
      if map_put(map_state, naddr, id) ~= id then
        -- (The stream lost the free of the block that had naddr.)
        map_remove(map_state, naddr)
        map_put(map_state, naddr, id)
      end
    end
    counts.total = counts.total + nsize - osize
    return owner_id, nil
  end
end

function M.new(opts)
  opts = opts or {}
  local counts_memory = counts_record()
  local self = setmetatable({
    map = address_map.new(),
    keeps_facts = opts.facts ~= false,
    facts = { owner = false, owner_stack = false, age = false,
      size = false, weight = false, total = 0, time = false, offset = 0,
      event = 0 },
    stream = opts.stream or {},
    counts = ffi.cast(counts_pointer, counts_memory),
    counts_memory = counts_memory,
    site_of_id = opts.sites or {},  -- a site's id -> the site
    remember = not opts.sites,
    free_slots = {},   -- slots to reuse
    stack_list = { [0] = false }, stack_index = {},
    records = false, capacity = 0, at = false, at_memory = false,
    slot_count = 0, total = 0, allocations = 0,
  }, Tracker)
  -- (Created as false, then set to nil: storing nil into a missing key
  -- is slow.)
  local facts = self.facts
  facts.owner_stack, facts.age, facts.size, facts.weight = nil, nil, nil,
    nil
  facts.time = nil
  if self.keeps_facts then
    self.records, self.capacity = record_array(MIN_RECORDS), MIN_RECORDS
    self.at_memory = records_record()
    self.at = ffi.cast(records_pointer, self.at_memory)
    self.at.records, self.at.capacity = self.records, self.capacity
    self.track = full_track(self)
  else
    self.track = owner_track(self)
  end
  return self
end

-- Tracking after finish() is an error (the map is freed).
local function finished()
  error('memprof.analysis.blocks: an event tracked after finish()', 2)
end

function Tracker:finish()
  self.total, self.allocations = self.counts.total, self.counts.allocations
  self.slot_count = self.counts.slot_count
  self.map:free()
  self.track = finished
  self.stack_index = nil
end

function Tracker:forget()
  self.records, self.keeps_facts = false, false
end

function Tracker:each_live_block(fn)
  if not self.records then
    error('the live blocks are not kept (memprof.analysis.analyze ' ..
      'option live_blocks = false)', 2)
  end
  local records, site_of_id, stack_list = self.records, self.site_of_id,
    self.stack_list
  for slot = 1, self.slot_count do
    local record = records[slot]
    if record.site ~= 0 then
      fn(record.addr, record.size, site_of_id[record.site],
        stack_list[record.stack] or nil, record.born, record.weight)
    end
  end
end

function Tracker:live_blocks()
  local list = {}
  self:each_live_block(function(addr, size, site, stack, born)
    list[#list + 1] = { addr = addr, size = size, site = site,
      stack = stack, born = born }
  end)
  table.sort(list, function(a, b) return a.addr < b.addr end)
  return list
end

return M
