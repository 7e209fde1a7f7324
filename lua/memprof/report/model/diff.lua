-- memprof.report.model.diff: what --diff shows, decided once: the order
-- of the rows, the rows shown and the sums of the others, the rows that
-- did not change and the totals.
--
--   local model = diff_model.new(changes, opts)
--     changes  from memprof.analysis.diff.compare()
--     opts     sort: 'live' (default), 'bytes' or 'count', as compared;
--              top: rows shown at most; left_out: a table whose field
--              rows grows by the rows top leaves out
--   model.sort        the order of the rows: 'live', 'bytes' or 'count'
--   model.shown       the rows shown (memprof.analysis.diff's entries)
--   model.rest        nil, or the others: { rows = how many, and for each
--                     of diff.FIELDS { before, after, change } summed }
--   model.unchanged   how many rows did not change
--   model.totals      the totals of every row (diff.compare's)

local layout = require('memprof.report.layout')
local FIELDS = require('memprof.analysis.diff').FIELDS

local M = {}

-- The sums of the entries of `rest`.
local function sum_changes(rest)
  local sums = { rows = #rest }
  for _, field in ipairs(FIELDS) do
    local sum = { before = 0, after = 0, change = 0 }
    for _, entry in ipairs(rest) do
      sum.before = sum.before + entry[field].before
      sum.after = sum.after + entry[field].after
      sum.change = sum.change + entry[field].change
    end
    sums[field] = sum
  end
  return sums
end

function M.new(changes, opts)
  local shown, rest = layout.split_top(changes.rows, opts.top, opts.left_out)
  return { sort = opts.sort or 'live', shown = shown,
    rest = #rest > 0 and sum_changes(rest) or nil,
    unchanged = changes.unchanged, totals = changes.totals }
end

return M
