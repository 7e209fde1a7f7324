-- memprof.report.holders_text: the report of a heap snapshot
-- (report/model/holders.lua's model) as text (docs/holders.md), and the
-- WHO HOLDS IT section of a profile's text report with --heap.
--
--   local model = require('memprof.report.model.holders')
--   holders_text.write(model.of_file(path), out, { top = N,
--     human_readable = true, left_out = { rows = 0 } })
--   holders_text.write_who_holds(out, model.who_holds(heap, profile), opts)

local layout = require('memprof.report.layout')
local words = require('memprof.report.heap_words')
local commas = require('memprof.words').commas

local M = {}

local format, concat = string.format, table.concat
local counted = words.counted

-- Holders listed under each type and place.
M.MAIN_HOLDERS = 3

-- The first `top` rows (all without it) and how many are left out.
local function first(rows, top)
  if not top or #rows <= top then return rows, 0 end
  local shown = {}
  for i = 1, top do shown[i] = rows[i] end
  return shown, #rows - top
end

local function write_header(out, h, size)
  out:write('HEAP SNAPSHOT ', h.file, '\n')
  out:write(format('%s, %s, %s from %s', counted(h.objects, 'object'),
    size(h.bytes), counted(h.references, 'reference'),
    counted(h.roots, 'root')))
  out:write(h.gc64 and '; GC64' or '; not GC64')
  if h.traces then
    out:write('; ', counted(h.traces, 'JIT trace'), ' alive')
  end
  if h.cdata_sizes_unknown then out:write('; ', words.CDATA_UNKNOWN) end
  out:write('\n', words.profile_text(h), '\n')
end

function M.holder_line(row, size)
  local parts = { format('%s: %s, %s', row.pattern,
    words.objects_text(row.objects, row.types), size(row.bytes)) }
  if row.retained ~= row.bytes then
    parts[#parts + 1] = 'retaining ' .. size(row.retained)
  end
  parts[#parts + 1] = words.place_text(row)
  return concat(parts, ', ')
end

local function write_main_holders(out, row, size)
  local shown, rest
  if row.holders_top then
    shown, rest = row.holders_top(M.MAIN_HOLDERS)
  else
    shown, rest = first(row.holders, M.MAIN_HOLDERS)
  end
  for _, h in ipairs(shown) do
    out:write(format('    held by %s: %s, %s\n', h.pattern,
      counted(h.objects, 'object'), size(h.bytes)))
  end
  if rest > 0 then
    out:write(format('    and by %s more %s\n', commas(rest),
      rest == 1 and 'path' or 'paths'))
  end
end

-- `rows`: a list, or a function of `top` giving the rows shown and the
-- count of those left out.
local function write_section(out, title, rows, top, line, size)
  out:write('\n', title, '\n')
  local shown, rest
  if type(rows) == 'function' then
    shown, rest = rows(top)
  else
    shown, rest = first(rows, top)
  end
  for _, row in ipairs(shown) do
    out:write(line(row), '\n')
    if rawget(row, 'holders_top') or row.holders then
      write_main_holders(out, row, size)
    end
  end
  return rest
end

-- Writes the model as text; opts.top (rows per section), opts.left_out
-- (counts the rows left out), opts.human_readable.
function M.write(model, out, opts)
  opts = opts or {}
  local size = layout.sizer(opts)
  write_header(out, model.header, size)
  local left = write_section(out, 'WHAT HOLDS THE MEMORY (objects by ' ..
    'their path from a root, the most bytes first; retaining: freed if ' ..
    'they went)',
    model.holders_top or model.holders, opts.top,
    function(row) return M.holder_line(row, size) end)
  left = left + write_section(out, 'OBJECTS BY TYPE', model.by_type, opts.top,
    function(row)
      return format('%s: %s, %s', row.type, counted(row.objects, 'object'),
        size(row.bytes))
    end, size)
  if model.by_place then
    left = left + write_section(out, 'OBJECTS BY ALLOCATION PLACE',
      model.by_place, opts.top, function(row)
        return format('%s: %s, %s%s', row.place, counted(row.objects,
          'object'), size(row.bytes),
          row.callers and ' (from ' .. row.callers .. ')' or '')
      end, size)
  end
  if opts.left_out then opts.left_out.rows = opts.left_out.rows + left end
end

-- The WHO HOLDS IT section of a profile's --leaks report: each place of
-- `who` (the model's who_holds) with its main holders; opts.top: places
-- shown (opts.left_out counts the others), opts.human_readable.
function M.write_who_holds(out, who, opts)
  opts = opts or {}
  local size = layout.sizer(opts)
  out:write('WHO HOLDS IT (the objects of the heap snapshot ', who.heap,
    ' by allocating place, with the paths that hold them)\n')
  local shown, rest = first(who.rows, opts.top)
  if opts.left_out then opts.left_out.rows = opts.left_out.rows + rest end
  for _, row in ipairs(shown) do
    out:write(format('%s: %s, %s%s\n', row.place, counted(row.objects,
      'object'), size(row.bytes),
      row.callers and ' (from ' .. row.callers .. ')' or ''))
    write_main_holders(out, row, size)
  end
end

return M
