-- Specs for memprof.read.stream:
--   LUA_PATH='./lua/?.lua;./spec/?.lua;;' luajit /usr/bin/busted spec/reporter/read/stream_spec.lua

local reader = require('memprof.read.stream')
local B = require('helpers.stream_builder')

-- Ways of reading: whole, and in tiny chunks so that events straddle
-- chunk boundaries.
local MODES = {
  { label = 'one chunk', opts = {} },
  { label = '1-byte chunks', opts = { chunk_size = 1 } },
  { label = '5-byte chunks', opts = { chunk_size = 5 } },
  { label = '7-byte chunks', opts = { chunk_size = 7 } },
}

-- Copy the reused event tables into plain records.
local function collect(stream)
  local events = {}
  for ev in stream:each() do
    events[#events + 1] = { kind = ev.kind, site = ev.site, name = ev.site.name,
      naddr = ev.naddr, nsize = ev.nsize, oaddr = ev.oaddr, osize = ev.osize,
      offset = ev.offset, stack = ev.stack, time = ev.time }
  end
  return events
end

local function names(events)
  local list = {}
  for i, ev in ipairs(events) do
    list[i] = ev.name
  end
  return list
end

-- The bytes of an event given as { { what, bytes }, ... }.
local function joined(fields)
  local parts = {}
  for i, field in ipairs(fields) do
    parts[i] = field[2]
  end
  return table.concat(parts)
end

-- Cuts the event after each of its bytes but the last, behind `prefix`
-- (3 whole events), and checks that each reading keeps those 3 and names
-- the field the cut falls in.
local function assert_each_cut(prefix, fields)
  local event = joined(fields)
  for _, mode in ipairs(MODES) do
    local field, field_end = 1, #fields[1][2]
    for kept = 1, #event - 1 do
      while kept >= field_end do
        field = field + 1
        field_end = field_end + #fields[field][2]
      end
      local stream = reader.from_string(prefix .. event:sub(1, kept),
        'out.bin', mode.opts)
      assert.are.equal(3, #collect(stream))
      assert.are.equal(('out.bin: the stream ends at byte %d in the ' ..
        'middle of an event (expected %s); the report covers the 3 ' ..
        'events before it'):format(#prefix + kept, fields[field][1]),
        stream.warning, mode.label .. ', ' .. kept .. ' bytes kept')
    end
  end
end

local function open_error(bytes, opts)
  local ok, err = pcall(reader.from_string, bytes, 'out.bin', opts)
  assert.is_false(ok)
  return err
end

local ADDR = 0x7f1234567000 -- a 47-bit address: 7 bytes of ULEB128

for _, mode in ipairs(MODES) do
  -- more: options added to the mode's.
  local function open(bytes, more)
    local opts = {}
    for _, set in ipairs({ mode.opts, more or {} }) do
      for k, v in pairs(set) do
        opts[k] = v
      end
    end
    return reader.from_string(bytes, 'out.bin', opts)
  end

  describe('reader (' .. mode.label .. ')', function()
    it('decodes every kind of event from every source', function()
      local s = B.new():lfunc(0x100, '@test.lua', 1):cfunc(0x5000, 'malloc')
        :trace(3, 0x100, 4):events()
      local offsets = {}
      offsets[1] = s:size()
      s:alloc(B.internal(), ADDR, 64)
      offsets[2] = s:size()
      s:alloc(B.lua(0x100, 5), ADDR + 64, 300)
      offsets[3] = s:size()
      s:realloc(B.c(0x5000), ADDR, 64, ADDR + 4096, 128)
      offsets[4] = s:size()
      s:free(B.trace(3), ADDR + 64, 300)
      s:epilogue()
      local stream = open(s:bytes())
      local events = collect(stream)
      assert.are.same({
        { kind = 'alloc', site = events[1].site, name = 'INTERNAL',
          naddr = ADDR, nsize = 64, oaddr = 0, osize = 0, offset = offsets[1] },
        { kind = 'alloc', site = events[2].site, name = '@test.lua:5',
          naddr = ADDR + 64, nsize = 300, oaddr = 0, osize = 0,
          offset = offsets[2] },
        { kind = 'realloc', site = events[3].site, name = 'malloc',
          naddr = ADDR + 4096, nsize = 128, oaddr = ADDR, osize = 64,
          offset = offsets[3] },
        { kind = 'free', site = events[4].site, name =
          'TRACE started at @test.lua:4', naddr = 0, nsize = 0,
          oaddr = ADDR + 64, osize = 300, offset = offsets[4] },
      }, events)
      assert.are.equal('internal', events[1].site.source)
      assert.are.same({ 'lua', '@test.lua', 5 }, { events[2].site.source,
        events[2].site.chunkname, events[2].site.line })
      assert.are.same({ 'c', 0x5000 }, { events[3].site.source,
        events[3].site.addr })
      assert.are.same({ 'trace', 1 }, { events[4].site.source,
        events[4].site.traces })
      assert.is_nil(stream.warning)
      assert.are.equal(4, stream.events)
      assert.are.equal(#s:bytes(), stream.bytes_read)
      assert.are.equal(3, stream.version)
      assert.are.equal(3, stream.symtab_version)
      assert.are.equal('out.bin', stream.name)
      assert.is_nil(stream:next())
      assert.is_false(stream.has_stacks)
      assert.is_false(stream.has_time)
      assert.is_nil(stream.time)
      assert.are.same({}, stream.stacks)
    end)

    -- stream.events and stream.bytes_read are brought up to date when
    -- next() reads a chunk (near the end of the buffer) and at the end.
    it('counts the events and bytes read when closed in the middle',
      function()
        local s = B.new():events()
        local offsets = {}
        for i = 1, 40 do
          offsets[i] = s:size()
          s:alloc(B.internal(), ADDR + 64 * i, 64)
        end
        s:epilogue()
        local stream = open(s:bytes())
        for _ = 1, 3 do
          assert.truthy(stream:next())
        end
        stream:close()
        assert.are.equal(3, stream.events)
        assert.are.equal(offsets[4], stream.bytes_read)
        assert.is_nil(stream:next())
        assert.are.equal(3, stream.events)
      end)

    it('gives every event as values with next_values, as next() gives ' ..
      'it in its table', function()
        -- A symbol event in the middle, stacks, a time mark, a cut end.
        local s = B.new():lfunc(0x100, '@v.lua', 1):cfunc(0x5000, 'malloc')
          :trace(3, 0x100, 4):events({ version = B.EXTENDED })
        s:stack(1, { B.lua(0x100, 5), B.c(0x5000) })
        s:alloc(B.internal(), ADDR, 64)
        s:alloc(B.lua(0x100, 5, 1), ADDR + 64, 300)
        s:define_lfunc(0x200, '@w.lua', 7)
        s:time(5000)
        s:realloc(B.c(0x5000, 1), ADDR, 64, ADDR + 4096, 128)
        s:free(B.trace(3), ADDR + 64, 300)
        s:alloc(B.lua(0x200, 8), ADDR + 8192, 200000)
        local cut = s:bytes():sub(1, s:size() - 2)
        local whole = s:epilogue():bytes()
        local fields = { 'kind', 'site', 'oaddr', 'osize', 'naddr', 'nsize',
          'stack', 'offset' }
        for _, bytes in ipairs({ whole, cut }) do
          local by_table, by_values = open(bytes), open(bytes)
          local tables, values = {}, {}
          for ev in by_table:each() do
            local row = {}
            for i, field in ipairs(fields) do
              row[i] = ev[field]
            end
            tables[#tables + 1] = row
          end
          while true do
            local row = { by_values:next_values() }
            if row[1] == nil then
              break
            end
            values[#values + 1] = row
          end
          assert.are.equal(bytes == whole and 5 or 4, #values)
          assert.are.same(tables, values)
          if bytes == whole then
            assert.are.equal('@w.lua:8', values[5][2].name)
            assert.is_nil(by_values.warning)
          else
            assert.truthy(by_values.warning:find('in the middle of an event'))
          end
          assert.are.same({ by_table.events, by_table.bytes_read,
            by_table.warning }, { by_values.events, by_values.bytes_read,
            by_values.warning })
          assert.is_nil(by_values:next_values())
        end
      end)

    it('counts the events of a stream whose end is cut', function()
      local s = B.new():events()
      for i = 1, 40 do
        s:alloc(B.internal(), ADDR + 64 * i, 64)
      end
      local stream = open(s:bytes())
      assert.are.equal(40, #collect(stream))
      assert.are.equal(40, stream.events)
      assert.are.equal(#s:bytes(), stream.bytes_read)
      assert.is_nil(stream:next())
      assert.are.equal(40, stream.events)
    end)

    it('has a next() of its own', function()
      local bytes = B.new():events():epilogue():bytes()
      local a, b = open(bytes), open(bytes)
      assert.are.equal('function', type(a.next))
      assert.are_not.equal(a.next, b.next)
      assert.is_nil(a.next(a))
      assert.are.equal(0, a.events)
    end)

    it('names events in a trace whose number the VM did not store', function()
      local s = B.new():events()
      s:alloc(B.trace(0), ADDR, 48)
      s:alloc(B.trace(0), ADDR + 48, 48)
      s:epilogue()
      local events = collect(open(s:bytes()))
      assert.are.same({ 'TRACE (compiled code, trace not known)',
        'TRACE (compiled code, trace not known)' },
        { events[1].name, events[2].name })
      assert.are.same({ 'trace', 0 }, { events[1].site.source,
        events[1].site.traceno })
      assert.are.equal(events[1].site, events[2].site)
    end)

    it('interns sites: one table per symbol and line, ids dense from 1',
      function()
        local s = B.new():events():define_lfunc(0x100, '@a.lua', 1)
        s:alloc(B.lua(0x100, 5), 1, 1):alloc(B.internal(), 2, 1)
        s:alloc(B.lua(0x100, 5), 3, 1):alloc(B.lua(0x100, 6), 4, 1)
        s:free(B.internal(), 2, 1):epilogue()
        local stream = open(s:bytes())
        local events = collect(stream)
        assert.are.equal(events[1].site, events[3].site)
        assert.are.equal(events[2].site, events[5].site)
        assert.are_not.equal(events[1].site, events[4].site)
        assert.are.same({ 1, 2, 1, 3, 2 }, { events[1].site.id,
          events[2].site.id, events[3].site.id, events[4].site.id,
          events[5].site.id })
        assert.are.equal(3, #stream.sites)
        for id, site in ipairs(stream.sites) do
          assert.are.equal(id, site.id)
        end
      end)

    it('reads symbols given lazily by symbol events', function()
      local s = B.new():events()
      s:define_lfunc(0x200, '=stdin', 1):alloc(B.lua(0x200, 3), 1, 8)
      s:define_cfunc(0x300, 'io_write'):alloc(B.c(0x300), 2, 8)
      s:define_trace(7, 0x200, 2):alloc(B.trace(7), 3, 8)
      s:epilogue()
      assert.are.same({ '=stdin:3', 'io_write',
        'TRACE started at =stdin:2' }, names(collect(open(s:bytes()))))
    end)

    it('reads large numbers exactly', function()
      local big = 2 ^ 52 + 1
      local s = B.new():events():alloc(B.internal(), big, 2 ^ 40 + 3)
        :free(B.internal(), 2 ^ 47 - 1, 0):epilogue()
      local events = collect(open(s:bytes()))
      assert.are.equal(big, events[1].naddr)
      assert.are.equal(2 ^ 40 + 3, events[1].nsize)
      assert.are.equal(2 ^ 47 - 1, events[2].oaddr)
    end)

    it('gives a redefined address a new symbol; earlier events keep the old name',
      function()
        local s = B.new():lfunc(0x100, '@old.lua', 1):cfunc(0x500, 'old_c')
          :events()
        s:alloc(B.lua(0x100, 3), 1, 8):alloc(B.c(0x500), 2, 8)
        s:define_lfunc(0x100, '@new.lua', 1):define_cfunc(0x500, 'new_c')
        s:alloc(B.lua(0x100, 3), 3, 8):alloc(B.c(0x500), 4, 8)
        s:epilogue()
        local events = collect(open(s:bytes()))
        assert.are.same({ '@old.lua:3', 'old_c', '@new.lua:3', 'new_c' },
          names(events))
        assert.are_not.equal(events[1].site, events[3].site)
        assert.are.equal('@old.lua:3', events[1].site.name)
      end)

    it('gives events of one place in a row its site, and a new site once ' ..
      'the place is redefined between two', function()
        local s = B.new():lfunc(0x100, '@old.lua', 1):lfunc(0x200, '@b.lua', 1)
          :trace(1, 0x200, 10):events()
        s:alloc(B.lua(0x100, 3), 1, 8):alloc(B.lua(0x100, 3), 2, 8)
        s:define_lfunc(0x100, '@new.lua', 1):alloc(B.lua(0x100, 3), 3, 8)
        s:alloc(B.trace(1), 4, 8):alloc(B.trace(1), 5, 8)
        s:define_trace(1, 0x100, 20):alloc(B.trace(1), 6, 8)
        s:epilogue()
        local events = collect(open(s:bytes(), { split_traces = true }))
        assert.are.same({ '@old.lua:3', '@old.lua:3', '@new.lua:3',
          'TRACE [1] started at @b.lua:10', 'TRACE [1] started at @b.lua:10',
          'TRACE [1] started at @new.lua:20' }, names(events))
        assert.are.equal(events[1].site, events[2].site)
        assert.are.equal(events[4].site, events[5].site)
      end)

    it('renumbers traces: a new trace symbol replaces the old one', function()
      local s = B.new():lfunc(0x100, '@a.lua', 1):lfunc(0x200, '@b.lua', 1)
        :trace(1, 0x100, 10):events()
      s:alloc(B.trace(1), 1, 8):alloc(B.trace(2), 2, 8)
      s:define_trace(1, 0x200, 20):define_trace(2, 0x100, 30)
      s:alloc(B.trace(1), 3, 8):alloc(B.trace(2), 4, 8)
      s:epilogue()
      assert.are.same({ 'TRACE [1] started at @a.lua:10', 'TRACE [2]',
        'TRACE [1] started at @b.lua:20', 'TRACE [2] started at @a.lua:30' },
        names(collect(open(s:bytes(), { split_traces = true }))))
    end)

    it('names a trace by the function at its address when it was defined',
      function()
        local s = B.new():lfunc(0x100, '@a.lua', 1):trace(1, 0x100, 10)
          :events()
        s:define_lfunc(0x100, '@b.lua', 1):alloc(B.trace(1), 1, 8):epilogue()
        assert.are.same({ 'TRACE started at @a.lua:10' },
          names(collect(open(s:bytes()))))
      end)

    it('resolves C addresses to the nearest symbol below (Tarantool symtab)',
      function()
        local s = B.new()
        -- An ELF-like table: 500 symbols, 0x40 bytes apart, out of order.
        for i = 499, 0, -1 do
          s:cfunc(0x400000 + i * 0x40, 'sym' .. i)
        end
        s:events()
        s:alloc(B.c(0x400000 + 17 * 0x40), 1, 8)        -- exact
        s:alloc(B.c(0x400000 + 17 * 0x40 + 0x1c), 2, 8) -- inside sym17
        s:alloc(B.c(0x400000 + 499 * 0x40 + 0x1000), 3, 8) -- past the last
        s:alloc(B.c(0x3fffff), 4, 8)                    -- below them all
        s:alloc(B.c(0x400000 + 17 * 0x40 + 0x1c), 5, 8)
        s:define_cfunc(0x400000 + 17 * 0x40 + 0x10, 'late')
        s:alloc(B.c(0x400000 + 17 * 0x40 + 0x1c), 6, 8) -- now inside late
        s:epilogue()
        local events = collect(open(s:bytes()))
        assert.are.same({ 'sym17', 'sym17+0x1c', 'sym499+0x1000',
          'CFUNC 0x3fffff', 'sym17+0x1c', 'late+0xc' }, names(events))
        assert.are.equal(events[2].site, events[5].site)
      end)

    it('names functions the stream never described', function()
      local s = B.new():events():alloc(B.lua(0xabc0, 9), 1, 8)
        :alloc(B.c(0xdef0), 2, 8):alloc(B.trace(4), 3, 8):epilogue()
      local events = collect(open(s:bytes()))
      assert.are.same({ 'LFUNC 0xabc0:9', 'CFUNC 0xdef0', 'TRACE [4]' },
        names(events))
      assert.is_nil(events[1].site.chunkname)
    end)

    it('gives multi-line chunk names aliases, numbered by first use',
      function()
        local first = 'local t = {}\nfor i = 1, 10 do t[i] = i end\n'
        local second = 'return {\n  x = 1 }'
        local s = B.new():lfunc(0x100, first, 0):lfunc(0x200, second, 0)
          :trace(1, 0x100, 2):events()
        s:alloc(B.lua(0x200, 1), 1, 8):alloc(B.lua(0x100, 2), 2, 8)
        s:alloc(B.lua(0x200, 2), 3, 8):alloc(B.trace(1), 4, 8):epilogue()
        local stream = open(s:bytes())
        local events = collect(stream)
        assert.are.same({ 'function_alias_1:1', 'function_alias_2:2',
          'function_alias_1:2', 'TRACE started at function_alias_2:2' },
          names(events))
        assert.are.same({ { name = 'function_alias_1', chunkname = second },
          { name = 'function_alias_2', chunkname = first } }, stream.aliases)
        assert.are.same({ 'function_alias_1', 'function_alias_2',
          'function_alias_1', 'function_alias_2' }, { events[1].site.alias,
          events[2].site.alias, events[3].site.alias, events[4].site.alias })
        assert.are.equal(second, events[1].site.chunkname)
      end)

    it('warns when the stream has no epilogue', function()
      local s = B.new():events():alloc(B.internal(), 1, 8)
        :free(B.internal(), 1, 8)
      local stream = open(s:bytes())
      assert.are.equal(2, #collect(stream))
      assert.are.equal('out.bin: the stream has no epilogue (the profile ' ..
        'was not stopped cleanly); the report covers all 2 events',
        stream.warning)
      assert.are.equal(#s:bytes(), stream.bytes_read)
    end)

    it('warns about an empty event stream without epilogue', function()
      local stream = open(B.new():events():bytes())
      assert.is_nil(stream:next())
      assert.are.equal('out.bin: the stream has no epilogue (the profile ' ..
        'was not stopped cleanly); it holds no events', stream.warning)
    end)

    it('warns about a cut inside the very first event', function()
      local s = B.new():events():raw(string.char(0x05))
      local stream = open(s:bytes())
      assert.is_nil(stream:next())
      assert.are.equal(('out.bin: the stream ends at byte %d in the middle ' ..
        'of an event (expected the address of an allocated block); no ' ..
        'event came before it'):format(s:size()), stream.warning)
    end)

    it('warns about bytes after the epilogue', function()
      local s = B.new():events():alloc(B.internal(), 1, 8)
      local at = s:size()
      s:epilogue():raw('junk')
      local stream = open(s:bytes())
      assert.are.equal(1, #collect(stream))
      assert.are.equal(('out.bin: the stream has 4 bytes after its ' ..
        'epilogue at byte %d; they were ignored'):format(at), stream.warning)
    end)

    it('delivers every event before a cut and says which field was cut',
      function()
        local s = B.new():events():alloc(B.internal(), 1, 8)
          :alloc(B.internal(), 2, 8)
        local prefix = s:bytes()
        -- Cut a free event (Lua source) in the size of the freed block.
        local event = B.new():events():free(B.lua(ADDR, 5), ADDR, 1000)
          :bytes():sub(16)
        local stream = open(prefix .. event:sub(1, #event - 1))
        assert.are.equal(2, #collect(stream))
        assert.are.equal(('out.bin: the stream ends at byte %d in the ' ..
          'middle of an event (expected the size of a freed block); the ' ..
          'report covers the 2 events before it'):format(#prefix + #event - 1),
          stream.warning)
      end)

    it('says when the stream ends in the kind of an internal event or ' ..
      'in a note', function()
        local s = B.new():events({ version = B.EXTENDED })
          :note(B.HEAP_AT_START, 5000):alloc(B.internal(1), 1, 8)
        local prefix = s:bytes()
        local stream = open(prefix .. '\37')
        assert.are.equal(1, #collect(stream))
        assert.are.equal(('out.bin: the stream ends at byte %d in the ' ..
          'middle of an event (expected the kind of an internal event); ' ..
          'the report covers the 1 event before it'):format(#prefix + 1),
          stream.warning)
        stream = open(prefix .. '\28\2')
        assert.are.equal(1, #collect(stream))
        assert.are.equal(('out.bin: the stream ends at byte %d in the ' ..
          'middle of an event (expected the heap after the collection of a ' ..
          'note); the report covers the 1 event before it')
          :format(#prefix + 2), stream.warning)
        assert.is_false(stream.collected_at_stop)
      end)

    it('decodes the extended format: stacks and time marks', function()
      local s = B.new():lfunc(0x100, '@helper.lua', 1)
        :lfunc(0x200, '@main.lua', 0):cfunc(0x500, 'string.rep')
        :events({ version = B.EXTENDED })
      s:alloc(B.internal(), 0x10, 8)
      s:stack(1, { B.lua(0x100, 3), B.lua(0x200, 10) })
      s:stack(2, { B.c(0x500), B.lua(0x100, 4), B.lua(0x200, 20) })
      s:time(1500000)
      s:alloc(B.lua(0x100, 3, 1), 0x20, 16)
      s:alloc(B.lua(0x100, 4, 2), ADDR, 1000)
      s:alloc(B.lua(0x100, 4), 0x50, 24)
      s:time(2500000)
      s:stack(3, { B.c(0x500), B.lua(0x200, 30) })
      s:realloc(B.lua(0x100, 3, 1), 0x20, 16, 0x40, 32)
      s:free(B.c(0x500, 3), ADDR, 1000)
      s:free(B.internal(), 0x40, 32)
      s:epilogue()
      local stream = open(s:bytes())
      assert.are.equal(100, stream.version)
      local events = collect(stream)
      local stacks = stream.stacks
      assert.are.equal(3, #stacks)
      local function frame_names(stack)
        local list = {}
        for i, frame in ipairs(stack.frames) do
          list[i] = frame.name
        end
        return list
      end
      assert.are.same({ '@helper.lua:3', '@main.lua:10' },
        frame_names(stacks[1]))
      assert.are.same({ 'string.rep', '@helper.lua:4', '@main.lua:20' },
        frame_names(stacks[2]))
      assert.are.same({ 'string.rep', '@main.lua:30' }, frame_names(stacks[3]))
      -- A stack is its frames, with its id at index 0 and no other key
      -- (id and frames are read through its metatable).
      for id, stack in ipairs(stacks) do
        assert.are.equal(id, stack.id)
        assert.are.equal(stack, stack.frames)
        local keys = {}
        for key in pairs(stack) do
          keys[#keys + 1] = key
        end
        table.sort(keys)
        local expected = {}
        for i = 0, #stack do
          expected[i + 1] = i
        end
        assert.are.same(expected, keys)
        assert.are.equal(id, stack[0])
      end
      local list = {}
      for i, ev in ipairs(events) do
        list[i] = { ev.kind, ev.name, ev.stack and ev.stack.id or 0,
          ev.time or -1 }
      end
      assert.are.same({
        { 'alloc', 'INTERNAL', 0, -1 },
        { 'alloc', '@helper.lua:3', 1, 1500000 },
        { 'alloc', '@helper.lua:4', 2, 1500000 },
        { 'alloc', '@helper.lua:4', 0, 1500000 },
        { 'realloc', '@helper.lua:3', 1, 2500000 },
        { 'free', 'string.rep', 3, 2500000 },
        { 'free', 'INTERNAL', 0, 2500000 },
      }, list)
      -- Frames are the events' own interned sites.
      assert.are.equal(events[2].site, stacks[1].frames[1])
      assert.are.equal(events[3].site, stacks[2].frames[2])
      assert.are.equal(events[6].site, stacks[3].frames[1])
      assert.are.equal(stacks[2].frames[1], stacks[3].frames[1])
      -- A stack's frames are its own array part.
      assert.are.equal(stacks[2], stacks[2].frames)
      assert.are.same({ 3, 2 }, { #stacks[2], stacks[2].id })
      assert.are.same({ ADDR, 1000, 0x20, 16, 0x40, 32 }, { events[3].naddr,
        events[3].nsize, events[5].oaddr, events[5].osize, events[5].naddr,
        events[5].nsize })
      assert.is_true(stream.has_stacks)
      assert.is_true(stream.has_time)
      assert.are.equal(2500000, stream.time)
      assert.are.equal(7, stream.events)
      assert.are.equal(#s:bytes(), stream.bytes_read)
      assert.is_nil(stream.warning)
    end)

    it('reads an extended stream with time marks but no stacks', function()
      local s = B.new():events({ version = B.EXTENDED })
      s:alloc(B.internal(), 1, 8):time(7):alloc(B.internal(), 2, 8)
        :time(9):epilogue()
      local stream = open(s:bytes())
      local events = collect(stream)
      assert.is_nil(events[1].time)
      assert.are.equal(7, events[2].time)
      assert.is_nil(events[2].stack)
      assert.is_false(stream.has_stacks)
      assert.is_true(stream.has_time)
      assert.are.equal(9, stream.time)
    end)

    it('names internal events by what the VM was doing', function()
      local s = B.new():events({ version = B.EXTENDED })
      s:alloc(B.internal(1), 0x10, 8):free(B.internal(1), 0x10, 8)
      s:alloc(B.internal(2), 0x20, 16):realloc(B.internal(3), 0x20, 16,
        0x30, 32)
      s:alloc(B.internal(4), 0x40, 24):alloc(B.internal(), 0x50, 40)
      s:epilogue()
      local stream = open(s:bytes())
      local list = {}
      for i, ev in ipairs(collect(stream)) do
        list[i] = { ev.kind, ev.name, ev.site.source,
          ev.site.internal_kind or '-', ev.stack or '-', ev.nsize }
      end
      assert.are.same({
        { 'alloc', 'INTERNAL (garbage collector)', 'internal',
          'garbage collector', '-', 8 },
        { 'free', 'INTERNAL (garbage collector)', 'internal',
          'garbage collector', '-', 0 },
        { 'alloc', 'INTERNAL (JIT compiler)', 'internal', 'JIT compiler',
          '-', 16 },
        { 'realloc', 'INTERNAL (trace exit)', 'internal', 'trace exit', '-',
          32 },
        { 'alloc', 'INTERNAL (interpreter)', 'internal', 'interpreter', '-',
          24 },
        { 'alloc', 'INTERNAL', 'internal', '-', '-', 40 },
      }, list)
      -- One site per kind, its own function.
      local events = collect(open(s:bytes()))
      assert.are.equal(events[1].site, events[2].site)
      assert.are.equal(events[1].site, events[1].site.func)
      assert.are.equal(5, #stream.sites)
      assert.is_nil(stream.warning)
    end)

    it('reads the notes of the heap at start and of the collection at stop',
      function()
        local s = B.new():events({ version = B.EXTENDED })
          :note(B.HEAP_AT_START, 123456):time(0)
        s:alloc(B.internal(1), 0x10, 8):note(B.COLLECTED_AT_STOP, 99000)
          :epilogue()
        local stream = open(s:bytes())
        -- The heap at start is read with the headers.
        assert.are.equal(123456, stream.heap_at_start)
        assert.is_false(stream.collected_at_stop)
        assert.are.equal(1, #collect(stream))
        assert.is_true(stream.collected_at_stop)
        assert.are.equal(99000, stream.heap_after_collection)
        assert.are.equal(#s:bytes(), stream.bytes_read)
        assert.is_nil(stream.warning)
        local plain = open(B.new():events({ version = B.EXTENDED })
          :alloc(B.internal(), 1, 8):epilogue():bytes())
        collect(plain)
        assert.is_nil(plain.heap_at_start)
        assert.is_false(plain.collected_at_stop)
        assert.is_nil(plain.heap_after_collection)
      end)

    it('resolves the frames of a stack against the symbols of the moment',
      function()
        local s = B.new():lfunc(0x100, '@old.lua', 1):cfunc(0x400, 'lib_f')
          :events({ version = B.EXTENDED })
        s:stack(1, { B.lua(0x100, 2), B.c(0x410), B.lua(0x900, 7),
          B.c(0x10) })
        s:define_lfunc(0x100, '@new.lua', 1)
        s:stack(2, { B.lua(0x100, 2) })
        s:alloc(B.lua(0x100, 2, 2), 1, 8):epilogue()
        local stream = open(s:bytes())
        local events = collect(stream)
        local names1, stack1 = {}, stream.stacks[1]
        for i, frame in ipairs(stack1.frames) do
          names1[i] = frame.name
        end
        assert.are.same({ '@old.lua:2', 'lib_f+0x10', 'LFUNC 0x900:7',
          'CFUNC 0x10' }, names1)
        assert.are.equal('@new.lua:2', stream.stacks[2].frames[1].name)
        assert.are.equal(events[1].site, stream.stacks[2].frames[1])
        assert.are_not.equal(events[1].site, stack1.frames[1])
      end)
  end)
end

describe('reader sites', function()
  it('name the program\'s own functions that no symbol names by the ' ..
    'program, those of a library by its path', function()
    local s = B.new():cfunc(0x400, '/usr/bin/luajit+0x92c0')
      :cfunc(0x500, '/usr/lib/x86_64-linux-gnu/libc.so.6+0x2a1ca')
      :cfunc(0x600, '/opt/lib/libfoo.so+0x10'):cfunc(0x700, 'sym+0x10')
      :events()
    for i, addr in ipairs({ 0x400, 0x500, 0x600, 0x700 }) do
      s:alloc(B.c(addr), i, 8)
    end
    local list = {}
    for i, ev in ipairs(collect(reader.from_string(s:epilogue():bytes()))) do
      list[i] = ev.name
    end
    assert.are.same({ 'luajit+0x92c0 (host program)',
      '/usr/lib/x86_64-linux-gnu/libc.so.6+0x2a1ca',
      '/opt/lib/libfoo.so+0x10', 'sym+0x10' }, list)
  end)

  it('give the function each site belongs to', function()
    local chunk = 'local x = {}\nreturn x'
    local s = B.new():lfunc(0x100, '@f.lua', 12):lfunc(0x200, '@main.lua', 0)
      :lfunc(0x300, chunk, 4):cfunc(0x400, 'lib_f'):cfunc(0x500, '')
      :trace(1, 0x100, 13):events()
    local locations = { B.lua(0x100, 13), B.lua(0x100, 14), B.lua(0x200, 3),
      B.lua(0x300, 5), B.lua(0x900, 1), B.c(0x400), B.c(0x408), B.c(0x500),
      B.c(0x10), B.trace(1), B.internal() }
    for i, loc in ipairs(locations) do
      s:alloc(loc, i, 8)
    end
    s:epilogue()
    local events = collect(reader.from_string(s:bytes()))
    local list = {}
    for i, ev in ipairs(events) do
      list[i] = { ev.name, ev.site.func.name, ev.site.func.source }
    end
    assert.are.same({
      { '@f.lua:13', 'function at @f.lua:12', 'lua' },
      { '@f.lua:14', 'function at @f.lua:12', 'lua' },
      { '@main.lua:3', 'main chunk of @main.lua', 'lua' },
      { 'function_alias_1:5', 'function at function_alias_1:4', 'lua' },
      { 'LFUNC 0x900:1', 'function at LFUNC 0x900', 'lua' },
      { 'lib_f', 'lib_f', 'c' },
      { 'lib_f+0x8', 'lib_f', 'c' },
      { 'CFUNC 0x500', 'CFUNC 0x500', 'c' },
      { 'CFUNC 0x10', 'CFUNC 0x10', 'c' },
      { 'TRACE started at @f.lua:13', 'TRACE started at @f.lua:13',
        'trace' },
      { 'INTERNAL', 'INTERNAL', 'internal' },
    }, list)
    assert.are.equal(events[1].site.func, events[2].site.func)
    assert.are.equal(events[6].site.func, events[7].site.func)
    assert.are.equal(events[10].site, events[10].site.func)
    assert.are.equal(events[11].site, events[11].site.func)
    assert.are.same({ '@f.lua', 12, 0x100, nil }, { events[1].site.func.chunkname,
      events[1].site.func.line, events[1].site.func.addr,
      events[1].site.func.alias })
    assert.are.equal('function_alias_1', events[4].site.func.alias)
  end)
end)

-- Every cut inside every kind of event ------------------------------------

-- An event as a list of fields: { what, encoded bytes }.
local function fields_of(header, list)
  local fields = { { 'an event header', string.char(header) } }
  for _, field in ipairs(list) do
    local bytes = type(field[2]) == 'string' and field[2] or B.uleb(field[2])
    fields[#fields + 1] = { field[1], bytes }
  end
  return fields
end

local LUA = { { 'the address of a Lua function', ADDR }, { 'a line number', 300 } }
local C = { { 'the address of a C function', ADDR + 8 } }
local TRACE = { { 'a trace number', 200 } }

local function with(loc, rest)
  local list = {}
  for _, field in ipairs(loc) do
    list[#list + 1] = field
  end
  for _, field in ipairs(rest) do
    list[#list + 1] = field
  end
  return list
end

local ALLOC = { { 'the address of an allocated block', ADDR },
  { 'the size of an allocated block', 20000 } }
local FREE = { { 'the address of a freed block', ADDR },
  { 'the size of a freed block', 20000 } }
local REALLOC = { { 'the old address of a reallocated block', ADDR },
  { 'the old size of a reallocated block', 20000 },
  { 'the new address of a reallocated block', ADDR + 0x100000 },
  { 'the new size of a reallocated block', 40000 } }

local CUT_EVENTS = {
  { 'internal alloc', fields_of(0x05, ALLOC) },
  { 'Lua alloc', fields_of(0x09, with(LUA, ALLOC)) },
  { 'C alloc', fields_of(0x0d, with(C, ALLOC)) },
  { 'trace alloc', fields_of(0x11, with(TRACE, ALLOC)) },
  { 'internal free', fields_of(0x06, FREE) },
  { 'Lua free', fields_of(0x0a, with(LUA, FREE)) },
  { 'internal realloc', fields_of(0x07, REALLOC) },
  { 'Lua realloc', fields_of(0x0b, with(LUA, REALLOC)) },
  { 'trace realloc', fields_of(0x13, with(TRACE, REALLOC)) },
  { 'Lua function symbol', fields_of(0x08, {
    { 'the address of a Lua function', ADDR },
    { 'the length of a chunk name', 9 }, { 'a chunk name', '@file.lua' },
    { 'the first line of a Lua function', 200 } }) },
  { 'C function symbol', fields_of(0x0c, {
    { 'the address of a C function', ADDR },
    { 'the length of the name of a C function', 8 },
    { 'the name of a C function', 'io_write' } }) },
  { 'trace symbol', fields_of(0x10, { { 'a trace number', 300 },
    { 'the address of the Lua function of a trace', ADDR },
    { 'the start line of a trace', 1000 } }) },
}

describe('reader indexes', function()
  -- Every kind of site, an alias and a stack.
  local function symbols_stream()
    local s = B.new():lfunc(0x100, '@f.lua', 12):lfunc(0x300, 'x = 1\ny', 4)
      :cfunc(0x400, 'lib_f'):trace(1, 0x100, 13)
      :events({ version = B.EXTENDED })
    s:stack(1, { B.lua(0x100, 13) })
    for i, loc in ipairs({ B.lua(0x100, 13, 1), B.lua(0x300, 5), B.c(0x408),
        B.trace(1), B.internal() }) do
      s:alloc(loc, i * 16, 8)
    end
    return s
  end

  local INDEXES = { 'lfuncs', 'cfuncs', 'traces', 'c_sites', 'trace_sites',
    'unknown_c', 'alias_of', 'internal_kind_sites', 'trace_starts',
    'inferred' }

  local function kept(stream)
    local list = {}
    for _, field in ipairs(INDEXES) do
      if stream[field] ~= nil then
        list[#list + 1] = field
      end
    end
    return list
  end

  it('are forgotten once the stream is done, the sites and stacks kept',
    function()
      local stream = reader.from_string(symbols_stream():epilogue():bytes())
      assert.truthy(stream:next())
      assert.are.equal(10, #kept(stream))
      assert.are.equal(4, #collect(stream))
      assert.is_true(stream.done)
      assert.are.same({}, kept(stream))
      local sites = {}
      for i, site in ipairs(stream.sites) do
        sites[i] = site.name
      end
      assert.are.same({ '@f.lua:13', 'function_alias_1:5', 'lib_f+0x8',
        'TRACE started at @f.lua:13', 'INTERNAL' }, sites)
      assert.are.equal('@f.lua:13', stream.stacks[1].frames[1].name)
      assert.are.same({ { name = 'function_alias_1', chunkname = 'x = 1\ny' } },
        stream.aliases)
    end)

  it('are forgotten when a cut stream stops, and when it is closed',
    function()
      local cut = reader.from_string(symbols_stream():bytes())
      assert.are.equal(5, #collect(cut))
      assert.truthy(cut.warning)
      assert.are.same({}, kept(cut))
      local closed = reader.from_string(symbols_stream():bytes())
      closed:close()
      assert.are.same({}, kept(closed))
      assert.is_nil(closed:next())
    end)
end)

describe('reader counts', function()
  -- A stream read in one chunk: the counts of the events before the
  -- last 72 bytes (MAX_EVENT) stay at those of the headers until the end.
  it('lag behind the events during reading, exact at the end', function()
    local s = B.new():events()
    local first = s:size()
    for i = 1, 40 do
      s:alloc(B.internal(), ADDR + 64 * i, 64)
    end
    s:epilogue()
    local modes = { {} }
    for _, opts in ipairs(modes) do
      local stream = reader.from_string(s:bytes(), 'out.bin', opts)
      for _ = 1, 3 do
        assert.truthy(stream:next())
      end
      assert.are.equal(0, stream.events)
      assert.are.equal(first, stream.bytes_read)
      assert.are.equal(40, 3 + #collect(stream))
      assert.are.equal(40, stream.events)
      assert.are.equal(#s:bytes(), stream.bytes_read)
    end
  end)
end)

describe('reader truncation', function()
  local prefix_builder = B.new():lfunc(ADDR, '@x.lua', 1):events()
    :alloc(B.internal(), 1, 8):alloc(B.lua(ADDR, 2), 2, 8)
    :free(B.internal(), 1, 8)
  local prefix = prefix_builder:bytes()

  for _, case in ipairs(CUT_EVENTS) do
    local label, fields = case[1], case[2]
    local event = joined(fields)

    it('cut anywhere inside a ' .. label .. ' event', function()
      -- The whole event decodes (the layout is right)...
      local whole = reader.from_string(prefix .. event, 'out.bin')
      local count = #collect(whole)
      assert.are.equal(label:find('symbol') and 3 or 4, count)
      -- ...and each cut names the field it falls in.
      assert_each_cut(prefix, fields)
    end)
  end

  it('never raises when a stream is cut at any byte of its events', function()
    local s = B.new():lfunc(0x100, 'chunk\nwith lines', 1):events()
    local first_event = s:size()
    s:define_cfunc(0x900, 'f'):alloc(B.c(0x904), ADDR, 17)
    s:define_trace(2, 0x100, 3):realloc(B.trace(2), ADDR, 17, ADDR * 2, 99)
    s:free(B.lua(0x100, 1), ADDR * 2, 99):alloc(B.internal(), 5, 2 ^ 40)
    s:epilogue()
    local bytes = s:bytes()
    local full = names(collect(reader.from_string(bytes)))
    for cut = first_event, #bytes - 1 do
      for _, mode in ipairs(MODES) do
        local stream = reader.from_string(bytes:sub(1, cut), 'out.bin',
          mode.opts)
        local got = names(collect(stream))
        assert.is_string(stream.warning)
        for i, name in ipairs(got) do
          assert.are.equal(full[i], name)
        end
      end
    end
  end)
end)

describe('reader errors', function()
  it('rejects a bad symbol table magic', function()
    assert.are.equal("out.bin: byte 0: expected the symbol table magic " ..
      "'ljs', found 'xyz'", open_error('xyz\3\0\0\0\128ljm\3\0\0\0\128'))
    assert.are.equal("out.bin: byte 0: expected the symbol table magic " ..
      "'ljs', found '\\x00\\x01\\xff'", open_error('\0\1\255\3\0\0\0'))
  end)

  it('rejects an unknown symbol table version', function()
    assert.are.equal('out.bin: byte 3: expected symbol table version 3, ' ..
      'found 9', open_error(B.new({ symtab_version = 9 }):events():bytes()))
  end)

  it('rejects a bad event stream magic and version', function()
    assert.are.equal("out.bin: byte 8: expected the event stream magic " ..
      "'ljm', found 'ljx'", open_error(B.new():raw('\128ljx\3\0\0\0'):bytes()))
    assert.are.equal('out.bin: byte 11: expected event stream version 3 ' ..
      'or 100, found 2', open_error(B.new():events({ version = 2 }):bytes()))
    assert.are.equal('out.bin: byte 3: expected symbol table version 3, ' ..
      'found 100', open_error(B.new({ symtab_version = 100 }):events()
        :bytes()))
  end)

  it('rejects a bad symbol header in the symbol table', function()
    assert.are.equal('out.bin: byte 7: expected a symbol header (type 0, ' ..
      '1 or 2, or 0x80 to end the table), found 0x03',
      open_error(B.new():raw('\3'):bytes()))
  end)

  -- A process killed in its first second leaves a file of 0 bytes.
  it('reads an empty file as a profile with no events, and says why',
    function()
      local stream = reader.from_string('', 'out.bin')
      assert.is_nil(stream:next())
      assert.are.same({ 0, 0, nil, 'out.bin: the file is empty: the ' ..
        'process wrote no profile (it ended, or was killed, before its ' ..
        'first write); no events' },
        { stream.events, stream.bytes_read, stream.version, stream.warning })
    end)

  it('rejects files shorter than the two headers', function()
    assert.are.equal("out.bin: byte 0: expected the symbol table magic " ..
      "'ljs', found 'lj' and then the end of the file", open_error('lj'))
    assert.are.equal('out.bin: byte 3: expected symbol table version, ' ..
      'found the end of the file', open_error('ljs'))
    assert.are.equal('out.bin: byte 4: expected the reserved bytes of the ' ..
      'symbol table header, found the end of the file', open_error('ljs\3\0'))
    assert.are.equal('out.bin: byte 7: expected a symbol header (or 0x80 ' ..
      'to end the table), found the end of the file',
      open_error(B.new():bytes()))
    local cut = B.new():cfunc(0x1234, 'a_long_name'):bytes()
    assert.are.equal('out.bin: byte 11: expected the name of a C function, ' ..
      'found the end of the file', open_error(cut:sub(1, -2)))
    assert.are.equal("out.bin: byte 8: expected the event stream magic " ..
      "'ljm', found the end of the file", open_error(B.new():raw('\128')
        :bytes()))
    assert.are.equal('out.bin: byte 12: expected the reserved bytes of the ' ..
      'event stream header, found the end of the file',
      open_error(B.new():raw('\128ljm\3'):bytes()))
  end)

  it('rejects a bad event header, naming its offset', function()
    local s = B.new():events():alloc(B.internal(), 1, 8)
    local at = s:size()
    s:raw('\90'):alloc(B.internal(), 2, 8):epilogue()
    local stream = reader.from_string(s:bytes(), 'out.bin')
    assert.is_table(stream:next())
    local ok, err = pcall(stream.next, stream)
    assert.is_false(ok)
    assert.are.equal(('out.bin: byte %d: expected an event header ' ..
      '(0x00-0x13 or 0x80), found 0x5a'):format(at), err)
  end)

  it('rejects event headers without a source', function()
    local s = B.new():events():raw('\1'):numbers(1, 8):epilogue()
    local stream = reader.from_string(s:bytes(), 'out.bin')
    local ok, err = pcall(stream.next, stream)
    assert.is_false(ok)
    assert.are.equal('out.bin: byte 15: expected an event header with a ' ..
      'source (0x05-0x13 or 0x80), found 0x01', err)
    s = B.new():events():raw('\4'):numbers(1, 8):epilogue()
    stream = reader.from_string(s:bytes(), 'out.bin')
    ok, err = pcall(stream.next, stream)
    assert.are.equal('out.bin: byte 15: expected a symbol event header ' ..
      '(0x08, 0x0c or 0x10), found 0x04', err)
  end)

  it('rejects numbers longer than 10 bytes', function()
    for _, mode in ipairs(MODES) do
      local s = B.new():events():raw('\5' .. ('\255'):rep(11) .. '\1\8')
        :epilogue()
      local stream = reader.from_string(s:bytes(), 'out.bin', mode.opts)
      local ok, err = pcall(stream.next, stream)
      assert.is_false(ok)
      assert.are.equal('out.bin: byte 16: expected the address of an ' ..
        'allocated block, found a number longer than 10 bytes', err)
    end
    local s = B.new():raw('\1' .. ('\128'):rep(10) .. '\0')
    assert.are.equal('out.bin: byte 8: expected the address of a C ' ..
      'function, found a number longer than 10 bytes', open_error(s:bytes()))
  end)

  it('rejects 10-byte numbers above 2^64 - 1, naming their offset',
    function()
      -- 2^64 and 2^65: a tenth byte of 2 and 4.
      for _, last in ipairs({ '\2', '\4' }) do
        for _, mode in ipairs(MODES) do
          local s = B.new():events():raw('\5' .. ('\128'):rep(9) .. last ..
            '\1'):epilogue()
          local stream = reader.from_string(s:bytes(), 'out.bin', mode.opts)
          local ok, err = pcall(stream.next, stream)
          assert.are.same({ false, 'out.bin: byte 16: expected the address ' ..
            'of an allocated block, found a number above 2^64 - 1' },
            { ok, err })
        end
        local s = B.new():raw('\1' .. ('\255'):rep(9) .. last .. '\0')
        assert.are.equal('out.bin: byte 8: expected the address of a C ' ..
          'function, found a number above 2^64 - 1', open_error(s:bytes()))
      end
      -- A time mark of 2^65, in the extended format.
      local s = B.new():events({ version = 100 })
      local at = s:size() + 1
      s:raw('\24' .. ('\128'):rep(9) .. '\4'):epilogue()
      local stream = reader.from_string(s:bytes(), 'out.bin')
      local ok, err = pcall(stream.next, stream)
      assert.are.same({ false, ('out.bin: byte %d: expected the time of a ' ..
        'time mark, found a number above 2^64 - 1'):format(at) }, { ok, err })
    end)

  it('accepts a 10-byte number', function()
    local s = B.new():events():raw('\5' .. ('\255'):rep(9) .. '\1\8')
      :raw('\5' .. ('\128'):rep(9) .. '\0\1\8'):epilogue()
    local events = collect(reader.from_string(s:bytes()))
    -- 2^64 - 1, as near as a Lua number is.
    assert.are.same({ 2 ^ 64, 8 }, { events[1].naddr, events[1].nsize })
    assert.are.equal(0, events[2].naddr)
    assert.are.equal(1, events[2].nsize)
  end)
end)

describe('reader.open', function()
  it('reads a file in chunks', function()
    local s = B.new():lfunc(0x100, '@f.lua', 1):events()
    for i = 1, 1000 do
      s:alloc(B.lua(0x100, i % 7), ADDR + i * 16, i)
    end
    s:epilogue()
    local path = os.tmpname()
    local file = assert(io.open(path, 'wb'))
    file:write(s:bytes())
    file:close()
    local stream = reader.open(path, { chunk_size = 100 })
    local events = collect(stream)
    os.remove(path)
    assert.are.equal(1000, #events)
    assert.are.equal('@f.lua:5', events[999].name)
    assert.are.equal(999, events[999].nsize)
    assert.are.equal(#s:bytes(), stream.bytes_read)
    assert.is_nil(stream.warning)
    assert.are.equal(path, stream.name)
  end)

  it('reads a record longer than a chunk from a file', function()
    local chunkname = '@' .. string.rep('long/', 60) .. 'f.lua'
    local s = B.new():lfunc(0x100, chunkname, 1):events()
    s:alloc(B.lua(0x100, 3), ADDR, 24)
    s:epilogue()
    local path = os.tmpname()
    local file = assert(io.open(path, 'wb'))
    file:write(s:bytes())
    file:close()
    for _, opts in ipairs({ { chunk_size = 16 } }) do
      local reads = {}
      opts.on_read = function(total) reads[#reads + 1] = total end
      local events = collect(reader.open(path, opts))
      assert.are.equal(1, #events)
      assert.are.equal(chunkname .. ':3', events[1].name)
      -- Every chunk is 16 bytes but the last.
      assert.are.equal(math.ceil(#s:bytes() / 16), #reads)
      assert.are.equal(#s:bytes(), reads[#reads])
    end
    os.remove(path)
  end)

  it('says why a directory cannot be read', function()
    local ok, err = pcall(reader.open, '/')
    assert.is_false(ok)
    assert.are.equal('/: Is a directory', err)
  end)

  it('says why a file cannot be opened', function()
    local ok, err = pcall(reader.open, '/nonexistent/out.bin')
    assert.is_false(ok)
    assert.are.equal('/nonexistent/out.bin: No such file or directory', err)
  end)
end)

-- The extended format: every cut, every error -------------------------------

local STACK_ID = { { 'a stack id', 1 } }

local EXTENDED_CUT_EVENTS = {
  { 'Lua alloc with a stack', fields_of(0x29, with(with(LUA, STACK_ID),
    ALLOC)) },
  { 'C realloc with a stack', fields_of(0x2f, with(with(C, STACK_ID),
    REALLOC)) },
  { 'Lua free with a stack', fields_of(0x2a, with(with(LUA, STACK_ID),
    FREE)) },
  { 'stack definition', fields_of(0x14, { { 'a stack id', 2 },
    { 'the number of frames of a stack', 3 },
    { 'the kind of a stack frame', '\8' },
    { 'the address of the Lua function of a frame', ADDR },
    { 'the line of a frame', 300 },
    { 'the kind of a stack frame', '\12' },
    { 'the address of the C function of a frame', ADDR + 8 },
    { 'the kind of a stack frame', '\8' },
    { 'the address of the Lua function of a frame', ADDR },
    { 'the line of a frame', 3 } }) },
  { 'time mark', fields_of(0x18, { { 'the time of a time mark',
    123456789012 } }) },
}

describe('reader truncation (extended format)', function()
  local prefix = B.new():lfunc(ADDR, '@x.lua', 1):cfunc(ADDR + 8, 'f')
    :events({ version = B.EXTENDED })
    :stack(1, { B.lua(ADDR, 2) }):alloc(B.internal(), 1, 8)
    :alloc(B.lua(ADDR, 2, 1), 2, 8):time(5):free(B.internal(), 1, 8)
    :bytes()

  for _, case in ipairs(EXTENDED_CUT_EVENTS) do
    local label, fields = case[1], case[2]
    local event = joined(fields)

    it('cut anywhere inside a ' .. label, function()
      local whole = reader.from_string(prefix .. event, 'out.bin')
      local is_record = label == 'stack definition' or label == 'time mark'
      assert.are.equal(is_record and 3 or 4, #collect(whole))
      assert_each_cut(prefix, fields)
    end)
  end

  it('keeps no stack whose definition was cut', function()
    local s = B.new():lfunc(0x100, '@a.lua', 1):events({ version = B.EXTENDED })
      :stack(1, { B.lua(0x100, 1) }):stack(2, { B.lua(0x100, 2),
        B.lua(0x100, 3) })
    local stream = reader.from_string(s:bytes():sub(1, -2), 'out.bin')
    assert.is_nil(stream:next())
    assert.are.equal(1, #stream.stacks)
    assert.matches('expected the line of a frame', stream.warning)
  end)

  it('never raises when a stream is cut at any byte of its events', function()
    local s = B.new():lfunc(0x100, 'chunk\nwith lines', 1)
      :events({ version = B.EXTENDED })
    local first_event = s:size()
    s:define_cfunc(0x900, 'f'):stack(1, { B.c(0x904), B.lua(0x100, 2) })
    s:alloc(B.c(0x904, 1), ADDR, 17):time(1000000)
    s:define_trace(2, 0x100, 3):realloc(B.trace(2), ADDR, 17, ADDR * 2, 99)
    s:stack(2, { B.lua(0x100, 1) }):time(2000000)
    s:free(B.lua(0x100, 1, 2), ADDR * 2, 99):alloc(B.internal(), 5, 2 ^ 40)
    s:time(3000000):epilogue()
    local bytes = s:bytes()
    local full = names(collect(reader.from_string(bytes)))
    assert.are.equal(4, #full)
    for cut = first_event, #bytes - 1 do
      for _, mode in ipairs(MODES) do
        local stream = reader.from_string(bytes:sub(1, cut), 'out.bin',
          mode.opts)
        local got = names(collect(stream))
        assert.is_string(stream.warning)
        for i, name in ipairs(got) do
          assert.are.equal(full[i], name)
        end
      end
    end
  end)
end)

-- The error raised by the first next() that fails, in every mode.
local function next_error(builder)
  local message
  for _, mode in ipairs(MODES) do
    local stream = reader.from_string(builder:bytes(), 'out.bin', mode.opts)
    local ok, err = pcall(function()
      while stream:next() do end
    end)
    assert.is_false(ok, mode.label)
    if message then
      assert.are.equal(message, err, mode.label)
    end
    message = err
  end
  return message
end

local EXTENDED_HEADERS = '0x05-0x14, 0x18, 0x1c, 0x25-0x27, 0x29-0x2b, ' ..
  '0x2d-0x2f, 0x49-0x4b, 0x69-0x6b or 0x80'

describe('reader errors (extended format)', function()
  local function extended()
    return B.new():lfunc(0x100, '@a.lua', 1):events({ version = B.EXTENDED })
      :alloc(B.internal(), 1, 8)
  end

  it('rejects a note of an unknown kind, naming the offset of the kind',
    function()
      for _, kind in ipairs({ 0, 4 }) do
        local s = extended()
        local at = s:size() + 1
        s:raw('\28'):numbers(kind, 5):epilogue()
        assert.are.equal(('out.bin: byte %d: expected the kind of a note (1 ' ..
          'for the heap at start, 2 for the collection at stop, 3 for ' ..
          'compiled code), found %d'):format(at, kind), next_error(s))
      end
    end)

  it('reads the note of how compiled code was attributed', function()
    local cases = { [2] = { 'exact', 'asked' }, [1] = { 'resume', 'asked' },
      [0] = { 'start', 'asked' }, [4] = { 'start', 'no_mcofs' },
      [8] = { 'start', 'not_verified' }, [13] = { 'resume', 'no_prof_mode' },
      [17] = { 'resume', 'program_profiler' }, [3] = { 'walk', 'asked' },
      [11] = { 'walk', 'not_verified' } }
    for value, want in pairs(cases) do
      local s = B.new():events({ version = B.EXTENDED })
        :note(B.HEAP_AT_START, 1):note(B.COMPILED_CODE, value)
        :alloc(B.internal(), 1, 8):epilogue()
      local stream = reader.from_string(s:bytes(), 'out.bin')
      collect(stream)
      assert.are.same({ mode = want[1], why = want[2] }, stream.compiled_code)
    end
    local stream = reader.from_string(extended():epilogue():bytes(), 'out.bin')
    collect(stream)
    assert.is_nil(stream.compiled_code)
  end)

  it('rejects a note of compiled code after an event or of no known value',
    function()
      local s = extended()
      local at = s:size()
      s:note(B.COMPILED_CODE, 2):epilogue()
      assert.are.equal(('out.bin: byte %d: expected the note of compiled ' ..
        'code only once, before any event'):format(at), next_error(s))
      for _, value in ipairs({ 20, 23 }) do
        s = B.new():events({ version = B.EXTENDED })
        at = s:size() + 2
        s:note(B.COMPILED_CODE, value):epilogue()
        local ok, err = pcall(reader.from_string, s:bytes(), 'out.bin')
        assert.is_false(ok)
        assert.are.equal(('out.bin: byte %d: expected the attribution of ' ..
          'compiled code (a mode 0 to 3 plus 4 times a reason 0 to 4), ' ..
          'found %d'):format(at, value), err)
      end
    end)

  it('rejects a note of the heap at start after the first event', function()
    local s = extended()
    local at = s:size()
    s:note(B.HEAP_AT_START, 4096):epilogue()
    assert.are.equal(('out.bin: byte %d: expected the note of the heap at ' ..
      'start only once, first after the event stream header'):format(at),
      next_error(s))
    s = B.new():events({ version = B.EXTENDED }):note(B.HEAP_AT_START, 1)
    at = s:size()
    s:note(B.HEAP_AT_START, 2):epilogue()
    assert.are.equal(('out.bin: byte %d: expected the note of the heap at ' ..
      'start only once, first after the event stream header'):format(at),
      next_error(s))
  end)

  it('rejects a second note of the collection at stop', function()
    local s = extended():note(B.COLLECTED_AT_STOP, 10)
    local at = s:size()
    s:note(B.COLLECTED_AT_STOP, 10):epilogue()
    assert.are.equal(('out.bin: byte %d: expected the note of the ' ..
      'collection at stop only once'):format(at), next_error(s))
  end)

  it('rejects an internal event of an unknown kind, naming the kind\'s ' ..
    'offset', function()
      for _, kind in ipairs({ 0, 5, 200 }) do
        local s = extended()
        local at = s:size() + 1
        s:alloc(B.internal(kind), 2, 8):epilogue()
        assert.are.equal(('out.bin: byte %d: expected the kind of an ' ..
          'internal event (1 to 4), found %d'):format(at, kind),
          next_error(s))
      end
    end)

  it('rejects headers with bit 6 set but on a Lua-line event', function()
    for _, header in ipairs({ 0x45, 0x6d, 0x51, 0xc0 }) do
      local s = extended()
      local at = s:size()
      s:raw(string.char(header)):numbers(1, 8):epilogue()
      assert.are.equal(('out.bin: byte %d: expected an event header (%s), ' ..
        'found 0x%02x, a reserved header (bit 6 set, valid only on a ' ..
        'Lua-line event) that this reader cannot skip'):format(at,
        EXTENDED_HEADERS, header), next_error(s))
    end
  end)

  it('rejects a stack on trace events', function()
    for _, header in ipairs({ 0x31, 0x32, 0x33 }) do
      local s = extended()
      local at = s:size()
      s:raw(string.char(header)):numbers(1, 1, 8):epilogue()
      assert.are.equal(('out.bin: byte %d: expected an event header (%s), ' ..
        'found 0x%02x: trace events carry no stack')
        :format(at, EXTENDED_HEADERS, header), next_error(s))
    end
  end)

  it('rejects the records of the extended format in a version 3 stream',
    function()
      for _, header in ipairs({ 0x14, 0x18, 0x1c, 0x25, 0x26, 0x27, 0x29,
        0x2d }) do
        local s = B.new():events():alloc(B.internal(), 1, 8)
        local at = s:size()
        s:raw(string.char(header)):numbers(1, 1, 1, 8):epilogue()
        assert.are.equal(('out.bin: byte %d: expected an event header ' ..
          '(0x00-0x13 or 0x80), found 0x%02x'):format(at, header),
          next_error(s))
      end
    end)

  it('rejects other records of kind 0 with their list', function()
    local s = extended()
    local at = s:size()
    s:raw('\4'):numbers(1, 8):epilogue()
    assert.are.equal(('out.bin: byte %d: expected a symbol, stack, time or ' ..
      'note record header (0x08, 0x0c, 0x10, 0x14, 0x18 or 0x1c), found 0x04')
      :format(at), next_error(s))
  end)

  it('rejects a stack id used before its definition, naming its offset',
    function()
      local s = extended()
      local at = s:size() + 1 + #B.uleb(0x100) + #B.uleb(5)
      s:alloc(B.lua(0x100, 5, 1), 2, 8):epilogue()
      assert.are.equal(('out.bin: byte %d: expected the id of a stack ' ..
        'defined earlier in the stream (none is defined yet), found 1')
        :format(at), next_error(s))

      s = extended():stack(1, { B.lua(0x100, 1) })
        :stack(2, { B.lua(0x100, 2) })
      s:alloc(B.lua(0x100, 5, 2), 2, 8)
      at = s:size() + 1 + #B.uleb(0x500)
      s:free(B.c(0x500, 3), 2, 8):epilogue()
      assert.are.equal(('out.bin: byte %d: expected the id of a stack ' ..
        'defined earlier in the stream (1 to 2), found 3'):format(at),
        next_error(s))
    end)

  it('rejects a frame of an unknown kind, naming its offset', function()
    local s = extended():raw('\20'):numbers(1, 2)
    s:raw('\8'):numbers(0x100, 3)
    local at = s:size()
    s:raw('\16'):numbers(7):epilogue()
    assert.are.equal(('out.bin: byte %d: expected a stack frame (0x08 for ' ..
      'a Lua function or 0x0c for a C function), found 0x10'):format(at),
      next_error(s))
  end)

  it('rejects stack ids that are not dense from 1', function()
    local s = extended():stack(1, { B.lua(0x100, 1) })
    local at = s:size() + 1
    s:stack(1, { B.lua(0x100, 2) }):epilogue()
    assert.are.equal(('out.bin: byte %d: expected stack id 2 (stack ids are ' ..
      'dense from 1 and each is defined once), found 1'):format(at),
      next_error(s))
    s = extended()
    at = s:size() + 1
    s:stack(5, { B.lua(0x100, 2) }):epilogue()
    assert.are.equal(('out.bin: byte %d: expected stack id 1 (stack ids are ' ..
      'dense from 1 and each is defined once), found 5'):format(at),
      next_error(s))
  end)

  it('rejects stacks of no frames or more than 64', function()
    for _, count in ipairs({ 0, 65 }) do
      local s = extended()
      local at = s:size() + 2
      s:raw('\20'):numbers(1, count)
      for _ = 1, count do
        s:raw('\8'):numbers(0x100, 1)
      end
      s:epilogue()
      assert.are.equal(('out.bin: byte %d: expected the number of frames ' ..
        'of a stack (1 to 64), found %d'):format(at, count), next_error(s))
    end
    local s = extended()
    local frames = {}
    for i = 1, 64 do
      frames[i] = B.lua(0x100, i)
    end
    s:stack(1, frames):alloc(B.lua(0x100, 1, 1), 2, 8):epilogue()
    local stream = reader.from_string(s:bytes())
    stream:next()
    assert.are.equal(64, #stream:next().stack.frames)
  end)
end)

describe('reader trace sites', function()
  -- Traces 1 and 2 start at @a.lua:10, trace 3 at @a.lua:20; trace 1 is
  -- then described again (a number reused after jit.flush()), at the
  -- same place.
  local function three_traces()
    local s = B.new():lfunc(0x100, '@a.lua', 1):trace(1, 0x100, 10)
      :trace(2, 0x100, 10):trace(3, 0x100, 20):events()
    s:alloc(B.trace(1), 1, 8):alloc(B.trace(2), 2, 16)
    s:alloc(B.trace(3), 3, 32):alloc(B.trace(1), 4, 64)
    s:define_trace(1, 0x100, 10):alloc(B.trace(1), 5, 128)
    s:epilogue()
    return s:bytes()
  end

  it('merge the traces that start at one place, and count them', function()
    local events = collect(reader.from_string(three_traces()))
    assert.are.same({ 'TRACE started at @a.lua:10',
      'TRACE started at @a.lua:10', 'TRACE started at @a.lua:20',
      'TRACE started at @a.lua:10', 'TRACE started at @a.lua:10' },
      names(events))
    local merged = events[1].site
    for _, i in ipairs({ 2, 4, 5 }) do
      assert.are.equal(merged, events[i].site)
    end
    assert.are.same({ 'trace', 3, nil }, { merged.source, merged.traces,
      merged.traceno })
    assert.are.equal(merged, merged.func)
    assert.are.equal(1, events[3].site.traces)
  end)

  it('keep one site per trace with split_traces', function()
    local events = collect(reader.from_string(three_traces(), 'out.bin',
      { split_traces = true }))
    assert.are.same({ 'TRACE [1] started at @a.lua:10',
      'TRACE [2] started at @a.lua:10', 'TRACE [3] started at @a.lua:20',
      'TRACE [1] started at @a.lua:10', 'TRACE [1] started at @a.lua:10' },
      names(events))
    assert.are.same({ 1, 2, 3, 1, 1 }, { events[1].site.traceno,
      events[2].site.traceno, events[3].site.traceno, events[4].site.traceno,
      events[5].site.traceno })
    assert.are.equal(events[1].site, events[4].site)
    -- The new description of trace 1 is a new site of the same name.
    assert.are_not.equal(events[1].site, events[5].site)
    assert.is_nil(events[1].site.traces)
  end)

  it('keep traces without a described start, and trace 0, apart', function()
    local s = B.new():events()
    s:alloc(B.trace(4), 1, 8):alloc(B.trace(5), 2, 8):alloc(B.trace(0), 3, 8)
    s:epilogue()
    local events = collect(reader.from_string(s:bytes()))
    assert.are.same({ 'TRACE [4]', 'TRACE [5]',
      'TRACE (compiled code, trace not known)' }, names(events))
    assert.are.same({ 4, 5, 0 }, { events[1].site.traceno,
      events[2].site.traceno, events[3].site.traceno })
  end)

  -- LuaJIT's table.remove is written in Lua: its prototype has the
  -- chunk name 'remove', the first line ~0 and no line numbers.  Our
  -- writer sends ~0 as 32 bits, Tarantool's widened to 64.
  for _, firstline in ipairs({ 2 ^ 32 - 1, 2 ^ 64 - 1 }) do
    it(string.format('name the built-ins written in Lua (first line %.0f)',
      firstline), function()
      local s = B.new():events()
      s:raw(string.char(0x08)):numbers(0x300):raw(B.string('remove'))
      -- 2^64 - 1 is not a double: its ULEB128 is ten bytes, written here.
      if firstline == 2 ^ 32 - 1 then
        s:numbers(firstline)
      else
        s:raw(string.rep('\255', 9) .. '\1')
      end
      s:define_trace(2, 0x300, 0):alloc(B.trace(2), 1, 8)
      s:alloc(B.lua(0x300, 0), 2, 8):epilogue()
      local events = collect(reader.from_string(s:bytes()))
      assert.are.same({ 'TRACE started at [builtin:remove]',
        '[builtin:remove]' }, names(events))
      assert.are.same({ '[builtin:remove]', 'remove' },
        { events[2].site.func.name, events[2].site.chunkname })
    end)
  end
end)

describe('the sampling record', function()
  local function sampled(scheme, mean)
    local s = B.new():lfunc(0x100, '@a.lua', 1):events({ version = B.EXTENDED })
    s:raw(string.char(0x5c, scheme)):numbers(mean)
    return s
  end

  it('gives the mean bytes between samples of a sampled profile', function()
    local s = sampled(1, 524288):alloc(B.lua(0x100, 3), 0x1000, 64):epilogue()
    for _, mode in ipairs(MODES) do
      local stream = reader.from_string(s:bytes(), 'out.bin', mode.opts)
      assert.are.equal(524288, stream.sample_bytes, mode.label)
      local ev = stream:next()
      assert.are.same({ 'alloc', '@a.lua:3', 64 },
        { ev.kind, ev.site.name, ev.nsize }, mode.label)
      assert.is_nil(stream:next())
      assert.is_nil(stream.warning)
    end
  end)

  it('is absent from a profile that records every event', function()
    local s = B.new():events({ version = B.EXTENDED })
      :alloc(B.internal(), 0x1000, 64):epilogue()
    assert.is_nil(reader.from_string(s:bytes(), 'out.bin').sample_bytes)
  end)

  it('rejects an unknown scheme, naming its offset', function()
    local s = B.new():events({ version = B.EXTENDED })
    local at = s:size() + 1
    s:raw(string.char(0x5c, 2)):numbers(4096):epilogue()
    assert.are.equal(('out.bin: byte %d: expected sampling scheme 1 (a ' ..
      'Poisson process over allocated bytes), found 2'):format(at),
      open_error(s:bytes()))
  end)

  it('rejects a mean of 0 bytes', function()
    local s = B.new():events({ version = B.EXTENDED })
    local at = s:size() + 2
    s:raw(string.char(0x5c, 1)):numbers(0):epilogue()
    assert.are.equal(('out.bin: byte %d: expected the mean bytes between ' ..
      'samples (1 or more), found 0'):format(at), open_error(s:bytes()))
  end)

  it('rejects a record cut short', function()
    local s = B.new():events({ version = B.EXTENDED })
    local at = s:size() + 2
    s:raw(string.char(0x5c, 1, 0x80))
    assert.are.equal(('out.bin: byte %d: expected the mean bytes between ' ..
      'samples, found the end of the file'):format(at), open_error(s:bytes()))
  end)

  it('is valid only right after the event stream header', function()
    local s = B.new():events({ version = B.EXTENDED })
      :alloc(B.internal(), 1, 8)
    local at = s:size()
    s:raw(string.char(0x5c, 1)):numbers(4096):epilogue()
    assert.are.equal(('out.bin: byte %d: expected an event header (%s), ' ..
      'found 0x5c, a sampling record, which is valid only right after the ' ..
      'event stream header, before the note of the heap at start'):format(at,
      EXTENDED_HEADERS), next_error(s))
  end)

  it('comes before the note of the heap at start, which follows it',
    function()
    local s = B.new():events({ version = B.EXTENDED, sample_bytes = 4096 })
      :note(B.HEAP_AT_START, 5000):alloc(B.internal(), 1, 8):epilogue()
    local stream = reader.from_string(s:bytes(), 'out.bin')
    local events = 0
    for _ in function() return stream:next() end do events = events + 1 end
    assert.are.same({ 4096, 5000, 1 }, { stream.sample_bytes,
      stream.heap_at_start, events })
    assert.is_nil(stream.warning)
  end)

  it('is refused after the note of the heap at start', function()
    local s = B.new():events({ version = B.EXTENDED })
      :note(B.HEAP_AT_START, 5000)
    local at = s:size()
    s:raw(string.char(0x5c, 1)):numbers(4096):epilogue()
    assert.are.equal(('out.bin: byte %d: expected an event header (%s), ' ..
      'found 0x5c, a sampling record, which is valid only right after the ' ..
      'event stream header, before the note of the heap at start'):format(at,
      EXTENDED_HEADERS), next_error(s))
  end)

  it('is not read in a version 3 stream', function()
    local s = B.new():events()
    local at = s:size()
    s:raw(string.char(0x5c, 1)):numbers(4096):epilogue()
    local stream = reader.from_string(s:bytes(), 'out.bin')
    assert.is_nil(stream.sample_bytes)
    local ok, err = pcall(stream.next, stream)
    assert.is_false(ok)
    assert.are.equal(('out.bin: byte %d: expected an event header ' ..
      '(0x00-0x13 or 0x80), found 0x5c'):format(at), err)
  end)
end)
