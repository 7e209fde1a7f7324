-- The command lines of the documentation run as written: every
-- `memprof-report`, `memprof run` and `memprof report` line of a code
-- block of README.md and docs/*.md, against a small profile and heap
-- snapshot of a real run (build/memprof.so). A synopsis is run in each
-- of its forms: without its optional parts, then with each optional part
-- and each alternative in turn (`[--top=N | --all]`, `--format=json|html`),
-- its placeholders given values (N: 2, FILE: a profile, HEAP: a snapshot
-- taken during it). What a line pipes its output into is left out; a
-- line must exit 0 with no complaint about its options. `memprof heap
-- PID` lines need a process of their own (spec/hosts/heap_pid_spec.lua).
local C = require('helpers.command')

local TOP = os.getenv('PWD')
local LUA = os.getenv('MEMPROF_TEST_LUA') or 'luajit'

local M = {}

-- ---- The lines ------------------------------------------------------------

-- Whether a line is a command of ours ('$ ' prompts taken off).
local function command_of(line)
  local text = line:gsub('^%s*%$ ', '')
  text = text:gsub('^%s+', '')
  if text:find('^bin/memprof ') then text = text:sub(5) end
  if text:find('^memprof%-report ') or text:find('^memprof run ') or
      text:find('^memprof report ') then
    return text
  end
  return nil
end

-- The command lines of the code blocks of a Markdown file: { file, line,
-- text }, a line ending with '\' or followed by indented '[' lines
-- joined with them.
function M.lines_of(path)
  local out, inside, last = {}, false, nil
  local n = 0
  for line in io.lines(path) do
    n = n + 1
    if line:find('^%s*```') then
      inside, last = not inside, nil
    elseif inside then
      local text = command_of(line)
      if text then
        last = { file = path, line = n, text = text }
        out[#out + 1] = last
      elseif last and (last.text:find('\\$') or line:find('^%s+%[')) then
        last.text = last.text:gsub('%s*\\$', '') .. ' ' .. line:gsub('^%s+', '')
      else
        last = nil
      end
    end
  end
  return out
end

-- ---- Synopses ------------------------------------------------------------

-- The items of a sequence: words and bracketed groups, at the top level.
local function items_of(text)
  local items, depth, start = {}, 0, nil
  for i = 1, #text do
    local c = text:sub(i, i)
    if c == '[' then depth = depth + 1 elseif c == ']' then depth = depth - 1 end
    if c:find('%s') and depth == 0 then
      if start then items[#items + 1] = text:sub(start, i - 1) end
      start = nil
    elseif not start then
      start = i
    end
  end
  if start then items[#items + 1] = text:sub(start) end
  return items
end

-- `text` split at the top-level '|' between spaces (' | ').
local function alternatives(text)
  local out, depth, start = {}, 0, 1
  for i = 1, #text do
    local c = text:sub(i, i)
    if c == '[' then depth = depth + 1 elseif c == ']' then depth = depth - 1 end
    if c == '|' and depth == 0 and text:sub(i - 1, i - 1) == ' ' then
      out[#out + 1] = text:sub(start, i - 2)
      start = i + 2
    end
  end
  out[#out + 1] = text:sub(start)
  return out
end

local expand

-- The forms of one word: `--temporary[=N]` is two, `--format=a|b` one per
-- value.
local function word_forms(word)
  local head, optional = word:match('^([^%[]+)%[(.-)%]$')
  if head then return { head, head .. optional } end
  local key, values = word:match('^(%-%-[%w-]+=)(.*|.*)$')
  if key then
    local out = {}
    for value in values:gmatch('[^|]+') do out[#out + 1] = key .. value end
    return out
  end
  return { word }
end

-- The forms of an item: a word's, or for `[...]` nothing (the first) and
-- each form of each alternative in it.
local function item_forms(item)
  local inner = item:match('^%[(.*)%]$')
  if not inner then return word_forms(item) end
  local out = { '' }
  for _, alt in ipairs(alternatives(inner)) do
    for _, form in ipairs(expand(alt)) do out[#out + 1] = form end
  end
  return out
end

-- The forms of a sequence: each item at its first form, then each other
-- form of each item with the rest at their first.
function expand(text)
  local forms = {}
  for i, item in ipairs(items_of(text)) do forms[i] = item_forms(item) end
  local function joined(at, form)
    local words = {}
    for i, f in ipairs(forms) do
      local w = i == at and form or f[1]
      if w ~= '' then words[#words + 1] = w end
    end
    return table.concat(words, ' ')
  end
  local out = { joined(0) }
  for i, f in ipairs(forms) do
    for k = 2, #f do out[#out + 1] = joined(i, f[k]) end
  end
  return out
end
M.expand = expand

-- ---- Running ---------------------------------------------------------------

-- Placeholders of the synopses, and what they become.
local VALUES = {
  N = '2', S = '7', TEXT = 'app', CMD = LUA, FILE = 'out.bin',
  PROFILE = 'out.bin', BEFORE = 'out.bin', AFTER = 'out.bin',
  HEAP = 'out.heap', ['OLD.heap'] = 'out.heap', ['NEW.heap'] = 'out.heap',
  PATH = 'out.txt', ['HEAP.heapsnapshot'] = 'out.heapsnapshot',
  ['script.lua'] = 'app.lua', SCRIPT = 'app.lua',
}
local DROPPED = { ['[REPORT OPTIONS]'] = true, ['[args...]'] = true,
  ['[ARGS...]'] = true, ['[OPTIONS]'] = true }

-- A command's form as its program and arguments: placeholders given
-- values, files in dir (/tmp/ ones too), a pipe's reader and a
-- redirection left out (the output is not looked at).
local function arguments(dir, form)
  form = form:gsub(' | .*$', ''):gsub(' > .*$', '')
  local words = {}
  for _, word in ipairs(items_of(form)) do
    word = VALUES[word] or word:gsub('=(%u+)$', function(v)
      return VALUES[v] and '=' .. VALUES[v]
    end)
    word = word:gsub('^/tmp/', ''):gsub('=/tmp/', '=')
    if word:find('^%-%-[%w-]+=') then
      local key, value = word:match('^(.-=)(.*)$')
      if value:find('%.%a+$') then word = key .. dir .. '/' .. value end
    elseif word:find('%.%a+$') then
      word = dir .. '/' .. word
    end
    words[#words + 1] = word
  end
  local program = table.remove(words, 1)
  if program == 'memprof' and words[1] == 'report' then
    program = table.remove(words, 1)
  end
  return program, words
end

local function sink()
  local parts = {}
  return { write = function(self, ...)
    for _, s in ipairs({ ... }) do parts[#parts + 1] = tostring(s) end
    return self
  end, flush = function() return true end,
  text = function() return table.concat(parts) end }
end

-- Runs a form in dir: memprof-report in this process, memprof run as a
-- program of its own; its exit code and stderr.
local function run(dir, form)
  local program, args = arguments(dir, form)
  if program ~= 'memprof' then
    local err = sink()
    local code = require('memprof.cli.report').main(args, sink(), err)
    return code, err.text()
  end
  local line = C.command(LUA, TOP .. '/bin/memprof', unpack(args))
  local code, _, err = C.run('cd ' .. C.quote(dir) .. ' && ' .. C.CLEAN_ENV ..
    'timeout 60 ' .. line .. ' > /dev/null')
  return code, err
end

-- The files a form names that it reads: copies of the profile and the
-- snapshot under those names (out.bin and out.heap too: a `memprof run
-- -o out.bin` before wrote a profile of its own there).
local function provide(dir, form)
  os.execute(('cp %s/made.bin %s/out.bin && cp %s/made.heap %s/out.heap')
    :format(C.quote(dir), C.quote(dir), C.quote(dir), C.quote(dir)))
  for _, word in ipairs(items_of(form)) do
    local name = word:match('=(.+)$') or word
    name = name:gsub('^/tmp/', '')
    local source = name:find('%.heap$') and 'out.heap' or
      (name:find('%.bin$') and 'out.bin') or
      (name:find('%.lua$') and 'app.lua')
    if source and name ~= source and not name:find('^%-') then
      local path = dir .. '/' .. name
      os.execute('mkdir -p ' .. C.quote(path:match('^(.*)/')) .. ' && cp ' ..
        C.quote(dir .. '/' .. source) .. ' ' .. C.quote(path))
    end
  end
end

-- A script that allocates, keeps some, and ignores its arguments.
local APP = [[
local keep = {}
for i = 1, 200 do keep[i] = { i, tostring(i) } end
_G.keep = keep
]]

-- made.bin, a profile with stacks and time marks, and made.heap, a
-- snapshot taken during it.
local PROFILE = [[
package.cpath = ARGS.root .. '/build/?.so;' .. package.cpath
local memprof = require('memprof')
assert(memprof.start(ARGS.dir .. '/made.bin', { stack_depth = 8,
  timestamps = true }))
local cache = {}
for i = 1, 300 do cache[i] = ('page %d '):format(i):rep(4) end
_G.cache = cache
assert(memprof.snapshot(ARGS.dir .. '/made.heap', { format = 'heap' }))
for i = 1, 100 do cache[i] = nil end
assert(memprof.stop())
]]

describe('the command lines of the documentation', function()
  local dir

  setup(function()
    dir = C.temp_dir()
    C.write_file(dir .. '/app.lua', APP)
    C.write_file(dir .. '/make.lua', ('ARGS = { root = %q, dir = %q }\n')
      :format(TOP, dir) .. PROFILE)
    local code, _, err = C.run(C.CLEAN_ENV .. 'timeout 60 ' ..
      C.command(LUA, dir .. '/make.lua'))
    assert(code == 0, err)
  end)

  teardown(function()
    C.remove_tree(dir)
  end)

  it('expands a synopsis into its forms', function()
    assert.are.same({ 'memprof-report HEAP',
      'memprof-report --format=text HEAP', 'memprof-report --format=json HEAP',
      'memprof-report --top=N HEAP', 'memprof-report --all HEAP',
      'memprof-report --temporary HEAP', 'memprof-report --temporary=N HEAP' },
      expand('memprof-report [--format=text|json] [--top=N | --all] ' ..
        '[--temporary[=N]] HEAP'))
  end)

  -- The command lines of one file, each form run: their count, and what
  -- failed.
  local function run_file(file)
    local ran, failed = 0, {}
    for _, entry in ipairs(M.lines_of(file)) do
      local text = entry.text
      for word in pairs(DROPPED) do
        text = text:gsub(' ' .. word:gsub('%p', '%%%0'), '')
      end
      for _, form in ipairs(expand(text)) do
        if form:find('--lua=tarantool', 1, true) and
            not C.have('tarantool') then
          error('docs run `memprof run --lua=tarantool`: needs tarantool')
        end
        provide(dir, form)
        local code, err = run(dir, form)
        ran = ran + 1
        if code ~= 0 or err:find('see --help', 1, true) then
          failed[#failed + 1] = ('%s:%d: %s -> exit %d: %s'):format(
            file, entry.line, form, code, err:sub(1, 300))
        end
      end
    end
    return ran, failed
  end

  -- One spec a file that has command lines (each under 5 s).
  local files, ran = { 'README.md' }, 0
  for name in io.popen('ls docs/*.md'):lines() do files[#files + 1] = name end
  for _, file in ipairs(files) do
    if #M.lines_of(file) > 0 then
      it('run as written: ' .. file, function()
        local n, failed = run_file(file)
        ran = ran + n
        assert.are.same({}, failed)
        assert.is_true(n > 0, file)
      end)
    end
  end

  it('are more than 60 in all', function()
    assert.is_true(ran > 60, ran .. ' command lines')
  end)
end)
