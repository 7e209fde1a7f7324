-- Reads a profile as memprof live does (memprof.read.follow, then
-- memprof.analysis.live consuming every event), by line or by stack, and
-- prints the CPU seconds and the events:
--   luajit bench/live_read.lua FILE line|stack
-- (bench/reporter.lua runs it under /usr/bin/time for the peak RSS.)

local follow = require('memprof.read.follow')
local live = require('memprof.analysis.live')

local path, grouping = arg[1], arg[2] or 'line'
-- (LuaJIT's limits as memprof live sets them.)
require('memprof.cli.report').raise_jit_limits()
local started = os.clock()
local follower = follow.new(path)
local stream = assert(follower:poll(), 'no profile at ' .. path)
local state = live.new(stream, { stacks = grouping == 'stack' })
state:consume()
state:sample(0)
local rows = #state:rows(grouping)
io.write(string.format('%.3f %d %d\n', os.clock() - started, state.events,
  rows))
follower:close()
