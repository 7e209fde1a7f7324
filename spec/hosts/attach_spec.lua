-- `memprof attach PID` and `memprof detach PID` (docs/attach.md) of a plain
-- luajit daemon that never loaded memprof: the profile names the leaking
-- line, a heap snapshot taken meanwhile joins it, the allocator is put
-- back. Targets run under timeout and are killed after each test. The
-- hostile cases: attach_refusals_spec.lua; nginx: attach_nginx_spec.lua.
local C = require('helpers.command')
local A = require('helpers.attach')
local daemon, answers, memprof, report, size = A.daemon, A.answers,
  A.memprof, A.report, A.size

if not C.have('luajit') or not C.have('timeout') then
  return
end

describe('memprof attach PID', function()
  local s = A.session()
  before_each(s.setup)
  after_each(s.teardown)

  it('profiles a running daemon until memprof detach: the leaking line, ' ..
      'joined with a heap snapshot taken meanwhile, the daemon answering ' ..
      'throughout', function()
    s.pid = daemon(s.dir)
    assert.is_true(answers(s.dir))
    local profile = s.dir .. '/p.bin'
    local code, out, err = memprof('attach', '--stack-depth=4', '-o', profile,
      tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:match('^memprof attach: profiling process ' .. s.pid ..
      ' %(VM 1 of 1, main thread 0x%x+%) into ' .. profile:gsub('%p', '%%%0') ..
      '; it was stopped [%d.]+ ms %(%d+ stops?%)\nmemprof attach: memprof ' ..
      'detach ' .. s.pid .. ' stops it\n$'), out)
    assert.is_true(answers(s.dir))
    code, out, err = memprof('heap', '-o', s.dir .. '/s.heap', tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('memprof heap: wrote ' .. s.dir .. '/s.heap: the ' ..
      'heap of process ' .. s.pid .. ' (VM 1 of 1, ', 1, true), out)
    assert.is_true(answers(s.dir))
    code, out, err = memprof('detach', tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.are.equal('memprof detach: detached from process ' .. s.pid ..
      ': wrote ' .. profile .. '\nmemprof detach: see memprof-report ' ..
      profile .. '\n', out)
    assert.is_true(answers(s.dir))
    local leaks = report('--leaks', '--top=2', profile)
    assert.truthy(leaks:find('\n@…/daemon.lua:5: %d+ blocks, [%d,]+B\n'), leaks)
    assert.truthy(leaks:find('@…/daemon.lua:5: if request %% 10 == 0 then ' ..
      'cache%[#cache %+ 1%] = page'), leaks)
    local joined = report('--leaks', '--heap=' .. s.dir .. '/s.heap', profile)
    assert.truthy(joined:find('\n@…/daemon.lua:5: %d+ objects, [%d,]+B %(from ' ..
      '@…/daemon.lua:18[^\n]*\n    held by main thread<local cache in main ' ..
      'chunk of @…/daemon.lua, line %d+>%[%*%]: '),
      joined)
  end)

  it('with --duration, detaches by itself and puts the allocator back',
      function()
    s.pid = daemon(s.dir)
    local profile = s.dir .. '/d.bin'
    local code, out, err = memprof('attach', '--duration=1', '-o', profile,
      tostring(s.pid))
    assert.are.equal(0, code, err)
    local tail = '\nmemprof attach: detached from process ' .. s.pid ..
      ': wrote ' .. profile .. '\nmemprof attach: see memprof-report ' ..
      profile .. '\n'
    assert.are.equal(tail, out:sub(-#tail))
    local bytes = size(profile)
    assert.is_true(answers(s.dir))
    assert.are.equal(bytes, size(profile)) -- Nothing more is recorded.
    assert.truthy(report(profile):find('\n@…/daemon.lua:4: %d+ events'))
    -- The VM's allocator is no hook of memprof's any more: a heap snapshot
    -- notes no profile (one taken while attached does: the spec above).
    code, out, err = memprof('heap', '-o', s.dir .. '/after.heap',
      tostring(s.pid))
    assert.are.equal(0, code, err)
    assert.truthy(out:find('memprof heap: wrote ', 1, true), out)
    code, out, err = C.run(C.command(C.ROOT .. '/bin/memprof-report', '--leaks',
      '--heap=' .. s.dir .. '/after.heap', profile))
    assert.are.equal(1, code)
    assert.truthy(err:find('the heap snapshot was taken with no profile ' ..
      'running: it cannot be joined with one', 1, true), err)
    assert.are.equal('', out)
    assert.is_true(answers(s.dir))
  end)

  it('refuses to attach twice, and detach where it is not attached',
      function()
    s.pid = daemon(s.dir)
    local code, _, err = memprof('detach', tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof detach: memprof was never attached to ' ..
      'process ' .. s.pid .. ' (memprof.so is not loaded there)\n', err)
    code, _, err = memprof('attach', '-o', s.dir .. '/a.bin', tostring(s.pid))
    assert.are.equal(0, code, err)
    code, _, err = memprof('attach', '-o', s.dir .. '/b.bin', tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof attach: memprof is attached already (its ' ..
      'profile to ' .. s.dir .. '/a.bin runs): memprof detach first\n', err)
    assert.is_nil(C.read_file(s.dir .. '/b.bin'))
    code, _, err = memprof('detach', tostring(s.pid))
    assert.are.equal(0, code, err)
    code, _, err = memprof('detach', tostring(s.pid))
    assert.are.equal(1, code)
    assert.are.equal('memprof detach: memprof is not attached to this ' ..
      'process\n', err)
    assert.is_true(answers(s.dir))
  end)

end)
