-- Specs for memprof.read.follow (and the stream's opts.follow): a profile
-- read while it is written, from files grown byte by byte and in steps,
-- truncated, rewritten and replaced.
--   LUA_PATH='./lua/?.lua;./spec/?.lua;;' luajit /usr/bin/busted spec/reporter/read/follow_spec.lua

local follow = require('memprof.read.follow')
local reader = require('memprof.read.stream')
local B = require('helpers.stream_builder')

local ADDR = 0x7f1234567000

-- A profile of the extended format whose records are of every kind: a
-- note, symbols, a stack, a time mark, events with and without a stack,
-- internal events.  Returns the builder and the byte where each event
-- ends (the events a reader can give once the file holds that many).
local function profile(base)
  base = base or 0
  local s = B.new():events({ version = B.EXTENDED })
  s:note(B.HEAP_AT_START, 4096)
  local ends = {}
  local function mark()
    ends[#ends + 1] = s:size()
  end
  s:define_lfunc(0x100, '@app.lua', 1)
  s:define_cfunc(0x5000, 'table.concat')
  s:stack(1, { B.lua(0x100, 5), B.lua(0x100, 9) })
  s:alloc(B.lua(0x100, 5, 1), ADDR + base, 64) mark()
  s:time(2000000)
  s:alloc(B.lua(0x100, 6), ADDR + base + 0x100, 300) mark()
  s:realloc(B.c(0x5000), ADDR + base + 0x100, 300, ADDR + base + 0x400, 600)
  mark()
  s:alloc(B.internal(1), ADDR + base + 0x800, 32) mark()
  s:define_lfunc(0x200, '@lib.lua', 10)
  s:free(B.lua(0x200, 12), ADDR + base, 64) mark()
  return s, ends
end

-- Another program's profile: one allocation of 10 bytes at @new.lua:2,
-- the heap at its start `heap` bytes.
local function another_profile(heap)
  return B.new():events({ version = B.EXTENDED }):note(B.HEAP_AT_START, heap)
    :define_lfunc(0x300, '@new.lua', 1):alloc(B.lua(0x300, 2), ADDR, 10)
end

local function events_of(stream)
  local list = {}
  for ev in stream:each() do
    list[#list + 1] = string.format('%s %s %d %d', ev.kind, ev.site.name,
      ev.nsize, ev.stack and ev.stack.id or 0)
  end
  return list
end

local function append(path, bytes)
  local file = assert(io.open(path, 'ab'))
  file:write(bytes)
  file:close()
end

local function drain(stream, into)
  while true do
    local ev = stream:next()
    if not ev then
      return into
    end
    into[#into + 1] = string.format('%s %s %d %d', ev.kind, ev.site.name,
      ev.nsize, ev.stack and ev.stack.id or 0)
  end
end

describe('follow', function()
  local path
  before_each(function()
    path = os.tmpname()
    os.remove(path)
  end)
  after_each(function()
    os.remove(path)
    os.remove(path .. '.new')
  end)

  for _, chunk_size in ipairs({ 1, 7, 1024 * 1024 }) do
    it('reads a file written byte by byte as it grows (chunks of ' ..
        chunk_size .. ')', function()
      local s, ends = profile()
      local bytes = s:epilogue():bytes()
      local whole = events_of(reader.from_string(bytes))
      assert.are.equal(5, #whole)
      local f = follow.new(path, { chunk_size = chunk_size })
      local stream = f:poll()
      assert.is_nil(stream)
      assert.are.equal('missing', f.state)
      local got, streams = {}, {}
      for n = 1, #bytes do
        append(path, bytes:sub(n, n))
        local fresh
        stream, fresh = f:poll()
        if stream then
          if fresh then
            streams[#streams + 1] = stream
          end
          drain(stream, got)
          -- Exactly the events whose bytes are all in the file.
          local whole_events = 0
          for _, at in ipairs(ends) do
            if at <= n then
              whole_events = whole_events + 1
            end
          end
          assert.are.equal(whole_events, #got)
          assert.are.equal(n, f.read)
        else
          -- The headers and the note of the heap at start (byte 16 on).
          assert.are.equal('starting', f.state)
          assert.is_true(n <= 20)
        end
      end
      assert.are.equal(1, #streams)
      assert.are.same(whole, got)
      assert.is_true(stream.done)
      assert.is_nil(stream.warning)
      assert.are.equal(4096, stream.heap_at_start)
      f:poll()
      assert.are.equal('ended', f.state)
      f:close()
    end)
  end

  it('waits at a cut event, then reads it whole once the file grows',
      function()
    local s = profile()
    local bytes = s:bytes()
    -- Cut in the middle of the realloc's new address.
    local cut = bytes:find(B.uleb(ADDR + 0x400), 1, true) + 3
    append(path, bytes:sub(1, cut))
    local f = follow.new(path)
    local stream = f:poll()
    local got = drain(stream, {})
    assert.are.same({ 'alloc @app.lua:5 64 1', 'alloc @app.lua:6 300 0' }, got)
    assert.is_true(stream.waiting)
    assert.is_nil(stream.warning)
    assert.is_false(stream.done)
    -- Nothing new: still waiting, nothing read twice.
    local again, fresh = f:poll()
    assert.are.equal(stream, again)
    assert.is_false(fresh)
    assert.are.same({}, drain(stream, {}))
    append(path, bytes:sub(cut + 1))
    assert.are.equal(stream, (f:poll()))
    drain(stream, got)
    assert.are.same({ 'alloc @app.lua:5 64 1', 'alloc @app.lua:6 300 0',
      'realloc table.concat 600 0', 'alloc INTERNAL (garbage collector) 32 0',
      'free @lib.lua:12 0 0' }, got)
    assert.are.equal(#bytes, f.read)
    f:close()
  end)

  it('keeps its buffer bounded while the file grows in steps', function()
    local s = B.new():events({ version = B.EXTENDED })
    s:note(B.HEAP_AT_START, 0)
    s:define_lfunc(0x100, '@app.lua', 1)
    local f = follow.new(path, { chunk_size = 256 })
    append(path, s:bytes())
    local stream = f:poll()
    local count = 0
    for step = 1, 50 do
      local part = B.new()
      part.parts, part.length = {}, 0
      for i = 1, 200 do
        part:alloc(B.lua(0x100, step), ADDR + (step * 200 + i) * 64, 48)
      end
      local chunk = part:bytes()
      -- Each step's bytes in two writes, the first cut mid-event.
      append(path, chunk:sub(1, 1001))
      f:poll()
      count = count + #drain(stream, {})
      append(path, chunk:sub(1002))
      f:poll()
      count = count + #drain(stream, {})
      assert.are.equal(step * 200, count)
      assert.is_true(stream.capacity <= 1024, stream.capacity)
    end
    f:close()
  end)

  it('reads a truncated file again from its start', function()
    local s = profile()
    append(path, s:bytes())
    local f = follow.new(path)
    local first = f:poll()
    assert.are.equal(5, #drain(first, {}))
    -- A new profile at the same path: truncated, shorter.
    local new = another_profile(100)
    local file = assert(io.open(path, 'wb'))
    file:write(new:bytes())
    file:close()
    local stream, fresh = f:poll()
    assert.is_true(fresh)
    assert.are_not.equal(first, stream)
    assert.are.equal('the file was truncated', f.why)
    assert.are.equal(1, f.restarts)
    assert.are.same({ 'alloc @new.lua:2 10 0' }, drain(stream, {}))
    assert.are.equal(100, stream.heap_at_start)
    f:close()
  end)

  it('tells a file rewritten past the point read from one that grew',
      function()
    local s = profile()
    append(path, s:bytes())
    local f = follow.new(path)
    assert.are.equal(5, #drain(f:poll(), {}))
    -- Truncated and written again, longer, between two polls: the same
    -- path and file, other bytes where the last ones read were.
    local new = profile(0x10000)
    new:alloc(B.lua(0x100, 7), ADDR + 0x20000, 5)
    local file = assert(io.open(path, 'wb'))
    file:write(new:bytes())
    file:close()
    local stream, fresh = f:poll()
    assert.is_true(fresh)
    assert.are.equal('the file was rewritten', f.why)
    assert.are.equal(6, #drain(stream, {}))
    f:close()
  end)

  it('reads a replaced file from its start, and a removed one on',
      function()
    local s = profile()
    append(path, s:bytes())
    local f = follow.new(path)
    local first = f:poll()
    assert.are.equal(5, #drain(first, {}))
    local new = another_profile(7)
    append(path .. '.new', new:bytes())
    assert(os.rename(path .. '.new', path))
    local stream, fresh = f:poll()
    assert.is_true(fresh)
    assert.are.equal('the file was replaced', f.why)
    assert.are.same({ 'alloc @new.lua:2 10 0' }, drain(stream, {}))
    -- Removed: its writer may go on writing it, and so it is read on.
    os.remove(path)
    local same
    same, fresh = f:poll()
    assert.are.equal(stream, same)
    assert.is_false(fresh)
    f:close()
  end)

  it('raises the error of a bad byte with its offset, the file unchanged',
      function()
    local s = profile()
    local good = s:bytes()
    append(path, good .. '\x5a')
    local f = follow.new(path)
    local stream = f:poll()
    local ok, err = pcall(drain, stream, {})
    assert.is_false(ok)
    assert.are.equal(path .. ': byte ' .. #good .. ': expected an event ' ..
      'header (0x05-0x14, 0x18, 0x1c, 0x25-0x27, 0x29-0x2b, 0x2d-0x2f, ' ..
      '0x49-0x4b, 0x69-0x6b or 0x80), found 0x5a, a reserved header (bit 6 ' ..
      'set, valid only on a Lua-line event) that this reader cannot skip',
      err)
    assert.is_nil(f:changed())
    -- A file replaced under the reader is told apart from a bad one even
    -- after the stream failed.
    append(path .. '.new', good)
    assert(os.rename(path .. '.new', path))
    assert.are.equal('the file was replaced', f:changed())
    f:close()
  end)

  it('raises the error of bad headers, and waits for headers cut short',
      function()
    append(path, 'ljs\3\0\0')
    local f = follow.new(path)
    assert.is_nil((f:poll()))
    assert.are.equal('starting', f.state)
    append(path, '\0\x80ljm\9')
    local ok, err = pcall(f.poll, f)
    assert.is_false(ok)
    assert.are.equal(path .. ': byte 11: expected event stream version ' ..
      '3 or 100, found 9', err)
    f:close()
  end)
end)
