-- The reporter's pipeline runs one way: read/ -> analysis/ -> report/ ->
-- cli/ (docs/architecture.md).  Every require of every file under
-- lua/memprof/read and lua/memprof/analysis names a module of its own
-- layer or one before it, or one the layers share (memprof.record,
-- memprof.words, memprof.version) or LuaJIT's own; and names it as a
-- string, so that no arrow up the pipeline can hide behind a variable.

-- The layers in order; each may require modules of the layers before it.
local LAYERS = { 'read', 'analysis', 'report', 'cli' }
local SHARED = { ['memprof.record'] = true, ['memprof.words'] = true,
  ['memprof.version'] = true }
-- Modules of LuaJIT and of Lua itself.
local OUTSIDE = { ffi = true, bit = true, ['table.new'] = true,
  ['table.clear'] = true, ['jit.util'] = true, ['jit.profile'] = true }

local function rank(layer)
  for i, name in ipairs(LAYERS) do
    if name == layer then
      return i
    end
  end
  return nil
end

local function files_of(dir)
  local list = {}
  local pipe = assert(io.popen("find '" .. dir .. "' -name '*.lua' | sort"))
  for path in pipe:lines() do
    list[#list + 1] = path
  end
  pipe:close()
  return list
end

local function read_file(path)
  local file = assert(io.open(path, 'rb'))
  local data = file:read('*a')
  file:close()
  return data
end

-- The requires of a file's code (comments left out): the names of
-- those that name a string, and the lines of those that do not.
local function requires_of(source)
  local names, others = {}, {}
  local number = 0
  for line in (source .. '\n'):gmatch('(.-)\n') do
    number = number + 1
    local code = line:gsub('%-%-.*$', '')
    for at in code:gmatch('()require') do
      local name = code:match("^require%s*%(?%s*['\"]([^'\"]+)['\"]", at)
      if name then
        names[#names + 1] = name
      else
        others[#others + 1] = number
      end
    end
  end
  return names, others
end

-- Why a file of `layer` may not require `name`, or nil when it may.
local function wrong(layer, name)
  if SHARED[name] or OUTSIDE[name] then
    return nil
  end
  local of = name:match('^memprof%.([%w_]+)%.')
  if not of or not rank(of) then
    return 'not a module of the pipeline'
  end
  if rank(of) > rank(layer) then
    return 'runs up the pipeline, from ' .. layer .. '/ to ' .. of .. '/'
  end
  return nil
end

describe('the pipeline of the reporter', function()
  for _, layer in ipairs({ 'read', 'analysis' }) do
    it('has no require in ' .. layer .. '/ of a later layer', function()
      local files = files_of('lua/memprof/' .. layer)
      assert.is_true(#files >= 5)
      for _, path in ipairs(files) do
        local names, others = requires_of(read_file(path))
        assert.are.same({}, others, path .. ': a require of no string')
        for _, name in ipairs(names) do
          assert.is_nil(wrong(layer, name), path .. ' requires ' .. name)
        end
      end
    end)
  end

  it('tells an arrow up the pipeline and a hidden require', function()
    assert.are.equal('runs up the pipeline, from analysis/ to report/',
      wrong('analysis', 'memprof.report.rows'))
    assert.are.equal('runs up the pipeline, from read/ to analysis/',
      wrong('read', 'memprof.analysis.groups'))
    assert.is_nil(wrong('analysis', 'memprof.read.stream'))
    assert.is_nil(wrong('analysis', 'memprof.record'))
    local names, others = requires_of("local a = require('ffi')\n" ..
      "local b = require(name) -- require('x')\n")
    assert.are.same({ { 'ffi' }, { 2 } }, { names, others })
  end)
end)
