-- memprof.report.views: the text of the views: live at the end (leaks),
-- the peak, temporary blocks and the heap over time.
--
--   views.write(result, out, opts)
--     result  from memprof.analysis.analyze.run() with the views asked for
--     out     a file handle (default io.stdout)
--     opts    views: the set of views to print ({ leaks = true, ... }),
--               printed in the order of analyze.VIEWS
--             top: at most this many rows per view (and stacks per row
--               of LIVE AT END: at most 3 unless top is smaller); the
--               others are summed on a line "... and K more: ..."
--             left_out: a table whose field rows grows by the number of
--               rows that top leaves out (stacks are not counted)
--             sort: 'bytes' (default) or 'count'
--             human_readable: sizes in B/KiB/MiB/GiB
--   views.render(result, opts) -> the same, as a string
--
-- Every view ends with a TOTAL line that reconciles with the stream;
-- docs/views.md shows each with a sample.

local layout = require('memprof.report.layout')
local analyze = require('memprof.analysis.analyze')
local timeline_model = require('memprof.report.model.timeline')
local peak_model = require('memprof.report.model.peak')
local leaks_model = require('memprof.report.model.leaks')
local temporary_model = require('memprof.report.model.temporary')

local M = {}

local format, floor = string.format, math.floor
local plural = layout.plural

-- Stacks shown under a row of LIVE AT END.
M.STACKS_PER_ROW = 3
-- Width of the bars of HEAP OVER TIME.
M.BAR_WIDTH = 40

-- The order of a view's rows, for its title: by bytes, or by blocks
-- with --sort=count.
local function order(opts)
  return opts.sort == 'count' and '(by blocks)' or '(by bytes)'
end

-- Counts the rows a view leaves out (columns' top()) in opts.left_out.
local function note_left_out(opts, rest)
  if opts.left_out then
    opts.left_out.rows = opts.left_out.rows + rest.rows
  end
end

-- Writes the rows of `model` a view shows, each a title ending in
-- tail(row, size) and its source line; returns them and the rest.
local function write_rows(out, model, opts, used, tail, size)
  local shown, rest = model:rows(opts)
  note_left_out(opts, rest)
  for _, row in ipairs(shown) do
    layout.write_title(out, row.group, tail(row, size))
    layout.write_source(out, row.group)
    layout.note_aliases(used, row.group)
  end
  return shown, rest
end

-- LIVE AT END --------------------------------------------------------------

local function write_stacks(out, stacks, opts)
  local size = layout.sizer(opts)
  local limit = M.STACKS_PER_ROW
  if opts.top and opts.top < limit then
    limit = opts.top
  end
  local shown, rest = layout.split_top(stacks, limit)
  for _, record in ipairs(shown) do
    out:write(format('\t%s, %s allocated at:\n',
      plural(record.count, 'block'), size(record.bytes)))
    layout.write_frames(out, record.stack.frames, '\t\t')
  end
  if #rest > 0 then
    local sums = layout.sum(rest, { 'count', 'bytes' })
    out:write(format('\t... and %d more %s: %s, %s\n', #rest,
      #rest == 1 and 'stack' or 'stacks', plural(sums.count, 'block'),
      size(sums.bytes)))
  end
end

local function note_stack_aliases(used, stacks)
  for _, record in ipairs(stacks) do
    for _, frame in ipairs(record.stack.frames) do
      layout.note_aliases(used, frame)
    end
  end
end

function M.write_leaks(out, leaks, opts, used)
  local size = layout.sizer(opts)
  local model = leaks_model.new(leaks)
  out:write('LIVE AT END ', order(opts), ': blocks allocated during the ' ..
    'profile and never freed, by where they were allocated (for a ' ..
    'reallocated block, where it was last reallocated)\n')
  local shown, rest = model:rows(opts)
  note_left_out(opts, rest)
  for _, row in ipairs(shown) do
    layout.write_title(out, row.group, format(': %s, %s',
      plural(row.count, 'block'), size(row.bytes)))
    -- (Stacks show the line with its text.)
    if #row.stacks == 0 then
      layout.write_source(out, row.group)
    end
    layout.note_aliases(used, row.group)
    write_stacks(out, row.stacks, opts)
    note_stack_aliases(used, row.stacks)
  end
  if rest.rows > 0 then
    out:write(format('... and %d more: %s, %s%s\n', rest.rows,
      plural(rest.count, 'block'), size(rest.bytes),
      layout.rest_share(rest.bytes, layout.sum_of(shown, 'bytes'))))
  end
  out:write(format('TOTAL live at end: %s, %s\n', plural(model.count,
    'block'), size(model.bytes)))
  if model.freed_before ~= 0 then
    out:write(format('Freed during the profile, allocated before it: %s\n',
      size(model.freed_before)))
  end
  out:write(format('Net bytes of the stream: %s\n', size(model.total)))
  out:write(model.note, '\n\n')
end

-- PEAK ---------------------------------------------------------------------

local function peak_moment(model)
  if model.at_start then
    return 'at the start (the heap never grew past its size at the start)'
  end
  local text = format('after event %d (byte %d of the file)', model.event,
    model.offset)
  if not model.has_time then
    return text
  end
  local from = model.time or 0
  if model.time_next then
    return format('%s, between %s and %s', text, layout.format_ms(from),
      layout.format_ms(model.time_next))
  end
  return format('%s, at %s or later', text, layout.format_ms(from))
end

local function peak_row_tail(row, size)
  return format(': %s in %s', size(row.bytes), plural(row.blocks, 'block'))
end

-- The first line of PEAK.
local function peak_title(model, size, opts)
  local title = 'PEAK ' .. order(opts)
  if model.whole_heap then
    return format('%s: %s %s, of which %s allocated before the profile. ' ..
      'Held by:\n', title, model:amount(size), peak_moment(model),
      size(model.before.live_bytes))
  end
  if model.at_start then
    return title .. ': at the start (the heap never grew past its size at ' ..
      'the start, which this profile does not record). Held by:\n'
  end
  return format('%s: %s, %s. Held by:\n', title, model:amount(size),
    peak_moment(model))
end

-- The blocks allocated before the profile: apart from the rows.
local function write_peak_before(out, before, size)
  if before.kind == 'live' then
    out:write(format('%s: %s still live', before.name,
      size(before.live_bytes)))
    if before.freed_blocks ~= 0 then
      out:write(format(' (%s, %s, freed before the peak)',
        plural(before.freed_blocks, 'block'), size(before.freed_bytes)))
    end
    out:write('\n')
  elseif before.kind == 'freed' then
    out:write(format('%s: %s, %s, freed before the peak\n', before.name,
      plural(before.freed_blocks, 'block'), size(before.freed_bytes)))
  end
end

local function peak_total(model, size)
  if model.whole_heap then
    return format('TOTAL at the peak: %s (the heap at the start, %s, ' ..
      'and %s more)\n\n', size(model.bytes), size(model.heap_at_start),
      size(model.growth))
  end
  return format('TOTAL at the peak: %s above the heap at the start\n\n',
    size(model.growth))
end

function M.write_peak(out, peak, opts, used, stream)
  local size = layout.sizer(opts)
  local model = peak_model.new(peak, stream)
  out:write(peak_title(model, size, opts))
  local shown, rest = write_rows(out, model, opts, used, peak_row_tail,
    size)
  if rest.rows > 0 then
    out:write(format('... and %d more: %s in %s%s\n', rest.rows,
      size(rest.bytes), plural(rest.blocks, 'block'),
      layout.rest_share(rest.bytes, layout.sum_of(shown, 'bytes'))))
  end
  write_peak_before(out, model.before, size)
  out:write(peak_total(model, size))
end

-- TEMPORARY BLOCKS -----------------------------------------------------------

local function temporary_tail(row, size)
  local text = format(': %s temporary, %s', row.temporary_blocks,
    size(row.temporary_bytes))
  text = text .. format('; %d freed later, %s', row.freed_blocks,
    size(row.freed_bytes))
  return text .. format('; %d live at end, %s', row.live_blocks,
    size(row.live_bytes))
end

function M.write_temporary(out, result, opts, used)
  local size = layout.sizer(opts)
  local model = temporary_model.new(result)
  out:write(format('TEMPORARY BLOCKS %s: %s, by where they were ' ..
    'allocated\n', order(opts), model.meaning))
  local shown, rest = write_rows(out, model, opts, used, temporary_tail,
    size)
  if rest.rows > 0 then
    out:write(format('... and %d more', rest.rows),
      temporary_tail(rest, size), layout.rest_share(rest.temporary_bytes,
        layout.sum_of(shown, 'temporary_bytes')), '\n')
  end
  local without = model:without()
  if without.count > 0 then
    out:write(format('(%s with no temporary blocks: %s, %s)\n',
      plural(without.count, 'other row'), plural(without.blocks, 'block'),
      size(without.bytes)))
  end
  local totals = model.totals
  out:write(format('TOTAL: %s allocated, %s: %d temporary (%s), %d freed ' ..
    'later (%s), %d live at end (%s)\n\n', plural(totals.blocks, 'block'),
    size(totals.bytes), totals.temporary_blocks,
    size(totals.temporary_bytes), totals.freed_blocks,
    size(totals.freed_bytes), totals.live_blocks, size(totals.live_bytes)))
end

-- HEAP OVER TIME -------------------------------------------------------------

-- How to print times for rows `width` ns wide: the unit and the number
-- of decimals that show the width exactly.
local function time_format(width)
  local unit, name = 1e6, 'ms'
  if width >= 1e9 then
    unit, name = 1e9, 's'
  end
  local scaled, decimals = width / unit, 0
  while decimals < 6 and
      math.abs(scaled * 10 ^ decimals - floor(scaled * 10 ^ decimals + 0.5))
      > 1e-9 do
    decimals = decimals + 1
  end
  return function(ns)
    return format('%.' .. decimals .. 'f %s', ns / unit, name)
  end
end

local function bar(value, highest)
  if value <= 0 or highest <= 0 then
    return ''
  end
  return string.rep('#', floor(value / highest * M.BAR_WIDTH + 0.5))
end

local function timeline_rows(model, size, show_time)
  local lines, shown, highest = {}, model.shown, model.highest
  for i, row in ipairs(shown.rows) do
    local line = { show_time(row.start), size(row.high), size(row.last),
      bar(row.high, highest) }
    if i == shown.peak_row then
      line[4] = line[4] .. '  <- peak'
    end
    lines[i] = line
  end
  return lines
end

-- Right-aligns the first three columns.
local function write_columns(out, lines)
  local widths = { 0, 0, 0 }
  for _, line in ipairs(lines) do
    for c = 1, 3 do
      if #line[c] > widths[c] then
        widths[c] = #line[c]
      end
    end
  end
  for _, line in ipairs(lines) do
    local text = format('%' .. widths[1] .. 's  %' .. widths[2] .. 's  %' ..
      widths[3] .. 's  %s', line[1], line[2], line[3], line[4])
    out:write((text:gsub('%s+$', '')), '\n')
  end
end

function M.write_timeline(out, result, opts, stream)
  local model = timeline_model.new(result, stream)
  if not model.has_time then
    out:write('HEAP OVER TIME: the profile has no time marks (record with ' ..
      'memprof.start(path, {timestamps = true}))\n\n')
    return
  end
  local size = layout.sizer(opts)
  local show_time = time_format(model.shown.width)
  out:write(format('HEAP OVER TIME: net bytes since the start, %s per ' ..
    'row (the highest value in the row, and the value at its end)\n',
    show_time(model.shown.width)))
  local lines = { { 'time', 'highest', 'at end', '' } }
  for _, line in ipairs(timeline_rows(model, size, show_time)) do
    lines[#lines + 1] = line
  end
  write_columns(out, lines)
  out:write('\n')
end

-- All views -----------------------------------------------------------------

function M.write(result, out, opts)
  out = out or io.stdout
  opts = opts or {}
  local views = opts.views or {}
  local used = {}
  layout.write_grouping(out, result.grouper.mode)
  if views.leaks then
    M.write_leaks(out, result.leaks, opts, used)
  end
  if views.peak then
    M.write_peak(out, result.peak, opts, used, result.stream)
  end
  if views.temporary then
    M.write_temporary(out, result.temporary, opts, used)
  end
  if views.timeline then
    M.write_timeline(out, result.timeline, opts, result.stream)
  end
  layout.write_aliases(out, result.stream.aliases, used)
end

M.render = layout.renderer(M.write)

M.VIEWS = analyze.VIEWS

return M
