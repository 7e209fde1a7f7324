-- Specs for memprof.cli.live: the command's options, and watch() in its
-- plain text mode on profiles that end (a whole one, a bad one).
--   LUA_PATH='./lua/?.lua;./spec/?.lua;;' luajit /usr/bin/busted spec/reporter/cli/live_spec.lua

local live = require('memprof.cli.live')
local B = require('helpers.stream_builder')
local C = require('helpers.command')

-- A file to write to, and what was written.
local function sink()
  local path = os.tmpname()
  local file = assert(io.open(path, 'w+'))
  return file, function()
    file:flush()
    file:seek('set', 0)
    local text = file:read('*a')
    file:close()
    os.remove(path)
    return text
  end
end

describe('memprof live (command)', function()
  local path
  before_each(function()
    path = os.tmpname()
  end)
  after_each(function()
    os.remove(path)
  end)

  it('prints the last frame of a profile that ended, and says why it quit',
      function()
    local s = B.new():events({ version = B.EXTENDED })
    s:note(B.HEAP_AT_START, 2048)
    s:define_lfunc(0x100, '@app.lua', 0)
    s:alloc(B.lua(0x100, 3), 0x10000, 1000)
    s:alloc(B.lua(0x100, 4), 0x20000, 24)
    C.write_file(path, s:epilogue():bytes())
    local out, output = sink()
    local err, errors = sink()
    local quits = {}
    local code = live.watch(path, { out = out, err = err, width = 60,
      top = 5, interval = 0.1 }, function(reason, message)
        quits[#quits + 1] = { reason, message }
      end)
    assert.are.equal(0, code)
    assert.are.same({ { 'ended' } }, quits)
    local text = output()
    local last = text:match('.*\n\n(memprof live .*)$') or text
    assert.are.equal('', errors())
    assert.are.equal(table.concat({
      'memprof live ' .. path .. (' '):rep(60 - 13 - #path - 17) ..
        'the profile ended',
      'heap 3KiB',
      'lines by live bytes; 2 events (' .. #s:bytes() .. 'B) read',
      '',
      '      LIVE     BLOCKS   GROWTH/s    ALLOC/s  LINE',
      '    1,000B          1                        @app.lua:3',
      '       24B          1                        @app.lua:4',
    }, '\n') .. '\n', last)
    -- Started again on the same profile: read again from its start, the
    -- same frame.
    out, output = sink()
    err, errors = sink()
    assert.are.equal(0, live.watch(path, { out = out, err = err, width = 60,
      top = 5, interval = 0.1 }))
    assert.are.equal(text, output())
    assert.are.equal('', errors())
  end)

  it('stops with the error of a bad file, naming its byte', function()
    local s = B.new():events()
    C.write_file(path, s:bytes() .. '\x03')
    local out, output = sink()
    local err, errors = sink()
    local quits = {}
    local code = live.watch(path, { out = out, err = err },
      function(reason, message)
        quits[#quits + 1] = { reason, message }
      end)
    assert.are.equal(1, code)
    local message = path .. ': byte 15: expected an event header with a ' ..
      'source (0x05-0x13 or 0x80), found 0x03'
    assert.are.same({ { 'error', message } }, quits)
    assert.are.equal('memprof live: ' .. message .. '\n', errors())
    output()
  end)

  it('takes its options, and refuses what is not one', function()
    local out, output = sink()
    local err, errors = sink()
    assert.are.equal(0, live.main({ '--help' }, out, err))
    assert.is_truthy(output():find('Usage: memprof live [OPTIONS] FILE\n', 1,
      true))
    out, output = sink()
    assert.are.equal(1, live.main({ '--view=peak', path }, out, err))
    assert.are.equal(1, live.main({}, out, err))
    assert.are.equal(table.concat({
      "memprof live: option '--view': expected live, allocated, found peak " ..
        '(see memprof live --help)',
      'memprof live: expected one profile file or PID, found none (see memprof ' ..
        'live --help)',
    }, '\n') .. '\n', errors())
    assert.are.equal('', output())
  end)
end)
