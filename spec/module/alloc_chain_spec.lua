-- The module and another allocator hook in one VM (W: a wrapper that
-- treats the chain as the built-in misc.memprof of Tarantool's fork does:
-- it keeps the allocator it finds, installs its own with that allocator's
-- ud, and puts the kept one back blindly). These run on every host; see
-- builtin_memprof_spec.lua for the built-in itself and helpers/chain.lua
-- for what each scenario checks.
local chain = require('helpers.chain')

local EINVAL = 22
local line = chain.line
local NOT_RUNNING = 'profiler is not running'
local DETACHED = "profiler is not running: another allocator hook took " ..
  "it out of the VM's allocator, and its profile ends there"

local function check(steps, expect)
  expect.max_size = { M = 256 * 1024 }
  chain.check(steps, expect)
end

describe('memprof and another allocator hook', function()
  it('stays in the chain when stopped below the other hook, and the ' ..
    'next start takes its place', function()
    check({ 'M+', 'W+', 'M-', 'W-', 'M+', 'M-' }, {
      output = {
        line('M+', true, 'running=true'),
        line('W+', 'running=true'),
        line('M-', true, 'running=false'),
        line('W-', 'running=false'),
        line('M+', true, 'running=true'),
        line('M-', true, 'running=false'),
      },
      records = { [1] = { 1, 2 }, [5] = { 5 } },
    })
  end)

  it('says so when the hook below it takes it out of the chain',
    function()
    check({ 'W+', 'M+', 'W-', 'M-', 'M-', 'M+', 'M-' }, {
      output = {
        line('W+', 'running=false'),
        line('M+', true, 'running=true'),
        line('W-', 'running=false'),
        line('M-', nil, DETACHED, EINVAL, 'running=false'),
        line('M-', nil, NOT_RUNNING, EINVAL, 'running=false'),
        line('M+', true, 'running=true'),
        line('M-', true, 'running=false'),
      },
      records = { [2] = { 2 }, [6] = { 6 } },
    })
  end)

  it('starts above the other hook, above its own stopped hook', function()
    -- The other hook's stop puts back the first hook: the second one is
    -- out of the chain then.
    check({ 'M+', 'W+', 'M-', 'M+', 'W-', 'M-' }, {
      output = {
        line('M+', true, 'running=true'),
        line('W+', 'running=true'),
        line('M-', true, 'running=false'),
        line('M+', true, 'running=true'),
        line('W-', 'running=false'),
        line('M-', nil, DETACHED, EINVAL, 'running=false'),
      },
      records = { [1] = { 1, 2 }, [4] = { 4 } },
    })
  end)

  it('completes its profile at lua_close below the other hook', function()
    check({ 'M+', 'W+' }, {
      output = {
        line('M+', true, 'running=true'),
        line('W+', 'running=true'),
      },
      records = { [1] = { 1, 2 } },
    })
  end)
end)
