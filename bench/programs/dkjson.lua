-- A JSON service's work in pure Lua, with dkjson (Debian's lua-dkjson):
-- decode a document of 500 records, change every record, encode it again;
-- 40 times. Compiled code stitches around the string functions dkjson
-- calls (string.find with patterns), so its stacks cross traces. Keys
-- are encoded in a fixed order: in the order of pairs(), which changes
-- from run to run with the VM's string hash seed, the buffer's growth
-- would fall on other lines in each run. Run by
-- bench/trace_lines.lua as a program of its own:
-- luajit bench/programs/dkjson.lua [SCALE].
local json = require('dkjson')

local RECORDS = 500
local ROUNDS = math.floor(40 * (tonumber(arg and arg[1]) or 1))

local ORDER = { keyorder = { 'records', 'total', 'id', 'name', 'email',
  'tags', 'score', 'active', 'seen' } }

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
  return json.encode({ records = records, total = RECORDS }, ORDER)
end

local function update(doc, round)
  for _, record in ipairs(doc.records) do
    record.score = record.score + round
    record.seen = round
  end
  return doc
end

local text = document()
local size = 0
for round = 1, ROUNDS do
  local doc = json.decode(text)
  text = json.encode(update(doc, round), ORDER)
  size = size + #text
end
io.write(size, '\n')
