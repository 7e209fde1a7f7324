-- memprof.read.format: the constants of the profile format
-- (docs/format.md) that decoding and diagnosis share: versions,
-- sources, kinds, and the kind and source of the headers of each
-- version.

local M = {}

-- Versions of the format this reader understands: the symbol table's,
-- and the event stream's (3, Tarantool's; 100, the extended format).
local SYMTAB_VERSIONS = { 3 }
local SUPPORTED_VERSIONS = { 3, 100 }
local EXTENDED_VERSION = 100

local SOURCE_INTERNAL, SOURCE_LUA, SOURCE_C, SOURCE_TRACE = 1, 2, 3, 4
-- Sources of the extended records of kind 0.
local SOURCE_STACK, SOURCE_TIME, SOURCE_NOTE = 5, 6, 7
local NOTE_HEAP_AT_START, NOTE_COLLECTED_AT_STOP = 1, 2
-- What the VM was doing during an internal event of the extended format.
local INTERNAL_KINDS = { 'garbage collector', 'JIT compiler', 'trace exit',
  'interpreter' }
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
local MAX_FRAMES = 64
local FRAME_LUA, FRAME_C = 0x08, 0x0c
-- The first line of LuaJIT's built-ins written in Lua (~0 as 32 bits; a
-- writer that widens it as a signed number gives 2^64 - 1).
local BUILTIN_FIRSTLINE = 2 ^ 32 - 1

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

M.SYMTAB_VERSIONS = SYMTAB_VERSIONS
M.SUPPORTED_VERSIONS = SUPPORTED_VERSIONS
M.EXTENDED_VERSION = EXTENDED_VERSION
M.SOURCE_INTERNAL = SOURCE_INTERNAL
M.SOURCE_LUA = SOURCE_LUA
M.SOURCE_C = SOURCE_C
M.SOURCE_TRACE = SOURCE_TRACE
M.SOURCE_STACK = SOURCE_STACK
M.SOURCE_TIME = SOURCE_TIME
M.SOURCE_NOTE = SOURCE_NOTE
M.NOTE_HEAP_AT_START = NOTE_HEAP_AT_START
M.NOTE_COLLECTED_AT_STOP = NOTE_COLLECTED_AT_STOP
M.INTERNAL_KINDS = INTERNAL_KINDS
M.KIND_SYMBOL = KIND_SYMBOL
M.KIND_ALLOC = KIND_ALLOC
M.KIND_FREE = KIND_FREE
M.KIND_REALLOC = KIND_REALLOC
M.KIND_NAMES = KIND_NAMES
M.EPILOGUE = EPILOGUE
M.SAMPLING_RECORD = SAMPLING_RECORD
M.SAMPLING_POISSON_BYTES = SAMPLING_POISSON_BYTES
M.STACK_BIT = STACK_BIT
M.MAX_FRAMES = MAX_FRAMES
M.FRAME_LUA = FRAME_LUA
M.FRAME_C = FRAME_C
M.BUILTIN_FIRSTLINE = BUILTIN_FIRSTLINE
M.HEADER_SOURCE = HEADER_SOURCE
M.HEADER_KIND_V3 = HEADER_KIND_V3
M.HEADER_KIND_EXTENDED = HEADER_KIND_EXTENDED

return M
