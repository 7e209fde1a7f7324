-- Specs for memprof.report.rows: the figures of each row, in columns by
-- group id.  Runs under LuaJIT and plain Lua 5.1.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local rows = require('memprof.report.rows')
local B = require('helpers.stream_builder')

-- Line 2 allocates three blocks of 8 bytes; line 3 reallocates one of
-- them to 16 bytes, and a block from before the profile (4 bytes) to 12;
-- line 4 frees the 16 bytes, another block of line 2 and a block from
-- before the profile (5 bytes).
local function stream()
  local s = B.new():lfunc(0x100, '@r.lua', 1):events()
  s:alloc(B.lua(0x100, 2), 0x10, 8)
  s:alloc(B.lua(0x100, 2), 0x20, 8)
  s:alloc(B.lua(0x100, 2), 0x30, 8)
  s:realloc(B.lua(0x100, 3), 0x10, 8, 0x40, 16)
  s:free(B.lua(0x100, 4), 0x40, 16)
  s:free(B.lua(0x100, 4), 0x20, 8)
  s:free(B.lua(0x100, 4), 0x999, 5)
  s:realloc(B.lua(0x100, 3), 0x888, 4, 0x50, 12)
  s:epilogue()
  return analyze.run(reader.from_string(s:bytes(), 'out.bin'))
end

local BEFORE = '(blocks allocated before the profile)'

-- The figures of each row, by name: the columns named in `fields`.
local function by_name(figures, fields)
  local map = {}
  for _, group in ipairs(figures.list) do
    local values = {}
    for i, field in ipairs(fields) do
      values[i] = figures[field][group.id]
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
    local names = {}
    for i, group in ipairs(figures.list) do
      names[i] = group.name
      assert.are.equal(result.grouper.list[group.id], group)
    end
    assert.are.same({ '@r.lua:2', '@r.lua:3', '@r.lua:4', BEFORE }, names)
    assert.are.same({
      ['@r.lua:2'] = { 3, 24, 8, 1 },
      ['@r.lua:3'] = { 2, 28, 12, 1 },
      ['@r.lua:4'] = { 0, 0, 0, 0 },
      [BEFORE] = { 0, 0, 0, 0 },
    }, by_name(figures, { 'allocated_events', 'allocated_bytes',
      'live_bytes', 'live_blocks' }))
    for _, field in ipairs({ 'alloc_events', 'realloc_bytes', 'free_events',
        'released_bytes', 'overrides' }) do
      assert.is_nil(figures[field], field)
    end
  end)
end)
