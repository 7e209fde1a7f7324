-- A heap snapshot from a request handler of an nginx worker (OpenResty's
-- Lua module, see spec/hosts/nginx_spec.lua), read back with what holds the
-- memory at the top: a module that keeps every rendered page.
--
-- nginx runs its own VM (OpenResty's luajit2), so this runs in the suite
-- that sets MEMPROF_TEST_NGINX only (make test-hosts).
local nginx = require('helpers.nginx')
if not nginx.available() or os.getenv('MEMPROF_TEST_NGINX') == nil then
  return
end

local dom = require('memprof.analysis.dominators')

local PAGES = 300

local CATALOG = nginx.CATALOG

local expect = nginx.expect

describe('a heap snapshot of an nginx worker', function()
  it('names the module-level cache as the largest holder', function()
    local s = nginx.start({
      files = { ['catalog.lua'] = CATALOG },
      locations = {
        ['/render'] = string.format([[
local catalog = require('catalog')
for i = 1, %d do catalog.render('page' .. i) end
ngx.say('ok')
]], PAGES),
        ['/snapshot'] = [[
local ok, err = require('memprof').snapshot(ngx.config.prefix() ..
  'worker.heap', { format = 'heap', collect = true })
ngx.say(tostring(ok), ' ', tostring(err))
]],
      },
    })
    finally(function() s:stop() end)
    expect(s, '/render', 'ok')
    expect(s, '/snapshot', 'true nil')
    local a = dom.analyse_file(s:path('worker.heap'))
    local cache = 'package.loaded["catalog"].rendered_cache[*]'
    local rank, group
    for i, g in ipairs(a.groups) do
      if g.pattern == cache then rank, group = i, g end
    end
    assert.is_not_nil(group, 'no group ' .. cache)
    assert.equal(PAGES, group.objects)
    assert.same({ string = PAGES }, group.types)
    -- Only the module, the cache and package.loaded hold more.
    assert.is_true(rank <= 4, 'the cache group ranks ' .. tostring(rank))
    for i = 1, rank - 1 do
      assert.is_truthy(cache:find(a.groups[i].pattern, 1, true),
        a.groups[i].pattern)
    end
    -- memprof-report's text names it first.
    local cli = require('memprof.cli.report')
    local out = { parts = {} }
    function out:write(...)
      for _, v in ipairs({ ... }) do self.parts[#self.parts + 1] = v end
      return self
    end
    assert.equal(0, cli.main({ '--top=1', s:path('worker.heap') }, out,
      io.stderr))
    local text = table.concat(out.parts)
    local holder = text:match('WHAT HOLDS THE MEMORY[^\n]*\n([^\n]*)\n')
    local expected = cache .. ': ' .. PAGES .. ' strings, '
    assert.equal(expected, holder:sub(1, #expected), text)
  end)
end)
