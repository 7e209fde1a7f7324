-- Tables: array and hash parts growing step by step, then dropped.
return function(scale)
  local n = 0
  for round = 1, 60000 * scale do
    local arr, map = {}, {}
    for i = 1, 40 do
      arr[i] = i
      map[i * 7 + round] = i
    end
    n = n + #arr
  end
  return n
end
