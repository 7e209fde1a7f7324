-- A memprof stream encoder, for tests only.
--
--   local B = require('helpers.stream_builder')
--   local s = B.new()                      -- symbol table header written
--   s:lfunc(0x100, '@test.lua', 1)         -- entries of the symbol table
--   s:events()                             -- ends the symtab, event header
--   s:define_lfunc(0x200, '@b.lua', 3)     -- a symbol event
--   s:alloc(B.lua(0x100, 5), 0x1000, 64)
--   s:epilogue()
--   local bytes = s:bytes()
--
-- Locations: B.internal(), B.lua(proto_addr, line [, stack_id]),
-- B.c(addr [, stack_id]), B.trace(traceno).  s:size() is the number of
-- bytes written so far, which is the offset of the next record.
--
-- The extended format (event stream version 100):
--   s:events({ version = B.EXTENDED })
--   s:stack(1, { B.lua(0x100, 5), B.c(0x777) })  -- a stack definition
--   s:alloc(B.lua(0x100, 5, 1), 0x1000, 64)       -- an event with stack 1
--   s:time(2000000)                               -- a time mark (ns)
--   s:events({ version = B.EXTENDED, sample_bytes = 100 })  -- sampled
--   s:note(B.HEAP_AT_START, 4096)                  -- a note
--   s:alloc(B.internal(1), 0x2000, 32)            -- an internal event of
--                                                 -- kind 1 (collector)

local B = {}

-- The version of the extended event stream.
B.EXTENDED = 100

local char, concat, floor = string.char, table.concat, math.floor

function B.uleb(n)
  assert(n >= 0 and n == floor(n), 'uleb needs a non-negative integer')
  local out = {}
  repeat
    local low = n % 128
    n = (n - low) / 128
    if n > 0 then
      low = low + 128
    end
    out[#out + 1] = char(low)
  until n == 0
  return concat(out)
end

function B.string(s)
  return B.uleb(#s) .. s
end

local SOURCE_BITS = { internal = 0x04, lua = 0x08, c = 0x0c, trace = 0x10 }

-- An internal event; in the extended format, with the kind of what the
-- VM was doing (1 to 4), written after the header.
function B.internal(kind)
  return { source = 'internal', kind = kind }
end

function B.lua(proto_addr, line, stack_id)
  return { source = 'lua', stack = stack_id, proto_addr, line }
end

function B.c(addr, stack_id)
  return { source = 'c', stack = stack_id, addr }
end

function B.trace(traceno)
  return { source = 'trace', traceno }
end

-- A Lua line whose event ran in trace `traceno`'s compiled code (header
-- bit 6, extended format).
function B.compiled(proto_addr, line, traceno, stack_id)
  return { source = 'lua', stack = stack_id, trace = traceno, proto_addr,
    line }
end

local Builder = {}
Builder.__index = Builder

function B.new(opts)
  opts = opts or {}
  local self = setmetatable({ parts = {}, length = 0 }, Builder)
  self:raw('ljs' .. char(opts.symtab_version or 3) .. '\0\0\0')
  return self
end

function Builder:raw(bytes)
  self.parts[#self.parts + 1] = bytes
  self.length = self.length + #bytes
  return self
end

function Builder:size()
  return self.length
end

function Builder:bytes()
  return concat(self.parts)
end

function Builder:numbers(...)
  for i = 1, select('#', ...) do
    self:raw(B.uleb((select(i, ...))))
  end
  return self
end

-- Entries of the initial symbol table.
function Builder:lfunc(addr, chunkname, firstline)
  return self:raw(char(0)):numbers(addr):raw(B.string(chunkname))
    :numbers(firstline or 0)
end

function Builder:cfunc(addr, name)
  return self:raw(char(1)):numbers(addr):raw(B.string(name))
end

function Builder:trace(traceno, proto_addr, line)
  return self:raw(char(2)):numbers(traceno, proto_addr, line)
end

-- End the symbol table and start the events.
function Builder:events(opts)
  opts = opts or {}
  self:raw(char(0x80) .. 'ljm' .. char(opts.version or 3) .. '\0\0\0')
  if opts.sample_bytes then
    self:raw(char(0x5c, 1) .. B.uleb(opts.sample_bytes))
  end
  return self
end

-- Symbol events.
function Builder:define_lfunc(addr, chunkname, firstline)
  return self:raw(char(0x08)):numbers(addr):raw(B.string(chunkname))
    :numbers(firstline or 0)
end

function Builder:define_cfunc(addr, name)
  return self:raw(char(0x0c)):numbers(addr):raw(B.string(name))
end

function Builder:define_trace(traceno, proto_addr, line)
  return self:raw(char(0x10)):numbers(traceno, proto_addr, line)
end

-- The header, location and (when loc.stack is set) stack id of an event,
-- or (when loc.kind is set) the kind of an internal event.
function Builder:event(kind, loc)
  local extra = loc.stack or loc.kind
  self:raw(char(kind + SOURCE_BITS[loc.source] + (extra and 0x20 or 0) +
    (loc.trace and 0x40 or 0)))
  self:numbers(unpack(loc))
  if loc.trace then
    self:numbers(loc.trace)
  end
  if extra then
    self:numbers(extra)
  end
  return self
end

-- A note (extended format): B.HEAP_AT_START or B.COLLECTED_AT_STOP, and
-- the heap's size in bytes.
B.HEAP_AT_START, B.COLLECTED_AT_STOP, B.COMPILED_CODE = 1, 2, 3
function Builder:note(kind, bytes)
  return self:raw(char(0x1c)):numbers(kind, bytes)
end

-- A stack definition: frames are B.lua(proto_addr, line) and B.c(addr)
-- locations, innermost first.
function Builder:stack(id, frames)
  self:raw(char(0x14)):numbers(id, #frames)
  for _, frame in ipairs(frames) do
    self:raw(char(SOURCE_BITS[frame.source])):numbers(unpack(frame))
  end
  return self
end

-- A time mark: nanoseconds since the start.
function Builder:time(ns)
  return self:raw(char(0x18)):numbers(ns)
end

function Builder:alloc(loc, naddr, nsize)
  return self:event(1, loc):numbers(naddr, nsize)
end

function Builder:free(loc, oaddr, osize)
  return self:event(2, loc):numbers(oaddr, osize)
end

function Builder:realloc(loc, oaddr, osize, naddr, nsize)
  return self:event(3, loc):numbers(oaddr, osize, naddr, nsize)
end

function Builder:epilogue()
  return self:raw(char(0x80))
end

-- A small stream with every kind of event and source, shared by the
-- analysis and report specs (their expected figures come from it).
-- A sampled profile: one sample per 100 bytes.  A block of 10000 bytes
-- stands for itself (weight 1), one of 1 byte for 100.5 blocks: 101 at
-- address 2 and 100 at address 1 (memprof.analysis.sampling).  Line 3 allocates
-- 10000 + 101 bytes (102 blocks), line 4 100 bytes (100 blocks); line 5
-- frees the block of address 2 (101 bytes, 101 blocks).
function B.sampled()
  return B.new():lfunc(0x100, '@a.lua', 0)
    :events({ version = B.EXTENDED, sample_bytes = 100 })
    :alloc(B.lua(0x100, 3), 0x1000, 10000)
    :alloc(B.lua(0x100, 3), 2, 1)
    :alloc(B.lua(0x100, 4), 1, 1)
    :free(B.lua(0x100, 5), 2, 1)
    :epilogue()
end

function B.crafted()
  local s = B.new():lfunc(0x100, '@test.lua', 1):events()
  s:alloc(B.lua(0x100, 5), 0x1000, 64)
  s:alloc(B.lua(0x100, 5), 0x2000, 64)
  s:alloc(B.lua(0x100, 5), 0x3000, 64)
  s:alloc(B.lua(0x100, 6), 0x4000, 32)
  s:realloc(B.lua(0x100, 7), 0x4000, 32, 0x5000, 128)
  s:free(B.internal(), 0x1000, 64)
  s:free(B.internal(), 0x9000, 100)
  s:define_trace(1, 0x100, 5)
  s:alloc(B.trace(1), 0x6000, 16)
  s:define_cfunc(0x777, 'io_write')
  s:alloc(B.c(0x777), 0x7000, 48)
  s:free(B.c(0x777), 0x7000, 48)
  s:epilogue()
  return s
end

-- A finished stream of @r.lua in which line 2 allocates three blocks of
-- 8 bytes; line 3 reallocates one of them to 16 bytes, and a block from
-- before the profile (4 bytes) to 12; line 4 frees the 16 bytes, another
-- block of line 2 and a block from before the profile (5 bytes).
function B.line_blocks()
  local s = B.new():lfunc(0x100, '@r.lua', 1):events()
  s:alloc(B.lua(0x100, 2), 0x10, 8)
  s:alloc(B.lua(0x100, 2), 0x20, 8)
  s:alloc(B.lua(0x100, 2), 0x30, 8)
  s:realloc(B.lua(0x100, 3), 0x10, 8, 0x40, 16)
  s:free(B.lua(0x100, 4), 0x40, 16)
  s:free(B.lua(0x100, 4), 0x20, 8)
  s:free(B.lua(0x100, 4), 0x999, 5)
  s:realloc(B.lua(0x100, 3), 0x888, 4, 0x50, 12)
  return s:epilogue()
end

-- An extended stream: a logging helper (@log.lua, defined at line 3)
-- whose line 5 calls string.format on behalf of three callers in
-- @app.lua (lines 10, 20, 30), plus an allocation made directly by the
-- helper's line 7 for @app.lua:50, one by a C function called from
-- @app.lua:60, one at the top level of @app.lua (line 5), a trace and
-- the collector.  Live at the end: 2 x 200B from line 20, 300B from
-- line 30, 64B from line 50, 48B from line 60, 16B from the trace;
-- the rest is freed.  Net bytes: 828 live - 24 (a block from before the
-- profile) = 804.
function B.three_callers()
  local s = B.new():lfunc(0x100, '@log.lua', 3):lfunc(0x200, '@app.lua', 0)
    :cfunc(0x900, 'string.format'):cfunc(0xa00, 'io_lines')
    :trace(1, 0x200, 70):events({ version = B.EXTENDED })
  s:stack(1, { B.c(0x900), B.lua(0x100, 5), B.lua(0x200, 10) })
  s:stack(2, { B.c(0x900), B.lua(0x100, 5), B.lua(0x200, 20) })
  s:stack(3, { B.c(0x900), B.lua(0x100, 5), B.lua(0x200, 30) })
  s:stack(4, { B.lua(0x100, 7), B.lua(0x200, 50) })
  s:stack(5, { B.c(0xa00), B.lua(0x200, 60) })
  s:stack(6, { B.lua(0x200, 5) })
  s:alloc(B.lua(0x100, 5, 1), 0x1000, 100)
  s:alloc(B.lua(0x100, 5, 1), 0x1100, 100)
  s:alloc(B.lua(0x100, 5, 1), 0x1200, 100)
  s:alloc(B.lua(0x100, 5, 2), 0x2000, 200)
  s:alloc(B.lua(0x100, 5, 2), 0x2100, 200)
  s:alloc(B.lua(0x100, 5, 3), 0x3000, 300)
  s:alloc(B.lua(0x100, 7, 4), 0x4000, 64)
  s:alloc(B.c(0xa00, 5), 0x5000, 48)
  s:alloc(B.lua(0x200, 5, 6), 0x6000, 32)
  s:alloc(B.trace(1), 0x7000, 16)
  s:free(B.internal(), 0x1000, 100)
  s:free(B.internal(), 0x1100, 100)
  s:free(B.internal(), 0x1200, 100)
  s:free(B.internal(), 0x6000, 32)
  s:free(B.internal(), 0x9000, 24)
  s:epilogue()
  return s
end

-- An extended stream with compiled code: @fill.lua's function (defined
-- at line 1) has a loop at line 3, where traces 1 and 2 start; the main
-- chunk of @main.lua calls it at line 10, then at line 20.  Each call
-- runs the loop in the interpreter first (32B at @fill.lua:3), then on
-- traces: under line 10, trace 1 makes 2 x 64B and trace 2 64B; under
-- line 20, trace 2 makes 64B.  The collector then frees one of trace
-- 1's blocks.  Live at the end: 256B (64B interpreted, 192B compiled).
function B.compiled_loop()
  local s = B.new():lfunc(0x100, '@fill.lua', 1):lfunc(0x200, '@main.lua', 0)
    :trace(1, 0x100, 3):trace(2, 0x100, 3):events({ version = B.EXTENDED })
  s:stack(1, { B.lua(0x100, 3), B.lua(0x200, 10) })
  s:alloc(B.lua(0x100, 3, 1), 0x10, 32)
  s:alloc(B.trace(1), 0x20, 64)
  s:alloc(B.trace(1), 0x30, 64)
  s:alloc(B.trace(2), 0x40, 64)
  s:stack(2, { B.lua(0x100, 3), B.lua(0x200, 20) })
  s:alloc(B.lua(0x100, 3, 2), 0x50, 32)
  s:alloc(B.trace(2), 0x60, 64)
  s:free(B.internal(), 0x30, 64)
  s:epilogue()
  return s
end

-- The loop of B.compiled_loop as a build with lines for compiled code
-- writes it: the traces' events are events of line 3 that name their
-- trace (1 and 2), so they share the line's row; a reallocation at
-- @main.lua:11 ran compiled too. @fill.lua:3 allocates 64B interpreted
-- and 256B compiled (80%); @main.lua:12, 48B interpreted: 70% of the
-- allocated bytes compiled.
function B.compiled_lines()
  local s = B.new():lfunc(0x100, '@fill.lua', 1):lfunc(0x200, '@main.lua', 0)
    :trace(1, 0x100, 3):trace(2, 0x100, 3):events({ version = B.EXTENDED })
  s:alloc(B.lua(0x100, 3), 0x10, 32)
  s:alloc(B.compiled(0x100, 3, 1), 0x20, 64)
  s:alloc(B.compiled(0x100, 3, 1), 0x30, 64)
  s:alloc(B.compiled(0x100, 3, 2), 0x40, 64)
  s:alloc(B.lua(0x100, 3), 0x50, 32)
  s:alloc(B.compiled(0x100, 3, 2), 0x60, 64)
  s:alloc(B.lua(0x200, 12), 0x70, 48)
  s:realloc(B.compiled(0x200, 11, 2), 0x70, 48, 0x80, 96)
  s:epilogue()
  return s
end

-- An extended stream whose peak is known.  Net bytes after each event:
--   1 alloc 100B at @p.lua:1          100
--   2 alloc 200B at @p.lua:2          300   (a peak)
--   3 free of 30B from before          270
--   4 free of the block of event 1     170
--   5 alloc 400B at @p.lua:3          570   THE PEAK
--   6 realloc of event 2's block to
--     50B at @p.lua:4                  420
--   7 free of event 5's block           20
--   8 alloc 300B at @p.lua:1          320
-- At the peak: @p.lua:3 holds 400B (1 block), @p.lua:2 200B (1 block),
-- the pseudo-site -30B (1 block freed).  Time marks: 1 ms before event
-- 1, 2 ms before event 4, 3 ms before event 6, 4 ms at the end.
function B.peak_payload()
  local s = B.new():lfunc(0x100, '@p.lua', 1):events({ version = B.EXTENDED })
  s:time(1000000)
  s:alloc(B.lua(0x100, 1), 0x10, 100)
  s:alloc(B.lua(0x100, 2), 0x20, 200)
  s:free(B.internal(), 0x9000, 30)
  s:time(2000000)
  s:free(B.internal(), 0x10, 100)
  s:alloc(B.lua(0x100, 3), 0x30, 400)
  s:time(3000000)
  s:realloc(B.lua(0x100, 4), 0x20, 200, 0x40, 50)
  s:free(B.internal(), 0x30, 400)
  s:alloc(B.lua(0x100, 1), 0x50, 300)
  s:time(4000000)
  s:epilogue()
  return s
end

-- A version 3 stream of short- and long-lived blocks.  With a limit of
-- 1 (ages in brackets: other allocations between a block's and its
-- release):
--   A 10B at @t.lua:1, freed at once            temporary [0]
--   B 20B at @t.lua:1, freed after C             temporary [1]
--   C 30B at @t.lua:2, reallocated after D, E    freed later [2]
--   C' 60B at @t.lua:1 (the realloc), freed      temporary [0]
--   D 40B, E 50B at @t.lua:2                     live at the end
-- plus a free of 8B allocated before the profile (not a block of it).
function B.temporaries()
  local s = B.new():lfunc(0x100, '@t.lua', 1):events()
  s:alloc(B.lua(0x100, 1), 0xa, 10)
  s:free(B.internal(), 0xa, 10)
  s:alloc(B.lua(0x100, 1), 0xb, 20)
  s:alloc(B.lua(0x100, 2), 0xc, 30)
  s:free(B.internal(), 0xb, 20)
  s:alloc(B.lua(0x100, 2), 0xd, 40)
  s:alloc(B.lua(0x100, 2), 0xe, 50)
  s:realloc(B.lua(0x100, 1), 0xc, 30, 0xf, 60)
  s:free(B.internal(), 0xf, 60)
  s:free(B.internal(), 0x9000, 8)
  s:epilogue()
  return s
end

-- An extended stream whose program idles for three hours after its last
-- event: 100B allocated at @idle.lua:2 at 1 ms, 60B of it freed at 2 ms
-- (a realloc to 40B at @idle.lua:3), then a last time mark at 3 h.
function B.idle_tail()
  local s = B.new():lfunc(0x100, '@idle.lua', 1):events({ version = B.EXTENDED })
  s:time(1000000)
  s:alloc(B.lua(0x100, 2), 0x10, 100)
  s:time(2000000)
  s:realloc(B.lua(0x100, 3), 0x10, 100, 0x20, 40)
  s:time(3 * 3600 * 1e9)
  s:epilogue()
  return s
end

-- An extended stream with a corrupted time mark of 2^62 ns (146 years):
-- 100B allocated at @far.lua:2 at 1 ms, then the mark, then 50B
-- allocated at @far.lua:3 and the first block freed.
function B.far_mark()
  local s = B.new():lfunc(0x100, '@far.lua', 1):events({ version = B.EXTENDED })
  s:time(1000000)
  s:alloc(B.lua(0x100, 2), 0x10, 100)
  s:time(2 ^ 62)
  s:alloc(B.lua(0x100, 3), 0x20, 50)
  s:free(B.internal(), 0x10, 100)
  s:epilogue()
  return s
end

-- An extended stream of calls two deep, for cumulative figures.  The
-- main chunk of @m.lua (line 9) calls a function defined at @m.lua:3
-- whose line 4 calls string.rep; the main chunk's line 12 calls it too:
--   stack 1  @m.lua:9                         1 alloc   10B, live
--   stack 2  @m.lua:4 <- @m.lua:9             2 allocs 100B each, 1 freed
--   stack 3  string.rep <- @m.lua:4 <- @m.lua:9   1 alloc 1000B, live
--            (charged to @m.lua:4, the Lua line calling it)
--   stack 4  string.rep <- @m.lua:4 <- @m.lua:12  1 alloc 500B, live
-- plus 16B allocated by a trace, live.
function B.nested_calls()
  local s = B.new():lfunc(0x100, '@m.lua', 0):lfunc(0x200, '@m.lua', 3)
    :cfunc(0x900, 'string.rep'):trace(1, 0x100, 20)
    :events({ version = B.EXTENDED })
  s:stack(1, { B.lua(0x100, 9) })
  s:stack(2, { B.lua(0x200, 4), B.lua(0x100, 9) })
  s:stack(3, { B.c(0x900), B.lua(0x200, 4), B.lua(0x100, 9) })
  s:stack(4, { B.c(0x900), B.lua(0x200, 4), B.lua(0x100, 12) })
  s:alloc(B.lua(0x100, 9, 1), 0x10, 10)
  s:alloc(B.lua(0x200, 4, 2), 0x20, 100)
  s:alloc(B.lua(0x200, 4, 2), 0x30, 100)
  s:alloc(B.lua(0x200, 4, 3), 0x40, 1000)
  s:alloc(B.lua(0x200, 4, 4), 0x50, 500)
  s:alloc(B.trace(1), 0x60, 16)
  s:free(B.internal(), 0x20, 100)
  s:epilogue()
  return s
end

return B
