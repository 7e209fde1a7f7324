-- memprof.report.live: the screen of memprof live, as a model and as
-- text.
--
--   local screen = require('memprof.report.live')
--   local model = screen.model(state, opts)
--     state  a memprof.analysis.live state (or anything with its rows()
--            and heap(), and `stream`)
--     opts.view      'live' (places by live bytes, default) or
--                    'allocated' (by bytes allocated per second)
--     opts.grouping  'line' (default), 'function' or 'stack'
--     opts.top       how many rows (default 10)
--     opts.path      the profile's path, for the title
--     opts.status    what the reader is doing ('following', 'profile
--                    ended', ...), shown at the right of the title
--     opts.message   a line of news (a restart, a key not known), or nil
--     opts.events, opts.bytes_read  what was read (default the stream's
--                    counts, which lag a chunk behind)
--     opts.prefix    a directory that long chunk names share (memprof.report.paths),
--                    left out of the names shown
--   screen.lines(model, width, height [, opts]) -> lines, styles
--     the screen as `height` lines of at most `width` characters;
--     styles[i] is 'title' or 'heading' for lines shown in bold or
--     reverse video, else nil.  opts.utf8: draw the heap's history with
--     block characters (else ASCII); opts.keys = false: no last line of
--     keys, and no blank lines to fill the height (the plain text mode)
--   screen.ansi(lines, styles) -> the text that draws them over the
--     terminal's screen (cursor home, each line cleared to its end)
--   screen.plain(lines) -> the lines as plain text, one frame
--   screen.FIXED_LINES   lines of the screen that are not rows (so a
--     screen of height h has room for h - FIXED_LINES rows)
--   screen.KEYS          the keys and what they do, as the last line says
--
-- The model holds what is shown, decided once: rows sorted, cut to
-- `top`, the rest summed; the text is laid out from it alone.

local layout = require('memprof.report.layout')
local paths = require('memprof.report.paths')
local words = require('memprof.words')

local M = {}

local format, floor, max = string.format, math.floor, math.max

M.FIXED_LINES = 7

M.KEYS = 'l live  a allocated  1 line  2 function  3 stack  q quit'

local VIEWS = {
  live = { by = 'live bytes', keep = 'live',
    columns = { 'live', 'blocks', 'live_rate', 'alloc_rate' } },
  allocated = { by = 'bytes allocated per second', keep = 'allocated',
    columns = { 'alloc_rate', 'allocated', 'live', 'live_rate' } },
}
M.VIEWS = VIEWS

local HEADINGS = { live = 'LIVE', blocks = 'BLOCKS', live_rate = 'GROWTH/s',
  alloc_rate = 'ALLOC/s', allocated = 'ALLOCATED' }

local GROUPINGS = { line = 'line', ['function'] = 'function',
  stack = 'stack' }

-- Rows by figure `by`, largest first (a rate not known yet counts as
-- 0), then by `then_by`, then by name.
local function sort_rows(rows, by, then_by)
  table.sort(rows, function(a, b)
    local x, y = a[by] or 0, b[by] or 0
    if x ~= y then
      return x > y
    end
    x, y = a[then_by] or 0, b[then_by] or 0
    if x ~= y then
      return x > y
    end
    return a.name < b.name
  end)
end

-- A name without the directory all the profile's chunk names share,
-- marked as the reports mark it (@…/name.lua).
local function shortened(name, prefix)
  if not prefix then
    return name
  end
  return (name:gsub('@' .. prefix:gsub('%p', '%%%0'), '@' .. paths.MARK))
end

function M.model(state, opts)
  local view = VIEWS[opts.view or 'live'] and (opts.view or 'live') or 'live'
  local grouping = GROUPINGS[opts.grouping or 'line'] and
    (opts.grouping or 'line') or 'line'
  local spec = VIEWS[view]
  local kept = {}
  for _, row in ipairs(state:rows(grouping)) do
    if row[spec.keep] > 0 then
      kept[#kept + 1] = row
    end
  end
  if view == 'live' then
    sort_rows(kept, 'live', 'live_rate')
  else
    sort_rows(kept, 'alloc_rate', 'allocated')
  end
  local top = opts.top or 10
  local rows, rest = {}, { rows = 0 }
  for _, field in ipairs(spec.columns) do
    rest[field] = 0
  end
  for i, row in ipairs(kept) do
    if i <= top then
      rows[i] = { name = shortened(row.name, opts.prefix), live = row.live,
        blocks = row.blocks, allocated = row.allocated,
        live_rate = row.live_rate, alloc_rate = row.alloc_rate }
    else
      rest.rows = rest.rows + 1
      for _, field in ipairs(spec.columns) do
        rest[field] = rest[field] + (row[field] or 0)
      end
    end
  end
  local note
  if grouping == 'stack' and not (state.has_stacks) then
    note = 'this profile has no call stacks (profile with stack_depth, ' ..
      'or memprof run --stack-depth=N): rows are places'
  end
  local stream = state.stream or {}
  return { path = opts.path or stream.name or '', view = view,
    grouping = grouping, columns = spec.columns, by = spec.by, heap = state:heap(), rows = rows, rest = rest,
    events = opts.events or stream.events or 0,
    bytes_read = opts.bytes_read or stream.bytes_read or 0,
    sampled = stream.sample_bytes ~= nil, status = opts.status or '',
    message = opts.message, note = note }
end

-- Text ---------------------------------------------------------------------

local function size(bytes)
  return layout.format_size(floor(bytes + 0.5), true)
end

local function signed_size(bytes)
  local rounded = floor(bytes + 0.5)
  if rounded > 0 then
    return '+' .. size(rounded)
  end
  return size(rounded)
end

-- 1234567 -> '1,234,567'.
local function count(n)
  local text = format('%d', floor(n + 0.5))
  local sign, digits = text:match('^(-?)(%d+)$')
  local head = #digits % 3
  local parts = { head > 0 and digits:sub(1, head) or nil }
  for i = head + 1, #digits, 3 do
    parts[#parts + 1] = digits:sub(i, i + 2)
  end
  return sign .. table.concat(parts, ',')
end
M.count = count

local CELLS = {
  live = size, allocated = size, blocks = count,
  live_rate = signed_size, alloc_rate = size,
}

local function cell(field, value)
  if value == nil then
    return ''
  end
  return CELLS[field](value)
end

-- The characters of UTF-8 text: its bytes less the continuation bytes.
local function length(text)
  local continuations = 0
  for _ in text:gmatch('[\128-\191]') do
    continuations = continuations + 1
  end
  return #text - continuations
end

-- The byte where the character after the first `n` of text begins.
local function byte_after(text, n)
  local seen, i = 0, 1
  while i <= #text and seen < n do
    i = i + 1
    while i <= #text and text:byte(i) >= 0x80 and text:byte(i) < 0xc0 do
      i = i + 1
    end
    seen = seen + 1
  end
  return i
end

-- The first `width` characters of text (UTF-8 sequences kept whole),
-- with '...' at the end when it is cut.
local function clip(text, width)
  if length(text) <= width then
    return text
  end
  if width <= 3 then
    return text:sub(1, byte_after(text, max(width, 0)) - 1)
  end
  return text:sub(1, byte_after(text, width - 3) - 1) .. '...'
end
M.clip = clip

-- Characters of the heap's history, from the lowest to the highest.
local BLOCKS = { ' ', '\u{2581}', '\u{2582}', '\u{2583}', '\u{2584}',
  '\u{2585}', '\u{2586}', '\u{2587}', '\u{2588}' }
local ASCII = { ' ', '_', '.', '-', '~', '=', '+', '*', '#' }

-- The last `width` heap sizes as a line of characters, scaled between
-- their lowest and highest.
local function sparkline(history, width, utf8)
  local chars = utf8 and BLOCKS or ASCII
  local first = max(1, #history - width + 1)
  local low, high = math.huge, -math.huge
  for i = first, #history do
    low, high = math.min(low, history[i]), max(high, history[i])
  end
  local out = {}
  for i = first, #history do
    local level = #chars
    if high > low then
      level = 2 + floor((history[i] - low) / (high - low) * (#chars - 2) + 0.5)
    end
    out[#out + 1] = chars[level]
  end
  return table.concat(out)
end

-- Left and right texts on one line of `width`, the left one clipped.
local function spread(left, right, width)
  if length(right) + 2 >= width then
    return clip(left, width)
  end
  left = clip(left, width - length(right) - 1)
  return left .. string.rep(' ', width - length(left) - length(right)) ..
    right
end

local function heap_line(model, width, utf8)
  local h = model.heap
  local text = format('%s %s', h.absolute and 'heap' or 'net since start',
    size(h.bytes))
  if h.rate then
    text = text .. format('  %s/s over the last %s', signed_size(h.rate),
      words.plural(floor(h.span + 0.5), 'second'))
  end
  local room = width - #text - 2
  if room >= 8 and #h.history >= 2 then
    text = text .. '  ' .. sparkline(h.history, math.min(room, 60), utf8)
  end
  return text
end

-- The columns are 10 characters wide, and a space apart: the longest
-- figure ('+1023.99KiB') takes one more, and is still apart from the
-- next.
local COLUMN = 10

local function row_line(columns, values, name, width, as_text)
  local parts = {}
  for i, field in ipairs(columns) do
    local value = values[field]
    parts[i] = format('%' .. COLUMN .. 's', as_text and value or
      cell(field, value))
  end
  return clip(table.concat(parts, ' ') .. '  ' .. name, width)
end

function M.lines(model, width, height, opts)
  opts = opts or {}
  local lines, styles = {}, {}
  local function add(text, style)
    lines[#lines + 1] = clip(text, width)
    styles[#lines] = style
  end
  add(spread('memprof live ' .. model.path, model.status, width), 'title')
  add(heap_line(model, width, opts.utf8))
  add(format('%ss by %s; %s events (%s) read', model.grouping, model.by,
    count(model.events), size(model.bytes_read)))
  add(model.message or model.note or (model.sampled and
    'a sampled profile: every figure is an estimate') or '')
  add(row_line(model.columns, HEADINGS, model.grouping:upper(), width, true),
    'heading')
  local room = height - M.FIXED_LINES
  for i = 1, math.min(#model.rows, room) do
    local row = model.rows[i]
    add(row_line(model.columns, row, row.name, width))
  end
  if model.rest.rows > 0 then
    add(row_line(model.columns, model.rest,
      format('... and %s', words.plural(model.rest.rows, 'more place')),
      width))
  elseif #model.rows == 0 then
    add('  (no place yet)')
  end
  if opts.keys == false then
    return lines, styles
  end
  while #lines < height - 1 do
    add('')
  end
  add(M.KEYS)
  -- (A screen lower than the lines that are not rows: its first lines.)
  for i = #lines, max(height, 1) + 1, -1 do
    lines[i], styles[i] = nil, nil
  end
  return lines, styles
end

local STYLE = { title = '\27[1m', heading = '\27[7m' }

function M.ansi(lines, styles)
  local out = { '\27[H' }
  for i, line in ipairs(lines) do
    local style = STYLE[styles and styles[i]]
    if style then
      out[#out + 1] = style .. line .. '\27[0m'
    else
      out[#out + 1] = line
    end
    out[#out + 1] = i < #lines and '\27[K\r\n' or '\27[K'
  end
  out[#out + 1] = '\27[J'
  return table.concat(out)
end

function M.plain(lines)
  local last = #lines
  while last > 0 and lines[last] == '' do
    last = last - 1
  end
  return table.concat(lines, '\n', 1, last) .. '\n'
end

return M
