-- Specs for memprof.cli.progress and the progress line of memprof-report:
-- shown on a terminal (checked through a pseudo-terminal, with
-- util-linux `script`), never otherwise.  Runs under LuaJIT and plain
-- Lua 5.1.

local progress = require('memprof.cli.progress')
local B = require('helpers.stream_builder')
local C = require('helpers.command')

local MIB = 1024 * 1024

local function recorder()
  local parts = {}
  return { parts = parts, write = function(self, ...)
    for i = 1, select('#', ...) do
      parts[#parts + 1] = select(i, ...)
    end
    return self
  end, text = function() return table.concat(parts) end }
end

-- A profile of `pairs` allocations and frees of 8 bytes at @big.lua:2,
-- 9 bytes each.
local function big_profile(pairs)
  local s = B.new():lfunc(0x100, '@big.lua', 1):events()
  local pair = B.new()
  pair.parts, pair.length = {}, 0
  pair:alloc(B.lua(0x100, 2), 0x10, 8):free(B.internal(), 0x10, 8)
  s:raw(string.rep(pair:bytes(), pairs))
  return s:epilogue()
end

describe('progress meter', function()
  it('writes a line at once, then at most once per interval', function()
    local err, now = recorder(), 0
    local meter = progress.new(err, 'big.bin', 3 * MIB,
      { clock = function() return now end })
    meter.update(MIB)
    now = 0.1
    meter.update(2 * MIB)       -- too soon: nothing
    now = 0.3
    meter.update(2 * MIB + 512 * 1024)
    meter.done()
    local first = 'memprof-report: reading big.bin: 1MiB of 3MiB (33%)'
    local second = 'memprof-report: reading big.bin: 2.50MiB of 3MiB (83%)'
    -- The line is erased with as many spaces as the longest line.
    assert.are.equal('\r' .. first .. '\r' .. second .. '\r' ..
      string.rep(' ', #second) .. '\r', err.text())
  end)

  it('pads a shorter line over a longer one', function()
    local err, now = recorder(), 0
    local meter = progress.new(err, 'f', 300 * MIB,
      { clock = function() return now end, interval = 1 })
    meter.update(150 * MIB)
    now = 2
    meter.update(200 * MIB)
    local long = 'memprof-report: reading f: 150MiB of 300MiB (50%)'
    local short = 'memprof-report: reading f: 200MiB of 300MiB (66%)'
    assert.are.equal('\r' .. long .. '\r' .. short, err.text())
  end)

  it('says nothing for a file read in one chunk, or when done early',
    function()
      local err = recorder()
      local meter = progress.new(err, 'small.bin', MIB)
      meter.update(MIB)
      meter.done()
      assert.are.equal('', err.text())
      meter = progress.new(err, 'big.bin', 2 * MIB)
      meter.done()
      assert.are.equal('', err.text())
    end)

  it('is quiet when stderr is not the process stderr', function()
    local err = recorder()
    local meter = progress.for_stderr(err, 'big.bin')
    meter.update(MIB)
    meter.done()
    assert.are.equal('', err.text())
  end)
end)

describe('reader progress callback', function()
  it('is called with the bytes read so far after each chunk', function()
    local path = os.tmpname()
    local bytes = big_profile(3):epilogue():bytes()
    C.write_file(path, bytes)
    local seen = {}
    local stream = require('memprof.read.stream').open(path, { chunk_size = 16,
      on_read = function(total) seen[#seen + 1] = total end })
    while stream:next() do end
    os.remove(path)
    local expected = {}
    for total = 16, #bytes, 16 do
      expected[#expected + 1] = total
    end
    if #bytes % 16 ~= 0 then
      expected[#expected + 1] = #bytes
    end
    assert.are.same(expected, seen)
  end)
end)

describe('memprof-report progress line', function()
  local dir, path

  setup(function()
    dir = C.temp_dir()
    path = dir .. '/big.bin'
    -- 300000 pairs: 2.57MiB, three read chunks.
    C.write_file(path, big_profile(300000):bytes())
  end)

  teardown(function()
    C.remove_tree(dir)
  end)

  local REPORT = [[
HEAP SUMMARY (by bytes held):
TOTAL holds 0B (net bytes of the stream)

]]

  it('writes nothing on stderr when it is not a terminal', function()
    local code, stdout, stderr = C.run(C.command('./bin/memprof-report',
      '--leak-only', path))
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    assert.are.equal(REPORT, stdout)
  end)

  it('shows how far it has read on a terminal, then erases it', function()
    local code, stdout = C.run('script -q -e -c ' ..
      C.quote(C.command('./bin/memprof-report', '--leak-only', path)) ..
      ' /dev/null')
    assert.are.equal(0, code)
    local first = 'memprof-report: reading ' .. path .. ': 1MiB of 2.57MiB ' ..
      '(38%)'
    assert.are.equal('\r' .. first, stdout:sub(1, #first + 1))
    -- The line is erased (with at least its width of spaces) before the
    -- report, which the terminal gets with \r\n line ends.
    local spaces = stdout:match('\r( +)\rHEAP SUMMARY %(by bytes held%):\r\n')
    assert.truthy(spaces)
    assert.is_true(#spaces >= #first)
    local on_terminal = (REPORT:gsub('\n', '\r\n'))
    assert.are.equal(on_terminal, stdout:sub(-#on_terminal))
  end)
end)
