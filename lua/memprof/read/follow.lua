-- memprof.read.follow: a profile read while it is being written
-- (memprof live).  The writer appends the committed part of its buffer
-- once a second (docs/format.md), so the file grows by whole events
-- mostly, but a write may end anywhere: the stream reads up to the last
-- whole record, waits there, and reads on from that record's start when
-- the file has grown (memprof.read.stream's opts.follow).
--
--   local follow = require('memprof.read.follow')
--   local f = follow.new(path [, opts])   -- opts: those of
--                                         -- memprof.read.stream (chunk_size,
--                                         -- split_traces)
--   local stream, fresh = f:poll()
--     stream  the stream to read events from (stream:next_values() until
--             it returns nil), or nil when there is none yet: f.state
--             says why
--     fresh   true when the stream is not the one the last poll gave:
--             a new reading from the start (the caller starts its
--             analysis afresh)
--   f.state   'missing' (no file at path), 'starting' (the file has not
--             its whole headers yet), 'reading', 'ended' (the stream's
--             epilogue was read: the profile was stopped)
--   f.why     nil, or what made the last new reading: 'the file was
--             replaced', 'the file was truncated', 'the file was
--             rewritten'
--   f.restarts  how many times the file was read again from its start
--   f:changed() -> why, or nil: whether the file at path is no longer
--             the one read (after an error of the stream, this tells a
--             file replaced under the reader from a bad one)
--   f:restart([why])  drops the stream: the next poll reads from the
--             start (why: what made it, for f.why and f.restarts; nil
--             when the reader itself wants to read it again)
--   f:size()  the file's size now
--   f:close()
--
-- How a file is told to be another one (checked at every poll):
--   - path names another file (device and inode) than the one open:
--     replaced (a new profile renamed there, or made anew);
--   - the file is shorter than what was read of it: truncated (a new
--     profile written to the same path truncates it);
--   - the last bytes read are not what the file holds there now:
--     rewritten (truncated, then grown past the point read, between two
--     polls).
-- A file removed from path is read on (its writer may still write it)
-- until another appears there.
--
-- Memory: the stream's buffer (a chunk, plus a record cut by the end)
-- and its symbols and stacks; nothing grows with the file's length.
-- Each poll reads only the bytes added since the last.

local ffi = require('ffi')
local stream_reader = require('memprof.read.stream')
local errors = require('memprof.read.errors')

local M = {}

local format = string.format

-- (The same declarations as memprof.read.sources': a second identical
-- one fails, and the first serves.)
pcall(ffi.cdef, 'int open(const char *path, int flags, ...);')
pcall(ffi.cdef, 'int close(int fd);')
pcall(ffi.cdef, [[
  intptr_t pread(int fd, void *buf, size_t n, int64_t offset);
  int64_t lseek(int fd, int64_t offset, int whence);
  char *strerror(int errnum);
  typedef struct { uint64_t dev, ino; uint8_t rest[256]; } memprof_follow_stat;
]])
pcall(ffi.cdef, 'int stat(const char *path, memprof_follow_stat *buf);')
pcall(ffi.cdef, 'int fstat(int fd, memprof_follow_stat *buf);')
pcall(ffi.cdef, [[
  int __xstat(int version, const char *path, memprof_follow_stat *buf);
  int __fxstat(int version, int fd, memprof_follow_stat *buf);
]])

local O_RDONLY, SEEK_END, ENOENT, EINTR = 0, 2, 2, 4
-- How many of the last bytes read are compared with the file.
local TAIL = 32

local stat_record = ffi.typeof('memprof_follow_stat[1]')

-- stat and fstat: exported by glibc since 2.33; before, through
-- __xstat with the kernel's structure version (the device and inode
-- come first in the structure on x86_64 and arm64 alike).
local stat_path, stat_fd
do
  local has_stat = pcall(function() return ffi.C.stat end)
  if has_stat then
    stat_path = function(path, buf) return ffi.C.stat(path, buf) end
    stat_fd = function(fd, buf) return ffi.C.fstat(fd, buf) end
  else
    local version = ffi.arch == 'x64' and 1 or 0
    stat_path = function(path, buf) return ffi.C.__xstat(version, path, buf) end
    stat_fd = function(fd, buf) return ffi.C.__fxstat(version, fd, buf) end
  end
end

-- The device and inode of path (or nil and errno).
local function identity(path)
  local buf = stat_record()
  if stat_path(path, buf) ~= 0 then
    return nil, ffi.errno()
  end
  return tostring(buf[0].dev) .. ':' .. tostring(buf[0].ino)
end

local function fd_identity(fd)
  local buf = stat_record()
  if stat_fd(fd, buf) ~= 0 then
    return nil
  end
  return tostring(buf[0].dev) .. ':' .. tostring(buf[0].ino)
end

local function strerror(errno)
  return ffi.string(ffi.C.strerror(errno))
end

local Follower = {}
Follower.__index = Follower

function M.new(path, opts)
  return setmetatable({ path = path, opts = opts or {}, state = 'missing',
    stream = false, given = false, fd = -1, id = false, read = 0,
    tail = '', tail_at = 0, why = nil, restarts = 0 }, Follower)
end

-- The source of a stream: the file read with pread from the offset
-- reached, never past what it holds now (0 at its current end), and the
-- last bytes read kept for changed().
local function source(self)
  local function read_into(pointer, count)
    if self.fd < 0 then
      return 0
    end
    local got
    repeat
      got = tonumber(ffi.C.pread(self.fd, pointer, count, self.read))
    until got >= 0 or ffi.errno() ~= EINTR
    if got < 0 then
      error(format('%s: %s', self.path, strerror(ffi.errno())), 0)
    end
    if got > 0 then
      local n = math.min(got, TAIL)
      self.tail = ffi.string(pointer + got - n, n)
      self.tail_at = self.read + got - n
      self.read = self.read + got
    end
    return got
  end
  -- (The follower closes the file: a stream that fails closes its
  -- source, and changed() must still be able to tell why it failed.)
  local function close() end
  return read_into, close
end

local function close_file(self)
  if self.fd >= 0 then
    ffi.C.close(self.fd)
    self.fd = -1
  end
end

-- Opens the file and reads its headers; state 'missing', 'starting' or
-- 'reading'.  A file whose headers are bad raises the reader's error.
local function open(self)
  local fd = ffi.C.open(self.path, O_RDONLY)
  if fd < 0 then
    local errno = ffi.errno()
    if errno ~= ENOENT then
      error(format('%s: %s', self.path, strerror(errno)), 0)
    end
    self.state = 'missing'
    return
  end
  self.fd, self.read, self.tail, self.tail_at = fd, 0, '', 0
  self.id = fd_identity(fd)
  local read_into, close = source(self)
  local opts = {}
  for key, value in pairs(self.opts) do
    opts[key] = value
  end
  opts.follow = true
  local ok, stream = pcall(stream_reader.from_source, self.path, read_into,
    close, opts)
  if not ok then
    close_file(self)
    if stream == errors.TRUNCATED then
      self.state = 'starting'
      return
    end
    error(stream, 0)
  end
  self.stream, self.state = stream, 'reading'
end

-- The file's size now (0 when none is open).
function Follower:size()
  if self.fd < 0 then
    return 0
  end
  return math.max(0, tonumber(ffi.C.lseek(self.fd, 0, SEEK_END)))
end

function Follower:changed()
  if self.fd < 0 then
    return nil
  end
  local id = identity(self.path)
  if id and id ~= self.id then
    return 'the file was replaced'
  end
  local size = tonumber(ffi.C.lseek(self.fd, 0, SEEK_END))
  if size >= 0 and size < self.read then
    return 'the file was truncated'
  end
  if #self.tail > 0 then
    local buf = ffi.new('uint8_t[?]', #self.tail)
    local got = tonumber(ffi.C.pread(self.fd, buf, #self.tail,
      self.tail_at))
    if got == #self.tail and ffi.string(buf, got) ~= self.tail then
      return 'the file was rewritten'
    end
  end
  return nil
end

function Follower:restart(why)
  if self.stream then
    self.stream:close()
  end
  self.stream = false
  close_file(self)
  if why then
    self.why, self.restarts = why, self.restarts + 1
  end
  self.state = 'missing'
end

function Follower:poll()
  if self.stream then
    local why = self:changed()
    if why then
      self:restart(why)
    elseif self.stream.done then
      self.state = 'ended'
    else
      self.stream:resume()
    end
  end
  if not self.stream then
    open(self)
  end
  local stream = self.stream or nil
  local fresh = stream ~= (self.given or nil)
  self.given = stream or false
  return stream, fresh
end

function Follower:close()
  if self.stream then
    self.stream:close()
    self.stream = false
  end
  close_file(self)
end

return M
