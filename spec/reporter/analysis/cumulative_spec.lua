-- Specs for memprof.analysis.cumulative: each row's figures with its callees',
-- by function and by stack, as analyze.run computes them.  Runs under
-- LuaJIT and plain Lua 5.1.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local B = require('helpers.stream_builder')

local function run(builder, group)
  return analyze.run(reader.from_string(builder:bytes(), 'out.bin'),
    { group = group })
end

-- { name = { events, bytes, live_blocks, live_bytes, self_events,
-- self_bytes } } of the cumulative rows.
local function figures(result)
  local map = {}
  for _, row in ipairs(result.cumulative.rows) do
    map[row.group.name] = { row.events, row.bytes, row.live_blocks,
      row.live_bytes, row.self_events, row.self_bytes }
  end
  return map
end

describe('cumulative figures', function()
  it('give each function the bytes of the functions it called', function()
    local result = run(B.nested_calls(), 'function')
    assert.are.equal('function', result.cumulative.mode)
    assert.are.same({
      -- every event with a stack is under the main chunk
      ['main chunk of @m.lua'] = { 5, 1710, 4, 1610, 1, 10 },
      ['function at @m.lua:3'] = { 4, 1700, 3, 1600, 4, 1700 },
      -- a built-in charged to its Lua caller has no events of its own
      ['string.rep'] = { 2, 1500, 2, 1500, 0, 0 },
      -- the trace starts in the main chunk, which has no caller: the
      -- stack made for its event is the trace alone
      ['TRACE started at @m.lua:20'] = { 1, 16, 1, 16, 1, 16 },
    }, figures(result))
    assert.are.same({
      ['function at @log.lua:3'] = { 7, 1064, 4, 764, 7, 1064 },
      ['string.format'] = { 6, 1000, 3, 700, 0, 0 },
      ['main chunk of @app.lua'] = { 9, 1144, 5, 812, 1, 32 },
      ['io_lines'] = { 1, 48, 1, 48, 1, 48 },
      ['TRACE started at @app.lua:70'] = { 1, 16, 1, 16, 1, 16 },
    }, figures(run(B.three_callers(), 'function')))
  end)

  it('count a function once in a stack where it recurses', function()
    local s = B.new():lfunc(0x100, '@m.lua', 0):lfunc(0x300, '@r.lua', 1)
      :events({ version = B.EXTENDED })
    s:stack(1, { B.lua(0x300, 3), B.lua(0x300, 4), B.lua(0x300, 4),
      B.lua(0x100, 9) })
    s:alloc(B.lua(0x300, 3, 1), 0x10, 40)
    s:alloc(B.lua(0x300, 3, 1), 0x20, 60)
    s:free(B.internal(), 0x10, 40)
    s:epilogue()
    assert.are.same({
      ['function at @r.lua:1'] = { 2, 100, 1, 60, 2, 100 },
      ['main chunk of @m.lua'] = { 2, 100, 1, 60, 0, 0 },
    }, figures(run(s, 'function')))
  end)

  it('give each stack the bytes of the stacks that extend it', function()
    assert.are.same({
      ['@m.lua:9'] = { 4, 1210, 3, 1110, 1, 10 },
      ['@m.lua:4 <- @m.lua:9'] = { 3, 1200, 2, 1100, 2, 200 },
      ['string.rep <- @m.lua:4 <- @m.lua:9'] = { 1, 1000, 1, 1000, 1, 1000 },
      -- @m.lua:4 <- @m.lua:12 had no events: no row takes these
      ['string.rep <- @m.lua:4 <- @m.lua:12'] = { 1, 500, 1, 500, 1, 500 },
      ['TRACE started at @m.lua:20'] = { 1, 16, 1, 16, 1, 16 },
    }, figures(run(B.nested_calls(), 'stack')))
  end)

  it("are the rows' own figures without stacks", function()
    local result = run(B.crafted(), 'function')
    for _, row in ipairs(result.cumulative.rows) do
      assert.are.same({ row.self_events, row.self_bytes },
        { row.events, row.bytes })
    end
    -- @test.lua: 3 x 64B at line 5 (one freed), 32B at line 6
    -- reallocated to 128B at line 7
    assert.are.same({ 5, 352, 3, 256, 5, 352 },
      figures(result)['function at @test.lua:1'])
  end)

  it('are computed only for rows by function or by stack', function()
    assert.is_nil(run(B.nested_calls(), 'line').cumulative)
    assert.is_nil(run(B.nested_calls(), 'caller').cumulative)
  end)

  it('are left out with cumulative = false (formats that do not show them)',
    function()
      for _, group in ipairs({ 'function', 'stack' }) do
        local result = analyze.run(reader.from_string(
          B.nested_calls():bytes(), 'out.bin'),
          { group = group, cumulative = false })
        assert.is_nil(result.cumulative)
        -- The other passes are as with it.
        assert.are.same(run(B.nested_calls(), group).heap.total,
          result.heap.total)
      end
      local stream = reader.from_string(B.nested_calls():bytes(), 'out.bin')
      for _, name in ipairs({ 'folded', 'pprof' }) do
        local module = require('memprof.report.' .. name)
        assert.is_false(module.analysis({}, stream, reader).cumulative)
      end
      for _, name in ipairs({ 'html', 'chrome' }) do
        assert.is_false(require('memprof.report.' .. name).CUMULATIVE)
      end
    end)
end)
