-- Small helpers shared by the benchmark's scripts (run.lua, callgrind.lua,
-- reporter.lua).
local M = {}

-- A word quoted for the shell.
function M.shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- The whole file, or '' if it cannot be read.
function M.read_all(path)
  local f = io.open(path, 'rb')
  if not f then return '' end
  local text = f:read('*a')
  f:close()
  return text
end

-- The size of a file in bytes.
function M.file_size(path)
  local f = assert(io.open(path, 'rb'))
  local size = f:seek('end')
  f:close()
  return size
end

-- The median of a list of numbers (the list is left as it is).
function M.median(list)
  local sorted = {}
  for i, v in ipairs(list) do sorted[i] = v end
  table.sort(sorted)
  local n = #sorted
  if n % 2 == 1 then return sorted[(n + 1) / 2] end
  return (sorted[n / 2] + sorted[n / 2 + 1]) / 2
end

return M
