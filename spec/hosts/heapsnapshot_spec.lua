-- memprof-report --format=heapsnapshot (report/heapsnapshot.lua): heap
-- snapshots built byte by byte, written as V8's .heapsnapshot and opened
-- by the tools people use, not read back by us: memlab's heap API
-- (@memlab/heap-analysis: its parser, dominators and retained sizes) and
-- Chrome DevTools' own loader in a real headless Chromium (the DevTools
-- frontend Chromium bundles, driven through the DevTools protocol: its
-- HeapSnapshotLoader and the retained sizes of its snapshot worker).
-- Each must find the top retainer and the retained size of our text
-- report.  Needs node, Chromium and memlab (.ci/install-deps --tests).
local C = require('helpers.command')
local consumers = require('helpers.consumers')
local graphs = require('helpers.heap_graphs')
local H = require('helpers.heap_builder')
local cjson_null = require('cjson').null

local run = require('helpers.report_run')
local report, temp_path = run.report, run.temp_path

-- The snapshot at `heap` written as a .heapsnapshot file (args: more
-- options).
local function export(heap, ...)
  local path = temp_path('.heapsnapshot')
  local code, _, err = report('--format=heapsnapshot', '--output=' .. path,
    heap, ...)
  assert.equal('', err:gsub('[^\n]*: wrote [^\n]*\n', ''))
  assert.equal(0, code)
  return path
end

-- The row of the text report that retains the most (its pattern and
-- retained bytes).
local function top_retainer(heap)
  local code, out = report('--all', heap)
  assert.equal(0, code)
  local best, most = nil, -1
  local holders = out:match('WHAT HOLDS THE MEMORY[^\n]*\n(.-)\n\n')
  for line in holders:gmatch('[^\n]+') do
    local pattern, bytes = line:match('^(.-): %d[^:]-, ([%d,]+)B')
    local retained = line:match('retaining ([%d,]+)B') or bytes
    retained = tonumber((retained:gsub(',', '')))
    if retained > most then best, most = pattern, retained end
  end
  return best, most
end

-- The node that retains the most other than the root: [1] id, and the
-- name of the root's edge to it.
local function largest(nodes, edges, retained_at)
  local best
  for _, node in ipairs(nodes) do
    if node[1] ~= 1 and (not best or node[retained_at] > best[retained_at])
    then
      best = node
    end
  end
  for _, edge in ipairs(edges) do
    if edge[3] == best[1] then return best, edge[1] end
  end
  return best, nil
end

local function by_id(nodes, id)
  for _, node in ipairs(nodes) do
    if node[1] == id then return node end
  end
end

-- A module `catalog` whose field `render` is a closure of the prototype
-- at @catalog.lua:44, with a long string in its upvalue `template`; its
-- fields `rep`, a built-in, `open`, a C function, and `move`, a built-in
-- LuaJIT writes in Lua.
local function named_graph(path)
  local b = H.new()
  local registry = b:table(100)
  b:root('registry', registry)
  local loaded = b:table(80)
  b:named(registry, '_LOADED', loaded, 30)
  local catalog = b:table(64)
  b:named(loaded, 'catalog', catalog, 30)
  local render = b:func(40, 1)
  b:named(catalog, 'render', render, 30)
  local proto = b:proto(120, 44, 10)
  b:proto_ref(render, proto)
  b:chunkname(proto, b:string('@catalog.lua', 36))
  b:named(catalog, 'rep', b:builtin(48, 81), 30)
  b:named(catalog, 'open', b:builtin(48, nil, 0x7f0012345678), 30)
  local move = b:func(40, 0)
  b:named(catalog, 'move', move, 30)
  local builtin = b:proto(64, 2 ^ 32 - 1, 0)
  b:proto_ref(move, builtin)
  b:chunkname(builtin, b:string('move', 28))
  local upvalue = b:upvalue(24)
  b:upvalue_ref(render, upvalue, 1, 'template')
  b:upvalue_value(upvalue, b:string(('<li>'):rep(40), 184))
  return b:write(path)
end

describe('memprof-report --format=heapsnapshot', function()
  local known, named, dt
  setup(function()
    assert(C.have('node'), 'these specs need node')
    assert(consumers.have_chromium(), 'these specs need Chromium: ' ..
      'apt-get install chromium (or MEMPROF_CHROMIUM=/path/to/chrome)')
    assert(consumers.have_memlab(), 'these specs need memlab: ' ..
      '.ci/install-deps --tests (npm @memlab/heap-analysis into ' ..
      'build/node_modules, or MEMPROF_MEMLAB=DIR)')
    -- The known graph joined with the profile of its making, and a graph
    -- of named functions; DevTools loads both in one Chromium.
    local profile = temp_path('.bin')
    known = { heap = graphs.known({ profile = graphs.known_profile(profile) })
      :write(temp_path('.heap')), profile = profile }
    known.path = export(known.heap, '--profile=' .. profile)
    named = export(named_graph(temp_path('.heap')))
    dt = consumers.devtools(known.path, named)
  end)

  teardown(run.remove_temp)

  it('opens in memlab and in DevTools with our top retainer and sizes',
    function()
      local pattern, retained = top_retainer(known.heap)
      assert.equal('registry', pattern)
      assert.equal(3318, retained)
      local ml = consumers.memlab(known.path)
      local node, edge = largest(ml.nodes, ml.edges, 5)
      assert.same({ 'object', 'table', 100, 3318 },
        { node[2], node[3], node[4], node[5] })
      assert.equal('registry', edge)
      assert.same({ 1, 'synthetic', '', 0, 4404 },
        { unpack(by_id(ml.nodes, 1), 1, 5) })
      assert.equal(42, #ml.nodes)  -- the 41 objects and the root
      local d = dt[1]
      node, edge = largest(d.nodes, d.edges, 5)
      assert.same({ 'table', 'table', 100, 3318 },
        { node[2], node[3], node[4], node[5] })
      assert.equal('registry', edge)
      assert.same({ { 'registry', 'property', node[1] },
        { 'main thread', 'property', 83 } }, d.edges)
      assert.same({ 1, '', '(synthetic)', 0, 4404 },
        { unpack(by_id(d.nodes, 1), 1, 5) })
      -- The cache: a table retaining its 20 pages, as in the text report
      -- (package.loaded["catalog"].rendered_cache: 500B, retaining 2500B).
      local caches = 0
      for _, n in ipairs(d.nodes) do
        if n[4] == 500 then
          caches = caches + 1
          assert.equal(2500, n[5])
        end
      end
      assert.equal(1, caches)
    end)

  it('names functions, prototypes and strings as the text report does',
    function()
      local names = {}
      for _, n in ipairs(dt[2].nodes) do names[n[2]] = n[3] end
      assert.equal('Function', names['function render @catalog.lua:44'])
      assert.equal('(compiled code)', names['prototype @catalog.lua:44'])
      assert.equal('upvalue', names['upvalue'])
      assert.equal('Function', names['function rep (built-in #81)'])
      assert.equal('Function', names['function open (C, 0x7f0012345678)'])
      assert.equal('Function', names['function move [builtin:move]'])
      assert.equal('(string)', names[('<li>'):rep(16) .. '...'])
      local ml = consumers.memlab(named)
      local types = {}
      for _, n in ipairs(ml.nodes) do types[n[3]] = n[2] end
      assert.equal('closure', types['function render @catalog.lua:44'])
      assert.equal('code', types['prototype @catalog.lua:44'])
      assert.equal('string', types['page 01'] or types[('<li>'):rep(16) ..
        '...'])
    end)

  it('gives the objects allocated during a joined profile their ' ..
    'allocation stack and location', function()
      local pages, records, located = 0, 0, 0
      for _, n in ipairs(dt[1].nodes) do
        local stack = dt[1].stacks[tostring(n[1])]
        if n[2]:match('^page %d%d$') then
          pages = pages + 1
          assert.same({ { 'string.rep', '', 0 },
            { '@catalog.lua:46', 'catalog.lua', 46 },
            { '@handler.lua:7', 'handler.lua', 7 }, { '(root)', '', 0 } },
            stack)
          -- V8's locations count lines from 0: catalog.lua's line 46 (its
          -- script numbered 2: the outermost frame's, handler.lua, is 1).
          assert.same({ 2, 45, 0 }, n[6])
          located = located + 1
        elseif stack then
          records = records + 1
          assert.same({ { '@handler.lua:12', 'handler.lua', 12 },
            { '(root)', '', 0 } }, stack)
        else
          assert.equal(cjson_null, n[6] == nil and cjson_null or n[6])
        end
      end
      assert.same({ 20, 3, 20 }, { pages, records, located })
    end)

  it('is refused for profiles, and takes no --top', function()
    local code, _, err = report('--format=heapsnapshot', '--top=3',
      known.heap)
    assert.equal(1, code)
    assert.equal('memprof-report: --format=heapsnapshot writes every ' ..
      'object: leave out --top, --all and --human-readable\n', err)
    code, _, err = report('--format=heapsnapshot', known.profile)
    assert.equal(1, code)
    assert.equal('memprof-report: --format=heapsnapshot is for heap ' ..
      "snapshots (memprof.snapshot(path, {format = 'heap'})), not " ..
      'profiles (see --help)\n', err)
  end)
end)
