-- Small helpers shared by the benchmark's scripts (run.lua, callgrind.lua,
-- reporter.lua).
local M = {}

-- A word quoted for the shell.
function M.shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- The whole file, or nil if it cannot be read.
function M.read(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local text = f:read('*a')
  f:close()
  return text
end

-- The whole file, or '' if it cannot be read.
function M.read_all(path)
  return M.read(path) or ''
end

-- A new empty directory under the system's temporary one.
function M.temp_dir()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute('mkdir ' .. M.shell_quote(dir))
  return dir
end

-- Starts `command` in the background under `timeout seconds`, its process
-- id written to DIR/pid; waits up to `waits` times 0.05 s for it to write
-- DIR/ready. Returns its process id, or nil.
function M.start_daemon(command, dir, seconds, waits)
  os.execute(string.format("timeout %d sh -c 'echo $$ > %s/pid; exec %s' " ..
    '>/dev/null 2>&1 &', seconds, dir, command))
  for _ = 1, waits do
    if M.read(dir .. '/ready') and M.read(dir .. '/pid') then
      return tonumber(M.read(dir .. '/pid'))
    end
    os.execute('sleep 0.05')
  end
  return nil
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
