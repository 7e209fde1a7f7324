-- Test helpers: the module and another allocator hook in one child
-- process, in a given order of steps, with exact expected outcomes.
--
--   local chain = require('helpers.chain')
--   chain.check({ 'M+', 'B+', 'B-', 'M-' }, {
--     output = { chain.line('M+', true, 'running=true'), ... },
--     records = { [1] = { 1, 2, 3 }, [2] = { 2 } },
--     absent = { [i] = true },       -- refused starts: no file
--     max_size = { M = bytes, B = bytes },
--   })
--
-- A step is a letter and + (start) or - (stop): M is this module
-- (memprof.start/stop), B the VM's built-in misc.memprof (taken before the
-- module is loaded), W the wrapper of spec/support/alloc_wrapper.c (install
-- and restore). After each step the child prints the step, what it
-- returned and what memprof.is_running() says, then makes tables_after(i)
-- tables at a line of its own. `records` gives, for the step of each
-- start, the steps whose tables its profile must hold (exactly those, and
-- no others); each profile must also read to its end without a warning.
--
-- Children run with a time limit of 60 seconds, and without the suite's
-- per-build settings (helpers.command).
local C = require('helpers.command')
local h = require('helpers.profile')
-- busted's assertions (spec files see them as `assert`; modules do not).
local assert = require('luassert')

local M = {}

-- Runs the script at path in a child interpreter; returns its exit status,
-- stdout and stderr.
function M.run_file(path)
  return C.run('timeout 60 ' .. h.lua .. ' ' .. C.quote(path))
end

function M.run_child(source)
  local script = h.tmpname('.lua')
  C.write_file(script, source)
  local code, out, err = M.run_file(script)
  os.remove(script)
  return code, out, err
end

-- The child's first lines (no newline at the end): the module from this tree, the built-in (if
-- any) taken before the module is loaded, the wrapper if asked for.
function M.preamble(with_wrapper)
  local lines = {
    'package.cpath = ' .. string.format('%q', package.cpath),
    'package.path = ' .. string.format('%q', package.path),
    'jit.off()',
    'local B = misc and misc.memprof',
    "local M = require('memprof')",
    with_wrapper and "local W = require('alloc_wrapper')" or '',
    'local function say(label, ...)',
    '  local out = { label }',
    "  for i = 1, select('#', ...) do",
    '    out[#out + 1] = tostring((select(i, ...)))',
    '  end',
    "  out[#out + 1] = 'running=' .. tostring(M.is_running())",
    "  io.write(table.concat(out, ' '), '\\n')",
    'end',
  }
  return table.concat(lines, '\n')
end

-- One line of the child's output.
function M.line(step, ...)
  local out = { step }
  for i = 1, select('#', ...) do
    out[#out + 1] = tostring((select(i, ...)))
  end
  return table.concat(out, ' ')
end

-- Tables made after step i (distinct, so that steps mixed up show).
function M.tables_after(i)
  return 50 + 10 * i
end

function M.size_of(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local n = f:seek('end')
  f:close()
  return n
end

local CALLS = {
  ['M+'] = 'M.start(%q)', ['M-'] = 'M.stop()',
  ['B+'] = 'B.start(%q)', ['B-'] = 'B.stop()',
  ['W+'] = 'W.install()', ['W-'] = 'W.restore()',
}

-- The scenario's script: per step the step's line, then the line of its
-- tables. Returns the source, the line of each step's tables, and the file
-- of each profile start (by step), in dir.
local function scenario_source(dir, steps)
  local with_wrapper = false
  for _, step in ipairs(steps) do
    with_wrapper = with_wrapper or step:sub(1, 1) == 'W'
  end
  local lines = { M.preamble(with_wrapper) }
  -- lines[k] (k > 1) is line n + k - 1 of the script.
  local n = select(2, lines[1]:gsub('\n', '\n')) + 1
  local work, files = {}, {}
  for i, step in ipairs(steps) do
    local call = assert(CALLS[step], step)
    if step == 'M+' or step == 'B+' then
      files[i] = string.format('%s/%s%d.bin', dir, step:sub(1, 1), i)
      call = string.format(call, files[i])
    end
    lines[#lines + 1] = string.format('say(%q, %s)', step, call)
    lines[#lines + 1] = string.format('for _ = 1, %d do local t = {} end',
      M.tables_after(i))
    work[i] = n + #lines - 1
  end
  return table.concat(lines, '\n') .. '\n', work, files
end

-- Tables allocated at each line of the script, in the profile at path.
local function tables_by_line(path, script_path)
  local events, stream = h.read(path)
  assert.is_nil(stream.warning, path)
  local by_line = {}
  for _, ev in ipairs(events) do
    if ev.kind == 'alloc' and ev.source == 'lua' and
      ev.site.chunkname == '@' .. script_path then
      by_line[ev.line] = (by_line[ev.line] or 0) + 1
    end
  end
  return by_line
end

-- Runs one scenario and checks everything (see the top of this file).
function M.check(steps, expect)
  local dir = C.temp_dir()
  local script_path = dir .. '/scenario.lua'
  local source, work, files = scenario_source(dir, steps)
  C.write_file(script_path, source)
  local code, out, err = M.run_file(script_path)
  local ok, failure = pcall(function()
    assert.equal('', err)
    assert.equal(0, code)
    assert.equal(table.concat(expect.output, '\n') .. '\n', out)
    for i, file in pairs(files) do
      local size = M.size_of(file)
      if expect.absent and expect.absent[i] then
        assert.is_nil(size, file)
      else
        assert.is_number(size, file)
        local bound = expect.max_size[steps[i]:sub(1, 1)]
        assert.is_true(size < bound, file .. ' has ' .. size .. ' bytes')
        local by_line = tables_by_line(file, script_path)
        local want = {}
        for _, step in ipairs(assert(expect.records[i], file)) do
          want[step] = true
        end
        for step, line in ipairs(work) do
          assert.equal(want[step] and M.tables_after(step) or nil,
            by_line[line], file .. ': the tables after step ' .. step)
        end
      end
    end
  end)
  C.remove_tree(dir)
  if not ok then
    error(failure, 0)
  end
end

return M
