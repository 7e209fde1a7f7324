-- Specs for the row models of the default sections, CUMULATIVE, the heap
-- over time, --diff, the totals and the grouping's wording (memprof.report.model):
-- each view's rows, order, rest and facts, decided once for every format.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local diff = require('memprof.analysis.diff')
local sections = require('memprof.report.model.sections')
local cumulative_model = require('memprof.report.model.cumulative')
local timeline_model = require('memprof.report.model.timeline')
local diff_model = require('memprof.report.model.diff')
local grouping = require('memprof.report.model.grouping')
local totals_model = require('memprof.report.model.totals')
local B = require('helpers.stream_builder')

local function run(builder, opts)
  return analyze.run(reader.from_string(builder:bytes(), 'x.bin'), opts)
end

-- @a.lua:1 allocates 64B and 32B, @a.lua:2 128B; @a.lua:3 reallocates
-- the 64B block to 256B, @a.lua:4 frees the 32B one.
local function four_lines()
  local s = B.new():lfunc(0x100, '@a.lua', 0):events()
  s:alloc(B.lua(0x100, 1), 0x10, 64)
  s:alloc(B.lua(0x100, 1), 0x20, 32)
  s:alloc(B.lua(0x100, 2), 0x30, 128)
  s:realloc(B.lua(0x100, 3), 0x10, 64, 0x40, 256)
  s:free(B.lua(0x100, 4), 0x20, 32)
  return s:epilogue()
end

local function event_rows(section)
  local list = {}
  for i, row in ipairs(section.shown) do
    local details = section.details[i]
    list[i] = { row.name, row.count, row.plus, row.minus,
      table.concat(details.overrides, ','), details.overrides_more }
  end
  return list
end

describe('sections model', function()
  it('sorts each section by its bytes, with the overrides of each row',
    function()
      local model = sections.new(run(four_lines()), {})
      local alloc = model:events('alloc')
      assert.are.same({ 'ALLOCATIONS', 'plus', 'plus', 224, 224, 0 },
        { alloc.title, alloc.by, alloc.bytes, alloc.total, alloc.shown_bytes,
          alloc.rest.count })
      assert.are.same({ { '@a.lua:2', 1, 128, 0, '', 0 },
        { '@a.lua:1', 2, 96, 0, '', 0 } }, event_rows(alloc))
      local realloc = model:events('realloc')
      assert.are.same({ { '@a.lua:3', 1, 256, 64, '@a.lua:1', 0 } },
        event_rows(realloc))
      local free = model:events('free')
      assert.are.same({ 'DEALLOCATIONS', 'minus', 32 }, { free.title, free.by,
        free.total })
      assert.are.same({ { '@a.lua:4', 1, 0, 32, '@a.lua:1', 0 } },
        event_rows(free))
      -- No compiled code: no share.
      assert.is_nil(alloc.compiled)
      assert.is_nil(alloc.details[1].compiled)
    end)

  it('keeps the rows that hold bytes in the heap summary', function()
    local heap = sections.new(run(four_lines()), {}):heap()
    local rows = {}
    for i, row in ipairs(heap.shown) do
      rows[i] = { row.name, row.holds, row.allocs, row.reallocs, row.frees }
    end
    -- @a.lua:1 holds nothing: its blocks were reallocated and freed.
    assert.are.same({ { '@a.lua:3', 256, 1, 1, 0 },
      { '@a.lua:2', 128, 1, 0, 0 } }, rows)
    assert.are.same({ false, 384, 384, 0 }, { heap.by_blocks, heap.total,
      heap.shown_bytes, heap.rest.count })
    assert.is_nil(heap.before)
  end)

  it('sorts by events with sort = count and sums the rows top leaves out',
    function()
      local left_out = { rows = 0 }
      local model = sections.new(run(four_lines()), { sort = 'count',
        top = 1, left_out = left_out })
      local alloc = model:events('alloc')
      assert.are.same({ 'count', '@a.lua:1', 1, 1, 128, 0, 96, 224 },
        { alloc.by, alloc.shown[1].name, alloc.rest.count,
          alloc.rest.sums.count, alloc.rest.sums.plus, alloc.rest.sums.minus,
          alloc.shown_bytes, alloc.total })
      assert.are.equal(1, left_out.rows)
      assert.is_true(model:heap().by_blocks)
    end)
end)

-- (B.line_blocks: lines 2, 3 and 4 of @r.lua allocate, reallocate
-- and free, with blocks from before the profile.)
local listed = B.line_blocks

local BEFORE = '(blocks allocated before the profile)'

-- The rows of a listing in order: the group's name, then `fields`.
local function listing_rows(model, listing, fields)
  local list = {}
  for k, id in ipairs(listing.ids) do
    local row = { model:group(id).name }
    for _, field in ipairs(fields) do
      row[#row + 1] = listing.set.columns[field][id]
    end
    list[k] = row
  end
  return list
end

local function named_overrides(list)
  local named = {}
  for k, group in ipairs(list.groups) do
    named[k] = { group.name, list.blocks[k] }
  end
  return named
end

describe('sections model, listed whole (json, html)', function()
  it('lists every row of a section by its bytes, with its group',
    function()
      local result = run(listed())
      local model = sections.new(result)
      local alloc = model:event_listing('alloc')
      assert.are.same({ { '@r.lua:2', 3, 24, 0 } },
        listing_rows(model, alloc, { 'count', 'plus', 'minus' }))
      local group = model:group(alloc.ids[1])
      assert.are.equal(result.grouper.list[group.id], group)
      assert.are.equal(alloc.ids[1], group.id)
      local realloc = model:event_listing('realloc')
      assert.are.same({ { '@r.lua:3', 2, 28, 12 } },
        listing_rows(model, realloc, { 'count', 'plus', 'minus' }))
      local free = model:event_listing('free')
      assert.are.same({ { '@r.lua:4', 3, 0, 29 } },
        listing_rows(model, free, { 'count', 'plus', 'minus' }))
      assert.is_nil(model:overrides('alloc', alloc, alloc.ids[1]))
    end)

  it('gives the rows whose blocks a row released, the most blocks first',
    function()
      local s = B.new():lfunc(0x100, '@r.lua', 1):events()
      s:alloc(B.lua(0x100, 2), 0x10, 8)
      s:alloc(B.lua(0x100, 2), 0x20, 8)
      s:alloc(B.lua(0x100, 3), 0x30, 8)
      s:free(B.lua(0x100, 4), 0x30, 8)
      s:free(B.lua(0x100, 4), 0x999, 5)
      s:free(B.lua(0x100, 4), 0x10, 8)
      s:free(B.lua(0x100, 4), 0x20, 8)
      local model = sections.new(run(s:epilogue()))
      local free = model:event_listing('free')
      assert.are.same({ { '@r.lua:2', 2 }, { BEFORE, 1 }, { '@r.lua:3', 1 } },
        named_overrides(model:overrides('free', free, free.ids[1])))
    end)

  it('lists the heap by live bytes, the blocks before the profile apart',
    function()
      local model = sections.new(run(listed()))
      local heap = model:heap_listing()
      assert.are.same({ { '@r.lua:3', 12, 2, 2, 1, 28 },
        { '@r.lua:2', 8, 3, 0, 2, 24 }, { BEFORE, -9, 0, 0, 2, false } },
        listing_rows(model, heap, { 'holds', 'allocs', 'reallocs', 'frees',
          'allocated_bytes' }))
      assert.are.equal(heap.ids[3], heap.before)
    end)

  it('sums alloc and realloc per row, the first rows by bytes or count',
    function()
      local function allocated(opts)
        local shown, rest = sections.new(run(listed()), opts):allocated()
        local list = {}
        for k, row in ipairs(shown) do
          list[k] = { row.group.name, row.bytes, row.count }
        end
        return { list, rest }
      end
      assert.are.same({ { { '@r.lua:3', 28, 2 } },
        { rows = 1, bytes = 24, count = 3 } }, allocated({ top = 1 }))
      assert.are.same({ { { '@r.lua:2', 24, 3 } },
        { rows = 1, bytes = 28, count = 2 } },
        allocated({ top = 1, sort = 'count' }))
      assert.are.same({ { { '@r.lua:3', 28, 2 }, { '@r.lua:2', 24, 3 } },
        { rows = 0, bytes = 0, count = 0 } }, allocated({}))
    end)

  it('makes one row of the sites of one name, with one group', function()
    local s = B.new():lfunc(0x100, '@r.lua', 1):lfunc(0x200, '@r.lua', 1)
      :events()
    s:alloc(B.lua(0x100, 2), 0x10, 8)
    s:alloc(B.lua(0x200, 2), 0x20, 16)
    local result = run(s:epilogue())
    assert.are.equal(2, #result.sites.of_kind.alloc.keys)
    local model = sections.new(result)
    local alloc = model:event_listing('alloc')
    assert.are.same({ { '@r.lua:2', 2, 24 } },
      listing_rows(model, alloc, { 'count', 'plus' }))
    local text = model:events('alloc')
    assert.are.same({ '@r.lua:2', 2, 24 }, { text.shown[1].name,
      text.shown[1].count, text.shown[1].plus })
  end)
end)

describe('cumulative model', function()
  it('orders the rows by bytes with callees, and cuts them at top',
    function()
      local model = cumulative_model.new(run(B.nested_calls(),
        { group = 'function' }).cumulative)
      local left_out = { rows = 0 }
      local shown, rest = model:rows({ top = 2, left_out = left_out })
      assert.are.same({ 'function', 2, 2, 2 }, { model.mode, #shown, #rest,
        left_out.rows })
      assert.are.same({ 'main chunk of @m.lua', 1710, 'function at @m.lua:3',
        1700 }, { shown[1].group.name, shown[1].bytes, shown[2].group.name,
        shown[2].bytes })
      assert.are.same({ 'string.rep', 'TRACE started at @m.lua:20' },
        { rest[1].group.name, rest[2].group.name })
    end)
end)

describe('timeline model', function()
  it('gives the rows, the peak row, the highest value and the slots',
    function()
      local result = run(B.idle_tail(), { views = { timeline = true } })
      local model = timeline_model.new(result.timeline, result.stream)
      assert.are.same({ true, 100, 5e11, 22, 1, 10000, 3 * 3600 * 1e9 },
        { model.has_time, model.highest, model.shown.width,
          #model.shown.rows, model.shown.peak_row, model.resolution,
          model.duration })
      assert.are.same({ { start = 1000000, high = 100, last = 100,
        events = 1 }, { start = 2000000, high = 40, last = 40, events = 1 } },
        model:slots())
      assert.are.equal(217, #timeline_model.new(result.timeline,
        result.stream, 400).shown.rows)
    end)

  it('has no rows without time marks', function()
    local s = B.new():lfunc(0x100, '@a.lua', 0):events()
    local result = run(s:alloc(B.lua(0x100, 1), 0x10, 8):epilogue())
    local model = timeline_model.new(result.timeline, result.stream)
    assert.are.same({ false, 0 }, { model.has_time, model.highest })
    assert.is_nil(model.shown)
    assert.is_nil(model:slots())
  end)
end)

describe('diff model', function()
  it('cuts the rows at top and sums the others', function()
    local changes = diff.compare(run(B.three_callers()),
      run(B.nested_calls()))
    local left_out = { rows = 0 }
    local model = diff_model.new(changes, { top = 2, left_out = left_out })
    assert.are.same({ 'live', 2, '@m.lua:4', 6, 6, 2 }, { model.sort,
      #model.shown, model.shown[1].name, model.rest.rows, left_out.rows,
      model.unchanged })
    assert.are.same({ before = 1160, after = 10, change = -1150 },
      model.rest.allocated_bytes)
    assert.are.equal(-818, model.rest.live_bytes.change)
    assert.is_nil(diff_model.new(changes, { sort = 'bytes' }).rest)
  end)
end)

describe('grouping words', function()
  it('names each mode alike in every format', function()
    assert.are.same({ 'by line', 'line' }, { grouping.by('line'),
      grouping.unit('line') })
    assert.is_nil(grouping.heading('line'))
    assert.are.same({ 'by stack', 'call stack', 'Grouped by stack: each ' ..
      'row is a call stack, innermost frame first.' }, { grouping.by('stack'),
      grouping.unit('stack'), grouping.heading('stack') })
    assert.are.equal('calling line', grouping.unit('caller'))
    assert.is_nil(grouping.by('other'))
  end)
end)

describe('totals model', function()
  it('sums the events and bytes of every kind once', function()
    local totals = totals_model.new(run(four_lines()))
    assert.are.same({ alloc_events = 3, realloc_events = 1, free_events = 1,
      allocations = 4, allocated_bytes = 480, freed_bytes = 96,
      net_bytes = 384, events = 5 }, totals)
    local result = run(B.idle_tail(), { views = { timeline = true } })
    assert.are.equal(3 * 3600 * 1e9, totals_model.new(result).duration)
  end)
end)
