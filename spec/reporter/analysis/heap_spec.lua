-- memprof.analysis.heap: the heap pass alone, fed as analyze.run feeds
-- every pass (no tracker: the owners are given).

local heap = require('memprof.analysis.heap')
local groups = require('memprof.analysis.groups')

local Site = require('memprof.read.stream').Site
local SITE_A = Site.make({ 1, 'lua', '@a.lua:1' })
local SITE_B = Site.make({ 2, 'lua', '@a.lua:2' })
local BEFORE = '(blocks allocated before the profile)'

-- The figures of each row, as { { name, holds, allocs, reallocs, frees } }.
local function stats_of(pass)
  local list = {}
  for i, stats in ipairs(pass:stats_list()) do
    list[i] = { stats.site.name, stats.holds, stats.allocs, stats.reallocs,
      stats.frees }
  end
  return list
end

describe('heap pass', function()
  it('keeps its figures in columns by slot, the sites in order of first ' ..
    'appearance, by the owners it is given', function()
      local pass = heap.new()
      pass:feed('alloc', SITE_B, nil, 0, 8, 1, 1)
      pass:feed('alloc', SITE_A, nil, 0, 16, 1, 1)
      -- A realloc of SITE_B's block, then a free of a block allocated
      -- before the profile (owner id 0).
      pass:feed('realloc', SITE_A, nil, 8, 24, 1, 1, 2)
      pass:feed('free', SITE_B, nil, 5, 0, 1, 1, 0)
      pass:finish(nil, { total = 35 })
      assert.are.same({ '@a.lua:2', '@a.lua:1', BEFORE }, { pass.keys[1].name,
        pass.keys[2].name, pass.keys[3].name })
      assert.are.same({ 0, 40, -5 }, pass.holds)
      assert.are.same({ 1, 2, 0 }, pass.allocs)
      assert.are.same({ 0, 1, 0 }, pass.reallocs)
      assert.are.same({ 1, 0, 1 }, pass.frees)
      assert.is_nil(pass.slot_of_id)
      assert.are.same({ { '@a.lua:2', 0, 1, 0, 1 }, { '@a.lua:1', 40, 2, 1, 0 },
        { BEFORE, -5, 0, 0, 1 } }, stats_of(pass))
      assert.are.equal(35, pass.total)
      local ok, err = pcall(pass.feed, pass, 'alloc', SITE_A, nil, 0, 8, 1, 1)
      assert.are.same({ false, 'memprof.analysis.heap: an event fed after ' ..
        'finish()' }, { ok, err:match('memprof%.analysis%.heap: .*$') })
    end)

  it('groups the owner of a released block with its stack, from the facts',
    function()
      local pass = heap.new({ grouper = groups.new('function') })
      local fa, fb = { name = 'function a' }, { name = 'function b' }
      local a = Site.make({ 1, 'lua', '@a.lua:1', '@a.lua', 1, 0x10, fa })
      local b = Site.make({ 2, 'lua', '@a.lua:2', '@a.lua', 2, 0x10, fb })
      pass:feed('alloc', a, nil, 0, 8, 1, 1)
      pass:feed('free', b, nil, 8, 0, 3, 1, 1, { owner = a })
      pass:finish(nil, { total = 0 })
      assert.are.same({ { 'function a', 0, 1, 0, 3 } }, stats_of(pass))
    end)
end)
