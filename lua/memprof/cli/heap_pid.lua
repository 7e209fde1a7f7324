-- memprof.cli.heap_pid: `memprof heap PID [-o FILE] [--vm=N]`, a heap
-- snapshot of a running process, read from outside (docs/attach.md).
--
--   heap_pid.main(args, out, err, how) -> exit code
--     how.dir         the directory of the memprof script (to find
--                     memprof.so next to it)
--     how.load(path)  loads memprof.so (default package.loadlib)
--
-- The work is memprof.so's heap_of_process: this process's LuaJIT must
-- be the target's build, which it checks.  Nothing is written to the
-- target; on any failure it runs on, nothing is left of the file, and
-- the exit code is 1.

local option_parser = require('memprof.cli.options')

local M = {}

local PROGRAM = 'memprof heap'
local format = string.format

M.OPTIONS = {
  { name = 'output', short = 'o', value = 'FILE', key = 'output',
    help = 'write the snapshot there (default memprof-PID.heap)' },
  option_parser.VM, option_parser.HELP,
}

local USAGE = [[
Usage: memprof heap [OPTIONS] PID

Write a heap snapshot of running process PID, read from outside:
every thread is stopped for as long as its memory takes to copy
(ptrace), then runs on; no code is run in it and nothing in it is
written.  Its LuaJIT must be the build memprof runs on, or a shared
libluajit (then loaded by a helper process).  Read the file with
memprof-report (holders, retained sizes, --diff).

Options:
]]

local function usage()
  return option_parser.help(USAGE, M.OPTIONS, {})
end

-- The snapshot function of memprof.so, or nil and why not.
local function load_module(how)
  local memprof, why = require('memprof.cli.run').load_module(how,
    'heap_of_process')
  return memprof and memprof.heap_of_process, why
end

local function report(out, pid, path, info)
  out:write(format('%s: wrote %s: the heap of process %d (VM %d of %d, ' ..
    'main thread %s)\n', PROGRAM, path, pid, info.vm, info.vms,
    info.main_thread))
  out:write(format('%s: process %d was stopped %.1f ms (%d stop%s, %d ' ..
    'bytes copied); the walk took %.1f ms\n', PROGRAM, pid, info.pause_ms,
    info.tries, info.tries == 1 and '' or 's', info.copied, info.walk_ms))
  if info.vms > 1 then
    out:write(format('%s: process %d has %d LuaJIT VMs: --vm=N for ' ..
      'another\n', PROGRAM, pid, info.vms))
  end
  out:write(format('%s: see memprof-report %s\n', PROGRAM, path))
end

function M.main(args, out, err, how)
  how = how or {}
  local opts, pid = option_parser.pid_command(PROGRAM, M.OPTIONS, usage, args,
    out, err)
  if not opts then
    return pid
  end
  local snapshot, why = load_module(how)
  if not snapshot then
    err:write(PROGRAM, ': ', why, '\n')
    return 1
  end
  local path = opts.output or format('memprof-%d.heap', pid)
  local vm = opts.vm or 1
  local info, message = snapshot(pid, path, vm)
  if not info then
    err:write(PROGRAM, ': ', message, '\n')
    return 1
  end
  info.vm = vm
  report(out, pid, path, info)
  return 0
end

return M
