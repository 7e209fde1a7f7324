-- memprof installed as a user installs it, by `make install` and by
-- LuaRocks (`luarocks make` into a tree of its own), then used from
-- another directory with no path into the source tree: the commands run
-- on LuaJIT even when started by plain Lua (LuaRocks' wrapper runs them
-- with lua5.1), and the HTML page finds its style and script beside
-- report/html.lua.
--
-- Installing takes a while (LuaRocks compiles the module), and does not
-- depend on the VM running the suite, so these specs run in one suite
-- only: the one that sets MEMPROF_TEST_INSTALL (make test-hosts).  They
-- need Debian's lua5.1, luajit and luarocks (.ci/install-deps --tests).
if os.getenv('MEMPROF_TEST_INSTALL') == nil then
  return
end

local B = require('helpers.stream_builder')
local C = require('helpers.command')

local TOP = os.getenv('PWD')
local VERSION = require('memprof.version').VERSION

local function luajit_version()
  local _, text = C.run("luajit -e 'io.write(jit.version)'")
  return text
end

-- Runs a command line from /, without the suite's LUA_PATH and
-- LUA_CPATH (`env` sets what is given instead).
local function from_root(env, line)
  return C.run('cd / && env -u LUA_PATH -u LUA_CPATH ' .. env ..
    ' timeout 300 ' .. line)
end

-- The text of the page's <style> and <script> elements.
local function page_parts(page)
  return { page:match('<style>\n(.-)</style>'),
    page:match('.*<script>\n(.-)</script>') }
end

local HTML_FILES = { C.read_file('lua/memprof/report/html/page.css'),
  C.read_file('lua/memprof/report/html/page.js') }

-- A script for memprof run, which keeps ten tables made at line 2.
local SCRIPT = 'local keep = {}\nfor i = 1, 10 do keep[i] = { i } end\n' ..
  '_G.keep = keep\n'

describe('memprof installed', function()
  local dir, profile

  before_each(function()
    dir = C.temp_dir()
    profile = dir .. '/p.bin'
    C.write_file(profile, B.three_callers():bytes())
    C.write_file(dir .. '/app.lua', SCRIPT)
  end)

  after_each(function()
    C.remove_tree(dir)
  end)

  -- What memprof run prints of app.lua's line 2 with the commands of bin.
  local function run_app(env, bin)
    local code, stdout, stderr = from_root(env, 'sh -c ' .. C.quote('cd ' ..
      C.quote(dir) .. ' && ' .. C.command(bin .. '/memprof', 'run',
      '--leak-only', 'app.lua')))
    assert.are.same({ 0, '' }, { code, stdout })
    return stderr:match('\nHEAP SUMMARY %(by bytes held%):\n' ..
      '.*(@app.lua:2 holds [%d,]+B: ' ..
      '%d+ allocs)')
  end

  -- What memprof heap PID of a daemon holding ten tables, then
  -- memprof-report of its file, print with the commands of bin.
  local function heap_app(env, bin)
    C.write_file(dir .. '/daemon.lua', SCRIPT .. "io.open(arg[1] .. " ..
      "'/ready', 'w'):close()\nwhile true do os.execute('sleep 0.05') end\n")
    assert(os.execute(string.format("timeout 60 sh -c 'echo $$ > %s/pid; " ..
      "exec luajit %s/daemon.lua %s' >/dev/null 2>&1 &", dir, dir, dir)))
    for _ = 1, 200 do
      if C.read_file(dir .. '/ready') and C.read_file(dir .. '/pid') then
        break
      end
      os.execute('sleep 0.05')
    end
    local pid = C.read_file(dir .. '/pid'):match('%d+')
    local code, _, stderr = from_root(env, C.command(bin .. '/memprof',
      'heap', pid, '-o', dir .. '/app.heap'))
    os.execute('kill ' .. pid)
    assert.are.same({ 0, '' }, { code, stderr })
    local stdout
    code, stdout = from_root(env, C.command(bin .. '/memprof-report',
      '--all', dir .. '/app.heap'))
    assert.are.equal(0, code)
    return stdout:match('\n(_G%.keep: 1 table, 200B, retaining 1,080B)\n')
  end

  it('by make install', function()
    local prefix = dir .. '/prefix'
    local code, _, stderr = C.run('make install PREFIX=' .. C.quote(prefix) ..
      ' >/dev/null')
    assert.are.same({ 0, '' }, { code, stderr })
    local bin = prefix .. '/bin'
    code, stderr = C.run('LC_ALL=C ls ' .. C.quote(prefix ..
      '/share/lua/5.1/memprof/report/html'))
    assert.are.same({ 0, 'chart.lua\ndata.lua\nheap_page.html\n' ..
      'heap_page.lua\nholders.css\nholders_section.lua\npage.css\n' ..
      'page.html\npage.js\npage_head.html\ntables.lua\ntext.lua\n' },
      { code, stderr })
    -- Started by plain Lua, it runs on LuaJIT.
    local stdout
    code, stdout, stderr = from_root('', C.command('/usr/bin/lua5.1',
      bin .. '/memprof-report', '--version'))
    assert.are.same({ 0, '', 'memprof-report ' .. VERSION .. ' (' ..
      luajit_version() .. ')\n' }, { code, stderr, stdout })
    code, stdout, stderr = from_root('', C.command(bin .. '/memprof-report',
      '--format=html', profile))
    assert.are.same({ 0, '' }, { code, stderr })
    assert.are.same(HTML_FILES, page_parts(stdout))
    assert.truthy(run_app('LUA_CPATH=' .. C.quote(prefix ..
      '/lib/lua/5.1/?.so;;'), bin))
    assert.truthy(heap_app('', bin))
  end)

  -- A tree installed by `luarocks make` (once for the two specs below):
  -- its directory, kept until the end of the file.
  local rocks_dir
  local function rocks_tree()
    if rocks_dir then
      return rocks_dir .. '/tree'
    end
    rocks_dir = C.temp_dir()
    local copy, tree = rocks_dir .. '/source', rocks_dir .. '/tree'
    local code, _, stderr = C.run('mkdir ' .. C.quote(copy) .. ' && cp -r ' ..
      'rockspec src lua bin ' .. C.quote(copy))
    assert.are.same({ 0, '' }, { code, stderr })
    local _, include = C.run('pkg-config --variable=includedir luajit')
    code = C.run('cd ' .. C.quote(copy) .. ' && timeout 300 luarocks make ' ..
      '--tree=' .. C.quote(tree) .. ' --lua-version=5.1 --deps-mode=none ' ..
      'LUA_INCDIR=' .. C.quote(include:gsub('\n$', '')) ..
      -- (-O0: what is checked is the install; unoptimised, nothing is
      -- forced inline (src/hot_inline.h) and src/hook.c compiles in a
      -- fifth of the time.)
      " CFLAGS='-O0 -fPIC' rockspec/memprof-scm-1.rockspec >/dev/null 2>&1")
    assert.are.equal(0, code)
    return tree
  end

  teardown(function()
    if rocks_dir then
      C.remove_tree(rocks_dir)
    end
  end)

  it('by LuaRocks, whose wrapper starts plain Lua', function()
    local bin = rocks_tree() .. '/bin'
    -- The precondition: LuaRocks starts the commands with plain Lua.
    assert.truthy(C.read_file(bin .. '/memprof-report'):find(
      "exec '/usr/bin/lua5.1'", 1, true))
    assert.truthy(C.read_file(rocks_tree() .. '/lib/lua/5.1/memprof.so'))
  end)

  it('by LuaRocks, runs from another directory', function()
    local tree = rocks_tree()
    local bin = tree .. '/bin'
    local env = 'LUA_PATH=' .. C.quote(tree .. '/share/lua/5.1/?.lua;;') ..
      ' LUA_CPATH=' .. C.quote(tree .. '/lib/lua/5.1/?.so;;')
    local code, stdout, stderr = from_root(env, C.command(bin ..
      '/memprof-report', '--version'))
    assert.are.same({ 0, '', 'memprof-report ' .. VERSION .. ' (' ..
      luajit_version() .. ')\n' }, { code, stderr, stdout })
    code, stdout, stderr = from_root(env, C.command(bin .. '/memprof-report',
      '--format=html', profile))
    assert.are.same({ 0, '' }, { code, stderr })
    assert.are.same(HTML_FILES, page_parts(stdout))
    assert.truthy(run_app(env, bin))
    assert.truthy(heap_app(env, bin))
  end)
end)
