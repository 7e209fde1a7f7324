-- memprof.heap: the live heap, as an analysis pass.
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
--   local pass = heap.new([opts])   -- opts.grouper: a memprof.groups
--                                   -- grouper; the stats are then per
--                                   -- group of (site, stack)
--   local owner = pass:feed(ev)   -- site that produced the released block
--   pass.sites   -- stats in order of first appearance; each has `site`
--                -- (the site, or the group) and `group` (the same table)
--   pass.total   -- net bytes of the stream
--   pass:stats(key), pass:live_blocks(), pass:each_live_block(fn)
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
--                         profile is sampled: memprof.sampling), or nil
-- and pass.allocations is the number of allocation events (alloc and
-- realloc) so far, the current one included: an event's birth number.
--
-- Live blocks are kept in slots: the address maps to a slot number, and
-- arrays indexed by slot hold the block's facts, so each block costs one
-- hash entry whatever is tracked about it.  A released address is marked
-- dead (slot 0) rather than removed: removing keys from a large Lua table
-- makes it rehash often, marking does not.  When dead addresses outnumber
-- live ones, the map is rebuilt with the live ones only.

local M = {}

M.BEFORE_PROFILING = { id = 0, source = 'before',
  name = '(blocks allocated before the profile)' }

local BEFORE_PROFILING = M.BEFORE_PROFILING

local Heap = {}
Heap.__index = Heap

function M.new(opts)
  opts = opts or {}
  local self = setmetatable({
    sites = {},       -- stats records, in order of first appearance
    by_site = {},     -- site (or group) -> stats record
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
    slot_of = {},     -- address -> slot (0: dead)
    dead_count = 0,   -- addresses marked dead in slot_of
    site_at = {},     -- slot -> site
    size_at = {},     -- slot -> size
    weight_at = {},   -- slot -> blocks it stands for (memprof.sampling)
    stack_at = {},    -- slot -> stack, or false
    born_at = {},     -- slot -> number of the allocation event
    free_slots = {},  -- slots to reuse
    free_count = 0,
    slot_count = 0,
  }, Heap)
  self.released_stack, self.released_born = nil, nil
  self.released_age, self.released_size = nil, nil
  self.released_weight = nil
  return self
end

-- The stats record of a site or group (created empty on first use).
function Heap:stats(key)
  local stats = self.by_site[key]
  if not stats then
    stats = { site = key, group = key, holds = 0, allocs = 0, reallocs = 0,
      frees = 0 }
    self.by_site[key] = stats
    self.sites[#self.sites + 1] = stats
  end
  return stats
end

-- The row a block of this site and stack is counted in.
function Heap:key(site, stack)
  local grouper = self.grouper
  if grouper then
    return grouper:key(site, stack)
  end
  return site
end

function Heap:new_slot()
  local count = self.free_count
  if count > 0 then
    self.free_count = count - 1
    return self.free_slots[count]
  end
  self.slot_count = self.slot_count + 1
  return self.slot_count
end

-- Rebuild the address map with the live blocks only.
function Heap:drop_dead_addresses()
  local live = {}
  for addr, slot in pairs(self.slot_of) do
    if slot ~= 0 then
      live[addr] = slot
    end
  end
  self.slot_of = live
  self.dead_count = 0
end

function Heap:mark_dead(addr)
  self.slot_of[addr] = 0
  local dead = self.dead_count + 1
  self.dead_count = dead
  if dead > 65536 and dead > self.slot_count - self.free_count then
    self:drop_dead_addresses()
  end
end

-- Forget the block at addr; returns its site (nil if unknown) and sets
-- the released_* fields.  Called before the current event, if it is a
-- realloc, is counted in allocations.
function Heap:release(addr)
  local slot = self.slot_of[addr]
  if not slot or slot == 0 then
    self.released_stack, self.released_born = nil, nil
    self.released_age, self.released_size = nil, nil
    self.released_weight = nil
    return nil
  end
  self:mark_dead(addr)
  local born = self.born_at[slot]
  self.released_stack = self.stack_at[slot] or nil
  self.released_born = born
  self.released_age = self.allocations - born
  self.released_size = self.size_at[slot]
  self.released_weight = self.weight_at[slot]
  local count = self.free_count + 1
  self.free_count = count
  self.free_slots[count] = slot
  return self.site_at[slot]
end

function Heap:produce(addr, size, site, stack, weight)
  local slot = self.slot_of[addr]
  if slot == 0 then
    self.dead_count = self.dead_count - 1
    slot = nil
  end
  if not slot then
    -- (An address already live keeps its slot: the stream lost the free
    -- of its previous block.)
    slot = self:new_slot()
    self.slot_of[addr] = slot
  end
  self.site_at[slot] = site
  self.size_at[slot] = size
  self.weight_at[slot] = weight
  self.stack_at[slot] = stack or false
  self.born_at[slot] = self.allocations
end

-- Account one event.  For realloc and free, returns the site that had
-- produced the released block (BEFORE_PROFILING if unknown).
function Heap:feed(ev)
  local kind = ev.kind
  local owner
  if kind ~= 'alloc' then
    owner = self:release(ev.oaddr) or BEFORE_PROFILING
    local key = self:key(owner, self.released_stack)
    local stats = self.by_site[key] or self:stats(key)
    stats.holds = stats.holds - ev.osize
    stats.frees = stats.frees + ev.oweight
  end
  if kind ~= 'free' then
    local site, stack = ev.site, ev.stack
    self.allocations = self.allocations + 1
    local key = self:key(site, stack)
    local stats = self.by_site[key] or self:stats(key)
    stats.holds = stats.holds + ev.nsize
    stats.allocs = stats.allocs + ev.nweight
    if kind == 'realloc' then
      stats.reallocs = stats.reallocs + ev.nweight
    end
    self:produce(ev.naddr, ev.nsize, site, stack, ev.nweight)
  end
  self.total = self.total + ev.nsize - ev.osize
  return owner
end

-- Calls fn(addr, size, site, stack, born, weight) for every block still
-- live, in no particular order (stack is nil when the event had none;
-- weight is how many blocks it stands for, 1 unless sampled).
function Heap:each_live_block(fn)
  local site_at, size_at, stack_at, born_at = self.site_at, self.size_at,
    self.stack_at, self.born_at
  local weight_at = self.weight_at
  for addr, slot in pairs(self.slot_of) do
    if slot ~= 0 then
      fn(addr, size_at[slot], site_at[slot], stack_at[slot] or nil,
        born_at[slot], weight_at[slot])
    end
  end
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
