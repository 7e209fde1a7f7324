-- Lazy symbols: each place is described once, right before its first
-- event, and described again when the VM reuses its address.
local h = require('helpers.profile')
local reader = require('memprof.reader')

-- The whole file as a string.
local function contents(path)
  local f = assert(io.open(path, 'rb'))
  local data = f:read('*a')
  f:close()
  return data
end

describe('symbols', function()
  setup(function() jit.off() end)
  teardown(function() jit.on() end)

  it('start with an empty symbol table', function()
    local path = h.tmpname()
    local memprof = require('memprof')
    assert(memprof.start(path))
    assert(memprof.stop())
    -- Both headers, the final symbol marker, then the epilogue at once.
    assert.equal('ljs\3\0\0\0\128ljm\3\0\0\0', contents(path):sub(1, 15))
    os.remove(path)
  end)

  it('describe a prototype again when its address is reused', function()
    local events = h.profile(function()
      for i = 1, 200 do
        local f = loadstring('local t = {}\nreturn t', '@chunk' .. i)
        f()
        f = nil
        collectgarbage()
      end
    end)
    -- Every chunk's allocation carries its own name...
    local names, addrs, reused = {}, {}, 0
    for _, ev in ipairs(events) do
      if ev.source == 'lua' and ev.name:match('^@chunk%d+:1$') then
        assert.is_nil(names[ev.name], ev.name .. ' seen twice')
        names[ev.name] = true
        if addrs[ev.site.addr] then reused = reused + 1 end
        addrs[ev.site.addr] = true
      end
    end
    for i = 1, 200 do assert.is_true(names['@chunk' .. i .. ':1']) end
    -- ...although the collector handed the same prototype address to
    -- several of them.
    assert.is_true(reused >= 10, reused .. ' reused prototype addresses')
  end)

  it('describe each place once while its address lives', function()
    local path = h.tmpname()
    local memprof = require('memprof')
    local f = h.chunk('local t = {}\nreturn t', '@once.lua')
    assert(memprof.start(path))
    for _ = 1, 100 do f() end
    assert(memprof.stop())
    local stream = reader.open(path)
    local n = 0
    while stream:next() do n = n + 1 end
    -- One description of @once.lua: the chunk name appears once.
    local _, count = contents(path):gsub('@once%.lua', '')
    assert.equal(1, count)
    assert.is_true(n >= 100)
    os.remove(path)
  end)
end)
