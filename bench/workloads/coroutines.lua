-- Coroutines: each one has its own stack, which grows and is freed.
local function producer(n)
  return coroutine.wrap(function()
    for i = 1, n do coroutine.yield({ i }) end
  end)
end

return function(scale)
  local sum = 0
  for _ = 1, 60000 * scale do
    local next_item = producer(10)
    for _ = 1, 10 do sum = sum + next_item()[1] end
  end
  return sum
end
