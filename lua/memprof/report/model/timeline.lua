-- memprof.report.model.timeline: the heap over time as every format
-- shows it, decided once: whether there is a timeline to show, its rows
-- and their width, the row of the peak and the highest value, and the
-- slots of the pass in order.
--
--   local model = timeline_model.new(timeline, stream [, max_rows])
--     timeline  the timeline pass's result, or nil (not computed)
--     stream    the stream (has_time)
--     max_rows  rows at most (memprof.analysis.timeline.rows; default
--               its MAX_ROWS)
--   model.has_time    the stream has time marks
--   model.shown       the timeline's rows or nil (no time marks, or the
--                     view was not computed): { width, rows = { { start,
--                     stop, high, last, events }, ... }, peak_row }
--   model.highest     the highest value of a row (0 when none is above)
--   model:slots()     the pass's slots with events, in order: { { start,
--                     high, last, events }, ... } (nil when model.shown
--                     is)
--   model.resolution, model.duration   the pass's (ns)

local timeline = require('memprof.analysis.timeline')

local M = {}

local Model = {}
Model.__index = Model

local function highest_of(rows)
  local highest = 0
  for _, row in ipairs(rows) do
    if row.high > highest then
      highest = row.high
    end
  end
  return highest
end

function M.new(result, stream, max_rows)
  local model = { timeline = result, has_time = stream.has_time and true or
    false, highest = 0 }
  if result and model.has_time then
    model.shown = timeline.rows(result, max_rows)
    model.highest = highest_of(model.shown.rows)
    model.resolution, model.duration = result.resolution, result.duration
  end
  return setmetatable(model, Model)
end

function Model:slots()
  if not self.shown then
    return nil
  end
  local result = self.timeline
  local resolution, high, last, events = result.resolution, result.high,
    result.last, result.events
  local list = {}
  for i, slot in ipairs(timeline.occupied_slots(result)) do
    list[i] = { start = (slot - 1) * resolution, high = high[slot],
      last = last[slot], events = events[slot] }
  end
  return list
end

return M
