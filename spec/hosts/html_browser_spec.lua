-- The HTML report in a real browser: headless Chromium runs each page with
-- spec/support/html_check.js, which clicks, hovers and searches, and
-- reports what it saw; the last specs profile bench/demo.lua with
-- build/memprof.so (run `make` first) and write build/html-report.html
-- and build/html-report.png. Every page of the file is opened by setup in
-- one Chromium (helpers.consumers.browser_pages: starting it is most of
-- the cost), and each spec checks what its page did. Needs Debian's
-- chromium and node (`apt-get install chromium nodejs`; MEMPROF_CHROMIUM
-- names another binary). The page's structure and data are specified in
-- spec/reporter/report/html_spec.lua.
local cjson = require('cjson')
local C = require('helpers.command')
local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local html = require('memprof.report.html')
local B = require('helpers.stream_builder')
local profile = require('helpers.profile')
local html_page = require('helpers.html_page')

local ALL, page = html_page.ALL, html_page.page

-- A stream with stacks and time marks: @m.lua:2 calls a builder at
-- @m.lua:9 that allocates through string.rep; the peak (700B) is at 3 ms.
local function stacks_and_time()
  local s = B.new():lfunc(0x100, '@m.lua', 1):cfunc(0x900, 'string.rep')
    :events({ version = B.EXTENDED })
  s:stack(1, { B.c(0x900), B.lua(0x100, 9), B.lua(0x100, 2) })
  s:stack(2, { B.lua(0x100, 9), B.lua(0x100, 2) })
  s:stack(3, { B.lua(0x100, 4) })
  s:time(1000000)
  s:alloc(B.lua(0x100, 9, 1), 0x10, 300)
  s:alloc(B.lua(0x100, 9, 2), 0x20, 100)
  s:time(2000000)
  s:alloc(B.lua(0x100, 4, 3), 0x30, 50)
  s:free(B.internal(), 0x20, 100)
  s:time(3000000)
  s:alloc(B.lua(0x100, 9, 1), 0x40, 350)
  s:time(4000000)
  s:free(B.internal(), 0x40, 350)
  s:time(5000000)
  s:epilogue()
  return s
end

-- A stream whose graph of allocated bytes has frames too small to draw:
-- @w.lua:1 allocates 1,000,000B; @w.lua:2 calls @w.lua:3, which
-- allocates 3000B, and 200 lines of @x.lua, which allocate 10B each.
local function tiny_frames()
  local s = B.new():lfunc(0x100, '@w.lua', 1):lfunc(0x200, '@x.lua', 1)
    :events({ version = B.EXTENDED })
  s:stack(1, { B.lua(0x100, 1) })
  s:stack(2, { B.lua(0x100, 3), B.lua(0x100, 2) })
  s:alloc(B.lua(0x100, 1, 1), 0x10, 1000000)
  s:alloc(B.lua(0x100, 3, 2), 0x20, 3000)
  for line = 1, 200 do
    s:stack(2 + line, { B.lua(0x200, line), B.lua(0x100, 2) })
    s:alloc(B.lua(0x200, line, 2 + line), 0x1000 + line * 16, 10)
  end
  s:epilogue()
  return s
end

-- Eight lines of long file names side by side, luacheck's: their frames
-- are a few characters wide.
local function long_names()
  local s = B.new()
    :lfunc(0x100, '@/usr/share/lua/5.1/luacheck/stages/' ..
      'detect_cyclomatic_complexity.lua', 1)
    :lfunc(0x200, '@/usr/share/lua/5.1/luacheck/parser.lua', 1)
    :events({ version = B.EXTENDED })
  for line = 1, 8 do
    local fn = line % 2 == 0 and 0x100 or 0x200
    s:stack(line, { B.lua(fn, 100 + line) })
    s:alloc(B.lua(fn, 100 + line, line), 0x1000 * line, 1000)
  end
  s:epilogue()
  return s
end

local consumers = require('helpers.consumers')
local q = profile.shell_quote
local read_file, write_file = C.read_file, C.write_file
local have_chromium = consumers.have_chromium

local function current_dir()
  local pipe = io.popen('pwd')
  local dir = pipe:read('*l')
  pipe:close()
  return dir
end

local function set_of(list)
  local set = {}
  for _, item in ipairs(list) do
    set[item] = true
  end
  return set
end

local function profile_demo(path)
  local patch = "local m = require('memprof') local start = m.start " ..
    "m.start = function(p) return start(p, { stack_depth = 16, " ..
    "timestamps = true }) end"
  local pipe = io.popen(string.format(C.CLEAN_ENV .. "LUA_CPATH='./build/?.so;;' " ..
    "LUA_PATH='./lua/?.lua;;' timeout 120 %s -joff -e %s bench/demo.lua " ..
    "%s 2>&1", os.getenv('MEMPROF_DEMO_LUA') or 'luajit', q(patch), q(path)))
  local out = pipe:read('*a')
  pipe:close()
  return out
end

-- The page of a real profile of bench/demo.lua, kept as
-- build/html-report.html.
local function demo_page()
  assert(read_file('build/memprof.so'), 'run make first')
  local dir = profile.tmpname('-demo')
  local bin = dir .. '/demo.bin'
  os.execute('mkdir -p ' .. q(dir))
  local out = profile_demo(bin)
  local stream = reader.open(bin)
  local result = analyze.run(stream, { group = 'line', views = ALL,
    passes = html.passes() })
  os.execute('rm -rf ' .. q(dir))
  assert(stream.has_stacks and stream.has_time, out)
  local text = html.render(result)
  os.execute('mkdir -p build')
  write_file('build/html-report.html', text)
  return text
end

-- Each spec's page and what html_check.js does in it, by name; `shot` is
-- the demo's page as it is, photographed.
local function jobs()
  local demo = demo_page()
  local SHOT = 'build/html-report.png'
  os.remove(SHOT)
  return {
    flame = { text = page(B.three_callers(), { group = 'line' }),
      config = { zoom = '@log.lua:5', search = 'format' } },
    labels = { text = page(long_names()), config = {
      zoom = '@\226\128\166/stages/detect_cyclomatic_complexity.lua:102',
      search = 'parser' } },
    chart = { text = page(stacks_and_time()),
      config = { zoom = '@m.lua:9', search = 'rep' } },
    other = { text = page(tiny_frames()), config = { zoom = '@w.lua:2',
      search = 'x.lua', other = 'other (200 frames)' } },
    script_error = { text = page(B.three_callers()):gsub(
      'function start%(%) {', 'function start() { undefinedFunction();'),
      config = { zoom = '@log.lua:5', search = 'format' } },
    handler_error = { text = page(B.three_callers()):gsub(
      'FlameGraph.prototype.zoom = function %(node, keepFocus%) {',
      '%0 null.oops();'), config = { zoom = '@log.lua:5', search = 'x' } },
    demo = { text = demo,
      config = { zoom = '@bench/demo.lua:21', search = 'string.format' } },
    shot = { path = current_dir() .. '/build/html-report.html',
      screenshot = SHOT, window = { 1280, 900 } },
  }
end

describe('html report in a browser', function()
  -- What each page did: { report = ..., problems = {...} } by name.
  local opened = {}

  setup(function()
    assert(have_chromium(), 'these specs need Chromium and node: ' ..
      'apt-get install chromium nodejs (or MEMPROF_CHROMIUM=/path/to/chrome)')
    local names, list = {}, {}
    for name, job in pairs(jobs()) do
      names[#names + 1] = name
      list[#list + 1] = job
    end
    for i, result in ipairs(consumers.browser_pages(list)) do
      opened[names[i]] = result
    end
  end)

  -- The report and the problems of a page.
  local function check(name)
    local result = assert(opened[name], 'no page ' .. name)
    return result.report, result.problems
  end

  it('draws the flame graphs, zooms, hovers, searches and has no errors',
    function()
      local report, problems = check('flame')
      assert.are.same({}, problems)
      local allocated = set_of(report.frames.allocated)
      for _, name in ipairs({ 'all allocations', '@app.lua:10', '@app.lua:20',
          '@app.lua:30', '@log.lua:5', '@log.lua:7', 'string.format',
          'io_lines', '@app.lua:60', '@app.lua:5',
          'TRACE started at @app.lua:70' }) do
        assert.is_true(allocated[name], name)
      end
      assert.are.equal(16, #report.frames.allocated)
      assert.are.equal(12, #report.frames.live)
      assert.is_true(set_of(report.frames.live)['all live blocks'])
      -- the tooltip: name, bytes, count, share (@app.lua:20's line 5)
      assert.are.equal('@log.lua:5400 B (400 bytes)2 allocations' ..
        '34.5% of all', report.hover)
      assert.are.same({
        crumbs = 'all allocations›@app.lua:20›@log.lua:5',
        width = '100%', left = '0%', reset_enabled = true,
        after_reset = { crumbs = 'all allocations', frames = true,
          reset_enabled = false },
      }, report.zoom)
      assert.are.same({ zoomed = 'all allocations›@app.lua:20›@log.lua:5',
        escapes = { 'all allocations›@app.lua:20', 'all allocations' } },
        report.keyboard)
      assert.are.same({ matched = { 'string.format', 'string.format',
        'string.format' }, text = 'Matched: 1000 B (86.2%)', cleared = true },
        report.search)
      assert.are.same({ live_shown = true, allocated_hidden = true,
        back = true }, report.tabs)
      assert.are.equal(cjson.null, report.peak_marker)
      assert.are.same({ allocated = 5, live = 4, peak = 5, temporary = 1 },
        report.table_rows)
    end)

  it("shortens a frame's label from its start, keeping its file:line",
    function()
      local report, problems = check('labels')
      assert.are.same({}, problems)
      local shortened = 0
      for _, item in ipairs(report.labels) do
        local name, label, fits = item[1], item[2], item[3]
        assert.is_true(fits, label)
        if label ~= name and not name:find('^all allocations') then
          shortened = shortened + 1
          local tail = label:match('^\226\128\166(.+)$')
          assert.truthy(tail, label)
          assert.equal(tail, name:sub(-#tail))
          assert.truthy(tail:find(':%d+$'), label)
        end
      end
      assert.equal(8, shortened)
    end)

  it('charts the heap over time with the peak marked', function()
    local report, problems = check('chart')
    assert.are.same({}, problems)
    assert.are.equal('peak 700 B at 3.00 ms', report.peak_marker)
    assert.are.equal('visible', report.chart.guide)
    assert.truthy(report.chart.tooltip:find('highest:', 1, true))
    assert.are.equal('3.00 ms – 3.02 ms' ..
      'highest: 700 B, at the end: 700 B1 eventsthe peak',
      report.chart.peak_key)
    table.sort(report.frames.allocated)
    assert.are.same({ '@m.lua:2', '@m.lua:4', '@m.lua:9', 'all allocations',
      'string.rep' }, report.frames.allocated)
    assert.are.same({ 'string.rep' }, report.search.matched)
  end)

  it('merges frames too small to draw into a visible "other" box',
    function()
      local report, problems = check('other')
      assert.are.same({}, problems)
      -- Each @x.lua line is 0.001% of the graph; the 200 of them, 0.2%.
      assert.are.same({ 'all allocations', '@w.lua:1', '@w.lua:2',
        '@w.lua:3', 'other (200 frames)' }, report.frames.allocated)
      local other = report.other
      assert.are.same({ '99.801%', '0.199%' }, { other.left, other.width })
      assert.are.equal('other (200 frames)1.95 KiB (2,000 bytes)' ..
        '200 allocations0.2% of alleach too small to draw at this zoom',
        other.tooltip)
      -- A click zooms into @w.lua:2, where each line is 0.2% wide: drawn.
      assert.are.equal('all allocations›@w.lua:2', other.crumbs)
      assert.are.equal(203, #other.frames)
      assert.are.equal('@x.lua:1', other.frames[4])
      for _, name in ipairs(other.frames) do
        assert.is_nil(name:find('^other'))
      end
    end)

  it('fails the check when the page has a JavaScript error', function()
    local _, problems = check('script_error')
    assert.is_true(#problems > 0)
    assert.truthy(table.concat(problems, '\n'):find(
      'Uncaught ReferenceError: undefinedFunction is not defined', 1, true))
  end)

  it('fails the check when a handler throws', function()
    local _, problems = check('handler_error')
    assert.truthy(table.concat(problems, '\n'):find('page error', 1, true))
  end)

  it('reports a real profile of bench/demo.lua', function()
    local report, problems = check('demo')
    assert.are.same({}, problems)
    local allocated = set_of(report.frames.allocated)
    for _, name in ipairs({ '@bench/demo.lua:29', '@bench/demo.lua:19',
        '@bench/demo.lua:21', '@bench/demo.lua:11', 'string.format' }) do
      assert.is_true(allocated[name], name)
    end
    -- (memprof run records the heap at the start: the whole heap.)
    assert.truthy(report.peak_marker:find('^peak heap [%d.]+ KiB at ' ..
      '[%d.]+ ms$'),
      report.peak_marker)
    assert.truthy(#report.search.matched > 0)
  end)

  it('takes a screenshot of the report of bench/demo.lua', function()
    local _, problems = check('shot')
    assert.are.same({}, problems)
    local png = read_file('build/html-report.png')
    assert.truthy(png, 'no screenshot')
    assert.are.equal('\137PNG', png:sub(1, 4))
  end)
end)
