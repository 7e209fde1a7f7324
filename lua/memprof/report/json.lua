-- memprof.report.json: every view of an analysis as one JSON document
-- (the schema is docs/json.md), written by memprof.json_text.
--
--   json.write(result, out, opts)     -- result of memprof.analyze.run
--   json.document(result) -> the document as Lua tables
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
-- whole number is written exactly, however large (memprof.json_text).

local rows = require('memprof.report.rows')
local json_text = require('memprof.json_text')
local leaks_module = require('memprof.leaks')

local M = {}

M.SCHEMA_VERSION = 1

local format = string.format

local NULL = json_text.null
M.null = NULL
M.array = json_text.array

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

local function site_entry(site)
  local func = site.func
  return {
    id = site.id,
    name = site.name,
    source = site.source,
    chunkname = or_null(site.chunkname),
    line = or_null(site.line),
    traceno = or_null(site.traceno),
    traces = or_null(site.traces),
    address = site.source ~= 'trace' and hex(site.addr) or NULL,
    ['function'] = func and func.name or NULL,
    alias = or_null(site.alias),
  }
end

local function site_ids(frames)
  local ids = {}
  for i, frame in ipairs(frames) do
    ids[i] = frame.id
  end
  return M.array(ids)
end

-- The id of a stack: its id in the stream, or for a stack the reader
-- made for events in compiled code, a number after the stream's.
local function stack_id(stream, stack)
  if stack.inferred then
    return #stream.stacks + stack.index
  end
  return stack.id
end

local function stack_entry(stream, stack)
  return { id = stack_id(stream, stack), frames = site_ids(stack.frames),
    inferred = stack.inferred == true }
end

local function row_entry(group)
  local site = group.site
  local entry = { id = group.id, name = group.name, source = group.source,
    note = or_null(group.note), site = NULL, ['function'] = NULL,
    frames = NULL }
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
  }
end

-- Sections ---------------------------------------------------------------
--
-- The long arrays of the document (an entry per site, stack, row or
-- slot) are sections: a list of items and the function that makes the
-- entry of an item (a json_text.list).  document() makes every entry;
-- write() leaves them to the writer, which makes and writes them one by
-- one, so that the whole document is never held at once.

local section = json_text.list

-- Items sorted by `field` (a field of the items, or a function of an
-- item), largest first, then by name; the entries of a sorted section
-- have these values, so their order is that of the items.
local function sort_items(items, field, name_of)
  local value = field
  if type(field) ~= 'function' then
    value = function(item) return item[field] end
  end
  table.sort(items, function(a, b)
    local va, vb = value(a), value(b)
    if va ~= vb then
      return va > vb
    end
    return name_of(a) < name_of(b)
  end)
  return items
end

local function name_of_group(row)
  return row.group.name
end

local function name_of(group)
  return group.name
end

-- The overrides of a row (rows.figures), the most blocks first.
local function overrides_of(overrides)
  if not overrides then
    return M.array({})
  end
  local groups, blocks, order = overrides.groups, overrides.blocks, {}
  for i = 1, #groups do
    order[i] = i
  end
  table.sort(order, function(a, b)
    if blocks[a] ~= blocks[b] then
      return blocks[a] > blocks[b]
    end
    return groups[a].name < groups[b].name
  end)
  local list = {}
  for i, at in ipairs(order) do
    list[i] = { row = groups[at].id, name = groups[at].name,
      blocks = blocks[at] }
  end
  return M.array(list)
end

-- The sections of rows (rows.figures): the rows kept (a figure of
-- `kept` above 0), the figure they are sorted by, each entry's figures
-- ({ key in the entry, column }) and the kind of its overrides.
local ROW_SECTIONS = {
  allocations = { kept = { 'alloc_events' }, by = 'alloc_bytes',
    fields = { { 'events', 'alloc_events' }, { 'bytes', 'alloc_bytes' } } },
  reallocations = { kept = { 'realloc_events' }, by = 'realloc_bytes',
    fields = { { 'events', 'realloc_events' },
      { 'new_bytes', 'realloc_bytes' }, { 'old_bytes', 'realloc_old_bytes' } },
    overrides = 'realloc' },
  deallocations = { kept = { 'free_events' }, by = 'freed_bytes',
    fields = { { 'events', 'free_events' }, { 'bytes', 'freed_bytes' } },
    overrides = 'free' },
  heap = { kept = { 'allocated_events', 'released_blocks' },
    by = 'live_bytes',
    fields = { { 'live_bytes', 'live_bytes' }, { 'live_blocks', 'live_blocks' },
      { 'allocs', 'allocated_events' }, { 'reallocs', 'realloc_events' },
      { 'frees', 'released_blocks' }, { 'freed_bytes', 'released_bytes' } } },
}

local function kept(figures, columns, id)
  for _, column in ipairs(columns) do
    if figures[column][id] > 0 then
      return true
    end
  end
  return false
end

local function row_section(figures, name)
  local spec = ROW_SECTIONS[name]
  local items = {}
  for _, group in ipairs(figures.list) do
    if kept(figures, spec.kept, group.id) then
      items[#items + 1] = group
    end
  end
  local values = figures[spec.by]
  sort_items(items, function(group) return values[group.id] end, name_of)
  local overrides = spec.overrides and figures.overrides[spec.overrides]
  return section(items, function(group)
    local id = group.id
    local entry = { row = id, name = group.name }
    for _, field in ipairs(spec.fields) do
      entry[field[1]] = figures[field[2]][id]
    end
    if overrides then
      entry.overrides = overrides_of(overrides[id])
    end
    return entry
  end)
end

local function totals_section(figures, result)
  local sums = rows.totals(figures)
  return {
    events = result.stream.events,
    alloc_events = sums.alloc_events,
    realloc_events = sums.realloc_events,
    free_events = sums.free_events,
    allocated_bytes = sums.allocated_bytes,
    freed_bytes = sums.freed_bytes + sums.realloc_old_bytes,
    net_bytes = result.heap.total,
  }
end

-- place(section) is what stands for a section in the document: its
-- entries (document()) or a marker (write()).
local function live_section(leaks, stream, place)
  if not leaks then
    return NULL
  end
  local counts, bytes = leaks.columns.count, leaks.columns.bytes
  local live_rows = section(leaks.groups, function(group)
    local stacks = {}
    leaks_module.each_stack(leaks, group, function(stack, count, size)
      stacks[#stacks + 1] = { stack = stack_id(stream, stack),
        blocks = count, bytes = size }
    end)
    local id = group.id
    return { row = id, name = group.name, blocks = counts[id],
      bytes = bytes[id], stacks = M.array(stacks) }
  end)
  return { rows = place(live_rows), blocks = leaks.count, bytes = leaks.bytes,
    freed_before_profiling = -leaks.before_profiling, net_bytes = leaks.total,
    collected_at_stop = leaks.collected_at_stop }
end

local function peak_section(peak, place)
  if not peak then
    return NULL
  end
  local bytes, blocks = peak.columns.bytes, peak.columns.blocks
  local peak_rows = section(peak.groups, function(group)
    local id = group.id
    return { row = id, name = group.name, bytes = bytes[id],
      blocks = blocks[id] }
  end)
  local before = peak.before
  return { bytes = peak.bytes, event = peak.event,
    offset = or_null(peak.offset), time_ns = or_null(peak.time),
    next_time_ns = or_null(peak.time_next), rows = place(peak_rows),
    heap_at_start = or_null(peak.heap_at_start),
    heap_bytes = or_null(peak.heap_bytes),
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
  local items = {}
  for i, group in ipairs(temporary.groups) do
    items[i] = group
  end
  local figures = temporary.columns
  local by = figures.temporary_bytes
  sort_items(items, function(group) return by[group.id] end, name_of)
  local temporary_rows = section(items, function(group)
    local id = group.id
    local entry = { row = id, name = group.name }
    for _, field in ipairs(TEMPORARY_FIELDS) do
      entry[field] = figures[field][id]
    end
    return entry
  end)
  return { limit = temporary.limit,
    rows = place(temporary_rows),
    totals = counts_of(temporary.totals, {}) }
end

local function timeline_section(result, stream, place)
  if not result or not stream.has_time then
    return NULL
  end
  local slots = {}
  for slot in pairs(result.events) do
    slots[#slots + 1] = slot
  end
  table.sort(slots)
  local slot_entries = section(slots, function(slot)
    return { start_ns = (slot - 1) * result.resolution,
      highest = result.high[slot], last = result.last[slot],
      events = result.events[slot] }
  end)
  return { resolution_ns = result.resolution, duration_ns = result.duration,
    slots = place(slot_entries) }
end

local CUMULATIVE_FIELDS = { 'events', 'bytes', 'live_blocks', 'live_bytes',
  'self_events', 'self_bytes' }

local function cumulative_section(cumulative, place)
  if not cumulative then
    return NULL
  end
  local items = {}
  for i, row in ipairs(cumulative.rows) do
    items[i] = row
  end
  sort_items(items, 'bytes', name_of_group)
  local cumulative_rows = section(items, function(row)
    local entry = { row = row.group.id, name = row.group.name }
    for _, field in ipairs(CUMULATIVE_FIELDS) do
      entry[field] = row[field]
    end
    return entry
  end)
  return { mode = cumulative.mode, rows = place(cumulative_rows) }
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
local function build(result, place)
  local stream = result.stream
  local figures = rows.figures(result, { all = true, overrides = true })
  local sites = section(stream.sites, site_entry)
  local stacks = section(all_stacks(stream), function(stack)
    return stack_entry(stream, stack)
  end)
  local described = section(result.grouper.list, row_entry)
  return {
    memprof_json = M.SCHEMA_VERSION,
    stream = stream_section(stream),
    warnings = warnings_of(stream),
    grouping = result.grouper.mode,
    sites = place(sites),
    stacks = place(stacks),
    aliases = aliases_of(stream),
    rows = place(described),
    allocations = place(row_section(figures, 'allocations')),
    reallocations = place(row_section(figures, 'reallocations')),
    deallocations = place(row_section(figures, 'deallocations')),
    heap = place(row_section(figures, 'heap')),
    totals = totals_section(figures, result),
    live = live_section(result.leaks, stream, place),
    peak = peak_section(result.peak, place),
    temporary = temporary_section(result.temporary, place),
    timeline = timeline_section(result.timeline, stream, place),
    cumulative = cumulative_section(result.cumulative, place),
  }
end

local function entries_of(part)
  local list = {}
  for i, item in ipairs(part.items) do
    list[i] = part.entry_of(item)
  end
  return M.array(list)
end

function M.document(result)
  return build(result, entries_of)
end

local function as_it_is(part)
  return part
end

-- The same text as M.encode(M.document(result)), each section's entries
-- made as they are written.
function M.write(result, out)
  out = out or io.stdout
  local writer = json_text.writer(out)
  writer:value(build(result, as_it_is))
  writer:part('\n')
  writer:finish()
end

return M
