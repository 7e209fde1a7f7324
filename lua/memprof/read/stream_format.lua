-- memprof.read.stream_format: the constants of the profile stream's
-- format (docs/format.md) that the reader's parts share: versions,
-- headers, sources and kinds, record kinds, and the fields of each event
-- as the messages of a bad stream name them.

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

return {
  CHUNK_SIZE = CHUNK_SIZE,
  MAX_EVENT = MAX_EVENT,
  MAX_SCALE = MAX_SCALE,
  OVERRUN = OVERRUN,
  SYMTAB_VERSIONS = SYMTAB_VERSIONS,
  SUPPORTED_VERSIONS = SUPPORTED_VERSIONS,
  EXTENDED_VERSION = EXTENDED_VERSION,
  SOURCE_INTERNAL = SOURCE_INTERNAL,
  SOURCE_LUA = SOURCE_LUA,
  SOURCE_C = SOURCE_C,
  SOURCE_TRACE = SOURCE_TRACE,
  SOURCE_STACK = SOURCE_STACK,
  SOURCE_TIME = SOURCE_TIME,
  SOURCE_NOTE = SOURCE_NOTE,
  NOTE_HEAP_AT_START = NOTE_HEAP_AT_START,
  NOTE_COLLECTED_AT_STOP = NOTE_COLLECTED_AT_STOP,
  NOTE_COMPILED_CODE = NOTE_COMPILED_CODE,
  COMPILED_MODES = COMPILED_MODES,
  COMPILED_WHYS = COMPILED_WHYS,
  KIND_SYMBOL = KIND_SYMBOL,
  KIND_ALLOC = KIND_ALLOC,
  KIND_FREE = KIND_FREE,
  KIND_REALLOC = KIND_REALLOC,
  KIND_NAMES = KIND_NAMES,
  EPILOGUE = EPILOGUE,
  SAMPLING_RECORD = SAMPLING_RECORD,
  SAMPLING_POISSON_BYTES = SAMPLING_POISSON_BYTES,
  STACK_BIT = STACK_BIT,
  COMPILED_BIT = COMPILED_BIT,
  MAX_FRAMES = MAX_FRAMES,
  FRAME_LUA = FRAME_LUA,
  FRAME_C = FRAME_C,
  HEADER_SOURCE = HEADER_SOURCE,
  HEADER_KIND_V3 = HEADER_KIND_V3,
  HEADER_KIND_EXTENDED = HEADER_KIND_EXTENDED,
  EXTENDED_HEADERS = EXTENDED_HEADERS,
  VALID_HEADERS = VALID_HEADERS,
  VALID_WITH_SOURCE = VALID_WITH_SOURCE,
  VALID_RECORDS = VALID_RECORDS,
  LOCATION_FIELDS = LOCATION_FIELDS,
  EVENT_FIELDS = EVENT_FIELDS,
}
