-- One model for every report of a heap snapshot: the snapshot and its
-- profile (built byte by byte) are analysed once into
-- report/model/holders.lua's model, and text, json and html render that
-- one model; two snapshots' growth likewise (report/model/heap_growth.lua).
-- Each is the same, byte for byte, as what memprof-report writes from an
-- analysis of its own, and the file is analysed once for all three.
local dom = require('memprof.analysis.dominators')
local graphs = require('helpers.heap_graphs')
local holders = require('memprof.report.model.holders')
local growth = require('memprof.report.model.heap_growth')
local run = require('helpers.report_run')

-- Renders `model` with report/NAME_FORMAT.lua for each format, as
-- memprof-report's defaults do (text: its first 30 rows).
local function rendered(name, model)
  local out = {}
  for _, format in ipairs({ 'text', 'json', 'html' }) do
    local sink = run.sink()
    require('memprof.report.' .. name .. '_' .. format).write(model, sink,
      { top = 30, left_out = { rows = 0 } })
    out[format] = sink.text()
  end
  return out
end

-- dom.analyse_file, counted while fn runs.
local function analyses_during(fn)
  local analyse, count = dom.analyse_file, 0
  dom.analyse_file = function(...)
    count = count + 1
    return analyse(...)
  end
  local ok, err = pcall(fn)
  dom.analyse_file = analyse
  assert(ok, err)
  return count
end

describe('one model for every report of a heap snapshot', function()
  after_each(run.remove_temp)

  it('renders text, json and html of a joined snapshot from one model',
    function()
      local profile = run.temp_path('.bin')
      local path = graphs.known({ traces = 3,
        profile = graphs.known_profile(profile) }):write(run.temp_path())
      local model
      assert.equal(1, analyses_during(function()
        model = holders.of_file(path, { profile = profile })
      end))
      local out = rendered('holders', model)
      for format, text in pairs(out) do
        local code, want, err = run.report('--format=' .. format,
          '--profile=' .. profile, path)
        assert.same({ 0, '' }, { code, err })
        assert.equal(want, text, format)
      end
      assert.truthy(out.text:find('\n@catalog.lua:46: 20 objects, ' ..
        '2,000B (from @handler.lua:7)\n', 1, true))
    end)

  it('renders the growth between two snapshots from one model', function()
    local old = graphs.known():write(run.temp_path())
    local new = graphs.known({ added = 5 }):write(run.temp_path())
    local model
    assert.equal(2, analyses_during(function()
      model = growth.of_files(old, new)
    end))
    for format, text in pairs(rendered('heap_growth', model)) do
      local code, want, err = run.report('--diff', '--format=' .. format,
        old, new)
      assert.same({ 0, '' }, { code, err })
      assert.equal(want, text, format)
    end
  end)
end)
