-- memprof.encode.gzip: gzip files without compression, and CRC-32.
--
--   local gzip = require('memprof.encode.gzip')
--   local file_bytes = gzip.wrap(data)   -- a valid .gz holding `data`
--   gzip.crc32(data [, crc])             -- 0 .. 2^32-1; with crc, the
--                                        -- CRC-32 of what crc was of,
--                                        -- followed by data
--   local w = gzip.writer(out)           -- the same file, written to
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

local crc32

-- The CRC-32 of a string (as gzip and zlib compute it), 0 .. 2^32-1;
-- with `previous` (the CRC-32 of some bytes), that of those bytes
-- followed by data, so that a CRC can be computed piece by piece.
function M.crc32(data, previous)
  crc32 = crc32 or crc32_with_bit(require('bit'))
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
function M.wrap(data)
  return HEADER .. stored_blocks(data) .. le32(M.crc32(data)) ..
    le32(#data % 2 ^ 32)
end

-- The streaming writer: the same bytes as wrap() of all the pieces
-- joined, without ever holding them joined.  The pieces wait in a list
-- until they make more than a block; then full blocks are written, and
-- what is left waits.  The last block, written by close(), holds 1 to
-- MAX_STORED bytes (none if there was no content), as wrap() makes it.
local Writer = {}
Writer.__index = Writer

function M.writer(out)
  out:write(HEADER)
  return setmetatable({ out = out, crc = 0, size = 0,
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
  self.crc = M.crc32(piece, self.crc)
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
