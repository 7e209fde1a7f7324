-- memprof.encode.gzip: gzip files without compression, and CRC-32.  Plain Lua
-- 5.1 and LuaJIT.
--
--   local gzip = require('memprof.encode.gzip')
--   local file_bytes = gzip.wrap(data)   -- a valid .gz holding `data`
--   gzip.crc32(data [, opts [, crc]])    -- 0 .. 2^32-1; with crc, the
--                                        -- CRC-32 of what crc was of,
--                                        -- followed by data
--   local w = gzip.writer(out [, opts])  -- the same file, written to
--   w:write(piece) ... w:close()         -- out (a file handle) as its
--                                        -- content comes, in pieces
--
-- The deflate stream is made of "stored" blocks (RFC 1951, block type
-- 0: up to 65535 bytes copied as they are), which every inflater reads;
-- the file is a little larger than its content, and no library is
-- needed.  The gzip framing is RFC 1952: a 10-byte header, the blocks,
-- then the CRC-32 and the size of the content.

local M = {}

local byte, char, concat, floor = string.byte, string.char, table.concat,
  math.floor

local POLYNOMIAL = 0xEDB88320
local MAX_STORED = 65535

-- CRC-32 with the `bit` library (LuaJIT, Tarantool) ---------------------

local function crc32_with_bit(bit)
  local band, bxor, rshift, bnot = bit.band, bit.bxor, bit.rshift, bit.bnot
  local table32 = {}
  for n = 0, 255 do
    local c = n
    for _ = 1, 8 do
      if band(c, 1) == 1 then
        c = bxor(rshift(c, 1), POLYNOMIAL)
      else
        c = rshift(c, 1)
      end
    end
    table32[n] = c
  end
  return function(data, previous)
    local crc = bnot(previous)
    for i = 1, #data do
      crc = bxor(rshift(crc, 8), table32[band(bxor(crc, byte(data, i)), 255)])
    end
    crc = bnot(crc)
    if crc < 0 then
      crc = crc + 2 ^ 32
    end
    return crc
  end
end

-- CRC-32 in plain Lua: the register is kept as four bytes, and bytes are
-- combined through a table of the XOR of every pair of bytes.

local function xor_table()
  local nibble = {}
  for a = 0, 15 do
    for b = 0, 15 do
      local x, bit_value, ra, rb = 0, 1, a, b
      for _ = 1, 4 do
        if ra % 2 ~= rb % 2 then
          x = x + bit_value
        end
        ra, rb, bit_value = floor(ra / 2), floor(rb / 2), bit_value * 2
      end
      nibble[a * 16 + b] = x
    end
  end
  local xor = {}
  for a = 0, 255 do
    local a_high, a_low = floor(a / 16), a % 16
    for b = 0, 255 do
      xor[a * 256 + b] = nibble[a_high * 16 + floor(b / 16)] * 16 +
        nibble[a_low * 16 + b % 16]
    end
  end
  return xor
end

local function crc32_plain()
  local xor = xor_table()
  -- The entry of each byte value, as four bytes, least significant first.
  local t0, t1, t2, t3 = {}, {}, {}, {}
  local p0, p1, p2, p3 = 0x20, 0x83, 0xB8, 0xED     -- POLYNOMIAL's bytes
  for n = 0, 255 do
    local c0, c1, c2, c3 = n, 0, 0, 0
    for _ = 1, 8 do
      local odd = c0 % 2 == 1
      -- Shift the four bytes right by one bit.
      c0 = floor(c0 / 2) + (c1 % 2) * 128
      c1 = floor(c1 / 2) + (c2 % 2) * 128
      c2 = floor(c2 / 2) + (c3 % 2) * 128
      c3 = floor(c3 / 2)
      if odd then
        c0, c1 = xor[c0 * 256 + p0], xor[c1 * 256 + p1]
        c2, c3 = xor[c2 * 256 + p2], xor[c3 * 256 + p3]
      end
    end
    t0[n], t1[n], t2[n], t3[n] = c0, c1, c2, c3
  end
  return function(data, previous)
    -- The state is the complement of the previous CRC, byte by byte.
    local p0 = previous % 256
    local p1 = floor(previous / 256) % 256
    local p2 = floor(previous / 65536) % 256
    local p3 = floor(previous / 16777216) % 256
    local c0, c1, c2, c3 = 255 - p0, 255 - p1, 255 - p2, 255 - p3
    for i = 1, #data do
      local index = xor[c0 * 256 + byte(data, i)]
      c0 = xor[c1 * 256 + t0[index]]
      c1 = xor[c2 * 256 + t1[index]]
      c2 = xor[c3 * 256 + t2[index]]
      c3 = t3[index]
    end
    return (255 - c0) + (255 - c1) * 256 + (255 - c2) * 65536 +
      (255 - c3) * 16777216
  end
end

local crc32, plain_crc32

-- The CRC-32 of a string (as gzip and zlib compute it), 0 .. 2^32-1.
-- opts.plain: use the plain Lua version even when `bit` is there.
-- The CRC-32 of data; with `previous` (the CRC-32 of some bytes), that
-- of those bytes followed by data, so that a CRC can be computed piece
-- by piece.
function M.crc32(data, opts, previous)
  if opts and opts.plain then
    plain_crc32 = plain_crc32 or crc32_plain()
    return plain_crc32(data, previous or 0)
  end
  if not crc32 then
    local ok, bit = pcall(require, 'bit')
    crc32 = ok and type(bit) == 'table' and crc32_with_bit(bit) or
      crc32_plain()
  end
  return crc32(data, previous or 0)
end

-- Gzip framing -----------------------------------------------------------

-- n (0 .. 2^32-1) as 4 bytes, least significant first.
local function le32(n)
  local b0 = n % 256
  n = (n - b0) / 256
  local b1 = n % 256
  n = (n - b1) / 256
  local b2 = n % 256
  return char(b0, b1, b2, (n - b2) / 256 % 256)
end

local function le16(n)
  return char(n % 256, floor(n / 256))
end

-- The deflate stream of `data` in stored blocks.
-- One stored block of at most MAX_STORED bytes; final: the last one.
local function stored_block(piece, final)
  -- BFINAL, then block type 00; a stored block starts on a byte
  -- boundary, so the header takes the whole first byte.
  return char(final and 1 or 0) .. le16(#piece) ..
    le16(MAX_STORED - #piece) .. piece
end

local function stored_blocks(data)
  local parts = {}
  local at = 1
  repeat
    local piece = data:sub(at, at + MAX_STORED - 1)
    at = at + #piece
    parts[#parts + 1] = stored_block(piece, at > #data)
  until at > #data
  return concat(parts)
end

-- Magic 1f 8b, method 8 (deflate), no flags, no time, no extra flags,
-- operating system 255 (unknown).
local HEADER = '\31\139\8\0\0\0\0\0\0\255'

-- A gzip file whose content is `data`.
function M.wrap(data, opts)
  return HEADER .. stored_blocks(data) .. le32(M.crc32(data, opts)) ..
    le32(#data % 2 ^ 32)
end

-- The streaming writer: the same bytes as wrap() of all the pieces
-- joined, without ever holding them joined.  The pieces wait in a list
-- until they make more than a block; then full blocks are written, and
-- what is left waits.  The last block, written by close(), holds 1 to
-- MAX_STORED bytes (none if there was no content), as wrap() makes it.
local Writer = {}
Writer.__index = Writer

function M.writer(out, opts)
  out:write(HEADER)
  return setmetatable({ out = out, opts = opts, crc = 0, size = 0,
    waiting = {}, waiting_bytes = 0 }, Writer)
end

-- Writes the full blocks of `data` but the last MAX_STORED bytes or
-- fewer, and returns those.
function Writer:blocks_of(data)
  local at = 1
  while #data - at + 1 > MAX_STORED do
    self.out:write(stored_block(data:sub(at, at + MAX_STORED - 1), false))
    at = at + MAX_STORED
  end
  return data:sub(at)
end

function Writer:write(piece)
  self.crc = M.crc32(piece, self.opts, self.crc)
  self.size = self.size + #piece
  local waiting = self.waiting
  waiting[#waiting + 1] = piece
  self.waiting_bytes = self.waiting_bytes + #piece
  if self.waiting_bytes > MAX_STORED then
    local rest = self:blocks_of(concat(waiting))
    self.waiting = { rest }
    self.waiting_bytes = #rest
  end
end

function Writer:close()
  local out = self.out
  out:write(stored_block(concat(self.waiting), true))
  out:write(le32(self.crc), le32(self.size % 2 ^ 32))
  self.waiting, self.waiting_bytes = {}, 0
end

return M
