-- A program whose every allocation escapes (each record is kept until the
-- round ends, so no trace can sink it), made on known lines, some in
-- helpers the JIT compiler inlines: make bench's agreement section
-- compares its bytes by line with the JIT on and off.
local ROUNDS = tonumber(os.getenv('ESCAPING_ROUNDS')) or 20
local COUNT = 20000

local function label(i)
  return 'item' .. i
end

local function point(x, y)
  return { x = x, y = y }
end

local function record(i)
  local t = { i, i + 1, i + 2 }
  t.name = label(i)
  t.where = point(i, -i)
  return t
end

local kept = {}
for round = 1, ROUNDS do
  for i = 1, COUNT do
    local r = record(i)
    r.text = string.format('%d:%d', round, i)
    r.number = tostring(i + 0.5)
    r.joined = table.concat({ r.name, r.text }, ',')
    kept[i] = r
  end
  kept = {}
end
