-- Reads callgrind's output files (format version 1) for the benchmark's
-- sections that count instructions (bench/callgrind.lua,
-- bench/side_by_side.lua).
--
-- A cost line belongs to the current function (fn=), of the current object
-- (ob=) and source file (fl=). Code inlined from another file (headers
-- such as src/vm_inspect.h or src/writer.h) is marked with fi=/fe=, but is
-- part of the function it is inlined into, so fi=/fe= are read only for
-- their names and the function's own file decides. The cost line after a
-- calls= line is the inclusive cost of that call, not self cost: skipped.
-- (callgrind_annotate's listing would not do: it names inlined code by
-- header and function name only, and function names are not unique:
-- writer.c's start_thread and libc's, for one.)
local M = {}

-- Compressed names ("(12) name" defines 12, "(12)" refers to it) are
-- shared between these keys.
local NAME_SPACE = {
  ob = 'ob', cob = 'ob',
  fl = 'fl', fi = 'fl', fe = 'fl', cfi = 'fl', cfl = 'fl',
  fn = 'fn', cfn = 'fn',
}

-- Reads the file at path. classify(ob, fl, fn) names the category of a
-- function (its object, its source file, its name), or returns nil for
-- one that is not counted apart; it is called once per change of
-- function. Returns { total = self cost of every line, cost = { category
-- = self cost }, functions = { category = { fn = self cost } } }. Fails
-- if the self costs do not add up to callgrind's own total (a line missed
-- or counted twice).
function M.read(path, classify)
  local names = { ob = {}, fl = {}, fn = {} }
  local current = { ob = '', fl = '', fn = '' }
  local positions, ir_column = 1, nil
  local after_call, category, stale = false, nil, true
  local result = { total = 0, cost = {}, functions = {} }
  local totals
  for line in io.lines(path) do
    local key, value = line:match('^(%a+)=(.*)$')
    if key then
      local space = NAME_SPACE[key]
      if space then
        local id, name = value:match('^%((%d+)%)%s*(.*)$')
        if id and name ~= '' then
          names[space][id] = name
        elseif id then
          name = assert(names[space][id], path .. ': undefined name ' .. value)
        else
          name = value
        end
        if key == 'ob' or key == 'fl' or key == 'fn' then
          current[key] = name
          stale = true
        end
      elseif key == 'calls' then
        after_call = true
      end
    elseif line:match('^[%d%+%-%*]') then
      if after_call then
        after_call = false
      else
        local columns = {}
        for word in line:gmatch('%S+') do columns[#columns + 1] = word end
        local ir = tonumber(columns[positions + ir_column]) or 0
        result.total = result.total + ir
        if stale then
          category = classify(current.ob, current.fl, current.fn)
          stale = false
        end
        if category then
          result.cost[category] = (result.cost[category] or 0) + ir
          local fns = result.functions[category] or {}
          result.functions[category] = fns
          fns[current.fn] = (fns[current.fn] or 0) + ir
        end
      end
    elseif line:match('^positions:') then
      positions = select(2, line:gsub('%s%a+', ''))
    elseif line:match('^events:') then
      local i = 0
      for event in line:sub(8):gmatch('%S+') do
        i = i + 1
        if event == 'Ir' then ir_column = i end
      end
      assert(ir_column, path .. ': no Ir event')
    elseif line:match('^totals:') then
      totals = tonumber(line:match('%d+'))
    end
  end
  assert(ir_column, path .. ': not a callgrind output file')
  -- (The summary: line at the top can differ, when the counters were
  -- zeroed or the run was cut in parts.)
  assert(result.total == totals, string.format(
    '%s: self costs add up to %s, callgrind\'s totals: %s', path,
    tostring(result.total), tostring(totals)))
  return result
end

-- The last component of a path.
function M.basename(path)
  return path:match('([^/]+)$') or path
end

return M
