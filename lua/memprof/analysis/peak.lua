-- memprof.analysis.peak: the heap's high-water mark and what held it, as an
-- analysis pass.
--
-- The heap's size is the net bytes since the start (heap.total after
-- each event); the peak is the first moment it is highest (0 bytes "at
-- the start", before any event, if it never grows).  When the stream
-- records the heap at the start (the extended format), the peak is also
-- given as the VM's whole heap: that heap plus the net bytes.  The
-- memory live at that moment is broken down by group (the group of the
-- event that produced each block); what was freed of the blocks
-- allocated before the profile is kept apart (`before`), so that no row
-- is negative: the rows less before.freed_bytes add up to the peak.
--
-- One pass, memory proportional to the number of groups: each group
-- keeps its live bytes and blocks now, and their change since the
-- latest peak.  A new peak starts a new generation, which makes every
-- change recorded before it stale at once; at the end, a group's share
-- of the peak is its final value minus its change since the peak.
--
--   local pass = peak.new(grouper)      -- a memprof.analysis.groups grouper
--   -- analyze.run feeds it (after the heap), then finish(stream) gives
--   -- a memprof.analysis.rows set of peak.Row, whose rows (figures: bytes and
--   -- blocks live at the peak) are sorted by bytes, then name, groups
--   -- holding nothing left out, with these fields:
--   {
--     bytes = <the peak, net bytes>,
--     event = <number of the event that reached it, 0 for the start>,
--     offset = <byte offset of that event in the file, or nil>,
--     time = <ns: the time mark before that event, or nil>,
--     time_next = <ns: the next time mark after it, or nil>,
--     before = {                        -- blocks allocated before the
--       freed_bytes = <bytes>,          -- profile, freed or reallocated
--       freed_blocks = <blocks>,        -- away before the peak
--       live_bytes = <bytes>,           -- still live at the peak (nil
--     },                                -- without heap_at_start)
--     heap_at_start = <the VM's heap when the profile started, or nil>,
--     heap_bytes = <heap_at_start + bytes: the VM's heap at the peak,
--                   or nil>,
--     total = <net bytes at the end>,
--     estimate = <true for a sampled profile: the peak is the highest
--                 estimated heap, an estimate too>,
--   }

local record_shape = require('memprof.record').shape
local row_model = require('memprof.analysis.rows')
local ID = require('memprof.analysis.groups').ID

local M = {}

-- A row of the result.
local Row = record_shape({ 'group', 'bytes', 'blocks' })
M.Row = Row

local Peak = {}
Peak.__index = Peak

-- A group's figures are kept in columns by group id (a large profile
-- has a group per place): the rows' own (bytes and blocks live now), and
-- the pass's: the change since the latest peak and its generation.
function M.new(grouper)
  local set = row_model.new(Row)
  return setmetatable({
    grouper = grouper,
    set = set,
    bytes = set.columns.bytes, blocks = set.columns.blocks,
    since_bytes = {}, since_blocks = {}, since_generation = {},
    generation = 1,
    peak = 0, peak_event = 0, peak_offset = nil, peak_time = nil,
    time_next = nil,
    waiting_for_time = false,
  }, Peak)
end

function Peak:change(group, bytes, blocks)
  local id = group[ID]
  local live_bytes, live_blocks = self.bytes, self.blocks
  if live_bytes[id] == nil then
    self.set:add(group)
    self.since_generation[id] = 0
  end
  live_bytes[id] = live_bytes[id] + bytes
  live_blocks[id] = live_blocks[id] + blocks
  local since_bytes, since_blocks = self.since_bytes, self.since_blocks
  local generation = self.since_generation
  if generation[id] == self.generation then
    since_bytes[id] = since_bytes[id] + bytes
    since_blocks[id] = since_blocks[id] + blocks
  else
    generation[id] = self.generation
    since_bytes[id] = bytes
    since_blocks[id] = blocks
  end
end

function Peak:note_time(time)
  if self.waiting_for_time and time ~= self.peak_time then
    self.time_next = time
    self.waiting_for_time = false
  end
end

function Peak:new_peak(bytes, time, offset, event)
  self.peak = bytes
  self.peak_event = event
  self.peak_offset = offset
  self.peak_time = time
  self.time_next = nil
  self.waiting_for_time = true
  self.generation = self.generation + 1
end

function Peak:feed(kind, site, stack, osize, nsize, oweight, nweight,
    owner_id, facts)
  local grouper = self.grouper
  if owner_id then
    self:change(grouper:key(facts.owner, facts.owner_stack), -osize,
      -oweight)
  end
  if kind ~= 'free' then
    self:change(grouper:key(site, stack), nsize, nweight)
  end
  self:note_time(facts.time)
  if facts.total > self.peak then
    self:new_peak(facts.total, facts.time, facts.offset, facts.event)
  end
end

-- What was freed before the peak of the blocks allocated before the
-- profile (the pseudo-group's row, negative), and what is left of them.
local function before_part(row, heap_at_start)
  local freed_bytes = row and -row.bytes or 0
  local before = { freed_bytes = freed_bytes,
    freed_blocks = row and -row.blocks or 0 }
  if heap_at_start then
    before.live_bytes = heap_at_start - freed_bytes
  end
  return before
end

function Peak:finish(stream)
  if self.waiting_for_time and stream.time ~= self.peak_time then
    self.time_next = stream.time
  end
  local set = self.set
  local bytes, blocks = self.bytes, self.blocks
  local since_bytes, since_blocks = self.since_bytes, self.since_blocks
  local generation = self.since_generation
  local total = 0
  for _, group in ipairs(set.groups) do
    total = total + bytes[group.id]
  end
  -- Each group's figures at the peak, in place; the rows are the groups
  -- that held something then.
  local rows, before_row = {}, nil
  for _, group in ipairs(set.groups) do
    local id = group.id
    if generation[id] == self.generation then
      bytes[id] = bytes[id] - since_bytes[id]
      blocks[id] = blocks[id] - since_blocks[id]
    end
    if group.source == 'before' then
      before_row = { bytes = bytes[id], blocks = blocks[id] }
    elseif bytes[id] ~= 0 or blocks[id] ~= 0 then
      rows[#rows + 1] = group
    end
  end
  self.since_bytes, self.since_blocks, self.since_generation = nil, nil, nil
  set.groups = row_model.sort_groups(rows, bytes)
  local start = stream.heap_at_start
  set.bytes, set.event, set.offset = self.peak, self.peak_event,
    self.peak_offset
  set.time, set.time_next = self.peak_time, self.time_next
  set.total = total
  set.before = before_part(before_row, start)
  set.heap_at_start = start
  set.heap_bytes = start and start + self.peak
  set.estimate = stream.sample_bytes ~= nil
  return set
end

return M
