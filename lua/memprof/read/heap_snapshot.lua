-- Reader of heap snapshots (docs/heap-format.md): the objects and the
-- references of a file written by memprof.snapshot(path, {format = 'heap'}).
--
-- It streams, one way: the file is read in chunks, and each call of
-- next_values() returns one record as values, so that a caller keeps only
-- what it needs (each_record runs it over a whole file, as the analysis
-- reads).  A truncated or corrupt file raises an error naming the file,
-- the byte offset and what was expected there (error(msg, 0)).
--
--   local heap = require('memprof.read.heap_snapshot')
--   heap.each_record(path, visit_object, visit_ref)  -- one pass, as values
--   local r = heap.open(path)        -- reads the header: r.header
--   r:next_values()                   -- the next record as values
--   r.epilogue                        -- {objects, refs, c_bytes} at the end

local format = string.format
local byte, sub = string.byte, string.sub

local M = {}

-- Versions 1 (no JIT traces) and 2 (no frame's line) are read too.
M.VERSION = 3
local CHUNK = 65536

-- Type bytes of the objects (~LJ_Txxx).
local TYPES = {
  [4] = 'string', [5] = 'upvalue', [6] = 'thread', [7] = 'proto',
  [8] = 'function', [9] = 'trace', [10] = 'cdata', [11] = 'table',
  [12] = 'userdata',
}
M.TYPES = TYPES

-- Kinds of references, by their number in the file.
local KINDS = {
  'root', 'field', 'index', 'key', 'by_key', 'by_number', 'by_bool',
  'by_lightud', 'metatable', 'env', 'upvalue', 'upvalue_value', 'proto',
  'constant', 'chunkname', 'stack', 'frame_function', 'trace',
}
M.KINDS = KINDS

local RECORD_OBJECT, RECORD_REF, RECORD_END = 0x01, 0x02, 0x7f
local WEAK = 0x80

local Reader = {}
Reader.__index = Reader

local function fail(self, offset, message)
  error(format('%s: byte %d: %s', self.name, offset, message), 0)
end

-- Makes at least n bytes available from self.pos, or fails naming the
-- byte where the file ends and the `what` that was expected there.
local function need(self, n, what)
  local have = #self.buf - self.pos + 1
  if have >= n then
    return
  end
  local parts = { sub(self.buf, self.pos) }
  while have < n do
    local chunk = self.file:read(CHUNK)
    if chunk == nil then
      fail(self, self.base + self.pos - 1 + have,
        format('the file is truncated: expected %s', what))
    end
    parts[#parts + 1] = chunk
    have = have + #chunk
  end
  self.base = self.base + self.pos - 1
  self.buf = table.concat(parts)
  self.pos = 1
end

local function offset(self)
  return self.base + self.pos - 1
end

local function u8(self, what)
  need(self, 1, what)
  local b = byte(self.buf, self.pos)
  self.pos = self.pos + 1
  return b
end

local function uleb(self, what)
  local at = offset(self)
  local v, scale = 0, 1
  for _ = 1, 10 do
    local b = u8(self, what)
    if b < 0x80 then
      return v + b * scale
    end
    v = v + (b - 0x80) * scale
    scale = scale * 128
  end
  fail(self, at, format('%s is a ULEB128 number of more than 10 bytes', what))
end

local function bytes(self, n, what)
  need(self, n, what)
  local s = sub(self.buf, self.pos, self.pos + n - 1)
  self.pos = self.pos + n
  return s
end

local function text(self, what)
  return bytes(self, uleb(self, what .. "'s length"), what)
end

-- An IEEE 754 double from its 8 little-endian bytes.
local function double(s)
  local b = { byte(s, 1, 8) }
  local sign = b[8] >= 0x80 and -1 or 1
  local exp = (b[8] % 0x80) * 16 + math.floor(b[7] / 16)
  local mant = b[7] % 16
  for i = 6, 1, -1 do
    mant = mant * 256 + b[i]
  end
  if exp == 0x7ff then
    return mant == 0 and sign * math.huge or 0 / 0
  elseif exp == 0 then
    return sign * math.ldexp(mant, -1074)
  end
  return sign * math.ldexp(mant + 2 ^ 52, exp - 1075)
end

local function unzigzag(v)
  if v % 2 == 1 then
    return -(v + 1) / 2
  end
  return v / 2
end

local function read_header(self)
  local magic = bytes(self, 3, 'the magic "ljh"')
  if magic ~= 'ljh' then
    fail(self, 0, format('expected the magic "ljh" of a heap snapshot, got %q',
      magic))
  end
  local version = u8(self, 'the version')
  if version < 1 or version > M.VERSION then
    fail(self, 3, format('expected version 1 to %d, got %d', M.VERSION,
      version))
  end
  local flags = uleb(self, 'the flags')
  local header = { version = version, gc64 = flags % 2 == 1,
    cdata_sizes_unknown = math.floor(flags / 2) % 2 == 1 }
  local at = offset(self)
  local running = uleb(self, 'the profile note')
  if running > 1 then
    fail(self, at, format('expected a profile note of 0 or 1, got %d',
      running))
  end
  if running == 1 then
    header.profile = { written = uleb(self, "the profile's bytes written") }
  end
  -- JIT traces alive (nil: not known); whether the walk visited them
  -- (version 2), or why not.
  local traces = uleb(self, 'the count of JIT traces')
  header.traces = traces > 0 and traces - 1 or nil
  header.traces_visited = version >= 2 and
    uleb(self, 'whether traces were visited') == 1
  if version >= 2 and not header.traces_visited then
    header.traces_why = text(self, 'why traces were not visited')
  end
  -- When (seconds since the epoch, nil: not known) and in which process.
  local time = uleb(self, 'the time the snapshot was taken')
  header.time = time > 0 and time or nil
  header.pid = uleb(self, 'the process id')
  return header
end

-- The values after an object's size, by type (see next_values).
local function object_values(self, t)
  if t == 'table' then
    local asize = uleb(self, "a table's array size")
    local nodes = uleb(self, "a table's hash size")
    local weak = u8(self, "a table's weak mode")
    if weak > 3 then
      fail(self, offset(self) - 1,
        format('expected a weak mode from 0 to 3, got %d', weak))
    end
    return asize, nodes, weak
  elseif t == 'string' then
    local len = uleb(self, "a string's length")
    local kept = uleb(self, "a string's kept length")
    if kept > len then
      fail(self, offset(self), format('a string of %d bytes keeps %d', len,
        kept))
    end
    return len, bytes(self, kept, "a string's text"), kept < len
  elseif t == 'function' then
    local ffid = u8(self, "a function's id")
    local nupvalues = uleb(self, "a function's upvalue count")
    if ffid ~= 0 then
      return ffid, nupvalues, uleb(self, "a C function's address")
    end
    return ffid, nupvalues
  elseif t == 'proto' then
    return uleb(self, "a prototype's first line"),
      uleb(self, "a prototype's line count")
  elseif t == 'thread' then
    return uleb(self, "a thread's stack size"),
      uleb(self, "a thread's used slots")
  elseif t == 'userdata' then
    return uleb(self, "a userdata's length")
  elseif t == 'trace' then
    return uleb(self, "a trace's number")
  end
end

-- The values after a reference's kind: its name, by kind.
local NAMES = {
  root = function(self) return text(self, "a root's name") end,
  field = function(self) return uleb(self, "a field's key string") end,
  index = function(self) return unzigzag(uleb(self, 'an index')) end,
  by_key = function(self) return uleb(self, 'a key object') end,
  by_number = function(self)
    return double(bytes(self, 8, 'a number key'))
  end,
  by_bool = function(self) return u8(self, 'a boolean key') == 1 end,
  by_lightud = function(self) return uleb(self, 'a light userdata key') end,
  upvalue = function(self)
    return uleb(self, "an upvalue's index"), text(self, "an upvalue's name")
  end,
  constant = function(self) return uleb(self, "a constant's index") end,
  stack = function(self)
    return uleb(self, 'a stack slot'), uleb(self, "a slot's frame level"),
      text(self, "a slot's local name")
  end,
  -- The line the frame runs (version 3; nil: not known).
  frame_function = function(self)
    local slot, level = uleb(self, 'a stack slot'),
      uleb(self, "a frame's level")
    local line = self.header.version >= 3 and uleb(self, "a frame's line")
    return slot, level, line ~= 0 and line or nil
  end,
}

local function read_end(self)
  local e = {}
  e.objects = uleb(self, "the epilogue's object count")
  e.refs = uleb(self, "the epilogue's reference count")
  e.c_bytes = uleb(self, "the epilogue's C memory")
  local at = offset(self)
  if bytes(self, 3, 'the end magic "end"') ~= 'end' then
    fail(self, at, 'expected the end magic "end"')
  end
  if e.objects ~= self.objects or e.refs ~= self.refs then
    fail(self, at, format('the epilogue counts %d objects and %d ' ..
      'references, the file has %d and %d', e.objects, e.refs, self.objects,
      self.refs))
  end
  return e
end

-- The next record as values, without a table, or nil after the epilogue:
--   'object', addr, type, size, a, b, c, offset
--     table: asize, nodes, weak (bit 0: keys, bit 1: values);
--     string: len, text, truncated; function: ffid, nupvalues, cfunc (C);
--     proto: firstline, numline; thread: stack_slots, used_slots;
--     userdata: len; trace: traceno
--   'ref', from, to, kind, weak, a, b, c, offset
--     root: name; field: key (the key string's address); index: index;
--     by_key: key; by_number: number; by_bool: bool; by_lightud: pointer;
--     upvalue: index, name; constant: index; stack: slot, level, name;
--     frame_function: slot, level, line (nil: not known)
function Reader:next_values()
  if self.epilogue then
    return nil
  end
  local at = offset(self)
  local tag = u8(self, 'a record or the epilogue')
  if tag == RECORD_OBJECT then
    self.objects = self.objects + 1
    local addr = uleb(self, "an object's address")
    local tat = offset(self)
    local tb = u8(self, "an object's type")
    local t = TYPES[tb]
    if t == nil then
      fail(self, tat, format('expected an object type, got %d', tb))
    end
    local size = uleb(self, "an object's size")
    local a, b, c = object_values(self, t)
    return 'object', addr, t, size, a, b, c, at
  elseif tag == RECORD_REF then
    self.refs = self.refs + 1
    local from = uleb(self, "a reference's source")
    local to = uleb(self, "a reference's target")
    local kat = offset(self)
    local k = u8(self, "a reference's kind")
    local kind = KINDS[k % WEAK]
    if kind == nil then
      fail(self, kat, format('expected a reference kind from 1 to %d, got %d',
        #KINDS, k % WEAK))
    end
    local name = NAMES[kind]
    local a, b, c
    if name then
      a, b, c = name(self)
    end
    return 'ref', from, to, kind, k >= WEAK, a, b, c, at
  elseif tag == RECORD_END then
    self.epilogue = read_end(self)
    return nil
  end
  fail(self, at, format('expected a record (1: object, 2: reference, ' ..
    '127: end), got %d', tag))
end

function Reader:close()
  if self.file then
    self.file:close()
    self.file = nil
  end
end

-- Opens a snapshot and reads its header (r.header).  `file` may be an open
-- file handle (then `name` names it in messages).
function M.open(path, file)
  local f = file
  if f == nil then
    local err
    f, err = io.open(path, 'rb')
    if f == nil then
      error(err, 0)
    end
  end
  local self = setmetatable({ name = path, file = f, buf = '', pos = 1,
    base = 0, objects = 0, refs = 0 }, Reader)
  self.header = read_header(self)
  return self
end

-- Reads the records of the snapshot at `path`, as a stream: each object's
-- values (next_values' after 'object') to visit_object and each
-- reference's to visit_ref (either may be nil); returns the reader (its
-- header and epilogue).  A reader of a large file reads it once per
-- pass, keeping only what each pass needs.
-- The collector's pause while a file is read: the reader makes a string
-- or two per record, garbage at once, and the live data are a few big
-- arrays the collector does not look into, so a cycle costs little and
-- the default pause (200: the heap doubles before a cycle starts) would
-- only let the garbage pile up.
local READING_GC_PAUSE = 100

function M.each_record(path, visit_object, visit_ref)
  local r = M.open(path)
  local pause = collectgarbage('setpause', READING_GC_PAUSE)
  local ok, err = pcall(function()
    while true do
      local rec, x, y, z, a, b, c, d, e = r:next_values()
      if rec == 'object' then
        if visit_object then visit_object(x, y, z, a, b, c, d) end
      elseif rec == 'ref' then
        if visit_ref then visit_ref(x, y, z, a, b, c, d, e) end
      else
        break
      end
    end
  end)
  collectgarbage('setpause', pause)
  r:close()
  if not ok then error(err, 0) end
  return r
end

return M
