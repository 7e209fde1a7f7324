-- A heap snapshot taken from Tarantool's administrative console (see
-- spec/hosts/tarantool_console_spec.lua), read back with what holds the memory
-- at the top: a fiber that appends every event to a closure's upvalue.
--
-- The application runs its own VM (the tarantool on PATH), so this runs
-- in the suite that sets MEMPROF_TEST_CONSOLE only (make test-hosts).
local console = require('helpers.tarantool_console')
if not console.available() or os.getenv('MEMPROF_TEST_CONSOLE') == nil then
  return
end

local dom = require('memprof.analysis.dominators')

local EVENTS = 400

local APP = string.format([[
-- The application of spec/hosts/heap_tarantool_spec.lua.
local fiber = require('fiber')
local function recorder()
  local history = {}
  return function(event) history[#history + 1] = string.rep(event, 200) end
end
record = recorder()
fiber.create(function()
  for i = 1, %d do record('event ' .. i .. ' ') end
end)
]], EVENTS)

describe("a heap snapshot from Tarantool's console", function()
  it("names a closure's upvalue as the largest holder", function()
    local app = console.start({ source = APP })
    finally(function() app:stop() end)
    local path = app:path('app.heap')
    local answers = app:session({
      string.format("require('memprof').snapshot(%q, " ..
        "{ format = 'heap', collect = true })", path),
    })
    assert.same({ '---\n- true\n...\n' }, answers)
    local a = dom.analyse_file(path)
    local pattern = '_G.record<upvalue history>[*]'
    local rank, group
    for i, g in ipairs(a.groups) do
      if g.pattern == pattern then rank, group = i, g end
    end
    local top = {}
    for i = 1, 8 do top[i] = a.groups[i] and a.groups[i].pattern end
    assert.is_not_nil(group, 'no group ' .. pattern .. ' in ' ..
      table.concat(top, '\n'))
    assert.equal(EVENTS, group.objects)
    assert.same({ string = EVENTS }, group.types)
    -- Only what holds the history holds more.
    -- Only what holds the history holds more: _G (package.loaded holds it
    -- too), the function, the upvalue.
    for i = 1, rank - 1 do
      local above = a.groups[i].pattern
      assert.is_truthy(above == 'package.loaded' or
        pattern:find(above, 1, true) == 1, above)
    end
    assert.is_true(group.retained > EVENTS * 1600) -- 8 to 10 bytes, 200 times
    -- memprof-report's text names it first.
    local cli = require('memprof.cli.report')
    local out = { parts = {} }
    function out:write(...)
      for _, v in ipairs({ ... }) do self.parts[#self.parts + 1] = v end
      return self
    end
    assert.equal(0, cli.main({ '--top=1', path }, out, io.stderr))
    local text = table.concat(out.parts)
    local holder = text:match('WHAT HOLDS THE MEMORY[^\n]*\n([^\n]*)\n')
    local expected = pattern .. ': ' .. EVENTS .. ' strings, '
    assert.equal(expected, holder:sub(1, #expected), text)
  end)
end)
