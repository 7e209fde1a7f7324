-- memprof-report of heap snapshots taken in this VM, with and without the
-- profile that ran (report/model/holders.lua, its renderers,
-- cli/heap_report.lua):
-- a module-level cache, a closure's upvalue, a suspended coroutine's
-- local and a weak-keyed table, named as what holds the memory; the
-- allocating place and its callers; --leaks --heap and the html pages.
local h = require('helpers.profile')
local memprof = require('memprof')
local cjson = require('cjson')

local run = require('helpers.report_run')

local function report(...)
  local code, out, err = run.report(...)
  assert(code == 0, err)
  return out
end

local function lines_of(text)
  local lines = {}
  for line in text:gmatch('([^\n]*)\n') do lines[#lines + 1] = line end
  return lines
end

-- The line of the report that begins with `start`, or nil.
local function line_of(text, start)
  for _, line in ipairs(lines_of(text)) do
    if line:sub(1, #start) == start then return line end
  end
  return nil
end

-- The program: a cache of PAGES pages in a module, records appended to a
-- closure's upvalue `history`, a suspended coroutine with a local table
-- `pending`, and a table whose weak keys are the records.
local PAGES = 2000
local PROGRAM = [[
local modules, pages = ...
local catalog = { rendered_cache = {} }
local function render(key) local s = string.rep('<li>' .. key, 20) return s end
for i = 1, pages do catalog.rendered_cache['page' .. i] = render(i) end
local history = {}
local recorder = { record = function(x) history[#history + 1] = { x } end }
for i = 1, 100 do recorder.record(i) end
local seen = setmetatable({}, { __mode = 'k' })
for _, r in ipairs(history) do seen[r] = true end
local worker = { co = coroutine.create(function()
  local pending = {}
  for i = 1, 50 do pending[i] = { i } end
  coroutine.yield()
  return pending
end) }
coroutine.resume(worker.co)
modules.spec_catalog, modules.spec_recorder = catalog, recorder
modules.spec_worker, modules.spec_weak = worker, { seen = seen }
]]

describe('memprof-report of a heap snapshot of this VM', function()
  local heap_path, profile_path, taken_from, taken_to

  setup(function()
    jit.off()
    jit.flush()
    local program = h.chunk(PROGRAM, '@catalog.lua')
    profile_path = h.tmpname()
    heap_path = h.tmpname('.heap')
    assert(memprof.start(profile_path, { stack_depth = 8 }))
    program(package.loaded, PAGES)
    taken_from = os.time()
    assert(memprof.snapshot(heap_path, { format = 'heap', collect = true }))
    taken_to = os.time()
    assert(memprof.stop())
  end)

  teardown(function()
    for _, name in ipairs({ 'spec_catalog', 'spec_recorder', 'spec_worker',
      'spec_weak' }) do
      package.loaded[name] = nil
    end
    os.remove(heap_path)
    os.remove(profile_path)
    jit.on()
  end)

  it('names the cache first, and each holder by its path', function()
    local text = report('--all', heap_path)
    local lines = lines_of(text)
    assert.equal('HEAP SNAPSHOT ' .. heap_path, lines[1])
    local date, pid = lines[3]:match('^taken (%d+%-%d+%-%d+ %d+:%d+:%d+) ' ..
      'UTC by process (%d+), during a profile %(after its first [%d,]+ ' ..
      'bytes%); %-%-profile=FILE names where its objects were allocated$')
    assert.is_not_nil(date, lines[3])
    local shown = {}
    for t = taken_from, taken_to do
      shown[os.date('!%Y-%m-%d %H:%M:%S', t)] = true
    end
    assert.is_true(shown[date], date)
    local f = assert(io.open('/proc/self/stat'))
    assert.equal(f:read('*l'):match('^(%d+)'), pid)
    f:close()
    local cache = 'package.loaded["spec_catalog"].rendered_cache[*]: ' ..
      '2,000 strings, '
    assert.equal(cache, lines[6]:sub(1, #cache))
    assert.is_not_nil(line_of(text,
      'package.loaded["spec_recorder"].record<upvalue history>[*]: ' ..
      '100 tables, '))
    assert.is_not_nil(line_of(text,
      'package.loaded["spec_worker"].co<local pending in function at ' ..
      '@catalog.lua:10, line 13>[*]: 50 tables, '))
    -- The weak-keyed table holds none of its keys: it retains its own
    -- bytes and its metatable's only.
    local seen = 'package.loaded["spec_weak"].seen'
    local own, retained = line_of(text, seen .. ': '):match(
      '^[^:]+: 1 table, ([%d,]+)B, retaining ([%d,]+)B$')
    local meta = line_of(text, seen .. '<metatable>: '):match(
      '^[^:]+: 1 table, ([%d,]+)B$')
    local function n(text) return tonumber((text:gsub(',', ''))) end
    assert.equal(n(retained), n(own) + n(meta))
    assert.is_nil(line_of(text, seen .. '<key>'))
    assert.is_nil(line_of(text, seen .. '['))
  end)

  it('says where the objects were allocated, given the profile', function()
    local text = report('--profile=' .. profile_path, heap_path)
    local lines = lines_of(text)
    assert.matches('^taken [%d: -]+ UTC by process %d+, during a profile ' ..
      '%(after its first ', lines[3])
    assert.is_truthy(lines[3]:find('; allocation places from ' ..
      profile_path, 1, true))
    assert.matches('^package%.loaded%["spec_catalog"%]%.rendered_cache%[%*%]' ..
      ': 2,000 strings, [%d,]+B, allocated at @catalog%.lua:3 %(from ' ..
      '@catalog%.lua:4 <%- ', lines[6])
    local place = line_of(text, '@catalog.lua:3: ')
    assert.is_not_nil(place)
    local at = text:find(place, 1, true) + #place + 1
    local held = '    held by package.loaded["spec_catalog"].' ..
      'rendered_cache[*]: 2,000 objects, '
    assert.equal(held, text:sub(at, at + #held - 1))
  end)

  it("names each live place's main holders with --leaks --heap", function()
    local text = report('--leaks', '--heap=' .. heap_path, profile_path)
    local at = text:find('WHO HOLDS IT (the objects of the heap snapshot ' ..
      heap_path .. ' by allocating place, with the paths that hold them)\n',
      1, true)
    assert.is_not_nil(at, text)
    local section = text:sub(at)
    local place = line_of(section, '@catalog.lua:3: ')
    assert.matches('^@catalog%.lua:3: 2,%d%d%d objects, [%d,]+B %(from ' ..
      '@catalog%.lua:4 <%- @spec/module/heap_report_spec%.lua:%d+', place)
    local next_line = section:sub(section:find(place, 1, true) + #place + 1)
    local held = '    held by package.loaded["spec_catalog"].rendered_cache' ..
      '[*]: 2,000 objects, '
    assert.equal(held, next_line:sub(1, #held))
  end)

  it('links the live-at-end table to "Who holds it" in the html page',
    function()
      local page = report('--format=html', '--heap=' .. heap_path,
        profile_path)
      local id = page:match('<span class="site">@catalog%.lua:3</span>' ..
        '[^<]*<a class="who%-holds" href="#(who%-holds%-%d+)">who holds it</a>')
      assert.is_not_nil(id)
      assert.is_truthy(page:find('<section class="panel" id="who-holds-it"',
        1, true))
      local entry = page:match('<li id="' .. id:gsub('%-', '%%-') ..
        '">(.-)</ul></li>')
      assert.is_truthy(entry:find('<span class="site">@catalog.lua:3</span>',
        1, true))
      assert.is_truthy(entry:find('<span class="mono">package.loaded[' ..
        '&quot;spec_catalog&quot;].rendered_cache[*]</span>: 2,000 objects',
        1, true))
    end)

  it('writes the html page of a snapshot with the json data in it',
    function()
      local page = report('--format=html', '--profile=' .. profile_path,
        heap_path)
      local json = report('--format=json', '--profile=' .. profile_path,
        heap_path)
      local data = page:match('<script type="application/json" ' ..
        'id="memprof%-heap%-data">(.-)</script>')
      assert.same(cjson.decode(json), cjson.decode(data))
      for _, id in ipairs({ 'holders', 'by-type', 'by-place' }) do
        assert.is_truthy(page:find('<section id="' .. id .. '">', 1, true))
      end
      local first_row = page:match('<tbody>\n<tr>(.-)</tr>')
      assert.is_truthy(first_row:find('package.loaded[&quot;spec_catalog' ..
        '&quot;].rendered_cache[*]</td><td>2,000 strings</td>', 1, true))
      local doc = cjson.decode(json)
      assert.equal('@catalog.lua:3', doc.holders[1].place)
      assert.equal(PAGES, doc.holders[1].objects)
    end)
end)

describe('memprof-report --leaks --heap of a program in a directory', function()
  it('names the places of WHO HOLDS IT as the sections above it do',
    function()
      local C = require('helpers.command')
      local dir = C.temp_dir()
      local program = dir .. '/app.lua'
      C.write_file(program, table.concat({
        "local memprof = require('memprof') if jit then jit.off() end",
        "assert(memprof.start(os.getenv('PROFILE'), { stack_depth = 4 }))",
        'CACHE = {}',
        "for i = 1, 300 do CACHE[i] = 'page ' .. i end",
        "assert(memprof.snapshot(os.getenv('HEAP'), { format = 'heap' }))",
        'assert(memprof.stop())',
      }, '\n') .. '\n')
      local code, _, stderr = C.run('PROFILE=' .. C.quote(dir .. '/p.bin') ..
        ' HEAP=' .. C.quote(dir .. '/p.heap') .. ' timeout 60 ' ..
        C.quote(h.lua) .. ' ' .. C.quote(program))
      assert.equal(0, code, stderr)
      local text = report('--leaks', '--heap=' .. dir .. '/p.heap',
        dir .. '/p.bin')
      C.remove_tree(dir)
      assert.equal('Files under ' .. dir .. '/ are named from there on: ' ..
        '@…/name.lua is @' .. dir .. '/name.lua.', lines_of(text)[1])
      local at = assert(text:find('WHO HOLDS IT', 1, true))
      local section = text:sub(at)
      assert.equal('@…/app.lua:4: 300 objects, ',
        lines_of(section)[2]:match('^@…/app%.lua:4: 300 objects, '))
      assert.matches('^    held by _G%.CACHE%[%*%]: 300 objects, [%d,]+B$',
        lines_of(section)[3])
    end)
end)
