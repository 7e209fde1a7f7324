-- nginx with OpenResty's Lua module (Debian's libnginx-mod-http-lua and
-- luajit2, unpacked into build/nginx by .ci/install-nginx). ngx_lua
-- replaces coroutine.* with its own scheduler's functions (which yield to
-- nginx, and refuse to run in init_worker_by_lua*), and warns when a
-- request writes a global. The profiler must work from every context a
-- worker runs Lua in: init_worker_by_lua*, request handlers, timers.
--
-- Each scenario runs its own nginx (one worker, so every request reaches
-- the VM that profiles) and reads the profile back: a request runs a
-- workload from a Lua file of the server's directory, which makes WORK_N
-- tables at a known line, and the profile must hold exactly WORK_N
-- allocations there.
--
-- nginx runs its own VM (OpenResty's luajit2), whichever VM runs the suite,
-- so these specs run in one suite only: the one that sets
-- MEMPROF_TEST_NGINX (make test-hosts).
local nginx = require('helpers.nginx')
if not nginx.available() or os.getenv('MEMPROF_TEST_NGINX') == nil then
  return
end

local h = require('helpers.profile')
local C = require('helpers.command')
local pprof_read = require('helpers.pprof_read')
local consumers = require('helpers.consumers')

local WORK_N = 500
local WORK_LINE = 12

-- Compiled code is charged to its trace, not to a line: the workload runs
-- in the interpreter (jit.off for this chunk and every function in it).
local WORKLOAD = [[
-- The workload of spec/hosts/nginx_spec.lua.
local M = {}
if jit then jit.off(true, true) end

function M.run(n)
  local keep = {}
  -- The array part is sized here, so that line 12 makes the tables only.
  for i = 1, n do
    keep[i] = false
  end
  for i = 1, n do
    keep[i] = {}
  end
  return keep
end

return M
]]

-- State shared by the contexts of the worker (a module is per VM).
local STATE = 'return {}\n'

local START = [[
local ok, err = require('memprof').start(ngx.config.prefix() ..
  'profile.bin')
ngx.say(tostring(ok), ' ', tostring(err))
]]

local STOP = [[
local ok, err = require('memprof').stop()
ngx.say(tostring(ok), ' ', tostring(err))
]]

local WORK = string.format([[
require('workload').run(%d)
ngx.say('ok')
]], WORK_N)

local RUNNING = [[
ngx.say(tostring(require('memprof').is_running()))
]]

-- Lines of error.log that are not notices, at most 40 of them.
local function log_excerpt(server)
  local out = {}
  for line in server:error_log():gmatch('[^\n]+') do
    if not line:find('[notice]', 1, true) then
      out[#out + 1] = line
      if #out == 40 then break end
    end
  end
  return table.concat(out, '\n')
end

-- GET path: it must answer 200 with `expected` (without the newline).
local function expect(server, path, expected)
  local status, body = server:get(path)
  body = body:gsub('\n$', '')
  assert(status == 200 and body == expected, string.format(
    'GET %s: expected 200 %q, got %d %q; error.log:\n%s', path, expected,
    status, body, log_excerpt(server)))
end

-- The allocations of the profile at the workload's table line.
local function workload_allocations(server, profile)
  local events, stream = h.read(profile)
  assert.is_nil(stream.warning)
  local name = '@' .. server:path('workload.lua') .. ':' .. WORK_LINE
  local at, sizes = {}, {}
  for _, ev in ipairs(events) do
    if ev.kind == 'alloc' and ev.name == name then
      at[#at + 1] = ev
      sizes[ev.nsize] = (sizes[ev.nsize] or 0) + 1
    end
  end
  return at, sizes
end

-- Exactly WORK_N tables at the workload's line, all of one size.
local function assert_workload(server, profile)
  local at, sizes = workload_allocations(server, profile)
  assert.equal(WORK_N, #at)
  local n = 0
  for _ in pairs(sizes) do n = n + 1 end
  assert.equal(1, n, 'every table at the line has the same size')
end

-- The workload in one request, the stop in another: the profile has
-- exactly the workload's tables.
local function work_and_stop(server)
  expect(server, '/work', 'ok')
  expect(server, '/stop', 'true nil')
  assert_workload(server, server:path('profile.bin'))
end

-- ngx_lua warns in error.log on every new global a request writes.
local function assert_no_global_write(server)
  assert(not server:error_log():find('writing a global Lua variable', 1,
    true), 'a global was written; error.log:\n' .. log_excerpt(server))
end

local function start_server(opts)
  opts.files = opts.files or {}
  opts.files['workload.lua'] = WORKLOAD
  opts.files['state.lua'] = STATE
  opts.locations = opts.locations or {}
  opts.locations['/start'] = START
  opts.locations['/work'] = WORK
  opts.locations['/stop'] = STOP
  opts.locations['/running'] = RUNNING
  return nginx.start(opts)
end

describe('nginx with ngx_lua', function()
  it('profiles from init_worker_by_lua_block to a request', function()
    local s = start_server({
      init_worker = [[
local ok, err = require('memprof').start(
  ngx.config.prefix() .. 'profile.bin')
if not ok then ngx.log(ngx.ERR, 'memprof.start: ', err) end
]],
    })
    finally(function() s:stop() end)
    expect(s, '/running', 'true')
    work_and_stop(s)
  end)

  it('profiles between requests: start, workload, stop', function()
    local s = start_server({})
    finally(function() s:stop() end)
    expect(s, '/start', 'true nil')
    expect(s, '/running', 'true')
    work_and_stop(s)
  end)

  it('profiles from an ngx.timer.at callback to a request', function()
    local s = start_server({ locations = {
      ['/timer'] = [[
local ok, err = ngx.timer.at(0, function()
  local ok, err = require('memprof').start(ngx.config.prefix() ..
    'profile.bin')
  require('state').timer = tostring(ok) .. ' ' .. tostring(err)
end)
ngx.say(ok and 'scheduled' or 'not scheduled: ' .. tostring(err))
]],
      ['/state'] = [[
ngx.say(tostring(require('state').timer))
]],
    } })
    finally(function() s:stop() end)
    expect(s, '/timer', 'scheduled')
    -- The timer runs after the request: wait until it has ('nil' before,
    -- then what memprof.start said).
    local body = s:poll('/state', ' ', 50)
    assert(body, 'the timer did not run; error.log:\n' .. log_excerpt(s))
    assert.equal('true nil', (body:gsub('\n$', '')),
      'memprof.start in the timer; error.log:\n' .. log_excerpt(s))
    expect(s, '/running', 'true')
    work_and_stop(s)
  end)

  it('loads in a request without writing a global', function()
    local s = start_server({ locations = {
      ['/load'] = [[
local memprof = require('memprof')
ngx.say(type(memprof.start), ' ', type(memprof.stop))
]],
    } })
    finally(function() s:stop() end)
    expect(s, '/load', 'function function')
    assert_no_global_write(s)
  end)

  -- The module loaded and calibrated in the master (init_by_lua_block),
  -- its layout inherited by the worker through fork().
  it('profiles between requests once the master calibrated', function()
    local s = start_server({
      init = [[
local info = require('memprof').info()
if not info.calibrated then
  ngx.log(ngx.ERR, 'memprof.info: ', info.error)
end
]],
    })
    finally(function() s:stop() end)
    expect(s, '/start', 'true nil')
    work_and_stop(s)
    assert_no_global_write(s)
  end)

  -- Production mode: a worker recording all along (from
  -- init_worker_by_lua*), asked for a pprof snapshot of its live heap by a
  -- request, while the profile goes on. The workload's tables are kept in
  -- the worker's state, so they are live at the snapshot: exactly WORK_N
  -- blocks at the workload's line, in our reading of the file and in go
  -- tool pprof's; the profile's own file then still has them all.
  it('writes a pprof snapshot of a worker\'s live heap through a request',
    function()
    local s = start_server({
      init_worker = [[
local ok, err = require('memprof').start(
  ngx.config.prefix() .. 'profile.bin', { snapshots = true })
if not ok then ngx.log(ngx.ERR, 'memprof.start: ', err) end
]],
      locations = {
        ['/keep'] = string.format([[
require('state').kept = require('workload').run(%d)
ngx.say('ok')
]], WORK_N),
        ['/snapshot'] = [[
local ok, err = require('memprof').snapshot(ngx.config.prefix() ..
  'heap.pb.gz')
ngx.say(tostring(ok), ' ', tostring(err))
]],
      },
    })
    finally(function() s:stop() end)
    expect(s, '/keep', 'ok')
    expect(s, '/snapshot', 'true nil')
    local place = s:path('workload.lua') .. ':' .. WORK_LINE
    local at = pprof_read.by_place(pprof_read.file(s:path('heap.pb.gz')))[place]
    assert(at, 'no place ' .. place .. ' in the snapshot')
    -- alloc_space, alloc_objects, inuse_space, inuse_objects: every table
    -- made is live.
    assert.are.same({ WORK_N, WORK_N }, { at[2], at[4] })
    assert.are.equal(at[1], at[3])
    local code, out, err = consumers.pprof(s.dir, '-top', '-lines',
      '-sample_index=inuse_objects', s:path('heap.pb.gz'))
    assert.are.same({ 0, '' }, { code, err })
    assert.is_truthy(out:find('\n%s+' .. WORK_N .. ' [%d.]+%% [%d.]+%%%s+' ..
      WORK_N .. ' [%d.]+%%  [^\n]*' .. place:gsub('%p', '%%%0') .. '\n'),
      out)
    expect(s, '/stop', 'true nil')
    assert_workload(s, s:path('profile.bin'))
  end)

  -- A profile started in the master with %p in its path goes on in each
  -- worker into the worker's own file. Two workers: the one that answers
  -- the workload's request has exactly its tables; the other has none,
  -- and neither has the master's.
  it('gives each worker a file of its own with a %p path', function()
    local s = start_server({
      workers = 2,
      init = [[
local ok, err = require('memprof').start(ngx.config.prefix() ..
  'profile-%p.bin')
if not ok then ngx.log(ngx.ERR, 'memprof.start: ', err) end
]],
      locations = { ['/work-pid'] = string.format([[
require('workload').run(%d)
ngx.say(ngx.worker.pid())
]], WORK_N) },
    })
    finally(function() s:stop() end)
    local status, body = s:get('/work-pid')
    assert.equal(200, status, log_excerpt(s))
    local worker = body:match('^(%d+)')
    s:quit()
    local _, listing = C.run('ls ' .. C.quote(s.dir))
    local files = {}
    for pid in listing:gmatch('profile%-(%d+)%.bin') do
      files[#files + 1] = pid
    end
    -- The master's and the two workers'.
    assert.equal(3, #files, 'files: ' .. table.concat(files, ' '))
    assert_workload(s, s:path('profile-' .. worker .. '.bin'))
    for _, pid in ipairs(files) do
      if pid ~= worker then
        local at = workload_allocations(s, s:path('profile-' .. pid .. '.bin'))
        assert.equal(0, #at)
      end
    end
  end)
end)
