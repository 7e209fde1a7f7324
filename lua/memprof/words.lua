-- memprof.words: the pieces of plain English that messages and reports
-- share.
--
--   words.plural(3, 'event')        -> '3 events' ('1 event', '-1 row')
--   words.either({ 'a', 'b', 'c' }) -> 'a, b or c' (any values, through
--                                      tostring)

local M = {}

local format, concat = string.format, table.concat

function M.plural(count, word)
  if count == 1 or count == -1 then
    return format('%d %s', count, word)
  end
  return format('%d %ss', count, word)
end

function M.either(items)
  local shown = {}
  for i, item in ipairs(items) do
    shown[i] = tostring(item)
  end
  if #shown == 1 then
    return shown[1]
  end
  return concat(shown, ', ', 1, #shown - 1) .. ' or ' .. shown[#shown]
end

return M
