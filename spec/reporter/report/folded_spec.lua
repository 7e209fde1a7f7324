-- Specs for memprof.report.folded (collapsed stacks) and
-- memprof-report --format=folded, checked by a real consumer:
-- speedscope's importer, run with node (spec/support/speedscope_import.js;
-- speedscope from npm, in build/node_modules or MEMPROF_SPEEDSCOPE).
-- Runs under LuaJIT and plain Lua 5.1.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local folded = require('memprof.report.folded')
local layout = require('memprof.report.layout')
local B = require('helpers.stream_builder')
local C = require('helpers.command')

local REPORT = './bin/memprof-report'
local consumers = require('helpers.consumers')
local SPEEDSCOPE = consumers.SPEEDSCOPE

-- The folded text of a stream, analysed as memprof-report does.
local function render(builder, opts)
  local stream = reader.from_string(builder:bytes(), 'out.bin')
  local result = analyze.run(stream, folded.analysis({}, stream, reader))
  return layout.render(function(out)
    folded.write(result, out, opts)
  end)
end

local THREE_CALLERS = [[
@app.lua:10;@log.lua:5;string.format 300
@app.lua:20;@log.lua:5;string.format 400
@app.lua:30;@log.lua:5;string.format 300
@app.lua:5 32
@app.lua:50;@log.lua:7 64
@app.lua:60;io_lines 48
TRACE started at @app.lua:70 16
]]

describe('folded report', function()
  it('writes one line per stack, outermost frame first', function()
    assert.are.equal(THREE_CALLERS, render(B.three_callers(), {}))
    assert.are.equal(THREE_CALLERS,
      render(B.three_callers(), { metric = 'alloc-bytes' }))
  end)

  it('writes each metric', function()
    assert.are.equal([[
@app.lua:10;@log.lua:5;string.format 3
@app.lua:20;@log.lua:5;string.format 2
@app.lua:30;@log.lua:5;string.format 1
@app.lua:5 1
@app.lua:50;@log.lua:7 1
@app.lua:60;io_lines 1
TRACE started at @app.lua:70 1
]], render(B.three_callers(), { metric = 'alloc-count' }))
    -- Live at the end: 828B; the free of 24B allocated before the
    -- profile is left out.
    assert.are.equal([[
@app.lua:20;@log.lua:5;string.format 400
@app.lua:30;@log.lua:5;string.format 300
@app.lua:50;@log.lua:7 64
@app.lua:60;io_lines 48
TRACE started at @app.lua:70 16
]], render(B.three_callers(), { metric = 'live-bytes' }))
    -- At the peak (570B): 400B + 200B, less 30B allocated before.
    assert.are.equal([[
@p.lua:2 200
@p.lua:3 400
]], render(B.peak_payload(), { metric = 'peak-bytes' }))
  end)

  it('names internal events by what the VM was doing', function()
    local s = B.new():lfunc(0x100, '@p.lua', 1):events({ version = B.EXTENDED })
    s:alloc(B.internal(2), 0x10, 400):alloc(B.internal(1), 0x20, 64)
    s:realloc(B.internal(4), 0x30, 16, 0x40, 32):alloc(B.internal(), 0x50, 8)
    s:alloc(B.internal(3), 0x60, 24):alloc(B.lua(0x100, 2), 0x70, 100)
    s:epilogue()
    assert.are.equal([[
@p.lua:2 100
INTERNAL 8
INTERNAL (JIT compiler) 400
INTERNAL (garbage collector) 64
INTERNAL (interpreter) 32
INTERNAL (trace exit) 24
]], render(s, {}))
  end)

  it('names frames by function, merging their stacks', function()
    assert.are.equal([[
TRACE started at @app.lua:70 16
main chunk of @app.lua 32
main chunk of @app.lua;function at @log.lua:3 64
main chunk of @app.lua;function at @log.lua:3;string.format 1000
main chunk of @app.lua;io_lines 48
]], render(B.three_callers(), { group = 'function' }))
  end)

  it('makes one frame per site without stacks', function()
    assert.are.equal([[
@test.lua:5 192
@test.lua:6 32
@test.lua:7 128
TRACE started at @test.lua:5 16
io_write 48
]], render(B.crafted(), {}))
  end)

  it('puts the traces of a loop under the callers of their function',
    function()
      assert.are.equal([[
@main.lua:10;@fill.lua:3 32
@main.lua:10;TRACE started at @fill.lua:3 192
@main.lua:20;@fill.lua:3 32
@main.lua:20;TRACE started at @fill.lua:3 64
]], render(B.compiled_loop()))
      assert.are.equal([[
@main.lua:10;@fill.lua:3 32
@main.lua:10;TRACE started at @fill.lua:3 128
@main.lua:20;@fill.lua:3 32
@main.lua:20;TRACE started at @fill.lua:3 64
]], render(B.compiled_loop(), { metric = 'live-bytes' }))
      assert.are.equal([[
main chunk of @main.lua;TRACE started at @fill.lua:3 4
main chunk of @main.lua;function at @fill.lua:1 2
]], render(B.compiled_loop(), { metric = 'alloc-count', group = 'function' }))
    end)

  -- C functions whose names start with each other, hold spaces, ';'
  -- (written ',', so that two names become one) and line breaks; a
  -- stack for each pair, and for each name alone, allocating 8 bytes.
  local TRICKY = { 'a', 'a b', 'a,b', 'a;b', 'ab', 'a\nb', 'a b', 'b', 'b;' }

  local function tricky_profile()
    local s = B.new()
    for i, name in ipairs(TRICKY) do
      s:cfunc(0x100 * i, name)
    end
    s:events({ version = B.EXTENDED })
    local id = 0
    for i = 1, #TRICKY do
      for j = 0, #TRICKY do
        id = id + 1
        local frames = { B.c(0x100 * i) }
        if j > 0 then
          frames[2] = B.c(0x100 * j)
        end
        s:stack(id, frames)
        s:alloc(B.c(0x100 * i, id), 0x10 * id, 8)
      end
    end
    return s:epilogue()
  end

  it('sorts and merges lines as their texts would be', function()
    local stream = reader.from_string(tricky_profile():bytes(), 'out.bin')
    local result = analyze.run(stream, folded.analysis({}, stream, reader))
    -- The lines as text, made independently: outer;inner, cleaned.
    local value_of, texts = {}, {}
    local function clean(name)
      return (name:gsub(';', ','):gsub('\n', ' '))
    end
    for i = 1, #TRICKY do
      for j = 0, #TRICKY do
        local text = clean(TRICKY[i])
        if j > 0 then
          text = clean(TRICKY[j]) .. ';' .. text
        end
        if not value_of[text] then
          texts[#texts + 1] = text
          value_of[text] = 0
        end
        value_of[text] = value_of[text] + 8
      end
    end
    table.sort(texts)
    local lines = folded.lines(result, {})
    assert.are.equal(#texts, #lines)
    -- Six names once cleaned ('a b' three times, 'a,b' twice): 90
    -- stacks in 6 + 6 * 6 lines.
    assert.are.equal(42, #lines)
    for i, line in ipairs(lines) do
      assert.are.same({ texts[i], value_of[texts[i]] },
        { line.path, line.value })
    end
  end)

  it('keeps every line parseable', function()
    local s = B.new():lfunc(0x100, '@a;b.lua', 1):cfunc(0x900, 'odd;name')
      :events({ version = B.EXTENDED })
    s:stack(1, { B.c(0x900), B.lua(0x100, 2) })
    s:alloc(B.lua(0x100, 2, 1), 0x10, 2 ^ 40)
    s:epilogue()
    assert.are.equal('@a,b.lua:2;odd,name 1099511627776\n', render(s, {}))
  end)
end)

describe('memprof-report --format=folded', function()
  local dir

  before_each(function()
    dir = C.temp_dir()
  end)

  after_each(function()
    C.remove_tree(dir)
  end)

  it('writes to stdout, or one file per metric with --output', function()
    local path = dir .. '/p.bin'
    C.write_file(path, B.three_callers():bytes())
    local code, stdout, stderr = C.run(C.command(REPORT, '--format=folded',
      path))
    assert.are.equal(0, code)
    assert.are.equal('', stderr)
    assert.are.equal(THREE_CALLERS, stdout)
    code, stdout, stderr = C.run(C.command(REPORT, '--format', 'folded',
      '--output=' .. dir .. '/out', path))
    assert.are.equal(0, code)
    assert.are.equal('', stdout)
    local expected = {}
    for i, metric in ipairs(folded.METRICS) do
      expected[i] = 'memprof-report: wrote ' .. dir .. '/out.' .. metric ..
        '.folded\n'
    end
    assert.are.equal(table.concat(expected), stderr)
    assert.are.equal(THREE_CALLERS, C.read_file(dir .. '/out.alloc-bytes.folded'))
    assert.are.equal(render(B.three_callers(), { metric = 'peak-bytes' }),
      C.read_file(dir .. '/out.peak-bytes.folded'))
    -- --metric with --output: that metric's file only.
    code, stdout, stderr = C.run(C.command(REPORT, '--format=folded',
      '--metric=live-bytes', '--output=' .. dir .. '/one', path))
    assert.are.equal(0, code)
    assert.are.equal('memprof-report: wrote ' .. dir ..
      '/one.live-bytes.folded\n', stderr)
    assert.is_nil(C.read_file(dir .. '/one.alloc-bytes.folded'))
  end)

  it('says on stderr when the profile has no stacks', function()
    local path = dir .. '/v3.bin'
    C.write_file(path, B.crafted():bytes())
    local code, stdout, stderr = C.run(C.command(REPORT, '--format=folded',
      '--metric=alloc-count', path))
    assert.are.equal(0, code)
    assert.are.equal(render(B.crafted(), { metric = 'alloc-count' }), stdout)
    assert.are.equal('memprof-report: note: the profile has no call ' ..
      'stacks: each stack is one frame, the place of the events (record ' ..
      'with memprof.start(path, {stack_depth = N}) for stacks)\n', stderr)
  end)

  it('refuses options that do not apply', function()
    local path = dir .. '/p.bin'
    C.write_file(path, B.three_callers():bytes())
    local cases = {
      { { '--format=folded', '--group=stack' }, 'memprof-report: ' ..
        '--format=folded takes --group=line or --group=function (frames ' ..
        'named by line or by function) (see --help)\n' },
      { { '--format=folded', '--top=3' }, 'memprof-report: --top does not ' ..
        'apply to --format=folded (see --help)\n' },
      { { '--metric=peak-bytes' }, 'memprof-report: --metric does not ' ..
        'apply to --format=text (see --help)\n' },
      { { '--format=folded', '--metric=bytes' }, "memprof-report: option " ..
        "'--metric': expected alloc-bytes, alloc-count, live-bytes, " ..
        'peak-bytes, found bytes (see --help)\n' },
    }
    for _, case in ipairs(cases) do
      local args = case[1]
      args[#args + 1] = path
      local code, stdout, stderr = C.run(C.command(REPORT, unpack(args)))
      assert.are.equal(1, code)
      assert.are.equal('', stdout)
      assert.are.equal(case[2], stderr)
    end
  end)
end)

describe('folded report read by speedscope', function()
  setup(function()
    assert(C.have('node'), 'these specs need node (Debian package nodejs)')
    assert(C.read_file(SPEEDSCOPE .. '/package.json'), 'these specs need ' ..
      'speedscope: npm install --prefix build speedscope@1.25.0 (or ' ..
      'MEMPROF_SPEEDSCOPE=/path/to/node_modules/speedscope)')
  end)

  local function import(text)
    local path = os.tmpname()
    C.write_file(path, text)
    local imported = consumers.speedscope(path)
    os.remove(path)
    return imported
  end

  it('imports the stacks and their weights', function()
    local imported = import(THREE_CALLERS)
    assert.are.equal('Importing as collapsed stack format', imported.importer)
    assert.are.equal(1160, imported.total)
    assert.are.same({
      ['@app.lua:10;@log.lua:5;string.format'] = 300,
      ['@app.lua:20;@log.lua:5;string.format'] = 400,
      ['@app.lua:30;@log.lua:5;string.format'] = 300,
      ['@app.lua:5'] = 32,
      ['@app.lua:50;@log.lua:7'] = 64,
      ['@app.lua:60;io_lines'] = 48,
      ['TRACE started at @app.lua:70'] = 16,
    }, imported.stacks)
    assert.are.same({
      ['@app.lua:10'] = 300, ['@app.lua:20'] = 400, ['@app.lua:30'] = 300,
      ['@app.lua:5'] = 32, ['@app.lua:50'] = 64, ['@app.lua:60'] = 48,
      ['@log.lua:5'] = 1000, ['@log.lua:7'] = 64, ['string.format'] = 1000,
      ['io_lines'] = 48, ['TRACE started at @app.lua:70'] = 16,
    }, imported.frames)
  end)

  it('imports frames named by function, and odd names', function()
    local imported = import(render(B.three_callers(), { group = 'function',
      metric = 'live-bytes' }))
    assert.are.equal(828, imported.total)
    assert.are.same({
      ['main chunk of @app.lua'] = 812,
      ['function at @log.lua:3'] = 764,
      ['string.format'] = 700,
      ['io_lines'] = 48,
      ['TRACE started at @app.lua:70'] = 16,
    }, imported.frames)
    local s = B.new():lfunc(0x100, '@a;b c.lua', 1):events()
    s:alloc(B.lua(0x100, 2), 0x10, 5)
    s:epilogue()
    imported = import(render(s, {}))
    assert.are.same({ ['@a,b c.lua:2'] = 5 }, imported.stacks)
  end)
end)

describe('folded report of a sampled profile', function()
  it('writes the estimated bytes', function()
    assert.are.equal('@a.lua:3 10101\n@a.lua:4 100\n', render(B.sampled(), {}))
  end)
end)
