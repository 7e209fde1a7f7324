-- memprof.cli.attach: `memprof attach PID` and `memprof detach PID`, an
-- allocation profile of a running process that never loaded memprof
-- (docs/attach.md).
--
--   attach.start(pid, options) -> path, info | nil, message, errno
--     options.output        the profile's path (default memprof-PID.bin;
--                           made absolute: the target writes it from its
--                           own directory)
--     options.stack_depth, timestamps, max_bytes, sample_bytes, seed,
--     trace_lines ('exact', 'walk', 'resume', 'start'), vm (from 1): as for
--                           memprof.start and `memprof heap --vm`
--     options.dir, options.load  where memprof.so is (see heap_pid)
--     info: file, main_thread, vms, tries, pause_ms
--   attach.stop(pid [, how]) -> path, info | nil, message, errno
--     how.vm (from 1) or how.main_thread ('0x...'): which VM's profile;
--     else the first attached.  info.attached: the profiles still
--     attached (several VMs of a process can be, each into its own file)
--   attach.attached(pid [, how]) -> path | nil, message, errno
--   attach.main(args, out, err, how) -> exit code   (memprof attach)
--   attach.detach_main(args, out, err, how) -> exit code (memprof detach)
--
-- The work is memprof.so's attach_process and detach_process: a call
-- made by a thread of the target through ptrace, which loads memprof.so
-- there and starts (or stops) a profile of its VM.  On any failure the
-- target runs on as it was, and the exit code is 1.

local option_parser = require('memprof.cli.options')
local run = require('memprof.cli.run')

local M = {}

local format = string.format
local ESRCH = 3

local function load_module(how)
  return run.load_module(how, 'attach_process')
end

local function absolute(path)
  if path:sub(1, 1) == '/' then
    return path
  end
  local pipe = io.popen('pwd')
  local cwd = pipe and pipe:read('*l')
  if pipe then
    pipe:close()
  end
  return (cwd or '.') .. '/' .. path
end

function M.start(pid, options)
  options = options or {}
  local memprof, why = load_module(options)
  if not memprof then
    return nil, why, 2
  end
  local path = absolute(options.output or format('memprof-%d.bin', pid))
  local info, message, errno = memprof.attach_process(pid, path, {
    stack_depth = options.stack_depth, timestamps = options.timestamps and 1,
    max_bytes = options.max_bytes, sample_bytes = options.sample_bytes,
    seed = options.seed, trace_lines = options.trace_lines,
    vm = options.vm })
  if not info then
    return nil, message, errno
  end
  return info.file, info
end

-- memprof.so's function name called on pid: the file and what it says.
local function ask(name, pid, how, which)
  local memprof, why = load_module(how)
  if not memprof then
    return nil, why, 2
  end
  local info, message, errno = memprof[name](pid, which)
  if not info then
    return nil, message, errno
  end
  return info.file, info
end

function M.stop(pid, how)
  how = how or {}
  return ask('detach_process', pid, how, { vm = how.vm,
    main_thread = how.main_thread })
end

function M.attached(pid, how)
  local file, why, errno = ask('attached_process', pid, how)
  if not file then
    return nil, why, errno
  end
  return file
end

-- The command line -----------------------------------------------------------

local function run_option(name)
  return option_parser.named(run.RUN_OPTIONS, name) or
    error('no option ' .. name)
end

M.OPTIONS = {
  { name = 'output', short = 'o', value = 'FILE', key = 'output',
    help = 'write the profile there (default memprof-PID.bin)' },
  { name = 'duration', value = 'S', key = 'duration',
    check = option_parser.whole_number(1, 86400),
    help = 'detach after S seconds (default: at memprof detach PID)' },
  run_option('stack-depth'), run_option('timestamps'),
  run_option('max-bytes'), run_option('sample-bytes'), run_option('seed'),
  run_option('trace-lines'), option_parser.VM, option_parser.HELP,
}

M.DETACH_OPTIONS = {
  option_parser.with_help(option_parser.VM,
    'the profile of the Nth VM only (default: every one attached)'),
  option_parser.HELP,
}

local USAGE = [[
Usage: memprof attach [OPTIONS] PID

Profile the allocations of running process PID, which need not have
loaded memprof: its threads are stopped (ptrace) while one of them
loads memprof.so and wraps its LuaJIT VM's allocator, then it runs
on, profiled, until --duration ends or `memprof detach PID`, which
puts the allocator back.  The file is an ordinary profile: read it
with memprof-report (--leaks --heap= joins it with memprof heap PID).

Options:
]]

local function usage()
  return option_parser.help(USAGE, M.OPTIONS, {})
end

local DETACH_USAGE = [[
Usage: memprof detach [--vm=N] PID

Stop the profiles memprof attach started in process PID (one per VM
attached), complete their files and put the VMs' allocators back.

Options:
]]

local function detach_usage()
  return option_parser.help(DETACH_USAGE, M.DETACH_OPTIONS, {})
end

-- Sleeps s seconds (poll); false if interrupted (Ctrl-C).
local function wait(seconds)
  local ffi = require('ffi')
  pcall(ffi.cdef, 'int poll(void *fds, unsigned long n, int timeout);')
  return pcall(function()
    local deadline = os.time() + seconds
    repeat
      local left = deadline - os.time()
      ffi.C.poll(nil, 0, math.min(left, 1) * 1000)
    until os.time() >= deadline
  end)
end

local function detached(out, program, pid, path, info)
  out:write(format('%s: detached from process %d: wrote %s\n', program, pid,
    path))
  if info.note then
    out:write(format('%s: %s\n', program, info.note))
  end
  out:write(format('%s: see memprof-report %s\n', program, path))
end

function M.main(args, out, err, how)
  local PROGRAM = 'memprof attach'
  local opts, pid = option_parser.pid_command(PROGRAM, M.OPTIONS, usage, args,
    out, err)
  if not opts then
    return pid
  end
  how = how or {}
  opts.dir, opts.load = how.dir, how.load
  if opts.trace_lines == 'start' then
    opts.trace_lines = false
  end
  local path, info = M.start(pid, opts)
  if not path then
    err:write(PROGRAM, ': ', info, '\n')
    return 1
  end
  out:write(format('%s: profiling process %d (VM %d of %d, main thread ' ..
    '%s) into %s; it was stopped %.1f ms (%d stop%s)\n', PROGRAM, pid,
    opts.vm or 1, info.vms, info.main_thread, path, info.pause_ms,
    info.tries, info.tries == 1 and '' or 's'))
  if info.vms > 1 then
    out:write(format('%s: process %d has %d LuaJIT VMs: --vm=N for ' ..
      'another\n', PROGRAM, pid, info.vms))
  end
  if not opts.duration then
    out:write(format('%s: memprof detach %d stops it\n', PROGRAM, pid))
    return 0
  end
  local completed = wait(opts.duration)
  local file, stopped, errno = M.stop(pid, { dir = how.dir, load = how.load,
    main_thread = info.main_thread })
  if not file then
    err:write(PROGRAM, ': ', stopped, errno == ESRCH and format(
      ': it ended while profiled (an exit completes %s; a kill loses the ' ..
      'last second of it)', path) or '', '\n')
    return 1
  end
  detached(out, PROGRAM, pid, file, stopped)
  return completed and 0 or 130
end

function M.detach_main(args, out, err, how)
  local PROGRAM = 'memprof detach'
  local opts, pid = option_parser.pid_command(PROGRAM, M.DETACH_OPTIONS,
    detach_usage, args, out, err)
  if not opts then
    return pid
  end
  how = how or {}
  local which = { dir = how.dir, load = how.load, vm = opts.vm }
  -- Without --vm, every profile attached, one stop each (8 at most).
  local stops = 0
  repeat
    stops = stops + 1
    local path, info = M.stop(pid, which)
    if not path then
      err:write(PROGRAM, ': ', info, '\n')
      return 1
    end
    detached(out, PROGRAM, pid, path, info)
  until opts.vm or info.attached == 0 or stops == 8
  return 0
end

return M
