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
-- Locations: B.internal(), B.lua(proto_addr, line), B.c(addr),
-- B.trace(traceno).  s:size() is the number of bytes written so far,
-- which is the offset of the next record.

local B = {}

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

function B.internal()
  return { source = 'internal' }
end

function B.lua(proto_addr, line)
  return { source = 'lua', proto_addr, line }
end

function B.c(addr)
  return { source = 'c', addr }
end

function B.trace(traceno)
  return { source = 'trace', traceno }
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
  return self:raw(char(0x80) .. 'ljm' .. char(opts.version or 3) ..
    '\0\0\0')
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

function Builder:event(kind, loc)
  self:raw(char(kind + SOURCE_BITS[loc.source]))
  return self:numbers(unpack(loc))
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

return B
