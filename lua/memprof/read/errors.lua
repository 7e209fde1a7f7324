-- memprof.read.errors: what is wrong with a stream, said plainly.
--
-- The reader raises 'NAME: byte N: expected ..., found ...' for a bad
-- stream (stream:fail), and stops with a warning for a cut one (the
-- stop_* methods).  These are methods of a stream (memprof.read.stream
-- mixes them in), with the helpers the messages share:
-- errors.quote_bytes, and errors.TRUNCATED, raised and caught when the
-- file ends inside a record.

local words = require('memprof.words')

local M = {}

local methods = {}
M.methods = methods

local byte, format = string.byte, string.format
local plural = words.plural

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

-- The file ends at `offset`, where `what` was expected.  A stream that
-- follows a growing file (opts.follow) raises TRUNCATED in its headers
-- too: they are read again once the file has grown.
function methods:truncated(what, offset)
  if self.in_events or self.follow then
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
  if self.follow then
    return self:pause()
  end
  return self:stop(format('%s: the stream ends at byte %d in the middle ' ..
    'of an event (expected %s); %s', self.name, self:file_size_so_far(),
    what, covered(self.cursor.events, ' before it')))
end

function methods:stop_without_epilogue()
  if self.follow then
    return self:pause()
  end
  return self:stop(format('%s: the stream has no epilogue (the profile ' ..
    'was not stopped cleanly); %s', self.name,
    self.cursor.events == 0 and 'it holds no events' or
    'the report covers all ' .. plural(self.cursor.events, 'event')))
end

-- An event refers to a stack not defined before it.
function methods:undefined_stack(id, pos)
  local defined = #self.stacks == 0 and 'none is defined yet' or
    '1 to ' .. #self.stacks
  self:fail(self:offset_of(pos), format('expected the id of a stack ' ..
    'defined earlier in the stream (%s), found %d', defined, id))
end

M.TRUNCATED = TRUNCATED
M.quote_bytes = quote_bytes

return M
