-- Tarantool's fibers. Each fiber runs on its own lua_State (a coroutine of
-- the main VM), so Lua code in a fiber is charged to the fiber's lines.
-- What Tarantool 2.6.0 cannot tell (C code continuing after a fiber switch)
-- is described in docs/builds.md. These specs run under tarantool only.
local has_fiber, fiber = pcall(require, 'fiber')
if not has_fiber or type(box) ~= 'table' then
  return
end

local h = require('helpers.profile')

describe('Tarantool fibers', function()
  setup(function() jit.off() end)
  teardown(function() jit.on() end)

  it('charge the allocations of each fiber to its own lines', function()
    local payload = h.chunk([[
local fiber = require('fiber')
local function first() for i = 1, 100 do local t = {} fiber.yield() end end
local function second() for i = 1, 50 do local t = {1} fiber.yield() end end
local a, b = fiber.new(first), fiber.new(second)
a:set_joinable(true) b:set_joinable(true)
a:join() b:join()
]], '@fibers.lua')
    local events = h.profile(payload)
    local sizes = { [2] = {}, [3] = {} }
    for _, ev in ipairs(events) do
      if ev.kind == 'alloc' and sizes[ev.line] and
        ev.name:match('^@fibers%.lua:') then
        sizes[ev.line][ev.nsize] = (sizes[ev.line][ev.nsize] or 0) + 1
      end
    end
    -- The tables are the most frequent block at each line (the closures
    -- of the two functions, and their upvalues, are there once).
    local function most_frequent(counts)
      local best
      for size, n in pairs(counts) do
        if not best or n > counts[best] then best = size end
      end
      return best
    end
    local empty, one = most_frequent(sizes[2]), most_frequent(sizes[3])
    assert.is_true(one > empty, 'a table with one element is larger')
    -- Each fiber's tables, at its own line, and none at the other's.
    assert.equal(100, sizes[2][empty])
    assert.equal(50, sizes[3][one])
    assert.is_nil(sizes[2][one])
    assert.is_nil(sizes[3][empty])
  end)

  it('installs misc.memprof, which Tarantool 2.6.0 does not have', function()
    assert.is_function(misc.memprof.start)
    assert.is_function(misc.memprof.stop)
  end)
end)

describe('Tarantool\'s C functions', function()
  setup(function() jit.off() end)
  teardown(function() jit.on() end)

  it('are named from the program\'s symbol table, not its process title',
    function()
    local json = require('json')
    local events = h.profile(function()
      json.decode('{"a":[1,2,3],"b":{"c":"d"}}')
    end)
    local names = {}
    for _, ev in ipairs(events) do
      if ev.source == 'c' then
        names[ev.name] = (names[ev.name] or 0) + 1
      end
    end
    -- json.decode is the static json_decode of lua-cjson, built into the
    -- program: six allocations and a reallocation.
    assert.same({ json_decode = 7 }, names)
  end)
end)
