-- Test helpers: the HTML report of a stream built by the specs
-- (helpers.stream_builder), with every view and html's own pass.
local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local html = require('memprof.report.html')

local M = {}

M.ALL = { leaks = true, peak = true, temporary = true, timeline = true }

-- The analysis of a stream's bytes, as the html format runs it.
function M.result_of(bytes, opts)
  opts = opts or {}
  return analyze.run(reader.from_string(bytes, opts.name or 'out.bin'),
    { group = opts.group or 'line', views = opts.views or M.ALL,
      passes = not opts.plain and html.passes() or nil })
end

-- The page of a stream builder (or bytes).
function M.page(builder, opts)
  local bytes = type(builder) == 'string' and builder or builder:bytes()
  return html.render(M.result_of(bytes, opts))
end

return M
