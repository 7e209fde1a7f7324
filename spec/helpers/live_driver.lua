-- Test helpers for memprof live end to end: a luajit child that profiles
-- itself with a planted leak, and memprof live run in the background
-- (under a pseudo-terminal made by `script`, or plain), its keys written
-- to a FIFO and its output read as it comes.
--
--   local D = require('helpers.live_driver')
--   local run = D.new()                 -- a temporary directory
--   run:start_leaker(seconds)           -- the child; profile at run.profile
--   run:start_live(how)                 -- how.tty (under script), how.args
--                                       -- (more words), how.after (a shell
--                                       -- line run after it, under script too),
--                                       -- how.target (the FILE or PID watched)
--   run:keys(text)                      -- written to the keys' FIFO
--   run:stop_leaker()                   -- the child stops its profile
--   run:wait_for(test, seconds) -> output or nil   -- test(output)
--   run:exited(seconds) -> whether memprof live's process ended
--   run:finish()                        -- kills what is left, removes files
--   D.frames(output) -> the frames drawn (split at cursor home)
--   D.LEAK_LINE                         -- the place of the planted leak

local ffi = require('ffi')
local C = require('helpers.command')

pcall(ffi.cdef, 'int poll(void *fds, unsigned long n, int timeout);')

local M = {}

local LUA = os.getenv('MEMPROF_TEST_LUA') or 'luajit'
local ROOT = os.getenv('PWD')

M.LEAK_LINE = '@leaker.lua:9'

-- Keeps 200 strings a round at line 9 (the leak) and makes 400 short-
-- lived tables at line 12, a round every 20 ms, until `stop` exists or
-- the time is up.
local LEAKER = [[
local ffi = require('ffi')
ffi.cdef('int poll(void *fds, unsigned long n, int timeout);')
local memprof = require('memprof')
assert(memprof.start(arg[1], { stack_depth = 4 }))
local keep, seconds, stop = {}, tonumber(arg[2]), arg[3]
local started = os.time()
local function leak(round)
  for i = 1, 200 do
    keep[#keep + 1] = string.rep('x', 100) .. round * 1000 + i
  end
end
local function churn() local t for i = 1, 400 do t = { i } end return t end
local round = 0
while os.time() - started < seconds do
  round = round + 1
  leak(round)
  churn()
  if io.open(stop) then break end
  ffi.C.poll(nil, 0, 20)
end
assert(memprof.stop())
]]

local Run = {}
Run.__index = Run

function M.new()
  local dir = C.temp_dir()
  return setmetatable({ dir = dir, profile = dir .. '/leak.bin',
    stop = dir .. '/stop', out = dir .. '/out.txt', fifo = dir .. '/keys',
    pids = {} }, Run)
end

function M.sleep(seconds)
  ffi.C.poll(nil, 0, math.floor(seconds * 1000))
end

-- Starts a command line in the background, in the run's directory;
-- returns the file that will hold its process id (the command's own:
-- the shell execs it).
function Run:background(name, line)
  local pid_file = self.dir .. '/' .. name .. '.pid'
  assert(os.execute(C.CLEAN_ENV .. 'sh -c ' .. C.quote('echo $$ > ' ..
    C.quote(pid_file) .. '; cd ' .. C.quote(self.dir) .. ' && exec ' ..
    line) .. ' >/dev/null 2>&1 &'))
  self.pids[#self.pids + 1] = pid_file
  return pid_file
end

function Run:start_leaker(seconds)
  C.write_file(self.dir .. '/leaker.lua', LEAKER)
  self:background('leaker', 'timeout 15 env ' ..
    C.quote('LUA_CPATH=' .. ROOT .. '/build/?.so;;') .. ' ' ..
    C.command(LUA, 'leaker.lua', self.profile, seconds, self.stop))
end

-- memprof live's command line.
-- memprof live's command line (of target, default the leaker's profile).
function Run:live_command(args, target)
  local words = { LUA, ROOT .. '/bin/memprof', 'live' }
  for _, word in ipairs(args or {}) do
    words[#words + 1] = word
  end
  words[#words + 1] = target or self.profile
  return C.command(unpack(words))
end

function Run:start_live(how)
  assert(os.execute('mkfifo ' .. C.quote(self.fifo)))
  local command = self:live_command(how.args, how.target)
  -- memprof live's own process id, written by the shell that execs it.
  self.live_pid = self.dir .. '/live.pid'
  local inner = 'sh -c ' .. C.quote('echo $$ > ' .. C.quote(self.live_pid) ..
    '; exec ' .. command)
  if how.after then
    inner = 'sh -c ' .. C.quote(inner .. '; ' .. how.after)
  end
  local line
  if how.tty then
    line = 'timeout 15 script -qfc ' .. C.quote(inner) .. ' /dev/null'
  else
    line = 'timeout 15 ' .. inner
  end
  self:background('driver', 'sh -c ' .. C.quote('exec ' .. line .. ' < ' ..
    C.quote(self.fifo) .. ' > ' .. C.quote(self.out) .. ' 2>&1'))
  -- (Opening the FIFO waits for the shell to open its end.)
  self.keys_file = assert(io.open(self.fifo, 'w'))
end

-- Makes the child stop its profile and end.
function Run:stop_leaker()
  C.write_file(self.stop, '')
end

function Run:keys(text)
  self.keys_file:write(text)
  self.keys_file:flush()
end

function Run:output()
  return C.read_file(self.out) or ''
end

function Run:wait_for(test, seconds)
  local deadline = os.time() + seconds
  repeat
    local output = self:output()
    if test(output) then
      return output
    end
    M.sleep(0.05)
  until os.time() > deadline
  return nil
end

local function alive(pid_file)
  local pid = C.read_file(pid_file)
  if not pid or not pid:match('^%d+') then
    return false
  end
  local status = os.execute('kill -0 ' .. pid:match('^%d+') ..
    ' 2>/dev/null')
  return status == 0 or status == true
end

function Run:signal(name)
  local pid = C.read_file(self.live_pid):match('^%d+')
  assert(os.execute('kill -' .. name .. ' ' .. pid))
end

function Run:exited(seconds)
  local deadline = os.time() + seconds
  repeat
    if not alive(self.live_pid) then
      return true
    end
    M.sleep(0.05)
  until os.time() > deadline
  return false
end

-- Ends every process the run started (SIGTERM, then SIGKILL to those
-- still there after 3 seconds), then removes its files.
function Run:finish()
  C.write_file(self.stop, '')
  if self.keys_file then
    self.keys_file:close()
    self.keys_file = nil
  end
  local files = { self.live_pid }
  for _, pid_file in ipairs(self.pids) do
    files[#files + 1] = pid_file
  end
  for _, signal in ipairs({ 'TERM', 'KILL' }) do
    local left = {}
    for _, pid_file in ipairs(files) do
      if alive(pid_file) then
        left[#left + 1] = pid_file
        os.execute('kill -' .. signal .. ' ' ..
          C.read_file(pid_file):match('^%d+') .. ' 2>/dev/null')
      end
    end
    local deadline = os.time() + 3
    while #left > 0 and os.time() <= deadline do
      M.sleep(0.05)
      local still = {}
      for _, pid_file in ipairs(left) do
        if alive(pid_file) then
          still[#still + 1] = pid_file
        end
      end
      left = still
    end
    files = left
  end
  C.remove_tree(self.dir)
end

-- After a quit or an error: waits for the stty output that `start_live`'s `after`
-- prints, and returns what the terminal printed after the screen was
-- given back (nil, and the output so far, when it did not come).
function Run:terminal_after_quit(seconds)
  local output = self:wait_for(function(text)
    -- (The whole of stty's output.)
    return text:find('stty done', 1, true) ~= nil
  end, seconds or 3)
  if not output then
    return nil, self:output()
  end
  return output:match('\27%[%?25h\27%[%?1049l(.*)$'), output
end

-- The frames of a terminal's output: each begins at cursor home.
function M.frames(output)
  local frames = {}
  for frame in output:gmatch('\27%[H(.-)\27%[J') do
    local lines = {}
    for line in (frame .. '\r\n'):gmatch('(.-)\27%[K\r*\n') do
      lines[#lines + 1] = line:gsub('\27%[%d*m', '')
    end
    frames[#frames + 1] = lines
  end
  return frames
end

return M
