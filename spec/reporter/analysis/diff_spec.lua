-- Specs for memprof.analysis.diff, memprof.report.diff and memprof-report --diff.
-- Runs under LuaJIT and plain Lua 5.1.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local diff = require('memprof.analysis.diff')
local diff_report = require('memprof.report.diff')
local B = require('helpers.stream_builder')
local C = require('helpers.command')

-- Before: @app.lua:1 allocates 100B (live), line 2 50B (freed), line 3
-- 30B (live), and the collector frees 8B from before the profile.
local function before()
  local s = B.new():lfunc(0x100, '@app.lua', 0):events()
  s:alloc(B.lua(0x100, 1), 0x10, 100)
  s:alloc(B.lua(0x100, 2), 0x20, 50)
  s:free(B.internal(), 0x20, 50)
  s:alloc(B.lua(0x100, 3), 0x30, 30)
  s:free(B.internal(), 0x9000, 8)
  return s:epilogue()
end

-- After (the function at another address): line 1 allocates 3 x 100B
-- (one freed), line 2 nothing, line 3 the same 30B, line 4 64B (new),
-- and the collector frees the same 8B.
local function after()
  local s = B.new():lfunc(0x700, '@app.lua', 0):events()
  s:alloc(B.lua(0x700, 1), 0x10, 100)
  s:alloc(B.lua(0x700, 1), 0x11, 100)
  s:alloc(B.lua(0x700, 1), 0x12, 100)
  s:free(B.internal(), 0x12, 100)
  s:alloc(B.lua(0x700, 3), 0x30, 30)
  s:alloc(B.lua(0x700, 4), 0x40, 64)
  s:free(B.internal(), 0x9000, 8)
  return s:epilogue()
end

local function analysed(builder, group)
  return analyze.run(reader.from_string(builder:bytes(), 'x.bin'),
    { group = group })
end

local function triple(b, a)
  return { before = b, after = a, change = a - b }
end

describe('diff', function()
  it('matches rows by name and sorts them by growth', function()
    local changes = diff.compare(analysed(before()), analysed(after()))
    local names, statuses = {}, {}
    for i, entry in ipairs(changes.rows) do
      names[i] = entry.name
      statuses[i] = entry.status
    end
    assert.are.same({ '@app.lua:1', '@app.lua:4', '@app.lua:2' }, names)
    assert.are.same({ 'changed', 'new', 'gone' }, statuses)
    assert.are.same(triple(100, 300), changes.rows[1].allocated_bytes)
    assert.are.same(triple(1, 3), changes.rows[1].allocated_events)
    assert.are.same(triple(100, 200), changes.rows[1].live_bytes)
    assert.are.same(triple(0, 64), changes.rows[2].allocated_bytes)
    assert.are.same(triple(0, 64), changes.rows[2].live_bytes)
    assert.are.same(triple(50, 0), changes.rows[3].allocated_bytes)
    assert.are.same(triple(1, 0), changes.rows[3].allocated_events)
    assert.are.same(triple(0, 0), changes.rows[3].live_bytes)
    -- @app.lua:3, INTERNAL (which only frees) and the pseudo-row of
    -- blocks allocated before profiling did not change.
    assert.are.equal(3, changes.unchanged)
    assert.are.same(triple(180, 394), changes.totals.allocated_bytes)
    assert.are.same(triple(3, 5), changes.totals.allocated_events)
    assert.are.same(triple(122, 286), changes.totals.live_bytes)
  end)

  it('sorts by growth in live bytes by default, in bytes allocated ' ..
    'with sort = bytes', function()
    -- Line 1 allocates more, and frees it; line 2 keeps what it allocates.
    local s = B.new():lfunc(0x100, '@app.lua', 0):events()
    s:alloc(B.lua(0x100, 1), 0x10, 500)
    s:free(B.internal(), 0x10, 500)
    s:alloc(B.lua(0x100, 2), 0x20, 100)
    local grown = analysed(s:epilogue())
    local empty = analysed(B.new():lfunc(0x100, '@app.lua', 0):events()
      :epilogue())
    local function names(opts)
      local list = {}
      for i, entry in ipairs(diff.compare(empty, grown, opts).rows) do
        list[i] = entry.name
      end
      return list
    end
    assert.are.same({ '@app.lua:2', '@app.lua:1' }, names({}))
    assert.are.same({ '@app.lua:2', '@app.lua:1' }, names({ sort = 'live' }))
    assert.are.same({ '@app.lua:1', '@app.lua:2' }, names({ sort = 'bytes' }))
  end)

  it('sorts by the change in allocations with sort = count', function()
    local changes = diff.compare(analysed(before()), analysed(after()),
      { sort = 'count' })
    assert.are.equal('@app.lua:1', changes.rows[1].name)
    assert.are.equal('@app.lua:2', changes.rows[#changes.rows].name)
  end)
end)

describe('diff report', function()
  local function render(opts)
    local changes = diff.compare(analysed(before()), analysed(after()), opts)
    opts.before, opts.after = 'before.bin', 'after.bin'
    return diff_report.render(changes, opts)
  end

  it('writes each changed row with its figures before and after', function()
    assert.are.equal([[
CHANGES from before.bin to after.bin, by growth in live bytes at end
@app.lua:1: allocated +200B (100B -> 300B), allocations +2 (1 -> 3), live at end +100B (100B -> 200B)
@app.lua:4 (new): allocated +64B (0B -> 64B), allocations +1 (0 -> 1), live at end +64B (0B -> 64B)
@app.lua:2 (gone): allocated -50B (50B -> 0B), allocations -1 (1 -> 0), live at end 0B (0B -> 0B)
(3 rows unchanged)
TOTAL: allocated +214B (180B -> 394B), allocations +2 (3 -> 5), live at end +164B (122B -> 286B) (net bytes of the streams)
]], render({}))
  end)

  it('sums the rows after --top', function()
    assert.are.equal([[
CHANGES from before.bin to after.bin, by growth in allocations
@app.lua:1: allocated +200B (100B -> 300B), allocations +2 (1 -> 3), live at end +100B (100B -> 200B)
... and 2 more: allocated +14B (50B -> 64B), allocations 0 (1 -> 1), live at end +64B (0B -> 64B)
(3 rows unchanged)
TOTAL: allocated +214B (180B -> 394B), allocations +2 (3 -> 5), live at end +164B (122B -> 286B) (net bytes of the streams)
]], render({ sort = 'count', top = 1 }))
  end)
end)

-- Two runs of one program whose traces got other numbers: in the first,
-- traces 1 and 2 start at @loop.lua:4 (2 x 16B and 32B), trace 3 at
-- @loop.lua:9 (8B); in the second, trace 5 starts at @loop.lua:4 (3 x
-- 16B), traces 6 and 7 at @loop.lua:9 (8B each).
local function traced_run(first)
  local s = B.new():lfunc(0x100, '@loop.lua', 0)
  if first then
    s:trace(1, 0x100, 4):trace(2, 0x100, 4):trace(3, 0x100, 9):events()
    s:alloc(B.trace(1), 0x10, 16):alloc(B.trace(1), 0x20, 16)
    s:alloc(B.trace(2), 0x30, 32):alloc(B.trace(3), 0x40, 8)
  else
    s:trace(5, 0x100, 4):trace(6, 0x100, 9):trace(7, 0x100, 9):events()
    s:alloc(B.trace(5), 0x10, 16):alloc(B.trace(5), 0x20, 16)
    s:alloc(B.trace(5), 0x30, 16):alloc(B.trace(6), 0x40, 8)
    s:alloc(B.trace(7), 0x50, 8)
  end
  return s:epilogue()
end

describe('diff of traces', function()
  local function compare(opts)
    local results = {}
    for i, first in ipairs({ true, false }) do
      results[i] = analyze.run(reader.from_string(traced_run(first):bytes(),
        'x.bin', opts))
    end
    return diff.compare(results[1], results[2])
  end

  it('matches the traces of two runs by where they start', function()
    local changes = compare({})
    local list = {}
    for i, entry in ipairs(changes.rows) do
      list[i] = { entry.name, entry.status, entry.allocated_bytes.change,
        entry.allocated_events.change }
    end
    assert.are.same({ { 'TRACE started at @loop.lua:9', 'changed', 8, 1 },
      { 'TRACE started at @loop.lua:4', 'changed', -16, 0 } }, list)
    assert.are.equal(0, changes.unchanged)
    assert.are.equal([[
CHANGES from a.bin to b.bin, by growth in live bytes at end
TRACE started at @loop.lua:9: allocated +8B (8B -> 16B), allocations +1 (1 -> 2), live at end +8B (8B -> 16B)
TRACE started at @loop.lua:4: allocated -16B (64B -> 48B), allocations 0 (3 -> 3), live at end -16B (64B -> 48B)
TOTAL: allocated -8B (72B -> 64B), allocations +1 (4 -> 5), live at end -8B (72B -> 64B) (net bytes of the streams)
]], diff_report.render(changes, { before = 'a.bin', after = 'b.bin' }))
  end)

  it('sees new and gone trace numbers with split_traces', function()
    local changes = compare({ split_traces = true })
    local list = {}
    for i, entry in ipairs(changes.rows) do
      list[i] = entry.name .. ' ' .. entry.status
    end
    assert.are.same({ 'TRACE [5] started at @loop.lua:4 new',
      'TRACE [6] started at @loop.lua:9 new',
      'TRACE [7] started at @loop.lua:9 new',
      'TRACE [3] started at @loop.lua:9 gone',
      'TRACE [1] started at @loop.lua:4 gone',
      'TRACE [2] started at @loop.lua:4 gone' }, list)
  end)
end)

describe('memprof-report --diff', function()
  local dir

  before_each(function()
    dir = C.temp_dir()
  end)

  after_each(function()
    C.remove_tree(dir)
  end)

  local function file_of(name, builder)
    local path = dir .. '/' .. name
    C.write_file(path, builder:bytes())
    return path
  end

  it('compares two files, by function', function()
    local old, new = file_of('old.bin', before()), file_of('new.bin', after())
    local code, stdout, stderr = C.run(C.command('./bin/memprof-report',
      '--diff', '--group=function', '--human-readable', old, new))
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    assert.are.equal([[
Grouped by function: each row is the function where the events happened, named by where it is defined.

CHANGES from ]] .. old .. ' to ' .. new .. [[, by growth in live bytes at end
main chunk of @app.lua: allocated +214B (180B -> 394B), allocations +2 (3 -> 5), live at end +164B (130B -> 294B)
(2 rows unchanged)
TOTAL: allocated +214B (180B -> 394B), allocations +2 (3 -> 5), live at end +164B (122B -> 286B) (net bytes of the streams)
]], stdout)
  end)

  it('says what is wrong with the command line or the files', function()
    local old, new = file_of('old.bin', before()), file_of('new.bin', after())
    local cases = {
      { { '--diff', old }, 'memprof-report: --diff needs two profile ' ..
        'files, BEFORE and AFTER (see --help)\n' },
      { { '--diff', '--format=json', old, new }, 'memprof-report: --diff ' ..
        'writes text; leave out --format (see --help)\n' },
      { { '--diff', '--leaks', old, new }, 'memprof-report: --leaks does ' ..
        'not apply to --diff (see --help)\n' },
      { { '--diff', '--group=stack', old, new }, 'memprof-report: ' ..
        '--group=stack needs call stacks: record with memprof.start(path, ' ..
        '{stack_depth = N})\n' },
      { { '--diff', old, dir .. '/none.bin' }, 'memprof-report: ' .. dir ..
        '/none.bin: No such file or directory\n' },
    }
    for _, case in ipairs(cases) do
      local code, stdout, stderr = C.run(C.command('./bin/memprof-report',
        unpack(case[1])))
      assert.are.equal(1, code)
      assert.are.equal('', stdout)
      assert.are.equal(case[2], stderr)
    end
  end)
end)

describe('diff of sampled profiles', function()
  it('says which profiles are sampled, and compares estimates', function()
    local dir = C.temp_dir()
    local sampled, full = dir .. '/sampled.bin', dir .. '/full.bin'
    C.write_file(sampled, B.sampled():bytes())
    C.write_file(full, B.new():lfunc(0x100, '@a.lua', 0):events()
      :alloc(B.lua(0x100, 3), 0x1000, 10000):epilogue():bytes())
    local code, stdout, stderr = C.run(C.command('./bin/memprof-report',
      '--diff', full, sampled))
    C.remove_tree(dir)
    assert.are.same({ 0, '' }, { code, stderr })
    assert.are.equal(sampled .. ': sampled: one sample per 100 bytes on ' ..
      'average; figures are estimates\n\n' ..
      'CHANGES from ' .. full .. ' to ' .. sampled ..
      ', by growth in live bytes at end\n', stdout:match('^(.-\n\n.-\n)'))
    assert.is_truthy(stdout:find('\n@a.lua:3: allocated +101B (10,000B -> ' ..
      '10,101B), allocations +101 (1 -> 102), live at end 0B (10,000B -> ' ..
      '10,000B)\n', 1, true))
  end)
end)
