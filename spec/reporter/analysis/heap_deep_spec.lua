-- A heap snapshot of a deep list (`{ next = ... }`, helpers/heap_fuzz.lua
-- builds it byte by byte): its patterns kept as a tree, so that what the
-- analysis holds is linear in the objects, not in the sum of the paths'
-- lengths (make bench measures a list 2,000,000 deep: bench/heap_walk.lua).
local dom = require('memprof.analysis.dominators')
local fuzz = require('helpers.heap_fuzz')
local holders = require('memprof.report.model.holders')

local DEPTH = 5000

describe('a heap snapshot of a deep list', function()
  local path
  before_each(function()
    path = os.tmpname()
    fuzz.list(DEPTH):write(path)
  end)
  after_each(function() os.remove(path) end)

  it('holds memory linear in its objects', function()
    collectgarbage()
    local before = collectgarbage('count')
    local a = dom.analyse_file(path)
    collectgarbage()
    local held_kb = collectgarbage('count') - before
    -- The texts of the patterns would be 5 bytes a step, DEPTH^2 / 2 steps
    -- (61 MB); the graph and the analysis are 10,003 objects and
    -- references, with their arrays and hash tables.
    assert.is_true(held_kb < 4096, held_kb .. ' KB')
    -- Registry, the key strings "list" and "next", the DEPTH nodes.
    assert.are.equal(DEPTH + 3, a.pattern_count)
    local last = 0x1000 + (DEPTH + 2) * 0x100
    local want = 'registry.list' .. ('.next'):rep(DEPTH - 1)
    assert.are.equal(want, a.pattern[last])
    assert.are.equal(want, a.path(last))
    assert.are.equal(0x1000 + (DEPTH + 1) * 0x100, a.idom[last])
    -- The nodes, the registry and the strings "list" and "next" (28
    -- bytes each; "next" is held by the first node, which every other
    -- reaches it through).
    assert.are.equal(56 * DEPTH + 100 + 2 * 28, a.total)
    local head = 0x1000 + 2 * 0x100
    assert.are.equal(56 * DEPTH + 28, a.retained[head])
  end)

  -- The result holds about 50 bytes per object (the graph's and the
  -- analysis' C arrays by node). The dominator tree's working arrays, 28
  -- bytes per object more, are freed once it is made: while they were
  -- upvalues of the closures that Lengauer and Tarjan's loops compiled
  -- into, the traces kept them (79 bytes per object).
  it('keeps none of the dominator tree\'s working arrays', function()
    local deep = os.tmpname()
    local objects = 50000
    fuzz.list(objects):write(deep)
    collectgarbage()
    local before = collectgarbage('count')
    local a = dom.analyse_file(deep)
    collectgarbage()
    local held = (collectgarbage('count') - before) * 1024 / objects
    os.remove(deep)
    assert.are.equal(objects + 3, a.pattern_count)
    assert.is_true(held < 64, held .. ' bytes per object')
  end)

  it('shows the rows of the report that it makes', function()
    local model = holders.of_file(path)
    local shown, rest = model.holders_top(3)
    assert.are.equal(DEPTH + 3 - 3, rest)
    assert.are.same({ 'registry', 'registry.list', 'registry.list.next' },
      { shown[1].pattern, shown[2].pattern, shown[3].pattern })
    assert.are.same({ 56 * DEPTH + 156, 56 * DEPTH + 28, 56 * DEPTH - 56 },
      { shown[1].retained, shown[2].retained, shown[3].retained })
    local table_row = model.by_type[1]
    assert.are.equal('table', table_row.type)
    local held, more = table_row.holders_top(2)
    assert.are.equal(DEPTH + 1 - 2, more)
    assert.are.same({ 'registry', 'registry.list' },
      { held[1].pattern, held[2].pattern })
  end)
end)
