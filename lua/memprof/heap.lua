-- memprof.heap: the live heap, as an analysis pass.
--
-- Tracks every block allocated during the profile (address -> size and
-- the site that gave the block its current size) and, per site:
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
--   local pass = heap.new()
--   local owner = pass:feed(ev)   -- site that produced the released block
--   pass.sites   -- stats in order of first appearance
--   pass.total   -- net bytes of the stream
--   pass:stats(site), pass:live_blocks()

local M = {}

M.BEFORE_PROFILING = { id = 0, source = 'before',
  name = '(allocated before profiling)' }

local BEFORE_PROFILING = M.BEFORE_PROFILING

local Heap = {}
Heap.__index = Heap

function M.new()
  return setmetatable({
    sites = {},       -- stats records, in order of first appearance
    by_site = {},     -- site -> stats record
    owner_of = {},    -- address of a live block -> site
    size_of = {},     -- address of a live block -> size
    total = 0,
  }, Heap)
end

-- The stats record of a site (created empty on first use).
function Heap:stats(site)
  local stats = self.by_site[site]
  if not stats then
    stats = { site = site, holds = 0, allocs = 0, reallocs = 0, frees = 0 }
    self.by_site[site] = stats
    self.sites[#self.sites + 1] = stats
  end
  return stats
end

-- Account one event.  For realloc and free, returns the site that had
-- produced the released block (BEFORE_PROFILING if unknown).
function Heap:feed(ev)
  local kind = ev.kind
  local owner
  if kind ~= 'alloc' then
    local oaddr = ev.oaddr
    owner = self.owner_of[oaddr]
    if owner then
      self.owner_of[oaddr] = nil
      self.size_of[oaddr] = nil
    else
      owner = BEFORE_PROFILING
    end
    local stats = self.by_site[owner] or self:stats(owner)
    stats.holds = stats.holds - ev.osize
    stats.frees = stats.frees + 1
  end
  if kind ~= 'free' then
    local site = ev.site
    local stats = self.by_site[site] or self:stats(site)
    stats.holds = stats.holds + ev.nsize
    stats.allocs = stats.allocs + 1
    if kind == 'realloc' then
      stats.reallocs = stats.reallocs + 1
    end
    self.owner_of[ev.naddr] = site
    self.size_of[ev.naddr] = ev.nsize
  end
  self.total = self.total + ev.nsize - ev.osize
  return owner
end

-- The blocks still live at the end, sorted by address:
-- { { addr = ..., size = ..., site = ... }, ... }
function Heap:live_blocks()
  local blocks = {}
  for addr, site in pairs(self.owner_of) do
    blocks[#blocks + 1] = { addr = addr, size = self.size_of[addr],
      site = site }
  end
  table.sort(blocks, function(a, b) return a.addr < b.addr end)
  return blocks
end

return M
