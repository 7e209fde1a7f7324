-- memprof.encode.protobuf: a small Protocol Buffers encoder (what the pprof
-- export needs: varints, length-delimited fields, packed repeated
-- varints).
--
--   local pb = require('memprof.encode.protobuf')
--   local message = pb.message()
--   message:varint(1, 42)              -- field 1, wire type 0
--   message:bytes(2, 'text')           -- field 2, wire type 2
--   message:message(3, other)          -- an embedded message
--   message:packed(4, { 1, 2, 3 })     -- packed repeated varints
--   local encoded = message:encode()
--   local streamed = pb.stream(emit)   -- a message whose fields go to
--                                      -- emit(bytes) as they are added,
--                                      -- in parts (key, length, bytes)
--                                      -- (no encode(): a top-level
--                                      -- message, never embedded)
--
-- Numbers must be whole and between 0 and 2^53 (exact in a Lua number):
-- every value of a memory profile is, and the encoder refuses others
-- rather than write a wrong negative number.

local M = {}

local char, concat, floor = string.char, table.concat, math.floor
local unpack = unpack

local WIRE_VARINT, WIRE_BYTES = 0, 2

-- The bytes of a varint of more than one byte, gathered here (one list
-- for every call: a profile has millions of varints, and a list each
-- was most of the export's garbage).
local varint_bytes = {}

-- The ULEB128 bytes of a whole number in [0, 2^53].
function M.varint(n)
  assert(type(n) == 'number' and n >= 0 and n == floor(n) and n <= 2 ^ 53,
    'protobuf: expected a whole number between 0 and 2^53')
  if n < 128 then
    return char(n)
  end
  local count = 0
  repeat
    local low = n % 128
    n = (n - low) / 128
    if n > 0 then
      low = low + 128
    end
    count = count + 1
    varint_bytes[count] = low
  until n == 0
  return char(unpack(varint_bytes, 1, count))
end

-- The key of a field, made once for each field and wire type.
local keys = {}

local function key(field, wire)
  local at = field * 8 + wire
  local bytes = keys[at]
  if not bytes then
    bytes = M.varint(at)
    keys[at] = bytes
  end
  return bytes
end

local Message = {}
Message.__index = Message

function M.message()
  return setmetatable({ parts = {} }, Message)
end

-- A field is added in parts (key, length, bytes), not joined first:
-- the parts are joined once, by encode(), or written one by one.
function Message:add(bytes)
  self.parts[#self.parts + 1] = bytes
  return self
end

function Message:varint(field, n)
  self:add(key(field, WIRE_VARINT))
  return self:add(M.varint(n))
end

-- A varint field left out when zero (the default value of proto3).
function Message:optional(field, n)
  if n == 0 then
    return self
  end
  return self:varint(field, n)
end

function Message:bytes(field, bytes)
  self:add(key(field, WIRE_BYTES))
  self:add(M.varint(#bytes))
  return self:add(bytes)
end

function Message:message(field, message)
  return self:bytes(field, message:encode())
end

-- (One list of the varints for every call, as above.)
local packed_parts = {}

function Message:packed(field, numbers)
  local count = #numbers
  for i = 1, count do
    packed_parts[i] = M.varint(numbers[i])
  end
  return self:bytes(field, concat(packed_parts, '', 1, count))
end

function Message:encode()
  return concat(self.parts)
end

-- A message written as it is made: each field is handed to emit(bytes)
-- at once, so that a large message (a pprof profile) is never held
-- whole.  A top-level message has no length before it, which is what
-- lets its fields go out one by one.
local Streamed = setmetatable({}, { __index = Message })
Streamed.__index = Streamed

function M.stream(emit)
  return setmetatable({ emit = emit }, Streamed)
end

function Streamed:add(bytes)
  self.emit(bytes)
  return self
end

function Streamed.encode()
  error('protobuf: a streamed message has no encoding to return', 2)
end

return M
