-- `memprof live PID` end to end (plain text mode, keys from a FIFO): of a
-- luajit daemon that never loaded memprof (helpers.attach), attached at
-- the start and detached at q; of a process attached already, watched and
-- left attached.  Needs build/memprof.so.
local D = require('helpers.live_driver')
local A = require('helpers.attach')

-- Whether a frame of output lists the daemon's leaking line (line 5: one
-- page in ten kept in a cache) among its rows by live bytes.
local function leak_shown(text)
  return text:find('\n +[%d.]+[KM]?i?B +[%d,]+ +[^\n]* @…/daemon%.lua:5\n') ~=
    nil
end

describe('memprof live PID', function()
  local run, pid

  before_each(function()
    run = D.new()
  end)

  after_each(function()
    if pid then
      os.execute('kill -9 ' .. pid .. ' 2>/dev/null')
      pid = nil
    end
    run:finish()
  end)

  it('attaches to a running daemon, shows its leak, detaches at q',
      function()
    pid = A.daemon(run.dir)
    run:start_live({ args = { '--interval=0.3', '--top=5' },
      target = tostring(pid) })
    local output = run:wait_for(leak_shown, 8)
    assert.is_truthy(output, run:output())
    assert.is_true(A.answers(run.dir))
    run:keys('q\n')
    assert.is_true(run:exited(8))
    local file = run.dir .. '/memprof-' .. pid .. '.bin'
    assert.is_truthy(run:output():find('\nmemprof live: detached from ' ..
      'process ' .. pid .. ': wrote ' .. file .. '\n', 1, true), run:output())
    -- The allocator is the daemon's own again, and the daemon serves on.
    local code, _, err = A.memprof('detach', tostring(pid))
    assert.are.same({ 1, 'memprof detach: memprof is not attached to this ' ..
      'process\n' }, { code, err })
    assert.is_true(A.answers(run.dir))
    local leaks = A.report('--leaks', '--top=3', file)
    assert.is_truthy(leaks:find('\n@…/daemon.lua:5: %d+ blocks, [%d,]+B\n'), leaks)
  end)

  it('watches a process attached already, and leaves it attached',
      function()
    pid = A.daemon(run.dir)
    local file = run.dir .. '/p.bin'
    local code, _, err = A.memprof('attach', '-o', file, tostring(pid))
    assert.are.equal(0, code, err)
    run:start_live({ args = { '--interval=0.3' }, target = tostring(pid) })
    assert.is_truthy(run:wait_for(leak_shown, 8), run:output())
    run:keys('q\n')
    assert.is_true(run:exited(8))
    local output = run:output()
    assert.are.equal('memprof live: process ' .. pid .. ' is attached ' ..
      'already: watching ' .. file .. '\n', output:match('^[^\n]*\n'))
    assert.is_truthy(output:find('\nmemprof live: process ' .. pid ..
      ' stays attached (memprof detach ' .. pid .. ' stops it)\n', 1, true),
      output)
    code, _, err = A.memprof('detach', tostring(pid))
    assert.are.equal(0, code, err)
    assert.is_true(A.answers(run.dir))
  end)
end)
