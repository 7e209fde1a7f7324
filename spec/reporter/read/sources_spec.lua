-- Specs for memprof.read.sources: lines and function names from the
-- program's files, and how the reports show them.

local sources = require('memprof.read.sources')
local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local views = require('memprof.report.views')
local B = require('helpers.stream_builder')
local C = require('helpers.command')
local LUA = require('helpers.profile').lua

local HOT = table.concat({
  'local M = {}',                                   -- 1
  '',                                               -- 2
  'local function handler(request)',                -- 3
  '  local page = build(request)  ',                -- 4
  'end',                                            -- 5
  'function M.get(key) return key end',             -- 6
  'function M:put (key) end',                       -- 7
  'local make = function(n) return {} end',         -- 8
  'M.free = function() end',                        -- 9
  'call(function() end)',                           -- 10
  '\t' .. string.rep('x', 200),                     -- 11
}, '\n') .. '\n'

describe('sources', function()
  local dir, path
  before_each(function()
    sources.forget()
    dir = C.temp_dir()
    path = dir .. '/hot.lua'
    C.write_file(path, HOT)
  end)
  after_each(function()
    C.remove_tree(dir)
    sources.forget()
  end)

  it('give the text of a line of a readable file, trimmed and cut',
    function()
      assert.are.equal('local page = build(request)',
        sources.line('@' .. path, 4))
      assert.is_nil(sources.line('@' .. path, 2))
      assert.is_nil(sources.line('@' .. path, 99))
      assert.are.equal(string.rep('x', 157) .. '...',
        sources.line('@' .. path, 11))
      assert.is_nil(sources.line('@' .. dir .. '/none.lua', 1))
      assert.is_nil(sources.line('=stdin', 1))
      assert.is_nil(sources.line('local x = 1', 1))
    end)

  it('name a function as the line that defines it does', function()
    local names = {}
    for _, line in ipairs({ 3, 6, 7, 8, 9, 10, 1 }) do
      names[#names + 1] = sources.function_name('@' .. path, line) or false
    end
    assert.are.same({ 'handler', 'M.get', 'M:put', 'make', 'M.free', false,
      false }, names)
  end)

  it('read no file larger than MAX_FILE', function()
    local max = sources.MAX_FILE
    sources.MAX_FILE = #HOT - 1
    local text = sources.line('@' .. path, 4)
    sources.MAX_FILE = max
    assert.is_nil(text)
  end)

  it('read a file longer than one read whole', function()
    local long = dir .. '/long.lua'
    local lines = {}
    for i = 1, 20000 do
      lines[i] = 'local x' .. i .. ' = ' .. i
    end
    C.write_file(long, table.concat(lines, '\n') .. '\n')
    assert.are.equal('local x1 = 1', sources.line('@' .. long, 1))
    assert.are.equal('local x20000 = 20000', sources.line('@' .. long, 20000))
  end)

  it('never wait on a FIFO, nor read a directory', function()
    local fifo = dir .. '/fifo.lua'
    assert.are.equal(0, (C.run('mkfifo ' .. C.quote(fifo))))
    -- A FIFO without a writer, in a child that would wait forever on a
    -- blocking open: read as empty, at once.
    local code, out = C.run('FIFO=' .. C.quote(fifo) .. ' timeout 10 ' ..
      C.quote(LUA) .. ' -e ' .. C.quote("print(require('memprof.read." ..
      "sources').line('@' .. os.getenv('FIFO'), 1))"))
    assert.are.same({ 0, 'nil\n' }, { code, out })
    -- One with a writer that gives nothing (this process, opened for
    -- reading and writing, which Linux allows without waiting): not
    -- readable, at once.
    local writer = assert(io.open(fifo, 'r+'))
    sources.forget()
    assert.is_nil(sources.line('@' .. fifo, 1))
    writer:close()
    assert.is_nil(sources.line('@' .. dir, 1))
  end)

  it('name functions in the reports and show the lines of the views',
    function()
      local chunk = '@' .. path
      local s = B.new():lfunc(0x100, chunk, 3):lfunc(0x200, chunk, 0)
        :events()
      s:alloc(B.lua(0x100, 4), 0x10, 64)
      local result = analyze.run(reader.from_string(s:epilogue():bytes(),
        'x.bin'), { group = 'function', views = { leaks = true } })
      assert.are.equal('handler (' .. chunk .. ':3)',
        result.leaks.groups[1].name)
      result = analyze.run(reader.from_string(s:bytes(), 'x.bin'),
        { views = { peak = true } })
      -- (The byte of the peak depends on the length of the path.)
      assert.are.equal(chunk .. ':4: 64B in 1 block\n' ..
        '\t| local page = build(request)\n' ..
        'TOTAL at the peak: 64B above the heap at the start\n\n',
        views.render(result, { views = { peak = true } })
          :match('Held by:\n(.*)$'))
      -- A stack's frames of a readable file have their text; the row
      -- whose stacks are shown does not repeat it.
      s = B.new():lfunc(0x100, chunk, 3):lfunc(0x200, chunk, 0)
        :events({ version = B.EXTENDED })
      s:stack(1, { B.lua(0x100, 4), B.lua(0x200, 6), B.c(0x900) })
      s:alloc(B.lua(0x100, 4, 1), 0x10, 64)
      result = analyze.run(reader.from_string(s:epilogue():bytes(),
        'x.bin'), { views = { leaks = true } })
      assert.are.equal(chunk .. ':4: 1 block, 64B\n' ..
        '\t1 block, 64B allocated at:\n' ..
        '\t\t' .. chunk .. ':4: local page = build(request)\n' ..
        '\t\t' .. chunk .. ':6: function M.get(key) return key end\n' ..
        '\t\tCFUNC 0x900\n',
        views.render(result, { views = { leaks = true } })
          :match('\n(.-)TOTAL'))
      -- The HTML page shows them too: under the row, after each frame
      -- (the file named from its directory on: report.paths).
      local page = require('memprof.report.html').render(analyze.run(
        reader.from_string(s:bytes(), 'x.bin'), { views = { leaks = true } }),
        {})
      assert.truthy(page:find('<span class="site">@…/hot.lua:4</span><code ' ..
        'class="source">local page = build(request)</code>', 1, true))
      assert.truthy(page:find('@…/hot.lua:6 <code class="source">function ' ..
        'M.get(key) return key end</code><br>', 1, true))
    end)
end)
