-- memprof.report.model.heap_growth: what grew between two heap snapshots
-- (`memprof-report --diff OLD.heap NEW.heap`, docs/holders.md) as every
-- format shows it, decided once from analysis/heap_diff.lua's rows: text
-- (report/heap_growth_text.lua), json (report/heap_growth_json.lua) and
-- html (report/heap_growth_html.lua) render this model.
--
--   local model = require('memprof.report.model.heap_growth')
--   local m = model.of_files(old_path, new_path)
--
-- The model: old and new ({ file, objects, bytes }), grew (the patterns
-- that hold objects the older snapshot did not have, by retained growth:
-- the paths that hold the new objects) and other (the groups that changed
-- without new objects: the paths to those, and groups that shrank), each
-- row as heap_diff gives it, its types as a list, most first.

local dom = require('memprof.analysis.dominators')
local heap_diff = require('memprof.analysis.heap_diff')
local holders = require('memprof.report.model.holders')

local M = {}

local function totals(a, path)
  local objects = 0
  for _, g in ipairs(a.groups) do objects = objects + g.objects end
  return { file = path, objects = objects, bytes = a.total }
end

-- The model of two snapshots of one process, the older first. Each is
-- analysed, and only its analysis kept, before the other is read.
function M.of_files(old_path, new_path)
  local old = dom.analyse_file(old_path)
  local old_totals = totals(old, old_path)
  local new = dom.analyse_file(new_path)
  local rows = heap_diff.compare(old, new)
  local model = { old = old_totals, new = totals(new, new_path), grew = {},
    other = {} }
  for _, row in ipairs(rows) do
    row.types = holders.types_list(row.types)
    local list = row.new_objects > 0 and model.grew or model.other
    list[#list + 1] = row
  end
  return model
end

return M
