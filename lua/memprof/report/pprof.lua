-- memprof.report.pprof: the profile in pprof's format (profile.proto,
-- gzip-compressed), for `go tool pprof` and the tools that read it.
--
--   pprof.write(result, out, opts)   -- result of memprof.analysis.analyze.run(),
--                                    -- grouped by 'stack' (or 'line' for
--                                    -- a stream without stacks)
--   pprof.encode(result) -> the profile.proto message (not compressed)
--
-- Sample types (in this order): alloc_space (bytes), alloc_objects
-- (count), inuse_space (bytes), inuse_objects (count); the default is
-- alloc_space.  A comment says whether inuse counts garbage (inuse_note).  One sample per stack: the bytes and events of the
-- allocations and reallocations made with that stack, and the bytes and
-- blocks of them still live at the end.  An event without a stack is a
-- one-frame sample.  Frees of blocks allocated before the profile are
-- left out (they would be negative).
--
-- Each place (a line of a Lua function, a C function, the place where
-- traces start, the VM) is a location with one line; its function is
-- the Lua function (named as in --group=function: 'function at
-- @log.lua:3', with the file name and first line), the C function, the
-- traces' start or INTERNAL.  Nothing is compressed: the gzip file
-- holds stored deflate blocks (memprof.encode.gzip).

local pb = require('memprof.encode.protobuf')
local sampling = require('memprof.analysis.sampling')
local gzip = require('memprof.encode.gzip')
local rows = require('memprof.analysis.rows')
local frames_of = require('memprof.analysis.groups').frames_of
local grouping = require('memprof.report.model.grouping')

local M = {}

M.SAMPLE_TYPES = {
  { 'alloc_space', 'bytes' }, { 'alloc_objects', 'count' },
  { 'inuse_space', 'bytes' }, { 'inuse_objects', 'count' },
}

-- Field numbers of profile.proto.
local PROFILE = { sample_type = 1, sample = 2, mapping = 3, location = 4,
  ['function'] = 5,
  string_table = 6, duration_nanos = 10, comment = 13,
  default_sample_type = 14 }
local VALUE_TYPE = { type = 1, unit = 2 }
local SAMPLE = { location_id = 1, value = 2 }
local MAPPING = { id = 1, filename = 5, has_functions = 7,
  has_filenames = 8, has_line_numbers = 9 }
local LOCATION = { id = 1, mapping_id = 2, line = 4 }
local LINE = { function_id = 1, line = 2 }
local FUNCTION = { id = 1, name = 2, system_name = 3, filename = 4,
  start_line = 5 }

-- The first line LuaJIT gives its built-ins written in Lua (~0 as 32
-- bits): they have none, and start at 0 as in memprof.snapshot's files.
local BUILTIN_FIRSTLINE = 2 ^ 32 - 1

local Builder = {}
Builder.__index = Builder

local function new_builder()
  return setmetatable({
    strings = { '' }, string_index = { [''] = 0 },
    functions = {}, function_id = {},
    locations = {}, location_id = {},
  }, Builder)
end

-- The index of a string in the string table (0 is '').
function Builder:string(s)
  local index = self.string_index[s]
  if not index then
    index = #self.strings
    self.strings[index + 1] = s
    self.string_index[s] = index
  end
  return index
end

-- The file name of a Lua function: its chunk name without the '@' of a
-- file, or the alias of a chunk name of several lines.
local function file_name(func)
  if func.alias then
    return func.alias
  end
  local chunkname = func.chunkname or ''
  return (chunkname:gsub('^@', ''))
end

function Builder:function_of(site)
  local func = site.func or site
  local id = self.function_id[func]
  if id then
    return id
  end
  id = #self.functions + 1
  self.function_id[func] = id
  local message = pb.message():varint(FUNCTION.id, id)
  local name = self:string(func.name)
  message:optional(FUNCTION.name, name)
  message:optional(FUNCTION.system_name, name)
  if func.source == 'lua' then
    message:optional(FUNCTION.filename, self:string(file_name(func)))
    local line = func.line or 0
    message:optional(FUNCTION.start_line,
      line >= BUILTIN_FIRSTLINE and 0 or line)
  end
  -- Kept encoded: a string, not a message's table of parts.
  self.functions[id] = message:encode()
  return id
end

-- (Locations are found by their site's id, which a site of the stream
-- keeps first: an array, where an index by the sites themselves is a
-- hash table three times its size.)
function Builder:location_of(site)
  local id = self.location_id[site[1]]
  if id then
    return id
  end
  id = #self.locations + 1
  self.location_id[site[1]] = id
  local line = pb.message():varint(LINE.function_id, self:function_of(site))
  if site.source == 'lua' then
    line:optional(LINE.line, site.line or 0)
  end
  self.locations[id] = pb.message():varint(LOCATION.id, id)
    :varint(LOCATION.mapping_id, 1):message(LOCATION.line, line):encode()
  return id
end

local function positive(n)
  return n > 0 and n or 0
end

function Builder:sample(group, figures)
  local id = group.id
  figures = figures.columns
  local values = { figures.allocated_bytes[id],
    figures.allocated_events[id], positive(figures.live_bytes[id]),
    positive(figures.live_blocks[id]) }
  if values[1] == 0 and values[2] == 0 and values[3] == 0 and
      values[4] == 0 then
    return nil
  end
  local ids = {}
  for i, frame in ipairs(frames_of(group)) do
    ids[i] = self:location_of(frame)
  end
  return pb.message():packed(SAMPLE.location_id, ids)
    :packed(SAMPLE.value, values)
end

-- Writes the profile's fields with emit(bytes), in order: the samples
-- as each row is made, the locations, functions and strings (which the
-- samples name) after them.
local function emit_profile(result, emit)
  local self = new_builder()
  local profile = pb.stream(emit)
  for _, sample_type in ipairs(M.SAMPLE_TYPES) do
    profile:message(PROFILE.sample_type, pb.message()
      :varint(VALUE_TYPE.type, self:string(sample_type[1]))
      :varint(VALUE_TYPE.unit, self:string(sample_type[2])))
  end
  local figures = rows.figures(result)
  for _, group in ipairs(figures.groups) do
    local sample = self:sample(group, figures)
    if sample then
      profile:message(PROFILE.sample, sample)
    end
  end
  -- One mapping, the program, whose functions, files and lines are all
  -- known: pprof then needs no binary to name anything.
  profile:message(PROFILE.mapping, pb.message():varint(MAPPING.id, 1)
    :varint(MAPPING.filename, self:string('lua'))
    :varint(MAPPING.has_functions, 1):varint(MAPPING.has_filenames, 1)
    :varint(MAPPING.has_line_numbers, 1))
  for _, location in ipairs(self.locations) do
    profile:bytes(PROFILE.location, location)
  end
  for _, func in ipairs(self.functions) do
    profile:bytes(PROFILE['function'], func)
  end
  local stream = result.stream
  if stream.has_time and stream.time then
    profile:optional(PROFILE.duration_nanos, stream.time)
  end
  local comments = { self:string('memprof profile ' .. stream.name) }
  if stream.sample_bytes then
    comments[#comments + 1] = self:string(sampling.note(stream.sample_bytes))
  end
  comments[#comments + 1] = self:string(M.inuse_note(stream))
  local default = self:string('alloc_space')
  -- The string table last: every string is known by now.
  for _, s in ipairs(self.strings) do
    profile:bytes(PROFILE.string_table, s)
  end
  profile:packed(PROFILE.comment, comments)
  profile:varint(PROFILE.default_sample_type, default)
end

-- What inuse_space and inuse_objects count: the blocks live at the end,
-- which are reachable only when the profile collected garbage at stop.
function M.inuse_note(stream)
  if stream.collected_at_stop then
    return 'inuse: the blocks live after the collection at stop ' ..
      '(all reachable)'
  end
  return 'inuse: the blocks live at the end, garbage not yet collected ' ..
    'included (the profile has no collection at stop)'
end

function M.encode(result)
  local parts = {}
  emit_profile(result, function(bytes)
    parts[#parts + 1] = bytes
  end)
  return table.concat(parts)
end

-- gzip data: memprof-report does not write it to a terminal.
M.BINARY = true

-- The analysis it needs (see memprof.cli.report): rows by stack when the
-- stream can have stacks; no overrides (not shown).
function M.analysis(_, stream, reader)
  local extended = stream.version == reader.EXTENDED_VERSION
  return { group = extended and 'stack' or 'line', cumulative = false,
    overrides = false }
end

-- What to say on stderr about the result.
function M.notes(result)
  return grouping.stack_notes(result, 'sample')
end

function M.write(result, out)
  out = out or io.stdout
  local file = gzip.writer(out)
  emit_profile(result, function(bytes)
    file:write(bytes)
  end)
  file:close()
end

return M
