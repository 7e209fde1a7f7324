-- memprof.report.json: every view of an analysis as one JSON document
-- (the schema is docs/json.md), encoded with lua-cjson.
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
-- Every string is made valid UTF-8 first (memprof.utf8: each byte that
-- is not part of a valid sequence becomes U+FFFD), as lua-cjson copies
-- bytes as they are.
--
-- lua-cjson writes numbers with 14 significant digits and an empty
-- table as {}; so before encoding, whole numbers of 15 digits or more
-- and empty arrays are replaced by marker strings, which are replaced
-- in the text by the exact digits and by [].

local rows = require('memprof.report.rows')
local utf8 = require('memprof.utf8')

local M = {}

M.SCHEMA_VERSION = 1

local format, floor = string.format, math.floor

local cjson_module

local function cjson()
  if not cjson_module then
    local ok, module = pcall(require, 'cjson')
    if not ok then
      error('the JSON formats need lua-cjson (the Debian package ' ..
        "lua-cjson): require('cjson') failed", 0)
    end
    cjson_module = module
  end
  return cjson_module
end

-- nil when lua-cjson can be loaded, else why not.
function M.check()
  local ok, err = pcall(cjson)
  if ok then
    return nil
  end
  return err
end

-- Encoding ---------------------------------------------------------------

local ARRAYS = setmetatable({}, { __mode = 'k' })
local NULL = {}
M.null = NULL

function M.array(list)
  ARRAYS[list] = true
  return list
end

local MARK = '\1memprof:'
local EMPTY_ARRAY = MARK .. '[]\1'
local LARGEST_EXACT = 1e14

local prepare

local function prepare_table(value)
  if value == NULL then
    return cjson().null
  end
  if ARRAYS[value] and #value == 0 then
    return EMPTY_ARRAY
  end
  local copy = {}
  for k, v in pairs(value) do
    copy[k] = prepare(v)
  end
  return copy
end

function prepare(value)
  local kind = type(value)
  if kind == 'table' then
    return prepare_table(value)
  elseif kind == 'string' then
    return utf8.clean(value)
  elseif kind == 'number' and value == floor(value) and
      (value >= LARGEST_EXACT or value <= -LARGEST_EXACT) and
      value - value == 0 then
    return MARK .. format('%.0f', value) .. '\1'
  end
  return value
end

function M.encode(value)
  local text = cjson().encode(prepare(value))
  -- cjson writes the marker's \1 as \u0001.
  return (text:gsub('"\\u0001memprof:([^"]-)\\u0001"', '%1'))
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

-- Entries sorted by `field`, largest first, then by name.
local function sorted(list, field)
  table.sort(list, function(a, b)
    if a[field] ~= b[field] then
      return a[field] > b[field]
    end
    return a.name < b.name
  end)
  return M.array(list)
end

local function overrides_of(entries)
  local list = {}
  for i, entry in ipairs(entries) do
    list[i] = { row = entry.group.id, name = entry.group.name,
      blocks = entry.blocks }
  end
  return sorted(list, 'blocks')
end

local function event_sections(list)
  local allocations, reallocations, deallocations, heap = {}, {}, {}, {}
  for _, row in ipairs(list) do
    local id, name = row.group.id, row.name
    if row.alloc_events > 0 then
      allocations[#allocations + 1] = { row = id, name = name,
        events = row.alloc_events, bytes = row.alloc_bytes }
    end
    if row.realloc_events > 0 then
      reallocations[#reallocations + 1] = { row = id, name = name,
        events = row.realloc_events, new_bytes = row.realloc_bytes,
        old_bytes = row.realloc_old_bytes,
        overrides = overrides_of(row.overrides.realloc) }
    end
    if row.free_events > 0 then
      deallocations[#deallocations + 1] = { row = id, name = name,
        events = row.free_events, bytes = row.freed_bytes,
        overrides = overrides_of(row.overrides.free) }
    end
    if row.allocated_events > 0 or row.released_blocks > 0 then
      heap[#heap + 1] = { row = id, name = name, live_bytes = row.live_bytes,
        live_blocks = row.live_blocks, allocs = row.allocated_events,
        reallocs = row.realloc_events, frees = row.released_blocks,
        freed_bytes = row.released_bytes }
    end
  end
  return sorted(allocations, 'bytes'), sorted(reallocations, 'new_bytes'),
    sorted(deallocations, 'bytes'), sorted(heap, 'live_bytes')
end

local function totals_section(list, result)
  local sums = rows.totals(list)
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

local function live_section(leaks, stream)
  if not leaks then
    return NULL
  end
  local list = {}
  for i, row in ipairs(leaks.rows) do
    local stacks = {}
    for j, record in ipairs(row.stacks) do
      stacks[j] = { stack = stack_id(stream, record.stack),
        blocks = record.count,
        bytes = record.bytes }
    end
    list[i] = { row = row.group.id, name = row.group.name, blocks = row.count,
      bytes = row.bytes, stacks = M.array(stacks) }
  end
  return { rows = M.array(list), blocks = leaks.count, bytes = leaks.bytes,
    freed_before_profiling = -leaks.before_profiling, net_bytes = leaks.total,
    collected_at_stop = leaks.collected_at_stop }
end

local function peak_section(peak)
  if not peak then
    return NULL
  end
  local list = {}
  for i, row in ipairs(peak.rows) do
    list[i] = { row = row.group.id, name = row.group.name, bytes = row.bytes,
      blocks = row.blocks }
  end
  local before = peak.before
  return { bytes = peak.bytes, event = peak.event,
    offset = or_null(peak.offset), time_ns = or_null(peak.time),
    next_time_ns = or_null(peak.time_next), rows = M.array(list),
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

local function temporary_section(temporary)
  if not temporary then
    return NULL
  end
  local list = {}
  for i, row in ipairs(temporary.rows) do
    list[i] = counts_of(row, { row = row.group.id, name = row.group.name })
  end
  return { limit = temporary.limit,
    rows = sorted(list, 'temporary_bytes'),
    totals = counts_of(temporary.totals, {}) }
end

local function timeline_section(result, stream)
  if not result or not stream.has_time then
    return NULL
  end
  local slots = {}
  for slot in pairs(result.events) do
    slots[#slots + 1] = slot
  end
  table.sort(slots)
  local list = {}
  for i, slot in ipairs(slots) do
    list[i] = { start_ns = (slot - 1) * result.resolution,
      highest = result.high[slot], last = result.last[slot],
      events = result.events[slot] }
  end
  return { resolution_ns = result.resolution, duration_ns = result.duration,
    slots = M.array(list) }
end

local CUMULATIVE_FIELDS = { 'events', 'bytes', 'live_blocks', 'live_bytes',
  'self_events', 'self_bytes' }

local function cumulative_section(cumulative)
  if not cumulative then
    return NULL
  end
  local list = {}
  for i, row in ipairs(cumulative.rows) do
    local entry = { row = row.group.id, name = row.group.name }
    for _, field in ipairs(CUMULATIVE_FIELDS) do
      entry[field] = row[field]
    end
    list[i] = entry
  end
  return { mode = cumulative.mode, rows = sorted(list, 'bytes') }
end

local function warnings_of(stream)
  local list = {}
  if stream.warning then
    list[1] = stream.warning
  end
  return M.array(list)
end

function M.document(result)
  local stream = result.stream
  local list = rows.collect(result)
  local sites, stacks, aliases, described = {}, {}, {}, {}
  for i, site in ipairs(stream.sites) do
    sites[i] = site_entry(site)
  end
  for _, list in ipairs({ stream.stacks, stream.inferred_stacks }) do
    for _, stack in ipairs(list) do
      stacks[#stacks + 1] = stack_entry(stream, stack)
    end
  end
  for i, alias in ipairs(stream.aliases) do
    aliases[i] = { name = alias.name, chunkname = alias.chunkname }
  end
  for i, group in ipairs(result.grouper.list) do
    described[i] = row_entry(group)
  end
  local allocations, reallocations, deallocations, heap = event_sections(list)
  return {
    memprof_json = M.SCHEMA_VERSION,
    stream = stream_section(stream),
    warnings = warnings_of(stream),
    grouping = result.grouper.mode,
    sites = M.array(sites),
    stacks = M.array(stacks),
    aliases = M.array(aliases),
    rows = M.array(described),
    allocations = allocations,
    reallocations = reallocations,
    deallocations = deallocations,
    heap = heap,
    totals = totals_section(list, result),
    live = live_section(result.leaks, stream),
    peak = peak_section(result.peak),
    temporary = temporary_section(result.temporary),
    timeline = timeline_section(result.timeline, stream),
    cumulative = cumulative_section(result.cumulative),
  }
end

function M.write(result, out)
  out = out or io.stdout
  out:write(M.encode(M.document(result)), '\n')
end

return M
