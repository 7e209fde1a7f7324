-- One model for every profile format: a stream (built byte by byte) is
-- analysed once, and text, json, html, folded, pprof, chrome and --diff
-- are rendered from that one result; each is the same, byte for byte,
-- as what memprof-report writes from the analysis of its own.  The rows
-- are keyed one way (memprof.analysis.rows: by group id) in every format.

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local rows = require('memprof.analysis.rows')
local diff = require('memprof.analysis.diff')
local timeline = require('memprof.analysis.timeline')
local cli = require('memprof.cli.report')
local text = require('memprof.report.text')
local json = require('memprof.report.json')
local html = require('memprof.report.html')
local folded = require('memprof.report.folded')
local pprof = require('memprof.report.pprof')
local chrome = require('memprof.report.chrome')
local diff_text = require('memprof.report.diff')
local B = require('helpers.stream_builder')

-- A profile with stacks and time marks: two functions of one name (a
-- chunk loaded twice: two sites, one row), a C function, reallocations
-- and frees of blocks of other rows and of blocks from before the
-- profile, live blocks at the end.  `extra` more blocks of 4096 bytes at
-- line 9 (the second profile of --diff).
local function profile(extra)
  local s = B.new():lfunc(0x100, '@app.lua', 0):lfunc(0x200, '@lib.lua', 3)
    :lfunc(0x300, '@lib.lua', 3):cfunc(0x900, 'string.rep')
    :events({ version = B.EXTENDED })
  s:stack(1, { B.lua(0x100, 9) })
  s:stack(2, { B.lua(0x200, 4), B.lua(0x100, 9) })
  s:stack(3, { B.c(0x900), B.lua(0x200, 4), B.lua(0x100, 12) })
  s:stack(4, { B.lua(0x300, 4), B.lua(0x100, 9) })
  s:time(1000)
  s:alloc(B.lua(0x100, 9, 1), 0x10, 64)
  s:alloc(B.lua(0x200, 4, 2), 0x20, 100)
  s:alloc(B.lua(0x300, 4, 4), 0x30, 300)
  s:time(2000)
  s:alloc(B.c(0x900, 3), 0x40, 1000)
  s:realloc(B.lua(0x200, 4, 2), 0x10, 64, 0x50, 128)
  s:realloc(B.lua(0x100, 9, 1), 0x777, 8, 0x60, 24)
  s:time(3000)
  s:free(B.internal(), 0x20, 100)
  s:free(B.internal(), 0x888, 16)
  s:free(B.lua(0x300, 4, 4), 0x40, 1000)
  for i = 1, extra do
    s:alloc(B.lua(0x100, 9, 1), 0x1000 + 16 * i, 4096)
  end
  s:time(4000)
  return s:epilogue():bytes()
end

-- The analysis every format needs at once: rows by stack, every view,
-- the HTML page's flame pass and the Chrome trace's clock of events.
local function the_model(bytes, name)
  return analyze.run(reader.from_string(bytes, name), { group = 'stack',
    views = { leaks = true, peak = true, temporary = true, timeline = true },
    passes = { html.passes()[1], { name = 'event_timeline',
      pass = timeline.new({ clock = 'events' }) } } })
end

local function sink()
  local out = { parts = {} }
  function out.write(self, ...)
    for _, part in ipairs({ ... }) do
      self.parts[#self.parts + 1] = tostring(part)
    end
    return self
  end
  function out.text(self)
    return table.concat(self.parts)
  end
  return out
end

local function read_file(path)
  local file = assert(io.open(path, 'rb'))
  local data = file:read('*a')
  file:close()
  return data
end

local function write_file(path, data)
  local file = assert(io.open(path, 'wb'))
  file:write(data)
  file:close()
end

-- What memprof-report writes to stdout with these arguments.
local function cli_output(args)
  local out, err = sink(), sink()
  assert.are.equal(0, cli.main(args, out, err), err:text())
  return out:text()
end

-- What a writer writes from the one model.
local function render(write, ...)
  local out = sink()
  write(out, ...)
  return out:text()
end

describe('one model for every profile format', function()
  local paths = {}
  local model, before

  setup(function()
    paths.a, paths.b = os.tmpname(), os.tmpname()
    paths.pprof = os.tmpname()
    write_file(paths.a, profile(0))
    write_file(paths.b, profile(3))
    model = the_model(read_file(paths.b), paths.b)
    before = the_model(read_file(paths.a), paths.a)
  end)

  teardown(function()
    for _, path in pairs(paths) do
      os.remove(path)
    end
  end)

  it('renders text, json and html from it as memprof-report does',
    function()
      local opts = { group = 'stack', all = true }
      assert.are.equal(cli_output({ '--group=stack', '--all', paths.b }),
        render(function(out) text.write(model, out, opts) end))
      assert.are.equal(cli_output({ '--group=stack', '--format=json',
        paths.b }), render(function(out)
          json.write(model, out, { group = 'stack' })
        end))
      assert.are.equal(cli_output({ '--group=stack', '--all',
        '--format=html', paths.b }),
        render(function(out) html.write(model, out, opts) end))
    end)

  it('renders folded (every metric), pprof and chrome from it', function()
    for _, metric in ipairs(folded.METRICS) do
      assert.are.equal(cli_output({ '--format=folded', '--metric=' .. metric,
        paths.b }), render(function(out)
          folded.write(model, out, { metric = metric })
        end), metric)
    end
    cli_output({ '--format=pprof', '--output=' .. paths.pprof, paths.b })
    assert.are.equal(read_file(paths.pprof),
      render(function(out) pprof.write(model, out) end))
    -- The trace's own analysis, by stack (memprof-report's has rows by
    -- line: --group does not apply to it).
    local own = analyze.run(reader.open(paths.b), chrome.analysis(
      { group = 'stack' }, reader.open(paths.b), reader))
    assert.are.equal(render(function(out) chrome.write(own, out) end),
      render(function(out) chrome.write(model, out) end))
  end)

  it('renders --diff from two of them', function()
    local changes = diff.compare(diff.figures(before), diff.figures(model))
    assert.are.equal(cli_output({ '--group=stack', '--all', '--diff',
      paths.a, paths.b }), render(function(out)
        diff_text.write(changes, out, { before = paths.a,
          after = paths.b, group = 'stack' })
      end))
  end)

  it('keys the rows one way in every format: by group id', function()
    local figures = rows.figures(model)
    local live = figures.columns.live_bytes
    -- The JSON document's heap rows carry the ids of the same groups,
    -- with the same live bytes.
    local document = json.document(model, {})
    local seen = 0
    for _, entry in ipairs(document.heap) do
      local group = model.grouper.list[entry.row]
      assert.are.equal(group.name, entry.name)
      if group.source ~= 'before' then
        assert.are.equal(live[entry.row], entry.live_bytes, entry.name)
        seen = seen + 1
      end
    end
    -- @app.lua:9, @lib.lua:4 <- @app.lua:9, string.rep <- ...: the
    -- collector's row frees only, which the heap charges to the rows of
    -- the blocks.
    assert.are.equal(3, seen)
    -- The two functions of @lib.lua:4 are one row, in the sections as in
    -- the figures: one stack group of their frames' names.
    local lib = 0
    for _, group in ipairs(figures.groups) do
      if group.frames and group.frames[1].name == '@lib.lua:4' then
        lib = lib + 1
      end
    end
    assert.are.equal(1, lib)
    -- --diff of the model against itself: every row unchanged.
    local same = diff.compare(model, model)
    assert.are.same({ 0, #figures.groups }, { #same.rows, same.unchanged })
  end)
end)
