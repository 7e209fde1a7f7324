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
-- compiled_code ({ mode = 'exact', 'walk', 'resume' or 'start',
-- why = 'asked', 'no_mcofs', 'not_verified', 'no_prof_mode' or
-- 'program_profiler' }:
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
-- Here is the decoder of allocation events; the records around them are
-- memprof.read.stream_records', the format's constants
-- memprof.read.stream_format's.

local buffer = require('memprof.read.buffer')
local names = require('memprof.read.names')
local errors = require('memprof.read.errors')
local trace_stacks = require('memprof.read.trace_stacks')
local common = require('memprof.read.stream_records')
local F = require('memprof.read.stream_format')
local CHUNK_SIZE, MAX_EVENT, MAX_SCALE, OVERRUN, SYMTAB_VERSIONS =
  F.CHUNK_SIZE, F.MAX_EVENT, F.MAX_SCALE, F.OVERRUN, F.SYMTAB_VERSIONS
local SUPPORTED_VERSIONS, EXTENDED_VERSION, SOURCE_INTERNAL, SOURCE_LUA =
  F.SUPPORTED_VERSIONS, F.EXTENDED_VERSION, F.SOURCE_INTERNAL, F.SOURCE_LUA
local SOURCE_C, KIND_SYMBOL, KIND_ALLOC, KIND_FREE, KIND_NAMES =
  F.SOURCE_C, F.KIND_SYMBOL, F.KIND_ALLOC, F.KIND_FREE, F.KIND_NAMES
local STACK_BIT, COMPILED_BIT, HEADER_SOURCE, HEADER_KIND_V3 =
  F.STACK_BIT, F.COMPILED_BIT, F.HEADER_SOURCE, F.HEADER_KIND_V3
local HEADER_KIND_EXTENDED, LOCATION_FIELDS, EVENT_FIELDS =
  F.HEADER_KIND_EXTENDED, F.LOCATION_FIELDS, F.EVENT_FIELDS

local M = {}

local format = string.format
local TRUNCATED = errors.TRUNCATED

local trace_stack = common.trace_stack

-- The fast decoder could not decode the event at pos: find out why, with
-- the checked decoder, field by field.
local function diagnose_event(self, header, pos)
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
  methods.diagnose_event = diagnose_event

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
