-- Specs for memprof.analysis.live: the places of a growing profile, their
-- rates, the heap's growth.
--   LUA_PATH='./lua/?.lua;./spec/?.lua;;' luajit /usr/bin/busted spec/reporter/analysis/live_spec.lua

local follow = require('memprof.read.follow')
local live = require('memprof.analysis.live')
local reader = require('memprof.read.stream')
local B = require('helpers.stream_builder')

local ADDR = 0x7f1234567000

local function append(path, bytes)
  local file = assert(io.open(path, 'ab'))
  file:write(bytes)
  file:close()
end

-- A builder for the bytes that follow what was written already.
local function more()
  local s = B.new()
  s.parts, s.length = {}, 0
  return s
end

local function by_name(rows)
  local out = {}
  for _, row in ipairs(rows) do
    out[row.name] = row
  end
  return out
end

describe('live analysis', function()
  local path
  before_each(function()
    path = os.tmpname()
  end)
  after_each(function()
    os.remove(path)
  end)

  it('keeps each place\'s live and allocated bytes, and their rates',
      function()
    local s = B.new():events({ version = B.EXTENDED })
    s:note(B.HEAP_AT_START, 10000)
    s:define_lfunc(0x100, '@app.lua', 1)
    s:stack(1, { B.lua(0x100, 5), B.lua(0x100, 20) })
    s:stack(2, { B.lua(0x100, 5), B.lua(0x100, 30) })
    s:alloc(B.lua(0x100, 5, 1), ADDR, 100)
    s:alloc(B.lua(0x100, 5, 2), ADDR + 0x100, 50)
    s:alloc(B.lua(0x100, 6), ADDR + 0x200, 1000)
    s:free(B.internal(1), ADDR + 0x200, 1000)
    local written = s:bytes()
    assert(io.open(path, 'wb')):close()
    append(path, written)
    local f = follow.new(path)
    local stream = f:poll()
    local state = live.new(stream, { window = 2 })
    assert.is_true(state:consume())
    state:sample(10)
    local rows = by_name(state:rows('line'))
    assert.are.equal(150, rows['@app.lua:5'].live)
    assert.are.equal(2, rows['@app.lua:5'].blocks)
    assert.are.equal(150, rows['@app.lua:5'].allocated)
    assert.are.equal(0, rows['@app.lua:6'].live)
    assert.are.equal(0, rows['@app.lua:6'].blocks)
    assert.are.equal(1000, rows['@app.lua:6'].allocated)
    assert.is_nil(rows['@app.lua:5'].alloc_rate)
    assert.are.same({ bytes = 10150, absolute = true, rate = nil, span = nil,
      history = { 10150 }, samples = 1 }, state:heap())

    -- Two seconds later: line 5 leaked 400 more bytes, line 6 churned.
    local s2 = more()
    s2:alloc(B.lua(0x100, 5, 1), ADDR + 0x1000, 400)
    s2:alloc(B.lua(0x100, 6), ADDR + 0x2000, 3000)
    s2:realloc(B.lua(0x100, 6), ADDR + 0x2000, 3000, ADDR + 0x3000, 5000)
    s2:free(B.internal(1), ADDR + 0x3000, 5000)
    append(path, s2:bytes())
    f:poll()
    assert.is_true(state:consume())
    state:sample(12)
    rows = by_name(state:rows('line'))
    assert.are.equal(550, rows['@app.lua:5'].live)
    assert.are.equal(200, rows['@app.lua:5'].live_rate)
    assert.are.equal(200, rows['@app.lua:5'].alloc_rate)
    assert.are.equal(0, rows['@app.lua:6'].live_rate)
    assert.are.equal(4000, rows['@app.lua:6'].alloc_rate)
    assert.are.equal(9000, rows['@app.lua:6'].allocated)
    local heap = state:heap()
    assert.are.equal(10550, heap.bytes)
    assert.are.equal(200, heap.rate)
    assert.are.equal(2, heap.span)

    -- By function: the lines of the main chunk summed.
    local functions = state:rows('function')
    assert.are.equal(1, #functions)
    local main = by_name(functions)['function at @app.lua:1']
    assert.are.equal(550, main.live)
    assert.are.equal(9550, main.allocated)
    assert.are.equal(4200, main.alloc_rate)
    assert.are.equal(200, main.live_rate)

    -- By stack: line 5 called from line 20, and from line 30.
    local stacks = by_name(state:rows('stack'))
    assert.are.equal(500, stacks['@app.lua:5 <- @app.lua:20'].live)
    assert.are.equal(200, stacks['@app.lua:5 <- @app.lua:20'].live_rate)
    assert.are.equal(50, stacks['@app.lua:5 <- @app.lua:30'].live)
    assert.are.equal(0, stacks['@app.lua:5 <- @app.lua:30'].live_rate)
    assert.are.equal(0, stacks['@app.lua:6 (no call stack)'].live)
    assert.is_true(state.has_stacks)

    -- The window: 2 samples back at most.
    state:sample(13)
    state:sample(14)
    rows = by_name(state:rows('line'))
    assert.are.equal(0, rows['@app.lua:5'].live_rate)
    assert.are.same({ 10150, 10550, 10550, 10550 }, state:heap().history)
    f:close()
  end)

  it('sums the places of one name, and keeps no stacks when asked not to',
      function()
    local s = B.new():events({ version = B.EXTENDED })
    s:define_lfunc(0x100, '@app.lua', 0)
    s:alloc(B.lua(0x100, 5), ADDR, 100)
    -- The same chunk loaded again: another prototype, the same names.
    s:define_lfunc(0x900, '@app.lua', 0)
    s:alloc(B.lua(0x900, 5), ADDR + 0x100, 30)
    s:alloc(B.lua(0x900, 6), ADDR + 0x200, 7)
    local stream = reader.from_string(s:epilogue():bytes())
    local state = live.new(stream, { stacks = false })
    assert.is_true(state:consume())
    local rows = state:rows('line')
    assert.are.equal(2, #rows)
    assert.are.equal(130, by_name(rows)['@app.lua:5'].live)
    assert.are.equal(2, by_name(rows)['@app.lua:5'].blocks)
    assert.are.same({}, state:rows('stack'))
    assert.is_false(state.by_stack)
    local functions = state:rows('function')
    assert.are.equal(1, #functions)
    assert.are.equal('main chunk of @app.lua', functions[1].name)
    assert.are.equal(137, functions[1].live)
  end)

  it('stops at a file offset, and reads on from there', function()
    local s = B.new():lfunc(0x100, '@a.lua', 1):events()
    local offsets = {}
    for i = 1, 10 do
      offsets[i] = s:size()
      s:alloc(B.lua(0x100, 2), ADDR + i * 64, 16)
    end
    local stream = reader.from_string(s:epilogue():bytes())
    local state = live.new(stream)
    assert.is_false(state:consume(offsets[4]))
    assert.are.equal(64, state:rows('line')[1].live)
    assert.is_true(state:consume())
    assert.are.equal(160, state:rows('line')[1].live)
    -- Tarantool's format has no stacks: no rows by stack, and a net
    -- size since the start rather than the heap's.
    assert.are.same({}, state:rows('stack'))
    assert.is_false(state:heap().absolute)
    assert.are.equal(160, state:heap().bytes)
  end)
end)
