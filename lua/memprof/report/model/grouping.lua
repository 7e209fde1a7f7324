-- memprof.report.model.grouping: what the rows of a report stand for
-- (memprof.analysis.groups' modes), as every format names it.
--
--   grouping.heading(mode)  the text reports' first line for the mode:
--                           nil by line (the default needs none)
--   grouping.by(mode)       'by line', 'by function', 'by caller',
--                           'by stack' (nil for an unknown mode)
--   grouping.unit(mode)     what one row is: 'line', 'function',
--                           'calling line', 'call stack'
--   grouping.stack_notes(result, unit)  the notes (for stderr) of an
--                           export made of UNITs ('stack', 'sample'):
--                           without call stacks in the profile, each of
--                           them is one frame

local M = {}

local MODES = {
  line = { by = 'by line', unit = 'line' },
  ['function'] = { by = 'by function', unit = 'function',
    heading = 'Grouped by function: each row is the function where the ' ..
      'events happened, named by where it is defined.' },
  caller = { by = 'by caller', unit = 'calling line',
    heading = 'Grouped by caller: each row is the Lua line that called ' ..
      'the function where the events happened.' },
  stack = { by = 'by stack', unit = 'call stack',
    heading = 'Grouped by stack: each row is a call stack, innermost ' ..
      'frame first.' },
}

local function field(mode, name)
  local words = MODES[mode]
  return words and words[name]
end

function M.heading(mode)
  return field(mode, 'heading')
end

function M.by(mode)
  return field(mode, 'by')
end

function M.unit(mode)
  return field(mode, 'unit')
end

function M.stack_notes(result, unit)
  if result.stream.has_stacks then
    return {}
  end
  return { 'the profile has no call stacks: each ' .. unit .. ' is one ' ..
    'frame, the place of the events (record with memprof.start(path, ' ..
    '{stack_depth = N}) for stacks)' }
end

return M
