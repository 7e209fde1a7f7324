-- The accuracy of sampled profiles: the reports of a sampled recording
-- (memprof.analysis.sampling's estimates) against a recording of every
-- event of the same program, both made by the module in a child VM.
local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')

describe('the accuracy of a sampled profile', function()
  local h = require('helpers.profile')

  -- Twelve places that allocate from 50 KB to 2 MB each, in blocks from 16
  -- bytes to 20 KB; one block in five is kept to the end. The collector
  -- runs only at the end: otherwise whether a string is interned anew
  -- depends on whether its twin was collected yet, which depends on the
  -- order of the sweep, which LuaJIT's random string hash seed changes.
  local PROGRAM = [[
collectgarbage('stop')
local keep, n = {}, 0
local function hold(x) n = n + 1; if n % 5 == 0 then keep[#keep + 1] = x end end
for i = 1, 10000 do hold(string.rep('a', 24 + i % 97) .. i) end
for i = 1, 3750 do hold({}) end
for i = 1, 5000 do hold({ i, i + 1, i + 2, i + 3 }) end
for i = 1, 750 do local t = {} for j = 1, i % 200 do t[j] = j end hold(t) end
for i = 1, 7500 do hold(tostring(i) .. ':' .. tostring(i * 7)) end
for i = 1, 5000 do hold(function() return i end) end
for i = 1, 75 do hold(string.rep('b', 5000 + i * 50)) end
for i = 1, 2000 do hold({ x = i, y = i, z = i, name = 'p' .. i }) end
for i = 1, 1250 do local parts = {} for j = 1, 10 do parts[j] = j * i end hold(table.concat(parts, ',')) end
for i = 1, 15000 do hold(string.format('%08d-%s', i, 'row')) end
for i = 1, 500 do hold(setmetatable({}, { __index = keep })) end
collectgarbage()
collectgarbage('restart')
return keep
]]

  -- Before the profile, the child grows the VM's string table so that
  -- PROGRAM's strings never make it grow again. Otherwise whether the
  -- table grows inside the profile, and at which line, depends on the
  -- strings the host made at its start and on whether the collector was
  -- sweeping strings when PROGRAM stopped it (LuaJIT does not grow the
  -- table then): Tarantool's start differs from one machine to the next,
  -- and the growths, 448 KiB on line 4, then fell in some of the runs
  -- compared and not in others.
  local PRELUDE = [[
collectgarbage()
collectgarbage('stop')
local strings = {}
for i = 1, 2 ^ 17 do strings[i] = 'made before the profile ' .. i end
]]

  -- Starts profiling PROGRAM in a child with `options`; returns a
  -- function that waits for it and returns the bytes allocated by place
  -- and the bytes of the blocks live at stop that were allocated during
  -- the profile. (The four children of the spec run side by side.)
  local function profile(options)
    local path = h.tmpname()
    local wait = h.start_script('package.cpath = ' ..
      string.format('%q', package.cpath) .. '\njit.off()\n' .. PRELUDE ..
      "local memprof = require('memprof')\n" ..
      'local program = assert(loadstring(' .. string.format('%q', PROGRAM) ..
      ", '@prog.lua'))\n" ..
      'assert(memprof.start(' .. string.format('%q', path) .. ', ' ..
      options .. '))\nprogram()\nassert(memprof.stop())\n')
    return function()
      local out, code = wait()
      local ok, result = pcall(function()
        return analyze.run(reader.open(path))
      end)
      os.remove(path)
      assert.are.same({ '', 0 }, { out, code })
      assert(ok, result)
      assert.is_nil(result.stream.warning)
      local allocated = {}
      for _, kind in ipairs({ 'alloc', 'realloc' }) do
        for _, record in ipairs(result.sites.kinds[kind]) do
          local name = record.site.name
          allocated[name] = (allocated[name] or 0) + record.plus
        end
      end
      local live = 0
      result.blocks:each_live_block(function(_, size) live = live + size end)
      return allocated, live, result.stream
    end
  end

  it('estimates the top 10 places and the live bytes within 10%', function()
    -- (In the extended format too, so that internal events are named alike.)
    local runs = { profile('{ timestamps = true }') }
    for seed = 1, 3 do
      runs[seed + 1] = profile('{ sample_bytes = 128, seed = ' .. seed .. ' }')
    end
    -- (Every child is waited for and its file removed before a check.)
    local results = {}
    for i, run in ipairs(runs) do results[i] = { pcall(run) } end
    for _, r in ipairs(results) do assert(r[1], r[2]) end
    local truth, truth_live = results[1][2], results[1][3]
    local places = {}
    for name in pairs(truth) do places[#places + 1] = name end
    table.sort(places, function(a, b) return truth[a] > truth[b] end)
    -- Each of the ten gets a thousand samples or more.
    assert.is_true(truth[places[10]] > 128 * 1000)
    for _, seed in ipairs({ 1, 2, 3 }) do
      local estimate, live, stream = unpack(results[seed + 1], 2)
      assert.are.equal(128, stream.sample_bytes)
      for i = 1, 10 do
        local name = places[i]
        local ratio = (estimate[name] or 0) / truth[name]
        assert.is_true(ratio > 0.9 and ratio < 1.1, string.format(
          'seed %d, %s: %d estimated, %d allocated', seed, name,
          estimate[name] or 0, truth[name]))
      end
      local ratio = live / truth_live
      assert.is_true(ratio > 0.9 and ratio < 1.1, string.format(
        'seed %d: %d live estimated, %d live', seed, live, truth_live))
    end
  end)
end)
