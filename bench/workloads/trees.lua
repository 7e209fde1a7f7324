-- Binary trees: many small tables, most of them short-lived.
local function make(depth)
  if depth == 0 then return {} end
  return { make(depth - 1), make(depth - 1) }
end

local function check(tree)
  if not tree[1] then return 1 end
  return 1 + check(tree[1]) + check(tree[2])
end

return function(scale)
  local long_lived = make(12)
  local total = 0
  for _ = 1, 300 * scale do total = total + check(make(12)) end
  return total + check(long_lived)
end
