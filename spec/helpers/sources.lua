-- The module's own code, as valgrind names it: a pattern for each file of
-- src/ (read from the directory, so that a new unit is never missed) as a
-- frame shows it, "(file.c:LINE)" or "src/file.c:LINE", and the module.
local M = {}

function M.patterns(root)
  local list = { 'memprof%.so' }
  local pipe = assert(io.popen("ls '" .. (root or '.') .. "/src'"))
  for name in pipe:lines() do
    if name:match('^[%w_]+%.[ch]$') then
      local quoted = name:gsub('%.', '%%.')
      list[#list + 1] = '[%(/]' .. quoted .. ':'
    end
  end
  pipe:close()
  assert(#list > 10, 'no sources in ' .. (root or '.') .. '/src')
  return list
end

return M
