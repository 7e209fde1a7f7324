-- memprof.cli.options: the command-line options of memprof-report and
-- memprof run, one parser for both.
--
-- An option is a table: a flag ({ name = 'all', key = 'all' }) sets
-- opts[key] = true; an option with a value (value = 'NAME') accepts
-- "--name=VALUE" and "--name VALUE" and stores the string (after
-- `check`, if any); an option with an optional value (optional = true)
-- accepts "--name" (storing `default`) and "--name=VALUE" only; `short`
-- is a one-letter spelling (-h); `help` its line in --help.
--
--   options.parse(list, args [, how]) -> opts, words | nil, message
--   options.lines(list [, lines])      -> the lines of --help (added to
--                                        lines)
--   options.help(intro, list, after)   -> the text of --help
--   options.stop_status(opts, message, out, err, command)
--                                      -> 1, 0 or nil (see below)
--   options.whole_number(least [, most [, unit]]), options.one_of(words)
--                                      -> check functions
--   options.command(program, list, help, args, out, err)
--                                      -> opts, words | nil, exit status
--                                        (see below)
--   options.pid_command(program, list, help, args, out, err)
--                                      -> opts, pid | nil, exit status
--   options.named(list, name)          -> the entry of list (options,
--                                        formats) of that name, or nil
--   options.HELP, options.VM           -> --help and --vm=N, which
--                                        several commands take
--
-- Common mistakes get a hint: an option with an optional value given
-- its value after a space (--temporary 5), an unknown option close to a
-- known one (--leak, -leaks).

local either = require('memprof.words').either

local M = {}

local format = string.format

-- check(value) for whole numbers of at least `least` and, when `most`
-- is given, at most `most`; `unit` names what they count ('bytes').
function M.whole_number(least, most, unit)
  local what = 'a whole number' .. (unit and ' of ' .. unit or '')
  local range = format(' of at least %d', least)
  if most then
    range = format(' from %d to %s', least,
      most == 2 ^ 53 and '2^53' or format('%d', most))
  end
  return function(value)
    local number = tonumber(value)
    if not number or number ~= math.floor(number) or number < least or
        (most and number > most) then
      return nil, format('expected %s%s, found %s', what, range, value)
    end
    return number
  end
end

-- check(value) for one word of a list.
function M.one_of(words)
  return function(value)
    for _, word in ipairs(words) do
      if value == word then
        return value
      end
    end
    return nil, format('expected %s, found %s',
      table.concat(words, ', '), value)
  end
end

-- The lines of --help that list `options`, added to `lines` (a new
-- list by default), which is returned.
function M.lines(options, lines)
  lines = lines or {}
  for _, option in ipairs(options) do
    local spelling = '--' .. option.name
    if option.optional then
      spelling = spelling .. '[=' .. option.value .. ']'
    elseif option.value then
      spelling = spelling .. '=' .. option.value
    end
    if option.short then
      spelling = '-' .. option.short .. ', ' .. spelling
    end
    lines[#lines + 1] = format('  %-22s %s', spelling, option.help)
  end
  return lines
end

-- The text of --help: `intro` (text, every line of it ending in a
-- newline; a {name} in it stands for values[name]), the lines of
-- `options`, a blank line, then the lines of `after`.
function M.help(intro, options, after, values)
  local lines = {}
  for line in intro:gsub('{(%w+)}', values or {}):gmatch('([^\n]*)\n') do
    lines[#lines + 1] = line
  end
  M.lines(options, lines)
  lines[#lines + 1] = ''
  for _, line in ipairs(after) do
    lines[#lines + 1] = line
  end
  return table.concat(lines, '\n') .. '\n'
end

-- The exit status of a command that stops before its work, or nil when
-- it goes on: 1 when its options did not parse (opts nil: command.prefix,
-- `message` and " (see COMMAND.SEE)" to err), 0 when they ask for --help
-- (command.help() to out).
function M.stop_status(opts, message, out, err, command)
  if not opts then
    err:write(command.prefix, message, ' (see ', command.see, ')\n')
    return 1
  end
  if opts.help then
    out:write(command.help())
    return 0
  end
  return nil
end

-- The number of single-letter edits that turn a into b.
local function edit_distance(a, b)
  local previous = {}
  for j = 0, #b do
    previous[j] = j
  end
  for i = 1, #a do
    local current = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      current[j] = math.min(previous[j] + 1, current[j - 1] + 1,
        previous[j - 1] + cost)
    end
    previous = current
  end
  return previous[#b]
end

-- The options whose names pass test(name), at most three.
local function options_where(options, test)
  local found = {}
  for _, option in ipairs(options) do
    if #found < 3 and test(option.name) then
      found[#found + 1] = '--' .. option.name
    end
  end
  return found
end

-- The options a mistyped name may have meant: those it begins (or is),
-- else those within two edits of it (one for names of four letters or
-- fewer).
local function similar_options(options, name)
  if #name < 2 then
    return {}
  end
  local found = options_where(options, function(known)
    return known:sub(1, #name) == name
  end)
  if #found > 0 then
    return found
  end
  local most = #name <= 4 and 1 or 2
  return options_where(options, function(known)
    return edit_distance(name, known) <= most
  end)
end

local function unknown_option(options, word)
  local name = word:match('^%-%-?([^=]+)')
  local similar = name and similar_options(options, name) or {}
  if #similar == 0 then
    return format("unknown option '%s'", word)
  end
  return format("unknown option '%s'; did you mean %s?", word,
    either(similar))
end

-- For an option whose value is optional, given without one: if the
-- next word is a value it takes (--temporary 5), a message saying how
-- to write it; else nil.
local function spaced_value(option, spelled, next_word)
  if not next_word or next_word:match('^%-') or not option.check or
      option.check(next_word) == nil then
    return nil
  end
  return format("option '%s' takes its value after '=': write %s=%s",
    spelled, spelled, next_word)
end

-- A subcommand's command line (`program` as 'memprof heap', `help()` its
-- --help text): its options and words, or nil and the exit status when
-- it stops there (see stop_status; errors name `program --help`).
function M.command(program, options, help, args, out, err)
  local opts, words = M.parse(options, args)
  local status = M.stop_status(opts, words, out, err,
    { prefix = program .. ': ', see = program .. ' --help', help = help })
  if status then
    return nil, status
  end
  return opts, words
end

-- The command line of a subcommand that takes one process id.
function M.pid_command(program, options, help, args, out, err)
  local opts, words = M.command(program, options, help, args, out, err)
  if not opts then
    return nil, words
  end
  local pid = tonumber(words[1] or '')
  if #words ~= 1 or not pid or pid ~= math.floor(pid) or pid < 1 then
    err:write(program, ': expected one process id, found ',
      #words == 0 and 'none' or table.concat(words, ' '),
      ' (see ', program, ' --help)\n')
    return nil, 1
  end
  return opts, pid
end

function M.named(list, name)
  for _, entry in ipairs(list) do
    if entry.name == name then
      return entry
    end
  end
  return nil
end

M.HELP = { name = 'help', short = 'h', key = 'help',
  help = 'show this help and exit' }

M.VM = { name = 'vm', value = 'N', key = 'vm', check = M.whole_number(1, 64),
  help = 'of a process with several LuaJIT VMs, the Nth (default 1)' }

-- The same option as `option`, described by `help` in --help.
function M.with_help(option, help)
  local copy = {}
  for field, value in pairs(option) do
    copy[field] = value
  end
  copy.help = help
  return copy
end

local function find_option(options, name, short)
  for _, option in ipairs(options) do
    if (name and option.name == name) or (short and option.short == short) then
      return option
    end
  end
  return nil
end

-- The value of an option that takes one: from "--name=VALUE" or the next
-- word.  Returns the value (checked) and the index of the last word
-- used, or nil and a message.
local function option_value(option, spelled, value, args, i)
  if value == nil then
    i = i + 1
    value = args[i]
    if value == nil then
      return nil, format("option '%s' needs a value (%s)", spelled,
        option.value)
    end
  end
  if option.check then
    -- check(value) returns the value to store, or nil and a message.
    local checked, message = option.check(value)
    if checked == nil then
      return nil, format("option '%s': %s", spelled, message)
    end
    value = checked
  end
  return value, i
end

-- Reads the option at args[i] into opts.  Returns the index of the last
-- word used, or nil and a message.
local function read_option(options, opts, args, i)
  local word = args[i]
  local name, value = word:match('^%-%-([^=]+)=(.*)$')
  name = name or word:match('^%-%-(.+)$')
  local short = not name and word:match('^%-(%w)$')
  local option = (name or short) and find_option(options, name, short)
  if not option then
    return nil, unknown_option(options, word)
  end
  local spelled = name and '--' .. name or '-' .. short
  if option.optional and value == nil then
    local message = spaced_value(option, spelled, args[i + 1])
    if message then
      return nil, message
    end
    opts[option.key] = option.default
  elseif option.value then
    local stored, last = option_value(option, spelled, value, args, i)
    if stored == nil then
      return nil, last
    end
    opts[option.key] = stored
    return last
  elseif value ~= nil then
    return nil, format("option '%s' takes no value", spelled)
  else
    opts[option.key] = true
  end
  return i
end

-- Parse args into opts and a list of the other words (file names).
-- Returns nil and a message on a bad command line.  how (optional):
--   stop     stop at the first word that is not an option: it and the
--            words after it are the list
function M.parse(options, args, how)
  how = how or {}
  local opts, words = {}, {}
  local i = 1
  while i <= #args do
    local word = args[i]
    if word == '--' or (how.stop and not word:match('^%-.')) then
      for j = word == '--' and i + 1 or i, #args do
        words[#words + 1] = args[j]
      end
      break
    end
    if word:match('^%-.') then
      local last, message = read_option(options, opts, args, i)
      if not last then
        return nil, message
      end
      i = last
    else
      words[#words + 1] = word
    end
    i = i + 1
  end
  return opts, words
end

return M
