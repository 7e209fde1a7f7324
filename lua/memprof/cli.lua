-- memprof.cli: the memprof-report command.
--
--   cli.main(args, out, err) -> exit code
--     args  the command-line arguments (like the global arg table)
--     out   where the report goes (default io.stdout)
--     err   where errors and warnings go (default io.stderr)
--
-- Options are described by the OPTIONS table: a flag sets
-- opts[key] = true; an option with a value (value = 'NAME') accepts
-- "--name=VALUE" and "--name VALUE" and stores the string (after
-- `check`, if any); an option with an optional value (optional = true)
-- accepts "--name" (storing `default`) and "--name=VALUE" only.  More
-- options (--format=, say) are added by adding entries:
--   { name = 'format', value = 'F', key = 'format', help = '...',
--     check = function(v) return v, '' end }
--
-- Without a view option the report is the default one (Tarantool's
-- layout, memprof.report.text); with --leaks, --peak, --temporary or
-- --timeline it is those views (memprof.report.views).

local reader = require('memprof.reader')
local analyze = require('memprof.analyze')
local groups = require('memprof.groups')
local text = require('memprof.report.text')
local views = require('memprof.report.views')

local M = {}

local PROGRAM = 'memprof-report'

-- check(value) for whole numbers of at least `least`.
local function whole_number(least)
  return function(value)
    local number = tonumber(value)
    if not number or number ~= math.floor(number) or number < least then
      return nil, string.format('expected a whole number of at least %d, ' ..
        'found %s', least, value)
    end
    return number
  end
end

-- check(value) for one word of a list.
local function one_of(words)
  return function(value)
    for _, word in ipairs(words) do
      if value == word then
        return value
      end
    end
    return nil, string.format('expected %s, found %s',
      table.concat(words, ', '), value)
  end
end

M.OPTIONS = {
  { name = 'group', value = 'G', key = 'group', check = one_of(groups.MODES),
    help = 'rows by line (default), function, caller or stack' },
  { name = 'top', value = 'N', key = 'top', check = whole_number(1),
    help = 'at most N rows per section' },
  { name = 'sort', value = 'S', key = 'sort',
    check = one_of({ 'bytes', 'count' }), help = 'sort rows by bytes or count' },
  { name = 'leaks', key = 'leaks',
    help = 'view: blocks live at the end, with their stacks' },
  { name = 'peak', key = 'peak',
    help = "view: the heap's peak, and what held it" },
  { name = 'temporary', value = 'N', optional = true, default = 1,
    key = 'temporary', check = whole_number(0),
    help = 'view: blocks freed within N allocations (default 1)' },
  { name = 'timeline', key = 'timeline',
    help = 'view: live bytes over time (needs time marks)' },
  { name = 'leak-only', key = 'leak_only',
    help = 'default report: only the heap summary' },
  { name = 'human-readable', key = 'human_readable',
    help = 'sizes in B, KiB, MiB, GiB' },
  { name = 'help', short = 'h', key = 'help',
    help = 'show this help and exit' },
}

-- The view options, in the order the report prints them.
M.VIEWS = analyze.VIEWS

local function usage()
  local lines = {
    'Usage: ' .. PROGRAM .. ' [OPTIONS] FILE',
    '',
    'Print a report of a memprof profile: allocations, reallocations and',
    'deallocations per site, and what is still allocated at the end.',
    'With --leaks, --peak, --temporary or --timeline, print those views',
    'instead.  --group=caller and --group=stack need a profile recorded',
    'with call stacks (memprof.start(path, {stack_depth = N})), --timeline',
    'one recorded with time marks (memprof.start(path, {timestamps = true})).',
    '',
    'Options:',
  }
  for _, option in ipairs(M.OPTIONS) do
    local spelling = '--' .. option.name
    if option.optional then
      spelling = spelling .. '[=' .. option.value .. ']'
    elseif option.value then
      spelling = spelling .. '=' .. option.value
    end
    if option.short then
      spelling = '-' .. option.short .. ', ' .. spelling
    end
    lines[#lines + 1] = string.format('  %-22s %s', spelling, option.help)
  end
  return table.concat(lines, '\n') .. '\n'
end

local function find_option(name, short)
  for _, option in ipairs(M.OPTIONS) do
    if (name and option.name == name) or (short and option.short == short) then
      return option
    end
  end
  return nil
end

-- Parse args into opts and a list of file names.  Returns nil and a
-- message on a bad command line.
function M.parse(args)
  local opts, files = {}, {}
  local i = 1
  while i <= #args do
    local word = args[i]
    if word == '--' then
      for j = i + 1, #args do
        files[#files + 1] = args[j]
      end
      break
    end
    local name, value = word:match('^%-%-([^=]+)=(.*)$')
    name = name or word:match('^%-%-(.+)$')
    local short = not name and word:match('^%-(%w)$')
    if name or short then
      local option = find_option(name, short)
      if not option then
        return nil, string.format("unknown option '%s'", word)
      end
      local spelled = name and '--' .. name or '-' .. short
      if option.optional and value == nil then
        opts[option.key] = option.default
      elseif option.value then
        if value == nil then
          i = i + 1
          value = args[i]
          if value == nil then
            return nil, string.format("option '%s' needs a value (%s)",
              spelled, option.value)
          end
        end
        if option.check then
          -- check(value) returns the value to store, or nil and a message.
          local checked, message = option.check(value)
          if checked == nil then
            return nil, string.format("option '%s': %s", spelled, message)
          end
          value = checked
        end
        opts[option.key] = value
      elseif value ~= nil then
        return nil, string.format("option '%s' takes no value", spelled)
      else
        opts[option.key] = true
      end
    elseif word:match('^%-.') then
      return nil, string.format("unknown option '%s'", word)
    else
      files[#files + 1] = word
    end
    i = i + 1
  end
  return opts, files
end

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
    return string.format('--group=%s needs call stacks: record with ' ..
      'memprof.start(path, {stack_depth = N})', group)
  end
  if opts.timeline and not stream.has_time then
    return '--timeline needs time marks: record with ' ..
      'memprof.start(path, {timestamps = true})'
  end
  return nil
end

local function analysis_options(opts, asked)
  return { group = opts.group, views = asked,
    temporary_limit = opts.temporary }
end

-- Writes the report; returns true, or nil and a message when the stream
-- cannot give what is asked.
local function report(path, opts, out, err)
  local stream = reader.open(path)
  if stream.version ~= reader.EXTENDED_VERSION then
    local missing = missing_data(stream, opts)
    if missing then
      stream:close()
      return nil, missing
    end
  end
  local asked = views_asked(opts)
  local result = analyze.run(stream, analysis_options(opts, asked))
  if stream.warning then
    err:write(PROGRAM, ': warning: ', stream.warning, '\n')
  end
  local missing = missing_data(stream, opts)
  if missing then
    return nil, missing
  end
  if asked then
    views.write(result, out, { views = asked, top = opts.top,
      sort = opts.sort, human_readable = opts.human_readable })
  else
    text.write(result, out, opts)
  end
  return true
end

-- A problem with the combination of options, or nil.
local function conflict(opts)
  if opts.leak_only and views_asked(opts) then
    return '--leak-only is for the default report; leave it out with ' ..
      '--leaks, --peak, --temporary or --timeline'
  end
  return nil
end

function M.main(args, out, err)
  out = out or io.stdout
  err = err or io.stderr
  local opts, files = M.parse(args or {})
  if not opts then
    err:write(PROGRAM, ': ', files, ' (see --help)\n')
    return 1
  end
  if opts.help then
    out:write(usage())
    return 0
  end
  if #files ~= 1 then
    local problem = #files == 0 and 'no profile file given' or
      'give exactly one profile file'
    err:write(PROGRAM, ': ', problem, ' (see --help)\n')
    return 1
  end
  local problem = conflict(opts)
  if problem then
    err:write(PROGRAM, ': ', problem, ' (see --help)\n')
    return 1
  end
  local ok, done, missing = pcall(report, files[1], opts, out, err)
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

return M
