-- Specs for memprof.analysis.focus: --focus and --ignore, through the
-- analysis and the text report.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local text = require('memprof.report.text')
local B = require('helpers.stream_builder')

local function report(builder, opts, views)
  local result = analyze.run(reader.from_string(builder:bytes(), 'x.bin'),
    { focus = opts.focus, ignore = opts.ignore, views = views })
  opts.views = views
  return text.render(result, opts)
end

-- @a.lua:1 allocates a block that @b.lua:2 reallocates, and the
-- collector frees the new block.
local function moved()
  local s = B.new():lfunc(0x100, '@a.lua', 0):lfunc(0x200, '@b.lua', 0)
    :events()
  s:alloc(B.lua(0x100, 1), 0x10, 64)
  s:realloc(B.lua(0x200, 2), 0x10, 64, 0x20, 128)
  s:free(B.internal(), 0x20, 128)
  return s:epilogue()
end

describe('focus', function()
  it('keeps the blocks whose stack names the text, and their frees',
    function()
      -- Stack 2 passes through @app.lua:20: two blocks, never freed.
      assert.are.equal([[
Only the blocks allocated where the place or its stack names '@app.lua:20' (--focus): every figure counts them alone.

ALLOCATIONS (by bytes allocated)
@log.lua:5: 2 events	+400B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)

HEAP SUMMARY (by bytes held):
@log.lua:5 holds 400B: 2 allocs, 0 frees
TOTAL holds 400B (net bytes of the stream)

]], report(B.three_callers(), { focus = '@app.lua:20' }))
      -- Stack 1 passes through @app.lua:10: three blocks the collector
      -- frees, whose frees are kept though the collector's place is not.
      assert.are.equal([[
Only the blocks allocated where the place or its stack names '@app.lua:10' (--focus): every figure counts them alone.

ALLOCATIONS (by bytes allocated)
@log.lua:5: 3 events	+300B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
INTERNAL: 3 events	+0B	-300B
	Overrides:
		@log.lua:5


HEAP SUMMARY (by bytes held):
TOTAL holds 0B (net bytes of the stream)

]], report(B.three_callers(), { focus = '@app.lua:10' }))
    end)

  -- (The peak's event is numbered as in the file: the 10th event, the
  -- trace's block.)
  it('leaves out what --ignore names, in every view', function()
    assert.are.equal([[
Without the blocks allocated where the place or its stack names 'log.lua' (--ignore): every figure counts the others alone.

LIVE AT END (by bytes): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
io_lines: 1 block, 48B
	1 block, 48B allocated at:
		io_lines
		@app.lua:60
TRACE started at @app.lua:70 (1 trace): 1 block, 16B
	1 block, 16B allocated at:
		TRACE started at @app.lua:70 (1 trace)
TOTAL live at end: 2 blocks, 64B
Freed during the profile, allocated before it: 24B
Net bytes of the stream: 40B
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

PEAK (by bytes): 96B above the heap at the start (which this profile does not record), after event 10 (byte 222 of the file). Held by:
io_lines: 48B in 1 block
@app.lua:5: 32B in 1 block
TRACE started at @app.lua:70 (1 trace): 16B in 1 block
TOTAL at the peak: 96B above the heap at the start

]], report(B.three_callers(), { ignore = 'log.lua' },
      { leaks = true, peak = true }))
  end)

  it('splits a realloc whose blocks are not both kept', function()
    -- The old block kept: the realloc frees it.
    assert.are.equal([[
Only the blocks allocated where the place or its stack names 'a.lua' (--focus): every figure counts them alone.

ALLOCATIONS (by bytes allocated)
@a.lua:1: 1 events	+64B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
@b.lua:2: 1 events	+0B	-64B
	Overrides:
		@a.lua:1


HEAP SUMMARY (by bytes held):
TOTAL holds 0B (net bytes of the stream)

]], report(moved(), { focus = 'a.lua' }))
    -- The new block kept: the realloc allocates it.
    assert.are.equal([[
Only the blocks allocated where the place or its stack names 'b.lua' (--focus): every figure counts them alone.

ALLOCATIONS (by bytes allocated)
@b.lua:2: 1 events	+128B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
INTERNAL: 1 events	+0B	-128B
	Overrides:
		@b.lua:2


HEAP SUMMARY (by bytes held):
TOTAL holds 0B (net bytes of the stream)

]], report(moved(), { focus = 'b.lua' }))
  end)

  it('takes the text as it is, not as a pattern', function()
    local result = analyze.run(reader.from_string(moved():bytes(), 'x.bin'),
      { focus = 'a.lua:.' })
    assert.are.equal(0, result.heap.total)
    assert.is_nil(text.render(result):find('@a.lua:1', 1, true))
  end)
end)
