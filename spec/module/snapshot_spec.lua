-- memprof.snapshot(): a snapshot of the running profile, written while it
-- goes on (src/snapshot.c, lifecycle_snapshot, the binding's l_snapshot).
local h = require('helpers.profile')
local C = require('helpers.command')
local memprof = require('memprof')
local pprof_read = require('helpers.pprof_read')
local consumers = require('helpers.consumers')

-- Ten tables kept at line 2, six dropped at line 3 and collected, the
-- snapshot at line 6, four tables more at line 7 after it. The arrays are
-- made large enough up front, so the only blocks at lines 2, 3 and 7 are
-- the new tables.
local PROGRAM = [[
local snapshot, path, options, keep, drop = ...
for i = 1, 10 do keep[i] = {} end
for i = 1, 6 do drop[i] = {} end
for i = 1, 6 do drop[i] = nil end
collectgarbage()
local ok, msg, err = snapshot(path, options)
for i = 11, 14 do keep[i] = {} end
return ok, msg, err
]]

-- The blocks live at the end of a list of events, by site name: count and
-- bytes.
local function live_by_name(events)
  local live, out = {}, {}
  for _, ev in ipairs(events) do
    if ev.kind ~= 'alloc' then live[ev.oaddr] = nil end
    if ev.kind ~= 'free' then live[ev.naddr] = ev end
  end
  for _, ev in pairs(live) do
    local row = out[ev.name] or { blocks = 0, bytes = 0 }
    row.blocks = row.blocks + 1
    row.bytes = row.bytes + ev.nsize
    out[ev.name] = row
  end
  return out
end

-- What an event is, without its addresses (which change from run to run).
local function shapes(events)
  local out = {}
  for i, ev in ipairs(events) do
    out[i] = table.concat({ ev.kind, ev.name, ev.nsize, ev.osize }, ' ')
  end
  return out
end

-- Runs PROGRAM in a profile started with `options`, taking a snapshot with
-- `snapshot` (memprof.snapshot or a stand-in). Returns the profile's
-- events, what the snapshot call returned, and the profile's stream.
local function run_program(options, snapshot, path, snapshot_options)
  local program = h.chunk(PROGRAM, '@prog.lua')
  local keep = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
  local drop = { 0, 0, 0, 0, 0, 0 }
  local results
  local events, stream = h.profile_with(options, function()
    results = { program(snapshot, path, snapshot_options, keep, drop) }
  end)
  return events, results, stream
end

local function remove(path)
  os.remove(path)
end

describe('memprof.snapshot', function()
  setup(function()
    jit.off()
  end)

  teardown(function()
    jit.on()
  end)

  after_each(function()
    if memprof.is_running() then memprof.stop() end
  end)

  it('is in misc.memprof too, where the module installed it', function()
    if tostring(misc.memprof.start):match('^function: builtin#') then
      return -- The host's own misc.memprof (Tarantool) is kept.
    end
    local path, snap = h.tmpname(), h.tmpname()
    assert.is_true(misc.memprof.start(path))
    local result = { misc.memprof.snapshot(snap, { format = 'memprof' }) }
    assert.is_true(misc.memprof.stop())
    local _, stream = h.read(snap)
    remove(path)
    remove(snap)
    assert.are.same({ true }, result)
    assert.is_nil(stream.warning)
  end)

  describe('errors', function()
    it('fails when no profile runs', function()
      local message = "profiler is not running (format = 'heap', the " ..
        'live objects, needs no profile)'
      assert.are.same({ nil, message, 22 },
        { memprof.snapshot(h.tmpname(), { format = 'memprof' }) })
      assert.are.same({ nil, message, 22 }, { memprof.snapshot(h.tmpname()) })
    end)

    it('names a bad format and a bad option', function()
      local path = h.tmpname()
      assert.is_true(memprof.start(path))
      local bad_format = { memprof.snapshot(h.tmpname(), { format = 'xml' }) }
      local bad_type = { memprof.snapshot(h.tmpname(), { format = 1 }) }
      local bad_name = { memprof.snapshot(h.tmpname(), { formats = 'pprof' }) }
      local bad_table = { memprof.snapshot(h.tmpname(), 'memprof') }
      assert.is_true(memprof.stop())
      remove(path)
      assert.are.same({ nil,
        "option 'format' must be 'pprof', 'memprof' or 'heap', got 'xml'",
        22 },
        bad_format)
      assert.are.same({ nil,
        "option 'format' must be 'pprof', 'memprof' or 'heap', got number",
        22 },
        bad_type)
      assert.are.same({ nil, "unknown option 'formats'", 22 }, bad_name)
      assert.are.same({ nil, 'options must be a table, got string', 22 },
        bad_table)
    end)

    it('asks for the option snapshots in a full profile', function()
      local path = h.tmpname()
      assert.is_true(memprof.start(path))
      local result = { memprof.snapshot(h.tmpname()) }
      assert.is_true(memprof.stop())
      remove(path)
      assert.are.same({ nil, 'a pprof snapshot of a profile that records ' ..
        'every event needs the start option snapshots = true (or ' ..
        "sample_bytes); format = 'heap' writes the live objects without it",
        22 }, result)
    end)

    it('checks the option snapshots', function()
      assert.are.same({ nil, "option 'snapshots' must be a boolean, got " ..
        'number', 22 }, { memprof.start(h.tmpname(), { snapshots = 1 }) })
    end)

    it("never replaces the running profile's own file", function()
      local path = h.tmpname()
      assert.is_true(memprof.start(path))
      local result = { memprof.snapshot(path, { format = 'memprof' }) }
      assert.is_true(memprof.stop())
      local _, stream = h.read(path)
      remove(path)
      assert.are.same({ nil, "a snapshot cannot replace the running " ..
        "profile's own file: " .. path, 22 }, result)
      assert.is_nil(stream.warning)
    end)

    it('names the path it cannot write, and leaves no file', function()
      local dir = C.temp_dir()
      local path = h.tmpname()
      local target = dir .. '/missing/snap.bin'
      assert.is_true(memprof.start(path))
      local result = { memprof.snapshot(target, { format = 'memprof' }) }
      assert.is_true(memprof.stop())
      remove(path)
      local _, listing = C.run('ls -A ' .. C.quote(dir))
      C.remove_tree(dir)
      assert.are.same({ nil, target .. ': No such file or directory', 2 },
        result)
      assert.are.equal('', listing)
    end)

    it('refuses an empty path, in every format, and start too', function()
      local path = h.tmpname()
      assert.is_true(memprof.start(path, { snapshots = true }))
      local results = {}
      for _, format in ipairs({ 'pprof', 'memprof', 'heap' }) do
        results[#results + 1] = { memprof.snapshot('', { format = format }) }
      end
      assert.is_true(memprof.stop())
      remove(path)
      local empty = { nil, "the snapshot's path is empty", 22 }
      assert.are.same({ empty, empty, empty }, results)
      assert.are.same({ nil, "the profile's path is empty", 22 },
        { memprof.start('') })
      assert.is_false(memprof.is_running())
    end)

    -- A program may have /dev/null open as its output: a heap snapshot
    -- into it is no snapshot into the running profile's own file.
    it('writes a heap snapshot into /dev/null that this process writes',
      function()
      local path = h.tmpname()
      local null = assert(io.open('/dev/null', 'w'))
      assert.is_true(memprof.start(path))
      local result = { memprof.snapshot('/dev/null', { format = 'heap' }) }
      assert.is_true(memprof.stop())
      null:close()
      remove(path)
      assert.are.same({ true }, result)
    end)

    -- A device is written in place, never renamed over: /dev/full stays
    -- the device, and the snapshot says the disk is full.
    it('writes into a device in place: /dev/full is full, and stays a device',
      function()
      local path = h.tmpname()
      assert.is_true(memprof.start(path, { sample_bytes = 4096 }))
      local pprof = { memprof.snapshot('/dev/full') }
      local copy = { memprof.snapshot('/dev/full', { format = 'memprof' }) }
      assert.is_true(memprof.stop())
      remove(path)
      local full = { nil, '/dev/full: No space left on device', 28 }
      assert.are.same({ full, full }, { pprof, copy })
      local _, kind = C.run('stat -c %F /dev/full')
      assert.are.equal('character special file\n', kind)
    end)
  end)

  describe("in the 'memprof' format", function()
    it('holds the stream so far, ended as a profile stopped then', function()
      local snap = h.tmpname()
      local events, results = run_program(nil, memprof.snapshot, snap,
        { format = 'memprof' })
      local taken, stream = h.read(snap)
      remove(snap)
      assert.are.same({ true }, results)
      assert.is_nil(stream.warning) -- It ends with the epilogue.
      -- The profile's own file goes on past the snapshot, which is a
      -- prefix of it.
      assert.are.equal(10, #h.at(events, '@prog.lua:2', 'alloc'))
      assert.are.equal(4, #h.at(events, '@prog.lua:7', 'alloc'))
      assert.are.equal(0, #h.at(taken, '@prog.lua:7'))
      local prefix = {}
      for i = 1, #taken do prefix[i] = events[i] end
      assert.are.same(shapes(prefix), shapes(taken))
      assert.is_true(#events > #taken)
      -- What is live in it: the ten kept tables, none of the six dropped.
      local table_size = h.at(events, '@prog.lua:2', 'alloc')[1].nsize
      local live = live_by_name(taken)
      assert.are.same({ blocks = 10, bytes = 10 * table_size },
        live['@prog.lua:2'])
      assert.is_nil(live['@prog.lua:3'])
      assert.are.equal(6, #h.at(taken, '@prog.lua:3', 'alloc'))
    end)

    it('allocates nothing in the profiled VM', function()
      -- Without a collection, so that both runs record the same events.
      local program = h.chunk([[
local snapshot, path, options, keep = ...
for i = 1, 5 do keep[i] = {} end
local ok = snapshot(path, options)
for i = 6, 8 do keep[i] = {} end
return ok
]], '@quiet.lua')
      local snap = h.tmpname()
      local options = { format = 'memprof' }
      local stand_in = function() return true end
      local function run(snapshot)
        local keep = { 0, 0, 0, 0, 0, 0, 0, 0 }
        collectgarbage()
        collectgarbage('stop')
        local events = h.profile(program, snapshot, snap, options, keep)
        collectgarbage('restart')
        return events
      end
      local without = run(stand_in)
      local with = run(memprof.snapshot)
      local taken = h.read(snap)
      remove(snap)
      assert.are.same(shapes(without), shapes(with))
      assert.are.equal(5, #h.at(with, '@quiet.lua:2', 'alloc'))
      assert.are.equal(5, #h.at(taken, '@quiet.lua:2', 'alloc'))
    end)

    it('is read by memprof-report, whose LIVE AT END shows the kept tables',
      function()
        local snap = h.tmpname()
        local events = run_program(nil, memprof.snapshot, snap,
          { format = 'memprof' })
        local table_size = h.at(events, '@prog.lua:2', 'alloc')[1].nsize
        local code, out = C.run(C.command('./bin/memprof-report', '--leaks',
          snap))
        remove(snap)
        assert.are.equal(0, code)
        assert.is_truthy(out:find('\n@prog.lua:2: 10 blocks, ' ..
          10 * table_size .. 'B\n', 1, true))
        assert.is_falsy(out:find('@prog.lua:3:', 1, true))
        assert.is_falsy(out:find('@prog.lua:7:', 1, true))
      end)

    it('of a sampled profile says it is sampled, at the same rate',
      function()
        local snap = h.tmpname()
        local _, results = run_program({ sample_bytes = 64, seed = 7 },
          memprof.snapshot, snap, { format = 'memprof' })
        local _, stream = h.read(snap)
        remove(snap)
        assert.are.same({ true }, results)
        assert.are.equal(64, stream.sample_bytes)
      end)
  end)

  describe("in the 'pprof' format", function()
    -- The pprof snapshot of PROGRAM in a profile started with `options`;
    -- returns its content, the profile's events and its stream.
    local function pprof_of(options)
      local snap = h.tmpname('.pb.gz')
      local events, results, stream = run_program(options, memprof.snapshot,
        snap)
      local profile = pprof_read.file(snap)
      remove(snap)
      assert.are.same({ true }, results)
      return profile, events, stream
    end

    it('of a full profile holds the exact figures of each place', function()
      local profile, events, stream = pprof_of({ snapshots = true })
      local size = h.at(events, '@prog.lua:2', 'alloc')[1].nsize
      local places = pprof_read.by_place(profile)
      assert.are.same({ 'alloc_space/bytes', 'alloc_objects/count',
        'inuse_space/bytes', 'inuse_objects/count' }, profile.sample_types)
      assert.are.equal('inuse_space', profile.default_sample_type)
      assert.are.equal('space/bytes', profile.period_type)
      assert.are.equal(1, profile.period)
      -- Ten kept, six allocated and freed, none from after the snapshot.
      assert.are.same({ 10 * size, 10, 10 * size, 10 }, places['prog.lua:2'])
      assert.are.same({ 6 * size, 6, 0, 0 }, places['prog.lua:3'])
      assert.is_nil(places['prog.lua:7'])
      -- The profile went on: its file has the four tables of line 7.
      assert.are.equal(4, #h.at(events, '@prog.lua:7', 'alloc'))
      assert.is_nil(stream.warning)
    end)

    it('names functions and files as the reports do', function()
      local profile = pprof_of({ snapshots = true })
      local names = {}
      for _, func in pairs(profile.functions) do
        names[func.name] = func
      end
      assert.are.same({ name = 'main chunk of @prog.lua', file = 'prog.lua',
        start_line = 0 }, names['main chunk of @prog.lua'])
    end)

    it('of a full profile with stacks has the callers of each place',
      function()
        local profile = pprof_of({ snapshots = true, stack_depth = 4 })
        local found
        for _, sample in ipairs(profile.samples) do
          if sample.locations[1] == 'prog.lua:2' then found = sample end
        end
        assert.are.equal('prog.lua:2', found.locations[1])
        assert.is_truthy(found.locations[2]:find('snapshot_spec.lua:', 1,
          true))
        assert.are.same({ 10, 10 }, { found.values[2], found.values[4] })
      end)

    it('allocates nothing in the profiled VM', function()
      local program = h.chunk([[
local snapshot, path, keep = ...
for i = 1, 5 do keep[i] = {} end
local ok = snapshot(path)
for i = 6, 8 do keep[i] = {} end
return ok
]], '@quiet.lua')
      local snap = h.tmpname('.pb.gz')
      local stand_in = function() return true end
      local function run(snapshot)
        local keep = { 0, 0, 0, 0, 0, 0, 0, 0 }
        collectgarbage()
        collectgarbage('stop')
        local events = h.profile_with({ snapshots = true }, program, snapshot,
          snap, keep)
        collectgarbage('restart')
        return events
      end
      local without = run(stand_in)
      local with = run(memprof.snapshot)
      local places = pprof_read.by_place(pprof_read.file(snap))
      remove(snap)
      assert.are.same(shapes(without), shapes(with))
      assert.are.same({ 5, 5 }, { places['quiet.lua:2'][2],
        places['quiet.lua:2'][4] })
    end)

    describe('of a sampled profile', function()
      -- 20,000 tables kept at line 4 and 20,000 dropped at line 5 (the
      -- arrays are grown first, at line 3), with the collector stopped
      -- until one full collection at the end.
      local SAMPLED = [[
collectgarbage('stop')
local keep, drop = {}, {}
for i = 1, 20000 do keep[i] = true; drop[i] = true end
for i = 1, 20000 do keep[i] = {} end
for i = 1, 20000 do drop[i] = {} end
drop = nil
collectgarbage()
]]

      -- Runs SAMPLED in a child profiled with `options`, with a pprof
      -- snapshot at its end; returns the snapshot's bytes.
      local function child_snapshot(options, snap)
        local path = h.tmpname()
        local out, code = h.run_script('package.cpath = ' ..
          string.format('%q', package.cpath) .. '\njit.off()\n' ..
          "local memprof = require('memprof')\n" ..
          'local program = assert(loadstring(' .. string.format('%q',
          SAMPLED) .. ", '@sampled.lua'))\n" ..
          'assert(memprof.start(' .. string.format('%q', path) .. ', ' ..
          options .. '))\nprogram()\n' ..
          'assert(memprof.snapshot(' .. string.format('%q', snap) .. '))\n' ..
          'assert(memprof.stop())\n')
        os.remove(path)
        assert.are.same({ '', 0 }, { out, code })
        return C.read_file(snap)
      end

      it('estimates each place within 10% and repeats with a seed',
        function()
          local snap = h.tmpname('.pb.gz')
          local truth = pprof_read.by_place(pprof_read.decode(
            pprof_read.gunzip(child_snapshot('{ snapshots = true }', snap))))
          local first = child_snapshot('{ sample_bytes = 512, seed = 5 }',
            snap)
          local second = child_snapshot('{ sample_bytes = 512, seed = 5 }',
            snap)
          remove(snap)
          assert.is_true(first == second)
          local profile = pprof_read.decode(pprof_read.gunzip(first))
          assert.are.equal(512, profile.period)
          assert.are.same({ 'memprof snapshot of ' .. snap, 'sampled: one ' ..
            'sample per 512 bytes on average; figures are estimates' },
            profile.comments)
          local estimate = pprof_read.by_place(profile)
          assert.are.same({ 20000, 20000 }, { truth['sampled.lua:4'][2],
            truth['sampled.lua:4'][4] })
          assert.are.same({ 20000, 0 }, { truth['sampled.lua:5'][2],
            truth['sampled.lua:5'][4] })
          -- alloc_space, alloc_objects, inuse_space, inuse_objects at line 4
          -- and the allocations at line 5.
          local checks = { { 'sampled.lua:4', 1 }, { 'sampled.lua:4', 2 },
            { 'sampled.lua:4', 3 }, { 'sampled.lua:4', 4 },
            { 'sampled.lua:5', 1 }, { 'sampled.lua:5', 2 } }
          for _, check in ipairs(checks) do
            local place, i = check[1], check[2]
            local ratio = estimate[place][i] / truth[place][i]
            assert.is_true(ratio > 0.9 and ratio < 1.1, string.format(
              '%s, value %d: %d estimated, %d true', place, i,
              estimate[place][i], truth[place][i]))
          end
        end)
    end)

    -- The parent keeps 500 tables at line 2 before fork(); the child of a
    -- profile with %p keeps 1000 at line 6 (in an array grown at line 5)
    -- and takes a snapshot: its model starts afresh, with nothing of the
    -- parent's.
    it('of a forked child holds only what the child allocated', function()
      local FORKED = [[
local memprof, ffi, snap = ...
keep = {} for i = 1, 500 do keep[i] = {} end
local pid = ffi.C.fork()
if pid == 0 then
  local mine = {} for i = 1, 1000 do mine[i] = true end
  for i = 1, 1000 do mine[i] = {} end
  print('child snapshot', memprof.snapshot(snap))
  os.exit(0)
end
ffi.C.waitpid(pid, ffi.new('int[1]'), 0)
print('parent stop', memprof.stop())
]]
      local dir = C.temp_dir()
      local template, snap = dir .. '/profile-%p.bin', dir .. '/snap.pb.gz'
      local out, code = h.run_script('package.cpath = ' ..
        string.format('%q', package.cpath) .. '\njit.off()\n' ..
        "local ffi = require('ffi')\n" ..
        "ffi.cdef('int fork(void); int waitpid(int, int *, int);')\n" ..
        "local memprof = require('memprof')\n" ..
        'assert(memprof.start(' .. string.format('%q', template) ..
        ', { snapshots = true }))\n' ..
        'assert(loadstring(' .. string.format('%q', FORKED) ..
        ", '@forked.lua'))(memprof, ffi, " .. string.format('%q', snap) ..
        ')\n')
      local places = pprof_read.by_place(pprof_read.file(snap))
      C.remove_tree(dir)
      assert.are.same({ 'child snapshot\ttrue\nparent stop\ttrue\n', 0 },
        { out, code })
      assert.are.same({ 1000, 1000 }, { places['forked.lua:6'][2],
        places['forked.lua:6'][4] })
      assert.is_nil(places['forked.lua:2'])
    end)

    it('is read by go tool pprof', function()
      assert(C.have('go'), 'this spec needs go (Debian package golang-go)')
      local dir = C.temp_dir()
      local snap = dir .. '/snap.pb.gz'
      local events = run_program({ snapshots = true }, memprof.snapshot, snap)
      local size = h.at(events, '@prog.lua:2', 'alloc')[1].nsize
      local code, out, err = consumers.pprof(dir, '-top', '-lines',
        '-sample_index=inuse_objects', snap)
      C.remove_tree(dir)
      assert.are.same({ 0, '' }, { code, err })
      assert.is_truthy(out:find('\nType: inuse_objects\n', 1, true))
      assert.is_truthy(out:find('\n        10 [%d.]+%% [%d.]+%%         10 ' ..
        '[%d.]+%%  main chunk of @prog.lua prog.lua:2\n'))
      assert.is_falsy(out:find('prog.lua:3', 1, true))
      assert.is_true(size > 0)
    end)
  end)
  -- The collector's state is seen through what the heap does: stopped, it
  -- keeps every byte of garbage; running, it frees garbage eight times the
  -- heap long before that much is made (a cycle starts at twice the heap).
  describe('with collect = true', function()
    local function garbage_kept()
      local before = collectgarbage('count')
      local made = 8 * before
      for i = 1, made do
        local _ = string.rep('x', 1000) .. i -- Over 1 KiB each.
      end
      return collectgarbage('count') - before >= made
    end

    it('leaves a stopped collector stopped, and a running one running',
      function()
      local path = h.tmpname('.heap')
      collectgarbage('stop')
      local stopped = { memprof.snapshot(path, { format = 'heap',
        collect = true }) }
      local kept = garbage_kept()
      collectgarbage('restart')
      local running = { memprof.snapshot(path, { format = 'heap',
        collect = true }) }
      local kept_running = garbage_kept()
      remove(path)
      assert.are.same({ { true }, { true } }, { stopped, running })
      assert.is_true(kept)
      assert.is_false(kept_running)
    end)
  end)

  -- Into a FIFO, in a child process (SIGPIPE would kill this one), each
  -- run under a time limit (run_script). The child makes a snapshot of
  -- each format far larger than a pipe holds (64 KiB).
  describe('into a FIFO', function()
    local CHILD = [[
local fifo, format, reader = ...
local ffi = require('ffi')
ffi.cdef('int open(const char *, int, ...); int usleep(unsigned);' ..
  'struct spec_ts { long s, ns; }; int clock_gettime(int, struct spec_ts *);')
local function now() -- CLOCK_MONOTONIC, in seconds
  local ts = ffi.new('struct spec_ts')
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.s) + tonumber(ts.ns) * 1e-9
end
local O_RDONLY, O_WRONLY, O_NONBLOCK = 0, 1, 2048
jit.off()
local memprof = require('memprof')
-- A heap snapshot refuses a file this process writes (the FIFO is one:
-- the probe below) while a profile runs: it is taken without one.
local profile = os.tmpname()
if format ~= 'heap' then
  assert(memprof.start(profile, { snapshots = true }))
end
keep = {}
for i = 1, 100000 do keep[i] = { i } end
-- Places with long names of their own: a pprof file of over 64 KiB.
for i = 1, 3000 do
  local name = '@' .. string.format('%08x', math.random(0, 2^31)):rep(6)
  assert(loadstring('return {}', name))()
end
local probe = -1
if reader == 'never reads' then
  probe = ffi.C.open(fifo, O_RDONLY + O_NONBLOCK)
else
  -- A reader that reads one byte and leaves: open once it is there (the
  -- probe stays open, so that it waits for that byte).
  os.execute('timeout 60 head -c 1 < ' .. fifo .. ' > /dev/null &')
  for _ = 1, 1000 do
    probe = ffi.C.open(fifo, O_WRONLY + O_NONBLOCK)
    if probe >= 0 then break end
    ffi.C.usleep(10000)
  end
end
assert(probe >= 0, 'no reader')
local t = now()
print(memprof.snapshot(fifo, { format = format }))
print('waited', now() - t >= 2.5)
if format ~= 'heap' then assert(memprof.stop()) end
os.remove(profile)
]]

    -- (A stalled write waits 3 seconds, not the default 10.)
    local function run_child(fifo, format, reader)
      return h.run_script('package.cpath = ' ..
        string.format('%q', package.cpath) .. '\n' ..
        'assert(loadstring(' .. string.format('%q', CHILD) .. '))(' ..
        string.format('%q, %q, %q', fifo, format, reader) .. ')\n',
        'MEMPROF_STALL_SECONDS=3')
    end

    local function fifo_in(dir)
      local fifo = dir .. '/fifo'
      assert.are.equal(0, (C.run('mkfifo ' .. C.quote(fifo))))
      return fifo
    end

    it('whose reader left fails with EPIPE, and the program lives on',
      function()
      local dir = C.temp_dir()
      local fifo = fifo_in(dir)
      local results = {}
      for _, format in ipairs({ 'heap', 'memprof', 'pprof' }) do
        results[#results + 1] = { run_child(fifo, format, 'leaves') }
      end
      C.remove_tree(dir)
      local broken = { 'nil\t' .. fifo .. ': Broken pipe\t32\n' ..
        'waited\tfalse\n', 0 }
      assert.are.same({ broken, broken, broken }, results)
    end)

    it('that nobody reads is refused at once', function()
      local dir = C.temp_dir()
      local fifo = fifo_in(dir)
      local result = { memprof.snapshot(fifo, { format = 'heap' }) }
      C.remove_tree(dir)
      assert.are.same({ nil, fifo .. ': no process reads this FIFO (No ' ..
        'such device or address)', 6 }, result)
    end)

    it('whose reader never reads fails after MEMPROF_STALL_SECONDS',
      function()
      local dir = C.temp_dir()
      local fifo = fifo_in(dir)
      local out, code = run_child(fifo, 'heap', 'never reads')
      C.remove_tree(dir)
      assert.are.same({ 'nil\t' .. fifo .. ': the reader took no byte ' ..
        'for 3 seconds (a write waits no longer)\t110\nwaited\ttrue\n',
        0 }, { out, code })
    end)
  end)
end)
