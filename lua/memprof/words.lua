-- memprof.words: the pieces of plain English that messages and reports
-- share.
--
--   words.plural(3, 'event')        -> '3 events' ('1 event', '-1 row')
--   words.either({ 'a', 'b', 'c' }) -> 'a, b or c' (any values, through
--                                      tostring)
--   words.commas(-1234567)          -> '-1,234,567' (a whole number)

local M = {}

local format, concat = string.format, table.concat

function M.plural(count, word)
  if count == 1 or count == -1 then
    return format('%d %s', count, word)
  end
  return format('%d %ss', count, word)
end

function M.commas(n)
  local sign, digits = format('%d', n):match('^(%-?)(%d+)$')
  local head = #digits % 3
  if head == 0 then head = 3 end
  return sign .. digits:sub(1, head) ..
    digits:sub(head + 1):gsub('(%d%d%d)', ',%1')
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
