-- `memprof heap PID` on the LuaJIT build under test (MEMPROF_TEST_LUA): a
-- running daemon's heap read from outside (docs/attach.md) gives the
-- holders and retained sizes of the snapshot the daemon takes of itself,
-- and the daemon runs on. The target and memprof run on the same build.
local C = require('helpers.command')
local D = require('helpers.daemon')

local LUA = require('helpers.profile').lua
-- memprof run by the tarantool binary itself cannot read another
-- Tarantool's heap, whose data is at the same fixed addresses (refused: a
-- spec of spec/hosts/heap_pid_spec.lua; a tarantool target from luajit is
-- spec/hosts/heap_pid_tarantool_spec.lua's); qemu-user emulates neither
-- ptrace nor process_vm_readv.
if LUA:find('/tarantool$') or LUA == 'tarantool' or jit.arch ~= 'x64' or
    not C.have('timeout') then
  return
end

local running, answers, graph_rows = D.running, D.answers, D.graph_rows

describe('memprof heap PID', function()
  local dir, pid

  before_each(function()
    dir = C.temp_dir()
    pid = nil
  end)

  after_each(function()
    if pid then
      os.execute('kill -9 ' .. pid .. ' 2>/dev/null')
    end
    C.remove_tree(dir)
  end)

  it('gives the holders and retained sizes of the snapshot the process ' ..
      'takes of itself, and leaves it running', function()
    pid = D.start_daemon(dir, dir .. '/own.heap', nil, LUA)
    local outside = dir .. '/outside.heap'
    local code, out, err = D.memprof_heap({ tostring(pid), '-o', outside },
      nil, LUA)
    assert.are.equal(0, code, err)
    assert.truthy(out:find('wrote ' .. outside .. ': the heap of process ' ..
      pid .. ' %(VM 1 of 1', 1))
    local own_rows = graph_rows(dir .. '/own.heap')
    local rows, report = graph_rows(outside)
    -- An item is reached through items or index, whichever the walk
    -- takes first: the same in both snapshots.
    local via = rows[1]:match('^_G%.graph%.(i%a+)%[')
    assert.truthy(via == 'items' or via == 'index', rows[1])
    assert.are.equal(6, #rows, report)
    assert.truthy(rows[1]:find('^_G%.graph%.' .. via ..
      '%[%*%]: 1,000 tables, [%d,]+B, retaining [%d,]+B$'), rows[1])
    if LUA == 'luajit' then
      assert.are.same({
        '_G.graph.' .. via .. '[*]: 1,000 tables, 160,000B, retaining 280,004B',
        '_G.graph.' .. via .. '[*].tags: 1,000 tables, 88,000B',
        '_G.graph.' .. via .. '[*].name: 1,000 strings, 32,004B',
        '_G.graph.index<key>: 1,000 strings, 31,604B',
        '_G.graph.index: 1 table, 24,640B, retaining 56,244B',
        '_G.graph.items: 1 table, 8,264B',
      }, rows)
    end
    assert.are.same(own_rows, rows)
    assert.truthy(report:find('by process ' .. pid .. ',', 1, true))
    assert.is_true(running(pid))
    assert.are.equal(tostring(D.ITEMS), answers(dir))
  end)
end)
