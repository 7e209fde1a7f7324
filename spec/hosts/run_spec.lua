-- Specs for `memprof run` (bin/memprof, memprof.cli.run): a script profiled
-- in a child process without being edited.  memprof runs under the
-- interpreter being tested (MEMPROF_TEST_LUA, default luajit), so the
-- script does too; a spec runs it under tarantool with --lua.  Needs
-- build/memprof.so: LuaJIT hosts only.

local run = require('memprof.cli.run')
local reader = require('memprof.read.stream')
local C = require('helpers.command')

local LUA = os.getenv('MEMPROF_TEST_LUA') or 'luajit'
local MEMPROF = os.getenv('PWD') .. '/bin/memprof'

-- Writes its arguments (and arg[-1], arg[0]) one per line to the file
-- named by its first argument; keeps 100 tables made at line 5; prints
-- a line on stdout; then exits (arg[2] = 'exit', with code arg[3]) or
-- fails (arg[2] = 'fail').
local SCRIPT = [[
local out = assert(io.open(arg[1], 'w'))
out:write(tostring(arg[-1]), '\n', arg[0], '\n', table.concat(arg, '\n'), '\n')
out:close()
local keep = {}
for i = 1, 100 do keep[i] = { i } end
_G.keep = keep
io.write('the output of app.lua\n')
if arg[2] == 'exit' then os.exit(tonumber(arg[3])) end
if arg[2] == 'fail' then error('failed on purpose') end
]]

local OUTPUT = 'the output of app.lua\n'

-- The row of `name` in the HEAP SUMMARY of a report, or nil.
local function heap_row(report, name)
  local summary = report:match('HEAP SUMMARY %(by bytes held%):\n(.*)$')
  for line in (summary or ''):gmatch('[^\n]+') do
    if line:sub(1, #name + 7) == name .. ' holds ' and
        line:find('^.- holds %-?[%d,]+B: %d+ allocs, %d+ frees') then
      return line
    end
  end
  return nil
end

describe('memprof run', function()
  local dir

  before_each(function()
    dir = C.temp_dir()
    C.write_file(dir .. '/app.lua', SCRIPT)
  end)

  after_each(function()
    C.remove_tree(dir)
  end)

  -- Runs memprof in dir under LUA; returns exit code, stdout, stderr.
  local function memprof(...)
    return C.run('cd ' .. C.quote(dir) .. ' && timeout 120 ' ..
      C.command(LUA, MEMPROF, ...))
  end

  local function lines_of(path)
    local list = {}
    for line in C.read_file(path):gmatch('([^\n]*)\n') do
      list[#list + 1] = line
    end
    return list
  end

  it('runs the script with its arguments and prints the report on stderr',
    function()
    local code, stdout, stderr = memprof('run', 'app.lua', 'args.txt', 'b c',
      '')
    assert.are.equal(0, code)
    -- stdout is the script's alone.
    assert.are.equal(OUTPUT, stdout)
    -- arg[-1] is what the interpreter shows a script it runs directly.
    C.write_file(dir .. '/self.lua', 'io.write(tostring(arg[-1]))')
    local _, self = C.run('cd ' .. C.quote(dir) .. ' && timeout 120 ' ..
      C.command(LUA, 'self.lua'))
    assert.are.same({ self, 'app.lua', 'args.txt', 'b c', '' },
      lines_of(dir .. '/args.txt'))
    assert.truthy(stderr:find('^memprof: app.lua exited with 0; profile in ' ..
      'memprof%-app.bin\nALLOCATIONS %(by bytes allocated%)\n'))
    assert.truthy(stderr:find('\n@app.lua:5: %d+ events\t%+[%d,]+B\t%-0B\n'))
    -- (The byte counts depend on the VM and the JIT, the rows do not.)
    assert.truthy(heap_row(stderr, '@app.lua:5'))
    -- The profile is where it said.
    local stream = reader.open(dir .. '/memprof-app.bin')
    assert.are.equal(3, stream.version)
    stream:close()
  end)

  it('fails as the interpreter would on a script it cannot open, and ' ..
    'leaves no file', function()
      local code, stdout, stderr = memprof('run', 'nosuch.lua')
      assert.are.same({ 1, '', 'memprof run: cannot open nosuch.lua: No ' ..
        'such file or directory\n' }, { code, stdout, stderr })
      code, stdout, stderr = memprof('run', '.')
      assert.are.same({ 1, '', 'memprof run: cannot read .: Is a ' ..
        'directory\n' }, { code, stdout, stderr })
      local _, listing = C.run('ls -A ' .. C.quote(dir))
      assert.are.equal('app.lua\n', listing)
    end)

  it('passes on the exit status of the script', function()
    local code, stdout, stderr = memprof('run', '-o', 'exit.bin',
      '--leak-only', 'app.lua', 'args.txt', 'exit', '7')
    assert.are.equal(7, code)
    assert.are.equal(OUTPUT, stdout)
    assert.truthy(stderr:find('^memprof: app.lua exited with 7; profile in ' ..
      'exit.bin\nHEAP SUMMARY %(by bytes held%):\n'))
    assert.truthy(heap_row(stderr, '@app.lua:5'))
    code, stdout, stderr = memprof('run', '-o', 'fail.bin', '--leak-only',
      'app.lua', 'args.txt', 'fail')
    assert.are.equal(1, code)
    assert.truthy(stderr:find('failed on purpose', 1, true))
    assert.truthy(stderr:find('memprof: app.lua exited with 1; profile in ' ..
      'fail.bin\nHEAP SUMMARY (by bytes held):\n', 1, true))
    assert.are.equal(OUTPUT, stdout)
    assert.truthy(C.read_file(dir .. '/fail.bin'))
  end)

  it('records stacks and time marks, and writes the format asked for',
    function()
      local code, stdout, stderr = memprof('run', '--profile=deep.bin',
        '--stack-depth', '8', '--timestamps', '--format=folded',
        '--metric=live-bytes', 'app.lua', 'args.txt')
      assert.are.equal(0, code)
      assert.are.equal(OUTPUT, stdout)
      assert.truthy(stderr:find('@app.lua:5 %d+\n'))
      local stream = reader.open(dir .. '/deep.bin')
      while stream:next() do end
      assert.are.equal(100, stream.version)
      assert.is_true(stream.has_stacks)
      assert.is_true(stream.has_time)
    end)

  it('caps the profile with --max-bytes and says so', function()
    C.write_file(dir .. '/many.lua',
      'local keep = {}\nfor i = 1, 100000 do keep[i] = {} end\n')
    local code, stdout, stderr = memprof('run', '-o', 'cap.bin',
      '--max-bytes', '20000', 'many.lua')
    assert.are.equal(0, code)
    -- Tarantool ends a script without closing its VM (and without
    -- os.exit): nothing can say it then.
    assert.are.equal((LUA:match('[^/]*$'):find('^tarantool') and '' or
      'memprof: cap.bin: profile reached max_bytes (20000)\n') ..
      'memprof: many.lua exited with 0; profile in cap.bin\n' ..
      'ALLOCATIONS (by bytes allocated)\n',
      stderr:match('^.-ALLOCATIONS[^\n]*\n'))
    assert.are.equal('', stdout)
    local size = #C.read_file(dir .. '/cap.bin')
    assert.is_true(size <= 20000 and size > 19000, 'size ' .. size)
    local stream = reader.open(dir .. '/cap.bin')
    while stream:next() do end
    assert.is_nil(stream.warning)
    -- Also when the script ends with os.exit (the VM is not closed).
    C.write_file(dir .. '/quits.lua', 'local keep = {}\n' ..
      'for i = 1, 100000 do keep[i] = {} end\nos.exit(3)\n')
    code, stdout, stderr = memprof('run', '-o', 'quits.bin',
      '--max-bytes=20000', 'quits.lua')
    assert.are.equal(3, code)
    assert.are.equal('memprof: quits.bin: profile reached max_bytes ' ..
      '(20000)\nmemprof: quits.lua exited with 3; profile in quits.bin\n' ..
      'ALLOCATIONS (by bytes allocated)\n',
      stderr:match('^.-ALLOCATIONS[^\n]*\n'))
  end)

  it('samples with --sample-bytes and --seed, and reports estimates',
    function()
    C.write_file(dir .. '/big.lua', 'local keep = {}\n' ..
      "for i = 1, 50 do keep[i] = string.rep('x', 100000 + i) end\n")
    local code, stdout, stderr = memprof('run', '-o', 'sampled.bin',
      '--sample-bytes=4096', '--seed=9', 'big.lua')
    assert.are.same({ 0, '' }, { code, stdout })
    assert.are.equal('memprof: big.lua exited with 0; profile in ' ..
      'sampled.bin\nsampled: one sample per 4096 bytes on average; ' ..
      'figures are estimates\n\nALLOCATIONS (by bytes allocated)\n',
      stderr:match('^.-ALLOCATIONS[^\n]*\n'))
    local stream = reader.open(dir .. '/sampled.bin')
    local strings = 0
    -- (At line 2, or in its trace when the loop is compiled.)
    for ev in stream:each() do
      if ev.kind == 'alloc' and ev.nsize > 100000 and ev.nsize < 100100 then
        strings = strings + 1
      end
    end
    -- Blocks of 100 KB at one sample per 4 KB: all 50 are sampled.
    assert.are.same({ 4096, 50 }, { stream.sample_bytes, strings })
    -- Without a number, one sample per 512 KiB.
    code = memprof('run', '-o', 'default.bin', '--sample-bytes', 'big.lua')
    assert.are.equal(0, code)
    assert.are.equal(524288, reader.open(dir .. '/default.bin').sample_bytes)
  end)

  it('refuses --seed without --sample-bytes, and a rate of 0', function()
    local code, stdout, stderr = memprof('run', '--seed=1', 'app.lua')
    assert.are.same({ 1, '', 'memprof run: --seed needs --sample-bytes ' ..
      '(see memprof run --help)\n' }, { code, stdout, stderr })
    code, stdout, stderr = memprof('run', '--sample-bytes=0', 'app.lua')
    assert.are.same({ 1, '', "memprof run: option '--sample-bytes': " ..
      'expected a whole number of bytes from 1 to 2^53, found 0 (see ' ..
      'memprof run --help)\n' }, { code, stdout, stderr })
  end)

  it('reports the script\'s own file of a path with %p', function()
    -- The script makes 100 tables at line 6 after its child, which makes
    -- 50 at line 4 and writes a file of its own, has ended.
    C.write_file(dir .. '/forks.lua', [[
local ffi = require('ffi')
ffi.cdef('int fork(void); int waitpid(int, int *, int); int getpid(void);')
local pid = ffi.C.fork()
if pid == 0 then local k = {} for i = 1, 50 do k[i] = {} end os.exit(0) end
ffi.C.waitpid(pid, nil, 0)
local keep = {} for i = 1, 100 do keep[i] = {} end
print(ffi.C.getpid(), pid)
]])
    local code, stdout, stderr = memprof('run', '-o', 'p-%p.bin',
      '--leak-only', 'forks.lua')
    assert.are.equal(0, code)
    local parent, child = stdout:match('^(%d+)\t(%d+)\n$')
    assert.are.equal('memprof: forks.lua exited with 0; profile in p-' ..
      parent .. '.bin\n', stderr:match('^[^\n]*\n'))
    assert.truthy(heap_row(stderr, '@forks.lua:6'))
    assert.is_nil(heap_row(stderr, '@forks.lua:4'))
    local _, child_report = memprof('report', '--leak-only',
      'p-' .. child .. '.bin')
    assert.truthy(heap_row(child_report, '@forks.lua:4'))
    assert.is_nil(heap_row(child_report, '@forks.lua:6'))
  end)

  it('prints its usage', function()
    for _, args in ipairs({ { '--help' }, { 'run', '--help' } }) do
      local code, stdout, stderr = memprof(unpack(args))
      assert.are.equal(0, code)
      assert.are.equal('', stderr)
      assert.are.equal([[
Usage: memprof run [OPTIONS] SCRIPT [ARGS...]
       memprof report [OPTIONS] FILE  (as memprof-report)
       memprof heap [-o FILE] PID     (a running process's heap)
       memprof live [OPTIONS] FILE|PID (watch a profile being written)
       memprof attach [OPTIONS] PID   (profile a running process)
       memprof detach PID             (stop that profile)

Run a Lua script under the profiler, without editing it, then print
the report of its profile (or the --format asked for) on stderr, or
into the file of --output: stdout is the script's.  The script runs
in a child process (--lua, default the interpreter running memprof)
with its arguments; memprof exits with its exit status.  A %p in
PROFILE is the process id: processes the script forks write
profiles of their own, and the report is of the script's.

Options of run:
  -o, --profile=PROFILE  write the profile there (default memprof-SCRIPT.bin)
  --stack-depth=N        record call stacks of at most N frames (1 to 64)
  --timestamps           record time marks (for --timeline and the chrome format)
  --max-bytes=N          stop recording when the profile reaches N bytes
  --sample-bytes[=N]     sample: one allocation per N bytes on average (524288)
  --seed=S               seed the sampling (a run samples the same allocations)
  --trace-lines=MODE     compiled code by line: exact, walk, resume or start (see docs)
  --lua=CMD              run the script with CMD (luajit, tarantool, ...)
  -h, --help             show this help and exit

And the options of memprof-report (memprof-report --help).
]], stdout)
    end
  end)

  it('reports a profile with memprof report', function()
    C.write_file(dir .. '/p.bin', require('helpers.stream_builder').crafted()
      :bytes())
    local code, stdout, stderr = memprof('report', '--leak-only', 'p.bin')
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    local _, direct = C.run('cd ' .. C.quote(dir) .. ' && ' ..
      C.command(os.getenv('PWD') .. '/bin/memprof-report', '--leak-only',
        'p.bin'))
    assert.are.equal(direct, stdout)
  end)

  it('says what is wrong with its command line', function()
    local cases = {
      { { 'run' }, 'memprof run: no script given (see memprof run --help)\n' },
      { { 'run', '--stack-depth=65', 'app.lua' }, "memprof run: option " ..
        "'--stack-depth': expected a whole number from 1 to 64, found 65 " ..
        '(see memprof run --help)\n' },
      { { 'run', '--top=2', '--format=pprof', 'app.lua' }, 'memprof run: ' ..
        '--top does not apply to --format=pprof (see memprof run --help)\n' },
      { { 'run', '--format=pprof', 'app.lua' }, 'memprof run: ' ..
        '--format=pprof writes binary data: give --output=FILE (see ' ..
        'memprof run --help)\n' },
      { { 'run', '--output=-', 'app.lua' }, 'memprof run: --output=- ' ..
        "would mix the report into the script's output: leave --output " ..
        'out (the report goes to stderr) or give a file (see memprof run ' ..
        '--help)\n' },
      { { 'run', '--temporary', '5', 'app.lua' }, "memprof run: option " ..
        "'--temporary' takes its value after '=': write --temporary=5 " ..
        '(see memprof run --help)\n' },
      { { 'run', '--stackdepth=8', 'app.lua' }, "memprof run: unknown " ..
        "option '--stackdepth=8'; did you mean --stack-depth? (see " ..
        'memprof run --help)\n' },
      { { 'walk' }, "memprof: unknown command 'walk' (see memprof --help)\n" },
      { { 'app.lua' }, "memprof: unknown command 'app.lua'; to profile " ..
        'it: memprof run app.lua (see memprof --help)\n' },
      { {}, 'memprof: no command given (see memprof --help)\n' },
    }
    for _, case in ipairs(cases) do
      local code, stdout, stderr = memprof(unpack(case[1]))
      assert.are.equal(1, code)
      assert.are.equal('', stdout)
      assert.are.equal(case[2], stderr)
    end
    -- Options after the script are the script's.
    local code, stdout, stderr = memprof('run', '-o', 'x.bin',
      '--output=r.txt', 'app.lua', 'args.txt', '--top=2')
    assert.are.equal(0, code)
    assert.are.equal(OUTPUT, stdout)
    assert.are.equal('memprof: app.lua exited with 0; profile in x.bin\n' ..
      'memprof-report: wrote r.txt\n', stderr)
    assert.are.equal('--top=2', lines_of(dir .. '/args.txt')[4])
    assert.truthy(heap_row(C.read_file(dir .. '/r.txt'), '@app.lua:5'))
  end)

  it('prints its version and the interpreter it runs on', function()
    local _, interpreter = C.run(C.command(LUA, '-e',
      'io.write(jit and jit.version or _VERSION)'))
    local code, stdout, stderr = memprof('--version')
    assert.are.same({ 0, '' }, { code, stderr })
    assert.are.equal('memprof ' .. require('memprof.version').VERSION ..
      ' (' .. interpreter .. ')\n', stdout)
  end)

  it('runs scripts under tarantool', function()
    if not C.have('tarantool') then
      error('this spec needs tarantool (Debian package tarantool)')
    end
    local code, stdout, stderr = memprof('run', '--lua=tarantool', '-o',
      't.bin', '--leak-only', 'app.lua', 'args.txt', 'exit', '5')
    assert.are.equal(5, code)
    assert.are.equal(OUTPUT, stdout)
    assert.truthy(stderr:find('^memprof: app.lua exited with 5; profile in ' ..
      't.bin\nHEAP SUMMARY %(by bytes held%):\n'))
    assert.truthy(heap_row(stderr, '@app.lua:5'))
    local args = lines_of(dir .. '/args.txt')
    assert.truthy(args[1]:find('tarantool$'))
    assert.are.same({ 'app.lua', 'args.txt', 'exit', '5' },
      { args[2], args[3], args[4], args[5] })
  end)
end)

describe('memprof.cli.run helpers', function()
  it('decodes exit statuses', function()
    assert.are.equal(0, run.exit_code(0))
    assert.are.equal(3, run.exit_code(768))
    assert.are.equal(137, run.exit_code(9))
    assert.are.equal(3, run.exit_code(nil, 'exit', 3))
    assert.are.equal(0, run.exit_code(true, 'exit', 0))
    assert.are.equal(143, run.exit_code(nil, 'signal', 15))
  end)

  it('names the default profile after the script', function()
    assert.are.equal('memprof-app.bin', run.default_profile('dir/app.lua'))
    assert.are.equal('memprof-tool.bin', run.default_profile('tool'))
  end)
end)
