-- What grew between two heap snapshots (lua/memprof/analysis/heap_diff.lua).
local h = require('helpers.profile')
local memprof = require('memprof')
local load = require('helpers.heap_load')
local dom = require('memprof.analysis.dominators')
local diff = require('memprof.analysis.heap_diff')

local PATTERN = 'package.loaded["catalog"].rendered_cache[*]'

local function take(path)
  assert(memprof.snapshot(path, { format = 'heap', collect = true }))
end

describe('the difference of two heap snapshots', function()
  setup(function()
    jit.off()
    jit.flush()
  end)

  teardown(function()
    jit.on()
  end)

  after_each(function()
    package.loaded.catalog = nil
  end)

  it('ranks the growth of a cache first by its own growth', function()
    local cache = {}
    package.loaded.catalog = { rendered_cache = cache }
    local function render(i)
      cache['page' .. i] = ('<li>' .. i .. '</li>'):rep(40)
    end
    for i = 1, 20 do render(i) end
    local old_path, new_path = h.tmpname('.heap'), h.tmpname('.heap')
    -- Both files first: an analysis in the heap would be in the second.
    take(old_path)
    for i = 21, 70 do render(i) end
    take(new_path)
    local old, new = dom.analyse_file(old_path), dom.analyse_file(new_path)
    local rows = diff.compare(old, new)
    -- The bytes of the 50 new pages, from the newer file.
    local s = load(new_path)
    os.remove(old_path)
    os.remove(new_path)
    local bytes = 0
    for addr, pattern in new.objects() do
      if pattern == PATTERN and old.retained[addr] == nil then
        bytes = bytes + s.objects[addr].size
      end
    end
    local row
    for _, r in ipairs(rows) do
      if r.pattern == PATTERN then row = r end
    end
    assert.same({ 70, 20, 50 }, { row.objects, row.old_objects,
      row.new_objects })
    assert.same({ string = 70 }, row.types)
    assert.equal(bytes, row.growth)
    assert.is_true(bytes > 50 * 400)
    -- Its holders grew by at least as much, but grew little of their own.
    local top = row
    for _, r in ipairs(rows) do
      if r.own_growth > top.own_growth then top = r end
    end
    assert.equal(PATTERN, top.pattern)
    for _, r in ipairs(rows) do
      if PATTERN:find(r.pattern, 1, true) == 1 and r ~= row then
        assert.is_true(r.growth >= row.growth, r.pattern)
      end
    end
  end)
end)
