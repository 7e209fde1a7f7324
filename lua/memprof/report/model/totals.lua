-- memprof.report.model.totals: the profile's totals as every format
-- shows them (the HTML page's summary, the JSON document's totals),
-- summed once from the sites pass.
--
--   local totals = totals_model.new(result)  -- analyze.run's result
--   totals.alloc_events, totals.realloc_events, totals.free_events
--   totals.allocations      allocation and reallocation events
--   totals.allocated_bytes  their bytes (a reallocation's new size)
--   totals.freed_bytes      bytes freed and released by reallocations
--   totals.net_bytes        the stream's net bytes
--   totals.events           the stream's events
--   totals.duration         with time marks: the timeline's duration, or
--                           the stream's last time mark (ns); else nil

local M = {}

-- The sum of `field` over the records of one kind of the sites pass.
local function sum_kind(result, kind, field)
  local figures = result.sites.of_kind[kind]
  local total, values = 0, figures[field]
  for slot = 1, #figures.keys do
    total = total + values[slot]
  end
  return total
end

function M.new(result)
  local stream = result.stream
  local alloc_events = sum_kind(result, 'alloc', 'count')
  local realloc_events = sum_kind(result, 'realloc', 'count')
  local totals = {
    alloc_events = alloc_events,
    realloc_events = realloc_events,
    free_events = sum_kind(result, 'free', 'count'),
    allocations = alloc_events + realloc_events,
    allocated_bytes = sum_kind(result, 'alloc', 'plus') +
      sum_kind(result, 'realloc', 'plus'),
    freed_bytes = sum_kind(result, 'realloc', 'minus') +
      sum_kind(result, 'free', 'minus'),
    net_bytes = result.heap.total,
    events = stream.events,
  }
  if stream.has_time then
    totals.duration = result.timeline and result.timeline.duration or
      stream.time
  end
  return totals
end

return M
