-- memprof.gzip: gzip files without compression, and CRC-32.  Plain Lua
-- 5.1 and LuaJIT.
--
--   local gzip = require('memprof.gzip')
--   local file_bytes = gzip.wrap(data)   -- a valid .gz holding `data`
--   gzip.crc32(data)                     -- 0 .. 2^32-1
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
  return function(data)
    local crc = bnot(0)
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
  return function(data)
    local c0, c1, c2, c3 = 255, 255, 255, 255
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
function M.crc32(data, opts)
  if opts and opts.plain then
    plain_crc32 = plain_crc32 or crc32_plain()
    return plain_crc32(data)
  end
  if not crc32 then
    local ok, bit = pcall(require, 'bit')
    crc32 = ok and type(bit) == 'table' and crc32_with_bit(bit) or
      crc32_plain()
  end
  return crc32(data)
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
local function stored_blocks(data)
  local parts = {}
  local at = 1
  repeat
    local piece = data:sub(at, at + MAX_STORED - 1)
    at = at + #piece
    local final = at > #data and 1 or 0
    -- BFINAL, then block type 00; a stored block starts on a byte
    -- boundary, so the header takes the whole first byte.
    parts[#parts + 1] = char(final) .. le16(#piece) ..
      le16(MAX_STORED - #piece) .. piece
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

return M
