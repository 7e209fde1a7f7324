-- An operator profiles a running Tarantool application from its
-- administrative console (console.listen, what `tarantoolctl enter`
-- talks to), without restarting it: starts a profile, lets the
-- application work, reads memprof.stats(), takes a snapshot of the live
-- heap, stops, and reads the report.
--
-- The application runs its own VM (the tarantool on PATH), whichever VM
-- runs the suite, so these specs run in one suite only: the one that sets
-- MEMPROF_TEST_CONSOLE (make test-hosts).
local console = require('helpers.tarantool_console')
if not console.available() or os.getenv('MEMPROF_TEST_CONSOLE') == nil then
  return
end

local h = require('helpers.profile')
local C = require('helpers.command')
local pprof_read = require('helpers.pprof_read')

local WORK_N = 500
local WORK_LINE = 8

-- The application: workload(n) makes n tables at line WORK_LINE and keeps
-- them. Compiled code is charged to its trace, not to a line: the
-- workload runs in the interpreter. The array that keeps the tables is
-- made at its full size beforehand (line 6: table.new makes the table
-- and its array part, 2 allocations), so that line WORK_LINE makes the
-- tables only.
local APP = [[
-- The application of spec/hosts/tarantool_console_spec.lua.
local new_table = require('table.new')
jit.off(true, true)
kept = new_table(8, 0)
function workload(n)
  local keep = new_table(n, 0)
  for i = 1, n do
    keep[i] = { i }
  end
  kept[#kept + 1] = keep
  return #keep
end
]]

-- The YAML answer of a command that returns these values.
local function yaml(...)
  local lines = { '---' }
  for i = 1, select('#', ...) do
    lines[#lines + 1] = '- ' .. tostring((select(i, ...)))
  end
  return table.concat(lines, '\n') .. '\n...\n'
end

local function start_app()
  local app = console.start({ source = APP })
  finally(function() app:stop() end)
  return app
end

-- The allocations of the profile at the workload's line, by size.
local function workload_sizes(app, profile)
  local events, stream = h.read(profile)
  assert.is_nil(stream.warning)
  local name = '@app.lua:' .. WORK_LINE
  local n, sizes = 0, {}
  for _, ev in ipairs(events) do
    if ev.kind == 'alloc' and ev.name == name then
      n = n + 1
      sizes[ev.nsize] = (sizes[ev.nsize] or 0) + 1
    end
  end
  return n, sizes, events
end

local function count_keys(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

describe('Tarantool\'s console', function()
  it('starts a profile, reads stats, stops, and the file has the work',
    function()
    local app = start_app()
    local profile = app:path('profile.bin')
    local answers = app:session({
      'memprof = require(\'memprof\')',
      string.format('memprof.start(%q)', profile),
      'memprof.is_running()',
      -- The allocations of Lua code between two readings in one command
      -- (the console's own Lua code runs between commands): the stats
      -- table of the first reading is made by C code, after the reading;
      -- the workload makes its array (2) and its tables.
      string.format('local before = memprof.stats().sources.lua.allocs; ' ..
        'local n = workload(%d); return n, ' ..
        'memprof.stats().sources.lua.allocs - before', WORK_N),
      'memprof.stop()',
      'memprof.is_running()',
      'memprof.stats()',
    })
    assert.same({
      yaml(), yaml(true), yaml(true), yaml(WORK_N, WORK_N + 2),
      yaml(true), yaml(false),
      yaml('null', 'profiler is not running', 22),
    }, answers)
    local n, sizes = workload_sizes(app, profile)
    assert.equal(WORK_N, n)
    assert.equal(1, count_keys(sizes), 'every table has the same size')
  end)

  it('samples from the console: stats say the rate, a snapshot and the ' ..
    'report estimate',
    function()
    local app = start_app()
    local profile = app:path('sampled.bin')
    local snapshot = app:path('heap.pb.gz')
    local answers = app:session({
      'memprof = require(\'memprof\')',
      string.format('memprof.start(%q, {sample_bytes = 64, seed = 7})',
        profile),
      string.format('workload(%d)', WORK_N * 20),
      'stats = memprof.stats()',
      'stats.sample_bytes, stats.samples > 0, stats.live_blocks > 0',
      string.format('memprof.snapshot(%q)', snapshot),
      'memprof.stop()',
    })
    assert.same({ yaml(), yaml(true), yaml(WORK_N * 20), yaml(),
      yaml(64, true, true), yaml(true), yaml(true) }, answers)
    -- The snapshot's estimates of the live tables (all of them are live),
    -- within 5% as the report's below.
    local at = pprof_read.by_place(pprof_read.file(snapshot))['app.lua:' ..
      WORK_LINE]
    assert(at, 'no place app.lua:' .. WORK_LINE .. ' in the snapshot')
    assert.is_true(math.abs(at[4] - WORK_N * 20) <= WORK_N,
      'estimated live tables: ' .. at[4])
    assert.is_true(math.abs(at[3] - WORK_N * 20 * 56) <= WORK_N * 56,
      'estimated live bytes: ' .. at[3])
    local code, out = C.run(C.command(console.root ..
      '/bin/memprof-report', profile))
    assert.equal(0, code)
    assert.truthy(out:find('sampled: one sample per 64 bytes on average; ' ..
      'figures are estimates\n', 1, true), out)
    -- 20 * WORK_N tables of 56 bytes: about 8,750 samples, so the
    -- estimates are within 5% (more than 4 standard errors).
    local events, bytes = out:match('\n@app%.lua:' .. WORK_LINE ..
      ': (%d+) events\t%+([%d,]+)B')
    bytes = bytes and bytes:gsub(',', '')
    assert.truthy(events, out)
    assert.is_true(math.abs(tonumber(events) - WORK_N * 20) <= WORK_N,
      'estimated tables: ' .. events)
    assert.is_true(math.abs(tonumber(bytes) - WORK_N * 20 * 56) <=
      WORK_N * 56, 'estimated bytes: ' .. bytes)
  end)
end)
