-- Specs for memprof.report.model.peak: the peak's facts, decided once
-- for every format.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local peak_model = require('memprof.report.model.peak')
local layout = require('memprof.report.layout')
local B = require('helpers.stream_builder')

local function model_of(builder)
  local stream = reader.from_string(builder:bytes(), 'x.bin')
  local result = analyze.run(stream, { views = { peak = true } })
  return peak_model.new(result.peak, result.stream)
end

local size = layout.sizer({})

local function facts(model)
  return { model.at_start, model.whole_heap, model.name, model.title,
    model.bytes, model.growth, model.before.kind, model:amount(size) }
end

describe('peak model', function()
  it('is the whole heap when the file records the heap at the start',
    function()
      local s = B.new():lfunc(0x100, '@a.lua', 0)
        :events({ version = B.EXTENDED }):note(B.HEAP_AT_START, 1000)
      s:free(B.internal(), 0x9000, 24):alloc(B.lua(0x100, 1), 0x10, 64)
      local model = model_of(s:epilogue())
      assert.are.same({ false, true, 'peak heap', 'Peak heap', 1040, 40,
        'live', 'peak heap 1,040B' }, facts(model))
      assert.are.same({ 976, 1, 24 }, { model.before.live_bytes,
        model.before.freed_blocks, model.before.freed_bytes })
    end)

  it('is the growth above the start otherwise, or nothing', function()
    local s = B.new():lfunc(0x100, '@a.lua', 0):events()
    s:free(B.internal(), 0x9000, 24):alloc(B.lua(0x100, 1), 0x10, 64)
    assert.are.same({ false, false, 'peak', 'Peak above start', 40, 40,
      'freed', '40B above the heap at the start (which this profile does ' ..
      'not record)' }, facts(model_of(s:epilogue())))
    s = B.new():events():free(B.internal(), 0x9000, 24)
    local model = model_of(s:epilogue())
    assert.are.same({ true, false, 0, true }, { model.at_start,
      model.whole_heap, model.bytes, model.empty })
  end)

  it('is an estimate of a sampled profile', function()
    local s = B.new():lfunc(0x100, '@a.lua', 0)
      :events({ version = B.EXTENDED, sample_bytes = 100 })
      :note(B.HEAP_AT_START, 1000)
    s:alloc(B.lua(0x100, 1), 0x10, 64)
    local model = model_of(s:epilogue())
    assert.are.same({ 'estimated peak heap', 'Estimated peak heap' },
      { model.name, model.title })
  end)
end)
