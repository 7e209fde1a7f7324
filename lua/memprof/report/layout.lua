-- memprof.report.layout: what the text reports share: sizes, names of
-- rows, sorting, --top, the grouping heading, the sampling line and the
-- ALIASES section.

local sampling = require('memprof.analysis.sampling')
local sources = require('memprof.read.sources')
local grouping = require('memprof.report.model.grouping')

local M = {}

local format, floor, abs = string.format, math.floor, math.abs
local commas = require('memprof.words').commas

local UNITS = { 'B', 'KiB', 'MiB', 'GiB', 'TiB' }

-- bytes in the largest of the first `most` UNITS that it reaches: the
-- number, the unit's name ('B' for less than 1024) and its bytes.
function M.scale_size(bytes, most)
  local unit, scaled = 1, bytes
  while abs(scaled) >= 1024 and unit < most do
    scaled = scaled / 1024
    unit = unit + 1
  end
  return scaled, UNITS[unit], 1024 ^ (unit - 1)
end

-- 1536 -> '1,536B' (thousands separated, as counts are), or '1.50KiB'
-- in human-readable form (up to GiB).
function M.format_size(bytes, human_readable)
  local scaled, unit = M.scale_size(bytes, 4)
  if not human_readable or unit == 'B' then
    return commas(bytes) .. 'B'
  end
  if scaled == floor(scaled) then
    return format('%d%s', scaled, unit)
  end
  return format('%.2f%s', scaled, unit)
end

-- A size formatter for the options of a report.
function M.sizer(opts)
  return function(bytes)
    return M.format_size(bytes, opts.human_readable)
  end
end

M.plural = require('memprof.words').plural

-- Nanoseconds as milliseconds, with three decimals: '12.345 ms'.
function M.format_ms(ns)
  return format('%.3f ms', ns / 1e6)
end

-- The name of a place as the reports show it: the place where several
-- traces start says how many ('TRACE started at @f.lua:40 (3 traces)').
function M.place_name(site)
  if site.traces then
    return format('%s (%s)', site.name, M.plural(site.traces, 'trace'))
  end
  return site.name
end

-- The place a row is named after: the site of a group, the innermost
-- frame of a stack, the place of the first key (site or group) of a row
-- of the text report.
local function place_of(row)
  if row.frames then
    return row.frames[1]
  elseif row.first then
    return place_of(row.first)
  end
  return row.site or row
end

-- A row's name with its place named by place_name() (the place's name
-- starts the row's name; a note may follow it).
local function shown_name(row, name)
  local place = place_of(row)
  if not place or not place.traces or name:sub(1, #place.name) ~= place.name
  then
    return name
  end
  return M.place_name(place) .. name:sub(#place.name + 1)
end

-- The lines that name a row: its name, or for a stack its innermost
-- frame, then one line per caller, "called from NAME".  With
-- `plain_names`, the names as they are, without the number of traces of
-- a trace start (--diff: the number differs from run to run).
function M.title_lines(group, plain_names)
  local frames = group.frames
  local first = frames and frames[1].name or group.name
  if not plain_names then
    first = shown_name(group, first)
  end
  if not frames then
    return { first }
  end
  local lines = { first }
  for i = 2, #frames do
    lines[i] = 'called from ' .. frames[i].name
  end
  return lines
end

-- Writes a row: its first title line followed by `tail`, then the other
-- title lines indented by `indent` and one more tab.
function M.write_title(out, group, tail, indent, plain_names)
  indent = indent or ''
  local lines = M.title_lines(group, plain_names)
  out:write(indent, lines[1], tail, '\n')
  for i = 2, #lines do
    out:write(indent, '\t', lines[i], '\n')
  end
end

-- The text of the source line a place is (a line of a Lua function
-- whose file the reporter can read: memprof.read.sources), or nil.
function M.source_text(place)
  if place and place.source == 'lua' and place.line and place.chunkname
  then
    return sources.line(place.chunkname, place.line)
  end
  return nil
end

-- Writes the frames of a stack, one per line, innermost first; a line
-- of a readable file is followed by its source text.
function M.write_frames(out, frames, indent)
  for _, frame in ipairs(frames) do
    local text = M.source_text(frame)
    if text then
      out:write(indent, M.place_name(frame), ': ', text, '\n')
    else
      out:write(indent, M.place_name(frame), '\n')
    end
  end
end

-- The source text of a row named after a line of a readable file (by
-- line or by caller), or nil.
function M.row_source_text(group)
  if group.frames then
    return nil
  end
  return M.source_text(group.site or group)
end

-- After the title of a view's row named after a line of a readable file:
-- the line's source text, indented.
function M.write_source(out, group)
  local text = M.row_source_text(group)
  if text then
    out:write('\t| ', text, '\n')
  end
end

-- Sorts rows by `field` (a key of the row, or a function of it), largest
-- first, then by name (`name_of(row)`, default row.name).
function M.sort_rows(rows, field, name_of)
  local value = field
  if type(field) ~= 'function' then
    value = function(row) return row[field] end
  end
  name_of = name_of or function(row) return row.name end
  table.sort(rows, function(a, b)
    local va, vb = value(a), value(b)
    if va ~= vb then
      return va > vb
    end
    return name_of(a) < name_of(b)
  end)
  return rows
end

-- The first `top` rows (all when top is nil) and the rest; the rest's
-- length is added to left_out.rows when left_out is given.
function M.split_top(rows, top, left_out)
  if not top or #rows <= top then
    return rows, {}
  end
  if left_out then
    left_out.rows = left_out.rows + #rows - top
  end
  local shown, rest = {}, {}
  for i, row in ipairs(rows) do
    if i <= top then
      shown[#shown + 1] = row
    else
      rest[#rest + 1] = row
    end
  end
  return shown, rest
end

-- Sums the numeric `fields` over rows.
function M.sum(rows, fields)
  local sums = {}
  for _, field in ipairs(fields) do
    sums[field] = 0
  end
  for _, row in ipairs(rows) do
    for _, field in ipairs(fields) do
      sums[field] = sums[field] + row[field]
    end
  end
  return sums
end

-- The line that says a sampled profile's figures are estimates.
function M.write_sampling(out, stream)
  if stream.sample_bytes then
    out:write(sampling.note(stream.sample_bytes), '\n\n')
  end
end

local COMPILED_MODES = {
  exact = 'Compiled code: its allocations are charged to their lines and ' ..
    "inlined frames (trace_lines 'exact')",
  walk = 'Compiled code: its allocations are charged to their lines and ' ..
    "inlined frames, found from where the interpreter would resume " ..
    "(trace_lines 'walk')",
  resume = 'Compiled code: its allocations are charged to the line where ' ..
    "the interpreter would resume, often a line early (trace_lines 'resume')",
  start = 'Compiled code: its allocations are charged to the start of ' ..
    'their trace (the TRACE rows)',
}

local COMPILED_WHYS = {
  asked = '',
  no_mcofs = ", as this build's snapshots do not say where their machine " ..
    'code begins (LuaJIT before 2021-03: 2.1.0-beta3, Tarantool 2.6 and 2.11)',
  not_verified = ', as a check of this build failed ' ..
    '(memprof.info{trace_lines = true}.trace_lines.why names it)',
  no_prof_mode = ", as 'exact' needs the JIT compiler's per-line mode, " ..
    'not found in this build',
  program_profiler = ", as 'exact' would change the mode of LuaJIT's " ..
    'profiler, which the program runs',
}

-- What 'exact' costs the program: its per-line snapshots are the JIT
-- compiler's, counted in that row (no exact share of them can be told
-- apart: a trace compiled without them differs in more than them).
local EXACT_COST = ' For them the JIT compiler keeps a snapshot per ' ..
  'line: INTERNAL (JIT compiler) counts those too (a third to a half more ' ..
  "than without them on the programs measured; trace_lines 'walk' adds " ..
  'none).'

-- The line that says how events of compiled code were attributed (the
-- note of the extended format): at trace starts, not as asked, or with
-- events of compiled code by line; else ''.
function M.compiled_note(stream)
  local cc = stream.compiled_code
  if not cc or (cc.mode ~= 'start' and cc.why == 'asked' and
      (stream.compiled_bytes or 0) == 0) then
    return ''
  end
  local why = COMPILED_WHYS[cc.why]
  if cc.mode == 'start' and cc.why == 'asked' then
    why = " (trace_lines 'start')"
  end
  return COMPILED_MODES[cc.mode] .. why .. '.' ..
    (cc.mode == 'exact' and EXACT_COST or '')
end

-- A note and a blank line, unless the note is ''.
local function write_note(out, note)
  if note ~= '' then
    out:write(note, '\n\n')
  end
end

function M.write_compiled(out, stream)
  write_note(out, M.compiled_note(stream))
end

-- The line that says a report shows only some blocks (--focus,
-- --ignore: memprof.analysis.focus), or ''.
function M.focus_note(opts)
  local focus, ignore = opts.focus, opts.ignore
  if focus and ignore then
    return format("Only the blocks allocated where the place or its stack " ..
      "names '%s' (--focus) and not '%s' (--ignore): every figure counts " ..
      'them alone.', focus, ignore)
  elseif focus then
    return format("Only the blocks allocated where the place or its stack " ..
      "names '%s' (--focus): every figure counts them alone.", focus)
  elseif ignore then
    return format("Without the blocks allocated where the place or its " ..
      "stack names '%s' (--ignore): every figure counts the others alone.",
      ignore)
  end
  return ''
end

function M.write_focus(out, opts)
  write_note(out, M.focus_note(opts))
end

-- A line saying what the rows are, for groupings other than by line.
function M.write_grouping(out, mode)
  local heading = grouping.heading(mode)
  if heading then
    out:write(heading, '\n\n')
  end
end

-- Notes the aliases a site or group uses in `used` (a set of names).
function M.note_aliases(used, named)
  if named.aliases then
    for _, alias in ipairs(named.aliases) do
      used[alias] = true
    end
  elseif named.alias then
    used[named.alias] = true
  end
end

-- The lines of a chunk name, without the empty piece after a final
-- newline.
local function source_lines(chunkname)
  local lines = {}
  for line in (chunkname .. '\n'):gmatch('(.-)\n') do
    lines[#lines + 1] = line
  end
  if chunkname:sub(-1) == '\n' then
    lines[#lines] = nil
  end
  return lines
end

-- ALIASES: the source of the multi-line chunk names used by the rows.
function M.write_aliases(out, aliases, used)
  local shown = {}
  for _, alias in ipairs(aliases) do
    if used[alias.name] then
      shown[#shown + 1] = alias
    end
  end
  if #shown == 0 then
    return
  end
  out:write('ALIASES:\n')
  for _, alias in ipairs(shown) do
    out:write(alias.name, ':\n')
    for number, line in ipairs(source_lines(alias.chunkname)) do
      out:write(format('%d\t| %s\n', number, line))
    end
    out:write('\n')
  end
end

-- What fn(out) writes to out, as one string.
function M.render(fn)
  local parts = {}
  local buffer = { write = function(self, ...)
    for i = 1, select('#', ...) do
      parts[#parts + 1] = select(i, ...)
    end
    return self
  end }
  fn(buffer)
  return table.concat(parts)
end

-- The render function of a report whose write(x, out, opts) writes it:
-- render(x, opts) returns the report as a string.
function M.renderer(write)
  return function(x, opts)
    return M.render(function(out)
      write(x, out, opts)
    end)
  end
end

-- What the rest line of a section adds when the rows it sums hold more
-- bytes than the rows shown: their share of the section's bytes, so
-- that a cut never hides the larger part unsaid.  '' otherwise.
function M.rest_share(rest_bytes, shown_bytes)
  local total = rest_bytes + shown_bytes
  if rest_bytes <= shown_bytes or total <= 0 then
    return ''
  end
  return format(' (%d%% of the bytes)', floor(rest_bytes / total * 100 + 0.5))
end

-- Sums `field` over rows.
function M.sum_of(rows, field)
  local sum = 0
  for _, row in ipairs(rows) do
    sum = sum + row[field]
  end
  return sum
end

return M
