-- memprof.read.sources: the program's source files, where the reporter
-- can read them: the text of a line, and the name a function has in its
-- source.
--
--   sources.line(chunkname, line) -> the line's text (trimmed, at most
--     MAX_TEXT bytes), or nil
--   sources.function_name(chunkname, firstline) -> the name the line
--     where a function is defined gives it ('handler', 'M.get',
--     'Cache:put'), or nil
--
-- Only chunk names of files ('@path', read from the current directory
-- when relative) are read.  Bounded: files larger than MAX_FILE are not
-- read, and at most MAX_FILES files are kept (then reading stops: a
-- report names the first places it shows, by far the most looked up).
--
-- src/source_names.c names the functions of memprof.snapshot's pprof
-- files alike: the bounds, the trimming and PATTERNS change in both.

local ffi = require('ffi')

local M = {}

-- Files are read through a descriptor opened without blocking, so that a
-- chunk named after a FIFO or a device never stalls the report: a FIFO
-- without a writer reads as empty, one that has nothing to give fails.
pcall(ffi.cdef, [[
int open(const char *path, int flags, ...);
intptr_t read(int fd, void *buf, size_t n);
int close(int fd);
]])

-- O_NONBLOCK where its value is known (Linux on x86-64 and arm64);
-- elsewhere no source is read.
local O_NONBLOCK = ffi.os == 'Linux' and
  (ffi.arch == 'x64' or ffi.arch == 'arm64') and 0x800 or nil
local CHUNK = 65536

M.MAX_FILE = 4 * 1024 * 1024
M.MAX_FILES = 256
M.MAX_TEXT = 160

local files = {}      -- chunkname -> list of lines, or false: not readable
local count = 0

local buffer = nil

-- The whole file at path, or nil: unreadable, or more than MAX_FILE bytes.
local function read_file(path)
  local fd = O_NONBLOCK and ffi.C.open(path, O_NONBLOCK) or -1
  if fd < 0 then
    return nil
  end
  buffer = buffer or ffi.new('char[?]', CHUNK)
  local parts, size = {}, 0
  while size <= M.MAX_FILE do
    local n = tonumber(ffi.C.read(fd, buffer, CHUNK))
    if n <= 0 then
      size = n < 0 and math.huge or size
      break
    end
    parts[#parts + 1] = ffi.string(buffer, n)
    size = size + n
  end
  ffi.C.close(fd)
  if size > M.MAX_FILE then
    return nil
  end
  return table.concat(parts)
end

local function lines_of(chunkname)
  local known = files[chunkname]
  if known ~= nil then
    return known or nil
  end
  if count >= M.MAX_FILES then
    return nil
  end
  count = count + 1
  files[chunkname] = false
  local path = chunkname:match('^@(.+)$')
  local text = path and read_file(path)
  if not text then
    return nil
  end
  local list = {}
  for line in (text .. '\n'):gmatch('([^\n]*)\n') do
    list[#list + 1] = line
  end
  files[chunkname] = list
  return list
end

function M.line(chunkname, line)
  if type(chunkname) ~= 'string' or type(line) ~= 'number' then
    return nil
  end
  local list = lines_of(chunkname)
  local text = list and list[line]
  if not text then
    return nil
  end
  text = text:gsub('\r$', ''):match('^%s*(.-)%s*$')
  if text == '' then
    return nil
  end
  if #text > M.MAX_TEXT then
    text = text:sub(1, M.MAX_TEXT - 3) .. '...'
  end
  return text
end

local NAME = '[%a_][%w_]*[%.:%w_]*'

-- The patterns that name a function on the line that defines it, in
-- order: `local function f(`, `function M.f(`, `f = function(`.
local PATTERNS = {
  '^local%s+function%s+(' .. NAME .. ')%s*%(',
  '^function%s+(' .. NAME .. ')%s*%(',
  '^local%s+(' .. NAME .. ')%s*=%s*function%s*%(',
  '^(' .. NAME .. ')%s*=%s*function%s*%(',
}

function M.function_name(chunkname, firstline)
  local text = M.line(chunkname, firstline)
  if not text then
    return nil
  end
  for _, pattern in ipairs(PATTERNS) do
    local name = text:match(pattern)
    if name then
      return name
    end
  end
  return nil
end

-- Forgets the files read (for the specs, and a program that reports
-- again after its sources changed).
function M.forget()
  files, count = {}, 0
end

return M
