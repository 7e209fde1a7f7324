-- Specs for memprof.report.views: the exact text of the views.  Runs
-- under LuaJIT and plain Lua 5.1.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local views = require('memprof.report.views')
local B = require('helpers.stream_builder')

local ALL = { leaks = true, peak = true, temporary = true, timeline = true }

-- The text of the views `shown` (default: all) of a stream.
local function report(builder, group, shown, opts)
  opts = opts or {}
  local result = analyze.run(reader.from_string(builder:bytes(), 'out.bin'),
    { group = group, views = ALL, temporary_limit = opts.limit })
  opts.views = shown or ALL
  return views.render(result, opts)
end

local NO_TIME = 'HEAP OVER TIME: the profile has no time marks (record ' ..
  'with memprof.start(path, {timestamps = true}))\n\n'

describe('views report', function()
  it('prints every view of a helper called from three places, by caller',
    function()
      assert.are.equal([[
Grouped by caller: each row is the Lua line that called the function where the events happened.

LIVE AT END (by bytes): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
@app.lua:20: 2 blocks, 400B
	2 blocks, 400B allocated at:
		string.format
		@log.lua:5
		@app.lua:20
@app.lua:30: 1 block, 300B
	1 block, 300B allocated at:
		string.format
		@log.lua:5
		@app.lua:30
@app.lua:50: 1 block, 64B
	1 block, 64B allocated at:
		@log.lua:7
		@app.lua:50
@app.lua:60: 1 block, 48B
	1 block, 48B allocated at:
		io_lines
		@app.lua:60
TRACE started at @app.lua:70 (1 trace) (no Lua caller in the stack): 1 block, 16B
	1 block, 16B allocated at:
		TRACE started at @app.lua:70 (1 trace)
TOTAL live at end: 6 blocks, 828B
Freed during the profile, allocated before it: 24B
Net bytes of the stream: 804B
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

PEAK (by bytes): 1,160B above the heap at the start (which this profile does not record), after event 10 (byte 222 of the file). Held by:
@app.lua:20: 400B in 2 blocks
@app.lua:10: 300B in 3 blocks
@app.lua:30: 300B in 1 block
@app.lua:50: 64B in 1 block
@app.lua:60: 48B in 1 block
@app.lua:5 (no Lua caller in the stack): 32B in 1 block
TRACE started at @app.lua:70 (1 trace) (no Lua caller in the stack): 16B in 1 block
TOTAL at the peak: 1,160B above the heap at the start

TEMPORARY BLOCKS (by bytes): freed with at most 1 other allocation between their own and their free, by where they were allocated
@app.lua:5 (no Lua caller in the stack): 1 temporary, 32B; 0 freed later, 0B; 0 live at end, 0B
(6 other rows with no temporary blocks: 9 blocks, 1,128B)
TOTAL: 10 blocks allocated, 1,160B: 1 temporary (32B), 3 freed later (300B), 6 live at end (828B)

]] .. NO_TIME, report(B.three_callers(), 'caller'))
    end)

  it('prints stacks as rows, innermost frame first, and cuts at --top',
    function()
      assert.are.equal([[
Grouped by stack: each row is a call stack, innermost frame first.

LIVE AT END (by bytes): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
string.format: 2 blocks, 400B
	called from @log.lua:5
	called from @app.lua:20
string.format: 1 block, 300B
	called from @log.lua:5
	called from @app.lua:30
... and 3 more: 3 blocks, 128B
TOTAL live at end: 6 blocks, 828B
Freed during the profile, allocated before it: 24B
Net bytes of the stream: 804B
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

PEAK (by bytes): 1,160B above the heap at the start (which this profile does not record), after event 10 (byte 222 of the file). Held by:
string.format: 400B in 2 blocks
	called from @log.lua:5
	called from @app.lua:20
string.format: 300B in 3 blocks
	called from @log.lua:5
	called from @app.lua:10
... and 5 more: 460B in 5 blocks
TOTAL at the peak: 1,160B above the heap at the start

]], report(B.three_callers(), 'stack', { leaks = true, peak = true },
        { top = 2 }))
    end)

  it('lists at most three stacks under a row', function()
    local s = B.new():lfunc(0x100, '@h.lua', 1):events({ version = B.EXTENDED })
    for id = 1, 5 do
      s:stack(id, { B.lua(0x100, 2), B.lua(0x100, 10 * id) })
      s:alloc(B.lua(0x100, 2, id), 0x100 * id, 10 * id)
    end
    s:epilogue()
    assert.are.equal([[
LIVE AT END (by bytes): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
@h.lua:2: 5 blocks, 150B
	1 block, 50B allocated at:
		@h.lua:2
		@h.lua:50
	1 block, 40B allocated at:
		@h.lua:2
		@h.lua:40
	1 block, 30B allocated at:
		@h.lua:2
		@h.lua:30
	... and 2 more stacks: 2 blocks, 30B
TOTAL live at end: 5 blocks, 150B
Net bytes of the stream: 150B
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

]], report(s, 'line', { leaks = true }))
  end)

  it('prints the peak and the heap over time of a known payload', function()
    local rows = {
      '0.0 ms       0B      0B',
    }
    for tenth = 1, 9 do
      rows[#rows + 1] = ('0.%d ms       0B      0B'):format(tenth)
    end
    rows[#rows + 1] = '1.0 ms     300B    270B  ' .. ('#'):rep(21)
    for tenth = 1, 9 do
      rows[#rows + 1] = ('1.%d ms     270B    270B  '):format(tenth) ..
        ('#'):rep(19)
    end
    rows[#rows + 1] = '2.0 ms     570B    570B  ' .. ('#'):rep(40) ..
      '  <- peak'
    for tenth = 1, 9 do
      rows[#rows + 1] = ('2.%d ms     570B    570B  '):format(tenth) ..
        ('#'):rep(40)
    end
    rows[#rows + 1] = '3.0 ms     420B    320B  ' .. ('#'):rep(29)
    for tenth = 1, 9 do
      rows[#rows + 1] = ('3.%d ms     320B    320B  '):format(tenth) ..
        ('#'):rep(22)
    end
    rows[#rows + 1] = '4.0 ms     320B    320B  ' .. ('#'):rep(22)
    assert.are.equal([[
PEAK (by bytes): 570B above the heap at the start (which this profile does not record), after event 5 (byte 55 of the file), between 2.000 ms and 3.000 ms. Held by:
@p.lua:3: 400B in 1 block
@p.lua:2: 200B in 1 block
(blocks allocated before the profile): 1 block, 30B, freed before the peak
TOTAL at the peak: 570B above the heap at the start

HEAP OVER TIME: net bytes since the start, 0.1 ms per row (the highest value in the row, and the value at its end)
  time  highest  at end
]] .. table.concat(rows, '\n') .. '\n\n',
      report(B.peak_payload(), 'line', { peak = true, timeline = true }))
  end)

  it('says when the peak is the start', function()
    local s = B.new():events():free(B.internal(), 0x10, 8):epilogue()
    assert.are.equal([[
PEAK (by bytes): at the start (the heap never grew past its size at the start, which this profile does not record). Held by:
TOTAL at the peak: 0B above the heap at the start

]], report(s, 'line', { peak = true }))
  end)

  it('separates temporary blocks, by the limit asked for', function()
    assert.are.equal([[
TEMPORARY BLOCKS (by bytes): freed with at most 1 other allocation between their own and their free, by where they were allocated
@t.lua:1: 3 temporary, 90B; 0 freed later, 0B; 0 live at end, 0B
(1 other row with no temporary blocks: 3 blocks, 120B)
TOTAL: 6 blocks allocated, 210B: 3 temporary (90B), 1 freed later (30B), 2 live at end (90B)

]], report(B.temporaries(), 'line', { temporary = true }))
    assert.are.equal([[
TEMPORARY BLOCKS (by bytes): freed before any other allocation, by where they were allocated
@t.lua:1: 2 temporary, 70B; 1 freed later, 20B; 0 live at end, 0B
(1 other row with no temporary blocks: 3 blocks, 120B)
TOTAL: 6 blocks allocated, 210B: 2 temporary (70B), 2 freed later (50B), 2 live at end (90B)

]], report(B.temporaries(), 'line', { temporary = true }, { limit = 0 }))
    assert.are.equal([[
TEMPORARY BLOCKS (by bytes): freed with at most 2 other allocations between their own and their free, by where they were allocated
@t.lua:1: 3 temporary, 90B; 0 freed later, 0B; 0 live at end, 0B
@t.lua:2: 1 temporary, 30B; 0 freed later, 0B; 2 live at end, 90B
TOTAL: 6 blocks allocated, 210B: 4 temporary (120B), 0 freed later (0B), 2 live at end (90B)

]], report(B.temporaries(), 'line', { temporary = true }, { limit = 2 }))
  end)

  it('sorts by count when asked, and sums the rows past --top', function()
    assert.are.equal([[
LIVE AT END (by blocks): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
@test.lua:5: 2 blocks, 128B
... and 2 more: 2 blocks, 144B (53% of the bytes)
TOTAL live at end: 4 blocks, 272B
Freed during the profile, allocated before it: 100B
Net bytes of the stream: 172B
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

]], report(B.crafted(), 'line', { leaks = true }, { sort = 'count',
      top = 1 }))
    assert.are.equal([[
LIVE AT END (by blocks): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
@test.lua:5: 2 blocks, 128B
@test.lua:7: 1 block, 128B
TRACE started at @test.lua:5 (1 trace): 1 block, 16B
TOTAL live at end: 4 blocks, 272B
Freed during the profile, allocated before it: 100B
Net bytes of the stream: 172B
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

]], report(B.crafted(), 'line', { leaks = true }, { sort = 'count' }))
  end)

  it('sums the temporary and peak rows past --top', function()
    assert.are.equal([[
TEMPORARY BLOCKS (by bytes): freed with at most 2 other allocations between their own and their free, by where they were allocated
@t.lua:1: 3 temporary, 90B; 0 freed later, 0B; 0 live at end, 0B
... and 1 more: 1 temporary, 30B; 0 freed later, 0B; 2 live at end, 90B
TOTAL: 6 blocks allocated, 210B: 4 temporary (120B), 0 freed later (0B), 2 live at end (90B)

]], report(B.temporaries(), 'line', { temporary = true },
      { limit = 2, top = 1 }))
    assert.are.equal([[
PEAK (by blocks): 570B above the heap at the start (which this profile does not record), after event 5 (byte 55 of the file), between 2.000 ms and 3.000 ms. Held by:
@p.lua:2: 200B in 1 block
... and 1 more: 400B in 1 block (67% of the bytes)
(blocks allocated before the profile): 1 block, 30B, freed before the peak
TOTAL at the peak: 570B above the heap at the start

]], report(B.peak_payload(), 'line', { peak = true },
      { top = 1, sort = 'count' }))
  end)

  it('prints sizes in human-readable form', function()
    local s = B.new():lfunc(0x100, '@big.lua', 1):events()
    s:alloc(B.lua(0x100, 3), 0x10, 3 * 1024 * 1024)
    s:alloc(B.lua(0x100, 4), 0x20, 1536)
    s:epilogue()
    assert.are.equal([[
LIVE AT END (by bytes): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
@big.lua:3: 1 block, 3MiB
@big.lua:4: 1 block, 1.50KiB
TOTAL live at end: 2 blocks, 3.00MiB
Net bytes of the stream: 3.00MiB
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

]], report(s, 'line', { leaks = true }, { human_readable = true }))
  end)

  it('lists the aliases the views used', function()
    local chunk = 'local t = {}\nreturn t'
    local s = B.new():lfunc(0x100, chunk, 0):lfunc(0x200, '@m.lua', 1)
      :events({ version = B.EXTENDED })
    s:stack(1, { B.lua(0x200, 3), B.lua(0x100, 1) })
    s:alloc(B.lua(0x200, 3, 1), 0x10, 24):epilogue()
    assert.are.equal([[
LIVE AT END (by bytes): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
@m.lua:3: 1 block, 24B
	1 block, 24B allocated at:
		@m.lua:3
		function_alias_1:1
TOTAL live at end: 1 block, 24B
Net bytes of the stream: 24B
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

ALIASES:
function_alias_1:
1	| local t = {}
2	| return t

]], report(s, 'line', { leaks = true }))
  end)

  it('prints three idle hours after the last event in 22 rows', function()
    local rows = { '    0 s     100B     40B  ' .. ('#'):rep(40) ..
      '  <- peak' }
    for i = 1, 21 do
      rows[#rows + 1] = ('%5d s      40B     40B  %s'):format(i * 500,
        ('#'):rep(16))
    end
    assert.are.equal('HEAP OVER TIME: net bytes since the start, 500 s ' ..
      'per row (the highest value in the row, and the value at its end)\n' ..
      '   time  highest  at end\n' .. table.concat(rows, '\n') .. '\n\n',
      report(B.idle_tail(), 'line', { timeline = true }))
  end)

  it('chooses time units that show the width of the rows', function()
    local s = B.new():events({ version = B.EXTENDED })
    s:alloc(B.internal(), 0x10, 100):time(30 * 1e9)
    s:alloc(B.internal(), 0x20, 100):time(30 * 1e9 + 1):epilogue()
    local text = report(s, 'line', { timeline = true })
    assert.matches('^HEAP OVER TIME: net bytes since the start, 1 s per ' ..
      'row', text)
    assert.matches('\n 0 s     100B    100B  ####################\n', text)
    assert.matches('\n30 s     200B    200B  ' .. ('#'):rep(40) ..
      '  <%- peak\n\n$', text)
  end)
end)

describe('views report of a sampled profile', function()
  -- One sample per 100 bytes, 5000 bytes of heap at the start: the free
  -- of a block of 1 byte at address 2, allocated before the profile,
  -- stands for 101 blocks (memprof.analysis.sampling), and the block of 10000
  -- bytes for itself.  The estimated heap: 5000 - 101 + 10000.
  it('estimates the peak heap and scales the blocks allocated before ' ..
    'the profile', function()
    local s = B.new():lfunc(0x100, '@a.lua', 0)
      :events({ version = B.EXTENDED, sample_bytes = 100 })
      :note(B.HEAP_AT_START, 5000)
      :free(B.lua(0x100, 5), 2, 1)
      :alloc(B.lua(0x100, 3), 0x1000, 10000)
      :epilogue()
    local text = report(s, 'line', { peak = true })
    local at = #B.new():lfunc(0x100, '@a.lua', 0)
      :events({ version = B.EXTENDED, sample_bytes = 100 })
      :note(B.HEAP_AT_START, 5000):free(B.lua(0x100, 5), 2, 1):bytes()
    assert.are.equal(([[
PEAK (by bytes): estimated peak heap 14,899B after event 2 (byte %d of the file), of which 4,899B allocated before the profile. Held by:
@a.lua:3: 10,000B in 1 block
(blocks allocated before the profile): 4,899B still live (101 blocks, 101B, freed before the peak)
TOTAL at the peak: 14,899B (the heap at the start, 5,000B, and 9,899B more)

]]):format(at), text)
  end)
end)
