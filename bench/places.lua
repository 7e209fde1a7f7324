-- A generated profile with many distinct places, for the reporter's
-- memory and speed (make bench; the fuzzing case "400,000 places").
--
--   local places = require('places')
--   places.write(path, { places = 400000, stacks = true })
--
-- Every place is a line of a Lua function: functions of 100 lines each,
-- in chunks of 100 functions (@gen/mNNN.lua).  Each place allocates a
-- block of 64 bytes that stays live, and a block of 32 bytes that the
-- collector (INTERNAL) frees at once.  With stacks (the extended
-- format), each place has a stack of its own: the place, the line of its
-- chunk's main function that calls it (one per function), and a C
-- function; and a time mark every 1,000 places.  It uses the specs'
-- stream encoder (spec/helpers/stream_builder.lua), written to the file
-- every 1,000 places.

local B = require('helpers.stream_builder')

local M = {}

local LINES = 100
local FUNCTIONS_PER_CHUNK = 100
local FLUSH_EVERY = 1000

local function proto_addr(f)
  return 0x10000 + f * 0x100
end

local function main_addr(chunk)
  return 0x8000000 + chunk * 0x100
end

local function chunk_name(chunk)
  return string.format('@gen/m%03d.lua', chunk)
end

-- The symbol table: every function and each chunk's main function.
local function symbols(s, functions)
  for f = 0, functions - 1 do
    local chunk = math.floor(f / FUNCTIONS_PER_CHUNK)
    if f % FUNCTIONS_PER_CHUNK == 0 then
      s:lfunc(main_addr(chunk), chunk_name(chunk), 0)
    end
    s:lfunc(proto_addr(f), chunk_name(chunk), 1 + (f % FUNCTIONS_PER_CHUNK) * LINES)
  end
  s:cfunc(0x900, 'generated_c_function')
end

local function flush(s, file)
  file:write(s:bytes())
  s.parts, s.length = {}, 0
end

-- The events of place i (0-based), whose function is f.
local function place_events(s, i, f, stacks)
  local line = 1 + (f % FUNCTIONS_PER_CHUNK) * LINES + i % LINES
  local stack = nil
  if stacks then
    stack = i + 1
    local chunk = math.floor(f / FUNCTIONS_PER_CHUNK)
    s:stack(stack, { B.lua(proto_addr(f), line),
      B.lua(main_addr(chunk), 1 + f % FUNCTIONS_PER_CHUNK), B.c(0x900) })
    if i % 1000 == 0 then
      s:time(1000 * (i + 1))
    end
  end
  local live = 0x100000000 + i * 0x40
  local temporary = 0x200000000 + i * 0x20
  s:alloc(B.lua(proto_addr(f), line, stack), live, 64)
  s:alloc(B.lua(proto_addr(f), line, stack), temporary, 32)
  s:free(B.internal(), temporary, 32)
end

-- Writes the profile; opts.places (default 400,000), opts.stacks.
function M.write(path, opts)
  local count = opts.places or 400000
  local functions = math.ceil(count / LINES)
  local file = assert(io.open(path, 'wb'))
  local s = B.new()
  symbols(s, functions)
  s:events({ version = opts.stacks and B.EXTENDED or 3 })
  for i = 0, count - 1 do
    place_events(s, i, math.floor(i / LINES), opts.stacks)
    if i % FLUSH_EVERY == FLUSH_EVERY - 1 then
      flush(s, file)
    end
  end
  s:epilogue()
  flush(s, file)
  file:close()
end

return M
