-- Test helpers: run Debian's nginx with OpenResty's Lua module (unpacked
-- into build/nginx by .ci/install-nginx, never installed) on 127.0.0.1,
-- send it requests with curl, and always stop it and delete its files.
--
--   local nginx = require('helpers.nginx')
--   local ok, why = nginx.available()   -- false and why: skip the spec
--   local server = nginx.start({
--     init = 'lua code',              -- init_by_lua_block (the master)
--     init_worker = 'lua code',       -- init_worker_by_lua_block
--     http = 'more directives;',      -- inside http { }
--     locations = { ['/path'] = 'lua code' },  -- content_by_lua_block
--     files = { ['name.lua'] = 'source' },     -- written into server.dir,
--                                              -- which lua_package_path
--                                              -- covers: require('name')
--     workers = 1,                    -- worker_processes
--     time_limit = 120,               -- seconds nginx may run at most
--   })
--   server.dir, server.port           -- its prefix directory and its port
--                                     -- (/ready is taken: it answers 204)
--   server:path('p.bin')              -- a file in server.dir
--   server:get('/path') -> HTTP status (0: no answer), body
--   server:poll('/path', pattern [, tries]) -> body once it matches, or nil
--   server:error_log() -> error.log so far
--   server:quit()                     -- ends nginx, keeps its files
--   server:stop()                     -- idempotent; call it in finally()
--
-- Lua code in the configuration is placed between braces as is; it must
-- keep them balanced. Requests go to 127.0.0.1 only, through curl with
-- every proxy bypassed. nginx runs in the foreground under timeout(1), so
-- it never outlives time_limit even if stop() is never reached.
local command = require('helpers.command')

local M = {}

local NGINX = '/usr/sbin/nginx'

M.root = command.ROOT
M.dir = M.root .. '/build/nginx'
M.modules = M.dir .. '/usr/lib/nginx/modules'
M.libdir = M.dir .. '/usr/lib/x86_64-linux-gnu'
M.lua_dir = M.dir .. '/usr/share/lua/5.1'

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- Whether everything is here; if not, false and what is missing.
function M.available()
  local needed = {
    M.modules .. '/ndk_http_module.so',
    M.modules .. '/ngx_http_lua_module.so',
    M.libdir .. '/libluajit-5.1.so.2',
    M.lua_dir .. '/resty/core.lua',
    M.root .. '/build/memprof.so',
    NGINX,
  }
  for _, path in ipairs(needed) do
    if not exists(path) then
      return false, path .. ' is missing (.ci/install-nginx, make)'
    end
  end
  for _, program in ipairs({ 'curl', 'timeout' }) do
    if not command.have(program) then
      return false, program .. ' is not installed'
    end
  end
  return true
end

local function sleep(seconds)
  os.execute('sleep ' .. seconds)
end

local function alive(pid)
  return pid ~= nil and
    command.run('kill -0 ' .. pid .. ' 2>/dev/null') == 0
end

-- A port from 20000 to 59999, from /dev/urandom (math.random may be seeded
-- the same way in every run).
local function random_port()
  local f = assert(io.open('/dev/urandom', 'rb'))
  local a, b = f:read(2):byte(1, 2)
  f:close()
  return 20000 + (a * 256 + b) % 40000
end

local function is_root()
  local code, out = command.run('id -u')
  return code == 0 and out:match('^0%s*$') ~= nil
end

local function block(directive, code)
  if code == nil then
    return ''
  end
  return '    ' .. directive .. ' {\n' .. code .. '\n    }\n'
end

-- nginx.conf for a server on 127.0.0.1:port with prefix dir.
local function config(opts, dir, port)
  local lines = {
    'load_module ' .. M.modules .. '/ndk_http_module.so;',
    'load_module ' .. M.modules .. '/ngx_http_lua_module.so;',
    -- As root the workers would run as nobody, who cannot write here.
    is_root() and 'user root root;' or '',
    'daemon off;',
    'master_process on;',
    'worker_processes ' .. (opts.workers or 1) .. ';',
    'pid ' .. dir .. '/nginx.pid;',
    'error_log ' .. dir .. '/logs/error.log notice;',
    'events { worker_connections 64; }',
    'http {',
    '  access_log off;',
    '  client_body_temp_path ' .. dir .. '/client_body;',
    '  proxy_temp_path ' .. dir .. '/proxy;',
    '  fastcgi_temp_path ' .. dir .. '/fastcgi;',
    '  uwsgi_temp_path ' .. dir .. '/uwsgi;',
    '  scgi_temp_path ' .. dir .. '/scgi;',
    "  lua_package_path '" .. dir .. '/?.lua;' .. M.lua_dir .. '/?.lua;' ..
      M.root .. "/lua/?.lua;;';",
    "  lua_package_cpath '" .. M.root .. "/build/?.so;;';",
    block('init_by_lua_block', opts.init),
    block('init_worker_by_lua_block', opts.init_worker),
    opts.http or '',
    '  server {',
    '    listen 127.0.0.1:' .. port .. ';',
    '    location = /ready { return 204; }',
  }
  local paths = {}
  for path in pairs(opts.locations or {}) do
    paths[#paths + 1] = path
  end
  table.sort(paths)
  for _, path in ipairs(paths) do
    lines[#lines + 1] = '    location = ' .. path .. ' {'
    lines[#lines + 1] = block('content_by_lua_block', opts.locations[path])
    lines[#lines + 1] = '    }'
  end
  lines[#lines + 1] = '  }'
  lines[#lines + 1] = '}'
  return table.concat(lines, '\n') .. '\n'
end

local Server = {}
Server.__index = Server

function Server:path(name)
  return self.dir .. '/' .. name
end

function Server:error_log()
  return command.read_file(self:path('logs/error.log')) or ''
end

-- GET http://127.0.0.1:port/path: the HTTP status (0 when nothing
-- answered) and the body.
function Server:get(path, seconds)
  local body_path = self:path('curl.body')
  os.remove(body_path)
  local _, out = command.run(command.command('curl', '-sS', '--noproxy', '*',
    '-m', tostring(seconds or 20), '-o', body_path, '-w', '%{http_code}',
    'http://127.0.0.1:' .. self.port .. path))
  local body = command.read_file(body_path) or ''
  os.remove(body_path)
  return tonumber(out:match('(%d+)%s*$')) or 0, body
end

-- Asks for path until its body matches pattern (tries of 0.1 s at least).
function Server:poll(path, pattern, tries)
  for _ = 1, tries or 100 do
    local status, body = self:get(path, 5)
    if status == 200 and body:find(pattern) then
      return body
    end
    sleep(0.1)
  end
  return nil
end

local function master_pid(server)
  local pid = command.read_file(server:path('nginx.pid'))
  return pid and pid:match('^(%d+)')
end

-- Ends nginx (gracefully, within 10 s, else killed) and keeps its files.
function Server:quit()
  if self.quit_done then
    return
  end
  self.quit_done = true
  local pid = master_pid(self)
  if pid and alive(pid) then
    command.run('kill -QUIT ' .. pid .. ' 2>/dev/null')
    for _ = 1, 100 do
      if not alive(pid) then break end
      sleep(0.1)
    end
    if alive(pid) then
      -- Its workers first (children of this master only), then itself.
      command.run('pkill -KILL -P ' .. pid .. ' 2>/dev/null')
      command.run('kill -KILL ' .. pid .. ' 2>/dev/null')
    end
  end
  -- timeout(1) ends with nginx; it is ended too if nginx never started.
  if alive(self.timeout_pid) then
    command.run('kill -TERM ' .. self.timeout_pid .. ' 2>/dev/null')
    for _ = 1, 50 do
      if not alive(self.timeout_pid) then break end
      sleep(0.1)
    end
  end
end

function Server:stop()
  if self.stopped then
    return
  end
  self.stopped = true
  self:quit()
  command.remove_tree(self.dir)
end

-- Starts nginx on a free port: a random one, another if it is taken.
-- Returns the server once it answers; raises (after cleaning up) if not.
function M.start(opts)
  local available, why = M.available()
  assert(available, why)
  local last_log = ''
  for _ = 1, 8 do
    local dir = command.temp_dir()
    local server = setmetatable({ dir = dir, port = random_port() }, Server)
    assert(os.execute('mkdir -p ' .. command.quote(dir .. '/logs')))
    os.execute('chmod 755 ' .. command.quote(dir))
    for name, source in pairs(opts.files or {}) do
      command.write_file(server:path(name), source)
    end
    command.write_file(server:path('nginx.conf'),
      config(opts, dir, server.port))
    local code, out = command.run('LD_LIBRARY_PATH=' ..
      command.quote(M.libdir) .. ' timeout -k 5 ' ..
      (opts.time_limit or 120) .. ' ' .. NGINX .. ' -e ' ..
      command.quote(dir .. '/logs/error.log') .. ' -p ' ..
      command.quote(dir) .. ' -c ' .. command.quote(dir .. '/nginx.conf') ..
      ' >' .. command.quote(dir .. '/logs/stdout') .. ' 2>&1 & echo $!')
    assert(code == 0, 'cannot start nginx')
    server.timeout_pid = out:match('(%d+)')
    local ready = false
    for _ = 1, 100 do
      if not alive(server.timeout_pid) then break end
      if master_pid(server) and server:get('/ready', 1) == 204 then
        ready = true
        break
      end
      sleep(0.1)
    end
    if ready then
      return server
    end
    last_log = server:error_log() ..
      (command.read_file(server:path('logs/stdout')) or '')
    server:stop()
    if not last_log:find('Address already in use', 1, true) then
      break
    end
  end
  error('nginx did not start:\n' .. last_log, 2)
end

-- Runs fn(server) and stops the server whatever happens.
function M.with(opts, fn)
  local server = M.start(opts)
  local ok, err = pcall(fn, server)
  server:stop()
  if not ok then
    error(err, 0)
  end
end

-- A module that leaks: every page rendered is kept, under its key (the
-- heap snapshot specs' application).
M.CATALOG = [[
local M = { rendered_cache = {} }

function M.render(key)
  local body = string.rep('<li>' .. key .. '</li>', 50)
  M.rendered_cache[key] = body
  return #body
end

return M
]]

-- Requests path and checks that the answer is 200 with body `expected`.
function M.expect(server, path, expected)
  local status, body = server:get(path)
  body = body:gsub('\n$', '')
  assert(status == 200 and body == expected, string.format(
    'GET %s: expected 200 %q, got %d %q; error.log:\n%s', path, expected,
    status, body, server:error_log()))
end

-- The process id of the server's one worker: the one child of its master.
function M.worker_pid(server)
  local master = command.read_file(server:path('nginx.pid')):match('%d+')
  local children = command.read_file('/proc/' .. master .. '/task/' ..
    master .. '/children')
  local pids = {}
  for pid in children:gmatch('%d+') do
    pids[#pids + 1] = pid
  end
  assert(#pids == 1, 'expected one worker, found ' .. children)
  return pids[1]
end

return M
