-- Test helper: reads the pprof files that memprof.snapshot writes (gzip of
-- stored deflate blocks, a profile.proto message) back into tables, so
-- that specs can check their figures exactly without go tool pprof.
--
--   local pprof_read = require('helpers.pprof_read')
--   local profile = pprof_read.file(path)
--   profile.sample_types    -- { 'alloc_space/bytes', ... }
--   profile.samples         -- { { locations = { place, ... },
--                           --     functions = { function, ... },
--                           --     values = { n, n, n, n } }, ... }
--   profile.functions       -- { [id] = { name =, file =, start_line = } }
--   pprof_read.by_place(profile) -- { [place] = { four values } } of the
--                                -- samples whose innermost place it is
--
-- A place is 'FILE:LINE' for a line of a Lua function, else the name of
-- its function ('string.rep', 'INTERNAL (garbage collector)').

local gzip = require('memprof.encode.gzip')

local M = {}

local byte = string.byte

local function u16(s, i)
  return byte(s, i) + byte(s, i + 1) * 256
end

local function u32(s, i)
  return u16(s, i) + u16(s, i + 2) * 65536
end

-- The content of a gzip file of stored blocks, its CRC-32 and size checked.
function M.gunzip(data)
  assert(data:sub(1, 3) == '\31\139\8', 'not a gzip file of deflate data')
  local pos, parts = 11, {}
  while true do
    local header = byte(data, pos)
    assert(header == 0 or header == 1, 'expected a stored deflate block')
    local len = u16(data, pos + 1)
    assert(u16(data, pos + 3) == 65535 - len, 'bad stored block length')
    parts[#parts + 1] = data:sub(pos + 5, pos + 4 + len)
    pos = pos + 5 + len
    if header == 1 then break end
  end
  local content = table.concat(parts)
  assert(u32(data, pos) == gzip.crc32(content), 'bad CRC-32')
  assert(u32(data, pos + 4) == #content, 'bad size')
  assert(pos + 7 == #data, 'bytes after the gzip member')
  return content
end

-- A varint at pos: its value and the position after it.
local function varint(s, pos)
  local value, scale = 0, 1
  while true do
    local b = byte(s, pos)
    pos = pos + 1
    value = value + (b % 128) * scale
    if b < 128 then return value, pos end
    scale = scale * 128
  end
end

-- The fields of a message: { [field] = { value, ... } }, a value being a
-- number (varint) or a string (length-delimited).
local function fields(s)
  local out, pos = {}, 1
  while pos <= #s do
    local key
    key, pos = varint(s, pos)
    local field, wire = math.floor(key / 8), key % 8
    local value
    if wire == 0 then
      value, pos = varint(s, pos)
    elseif wire == 2 then
      local len
      len, pos = varint(s, pos)
      value = s:sub(pos, pos + len - 1)
      pos = pos + len
    else
      error('unexpected wire type ' .. wire)
    end
    out[field] = out[field] or {}
    table.insert(out[field], value)
  end
  return out
end

local function one(f, field)
  return f[field] and f[field][1] or 0
end

-- The numbers of a repeated field, packed (a string of varints) or not.
local function packed(f, field)
  local out = {}
  for _, s in ipairs(f[field] or {}) do
    if type(s) == 'number' then
      out[#out + 1] = s
    else
      local pos = 1
      while pos <= #s do
        out[#out + 1], pos = varint(s, pos)
      end
    end
  end
  return out
end

-- The profile message's content.
function M.decode(message)
  local f = fields(message)
  local strings = f[6] or {}
  local function str(i) return strings[i + 1] end
  local profile = { sample_types = {}, samples = {}, comments = {},
    functions = {}, locations = {} }
  local function_at = {} -- Location id -> its function.
  for _, vt in ipairs(f[1] or {}) do
    local v = fields(vt)
    table.insert(profile.sample_types, str(one(v, 1)) .. '/' ..
      str(one(v, 2)))
  end
  for _, fn in ipairs(f[5] or {}) do
    local v = fields(fn)
    profile.functions[one(v, 1)] = { name = str(one(v, 2)),
      file = str(one(v, 4)), start_line = one(v, 5) }
  end
  for _, loc in ipairs(f[4] or {}) do
    local v = fields(loc)
    local line = fields(v[4][1])
    local func = profile.functions[one(line, 1)]
    local place = func.file ~= '' and func.file .. ':' .. one(line, 2) or
      func.name
    profile.locations[one(v, 1)] = place
    function_at[one(v, 1)] = func
  end
  for _, sample in ipairs(f[2] or {}) do
    local v = fields(sample)
    local places, functions = {}, {}
    for i, id in ipairs(packed(v, 1)) do
      places[i], functions[i] = profile.locations[id], function_at[id]
    end
    table.insert(profile.samples, { locations = places,
      functions = functions, values = packed(v, 2) })
  end
  if f[11] then
    local v = fields(f[11][1])
    profile.period_type = str(one(v, 1)) .. '/' .. str(one(v, 2))
  end
  profile.period = one(f, 12)
  -- Comments one by one (memprof.snapshot) or packed (memprof-report).
  for _, i in ipairs(packed(f, 13)) do
    table.insert(profile.comments, str(i))
  end
  profile.default_sample_type = str(one(f, 14))
  return profile
end

function M.file(path)
  local file = assert(io.open(path, 'rb'))
  local data = file:read('*a')
  file:close()
  return M.decode(M.gunzip(data))
end

function M.by_place(profile)
  local out = {}
  for _, sample in ipairs(profile.samples) do
    local place = sample.locations[1]
    local row = out[place] or { 0, 0, 0, 0 }
    for i = 1, 4 do row[i] = row[i] + sample.values[i] end
    out[place] = row
  end
  return out
end

return M
