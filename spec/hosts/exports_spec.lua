-- Every export of a real profile (a bench workload, with call stacks and
-- time marks, JIT on) is read by the program people open it with: jq-like
-- decoding for json, speedscope's importer for folded stacks, go tool
-- pprof, the trace event rules for chrome, and headless Chromium for html.
local cjson = require('cjson')
local h = require('helpers.profile')
local C = require('helpers.command')
local consumers = require('helpers.consumers')
local memprof = require('memprof')

local REPORT = './bin/memprof-report'

describe('exports of a bench workload', function()
  local dir, path, net, allocated

  setup(function()
    assert(C.have('go'), 'these specs need go (Debian package golang-go)')
    assert(consumers.have_speedscope(), 'these specs need node and ' ..
      'speedscope (see .ci/install-deps --tests)')
    assert(consumers.have_chromium(), 'these specs need chromium')
    dir = C.temp_dir()
    path = dir .. '/mixed.bin'
    local work = dofile('bench/workloads/mixed.lua')
    assert(memprof.start(path, { stack_depth = 16, timestamps = true }))
    work(0.1)
    assert(memprof.stop())
    local events = h.read(path)
    net, allocated = h.net(events), 0
    for _, ev in ipairs(events) do allocated = allocated + (ev.nsize or 0) end
  end)

  teardown(function() C.remove_tree(dir) end)

  -- memprof-report's stdout for a format; `note` is what it may say on
  -- stderr (nothing, unless given).
  local function export(format, note, ...)
    local code, stdout, stderr = C.run(C.command(REPORT, '--format=' ..
      format, ...))
    assert.are.equal(note or '', stderr)
    assert.are.equal(0, code)
    return stdout
  end

  it('json: the totals are the stream\'s', function()
    local doc = cjson.decode(export('json', nil, path))
    assert.are.equal(net, doc.totals.net_bytes)
    assert.are.equal(allocated, doc.totals.allocated_bytes)
  end)

  it('folded: speedscope imports every stack with its bytes', function()
    local file = dir .. '/mixed.folded'
    C.write_file(file, export('folded', nil, path))
    local sum = 0
    for value in C.read_file(file):gmatch(' (%d+)\n') do
      sum = sum + tonumber(value)
    end
    local imported = consumers.speedscope(file)
    assert.are.equal('Importing as collapsed stack format', imported.importer)
    assert.are.equal(sum, imported.total)
    assert.are.equal(allocated, sum)
  end)

  it('pprof: go tool pprof reads it and sums the same bytes', function()
    local file = dir .. '/mixed.pb.gz'
    export('pprof', 'memprof-report: wrote ' .. file .. '\n',
      '--output=' .. file, path)
    local code, stdout, stderr = consumers.pprof(dir, '-top', '-unit=B',
      '-sample_index=alloc_space', file)
    assert.are.equal('', stderr)
    assert.are.equal(0, code)
    assert.matches('Type: alloc_space', stdout, 1, true)
    assert.matches(string.format('of %dB total', allocated), stdout, 1, true)
  end)

  it('chrome: a heap counter track in order, and the peak', function()
    local trace = cjson.decode(export('chrome', nil, path))
    local last, counters, instants = -1, 0, 0
    for _, ev in ipairs(trace.traceEvents) do
      assert.is_string(ev.ph)
      assert.is_string(ev.name)
      if ev.ph == 'C' then
        assert.is_number(ev.ts)
        assert.is_true(ev.ts >= last)
        last = ev.ts
        counters = counters + 1
      elseif ev.ph == 'i' or ev.ph == 'I' then
        instants = instants + 1
      end
    end
    assert.is_true(counters > 10, counters .. ' counter points')
    assert.are.equal(1, instants)
  end)

  it('html: Chromium runs the page without an error', function()
    local _, problems = consumers.browser_check(export('html', nil, path),
      { zoom = '@bench/workloads/mixed.lua:19', search = 'string.format' })
    assert.are.same({}, problems)
  end)
end)
