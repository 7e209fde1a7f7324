-- memprof.analysis.live: the places of a profile being written, as it
-- grows (memprof live): what each holds live, what it allocates per
-- second over the last refreshes, and the heap's size and growth.
--
--   local live = require('memprof.analysis.live')
--   local state = live.new(stream [, opts])
--     stream   a memprof.read.stream (memprof.read.follow's, or any)
--     opts.window   how many samples back the rates look (default 5:
--                   with a sample a second, the last 5 seconds)
--     opts.history  how many heap sizes are kept (default 120)
--     opts.stacks   false: no rows by stack (each event then costs a
--                   third: the block tracker keeps no facts); default
--                   true for a stream of the extended format
--   state:consume([limit]) -> true when the stream has no more events
--                   now (it waits for the file to grow, or ended), false
--                   when it stopped after the first event at or past
--                   file offset `limit` (a large file is read over
--                   several refreshes)
--   state:sample(now)  -- a refresh at time `now` (seconds, any
--                   monotonic clock): the heap's size and every place's
--                   figures are kept for the rates
--   state:rows(grouping) -> every place of a grouping ('line',
--                   'function' or 'stack'), unsorted, one per name (as
--                   the reports' rows are): records with
--                   name, group (a memprof.analysis.groups group, or a
--                   site or function: the first of the name), live (bytes), blocks (live blocks), allocated
--                   (bytes since the start), live_rate and alloc_rate
--                   (bytes per second over the window; nil before two
--                   samples)
--   state:heap() -> { bytes, absolute (bytes is the VM's heap, from the
--                   note of the heap at start; else the net bytes since
--                   the start), rate (bytes per second over the window,
--                   or nil), span (its seconds), history (the last heap
--                   sizes, oldest first), samples }
--   state.has_stacks -- whether the 'stack' grouping can say more than
--                   the places (the stream defined a stack)
--   state.by_stack  -- whether rows by stack are kept
--   state.events    -- the events consumed
--
-- The figures come from the report's own passes (memprof.analysis.heap
-- and .sites, behind the block tracker, memprof.analysis.blocks), fed
-- as memprof.analysis.analyze feeds them: by line, and by stack for a
-- stream of the extended format; 'function' sums the lines of each
-- function, as --group=function names them.  Memory: the live blocks,
-- a few figures per place, and `window` copies of two figures per place;
-- nothing grows with the file's length.

local analyze = require('memprof.analysis.analyze')
local blocks = require('memprof.analysis.blocks')
local groups = require('memprof.analysis.groups')
local heap = require('memprof.analysis.heap')
local sites = require('memprof.analysis.sites')
local sampling = require('memprof.analysis.sampling')
local read_stream = require('memprof.read.stream')

local M = {}

M.GROUPINGS = { 'line', 'function', 'stack' }

local Live = {}
Live.__index = Live

-- The heap and sites passes of one grouping (grouper nil: by line).
local function passes_of(grouper)
  return { heap = heap.new({ grouper = grouper }),
    sites = sites.new({ grouper = grouper, overrides = false }) }
end

local function unscaled(_, osize, _, nsize)
  return osize, nsize, 1, 1
end

function M.new(stream, opts)
  opts = opts or {}
  local by_stack = stream.version == read_stream.EXTENDED_VERSION and
    opts.stacks ~= false
  local self = setmetatable({
    stream = stream,
    window = opts.window or 5,
    history_size = opts.history or 120,
    line = passes_of(nil),
    stack = by_stack and passes_of(groups.new('stack')) or false,
    samples = {},   -- the last window + 1 samples, oldest first
    history = {},   -- the last heap sizes, oldest first
    has_stacks = false,
    by_stack = by_stack,
    events = 0,
  }, Live)
  self.tracker = blocks.new({ facts = by_stack, sites = stream.sites,
    stream = stream })
  local list = { self.line.heap, self.line.sites }
  if by_stack then
    list[3], list[4] = self.stack.heap, self.stack.sites
  end
  self.feed = analyze.chain(list, 1)
  self.scale = sampling.scaler(stream) or unscaled
  return self
end

function Live:consume(limit)
  local stream, track, feed, scale = self.stream, self.tracker.track,
    self.feed, self.scale
  local next_values = stream.next_values
  limit = limit or math.huge
  local count = 0
  while true do
    local kind, site, oaddr, osize, naddr, nsize, stack, offset =
      next_values(stream)
    if not kind then
      self.has_stacks = stream.has_stacks
      self.events = self.events + count
      return true
    end
    count = count + 1
    local oweight, nweight
    osize, nsize, oweight, nweight = scale(oaddr, osize, naddr, nsize)
    local owner_id, facts = track(kind, site, stack, oaddr, osize, naddr,
      nsize, nweight, offset)
    feed(kind, site, stack, osize, nsize, oweight, nweight, owner_id, facts)
    if offset >= limit then
      self.has_stacks = stream.has_stacks
      self.events = self.events + count
      return false
    end
  end
end

-- The bytes each key of a grouping's heap pass allocated (allocations
-- and reallocations), by the heap pass's slot.
local function allocated_of(passes)
  local keys = passes.heap.keys
  local kinds = passes.sites.of_kind
  local alloc, realloc = kinds.alloc, kinds.realloc
  local out = {}
  for slot, key in ipairs(keys) do
    local id = key[1]
    local a, r = alloc.slot_of_id[id], realloc.slot_of_id[id]
    out[slot] = (a and alloc.plus[a] or 0) + (r and realloc.plus[r] or 0)
  end
  return out
end

local function copy(list)
  local out = {}
  for i = 1, #list do
    out[i] = list[i]
  end
  return out
end

function Live:heap_bytes()
  return (self.stream.heap_at_start or 0) + self.tracker.counts.total
end

function Live:sample(now)
  local sample = { time = now, heap = self:heap_bytes() }
  for _, name in ipairs({ 'line', 'stack' }) do
    local passes = self[name]
    if passes then
      sample[name] = { live = copy(passes.heap.holds),
        allocated = allocated_of(passes) }
    end
  end
  local samples = self.samples
  samples[#samples + 1] = sample
  if #samples > self.window + 1 then
    table.remove(samples, 1)
  end
  local history = self.history
  history[#history + 1] = sample.heap
  if #history > self.history_size then
    table.remove(history, 1)
  end
end

-- The oldest and newest samples, and the seconds between them (nil
-- before two samples).
function Live:span()
  local samples = self.samples
  local first, last = samples[1], samples[#samples]
  if not first or first == last or last.time <= first.time then
    return nil
  end
  return first, last, last.time - first.time
end

-- Rows by slot of a grouping's passes, with the rates.
local function slot_rows(passes, name, first, seconds)
  local h = passes.heap
  local allocated = allocated_of(passes)
  local old = first and first[name]
  local rows = {}
  for slot, key in ipairs(h.keys) do
    local row = { group = key, name = key.name, live = h.holds[slot],
      blocks = h.allocs[slot] - h.frees[slot], allocated = allocated[slot] }
    if old then
      row.live_rate = (row.live - (old.live[slot] or 0)) / seconds
      row.alloc_rate = (row.allocated - (old.allocated[slot] or 0)) / seconds
    end
    rows[#rows + 1] = row
  end
  return rows
end

-- Rows summed by name: the places of one name (the same line of code
-- loaded twice, a symbol described again), or the lines of each function
-- (of_function), as the reports name their rows.
local function summed(line_rows, of_function)
  local rows, index = {}, {}
  for _, line in ipairs(line_rows) do
    local func = of_function and line.group.func or line.group
    local name = func.name
    local row = index[name]
    if not row then
      row = { group = func, name = name, live = 0, blocks = 0, allocated = 0,
        live_rate = line.live_rate and 0, alloc_rate = line.alloc_rate and 0 }
      index[name] = row
      rows[#rows + 1] = row
    end
    row.live = row.live + line.live
    row.blocks = row.blocks + line.blocks
    row.allocated = row.allocated + line.allocated
    if line.live_rate then
      row.live_rate = row.live_rate + line.live_rate
      row.alloc_rate = row.alloc_rate + line.alloc_rate
    end
  end
  return rows
end

function Live:rows(grouping)
  local first, _, seconds = self:span()
  if grouping == 'stack' then
    if not self.stack then
      return {}
    end
    return slot_rows(self.stack, 'stack', first, seconds)
  end
  return summed(slot_rows(self.line, 'line', first, seconds),
    grouping == 'function')
end

function Live:heap()
  local first, last, seconds = self:span()
  return { bytes = self:heap_bytes(),
    absolute = self.stream.heap_at_start ~= nil,
    rate = seconds and (last.heap - first.heap) / seconds or nil,
    span = seconds, history = self.history, samples = #self.samples }
end

return M
