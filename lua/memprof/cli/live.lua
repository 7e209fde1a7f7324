-- memprof.cli.live: `memprof live FILE`, a terminal view of a profile
-- being written, and `memprof live PID`, the same of a profile attached
-- to a running process (docs/live.md).
--
--   live.main(args, out, err [, how]) -> exit code (how: dir, load, as
--       memprof.cli.attach takes them)
--   live.watch(path, options, on_quit) -> exit code (0, or 1 after an
--       error, whose message went to options.err)
--     options (all optional):
--       interval  seconds between refreshes (default 1)
--       window    seconds the rates look back over (default 5)
--       view      'live' (default) or 'allocated'
--       grouping  'line' (default), 'function' or 'stack'
--       plain     true: the plain text mode even on a terminal
--       top       rows of the plain text mode (default 10; a terminal
--                 shows as many as its height allows)
--       width     columns of the plain text mode (default $COLUMNS or 100)
--       out, err  files (default io.stdout, io.stderr)
--     on_quit(reason, message)  called once, after the terminal is
--       restored, before watch returns: reason 'key' (q), 'signal'
--       (SIGINT, SIGTERM or SIGHUP), 'ended' (plain text mode: the
--       profile's epilogue was read) or 'error' (message says what)
--
-- On a terminal (stdout is one, and not options.plain): the alternate
-- screen, redrawn every interval and at each key; keys read from
-- /dev/tty, set to take keys one at a time without echo (`stty -icanon
-- -echo`, put back as `stty -g` found it).  Otherwise, the plain text
-- mode: a frame of text every interval, keys read from stdin (q then
-- Enter quits), and the end of the profile ends it.  SIGINT, SIGTERM and
-- SIGHUP are blocked and read from a signalfd, so that every way out
-- restores the terminal; SIGWINCH redraws.

local ffi = require('ffi')
local follow = require('memprof.read.follow')
local live = require('memprof.analysis.live')
local EXTENDED = require('memprof.read.stream').EXTENDED_VERSION
local screen = require('memprof.report.live')
local paths = require('memprof.report.paths')
local option_parser = require('memprof.cli.options')

local M = {}

local PROGRAM = 'memprof live'
local format = string.format

-- How much of the file one pass of the loop reads at most: a large file
-- is read over several passes, each followed by a look at the keys.
M.BUDGET = 4 * 1024 * 1024

pcall(ffi.cdef, 'int isatty(int fd);')
pcall(ffi.cdef, 'int open(const char *path, int flags, ...);')
pcall(ffi.cdef, 'intptr_t read(int fd, void *buf, size_t n);')
pcall(ffi.cdef, 'int close(int fd);')
pcall(ffi.cdef, [[
  struct memprof_live_pollfd { int fd; short events; short revents; };
  int poll(struct memprof_live_pollfd *fds, unsigned long n, int timeout);
  typedef struct { unsigned long val[1024 / (8 * sizeof(long))]; }
    memprof_live_sigset;
  int sigemptyset(memprof_live_sigset *set);
  int sigaddset(memprof_live_sigset *set, int signal);
  int sigprocmask(int how, const memprof_live_sigset *set,
    memprof_live_sigset *old);
  int signalfd(int fd, const memprof_live_sigset *mask, int flags);
  struct memprof_live_winsize { unsigned short rows, cols, x, y; };
  int ioctl(int fd, unsigned long request, ...);
  struct memprof_live_timespec { long sec, nsec; };
  int clock_gettime(int clock, struct memprof_live_timespec *t);
]])

local C = ffi.C
local POLLIN = 1
local SIGHUP, SIGINT, SIGTERM, SIGWINCH = 1, 2, 15, 28
local SIG_BLOCK, SIG_SETMASK = 0, 2
local TIOCGWINSZ = 0x5413
local CLOCK_MONOTONIC = 1
local O_RDONLY, O_NONBLOCK = 0, 2048
local SIGINFO_SIZE = 128

local function now()
  local t = ffi.new('struct memprof_live_timespec')
  C.clock_gettime(CLOCK_MONOTONIC, t)
  return tonumber(t.sec) + tonumber(t.nsec) / 1e9
end

-- Options ----------------------------------------------------------------------

local function seconds(least, most)
  return function(value)
    local n = tonumber(value)
    if not n or n < least or n > most then
      return nil, format('expected seconds from %s to %s, found %s', least,
        most, value)
    end
    return n
  end
end

M.OPTIONS = {
  { name = 'view', value = 'VIEW', key = 'view',
    check = option_parser.one_of({ 'live', 'allocated' }),
    help = 'start with places by live or allocated bytes (live)' },
  { name = 'group', value = 'MODE', key = 'grouping',
    check = option_parser.one_of({ 'line', 'function', 'stack' }),
    help = 'start with rows by line, function or stack (line)' },
  { name = 'interval', value = 'S', key = 'interval',
    check = seconds(0.1, 60), help = 'seconds between refreshes (1)' },
  { name = 'window', value = 'S', key = 'window', check = seconds(1, 600),
    help = 'seconds the rates look back over (5)' },
  { name = 'plain', key = 'plain',
    help = 'plain text frames, even on a terminal' },
  { name = 'top', value = 'N', key = 'top',
    check = option_parser.whole_number(1, 1000),
    help = 'rows of each plain text frame (10)' },
  { name = 'output', short = 'o', value = 'FILE', key = 'output',
    help = 'of a PID: the profile attach writes (memprof-PID.bin)' },
  { name = 'stack-depth', value = 'N', key = 'stack_depth',
    check = option_parser.whole_number(1, 255),
    help = 'of a PID: frames of each stack the profile records (8)' },
  option_parser.HELP,
}

local USAGE = [[
Usage: memprof live [OPTIONS] FILE
       memprof live [OPTIONS] PID

Watch a profile while it is written (memprof.start, memprof run):
the places that hold the most live bytes or allocate the most per
second, the heap and its growth, refreshed every second.  Keys:
  {keys}
Leave it and start it again at will: it reads the file from its
start.  On a terminal it takes the whole screen and gives it back
on quit; with stdout not a terminal (or --plain) it prints a frame
of text every interval, reads keys from stdin (q, Enter) and ends
with the profile.

Given the PID of a running process, it attaches to it first
(memprof attach PID -o FILE), and detaches when it quits; a process
attached already is watched as it is and stays attached.

Options:
]]

local function usage()
  return option_parser.help(USAGE, M.OPTIONS, {}, { keys = screen.KEYS })
end

-- The terminal ---------------------------------------------------------------

local function shell_line(command)
  local pipe = io.popen(command .. ' 2>/dev/null')
  if not pipe then
    return nil
  end
  local text = pipe:read('*l')
  pipe:close()
  return text
end

-- Keys one at a time without echo; returns what puts the terminal back.
local function raw_keys()
  local saved = shell_line('stty -g < /dev/tty')
  if not saved or not saved:match('^[%w:=-]+$') then
    return nil, 'cannot read the terminal\'s settings (stty -g < /dev/tty)'
  end
  if not os.execute('stty -icanon -echo min 1 time 0 < /dev/tty ' ..
      '2>/dev/null') then
    return nil, 'cannot set the terminal (stty -icanon -echo < /dev/tty)'
  end
  return function()
    os.execute('stty ' .. saved .. ' < /dev/tty 2>/dev/null')
  end
end

local function terminal_size(fd)
  local size = ffi.new('struct memprof_live_winsize')
  if C.ioctl(fd, TIOCGWINSZ, size) == 0 and size.rows > 0 and
      size.cols > 0 then
    return tonumber(size.cols), tonumber(size.rows)
  end
  return 80, 24
end

-- SIGINT, SIGTERM, SIGHUP and SIGWINCH blocked and read from a
-- descriptor; returns it and what unblocks them.
local function signal_reader()
  local set, old = ffi.new('memprof_live_sigset'),
    ffi.new('memprof_live_sigset')
  C.sigemptyset(set)
  for _, signal in ipairs({ SIGHUP, SIGINT, SIGTERM, SIGWINCH }) do
    C.sigaddset(set, signal)
  end
  if C.sigprocmask(SIG_BLOCK, set, old) ~= 0 then
    return -1, function() end
  end
  local fd = C.signalfd(-1, set, 0)
  return fd, function()
    if fd >= 0 then
      C.close(fd)
    end
    C.sigprocmask(SIG_SETMASK, old, nil)
  end
end

-- Whether text is a UTF-8 locale's.
local function utf8_locale()
  for _, name in ipairs({ 'LC_ALL', 'LC_CTYPE', 'LANG' }) do
    local value = os.getenv(name)
    if value and value ~= '' then
      return value:lower():gsub('-', ''):match('utf8') ~= nil
    end
  end
  return false
end

-- The view ---------------------------------------------------------------------

local View = {}
View.__index = View

local KEY_ACTIONS = {
  l = { 'view', 'live' }, a = { 'view', 'allocated' },
  ['1'] = { 'grouping', 'line' }, ['2'] = { 'grouping', 'function' },
  ['3'] = { 'grouping', 'stack' },
}

-- Handles the bytes of a read from the keys; returns true to quit.
function View:keys(bytes)
  for i = 1, #bytes do
    local key = bytes:sub(i, i)
    if key == 'q' or key == 'Q' or key == '\3' then
      return true
    elseif key == '\27' then
      -- (An escape sequence: an arrow, a function key.)
      return false
    end
    local action = KEY_ACTIONS[key]
    if action then
      self[action[1]] = action[2]
      self.message = nil
    elseif key:match('%g') then
      self.message = format("key '%s' does nothing: %s", key, screen.KEYS)
    end
  end
  return false
end

-- Reads what the file has added: returns whether it caught up.
function View:refresh()
  if self.state and self.grouping == 'stack' and not self.state.by_stack and
      self.state.stream.version == EXTENDED then
    -- (Rows by stack cost each event three times more: kept from the
    -- start once asked for.)
    self.follower:restart(nil)
    self.message = 'reading the profile again from its start, by stack'
  end
  local stream, fresh = self.follower:poll()
  if fresh then
    local why = self.follower.why
    self.state = stream and live.new(stream,
      { window = math.max(1, math.floor(self.window / self.interval + 0.5)),
        stacks = self.grouping == 'stack' or self.stacks_asked })
    self.stacks_asked = self.stacks_asked or self.grouping == 'stack'
    self.caught_up_once = false
    if self.follower.restarts ~= self.restarts_shown then
      self.message = why .. ': reading it from the start'
      self.restarts_shown = self.follower.restarts
    end
  end
  if not self.state then
    return true
  end
  local ok, caught = pcall(self.state.consume, self.state,
    stream.bytes_read + M.BUDGET)
  if not ok then
    local why = self.follower:changed()
    if not why then
      error(caught, 0)
    end
    self.follower:restart(why)
    self.state = nil
    self.message = why .. ': reading it from the start'
    return true
  end
  if caught then
    self.caught_up_once = true
  end
  return caught
end

function View:status()
  local state = self.follower.state
  if state == 'missing' then
    return 'waiting for the file'
  elseif state == 'starting' then
    return 'waiting for the profile to start'
  elseif self.state and self.state.stream.done then
    return 'the profile ended'
  elseif not self.caught_up_once and self.state then
    local size = self.follower:size()
    return format('reading %d%%', size > 0 and
      math.floor(self.follower.read * 100 / size) or 0)
  end
  return 'following'
end

function View:model(top)
  local state = self.state or { rows = function() return {} end,
    heap = function() return { bytes = 0, absolute = false, history = {},
      samples = 0 } end, stream = { name = self.path } }
  local stream = self.state and self.state.stream
  return screen.model(state, { view = self.view, grouping = self.grouping,
    top = top, path = self.path, status = self:status(),
    message = self.message, events = self.state and self.state.events or 0,
    bytes_read = self.follower.read,
    prefix = stream and paths.common_prefix(stream) or nil })
end

local function new_view(path, options)
  return setmetatable({ path = path, follower = follow.new(path),
    view = options.view or 'live', grouping = options.grouping or 'line',
    interval = options.interval or 1, window = options.window or 5,
    state = nil, message = nil, caught_up_once = false, restarts_shown = 0,
    stacks_asked = false }, View)
end

-- The loop -----------------------------------------------------------------------

-- Waits until `deadline` (or a key, a signal); returns 'key', 'signal',
-- 'resize' or nil (the time came).
local function wait(io_state, deadline)
  local fds = io_state.fds
  local timeout = math.max(0, math.floor((deadline - now()) * 1000 + 0.5))
  local n = C.poll(fds, io_state.count, timeout)
  if n <= 0 then
    return nil
  end
  local buf = io_state.buf
  if io_state.signal_slot and fds[io_state.signal_slot].revents ~= 0 then
    local got = tonumber(C.read(fds[io_state.signal_slot].fd, buf,
      SIGINFO_SIZE))
    if got == SIGINFO_SIZE then
      local signo = ffi.cast('uint32_t *', buf)[0]
      if signo == SIGWINCH then
        return 'resize'
      end
      return 'signal'
    end
  end
  if io_state.key_slot and fds[io_state.key_slot].revents ~= 0 then
    local got = tonumber(C.read(fds[io_state.key_slot].fd, buf, 64))
    if got and got > 0 then
      io_state.bytes = ffi.string(buf, got)
      return 'key'
    end
    -- The end of the keys (stdin closed): no more polling it.
    fds[io_state.key_slot].fd = -1
  end
  return nil
end

local function make_io(key_fd, signal_fd)
  local fds = ffi.new('struct memprof_live_pollfd[2]')
  local io_state = { fds = fds, count = 0, buf = ffi.new('uint8_t[?]',
    SIGINFO_SIZE) }
  if signal_fd >= 0 then
    fds[io_state.count].fd, fds[io_state.count].events = signal_fd, POLLIN
    io_state.signal_slot = io_state.count
    io_state.count = io_state.count + 1
  end
  if key_fd >= 0 then
    fds[io_state.count].fd, fds[io_state.count].events = key_fd, POLLIN
    io_state.key_slot = io_state.count
    io_state.count = io_state.count + 1
  end
  return io_state
end

-- The loop of both modes: draw() after each refresh and key; returns
-- the reason to stop.
local function run_loop(view, io_state, draw, plain)
  local interval = view.interval
  local next_tick = now()
  while true do
    local caught = view:refresh()
    if now() >= next_tick then
      if caught and view.state then
        -- (Only once the file is read up to its end: the rates are the
        -- program's, not the reader's.)
        view.state:sample(now())
      end
      next_tick = next_tick + interval
      if next_tick < now() then
        next_tick = now() + interval
      end
      draw()
      if plain and caught and view.state and view.state.stream.done then
        return 'ended'
      end
    end
    local deadline = caught and next_tick or now()
    while true do
      local what = wait(io_state, deadline)
      if what == 'signal' then
        return 'signal'
      elseif what == 'key' then
        if view:keys(io_state.bytes) then
          return 'key'
        end
        if not plain then
          draw()
        end
      elseif what == 'resize' then
        draw()
      end
      if now() >= deadline then
        break
      end
    end
  end
end

local function plain_mode(view, options, io_state)
  local out = options.out or io.stdout
  local width = options.width or tonumber(os.getenv('COLUMNS') or '') or 100
  local top = options.top or 10
  local first = true
  local function draw()
    local lines = screen.lines(view:model(top), width,
      top + screen.FIXED_LINES, { keys = false })
    out:write(first and '' or '\n', screen.plain(lines))
    out:flush()
    first = false
  end
  return run_loop(view, io_state, draw, true)
end

local function terminal_mode(view, options, io_state)
  local out = options.out or io.stdout
  local utf8 = utf8_locale()
  local function draw()
    local width, height = terminal_size(1)
    local lines, styles = screen.lines(view:model(math.max(1,
      height - screen.FIXED_LINES)), width, height, { utf8 = utf8 })
    out:write(screen.ansi(lines, styles))
    out:flush()
  end
  return run_loop(view, io_state, draw, false)
end

-- What every way out undoes, in reverse order.
local function undoer()
  local steps = {}
  return function(step)
    steps[#steps + 1] = step
  end, function()
    for i = #steps, 1, -1 do
      pcall(steps[i])
    end
  end
end

function M.watch(path, options, on_quit)
  options = options or {}
  -- (As memprof-report: the loop over events has many side traces.)
  require('memprof.cli.report').raise_jit_limits()
  local out, err = options.out or io.stdout, options.err or io.stderr
  local on_undo, undo = undoer()
  local view = new_view(path, options)
  on_undo(function() view.follower:close() end)
  local signal_fd, unblock = signal_reader()
  on_undo(unblock)
  local terminal = not options.plain and out == io.stdout and
    C.isatty(1) == 1
  local ok, reason = pcall(function()
    if terminal then
      local tty = C.open('/dev/tty', O_RDONLY + O_NONBLOCK)
      if tty < 0 then
        error('cannot open /dev/tty for the keys', 0)
      end
      on_undo(function() C.close(tty) end)
      local restore, why = raw_keys()
      if not restore then
        error(why, 0)
      end
      on_undo(restore)
      out:write('\27[?1049h\27[?25l')
      out:flush()
      on_undo(function()
        out:write('\27[?25h\27[?1049l')
        out:flush()
      end)
      return terminal_mode(view, options, make_io(tty, signal_fd))
    end
    return plain_mode(view, options, make_io(0, signal_fd))
  end)
  undo()
  local message = nil
  if not ok then
    message = tostring(reason)
    reason = 'error'
    err:write(PROGRAM, ': ', message, '\n')
  end
  if on_quit then
    on_quit(reason, message)
  end
  return reason == 'error' and 1 or 0
end

-- A word that names a process and no file: a PID.
local function pid_of(word)
  if not word:match('^%d+$') then
    return nil
  end
  local file = io.open(word, 'rb')
  if file then
    file:close()
    return nil
  end
  return tonumber(word)
end

-- `memprof live PID`: the profile of an attach (made here, and undone at
-- quit, or found running, and left so).
local function watch_process(pid, opts, how)
  local attach = require('memprof.cli.attach')
  local out, err = opts.out, opts.err
  local path = attach.attached(pid, how)
  if path then
    out:write(format('%s: process %d is attached already: watching %s\n',
      PROGRAM, pid, path))
    return M.watch(path, opts, function()
      out:write(format('%s: process %d stays attached (memprof detach %d ' ..
        'stops it)\n', PROGRAM, pid, pid))
    end)
  end
  local info, errno
  path, info, errno = attach.start(pid, { output = opts.output,
    stack_depth = opts.stack_depth or 8, dir = how.dir, load = how.load })
  if not path then
    err:write(PROGRAM, ': ', info, '\n')
    return 1
  end
  local status = M.watch(path, opts, function()
    local file, stopped = attach.stop(pid, how)
    if file then
      out:write(format('%s: detached from process %d: wrote %s\n', PROGRAM,
        pid, file))
    else
      err:write(PROGRAM, ': ', stopped, '\n')
      errno = 1
    end
  end)
  return errno == 1 and 1 or status
end

function M.main(args, out, err, how)
  local opts, words = option_parser.command(PROGRAM, M.OPTIONS, usage, args,
    out, err)
  if not opts then
    return words
  end
  if #words ~= 1 then
    err:write(PROGRAM, ': expected one profile file or PID, found ',
      #words == 0 and 'none' or table.concat(words, ' '),
      ' (see memprof live --help)\n')
    return 1
  end
  opts.out, opts.err = out, err
  local pid = pid_of(words[1])
  if pid then
    return watch_process(pid, opts, how or {})
  end
  if opts.output or opts.stack_depth then
    err:write(PROGRAM, ': --', opts.output and 'output' or 'stack-depth',
      ' applies to a PID, not to a file (see memprof live --help)\n')
    return 1
  end
  return M.watch(words[1], opts)
end

return M
