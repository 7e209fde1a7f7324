-- Specs for the grouping of rows (memprof.analysis.groups) and the passes of the
-- views (memprof.analysis.leaks, memprof.analysis.peak, memprof.analysis.temporary,
-- memprof.analysis.timeline), driven by memprof.analysis.analyze.  Runs under LuaJIT and
-- plain Lua 5.1.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local groups = require('memprof.analysis.groups')
local timeline = require('memprof.analysis.timeline')
local B = require('helpers.stream_builder')

local ALL_VIEWS = { leaks = true, peak = true, temporary = true,
  timeline = true }
local BEFORE = '(blocks allocated before the profile)'

local function run(builder, group, opts)
  opts = opts or {}
  opts.group = group
  opts.views = opts.views or ALL_VIEWS
  return analyze.run(reader.from_string(builder:bytes(), 'out.bin'), opts)
end

-- { name = { row[fields[1]], row[fields[2]], ... } } for rows keyed by
-- `group` (views) or `site` (the sites and heap passes).
local function by_name(rows, fields)
  local map = {}
  for _, row in ipairs(rows) do
    local values = {}
    for i, field in ipairs(fields) do
      values[i] = row[field]
    end
    map[(row.group or row.site).name] = values
  end
  return map
end

local function names(rows)
  local list = {}
  for i, row in ipairs(rows) do
    list[i] = (row.group or row.site).name
  end
  return list
end

local function overrides_of(record)
  local map = {}
  for _, owner in ipairs(record.overrides) do
    map[owner.name] = record.override_count[owner]
  end
  return map
end

describe('groups', function()
  local EVENT = { 'count', 'plus' }

  it('groups the allocations of a helper by line, function, caller, stack',
    function()
      local s = B.three_callers()
      local trace = 'TRACE started at @app.lua:70'
      assert.are.same({
        ['@log.lua:5'] = { 6, 1000 }, ['@log.lua:7'] = { 1, 64 },
        io_lines = { 1, 48 }, ['@app.lua:5'] = { 1, 32 }, [trace] = { 1, 16 },
      }, by_name(run(s, 'line').sites.kinds.alloc, EVENT))
      assert.are.same({
        ['function at @log.lua:3'] = { 7, 1064 }, io_lines = { 1, 48 },
        ['main chunk of @app.lua'] = { 1, 32 }, [trace] = { 1, 16 },
      }, by_name(run(s, 'function').sites.kinds.alloc, EVENT))
      assert.are.same({
        ['@app.lua:10'] = { 3, 300 }, ['@app.lua:20'] = { 2, 400 },
        ['@app.lua:30'] = { 1, 300 }, ['@app.lua:50'] = { 1, 64 },
        ['@app.lua:60'] = { 1, 48 },
        ['@app.lua:5 (no Lua caller in the stack)'] = { 1, 32 },
        [trace .. ' (no Lua caller in the stack)'] = { 1, 16 },
      }, by_name(run(s, 'caller').sites.kinds.alloc, EVENT))
      assert.are.same({
        ['string.format <- @log.lua:5 <- @app.lua:10'] = { 3, 300 },
        ['string.format <- @log.lua:5 <- @app.lua:20'] = { 2, 400 },
        ['string.format <- @log.lua:5 <- @app.lua:30'] = { 1, 300 },
        ['@log.lua:7 <- @app.lua:50'] = { 1, 64 },
        ['io_lines <- @app.lua:60'] = { 1, 48 },
        ['@app.lua:5'] = { 1, 32 },
        [trace] = { 1, 16 },
      }, by_name(run(s, 'stack').sites.kinds.alloc, EVENT))
    end)

  it('charges released blocks to the group that produced them', function()
    local result = run(B.three_callers(), 'caller')
    local frees = result.sites.kinds.free
    assert.are.same({ 'INTERNAL (no call stack)' }, names(frees))
    assert.are.same({ 5, 0, 356 }, { frees[1].count, frees[1].plus,
      frees[1].minus })
    assert.are.same({ ['@app.lua:10'] = 3,
      ['@app.lua:5 (no Lua caller in the stack)'] = 1, [BEFORE] = 1 },
      overrides_of(frees[1]))
    assert.are.same({
      ['@app.lua:10'] = { 0, 3, 3 }, ['@app.lua:20'] = { 400, 2, 0 },
      ['@app.lua:30'] = { 300, 1, 0 }, ['@app.lua:50'] = { 64, 1, 0 },
      ['@app.lua:60'] = { 48, 1, 0 },
      ['@app.lua:5 (no Lua caller in the stack)'] = { 0, 1, 1 },
      ['TRACE started at @app.lua:70 (no Lua caller in the stack)'] =
        { 16, 1, 0 },
      [BEFORE] = { -24, 0, 1 },
    }, by_name(result.heap:stats_list(), { 'holds', 'allocs', 'frees' }))
    assert.are.equal(804, result.heap.total)
  end)

  it('makes groups that say what they are', function()
    local result = run(B.three_callers(), 'stack')
    local stream = result.stream
    local grouper = result.grouper
    local group = grouper:key(stream.stacks[2].frames[2], stream.stacks[2])
    assert.are.equal('stack', group.mode)
    assert.are.equal('c', group.source)
    assert.are.equal(stream.stacks[2].frames, group.frames)
    assert.are.equal(stream.stacks[2].frames[1], group.site)
    assert.is_nil(group.note)
    for id, listed in ipairs(grouper.list) do
      assert.are.equal(id, listed.id)
    end
    local callers = groups.new('caller')
    local caller = callers:key(stream.stacks[1].frames[2], stream.stacks[1])
    assert.are.same({ '@app.lua:10', 'lua', 10, 'caller' }, { caller.name,
      caller.source, caller.site.line, caller.mode })
    assert.are.equal(stream.stacks[1].frames[3], caller.site)
    local top = callers:key(stream.stacks[6].frames[1], stream.stacks[6])
    assert.are.equal('no caller', top.note)
    local internal = callers:key(stream.sites[1], nil)
    assert.are.equal('no stack', internal.note)
  end)

  it('interns groups by name', function()
    local s = B.new():lfunc(0x100, '@m.lua', 1):events({ version = B.EXTENDED })
    s:stack(1, { B.lua(0x100, 4), B.lua(0x100, 9) })
    s:define_lfunc(0x100, '@m.lua', 1) -- the module reloaded
    s:stack(2, { B.lua(0x100, 4), B.lua(0x100, 9) })
    s:alloc(B.lua(0x100, 4, 2), 0x10, 8):epilogue()
    local stream = reader.from_string(s:bytes())
    stream:next()
    for _, mode in ipairs(groups.MODES) do
      local grouper = groups.new(mode)
      local first = grouper:key(stream.stacks[1].frames[1], stream.stacks[1])
      local second = grouper:key(stream.stacks[2].frames[1], stream.stacks[2])
      assert.are_not.equal(stream.stacks[1], stream.stacks[2])
      assert.are.equal(first, second, mode)
      assert.are.equal(1, #grouper.list)
    end
  end)

  -- Stacks of made-up frames whose names start with each other, hold
  -- spaces, arrows and ';', so that every case of name_less is met.
  local TRICKY = { '@a.lua:1', '@a.lua:12', '@a.lua:1 <- x', '@a.lua:1!',
    '@a.lua:1\t', 'x', 'x <-', 'x <- y', 'x;y', 'y' }

  local function tricky_stacks()
    local sites = {}
    for i, name in ipairs(TRICKY) do
      sites[i] = { name = name, source = 'lua' }
    end
    local stacks = {}
    -- Every stack of one, two and three of the first frames.
    for a = 1, #sites do
      stacks[#stacks + 1] = { frames = { sites[a] } }
      for b = 1, #sites do
        stacks[#stacks + 1] = { frames = { sites[a], sites[b] } }
        if b <= 4 then
          stacks[#stacks + 1] = { frames = { sites[a], sites[b], sites[1] } }
        end
      end
    end
    return stacks
  end

  it('names a stack\'s group only when its name is read', function()
    local grouper = groups.new('stack')
    local stack = { frames = { { name = 'f', source = 'c' },
      { name = '@m.lua:3', source = 'lua' } } }
    local group = grouper:key(stack.frames[1], stack)
    assert.is_nil(rawget(group, groups.Group.index.name))
    assert.are.equal('f <- @m.lua:3', group.name)
    assert.are.equal('f <- @m.lua:3', rawget(group, groups.Group.index.name))
  end)

  it('orders stack groups by name without joining the names', function()
    local grouper = groups.new('stack')
    local list = {}
    for _, stack in ipairs(tricky_stacks()) do
      list[#list + 1] = grouper:key(stack.frames[1], stack)
    end
    assert.are.equal(10 + 100 + 40, #list)
    local NAME = groups.Group.index.name
    local wrong = 0
    for _, a in ipairs(list) do
      for _, b in ipairs(list) do
        local less = groups.name_less(a, b)
        assert.is_nil(rawget(a, NAME))
        if less ~= (groups.stack_name(a.frames) <
            groups.stack_name(b.frames)) then
          wrong = wrong + 1
        end
      end
    end
    assert.are.equal(0, wrong)
  end)

  it('finds a stack\'s group again once the events are over', function()
    local grouper = groups.new('stack')
    local stacks = tricky_stacks()
    local before = grouper:key(stacks[5].frames[1], stacks[5])
    grouper:finish()
    assert.are.same({}, grouper.by_stack)
    assert.are.equal(before, grouper:key(stacks[5].frames[1], stacks[5]))
    assert.are.equal(1, #grouper.list)
  end)

  it('finds the caller after the place of the event', function()
    local site = function(name, source)
      return { name = name, source = source or 'lua' }
    end
    local format, helper, main = site('string.format', 'c'),
      site('@log.lua:5'), site('@app.lua:10')
    local c_between = site('pcall', 'c')
    assert.are.equal(main, groups.caller_of({ format, helper, main }, helper))
    assert.are.equal(helper, groups.caller_of({ format, helper, main },
      format))
    assert.are.equal(main, groups.caller_of({ helper, c_between, main },
      helper))
    assert.is_nil(groups.caller_of({ helper }, helper))
    assert.is_nil(groups.caller_of({ helper, main }, site('@other.lua:1')))
    -- The same place under another symbol instance matches by name.
    assert.are.equal(main, groups.caller_of({ helper, main },
      site('@log.lua:5')))
  end)

  it('lists the aliases a group name uses', function()
    local chunk = 'return function()\nreturn {}\nend'
    local s = B.new():lfunc(0x100, chunk, 1):lfunc(0x200, '@a.lua', 1)
      :events({ version = B.EXTENDED })
    s:stack(1, { B.lua(0x100, 2), B.lua(0x200, 3), B.lua(0x100, 3) })
    s:alloc(B.lua(0x100, 2, 1), 0x10, 8):epilogue()
    local result = run(s, 'stack')
    local group = result.leaks.rows[1].group
    assert.are.equal('function_alias_1:2 <- @a.lua:3 <- function_alias_1:3',
      group.name)
    assert.are.same({ 'function_alias_1' }, group.aliases)
    assert.are.same({ 'function_alias_1' },
      run(s, 'function').leaks.rows[1].group.aliases)
    assert.are.same({}, run(s, 'caller').leaks.rows[1].group.aliases)
  end)

  it('shows every event of a version 3 stream at its own place without a stack',
    function()
      local result = run(B.crafted(), 'caller')
      assert.are.same({ '@test.lua:5 (no call stack)',
        '@test.lua:6 (no call stack)',
        'TRACE started at @test.lua:5 (no call stack)',
        'io_write (no call stack)' }, names(result.sites.kinds.alloc))
      assert.is_true(groups.needs_stacks('caller'))
      assert.is_true(groups.needs_stacks('stack'))
      assert.is_false(groups.needs_stacks('function'))
      assert.is_false(groups.needs_stacks('line'))
    end)
end)

describe('leaks pass', function()
  local FIELDS = { 'count', 'bytes' }

  it('lists the blocks live at the end by caller, with their stacks',
    function()
      local leaks = run(B.three_callers(), 'caller').leaks
      assert.are.same({ '@app.lua:20', '@app.lua:30', '@app.lua:50',
        '@app.lua:60',
        'TRACE started at @app.lua:70 (no Lua caller in the stack)' },
        names(leaks.rows))
      assert.are.same({
        ['@app.lua:20'] = { 2, 400 }, ['@app.lua:30'] = { 1, 300 },
        ['@app.lua:50'] = { 1, 64 }, ['@app.lua:60'] = { 1, 48 },
        ['TRACE started at @app.lua:70 (no Lua caller in the stack)'] =
          { 1, 16 },
      }, by_name(leaks.rows, FIELDS))
      local stacks = leaks.rows[1].stacks
      assert.are.same({ 1, 2, 2, 400 }, { #stacks, stacks[1].stack.id,
        stacks[1].count, stacks[1].bytes })
      -- The trace's block, with the stack made for it: the trace alone
      -- (it starts in the main chunk, which has no caller).
      local trace_stacks = leaks.rows[5].stacks
      assert.are.same({ 1, true, 1, 16 }, { #trace_stacks,
        trace_stacks[1].stack.inferred, trace_stacks[1].count,
        trace_stacks[1].bytes })
      assert.are.same({ leaks.rows[5].group.site },
        trace_stacks[1].stack.frames)
      assert.are.same({ 6, 828, -24, 804 }, { leaks.count, leaks.bytes,
        leaks.before_profiling, leaks.total })
    end)

  it('finds a leak of N tables from one caller', function()
    -- @lib.lua's new_table (line 4) makes tables for @app.lua:70 (5
    -- tables, never freed) and @app.lua:80 (4 tables, freed).
    local s = B.new():lfunc(0x300, '@lib.lua', 2):lfunc(0x200, '@app.lua', 0)
      :events({ version = B.EXTENDED })
    s:stack(1, { B.lua(0x300, 4), B.lua(0x200, 70) })
    s:stack(2, { B.lua(0x300, 4), B.lua(0x200, 80) })
    for i = 1, 5 do
      s:alloc(B.lua(0x300, 4, 1), 0x1000 + i * 64, 56)
      s:alloc(B.lua(0x300, 4, 2), 0x2000 + i * 64, 56)
    end
    for i = 1, 4 do
      s:free(B.internal(), 0x2000 + i * 64, 56)
    end
    s:epilogue()
    local leaks = run(s, 'caller').leaks
    assert.are.same({ ['@app.lua:70'] = { 5, 280 },
      ['@app.lua:80'] = { 1, 56 } }, by_name(leaks.rows, FIELDS))
    assert.are.same({ '@app.lua:70', '@app.lua:80' }, names(leaks.rows))
    leaks = run(s, 'line').leaks
    assert.are.same({ ['@lib.lua:4'] = { 6, 336 } },
      by_name(leaks.rows, FIELDS))
    local stacks = leaks.rows[1].stacks
    assert.are.same({ { 1, 5, 280 }, { 2, 1, 56 } }, {
      { stacks[1].stack.id, stacks[1].count, stacks[1].bytes },
      { stacks[2].stack.id, stacks[2].count, stacks[2].bytes } })
    leaks = run(s, 'stack').leaks
    assert.are.same({ ['@lib.lua:4 <- @app.lua:70'] = { 5, 280 },
      ['@lib.lua:4 <- @app.lua:80'] = { 1, 56 } }, by_name(leaks.rows, FIELDS))
    assert.are.same({}, leaks.rows[1].stacks)
  end)

  it('charges a reallocated block to its last reallocation', function()
    local s = B.new():lfunc(0x100, '@r.lua', 1):events()
    s:alloc(B.lua(0x100, 1), 0x10, 16)
    s:realloc(B.lua(0x100, 2), 0x10, 16, 0x20, 64)
    s:realloc(B.lua(0x100, 3), 0x20, 64, 0x20, 128)
    s:epilogue()
    assert.are.same({ ['@r.lua:3'] = { 1, 128 } },
      by_name(run(s, 'line').leaks.rows, FIELDS))
  end)
end)

describe('peak pass', function()
  local FIELDS = { 'bytes', 'blocks' }

  local function offset_of_event(builder, number)
    local stream = reader.from_string(builder:bytes())
    for _ = 1, number - 1 do
      stream:next()
    end
    return stream:next().offset
  end

  it('finds the peak and what held it', function()
    local s = B.peak_payload()
    local peak = run(s, 'line').peak
    assert.are.same({ 570, 5, offset_of_event(s, 5), 2000000, 3000000, 320 },
      { peak.bytes, peak.event, peak.offset, peak.time, peak.time_next,
        peak.total })
    assert.are.same({ '@p.lua:3', '@p.lua:2' }, names(peak.rows))
    assert.are.same({ ['@p.lua:3'] = { 400, 1 }, ['@p.lua:2'] = { 200, 1 } },
      by_name(peak.rows, FIELDS))
    -- What was freed of the blocks allocated before the profile is apart
    -- from the rows, as positive figures.
    assert.are.same({ freed_bytes = 30, freed_blocks = 1 }, peak.before)
    assert.is_nil(peak.heap_at_start)
    assert.is_nil(peak.heap_bytes)
    peak = run(s, 'function').peak
    assert.are.same({ ['function at @p.lua:1'] = { 600, 2 } },
      by_name(peak.rows, FIELDS))
    assert.are.same({ freed_bytes = 30, freed_blocks = 1 }, peak.before)
  end)

  it('keeps its figures in columns by group id, and drops the columns ' ..
    'only events need', function()
      local peak_module = require('memprof.analysis.peak')
      local pass = peak_module.new(groups.new('line'))
      local result = run(B.peak_payload(), 'line', { views = {},
        passes = { { name = 'mine', pass = pass } } })
      local peak = result.mine
      assert.are.same({ '@p.lua:3', '@p.lua:2' },
        { peak.groups[1].name, peak.groups[2].name })
      assert.are.equal(2, #peak.groups)
      local ids = { peak.groups[1].id, peak.groups[2].id }
      assert.are.same({ 400, 200 }, { peak.columns.bytes[ids[1]],
        peak.columns.bytes[ids[2]] })
      assert.are.same({ 1, 1 }, { peak.columns.blocks[ids[1]],
        peak.columns.blocks[ids[2]] })
      -- A row is a record made when it is read.
      local row = peak:row(peak.groups[1])
      assert.is_true(peak_module.Row.is(row))
      assert.are.same({ '@p.lua:3', 400, 1 }, { row.group.name, row.bytes,
        row.blocks })
      assert.are.same({ nil, nil, nil }, { pass.since_bytes,
        pass.since_blocks, pass.since_generation })
    end)

  it('gives the VM\'s whole heap at the peak when the stream records the ' ..
    'heap at the start', function()
      local s = B.new():lfunc(0x100, '@p.lua', 1)
        :events({ version = B.EXTENDED }):note(B.HEAP_AT_START, 10000)
      s:alloc(B.lua(0x100, 2), 0x10, 200)
      s:free(B.internal(1), 0x90, 30) -- allocated before the profile
      s:alloc(B.lua(0x100, 3), 0x20, 400)
      s:free(B.lua(0x100, 4), 0x20, 400)
      s:free(B.internal(1), 0x98, 50) -- allocated before the profile
      s:epilogue()
      local peak = run(s, 'line').peak
      assert.are.same({ 570, 3, 10000, 10570 }, { peak.bytes, peak.event,
        peak.heap_at_start, peak.heap_bytes })
      assert.are.same({ ['@p.lua:2'] = { 200, 1 }, ['@p.lua:3'] = { 400, 1 } },
        by_name(peak.rows, FIELDS))
      assert.are.same({ freed_bytes = 30, freed_blocks = 1,
        live_bytes = 9970 }, peak.before)
      -- The rows and what is left of the heap at the start make the peak.
      assert.are.equal(peak.heap_bytes, 200 + 400 + peak.before.live_bytes)
    end)

  it('reports the start when the heap never grows', function()
    local s = B.new():events({ version = B.EXTENDED }):time(5)
    s:free(B.internal(), 0x10, 8):alloc(B.internal(), 0x20, 8):epilogue()
    local peak = run(s, 'line').peak
    assert.are.same({ 0, 0, 0 }, { peak.bytes, peak.event, #peak.rows })
    assert.is_nil(peak.offset)
    assert.is_nil(peak.time)
  end)

  it('bounds a peak before the first time mark by that mark', function()
    local s = B.new():events({ version = B.EXTENDED })
    s:alloc(B.internal(), 0x10, 8):time(7000):free(B.internal(), 0x10, 8)
      :time(9000):epilogue()
    local peak = run(s, 'line').peak
    assert.are.same({ 8, 1, 7000 }, { peak.bytes, peak.event,
      peak.time_next })
    assert.is_nil(peak.time)
  end)

  it('bounds a peak after the last event by the final mark', function()
    local s = B.new():events({ version = B.EXTENDED }):time(1000)
    s:alloc(B.internal(), 0x10, 8):time(5000):epilogue()
    local peak = run(s, 'line').peak
    assert.are.same({ 8, 1, 1000, 5000 }, { peak.bytes, peak.event,
      peak.time, peak.time_next })
  end)

  it('has no times in a stream without marks', function()
    local peak = run(B.crafted(), 'line').peak
    assert.are.same({ 320, 5 }, { peak.bytes, peak.event })
    assert.is_nil(peak.time)
    assert.is_nil(peak.time_next)
  end)
end)

describe('temporary pass', function()
  local FIELDS = { 'blocks', 'bytes', 'temporary_blocks', 'temporary_bytes',
    'freed_blocks', 'freed_bytes', 'live_blocks', 'live_bytes' }

  local function totals(result)
    local list = {}
    for i, field in ipairs(FIELDS) do
      list[i] = result.totals[field]
    end
    return list
  end

  it('separates temporary blocks from long-lived ones', function()
    local result = run(B.temporaries(), 'line').temporary
    assert.are.equal(1, result.limit)
    assert.are.same({ '@t.lua:1', '@t.lua:2' }, names(result.rows))
    assert.are.same({
      ['@t.lua:1'] = { 3, 90, 3, 90, 0, 0, 0, 0 },
      ['@t.lua:2'] = { 3, 120, 0, 0, 1, 30, 2, 90 },
    }, by_name(result.rows, FIELDS))
    assert.are.same({ 6, 210, 3, 90, 1, 30, 2, 90 }, totals(result))
  end)

  it('takes the limit as the most allocations between', function()
    local result = run(B.temporaries(), 'line', { temporary_limit = 0 })
      .temporary
    assert.are.same({
      ['@t.lua:1'] = { 3, 90, 2, 70, 1, 20, 0, 0 },
      ['@t.lua:2'] = { 3, 120, 0, 0, 1, 30, 2, 90 },
    }, by_name(result.rows, FIELDS))
    result = run(B.temporaries(), 'line', { temporary_limit = 2 }).temporary
    assert.are.same({
      ['@t.lua:1'] = { 3, 90, 3, 90, 0, 0, 0, 0 },
      ['@t.lua:2'] = { 3, 120, 1, 30, 0, 0, 2, 90 },
    }, by_name(result.rows, FIELDS))
  end)

  it('groups temporary blocks by caller', function()
    local result = run(B.three_callers(), 'caller').temporary
    assert.are.same({
      ['@app.lua:10'] = { 3, 300, 0, 0, 3, 300, 0, 0 },
      ['@app.lua:20'] = { 2, 400, 0, 0, 0, 0, 2, 400 },
      ['@app.lua:30'] = { 1, 300, 0, 0, 0, 0, 1, 300 },
      ['@app.lua:50'] = { 1, 64, 0, 0, 0, 0, 1, 64 },
      ['@app.lua:60'] = { 1, 48, 0, 0, 0, 0, 1, 48 },
      -- Freed after one other allocation (the trace's): temporary.
      ['@app.lua:5 (no Lua caller in the stack)'] = { 1, 32, 1, 32, 0, 0, 0,
        0 },
      ['TRACE started at @app.lua:70 (no Lua caller in the stack)'] = { 1,
        16, 0, 0, 0, 0, 1, 16 },
    }, by_name(result.rows, FIELDS))
  end)
end)

describe('timeline pass', function()
  it('follows the heap through time', function()
    local result = run(B.peak_payload(), 'line').timeline
    assert.are.same({ 10000, 4000000 }, { result.resolution,
      result.duration })
    local shown = timeline.rows(result)
    assert.are.equal(100000, shown.width)
    assert.are.equal(41, #shown.rows)
    local function row(i)
      local r = shown.rows[i]
      return { r.start, r.stop, r.high, r.last, r.events }
    end
    assert.are.same({ 0, 100000, 0, 0, 0 }, row(1))
    assert.are.same({ 900000, 1000000, 0, 0, 0 }, row(10))
    assert.are.same({ 1000000, 1100000, 300, 270, 3 }, row(11))
    assert.are.same({ 1100000, 1200000, 270, 270, 0 }, row(12))
    assert.are.same({ 2000000, 2100000, 570, 570, 2 }, row(21))
    assert.are.same({ 3000000, 3100000, 420, 320, 3 }, row(31))
    assert.are.same({ 4000000, 4100000, 320, 320, 0 }, row(41))
    assert.are.equal(21, shown.peak_row)
  end)

  it('chooses 1, 2 or 5 times a power of ten per row, at most max_rows',
    function()
      local result = run(B.peak_payload(), 'line').timeline
      local shown = timeline.rows(result, 10)
      assert.are.same({ 500000, 9 }, { shown.width, #shown.rows })
      assert.are.same({ 1000000, 300, 270 }, { shown.rows[3].start,
        shown.rows[3].high, shown.rows[3].last })
      shown = timeline.rows(result, 1000)
      assert.are.same({ 10000, 401 }, { shown.width, #shown.rows })
    end)

  it('coarsens its slots for long profiles', function()
    local s = B.new():events({ version = B.EXTENDED })
    s:alloc(B.internal(), 0x10, 100):time(50 * 1e9)
    s:alloc(B.internal(), 0x20, 50):free(B.internal(), 0x10, 100)
      :time(50 * 1e9 + 5):epilogue()
    local result = run(s, 'line').timeline
    assert.are.same({ 1e7, 50 * 1e9 + 5 }, { result.resolution,
      result.duration })
    local shown = timeline.rows(result)
    assert.are.same({ 2e9, 26, 26 }, { shown.width, #shown.rows,
      shown.peak_row })
    assert.are.same({ 100, 100 }, { shown.rows[1].high, shown.rows[1].last })
    assert.are.same({ 100, 100 }, { shown.rows[25].high, shown.rows[25].last })
    assert.are.same({ 150, 50, 2 }, { shown.rows[26].high,
      shown.rows[26].last, shown.rows[26].events })
  end)

  -- The rows of a timeline result as { start, stop, high, last, events }.
  local function rows_of(shown)
    local list = {}
    for i, r in ipairs(shown.rows) do
      list[i] = { r.start, r.stop, r.high, r.last, r.events }
    end
    return list
  end

  it('costs the slots with events, not the hours of idle time after them',
    function()
      local started = os.clock()
      local result = run(B.idle_tail(), 'line').timeline
      assert.are.same({ 10000, 3 * 3600 * 1e9 }, { result.resolution,
        result.duration })
      local shown = timeline.rows(result)
      assert.are.same({ 5e11, 22, 1 }, { shown.width, #shown.rows,
        shown.peak_row })
      local want = { { 0, 5e11, 100, 40, 2 } }
      for i = 2, 22 do
        want[i] = { (i - 1) * 5e11, i * 5e11, 40, 40, 0 }
      end
      assert.are.same(want, rows_of(shown))
      -- 1.08e9 slots of 10 us: a loop over them takes many seconds.
      assert.is_true(os.clock() - started < 1)
    end)

  it('coarsens to a time mark of 2^62 ns and still draws a few rows',
    function()
      local started = os.clock()
      local result = run(B.far_mark(), 'line').timeline
      assert.are.same({ 1e15, 2 ^ 62 }, { result.resolution,
        result.duration })
      local shown = timeline.rows(result)
      assert.are.same({ 1e17, 47, 47 }, { shown.width, #shown.rows,
        shown.peak_row })
      local want = {}
      for i = 1, 46 do
        want[i] = { (i - 1) * 1e17, i * 1e17, 100, 100, i == 1 and 1 or 0 }
      end
      want[47] = { 46e17, 47e17, 150, 50, 2 }
      assert.are.same(want, rows_of(shown))
      assert.is_true(os.clock() - started < 1)
    end)
end)

-- Every view's sums reconcile with the stream ------------------------------

-- A deterministic generator (Park-Miller), the same under LuaJIT and Lua 5.1.
local function random_generator(seed)
  local state = seed
  return function(n)
    state = state * 16807 % 2147483647
    return state % n + 1
  end
end

-- A random extended stream: stacks whose places match the events',
-- events without stacks (internal, traces), time marks, frees of blocks
-- from before the profile, reallocations.
local function random_extended_stream(seed, count)
  local random = random_generator(seed)
  local protos = { 0x1000, 0x2000, 0x3000 }
  local s = B.new()
  for i, addr in ipairs(protos) do
    s:lfunc(addr, '@m' .. i .. '.lua', i * 10)
  end
  s:cfunc(0x50000, 'cf'):trace(1, 0x1000, 12):events({ version = B.EXTENDED })
  local places = {}
  local function define_stack()
    local frames = {}
    for i = 1, random(5) do
      if random(4) == 1 then
        frames[i] = B.c(0x50000)
      else
        frames[i] = B.lua(protos[random(#protos)], random(6))
      end
    end
    s:stack(#places + 1, frames)
    local place = frames[1]
    if place.source == 'c' and frames[2] and frames[2].source == 'lua' and
        random(2) == 1 then
      place = frames[2]
    end
    places[#places + 1] = place
  end
  for _ = 1, 8 do
    define_stack()
  end
  local function location()
    local pick = random(10)
    if pick <= 6 then
      local id = random(#places)
      local place = places[id]
      if place.source == 'c' then
        return B.c(place[1], id)
      end
      return B.lua(place[1], place[2], id)
    elseif pick <= 8 then
      return B.internal()
    elseif pick == 9 then
      return B.trace(1)
    end
    return B.lua(protos[random(#protos)], random(6))
  end
  local live, next_addr, time = {}, 0x100000, 0
  for _ = 1, count do
    if random(12) == 1 then
      time = time + random(3000000)
      s:time(time)
    end
    if random(40) == 1 then
      define_stack()
    end
    local kind = random(10)
    if kind <= 5 or #live == 0 then
      next_addr = next_addr + 16 * random(4)
      local size = random(500)
      live[#live + 1] = { next_addr, size }
      s:alloc(location(), next_addr, size)
    else
      local addr, size
      if random(10) == 1 then
        addr, size = 0x9000000 + random(100000), random(300)
      else
        local i = random(#live)
        addr, size = live[i][1], live[i][2]
        live[i] = live[#live]
        live[#live] = nil
      end
      if kind <= 7 then
        next_addr = next_addr + 16 * random(4)
        local nsize = random(800)
        live[#live + 1] = { next_addr, nsize }
        s:realloc(location(), addr, size, next_addr, nsize)
      else
        s:free(location(), addr, size)
      end
    end
  end
  s:time(time + 1000):epilogue()
  return s
end

-- The stream's events, copied.
local function events_of(builder)
  local list = {}
  for ev in reader.from_string(builder:bytes()):each() do
    list[#list + 1] = { kind = ev.kind, site = ev.site, stack = ev.stack,
      oaddr = ev.oaddr, osize = ev.osize, naddr = ev.naddr, nsize = ev.nsize }
  end
  return list
end

-- What the views must find, computed here by replaying the events
-- naively: the peak (first highest net), the live bytes and blocks per
-- group name at the peak and at the end, the classes of blocks.
local function replay(events, mode, limit)
  local grouper = groups.new(mode)
  local blocks, allocations, net = {}, 0, 0
  local expected = { peak = 0, peak_event = 0, at_peak = {}, live = {},
    classes = {}, produced = 0 }
  local state = {}
  local function add(map, name, bytes, count)
    local row = map[name] or { 0, 0 }
    row[1], row[2] = row[1] + bytes, row[2] + count
    map[name] = row
  end
  -- which: 'produced', 'temporary', 'freed' or 'live'.
  local function class(name, which, bytes)
    local row = expected.classes[name] or { blocks = 0, bytes = 0,
      temporary_blocks = 0, temporary_bytes = 0, freed_blocks = 0,
      freed_bytes = 0, live_blocks = 0, live_bytes = 0 }
    local prefix = which == 'produced' and '' or which .. '_'
    row[prefix .. 'blocks'] = row[prefix .. 'blocks'] + 1
    row[prefix .. 'bytes'] = row[prefix .. 'bytes'] + bytes
    expected.classes[name] = row
  end
  local function copy(map)
    local result = {}
    for name, row in pairs(map) do
      if row[1] ~= 0 or row[2] ~= 0 then
        result[name] = { row[1], row[2] }
      end
    end
    return result
  end
  for number, ev in ipairs(events) do
    if ev.kind ~= 'alloc' then
      local block = blocks[ev.oaddr]
      blocks[ev.oaddr] = nil
      if block then
        local name = grouper:key(block.site, block.stack).name
        add(state, name, -block.size, -1)
        local age = allocations - block.born
        class(name, age <= limit and 'temporary' or 'freed', block.size)
      else
        add(state, BEFORE, -ev.osize, -1)
      end
    end
    if ev.kind ~= 'free' then
      allocations = allocations + 1
      blocks[ev.naddr] = { site = ev.site, stack = ev.stack, size = ev.nsize,
        born = allocations }
      local name = grouper:key(ev.site, ev.stack).name
      add(state, name, ev.nsize, 1)
      class(name, 'produced', ev.nsize)
      expected.produced = expected.produced + ev.nsize
    end
    net = net + ev.nsize - ev.osize
    if net > expected.peak then
      expected.peak, expected.peak_event = net, number
      expected.at_peak = copy(state)
    end
  end
  for _, block in pairs(blocks) do
    local name = grouper:key(block.site, block.stack).name
    add(expected.live, name, block.size, 1)
    class(name, 'live', block.size)
  end
  expected.net = net
  return expected
end

local function sum_of(rows, field)
  local sum = 0
  for _, row in ipairs(rows) do
    sum = sum + row[field]
  end
  return sum
end

describe('the views reconcile with the stream', function()
  local CLASS_FIELDS = { 'blocks', 'bytes', 'temporary_blocks',
    'temporary_bytes', 'freed_blocks', 'freed_bytes', 'live_blocks',
    'live_bytes' }

  for _, seed in ipairs({ 3, 77, 4242 }) do
    for _, mode in ipairs(groups.MODES) do
      it(('on a random stream (seed %d, by %s)'):format(seed, mode), function()
        local s = random_extended_stream(seed, 600)
        local events = events_of(s)
        local expected = replay(events, mode, 1)
        local result = run(s, mode)
        assert.are.equal(#events, result.stream.events)
        assert.are.equal(expected.net, result.heap.total)

        -- The default sections: every event and byte once.
        local count, plus, minus = 0, 0, 0
        for _, kind in ipairs({ 'alloc', 'realloc', 'free' }) do
          local records = result.sites.kinds[kind]
          count = count + sum_of(records, 'count')
          plus = plus + sum_of(records, 'plus')
          minus = minus + sum_of(records, 'minus')
        end
        assert.are.equal(#events, count)
        assert.are.equal(expected.net, plus - minus)
        assert.are.equal(expected.net, sum_of(result.heap:stats_list(), 'holds'))

        -- Live at the end.
        local leaks = result.leaks
        local live = {}
        for _, row in ipairs(leaks.rows) do
          live[row.group.name] = { row.bytes, row.count }
          -- (Blocks produced by events without a stack are in no
          -- stack of their row.)
          assert.is_true(sum_of(row.stacks, 'count') <= row.count)
        end
        assert.are.same(expected.live, live)
        assert.are.equal(sum_of(leaks.rows, 'bytes'), leaks.bytes)
        assert.are.equal(sum_of(leaks.rows, 'count'), leaks.count)
        assert.are.equal(expected.net, leaks.bytes + leaks.before_profiling)

        -- The peak.
        local peak = result.peak
        assert.are.same({ expected.peak, expected.peak_event },
          { peak.bytes, peak.event })
        local before = expected.at_peak[BEFORE] or { 0, 0 }
        expected.at_peak[BEFORE] = nil
        assert.are.same(expected.at_peak, by_name(peak.rows,
          { 'bytes', 'blocks' }))
        assert.are.same({ -before[1], -before[2] },
          { peak.before.freed_bytes, peak.before.freed_blocks })
        for _, row in ipairs(peak.rows) do
          assert.is_true(row.bytes >= 0 and row.blocks >= 0, row.group.name)
        end
        assert.are.equal(peak.bytes,
          sum_of(peak.rows, 'bytes') - peak.before.freed_bytes)
        assert.are.equal(expected.net, peak.total)

        -- Temporary blocks: every block produced, in one class.
        local temporary = result.temporary
        local classes = {}
        for _, row in ipairs(temporary.rows) do
          local values = {}
          for _, field in ipairs(CLASS_FIELDS) do
            values[field] = row[field]
          end
          classes[row.group.name] = values
          assert.are.equal(row.blocks, row.temporary_blocks +
            row.freed_blocks + row.live_blocks)
          assert.are.equal(row.bytes, row.temporary_bytes + row.freed_bytes +
            row.live_bytes)
        end
        assert.are.same(expected.classes, classes)
        assert.are.equal(expected.produced, temporary.totals.bytes)
        assert.are.same({ leaks.count, leaks.bytes }, {
          temporary.totals.live_blocks, temporary.totals.live_bytes })

        -- The heap over time: its highest row is the peak, its last row
        -- ends at the net bytes.
        local shown = timeline.rows(result.timeline)
        assert.is_true(#shown.rows >= 20 and #shown.rows <= 50)
        assert.are.equal(peak.bytes, shown.rows[shown.peak_row].high)
        assert.are.equal(expected.net, shown.rows[#shown.rows].last)
        assert.are.equal(#events, sum_of(shown.rows, 'events'))
      end)
    end
  end
end)
