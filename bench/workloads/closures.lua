-- Closures: functions with upvalues created in a loop.
local function counter(start)
  local value = start
  return function(step)
    value = value + step
    return value
  end
end

return function(scale)
  local sum = 0
  for i = 1, 2000000 * scale do
    local f = counter(i)
    sum = sum + f(1)
  end
  return sum
end
