-- memprof.cli.heap_report: memprof-report of heap snapshots
-- (docs/holders.md).  cli/report.lua hands a command line over when a
-- file it names begins with the snapshot's magic ("ljh"):
--
--   memprof-report [--format=text|json|html|heapsnapshot]
--                  [--profile=PROFILE] HEAP
--   memprof-report --diff [--format=text|json|html] OLD.heap NEW.heap
--
-- --profile names the profile that ran when the snapshot was taken (the
-- snapshot notes how many of its bytes were written then, not its path):
-- the report then says where each object was allocated.

local holders_model = require('memprof.report.model.holders')
local growth_model = require('memprof.report.model.heap_growth')

local M = {}

local format = string.format

M.MAGIC = 'ljh'

-- Rows per section of the text report without --top or --all: the
-- profile's text report's.
M.DEFAULT_TOP = require('memprof.cli.report_options').DEFAULT_TOP

-- Whether the file at path begins with a heap snapshot's magic.
function M.is_heap(path)
  local file = io.open(path, 'rb')
  if not file then return false end
  local magic = file:read(#M.MAGIC)
  file:close()
  return magic == M.MAGIC
end

-- Whether any of the files is a heap snapshot.
function M.any(files)
  for _, path in ipairs(files) do
    if M.is_heap(path) then return true end
  end
  return false
end

-- What each command takes: options by key, and formats.
local TAKES = {
  report = { keys = { format = true, top = true, all = true,
    human_readable = true, output = true, heap_profile = true },
    formats = { text = true, json = true, html = true,
      heapsnapshot = true } },
  diff = { keys = { format = true, top = true, all = true,
    human_readable = true, output = true, diff = true },
    formats = { text = true, json = true, html = true } },
}

-- The option of a key (heap_profile is --profile: memprof run has a
-- --profile of its own, and leaves this one out).
local function spelling(key)
  if key == 'heap_profile' then return '--profile' end
  return '--' .. key:gsub('_', '-')
end

-- A problem with the command line, or nil.
local function problem(opts, files)
  local takes = TAKES[opts.diff and 'diff' or 'report']
  local what = opts.diff and '--diff of heap snapshots' or 'a heap snapshot'
  local keys = {}
  for key in pairs(opts) do keys[#keys + 1] = key end
  table.sort(keys)
  for _, key in ipairs(keys) do
    if not takes.keys[key] then
      return format('%s does not apply to %s', spelling(key), what)
    end
  end
  if opts.format and not takes.formats[opts.format] then
    return format('--format=%s does not apply to %s', opts.format, what)
  end
  if opts.top and opts.all then
    return '--top=N and --all do not go together (--all shows every row)'
  end
  if opts.diff then
    if #files ~= 2 then
      return '--diff needs two heap snapshots, OLD and NEW'
    end
    for _, path in ipairs(files) do
      if not M.is_heap(path) then
        return format('%s is not a heap snapshot: --diff compares two ' ..
          'heap snapshots or two profiles', path)
      end
    end
  elseif #files ~= 1 then
    return 'give exactly one heap snapshot'
  end
  return nil
end

-- Writes with write(out) to the standard output or to --output's file;
-- returns true, or nil and a message.
local function write_to(opts, out, err, program, write)
  if not opts.output or opts.output == '-' then
    write(out)
    return true
  end
  local file, message = io.open(opts.output, 'wb')
  if not file then return nil, message end
  write(file)
  local ok, failed = file:close()
  if not ok then return nil, opts.output .. ': ' .. tostring(failed) end
  err:write(program, ': wrote ', opts.output, '\n')
  return true
end

local function text_options(opts)
  local top = not opts.all and (opts.top or M.DEFAULT_TOP) or nil
  return { top = top, human_readable = opts.human_readable,
    left_out = { rows = 0 } }
end

local function cut_note(out, options)
  local rows = options.left_out.rows
  if rows > 0 then
    out:write(format('(%d %s left out: each list shows its first %d; ' ..
      '--top=N shows N, --all every row)\n', rows,
      rows == 1 and 'row' or 'rows', options.top))
  end
end

local function warn(err, program, warning)
  if warning then err:write(program, ': warning: ', warning, '\n') end
end

-- The renderer of each report by format: report/NAME_FORMAT.lua, each
-- write(model, out, options) of its report's one model.
local function renderer(report, name)
  return require('memprof.report.' .. report .. '_' .. name)
end

-- Writes `model` with its report's renderer of the format asked for.
local function render(opts, report, model, out, err, program)
  local name = opts.format or 'text'
  return write_to(opts, out, err, program, function(handle)
    if name ~= 'text' then
      return renderer(report, name).write(model, handle, opts)
    end
    local options = text_options(opts)
    renderer(report, name).write(model, handle, options)
    cut_note(handle, options)
  end)
end

-- The V8 heap snapshot: every object, no rows to choose.
local function heapsnapshot(opts, files, out, err, program)
  if opts.top or opts.all or opts.human_readable then
    error('--format=heapsnapshot writes every object: leave out --top, ' ..
      '--all and --human-readable', 0)
  end
  local v8 = require('memprof.report.heapsnapshot')
  local snapshot = v8.model(files[1], { profile = opts.heap_profile })
  warn(err, program, snapshot.warning)
  return write_to(opts, out, err, program, function(handle)
    v8.write(snapshot, handle)
  end)
end

local function run(opts, files, out, err, program)
  if opts.diff then
    return render(opts, 'heap_growth', growth_model.of_files(files[1],
      files[2]), out, err, program)
  elseif opts.format == 'heapsnapshot' then
    return heapsnapshot(opts, files, out, err, program)
  end
  local profile = opts.heap_profile
  local model = holders_model.of_file(files[1], { profile = profile,
    option = profile and '--profile=' .. profile })
  warn(err, program, model.warning)
  return render(opts, 'holders', model, out, err, program)
end

-- For a profile's report with --heap=SNAPSHOT: the model of who holds
-- what the profile's places allocated (report/model/holders.lua's
-- who_holds); raises when the file is not a heap snapshot.
function M.who_holds(heap_path, profile)
  if not M.is_heap(heap_path) then
    error(format('--heap=%s: not a heap snapshot (made by ' ..
      "memprof.snapshot(path, {format = 'heap'}))", heap_path), 0)
  end
  return holders_model.who_holds(heap_path, profile)
end

-- The report of heap snapshots for a parsed command line; the exit code.
function M.main(opts, files, out, err, program)
  local bad = problem(opts, files)
  if bad then
    err:write(program, ': ', bad, ' (see --help)\n')
    return 1
  end
  local ok, done, message = pcall(run, opts, files, out, err, program)
  if not ok or not done then
    err:write(program, ': ', tostring(ok and message or done), '\n')
    return 1
  end
  return 0
end

return M
