-- `memprof heap PID` of an nginx worker (Debian's nginx with OpenResty's
-- Lua module, which links luajit2's libluajit-5.1.so.2: memprof reads it
-- through a helper process on that library, docs/attach.md): the leaking
-- cache is the first holder, as in the snapshot the worker takes of
-- itself, and the worker serves requests before and after.
--
-- Runs in the suite that sets MEMPROF_TEST_NGINX only (make test-hosts),
-- as spec/hosts/heap_nginx_spec.lua does.
local nginx = require('helpers.nginx')
local C = require('helpers.command')
if not nginx.available() or os.getenv('MEMPROF_TEST_NGINX') == nil or
    not C.have('luajit') then
  return
end

local PAGES = 300

local CATALOG = nginx.CATALOG

local expect = nginx.expect

local worker_pid = nginx.worker_pid

local function catalog_rows(path)
  local code, out, err = C.run(C.command(C.ROOT .. '/bin/memprof-report',
    path))
  assert(code == 0, err)
  local rows = {}
  for line in out:gmatch('[^\n]+') do
    if line:find('^package%.loaded%["catalog"%]') then
      rows[#rows + 1] = line
    end
  end
  return rows, out
end

describe('memprof heap PID of an nginx worker', function()
  it('names the cache its handler fills, as the worker\'s own snapshot ' ..
      'does, and the worker serves on', function()
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
  'own.heap', { format = 'heap' })
ngx.say(tostring(ok), ' ', tostring(err))
]],
      },
    })
    finally(function() s:stop() end)
    expect(s, '/render', 'ok')
    expect(s, '/snapshot', 'true nil')
    local pid = worker_pid(s)
    local code, out, err = C.run(C.command('luajit', C.ROOT .. '/bin/memprof',
      'heap', pid, '-o', s:path('outside.heap')))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('the heap of process ' .. pid .. ' (VM 1 of 1, ',
      1, true), out)
    local rows, report = catalog_rows(s:path('outside.heap'))
    local first = report:match('WHAT HOLDS THE MEMORY[^\n]*\n([^\n]*)\n')
    assert.are.equal('package.loaded["catalog"].rendered_cache[*]: ' ..
      PAGES .. ' strings, 242,820B', first)
    assert.are.same(catalog_rows(s:path('own.heap')), rows)
    expect(s, '/render', 'ok')
    assert.are.equal(pid, worker_pid(s))
  end)
end)
