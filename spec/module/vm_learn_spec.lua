-- What is learned once per process (the layout, the built-ins' names) and
-- the trace a start and a stop leave in the VM they profile: none.
local h = require('helpers.profile')

-- A child script that loads the module and the reader from this tree.
local function script(body)
  return 'package.cpath = ' .. string.format('%q', package.cpath) .. '\n' ..
    'package.path = ' .. string.format('%q', package.path) .. '\n' .. body
end

-- Runs body in a child (env: a shell prefix); returns its output.
local function child(body, env)
  local out, code = h.run_script(script(body), env)
  assert.equal(0, code, out)
  return out
end

-- The program of issue 10, profiled by its ROUNDS-th start and printed as
-- one line per start: the events of the profile by kind and place, and
-- whether the stream's net bytes equal what collectgarbage('count') says
-- the heap grew by between just before start and just after stop.
local PROGRAM = [[
local memprof = require('memprof')
local reader = require('memprof.read.stream')
require('table.new')
local OPTIONS = OPTIONS_HERE
local JIT = JIT_HERE
if JIT then jit.on() jit.opt.start('hotloop=1000') else jit.off() end
local path = PATH_HERE

local function summary(before, after, file)
  local s = reader.open(file)
  local counts, order, net = {}, {}, 0
  while true do
    local ev = s:next()
    if not ev then break end
    net = net + (ev.nsize or 0) - (ev.osize or 0)
    local key = ev.kind .. ' ' .. ev.site.name
    if not counts[key] then order[#order + 1] = key end
    counts[key] = (counts[key] or 0) + 1
  end
  s:close()
  table.sort(order)
  for i, key in ipairs(order) do order[i] = key .. ' x' .. counts[key] end
  return table.concat(order, ', ') .. '; net ' ..
    (net == (after - before) * 1024 and 'equal' or
     string.format('%d, heap %d', net, (after - before) * 1024))
end

-- Nothing the program makes between the collections and the profile's
-- end may become garbage, or the collector would free it in the profile.
-- Each collection also halves the VM's string buffer down to 64 bytes
-- (a realloc): many collections first leave it nothing to halve.
local paths = { path .. 1, path .. 2, path .. 3 }
local heap = { 0, 0, 0, 0, 0, 0 }
for round = 1, 3 do
  for _ = 1, 20 do collectgarbage() end
  local before = collectgarbage('count')
  assert(memprof.start(paths[round], OPTIONS))
  local t = table.new(20, 0)
  for i = 1, 20 do t[i] = tostring(i + 0.5) end
  t = nil
  collectgarbage()
  assert(memprof.stop())
  local after = collectgarbage('count')
  heap[2 * round - 1], heap[2 * round] = before, after
end
for round = 1, 3 do
  print(summary(heap[2 * round - 1], heap[2 * round], paths[round]))
  os.remove(paths[round])
end
]]

local function program(options, jit_on)
  local path = h.tmpname()
  return (PROGRAM:gsub('OPTIONS_HERE', options)
    :gsub('JIT_HERE', tostring(jit_on))
    :gsub('PATH_HERE', string.format('%q', path)))
end

-- The lines of the table and of the strings in the child's script (two
-- lines of paths come first).
local function line_of(text)
  local before = PROGRAM:sub(1, PROGRAM:find(text, 1, true))
  local _, newlines = before:gsub('\n', '')
  return newlines + 3
end
local TABLE_LINE = line_of('local t = table.new(20, 0)')
local STRING_LINE = TABLE_LINE + 1

-- (The collector's frees are named as such in the extended format.)
local ONLY_THE_PROGRAM = 'alloc @%s:' .. TABLE_LINE .. ' x2, alloc @%s:' ..
  STRING_LINE .. ' x20, ' ..
  'free %s x22; net equal'

local function expected(out, options)
  local chunk = out:match('alloc @(.-):' .. TABLE_LINE) or '?'
  local collector = (options or 'nil') == 'nil' and 'INTERNAL' or
    'INTERNAL (garbage collector)'
  local line = string.format(ONLY_THE_PROGRAM, chunk, chunk, collector)
  return line .. '\n' .. line .. '\n' .. line .. '\n'
end

describe('a start and a stop leave nothing in the profile', function()
  for _, case in ipairs({
    { 'JIT on, no options', 'nil', true },
    { 'JIT off, no options', 'nil', false },
    { 'JIT on, stacks and time marks',
      '{ stack_depth = 4, timestamps = true }', true },
    { 'JIT off, stacks and time marks',
      '{ stack_depth = 4, timestamps = true }', false },
  }) do
    it('first, second and third start, ' .. case[1], function()
      local out = child(program(case[2], case[3]))
      assert.equal(expected(out, case[2]), out)
    end)
  end

  it('first, second and third start, calibrated in the profiled VM',
    function()
    -- The calibration's garbage is collected before the profile starts.
    -- What it keeps in that VM (grown buffers of the VM and the JIT
    -- compiler) was there before the profile, so the first profile has
    -- only the program's events, but the heap may have grown by more than
    -- their net.
    local out = child(program('nil', true), 'MEMPROF_CALIBRATE=profiled-vm')
    local want = expected(out)
    assert.equal(want:match('^([^;]*);'), out:match('^([^;]*);'))
    assert.equal(want:match('\n(.*)$'), out:match('\n(.*)$'))
  end)
end)

-- The collector's settings around the first start (which calibrates).
local COLLECTOR = [[
local memprof = require('memprof')
collectgarbage('setpause', 137)
collectgarbage('setstepmul', 311)
collectgarbage('stop')
local weak = setmetatable({}, { __mode = 'v' })
weak[1] = {}
local path = PATH_HERE
assert(memprof.start(path))
assert(memprof.stop())
os.remove(path)
local pause = collectgarbage('setpause', 200)
local stepmul = collectgarbage('setstepmul', 200)
print(collectgarbage('isrunning'), pause, stepmul, weak[1] ~= nil,
  memprof.info().calibrated_in)
]]

describe('the first start', function()
  local function run(env)
    return child(COLLECTOR:gsub('PATH_HERE',
      string.format('%q', h.tmpname())), env)
  end

  it('leaves the collector as found: stopped, pause and step multiplier',
    function()
    assert.equal('false\t137\t311\ttrue\tseparate VM\n', run())
  end)

  it('leaves a stopped collector stopped when calibrating in the profiled VM',
    function()
    -- The calibration collects its own garbage there (the weak table's
    -- object goes with it), then stops the collector again.
    assert.equal('false\t137\t311\tfalse\tprofiled VM\n',
      run('MEMPROF_CALIBRATE=profiled-vm'))
  end)
end)

describe('the built-ins', function()
  it('are named at every start from what the first one learned',
    function()
    local path = h.tmpname()
    local out = child(string.format([[
local memprof = require('memprof')
local reader = require('memprof.read.stream')
local names = {}
for round = 1, 2 do
  assert(memprof.start(%q))
  pcall(string.rep, 'x', 100 + round)
  local it = string.gmatch('a' .. (7340 + round) .. 'b', '%%d+')
  pcall(it)
  assert(memprof.stop())
  local r = reader.open(%q)
  while true do
    local ev = r:next()
    if not ev then break end
    if ev.site.source == 'c' then
      names[ev.site.name] = (names[ev.site.name] or 0) + 1
    end
  end
  r:close()
end
os.remove(%q)
local list = {}
for name, n in pairs(names) do list[#list + 1] = name .. ' x' .. n end
table.sort(list)
print(table.concat(list, ', '))
]], path, path, path))
    assert.equal('string.gmatch iterator x2, string.rep x2\n', out)
  end)
end)
