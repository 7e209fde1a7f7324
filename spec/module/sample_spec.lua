-- Sampled recording (src/sample.c, src/live.c, the sampling hooks of
-- src/hook.c): which allocations are recorded, and the frees and
-- reallocations of the sampled blocks.
local h = require('helpers.profile')
local memprof = require('memprof')

-- A child script that loads the module from this tree, runs `program`
-- (a chunk named @prog.lua, so lines are known) under a profile with
-- `options` (Lua source of a table) and writes it to `path`.
local function profile_child(path, options, program)
  local source = 'package.cpath = ' .. string.format('%q', package.cpath) ..
    '\npackage.path = ' .. string.format('%q', package.path) .. [[

jit.off()
local memprof = require('memprof')
local program = assert(loadstring(]] .. string.format('%q', program) ..
    [[, '@prog.lua'))
assert(memprof.start(]] .. string.format('%q', path) .. ', ' .. options ..
    [[))
program()
assert(memprof.stop())
print('done')
]]
  local out, code = h.run_script(source)
  assert.are.equal('done\n', out)
  assert.are.equal(0, code)
  local events, stream = h.read(path)
  os.remove(path)
  assert.is_nil(stream.warning)
  return events, stream
end

-- What the specs compare between two runs: kind, place and sizes, in
-- order (the collector frees in an order that differs from run to run:
-- LuaJIT seeds its string hash at random).
local function shapes(events)
  local out = {}
  for i, ev in ipairs(events) do
    out[i] = ev.kind .. ' ' .. ev.name .. ' ' .. ev.osize .. ' ' .. ev.nsize
  end
  table.sort(out)
  return out
end

-- Strings of many sizes, kept and dropped, and tables that grow; the
-- collector runs only at the end, and collects every dead block then, so
-- the events are the same from run to run.
local MIXED = [[
collectgarbage('stop')
local keep = {}
for i = 1, 20000 do
  keep[i % 3000 + 1] = string.rep('s', 40 + i % 700) .. i
end
for i = 1, 200 do
  local t = {}
  for j = 1, i * 10 do t[j] = j end
  keep[i] = t
end
collectgarbage()
return keep
]]

-- Every free and realloc releases a block that an earlier event produced
-- (a sampled one, still live) with its size: the live table follows them.
local function assert_only_sampled_released(events)
  local live = {}
  for _, ev in ipairs(events) do
    if ev.kind == 'free' or ev.kind == 'realloc' then
      assert.are.equal(live[ev.oaddr], ev.osize, ev.kind .. ' ' .. ev.name)
      live[ev.oaddr] = nil
    end
    if ev.kind == 'alloc' or ev.kind == 'realloc' then
      assert.is_nil(live[ev.naddr])
      live[ev.naddr] = ev.nsize
    end
  end
end

describe('sampled recording', function()
  after_each(function()
    if memprof.is_running() then memprof.stop() end
  end)

  it('records the same events twice with one seed', function()
    local options = '{ sample_bytes = 4096, seed = 42 }'
    local first, stream = profile_child(h.tmpname(), options, MIXED)
    local second = profile_child(h.tmpname(), options, MIXED)
    assert.are.equal(4096, stream.sample_bytes)
    assert.are.equal(100, stream.version)
    assert.are.equal(#first, #second)
    assert.are.same(shapes(first), shapes(second))
    assert_only_sampled_released(first)
  end)

  it('records other events with another seed', function()
    local first = profile_child(h.tmpname(),
      '{ sample_bytes = 4096, seed = 42 }', MIXED)
    local other = profile_child(h.tmpname(),
      '{ sample_bytes = 4096, seed = 43 }', MIXED)
    assert.are_not.same(shapes(first), shapes(other))
  end)

  it('records far fewer events than a full profile', function()
    local full = profile_child(h.tmpname(), '{ timestamps = false }', MIXED)
    local sampled = profile_child(h.tmpname(),
      '{ sample_bytes = 65536, seed = 1 }', MIXED)
    assert.is_true(#full > 20000)
    assert.is_true(#sampled * 50 < #full)
  end)

  it('records the free of every sampled block', function()
    -- Blocks of 100 KB are sampled at one sample per 1 KB (1 - e^-100).
    local events = profile_child(h.tmpname(), '{ sample_bytes = 1024, seed = 5 }', [[
local big = {}
for i = 1, 10 do big[i] = string.rep('b', 100000 + i) end
big = nil
collectgarbage()
]])
    local allocs = h.at(events, '@prog.lua:2', 'alloc')
    local large, freed = {}, {}
    for _, ev in ipairs(allocs) do
      -- (string.rep's buffer, of 128 KiB, is no string.)
      if ev.nsize > 100000 and ev.nsize < 100100 then
        large[ev.naddr] = ev.nsize
      end
    end
    local count = 0
    for _ in pairs(large) do count = count + 1 end
    assert.are.equal(10, count)
    for _, ev in ipairs(events) do
      if ev.kind == 'free' and large[ev.oaddr] then
        assert.are.equal(large[ev.oaddr], ev.osize)
        freed[#freed + 1] = ev
      end
    end
    assert.are.equal(10, #freed)
    assert_only_sampled_released(events)
  end)

  it('records a realloc of a sampled block into one that is not as a free',
    function()
    -- The array part grows to 2 MB (sampled), then shrinks to 16 bytes
    -- when t.x makes the table rehash: the new block is not sampled.
    local events = profile_child(h.tmpname(), '{ sample_bytes = 4096, seed = 7 }', [[
local t = {}
for i = 1, 200000 do t[i] = i end
for i = 2, 200000 do t[i] = nil end
t.x = 1
return t
]])
    local grown = h.at(events, '@prog.lua:2')
    local last = grown[#grown]
    assert.are.equal(2097160, last.nsize)
    local shrunk = h.at(events, '@prog.lua:4')
    assert.are.equal(1, #shrunk)
    assert.are.same({ 'free', last.naddr, 2097160 },
      { shrunk[1].kind, shrunk[1].oaddr, shrunk[1].osize })
  end)

  it('records a realloc of a block that was not sampled into one that is ' ..
    'as an allocation', function()
    local events = profile_child(h.tmpname(), '{ sample_bytes = 4096, seed = 7 }', [[
local t = {}
for i = 1, 200000 do t[i] = i end
return t
]])
    local grown = h.at(events, '@prog.lua:2')
    -- The array part doubles from 8 bytes; the first sampled block is an
    -- allocation, and each later one a realloc of the one before.
    assert.are.equal('alloc', grown[1].kind)
    for i = 2, #grown do
      assert.are.same({ 'realloc', grown[i - 1].naddr, grown[i - 1].nsize },
        { grown[i].kind, grown[i].oaddr, grown[i].osize })
    end
    assert.are.equal(2097160, grown[#grown].nsize)
  end)

  it('records the call stacks of sampled events', function()
    local events, stream = profile_child(h.tmpname(),
      '{ sample_bytes = 1024, seed = 2, stack_depth = 4 }', [[
local function make(n) local s = string.rep('m', n) return s end
local keep = {}
for i = 1, 10 do keep[i] = make(100000 + i) end
return keep
]])
    local made = 0
    for _, ev in ipairs(events) do
      if ev.name == '@prog.lua:1' and ev.nsize > 100000 and
          ev.nsize < 100100 then
        made = made + 1
      end
    end
    assert.are.equal(10, made)
    assert.is_true(stream.has_stacks)
    local found = {}
    for _, stack in ipairs(stream.stacks) do
      local names = {}
      for i, frame in ipairs(stack.frames) do names[i] = frame.name end
      if names[1] == 'string.rep' then
        found[#found + 1] = table.concat(names, ' < ', 1, 3)
      end
    end
    assert.are.same({ 'string.rep < @prog.lua:1 < @prog.lua:3' }, found)
  end)

  -- An unsampled free of a prototype leaves its address to the next one:
  -- the chunks run one after another, so the chunk a sampled event names
  -- never goes back.
  it('names the chunk that runs after prototypes were freed and others ' ..
    'took their place', function()
    -- Each chunk's string of 50 KB is sampled (at one sample per 8 KiB);
    -- its prototype, of a few hundred bytes, seldom is.
    local events = profile_child(h.tmpname(),
      '{ sample_bytes = 8192, seed = 4 }', [[
local made = 0
for i = 1, 300 do
  local f = loadstring('local s = string.rep("x", 50000) .. "y" return #s',
    '@chunk' .. i .. '.lua')
  made = made + f()
  f = nil
  collectgarbage()
end
return made
]])
    local last, chunks, back = 0, 0, {}
    for _, ev in ipairs(events) do
      local n = tonumber(ev.name:match('^@chunk(%d+)%.lua:1$'))
      if n and n < last then
        back[#back + 1] = last .. ' then ' .. n
      elseif n and n > last then
        last, chunks = n, chunks + 1
      end
    end
    assert.are.same({}, back)
    assert.is_true(chunks > 250, chunks .. ' chunks sampled')
  end)

  -- Unsampled frees go through the hook unseen, so a closure freed
  -- between two samples may leave its address to a closure of another
  -- function: the stack of a later sample must still name the function
  -- that runs.
  it('names the right function in the stack of a sampled event after ' ..
    'closures were freed and others took their place', function()
    local events = profile_child(h.tmpname(),
      '{ sample_bytes = 256, seed = 3, stack_depth = 4 }', [[
local function a() return function() local t = {} for j = 1, 9 do t[j] = {} end return #t end end
local function b() return function() local t = {} for j = 1, 9 do t[j] = {} end return #t end end
local made = 0
for i = 1, 2000 do
  local f = i % 2 == 0 and a() or b()
  made = made + f()
  f = nil
  collectgarbage()
end
return made
]])
    -- Samples in a's and b's closures (called from line 6); every sample
    -- at lines 1 and 2 (those and the closures' making, called from line
    -- 5) has its own place on top of its stack.
    local inside, wrong = { 0, 0 }, {}
    for _, ev in ipairs(events) do
      local line = ev.kind == 'alloc' and ev.name:match('^@prog%.lua:([12])$')
      if line then
        local frames = ev.stack.frames
        if frames[1].name ~= ev.name then
          wrong[#wrong + 1] = ev.name .. ': ' .. frames[1].name
        elseif frames[2].name == '@prog.lua:6' then
          inside[tonumber(line)] = inside[tonumber(line)] + 1
        end
      end
    end
    assert.is_true(inside[1] > 100, inside[1] .. ' samples in a closure of a')
    assert.is_true(inside[2] > 100, inside[2] .. ' samples in a closure of b')
    assert.are.same({}, wrong)
  end)

  it('writes the extended format with the sampling record', function()
    local path = h.tmpname()
    assert.is_true(memprof.start(path, { sample_bytes = 100, seed = 0 }))
    local t = {}
    for i = 1, 100 do t[i] = {} end
    assert.is_true(memprof.stop())
    local file = assert(io.open(path, 'rb'))
    local head = file:read(19)
    file:close()
    os.remove(path)
    -- ljs 3, final; ljm 100; 0x5c, scheme 1, 100.
    assert.are.equal('ljs\3\0\0\0\128ljm\100\0\0\0\92\1\100', head:sub(1, 18))
  end)

  it('takes sample_bytes = true as one sample per 512 KiB', function()
    local path = h.tmpname()
    assert.is_true(memprof.start(path, { sample_bytes = true }))
    assert.are.equal(524288, memprof.stats().sample_bytes)
    assert.is_true(memprof.stop())
    local _, stream = h.read(path)
    os.remove(path)
    assert.are.equal(524288, stream.sample_bytes)
  end)

  it('refuses bad sample_bytes and seed options', function()
    local path = h.tmpname()
    local cases = {
      { { sample_bytes = 0 }, "option 'sample_bytes' must be an integer " ..
        "from 1 to 2^53, got 0" },
      { { sample_bytes = 1.5 }, "option 'sample_bytes' must be an integer " ..
        "from 1 to 2^53, got 1.5" },
      { { sample_bytes = 'big' }, "option 'sample_bytes' must be an integer " ..
        "from 1 to 2^53 or true, got string" },
      { { sample_bytes = false }, "option 'sample_bytes' must be an integer " ..
        "from 1 to 2^53 or true, got boolean" },
      { { sample_bytes = 10, seed = -1 }, "option 'seed' must be an integer " ..
        "from 0 to 2^53, got -1" },
      { { seed = 3 }, "option 'seed' needs option 'sample_bytes'" },
    }
    for _, case in ipairs(cases) do
      local ok, msg, err = memprof.start(path, case[1])
      assert.is_nil(ok)
      assert.are.equal(case[2], msg)
      assert.are.equal(22, err)
      assert.is_false(memprof.is_running())
    end
    os.remove(path)
  end)
end)
