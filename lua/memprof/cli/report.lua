-- memprof.cli.report: the memprof-report command.
--
--   cli.main(args, out, err) -> exit code
--     args  the command-line arguments (like the global arg table)
--     out   where the report goes (default io.stdout)
--     err   where errors and warnings go (default io.stderr)
--
-- Options are described by the OPTIONS table of
-- memprof.cli.report_options (memprof.cli.options parses them); more
-- options are added by adding entries:
--   { name = 'color', value = 'C', key = 'color', help = '...',
--     check = function(v) return v, '' end }
--
-- --format=NAME chooses the output: a format is the module
-- memprof.report.NAME, with write(result, out, opts); FORMATS
-- (memprof.cli.report_options) lists them and the options each takes.  A format module may also have
--   analysis(opts, stream, reader) -> the options of analyze.run
--     (without it: every view the stream can have, with the passes of
--     passes() if the module has it)
--   check() -> nil, or why the format cannot be written here
--   notes(result) -> lines for stderr
--   outputs(opts) -> { { path =, opts = }, ... } for --output
--   BINARY = true: never written to a terminal
--   CUMULATIVE = false: the format shows no cumulative rows (the
--     analysis leaves them out)
-- The text format is the default report (Tarantool's layout), or with
-- --leaks, --peak, --temporary or --timeline those views.
--
-- --diff BEFORE AFTER compares two profiles (memprof.analysis.diff).
--
-- The text report and --diff show the first DEFAULT_TOP rows of each
-- section unless --top=N or --all says otherwise; the formats count the
-- rows they leave out in opts.left_out.rows, and a last line says how
-- many and how to see them.
--
-- While a profile larger than a read chunk is read, and stderr is a
-- terminal, a line on stderr says how far the reading has got
-- (memprof.cli.progress).

local reader = require('memprof.read.stream')
local analyze = require('memprof.analysis.analyze')
local groups = require('memprof.analysis.groups')
local progress = require('memprof.cli.progress')
local diff = require('memprof.analysis.diff')
local sampling = require('memprof.analysis.sampling')
local diff_report = require('memprof.report.diff')
local version = require('memprof.version')
local option_parser = require('memprof.cli.options')
local heap_report = require('memprof.cli.heap_report')
local command_line = require('memprof.cli.report_options')

local M = {}

local PROGRAM = 'memprof-report'
M.PROGRAM = PROGRAM

-- Rows per section of the text report and --diff without --top or --all.
M.DEFAULT_TOP = command_line.DEFAULT_TOP

-- --output's name for the standard output.
M.STDOUT_NAME = '-'

local format = string.format

M.FORMATS, M.OPTIONS = command_line.FORMATS, command_line.OPTIONS
local DIFF_TAKES = command_line.DIFF_TAKES

-- The view options, in the order the report prints them.
M.VIEWS = analyze.VIEWS

-- Parse args with memprof-report's options (how.options: others; see
-- memprof.cli.options).
function M.parse(args, how)
  return option_parser.parse(how and how.options or M.OPTIONS, args, how)
end

-- What to analyse ------------------------------------------------------------

-- The set of views asked for, or nil for the default report.
local function views_asked(opts)
  local asked
  for _, name in ipairs(M.VIEWS) do
    if opts[name] ~= nil then
      asked = asked or {}
      asked[name] = true
    end
  end
  return asked
end

-- What the options need that the stream lacks, as a message, or nil.
-- Decided once the stream has been read (has_stacks and has_time are
-- final then), or at once for a version 3 stream, which has neither.
local function missing_data(stream, opts)
  local group = opts.group or 'line'
  if groups.needs_stacks(group) and not stream.has_stacks then
    return format('--group=%s needs call stacks: record with ' ..
      'memprof.start(path, {stack_depth = N})', group)
  end
  if opts.timeline and not stream.has_time then
    return '--timeline needs time marks: record with ' ..
      'memprof.start(path, {timestamps = true})'
  end
  return nil
end

-- The options of analyze.run for a format.
local function analysis_options(format_name, module, opts, stream)
  if module.analysis then
    return module.analysis(opts, stream, reader)
  end
  if format_name == 'text' then
    return { group = opts.group, views = views_asked(opts),
      temporary_limit = opts.temporary }
  end
  -- Every view the stream can have, and the format's own passes.
  return { group = opts.group, temporary_limit = opts.temporary,
    views = { leaks = true, peak = true, temporary = true,
      timeline = stream.version == reader.EXTENDED_VERSION },
    passes = module.passes and module.passes(),
    cumulative = module.CUMULATIVE ~= false }
end

-- The options passed to the format's write(): for the text report and
-- --diff, the default --top and a count of the rows it leaves out.
local function write_options(opts, format_name)
  local copy = {}
  for k, v in pairs(opts) do
    copy[k] = v
  end
  copy.views = views_asked(opts)
  if (format_name == 'text' or opts.diff) and not opts.top and
      not opts.all then
    copy.top = M.DEFAULT_TOP
    copy.left_out = { rows = 0 }
  end
  return copy
end

-- After a report cut at the default --top: how many rows it left out,
-- and how to see them.
local function write_cut_note(out, options)
  local left_out = options.left_out
  if left_out and left_out.rows > 0 then
    out:write(format('(%d %s left out: each list shows its first %d; ' ..
      '--top=N shows N, --all every row)\n', left_out.rows,
      left_out.rows == 1 and 'row' or 'rows', options.top))
  end
end

-- Reading ------------------------------------------------------------------

-- Reads and analyses a profile.  analysis(stream) gives the options of
-- analyze.run.  Returns the result, or nil and a message when the stream
-- cannot give what the options ask (a format that groups by stack by
-- itself also takes a stream without stacks).
local function read_profile(path, opts, err, analysis)
  local meter = progress.for_stderr(err, path)
  local ok, stream = pcall(reader.open, path, { on_read = meter.update,
    split_traces = opts.split_traces })
  if not ok then
    meter.done()
    error(stream, 0)
  end
  local options = analysis(stream)
  options.focus, options.ignore = opts.focus, opts.ignore
  -- No report lists the live blocks once the passes have finished.
  options.live_blocks = false
  if stream.version ~= reader.EXTENDED_VERSION then
    local missing = missing_data(stream, opts)
    if missing then
      stream:close()
      meter.done()
      return nil, missing
    end
  end
  local done, result = pcall(analyze.run, stream, options)
  meter.done()
  if not done then
    error(result, 0)
  end
  if stream.warning then
    err:write(PROGRAM, ': warning: ', stream.warning, '\n')
  end
  local missing = missing_data(stream, opts)
  if missing then
    return nil, missing
  end
  return result
end

-- Writing ------------------------------------------------------------------

local function format_entry(name)
  return option_parser.named(M.FORMATS, name)
end

-- An output that keeps the first error of its writes.  A write larger
-- than the stream's buffer that fails (a full disk, a closed pipe)
-- leaves nothing in the buffer, so that the flush at the end succeeds:
-- json and html, written in large pieces, were said to be written to a
-- full disk.  (A write that returns nothing, as an output of the specs
-- or of a program that embeds the reporter may, is not an error.)
local function checked_output(handle)
  local output = { handle = handle, failure = nil }
  function output.write(self, ...)
    if not self.failure then
      local ok, message = handle:write(...)
      if ok == nil and message ~= nil then
        self.failure = message
      end
    end
    return self
  end
  return output
end

-- Whether every byte written to an output (checked_output) went: its
-- buffer is flushed (and a file closed), and an error of a write, the
-- flush or the close is returned as nil and a message that names the
-- output. (A report that could not be written must not be said to be
-- written.)
local function output_done(output, name, close)
  local handle = output.handle
  local ok, message = true, nil
  if handle.flush then
    ok, message = handle:flush()
  end
  if close then
    local closed, close_message = handle:close()
    if ok then ok, message = closed, close_message end
  end
  if output.failure then
    ok, message = nil, output.failure
  end
  if not ok then
    return nil, name .. ': ' .. tostring(message)
  end
  return true
end

-- Whether the report goes to the standard output: without --output, or
-- with --output=- (the usual name of the standard output, which would
-- otherwise make a file named '-').
local function to_stdout(opts)
  return not opts.output or opts.output == M.STDOUT_NAME
end

-- Calls write(out, opts) for each output: stdout, or the files of
-- --output.
local function write_outputs(module, opts, out, err, write)
  if to_stdout(opts) then
    local output = checked_output(out)
    write(output, opts)
    return output_done(output, 'the standard output', false)
  end
  local outputs = module.outputs and module.outputs(opts) or
    { { path = opts.output, opts = opts } }
  for _, output in ipairs(outputs) do
    local file, message = io.open(output.path, 'wb')
    if not file then
      return nil, message
    end
    local checked = checked_output(file)
    write(checked, output.opts)
    local done, failed = output_done(checked, output.path, true)
    if not done then
      return nil, failed
    end
    err:write(PROGRAM, ': wrote ', output.path, '\n')
  end
  return true
end

-- The collector's pause and step multiplier while a report is written.
-- The analysis is live data and writing makes short-lived strings and
-- tables per entry: at Lua's defaults (200, 200) the heap would double
-- over the analysis before a cycle starts, and a cycle would let half
-- the analysis' size in garbage pile up before it ends.  A new pause
-- takes effect only when a cycle ends, hence a full collection first,
-- which also frees the analysis' garbage.
local WRITING_GC_PAUSE = 100
local WRITING_GC_STEPMUL = 1000

-- Calls write() with the collector's pause and step multiplier at
-- WRITING_GC_PAUSE and WRITING_GC_STEPMUL, after a full collection,
-- then puts them back; returns what write() returns.
local function while_writing(write)
  local pause = collectgarbage('setpause', WRITING_GC_PAUSE)
  local stepmul = collectgarbage('setstepmul', WRITING_GC_STEPMUL)
  collectgarbage('collect')
  local ok, done, message = pcall(write)
  collectgarbage('setpause', pause)
  collectgarbage('setstepmul', stepmul)
  if not ok then
    error(done, 0)
  end
  return done, message
end

-- Writes the report of one file; returns true, or nil and a message.
local function report(path, opts, out, err)
  local name = opts.format or 'text'
  local module = require('memprof.report.' .. name)
  local problem = module.check and module.check()
  if problem then
    return nil, problem
  end
  if module.BINARY and to_stdout(opts) and out == io.stdout and
      progress.is_terminal(1) then
    return nil, format('--format=%s writes binary data: redirect the ' ..
      'output or use --output=FILE', name)
  end
  local result, missing = read_profile(path, opts, err, function(stream)
    return analysis_options(name, module, opts, stream)
  end)
  if not result then
    return nil, missing
  end
  -- With --heap: who holds what the places allocated (docs/holders.md).
  result.holders = opts.heap and heap_report.who_holds(opts.heap, path)
  if result.holders and result.holders.warning then
    err:write(PROGRAM, ': warning: ', result.holders.warning, '\n')
  end
  -- The passes' own tables (maps of records by group, indexes) are
  -- garbage once they have finished, but LuaJIT's compiled traces hold
  -- the tables they were specialised on: throw the traces away, so that
  -- the collector frees those while the report is written.
  local compiler = rawget(_G, 'jit')
  if compiler and compiler.flush then
    compiler.flush()
  end
  for _, note in ipairs(module.notes and module.notes(result) or {}) do
    err:write(PROGRAM, ': note: ', note, '\n')
  end
  -- The text report says it on its first line; the other formats carry
  -- the rate in their own way (docs/formats.md), and the screen says it.
  if result.stream.sample_bytes and name ~= 'text' then
    err:write(PROGRAM, ': note: ', sampling.note(result.stream.sample_bytes),
      '\n')
  end
  return while_writing(function()
    return write_outputs(module, write_options(opts, name), out, err,
      function(handle, options)
        module.write(result, handle, options)
        write_cut_note(handle, options)
      end)
  end)
end

-- Writes the changes from one file to another.  Of each profile only
-- the figures of its rows are kept (diff.figures), so that one
-- analysis is dropped before the next file is read.
local function report_diff(paths, opts, out, err)
  local figures, notes, mode = {}, {}, nil
  for i, path in ipairs(paths) do
    local result, missing = read_profile(path, opts, err, function()
      return { group = opts.group }
    end)
    if not result then
      return nil, missing
    end
    figures[i] = diff.figures(result)
    mode = result.grouper.mode
    if result.stream.sample_bytes then
      notes[#notes + 1] = paths[i] .. ': ' ..
        sampling.note(result.stream.sample_bytes)
    end
    -- The analysis is garbage now: collect it before the next file, or
    -- it would wait for a cycle that the next analysis starts.  LuaJIT's
    -- compiled traces hold the tables they were specialised on (the
    -- stream's, the passes'), which keeps the whole analysis alive: they
    -- are thrown away first.
    result = nil
    local compiler = rawget(_G, 'jit')
    if compiler and compiler.flush then
      compiler.flush()
    end
    collectgarbage('collect')
  end
  local changes = diff.compare(figures[1], figures[2], { sort = opts.sort })
  return write_outputs({}, write_options(opts), out, err,
    function(handle, options)
      diff_report.write(changes, handle, { before = paths[1],
        after = paths[2], group = mode, sort = opts.sort,
        focus = opts.focus, ignore = opts.ignore,
        sampling = notes,
        top = options.top, left_out = options.left_out,
        human_readable = opts.human_readable })
      write_cut_note(handle, options)
    end)
end

-- Checking the command line ------------------------------------------------

local function spelling_of(key)
  for _, option in ipairs(M.OPTIONS) do
    if option.key == key then
      return '--' .. option.name
    end
  end
  return key
end

-- The first option given that `takes` does not have, or nil.
local function stray_option(opts, takes)
  for _, option in ipairs(M.OPTIONS) do
    local key = option.key
    if opts[key] ~= nil and key ~= 'format' and not takes[key] then
      return key
    end
  end
  return nil
end

-- A problem with the combination of options, or nil.
local function conflict(opts)
  if opts.top and opts.all then
    return '--top=N and --all do not go together (--all shows every row)'
  end
  if opts.diff then
    if opts.format and opts.format ~= 'text' then
      return '--diff writes text; leave out --format'
    end
    local stray = stray_option(opts, DIFF_TAKES)
    if stray then
      return format('%s does not apply to --diff', spelling_of(stray))
    end
    return nil
  end
  if opts.sort == 'live' then
    return '--sort=live is for --diff (rows by growth in live bytes); ' ..
      'a report sorts by bytes or count'
  end
  local name = opts.format or 'text'
  if format_entry(name).heap_only then
    return format('--format=%s is for heap snapshots (memprof.snapshot(' ..
      "path, {format = 'heap'})), not profiles", name)
  end
  local stray = stray_option(opts, format_entry(name).takes)
  if stray then
    return format('%s does not apply to --format=%s', spelling_of(stray),
      name)
  end
  if opts.heap and name == 'text' and not opts.leaks then
    return '--heap=SNAPSHOT goes with --leaks (or --format=json or html)'
  end
  if opts.leak_only and views_asked(opts) then
    return '--leak-only is for the default report; leave it out with ' ..
      '--leaks, --peak, --temporary or --timeline'
  end
  if name == 'folded' and opts.group and opts.group ~= 'line' and
      opts.group ~= 'function' then
    return '--format=folded takes --group=line or --group=function ' ..
      '(frames named by line or by function)'
  end
  return nil
end

local function file_problem(opts, files)
  if opts.diff then
    if #files ~= 2 then
      return '--diff needs two profile files, BEFORE and AFTER'
    end
    return nil
  end
  if #files == 0 then
    return 'no profile file given'
  elseif #files > 1 then
    return 'give exactly one profile file'
  end
  return nil
end

M.conflict = conflict

-- LuaJIT's limits for the reporter's process.  The loop over the events
-- has many branches (kinds of events, sources, lengths of numbers), each
-- a side trace: on profiles of real programs the default limits are
-- soon reached, and LuaJIT then throws all its traces away and compiles
-- them again, over and over.  Machine code is taken as it is needed.
M.JIT_LIMITS = { 'maxmcode=65536', 'maxtrace=20000', 'maxside=1000' }

-- Raises LuaJIT's limits (M.JIT_LIMITS); returns the list set, or nil
-- when the JIT compiler is off.
function M.raise_jit_limits()
  local compiler = rawget(_G, 'jit')
  if not (compiler and compiler.opt and compiler.opt.start) then
    return nil
  end
  compiler.opt.start((table.unpack or unpack)(M.JIT_LIMITS))
  return M.JIT_LIMITS
end

-- Writes the report of `target` (a file, or with opts.diff the list of
-- two files) for checked options; returns the exit code.
function M.report_main(target, opts, out, err)
  M.raise_jit_limits()
  local run = opts.diff and report_diff or report
  local ok, done, missing = pcall(run, target, opts, out, err)
  if not ok then
    err:write(PROGRAM, ': ', tostring(done), '\n')
    return 1
  end
  if not done then
    err:write(PROGRAM, ': ', missing, '\n')
    return 1
  end
  return 0
end

function M.main(args, out, err)
  out = out or io.stdout
  err = err or io.stderr
  local opts, files = M.parse(args or {})
  local status = option_parser.stop_status(opts, files, out, err,
    { prefix = PROGRAM .. ': ', see = '--help', help = command_line.usage })
  if status then
    return status
  end
  if opts.version then
    out:write(version.line(PROGRAM), '\n')
    return 0
  end
  -- A heap snapshot (its magic) has a report of its own; so has
  -- --profile=P, which only a heap snapshot takes: its reader then says
  -- what is wrong with a file that is not one.
  if heap_report.any(files) or opts.heap_profile then
    return heap_report.main(opts, files, out, err, PROGRAM)
  end
  local problem = file_problem(opts, files) or conflict(opts)
  if problem then
    err:write(PROGRAM, ': ', problem, ' (see --help)\n')
    return 1
  end
  return M.report_main(opts.diff and files or files[1], opts, out, err)
end

return M
