-- `memprof attach PID` of an nginx worker (Debian's nginx with OpenResty's
-- Lua module, whose LuaJIT is luajit2's libluajit-5.1.so.2: memprof.so,
-- loaded into the worker, runs on that library): while requests run, the
-- profile names the handler's allocating line, and the worker serves
-- every request before, during and after.
--
-- Runs in the suite that sets MEMPROF_TEST_NGINX only (make test-hosts),
-- as spec/hosts/heap_pid_nginx_spec.lua does.
local nginx = require('helpers.nginx')
local C = require('helpers.command')
if not nginx.available() or os.getenv('MEMPROF_TEST_NGINX') == nil or
    not C.have('luajit') then
  return
end

local expect = nginx.expect

local worker_pid = nginx.worker_pid

-- A page a request, each kept in the catalog's cache: the leak.
local HANDLER = [[
local catalog = require('catalog')
catalog.count = (catalog.count or 0) + 1
catalog.render('page' .. catalog.count)
ngx.say('ok')
]]

describe('memprof attach PID of an nginx worker', function()
  it('names the handler\'s allocating line while requests run, joined ' ..
      'with a heap snapshot, and the worker serves before, during and after',
      function()
    local s = nginx.start({
      files = { ['catalog.lua'] = nginx.CATALOG },
      locations = { ['/render'] = HANDLER },
    })
    finally(function() s:stop() end)
    expect(s, '/render', 'ok')
    local pid = worker_pid(s)
    local profile, heap = s:path('attached.bin'), s:path('during.heap')
    local function memprof(...)
      return C.run(C.command('luajit', C.ROOT .. '/bin/memprof', ...))
    end
    local code, out, err = memprof('attach', '--stack-depth=4', '-o', profile,
      pid)
    assert.are.equal(0, code, err)
    assert.truthy(out:find('memprof attach: profiling process ' .. pid ..
      ' (VM 1 of 1, main thread 0x', 1, true), out)
    for _ = 1, 10 do
      expect(s, '/render', 'ok')
    end
    code, out, err = memprof('heap', '-o', heap, pid)
    assert.are.equal(0, code, err)
    assert.truthy(out:find('memprof heap: wrote ' .. heap, 1, true), out)
    expect(s, '/render', 'ok')
    code, out, err = memprof('detach', pid)
    assert.are.equal(0, code, err)
    assert.truthy(out:find('memprof detach: detached from process ' .. pid ..
      ': wrote ' .. profile .. '\n', 1, true), out)
    expect(s, '/render', 'ok')
    code, out, err = C.run(C.command(C.ROOT .. '/bin/memprof-report',
      '--leaks', '--top=1', '--heap=' .. heap, profile))
    assert.are.equal(0, code, err)
    local first = out:match('LIVE AT END[^\n]*\n([^\n]*)\n')
    assert.truthy(first:find('^@…/catalog%.lua:4: %d+ blocks'), out)
    assert.truthy(out:find('local body = string.rep', 1, true), out)
    -- The ten pages rendered during the profile before the snapshot, each
    -- held by the cache (page1, rendered before, is not the profile's).
    assert.truthy(out:find('\nWHO HOLDS IT [^\n]*\n@…/catalog%.lua:4: 10 ' ..
      'objects, [%d,]+B [^\n]*\n    held by package%.loaded%["catalog"%]%.' ..
      'rendered_cache%.page%d+: 1 object, [%d,]+B\n'), out)
    assert.are.equal(pid, worker_pid(s))
  end)
end)
