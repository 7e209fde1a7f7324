-- Specs for memprof.report.live: the screen of memprof live, its model and
-- its text.
--   LUA_PATH='./lua/?.lua;./spec/?.lua;;' luajit /usr/bin/busted spec/reporter/report/live_spec.lua

local screen = require('memprof.report.live')
local follow = require('memprof.read.follow')
local live = require('memprof.analysis.live')
local B = require('helpers.stream_builder')

-- A state as memprof.analysis.live gives it, with known figures.
local function fake_state(has_stacks)
  return {
    stream = { name = 'out.bin', events = 123456, bytes_read = 2500000 },
    has_stacks = has_stacks,
    rows = function()
      return {
        { name = '@/srv/app/handler.lua:42', live = 5 * 1048576,
          blocks = 51234, allocated = 9 * 1048576, live_rate = 102400,
          alloc_rate = 204800 },
        { name = '@/srv/app/cache.lua:7', live = 30000, blocks = 12,
          allocated = 60000, live_rate = -512, alloc_rate = 0 },
        { name = 'INTERNAL (garbage collector)', live = 0, blocks = 0,
          allocated = 4096, live_rate = 0, alloc_rate = 1024 },
        { name = '@/srv/app/a_module_whose_name_goes_on_and_on_and_on.lua:1234',
          live = 100, blocks = 1, allocated = 100, live_rate = 0,
          alloc_rate = 0 },
      }
    end,
    heap = function()
      return { bytes = 6 * 1048576, absolute = true, rate = 102400, span = 5,
        history = { 1, 2, 3, 5, 8, 13, 21 }, samples = 6 }
    end,
  }
end

local function text(lines, styles)
  local out = {}
  for i, line in ipairs(lines) do
    out[i] = line .. (styles[i] and ' <' .. styles[i] or '')
  end
  return table.concat(out, '\n')
end

describe('live screen', function()
  it('lays out the live view: the rows that fit, the rest summed', function()
    local model = screen.model(fake_state(true), { view = 'live',
      grouping = 'line', top = 2, status = 'following',
      prefix = '/srv/app/' })
    local lines, styles = screen.lines(model, 72, 11)
    assert.are.equal(table.concat({
      'memprof live out.bin                                           following <title',
      'heap 6MiB  +100KiB/s over the last 5 seconds  __..-=#',
      'lines by live bytes; 123,456 events (2.38MiB) read',
      '',
      '      LIVE     BLOCKS   GROWTH/s    ALLOC/s  LINE <heading',
      '      5MiB     51,234    +100KiB     200KiB  @…/handler.lua:42',
      '  29.30KiB         12      -512B         0B  @…/cache.lua:7',
      '      100B          1         0B         0B  ... and 1 more place',
      '',
      '',
      'l live  a allocated  1 line  2 function  3 stack  q quit',
    }, '\n'), text(lines, styles))
  end)

  it('lays out the allocated view, long names clipped, block characters',
      function()
    local model = screen.model(fake_state(true), { view = 'allocated',
      grouping = 'line', top = 3, status = 'the profile ended',
      message = 'the file was replaced: reading it from the start' })
    local lines, styles = screen.lines(model, 80, 10, { utf8 = true })
    assert.are.equal(table.concat({
      'memprof live out.bin                                           the profile ended <title',
      'heap 6MiB  +100KiB/s over the last 5 seconds  \u{2581}\u{2581}\u{2582}' ..
        '\u{2582}\u{2583}\u{2585}\u{2588}',
      'lines by bytes allocated per second; 123,456 events (2.38MiB) read',
      'the file was replaced: reading it from the start',
      '   ALLOC/s  ALLOCATED       LIVE   GROWTH/s  LINE <heading',
      '    200KiB       9MiB       5MiB    +100KiB  @/srv/app/handler.lua:42',
      '      1KiB       4KiB         0B         0B  INTERNAL (garbage collector)',
      '        0B   58.59KiB   29.30KiB      -512B  @/srv/app/cache.lua:7',
      '        0B       100B       100B         0B  ... and 1 more place',
      'l live  a allocated  1 line  2 function  3 stack  q quit',
    }, '\n'), text(lines, styles))
    -- Narrow: every line clipped to the width, names ending in '...'.
    lines = screen.lines(model, 50, 10)
    assert.are.equal('    200KiB       9MiB       5MiB    +100KiB  @/...',
      lines[6])
    for _, line in ipairs(lines) do
      assert.is_true(#line <= 50, line)
    end
  end)

  it('says when rows by stack are places, and what a plain frame is',
      function()
    local model = screen.model(fake_state(false), { view = 'live',
      grouping = 'stack', top = 1, status = 'following' })
    local lines = screen.lines(model, 60, 3 + screen.FIXED_LINES,
      { keys = false })
    assert.are.equal(table.concat({
      'memprof live out.bin                               following',
      'heap 6MiB  +100KiB/s over the last 5 seconds  __..-=#',
      'stacks by live bytes; 123,456 events (2.38MiB) read',
      'this profile has no call stacks (profile with stack_depth...',
      '      LIVE     BLOCKS   GROWTH/s    ALLOC/s  STACK',
      '      5MiB     51,234    +100KiB     200KiB  @/srv/app/ha...',
      '  29.39KiB         13      -512B         0B  ... and 2 mo...',
    }, '\n') .. '\n', screen.plain(lines))
  end)

  it('fits a small screen, counting characters rather than bytes',
      function()
    local model = screen.model(fake_state(true), { top = 5,
      status = 'following' })
    local lines = screen.lines(model, 40, 4, { utf8 = true })
    assert.are.same({
      'memprof live out.bin           following',
      'heap 6MiB  +100KiB/s over the last 5 ...',
      'lines by live bytes; 123,456 events (...',
      '',
    }, lines)
    lines = screen.lines(model, 60, 9, { utf8 = true })
    assert.are.equal('heap 6MiB  +100KiB/s over the last 5 seconds  ' ..
      '\u{2581}\u{2581}\u{2582}\u{2582}\u{2583}\u{2585}\u{2588}', lines[2])
    assert.are.equal(9, #lines)
    assert.are.equal('ab...', screen.clip('ab\u{2581}\u{2582}\u{2583}c', 5))
    assert.are.equal('ab\u{2581}\u{2582}\u{2583}c',
      screen.clip('ab\u{2581}\u{2582}\u{2583}c', 6))
  end)

  it('draws lines over the terminal with ANSI sequences', function()
    assert.are.equal('\27[H\27[1mtitle\27[0m\27[K\r\n\27[7mhead\27[0m' ..
      '\27[K\r\nrow\27[K\27[J', screen.ansi({ 'title', 'head', 'row' },
      { 'title', 'heading' }))
  end)

  it('shows a growing profile\'s leaking line first', function()
    local path = os.tmpname()
    local s = B.new():events({ version = B.EXTENDED })
    s:note(B.HEAP_AT_START, 1000)
    s:define_lfunc(0x100, '@leak.lua', 0)
    for i = 1, 10 do
      s:alloc(B.lua(0x100, 3), 0x10000 + i * 0x100, 200)
      s:alloc(B.lua(0x100, 4), 0x90000 + i * 0x100, 50)
      s:free(B.internal(1), 0x90000 + i * 0x100, 50)
    end
    local file = assert(io.open(path, 'wb'))
    file:write(s:bytes())
    file:close()
    local f = follow.new(path)
    local state = live.new((f:poll()))
    state:consume()
    state:sample(0)
    local model = screen.model(state, { top = 5, status = 'following' })
    local lines = screen.lines(model, 60, 8, { keys = false })
    assert.are.equal('      LIVE     BLOCKS   GROWTH/s    ALLOC/s  LINE',
      lines[5])
    assert.are.equal('   1.95KiB         10                        @leak.lua:3',
      lines[6])
    assert.are.equal(6, #lines)
    assert.are.equal('heap 2.93KiB', lines[2])
    f:close()
    os.remove(path)
  end)
end)
