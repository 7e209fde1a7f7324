-- The rockspec builds what the Makefile builds: every C file of src/ (a
-- file left out builds a module that fails to load with an undefined
-- symbol), and installs every Lua module of lua/memprof.
local C = require('helpers.command')

local rockspec = C.rockspec

local function listed(pattern)
  local _, out = C.run('ls ' .. pattern)
  local files = {}
  for file in out:gmatch('[^\n]+') do files[#files + 1] = file end
  table.sort(files)
  return files
end

describe('the rockspec', function()
  it('compiles every C file of src/', function()
    local sources = {}
    for _, file in ipairs(rockspec().build.modules.memprof.sources) do
      sources[#sources + 1] = file
    end
    table.sort(sources)
    assert.same(listed('src/*.c'), sources)
  end)

  it('installs every Lua module', function()
    local modules = {}
    for name, file in pairs(rockspec().build.modules) do
      if name ~= 'memprof' then modules[#modules + 1] = file end
    end
    table.sort(modules)
    local want = listed('lua/memprof/*.lua lua/memprof/*/*.lua ' ..
      'lua/memprof/*/*/*.lua')
    assert.same(want, modules)
  end)

  -- LuaRocks installs a file of build.install.lua under key a.b.c into
  -- the directory a/b of its Lua tree, under the file's own name.
  it("installs the HTML page's files beside report/html.lua", function()
    local installed = {}
    for key, file in pairs(rockspec().build.install.lua) do
      local dir = key:gsub('[^.]*$', ''):gsub('%.', '/')
      installed[#installed + 1] = 'lua/' .. dir .. file:match('[^/]*$')
    end
    table.sort(installed)
    assert.same(listed('lua/memprof/report/html/*.css ' ..
      'lua/memprof/report/html/*.js lua/memprof/report/html/*.html'),
      installed)
    assert.same({ 'lua/memprof/report/html/heap_page.html',
      'lua/memprof/report/html/holders.css',
      'lua/memprof/report/html/page.css',
      'lua/memprof/report/html/page.html',
      'lua/memprof/report/html/page.js',
      'lua/memprof/report/html/page_head.html' }, installed)
  end)
end)
