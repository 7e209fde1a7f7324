-- Test helpers: profile a function in this VM, or a script in a fresh
-- interpreter, and read the resulting stream back as plain tables.
local command = require('helpers.command')
local reader = require('memprof.read.stream')

local M = {}

-- The interpreter for child processes (tarantool runs set it).
M.lua = os.getenv('MEMPROF_TEST_LUA') or 'luajit'

local counter = 0

-- This process's id (suites run side by side: names must not collide).
local function process_id()
  local f = io.open('/proc/self/stat', 'r')
  local pid = f and f:read('*n')
  if f then f:close() end
  return pid or 0
end
local PID = process_id()

function M.tmpname(suffix)
  counter = counter + 1
  local dir = os.getenv('TMPDIR') or '/tmp'
  return string.format('%s/memprof-spec-%d-%d-%d%s', dir, PID,
    math.floor(os.clock() * 1e6) % 1e9, counter, suffix or '.bin')
end

-- Copies the reused event table of the reader into a fresh one.
local function copy_event(ev)
  local site = ev.site
  return {
    kind = ev.kind, source = site.source, name = site.name,
    line = site.line, traceno = site.traceno, site = site,
    naddr = ev.naddr, nsize = ev.nsize, oaddr = ev.oaddr, osize = ev.osize,
    stack = ev.stack,
  }
end

-- Reads a whole profile into a list of events; returns it and the stream.
-- Each trace keeps its own site (split_traces): these specs check what
-- the writer recorded, trace numbers included.
function M.read(path)
  local stream = reader.open(path, { split_traces = true })
  local events = {}
  while true do
    local ev = stream:next()
    if not ev then break end
    events[#events + 1] = copy_event(ev)
  end
  return events, stream
end

-- Profiles fn(...) in this VM. Returns the events, the stream, and what
-- collectgarbage('count') said right after start and right before stop.
function M.profile(fn, ...)
  return M.profile_with(nil, fn, ...)
end

-- The same, started with memprof.start's options (nil: none).
function M.profile_with(options, fn, ...)
  local memprof = require('memprof')
  local path = M.tmpname()
  assert(memprof.start(path, options))
  local before = collectgarbage('count')
  -- An error in fn must not leave the profiler running for later specs.
  local ok, err = pcall(fn, ...)
  local after = collectgarbage('count')
  assert(memprof.stop())
  if not ok then
    os.remove(path)
    error(err, 0)
  end
  local events, stream = M.read(path)
  os.remove(path)
  return events, stream, before, after
end

-- The events whose site name is `name` (and kind, if given).
function M.at(events, name, kind)
  local out = {}
  for _, ev in ipairs(events) do
    if ev.name == name and (kind == nil or ev.kind == kind) then
      out[#out + 1] = ev
    end
  end
  return out
end

-- Allocated minus freed bytes over a list of events.
function M.net(events)
  local n = 0
  for _, ev in ipairs(events) do
    n = n + (ev.nsize or 0) - (ev.osize or 0)
  end
  return n
end

-- Sizes of the events, sorted.
function M.sizes(events, field)
  local out = {}
  for _, ev in ipairs(events) do out[#out + 1] = ev[field or 'nsize'] end
  table.sort(out)
  return out
end

local shell_quote = command.quote

-- Starts a Lua script in a child interpreter; returns a function that
-- waits for it and returns its output (stdout and stderr together) and
-- exit code (124 if it ran for over two minutes). Children started one
-- after another run side by side until waited for.
function M.start_script(source, env)
  local script = M.tmpname('.lua')
  local f = assert(io.open(script, 'w'))
  f:write(source)
  f:close()
  -- A hung child fails the spec instead of hanging the suite.
  local pipe = assert(io.popen(command.CLEAN_ENV .. (env or '') .. ' timeout 120 ' .. M.lua .. ' ' ..
    shell_quote(script) .. ' 2>&1; echo "exit=$?"'))
  return function()
    local out = pipe:read('*a')
    pipe:close()
    os.remove(script)
    local code = tonumber(out:match('exit=(%d+)%s*$'))
    return out:gsub('exit=%d+%s*$', ''), code
  end
end

-- Runs a Lua script in a child interpreter (M.start_script) and waits.
function M.run_script(source, env)
  return M.start_script(source, env)()
end

M.shell_quote = shell_quote

-- A chunk with a fixed name, so lines are known: line 1 is the first line.
function M.chunk(source, name)
  return assert(loadstring(source, name))
end

return M
