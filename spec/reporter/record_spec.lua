-- Specs for memprof.record: records whose fields are kept by position
-- and named through their shape's metatable.  Runs under LuaJIT and
-- plain Lua 5.1.

local record = require('memprof.record')

describe('record', function()
  local Row = record.shape({ 'group', 'count', 'bytes', 'note' })

  it('numbers the fields in the order given', function()
    assert.are.same({ 1, 2, 3, 4 }, { Row.index.group, Row.index.count,
      Row.index.bytes, Row.index.note })
    assert.are.same({ 'group', 'count', 'bytes', 'note' }, Row.fields)
  end)

  it('reads and writes the fields by name and by position', function()
    local row = Row.make({ 'g', 3, 96, nil })
    assert.are.same({ 'g', 3, 96 }, { row.group, row.count, row.bytes })
    assert.is_nil(row.note)
    row.count = row.count + 2
    row[Row.index.bytes] = 100
    row.note = 'no stack'
    assert.are.same({ 'g', 5, 100, 'no stack' }, { row[1], row[2],
      row.bytes, row.note })
    row.note = nil
    assert.is_nil(row.note)
    assert.is_nil(rawget(row, 'note'))
  end)

  -- LuaJIT blacklists a function that is often the start of a trace it
  -- cannot complete, and then aborts every trace that calls it: the
  -- field access must never start a trace of its own (a vararg function
  -- does not), whatever code that is not compiled reads records.
  if jit and jit.status() then
    it('keeps reading fields by name compilable after many reads from ' ..
        'code that is not compiled', function()
      local bcnames = require('jit.vmdef').bcnames
      local funcbc = require('jit.util').funcbc
      local function first_op(fn)
        local op = bit.band(funcbc(fn, 0), 0xff)
        return (bcnames:sub(op * 6 + 1, op * 6 + 6):gsub(' ', ''))
      end
      local Pair = record.shape({ 'id', 'name' })
      local pair = Pair.make({ 1, 'x' })
      local function interpreted(n)
        local found = 0
        for i = 1, n do
          if pair.name == 'x' then
            found = found + 1
          end
          pair.id = i
        end
        return found
      end
      jit.off(interpreted)
      assert.are.equal(300000, interpreted(300000))
      assert.are.same({ 'FUNCV', 'FUNCV' }, { first_op(Pair.meta.__index),
        first_op(Pair.meta.__newindex) })
    end)
  end

  it('reads a field not in the shape as nil, and refuses to write it',
    function()
      local row = Row.make({ 'g', 0, 0, nil })
      assert.is_nil(row.mode)
      local ok, message = pcall(function() row.mode = 'line' end)
      assert.is_false(ok)
      assert.is_truthy(message:find("no field 'mode' in this record", 1,
        true))
      assert.is_nil(rawget(row, 'mode'))
    end)

  it('tells its records from other tables', function()
    local Other = record.shape({ 'group' })
    assert.is_true(Row.is(Row.make({ 'g', 0, 0 })))
    assert.is_false(Row.is(Other.make({ 'g' })))
    assert.is_false(Row.is({ group = 'g' }))
    assert.is_false(Row.is('g'))
  end)

  it('keeps the values in the array part: 1000 records of 18 fields ' ..
    'take less than half the memory of tables with named keys', function()
      local names = {}
      for i = 1, 18 do
        names[i] = 'field' .. i
      end
      local Wide = record.shape(names)
      -- One full cycle is not enough: each cycle halves the string table
      -- at most once, so after earlier specs made many strings the count
      -- keeps falling for several cycles. Collect until it stops falling.
      local function settle()
        local last
        repeat
          last = collectgarbage('count')
          collectgarbage('collect')
        until collectgarbage('count') >= last
      end
      local function kilobytes(make)
        local list = {}
        settle()
        local before = collectgarbage('count')
        for i = 1, 1000 do
          list[i] = make(i)
        end
        settle()
        local used = collectgarbage('count') - before
        assert.are.equal(1000, #list)
        return used
      end
      local named = kilobytes(function(i)
        local t = {}
        for _, name in ipairs(names) do
          t[name] = i
        end
        return t
      end)
      local compact = kilobytes(function(i)
        return Wide.make({ i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i,
          i, i })
      end)
      assert.is_true(compact * 2 < named)
    end)
end)
