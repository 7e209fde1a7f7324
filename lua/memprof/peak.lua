-- memprof.peak: the heap's high-water mark and what held it, as an
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
--   local pass = peak.new(grouper)      -- a memprof.groups grouper
--   -- analyze.run feeds it (after the heap), then finish(stream) gives:
--   {
--     bytes = <the peak, net bytes>,
--     event = <number of the event that reached it, 0 for the start>,
--     offset = <byte offset of that event in the file, or nil>,
--     time = <ns: the time mark before that event, or nil>,
--     time_next = <ns: the next time mark after it, or nil>,
--     rows = {                          -- by bytes, then name
--       { group = <group>, bytes = <bytes live>, blocks = <blocks live> },
--       ...                             -- groups holding nothing left out
--     },
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
local name_less = require('memprof.groups').name_less

local M = {}

-- A group's figures (a memprof.record: a large profile has one per
-- place).
local Record = record_shape({ 'group', 'bytes', 'blocks', 'since_bytes',
  'since_blocks', 'generation' })
local BYTES, BLOCKS = Record.index.bytes, Record.index.blocks
local SINCE_BYTES, SINCE_BLOCKS = Record.index.since_bytes,
  Record.index.since_blocks
local GENERATION = Record.index.generation
local GROUP = Record.index.group

-- A row of the result: the first three fields of a record, at the same
-- positions.
local Row = record_shape({ 'group', 'bytes', 'blocks' })
M.Row = Row
-- A record becomes a row in place (as_row): the same positions.
assert(Row.index.group == GROUP and Row.index.bytes == BYTES and
  Row.index.blocks == BLOCKS)

local Peak = {}
Peak.__index = Peak

function M.new(grouper)
  return setmetatable({
    grouper = grouper,
    records = {},     -- in order of first appearance
    by_group = {},
    generation = 1,
    events = 0,
    peak = 0, peak_event = 0, peak_offset = nil, peak_time = nil,
    time_next = nil,
    waiting_for_time = false,
  }, Peak)
end

function Peak:record(group)
  local record = self.by_group[group]
  if not record then
    record = Record.make({ group, 0, 0, 0, 0, 0 })
    self.by_group[group] = record
    self.records[#self.records + 1] = record
  end
  return record
end

function Peak:change(group, bytes, blocks)
  local record = self.by_group[group] or self:record(group)
  record[BYTES] = record[BYTES] + bytes
  record[BLOCKS] = record[BLOCKS] + blocks
  if record[GENERATION] == self.generation then
    record[SINCE_BYTES] = record[SINCE_BYTES] + bytes
    record[SINCE_BLOCKS] = record[SINCE_BLOCKS] + blocks
  else
    record[GENERATION] = self.generation
    record[SINCE_BYTES] = bytes
    record[SINCE_BLOCKS] = blocks
  end
end

function Peak:note_time(time)
  if self.waiting_for_time and time ~= self.peak_time then
    self.time_next = time
    self.waiting_for_time = false
  end
end

function Peak:new_peak(ev, bytes)
  self.peak = bytes
  self.peak_event = self.events
  self.peak_offset = ev.offset
  self.peak_time = ev.time
  self.time_next = nil
  self.waiting_for_time = true
  self.generation = self.generation + 1
end

function Peak:feed(ev, owner, heap)
  self.events = self.events + 1
  local grouper = self.grouper
  if owner then
    self:change(grouper:key(owner, heap.released_stack), -ev.osize,
      -ev.oweight)
  end
  if ev.kind ~= 'free' then
    self:change(grouper:key(ev.site, ev.stack), ev.nsize, ev.nweight)
  end
  self:note_time(ev.time)
  if heap.total > self.peak then
    self:new_peak(ev, heap.total)
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

-- A record turned into the row of its figures at the peak, in place: a
-- large profile has a record per place, and a new table per row made
-- the peak report's peak RSS about 30 MB higher on 400,000 places.
-- (The shapes share the positions of group, bytes and blocks.)
local function as_row(record, bytes, blocks)
  record[BYTES], record[BLOCKS] = bytes, blocks
  record[SINCE_BYTES], record[SINCE_BLOCKS], record[GENERATION] = nil, nil,
    nil
  return setmetatable(record, Row.meta)
end

function Peak:finish(stream)
  if self.waiting_for_time and stream.time ~= self.peak_time then
    self.time_next = stream.time
  end
  -- Only events need the index.
  self.by_group = nil
  local total = 0
  for _, record in ipairs(self.records) do
    total = total + record[BYTES]
  end
  local rows, before_row = {}, nil
  for _, record in ipairs(self.records) do
    local bytes, blocks = record[BYTES], record[BLOCKS]
    if record[GENERATION] == self.generation then
      bytes = bytes - record[SINCE_BYTES]
      blocks = blocks - record[SINCE_BLOCKS]
    end
    if record[GROUP].source == 'before' then
      before_row = { bytes = bytes, blocks = blocks }
    elseif bytes ~= 0 or blocks ~= 0 then
      rows[#rows + 1] = as_row(record, bytes, blocks)
    end
  end
  self.records = nil
  table.sort(rows, function(a, b)
    local a_bytes, b_bytes = a[BYTES], b[BYTES]
    if a_bytes ~= b_bytes then
      return a_bytes > b_bytes
    end
    return name_less(a[GROUP], b[GROUP])
  end)
  local start = stream.heap_at_start
  return { bytes = self.peak, event = self.peak_event,
    offset = self.peak_offset, time = self.peak_time,
    time_next = self.time_next, rows = rows, total = total,
    before = before_part(before_row, start), heap_at_start = start,
    heap_bytes = start and start + self.peak,
    estimate = stream.sample_bytes ~= nil }
end

return M
