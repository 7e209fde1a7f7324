-- Specs for memprof.report.text: the exact text of the default report.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local text = require('memprof.report.text')
local B = require('helpers.stream_builder')
local crafted = B.crafted

local function report(builder, opts)
  local result = analyze.run(reader.from_string(builder:bytes(), 'out.bin'))
  return text.render(result, opts)
end


local HEAP_SUMMARY = [[
HEAP SUMMARY (by bytes held):
@test.lua:5 holds 128B: 3 allocs, 1 frees
@test.lua:7 holds 128B: 1 allocs, 0 frees (all allocs were reallocations)
TRACE started at @test.lua:5 (1 trace) holds 16B: 1 allocs, 0 frees
(blocks allocated before the profile): 1 freed or reallocated during the profile, 100B
TOTAL holds 172B (net bytes of the stream)

]]

describe('text report', function()
  it('prints every section', function()
    assert.are.equal([[
ALLOCATIONS (by bytes allocated)
@test.lua:5: 3 events	+192B	-0B
io_write: 1 events	+48B	-0B
@test.lua:6: 1 events	+32B	-0B
TRACE started at @test.lua:5 (1 trace): 1 events	+16B	-0B

REALLOCATIONS (by bytes allocated)
@test.lua:7: 1 events	+128B	-32B
	Overrides:
		@test.lua:6


DEALLOCATIONS (by bytes freed)
INTERNAL: 2 events	+0B	-164B
	Overrides:
		(blocks allocated before the profile)
		@test.lua:5

io_write: 1 events	+0B	-48B
	Overrides:
		io_write


]] .. HEAP_SUMMARY, report(crafted()))
  end)

  it('prints only the heap summary with leak_only', function()
    assert.are.equal(HEAP_SUMMARY, report(crafted(), { leak_only = true }))
  end)

  it('writes to the handle it is given', function()
    local path = os.tmpname()
    local file = assert(io.open(path, 'w'))
    local result = analyze.run(reader.from_string(crafted():bytes()))
    text.write(result, file, { leak_only = true })
    file:close()
    file = assert(io.open(path, 'r'))
    local written = file:read('*a')
    file:close()
    os.remove(path)
    assert.are.equal(HEAP_SUMMARY, written)
  end)

  it('prints sizes in B, KiB, MiB and GiB with human_readable', function()
    local s = B.new():events()
    s:alloc(B.internal(), 0x10, 1536)
    s:alloc(B.internal(), 0x20, 3 * 1024 * 1024)
    s:free(B.internal(), 0x10, 1536)
    s:free(B.internal(), 0x90, 5 * 1024 ^ 3 + 1024 ^ 3 / 4)
    s:epilogue()
    assert.are.equal([[
ALLOCATIONS (by bytes allocated)
INTERNAL: 2 events	+3.00MiB	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
INTERNAL: 2 events	+0B	-5.25GiB
	Overrides:
		(blocks allocated before the profile)
		INTERNAL


HEAP SUMMARY (by bytes held):
INTERNAL holds 3MiB: 2 allocs, 1 frees
(blocks allocated before the profile): 1 freed or reallocated during the profile, 5.25GiB
TOTAL holds -5.25GiB (net bytes of the stream)

]], report(s, { human_readable = true }))
  end)

  it('formats sizes: integer when exact, else two decimals', function()
    local cases = {
      { 0, '0B' }, { 1023, '1,023B' }, { 1024, '1KiB' }, { 1536, '1.50KiB' },
      { 1025, '1.00KiB' }, { 1024 ^ 2, '1MiB' }, { 2.5 * 1024 ^ 2, '2.50MiB' },
      { 1024 ^ 3, '1GiB' }, { 4096 * 1024 ^ 3, '4096GiB' },
      { -1536, '-1.50KiB' }, { -100, '-100B' },
    }
    for _, case in ipairs(cases) do
      assert.are.equal(case[2], text.format_size(case[1], true))
    end
    assert.are.equal('1,536B', text.format_size(1536, false))
  end)

  it('sorts by bytes, then name (the heap by holds), saying so in each ' ..
    'title; by events with sort = count (the heap by live blocks)',
    function()
      local s = B.new():lfunc(0x100, '@b.lua', 1):lfunc(0x200, '@a.lua', 1)
        :events()
      s:alloc(B.lua(0x100, 1), 0x10, 10)
      s:alloc(B.lua(0x200, 1), 0x20, 10)
      s:alloc(B.lua(0x200, 2), 0x30, 5)
      s:alloc(B.lua(0x200, 2), 0x40, 5)
      s:alloc(B.lua(0x200, 3), 0x50, 1)
      s:epilogue()
      assert.are.equal([[
ALLOCATIONS (by bytes allocated)
@a.lua:1: 1 events	+10B	-0B
@a.lua:2: 2 events	+10B	-0B
@b.lua:1: 1 events	+10B	-0B
@a.lua:3: 1 events	+1B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)

HEAP SUMMARY (by bytes held):
@a.lua:1 holds 10B: 1 allocs, 0 frees
@a.lua:2 holds 10B: 2 allocs, 0 frees
@b.lua:1 holds 10B: 1 allocs, 0 frees
@a.lua:3 holds 1B: 1 allocs, 0 frees
TOTAL holds 31B (net bytes of the stream)

]], report(s))
      assert.are.equal([[
ALLOCATIONS (by events)
@a.lua:2: 2 events	+10B	-0B
@a.lua:1: 1 events	+10B	-0B
@a.lua:3: 1 events	+1B	-0B
@b.lua:1: 1 events	+10B	-0B

REALLOCATIONS (by events)

DEALLOCATIONS (by events)

HEAP SUMMARY (by live blocks):
@a.lua:2 holds 10B: 2 allocs, 0 frees
@a.lua:1 holds 10B: 1 allocs, 0 frees
@a.lua:3 holds 1B: 1 allocs, 0 frees
@b.lua:1 holds 10B: 1 allocs, 0 frees
TOTAL holds 31B (net bytes of the stream)

]], report(s, { sort = 'count' }))
    end)

  it('says what share of the bytes the rest line holds when it holds ' ..
    'more than the rows shown', function()
      local s = B.new():lfunc(0x100, '@b.lua', 1):lfunc(0x200, '@a.lua', 1)
        :events()
      s:alloc(B.lua(0x100, 1), 0x10, 10)
      s:alloc(B.lua(0x200, 1), 0x20, 10)
      s:alloc(B.lua(0x200, 2), 0x30, 5)
      s:alloc(B.lua(0x200, 2), 0x40, 5)
      s:alloc(B.lua(0x200, 3), 0x50, 1)
      s:epilogue()
      assert.are.equal([[
ALLOCATIONS (by bytes allocated)
@a.lua:1: 1 events	+10B	-0B
... and 3 more: 4 events	+21B	-0B (68% of the bytes)

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)

HEAP SUMMARY (by bytes held):
@a.lua:1 holds 10B: 1 allocs, 0 frees
... and 3 more hold 21B: 4 allocs, 0 frees (68% of the bytes)
TOTAL holds 31B (net bytes of the stream)

]], report(s, { top = 1 }))
      -- A rest that holds less than the rows shown says no share.
      assert.are.equal('... and 1 more: 1 events\t+1B\t-0B\n',
        report(s, { top = 3 }):match('\n(%.%.%. [^\n]*\n)'))
    end)

  it('says how many of the blocks of a site came from reallocation',
    function()
      local s = B.new():lfunc(0x100, '@r.lua', 1):events()
      s:alloc(B.lua(0x100, 1), 0x10, 10)
      s:alloc(B.lua(0x100, 1), 0x20, 10)
      s:realloc(B.lua(0x100, 1), 0x20, 10, 0x30, 40)
      s:realloc(B.lua(0x100, 2), 0x10, 10, 0x40, 20)
      s:epilogue()
      assert.are.equal([[
HEAP SUMMARY (by bytes held):
@r.lua:1 holds 40B: 3 allocs, 2 frees (1 of the allocs were reallocations)
@r.lua:2 holds 20B: 1 allocs, 0 frees (all allocs were reallocations)
TOTAL holds 60B (net bytes of the stream)

]], report(s, { leak_only = true }))
    end)

  it('reports sites with the same name as one row', function()
    -- The function at 0x100 is replaced by one with the same chunk name
    -- (a module reloaded): two symbols, two sites, one name.
    local s = B.new():lfunc(0x100, '@m.lua', 1):events()
    s:alloc(B.lua(0x100, 4), 0x10, 10)
    s:define_lfunc(0x100, '@m.lua', 1)
    s:alloc(B.lua(0x100, 4), 0x20, 30)
    s:free(B.internal(), 0x10, 10)
    s:free(B.internal(), 0x20, 30)
    s:epilogue()
    assert.are.equal([[
ALLOCATIONS (by bytes allocated)
@m.lua:4: 2 events	+40B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
INTERNAL: 2 events	+0B	-40B
	Overrides:
		@m.lua:4


HEAP SUMMARY (by bytes held):
TOTAL holds 0B (net bytes of the stream)

]], report(s))
  end)

  it('lists the aliases of multi-line chunk names last', function()
    local chunk = 'local t = {}\n\nfor i = 1, 3 do t[i] = {} end\n'
    local unused = 'return 1\nend'
    local s = B.new():lfunc(0x100, chunk, 0):lfunc(0x200, unused, 0)
      :events()
    s:alloc(B.lua(0x100, 3), 0x10, 24)
    s:alloc(B.lua(0x100, 3), 0x20, 24)
    s:epilogue()
    assert.are.equal([[
ALLOCATIONS (by bytes allocated)
function_alias_1:3: 2 events	+48B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)

HEAP SUMMARY (by bytes held):
function_alias_1:3 holds 48B: 2 allocs, 0 frees
TOTAL holds 48B (net bytes of the stream)

ALIASES:
function_alias_1:
1	| local t = {}
2	| 
3	| for i = 1, 3 do t[i] = {} end

]], report(s))
  end)

  it('lists only the aliases used by the rows it prints', function()
    local first, second = 'a = 1\nb = 2', 'c = 3\nd = 4'
    local s = B.new():lfunc(0x100, first, 0):lfunc(0x200, second, 0)
      :events()
    s:alloc(B.lua(0x100, 1), 0x10, 8)
    s:free(B.internal(), 0x10, 8)
    s:alloc(B.lua(0x200, 2), 0x20, 8)
    s:epilogue()
    assert.are.equal([[
HEAP SUMMARY (by bytes held):
function_alias_2:2 holds 8B: 1 allocs, 0 frees
TOTAL holds 8B (net bytes of the stream)

ALIASES:
function_alias_2:
1	| c = 3
2	| d = 4

]], report(s, { leak_only = true }))
  end)

  it('groups the rows by caller, saying so first', function()
    local result = analyze.run(reader.from_string(B.three_callers():bytes(),
      'out.bin'), { group = 'caller' })
    assert.are.equal([[
Grouped by caller: each row is the Lua line that called the function where the events happened.

ALLOCATIONS (by bytes allocated)
@app.lua:20: 2 events	+400B	-0B
@app.lua:10: 3 events	+300B	-0B
@app.lua:30: 1 events	+300B	-0B
@app.lua:50: 1 events	+64B	-0B
@app.lua:60: 1 events	+48B	-0B
@app.lua:5 (no Lua caller in the stack): 1 events	+32B	-0B
TRACE started at @app.lua:70 (1 trace) (no Lua caller in the stack): 1 events	+16B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
INTERNAL (no call stack): 5 events	+0B	-356B
	Overrides:
		(blocks allocated before the profile)
		@app.lua:10
		@app.lua:5 (no Lua caller in the stack)


HEAP SUMMARY (by bytes held):
@app.lua:20 holds 400B: 2 allocs, 0 frees
@app.lua:30 holds 300B: 1 allocs, 0 frees
@app.lua:50 holds 64B: 1 allocs, 0 frees
@app.lua:60 holds 48B: 1 allocs, 0 frees
TRACE started at @app.lua:70 (1 trace) (no Lua caller in the stack) holds 16B: 1 allocs, 0 frees
(blocks allocated before the profile): 1 freed or reallocated during the profile, 24B
TOTAL holds 804B (net bytes of the stream)

]], text.render(result))
  end)

  it('prints a stack row as its innermost frame and its callers', function()
    local result = analyze.run(reader.from_string(B.three_callers():bytes(),
      'out.bin'), { group = 'stack' })
    assert.are.equal([[
Grouped by stack: each row is a call stack, innermost frame first.

ALLOCATIONS (by bytes allocated)
string.format: 2 events	+400B	-0B
	called from @log.lua:5
	called from @app.lua:20
string.format: 3 events	+300B	-0B
	called from @log.lua:5
	called from @app.lua:10
... and 5 more: 5 events	+460B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
INTERNAL (no call stack): 5 events	+0B	-356B
	Overrides:
		(blocks allocated before the profile)
		@app.lua:5
		... and 1 more


HEAP SUMMARY (by bytes held):
string.format holds 400B: 2 allocs, 0 frees
	called from @log.lua:5
	called from @app.lua:20
string.format holds 300B: 1 allocs, 0 frees
	called from @log.lua:5
	called from @app.lua:30
... and 3 more hold 128B: 3 allocs, 0 frees
(blocks allocated before the profile): 1 freed or reallocated during the profile, 24B
TOTAL holds 804B (net bytes of the stream)

CUMULATIVE: each stack with the functions called from its innermost line, by bytes allocated (self: its own events)
string.format: with callees 2 events +400B, live 400B in 2 blocks; self 2 events +400B
	called from @log.lua:5
	called from @app.lua:20
string.format: with callees 3 events +300B, live 0B in 0 blocks; self 3 events +300B
	called from @log.lua:5
	called from @app.lua:10
... and 5 more

]], text.render(result, { top = 2 }))
  end)

  it('adds the callees of each function, by function or by stack',
    function()
      local result = analyze.run(reader.from_string(
        B.nested_calls():bytes(), 'out.bin'), { group = 'function' })
      assert.are.equal([[
CUMULATIVE: each function with the functions it called, by bytes allocated (self: its own events)
main chunk of @m.lua: with callees 5 events +1,710B, live 1,610B in 4 blocks; self 1 events +10B
function at @m.lua:3: with callees 4 events +1,700B, live 1,600B in 3 blocks; self 4 events +1,700B
string.rep: with callees 2 events +1,500B, live 1,500B in 2 blocks; self 0 events +0B
TRACE started at @m.lua:20 (1 trace): with callees 1 events +16B, live 16B in 1 block; self 1 events +16B

]], text.render(result):match('\n(CUMULATIVE:.*)$'))
      result = analyze.run(reader.from_string(B.nested_calls():bytes(),
        'out.bin'), { group = 'stack' })
      assert.are.equal([[
CUMULATIVE: each stack with the functions called from its innermost line, by bytes allocated (self: its own events)
@m.lua:9: with callees 4 events +1,210B, live 1,110B in 3 blocks; self 1 events +10B
@m.lua:4: with callees 3 events +1,200B, live 1,100B in 2 blocks; self 2 events +200B
	called from @m.lua:9
string.rep: with callees 1 events +1,000B, live 1,000B in 1 block; self 1 events +1,000B
	called from @m.lua:4
	called from @m.lua:9
... and 2 more

]], text.render(result, { top = 3, human_readable = false })
        :match('\n(CUMULATIVE:.*)$'))
      -- Not with --leak-only, nor by line.
      assert.is_nil(text.render(result, { leak_only = true })
        :find('CUMULATIVE', 1, true))
      result = analyze.run(reader.from_string(B.nested_calls():bytes(),
        'out.bin'), { group = 'line' })
      assert.is_nil(text.render(result):find('CUMULATIVE', 1, true))
    end)

  it('sorts by bytes or by count when asked', function()
    assert.are.equal([[
ALLOCATIONS (by bytes allocated)
@test.lua:5: 3 events	+192B	-0B
io_write: 1 events	+48B	-0B
@test.lua:6: 1 events	+32B	-0B
TRACE started at @test.lua:5 (1 trace): 1 events	+16B	-0B

REALLOCATIONS (by bytes allocated)
@test.lua:7: 1 events	+128B	-32B
	Overrides:
		@test.lua:6


DEALLOCATIONS (by bytes freed)
INTERNAL: 2 events	+0B	-164B
	Overrides:
		(blocks allocated before the profile)
		@test.lua:5

io_write: 1 events	+0B	-48B
	Overrides:
		io_write


]] .. HEAP_SUMMARY, report(crafted(), { sort = 'bytes' }))
    -- By count, the heap summary is sorted by live blocks (allocs - frees).
    assert.are.equal([[
HEAP SUMMARY (by live blocks):
@test.lua:5 holds 128B: 3 allocs, 1 frees
@test.lua:7 holds 128B: 1 allocs, 0 frees (all allocs were reallocations)
... and 1 more hold 16B: 1 allocs, 0 frees
(blocks allocated before the profile): 1 freed or reallocated during the profile, 100B
TOTAL holds 172B (net bytes of the stream)

]], report(crafted(), { sort = 'count', top = 2, leak_only = true }))
  end)

  it('merges the traces that start at one place, saying how many',
    function()
      assert.are.equal([[
ALLOCATIONS (by bytes allocated)
TRACE started at @fill.lua:3 (2 traces): 4 events	+256B	-0B
@fill.lua:3: 2 events	+64B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
INTERNAL: 1 events	+0B	-64B
	Overrides:
		TRACE started at @fill.lua:3


HEAP SUMMARY (by bytes held):
TRACE started at @fill.lua:3 (2 traces) holds 192B: 4 allocs, 1 frees
@fill.lua:3 holds 64B: 2 allocs, 0 frees
TOTAL holds 256B (net bytes of the stream)

]], report(B.compiled_loop()))
    end)

  it('keeps a row per trace number with split_traces', function()
    local stream = reader.from_string(B.compiled_loop():bytes(), 'out.bin',
      { split_traces = true })
    assert.are.equal([[
HEAP SUMMARY (by bytes held):
TRACE [2] started at @fill.lua:3 holds 128B: 2 allocs, 0 frees
@fill.lua:3 holds 64B: 2 allocs, 0 frees
TRACE [1] started at @fill.lua:3 holds 64B: 2 allocs, 1 frees
TOTAL holds 256B (net bytes of the stream)

]], text.render(analyze.run(stream), { leak_only = true }))
  end)

  it('prints the stacks of traces under their callers, by stack', function()
    local result = analyze.run(reader.from_string(B.compiled_loop():bytes(),
      'out.bin'), { group = 'stack' })
    assert.are.equal([[
Grouped by stack: each row is a call stack, innermost frame first.

HEAP SUMMARY (by bytes held):
TRACE started at @fill.lua:3 (2 traces) holds 128B: 3 allocs, 1 frees
	called from @main.lua:10
TRACE started at @fill.lua:3 (2 traces) holds 64B: 1 allocs, 0 frees
	called from @main.lua:20
@fill.lua:3 holds 32B: 1 allocs, 0 frees
	called from @main.lua:10
@fill.lua:3 holds 32B: 1 allocs, 0 frees
	called from @main.lua:20
TOTAL holds 256B (net bytes of the stream)

]], text.render(result, { leak_only = true }))
  end)

  it('reports an empty stream', function()
    assert.are.equal([[
ALLOCATIONS (by bytes allocated)

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)

HEAP SUMMARY (by bytes held):
TOTAL holds 0B (net bytes of the stream)

]], report(B.new():events():epilogue()))
  end)
end)

describe('text report of compiled code by line', function()
  it('says what share of each line and section compiled code allocated',
    function()
      assert.are.equal([[
ALLOCATIONS (by bytes allocated; 70% of the bytes by compiled code)
@fill.lua:3: 6 events	+320B	-0B	(80% compiled)
@main.lua:12: 1 events	+48B	-0B

REALLOCATIONS (by bytes allocated; 100% of the bytes by compiled code)
@main.lua:11: 1 events	+96B	-48B	(100% compiled)
	Overrides:
		@main.lua:12


DEALLOCATIONS (by bytes freed)

]], report(B.compiled_lines()):match('^(.-)HEAP SUMMARY'))
    end)

  it('leaves the share out where it would not be true', function()
    -- Rows by function merge lines; a filter keeps part of a line.
    local result = analyze.run(reader.from_string(B.compiled_lines():bytes(),
      'out.bin'), { group = 'function' })
    assert.is_nil(text.render(result, {}):find('compiled', 1, true))
    result = analyze.run(reader.from_string(B.compiled_lines():bytes(),
      'out.bin'))
    assert.is_nil(text.render(result, { focus = 'fill' }):find('compiled', 1,
      true))
  end)

  it('says so when compiled code allocated less than 1% of a row',
    function()
      local s = B.new():lfunc(0x100, '@a.lua', 1):trace(1, 0x100, 2)
        :events({ version = B.EXTENDED })
      s:alloc(B.lua(0x100, 2), 0x10, 1000)
      s:alloc(B.compiled(0x100, 2, 1), 0x20, 4)
      s:epilogue()
      assert.truthy(report(s):find('@a.lua:2: 2 events\t+1,004B\t-0B\t' ..
        '(<1% compiled)\n', 1, true))
    end)

  it('shows no share for a profile in Tarantool\'s format', function()
    assert.is_nil(report(crafted()):find('compiled', 1, true))
  end)
end)

describe('text report of a sampled profile', function()
  it('says its figures are estimates and shows them', function()
    assert.are.equal([[
sampled: one sample per 100 bytes on average; figures are estimates

ALLOCATIONS (by bytes allocated)
@a.lua:3: 102 events	+10,101B	-0B
@a.lua:4: 100 events	+100B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
@a.lua:5: 101 events	+0B	-101B
	Overrides:
		@a.lua:3


HEAP SUMMARY (by bytes held):
@a.lua:3 holds 10,000B: 102 allocs, 101 frees
@a.lua:4 holds 100B: 100 allocs, 0 frees
TOTAL holds 10,100B (net bytes of the stream)

]], report(B.sampled()))
  end)
end)

describe('text report of how compiled code was attributed', function()
  local function with_note(value)
    return B.new():lfunc(0x100, '@a.lua', 0):events({ version = B.EXTENDED })
      :note(B.HEAP_AT_START, 1000):note(B.COMPILED_CODE, value)
      :define_trace(1, 0x100, 3):alloc(B.trace(1), 0x1000, 16)
      :epilogue()
  end

  it('says why events are at trace starts', function()
    local out = report(with_note(4))
    assert.are.equal('Compiled code: its allocations are charged to the ' ..
      'start of their trace (the TRACE rows), as this build\'s snapshots ' ..
      'do not say where their machine code begins (LuaJIT before ' ..
      '2021-03: 2.1.0-beta3, Tarantool 2.6 and 2.11).\n\nALLOCATIONS',
      out:sub(1, out:find('ALLOCATIONS', 1, true) + 10))
    out = report(with_note(0))
    assert.truthy(out:find('^Compiled code: its allocations are charged ' ..
      "to the start of their trace %(the TRACE rows%) %(trace_lines " ..
      "'start'%)%.\n\nALLOCATIONS"), out)
  end)

  it('says nothing of a mode as asked with no event of compiled code',
    function()
      assert.truthy(report(with_note(2)):find('^ALLOCATIONS'))
      assert.truthy(report(with_note(13)):find('^Compiled code: its ' ..
        "allocations are charged to the line where the interpreter would " ..
        "resume, often a line early %(trace_lines 'resume'%), as 'exact' " ..
        "needs the JIT compiler's per%-line mode, not found in this " ..
        'build%.\n\n'))
    end)
end)
