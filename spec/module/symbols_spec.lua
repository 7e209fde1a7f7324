-- Lazy symbols: each place is described once, right before its first
-- event, and described again when the VM reuses its address.
local h = require('helpers.profile')
local reader = require('memprof.read.stream')

-- The whole file as a string.
local function contents(path)
  local f = assert(io.open(path, 'rb'))
  local data = f:read('*a')
  f:close()
  return data
end

describe('symbols', function()
  setup(function() jit.off() end)
  teardown(function() jit.on() end)

  it('start with an empty symbol table', function()
    local path = h.tmpname()
    local memprof = require('memprof')
    assert(memprof.start(path))
    assert(memprof.stop())
    -- Both headers, the final symbol marker, then the epilogue at once.
    assert.equal('ljs\3\0\0\0\128ljm\3\0\0\0', contents(path):sub(1, 15))
    os.remove(path)
  end)

  it('name the C functions of package.loaders by their field where no ' ..
    'symbol names them', function()
    -- require of a file runs the VM's Lua loader, a plain C function (no
    -- built-in) that parses the file: its allocations are its own. A
    -- stripped binary (Debian's luajit) has no symbol for it, so it is
    -- named by the field that holds it; builds with a symbol table name
    -- it by its symbol.
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute('mkdir ' .. dir))
    local f = assert(io.open(dir .. '/loaded_module.lua', 'w'))
    f:write('local M = {}\nfor i = 1, 5 do M[i] = function() return i end end',
      '\nreturn M\n')
    f:close()
    local path = package.path
    package.path = dir .. '/?.lua;' .. path
    local events = h.profile(function() return require('loaded_module') end)
    package.path = path
    package.loaded.loaded_module = nil
    os.execute('rm -r ' .. dir)
    local names = {}
    for _, ev in ipairs(events) do
      if ev.source == 'c' and ev.kind == 'alloc' then
        names[ev.name] = (names[ev.name] or 0) + 1
      end
    end
    local build = os.getenv('MEMPROF_TEST_BUILD') or ''
    local name = build:find('^Debian bookworm luajit') and
      'package.loaders[2]' or
      (names['lj_cf_package_loader_lua'] and 'lj_cf_package_loader_lua' or
       'package.loaders[2]')
    assert.is_true((names[name] or 0) > 0, name .. ' has no allocation')
    for other in pairs(names) do
      assert.not_matches('%+0x', other)
    end
  end)

  it('describe a prototype again when its address is reused', function()
    local events = h.profile(function()
      for i = 1, 200 do
        local f = loadstring('local t = {}\nreturn t', '@chunk' .. i)
        f()
        f = nil
        collectgarbage()
      end
    end)
    -- Every chunk's allocation carries its own name...
    local names, addrs, reused = {}, {}, 0
    for _, ev in ipairs(events) do
      if ev.source == 'lua' and ev.name:match('^@chunk%d+:1$') then
        assert.is_nil(names[ev.name], ev.name .. ' seen twice')
        names[ev.name] = true
        if addrs[ev.site.addr] then reused = reused + 1 end
        addrs[ev.site.addr] = true
      end
    end
    for i = 1, 200 do assert.is_true(names['@chunk' .. i .. ':1']) end
    -- ...although the collector handed the same prototype address to
    -- several of them.
    assert.is_true(reused >= 10, reused .. ' reused prototype addresses')
  end)

  it('describe each place once while its address lives', function()
    local path = h.tmpname()
    local memprof = require('memprof')
    local f = h.chunk('local t = {}\nreturn t', '@once.lua')
    assert(memprof.start(path))
    for _ = 1, 100 do f() end
    assert(memprof.stop())
    local stream = reader.open(path)
    local n = 0
    while stream:next() do n = n + 1 end
    -- One description of @once.lua: the chunk name appears once.
    local _, count = contents(path):gsub('@once%.lua', '')
    assert.equal(1, count)
    assert.is_true(n >= 100)
    os.remove(path)
  end)
end)

-- Names of C functions: dynamic symbols, then the symbol table of the
-- object (or of its separate debug file), else the object's real path and
-- the offset.
local C = require('helpers.command')

-- The real path of a file.
local function real_path(path)
  local code, out = C.run(C.command('readlink', '-f', path))
  assert.equal(0, code)
  return (out:gsub('\n$', ''))
end

-- The address of a function in an object's numbering, from nm, as
-- written after a '+'.
local function offset_of(object, name)
  local code, out = C.run(C.command('nm', object))
  assert.equal(0, code)
  local value = out:match('(%x+) t ' .. name .. '\n')
  assert.is_string(value, name .. ' in ' .. object)
  return string.format('0x%x', tonumber(value, 16))
end

-- Allocation events from C functions, counted by name.
local function c_names(events)
  local counts = {}
  for _, ev in ipairs(events) do
    if ev.source == 'c' and ev.kind == 'alloc' then
      counts[ev.name] = (counts[ev.name] or 0) + 1
    end
  end
  return counts
end

-- Runs `script` (which profiles into the path in the global PROFILE) with
-- the given command; returns the events of its profile.
local function profile_child(command, script, env)
  local profile, file = h.tmpname(), h.tmpname('.lua')
  C.write_file(file, string.format('PROFILE = %q\n', profile) .. script)
  local code, out, err = C.run((env and env .. ' ' or '') .. 'timeout 120 ' ..
    command .. ' ' .. C.quote(file))
  os.remove(file)
  assert.equal(0, code, out .. err)
  local events = h.read(profile)
  os.remove(profile)
  return events
end

-- The static_host script: three tables made by the program's static
-- function, which makes four blocks.
local HOST_SCRIPT = [[
local memprof = require('memprof')
assert(memprof.start(PROFILE))
host_make_tables(3)
assert(memprof.stop())
]]

-- Profiles make_pairs(3) of the C module at path: five blocks (a table,
-- its hash part, three tables).
local function module_names(path)
  local module = assert(package.loadlib(path, 'luaopen_test_cmodule'))()
  return c_names(h.profile(function() module.make_pairs(3) end))
end

describe('names of C functions', function()
  setup(function() jit.off() end)
  teardown(function() jit.on() end)

  it('name a static function of the program from its symbol table, ' ..
    'whatever its process title', function()
    assert.same({ host_make_tables = 4 },
      c_names(profile_child('./build/static_host', HOST_SCRIPT)))
  end)

  -- (The stream has the program's real path; the reader names it by the
  -- program.)
  it('name a function of a stripped program by the program and the ' ..
    'offset', function()
    local name = real_path('build/static_host_stripped'):match('[^/]*$') ..
      '+' .. offset_of('build/static_host', 'host_make_tables') ..
      ' (host program)'
    assert.same({ [name] = 4 },
      c_names(profile_child('./build/static_host_stripped', HOST_SCRIPT)))
  end)

  it('name a static function of a C module from its symbol table',
    function()
    assert.same({ make_pairs = 5 }, module_names('build/test_cmodule.so'))
  end)

  it('name a function of a stripped C module by its real path and offset',
    function()
    local name = real_path('build/stripped/test_cmodule.so') .. '+' ..
      offset_of('build/test_cmodule.so', 'make_pairs')
    assert.same({ [name] = 5 }, module_names('build/stripped/test_cmodule.so'))
  end)

  it('read a stripped C module\'s debug file found through its debug link',
    function()
    assert.same({ make_pairs = 5 },
      module_names('build/debuglink/test_cmodule.so'))
  end)

  it('read a stripped C module\'s debug file found through its build-id ' ..
    'under MEMPROF_DEBUG_DIR', function()
    local code, notes = C.run('readelf -n build/buildid/test_cmodule.so')
    assert.equal(0, code)
    local id = notes:match('Build ID: (%x+)')
    local dir = C.temp_dir()
    local file = string.format('%s/.build-id/%s/%s.debug', dir, id:sub(1, 2),
      id:sub(3))
    assert.equal(0, (C.run(C.command('mkdir', '-p', file:match('^(.*)/'))
      .. ' && ' .. C.command('cp', 'build/buildid/test_cmodule.debug',
      file))))
    local events = profile_child(h.lua, [[
local module = assert(package.loadlib('build/buildid/test_cmodule.so',
  'luaopen_test_cmodule'))()
local memprof = require('memprof')
assert(memprof.start(PROFILE))
module.make_pairs(3)
assert(memprof.stop())
]], 'MEMPROF_DEBUG_DIR=' .. C.quote(dir))
    C.remove_tree(dir)
    assert.same({ make_pairs = 5 }, c_names(events))
    -- Without the variable, /usr/lib/debug has no such file.
    local name = real_path('build/buildid/test_cmodule.so') .. '+' ..
      offset_of('build/test_cmodule.so', 'make_pairs')
    assert.same({ [name] = 5 }, module_names('build/buildid/test_cmodule.so'))
  end)

  it('ignore a debug file of another build', function()
    local dir = C.temp_dir()
    assert.equal(0, (C.run(C.command('mkdir', dir .. '/.debug') .. ' && ' ..
      C.command('cp', 'build/debuglink/test_cmodule.so', dir) .. ' && ' ..
      C.command('objcopy', '--only-keep-debug', 'build/static_host',
        dir .. '/.debug/test_cmodule.debug'))))
    local name = real_path(dir .. '/test_cmodule.so') .. '+' ..
      offset_of('build/test_cmodule.so', 'make_pairs')
    local names = module_names(dir .. '/test_cmodule.so')
    C.remove_tree(dir)
    assert.same({ [name] = 5 }, names)
  end)

  it('demangle a C++ name when the process has the C++ runtime', function()
    local script = [[
local module = assert(package.loadlib('build/test_cmodule.so',
  'luaopen_test_cmodule'))()
local memprof = require('memprof')
assert(memprof.start(PROFILE))
module.cpp_tables(2)
assert(memprof.stop())
]]
    -- A table, its array part and two tables.
    assert.same({ ['cpp_tables(lua_State*)'] = 4 }, c_names(profile_child(
      h.lua, script,
      -- After what is preloaded already (libasan under make test-sanitizers
      -- must come first).
      'LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }libstdc++.so.6"')))
    -- Without the runtime (Tarantool has it, and so has the module built
    -- with UBSan, through libubsan), the symbol as it is.
    if os.getenv('MEMPROF_TEST_SANITIZERS') then return end
    local ffi = require('ffi')
    pcall(ffi.cdef, 'char *__cxa_demangle(const char *, char *, size_t *, ' ..
      'int *);')
    if not pcall(function() return ffi.C.__cxa_demangle end) then
      assert.same({ _ZL10cpp_tablesP9lua_State = 4 }, c_names(profile_child(
        h.lua, script)))
    end
  end)
end)
