-- memprof.report.model.cumulative: the CUMULATIVE view as every format
-- shows it, decided once: the rows and their order (by bytes allocated
-- with callees, or by events with sort = 'count', then by name) and the
-- rows shown.
--
--   local model = cumulative_model.new(cumulative)  -- the pass's result
--   model.mode          'function' or 'stack'
--   model:rows(opts)    the rows (memprof.analysis.cumulative's records)
--                       shown, at most opts.top, and the rest (a list);
--                       the rest's length is added to opts.left_out.rows

local layout = require('memprof.report.layout')

local M = {}

local Model = {}
Model.__index = Model

local function name_of_group(row)
  return row.group.name
end

function M.new(cumulative)
  return setmetatable({ cumulative = cumulative, mode = cumulative.mode },
    Model)
end

function Model:rows(opts)
  local rows = {}
  for i, row in ipairs(self.cumulative.rows) do
    rows[i] = row
  end
  layout.sort_rows(rows, opts.sort == 'count' and 'events' or 'bytes',
    name_of_group)
  return layout.split_top(rows, opts.top, opts.left_out)
end

return M
