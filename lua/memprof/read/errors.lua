-- memprof.read.errors: what is wrong with a stream, said plainly.
--
-- The reader raises 'NAME: byte N: expected ..., found ...' for a bad
-- stream (stream:fail), and stops with a warning for a cut one (the
-- stop_* methods); diagnose_event finds which field of an event the
-- fast decoder could not read.  These are methods of a stream
-- (memprof.read.stream mixes them in), with the helpers the messages
-- share: errors.quote_bytes, and errors.TRUNCATED, raised and caught when the file ends inside a
-- record.

local format_spec = require('memprof.read.format')
local words = require('memprof.words')

local M = {}

local methods = {}
M.methods = methods

local byte, format = string.byte, string.format
local plural = words.plural

local EXTENDED_VERSION = format_spec.EXTENDED_VERSION
local SOURCE_INTERNAL, SOURCE_LUA, SOURCE_C, SOURCE_TRACE =
  format_spec.SOURCE_INTERNAL, format_spec.SOURCE_LUA, format_spec.SOURCE_C,
  format_spec.SOURCE_TRACE
local KIND_SYMBOL, KIND_ALLOC, KIND_FREE, KIND_REALLOC =
  format_spec.KIND_SYMBOL, format_spec.KIND_ALLOC, format_spec.KIND_FREE,
  format_spec.KIND_REALLOC
local STACK_BIT = format_spec.STACK_BIT
local SAMPLING_RECORD = format_spec.SAMPLING_RECORD
local HEADER_SOURCE = format_spec.HEADER_SOURCE

-- The valid headers, as error messages list them.
local EXTENDED_HEADERS = '0x05-0x14, 0x18, 0x1c, 0x25-0x27, 0x29-0x2b, ' ..
  '0x2d-0x2f or 0x80'

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

-- Raised (and caught) when the file ends inside an event.
local TRUNCATED = setmetatable({}, {
  __tostring = function() return 'truncated symbol event' end })

-- Show bytes read from the file, escaping anything not printable.
local function quote_bytes(s)
  return "'" .. s:gsub('[^%w%p ]', function(c)
    return format('\\x%02x', byte(c))
  end) .. "'"
end

function methods:fail(offset, message)
  self:close()
  error(format('%s: byte %d: %s', self.name, offset, message), 0)
end

-- The file ends at `offset`, where `what` was expected.
function methods:truncated(what, offset)
  if self.in_events then
    self.truncated_what = what
    error(TRUNCATED, 0)
  end
  self:fail(offset, 'expected ' .. what .. ', found the end of the file')
end

-- What a report of a cut stream covers: `before` describes the events
-- that made it (' before it' or '').
local function covered(count, before)
  if count == 0 then
    return 'no event came' .. before
  end
  return 'the report covers the ' .. plural(count, 'event') .. before
end

function methods:stop_in_event(what)
  return self:stop(format('%s: the stream ends at byte %d in the middle ' ..
    'of an event (expected %s); %s', self.name, self:file_size_so_far(),
    what, covered(self.cursor.events, ' before it')))
end

function methods:stop_without_epilogue()
  return self:stop(format('%s: the stream has no epilogue (the profile ' ..
    'was not stopped cleanly); %s', self.name,
    self.cursor.events == 0 and 'it holds no events' or
    'the report covers all ' .. plural(self.cursor.events, 'event')))
end

-- Why an invalid header of the extended format is invalid, if there is
-- more to say than that it is.
local function extended_header_note(header)
  if header == SAMPLING_RECORD then
    return ', a sampling record, which is valid only right after the ' ..
      'event stream header, before the note of the heap at start'
  elseif header % 0x80 >= 0x40 then
    return ', a reserved header (bit 6 set) that this reader cannot skip'
  end
  local kind, source = header % 4, (header % STACK_BIT - header % 4) / 4
  if header >= STACK_BIT and header < 0x80 and kind ~= KIND_SYMBOL and
      source == SOURCE_TRACE then
    return ': trace events carry no stack'
  end
  return ''
end

-- The fast decoder could not decode the event at pos: find out why, with
-- the checked decoder, field by field.
function methods:diagnose_event(header, pos)
  local fields = {}
  for _, what in ipairs(LOCATION_FIELDS[HEADER_SOURCE[header]]) do
    fields[#fields + 1] = what
  end
  if header >= STACK_BIT then
    fields[#fields + 1] = HEADER_SOURCE[header] == SOURCE_INTERNAL and
      'the kind of an internal event' or 'a stack id'
  end
  for _, what in ipairs(EVENT_FIELDS[self.header_kind[header]]) do
    fields[#fields + 1] = what
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

-- An event refers to a stack not defined before it.
function methods:undefined_stack(id, pos)
  local defined = #self.stacks == 0 and 'none is defined yet' or
    '1 to ' .. #self.stacks
  self:fail(self:offset_of(pos), format('expected the id of a stack ' ..
    'defined earlier in the stream (%s), found %d', defined, id))
end

-- A header that is neither an event nor a record, at buffer position pos.
function methods:bad_header(header, pos)
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

-- A record header of kind 0 that names no record.
function methods:bad_record(header, pos)
  self:fail(self:offset_of(pos), format('expected %s, found 0x%02x',
    VALID_RECORDS[self.version], header))
end

M.TRUNCATED = TRUNCATED
M.quote_bytes = quote_bytes

return M
