-- Specs for memprof.report.model.leaks and memprof.report.model.temporary:
-- the facts of the two views, decided once for every format.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local leaks_model = require('memprof.report.model.leaks')
local temporary_model = require('memprof.report.model.temporary')
local B = require('helpers.stream_builder')

local function result_of(builder, limit)
  return analyze.run(reader.from_string(builder:bytes(), 'x.bin'),
    { views = { leaks = true, temporary = true }, temporary_limit = limit })
end

describe('leaks model', function()
  it('gives the rows, the totals and whether the blocks were reachable',
    function()
      local model = leaks_model.new(result_of(B.three_callers()).leaks)
      assert.are.same({ 6, 828, 804, 24, false, false }, { model.count,
        model.bytes, model.total, model.freed_before, model.collected,
        model.empty })
      assert.are.equal('The profile ended without a collection at stop ' ..
        '(only memprof.stop() with collect_at_stop = true collects; a ' ..
        'profile completed at lua_close or exit does not): some of these ' ..
        'blocks may be unreachable.', model.note)
      local shown, rest = model:rows({ top = 2 })
      assert.are.same({ '@log.lua:5', '@log.lua:7', 2, 64 },
        { shown[1].group.name, shown[2].group.name, rest.rows, rest.bytes })
      shown = model:rows({ sort = 'count', top = 1 })
      assert.are.equal('@log.lua:5', shown[1].group.name)
      local s = B.new():lfunc(0x100, '@a.lua', 0)
        :events({ version = B.EXTENDED })
      s:alloc(B.lua(0x100, 1), 0x10, 64):note(B.COLLECTED_AT_STOP, 64)
      model = leaks_model.new(result_of(s:epilogue()).leaks)
      assert.are.same({ true, 'Garbage was collected at stop: these ' ..
        'blocks were reachable.' }, { model.collected, model.note })
    end)
end)

describe('temporary model', function()
  it('says what temporary means for the limit, and which rows have none',
    function()
      local result = result_of(B.three_callers(), 0)
      assert.are.equal('freed before any other allocation',
        temporary_model.new(result.temporary).meaning)
      result = result_of(B.three_callers(), 3)
      local model = temporary_model.new(result.temporary)
      assert.are.equal('freed with at most 3 other allocations between ' ..
        'their own and their free', model.meaning)
      -- Only the block of @app.lua:5 is freed within 3 allocations (the
      -- next one); the other four rows have 9 blocks, 1128 bytes.
      local shown, rest = model:rows({})
      assert.are.same({ 1, '@app.lua:5', 1, 32, 0 }, { #shown,
        shown[1].group.name, shown[1].temporary_blocks,
        shown[1].temporary_bytes, rest.rows })
      local without = model:without()
      assert.are.same({ 4, 9, 1128 }, { without.count, without.blocks,
        without.bytes })
    end)
end)
