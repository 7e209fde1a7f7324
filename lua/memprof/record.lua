-- memprof.record: small records whose fields live in the array part of
-- a table, named through a shared metatable.
--
-- A report keeps one record per place, stack or row, and a large profile
-- has hundreds of thousands of them.  A Lua table whose fields are named
-- keys keeps them in its hash part, about 24 bytes a field rounded up to
-- a power of two (a record of 9 to 16 fields takes 16 slots); the same
-- values by position take 8 bytes each, with no rounding.  A shape names
-- the positions, so that code outside the module that made the records
-- reads and writes them as before (record.bytes), while the module's own
-- hot paths use the positions (record[BYTES]).
--
--   local record = require('memprof.record')
--   local Row = record.shape({ 'group', 'count', 'bytes' })
--   local row = Row.make({ group, 0, 0 })   -- the values by position
--   row.count = row.count + 1          -- through the metatable
--   local COUNT = Row.index.count      -- 2: row[COUNT] is the same field
--   Row.is(row)                        -- true for records of this shape
--
-- A field that is not in the shape reads as nil and cannot be written
-- (an error names it).  pairs() on a record gives the positions, not the
-- names: use Row.fields (the names, in order) to list them.

local M = {}

-- A table with room for `size` items in its array part, and no hash
-- part (LuaJIT's table.new): a table filled one item at a time doubles
-- its room as it grows, a quarter of it left empty on average, and room
-- made at once is in the same block as the table.
local table_new = require('table.new')
function M.array(size)
  return table_new(size, 0)
end

-- The number of `key` in `list` (from 1), a list of distinct keys whose
-- numbers `ids` holds by key; a new key is appended.  Returns the number,
-- and whether the key is new.
function M.intern(list, ids, key)
  local id = ids[key]
  if id then
    return id, false
  end
  id = #list + 1
  list[id], ids[key] = key, id
  return id, true
end

local function field_error(name)
  error(string.format("no field '%s' in this record", tostring(name)), 2)
end

-- A shape for records of these fields (a list of names).
function M.shape(fields)
  local index = {}
  for i, name in ipairs(fields) do
    index[name] = i
  end
  local meta = {}
  -- The metamethods are vararg functions (the `...` is never used):
  -- LuaJIT starts no trace at such a function, but compiles it inlined
  -- into the traces that read records.  Called often enough from code
  -- that is not compiled, a plain function became the start of a trace
  -- that could not be completed (the return to the metamethod's caller
  -- is not compiled), and after a few such attempts LuaJIT blacklisted
  -- it, which aborted every later trace that reads a record's field by
  -- name.
  -- luacheck: push no unused args
  meta.__index = function(self, name, ...)
    local i = index[name]
    if i then
      return rawget(self, i)
    end
    return nil
  end
  meta.__newindex = function(self, name, value, ...)
    local i = index[name]
    if not i then
      field_error(name)
    end
    rawset(self, i, value)
  end
  -- luacheck: pop
  local shape = { fields = fields, index = index, meta = meta }
  -- A record of a table of values by position (the table is the
  -- record).  Made with a table constructor that has every position
  -- (nil ones too: { group, nil, 0 }), the table's array part has room
  -- for every field.
  function shape.make(values)
    return setmetatable(values, meta)
  end
  function shape.is(value)
    return type(value) == 'table' and getmetatable(value) == meta
  end
  return shape
end

return M
