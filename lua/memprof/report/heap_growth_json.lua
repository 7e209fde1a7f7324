-- memprof.report.heap_growth_json: what grew between two heap snapshots
-- (report/model/heap_growth.lua's model) as JSON (docs/holders.md): every
-- row, sizes in bytes.

local json_text = require('memprof.encode.json_text')

local M = {}

M.KIND = 'memprof heap snapshot growth'
M.VERSION = 1

local function json_rows(rows)
  local out = {}
  for i, row in ipairs(rows) do
    out[i] = { pattern = row.pattern, objects = row.objects,
      old_objects = row.old_objects, new_objects = row.new_objects,
      retained = row.retained, old_retained = row.old_retained,
      growth = row.growth, own_growth = row.own_growth,
      types = json_text.array(row.types) }
  end
  return json_text.array(out)
end

-- The model as one JSON value (a Lua table for json_text).
function M.document(model)
  return { kind = M.KIND, version = M.VERSION, old = model.old,
    new = model.new, grew = json_rows(model.grew),
    other = json_rows(model.other) }
end

function M.write(model, out)
  json_text.write(out, M.document(model), nil, '\n')
end

return M
