-- memprof.report.heap_growth_text: what grew between two heap snapshots
-- (report/model/heap_growth.lua's model) as text (docs/holders.md).
--
--   heap_growth_text.write(model, out, { top = N, human_readable = true,
--     left_out = { rows = 0 } })

local layout = require('memprof.report.layout')
local words = require('memprof.report.heap_words')

local M = {}

local format, commas = string.format, require('memprof.words').commas

local function signed(n, text)
  return (n >= 0 and '+' or '') .. text
end

local function grew_line(row, size)
  local now = #row.types > 0 and
    words.objects_text(row.objects, row.types) or '0 objects'
  return format('%s: %s new, %s now (%s before), %s retained (%s now)',
    row.pattern, commas(row.new_objects), now, commas(row.old_objects),
    signed(row.growth, size(row.growth)), size(row.retained))
end

local function other_line(row, size)
  return format('%s: %s retained (%s now), %s (%s before)',
    row.pattern, signed(row.growth, size(row.growth)), size(row.retained),
    words.counted(row.objects, 'object'), commas(row.old_objects))
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
    words.counted(old.objects, 'object'), size(old.bytes),
    words.counted(new.objects, 'object'),
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

return M
