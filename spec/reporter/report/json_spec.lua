-- Specs for memprof.report.json: the document is decoded with lua-cjson
-- and its values checked.  Runs under LuaJIT and plain Lua 5.1 (both
-- need lua-cjson, the Debian package lua-cjson).

local cjson = require('cjson')
local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local json = require('memprof.report.json')
local B = require('helpers.stream_builder')

local ALL = { leaks = true, peak = true, temporary = true, timeline = true }

local function render(builder, group, name)
  local result = analyze.run(reader.from_string(builder:bytes(),
    name or 'out.bin'), { group = group, views = ALL })
  local parts = {}
  json.write(result, { write = function(_, ...)
    for i = 1, select('#', ...) do
      parts[#parts + 1] = select(i, ...)
    end
  end })
  return table.concat(parts)
end

local function decode(builder, group)
  return cjson.decode(render(builder, group))
end

-- { name = entry } for the entries of a section.
local function by_name(list)
  local map = {}
  for _, entry in ipairs(list) do
    map[entry.name] = entry
  end
  return map
end

describe('json report', function()
  it('describes the stream, its sites, stacks and rows', function()
    local doc = decode(B.three_callers(), 'caller')
    assert.are.equal(1, doc.memprof_json)
    assert.are.same({ name = 'out.bin', version = 100, symtab_version = 3,
      events = 15, bytes_read = #B.three_callers():bytes(),
      has_stacks = true, has_time = false, last_time_ns = cjson.null,
      sample_bytes = cjson.null, estimates = false,
      heap_at_start = cjson.null, collected_at_stop = false,
      heap_after_collection = cjson.null, compiled_bytes = 0 }, doc.stream)
    assert.are.same({}, doc.warnings)
    assert.are.equal('caller', doc.grouping)
    assert.are.equal(12, #doc.sites)
    assert.are.same({ id = 2, name = '@log.lua:5', source = 'lua',
      chunkname = '@log.lua', line = 5, traceno = cjson.null,
      traces = cjson.null, address = '0x100',
      ['function'] = 'function at @log.lua:3', alias = cjson.null,
      compiled_alloc_bytes = 0, compiled_realloc_bytes = 0 }, doc.sites[2])
    assert.are.same({ id = 11, name = 'TRACE started at @app.lua:70',
      source = 'trace', chunkname = cjson.null, line = cjson.null,
      traceno = cjson.null, traces = 1, address = cjson.null,
      ['function'] = 'TRACE started at @app.lua:70', alias = cjson.null,
      compiled_alloc_bytes = 0, compiled_realloc_bytes = 0 }, doc.sites[11])
    assert.are.same({ id = 2, frames = { 1, 2, 4 }, inferred = false },
      doc.stacks[2])
    -- The stack made for the trace's event, after the stream's six.
    assert.are.equal(7, #doc.stacks)
    assert.are.same({ id = 7, frames = { 11 }, inferred = true },
      doc.stacks[7])
    assert.are.same({ id = 2, name = '@app.lua:20', source = 'lua',
      note = cjson.null, site = 4, ['function'] = cjson.null,
      frames = cjson.null }, doc.rows[2])
    assert.are.same({ id = 9, name = '(blocks allocated before the profile)',
      source = 'before', note = cjson.null, site = cjson.null,
      ['function'] = cjson.null, frames = cjson.null }, doc.rows[9])
    assert.are.equal('no caller', doc.rows[6].note)
  end)

  it('has the sections of the default report, per row', function()
    local doc = decode(B.three_callers(), 'caller')
    local allocations = by_name(doc.allocations)
    assert.are.equal(7, #doc.allocations)
    assert.are.same({ row = 2, name = '@app.lua:20', events = 2, bytes = 400 },
      allocations['@app.lua:20'])
    assert.are.same({ row = 1, name = '@app.lua:10', events = 3, bytes = 300 },
      doc.allocations[2])
    assert.are.same({}, doc.reallocations)
    assert.are.same({ { row = 8, name = 'INTERNAL (no call stack)',
      events = 5, bytes = 356, overrides = {
        { row = 1, name = '@app.lua:10', blocks = 3 },
        { row = 9, name = '(blocks allocated before the profile)', blocks = 1 },
        { row = 6, name = '@app.lua:5 (no Lua caller in the stack)',
          blocks = 1 } } } }, doc.deallocations)
    local heap = by_name(doc.heap)
    assert.are.same({ row = 1, name = '@app.lua:10', live_bytes = 0,
      live_blocks = 0, allocs = 3, reallocs = 0, frees = 3,
      freed_bytes = 300 }, heap['@app.lua:10'])
    -- The blocks allocated before the profile: no negative figure.
    assert.are.same({ row = 9, name = '(blocks allocated before the profile)',
      live_bytes = 0, live_blocks = 0, allocs = 0, reallocs = 0,
      frees = 1, freed_bytes = 24 },
      heap['(blocks allocated before the profile)'])
    assert.are.same({ events = 15, alloc_events = 10, realloc_events = 0,
      free_events = 5, allocated_bytes = 1160, freed_bytes = 356,
      net_bytes = 804 }, doc.totals)
  end)

  it('has the views', function()
    local doc = decode(B.three_callers(), 'caller')
    assert.are.same({ row = 2, name = '@app.lua:20', blocks = 2, bytes = 400,
      stacks = { { stack = 2, blocks = 2, bytes = 400 } } }, doc.live.rows[1])
    assert.are.same({ row = 7,
      name = 'TRACE started at @app.lua:70 (no Lua caller in the stack)',
      blocks = 1, bytes = 16,
      stacks = { { stack = 7, blocks = 1, bytes = 16 } } }, doc.live.rows[5])
    assert.are.equal(6, doc.live.blocks)
    assert.are.equal(828, doc.live.bytes)
    assert.are.equal(24, doc.live.freed_before_profiling)
    assert.are.equal(804, doc.live.net_bytes)
    assert.are.equal(1160, doc.peak.bytes)
    assert.are.equal(10, doc.peak.event)
    assert.are.equal(cjson.null, doc.peak.time_ns)
    assert.are.same({ row = 2, name = '@app.lua:20', bytes = 400, blocks = 2 },
      doc.peak.rows[1])
    assert.are.equal(1, doc.temporary.limit)
    assert.are.same({ row = 6, name = '@app.lua:5 (no Lua caller in the stack)',
      blocks = 1, bytes = 32, temporary_blocks = 1, temporary_bytes = 32,
      freed_blocks = 0, freed_bytes = 0, live_blocks = 0, live_bytes = 0 },
      doc.temporary.rows[1])
    assert.are.same({ blocks = 10, bytes = 1160, temporary_blocks = 1,
      temporary_bytes = 32, freed_blocks = 3, freed_bytes = 300,
      live_blocks = 6, live_bytes = 828 }, doc.temporary.totals)
    assert.are.equal(cjson.null, doc.timeline)
  end)

  it('has the peak and the timeline of a profile with time marks', function()
    local doc = decode(B.peak_payload(), 'line')
    assert.are.same({ bytes = 570, event = 5, offset = 55,
      time_ns = 2000000, next_time_ns = 3000000, rows = {
        { row = 4, name = '@p.lua:3', bytes = 400, blocks = 1 },
        { row = 2, name = '@p.lua:2', bytes = 200, blocks = 1 } },
      heap_at_start = cjson.null, heap_bytes = cjson.null,
      before = { freed_bytes = 30, freed_blocks = 1,
        live_bytes = cjson.null } }, doc.peak)
    assert.are.same({ resolution_ns = 10000, duration_ns = 4000000, slots = {
      { start_ns = 1000000, highest = 300, last = 270, events = 3 },
      { start_ns = 2000000, highest = 570, last = 570, events = 2 },
      { start_ns = 3000000, highest = 420, last = 320, events = 3 },
    } }, doc.timeline)
    assert.are.equal(4000000, doc.stream.last_time_ns)
    assert.is_true(doc.stream.has_time)
  end)

  it('has the notes, the whole heap at the peak and the named internals',
    function()
      local s = B.new():lfunc(0x100, '@p.lua', 1)
        :events({ version = B.EXTENDED }):note(B.HEAP_AT_START, 10000)
      s:alloc(B.lua(0x100, 2), 0x10, 200):free(B.internal(1), 0x90, 30)
      s:alloc(B.internal(2), 0x20, 400):free(B.internal(1), 0x20, 400)
      s:note(B.COLLECTED_AT_STOP, 10170):epilogue()
      local doc = decode(s, 'line')
      assert.are.same({ 10000, true, 10170 }, { doc.stream.heap_at_start,
        doc.stream.collected_at_stop, doc.stream.heap_after_collection })
      assert.are.same({ 570, 3, 10000, 10570 }, { doc.peak.bytes,
        doc.peak.event, doc.peak.heap_at_start, doc.peak.heap_bytes })
      assert.are.same({ freed_bytes = 30, freed_blocks = 1,
        live_bytes = 9970 }, doc.peak.before)
      assert.are.same({ { row = 3, name = 'INTERNAL (JIT compiler)',
        bytes = 400, blocks = 1 }, { row = 1, name = '@p.lua:2', bytes = 200,
        blocks = 1 } }, doc.peak.rows)
      assert.is_true(doc.live.collected_at_stop)
      assert.are.same({ 'INTERNAL (garbage collector)' },
        { doc.deallocations[1].name })
    end)

  it('gives the bytes compiled code allocated, overall and by site',
    function()
      local doc = decode(B.compiled_lines(), 'line')
      assert.are.equal(352, doc.stream.compiled_bytes)
      local fill, main11
      for _, site in ipairs(doc.sites) do
        if site.name == '@fill.lua:3' then fill = site end
        if site.name == '@main.lua:11' then main11 = site end
      end
      assert.are.same({ 256, 0 }, { fill.compiled_alloc_bytes,
        fill.compiled_realloc_bytes })
      assert.are.same({ 0, 96 }, { main11.compiled_alloc_bytes,
        main11.compiled_realloc_bytes })
    end)

  it('counts the traces of a start place, and lists the stacks made for them',
    function()
      local doc = decode(B.compiled_loop(), 'line')
      local trace
      for _, site in ipairs(doc.sites) do
        if site.source == 'trace' then
          assert.is_nil(trace, 'one site for both traces')
          trace = site
        end
      end
      assert.are.same({ id = 3, name = 'TRACE started at @fill.lua:3',
        source = 'trace', chunkname = cjson.null, line = cjson.null,
        traceno = cjson.null, traces = 2, address = cjson.null,
        ['function'] = 'TRACE started at @fill.lua:3', alias = cjson.null,
        compiled_alloc_bytes = 0, compiled_realloc_bytes = 0 }, trace)
      -- The stream's stacks 1 and 2, then the trace under each caller.
      assert.are.same({
        { id = 1, frames = { 1, 2 }, inferred = false },
        { id = 2, frames = { 1, 4 }, inferred = false },
        { id = 3, frames = { 3, 2 }, inferred = true },
        { id = 4, frames = { 3, 4 }, inferred = true },
      }, doc.stacks)
      local live = by_name(doc.live.rows)['TRACE started at @fill.lua:3']
      assert.are.same({ { stack = 3, blocks = 2, bytes = 128 },
        { stack = 4, blocks = 1, bytes = 64 } }, live.stacks)
      assert.are.same({ row = 2, name = 'TRACE started at @fill.lua:3',
        events = 4, bytes = 256 }, doc.allocations[1])
    end)

  it('makes one row of the sites of one name', function()
    -- The same line of a function loaded twice, at two addresses.
    local s = B.new():lfunc(0x100, '@a.lua', 0):lfunc(0x200, '@a.lua', 0)
      :events()
    s:alloc(B.lua(0x100, 3), 0x10, 10)
    s:alloc(B.lua(0x200, 3), 0x20, 20)
    s:free(B.internal(), 0x10, 10)
    s:epilogue()
    local doc = decode(s, 'line')
    assert.are.same({ '@a.lua:3', '0x100', '@a.lua:3', '0x200', 'INTERNAL' },
      { doc.sites[1].name, doc.sites[1].address, doc.sites[2].name,
        doc.sites[2].address, doc.sites[3].name })
    assert.are.same({ { row = 1, name = '@a.lua:3', events = 2, bytes = 30 } },
      doc.allocations)
    assert.are.same({ { row = 1, name = '@a.lua:3', live_bytes = 20,
      live_blocks = 1, allocs = 2, reallocs = 0, frees = 1,
      freed_bytes = 10 } }, doc.heap)
  end)

  it('writes empty lists as [] and large numbers exactly', function()
    local s = B.new():lfunc(0x7f0123456789, '@big.lua', 1):events()
    s:alloc(B.lua(0x7f0123456789, 2), 0x10, 2 ^ 50 + 1)
    s:epilogue()
    local text = render(s, 'line')
    assert.truthy(text:find('"reallocations":[]', 1, true))
    assert.truthy(text:find('"bytes":1125899906842625', 1, true))
    local doc = cjson.decode(text)
    assert.are.equal('0x7f0123456789', doc.sites[1].address)
    assert.are.same({}, doc.deallocations)
    assert.are.equal(2 ^ 50 + 1, doc.totals.net_bytes)
  end)

  -- Names in Latin-1 and broken UTF-8: a chunk name with an e acute in
  -- Latin-1 (E9), a C symbol with a byte FF, a trace started in that
  -- chunk, a file name with a surrogate (ED A0 80), and a valid e acute
  -- (C3 A9) that stays as it is.
  local function foreign_names()
    local s = B.new():lfunc(0x100, '@caf\233.lua', 1)
      :cfunc(0x900, 'bad\255sym'):lfunc(0x200, '@d\195\169j\195\160.lua', 1)
      :trace(1, 0x100, 7):events()
    s:alloc(B.lua(0x100, 3), 0x10, 10)
    s:alloc(B.c(0x900), 0x20, 20)
    s:alloc(B.trace(1), 0x30, 30)
    s:alloc(B.lua(0x200, 2), 0x40, 40)
    s:epilogue()
    return s
  end

  it('replaces the bytes of names that are not UTF-8 by U+FFFD', function()
    local R = '\239\191\189'
    local doc = cjson.decode(render(foreign_names(), 'function',
      'out\237\160\128.bin'))
    assert.are.equal('out' .. R .. R .. R .. '.bin', doc.stream.name)
    local sites = {}
    for i, site in ipairs(doc.sites) do
      sites[i] = { site.name, site.chunkname, site['function'] }
    end
    assert.are.same({
      { '@caf' .. R .. '.lua:3', '@caf' .. R .. '.lua',
        'function at @caf' .. R .. '.lua:1' },
      { 'bad' .. R .. 'sym', cjson.null, 'bad' .. R .. 'sym' },
      { 'TRACE started at @caf' .. R .. '.lua:7', cjson.null,
        'TRACE started at @caf' .. R .. '.lua:7' },
      { '@d\195\169j\195\160.lua:2', '@d\195\169j\195\160.lua',
        'function at @d\195\169j\195\160.lua:1' },
    }, sites)
    local names = {}
    for i, entry in ipairs(doc.allocations) do
      names[i] = entry.name
    end
    assert.are.same({ 'function at @d\195\169j\195\160.lua:1',
      'TRACE started at @caf' .. R .. '.lua:7', 'bad' .. R .. 'sym',
      'function at @caf' .. R .. '.lua:1' }, names)
  end)

  it('writes a document that is valid UTF-8 as a whole', function()
    local text = render(foreign_names(), 'line', 'out\237\160\128.bin')
    local path = os.tmpname()
    local file = assert(io.open(path, 'wb'))
    file:write(text)
    file:close()
    -- iconv fails on the first byte that is not valid UTF-8.
    local pipe = io.popen('iconv -f UTF-8 -t UTF-8 < ' .. path ..
      ' > /dev/null 2>&1; echo $?')
    local status = pipe:read('*a')
    pipe:close()
    -- The check itself: the raw bytes fail it.
    file = assert(io.open(path, 'wb'))
    file:write('"bad\255sym"')
    file:close()
    pipe = io.popen('iconv -f UTF-8 -t UTF-8 < ' .. path ..
      ' > /dev/null 2>&1; echo $?')
    local raw_status = pipe:read('*a')
    pipe:close()
    os.remove(path)
    assert.are.same({ '0\n', '1\n' }, { status, raw_status })
    assert.is_nil(text:find('\255', 1, true))
  end)

  it('has the cumulative figures of rows by function or by stack',
    function()
      local doc = decode(B.nested_calls(), 'function')
      local rows = {}
      for _, row in ipairs(doc.rows) do
        rows[row.name] = row.id
      end
      local function entry(name, figures)
        return { row = rows[name], name = name, events = figures[1],
          bytes = figures[2], live_blocks = figures[3],
          live_bytes = figures[4], self_events = figures[5],
          self_bytes = figures[6] }
      end
      assert.are.same({ mode = 'function', rows = {
        entry('main chunk of @m.lua', { 5, 1710, 4, 1610, 1, 10 }),
        entry('function at @m.lua:3', { 4, 1700, 3, 1600, 4, 1700 }),
        entry('string.rep', { 2, 1500, 2, 1500, 0, 0 }),
        entry('TRACE started at @m.lua:20', { 1, 16, 1, 16, 1, 16 }),
      } }, doc.cumulative)
      -- string.rep is a row of its own, though it had no events.
      assert.are.equal('string.rep', doc.rows[rows['string.rep']].name)
      doc = decode(B.nested_calls(), 'stack')
      assert.are.same({ 'stack', '@m.lua:9', 1210, '@m.lua:4 <- @m.lua:9',
        1200 }, { doc.cumulative.mode, doc.cumulative.rows[1].name,
        doc.cumulative.rows[1].bytes, doc.cumulative.rows[2].name,
        doc.cumulative.rows[2].bytes })
      assert.are.equal(cjson.null, decode(B.nested_calls(), 'line').cumulative)
    end)

  it('reports the warning of a cut stream', function()
    local s = B.new():lfunc(0x100, '@a.lua', 1):events()
    s:alloc(B.lua(0x100, 1), 0x10, 8)
    local doc = decode(s, 'line')
    assert.are.same({ 'out.bin: the stream has no epilogue (the profile was not stopped ' ..
      'cleanly); the report covers all 1 event' }, doc.warnings)
  end)

  -- The document is written in pieces of at most json_text.FLUSH_PARTS
  -- parts (a key, a value, a bracket), each section's entries made as
  -- they are written, so that it is never held whole (the pieces make
  -- the same text as encoding the document at once).
  describe('written in pieces', function()
    local json_text = require('memprof.encode.json_text')

    local function pieces_of(builder, group)
      local result = analyze.run(reader.from_string(builder:bytes(),
        'out.bin'), { group = group, views = ALL })
      local pieces = {}
      local flush_parts = json_text.FLUSH_PARTS
      json_text.FLUSH_PARTS = 64
      json.write(result, { write = function(_, ...)
        pieces[#pieces + 1] = table.concat({ ... })
      end })
      json_text.FLUSH_PARTS = flush_parts
      return pieces, result
    end

    local count = require('helpers.command').count

    -- 250 places of one function, each allocating 8 bytes twice.
    local function places()
      local s = B.new():lfunc(0x100, '@p.lua', 1):events()
      for line = 1, 250 do
        s:alloc(B.lua(0x100, line), line * 16, 8)
        s:alloc(B.lua(0x100, line), 0x10000 + line * 16, 8)
      end
      s:epilogue()
      return s
    end

    -- A site's entry is 31 parts (10 keys, their values: three parts
    -- for each of its 5 strings, the quotes apart; the closing brace),
    -- then a comma: a piece of 64 parts holds a key of 2 entries at
    -- most.  A heap entry is 19 parts and a comma (4 at most), a
    -- temporary one 23 and a comma (3).
    it('writes the sites, heap and temporary arrays 64 parts at a time',
        function()
      local pieces = pieces_of(places(), 'line')
      local function spread(pattern)
        local total, most = 0, 0
        for _, piece in ipairs(pieces) do
          local here = count(piece, pattern)
          total = total + here
          most = math.max(most, here)
        end
        return { total, most }
      end
      assert.are.same({ 250, 2 }, spread('"chunkname":'))
      assert.are.same({ 250, 4 }, spread('"reallocs":'))
      -- The temporary rows, and their totals.
      assert.are.same({ 251, 3 }, spread('"temporary_blocks":'))
      for _, piece in ipairs(pieces) do
        assert.is_true(#piece < 64 * 40, #piece .. ' bytes in a piece')
      end
    end)

    it('makes the text of the whole document encoded at once', function()
      for _, case in ipairs({ { B.crafted(), 'line' },
          { B.three_callers(), 'caller' }, { B.nested_calls(), 'stack' },
          { B.nested_calls(), 'function' }, { B.peak_payload(), 'line' } }) do
        local pieces, result = pieces_of(case[1], case[2])
        assert.are.equal(json.encode(json.document(result)) .. '\n',
          table.concat(pieces))
      end
    end)
  end)
end)

describe('json report of a sampled profile', function()
  it('gives the rate and estimates', function()
    local doc = decode(B.sampled(), 'line')
    assert.are.same({ 100, true }, { doc.stream.sample_bytes,
      doc.stream.estimates })
    assert.are.same({ 202, 10201, 101, 101 }, { doc.totals.alloc_events,
      doc.totals.allocated_bytes, doc.totals.free_events,
      doc.totals.freed_bytes })
  end)
end)
