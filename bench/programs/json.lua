-- A JSON service's work, with lua-cjson (as OpenResty and Tarantool
-- programs do): decode a document of 2,000 records, change every record,
-- encode it again; 400 times. Run by bench/programs.lua as a program of
-- its own: luajit bench/programs/json.lua [SCALE].
local cjson = require('cjson')

local RECORDS = 2000
local ROUNDS = math.floor(400 * (tonumber(arg and arg[1]) or 1))

local function document()
  local records = {}
  for i = 1, RECORDS do
    records[i] = {
      id = i,
      name = 'user' .. i,
      email = 'user' .. i .. '@example.org',
      tags = { 'tag' .. i % 7, 'tag' .. i % 11 },
      score = i * 1.5,
      active = i % 2 == 0,
    }
  end
  return cjson.encode({ records = records, total = RECORDS })
end

local text = document()
local checksum = 0
for round = 1, ROUNDS do
  local doc = cjson.decode(text)
  for _, record in ipairs(doc.records) do
    record.score = record.score + round
    record.tags[#record.tags + 1] = 'seen'
  end
  local out = cjson.encode(doc)
  checksum = (checksum + #out) % 1000000007
end
io.write(checksum, '\n')
