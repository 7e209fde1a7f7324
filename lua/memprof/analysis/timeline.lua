-- memprof.analysis.timeline: the heap's size over time, as an analysis pass.
--
-- Needs a stream with time marks (stream.has_time).  An event happened
-- at the time of the mark before it (0 before the first mark); the
-- heap's size is the net bytes since the start, after each event.
--
-- The pass keeps one slot per `resolution` nanoseconds: the highest size
-- after an event in the slot, the size after its last event, and its
-- number of events.  The resolution starts at 10 microseconds; when the
-- profile needs more than MAX_SLOTS slots it is multiplied by 10 and the
-- slots merged, so memory stays small however long the profile.
--
--   local pass = timeline.new([opts])
--     opts.clock = 'events': an event's time is its number in
--     microseconds (event n at n * 1000 ns) instead of its time mark, for
--     streams without time marks
--   -- analyze.run feeds it (after the heap), then finish(stream) gives:
--   {
--     resolution = <ns per slot>,
--     high = { [slot] = bytes }, last = { [slot] = bytes },
--     events = { [slot] = count },        -- only slots with events
--     duration = <ns: the last time mark, or the last event's time>,
--   }
--   timeline.rows(result [, max_rows]) -> {
--     width = <ns per row>,
--     rows = { { start = ns, stop = ns, high = bytes, last = bytes,
--                events = count }, ... },  -- from 0 to the duration
--     peak_row = <index of the first row with the highest value>,
--   }
-- A row without events keeps the size the heap had before it.  Rows are
-- 1, 2 or 5 times a power of ten nanoseconds wide, chosen so that there
-- are at most max_rows rows (50 by default), and at least 20 when the
-- profile is long enough.

local M = {}

M.START_RESOLUTION = 10000
M.MAX_SLOTS = 10000
M.MAX_ROWS = 50

local floor = math.floor

local Timeline = {}
Timeline.__index = Timeline

function M.new(opts)
  return setmetatable({ resolution = M.START_RESOLUTION, high = {},
    last = {}, events = {}, last_time = 0, time = -1, slot = 1,
    by_event = (opts and opts.clock) == 'events' }, Timeline)
end

-- Multiply the resolution by 10, merging each 10 slots into one.
function Timeline:coarsen()
  local high, last, events = {}, {}, {}
  local slots = {}
  for slot in pairs(self.events) do
    slots[#slots + 1] = slot
  end
  table.sort(slots)
  for _, slot in ipairs(slots) do
    local merged = floor((slot - 1) / 10) + 1
    if not events[merged] or self.high[slot] > high[merged] then
      high[merged] = self.high[slot]
    end
    last[merged] = self.last[slot]
    events[merged] = (events[merged] or 0) + self.events[slot]
  end
  self.high, self.last, self.events = high, last, events
  self.resolution = self.resolution * 10
end

function Timeline:slot_of(time)
  local slot = floor(time / self.resolution) + 1
  while slot > M.MAX_SLOTS do
    self:coarsen()
    slot = floor(time / self.resolution) + 1
  end
  return slot
end

function Timeline:feed(kind, _, _, _, _, oweight, nweight, _, facts)
  -- The time of the event: its time mark, or its number in microseconds.
  local time = facts.time or 0
  if self.by_event then
    time = facts.event * 1000
  end
  local slot = self.slot
  if time ~= self.time then
    self.time = time
    slot = self:slot_of(time)
    self.slot = slot
    if time > self.last_time then
      self.last_time = time
    end
  end
  local size = facts.total
  local count = self.events[slot]
  local weight = kind == 'free' and oweight or nweight
  if count then
    self.events[slot] = count + weight
    if size > self.high[slot] then
      self.high[slot] = size
    end
  else
    self.events[slot] = weight
    self.high[slot] = size
  end
  self.last[slot] = size
end

function Timeline:finish(stream)
  local duration = self.last_time
  if not self.by_event and stream.time and stream.time > duration then
    duration = stream.time
  end
  return { resolution = self.resolution, high = self.high, last = self.last,
    events = self.events, duration = duration }
end

-- The smallest row width (resolution times 1, 2, 5, 10, 20, 50, ...)
-- that shows `slots` slots in at most max_rows rows.
local function slots_per_row(slots, max_rows)
  local scale = 1
  while true do
    for _, factor in ipairs({ 1, 2, 5 }) do
      local per_row = factor * scale
      if math.ceil(slots / per_row) <= max_rows then
        return per_row
      end
    end
    scale = scale * 10
  end
end

-- The slots with events, in order.
function M.occupied_slots(result)
  local slots = {}
  for slot in pairs(result.events) do
    slots[#slots + 1] = slot
  end
  table.sort(slots)
  return slots
end

-- One row: the occupied slots from occupied[next] up to slot `last`,
-- after a heap of `carry`.  Returns the row and the index of the first
-- occupied slot past it.
local function make_row(result, occupied, next, last, carry)
  local row = { high = nil, last = carry, events = 0 }
  while occupied[next] and occupied[next] <= last do
    local slot = occupied[next]
    local high = result.high[slot]
    if not row.high or high > row.high then
      row.high = high
    end
    row.last = result.last[slot]
    row.events = row.events + result.events[slot]
    next = next + 1
  end
  row.high = row.high or carry
  return row, next
end

-- The rows cost the number of occupied slots plus the number of rows
-- (at most max_rows), never the number of slots from 0 to the duration:
-- a profile that idles for hours after its last event, or whose last
-- time mark is absurd, costs no more than a short one.
function M.rows(result, max_rows)
  local resolution = result.resolution
  local slots = floor(result.duration / resolution) + 1
  local per_row = slots_per_row(slots, max_rows or M.MAX_ROWS)
  local width = per_row * resolution
  local occupied = M.occupied_slots(result)
  local rows, carry, peak_row, next = {}, 0, nil, 1
  for index = 1, math.ceil(slots / per_row) do
    local first = (index - 1) * per_row + 1
    local row
    row, next = make_row(result, occupied, next, first + per_row - 1, carry)
    row.start = (first - 1) * resolution
    row.stop = row.start + width
    rows[index] = row
    carry = row.last
    if not peak_row or row.high > rows[peak_row].high then
      peak_row = index
    end
  end
  return { width = width, rows = rows, peak_row = peak_row }
end

return M
