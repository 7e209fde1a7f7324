-- Specs for bin/memprof-report and memprof.cli.report.  Run from the top of the
-- source tree (the command is run as ./bin/memprof-report).

local cli = require('memprof.cli.report')
local B = require('helpers.stream_builder')
local C = require('helpers.command')

local COMMAND = './bin/memprof-report'

local write_file, read_file, quote, run =
  C.write_file, C.read_file, C.quote, C.run

local function report(...)
  return run(C.command(COMMAND, ...))
end

-- Files a test writes, removed after it (remove_temp_files).
local temp_files = {}

local function temp_file(bytes)
  local p = os.tmpname()
  temp_files[#temp_files + 1] = p
  write_file(p, bytes)
  return p
end

local function remove_temp_files()
  for _, p in ipairs(temp_files) do
    os.remove(p)
  end
  temp_files = {}
end

local function profile()
  local s = B.new():lfunc(0x100, '@app.lua', 1):events()
  s:alloc(B.lua(0x100, 3), 0x10, 2048)
  s:alloc(B.lua(0x100, 4), 0x20, 100)
  s:free(B.internal(), 0x20, 100)
  return s
end

local LEAKS = [[
HEAP SUMMARY (by bytes held):
@app.lua:3 holds 2KiB: 1 allocs, 0 frees
TOTAL holds 2KiB (net bytes of the stream)

]]

describe('memprof-report', function()
  local path

  before_each(function()
    path = temp_file(profile():epilogue():bytes())
  end)

  after_each(remove_temp_files)

  local another_file = temp_file

  it('prints the report and exits with 0', function()
    local code, stdout, stderr = report(path)
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    assert.are.equal([[
ALLOCATIONS (by bytes allocated)
@app.lua:3: 1 events	+2,048B	-0B
@app.lua:4: 1 events	+100B	-0B

REALLOCATIONS (by bytes allocated)

DEALLOCATIONS (by bytes freed)
INTERNAL: 1 events	+0B	-100B
	Overrides:
		@app.lua:4


HEAP SUMMARY (by bytes held):
@app.lua:3 holds 2,048B: 1 allocs, 0 frees
TOTAL holds 2,048B (net bytes of the stream)

]], stdout)
  end)

  it('takes --leak-only and --human-readable, before or after the file',
    function()
      local code, stdout, stderr = report('--leak-only', path,
        '--human-readable')
      assert.are.equal(0, code)
      assert.are.equal('', stderr)
      assert.are.equal(LEAKS, stdout)
    end)

  it('prints its usage with --help and -h', function()
    for _, word in ipairs({ '--help', '-h' }) do
      local code, stdout, stderr = report(word)
      assert.are.equal(0, code)
      assert.are.equal('', stderr)
      assert.are.equal([[
Usage: memprof-report [OPTIONS] FILE
       memprof-report --diff [OPTIONS] BEFORE AFTER
       memprof-report [--profile=PROFILE] [OPTIONS] HEAP
       memprof-report --diff [OPTIONS] OLD.heap NEW.heap

Print a report of a memprof profile: allocations, reallocations and
deallocations per site, and what is still allocated at the end.
With --leaks, --peak, --temporary or --timeline, print those views
instead.  --group=caller and --group=stack need a profile recorded
with call stacks (memprof.start(path, {stack_depth = N})), --timeline
one recorded with time marks (memprof.start(path, {timestamps = true})).
Rows are sorted by bytes (--sort=count: by events, Tarantool's order).
With --diff, print which rows grew or shrank from BEFORE to AFTER,
by growth in live bytes at the end (--sort=bytes: in bytes allocated).
The text report and --diff show the first 30 rows of each section
(--top=N for N, --all for every row).  The report goes to stdout, or
to the file of --output (--output=- is stdout too).
Of a heap snapshot (memprof.snapshot(path, {format = 'heap'})), print
what holds the memory, and with --diff what grew (docs/holders.md).

Options:
  --format=NAME          the output format (see below)
  --group=G              rows by line (default), function, caller or stack
  --top=N                at most N rows per section (text: 30 by default)
  --all                  every row of each section
  --sort=S               bytes (default), count; --diff: live (default), bytes, count
  --focus=TEXT           only blocks whose place or stack has TEXT (every view)
  --ignore=TEXT          leave out blocks whose place or stack has TEXT
  --leaks                view: blocks live at the end, with their stacks
  --peak                 view: the heap's peak, and what held it
  --temporary[=N]        view: blocks freed within N allocations (default 1)
  --timeline             view: live bytes over time (needs time marks)
  --split-traces         one row per trace number, not per start place
  --leak-only            default report: only the heap summary
  --human-readable       sizes in B, KiB, MiB, GiB
  --metric=M             folded: alloc-bytes|alloc-count|live-bytes|peak-bytes
  --output=PATH          write to PATH (folded: to PATH.METRIC.folded)
  --diff                 compare two profiles: --diff BEFORE AFTER
  --heap=SNAPSHOT        with --leaks, json, html: who holds what each place made
  --profile=PROFILE      of a heap snapshot: the profile it was taken in
  -h, --help             show this help and exit
  --version              show the version (and the interpreter) and exit

Formats (--format=NAME; docs/formats.md):
  text                   the report, or the views asked for (default)
  json                   every view as JSON (docs/json.md)
  folded                 collapsed stacks for flame graphs (--metric)
  pprof                  gzipped profile.proto for go tool pprof
  chrome                 the heap over time as a Chrome trace
  html                   a page of every view, for a browser
  heapsnapshot           of a heap snapshot: V8's .heapsnapshot, for Chrome DevTools and memlab
]], stdout)
    end
  end)

  it('rejects bad command lines with exit code 1', function()
    local cases = {
      { { '--bogus', path }, "memprof-report: unknown option '--bogus'; " ..
        'did you mean --focus? (see --help)\n' },
      { { '--focus=', path }, "memprof-report: option '--focus': expected " ..
        'some text, found nothing (see --help)\n' },
      { { '-x', path }, "memprof-report: unknown option '-x' (see --help)\n" },
      { { '--leak-only=yes', path },
        "memprof-report: option '--leak-only' takes no value (see --help)\n" },
      { {}, 'memprof-report: no profile file given (see --help)\n' },
      { { path, path }, 'memprof-report: give exactly one profile file ' ..
        '(see --help)\n' },
      { { '--group=file', path }, "memprof-report: option '--group': " ..
        'expected line, function, caller, stack, found file (see --help)\n' },
      { { '--sort', 'size', path }, "memprof-report: option '--sort': " ..
        'expected bytes, count, live, found size (see --help)\n' },
      { { '--sort=live', path }, 'memprof-report: --sort=live is for ' ..
        '--diff (rows by growth in live bytes); a report sorts by bytes ' ..
        'or count (see --help)\n' },
      { { '--top=0', path }, "memprof-report: option '--top': expected a " ..
        'whole number of at least 1, found 0 (see --help)\n' },
      { { '--temporary=-1', path }, "memprof-report: option " ..
        "'--temporary': expected a whole number of at least 0, found -1 " ..
        '(see --help)\n' },
      { { '--peak=yes', path },
        "memprof-report: option '--peak' takes no value (see --help)\n" },
      { { '--leak-only', '--leaks', path }, 'memprof-report: --leak-only is ' ..
        'for the default report; leave it out with --leaks, --peak, ' ..
        '--temporary or --timeline (see --help)\n' },
      -- Common mistakes, with a hint.
      { { '--temporary', '5', path }, "memprof-report: option " ..
        "'--temporary' takes its value after '=': write --temporary=5 " ..
        '(see --help)\n' },
      { { '--leak', path }, "memprof-report: unknown option '--leak'; did " ..
        'you mean --leaks or --leak-only? (see --help)\n' },
      { { '-leaks', path }, "memprof-report: unknown option '-leaks'; did " ..
        'you mean --leaks? (see --help)\n' },
      { { '--fromat=json', path }, "memprof-report: unknown option " ..
        "'--fromat=json'; did you mean --format? (see --help)\n" },
      { { '--top=5', '--all', path }, 'memprof-report: --top=N and --all ' ..
        'do not go together (--all shows every row) (see --help)\n' },
      { { '--all', '--format=json', path }, 'memprof-report: --all does ' ..
        'not apply to --format=json (see --help)\n' },
    }
    for _, case in ipairs(cases) do
      local code, stdout, stderr = report(unpack(case[1]))
      assert.are.equal(1, code)
      assert.are.equal('', stdout)
      assert.are.equal(case[2], stderr)
    end
  end)

  it('says what is wrong with a file given with --profile (a heap ' ..
    'snapshot\'s option) that is not a heap snapshot', function()
    local bad = another_file('xyzabcdef')
    local code, stdout, stderr = report('--profile=' .. path, bad)
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal('memprof-report: ' .. bad .. ': byte 0: expected the ' ..
      'magic "ljh" of a heap snapshot, got "xyz"\n', stderr)
    -- A profile given where the heap snapshot goes: the same.
    code, stdout, stderr = report('--profile=' .. path, path)
    assert.are.equal(1, code)
    assert.are.equal('memprof-report: ' .. path .. ': byte 0: expected the ' ..
      'magic "ljh" of a heap snapshot, got "ljs"\n', stderr)
  end)

  it('prints its version and the interpreter it runs on', function()
    local _, interpreter = run("luajit -e 'io.write(jit.version)'")
    local code, stdout, stderr = report('--version')
    assert.are.same({ 0, '' }, { code, stderr })
    assert.are.equal('memprof-report ' ..
      require('memprof.version').VERSION .. ' (' .. interpreter .. ')\n',
      stdout)
  end)

  -- A profile of 35 lines: line k allocates k blocks of 8 bytes.
  local function many_rows()
    local s = B.new():lfunc(0x100, '@many.lua', 1):events()
    local address = 0
    for line = 1, 35 do
      for _ = 1, line do
        address = address + 16
        s:alloc(B.lua(0x100, line), address, 8)
      end
    end
    return s:epilogue()
  end

  it('shows the first 30 rows of each section, and says how to see all',
    function()
      local many = another_file(many_rows():bytes())
      local allocations, heap = {}, {}
      for line = 35, 6, -1 do
        allocations[#allocations + 1] = ('@many.lua:%d: %d events\t+%dB\t' ..
          '-0B\n'):format(line, line, line * 8)
        heap[#heap + 1] = ('@many.lua:%d holds %dB: %d allocs, 0 frees\n')
          :format(line, line * 8, line)
      end
      local code, stdout, stderr = report(many)
      assert.are.same({ 0, '' }, { code, stderr })
      assert.are.equal('ALLOCATIONS (by bytes allocated)\n' ..
        table.concat(allocations) ..
        '... and 5 more: 15 events\t+120B\t-0B\n\n' ..
        'REALLOCATIONS (by bytes allocated)\n\n' ..
        'DEALLOCATIONS (by bytes freed)\n\n' ..
        'HEAP SUMMARY (by bytes held):\n' ..
        table.concat(heap) ..
        '... and 5 more hold 120B: 15 allocs, 0 frees\n' ..
        'TOTAL holds 5,040B (net bytes of the stream)\n\n' ..
        '(10 rows left out: each list shows its first 30; --top=N shows ' ..
        'N, --all every row)\n', stdout)
      -- --all: every row, no note; --top=N: N rows, and no note either.
      local _, all = report('--all', many)
      assert.are.equal(2 * 35, select(2, all:gsub('\n@many%.lua:', '')))
      assert.is_nil(all:find('... and', 1, true))
      assert.is_nil(all:find('left out', 1, true))
      local _, top = report('--top=2', '--leak-only', many)
      assert.are.equal('HEAP SUMMARY (by bytes held):\n' ..
        '@many.lua:35 holds 280B: 35 allocs, ' ..
        '0 frees\n@many.lua:34 holds 272B: 34 allocs, 0 frees\n... and 33 ' ..
        'more hold 4,488B: 561 allocs, 0 frees (89% of the bytes)\n' ..
        'TOTAL holds 5,040B (net bytes of the stream)\n\n', top)
      -- The views and --diff are cut the same way.
      local _, leaks = report('--leaks', many)
      assert.truthy(leaks:find('\n... and 5 more: 15 blocks, 120B\n', 1,
        true))
      assert.are.equal('(5 rows left out: each list shows its first 30; ' ..
        '--top=N shows N, --all every row)\n', leaks:match('[^\n]*\n$'))
      -- An Overrides list is cut the same way: 35 lines whose blocks the
      -- collector frees.
      local s = B.new():lfunc(0x100, '@many.lua', 1):events()
      for line = 1, 35 do
        s:alloc(B.lua(0x100, line), line * 16, 8)
        s:free(B.internal(), line * 16, 8)
      end
      local freed = another_file(s:epilogue():bytes())
      local _, cut = report(freed)
      -- The names in order (@many.lua:1, @many.lua:10, ...), the first 30.
      local names = {}
      for line = 1, 35 do
        names[line] = '@many.lua:' .. line
      end
      table.sort(names)
      for i = 35, 31, -1 do
        names[i] = nil
      end
      assert.are.equal('DEALLOCATIONS (by bytes freed)\n' ..
        'INTERNAL: 35 events\t+0B\t-280B\n' ..
        '\tOverrides:\n\t\t' .. table.concat(names, '\n\t\t') ..
        '\n\t\t... and 5 more\n\n\n',
        cut:match('DEALLOCATIONS %(by bytes freed%)\n.-\n\n\n'))
      assert.are.equal('(10 rows left out: each list shows its first 30; ' ..
        '--top=N shows N, --all every row)\n', cut:match('[^\n]*\n$'))
      local _, changes = report('--diff', path, many)
      assert.are.equal('(7 rows left out: each list shows its first 30; ' ..
        '--top=N shows N, --all every row)\n', changes:match('[^\n]*\n$'))
    end)

  it('says why a file cannot be read', function()
    local code, stdout, stderr = report('/nonexistent/out.bin')
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal('memprof-report: /nonexistent/out.bin: No such file ' ..
      'or directory\n', stderr)
  end)

  -- /dev/full takes no byte: a write to it fails with ENOSPC.
  it('fails, naming the output, when the report cannot be written',
    function()
    local path = another_file(profile():epilogue():bytes())
    local code, stdout, stderr = report('--format=json', '--output=/dev/full',
      path)
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal('memprof-report: /dev/full: No space left on device\n',
      stderr)
    code, stdout, stderr = run(C.command(COMMAND, path) .. ' >/dev/full')
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal('memprof-report: the standard output: No space left ' ..
      'on device\n', stderr)
  end)

  -- A report written in pieces larger than the output's buffer: a piece
  -- that fails leaves nothing for the flush at the end to fail on.
  it('fails when a report written in large pieces cannot be written',
    function()
      local s = B.new():lfunc(0x100, '@app.lua', 1):events()
      for line = 1, 2000 do
        s:alloc(B.lua(0x100, line), 0x10 * line, 64)
      end
      local path = another_file(s:epilogue():bytes())
      for _, format in ipairs({ 'json', 'html', 'chrome' }) do
        local code, stdout, stderr = run(C.command(COMMAND,
          '--format=' .. format, path) .. ' >/dev/full')
        -- (chrome's note about the time axis comes first)
        assert.are.same({ 1, '', 'memprof-report: the standard output: ' ..
          'No space left on device\n' }, { code, stdout,
            stderr:match('[^\n]*\n$') })
      end
    end)

  it('reports parse errors with the offset', function()
    local bad = another_file('xyz\3\0\0\0\128ljm\3\0\0\0\128')
    local code, stdout, stderr = report(bad)
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal('memprof-report: ' .. bad .. ": byte 0: expected the " ..
      "symbol table magic 'ljs', found 'xyz'\n", stderr)

    local s = profile()
    local at = s:size()
    local bad_header = another_file(s:raw('\90'):epilogue():bytes())
    code, stdout, stderr = report(bad_header)
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal(('memprof-report: %s: byte %d: expected an event ' ..
      'header (0x00-0x13 or 0x80), found 0x5a\n'):format(bad_header, at),
      stderr)
  end)

  it('warns about a truncated profile and still reports it', function()
    local cut = another_file(profile():bytes())
    local code, stdout, stderr = report('--leak-only', '--human-readable', cut)
    assert.are.equal(0, code)
    assert.are.equal(LEAKS, stdout)
    assert.are.equal('memprof-report: warning: ' .. cut .. ': the stream ' ..
      'has no epilogue (the profile was not stopped cleanly); the report ' ..
      'covers all 3 events\n', stderr)

    local bytes = profile():epilogue():bytes()
    local mid = another_file(bytes:sub(1, -3))
    code, stdout, stderr = report('--leak-only', mid)
    assert.are.equal(0, code)
    assert.matches('^HEAP SUMMARY %(by bytes held%):\n', stdout)
    assert.are.equal(('memprof-report: warning: %s: the stream ends at ' ..
      'byte %d in the middle of an event (expected the size of a freed ' ..
      'block); the report covers the 2 events before it\n'):format(mid,
      #bytes - 2), stderr)
  end)

  -- What a process killed in its first second leaves.
  it('reports an empty file as a profile with no events, and says why',
    function()
      local empty = another_file('')
      local code, stdout, stderr = report(empty)
      assert.are.same({ 0, 'ALLOCATIONS (by bytes allocated)\n\n' ..
        'REALLOCATIONS (by bytes allocated)\n\n' ..
        'DEALLOCATIONS (by bytes freed)\n\n' ..
        'HEAP SUMMARY (by bytes held):\nTOTAL holds 0B (net bytes of the ' ..
        'stream)\n\n', 'memprof-report: warning: ' .. empty .. ': the file ' ..
        'is empty: the process wrote no profile (it ended, or was killed, ' ..
        'before its first write); no events\n' }, { code, stdout, stderr })
    end)

  it('reads a file whose name starts with a dash after --', function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute('mkdir ' .. quote(dir))
    local dashed = dir .. '/-profile.bin'
    write_file(dashed, profile():epilogue():bytes())
    local code, stdout = run('cd ' .. quote(dir) .. ' && ' ..
      quote(os.getenv('PWD') .. '/bin/memprof-report') ..
      ' --leak-only --human-readable -- -profile.bin')
    os.remove(dashed)
    os.remove(dir)
    assert.are.equal(0, code)
    assert.are.equal(LEAKS, stdout)
  end)

  it('finds its library when installed under a prefix', function()
    local prefix = os.tmpname()
    os.remove(prefix)
    local lib = prefix .. '/share/lua/5.1/memprof'
    local setup = table.concat({
      'mkdir -p ' .. quote(prefix .. '/bin') .. ' ' .. quote(lib),
      'cp bin/memprof-report ' .. quote(prefix .. '/bin/'),
      'cp -r lua/memprof/. ' .. quote(lib .. '/'),
    }, ' && ')
    local code = run(setup)
    assert.are.equal(0, code)
    -- From another directory, with no LUA_PATH pointing at the tree.
    local stdout
    code, stdout = run('cd / && env -u LUA_PATH ' ..
      quote(prefix .. '/bin/memprof-report') .. ' --leak-only ' ..
      '--human-readable ' .. quote(path))
    run('rm -rf ' .. quote(prefix))
    assert.are.equal(0, code)
    assert.are.equal(LEAKS, stdout)
  end)
end)

describe('memprof-report views', function()
  after_each(remove_temp_files)

  local function file_of(builder)
    return temp_file(builder:bytes())
  end

  it('groups by caller and prints the views asked for', function()
    local path = file_of(B.three_callers())
    local code, stdout, stderr = report('--group=caller', '--leaks', '--top',
      '2', path)
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    assert.are.equal([[
Grouped by caller: each row is the Lua line that called the function where the events happened.

LIVE AT END (by bytes): blocks allocated during the profile and never freed, by where they were allocated (for a reallocated block, where it was last reallocated)
@app.lua:20: 2 blocks, 400B
	2 blocks, 400B allocated at:
		string.format
		@log.lua:5
		@app.lua:20
@app.lua:30: 1 block, 300B
	1 block, 300B allocated at:
		string.format
		@log.lua:5
		@app.lua:30
... and 3 more: 3 blocks, 128B
TOTAL live at end: 6 blocks, 828B
Freed during the profile, allocated before it: 24B
Net bytes of the stream: 804B
The profile ended without a collection at stop (only memprof.stop() with collect_at_stop = true collects; a profile completed at lua_close or exit does not): some of these blocks may be unreachable.

]], stdout)
  end)

  it('prints the views in a fixed order, whatever the order asked',
    function()
      local path = file_of(B.peak_payload())
      local code, stdout = report('--timeline', '--temporary=0', '--peak',
        path)
      assert.are.equal(0, code)
      local peak = stdout:find('PEAK (by bytes): 570B above the heap at ' ..
        'the start (which this profile does not record), after event 5', 1,
        true)
      local temporary = stdout:find('TEMPORARY BLOCKS (by bytes): freed before any ' ..
        'other allocation', 1, true)
      local timeline = stdout:find('HEAP OVER TIME: net bytes since the ' ..
        'start, 0.1 ms per row', 1, true)
      assert.is_true(peak < temporary and temporary < timeline)
      assert.is_nil(stdout:find('LIVE AT END', 1, true))
    end)

  it('groups the default report when asked', function()
    local path = file_of(B.three_callers())
    local code, stdout = report('--group=function', '--leak-only', path)
    assert.are.equal(0, code)
    assert.are.equal([[
Grouped by function: each row is the function where the events happened, named by where it is defined.

HEAP SUMMARY (by bytes held):
function at @log.lua:3 holds 764B: 7 allocs, 3 frees
io_lines holds 48B: 1 allocs, 0 frees
TRACE started at @app.lua:70 (1 trace) holds 16B: 1 allocs, 0 frees
(blocks allocated before the profile): 1 freed or reallocated during the profile, 24B
TOTAL holds 804B (net bytes of the stream)

]], stdout)
  end)

  it('says what a version 3 profile lacks for the view asked', function()
    local v3 = file_of(B.crafted())
    local cases = {
      { { '--group=caller' }, 'memprof-report: --group=caller needs call ' ..
        'stacks: record with memprof.start(path, {stack_depth = N})\n' },
      { { '--group=stack', '--leaks' }, 'memprof-report: --group=stack ' ..
        'needs call stacks: record with memprof.start(path, ' ..
        '{stack_depth = N})\n' },
      { { '--timeline' }, 'memprof-report: --timeline needs time marks: ' ..
        'record with memprof.start(path, {timestamps = true})\n' },
    }
    for _, case in ipairs(cases) do
      local args = case[1]
      args[#args + 1] = v3
      local code, stdout, stderr = report(unpack(args))
      assert.are.equal(1, code)
      assert.are.equal('', stdout)
      assert.are.equal(case[2], stderr)
    end
    -- The views that need neither work on version 3 profiles.
    local code, stdout, stderr = report('--group=function', '--leaks',
      '--peak', '--temporary', v3)
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    assert.matches('\nPEAK %(by bytes%): 320B above the heap at the ' ..
      'start %(which this profile does not record%), after event 5 %(byte ' ..
      '58 of the file%)%. ' ..
      'Held by:\n', stdout)
  end)

  it('says what an extended profile lacks, once it is read', function()
    local no_stacks = file_of(B.peak_payload())
    local code, stdout, stderr = report('--group=stack', no_stacks)
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal('memprof-report: --group=stack needs call stacks: ' ..
      'record with memprof.start(path, {stack_depth = N})\n', stderr)
    local no_time = file_of(B.three_callers())
    code, stdout, stderr = report('--group=caller', '--timeline', no_time)
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal('memprof-report: --timeline needs time marks: record ' ..
      'with memprof.start(path, {timestamps = true})\n', stderr)
  end)

  it('reports errors in extended profiles with their offset', function()
    local s = B.new():lfunc(0x100, '@a.lua', 1):events({ version = B.EXTENDED })
    s:alloc(B.internal(), 0x10, 8)
    local at = s:size() + 1 + #B.uleb(0x100) + #B.uleb(3)
    s:alloc(B.lua(0x100, 3, 4), 0x20, 8):epilogue()
    local path = file_of(s)
    local code, stdout, stderr = report('--leaks', path)
    assert.are.equal(1, code)
    assert.are.equal('', stdout)
    assert.are.equal(('memprof-report: %s: byte %d: expected the id of a ' ..
      'stack defined earlier in the stream (none is defined yet), found 4\n')
      :format(path, at), stderr)
  end)
end)

describe('memprof-report --format', function()
  local dir

  before_each(function()
    dir = C.temp_dir()
  end)

  after_each(function()
    C.remove_tree(dir)
  end)

  local function file_of(builder)
    local p = dir .. '/p.bin'
    write_file(p, builder:bytes())
    return p
  end

  it('writes text by default, and to a file with --output', function()
    local path = file_of(B.three_callers())
    local _, default = report('--leaks', '--group=caller', path)
    local code, stdout, stderr = report('--format=text', '--leaks',
      '--group=caller', path)
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    assert.are.equal(default, stdout)
    code, stdout, stderr = report('--leaks', '--group=caller',
      '--output=' .. dir .. '/r.txt', path)
    assert.are.equal(0, code)
    assert.are.equal('', stdout)
    assert.are.equal('memprof-report: wrote ' .. dir .. '/r.txt\n', stderr)
    assert.are.equal(default, read_file(dir .. '/r.txt'))
  end)

  it('takes --output=- as stdout, and makes no file named -', function()
    local path = file_of(B.three_callers())
    local cases = {
      { '--leaks', '--group=caller' },
      { '--format=json', '--group=function' },
      { '--format=folded', '--metric=alloc-count' },
      { '--format=folded' },
      { '--diff', path },
    }
    for _, args in ipairs(cases) do
      args[#args + 1] = path
      local plain = { report(unpack(args)) }
      table.insert(args, 1, '--output=-')
      local dashed = { report(unpack(args)) }
      assert.are.same(plain, dashed)
      assert.are.equal(0, dashed[1])
      assert.are.equal('', dashed[3])
      assert.truthy(#dashed[2] > 0)
    end
    assert.is_nil(io.open('-'))
  end)

  it('writes JSON with the grouping and limit asked for', function()
    local path = file_of(B.three_callers())
    local code, stdout, stderr = report('--format=json', '--group=function',
      '--temporary=0', path)
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    local doc = require('cjson').decode(stdout)
    assert.are.equal(path, doc.stream.name)
    assert.are.equal('function', doc.grouping)
    assert.are.equal(0, doc.temporary.limit)
    assert.are.equal('function at @log.lua:3', doc.live.rows[1].name)
    assert.are.equal(764, doc.live.rows[1].bytes)
  end)

  it('takes --focus and --ignore in every format and in --diff',
    function()
      local path = file_of(B.three_callers())
      -- Stack 2 (through @app.lua:20) holds 400B in two blocks.
      local code, stdout, stderr = report('--format=json', '--focus=app.lua:20',
        path)
      assert.are.same({ 0, '' }, { code, stderr })
      local cjson = require('cjson')
      local doc = cjson.decode(stdout)
      assert.are.same({ focus = 'app.lua:20', ignore = cjson.null },
        doc.filter)
      assert.are.same({ 1, '@log.lua:5', 400, 2 }, { #doc.live.rows,
        doc.live.rows[1].name, doc.live.rows[1].bytes,
        doc.live.rows[1].blocks })
      code, stdout, stderr = report('--format=folded', '--metric=live-bytes',
        '--ignore=log.lua', path)
      assert.are.same({ 0, '' }, { code, stderr })
      assert.are.equal('@app.lua:60;io_lines 48\n' ..
        'TRACE started at @app.lua:70 16\n', stdout)
      code, stdout, stderr = report('--format=html', '--focus=app.lua:20',
        path)
      assert.are.same({ 0, '' }, { code, stderr })
      assert.truthy(stdout:find("<li>blocks <b>Only the blocks allocated " ..
        "where the place or its stack names &#39;app.lua:20&#39; " ..
        '(--focus): every figure counts them alone.</b></li>', 1, true))
      code, stdout, stderr = report('--diff', '--focus=app.lua:20', path,
        path)
      assert.are.same({ 0, '' }, { code, stderr })
      assert.are.equal("Only the blocks allocated where the place or its " ..
        "stack names 'app.lua:20' (--focus): every figure counts them " ..
        'alone.\n\n', stdout:match('^.-\n\n'))
    end)

  it('dispatches to memprof.report.html', function()
    local path = file_of(B.three_callers())
    local html = require('memprof.report.html')
    local reader = require('memprof.read.stream')
    local analyze = require('memprof.analysis.analyze')
    local result = analyze.run(reader.open(path), { views = { leaks = true,
      peak = true, temporary = true, timeline = true },
      passes = html.passes and html.passes() })
    local parts = {}
    html.write(result, { write = function(self, ...)
      for i = 1, select('#', ...) do
        parts[#parts + 1] = select(i, ...)
      end
      return self
    end }, {})
    local code, stdout, stderr = report('--format=html', path)
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    assert.are.equal(table.concat(parts), stdout)
  end)

  it('finishes the timeline and the page of a time mark of 2^62 ns',
    function()
      local path = file_of(B.far_mark())
      local code, stdout, stderr = run('timeout 60 ' ..
        C.command(COMMAND, '--timeline', path))
      assert.are.same({ 0, '' }, { code, stderr })
      assert.are.equal('HEAP OVER TIME: net bytes since the start, ' ..
        '100000000 s per row (the highest value in the row, and the value at its end)\n' ..
        '        time  highest  at end\n' ..
        '         0 s     100B    100B  ' .. ('#'):rep(27) .. '\n',
        stdout:match('^.-\n.-\n.-\n'))
      assert.are.equal('4600000000 s     150B     50B  ' .. ('#'):rep(40) ..
        '  <- peak\n\n', stdout:match('[^\n]*\n\n$'))
      assert.are.equal(50, select(2, stdout:gsub('\n', '')))
      code, stdout, stderr = run('timeout 60 ' ..
        C.command(COMMAND, '--format=html', path))
      assert.are.same({ 0, '' }, { code, stderr })
      assert.truthy(stdout:find('>peak 150 B at 4611686018 s</text>', 1,
        true))
    end)

  it('names traces by where they start, or by number with --split-traces',
    function()
      local path = file_of(B.compiled_loop())
      local function output(...)
        local code, stdout = report(...)
        assert.are.equal(0, code)
        return stdout
      end
      local merged, split = 'TRACE started at @fill.lua:3',
        { 'TRACE [1] started at @fill.lua:3', 'TRACE [2] started at @fill.lua:3' }
      -- text
      assert.truthy(output(path):find('\n' .. merged ..
        ' (2 traces): 4 events\t+256B\t-0B\n', 1, true))
      local text = output('--split-traces', path)
      assert.truthy(text:find('\n' .. split[1] .. ': 2 events\t+128B\t-0B\n',
        1, true))
      assert.truthy(text:find('\n' .. split[2] .. ': 2 events\t+128B\t-0B\n',
        1, true))
      assert.is_nil(text:find(merged, 1, true))
      -- json: the names of the trace sites
      local cjson = require('cjson')
      local function trace_sites(...)
        local names = {}
        for _, site in ipairs(cjson.decode(output('--format=json', ...)).sites) do
          if site.source == 'trace' then
            names[#names + 1] = site.name
          end
        end
        return names
      end
      assert.are.same({ merged }, trace_sites(path))
      assert.are.same(split, trace_sites('--split-traces', path))
      -- folded
      assert.are.equal('@main.lua:10;@fill.lua:3 32\n' ..
        '@main.lua:10;' .. split[1] .. ' 128\n' ..
        '@main.lua:10;' .. split[2] .. ' 64\n' ..
        '@main.lua:20;@fill.lua:3 32\n' ..
        '@main.lua:20;' .. split[2] .. ' 64\n',
        output('--format=folded', '--split-traces', path))
      -- chrome: who held the peak
      local function held_by(...)
        for _, event in ipairs(cjson.decode(output('--format=chrome',
          ...)).traceEvents) do
          if event.name == 'peak' then
            return event.args.held_by
          end
        end
      end
      assert.are.same({ [merged] = 256, ['@fill.lua:3'] = 64 }, held_by(path))
      assert.are.same({ [split[1]] = 128, [split[2]] = 128,
        ['@fill.lua:3'] = 64 }, held_by('--split-traces', path))
      -- pprof: the function names in the string table
      local gz = dir .. '/p.pb.gz'
      output('--format=pprof', '--split-traces', '--output=' .. gz, path)
      local _, proto = C.run('gzip -dc ' .. C.quote(gz))
      assert.truthy(proto:find(split[2], 1, true))
      assert.is_nil(proto:find(merged, 1, true))
      -- html
      local page = output('--format=html', '--split-traces', path)
      assert.truthy(page:find(split[1], 1, true))
      assert.is_nil(page:find(merged, 1, true))
      -- --diff
      assert.truthy(output('--diff', '--split-traces', path, path):find(
        '\n(4 rows unchanged)\n', 1, true))
    end)

  it('refuses what a format cannot do', function()
    local v3 = file_of(B.crafted())
    local cases = {
      { { '--format=xml' }, "memprof-report: option '--format': expected " ..
        'text, json, folded, pprof, chrome, html, heapsnapshot, found xml ' ..
        '(see --help)\n' },
      { { '--format=json', '--top=2' }, 'memprof-report: --top does not ' ..
        'apply to --format=json (see --help)\n' },
      { { '--format=chrome', '--leaks' }, 'memprof-report: --leaks does not ' ..
        'apply to --format=chrome (see --help)\n' },
      { { '--format=json', '--group=caller' }, 'memprof-report: ' ..
        '--group=caller needs call stacks: record with memprof.start(path, ' ..
        '{stack_depth = N})\n' },
      { { '--format=json', '--output=/nonexistent/x.json' }, 'memprof-report: ' ..
        '/nonexistent/x.json: No such file or directory\n' },
    }
    for _, case in ipairs(cases) do
      local args = case[1]
      args[#args + 1] = v3
      local code, stdout, stderr = report(unpack(args))
      assert.are.equal(1, code)
      assert.are.equal('', stdout)
      assert.are.equal(case[2], stderr)
    end
  end)
end)

describe('cli.parse', function()
  it('separates options from files', function()
    local opts, files = cli.parse({ 'a.bin', '--leak-only', '--', '--x' })
    assert.are.same({ leak_only = true }, opts)
    assert.are.same({ 'a.bin', '--x' }, files)
  end)

  it('takes options with values', function()
    assert.are.same({ { top = 5 }, { 'f' } }, { cli.parse({ '--top', '5', 'f' }) })
    assert.are.same({ { top = 7 }, { 'f' } }, { cli.parse({ 'f', '--top=7' }) })
    assert.are.same({ nil, "option '--top' needs a value (N)" },
      { cli.parse({ '--top' }) })
    assert.are.same({ nil, "option '--top': expected a whole number of at " ..
      'least 1, found x' }, { cli.parse({ '--top=x' }) })
    assert.are.same({ nil, "option '--top': expected a whole number of at " ..
      'least 1, found 2.5' }, { cli.parse({ '--top=2.5' }) })
    assert.are.same({ { group = 'stack', sort = 'count' }, { 'f' } },
      { cli.parse({ '--group', 'stack', '--sort=count', 'f' }) })
  end)

  it('takes an optional value only after =', function()
    assert.are.same({ { temporary = 1 }, { 'f' } },
      { cli.parse({ '--temporary', 'f' }) })
    assert.are.same({ { temporary = 0 }, { 'f' } },
      { cli.parse({ '--temporary=0', 'f' }) })
    -- A value after a space is a mistake, said so when the option would
    -- take it; a word it would not take is a file.
    assert.are.same({ nil, "option '--temporary' takes its value after " ..
      "'=': write --temporary=3" }, { cli.parse({ '--temporary', '3', 'f' }) })
    assert.are.same({ { temporary = 1 }, { '3.5', 'f' } },
      { cli.parse({ '--temporary', '3.5', 'f' }) })
    assert.are.same({ { leaks = true, peak = true, timeline = true }, { 'f' } },
      { cli.parse({ '--leaks', '--peak', '--timeline', 'f' }) })
  end)

  it('takes more options once they are described', function()
    table.insert(cli.OPTIONS, { name = 'color', value = 'C', key = 'color',
      help = 'the colour',
      check = function(value)
        if value == 'red' then
          return value
        end
        return nil, 'expected red, found ' .. value
      end })
    local ok, err = pcall(function()
      assert.are.same({ { color = 'red' }, { 'f' } },
        { cli.parse({ '--color', 'red', 'f' }) })
      assert.are.same({ nil, "option '--color': expected red, found x" },
        { cli.parse({ '--color=x' }) })
    end)
    table.remove(cli.OPTIONS)
    assert(ok, err)
  end)

  it('stops at the first word that is not an option when asked', function()
    assert.are.same({ { top = 2 }, { 'script.lua', '--top=3', 'x' } },
      { cli.parse({ '--top=2', 'script.lua', '--top=3', 'x' },
        { stop = true }) })
    assert.are.same({ { top = 2 }, { '-script.lua', 'x' } },
      { cli.parse({ '--top=2', '--', '-script.lua', 'x' }, { stop = true }) })
  end)

  it('returns exit codes from main', function()
    local out = { data = '', write = function(self, ...)
      self.data = self.data .. table.concat({ ... })
    end }
    local err = { data = '', write = out.write }
    assert.are.equal(1, cli.main({ '--nope' }, out, err))
    assert.are.equal("memprof-report: unknown option '--nope' (see --help)\n",
      err.data)
    assert.are.equal(0, cli.main({ '--help' }, out, err))
  end)
end)
