-- memprof.report.json: every view of an analysis as one JSON document
-- (the schema is docs/json.md), written by memprof.encode.json_text.
--
--   json.write(result, out, opts)     -- result of memprof.analysis.analyze.run;
--                                     -- opts.focus, opts.ignore: what the
--                                     -- analysis kept (the key filter)
--   json.document(result, opts) -> the document as Lua tables
--   json.encode(value) -> JSON text (also used by the chrome format)
--   json.array(list) -> list, marked to be encoded as an array even
--                       when empty
--   json.null                         -- JSON null
--
-- The analysis should have every view (analyze.run with views leaks,
-- peak, temporary and, with time marks, timeline); a view not computed
-- is null in the document.
--
-- The text is the same for the same profile on every run: the keys of
-- each object are in sorted order.  Every string is valid UTF-8 (each
-- byte that is not part of a valid sequence becomes U+FFFD), and every
-- whole number is written exactly, however large (memprof.encode.json_text).

local sections_model = require('memprof.report.model.sections')
local json_text = require('memprof.encode.json_text')
local leaks_module = require('memprof.analysis.leaks')
local holders_json = require('memprof.report.holders_json')
local cumulative_model = require('memprof.report.model.cumulative')
local timeline_model = require('memprof.report.model.timeline')
local temporary_model = require('memprof.report.model.temporary')
local totals_model = require('memprof.report.model.totals')
local leaks_model = require('memprof.report.model.leaks')
local peak_model = require('memprof.report.model.peak')

local M = {}

M.SCHEMA_VERSION = 1

local format = string.format

local NULL = json_text.null
M.null = NULL
M.array = json_text.array

-- A long array of the document (see Sections below).
local section = json_text.list

function M.encode(value)
  return json_text.encode(value)
end

-- The document -----------------------------------------------------------

local function hex(n)
  return n and format('0x%x', n) or NULL
end

local function or_null(value)
  if value == nil then
    return NULL
  end
  return value
end

-- The entry functions of sections fill `entry`, an empty table (see
-- json_text.list).

local function site_entry(compiled, site, entry)
  local func = site.func
  entry.compiled_alloc_bytes = compiled.alloc[site] or 0
  entry.compiled_realloc_bytes = compiled.realloc[site] or 0
  entry.id = site.id
  entry.name = site.name
  entry.source = site.source
  entry.chunkname = or_null(site.chunkname)
  entry.line = or_null(site.line)
  entry.traceno = or_null(site.traceno)
  entry.traces = or_null(site.traces)
  entry.address = site.source ~= 'trace' and hex(site.addr) or NULL
  entry['function'] = func and func.name or NULL
  entry.alias = or_null(site.alias)
  return entry
end

-- A function of frames that gives place(the array of their sites'
-- ids): one section for every entry of a section (an entry's frames are
-- written before the next entry is made), not an array per entry.
local function site_ids_of(place)
  local ids = section({}, function(frame) return frame.id end)
  return function(frames)
    ids.items = frames
    return place(ids)
  end
end

-- The id of a stack: its id in the stream, or for a stack the reader
-- made for events in compiled code, a number after the stream's.
local function stack_id(stream, stack)
  if stack.inferred then
    return #stream.stacks + stack.index
  end
  return stack.id
end

local function stack_entry(stream, stack, entry, site_ids)
  entry.id = stack_id(stream, stack)
  entry.frames = site_ids(stack.frames)
  entry.inferred = stack.inferred == true
  return entry
end

local function row_entry(group, entry, site_ids)
  local site = group.site
  entry.id, entry.name, entry.source = group.id, group.name, group.source
  entry.note = or_null(group.note)
  entry.site, entry['function'], entry.frames = NULL, NULL, NULL
  if group.frames then
    entry.frames = site_ids(group.frames)
  end
  if site and site.id and site.id > 0 then
    -- A site of the stream (the pseudo-site has id 0; a function has
    -- none).
    entry.site = site.id
  end
  if group.mode == 'function' and site and site.source ~= 'before' then
    entry['function'] = site.name
  end
  return entry
end

local function stream_section(stream)
  return {
    name = stream.name,
    version = stream.version,
    symtab_version = stream.symtab_version,
    events = stream.events,
    bytes_read = stream.bytes_read,
    has_stacks = stream.has_stacks,
    has_time = stream.has_time,
    last_time_ns = or_null(stream.time),
    sample_bytes = or_null(stream.sample_bytes),
    estimates = stream.sample_bytes ~= nil,
    heap_at_start = or_null(stream.heap_at_start),
    collected_at_stop = stream.collected_at_stop,
    heap_after_collection = or_null(stream.heap_after_collection),
    compiled_bytes = stream.compiled_bytes,
  }
end

-- Sections ---------------------------------------------------------------
--
-- The long arrays of the document (an entry per site, stack, row or
-- slot) are sections: a list of items and the function that makes the
-- entry of an item (a json_text.list).  document() makes every entry;
-- write() leaves them to the writer, which makes and writes them one by
-- one, so that the whole document is never held at once.

-- No overrides: one empty array for every row without any.
local NO_OVERRIDES = M.array({})

-- The overrides of a row (memprof.report.model.sections), the most
-- blocks first: a section in its own right (a row where the collector
-- frees every place's blocks has an override per place).
local function overrides_of(overrides, place)
  if not overrides then
    return NO_OVERRIDES
  end
  local groups, blocks = overrides.groups, overrides.blocks
  return place(section(#groups, function(at, entry)
    entry.row, entry.name = groups[at].id, groups[at].name
    entry.blocks = blocks[at]
    return entry
  end))
end

-- The sections of events: each entry's figures ({ key in the entry,
-- column of the model's rows }), and whether it lists overrides.
local EVENT_SECTIONS = {
  alloc = { fields = { { 'events', 'count' }, { 'bytes', 'plus' } } },
  realloc = { fields = { { 'events', 'count' }, { 'new_bytes', 'plus' },
    { 'old_bytes', 'minus' } }, overrides = true },
  free = { fields = { { 'events', 'count' }, { 'bytes', 'minus' } },
    overrides = true },
}

-- A section of rows from a listing of the model, made as the section is
-- written and let go after its last entry (not every section's 400,000
-- rows at once): list() -> the listing, fill(listing, id, entry) the
-- figures of the row of that group id.
local function listing_section(model, list, fill)
  local listing, last
  return section(function()
    listing = list()
    last = listing.ids[#listing.ids]
    return listing.ids
  end, function(id, entry)
    local group = model:group(id)
    entry.row, entry.name = id, group.name
    fill(listing, id, entry)
    if id == last then
      listing = nil
    end
    return entry
  end)
end

local function event_section(model, kind, place)
  local spec = EVENT_SECTIONS[kind]
  return listing_section(model, function()
    return model:event_listing(kind)
  end, function(listing, id, entry)
    local columns = listing.set.columns
    for _, field in ipairs(spec.fields) do
      entry[field[1]] = columns[field[2]][id]
    end
    if spec.overrides then
      entry.overrides = overrides_of(model:overrides(kind, listing, id),
        place)
    end
    return entry
  end)
end

-- The heap: what each row holds at the end, and what its events
-- produced and released (the row of the blocks allocated before the
-- profile holds nothing, and released what its holds go below zero).
local function heap_section(model)
  return listing_section(model, function()
    -- The largest listing (more columns than the others'), made after
    -- theirs: those are garbage the collector may not have freed yet.
    collectgarbage('collect')
    return model:heap_listing()
  end, function(listing, id, entry)
    local c = listing.set.columns
    local holds, allocs, frees = c.holds[id], c.allocs[id], c.frees[id]
    if id == listing.before then
      entry.live_bytes, entry.live_blocks, entry.freed_bytes = 0, 0, -holds
    else
      entry.live_bytes, entry.live_blocks = holds, allocs - frees
      entry.freed_bytes = (c.allocated_bytes[id] or 0) - holds
    end
    entry.allocs, entry.reallocs, entry.frees = allocs, c.reallocs[id],
      frees
    return entry
  end)
end

-- The totals of the document: those of memprof.report.model.totals but
-- the counts of allocations and the duration.
local TOTALS_FIELDS = { 'events', 'alloc_events', 'realloc_events',
  'free_events', 'allocated_bytes', 'freed_bytes', 'net_bytes' }

local function totals_section(result)
  local totals, part = totals_model.new(result), {}
  for _, field in ipairs(TOTALS_FIELDS) do
    part[field] = totals[field]
  end
  return part
end

-- place(section) is what stands for a section in the document: its
-- entries (document()) or a marker (write()).
local function live_section(leaks, stream, place)
  if not leaks then
    return NULL
  end
  local counts, bytes = leaks.columns.count, leaks.columns.bytes
  -- A row's stacks are one section for every row, of positions 1 to
  -- their number, read from the row whose entry is being made (`row`:
  -- its stacks are made as it is written, before the next row's entry
  -- is made).
  local row
  local row_stacks = section(0, function(i, entry)
    local stack, count, size = leaks_module.stack_at(leaks, row, i)
    entry.stack, entry.blocks, entry.bytes = stack_id(stream, stack),
      count, size
    return entry
  end)
  local live_rows = section(leaks.groups, function(group, entry)
    local id = group.id
    row = group
    entry.row, entry.name = id, group.name
    entry.blocks, entry.bytes = counts[id], bytes[id]
    row_stacks.items = leaks_module.stack_count(leaks, group)
    entry.stacks = place(row_stacks)
    return entry
  end)
  local model = leaks_model.new(leaks)
  return { rows = place(live_rows), blocks = model.count, bytes = model.bytes,
    freed_before_profiling = model.freed_before, net_bytes = model.total,
    collected_at_stop = model.collected }
end

local function peak_section(peak, stream, place)
  if not peak then
    return NULL
  end
  local model = peak_model.new(peak, stream)
  local bytes, blocks = peak.columns.bytes, peak.columns.blocks
  local peak_rows = section(peak.groups, function(group, entry)
    local id = group.id
    entry.row, entry.name = id, group.name
    entry.bytes, entry.blocks = bytes[id], blocks[id]
    return entry
  end)
  local before = model.before
  return { bytes = model.growth, event = model.event,
    offset = or_null(model.offset), time_ns = or_null(model.time),
    next_time_ns = or_null(model.time_next), rows = place(peak_rows),
    heap_at_start = or_null(model.heap_at_start),
    heap_bytes = model.whole_heap and model.bytes or NULL,
    before = { freed_bytes = before.freed_bytes,
      freed_blocks = before.freed_blocks,
      live_bytes = or_null(before.live_bytes) } }
end

local TEMPORARY_FIELDS = { 'blocks', 'bytes', 'temporary_blocks',
  'temporary_bytes', 'freed_blocks', 'freed_bytes', 'live_blocks',
  'live_bytes' }

local function counts_of(record, entry)
  for _, field in ipairs(TEMPORARY_FIELDS) do
    entry[field] = record[field]
  end
  return entry
end

local function temporary_section(temporary, place)
  if not temporary then
    return NULL
  end
  local figures = temporary.columns
  local model = temporary_model.new(temporary)
  local temporary_rows = section(function()
    return model:groups()
  end, function(group, entry)
    local id = group.id
    entry.row, entry.name = id, group.name
    for _, field in ipairs(TEMPORARY_FIELDS) do
      entry[field] = figures[field][id]
    end
    return entry
  end)
  return { limit = model.limit,
    rows = place(temporary_rows),
    totals = counts_of(model.totals, {}) }
end

local function timeline_section(result, stream, place)
  local model = timeline_model.new(result, stream)
  if not model.shown then
    return NULL
  end
  local slot_entries = section(model:slots(), function(slot, entry)
    entry.start_ns = slot.start
    entry.highest, entry.last = slot.high, slot.last
    entry.events = slot.events
    return entry
  end)
  return { resolution_ns = model.resolution, duration_ns = model.duration,
    slots = place(slot_entries) }
end

local CUMULATIVE_FIELDS = { 'events', 'bytes', 'live_blocks', 'live_bytes',
  'self_events', 'self_bytes' }

local function cumulative_section(cumulative, place)
  if not cumulative then
    return NULL
  end
  local model = cumulative_model.new(cumulative)
  local cumulative_rows = section(function()
    return (model:rows({}))
  end, function(row, entry)
    entry.row, entry.name = row.group.id, row.group.name
    for _, field in ipairs(CUMULATIVE_FIELDS) do
      entry[field] = row[field]
    end
    return entry
  end)
  return { mode = model.mode, rows = place(cumulative_rows) }
end

local function warnings_of(stream)
  local list = {}
  if stream.warning then
    list[1] = stream.warning
  end
  return M.array(list)
end

-- The stream's stacks, then those the reader made for compiled code.
local function all_stacks(stream)
  local list = {}
  for _, stacks in ipairs({ stream.stacks, stream.inferred_stacks }) do
    for _, stack in ipairs(stacks) do
      list[#list + 1] = stack
    end
  end
  return list
end

local function aliases_of(stream)
  local aliases = {}
  for i, alias in ipairs(stream.aliases) do
    aliases[i] = { name = alias.name, chunkname = alias.chunkname }
  end
  return M.array(aliases)
end

-- The document, with place(section) for each long array (see above).
-- What --focus and --ignore kept (memprof.analysis.focus), or nil.
local function filter_of(opts)
  if not (opts and (opts.focus or opts.ignore)) then
    return nil
  end
  return { focus = or_null(opts.focus), ignore = or_null(opts.ignore) }
end

local function build(result, place, opts)
  local stream = result.stream
  local model = sections_model.new(result)
  local compiled = stream.compiled
  local sites = section(stream.sites, function(site, entry)
    return site_entry(compiled, site, entry)
  end)
  local stack_site_ids, row_site_ids = site_ids_of(place),
    site_ids_of(place)
  local stacks = section(function()
    return all_stacks(stream)
  end, function(stack, entry)
    return stack_entry(stream, stack, entry, stack_site_ids)
  end)
  local described = section(result.grouper.list, function(group, entry)
    return row_entry(group, entry, row_site_ids)
  end)
  return {
    memprof_json = M.SCHEMA_VERSION,
    stream = stream_section(stream),
    warnings = warnings_of(stream),
    grouping = result.grouper.mode,
    filter = filter_of(opts),
    sites = place(sites),
    stacks = place(stacks),
    aliases = aliases_of(stream),
    rows = place(described),
    allocations = place(event_section(model, 'alloc', place)),
    reallocations = place(event_section(model, 'realloc', place)),
    deallocations = place(event_section(model, 'free', place)),
    heap = place(heap_section(model)),
    totals = totals_section(result),
    live = live_section(result.leaks, stream, place),
    peak = peak_section(result.peak, stream, place),
    temporary = temporary_section(result.temporary, place),
    timeline = timeline_section(result.timeline, stream, place),
    cumulative = cumulative_section(result.cumulative, place),
    -- With --heap=SNAPSHOT: who holds what each place allocated.
    who_holds = result.holders and holders_json.who_holds(result.holders),
  }
end

local function entries_of(part)
  local list = {}
  local items, count = json_text.items(part)
  for i = 1, count do
    list[i] = part.entry_of(items and items[i] or i, {})
  end
  return M.array(list)
end

function M.document(result, opts)
  return build(result, entries_of, opts)
end

local function as_it_is(part)
  return part
end

-- The same text as M.encode(M.document(result)), each section's entries
-- made as they are written.
function M.write(result, out, opts)
  out = out or io.stdout
  local writer = json_text.writer(out)
  writer:value(build(result, as_it_is, opts))
  writer:part('\n')
  writer:finish()
end

return M
