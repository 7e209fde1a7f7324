-- memprof.report.paths: long file names shortened by the directory that
-- every absolute chunk name of a profile shares, said once; a shortened
-- name starts with M.MARK, so that nobody takes it for a name relative
-- to the current directory.
--
--   local prefix = paths.common_prefix(stream)  -- '/usr/share/lua/5.1/',
--     or nil: no absolute chunk name, or they share only '/'
--   paths.note(prefix) -> the line that says how names are shortened
--   out = paths.shortening(out, prefix)  -- an output whose writes name
--     '@/usr/share/lua/5.1/luacheck/main.lua' as '@…/luacheck/main.lua'
--
-- The chunk names of the sites keep the whole path: only the text of a
-- report is shortened.

local M = {}

-- What stands for the common directory in a shortened name.
M.MARK = '\226\128\166/' -- U+2026, the ellipsis, in UTF-8

local function directory_of(chunkname)
  return chunkname:match('^@(/.*/)[^/]*$')
end

-- The longest common start of two strings.
local function common_start(a, b)
  local n = math.min(#a, #b)
  local i = 1
  while i <= n and a:byte(i) == b:byte(i) do
    i = i + 1
  end
  return a:sub(1, i - 1)
end

function M.common_prefix(stream)
  local prefix
  -- (Many sites share a chunk name: each is looked at once.)
  local seen = {}
  for _, site in ipairs(stream.sites or {}) do
    local chunkname = site.chunkname
    if chunkname and not seen[chunkname] then
      seen[chunkname] = true
      local dir = type(chunkname) == 'string' and directory_of(chunkname)
      if dir then
        prefix = prefix and common_start(prefix, dir) or dir
      end
    end
  end
  -- A whole directory, longer than the root.
  prefix = prefix and prefix:match('^(.*/)')
  if not prefix or prefix == '/' then
    return nil
  end
  return prefix
end

function M.note(prefix)
  return 'Files under ' .. prefix .. ' are named from there on: @' ..
    M.MARK .. 'name.lua is @' .. prefix .. 'name.lua.'
end

function M.shortening(out, prefix)
  local long = '@' .. prefix
  local pattern = long:gsub('%p', '%%%0')
  local wrapper = {}
  function wrapper.write(self, ...)
    local n = select('#', ...)
    local pieces = { ... }
    for i = 1, n do
      local piece = pieces[i]
      if type(piece) == 'string' and piece:find(long, 1, true) then
        pieces[i] = piece:gsub(pattern, '@' .. M.MARK)
      end
    end
    out:write(unpack(pieces, 1, n))
    return self
  end
  return setmetatable(wrapper, { __index = function(_, key)
    local value = out[key]
    if type(value) == 'function' then
      return function(_, ...) return value(out, ...) end
    end
    return value
  end })
end

return M
