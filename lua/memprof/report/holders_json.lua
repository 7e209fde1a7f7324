-- memprof.report.holders_json: the report of a heap snapshot
-- (report/model/holders.lua's model) as JSON (docs/holders.md): the same
-- rows as the text, every row, with sizes in bytes.

local json_text = require('memprof.encode.json_text')

local M = {}

-- The document's kind and version.
M.KIND = 'memprof heap snapshot report'
M.VERSION = 1

local array = json_text.array

local function holder(row)
  return { pattern = row.pattern, objects = row.objects,
    types = array(row.types), retained = row.retained, bytes = row.bytes,
    place = row.place, callers = row.callers, places = row.places }
end

local function counted(row, name_key)
  local holders = {}
  for i, h in ipairs(row.holders) do
    holders[i] = { pattern = h.pattern, objects = h.objects, bytes = h.bytes }
  end
  return { [name_key] = row[name_key], objects = row.objects,
    bytes = row.bytes, callers = row.callers, holders = array(holders) }
end

local function mapped(list, fn, key)
  local out = {}
  for i, row in ipairs(list) do out[i] = fn(row, key) end
  return array(out)
end

-- For a profile's JSON report with --heap=SNAPSHOT (report/json.lua): the
-- places of the snapshot's objects (report/model/holders.lua's
-- who_holds), each with its callers and every path that holds what it
-- allocated.
function M.who_holds(who)
  return { heap = who.heap, places = mapped(who.rows, counted, 'place') }
end

-- The model as one JSON value (a Lua table for json_text).
function M.document(model)
  return { kind = M.KIND, version = M.VERSION, header = model.header,
    holders = mapped(model.holders, holder),
    by_type = mapped(model.by_type, counted, 'type'),
    by_place = model.by_place and mapped(model.by_place, counted, 'place') }
end

function M.write(model, out)
  json_text.write(out, M.document(model), nil, '\n')
end

return M
