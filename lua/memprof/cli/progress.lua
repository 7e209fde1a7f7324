-- memprof.cli.progress: how far the reading of a profile has got, on a
-- terminal.
--
--   local progress = require('memprof.cli.progress')
--   local meter = progress.new(err, 'out.bin', file_size [, opts])
--   reader.open('out.bin', { on_read = meter.update })   -- bytes so far
--   ...
--   meter.done()           -- erases the line
--
-- meter.update(bytes) writes "\r" and a line such as
--   memprof-report: reading out.bin: 1.00MiB of 3.05MiB (32%)
-- at most once per `opts.interval` seconds (0.25 by default; the first
-- time at once), measured with `opts.clock` (os.clock by default).  It
-- writes nothing for a file of at most one read chunk (`opts.least`,
-- 1 MiB), which is read in one go.
--
-- progress.is_terminal(fd) says whether a file descriptor (2: stderr) is
-- a terminal (isatty() through the FFI).
-- progress.for_stderr(err, path) is the meter memprof-report uses: a
-- real one when err is io.stderr and stderr is a terminal, else one
-- that does nothing.

local layout = require('memprof.report.layout')

local M = {}

M.INTERVAL = 0.25
M.LEAST = 1024 * 1024
M.PROGRAM = 'memprof-report'

local format = string.format

-- isatty() through the FFI.  (Declaring it again fails harmlessly when
-- it is declared already.)
function M.is_terminal(fd)
  local ffi = require('ffi')
  pcall(ffi.cdef, 'int isatty(int fd);')
  return ffi.C.isatty(fd) == 1
end

local function file_size(path)
  local file = io.open(path, 'rb')
  if not file then
    return nil
  end
  local size = file:seek('end')
  file:close()
  return size
end

local function nothing() end

local QUIET = { update = nothing, done = nothing }

function M.new(err, name, size, opts)
  opts = opts or {}
  if not size or size <= (opts.least or M.LEAST) then
    return QUIET
  end
  local clock = opts.clock or os.clock
  local interval = opts.interval or M.INTERVAL
  local shown_at, width = nil, 0
  local meter = {}
  function meter.update(bytes)
    local now = clock()
    if shown_at and now - shown_at < interval then
      return
    end
    shown_at = now
    local line = format('%s: reading %s: %s of %s (%d%%)', M.PROGRAM, name,
      layout.format_size(bytes, true), layout.format_size(size, true),
      math.floor(bytes / size * 100))
    if #line > width then
      width = #line
    end
    err:write('\r', line, string.rep(' ', width - #line))
  end
  function meter.done()
    if shown_at then
      err:write('\r', string.rep(' ', width), '\r')
    end
  end
  return meter
end

function M.for_stderr(err, path)
  if err ~= io.stderr or not M.is_terminal(2) then
    return QUIET
  end
  return M.new(err, path, file_size(path))
end

return M
