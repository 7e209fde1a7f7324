-- The module and the VM's built-in misc.memprof (Tarantool's LuaJIT fork)
-- in one process, in every order of starts and stops. These specs run only
-- where the host VM (MEMPROF_TEST_LUA) has a misc.memprof of its own
-- before the module is loaded; elsewhere there is nothing to run.
--
-- Each scenario is a child script (helpers/chain.lua): after each step it
-- prints what the step returned and what memprof.is_running() says, then
-- makes a known number of tables at a line of its own. Checked: the
-- output, the exit status, and each profile, readable to its end by the
-- project's reader, bounded in size, and holding exactly the tables of the
-- steps it was recording during (the built-in's profile is in the same
-- format, and read the same way).
local C = require('helpers.command')
local chain = require('helpers.chain')

local EINVAL, EBUSY = 22, 16

-- Whether the host VM has a built-in misc.memprof (the module is not
-- loaded in the child), and whether it is Tarantool, which exits without
-- lua_close.
local host = (function()
  local code, out = chain.run_child([[
io.write(type(misc) == 'table' and type(misc.memprof) == 'table' and
  type(misc.memprof.start) == 'function' and 'builtin' or 'none',
  ' ', type(_TARANTOOL) == 'string' and 'tarantool' or 'luajit')
]])
  local builtin, kind = (out or ''):match('^(%a+) (%a+)$')
  return { builtin = code == 0 and builtin == 'builtin',
    tarantool = kind == 'tarantool' }
end)()

if not host.builtin then
  return
end

-- The size of a built-in profile of nothing: its symbol table. The
-- built-in writes that table again for every allocation made in a C
-- function; a profile grown by as much has run away.
local builtin_empty_size = (function()
  local dir = C.temp_dir()
  local path = dir .. '/empty.bin'
  local code = chain.run_child(chain.preamble() .. string.format(
    '\nassert(B.start(%q))\nassert(B.stop())\n', path))
  local size = code == 0 and chain.size_of(path) or nil
  C.remove_tree(dir)
  return size
end)()

local line = chain.line
local RUNNING = 'profiler is running already'
local NOT_RUNNING = 'profiler is not running'
local BUILTIN = "the VM's built-in misc.memprof is running: stop it first"

local function check(steps, expect)
  -- The tables of a scenario take some 25 bytes per event.
  expect.max_size = { M = 256 * 1024, B = builtin_empty_size + 64 * 1024 }
  chain.check(steps, expect)
end

describe('memprof and the built-in misc.memprof', function()
  it('has a built-in profile of nothing to compare sizes with', function()
    assert.is_number(builtin_empty_size)
  end)

  -- The four orders of two starts and two stops, each alone and then with
  -- a second start and stop of the module.
  local orders = {
    {
      name = 'M start, B start, B stop, M stop',
      steps = { 'M+', 'B+', 'B-', 'M-' },
      output = {
        line('M+', true, 'running=true'),
        line('B+', true, 'running=true'),
        line('B-', true, 'running=true'),
        line('M-', true, 'running=false'),
      },
      records = { [1] = { 1, 2, 3 }, [2] = { 2 } },
    },
    {
      -- The module's stop with the built-in above it: the module's hook
      -- stays in the chain, only forwarding, until the built-in's stop.
      name = 'M start, B start, M stop, B stop',
      steps = { 'M+', 'B+', 'M-', 'B-' },
      output = {
        line('M+', true, 'running=true'),
        line('B+', true, 'running=true'),
        line('M-', true, 'running=false'),
        line('B-', true, 'running=false'),
      },
      records = { [1] = { 1, 2 }, [2] = { 2, 3 } },
    },
    {
      -- The module does not start while the built-in runs.
      name = 'B start, M start, B stop, M stop',
      steps = { 'B+', 'M+', 'B-', 'M-' },
      output = {
        line('B+', true, 'running=false'),
        line('M+', nil, BUILTIN, EBUSY, 'running=false'),
        line('B-', true, 'running=false'),
        line('M-', nil, NOT_RUNNING, EINVAL, 'running=false'),
      },
      records = { [1] = { 1, 2 } },
      absent = { [2] = true },
    },
    {
      name = 'B start, M start, M stop, B stop',
      steps = { 'B+', 'M+', 'M-', 'B-' },
      output = {
        line('B+', true, 'running=false'),
        line('M+', nil, BUILTIN, EBUSY, 'running=false'),
        line('M-', nil, NOT_RUNNING, EINVAL, 'running=false'),
        line('B-', true, 'running=false'),
      },
      records = { [1] = { 1, 2, 3 } },
      absent = { [2] = true },
    },
  }

  for _, order in ipairs(orders) do
    it(order.name, function()
      check(order.steps, order)
    end)

    it(order.name .. ', then M start and M stop', function()
      local steps = { unpack(order.steps) }
      local output = { unpack(order.output) }
      local records = {}
      for k, v in pairs(order.records) do records[k] = v end
      steps[5], steps[6] = 'M+', 'M-'
      output[5] = line('M+', true, 'running=true')
      output[6] = line('M-', true, 'running=false')
      records[5] = { 5 }
      check(steps, { output = output, records = records,
        absent = order.absent })
    end)
  end

  it('M start, B start, M stop, M start, B stop, M start, M stop',
    function()
    -- The second start is refused while the built-in runs above the
    -- first one's hook; the third takes that hook's place.
    check({ 'M+', 'B+', 'M-', 'M+', 'B-', 'M+', 'M-' }, {
      output = {
        line('M+', true, 'running=true'),
        line('B+', true, 'running=true'),
        line('M-', true, 'running=false'),
        line('M+', nil, BUILTIN, EBUSY, 'running=false'),
        line('B-', true, 'running=false'),
        line('M+', true, 'running=true'),
        line('M-', true, 'running=false'),
      },
      records = { [1] = { 1, 2 }, [2] = { 2, 3, 4 }, [6] = { 6 } },
      absent = { [4] = true },
    })
  end)

  it('M start, M start, B start, M start, B stop, M stop', function()
    check({ 'M+', 'M+', 'B+', 'M+', 'B-', 'M-' }, {
      output = {
        line('M+', true, 'running=true'),
        line('M+', nil, RUNNING, EINVAL, 'running=true'),
        line('B+', true, 'running=true'),
        line('M+', nil, RUNNING, EINVAL, 'running=true'),
        line('B-', true, 'running=true'),
        line('M-', true, 'running=false'),
      },
      records = { [1] = { 1, 2, 3, 4, 5 }, [3] = { 3, 4 } },
      absent = { [2] = true, [4] = true },
    })
  end)

  -- The script ends while profiles run: the interpreter closes the VM,
  -- which stops the built-in first, then the module's profile.
  describe('lua_close', function()
    if host.tarantool then
      return -- Tarantool exits without lua_close.
    end

    it('while both run (M started first)', function()
      check({ 'M+', 'B+' }, {
        output = {
          line('M+', true, 'running=true'),
          line('B+', true, 'running=true'),
        },
        records = { [1] = { 1, 2 }, [2] = { 2 } },
      })
    end)

    it('while the built-in runs above a stopped module hook', function()
      check({ 'M+', 'B+', 'M-' }, {
        output = {
          line('M+', true, 'running=true'),
          line('B+', true, 'running=true'),
          line('M-', true, 'running=false'),
        },
        records = { [1] = { 1, 2 }, [2] = { 2, 3 } },
      })
    end)

    it('while the built-in runs (B started first)', function()
      check({ 'B+', 'M+' }, {
        output = {
          line('B+', true, 'running=false'),
          line('M+', nil, BUILTIN, EBUSY, 'running=false'),
        },
        records = { [1] = { 1, 2 } },
        absent = { [2] = true },
      })
    end)
  end)
end)
