-- Specs for memprof.cli.launch: bin/memprof-report and bin/memprof started
-- by plain Lua (as LuaRocks' wrapper starts them) run again under the
-- luajit found along PATH, with the same arguments, and exit with its
-- status.  Needs Debian's lua5.1 and luajit; run from the top of the
-- source tree.  spec/hosts/install_spec.lua does the same through LuaRocks.

local launch = require('memprof.cli.launch')
local C = require('helpers.command')

local TOP = os.getenv('PWD')
local LUA51 = '/usr/bin/lua5.1'

-- What `luajit` on this PATH says it is.
local function luajit_version()
  local _, text = C.run("luajit -e 'io.write(jit.version)'")
  return text
end

local VERSION = require('memprof.version').VERSION

describe('bin scripts started by plain Lua', function()
  local dir

  before_each(function()
    dir = C.temp_dir()
  end)

  after_each(function()
    C.remove_tree(dir)
  end)

  -- Runs `lua5.1 bin/NAME ARGS...` in dir, with PATH = path when given.
  local function under_lua51(path, name, ...)
    local env = path and 'env PATH=' .. C.quote(path) .. ' ' or ''
    return C.run('cd ' .. C.quote(dir) .. ' && timeout 120 ' .. env ..
      C.command(LUA51, TOP .. '/bin/' .. name, ...))
  end

  it('run again under the luajit on PATH', function()
    local jit = luajit_version()
    assert.truthy(jit:find('^LuaJIT '), jit)
    for _, name in ipairs({ 'memprof-report', 'memprof' }) do
      local code, stdout, stderr = under_lua51(nil, name, '--version')
      assert.are.same({ 0, '' }, { code, stderr })
      assert.are.equal(name .. ' ' .. VERSION .. ' (' .. jit .. ')\n', stdout)
    end
  end)

  it('keep their arguments exact, and their exit status', function()
    -- memprof run, under lua5.1, runs a script that writes its arguments
    -- and the interpreter (arg[-1]) to a file, then exits with 7.
    C.write_file(dir .. '/app.lua', table.concat({
      "local out = assert(io.open('args.txt', 'w'))",
      "out:write(arg[-1], '\\n', table.concat(arg, '\\n'), '\\n')",
      'out:close()',
      'os.exit(7)',
    }, '\n'))
    local words = { 'b c', '', "it's", '$HOME', '"q"', '--top=2', 'a\\b' }
    local code, stdout, stderr = under_lua51(nil, 'memprof', 'run', '-o',
      'p.bin', '--leak-only', 'app.lua', unpack(words))
    assert.are.equal(7, code)
    assert.are.equal('', stdout)
    assert.truthy(stderr:find('^memprof: app.lua exited with 7; profile in ' ..
      'p.bin\nHEAP SUMMARY %(by bytes held%):\n'), stderr)
    local lines = {}
    for line in C.read_file(dir .. '/args.txt'):gmatch('([^\n]*)\n') do
      lines[#lines + 1] = line
    end
    -- The script ran under the luajit memprof ran under, found on PATH.
    local _, luajit = C.run('command -v luajit')
    assert.are.same({ luajit:gsub('\n$', ''), unpack(words) }, lines)
    -- An error, with a name the shell would mangle.
    code, stdout, stderr = under_lua51(nil, 'memprof-report', "no '$x'.bin")
    assert.are.same({ 1, '' }, { code, stdout })
    assert.are.equal("memprof-report: no '$x'.bin: No such file or " ..
      'directory\n', stderr)
  end)

  local LUAJIT_ONLY = "%s: runs on LuaJIT only (luajit, OpenResty's " ..
    'luajit2 or Tarantool); this is Lua 5.1, and no luajit on PATH is ' ..
    'LuaJIT\n'

  it('refuse to run on plain Lua without a luajit on PATH', function()
    for _, name in ipairs({ 'memprof-report', 'memprof' }) do
      local code, stdout, stderr = under_lua51(dir, name, '--version')
      assert.are.same({ 1, '', LUAJIT_ONLY:format(name) },
        { code, stdout, stderr })
    end
  end)

  it('run a luajit of PATH that is no LuaJIT once, never in a loop',
    function()
      assert(os.execute('ln -s ' .. LUA51 .. ' ' .. C.quote(dir .. '/luajit')))
      local code, stdout, stderr = under_lua51(dir, 'memprof-report',
        '--version')
      assert.are.same({ 1, '', LUAJIT_ONLY:format('memprof-report') },
        { code, stdout, stderr })
    end)
end)

describe('launch', function()
  it('quotes words for the shell', function()
    local _, out = C.run('printf "%s|" ' .. launch.shell_quote("it's") ..
      ' ' .. launch.shell_quote('$HOME "x"') .. ' ' .. launch.shell_quote(''))
    assert.are.equal([[it's|$HOME "x"||]], out)
  end)
end)
