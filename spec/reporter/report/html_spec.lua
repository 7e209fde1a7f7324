-- Specs for memprof.report.html: the page's structure and embedded data
-- (under LuaJIT and plain Lua 5.1). The page in a real browser is
-- specified in spec/hosts/html_browser_spec.lua.
local cjson = require('cjson')
local C = require('helpers.command')
local html = require('memprof.report.html')
local B = require('helpers.stream_builder')
local html_page = require('helpers.html_page')

local result_of, page = html_page.result_of, html_page.page

local DATA_OPEN = '<script type="application/json" id="memprof-data">'

local function data_text(text)
  local first = assert(text:find(DATA_OPEN, 1, true), 'no data element')
  local start = first + #DATA_OPEN
  local stop = assert(text:find('</script>', start, true))
  return text:sub(start, stop - 1)
end

local function data_of(text)
  return cjson.decode(data_text(text))
end

-- The flame tree of a graph as { ['a;b;c'] = { bytes, count } }: one
-- entry per node, named by its path from the outermost frame.
local function paths(data, graph)
  local out = {}
  local function walk(node, prefix)
    for _, child in ipairs(node.c or {}) do
      -- A box of frames merged into one has their number, no frame.
      local name = child.o and 'other (' .. child.o .. ')' or
        data.frames[child.f + 1].name
      local path = prefix and prefix .. ';' .. name or name
      out[path] = { child.b, child.n }
      walk(child, path)
    end
  end
  local root = data.graphs[graph].root
  out[''] = { root.b, root.n }
  walk(root, nil)
  return out
end

local count = require('helpers.command').count

-- The page of a stream with html.MAX_FRAMES set to `max` while it is made.
local function page_of_frames(builder, max)
  local saved = html.MAX_FRAMES
  html.MAX_FRAMES = max
  local ok, text = pcall(page, builder)
  html.MAX_FRAMES = saved
  assert(ok, text)
  return text
end

local HTML_DIR = 'lua/memprof/report/html/'

-- Runs a command; returns its exit code and what it wrote.
local function checked(command)
  local code, stdout, stderr = C.run(command)
  return code, stdout .. stderr
end

describe('html report', function()
  it('keeps its style and script in files, inline in every page',
    function()
      local text = page(B.three_callers())
      assert.are.equal(C.read_file(HTML_DIR .. 'page.css'),
        text:match('<style>\n(.-)</style>'))
      assert.are.equal(C.read_file(HTML_DIR .. 'page.js'),
        text:match('.*<script>\n(.-)</script>'))
      assert.are.equal(C.read_file(HTML_DIR .. 'page.css'),
        html.resource('page.css'))
    end)

  it('has a script that parses as JavaScript, and a style that checks as CSS',
    function()
      assert.are.same({ 0, '' }, { checked(C.command('node', '--check',
        HTML_DIR .. 'page.js')) })
      local code, out = checked('NODE_PATH=build/node_modules ' ..
        C.command('node', 'spec/support/css_check.js', HTML_DIR .. 'page.css'))
      assert.are.equal(0, code, out)
      local report = cjson.decode(out)
      assert.are.same({}, report.errors)
      assert.is_true(report.rules > 50 and report.declarations > 300)
      -- The checks themselves: a broken script and a broken style fail.
      local dir = C.temp_dir()
      C.write_file(dir .. '/bad.js', 'function f( {\n')
      C.write_file(dir .. '/bad.css', '.a { color: 12px; widht: 3px }\n')
      local js_code = checked(C.command('node', '--check', dir .. '/bad.js'))
      local _, bad = checked('NODE_PATH=build/node_modules ' ..
        C.command('node', 'spec/support/css_check.js', dir .. '/bad.css'))
      C.remove_tree(dir)
      assert.are.equal(1, js_code)
      assert.are.same({ 'line 1: color: Mismatch\n  syntax: <color>\n' ..
        '   value: 12px\n  --------^', 'line 1: widht: Unknown property ' ..
        '`widht`' }, cjson.decode(bad).errors)
    end)

  it('says what share of the bytes compiled code allocated', function()
    assert.truthy(page(B.compiled_lines()):find('<div class="label">' ..
      'Compiled code</div><div class="value">76%</div><div class="detail">' ..
      'of the bytes allocated, <span title="352 bytes">352 B</span>, ' ..
      'charged to their lines</div>', 1, true))
    assert.is_nil(page(B.three_callers()):find('Compiled code', 1, true))
  end)

  it('is one self-contained page', function()
    local text = page(B.three_callers(), { group = 'caller' })
    assert.are.equal('<!DOCTYPE html>\n<html lang="en">',
      text:sub(1, 32))
    assert.is_nil(text:find('http://', 1, true))
    assert.is_nil(text:find('https://', 1, true))
    assert.is_nil(text:lower():find('<script[^>]*src'))
    assert.is_nil(text:lower():find('<link'))
    assert.is_nil(text:lower():find('<img'))
    assert.is_nil(text:find('%ssrc='))
    assert.is_nil(text:find('url%('))
    assert.is_nil(text:find('@import', 1, true))
    assert.is_nil(text:find('fetch(', 1, true))
    assert.is_nil(text:find('XMLHttpRequest', 1, true))
    -- the data and the program
    assert.are.equal(2, count(text:lower(), '<script'))
    assert.are.equal(1, count(text, '<style>'))
    assert.are.equal('</html>\n', text:sub(-8))
  end)

  it('embeds the flame graphs of allocated and live bytes per stack',
    function()
      local text = page(B.three_callers(), { group = 'caller' })
      local data = data_of(text)
      assert.are.equal('out.bin', data.file)
      local fmt = 'string.format'
      assert.are.same({
        [''] = { 1160, 10 },
        ['@app.lua:10'] = { 300, 3 },
        ['@app.lua:10;@log.lua:5'] = { 300, 3 },
        ['@app.lua:10;@log.lua:5;' .. fmt] = { 300, 3 },
        ['@app.lua:20'] = { 400, 2 },
        ['@app.lua:20;@log.lua:5'] = { 400, 2 },
        ['@app.lua:20;@log.lua:5;' .. fmt] = { 400, 2 },
        ['@app.lua:30'] = { 300, 1 },
        ['@app.lua:30;@log.lua:5'] = { 300, 1 },
        ['@app.lua:30;@log.lua:5;' .. fmt] = { 300, 1 },
        ['@app.lua:50'] = { 64, 1 },
        ['@app.lua:50;@log.lua:7'] = { 64, 1 },
        ['@app.lua:60'] = { 48, 1 },
        ['@app.lua:60;io_lines'] = { 48, 1 },
        ['@app.lua:5'] = { 32, 1 },
        ['TRACE started at @app.lua:70'] = { 16, 1 },
      }, paths(data, 'allocated'))
      assert.are.same({
        [''] = { 828, 6 },
        ['@app.lua:20'] = { 400, 2 },
        ['@app.lua:20;@log.lua:5'] = { 400, 2 },
        ['@app.lua:20;@log.lua:5;' .. fmt] = { 400, 2 },
        ['@app.lua:30'] = { 300, 1 },
        ['@app.lua:30;@log.lua:5'] = { 300, 1 },
        ['@app.lua:30;@log.lua:5;' .. fmt] = { 300, 1 },
        ['@app.lua:50'] = { 64, 1 },
        ['@app.lua:50;@log.lua:7'] = { 64, 1 },
        ['@app.lua:60'] = { 48, 1 },
        ['@app.lua:60;io_lines'] = { 48, 1 },
        ['TRACE started at @app.lua:70'] = { 16, 1 },
      }, paths(data, 'live'))
      -- Children come largest first; frames carry their source.
      local first = data.graphs.allocated.root.c[1]
      assert.are.equal('@app.lua:20', data.frames[first.f + 1].name)
      local sources = {}
      for _, frame in ipairs(data.frames) do
        sources[frame.name] = frame.source
      end
      assert.are.same({ ['@app.lua:10'] = 'lua', ['@app.lua:20'] = 'lua',
        ['@app.lua:30'] = 'lua', ['@app.lua:50'] = 'lua',
        ['@app.lua:60'] = 'lua', ['@app.lua:5'] = 'lua',
        ['@log.lua:5'] = 'lua', ['@log.lua:7'] = 'lua', [fmt] = 'c',
        io_lines = 'c', ['TRACE started at @app.lua:70'] = 'trace' },
        sources)
      assert.is_nil(data.graphs.allocated.note)
      assert.is_nil(data.timeline)
    end)

  it('draws the traces of a loop under the callers of their function',
    function()
      local data = data_of(page(B.compiled_loop(), {}))
      local trace = 'TRACE started at @fill.lua:3'
      assert.are.same({
        [''] = { 320, 6 },
        ['@main.lua:10'] = { 224, 4 },
        ['@main.lua:10;@fill.lua:3'] = { 32, 1 },
        ['@main.lua:10;' .. trace] = { 192, 3 },
        ['@main.lua:20'] = { 96, 2 },
        ['@main.lua:20;@fill.lua:3'] = { 32, 1 },
        ['@main.lua:20;' .. trace] = { 64, 1 },
      }, paths(data, 'allocated'))
      assert.are.same({
        [''] = { 256, 5 },
        ['@main.lua:10'] = { 160, 3 },
        ['@main.lua:10;@fill.lua:3'] = { 32, 1 },
        ['@main.lua:10;' .. trace] = { 128, 2 },
        ['@main.lua:20'] = { 96, 2 },
        ['@main.lua:20;@fill.lua:3'] = { 32, 1 },
        ['@main.lua:20;' .. trace] = { 64, 1 },
      }, paths(data, 'live'))
      assert.is_nil(data.graphs.allocated.note)
    end)

  it('draws the same graphs whatever the grouping of the rows', function()
    local by_caller = data_of(page(B.three_callers(), { group = 'caller' }))
    for _, group in ipairs({ 'line', 'function', 'stack' }) do
      local data = data_of(page(B.three_callers(), { group = group }))
      assert.are.same(paths(by_caller, 'allocated'), paths(data, 'allocated'))
      assert.are.same(paths(by_caller, 'live'), paths(data, 'live'))
    end
  end)

  it('without its pass, draws stacks from the stack rows and the leaks',
    function()
      local full = data_of(page(B.three_callers(), { group = 'caller' }))
      local by_stack = data_of(page(B.three_callers(),
        { group = 'stack', plain = true }))
      assert.are.same(paths(full, 'allocated'),
        paths(by_stack, 'allocated'))
      assert.are.same(paths(full, 'live'), paths(by_stack, 'live'))
      assert.is_nil(by_stack.graphs.allocated.note)
      -- By line, the allocated bytes are per row, said by a note; the
      -- live bytes still come with their stacks.
      local text = page(B.three_callers(), { group = 'line', plain = true })
      local by_line = data_of(text)
      assert.are.same(paths(full, 'live'), paths(by_line, 'live'))
      assert.are.same({
        [''] = { 1160, 10 },
        ['@log.lua:5'] = { 1000, 6 },
        ['@log.lua:7'] = { 64, 1 },
        ['io_lines'] = { 48, 1 },
        ['@app.lua:5'] = { 32, 1 },
        ['TRACE started at @app.lua:70'] = { 16, 1 },
      }, paths(by_line, 'allocated'))
      assert.truthy(by_line.graphs.allocated.note:find(
        'per line, not per call stack', 1, true))
      assert.truthy(text:find('<p class="note" id="note-allocated">The ' ..
        'analysis kept these bytes per line', 1, true))
      -- Without the leaks view, the live bytes are the heap's rows.
      local no_views = data_of(page(B.three_callers(),
        { group = 'stack', plain = true, views = {} }))
      assert.are.same(paths(full, 'live'), paths(no_views, 'live'))
    end)

  it('merges the smallest frames of a very large graph into one box',
    function()
      local data = data_of(page_of_frames(B.three_callers(), 5))
      -- 5 of the 16 nodes stay: the 4 larger than 300B (the root and
      -- @app.lua:20 with its callees), and of the nodes of 300B the
      -- first written (@app.lua:10, before @app.lua:30 by name).  The
      -- rest of the root's children (@app.lua:30, 50, 60 and 5 and the
      -- trace: 460B in 5 allocations) become one box, and so does the
      -- callee of @app.lua:10.
      local fmt = 'string.format'
      assert.are.same({
        [''] = { 1160, 10 },
        ['@app.lua:10'] = { 300, 3 },
        ['@app.lua:10;other (1)'] = { 300, 3 },
        ['@app.lua:20'] = { 400, 2 },
        ['@app.lua:20;@log.lua:5'] = { 400, 2 },
        ['@app.lua:20;@log.lua:5;' .. fmt] = { 400, 2 },
        ['other (5)'] = { 460, 5 },
      }, paths(data, 'allocated'))
      -- It comes last, after the frames it is smaller than.
      assert.are.equal(5, data.graphs.allocated.root.c[3].o)
      assert.are.equal('The 11 smallest frames are merged into "other" ' ..
        'boxes, to keep the page light.', data.graphs.allocated.note)
      -- The page's frames table has the frames shown, numbered as they
      -- are written: the allocated graph's, then the live graph's new
      -- ones (a node's "f" comes after its children, keys being sorted).
      local names = {}
      for i, frame in ipairs(data.frames) do
        names[i] = frame.name
      end
      assert.are.same({ fmt, '@log.lua:5', '@app.lua:20', '@app.lua:10' },
        { names[1], names[2], names[3], names[4] })
      assert.are.equal(1, data.graphs.allocated.root.c[1].c[1].f)
    end)

  it('keeps at most MAX_FRAMES frames when many places are of one size',
    function()
      -- Nine lines of @a.lua allocate 16B each: 10 nodes of a graph of
      -- at most 4.  The root and the first three lines by name stay; the
      -- six others are one box, and their frames are not in the page.
      local s = B.new():lfunc(0x100, '@a.lua', 1):events()
      for line = 1, 9 do
        s:alloc(B.lua(0x100, line), 0x100 + line * 16, 16)
      end
      s:epilogue()
      local data = data_of(page_of_frames(s, 4))
      assert.are.same({
        [''] = { 144, 9 },
        ['@a.lua:1'] = { 16, 1 },
        ['@a.lua:2'] = { 16, 1 },
        ['@a.lua:3'] = { 16, 1 },
        ['other (6)'] = { 96, 6 },
      }, paths(data, 'allocated'))
      assert.are.equal('The 6 smallest frames are merged into "other" ' ..
        'boxes, to keep the page light.', data.graphs.allocated.note:match(
        'The %d+ smallest frames.*$'))
      local names = {}
      for i, frame in ipairs(data.frames) do
        names[i] = frame.name
      end
      assert.are.same({ '@a.lua:1', '@a.lua:2', '@a.lua:3' }, names)
    end)

  it('draws one frame per site, with a note, when there are no stacks',
    function()
      local text = page(B.crafted())
      local data = data_of(text)
      assert.are.same({
        [''] = { 416, 7 },
        ['@test.lua:5'] = { 192, 3 },
        ['@test.lua:7'] = { 128, 1 },
        ['io_write'] = { 48, 1 },
        ['@test.lua:6'] = { 32, 1 },
        ['TRACE started at @test.lua:5'] = { 16, 1 },
      }, paths(data, 'allocated'))
      assert.are.same({
        [''] = { 272, 4 },
        ['@test.lua:5'] = { 128, 2 },
        ['@test.lua:7'] = { 128, 1 },
        ['TRACE started at @test.lua:5'] = { 16, 1 },
        ['@test.lua:6'] = nil,
      }, paths(data, 'live'))
      local note = 'This profile has no call stacks, so each frame is one site.'
      assert.truthy(data.graphs.allocated.note:find(note, 1, true))
      assert.truthy(text:find('<p class="note" id="note-live">' .. note, 1,
        true))
      -- nor time marks
      assert.truthy(text:find('<p class="empty" id="no-time-marks">This ' ..
        'profile has no time marks', 1, true))
      assert.is_nil(text:find('id="peak-marker"', 1, true))
      assert.is_nil(data.timeline)
    end)

  it('charts the heap over time and marks the peak', function()
    local text = page(B.peak_payload())
    local data = data_of(text)
    local timeline = data.timeline
    -- 20 us per row from 0 to 4 ms: [start, stop, highest, last, events]
    assert.are.equal(20000, timeline.width)
    assert.are.equal(201, #timeline.rows)
    assert.are.same({ 0, 20000, 0, 0, 0 }, timeline.rows[1])
    assert.are.same({ 1000000, 1020000, 300, 270, 3 }, timeline.rows[51])
    assert.are.same({ 1020000, 1040000, 270, 270, 0 }, timeline.rows[52])
    assert.are.same({ 2000000, 2020000, 570, 570, 2 }, timeline.rows[101])
    assert.are.same({ 3000000, 3020000, 420, 320, 3 }, timeline.rows[151])
    assert.are.same({ 4000000, 4020000, 320, 320, 0 }, timeline.rows[201])
    assert.are.equal(100, timeline.peak_row)
    assert.truthy(text:find('<g class="peak" id="peak-marker">', 1, true))
    assert.truthy(text:find('>peak 570 B at 2.00 ms</text></g>', 1, true))
    assert.truthy(text:find('<svg id="chart-svg" viewBox="0 0 1000 280"',
      1, true))
  end)

  it('charts a profile with a time mark of 2^62 ns in 231 rows', function()
    local started = os.clock()
    local text = page(B.far_mark())
    local timeline = data_of(text).timeline
    -- The slots are 1e15 ns wide (coarsened to fit the mark), 20 a row.
    assert.are.same({ 2e16, 231, 230 }, { timeline.width, #timeline.rows,
      timeline.peak_row })
    assert.are.same({ 0, 2e16, 100, 100, 1 }, timeline.rows[1])
    assert.are.same({ 2e16, 4e16, 100, 100, 0 }, timeline.rows[2])
    assert.are.same({ 458e16, 460e16, 100, 100, 0 }, timeline.rows[230])
    assert.are.same({ 460e16, 462e16, 150, 50, 2 }, timeline.rows[231])
    assert.is_true(os.clock() - started < 1)
  end)

  it('writes the header and the tables as HTML', function()
    local text = page(B.three_callers(), { group = 'line', name =
      'dir/run.bin' })
    assert.truthy(text:find('<title>memprof: dir/run.bin</title>', 1, true))
    assert.truthy(text:find('<h1 id="file-name">run.bin</h1>', 1, true))
    assert.truthy(text:find('<li>format <b>extended (100)</b></li>', 1,
      true))
    assert.truthy(text:find('<li>events <b>15</b></li>', 1, true))
    assert.truthy(text:find('<li>call stacks <b>yes</b></li>', 1, true))
    assert.truthy(text:find('<li>time marks <b>no</b></li>', 1, true))
    -- totals: 1160B allocated in 10 events, 356B freed, 804B net
    assert.truthy(text:find('<div class="label">Allocated</div><div ' ..
      'class="value"><span title="1,160 bytes">1.13 KiB</span></div><div ' ..
      'class="detail">10 allocations</div>', 1, true))
    assert.truthy(text:find('title="356 bytes">356 B</span>', 1, true))
    assert.truthy(text:find('<div class="label">Live at end</div><div ' ..
      'class="value"><span title="828 bytes">828 B</span></div><div ' ..
      'class="detail">6 blocks</div>', 1, true))
    -- (The stream does not record the heap at the start.)
    assert.truthy(text:find('<div class="label">Peak above start</div><div ' ..
      'class="value"><span title="1,160 bytes">1.13 KiB</span></div>' ..
      '<div class="detail">after event 10</div>', 1, true))
    assert.is_nil(text:find('class="warning"', 1, true))
    -- tables: a row is a <tr> with the site, the figures and the share
    assert.truthy(text:find('<tr><th scope="row"><span class="site">' ..
      '@log.lua:5</span></th><td class="num"><span title="1,000 bytes">' ..
      '1000 B</span></td><td class="num">6</td><td class="share">' ..
      '<span class="bar"><span style="width:86.2%"></span></span>' ..
      '<span class="pct">86.2%</span>' ..
      '</td></tr>', 1, true))
    assert.truthy(text:find('<table id="table-live">', 1, true))
    assert.truthy(text:find('<details class="stacks"><summary>allocated ' ..
      'from 2 stacks</summary>', 1, true))
    assert.truthy(text:find('<caption>Peak holders: 1.13 KiB above the ' ..
      'heap at the start (which this profile does not record) after ' ..
      'event 10</caption>', 1, true))
    assert.truthy(text:find('<caption>Live at end: blocks never freed, by ' ..
      'where they were allocated. The profile ended without a collection ' ..
      'at stop (only memprof.stop() with collect_at_stop = true collects; ' ..
      'a profile completed at lua_close or exit does not): some of these ' ..
      'blocks may be unreachable.</caption>', 1, true))
    assert.truthy(text:find('<caption>Temporary blocks: freed with at ' ..
      'most 1 other allocation between their own and their free' ..
      '</caption>', 1, true))
    assert.truthy(text:find('<th scope="row">Total</th><td class="num">' ..
      '<span title="1,160 bytes">1.13 KiB</span></td><td class="num">10' ..
      '</td>', 1, true))
  end)

  it('keeps the blocks allocated before the profile apart at the peak',
    function()
      local text = page(B.peak_payload(), { group = 'line' })
      assert.truthy(text:find('<tr><th scope="row">(blocks allocated ' ..
        'before the profile), freed before the peak</th><td class="num">' ..
        '<span title="30 bytes">30 B</span></td><td class="num">1</td>' ..
        '<td></td></tr>', 1, true))
      assert.is_nil(text:find('title="-', 1, true))
    end)

  it('gives the peak as the whole heap when the stream records the heap ' ..
    'at the start', function()
      local s = B.new():lfunc(0x100, '@p.lua', 1)
        :events({ version = B.EXTENDED }):note(B.HEAP_AT_START, 10000)
      s:alloc(B.lua(0x100, 2), 0x10, 200):free(B.internal(1), 0x90, 30)
      s:alloc(B.lua(0x100, 3), 0x20, 400):epilogue()
      local text = page(s, { group = 'line' })
      assert.truthy(text:find('<div class="label">Peak heap</div><div ' ..
        'class="value"><span title="10,570 bytes">10.3 KiB</span></div>',
        1, true))
      assert.truthy(text:find('<caption>Peak holders: peak heap 10.3 KiB ' ..
        'after event 3, of which 9.74 KiB allocated before the profile' ..
        '</caption>', 1, true))
      assert.truthy(text:find('<tr><th scope="row">(blocks allocated ' ..
        'before the profile), still live</th><td class="num"><span ' ..
        'title="9,970 bytes">9.74 KiB</span></td><td></td>', 1, true))
      assert.truthy(text:find('<th scope="row">Total at the peak</th>' ..
        '<td class="num"><span title="10,570 bytes">10.3 KiB</span>', 1,
        true))
    end)

  it('lists the rows of stacks with their callers, and cuts at top',
    function()
      local text = html.render(result_of(B.three_callers():bytes(),
        { group = 'stack' }), { top = 2 })
      assert.truthy(text:find('<th scope="row"><span class="site">' ..
        'string.format</span><span class="caller">called from @log.lua:5' ..
        '</span><span class="caller">called from @app.lua:20</span></th>',
        1, true))
      assert.truthy(text:find('<th scope="row" class="more">… and 5 more ' ..
        'rows</th>', 1, true))
      -- all: every row, whatever top says (7 in the allocated table).
      local max = html.DEFAULT_TOP
      html.DEFAULT_TOP = 2
      local ok, all = pcall(html.render, result_of(B.three_callers():bytes(),
        { group = 'stack' }), { all = true })
      html.DEFAULT_TOP = max
      assert(ok, all)
      assert.is_nil(all:find('class="more"', 1, true))
      local allocated = all:match('<table id="table%-allocated">.-</tbody>')
      assert.are.equal(7, count(allocated, '<tr><th scope="row">'))
    end)

  it('sorts the tables by bytes, or by count', function()
    local function first_row(text, id)
      local at = text:find('<table id="' .. id .. '">', 1, true)
      return text:match('<tbody>%s*<tr><th scope="row"><span class="site">' ..
        '([^<]+)', at)
    end
    local result = result_of(B.three_callers():bytes(), { group = 'caller' })
    local by_bytes = html.render(result)
    assert.are.equal('@app.lua:20', first_row(by_bytes, 'table-allocated'))
    assert.are.equal('@app.lua:20', first_row(by_bytes, 'table-peak'))
    local by_count = html.render(result, { sort = 'count' })
    assert.are.equal('@app.lua:10', first_row(by_count, 'table-allocated'))
    assert.are.equal('@app.lua:10', first_row(by_count, 'table-peak'))
  end)

  it('warns about a truncated stream', function()
    local bytes = B.three_callers():bytes()
    local text = page(bytes:sub(1, #bytes - 10))
    assert.truthy(text:find('<div class="warning" role="alert" ' ..
      'id="warning"><b>The stream is incomplete:</b>', 1, true))
    assert.truthy(text:find('<li>stream <b>truncated</b></li>', 1, true))
  end)

  it('escapes names in the HTML and in the data', function()
    local evil = '@</script><script>alert(1)</script>&"\'.lua'
    local s = B.new():lfunc(0x100, evil, 1):lfunc(0x200, '@bad\255.lua', 1)
      :events()
    s:alloc(B.lua(0x100, 3), 0x10, 10)
    s:alloc(B.lua(0x200, 4), 0x20, 20)
    s:epilogue()
    local text = page(s, { name = 'a<b>.bin' })
    assert.are.equal(2, count(text:lower(), '<script'))
    assert.is_nil(data_text(text):find('</', 1, true))
    assert.is_nil(data_text(text):find('<', 1, true))
    assert.truthy(text:find('<title>memprof: a&lt;b&gt;.bin</title>', 1,
      true))
    assert.truthy(text:find('@&lt;/script&gt;&lt;script&gt;alert(1)&lt;' ..
      '/script&gt;&amp;&quot;&#39;.lua:3', 1, true))
    local data = data_of(text)
    assert.are.equal('a<b>.bin', data.file)
    local names = {}
    for _, frame in ipairs(data.frames) do
      names[#names + 1] = frame.name
    end
    table.sort(names)
    assert.are.same({ evil .. ':3', '@bad\239\191\189.lua:4' }, names)
  end)
end)

describe('html report of a sampled profile', function()
  it('says its figures are estimates', function()
    local text = page(B.sampled())
    assert.are.equal(1, count(text, '<li>sampled <b>one sample per 100 ' ..
      'bytes on average; figures are estimates</b></li>'))
  end)

  -- The free of a block of 1 byte allocated before the profile stands
  -- for 101 blocks of 101 bytes (address 2: memprof.analysis.sampling).
  it('says its peak heap is an estimate', function()
    local s = B.new():lfunc(0x100, '@a.lua', 0)
      :events({ version = B.EXTENDED, sample_bytes = 100 })
      :note(B.HEAP_AT_START, 5000)
      :free(B.lua(0x100, 5), 2, 1)
      :alloc(B.lua(0x100, 3), 0x1000, 10000)
      :epilogue()
    local text = page(s, { group = 'line' })
    assert.truthy(text:find('<caption>Peak holders: estimated peak heap ' ..
      '14.5 KiB after event 2, of which 4.78 KiB allocated before the ' ..
      'profile</caption>', 1, true))
    assert.truthy(text:find('<div class="label">Estimated peak heap</div>' ..
      '<div class="value"><span title="14,899 bytes">14.5 KiB</span></div>',
      1, true))
  end)
end)
