-- memprof.read.stream_records: the methods every stream of
-- memprof.read.stream has besides its decoder of allocation events: the
-- headers and the symbol table, the records of kind 0 (symbols, stacks,
-- time marks, notes) consumed as they come, the ends of the stream
-- (epilogue, cut, close), and the diagnosis of an event the fast decoder
-- could not decode.  Returns them as one table, which the decoder's
-- methods fall back on.

local buffer = require('memprof.read.buffer')
local names = require('memprof.read.names')
local errors = require('memprof.read.errors')
local words = require('memprof.words')
local trace_stacks = require('memprof.read.trace_stacks')
local record = require('memprof.record')
local F = require('memprof.read.stream_format')

local format = string.format
local floor = math.floor

-- Common methods of every stream -------------------------------------

-- The buffer and the cursor, the names of places and the messages of a
-- bad stream are methods of every stream, with these.
local common = {}
for _, part in ipairs({ buffer, names, errors }) do
  for name, method in pairs(part.methods) do
    common[name] = method
  end
end

local plural, list_with_or = words.plural, words.either
local quote_bytes, TRUNCATED = errors.quote_bytes, errors.TRUNCATED

function common:read_byte(what)
  self:need(1, what, self:offset_of(self.cursor.pos))
  local value = self:byte_at(self.cursor.pos)
  self.cursor.pos = self.cursor.pos + 1
  return value
end

-- Checked ULEB128 decoder for the slow paths (headers and symbols).
function common:read_uleb(what)
  local start = self:offset_of(self.cursor.pos)
  local value, scale = 0, 1
  while true do
    self:need(1, what, start)
    local c = self:byte_at(self.cursor.pos)
    self.cursor.pos = self.cursor.pos + 1
    if c < 128 then
      if scale == F.MAX_SCALE and c > 1 then
        self:fail(start, 'expected ' .. what ..
          ', found a number above 2^64 - 1')
      end
      return value + c * scale
    end
    value = value + (c - 128) * scale
    scale = scale * 128
    if scale > F.MAX_SCALE then
      self:fail(start, 'expected ' .. what ..
        ', found a number longer than 10 bytes')
    end
  end
end

function common:read_string(what)
  local length = self:read_uleb('the length of ' .. what)
  self:need(length, what, self:offset_of(self.cursor.pos))
  local value = self:bytes(self.cursor.pos, self.cursor.pos + length - 1)
  self.cursor.pos = self.cursor.pos + length
  return value
end

function common:expect_magic(magic, what)
  local start = self:offset_of(self.cursor.pos)
  self:fill(#magic)
  local found = self:bytes(self.cursor.pos, self.cursor.pos + #magic - 1)
  if found == magic then
    self.cursor.pos = self.cursor.pos + #magic
    return
  end
  if self.follow and #found < #magic and magic:sub(1, #found) == found then
    -- (A file being written: the rest comes later.)
    error(TRUNCATED, 0)
  end
  local shown
  if found == '' then
    shown = 'the end of the file'
  elseif #found < #magic then
    shown = quote_bytes(found) .. ' and then the end of the file'
  else
    shown = quote_bytes(found)
  end
  self:fail(start, format("expected %s '%s', found %s", what, magic, shown))
end

function common:expect_version(what, versions)
  local start = self:offset_of(self.cursor.pos)
  local version = self:read_byte(what .. ' version')
  for _, supported in ipairs(versions) do
    if version == supported then
      return version
    end
  end
  self:fail(start, format('expected %s version %s, found %d', what,
    list_with_or(versions), version))
end

function common:skip_reserved(what)
  self:need(3, 'the reserved bytes of ' .. what,
    self:offset_of(self.cursor.pos))
  self.cursor.pos = self.cursor.pos + 3
end

-- Symbols -------------------------------------------------------------

-- What a symbol's body holds, by its source: the reader and the name of
-- each of its fields, in order, then the method that defines the symbol
-- from them.  The symbol table and the symbol records of the event
-- stream both read bodies this way.
local SYMBOL_BODIES = {
  [F.SOURCE_LUA] = { define = 'define_lfunc',
    { 'read_uleb', 'the address of a Lua function' },
    { 'read_string', 'a chunk name' },
    { 'read_uleb', 'the first line of a Lua function' } },
  [F.SOURCE_C] = { define = 'define_cfunc',
    { 'read_uleb', 'the address of a C function' },
    { 'read_string', 'the name of a C function' } },
  [F.SOURCE_TRACE] = { define = 'define_trace',
    { 'read_uleb', 'a trace number' },
    { 'read_uleb', 'the address of the Lua function of a trace' },
    { 'read_uleb', 'the start line of a trace' } },
}

-- The sources of the symbol table's kinds (its header's low two bits).
local TABLE_KIND_SOURCES = { [0] = F.SOURCE_LUA, F.SOURCE_C, F.SOURCE_TRACE }

local function read_field(self, field)
  if field then
    return self[field[1]](self, field[2])
  end
  return nil
end

function common:read_symbol_body(source)
  local body = SYMBOL_BODIES[source]
  local a = read_field(self, body[1])
  local b = read_field(self, body[2])
  local c = read_field(self, body[3])
  self[body.define](self, a, b, c)
end

function common:read_symbol_table()
  while true do
    local start = self:offset_of(self.cursor.pos)
    local header = self:read_byte('a symbol header (or 0x80 to end the table)')
    if header >= 0x80 then
      return
    end
    local source = TABLE_KIND_SOURCES[header % 4]
    if not source then
      self:fail(start, format('expected a symbol header (type 0, 1 or 2, ' ..
        'or 0x80 to end the table), found %s', format('0x%02x', header)))
    end
    self:read_symbol_body(source)
  end
end

-- The sampling record (right after the event stream header of a sampled
-- profile): the scheme, then the mean bytes between samples.
function common:read_sampling()
  self.cursor.pos = self.cursor.pos + 1
  local scheme_at = self:offset_of(self.cursor.pos)
  local scheme = self:read_byte('the sampling scheme')
  if scheme ~= F.SAMPLING_POISSON_BYTES then
    self:fail(scheme_at, format('expected sampling scheme %d (a Poisson ' ..
      'process over allocated bytes), found %d', F.SAMPLING_POISSON_BYTES,
      scheme))
  end
  local mean_at = self:offset_of(self.cursor.pos)
  local mean = self:read_uleb('the mean bytes between samples')
  if mean < 1 then
    self:fail(mean_at, 'expected the mean bytes between samples ' ..
      '(1 or more), found 0')
  end
  self.sample_bytes = mean
end

function common:read_headers()
  self:fill(1)
  if self.cursor.last == 0 then
    if self.follow then
      -- (A profile being written: its headers come with its first write.)
      error(TRUNCATED, 0)
    end
    -- What a process leaves when it ends before its first write.
    self.in_events = true
    self:stop(format('%s: the file is empty: the process wrote no profile ' ..
      '(it ended, or was killed, before its first write); no events',
      self.name))
    return
  end
  self:expect_magic('ljs', 'the symbol table magic')
  self.symtab_version = self:expect_version('symbol table', F.SYMTAB_VERSIONS)
  self:skip_reserved('the symbol table header')
  self:read_symbol_table()
  self:expect_magic('ljm', 'the event stream magic')
  self.version = self:expect_version('event stream', F.SUPPORTED_VERSIONS)
  self.cursor.version = self.version
  if self.version == F.EXTENDED_VERSION then
    self.header_kind = F.HEADER_KIND_EXTENDED
  end
  self:skip_reserved('the event stream header')
  if self.version == F.EXTENDED_VERSION then
    self:fill(1)
    local cursor = self.cursor
    if self.follow and cursor.pos > cursor.last then
      -- A sampling record or the note of the heap at start follows: the
      -- headers are not whole yet.
      error(TRUNCATED, 0)
    end
    if cursor.pos <= cursor.last and
        self:byte_at(cursor.pos) == F.SAMPLING_RECORD then
      self:read_sampling()
    end
  end
  self.in_events = true
  self.bytes_read = self:offset_of(self.cursor.pos)
  self:read_heap_at_start()
end

-- The notes of the heap at start and of compiled code, when the extended
-- stream begins with them: read now, so that both are known before the
-- first event.
function common:read_heap_at_start()
  if self.version ~= F.EXTENDED_VERSION then
    return
  end
  for i = 1, 2 do
    self:fill(2)
    local cursor = self.cursor
    if cursor.pos > cursor.last or self:byte_at(cursor.pos) ~= 0x1c or
        (i == 2 and (cursor.pos + 1 > cursor.last or
          self:byte_at(cursor.pos + 1) ~= F.NOTE_COMPILED_CODE)) then
      return
    end
    self:record(0x1c, cursor.pos)
  end
end

-- Site lookups (the slow halves; the fast path checks the caches) -----

-- The stack of an event in a trace (see memprof.read.trace_stacks).  A local
-- function, not a method: the fast path calls it for every event in a
-- trace of a stream with stacks, and a method is found through two
-- metatables (the decoder's methods, then these).
local stack_for = trace_stacks.stack_for

local function trace_stack(self, traceno)
  local sym = self.traces[traceno]
  if not sym.func then
    return nil
  end
  -- (stacks[0], before any event with a stack, is nil.)
  return stack_for(self.inferred, sym, self.stacks[self.cursor.context])
end
common.trace_stack = trace_stack

-- Ends of the event stream ---------------------------------------------

-- The indexes only events need, by which the reader finds the sites and
-- stacks of an event: forgotten once the stream is done, so that the
-- reports reuse their memory.  The sites, stacks, aliases and inferred stacks stay.
local READING_INDEXES = { 'lfuncs', 'cfuncs', 'traces', 'c_sorted', 'c_sites',
  'trace_sites', 'unknown_c', 'alias_of', 'internal_kind_sites',
  'trace_starts', 'inferred' }

-- The end of reading: at the epilogue, at a cut, or closed.
function common:finish_reading()
  self.done = true
  self:count_read()
  -- Nothing left to read: next() then takes its slow path, where it
  -- checks `done` (the fast path does not).
  self.cursor.pos = self.cursor.last + 1
  self:release()
  for _, field in ipairs(READING_INDEXES) do
    self[field] = nil
  end
end

function common:stop(warning)
  self:finish_reading()
  self.warning = warning
  self.bytes_read = self:file_size_so_far()
  return nil
end

function common:stop_at_epilogue(pos)
  local at = self:offset_of(pos)
  self.cursor.pos = pos + 1
  self:fill(1)
  local extra = 0
  while self.cursor.last >= self.cursor.pos do
    extra = extra + self.cursor.last - self.cursor.pos + 1
    self.cursor.pos = self.cursor.last + 1
    self:fill(1)
  end
  if extra == 0 then
    self:finish_reading()
    self.bytes_read = at + 1
    return nil
  end
  return self:stop(format('%s: the stream has %s after its epilogue at ' ..
    'byte %d; they were ignored', self.name, plural(extra, 'byte'), at))
end

-- Why an invalid header of the extended format is invalid, if there is
-- more to say than that it is.
local function extended_header_note(header)
  if header == F.SAMPLING_RECORD then
    return ', a sampling record, which is valid only right after the ' ..
      'event stream header, before the note of the heap at start'
  elseif header % 0x80 >= 0x40 then
    return ', a reserved header (bit 6 set, valid only on a Lua-line ' ..
      'event) that this reader cannot skip'
  end
  local kind, source = header % 4, (header % F.STACK_BIT - header % 4) / 4
  if header >= F.STACK_BIT and header < 0x80 and kind ~= F.KIND_SYMBOL and
      source == F.SOURCE_TRACE then
    return ': trace events carry no stack'
  end
  return ''
end

-- A header that is not an allocation event: a record of kind 0 (read it,
-- then go on to the next event), the epilogue, or an error.
function common:other_header(header, pos)
  if self.header_kind[header] == F.KIND_SYMBOL then
    if self:record(header, pos) then
      return self:next()
    end
    return nil
  end
  if header == F.EPILOGUE then
    return self:stop_at_epilogue(pos)
  end
  local note = ''
  if self.version == F.EXTENDED_VERSION then
    note = extended_header_note(header)
  end
  if header <= 0x03 then
    self:fail(self:offset_of(pos), format('expected an event header with ' ..
      'a source (%s), found 0x%02x%s', F.VALID_WITH_SOURCE[self.version],
      header, note))
  end
  self:fail(self:offset_of(pos), format('expected an event header ' ..
    '(%s), found 0x%02x%s', F.VALID_HEADERS[self.version], header, note))
end

-- One frame of a stack definition: the interned site it names.
function common:read_frame()
  local start = self:offset_of(self.cursor.pos)
  local kind = self:read_byte('the kind of a stack frame')
  if kind == F.FRAME_LUA then
    local addr = self:read_uleb('the address of the Lua function of a frame')
    local line = self:read_uleb('the line of a frame')
    local sym = self.lfuncs[addr]
    return sym and sym.sites[line] or self:lua_site(addr, line)
  elseif kind == F.FRAME_C then
    local addr = self:read_uleb('the address of the C function of a frame')
    return self.c_sites[addr] or self:c_site(addr)
  end
  self:fail(start, format('expected a stack frame (0x08 for a Lua ' ..
    'function or 0x0c for a C function), found 0x%02x', kind))
end

-- A stack keeps its frames in its array part and its id at index 0,
-- with no hash part: its `id` and `frames` (the stack itself) are read
-- through this metatable (no hash part: a large profile has hundreds
-- of thousands of stacks).  (A vararg __index, as in memprof.record: LuaJIT never starts
-- a trace there.)
-- luacheck: push no unused args
local STACK_META = { __index = function(stack, field, ...)
  if field == 'frames' then
    return stack
  elseif field == 'id' then
    return rawget(stack, 0)
  end
  return nil
end }
-- luacheck: pop

-- A stack definition (0x14): id, number of frames, frames.  The stack is
-- added only once it is complete.
function common:read_stack_body()
  local stacks = self.stacks
  local id_at = self:offset_of(self.cursor.pos)
  local id = self:read_uleb('a stack id')
  if id ~= #stacks + 1 then
    self:fail(id_at, format('expected stack id %d (stack ids are dense ' ..
      'from 1 and each is defined once), found %d', #stacks + 1, id))
  end
  local count_at = self:offset_of(self.cursor.pos)
  local count = self:read_uleb('the number of frames of a stack')
  if count < 1 or count > F.MAX_FRAMES then
    self:fail(count_at, format('expected the number of frames of a stack ' ..
      '(1 to %d), found %d', F.MAX_FRAMES, count))
  end
  local stack = record.array(count)
  for i = 1, count do
    stack[i] = self:read_frame()
  end
  stack[0] = id
  setmetatable(stack, STACK_META)
  stacks[id] = stack
  self.has_stacks = true
  self.inferred:defined(stack)
end

-- The event table is reused, so its time is set here, once per mark.
function common:read_time_body()
  self.time = self:read_uleb('the time of a time mark')
  self.event.time = self.time
  self.has_time = true
end

-- A note (0x1c): its kind, then a number.  The heap at start comes
-- first, right after the headers; the collection at stop once, last.
-- The note of how compiled code was attributed: once, before any event.
function common:read_compiled_note(pos)
  local value_at = self:offset_of(self.cursor.pos)
  local value = self:read_uleb('the attribution of compiled code of a note')
  if self.compiled_code or self.cursor.events > 0 or self.has_time or
      self.has_stacks then
    self:fail(self:offset_of(pos), 'expected the note of compiled code ' ..
      'only once, before any event')
  end
  local mode = F.COMPILED_MODES[value % 4]
  local why = F.COMPILED_WHYS[floor(value / 4)]
  if not mode or not why then
    self:fail(value_at, format('expected the attribution of compiled ' ..
      'code (a mode 0 to 3 plus 4 times a reason 0 to 4), found %d', value))
  end
  self.compiled_code = { mode = mode, why = why }
end

function common:read_note_body(pos)
  local kind_at = self:offset_of(self.cursor.pos)
  local kind = self:read_uleb('the kind of a note')
  if kind == F.NOTE_HEAP_AT_START then
    local heap = self:read_uleb('the heap at start of a note')
    if self.heap_at_start or self.cursor.events > 0 or self.has_time or
        self.has_stacks then
      self:fail(self:offset_of(pos), 'expected the note of the heap at ' ..
        'start only once, first after the event stream header')
    end
    self.heap_at_start = heap
  elseif kind == F.NOTE_COLLECTED_AT_STOP then
    local heap = self:read_uleb('the heap after the collection of a note')
    if self.collected_at_stop then
      self:fail(self:offset_of(pos), 'expected the note of the ' ..
        'collection at stop only once')
    end
    self.collected_at_stop = true
    self.heap_after_collection = heap
  elseif kind == F.NOTE_COMPILED_CODE then
    self:read_compiled_note(pos)
  else
    self:fail(kind_at, format('expected the kind of a note (1 for the ' ..
      'heap at start, 2 for the collection at stop, 3 for compiled ' ..
      'code), found %d', kind))
  end
end

function common:read_record_body(header, pos)
  local source = F.HEADER_SOURCE[header]
  self.cursor.pos = pos + 1
  if SYMBOL_BODIES[source] then
    self:read_symbol_body(source)
  elseif source == F.SOURCE_STACK then
    self:read_stack_body()
  elseif source == F.SOURCE_TIME then
    self:read_time_body()
  elseif source == F.SOURCE_NOTE then
    self:read_note_body(pos)
  else
    self:fail(self:offset_of(pos), format('expected %s, found 0x%02x',
      F.VALID_RECORDS[self.version], header))
  end
end

-- A record of kind 0 (a symbol event, a stack definition, a time mark):
-- update the stream's state.  Returns false when the file ends inside it
-- (the stream is then stopped with a warning).
function common:record(header, pos)
  if self.follow then
    self.mark = self:offset_of(pos)
  end
  local ok, err = pcall(self.read_record_body, self, header, pos)
  if ok then
    self.mark = false
    self:count_read()
    return true
  end
  if err ~= TRUNCATED then
    error(err, 0)
  end
  self:stop_in_event(self.truncated_what)
  return false
end

-- A stream that follows a growing file (opts.follow), at the end of
-- the bytes written so far: the record cut there (if any) is read again
-- from its start by the next call once resume() has been called; next()
-- returns nil until then, and stream.waiting is true.
function common:pause()
  local cursor = self.cursor
  if self.mark then
    cursor.pos = self.mark - cursor.base + 1
    self.mark = false
  end
  self.waiting = true
  self:count_read()
  return nil
end

-- The file may have grown: the next call reads on from where the last
-- whole record ended.
function common:resume()
  if not self.done then
    self.waiting, self.eof = false, false
  end
end

-- Stop reading and release the file (done automatically at its end).
function common:close()
  self.close_source()
  self:finish_reading()
end

-- Iterate over the events: for ev in stream:each() do ... end
function common:each()
  return function()
    return self:next()
  end
end

return common
