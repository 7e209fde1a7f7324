-- The path patterns of heap snapshots as a tree (memprof.analysis.
-- path_patterns): texts made when asked for, and ordered by text without
-- making them.
local path_patterns = require('memprof.analysis.path_patterns')
local fuzz = require('helpers.heap_fuzz')

describe('path patterns', function()
  it('keeps a pattern as its parent and a step', function()
    local set = path_patterns.new(10)
    local g = set:start('_G')
    assert.are.equal(g, set:start('_G'))
    local a = set:child(g, '.a')
    assert.are.equal(a, set:child(g, '.a'))
    assert.are.equal(a, set:child(a, ''))
    local b = set:child(a, '<upvalue b>')
    assert.are.equal('_G.a<upvalue b>', set:text(b))
    assert.are.equal('_G', set:text(g))
    assert.are.equal(3, set.count)
  end)

  it('orders patterns as their texts, a step the start of another too',
    function()
      local set = path_patterns.new(20)
      local r = set:start('registry')
      local loaded = set:start('package.loaded')
      local ids = { r, loaded, set:start('package.loaded["x"]'),
        set:child(loaded, '<key>'), set:child(r, '.a'),
        set:child(r, '.aB'), set:child(r, '.ab'), set:child(r, '.a1') }
      local a = ids[5]
      ids[#ids + 1] = set:child(a, '.x')
      ids[#ids + 1] = set:child(a, '[1]')
      ids[#ids + 1] = set:child(a, '<key>')
      ids[#ids + 1] = set:child(ids[6], '[2]')
      local sorted = {}
      for i, id in ipairs(ids) do sorted[i] = id end
      table.sort(sorted, function(x, y) return set:before(x, y) end)
      local texts = {}
      for i, id in ipairs(sorted) do texts[i] = set:text(id) end
      assert.are.same({ 'package.loaded', 'package.loaded<key>',
        'package.loaded["x"]', 'registry', 'registry.a', 'registry.a.x',
        'registry.a1', 'registry.a<key>', 'registry.aB', 'registry.aB[2]',
        'registry.a[1]', 'registry.ab' }, texts)
    end)

  it('orders indices by number: [2], [100], [101], [1000]', function()
    local set = path_patterns.new(20)
    local l = set:start('_G.listeners')
    local ids = {}
    for i, n in ipairs({ 1000, 101, 2, 100, 10 }) do
      ids[i] = set:child(l, ('[%d]'):format(n))
    end
    ids[#ids + 1] = set:child(l, '["x"]')
    ids[#ids + 1] = set:child(l, '.z')
    table.sort(ids, function(x, y) return set:before(x, y) end)
    local texts = {}
    for i, id in ipairs(ids) do texts[i] = set:text(id) end
    assert.are.same({ '_G.listeners.z', '_G.listeners["x"]',
      '_G.listeners[2]', '_G.listeners[10]', '_G.listeners[100]',
      '_G.listeners[101]', '_G.listeners[1000]' }, texts)
    assert.are.equal('a[00000000000000000012].b',
      path_patterns.order_key('a[12].b'))
  end)

  it('orders random trees of steps as their texts (indices by number)',
    function()
    local rng = fuzz.rng(7)
    local steps = { '.a', '.ab', '.a.b', '.b', '[1]', '[12]', '[1]x', '<k>',
      '<k', 'a', '.', '' }
    for _ = 1, 20 do
      local set = path_patterns.new(200)
      local ids = { set:start('r'), set:start('r.a'), set:start('s') }
      for _ = 1, 60 do
        local id = set:child(rng.pick(ids), rng.pick(steps))
        if id ~= ids[#ids] then ids[#ids + 1] = id end
      end
      for _, x in ipairs(ids) do
        for _, y in ipairs(ids) do
          local tx, ty = set:text(x), set:text(y)
          local ox, oy = path_patterns.order_key(tx),
            path_patterns.order_key(ty)
          local want = ox < oy or (ox == oy and x < y)
          assert.are.equal(want, set:before(x, y), tx .. ' ' .. ty)
        end
      end
    end
  end)
end)
