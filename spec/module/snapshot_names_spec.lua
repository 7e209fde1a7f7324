-- The names of a pprof snapshot's functions (src/source_names.c): those
-- that memprof-report --format=pprof gives the same profile, Lua
-- functions named by the line that defines them where the file is
-- readable, `function at` where it is not.
local h = require('helpers.profile')
local C = require('helpers.command')
local memprof = require('memprof')
local pprof_read = require('helpers.pprof_read')

-- Each function allocates a table; the line after the program's
-- definitions calls them all.  Line 10's name and '(' lie past the 157
-- bytes of a line that sources.lua matches, line 11 ends in CR LF.
local LONG = string.rep('n', 150)
local PROGRAM = table.concat({
  'local keep, snapshot, path = ...',
  'local M = {}',
  'local function f() keep[#keep + 1] = {} end',
  'function M.g() keep[#keep + 1] = {} end',
  'h = function() keep[#keep + 1] = {} end',
  '  local function indented () keep[#keep + 1] = {} end',
  'local k = function() keep[#keep + 1] = {} end',
  'function M:method() keep[#keep + 1] = { string.rep("memprof-names", 7) } end',
  'local anon = { function() keep[#keep + 1] = {} end }',
  'local function ' .. LONG .. '() keep[#keep + 1] = {} end',
  'local function crlf() keep[#keep + 1] = {} end\r',
  'f() M.g() h() indented() k() M:method() anon[1]() ' .. LONG .. '() crlf()',
  'for i = 1, 3 do keep[#keep + 1] = {} end',
  'if snapshot then assert(snapshot(path)) end',
  '',
}, '\n')

-- The names of the functions of `profile` whose file is `file`, sorted.
local function names_in(profile, file)
  local list = {}
  for _, func in pairs(profile.functions) do
    if func.file == file then list[#list + 1] = func.name end
  end
  table.sort(list)
  return list
end

-- The functions of `profile` by name: 'FILE START_LINE'.
local function function_set(profile)
  local set = {}
  for _, func in pairs(profile.functions) do
    set[func.name] = func.file .. ' ' .. func.start_line
  end
  return set
end

-- Asserts that the report names every function of the snapshot's
-- samples alike, with the same file and first line (it has more: what the
-- profile allocated after the snapshot).
local function same_functions(snapshot, report)
  local reported = function_set(report)
  for _, sample in ipairs(snapshot.samples) do
    for _, func in ipairs(sample.functions) do
      assert.are.same({ func.name, func.file .. ' ' .. func.start_line },
        { func.name, reported[func.name] })
    end
  end
end

-- What memprof-report --format=pprof makes of the profile at `path`.
local function report_of(path)
  local out = h.tmpname('.pb.gz')
  local code, _, err = C.run(C.command('./bin/memprof-report',
    '--format=pprof', path) .. ' > ' .. C.quote(out))
  assert(code == 0, err)
  local profile = pprof_read.file(out)
  os.remove(out)
  return profile
end

-- The directory of this process, as a relative path's base.
local function cwd()
  local code, out = C.run('pwd')
  assert(code == 0)
  return (out:gsub('\n$', ''))
end

-- `dir` relative to the current directory (both absolute).
local function relative(dir)
  local ups = select(2, cwd():gsub('/[^/]+', ''))
  return string.rep('../', ups) .. dir:gsub('^/', '')
end

-- The names of the program's functions, chunk '@FILE', as both name them.
local function expected(file)
  local chunk = '@' .. file
  return {
    'M.g (' .. chunk .. ':4)',
    'M:method (' .. chunk .. ':8)',
    'crlf (' .. chunk .. ':11)',
    'f (' .. chunk .. ':3)',
    'function at ' .. chunk .. ':10',
    'function at ' .. chunk .. ':9',
    'h (' .. chunk .. ':5)',
    'indented (' .. chunk .. ':6)',
    'k (' .. chunk .. ':7)',
    'main chunk of ' .. chunk,
  }
end

describe('pprof snapshot names', function()
  local dir

  setup(function()
    jit.off()
    dir = C.temp_dir()
  end)

  teardown(function()
    jit.on()
    C.remove_tree(dir)
  end)

  after_each(function()
    if memprof.is_running() then memprof.stop() end
  end)

  -- Runs the program at `file` (its chunk '@' .. file) under a profile,
  -- with a snapshot at its end, `before(keep)` run first (loaded first,
  -- run in the profile); returns the snapshot and the profile's file (to
  -- remove).
  local function snapshot_of(file, before)
    local path, snap = h.tmpname(), h.tmpname('.pb.gz')
    local program = assert(loadfile(file))
    local keep = {}
    assert(memprof.start(path, { snapshots = true, stack_depth = 3 }))
    if before then before(keep) end
    program(keep, memprof.snapshot, snap)
    assert(memprof.stop())
    local profile = pprof_read.file(snap)
    os.remove(snap)
    return profile, path
  end

  it('are the reporter\'s, from a source read by a relative path',
    function()
      local file = relative(dir) .. '/app.lua'
      C.write_file(file, PROGRAM)
      local snapshot, path = snapshot_of(file)
      local report = report_of(path)
      os.remove(path)
      assert.are.same(expected(file), names_in(snapshot, file))
      assert.are.same(expected(file), names_in(report, file))
      -- Built-ins, INTERNAL and the spec's own frames alike too.
      same_functions(snapshot, report)
      assert.are.equal(' 0', function_set(snapshot)['string.rep'])
    end)

  it('are the reporter\'s for traces and built-ins written in Lua',
    function()
      local path, snap = h.tmpname(), h.tmpname('.pb.gz')
      local list, keep = {}, {}
      for i = 1, 2000 do list[i] = i end
      local each = assert(loadstring('local list, keep = ...\n' ..
        'table.foreachi(list, function(i) keep[i] = { i } end)\n',
        '@foreach.lua'))
      jit.on()
      assert(memprof.start(path, { snapshots = true, stack_depth = 3,
        trace_lines = false }))
      each(list, keep)
      assert(memprof.snapshot(snap))
      assert(memprof.stop())
      jit.off()
      local snapshot = pprof_read.file(snap)
      local report = report_of(path)
      os.remove(snap)
      os.remove(path)
      same_functions(snapshot, report)
      local functions = function_set(snapshot)
      assert.are.same({ 'foreachi 0', ' 0' }, {
        functions['[builtin:foreachi]'],
        functions['TRACE started at [builtin:foreachi]'] })
    end)

  it('fall back to where the function is defined when the source is ' ..
    'gone', function()
      local file = dir .. '/gone.lua'
      C.write_file(file, PROGRAM)
      local snapshot, path = snapshot_of(file, function()
        assert(os.remove(file))
      end)
      os.remove(path)
      local chunk = '@' .. file
      assert.are.same({
        'function at ' .. chunk .. ':10', 'function at ' .. chunk .. ':11',
        'function at ' .. chunk .. ':3', 'function at ' .. chunk .. ':4',
        'function at ' .. chunk .. ':5', 'function at ' .. chunk .. ':6',
        'function at ' .. chunk .. ':7', 'function at ' .. chunk .. ':8',
        'function at ' .. chunk .. ':9', 'main chunk of ' .. chunk,
      }, names_in(snapshot, file))
    end)

  -- The functions of `missing` chunks that name no file are run first,
  -- then the program's: with this spec's file, 256 chunks may be tried.
  local function after_missing(missing)
    local file = relative(dir) .. '/late.lua'
    C.write_file(file, PROGRAM)
    local chunks = {}
    for i = 1, missing do
      chunks[i] = assert(loadstring('local keep = ...\n' ..
        'local function gone(t) t[#t + 1] = {} end\ngone(keep)\n',
        '@' .. dir .. '/missing-' .. i .. '.lua'))
    end
    local snapshot, path = snapshot_of(file, function(keep)
      for i = 1, missing do chunks[i](keep) end
    end)
    local report = report_of(path)
    os.remove(path)
    os.remove(file)
    same_functions(snapshot, report)
    for _, func in pairs(snapshot.functions) do
      if func.file == file and func.start_line == 3 then return func.name end
    end
  end

  it('are read from the first 256 chunks tried, as the reporter does',
    function()
      local file = relative(dir) .. '/late.lua'
      assert.are.same({ 'f (@' .. file .. ':3)',
        'function at @' .. file .. ':3' },
        { after_missing(254), after_missing(255) })
    end)

  it('fall back past the size bound, and for a FIFO or a directory',
    function()
      local big, fifo = relative(dir) .. '/big.lua', dir .. '/fifo.lua'
      -- The program, then a comment to 4 MiB + 1 byte.
      local pad = 4 * 1024 * 1024 + 1 - #PROGRAM
      C.write_file(big, PROGRAM .. '--' .. string.rep('x', pad - 3) .. '\n')
      assert.are.equal(0, (C.run('mkfifo ' .. C.quote(fifo))))
      local two = 'local keep = ...\nlocal function two() keep[1] = {} end\n' ..
        'two()\n'
      local in_fifo = assert(loadstring(two, '@' .. fifo))
      local in_dir = assert(loadstring(two, '@' .. dir))
      local snapshot, path = snapshot_of(big, function(keep)
        in_fifo(keep)
        in_dir(keep)
      end)
      os.remove(path)
      os.remove(big)
      os.remove(fifo)
      local chunk = '@' .. big
      assert.are.same({
        'function at ' .. chunk .. ':10', 'function at ' .. chunk .. ':11',
        'function at ' .. chunk .. ':3', 'function at ' .. chunk .. ':4',
        'function at ' .. chunk .. ':5', 'function at ' .. chunk .. ':6',
        'function at ' .. chunk .. ':7', 'function at ' .. chunk .. ':8',
        'function at ' .. chunk .. ':9', 'main chunk of ' .. chunk,
      }, names_in(snapshot, big))
      assert.are.same({ 'function at @' .. fifo .. ':2',
        'main chunk of @' .. fifo }, names_in(snapshot, fifo))
      assert.are.same({ 'function at @' .. dir .. ':2',
        'main chunk of @' .. dir }, names_in(snapshot, dir))
    end)
end)
