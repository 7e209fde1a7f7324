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
-- `check`, if any), so --group=, --top N and --format= can be added by
-- adding entries:
--   { name = 'top', value = 'N', key = 'top', help = '...',
--     check = function(v) return tonumber(v), 'expected a number' end }

local reader = require('memprof.reader')
local analyze = require('memprof.analyze')
local text = require('memprof.report.text')

local M = {}

local PROGRAM = 'memprof-report'

M.OPTIONS = {
  { name = 'leak-only', key = 'leak_only',
    help = 'show only the heap summary (what is still allocated)' },
  { name = 'human-readable', key = 'human_readable',
    help = 'show sizes in B, KiB, MiB, GiB' },
  { name = 'help', short = 'h', key = 'help',
    help = 'show this help and exit' },
}

local function usage()
  local lines = {
    'Usage: ' .. PROGRAM .. ' [OPTIONS] FILE',
    '',
    'Print a report of a memprof profile: allocations, reallocations and',
    'deallocations per site, and what is still allocated at the end.',
    '',
    'Options:',
  }
  for _, option in ipairs(M.OPTIONS) do
    local spelling = '--' .. option.name
    if option.value then
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
      if option.value then
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

local function report(path, opts, out, err)
  local stream = reader.open(path)
  local result = analyze.run(stream)
  if stream.warning then
    err:write(PROGRAM, ': warning: ', stream.warning, '\n')
  end
  text.write(result, out, opts)
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
  local ok, message = pcall(report, files[1], opts, out, err)
  if not ok then
    err:write(PROGRAM, ': ', tostring(message), '\n')
    return 1
  end
  return 0
end

return M
