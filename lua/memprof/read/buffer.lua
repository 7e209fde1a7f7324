-- memprof.read.buffer: the bytes of a profile, read in chunks into one
-- buffer of C memory (LuaJIT's FFI), and the cursor the decoder moves
-- through them.
--
-- These are methods of a stream (memprof.read.stream mixes them in):
--   stream.new_cursor() -> cursor, memory   (see below)
--   stream:reserve(size), stream:fill(need), stream:need(count, what, at)
--   stream:byte_at(i), stream:bytes(i, j)  -- buffer positions
--   stream:offset_of(pos), stream:file_size_so_far(), stream:count_read()
--   stream.mark    -- false, or a file offset whose bytes fill() keeps
--   stream:release()                       -- frees the buffer
-- and the sources a stream reads from:
--   buffer.file(path [, on_read]) -> read_into, close   (raises
--       'PATH: strerror' when the file cannot be opened or read)
--   buffer.string_chunks(bytes, chunk_size) -> read_chunk
--
-- The reader needs LuaJIT (its FFI and bit libraries): under another
-- Lua, requiring this module raises a message that says so.

if not jit then
  error("memprof's reader runs on LuaJIT only (luajit, OpenResty's " ..
    "luajit2 or Tarantool), not on " .. tostring(_VERSION), 0)
end

local ffi = require('ffi')

local M = {}

local methods = {}
M.methods = methods

local format, sub, max = string.format, string.sub, math.max

ffi.cdef([[
  typedef struct memprof_reader_FILE memprof_reader_FILE;
  memprof_reader_FILE *fopen(const char *path, const char *mode);
  size_t fread(void *ptr, size_t size, size_t count,
    memprof_reader_FILE *file);
  int ferror(memprof_reader_FILE *file);
  int fclose(memprof_reader_FILE *file);
  void *memmove(void *dest, const void *src, size_t count);
  void *malloc(size_t size);
  void free(void *ptr);
  char *strerror(int errnum);
  typedef struct { double pos, last, base, events, version, context;
    uint8_t *view; } memprof_reader_cursor;
]])

local byte_pointer = ffi.typeof('uint8_t *')
local cursor_record = ffi.typeof('memprof_reader_cursor[1]')
local cursor_pointer = ffi.typeof('memprof_reader_cursor *')

-- What next() reads and changes for every event, kept out of the
-- stream's table: the buffer position of the next byte (pos), of the
-- last byte buffered (last), the file offset of the buffer's start less
-- one (base), the events delivered so far (events, copied to
-- stream.events by count_read), the version of the event stream (0
-- before it is read), the id of the stack of the last event that had
-- one (context, 0 before any), and the buffer less one (view: position
-- 1 is the first byte).  A C record reached through a pointer: LuaJIT
-- makes a pointer that is an upvalue of next() a constant.  Returns the
-- cursor and what keeps its memory.
function methods.new_cursor()
  local memory = cursor_record()
  local cursor = ffi.cast(cursor_pointer, memory)
  cursor.pos, cursor.last, cursor.base, cursor.events = 1, 0, 0, 0
  cursor.version, cursor.context = 0, 0
  return cursor, memory
end

-- Byte offset in the file of buffer position pos.
function methods:offset_of(pos)
  return self.cursor.base + pos - 1
end

function methods:file_size_so_far()
  return self.cursor.base + self.cursor.last
end

-- stream.events and stream.bytes_read, from the cursor, where next()
-- counts them.
function methods:count_read()
  local cursor = self.cursor
  self.events = cursor.events
  self.bytes_read = cursor.base + cursor.pos - 1
end

function methods:byte_at(i)
  return self.cursor.view[i]
end

-- The bytes from buffer position i to j, clipped to the buffered ones.
function methods:bytes(i, j)
  if j > self.cursor.last then
    j = self.cursor.last
  end
  if j < i then
    return ''
  end
  return ffi.string(self.cursor.view + i, j - i + 1)
end

-- Room for `size` bytes, keeping the buffered ones.  The buffer is
-- taken with malloc, not from the VM's allocator: a program that reads
-- a profile while it records one sees no event for it.
function methods:reserve(size)
  if size <= self.capacity then
    return
  end
  local capacity = max(size, 2 * self.capacity)
  local buf = ffi.C.malloc(capacity)
  if buf == nil then
    error(format('%s: no memory for a buffer of %d bytes', self.name,
      capacity), 0)
  end
  buf = ffi.gc(ffi.cast(byte_pointer, buf), ffi.C.free)
  local old = self.cbuf
  if old then
    ffi.copy(buf, old, self.cursor.last)
    ffi.C.free(ffi.gc(old, nil))
  end
  self.cbuf, self.capacity = buf, capacity
  self.cursor.view = buf - 1
end

-- The buffer is freed as soon as the stream is done, not by the
-- collector (whose finalizer frees only the buffer of a stream dropped
-- before its end).
function methods:release()
  local buf = self.cbuf
  if buf then
    self.cbuf, self.capacity = false, 0
    self.cursor.view = nil
    ffi.C.free(ffi.gc(buf, nil))
  end
end

-- The next piece of the source, appended to the buffer: from the file
-- (read_into) or a chunk string (read_chunk).  Returns false at the end.
function methods:append()
  local chunk_size = self.chunk_size
  self:reserve(self.cursor.last + chunk_size)
  if self.read_into then
    local count = self.read_into(self.cbuf + self.cursor.last, chunk_size)
    self.cursor.last = self.cursor.last + count
    return count > 0
  end
  local chunk = self.read_chunk()
  if chunk == nil or chunk == '' then
    return false
  end
  self:reserve(self.cursor.last + #chunk)
  ffi.copy(self.cbuf + self.cursor.last, chunk, #chunk)
  self.cursor.last = self.cursor.last + #chunk
  return true
end

-- Make sure at least `need` unread bytes are buffered, unless the file
-- ends first (the unread bytes move to the buffer's start).  A stream
-- that follows a growing file keeps the bytes from its mark on too (the
-- file offset where the record being read began), so that a record cut
-- by the file's end can be read again from its start once it grows.
function methods:fill(need)
  local cursor = self.cursor
  while cursor.last - cursor.pos + 1 < need and not self.eof do
    local from = cursor.pos
    if self.mark then
      from = math.min(from, self.mark - cursor.base + 1)
    end
    local keep = cursor.last - from + 1
    if from > 1 and keep > 0 then
      ffi.C.memmove(self.cbuf, self.cbuf + from - 1, keep)
    end
    cursor.base = cursor.base + from - 1
    cursor.pos, cursor.last = cursor.pos - from + 1, keep
    if not self:append() then
      self.eof = true
    end
  end
end

-- `count` bytes buffered, or the file ends where `what` was expected.
function methods:need(count, what, offset)
  if self.cursor.last - self.cursor.pos + 1 < count then
    self:fill(count)
    if self.cursor.last - self.cursor.pos + 1 < count then
      self:truncated(what, offset)
    end
  end
end

-- A file read with the C library: read_into(pointer, count) -> bytes
-- read (0 at the end), and close().  on_read(total bytes) after each
-- read.
function M.file(path, on_read)
  local file = ffi.C.fopen(path, 'rb')
  if file == nil then
    error(path .. ': ' .. ffi.string(ffi.C.strerror(ffi.errno())), 0)
  end
  file = ffi.gc(file, ffi.C.fclose)
  local total = 0
  local function close()
    if file then
      ffi.C.fclose(ffi.gc(file, nil))
      file = nil
    end
  end
  local function read_into(pointer, count)
    if not file then
      return 0
    end
    local got = tonumber(ffi.C.fread(pointer, 1, count, file))
    if got < count and ffi.C.ferror(file) ~= 0 then
      local message = ffi.string(ffi.C.strerror(ffi.errno()))
      close()
      error(path .. ': ' .. message, 0)
    end
    if got == 0 then
      close()
    elseif on_read then
      total = total + got
      on_read(total)
    end
    return got
  end
  return read_into, close
end

-- read_chunk() over bytes in memory: the next `chunk_size` of them, or
-- nil at their end.
function M.string_chunks(bytes, chunk_size)
  local at = 1
  return function()
    if at > #bytes then
      return nil
    end
    local chunk = sub(bytes, at, at + chunk_size - 1)
    at = at + chunk_size
    return chunk
  end
end

return M
