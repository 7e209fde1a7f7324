-- Mixed: build records, serialise them to text, parse them back.
local function encode(rec)
  local out = {}
  for k, v in pairs(rec) do out[#out + 1] = k .. '=' .. tostring(v) end
  table.sort(out)
  return table.concat(out, ';')
end

local function decode(line)
  local rec = {}
  for k, v in line:gmatch('([^=;]+)=([^;]*)') do rec[k] = tonumber(v) or v end
  return rec
end

return function(scale)
  local count = 0
  for i = 1, 60000 * scale do
    local rec = { id = i, name = 'user' .. i, score = i * 0.5, tags = i % 5 }
    local back = decode(encode(rec))
    if back.id == i then count = count + 1 end
  end
  return count
end
