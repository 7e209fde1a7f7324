-- Specs for memprof.read.trace_stacks: the stacks the reader gives the events
-- of compiled code, from the callers that the other events' stacks show.

local reader = require('memprof.read.stream')
local groups = require('memprof.analysis.groups')
local B = require('helpers.stream_builder')

-- Function f (@f.lua, defined at line 3) has a loop at line 5 where
-- trace 1 starts; g (@g.lua) calls f; @app.lua's main chunk calls both.
-- Trace 2 starts in h (@h.lua), which no stack passes through.
local function profile(opts)
  local s = B.new():lfunc(0x100, '@f.lua', 3):lfunc(0x200, '@app.lua', 0)
    :lfunc(0x300, '@g.lua', 1):lfunc(0x400, '@h.lua', 1)
    :cfunc(0x900, 'string.rep'):trace(1, 0x100, 5):trace(2, 0x400, 2)
    :events({ version = B.EXTENDED })
  s:stack(1, { B.lua(0x100, 6), B.lua(0x200, 10) })
  s:stack(2, { B.lua(0x100, 6), B.lua(0x300, 2), B.lua(0x200, 20) })
  s:stack(3, { B.lua(0x200, 30) })
  -- f calling itself: line 7 of the inner call, line 8 of the outer.
  s:stack(4, { B.c(0x900), B.lua(0x100, 7), B.lua(0x100, 8),
    B.lua(0x200, 40) })
  s:alloc(B.lua(0x100, 6, 1), 0x10, 8)   -- 1: f called from app.lua:10
  s:alloc(B.trace(1), 0x20, 16)          -- 2: the callers of event 1
  s:alloc(B.lua(0x200, 30, 3), 0x30, 8)  -- 3: not in f
  s:alloc(B.trace(1), 0x40, 16)          -- 4: the last stack through f: 4
  s:alloc(B.lua(0x100, 6, 2), 0x50, 8)   -- 5: f called from g
  s:alloc(B.trace(1), 0x60, 16)          -- 6: the callers of event 5
  s:alloc(B.trace(1), 0x70, 16)          -- 7: the same
  s:alloc(B.trace(2), 0x80, 16)          -- 8: h is in no stack
  s:stack(5, { B.lua(0x100, 6), B.lua(0x200, 50) })
  s:alloc(B.lua(0x200, 30, 3), 0x90, 8)  -- 9: not in f
  s:alloc(B.trace(1), 0xa0, 16)          -- 10: now the last through f: 5
  s:define_trace(3, 0x100, 5)            -- another trace at f's line 5
  s:alloc(B.lua(0x100, 6, 1), 0xb0, 8)   -- 11: as event 1
  s:alloc(B.trace(3), 0xc0, 16)          -- 12: as event 2
  s:epilogue()
  return reader.from_string(s:bytes(), 'out.bin', opts)
end

local function read_all(stream)
  local list = {}
  for ev in stream:each() do
    list[#list + 1] = { site = ev.site, stack = ev.stack }
  end
  return list
end

local function frame_names(stack)
  if not stack then
    return nil
  end
  local names = {}
  for i, frame in ipairs(stack.frames) do
    names[i] = frame.name
  end
  return names
end

describe('stacks of events in compiled code', function()
  it('are the trace followed by the callers of the function it starts in',
    function()
      local events = read_all(profile())
      local trace = 'TRACE started at @f.lua:5'
      assert.are.same({ trace, '@app.lua:10' }, frame_names(events[2].stack))
      assert.are.same({ trace, '@f.lua:8', '@app.lua:40' },
        frame_names(events[4].stack))
      assert.are.same({ trace, '@g.lua:2', '@app.lua:20' },
        frame_names(events[6].stack))
      assert.is_nil(events[8].stack)
      assert.are.same({ trace, '@app.lua:50' }, frame_names(events[10].stack))
      assert.are.equal(events[2].site, events[2].stack.frames[1])
    end)

  it('are interned by their frames and listed in the order made', function()
    local stream = profile()
    local events = read_all(stream)
    assert.are.equal(events[6].stack, events[7].stack)
    assert.are.equal(events[2].stack, events[12].stack)
    assert.are.equal(events[2].site, events[12].site)
    assert.are.equal(2, events[2].site.traces)
    assert.are.same({ events[2].stack, events[4].stack, events[6].stack,
      events[10].stack }, stream.inferred_stacks)
    for i, stack in ipairs(stream.inferred_stacks) do
      assert.are.same({ true, i, nil }, { stack.inferred, stack.index,
        stack.id })
    end
    assert.are.equal(5, #stream.stacks)
  end)

  it('start with the trace of its number with split_traces', function()
    local events = read_all(profile({ split_traces = true }))
    assert.are.same({ 'TRACE [1] started at @f.lua:5', '@app.lua:10' },
      frame_names(events[2].stack))
    assert.are.same({ 'TRACE [3] started at @f.lua:5', '@app.lua:10' },
      frame_names(events[12].stack))
  end)

  it('give traces their callers in the caller and stack groupings',
    function()
      local events = read_all(profile())
      local by_caller, by_stack = groups.new('caller'), groups.new('stack')
      local function rows(grouper)
        local names = {}
        for _, i in ipairs({ 2, 4, 6, 8 }) do
          names[#names + 1] = grouper:key(events[i].site, events[i].stack).name
        end
        return names
      end
      assert.are.same({ '@app.lua:10', '@f.lua:8', '@g.lua:2',
        'TRACE started at @h.lua:2 (no call stack)' }, rows(by_caller))
      assert.are.same({ 'TRACE started at @f.lua:5 <- @app.lua:10',
        'TRACE started at @f.lua:5 <- @f.lua:8 <- @app.lua:40',
        'TRACE started at @f.lua:5 <- @g.lua:2 <- @app.lua:20',
        'TRACE started at @h.lua:2 (no call stack)' }, rows(by_stack))
    end)

  it('keep apart two stacks whose frames hash alike', function()
    local trace_stacks = require('memprof.read.trace_stacks')
    local inferred = trace_stacks.new()
    -- The hash of (site, frame) is site.id * 1000003 + frame.id.
    local a, b = { id = 1 }, { id = 0 }
    local frame_a, frame_b = { id = 0 }, { id = 1000003 }
    local first = inferred:intern(a, { 'x', frame_a }, 1)
    local second = inferred:intern(b, { 'x', frame_b }, 1)
    assert.are_not.equal(first, second)
    assert.are.same({ a, frame_a }, first.frames)
    assert.are.same({ b, frame_b }, second.frames)
    assert.are.equal(first, inferred:intern(a, { frame_a }, 0))
    assert.are.equal(second, inferred:intern(b, { 'y', 'z', frame_b }, 2))
    assert.are.same({ first, second }, inferred.list)
  end)

  it('are not made in a stream without stacks', function()
    local s = B.new():lfunc(0x100, '@f.lua', 3):trace(1, 0x100, 5):events()
    s:alloc(B.lua(0x100, 6), 0x10, 8):alloc(B.trace(1), 0x20, 16):epilogue()
    local stream = reader.from_string(s:bytes())
    local events = read_all(stream)
    assert.is_nil(events[2].stack)
    assert.are.same({}, stream.inferred_stacks)
  end)
end)
