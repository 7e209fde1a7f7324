-- Specs for memprof.report.paths: names shortened by the directory every
-- absolute chunk name shares, in the text report and the HTML page.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local paths = require('memprof.report.paths')
local text = require('memprof.report.text')
local html = require('memprof.report.html')
local B = require('helpers.stream_builder')

local function stream_of(chunknames)
  local s = B.new()
  for i, chunkname in ipairs(chunknames) do
    s:lfunc(0x100 * i, chunkname, 0)
  end
  s:events()
  for i = 1, #chunknames do
    s:alloc(B.lua(0x100 * i, i), 0x10 * i, 8 * i)
  end
  return s:epilogue()
end

local function prefix_of(chunknames)
  local result = analyze.run(reader.from_string(stream_of(chunknames)
    :bytes(), 'x.bin'))
  return paths.common_prefix(result.stream)
end

describe('paths', function()
  it('find the directory every absolute chunk name shares', function()
    assert.are.equal('/usr/share/lua/5.1/', prefix_of({
      '@/usr/share/lua/5.1/luacheck/main.lua',
      '@/usr/share/lua/5.1/argparse.lua', '@app.lua', '=stdin' }))
    assert.are.equal('/usr/share/lua/5.1/luacheck/', prefix_of({
      '@/usr/share/lua/5.1/luacheck/main.lua',
      '@/usr/share/lua/5.1/luacheck/mainly.lua' }))
    assert.is_nil(prefix_of({ '@/usr/a.lua', '@/opt/b.lua' }))
    assert.is_nil(prefix_of({ '@app.lua', '@lib/x.lua' }))
  end)

  it('shorten the names of the text report, saying so first', function()
    local result = analyze.run(reader.from_string(stream_of({
      '@/srv/app/main.lua', '@/srv/app/lib/cache.lua' }):bytes(), 'x.bin'))
    assert.are.equal([[
Files under /srv/app/ are named from there on: @…/name.lua is @/srv/app/name.lua.

HEAP SUMMARY (by bytes held):
@…/lib/cache.lua:2 holds 16B: 1 allocs, 0 frees
@…/main.lua:1 holds 8B: 1 allocs, 0 frees
TOTAL holds 24B (net bytes of the stream)

]], text.render(result, { leak_only = true }))
    local page = html.render(result, {})
    assert.truthy(page:find('<li>files under <b>/srv/app/ named from ' ..
      'there on as …/</b></li>', 1, true))
    assert.is_nil(page:find('@/srv/app/', 1, true))
    assert.truthy(page:find('@…/lib/cache.lua:2', 1, true))
  end)
end)
