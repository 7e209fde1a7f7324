-- memprof.report.heap_growth: what grew between two heap snapshots
-- (`memprof-report --diff OLD.heap NEW.heap`, docs/holders.md): one row
-- model from analysis/heap_diff.lua, as text and JSON.
--
--   local growth = require('memprof.report.heap_growth')
--   local model = growth.model(old_path, new_path)
--   growth.write(model, out, opts)       -- text
--   growth.write_json(model, out)
--
-- The model: old and new ({ file, objects, bytes }), grew (the patterns
-- that hold objects the older snapshot did not have, by retained growth:
-- the paths that hold the new objects) and other (the groups that changed
-- without new objects: the paths to those, and groups that shrank), each
-- row as heap_diff gives it.

local dom = require('memprof.analysis.dominators')
local heap_diff = require('memprof.analysis.heap_diff')
local holders = require('memprof.report.holders')
local json_text = require('memprof.encode.json_text')
local layout = require('memprof.report.layout')

local M = {}

local format, commas = string.format, holders.commas

local function totals(a, path)
  local objects = 0
  for _, g in ipairs(a.groups) do objects = objects + g.objects end
  return { file = path, objects = objects, bytes = a.total }
end

-- The model of two snapshots of one process, the older first. Each is
-- analysed, and only its analysis kept, before the other is read.
function M.model(old_path, new_path)
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

local function signed(n, text)
  return (n >= 0 and '+' or '') .. text
end

local function grew_line(row, size)
  local now = #row.types > 0 and
    holders.objects_text(row.objects, row.types) or '0 objects'
  return format('%s: %s new, %s now (%s before), %s retained (%s now)',
    row.pattern, commas(row.new_objects), now, commas(row.old_objects),
    signed(row.growth, size(row.growth)), size(row.retained))
end

local function other_line(row, size)
  return format('%s: %s retained (%s now), %s (%s before)',
    row.pattern, signed(row.growth, size(row.growth)), size(row.retained),
    holders.counted(row.objects, 'object'), commas(row.old_objects))
end

local function write_rows(out, rows, top, line)
  local n = top and math.min(top, #rows) or #rows
  for i = 1, n do out:write(line(rows[i]), '\n') end
  return #rows - n
end

function M.write(model, out, opts)
  opts = opts or {}
  local size = layout.sizer(opts)
  local old, new = model.old, model.new
  out:write('HEAP GROWTH from ', old.file, ' to ', new.file, '\n')
  out:write(format('before: %s, %s; after: %s, %s (%s)\n',
    holders.counted(old.objects, 'object'), size(old.bytes),
    holders.counted(new.objects, 'object'),
    size(new.bytes), signed(new.bytes - old.bytes,
      size(new.bytes - old.bytes))))
  out:write('\nWHAT GREW (the paths that hold new objects, by retained ' ..
    'growth)\n')
  local left = write_rows(out, model.grew, opts.top, function(row)
    return grew_line(row, size)
  end)
  if #model.grew == 0 then out:write('(no new objects)\n') end
  out:write('\nOTHER CHANGES (the paths to those, and groups that ' ..
    'changed without new objects)\n')
  left = left + write_rows(out, model.other, opts.top, function(row)
    return other_line(row, size)
  end)
  if #model.other == 0 then out:write('(none)\n') end
  if opts.left_out then opts.left_out.rows = opts.left_out.rows + left end
end

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

M.KIND = 'memprof heap snapshot growth'
M.VERSION = 1

-- The model as one JSON value (a Lua table for json_text).
function M.document(model)
  return { kind = M.KIND, version = M.VERSION, old = model.old,
    new = model.new, grew = json_rows(model.grew),
    other = json_rows(model.other) }
end

function M.write_json(model, out)
  json_text.write(out, M.document(model), nil, '\n')
end

return M
