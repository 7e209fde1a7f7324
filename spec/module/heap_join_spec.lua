-- The objects of a heap snapshot taken while a profile runs, joined with
-- the places and stacks that allocated them
-- (lua/memprof/analysis/heap_join.lua), as the reports join them
-- (report/model/holders.lua).
local h = require('helpers.profile')
local memprof = require('memprof')
local join = require('memprof.analysis.heap_join')
local dom = require('memprof.analysis.dominators')
local holders = require('memprof.report.model.holders')

local function addr(v)
  return tonumber(tostring(v):match('0x(%x+)'), 16)
end

describe('heap snapshots joined with a profile', function()
  setup(function()
    jit.off()
  end)

  teardown(function()
    jit.on()
  end)

  after_each(function()
    if memprof.is_running() then memprof.stop() end
  end)

  it('names where each object of the profile was allocated', function()
    local program = h.chunk([[
local keep, snapshot, path, options = ...
keep.made = { 'made during the profile' }
local function helper() return { 'made by a helper' } end
keep.helped = helper()
assert(snapshot(path, options))
keep.later = {}
]], '@joined.lua')
    local older = { 'made before the profile' }
    local keep = { older = older }
    local profile = h.tmpname()
    local snap = h.tmpname('.heap')
    assert(memprof.start(profile, { stack_depth = 8 }))
    program(keep, memprof.snapshot, snap, { format = 'heap' })
    assert(memprof.stop())
    local a = dom.analyse_file(snap)
    local places, warning = join.live_blocks(a, profile, nil, snap)
    os.remove(snap)
    os.remove(profile)
    assert.equal('@joined.lua:2', places[addr(keep.made)].site.name)
    local helped = places[addr(keep.helped)]
    assert.equal('@joined.lua:3', helped.site.name)
    assert.equal('@joined.lua:3', helped.stack[1].name)
    assert.equal('@joined.lua:4', helped.stack[2].name)
    assert.is_nil(places[addr(older)])
    -- (The profile defines the chunk's function after the snapshot.)
    assert.is_nil(warning)
    assert.is_not_nil(a.retained[addr(keep.made)])
    assert.is_nil(a.retained[addr(keep.later)])
  end)

  it("names each place's main holders", function()
    local program = h.chunk([[
local cache = ...
for i = 1, 40 do cache[i] = { i } end
]], '@held.lua')
    local cache = {}
    local profile = h.tmpname()
    local snap = h.tmpname('.heap')
    assert(memprof.start(profile))
    program(cache)
    assert(memprof.snapshot(snap, { format = 'heap' }))
    assert(memprof.stop())
    local rows = holders.of_file(snap, { profile = profile }).by_place
    os.remove(snap)
    os.remove(profile)
    local row
    for _, r in ipairs(rows) do
      if r.place == '@held.lua:2' then row = r end
    end
    assert.equal(40, row.objects)
    assert.equal(1, #row.holders)
    assert.matches('<local cache in function at [^>]+_spec%.lua:%d+, ' ..
      'line %d+>%[%*%]$', row.holders[1].pattern)
    assert.equal(40, row.holders[1].objects)
    assert.equal(row.bytes, row.holders[1].bytes)
    local before
    for _, r in ipairs(rows) do
      if r.place == holders.BEFORE then before = r end
    end
    assert.is_true(before.objects > 0)
  end)

  it('refuses a snapshot taken without a profile', function()
    local snap = h.tmpname('.heap')
    assert(memprof.snapshot(snap, { format = 'heap' }))
    local a = dom.analyse_file(snap)
    os.remove(snap)
    assert.has_error(function()
      join.live_blocks(a, '/nonexistent', '--profile=/nonexistent', snap)
    end, '--profile=/nonexistent: the heap snapshot was taken with no ' ..
      'profile running: it cannot be joined with one')
  end)
end)
