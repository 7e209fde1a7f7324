-- Specs for memprof.analysis.rows, the one row model: figures in one array
-- per figure, indexed by group id; the rows of a pass, and of the whole
-- analysis.

local columns = require('memprof.analysis.rows')
local record = require('memprof.record')
local groups = require('memprof.analysis.groups')
local Site = require('memprof.read.stream').Site
local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local rows = columns
local B = require('helpers.stream_builder')

local Row = record.shape({ 'group', 'count', 'bytes' })

-- Groups named by the sites a, b, c, d (ids 1 to 4).
local function four_groups()
  local grouper = groups.new('line')
  local list = {}
  for i, name in ipairs({ 'a', 'b', 'c', 'd' }) do
    list[i] = grouper:key(Site.make({ i, 'lua', name }))
  end
  return list
end

-- A set of the four groups in the order b, a, d, c, with these figures.
local function filled()
  local g = four_groups()
  local set = columns.new(Row)
  local figures = { { g[2], 5, 50 }, { g[1], 7, 50 }, { g[4], 0, 0 },
    { g[3], 2, 80 } }
  for _, item in ipairs(figures) do
    local id = set:add(item[1])
    set.columns.count[id] = item[2]
    set.columns.bytes[id] = item[3]
  end
  return set, g
end

local function names(list)
  local out = {}
  for i, item in ipairs(list) do
    out[i] = (item.group or item).name
  end
  return out
end

describe('memprof.analysis.rows', function()
  it('keeps a column per figure, indexed by group id, each new row at 0',
    function()
      local g = four_groups()
      local set = columns.new(Row)
      assert.are.same({ 'count', 'bytes' }, set.figures)
      assert.is_false(set:has(g[3]))
      assert.are.equal(3, set:add(g[3]))
      assert.is_true(set:has(g[3]))
      assert.are.same({ count = { [3] = 0 }, bytes = { [3] = 0 } },
        set.columns)
      -- Only the figures asked for get columns.
      assert.are.same({ 'bytes' }, columns.new(Row, { 'bytes' }).figures)
    end)

  it('makes a row as a record when it is read, and every row on reading ' ..
    'rows', function()
      local set, g = filled()
      local row = set:row(g[3])
      assert.is_true(Row.is(row))
      assert.are.same({ 'c', 2, 80 }, { row.group.name, row.count, row.bytes })
      assert.is_nil(rawget(set, 'rows'))
      assert.are.same({ 'b', 'a', 'd', 'c' }, names(set.rows))
      assert.are.same({ 5, 7, 0, 2 }, { set.rows[1].count, set.rows[2].count,
        set.rows[3].count, set.rows[4].count })
      -- Made once.
      assert.are.equal(set.rows, rawget(set, 'rows'))
    end)

  it('gives the top rows sorted by a figure, then by name, and sums the ' ..
    'rest', function()
      local set = filled()
      local shown, rest = set:top({ by = 'bytes', top = 2,
        sums = { 'count', 'bytes' } })
      assert.are.same({ 'c', 'a' }, names(shown))
      assert.are.same({ rows = 2, count = 5, bytes = 50 }, rest)
      -- Kept rows only, sorted by count; the set keeps its order.
      shown, rest = set:top({ by = 'count', keep = 'bytes',
        sums = { 'bytes' } })
      assert.are.same({ 'a', 'b', 'c' }, names(shown))
      assert.are.same({ rows = 0, bytes = 0 }, rest)
      assert.are.same({ 'b', 'a', 'd', 'c' }, names(set.groups))
      -- Without `by`, the set's order.
      shown, rest = set:top({ top = 1, sums = { 'count' } })
      assert.are.same({ 'b' }, names(shown))
      assert.are.same({ rows = 3, count = 9 }, rest)
    end)

  it('keeps rows by a function and sorts them by values of its own',
    function()
      local set = filled()
      local double = {}
      for _, group in ipairs(set.groups) do
        double[group.id] = 100 - set.columns.bytes[group.id]
      end
      local shown, rest = set:top({ by = double, top = 1, sums = { 'bytes' },
        keep = function(group)
          return group.name ~= 'd'
        end })
      assert.are.same({ 'a' }, names(shown))
      assert.are.same({ rows = 2, bytes = 130 }, rest)
      local first, kept = set:ordered({ by = double, keep = 'count' })
      assert.are.same({ 'a', 'b', 'c' }, names(first))
      assert.are.equal(3, kept)
    end)

  it('sorts groups by values, then by name', function()
    local g = four_groups()
    local values = { [1] = 3, [2] = 9, [3] = 3, [4] = 1 }
    local list = { g[4], g[3], g[2], g[1] }
    assert.are.equal(list, columns.sort_groups(list, values))
    assert.are.same({ 'b', 'a', 'c', 'd' }, names(list))
  end)

  it('finds the first groups in that order without sorting the list',
    function()
      local g = four_groups()
      local values = { [1] = 3, [2] = 9, [3] = 3, [4] = 1 }
      local list = { g[4], g[3], g[2], g[1] }
      assert.are.same({ 'b', 'a' }, names(columns.first_groups(list, values,
        2)))
      assert.are.same({ 'b', 'a', 'c' }, names(columns.first_groups(list,
        values, 3)))
      assert.are.same({ 'b', 'a', 'c', 'd' }, names(columns.first_groups(
        list, values, 10)))
      assert.are.same({}, columns.first_groups(list, values, 0))
      -- The list keeps its order.
      assert.are.same({ 'd', 'c', 'b', 'a' }, names(list))
    end)

  it('finds the same first groups as a sort, on many groups', function()
    local grouper = groups.new('line')
    local list, values = {}, {}
    local value = 7
    for i = 1, 500 do
      list[i] = grouper:key(Site.make({ i, 'lua', 'site ' .. i }))
      value = (value * 37 + 11) % 101
      values[list[i].id] = value
    end
    local first = columns.first_groups(list, values, 40)
    local sorted = columns.sort_groups({ unpack(list) }, values)
    assert.are.equal(40, #first)
    for i = 1, 40 do
      assert.are.equal(sorted[i], first[i])
    end
  end)

  it('takes a row function of the set\'s own', function()
    local set, g = filled()
    set.row = function(self, group)
      return { name = group.name, double = 2 * self.columns.count[group.id] }
    end
    local shown = set:top({ by = 'count', top = 1 })
    assert.are.same({ { name = 'a', double = 14 } }, shown)
    assert.are.same({ name = 'c', double = 4 }, set.rows[4])
    assert.are.equal(g[3].id, 3)
  end)
end)

-- Lines 2, 3 and 4 of @r.lua allocate, reallocate and free, with blocks
-- from before the profile (B.line_blocks).
local function stream()
  return analyze.run(reader.from_string(B.line_blocks():bytes(), 'out.bin'))
end

local BEFORE = '(blocks allocated before the profile)'

-- The figures of each row, by name: the columns named in `fields`.
local function by_name(figures, fields)
  local map = {}
  for _, group in ipairs(figures.groups) do
    local values = {}
    for i, field in ipairs(fields) do
      values[i] = figures.columns[field][group.id]
    end
    map[group.name] = values
  end
  return map
end

describe('rows.figures', function()
  it('gives the four columns of the flame graph formats and --diff',
    function()
    local result = stream()
    local figures = rows.figures(result)
    local listed = {}
    for i, group in ipairs(figures.groups) do
      listed[i] = group.name
      assert.are.equal(result.grouper.list[group.id], group)
    end
    assert.are.same({ '@r.lua:2', '@r.lua:3', '@r.lua:4', BEFORE }, listed)
    assert.are.same({
      ['@r.lua:2'] = { 3, 24, 8, 1 },
      ['@r.lua:3'] = { 2, 28, 12, 1 },
      ['@r.lua:4'] = { 0, 0, 0, 0 },
      [BEFORE] = { 0, 0, 0, 0 },
    }, by_name(figures, { 'allocated_events', 'allocated_bytes',
      'live_bytes', 'live_blocks' }))
    for _, field in ipairs({ 'alloc_events', 'realloc_bytes', 'free_events',
        'released_bytes', 'overrides' }) do
      assert.is_nil(figures.columns[field], field)
    end
  end)
end)

describe('rows.of_pass', function()
  -- @r.lua:2 of two functions of one name (a chunk loaded twice: two
  -- sites, one row), and @r.lua:5.
  local function twice()
    local s = B.new():lfunc(0x100, '@r.lua', 1):lfunc(0x200, '@r.lua', 1)
      :events()
    s:alloc(B.lua(0x100, 2), 0x10, 8)
    s:alloc(B.lua(0x100, 5), 0x20, 32)
    s:alloc(B.lua(0x200, 2), 0x30, 16)
    s:realloc(B.lua(0x100, 5), 0x20, 32, 0x40, 64)
    s:epilogue()
    return analyze.run(reader.from_string(s:bytes(), 'twice.bin'))
  end

  it('makes one row of the keys of one group, with their slots', function()
    local result = twice()
    local alloc = result.sites.of_kind.alloc
    assert.are.equal(3, #alloc.keys)
    local set = rows.of_pass(result.grouper, alloc.keys, alloc,
      { 'count', 'plus' })
    assert.are.same({ '@r.lua:2', '@r.lua:5' }, names(set.groups))
    local two, five = set.groups[1], set.groups[2]
    assert.are.same({ 2, 24, 1, 32 }, { set.columns.count[two.id],
      set.columns.plus[two.id], set.columns.count[five.id],
      set.columns.plus[five.id] })
    assert.are.same({ 1, 3 }, set:slots(two))
    assert.are.same({ 2 }, set:slots(five))
    assert.are.same({ 1, { 3 }, 2 }, { set.first[two.id], set.more[two.id],
      set.first[five.id] })
    assert.is_nil(set.more[five.id])
    -- Its groups are the grouping's: one id for one name.
    assert.are.equal(result.grouper:key(alloc.keys[3]), two)
  end)

  it('sums another pass into its rows, false where none of a row\'s keys ' ..
    'has figures', function()
    local result = twice()
    local heap = result.heap
    local set = rows.of_pass(result.grouper, heap.keys, heap, { 'holds' })
    local realloc = result.sites.of_kind.realloc
    assert.are.equal(set, set:sum_pass(result.grouper, realloc.keys, realloc,
      { { 'reallocated', 'plus' } }))
    local by = {}
    for _, group in ipairs(set.groups) do
      by[group.name] = { set.columns.holds[group.id],
        set.columns.reallocated[group.id] }
    end
    assert.are.same({ ['@r.lua:2'] = { 24, false },
      ['@r.lua:5'] = { 64, 64 } }, by)
  end)
end)
