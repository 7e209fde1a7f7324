-- memprof.report.diff: the text of memprof-report --diff.
--
--   diff_report.write(changes, out, opts)
--     changes  from memprof.analysis.diff.compare()
--     opts     before, after: the names of the two files
--              group: the grouping of the rows (for the heading)
--              sort: 'live' (default), 'bytes' or 'count', as compared
--              top: at most this many rows; the others are summed
--              left_out: a table whose field rows grows by the number
--                of rows that top leaves out
--              human_readable: sizes in B/KiB/MiB/GiB
--   diff_report.render(changes, opts) -> the same, as a string
--
--   CHANGES from before.bin to after.bin, by growth in live bytes at end
--   @app.lua:7: allocated +512B (1024B -> 1536B), allocations +4 (8 -> 12), live at end +64B (128B -> 192B)
--   @app.lua:9 (new): allocated +464B (0B -> 464B), ...
--   (3 rows unchanged)
--   TOTAL: allocated ..., allocations ..., live at end ... (net bytes of the streams)

local layout = require('memprof.report.layout')
local diff_model = require('memprof.report.model.diff')

local M = {}

local format = string.format

local SORT_TEXT = { live = 'live bytes at end', bytes = 'bytes allocated',
  count = 'allocations' }

local STATUS_SUFFIX = { new = ' (new)', gone = ' (gone)', changed = '' }

-- A change with its sign: '+512B', '-64B', '0B'.
local function signed(n, show)
  if n > 0 then
    return '+' .. show(n)
  end
  return show(n)
end

local function count(n)
  return format('%d', n)
end

local function describe(entry, size)
  local bytes, events, live = entry.allocated_bytes, entry.allocated_events,
    entry.live_bytes
  return format('allocated %s (%s -> %s), allocations %s (%d -> %d), ' ..
    'live at end %s (%s -> %s)', signed(bytes.change, size),
    size(bytes.before), size(bytes.after), signed(events.change, count),
    events.before, events.after, signed(live.change, size),
    size(live.before), size(live.after))
end

function M.write(changes, out, opts)
  out = out or io.stdout
  opts = opts or {}
  local size = layout.sizer(opts)
  for _, note in ipairs(opts.sampling or {}) do
    out:write(note, '\n')
  end
  if opts.sampling and #opts.sampling > 0 then
    out:write('\n')
  end
  layout.write_focus(out, opts)
  layout.write_grouping(out, opts.group)
  local model = diff_model.new(changes, opts)
  out:write(format('CHANGES from %s to %s, by growth in %s\n', opts.before,
    opts.after, SORT_TEXT[model.sort]))
  for _, entry in ipairs(model.shown) do
    layout.write_title(out, entry.group, STATUS_SUFFIX[entry.status] ..
      ': ' .. describe(entry, size), nil, true)
  end
  local rest = model.rest
  if rest then
    out:write(format('... and %d more: %s\n', rest.rows,
      describe(rest, size)))
  end
  if model.unchanged > 0 then
    out:write(format('(%s unchanged)\n',
      layout.plural(model.unchanged, 'row')))
  end
  out:write('TOTAL: ', describe(model.totals, size),
    ' (net bytes of the streams)\n')
end

M.render = layout.renderer(M.write)

return M
