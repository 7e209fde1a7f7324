-- Heap snapshot files built byte by byte (docs/heap-format.md), for the
-- specs of the reports: known graphs with known sizes.
--
--   local H = require('helpers.heap_builder')
--   local b = H.new({ profile = WRITTEN, traces = N })
--   local s = b:string('name', 30)          -- objects: their addresses
--   local t = b:table(100, { weak = 1 })
--   b:root('registry', t); b:field(t, s, other); b:index(t, 1, other)
--   b:stack(thread, v, slot, level, name); b:frame_function(thread, f,
--   slot, level, line)
--   b:bytes(), b:write(path)

local M = {}

local char, concat = string.char, table.concat

local TYPES = { string = 4, upvalue = 5, thread = 6, proto = 7,
  ['function'] = 8, cdata = 10, table = 11, userdata = 12 }
local KINDS = { root = 1, field = 2, index = 3, key = 4, by_key = 5,
  metatable = 9, env = 10, upvalue = 11, upvalue_value = 12, proto = 13,
  constant = 14, chunkname = 15, stack = 16, frame_function = 17 }
local WEAK = 0x80

local function uleb(n)
  local out = {}
  repeat
    local b = n % 128
    n = (n - b) / 128
    out[#out + 1] = char(n > 0 and b + 128 or b)
  until n == 0
  return concat(out)
end

local function text(s)
  return uleb(#s) .. s
end

local Builder = {}
Builder.__index = Builder

-- The time and process id of the snapshots built (unless opts say).
M.TIME, M.PID = 1795900000, 4242

-- opts.version: the format's version (default 1; from 2 the traces are
-- written visited, from 3 a frame's function has its line).
function M.new(opts)
  opts = opts or {}
  local version = opts.version or 1
  local flags = (opts.gc64 == false and 0 or 1) + (opts.cdata_unknown and 2 or 0)
  local head = 'ljh' .. char(version) .. uleb(flags)
  head = head .. (opts.profile and uleb(1) .. uleb(opts.profile) or uleb(0))
  head = head .. uleb(opts.traces and opts.traces + 1 or 0)
  if version >= 2 then head = head .. uleb(1) end
  head = head .. uleb(opts.time or M.TIME) .. uleb(opts.pid or M.PID)
  return setmetatable({ parts = { head }, next_addr = 0x1000, objects = 0,
    refs = 0, version = version }, Builder)
end

function Builder:object(t, size, fields)
  local addr = self.next_addr
  self.next_addr = addr + 0x100
  self.objects = self.objects + 1
  self.parts[#self.parts + 1] = char(1) .. uleb(addr) .. char(TYPES[t]) ..
    uleb(size) .. (fields or '')
  return addr
end

function Builder:string(s, size)
  return self:object('string', size or 24 + #s, uleb(#s) .. text(s))
end

function Builder:table(size, opts)
  opts = opts or {}
  return self:object('table', size, uleb(opts.asize or 0) ..
    uleb(opts.nodes or 0) .. char(opts.weak or 0))
end

function Builder:func(size, nupvalues)
  return self:object('function', size, char(0) .. uleb(nupvalues or 0))
end

-- A built-in (fast function number ffid > 1), or with `cfunc` a C
-- function (ffid 1) at that address (a built-in's is its handler's).
function Builder:builtin(size, ffid, cfunc)
  return self:object('function', size, char(cfunc and 1 or ffid) ..
    uleb(0) .. uleb(cfunc or 0x5000))
end

function Builder:proto(size, firstline, numline)
  return self:object('proto', size, uleb(firstline) .. uleb(numline or 1))
end

function Builder:upvalue(size)
  return self:object('upvalue', size)
end

function Builder:thread(size, slots, used)
  return self:object('thread', size, uleb(slots or 0) .. uleb(used or 0))
end

function Builder:ref(from, to, kind, name, weak)
  self.refs = self.refs + 1
  self.parts[#self.parts + 1] = char(2) .. uleb(from) .. uleb(to) ..
    char(KINDS[kind] + (weak and WEAK or 0)) .. (name or '')
end

function Builder:root(name, to) self:ref(0, to, 'root', text(name)) end
function Builder:field(from, key, to) self:ref(from, to, 'field', uleb(key)) end
function Builder:key(from, to, weak) self:ref(from, to, 'key', nil, weak) end
function Builder:env(from, to) self:ref(from, to, 'env') end
function Builder:proto_ref(from, to) self:ref(from, to, 'proto') end
function Builder:chunkname(from, to) self:ref(from, to, 'chunkname') end
function Builder:upvalue_value(from, to) self:ref(from, to, 'upvalue_value') end

function Builder:index(from, i, to, weak)
  self:ref(from, to, 'index', uleb(i >= 0 and 2 * i or -2 * i - 1), weak)
end

function Builder:by_key(from, key, to, weak)
  self:ref(from, to, 'by_key', uleb(key), weak)
end

function Builder:upvalue_ref(from, to, index, name)
  self:ref(from, to, 'upvalue', uleb(index) .. text(name))
end

function Builder:stack(from, to, slot, level, name)
  self:ref(from, to, 'stack', uleb(slot) .. uleb(level) .. text(name or ''))
end

-- The function of thread `from`'s frame of `level`, running `line` (from
-- version 3; nil: not known).
function Builder:frame_function(from, to, slot, level, line)
  self:ref(from, to, 'frame_function', uleb(slot) .. uleb(level) ..
    (self.version >= 3 and uleb(line or 0) or ''))
end

-- A field with a string key: the key string (made here, `key_size` bytes)
-- and the reference to it as a key, then the value.
function Builder:named(from, name, to, key_size)
  local key = self:string(name, key_size)
  self:key(from, key)
  self:field(from, key, to)
  return key
end

function Builder:bytes(c_bytes)
  return concat(self.parts) .. char(0x7f) .. uleb(self.objects) ..
    uleb(self.refs) .. uleb(c_bytes or 0) .. 'end'
end

function Builder:write(path, c_bytes)
  local file = assert(io.open(path, 'wb'))
  file:write(self:bytes(c_bytes))
  file:close()
  return path
end

return M
