-- memprof.report.model.peak: the peak as every format shows it, decided
-- once: what the peak is (the VM's whole heap, or the growth above a
-- heap at the start that the file does not record), its name, its
-- amount, its moment, the rows that held it and the blocks allocated
-- before the profile.  The formats only lay it out.
--
--   local model = peak_model.new(peak, stream)   -- peak: the analysis
--                                               -- pass's result
--   model.at_start      the heap never grew past its size at the start
--   model.whole_heap    the amount is the VM's whole heap (the file
--                       records the heap at the start)
--   model.name          'peak heap', 'estimated peak heap' or, for the
--                       growth above the start, 'peak'
--   model.title         the same for a heading: 'Peak heap', 'Estimated
--                       peak heap', 'Peak above start'
--   model.bytes         the amount: the whole heap, or the growth
--   model.growth        the growth above the heap at the start
--   model.heap_at_start the heap at the start, or nil
--   model.event, model.offset, model.time, model.time_next, model.has_time
--   model.before        the blocks allocated before the profile: { kind =
--                       'live' (still live: live_bytes, and any freed
--                       before the peak) | 'freed' (freed before the
--                       peak) | nil, live_bytes, freed_blocks,
--                       freed_bytes, name }
--   model:amount(size)  'peak heap 1.2 KiB', or '1.2 KiB above the heap
--                       at the start (which this profile does not
--                       record)'; size formats bytes
--   model:rows(opts)    the rows shown and the rest ({ rows, bytes,
--                       blocks }): by bytes, or blocks with opts.sort =
--                       'count'; at most opts.top

local BEFORE_PROFILING = require('memprof.analysis.heap').BEFORE_PROFILING

local M = {}

local format = string.format

local Model = {}
Model.__index = Model

local function before_of(before)
  local kind = nil
  if before.live_bytes then
    kind = 'live'
  elseif before.freed_blocks ~= 0 then
    kind = 'freed'
  end
  return { kind = kind, live_bytes = before.live_bytes,
    freed_blocks = before.freed_blocks, freed_bytes = before.freed_bytes,
    name = BEFORE_PROFILING.name }
end

function M.new(peak, stream)
  local whole = peak.heap_bytes ~= nil
  local name, title = 'peak', 'Peak above start'
  if whole then
    name = peak.estimate and 'estimated peak heap' or 'peak heap'
    title = peak.estimate and 'Estimated peak heap' or 'Peak heap'
  end
  return setmetatable({ peak = peak, at_start = peak.event == 0,
    whole_heap = whole, name = name, title = title,
    bytes = peak.heap_bytes or peak.bytes, growth = peak.bytes,
    heap_at_start = peak.heap_at_start, event = peak.event,
    offset = peak.offset, time = peak.time, time_next = peak.time_next,
    has_time = stream.has_time and true or false,
    before = before_of(peak.before),
    empty = #peak.groups == 0 }, Model)
end

function Model:amount(size)
  if self.whole_heap then
    return format('%s %s', self.name, size(self.bytes))
  end
  return format('%s above the heap at the start (which this profile does ' ..
    'not record)', size(self.growth))
end

function Model:rows(opts)
  return self.peak:top({ by = opts.sort == 'count' and 'blocks',
    top = opts.top, sums = { 'bytes', 'blocks' } })
end

return M
