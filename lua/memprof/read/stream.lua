-- memprof.read.stream: a streaming reader for memprof files.
--
-- The file is read in large chunks and never loaded whole (under LuaJIT
-- into one buffer of C memory, reused for every chunk).  Symbol
-- records (from the initial symbol table and from symbol events), stack
-- definitions and time marks are consumed internally and update the
-- stream's state; only allocation events are handed out:
--
--   local reader = require('memprof.read.stream')
--   local stream = reader.open('out.bin')  -- raises 'out.bin: <strerror>'
--   for ev in stream:each() do ... end      -- or: local ev = stream:next()
--   if stream.warning then ... end
--
--   reader.open(path [, opts])              -- opts.chunk_size,
--                                           -- opts.on_read(bytes read
--                                           -- so far), after each chunk,
--                                           -- opts.split_traces (below)
--   reader.from_string(bytes [, name [, opts]])
--   reader.from_source(name, read_into, close [, opts])  -- any source;
--                                           -- opts.follow: a file being
--                                           -- written (memprof.read.follow)
--   stream:next()   -> the next allocation event, or nil at the end
--   stream:next_values() -> the same event as values: kind, site, oaddr,
--                      osize, naddr, nsize, stack, offset, trace (the
--                      fields below), or nil at the end (for a loop that
--                      needs no table, as memprof.analysis.analyze's: a
--                      stream is read with one or the other)
--   stream:each()   -> iterator over the events
--   stream:close()  -> stop early and release the file
--
-- Both headers (and the initial symbol table) are read by open(), so a
-- malformed start raises there.  Errors are raised with error(msg, 0) as
-- 'NAME: byte N: expected ..., found ...'.  A stream cut in the middle of
-- an event or lacking its epilogue is not an error: next() returns nil
-- and stream.warning says what happened; every complete event before the
-- cut is delivered.  An empty file (what a process leaves when it ends
-- before its first write) is read as a stream with no events, with a
-- warning that says so.
--
-- The event stream is version 3 (Tarantool's format) or 100 (the
-- extended format: call stacks and time marks, see docs/format.md).
--
-- stream:next() returns ONE event table per stream, reused for every
-- event: copy what you want to keep.  Its fields:
--   kind    'alloc' | 'realloc' | 'free'
--   site    the interned site of the event (see below)
--   naddr, nsize   the new block (alloc, realloc; 0 for free)
--   oaddr, osize   the old block (realloc, free; 0 for alloc)
--   offset  byte offset of the event header in the file
--   stack   the interned call stack of the event, or nil (see below)
--   trace   the number of the trace whose compiled code made the event
--           (an event of a Lua line, extended format), or nil; with
--           opts.split_traces such events have that trace's site
--   time    nanoseconds since the start, from the last time mark before
--           the event; nil before the first mark and in streams without
--           time marks
--   nweight, oweight   how many blocks the new and the old block stand
--           for: 1 here; memprof.analysis.sampling scales the events of a sampled
--           profile (sizes and weights) before the analysis passes
--
-- A site is one table per symbol instance and line (a memprof.record:
-- reader.Site is its shape); it is the same table for every event at
-- that place, so it can be used as a table key:
--   id      small integer, dense from 1 in order of first appearance
--   source  'internal' | 'lua' | 'c' | 'trace'
--   name    the display name ('INTERNAL', '@f.lua:5', 'malloc+0x10', ...)
--   internal_kind   for internal sites of the extended format, what the
--           VM was doing: 'garbage collector', 'JIT compiler', 'trace
--           exit' or 'interpreter' (named 'INTERNAL (garbage collector)'
--           and so on); nil for 'INTERNAL' (no kind, or version 3)
--   chunkname, line   for Lua sites (chunkname is nil when the function
--                     was never described by the stream)
--   traceno           for the sites of one trace (see below)
--   traces            for the site of a trace start: how many traces
--                     (symbol instances) that start there had events
--   addr              for C sites the address of the event, for Lua
--                     sites the address of the prototype
--   alias             the alias in the name, if any ('function_alias_1')
--   func    the function the site belongs to, one table per symbol
--           instance: { source, name, chunkname, line, addr, alias };
--           for Lua its name is 'function at CHUNKNAME:FIRSTLINE' (or
--           'main chunk of CHUNKNAME', 'function at LFUNC 0xADDR'), for C
--           the symbol's name without the +0xOFFSET; a trace site and the
--           internal site are their own func
--
-- Traces are named by where they start: the events of every trace that
-- starts at one place share one site, 'TRACE started at @f.lua:40'
-- (with `traces`, the number of traces merged).  With opts.split_traces
-- each trace has its own site, named by its number too: 'TRACE [3]
-- started at @f.lua:40' (with `traceno`).  A trace whose start the
-- stream does not describe is 'TRACE [3]', and one whose number the VM
-- did not store (arm64) 'TRACE (compiled code, trace not known)'.
--
-- LuaJIT writes a few built-ins in Lua (table.remove, table.move...);
-- their prototypes have the first line 2^32 - 1 (-1 as a 32-bit
-- number, or 2^64 - 1 widened), their bare name as chunk name and no
-- line numbers.  Their places are named '[builtin:remove]', as LuaJIT's
-- own messages name them.
--
-- A stack is one table per stack definition: { id = N, frames = { site,
-- site, ... } }, innermost frame first; its frames are the same interned
-- sites as the events' (a frame equal to an event's location is the
-- same table as ev.site).  The frames are the stack's own array part
-- (stack.frames == stack) and its id is kept at index 0 (stack[0]),
-- both read through a metatable: a large profile has hundreds of
-- thousands of stacks, and a table of frames apart, or a hash part,
-- would double the size of each.
-- An event in a trace has no stack in the stream; in a stream with
-- stacks the reader gives it one made of its site and the callers of
-- the function where the trace starts, as the other events' stacks show
-- them (memprof.read.trace_stacks): { inferred = true, index = N, frames = {
-- trace site, caller, ... } }, listed in stream.inferred_stacks.
--
-- Stream fields: name, version (of the event stream), symtab_version,
-- warning (nil or a message), bytes_read, events (events delivered so
-- far), sites (every site by id), stacks (every stack by id),
-- inferred_stacks (the stacks made for events in traces), has_stacks
-- (a stack was defined), has_time (a time mark was read), time (the last
-- time mark, or nil), aliases (the aliases given to multi-line chunk
-- names, as { name = ..., chunkname = ... }, in order of first use),
-- sample_bytes (nil, or for a sampled profile the mean bytes between
-- samples: see memprof.analysis.sampling), compiled_bytes (the bytes
-- allocated by events of compiled code, as sizes in the file) and
-- compiled.alloc, compiled.realloc (those bytes by site).
-- has_stacks and has_time become true as the records are read: they are
-- final once next() has returned nil.  bytes_read and events are brought
-- up to date when next() reads a chunk of the file, after each record
-- and at the end (next() returning nil, or close()): during reading
-- they lag behind the events delivered, by at most a chunk.
-- The notes of the extended format: heap_at_start (the VM's heap in
-- bytes when the profile started, read with the headers; nil without
-- the note, and in version 3), collected_at_stop (true once the note
-- that garbage was collected at stop is read) and heap_after_collection
-- (the heap's size in bytes after that collection, or nil), and
-- compiled_code ({ mode = 'exact', 'walk', 'resume' or 'start', why = 'asked',
-- 'no_mcofs', 'not_verified', 'no_prof_mode' or 'program_profiler' }:
-- how events of compiled code were attributed; nil without the note).
--
-- A stream that follows a growing file (opts.follow) stops at the end
-- of the bytes written so far instead: next() returns nil with
-- stream.waiting set, and a record cut there is read again from its
-- start after stream:resume(); its headers cut short raise
-- memprof.read.errors.TRUNCATED from the constructor (read them again
-- later).  The epilogue still ends it (stream.done).
--
-- The reader runs on LuaJIT: it reads bytes through an FFI pointer into
-- its buffer (memprof.read.buffer).  Numbers are kept as Lua numbers:
-- exact up to 2^53, which covers x86_64 addresses and any real size.

local buffer = require('memprof.read.buffer')
local names = require('memprof.read.names')
local errors = require('memprof.read.errors')
local words = require('memprof.words')
local trace_stacks = require('memprof.read.trace_stacks')
local record = require('memprof.record')

local M = {}

local format = string.format
local floor = math.floor

local CHUNK_SIZE = 1024 * 1024

-- The longest allocation event: header + 7 numbers of at most 10 bytes
-- (location, stack id, old and new blocks).
local MAX_EVENT = 72
-- A ULEB128 number has at most 10 bytes; past that the scale exceeds this.
local MAX_SCALE = 2 ^ 63
-- What the fast number decoder returns as position when it fails.
local OVERRUN = math.huge

-- Versions of the format this reader understands: the symbol table's,
-- and the event stream's (3, Tarantool's; 100, the extended format).
local SYMTAB_VERSIONS = { 3 }
local SUPPORTED_VERSIONS = { 3, 100 }
local EXTENDED_VERSION = 100

local SOURCE_INTERNAL, SOURCE_LUA, SOURCE_C, SOURCE_TRACE = 1, 2, 3, 4
-- Sources of the extended records of kind 0.
local SOURCE_STACK, SOURCE_TIME, SOURCE_NOTE = 5, 6, 7
local NOTE_HEAP_AT_START, NOTE_COLLECTED_AT_STOP = 1, 2
-- How events of compiled code were attributed: a mode, plus 4 times why
-- it is not the one asked for (docs/format.md, "Notes").
local NOTE_COMPILED_CODE = 3
local COMPILED_MODES = { [0] = 'start', 'resume', 'exact', 'walk' }
local COMPILED_WHYS = { [0] = 'asked', 'no_mcofs', 'not_verified',
  'no_prof_mode', 'program_profiler' }
local KIND_SYMBOL, KIND_ALLOC, KIND_FREE, KIND_REALLOC = 0, 1, 2, 3
-- The names by kind (KIND_ALLOC, KIND_FREE, KIND_REALLOC: 1 to 3), by
-- position, so that they are in the array part: the fast path looks one
-- up for each event, and { [KIND_ALLOC] = ... } put them in the hash
-- part (6% of the reader's instructions).
local KIND_NAMES = { 'alloc', 'free', 'realloc' }
local EPILOGUE = 0x80
-- The sampling record of the extended format, and its one scheme.
local SAMPLING_RECORD, SAMPLING_POISSON_BYTES = 0x5c, 1
-- In an allocation event header of the extended format: a stack id
-- follows the location (for an internal event: the kind of the event).
local STACK_BIT = 0x20
-- On a Lua-line event of the extended format: it ran in compiled code, and
-- the trace's number follows the location.
local COMPILED_BIT = 0x40
local MAX_FRAMES = 64
local FRAME_LUA, FRAME_C = 0x08, 0x0c

-- Kind and source of every usable header.  HEADER_SOURCE covers the
-- headers of both versions, and so does HEADER_KIND_EXTENDED, which the
-- fast path uses for both (it sends the extended headers found in a
-- version 3 stream to other_header()); the stream's own table,
-- self.header_kind, is what says whether a header is valid.
local HEADER_SOURCE = {}
local HEADER_KIND_V3, HEADER_KIND_EXTENDED = {}, {}
for header = 0x04, 0x13 do
  HEADER_KIND_V3[header] = header % 4
  HEADER_KIND_EXTENDED[header] = header % 4
  HEADER_SOURCE[header] = (header - header % 4) / 4
end
for _, header in ipairs({ 0x14, 0x18, 0x1c }) do
  HEADER_KIND_EXTENDED[header] = KIND_SYMBOL
  HEADER_SOURCE[header] = header / 4
end
-- Allocation events from Lua and C functions may carry a stack, internal
-- events a kind.
for _, source in ipairs({ SOURCE_INTERNAL, SOURCE_LUA, SOURCE_C }) do
  for kind = KIND_ALLOC, KIND_REALLOC do
    local header = STACK_BIT + source * 4 + kind
    HEADER_KIND_EXTENDED[header] = kind
    HEADER_SOURCE[header] = source
  end
end
-- Lua-line events of compiled code, with or without a stack.
for kind = KIND_ALLOC, KIND_REALLOC do
  for _, header in ipairs({ COMPILED_BIT + SOURCE_LUA * 4 + kind,
      COMPILED_BIT + STACK_BIT + SOURCE_LUA * 4 + kind }) do
    HEADER_KIND_EXTENDED[header] = kind
    HEADER_SOURCE[header] = SOURCE_LUA
  end
end

-- The valid headers, as error messages list them.
local EXTENDED_HEADERS = '0x05-0x14, 0x18, 0x1c, 0x25-0x27, 0x29-0x2b, ' ..
  '0x2d-0x2f, 0x49-0x4b, 0x69-0x6b or 0x80'
local VALID_HEADERS = {
  [3] = '0x00-0x13 or 0x80',
  [EXTENDED_VERSION] = EXTENDED_HEADERS,
}
local VALID_WITH_SOURCE = {
  [3] = '0x05-0x13 or 0x80',
  [EXTENDED_VERSION] = EXTENDED_HEADERS,
}
local VALID_RECORDS = {
  [3] = 'a symbol event header (0x08, 0x0c or 0x10)',
  [EXTENDED_VERSION] = 'a symbol, stack, time or note record header ' ..
    '(0x08, 0x0c, 0x10, 0x14, 0x18 or 0x1c)',
}

-- What each field of an allocation event is, for error messages.
local LOCATION_FIELDS = {
  [SOURCE_INTERNAL] = {},
  [SOURCE_LUA] = { 'the address of a Lua function', 'a line number' },
  [SOURCE_C] = { 'the address of a C function' },
  [SOURCE_TRACE] = { 'a trace number' },
}
local EVENT_FIELDS = {
  [KIND_ALLOC] = { 'the address of an allocated block',
    'the size of an allocated block' },
  [KIND_FREE] = { 'the address of a freed block',
    'the size of a freed block' },
  [KIND_REALLOC] = { 'the old address of a reallocated block',
    'the old size of a reallocated block',
    'the new address of a reallocated block',
    'the new size of a reallocated block' },
}

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
      if scale == MAX_SCALE and c > 1 then
        self:fail(start, 'expected ' .. what ..
          ', found a number above 2^64 - 1')
      end
      return value + c * scale
    end
    value = value + (c - 128) * scale
    scale = scale * 128
    if scale > MAX_SCALE then
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

function common:read_lfunc_body()
  local addr = self:read_uleb('the address of a Lua function')
  local chunkname = self:read_string('a chunk name')
  local firstline = self:read_uleb('the first line of a Lua function')
  self:define_lfunc(addr, chunkname, firstline)
end

function common:read_cfunc_body()
  local addr = self:read_uleb('the address of a C function')
  local name = self:read_string('the name of a C function')
  self:define_cfunc(addr, name)
end

function common:read_trace_body()
  local traceno = self:read_uleb('a trace number')
  local proto_addr = self:read_uleb('the address of the Lua function of a trace')
  local line = self:read_uleb('the start line of a trace')
  self:define_trace(traceno, proto_addr, line)
end

function common:read_symbol_table()
  while true do
    local start = self:offset_of(self.cursor.pos)
    local header = self:read_byte('a symbol header (or 0x80 to end the table)')
    if header >= 0x80 then
      return
    end
    local kind = header % 4
    if kind == 0 then
      self:read_lfunc_body()
    elseif kind == 1 then
      self:read_cfunc_body()
    elseif kind == 2 then
      self:read_trace_body()
    else
      self:fail(start, format('expected a symbol header (type 0, 1 or 2, ' ..
        'or 0x80 to end the table), found %s', format('0x%02x', header)))
    end
  end
end

-- The sampling record (right after the event stream header of a sampled
-- profile): the scheme, then the mean bytes between samples.
function common:read_sampling()
  self.cursor.pos = self.cursor.pos + 1
  local scheme_at = self:offset_of(self.cursor.pos)
  local scheme = self:read_byte('the sampling scheme')
  if scheme ~= SAMPLING_POISSON_BYTES then
    self:fail(scheme_at, format('expected sampling scheme %d (a Poisson ' ..
      'process over allocated bytes), found %d', SAMPLING_POISSON_BYTES,
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
  self.symtab_version = self:expect_version('symbol table', SYMTAB_VERSIONS)
  self:skip_reserved('the symbol table header')
  self:read_symbol_table()
  self:expect_magic('ljm', 'the event stream magic')
  self.version = self:expect_version('event stream', SUPPORTED_VERSIONS)
  self.cursor.version = self.version
  if self.version == EXTENDED_VERSION then
    self.header_kind = HEADER_KIND_EXTENDED
  end
  self:skip_reserved('the event stream header')
  if self.version == EXTENDED_VERSION then
    self:fill(1)
    local cursor = self.cursor
    if self.follow and cursor.pos > cursor.last then
      -- A sampling record or the note of the heap at start follows: the
      -- headers are not whole yet.
      error(TRUNCATED, 0)
    end
    if cursor.pos <= cursor.last and
        self:byte_at(cursor.pos) == SAMPLING_RECORD then
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
  if self.version ~= EXTENDED_VERSION then
    return
  end
  for i = 1, 2 do
    self:fill(2)
    local cursor = self.cursor
    if cursor.pos > cursor.last or self:byte_at(cursor.pos) ~= 0x1c or
        (i == 2 and (cursor.pos + 1 > cursor.last or
          self:byte_at(cursor.pos + 1) ~= NOTE_COMPILED_CODE)) then
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
  if header == SAMPLING_RECORD then
    return ', a sampling record, which is valid only right after the ' ..
      'event stream header, before the note of the heap at start'
  elseif header % 0x80 >= 0x40 then
    return ', a reserved header (bit 6 set, valid only on a Lua-line ' ..
      'event) that this reader cannot skip'
  end
  local kind, source = header % 4, (header % STACK_BIT - header % 4) / 4
  if header >= STACK_BIT and header < 0x80 and kind ~= KIND_SYMBOL and
      source == SOURCE_TRACE then
    return ': trace events carry no stack'
  end
  return ''
end

-- A header that is not an allocation event: a record of kind 0 (read it,
-- then go on to the next event), the epilogue, or an error.
function common:other_header(header, pos)
  if self.header_kind[header] == KIND_SYMBOL then
    if self:record(header, pos) then
      return self:next()
    end
    return nil
  end
  if header == EPILOGUE then
    return self:stop_at_epilogue(pos)
  end
  local note = ''
  if self.version == EXTENDED_VERSION then
    note = extended_header_note(header)
  end
  if header <= 0x03 then
    self:fail(self:offset_of(pos), format('expected an event header with ' ..
      'a source (%s), found 0x%02x%s', VALID_WITH_SOURCE[self.version],
      header, note))
  end
  self:fail(self:offset_of(pos), format('expected an event header ' ..
    '(%s), found 0x%02x%s', VALID_HEADERS[self.version], header, note))
end

-- One frame of a stack definition: the interned site it names.
function common:read_frame()
  local start = self:offset_of(self.cursor.pos)
  local kind = self:read_byte('the kind of a stack frame')
  if kind == FRAME_LUA then
    local addr = self:read_uleb('the address of the Lua function of a frame')
    local line = self:read_uleb('the line of a frame')
    local sym = self.lfuncs[addr]
    return sym and sym.sites[line] or self:lua_site(addr, line)
  elseif kind == FRAME_C then
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
  if count < 1 or count > MAX_FRAMES then
    self:fail(count_at, format('expected the number of frames of a stack ' ..
      '(1 to %d), found %d', MAX_FRAMES, count))
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
  local mode, why = COMPILED_MODES[value % 4], COMPILED_WHYS[floor(value / 4)]
  if not mode or not why then
    self:fail(value_at, format('expected the attribution of compiled ' ..
      'code (a mode 0 to 3 plus 4 times a reason 0 to 4), found %d', value))
  end
  self.compiled_code = { mode = mode, why = why }
end

function common:read_note_body(pos)
  local kind_at = self:offset_of(self.cursor.pos)
  local kind = self:read_uleb('the kind of a note')
  if kind == NOTE_HEAP_AT_START then
    local heap = self:read_uleb('the heap at start of a note')
    if self.heap_at_start or self.cursor.events > 0 or self.has_time or
        self.has_stacks then
      self:fail(self:offset_of(pos), 'expected the note of the heap at ' ..
        'start only once, first after the event stream header')
    end
    self.heap_at_start = heap
  elseif kind == NOTE_COLLECTED_AT_STOP then
    local heap = self:read_uleb('the heap after the collection of a note')
    if self.collected_at_stop then
      self:fail(self:offset_of(pos), 'expected the note of the ' ..
        'collection at stop only once')
    end
    self.collected_at_stop = true
    self.heap_after_collection = heap
  elseif kind == NOTE_COMPILED_CODE then
    self:read_compiled_note(pos)
  else
    self:fail(kind_at, format('expected the kind of a note (1 for the ' ..
      'heap at start, 2 for the collection at stop, 3 for compiled ' ..
      'code), found %d', kind))
  end
end

function common:read_record_body(header, pos)
  local source = HEADER_SOURCE[header]
  self.cursor.pos = pos + 1
  if source == SOURCE_LUA then
    self:read_lfunc_body()
  elseif source == SOURCE_C then
    self:read_cfunc_body()
  elseif source == SOURCE_TRACE then
    self:read_trace_body()
  elseif source == SOURCE_STACK then
    self:read_stack_body()
  elseif source == SOURCE_TIME then
    self:read_time_body()
  elseif source == SOURCE_NOTE then
    self:read_note_body(pos)
  else
    self:fail(self:offset_of(pos), format('expected %s, found 0x%02x',
      VALID_RECORDS[self.version], header))
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

-- The fast decoder could not decode the event at pos: find out why, with
-- the checked decoder, field by field.
function common:diagnose_event(header, pos)
  local fields = {}
  for _, what in ipairs(LOCATION_FIELDS[HEADER_SOURCE[header]]) do
    fields[#fields + 1] = what
  end
  if header >= COMPILED_BIT then
    fields[#fields + 1] = 'the trace of an event of compiled code'
  end
  if header % COMPILED_BIT >= STACK_BIT then
    fields[#fields + 1] = HEADER_SOURCE[header] == SOURCE_INTERNAL and
      'the kind of an internal event' or 'a stack id'
  end
  for _, what in ipairs(EVENT_FIELDS[self.header_kind[header]]) do
    fields[#fields + 1] = what
  end
  if self.follow then
    self.mark = self:offset_of(pos)
  end
  self.cursor.pos = pos + 1
  local ok, err = pcall(function()
    for _, what in ipairs(fields) do
      self:read_uleb(what)
    end
  end)
  if ok then
    error(format('%s: byte %d: internal error: the event decodes with the ' ..
      'checked decoder but not the fast one', self.name, self:offset_of(pos)), 0)
  end
  if err ~= TRUNCATED then
    error(err, 0)
  end
  return self:stop_in_event(self.truncated_what)
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

-- The decoder ------------------------------------------------------------

-- The fast ULEB128 decoder, with LuaJIT's bit operations:
-- the low 28 bits and the next ones are put together as 32-bit
-- integers, and only those two are made into a double (the sum is
-- rounded once).  A byte then costs an integer shift
-- and or, not a conversion, a multiplication and an addition of doubles
-- and a check for overflow.
local function uleb_bits(bit, byte_at, uleb_loop)
  local bor, bxor, lshift = bit.bor, bit.bxor, bit.lshift
  local HIGH = 0x10000000
  return function(b, i, last)
    if i + 7 > last then
      return uleb_loop(b, i, last)
    end
    local c = byte_at(b, i)
    if c < 0x80 then return c, i + 1 end
    local v = bxor(c, 0x80)
    c = byte_at(b, i + 1)
    if c < 0x80 then return bor(v, lshift(c, 7)), i + 2 end
    v = bor(v, lshift(bxor(c, 0x80), 7))
    c = byte_at(b, i + 2)
    if c < 0x80 then return bor(v, lshift(c, 14)), i + 3 end
    v = bor(v, lshift(bxor(c, 0x80), 14))
    c = byte_at(b, i + 3)
    if c < 0x80 then return bor(v, lshift(c, 21)), i + 4 end
    v = bor(v, lshift(bxor(c, 0x80), 21))
    c = byte_at(b, i + 4)
    if c < 0x80 then return v + c * HIGH, i + 5 end
    local h = bxor(c, 0x80)
    c = byte_at(b, i + 5)
    if c < 0x80 then return v + bor(h, lshift(c, 7)) * HIGH, i + 6 end
    h = bor(h, lshift(bxor(c, 0x80), 7))
    c = byte_at(b, i + 6)
    if c < 0x80 then return v + bor(h, lshift(c, 14)) * HIGH, i + 7 end
    h = bor(h, lshift(bxor(c, 0x80), 14))
    c = byte_at(b, i + 7)
    if c < 0x80 then return v + bor(h, lshift(c, 21)) * HIGH, i + 8 end
    return uleb_loop(b, i, last)
  end
end

-- byte_at(b, i) is the byte at buffer position i of b = bytes_of(cursor),
-- the cursor itself (a pointer kept in a local would be made a new cdata
-- object at each exit from compiled code).
local function make_methods(byte_at, bit, bytes_of)
  -- ULEB128 decoder with a loop: near the end of the data and for numbers
  -- longer than 8 bytes.  Returns 0, OVERRUN when the number runs past
  -- `last` or is longer than 10 bytes.
  local function uleb_loop(b, i, last)
    local value, scale = 0, 1
    while true do
      if i > last then
        return 0, OVERRUN
      end
      local c = byte_at(b, i)
      i = i + 1
      if c < 128 then
        if scale == MAX_SCALE and c > 1 then
          return 0, OVERRUN
        end
        return value + c * scale, i
      end
      if scale == MAX_SCALE then
        -- The tenth byte: a number of 64 bits has 1 bit left.
        return 0, OVERRUN
      end
      value = value + (c - 128) * scale
      scale = scale * 128
    end
  end

  -- Unrolled for up to 8 bytes (addresses take 7): LuaJIT compiles
  -- straight code much better than short loops.  (Assigned once, so
  -- that LuaJIT knows it for good in the callers.)
  local uleb = uleb_bits(bit, byte_at, uleb_loop)

  local methods = setmetatable({}, { __index = common })

  -- The values of an event table (ev, as next() returns it), or nil.
  local function values_of(ev)
    if not ev then
      return nil
    end
    return ev.kind, ev.site, ev.oaddr, ev.osize, ev.naddr, ev.nsize,
      ev.stack, ev.offset, ev.trace
  end

  -- The bytes compiled code allocated, by kind and site: each row of a
  -- report by line can say how much of it ran compiled. Only events of
  -- compiled code pay for it.
  function methods:count_compiled(kind, site, nsize)
    local by_site = self.compiled[kind]
    if by_site then
      by_site[site] = (by_site[site] or 0) + nsize
      self.compiled_bytes = self.compiled_bytes + nsize
    end
  end

  -- The stream's next_values(), a closure made for each stream
  -- (new_stream) over its cursor: under LuaJIT a pointer to a C record,
  -- which the compiled code holds as a constant, so that the position is
  -- read and written with one load or store and no check of its type.
  -- Returns the next event's kind (its name), site, oaddr, osize, naddr,
  -- nsize, stack and offset, or nil at the end.  No loop here: LuaJIT
  -- then compiles the caller's loop around it.  Headers other than
  -- allocation events go to common:other_header(), which calls next()
  -- again after a symbol event.
  function methods.make_next_values(cursor, stacks)
    return function(self)
      local pos, last = cursor.pos, cursor.last
      -- (Near the end of the buffer only: a stream done has none left.)
      if last - pos < MAX_EVENT then
        if self.done then
          return nil
        end
        if not self.eof then
          -- (The counts are brought up to date once a chunk.)
          self:count_read()
          self:fill(MAX_EVENT)
          pos, last = cursor.pos, cursor.last
        end
        if pos > last then
          return values_of(self:stop_without_epilogue())
        end
      end
      local b = bytes_of(cursor)
      local header = byte_at(b, pos)
      -- (HEADER_KIND_EXTENDED has the headers of both versions; the
      -- extended ones are checked against the version off the fast path.)
      local kind = HEADER_KIND_EXTENDED[header]
      if not kind or kind == KIND_SYMBOL then
        return values_of(self:other_header(header, pos))
      end
      local source = HEADER_SOURCE[header]
      local p = pos + 1
      local loc, line = 0, 0
      if source == SOURCE_LUA then
        loc, p = uleb(b, p, last)
        line, p = uleb(b, p, last)
      elseif source ~= SOURCE_INTERNAL then
        loc, p = uleb(b, p, last)
      end
      local trace, flags = nil, header
      if header >= COMPILED_BIT then
        if cursor.version ~= EXTENDED_VERSION then
          return values_of(self:other_header(header, pos))
        end
        trace, p = uleb(b, p, last)
        flags = header - COMPILED_BIT
      end
      local stack_id, stack_at = 0, 0
      if flags >= STACK_BIT then
        if cursor.version ~= EXTENDED_VERSION then
          return values_of(self:other_header(header, pos))
        end
        stack_at = p
        stack_id, p = uleb(b, p, last)
      end
      local oaddr, osize, naddr, nsize = 0, 0, 0, 0
      if kind == KIND_ALLOC then
        naddr, p = uleb(b, p, last)
        nsize, p = uleb(b, p, last)
      elseif kind == KIND_FREE then
        oaddr, p = uleb(b, p, last)
        osize, p = uleb(b, p, last)
      else
        oaddr, p = uleb(b, p, last)
        osize, p = uleb(b, p, last)
        naddr, p = uleb(b, p, last)
        nsize, p = uleb(b, p, last)
      end
      if p == OVERRUN then
        return values_of(self:diagnose_event(header, pos))
      end
      local stack = nil
      if stack_at ~= 0 and source ~= SOURCE_INTERNAL then
        stack = stacks[stack_id]
        if not stack then
          return values_of(self:undefined_stack(stack_id, stack_at))
        end
        cursor.context = stack_id
      end
      local site
      if source == SOURCE_INTERNAL then
        if stack_at == 0 then
          site = self.internal_site or self:internal()
        else
          site = self.internal_kind_sites[stack_id] or
            self:internal_kind_site(stack_id, stack_at)
        end
      elseif source == SOURCE_LUA then
        local sym = self.lfuncs[loc]
        site = sym and sym.sites[line] or self:lua_site(loc, line)
        if trace then
          if self.split_traces then
            site = self.trace_sites[trace] or self:trace_site(trace)
          end
          self:count_compiled(KIND_NAMES[kind], site, nsize)
        end
      elseif source == SOURCE_C then
        site = self.c_sites[loc] or self:c_site(loc)
      else
        site = self.trace_sites[loc] or self:trace_site(loc)
        if self.has_stacks then
          stack = trace_stack(self, loc)
        end
      end
      cursor.pos = p
      cursor.events = cursor.events + 1
      return KIND_NAMES[kind], site, oaddr, osize, naddr, nsize, stack,
        cursor.base + pos - 1, trace
    end
  end

  -- The stream's next(): the next event in the stream's reused table
  -- (ev), or nil at the end.
  function methods.make_next(next_values, ev)
    return function(self)
      local kind, site, oaddr, osize, naddr, nsize, stack, offset, trace =
        next_values(self)
      if not kind then
        return nil
      end
      ev.kind = kind
      ev.site = site
      ev.oaddr, ev.osize, ev.naddr, ev.nsize = oaddr, osize, naddr, nsize
      ev.offset = offset
      ev.stack = stack
      ev.trace = trace
      return ev
    end
  end

  return { __index = methods }
end

local decoder = make_methods(function(cursor, i)
  return cursor.view[i]
end, require('bit'), function(cursor) return cursor end)

-- Opening streams --------------------------------------------------------

-- read_into(pointer, count) puts the next piece of the file (at most
-- count bytes) there and returns its length (0 at the end); or
-- read_chunk() returns the next piece, or nil at the end.
local function new_stream(name, read_chunk, close_source, opts, read_into)
  local self = setmetatable({
    name = name,
    version = nil,
    symtab_version = nil,
    warning = nil,
    bytes_read = 0,
    events = 0,
    aliases = {},
    sites = {},
    stacks = {},
    inferred = trace_stacks.new(),
    has_stacks = false,
    has_time = false,
    time = nil,
    sample_bytes = nil,
    heap_at_start = nil,
    collected_at_stop = false,
    heap_after_collection = nil,
    compiled_code = nil,
    compiled = { alloc = {}, realloc = {} },
    compiled_bytes = 0,
    -- reading state
    read_chunk = read_chunk or false,
    read_into = read_into or false,
    chunk_size = opts.chunk_size or CHUNK_SIZE,
    close_source = close_source,
    eof = false, done = false,
    follow = opts.follow or false, waiting = false, mark = false,
    cursor = false, cursor_record = false, next = false,
    next_values = false,
    in_events = false,
    header_kind = HEADER_KIND_V3,
    cbuf = false, capacity = 0,
    -- stack and time are created as false, then set to nil below, so
    -- that the table has their slots: storing nil into an existing slot
    -- is much faster than into a missing key.
    event = { kind = 'alloc', site = false, naddr = 0, nsize = 0,
      oaddr = 0, osize = 0, offset = 0, stack = false, time = false,
      nweight = 1, oweight = 1 },
    -- symbol table
    lfuncs = {}, cfuncs = {}, traces = {}, c_sorted = nil,
    c_sites = {}, trace_sites = {}, unknown_c = {}, alias_of = {},
    internal_site = nil, internal_kind_sites = {}, trace_starts = {},
    split_traces = opts.split_traces or false,
  }, decoder)
  self.inferred_stacks = self.inferred.list
  self.cursor, self.cursor_record = self.new_cursor()
  self.next_values = self.make_next_values(self.cursor, self.stacks)
  self.next = self.make_next(self.next_values, self.event)
  self.event.stack, self.event.time = nil, nil
  self:reserve(self.chunk_size + MAX_EVENT)
  local ok, err = pcall(self.read_headers, self)
  if not ok then
    self:close()
    error(err, 0)
  end
  return self
end

-- Open a profile file.  opts (optional): chunk_size, on_read,
-- split_traces.
function M.open(path, opts)
  opts = opts or {}
  local file, err = io.open(path, 'rb')
  if not file then
    -- io.open says "PATH: strerror" already.
    error(err, 0)
  end
  file:close()
  local read_into, close = buffer.file(path, opts.on_read)
  return new_stream(path, nil, close, opts, read_into)
end

-- A stream over another source: read_into(pointer, count) -> bytes put
-- there (0 at the end), close().  With opts.follow (memprof.read.follow):
-- the source may grow after it ended; see pause() and resume().
function M.from_source(name, read_into, close, opts)
  return new_stream(name, nil, close, opts or {}, read_into)
end

-- A stream over bytes in memory (for tests).  opts as for open().
function M.from_string(bytes, name, opts)
  opts = opts or {}
  local read_chunk = buffer.string_chunks(bytes, opts.chunk_size or CHUNK_SIZE)
  return new_stream(name or '(string)', read_chunk, function() end, opts)
end

M.Site = names.Site
M.SUPPORTED_VERSIONS = SUPPORTED_VERSIONS
M.SYMTAB_VERSIONS = SYMTAB_VERSIONS
M.EXTENDED_VERSION = EXTENDED_VERSION

return M
