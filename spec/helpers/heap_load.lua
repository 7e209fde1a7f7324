-- A heap snapshot read whole for the specs to look into, through the
-- reader the reports use (memprof.read.heap_snapshot's each_record): objects by
-- address, references in file order, each record a table of named fields.
--
--   local load = require('helpers.heap_load')
--   local s = load(path)
--   s.header, s.epilogue, s.objects[addr], s.list (objects in file
--   order), s.refs
--   object: { addr, type, size, offset, and its type's fields (a table's
--     weak mode as weak_keys and weak_values) }
--   reference: { from, to, kind, weak, offset, and its name's fields }

local heap = require('memprof.read.heap_snapshot')

-- Fields of each type's or kind's values a, b, c (memprof.read.heap_snapshot's
-- next_values).
local OBJECT_FIELDS = {
  table = { 'asize', 'nodes', 'weak' },
  string = { 'len', 'text', 'truncated' },
  ['function'] = { 'ffid', 'nupvalues', 'cfunc' },
  proto = { 'firstline', 'numline' },
  thread = { 'stack_slots', 'used_slots' },
  userdata = { 'len' },
  trace = { 'traceno' },
}
local REF_FIELDS = {
  root = { 'name' }, field = { 'key' }, index = { 'index' },
  by_key = { 'key' }, by_number = { 'number' }, by_bool = { 'bool' },
  by_lightud = { 'pointer' }, upvalue = { 'index', 'name' },
  constant = { 'index' }, stack = { 'slot', 'level', 'name' },
  frame_function = { 'slot', 'level', 'line' },
}
local NONE = {}

local function named(record, fields, a, b, c)
  if fields[1] then record[fields[1]] = a end
  if fields[2] then record[fields[2]] = b end
  if fields[3] then record[fields[3]] = c end
  return record
end

return function(path)
  local objects, list, refs = {}, {}, {}
  local r = heap.each_record(path, function(addr, t, size, a, b, c, at)
    local obj = named({ record = 'object', addr = addr, type = t,
      size = size, offset = at }, OBJECT_FIELDS[t] or NONE, a, b, c)
    if t == 'table' then
      obj.weak_keys, obj.weak_values = c % 2 == 1, c >= 2
      obj.weak = nil
    end
    objects[addr] = obj
    list[#list + 1] = obj
  end, function(from, to, kind, weak, a, b, c, at)
    refs[#refs + 1] = named({ record = 'ref', from = from, to = to,
      kind = kind, weak = weak, offset = at }, REF_FIELDS[kind] or NONE, a,
      b, c)
  end)
  return { name = path, header = r.header, objects = objects, list = list,
    refs = refs, epilogue = r.epilogue }
end
