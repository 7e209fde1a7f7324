-- Specs for the pprof export: memprof.encode.protobuf, memprof.encode.gzip (checked
-- by gzip itself) and memprof.report.pprof, checked by its real
-- consumer, `go tool pprof` (Debian package golang-go), run offline with
-- its home and caches in a temporary directory.  Runs under LuaJIT and
-- plain Lua 5.1.

local pb = require('memprof.encode.protobuf')
local gzip = require('memprof.encode.gzip')
local B = require('helpers.stream_builder')
local C = require('helpers.command')
local consumers = require('helpers.consumers')

local REPORT = './bin/memprof-report'

local function hex(bytes)
  return (bytes:gsub('.', function(c)
    return string.format('%02x', c:byte())
  end))
end

describe('protobuf encoder', function()
  it('encodes varints', function()
    assert.are.equal('00', hex(pb.varint(0)))
    assert.are.equal('7f', hex(pb.varint(127)))
    assert.are.equal('8001', hex(pb.varint(128)))
    assert.are.equal('ac02', hex(pb.varint(300)))
    assert.are.equal('8080808080808010', hex(pb.varint(2 ^ 53)))
    assert.has_error(function() pb.varint(-1) end,
      'protobuf: expected a whole number between 0 and 2^53')
    assert.has_error(function() pb.varint(1.5) end,
      'protobuf: expected a whole number between 0 and 2^53')
  end)

  -- Each field goes out in its parts (key, length, bytes), none of them
  -- joined to another first.
  it('streams the fields of a top-level message as they are added',
    function()
      local emitted = {}
      local message = pb.stream(function(bytes)
        emitted[#emitted + 1] = hex(bytes)
      end)
      message:bytes(2, 'testing'):message(3, pb.message():varint(1, 150))
        :packed(4, { 3, 270, 86942 }):optional(5, 0):optional(6, 1)
      assert.are.same({ '12', '07', '74657374696e67', '1a', '03', '089601',
        '22', '06', '038e029ea705', '30', '01' }, emitted)
      assert.has_error(function() message:encode() end,
        'protobuf: a streamed message has no encoding to return')
    end)

  it('encodes fields and messages', function()
    local inner = pb.message():varint(1, 150)
    local message = pb.message():bytes(2, 'testing'):message(3, inner)
      :packed(4, { 3, 270, 86942 }):optional(5, 0):optional(6, 1)
    assert.are.equal('120774657374696e67' .. '1a03089601' ..
      '2206038e029ea705' .. '3001', hex(message:encode()))
  end)
end)

describe('gzip writer', function()
  it('computes CRC-32', function()
    assert.are.equal(0xCBF43926, gzip.crc32('123456789'))
    assert.are.equal(0, gzip.crc32(''))
    assert.are.equal(0x414FA339, gzip.crc32('The quick brown fox jumps ' ..
      'over the lazy dog'))
  end)

  it('computes CRC-32 piece by piece', function()
    local crc = gzip.crc32('1234')
    assert.are.equal(0xCBF43926, gzip.crc32('56789', crc))
    assert.are.equal(crc, gzip.crc32('', crc))
    crc = gzip.crc32('The quick brown fox ')
    crc = gzip.crc32('jumps over ', crc)
    assert.are.equal(0x414FA339, gzip.crc32('the lazy dog', crc))
  end)

  it('streams the bytes wrap() makes of the pieces joined', function()
    local block = 65535
    -- Pieces that end inside a block, at its end, and past two.
    local cases = {
      {},
      { '' },
      { 'he', 'llo' },
      { string.rep('a', block) },
      { string.rep('b', block - 1), 'c', '' },
      { string.rep('d', block), 'e' },
      { string.rep('f', 3), string.rep('g', 2 * block + 7), 'h' },
    }
    do
      for _, pieces in ipairs(cases) do
        local written = {}
        local out = { write = function(_, ...)
          for _, bytes in ipairs({ ... }) do
            written[#written + 1] = bytes
          end
        end }
        local writer = gzip.writer(out)
        for _, piece in ipairs(pieces) do
          writer:write(piece)
        end
        writer:close()
        local joined = table.concat(pieces)
        assert.is_true(table.concat(written) == gzip.wrap(joined))
        -- Blocks of 65535 bytes each, but the last (5 bytes of header).
        local blocks = math.max(1, math.ceil(#joined / block))
        assert.are.equal(10 + #joined + 5 * blocks + 8,
          #table.concat(written))
      end
    end
  end)

  it('writes files that gzip reads back', function()
    local dir = C.temp_dir()
    local data = {}
    for i = 1, 30000 do
      data[i] = string.char(i % 256, (i * 7) % 256)
    end
    -- Empty, one block, and just over two blocks (65535 bytes each).
    local cases = { '', 'hello', table.concat(data):sub(1, 65535 * 2 + 5) }
    for i, content in ipairs(cases) do
      local path = dir .. '/' .. i .. '.gz'
      C.write_file(path, gzip.wrap(content))
      local code, stdout, stderr = C.run('gzip -dc ' .. C.quote(path))
      assert.are.equal('', stderr)
      assert.are.equal(0, code)
      assert.are.equal(#content, #stdout)
      assert.is_true(content == stdout)
    end
    C.remove_tree(dir)
  end)
end)

describe('pprof report read by go tool pprof', function()
  local dir

  setup(function()
    assert(C.have('go'), 'these specs need go (Debian package golang-go)')
  end)

  before_each(function()
    dir = C.temp_dir()
  end)

  after_each(function()
    C.remove_tree(dir)
  end)

  -- The profile of a stream, written by memprof-report --output.
  local function profile_of(builder)
    local path = dir .. '/p.bin'
    C.write_file(path, builder:bytes())
    local out = dir .. '/p.pb.gz'
    local code, stdout = C.run(C.command(REPORT, '--format=pprof',
      '--output=' .. out, path))
    assert.are.equal(0, code)
    assert.are.equal('', stdout)
    return out, path
  end

  -- go tool pprof's output, offline, with its files under dir.
  local function pprof(...)
    local code, stdout, stderr = consumers.pprof(dir, ...)
    assert.are.equal('', stderr)
    assert.are.equal(0, code)
    return stdout
  end

  it('shows the top functions by bytes allocated', function()
    local file, source = profile_of(B.three_callers())
    assert.are.equal([[
File: lua
memprof profile ]] .. source .. [[

inuse: the blocks live at the end, garbage not yet collected included (the profile has no collection at stop)
Type: alloc_space
Showing nodes accounting for 1160B, 100% of 1160B total
      flat  flat%   sum%        cum   cum%
     1000B 86.21% 86.21%      1000B 86.21%  string.format
       64B  5.52% 91.72%      1064B 91.72%  function at @log.lua:3
       48B  4.14% 95.86%        48B  4.14%  io_lines
       32B  2.76% 98.62%      1144B 98.62%  main chunk of @app.lua
       16B  1.38%   100%        16B  1.38%  TRACE started at @app.lua:70
]], pprof('-top', '-sample_index=alloc_space', file))
  end)

  it('has every sample type, and lines and files of Lua frames', function()
    local file, source = profile_of(B.three_callers())
    assert.are.equal([[
File: lua
memprof profile ]] .. source .. [[

inuse: the blocks live at the end, garbage not yet collected included (the profile has no collection at stop)
Type: inuse_space
Showing nodes accounting for 828B, 100% of 828B total
      flat  flat%   sum%        cum   cum%
      700B 84.54% 84.54%       700B 84.54%  string.format
       64B  7.73% 92.27%        64B  7.73%  function at @log.lua:3 log.lua:7
       48B  5.80% 98.07%        48B  5.80%  io_lines
       16B  1.93%   100%        16B  1.93%  TRACE started at @app.lua:70
         0     0%   100%       700B 84.54%  function at @log.lua:3 log.lua:5
         0     0%   100%       400B 48.31%  main chunk of @app.lua app.lua:20
         0     0%   100%       300B 36.23%  main chunk of @app.lua app.lua:30
         0     0%   100%        64B  7.73%  main chunk of @app.lua app.lua:50
         0     0%   100%        48B  5.80%  main chunk of @app.lua app.lua:60
]], pprof('-top', '-lines', '-sample_index=inuse_space', file))
    local raw = pprof('-raw', file)
    assert.truthy(raw:find('alloc_space/bytes[dflt] alloc_objects/count ' ..
      'inuse_space/bytes inuse_objects/count\n', 1, true))
    assert.truthy(raw:find('\n        400          2        400          2: ' ..
      '1 2 4 \n', 1, true))
    assert.truthy(raw:find('\n     2: 0x0 M=1 function at @log.lua:3 ' ..
      'log.lua:5 s=3\n', 1, true))
    local objects = pprof('-top', '-sample_index=alloc_objects', file)
    assert.truthy(objects:find('\n         6 60.00% 60.00%          6 ' ..
      '60.00%  string.format\n', 1, true))
  end)

  it('puts the traces of a loop under the callers of their function',
    function()
      local file, source = profile_of(B.compiled_loop())
      assert.are.equal([[
File: lua
memprof profile ]] .. source .. [[

inuse: the blocks live at the end, garbage not yet collected included (the profile has no collection at stop)
Type: alloc_space
Showing nodes accounting for 320B, 100% of 320B total
      flat  flat%   sum%        cum   cum%
      256B 80.00% 80.00%       256B 80.00%  TRACE started at @fill.lua:3
       64B 20.00%   100%        64B 20.00%  function at @fill.lua:1
         0     0%   100%       320B   100%  main chunk of @main.lua
]], pprof('-top', '-sample_index=alloc_space', file))
      local raw = pprof('-raw', file)
      -- One sample per stack: the trace under line 10 (3 blocks, one
      -- freed) and under line 20.
      assert.truthy(raw:find('\n        192          3        128          2: ' ..
        '3 2 \n', 1, true))
      assert.truthy(raw:find('\n         64          1         64          1: ' ..
        '3 4 \n', 1, true))
      assert.truthy(raw:find('\n     3: 0x0 M=1 TRACE started at @fill.lua:3 ' ..
        ':0 s=0\n', 1, true))
    end)

  it('makes one-frame samples for a profile without stacks', function()
    local file = profile_of(B.crafted())
    local top = pprof('-top', '-sample_index=inuse_objects', file)
    assert.truthy(top:find([[
Type: inuse_objects
Showing nodes accounting for 4, 100% of 4 total
      flat  flat%   sum%        cum   cum%
         3 75.00% 75.00%          3 75.00%  function at @test.lua:1
         1 25.00%   100%          1 25.00%  TRACE started at @test.lua:5
]], 1, true))
  end)
end)

describe('memprof-report --format=pprof', function()
  it('never writes gzip data to a terminal', function()
    local path = os.tmpname()
    C.write_file(path, B.crafted():bytes())
    local code, stdout = C.run('script -q -e -c ' .. C.quote(C.command(REPORT,
      '--format=pprof', path)) .. ' /dev/null')
    os.remove(path)
    assert.are.equal(1, code)
    assert.are.equal('memprof-report: --format=pprof writes binary data: ' ..
      'redirect the output or use --output=FILE\r\n', stdout)
  end)

  it('takes --output=- as stdout: piped, the same bytes as the file; ' ..
      'to a terminal, refused', function()
    local dir = C.temp_dir()
    local path, gz = dir .. '/p.bin', dir .. '/p.pb.gz'
    C.write_file(path, B.crafted():bytes())
    local note = 'memprof-report: note: the profile has no call stacks: ' ..
      'each sample is one frame, the place of the events (record with ' ..
      'memprof.start(path, {stack_depth = N}) for stacks)\n'
    local code, _, stderr = C.run(C.command(REPORT, '--format=pprof',
      '--output=' .. gz, path))
    assert.are.same({ 0, note .. 'memprof-report: wrote ' .. gz .. '\n' },
      { code, stderr })
    local piped
    code, piped, stderr = C.run(C.command(REPORT, '--format=pprof',
      '--output=-', path))
    assert.are.same({ 0, note }, { code, stderr })
    local file = C.read_file(gz)
    assert.are.equal(#file, #piped)
    assert.are.equal(file, piped)
    assert.is_nil(io.open('-'))
    local terminal
    code, terminal = C.run('script -q -e -c ' .. C.quote(C.command(REPORT,
      '--format=pprof', '--output=-', path)) .. ' /dev/null')
    assert.are.same({ 1, 'memprof-report: --format=pprof writes binary ' ..
      'data: redirect the output or use --output=FILE\r\n' },
      { code, terminal })
    assert.is_nil(io.open('-'))
    C.remove_tree(dir)
  end)
end)

describe('pprof report comments', function()
  local reader = require('memprof.read.stream')
  local analyze = require('memprof.analysis.analyze')
  local pprof = require('memprof.report.pprof')

  local function encoded(builder)
    return pprof.encode(analyze.run(reader.from_string(builder:bytes(),
      'x.bin'), { group = 'stack' }))
  end

  it('say whether inuse counts garbage not yet collected', function()
    local s = B.new():lfunc(0x100, '@a.lua', 0)
      :events({ version = B.EXTENDED })
    s:alloc(B.lua(0x100, 1), 0x10, 64)
    local without = encoded(s:epilogue())
    assert.truthy(without:find('inuse: the blocks live at the end, garbage ' ..
      'not yet collected included (the profile has no collection at stop)',
      1, true))
    s = B.new():lfunc(0x100, '@a.lua', 0):events({ version = B.EXTENDED })
    s:alloc(B.lua(0x100, 1), 0x10, 64):note(B.COLLECTED_AT_STOP, 64)
    local with = encoded(s:epilogue())
    assert.truthy(with:find('inuse: the blocks live after the collection ' ..
      'at stop (all reachable)', 1, true))
    assert.is_nil(with:find('garbage not yet collected', 1, true))
  end)
end)

describe('pprof report of a sampled profile', function()
  it('scales its sample values and says so in a comment', function()
    assert(C.have('go'), 'these specs need go (Debian package golang-go)')
    local dir = C.temp_dir()
    local path, out = dir .. '/p.bin', dir .. '/p.pb.gz'
    C.write_file(path, B.sampled():bytes())
    local code, _, stderr = C.run(C.command(REPORT, '--format=pprof',
      '--output=' .. out, path))
    assert.are.equal(0, code)
    assert.is_truthy(stderr:find('memprof-report: note: sampled: one ' ..
      'sample per 100 bytes on average; figures are estimates\n', 1, true))
    local results = {}
    for _, index in ipairs({ 'alloc_space', 'alloc_objects', 'inuse_space',
      'inuse_objects' }) do
      -- Bytes in bytes (not kB); -unit would make counts bytes too.
      local unit = index:find('space') and '-unit=B' or '-unit=minimum'
      local pcode, stdout = consumers.pprof(dir, '-top', unit,
        '-sample_index=' .. index, out)
      assert.are.equal(0, pcode)
      results[#results + 1] = stdout:match('\n +(%d+B?) +100%%')
      assert.is_truthy(stdout:find('memprof profile ' .. path .. '\n' ..
        'sampled: one sample per 100 bytes on average; figures are ' ..
        'estimates\n', 1, true))
    end
    C.remove_tree(dir)
    assert.are.same({ '10201B', '202', '10100B', '101' }, results)
  end)
end)
