-- memprof.cli.run: the memprof command, which profiles a whole script.
--
--   memprof run [-o PROFILE] [--stack-depth N] [--timestamps]
--               [--sample-bytes[=N] [--seed=S]] [--lua=CMD]
--               [--trace-lines=exact|walk|resume|start]
--               [REPORT OPTIONS] SCRIPT [ARGS...]
--   memprof report [OPTIONS] FILE     (the same as memprof-report)
--   memprof heap [-o FILE] [--vm=N] PID (memprof.cli.heap_pid)
--   memprof live [OPTIONS] FILE|PID  (memprof.cli.live)
--   memprof attach [OPTIONS] PID, memprof detach PID (memprof.cli.attach)
--
--   run.main(args, out, err [, how]) -> exit code
--     how.self   the interpreter running memprof (default: the lowest
--                entry of the global arg table, as `luajit` or
--                `/usr/bin/tarantool`)
--     how.dir    the directory of the memprof script (to find
--                memprof.so next to it)
--
-- How a script is run: in a child process, `CMD -e WRAPPER SCRIPT
-- ARGS...`, where CMD is --lua (default: the interpreter memprof runs
-- under, when it is LuaJIT or Tarantool; `luajit` under plain Lua).
-- Both luajit and tarantool run the -e chunk before the script, in the
-- same Lua state, with `arg` already set for the script.  The wrapper
-- loads memprof.so by its path (package.loadlib, so the script's
-- package.cpath is untouched, and require('memprof') in the script
-- returns the same module), leaves in `arg` only what the script would
-- see (arg[0], its arguments, and the interpreter at arg[-1]), and
-- starts the profiler.  Nothing has to stop it: when the script ends,
-- fails, or calls os.exit, the module completes the file (at lua_close,
-- or in its exit handler).  A child process, rather than running the
-- script in this process, is what makes that robust: whatever the
-- script does to its process (os.exit, a crash, a signal), memprof is
-- still there to print the report, then exits with the script's status
-- (128 + N when a signal N killed it).
--
-- The report goes to stderr (or to the file of --output), never to
-- stdout, which is the script's: its output stays its own, and can be
-- piped or compared.  A binary format needs --output.

local cli = require('memprof.cli.report')
local version = require('memprof.version')
local launch = require('memprof.cli.launch')
local option_parser = require('memprof.cli.options')

local M = {}

local PROGRAM = 'memprof'
local format = string.format
local whole_number = option_parser.whole_number

-- memprof.start's sample_bytes = true: Go's heap profile rate
-- (docs/sampling.md).
M.DEFAULT_SAMPLE_BYTES = 524288

M.RUN_OPTIONS = {
  { name = 'profile', short = 'o', value = 'PROFILE', key = 'profile',
    help = 'write the profile there (default memprof-SCRIPT.bin)' },
  { name = 'stack-depth', value = 'N', key = 'stack_depth',
    check = whole_number(1, 64),
    help = 'record call stacks of at most N frames (1 to 64)' },
  { name = 'timestamps', key = 'timestamps',
    help = 'record time marks (for --timeline and the chrome format)' },
  { name = 'max-bytes', value = 'N', key = 'max_bytes',
    check = whole_number(64, 2 ^ 53, 'bytes'),
    help = 'stop recording when the profile reaches N bytes' },
  { name = 'sample-bytes', value = 'N', key = 'sample_bytes',
    optional = true, default = M.DEFAULT_SAMPLE_BYTES,
    check = whole_number(1, 2 ^ 53, 'bytes'),
    help = 'sample: one allocation per N bytes on average (524288)' },
  { name = 'seed', value = 'S', key = 'seed',
    check = whole_number(0, 2 ^ 53),
    help = 'seed the sampling (a run samples the same allocations)' },
  { name = 'trace-lines', value = 'MODE', key = 'trace_lines',
    check = function(value)
      if value ~= 'exact' and value ~= 'walk' and value ~= 'resume' and
        value ~= 'start' then
        return nil, 'expected exact, walk, resume or start, found ' .. value
      end
      return value
    end,
    help = 'compiled code by line: exact, walk, resume or start (see docs)' },
  { name = 'lua', value = 'CMD', key = 'lua',
    help = 'run the script with CMD (luajit, tarantool, ...)' },
  option_parser.HELP,
}

-- memprof-report's options that memprof run does not take.
local NOT_FOR_RUN = { diff = true, help = true, version = true,
  heap = true, heap_profile = true }

-- The options of memprof run: its own, then memprof-report's (but
-- --diff, --help, --version and those of heap snapshots).
local function run_options()
  local list = {}
  for _, option in ipairs(M.RUN_OPTIONS) do
    list[#list + 1] = option
  end
  for _, option in ipairs(cli.OPTIONS) do
    if not NOT_FOR_RUN[option.key] then
      list[#list + 1] = option
    end
  end
  return list
end

local USAGE = [[
Usage: {program} run [OPTIONS] SCRIPT [ARGS...]
       {program} report [OPTIONS] FILE  (as memprof-report)
       {program} heap [-o FILE] PID     (a running process's heap)
       {program} live [OPTIONS] FILE|PID (watch a profile being written)
       {program} attach [OPTIONS] PID   (profile a running process)
       {program} detach PID             (stop that profile)

Run a Lua script under the profiler, without editing it, then print
the report of its profile (or the --format asked for) on stderr, or
into the file of --output: stdout is the script's.  The script runs
in a child process (--lua, default the interpreter running memprof)
with its arguments; memprof exits with its exit status.  A %p in
PROFILE is the process id: processes the script forks write
profiles of their own, and the report is of the script's.

Options of run:
]]

local function usage()
  return option_parser.help(USAGE, M.RUN_OPTIONS,
    { 'And the options of memprof-report (memprof-report --help).' },
    { program = PROGRAM })
end

-- Finding things -----------------------------------------------------------

local shell_quote = launch.shell_quote
M.shell_quote = shell_quote

local function exists(path)
  local file = io.open(path, 'rb')
  if file then
    file:close()
    return true
  end
  return false
end

-- Where memprof.so is: next to the memprof script (the source tree's
-- build/, or lib/lua/5.1 of the prefix it is installed in), then along
-- package.cpath.
function M.find_module(dir)
  local candidates = {}
  if dir then
    candidates[1] = dir .. '/../build/memprof.so'
    candidates[2] = dir .. '/../lib/lua/5.1/memprof.so'
  end
  for template in package.cpath:gmatch('[^;]+') do
    candidates[#candidates + 1] = (template:gsub('%?', 'memprof'))
  end
  for _, path in ipairs(candidates) do
    if exists(path) then
      return path
    end
  end
  return nil
end

-- memprof.so's module table, loaded as how says (how.dir: where the
-- memprof script is; how.load: package.loadlib or a stand-in), provided it
-- has the function named; or nil and why not.
function M.load_module(how, needed)
  how = how or {}
  local path = M.find_module(how.dir)
  if not path then
    return nil, 'cannot find memprof.so (next to this program or along ' ..
      'package.cpath)'
  end
  local open, why = (how.load or package.loadlib)(path, 'luaopen_memprof')
  if not open then
    return nil, string.format('cannot load %s: %s', path, tostring(why))
  end
  local memprof = open()
  if type(memprof[needed]) ~= 'function' then
    return nil, string.format('%s has no %s (an older build)', path, needed)
  end
  return memprof
end

-- The interpreter running this program: the lowest entry of arg.
function M.running_interpreter()
  if type(arg) ~= 'table' then
    return nil
  end
  local lowest = 0
  while arg[lowest - 1] ~= nil do
    lowest = lowest - 1
  end
  if lowest == 0 then
    return nil
  end
  return arg[lowest]
end

-- The command that runs scripts: --lua, or this interpreter when it is
-- LuaJIT-based (plain Lua cannot load memprof.so), or luajit.
local function interpreter(opts, how)
  if opts.lua then
    return opts.lua
  end
  local self = how.self or M.running_interpreter()
  if self and rawget(_G, 'jit') then
    return self
  end
  return 'luajit'
end

-- 'memprof-app.bin' for 'dir/app.lua'.
function M.default_profile(script)
  local base = script:match('([^/]*)$'):gsub('%.lua$', '')
  if base == '' then
    base = 'script'
  end
  return 'memprof-' .. base .. '.bin'
end

-- The child ------------------------------------------------------------------

-- A Lua literal of a value of the start options.
local function literal(value)
  if type(value) == 'string' then
    return format('%q', value)
  end
  return tostring(value)
end

-- The file name of a profile path in process `pid`, as memprof.start
-- makes it: %p is the process id, %% a single %.
function M.file_name(profile, pid)
  return (profile:gsub('%%([p%%])', function(c)
    return c == 'p' and tostring(pid) or '%'
  end))
end

-- Whether the file name of a profile path depends on the process.
function M.names_process(profile)
  return M.file_name(profile, '') ~= M.file_name(profile, 0)
end

-- Code that writes this process's id to the file pid_file, for a profile
-- path with %p: memprof then knows which file is the script's. It runs
-- before start, so nothing of it is in the profile.
local function write_pid(pid_file)
  return table.concat({
    "local stat = io.open('/proc/self/stat')",
    "local pid = stat and stat:read('*n')",
    'if stat then stat:close() end',
    'local to = pid and io.open(' .. format('%q', pid_file) .. ", 'w')",
    'if to then to:write(pid) to:close() end',
  }, ' ')
end

-- The chunk run by -e before the script. With pid_file, it writes its
-- process id there (see write_pid).
function M.wrapper(module_path, profile, opts, pid_file)
  local options = {}
  if opts.stack_depth then
    options[#options + 1] = 'stack_depth = ' .. literal(opts.stack_depth)
  end
  if opts.timestamps then
    options[#options + 1] = 'timestamps = true'
  end
  if opts.max_bytes then
    options[#options + 1] = format('max_bytes = %d', opts.max_bytes)
  end
  if opts.trace_lines then
    options[#options + 1] = 'trace_lines = ' .. literal(opts.trace_lines)
  end
  if opts.sample_bytes then
    options[#options + 1] = format('sample_bytes = %d', opts.sample_bytes)
  end
  if opts.seed then
    options[#options + 1] = format('seed = %d', opts.seed)
  end
  local start_options = #options > 0 and
    '{ ' .. table.concat(options, ', ') .. ' }' or 'nil'
  return table.concat({
    'local open, why = package.loadlib(' .. literal(module_path) ..
      ", 'luaopen_memprof')",
    "if not open then io.stderr:write('memprof: cannot load ', " ..
      literal(module_path) .. ", ': ', tostring(why), '\\n') os.exit(1) end",
    "local memprof = open('memprof')",
    "package.loaded.memprof = memprof",
    'local lowest = -1',
    'while arg[lowest - 1] ~= nil do lowest = lowest - 1 end',
    'local self = arg[lowest]',
    'for i = lowest, -1 do arg[i] = nil end',
    'arg[-1] = self',
    -- When the script ends (the VM closes, or os.exit), stop says how
    -- the profile ended: its size cap, a full disk. Finalizers run newest
    -- first, so the guard's comes before the module's own. Both are made
    -- before start: nothing of this is in the profile.
    'local function finish()',
    'local ok, why = memprof.stop()',
    "if not ok and why ~= 'profiler is not running' then",
    "io.stderr:write('memprof: ', tostring(why), '\\n') end end",
    'local guard = newproxy(true)',
    'getmetatable(guard).__gc = finish',
    "debug.getregistry()['memprof run'] = guard",
    'local exit = os.exit',
    'os.exit = function(...) finish() return exit(...) end',
    pid_file and write_pid(pid_file) or '',
    'local ok, message = memprof.start(' .. literal(profile) .. ', ' ..
      start_options .. ')',
    "if not ok then io.stderr:write('memprof: cannot start the profiler: ', " ..
      "tostring(message), '\\n') exit(1) end",
  }, ' ')
end

-- The command line of the child.
function M.command(interp, wrapper, words)
  local parts = {}
  for word in interp:gmatch('%S+') do
    parts[#parts + 1] = shell_quote(word)
  end
  parts[#parts + 1] = '-e'
  parts[#parts + 1] = shell_quote(wrapper)
  for _, word in ipairs(words) do
    parts[#parts + 1] = shell_quote(word)
  end
  return table.concat(parts, ' ')
end

-- The exit code of a child from os.execute's results.
M.exit_code = launch.exit_code

-- Running ----------------------------------------------------------------------

-- The options of memprof-report given to memprof run.
local function report_options(opts)
  local copy = {}
  for _, option in ipairs(cli.OPTIONS) do
    copy[option.key] = opts[option.key]
  end
  return copy
end

-- The process id the script wrote to pid_file (which goes), or nil.
local function script_pid(pid_file)
  local f = io.open(pid_file)
  local pid = f and f:read('*n')
  if f then f:close() end
  os.remove(pid_file)
  return pid
end

-- Why the interpreter could not run the script (as luajit says it), or
-- nil: checked before the profile starts, so that a missing script
-- leaves no profile and no report of nothing.  '-' is the standard input.
local function script_problem(script)
  if script == '-' then return nil end
  local file, message = io.open(script, 'rb')
  if not file then return 'cannot open ' .. message end
  local _, failed = file:read(1)
  file:close()
  if failed then return format('cannot read %s: %s', script, failed) end
  return nil
end

local function run(opts, words, out, err, how)
  local unreadable = script_problem(words[1])
  if unreadable then
    err:write(PROGRAM, ' run: ', unreadable, '\n')
    return 1
  end
  local module_path = M.find_module(how.dir)
  if not module_path then
    err:write(PROGRAM, ': cannot find memprof.so (next to this program or ',
      'along package.cpath)\n')
    return 1
  end
  local profile = opts.profile or M.default_profile(words[1])
  local pid_file = M.names_process(profile) and os.tmpname() or nil
  local command = M.command(interpreter(opts, how),
    M.wrapper(module_path, profile, opts, pid_file), words)
  out:flush()
  local code = M.exit_code(os.execute(command))
  if pid_file then
    profile = M.file_name(profile, script_pid(pid_file) or '%p')
  end
  err:write(format('%s: %s exited with %d; profile in %s\n', PROGRAM,
    words[1], code, profile))
  local report_code = cli.report_main(profile, report_options(opts), err,
    err)
  if code ~= 0 then
    return code
  end
  return report_code
end

-- A binary format cannot go to stderr: it needs --output.  And the
-- report never goes to stdout, which is the script's (--output=-).
local function output_problem(opts)
  if opts.output == cli.STDOUT_NAME then
    return '--output=- would mix the report into the script\'s output: ' ..
      'leave --output out (the report goes to stderr) or give a file'
  end
  local name = opts.format
  if name and not opts.output and require('memprof.report.' .. name).BINARY
      then
    return format('--format=%s writes binary data: give --output=FILE', name)
  end
  return nil
end

local function run_main(args, out, err, how)
  local opts, words = option_parser.parse(run_options(), args, { stop = true })
  local status = option_parser.stop_status(opts, words, out, err,
    { prefix = PROGRAM .. ' run: ', see = 'memprof run --help', help = usage })
  if status then
    return status
  end
  if #words == 0 then
    err:write(PROGRAM, ' run: no script given (see memprof run --help)\n')
    return 1
  end
  local problem = cli.conflict(report_options(opts)) or
    output_problem(opts)
  if not problem and opts.seed and not opts.sample_bytes then
    problem = '--seed needs --sample-bytes'
  end
  if problem then
    err:write(PROGRAM, ' run: ', problem, ' (see memprof run --help)\n')
    return 1
  end
  return run(opts, words, out, err, how)
end

-- What is wrong with the first word, when it is not a command.
local function command_problem(command)
  if not command then
    return 'no command given'
  end
  if command:match('%.lua$') or (not command:match('^%-') and
      exists(command)) then
    return format("unknown command '%s'; to profile it: memprof run %s",
      command, command)
  end
  return format("unknown command '%s'", command)
end

function M.main(args, out, err, how)
  out = out or io.stdout
  err = err or io.stderr
  how = how or {}
  local command = args[1]
  local rest = {}
  for i = 2, #args do
    rest[#rest + 1] = args[i]
  end
  if command == 'run' then
    return run_main(rest, out, err, how)
  elseif command == 'report' then
    return cli.main(rest, out, err)
  elseif command == 'live' then
    return require('memprof.cli.live').main(rest, out, err, how)
  elseif command == 'heap' then
    return require('memprof.cli.heap_pid').main(rest, out, err, how)
  elseif command == 'attach' then
    return require('memprof.cli.attach').main(rest, out, err, how)
  elseif command == 'detach' then
    return require('memprof.cli.attach').detach_main(rest, out, err, how)
  elseif command == '--help' or command == '-h' then
    out:write(usage())
    return 0
  elseif command == '--version' then
    out:write(version.line(PROGRAM), '\n')
    return 0
  end
  err:write(PROGRAM, ': ', command_problem(command), ' (see memprof --help)\n')
  return 1
end

return M
