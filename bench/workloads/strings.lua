-- Strings: formatting, concatenation and string.rep, mostly unique.
return function(scale)
  local parts, n = {}, 0
  for i = 1, 600000 * scale do
    local s = string.format('%d:%s', i, string.rep('x', i % 40))
    parts[i % 500 + 1] = s .. '/' .. i
    n = n + #s
  end
  return n + #table.concat(parts, ',')
end
