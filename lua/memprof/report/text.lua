-- memprof.report.text: the default text report (the layout of
-- Tarantool's memprof report).
--
--   text.write(result, out, opts)
--     result  from memprof.analysis.analyze.run()
--     out     a file handle (default io.stdout)
--     opts    views: a set of views ({ leaks = true, ... }); when it
--               has any, the text of those views is written instead
--               (memprof.report.views, which takes top, sort and
--               human_readable too)
--             leak_only: only the HEAP SUMMARY (and ALIASES)
--             human_readable: sizes in B/KiB/MiB/GiB
--             key: function(site) -> row name (default: site.name)
--             top: at most this many rows per section, and names per
--               Overrides list; the other rows are summed on a line
--               "... and K more: ...", the other names counted
--             left_out: a table whose field rows grows by the number of
--               rows that top leaves out
--             sort: 'bytes' (default) or 'count'; 'bytes' sorts the
--               event sections by bytes allocated (+), or freed (-) for
--               DEALLOCATIONS, and the heap summary by holds; 'count'
--               the event sections by events (Tarantool's order) and
--               the heap summary by live blocks (allocs - frees).  Each
--               section's title says its order.
--
-- Rows are grouped by name: sites with the same name (a function
-- reloaded at another address, say) are reported as one row.  When the
-- analysis grouped the rows otherwise (analyze.run's opts.group), the
-- report starts with a line saying what the rows are, and a row of a
-- stack is written as its innermost frame followed by one line per
-- caller ("called from NAME").
--
-- Sections ALLOCATIONS, REALLOCATIONS, DEALLOCATIONS: one row per site
-- with its event count and bytes allocated (+) and freed (-), sorted by
-- bytes or count, then name; realloc and free rows list under
-- "Overrides:" the sites that had produced the released blocks.
--
-- HEAP SUMMARY: every site whose holds are not zero, by holds (then
-- name), then the blocks allocated before the profile and released
-- during it (their own line: they hold nothing), then the TOTAL (the net
-- bytes of the stream).  "N allocs" counts
-- the events at the site that produced a block, alloc or realloc; when
-- all of them were reallocations the row ends with "(all allocs were
-- reallocations)", when only some were, with "(K of the allocs were
-- reallocations)": a reallocated block belongs to the site that gave it
-- its current size.
--
-- CUMULATIVE (rows grouped by function or by stack, with the analysis'
-- result.cumulative): every row with its callees' events, by bytes
-- allocated (events with --sort=count), the blocks of those still live,
-- and its own events (memprof.analysis.cumulative says what counts).
--
-- ALIASES: the multi-line chunk names used by the rows above.

local M = {}

local layout = require('memprof.report.layout')
local views = require('memprof.report.views')
local paths = require('memprof.report.paths')
local holders_text = require('memprof.report.holders_text')
local sections_model = require('memprof.report.model.sections')
local cumulative_model = require('memprof.report.model.cumulative')

local format = string.format

M.format_size = layout.format_size

local function note_used_aliases(used, sites)
  for _, site in pairs(sites) do
    layout.note_aliases(used, site)
  end
end

-- The words of a section's order, by the figure it is sorted by.
local ORDER_WORDS = { plus = 'by bytes allocated', minus = 'by bytes freed',
  count = 'by events' }

-- A section's title with the order of its rows, and the share of its
-- bytes that compiled code allocated, where the report knows it.
local function section_title(section)
  local order = ORDER_WORDS[section.by]
  if section.compiled then
    order = format('%s; %d%% of the bytes by compiled code', order,
      section.compiled)
  end
  return format('%s (%s)', section.title, order)
end

-- ' (N% compiled)' for a row some of whose bytes compiled code
-- allocated.
local function compiled_note(share)
  if not share then
    return ''
  end
  return share == 0 and '\t(<1% compiled)' or
    format('\t(%d%% compiled)', share)
end

-- Writes a section of events (memprof.report.model.sections).
local function write_events(out, section, opts, used_aliases)
  local size = layout.sizer(opts)
  out:write(section_title(section), '\n')
  for i, row in ipairs(section.shown) do
    local details = section.details[i]
    layout.write_title(out, row, format(': %d events\t+%s\t-%s%s', row.count,
      size(row.plus), size(row.minus), compiled_note(details.compiled)))
    local overrides = details.overrides
    if #overrides > 0 then
      out:write('\tOverrides:\n')
      for _, name in ipairs(overrides) do
        out:write('\t\t', name, '\n')
      end
      if details.overrides_more > 0 then
        out:write(format('\t\t... and %d more\n', details.overrides_more))
      end
      out:write('\n') -- As Tarantool's report: a blank line after the list.
    end
    note_used_aliases(used_aliases, details.sites)
    note_used_aliases(used_aliases, details.override_sites)
  end
  local rest = section.rest
  if rest.count > 0 then
    local sums = rest.sums
    out:write(format('... and %d more: %d events\t+%s\t-%s%s\n', rest.count,
      sums.count, size(sums.plus), size(sums.minus),
      layout.rest_share(sums[section.bytes], section.shown_bytes)))
  end
  out:write('\n')
end

local function realloc_note(row)
  if row.reallocs == 0 then
    return ''
  end
  if row.reallocs == row.allocs then
    return ' (all allocs were reallocations)'
  end
  return format(' (%d of the allocs were reallocations)', row.reallocs)
end

local function write_heap(out, heap, opts, used_aliases)
  local size = layout.sizer(opts)
  out:write(heap.by_blocks and 'HEAP SUMMARY (by live blocks):\n' or
    'HEAP SUMMARY (by bytes held):\n')
  for _, row in ipairs(heap.shown) do
    layout.write_title(out, row, format(' holds %s: %d allocs, %d frees%s',
      size(row.holds), row.allocs, row.frees, realloc_note(row)))
    note_used_aliases(used_aliases, sections_model.keys_of(row))
  end
  local rest = heap.rest
  if rest.count > 0 then
    local sums = rest.sums
    out:write(format('... and %d more hold %s: %d allocs, %d frees%s\n',
      rest.count, size(sums.holds), sums.allocs, sums.frees,
      layout.rest_share(sums.holds, heap.shown_bytes)))
  end
  local before = heap.before
  if before then
    out:write(format('%s: %d freed or reallocated during the profile, %s\n',
      before.name, before.frees, size(-before.holds)))
  end
  out:write(format('TOTAL holds %s (net bytes of the stream)\n',
    size(heap.total)))
  out:write('\n')
end

local CUMULATIVE_TITLES = {
  ['function'] = 'CUMULATIVE: each function with the functions it called, ' ..
    'by bytes allocated (self: its own events)',
  stack = 'CUMULATIVE: each stack with the functions called from its ' ..
    'innermost line, by bytes allocated (self: its own events)',
}

local function write_cumulative(out, cumulative, opts, used_aliases)
  local size = layout.sizer(opts)
  local model = cumulative_model.new(cumulative)
  local shown, rest = model:rows(opts)
  out:write(CUMULATIVE_TITLES[model.mode], '\n')
  for _, row in ipairs(shown) do
    layout.write_title(out, row.group, format(': with callees %d events ' ..
      '+%s, live %s in %s; self %d events +%s', row.events,
      size(row.bytes), size(row.live_bytes),
      layout.plural(row.live_blocks, 'block'), row.self_events,
      size(row.self_bytes)))
    layout.note_aliases(used_aliases, row.group)
  end
  if #rest > 0 then
    out:write(format('... and %d more\n', #rest))
  end
  out:write('\n')
end

function M.write(result, out, opts)
  out = out or io.stdout
  opts = opts or {}
  local prefix = paths.common_prefix(result.stream)
  if prefix then
    out:write(paths.note(prefix), '\n\n')
    out = paths.shortening(out, prefix)
  end
  layout.write_sampling(out, result.stream)
  layout.write_compiled(out, result.stream)
  layout.write_focus(out, opts)
  if opts.views and next(opts.views) then
    views.write(result, out, opts)
    -- With --heap: who holds what the places allocated (docs/holders.md).
    if result.holders then
      holders_text.write_who_holds(out, result.holders, opts)
    end
    return
  end
  local used_aliases = {}
  if result.grouper then
    layout.write_grouping(out, result.grouper.mode)
  end
  local model = sections_model.new(result, opts)
  if not opts.leak_only then
    for _, kind in ipairs(sections_model.KINDS) do
      write_events(out, model:events(kind), opts, used_aliases)
    end
  end
  write_heap(out, model:heap(), opts, used_aliases)
  if result.cumulative and not opts.leak_only then
    write_cumulative(out, result.cumulative, opts, used_aliases)
  end
  layout.write_aliases(out, result.stream.aliases, used_aliases)
end

-- The report as a string (for tests and embedding).
M.render = layout.renderer(M.write)

return M
