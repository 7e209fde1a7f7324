-- Mutated heap snapshots (docs/heap-format.md) and runs of memprof-report
-- on them in children, for the fuzz spec (spec/reporter/heap_fuzz_spec.lua)
-- and `make fuzz` (bench/fuzz_heap.lua).
--
--   local fuzz = require('helpers.heap_fuzz')
--   local base = fuzz.parse(name, bytes)   -- a valid file's records
--   local rng = fuzz.rng(seed)
--   local bytes, how = fuzz.mutate(base, rng)
--   local outcome, detail = fuzz.run(path, { args = '--format=json' })
--     outcome: 'ok' (exit 0), 'refused' (exit 1 with `FILE: byte N: ...`),
--     'rejected' (exit 1 with another message of one line: `--diff` says
--     a file whose magic changed is not a heap snapshot), 'crash' (a
--     signal), 'hang' (the time limit), 'uncaught' (any other failure: a
--     traceback, a Lua error's position, out of memory)
--   fuzz.bases()   -- valid snapshots built byte by byte
--   fuzz.objects_later(base, rng)  -- the same graph, objects moved later
--
-- A mutation is one to three of: bytes changed, the file cut, bytes
-- inserted, a record moved, duplicated or deleted, the records shuffled
-- or reversed, a number of a record replaced by an extreme one or by an
-- object's address (lying counts, sizes, lengths and references), the
-- epilogue's counts changed.  Changes that keep the records whole give
-- the epilogue the right counts half the time, so that the reader's
-- check of the counts does not refuse them all.

local heap = require('memprof.read.heap_snapshot')
local H = require('helpers.heap_builder')
local graphs = require('helpers.heap_graphs')

local M = {}

local char, byte, sub, concat = string.char, string.byte, string.sub,
  table.concat
local floor = math.floor

-- The Park-Miller generator: the same cases on every build and host.
function M.rng(seed)
  local x = seed % 2147483646 + 1
  local r = {}
  -- An integer from lo to hi.
  function r.int(lo, hi)
    x = x * 16807 % 2147483647
    return lo + x % (hi - lo + 1)
  end
  function r.pick(list) return list[r.int(1, #list)] end
  return r
end

local function uleb(n)
  local out = {}
  repeat
    local b = n % 128
    n = (n - b) / 128
    out[#out + 1] = char(n > 0 and b + 128 or b)
  until n == 0
  return concat(out)
end

-- Numbers a field may lie with, as ULEB128 bytes: the edges of the
-- reader's and the graph's integers, and the widest ULEB128 numbers.
local EXTREMES = {
  uleb(0), uleb(1), uleb(127), uleb(128), uleb(255), uleb(65536),
  uleb(2 ^ 31 - 1), uleb(2 ^ 31), uleb(2 ^ 32), uleb(2 ^ 32 + 1),
  uleb(2 ^ 53), uleb(2 ^ 53 + 2),
  string.rep('\255', 9) .. '\1', -- 2^64 - 1
  string.rep('\255', 10),        -- no end within 10 bytes
}

-- A valid file split into its header, records and epilogue, with the
-- objects' addresses (the numbers a reference may be given instead).
function M.parse(name, bytes)
  local path = os.tmpname()
  local f = assert(io.open(path, 'wb'))
  f:write(bytes)
  f:close()
  local r = heap.open(path)
  local starts, addrs = {}, {}
  local last
  while true do
    local at = r.base + r.pos - 1
    local rec, addr = r:next_values()
    if rec == nil then
      last = at + 1
      break
    end
    starts[#starts + 1] = at
    if rec == 'object' then addrs[#addrs + 1] = addr end
  end
  local epilogue = r.epilogue
  r:close()
  os.remove(path)
  local records = {}
  for i, at in ipairs(starts) do
    records[i] = sub(bytes, at + 1, (starts[i + 1] or last - 1))
  end
  return { name = name, bytes = bytes,
    header = sub(bytes, 1, (starts[1] or last - 1)),
    records = records, addrs = addrs,
    epilogue = sub(bytes, last), c_bytes = epilogue.c_bytes }
end

-- The epilogue counting the records' objects and references.
local function epilogue_of(base, records)
  local objects, refs = 0, 0
  for _, rec in ipairs(records) do
    if byte(rec, 1) == 1 then objects = objects + 1 else refs = refs + 1 end
  end
  return char(0x7f) .. uleb(objects) .. uleb(refs) .. uleb(base.c_bytes) ..
    'end'
end

local function copy(list)
  local out = {}
  for i, v in ipairs(list) do out[i] = v end
  return out
end

-- The ULEB128 numbers of a record after its tag, as { start, stop }
-- (a text's bytes are cut into numbers too: a lie may land in one).
local function numbers(rec)
  local out, i = {}, 2
  while i <= #rec do
    local j = i
    while j < #rec and byte(rec, j) >= 0x80 do j = j + 1 end
    out[#out + 1] = { i, j }
    i = j + 1
  end
  return out
end

local function lie(base, rec, rng)
  local spots = numbers(rec)
  if #spots == 0 then return rec end
  local spot = rng.pick(spots)
  local value
  if #base.addrs > 0 and rng.int(1, 3) == 1 then
    value = uleb(rng.pick(base.addrs))
  else
    value = rng.pick(EXTREMES)
  end
  return sub(rec, 1, spot[1] - 1) .. value .. sub(rec, spot[2] + 1)
end

-- Mutations of the records that keep them whole: (records, rng) ->
-- records.
local RECORD_CHANGES = {
  move = function(records, rng)
    local out = copy(records)
    local rec = table.remove(out, rng.int(1, #out))
    table.insert(out, rng.int(1, #out + 1), rec)
    return out
  end,
  shuffle = function(records, rng)
    local out = copy(records)
    for i = #out, 2, -1 do
      local j = rng.int(1, i)
      out[i], out[j] = out[j], out[i]
    end
    return out
  end,
  reverse = function(records)
    local out = {}
    for i = #records, 1, -1 do out[#out + 1] = records[i] end
    return out
  end,
  duplicate = function(records, rng)
    local out = copy(records)
    table.insert(out, rng.int(1, #out + 1), out[rng.int(1, #out)])
    return out
  end,
  delete = function(records, rng)
    local out = copy(records)
    table.remove(out, rng.int(1, #out))
    return out
  end,
}

-- Mutations of the bytes: (bytes, rng) -> bytes.
local BYTE_CHANGES = {
  flip = function(s, rng)
    for _ = 1, rng.int(1, 4) do
      local i = rng.int(1, #s)
      s = sub(s, 1, i - 1) .. char(rng.int(0, 255)) .. sub(s, i + 1)
    end
    return s
  end,
  cut = function(s, rng) return sub(s, 1, rng.int(0, #s - 1)) end,
  insert = function(s, rng)
    local parts = {}
    for i = 1, rng.int(1, 16) do parts[i] = char(rng.int(0, 255)) end
    local i = rng.int(1, #s + 1)
    return sub(s, 1, i - 1) .. concat(parts) .. sub(s, i)
  end,
  counts = function(s, rng)
    local last = #s - 3
    while last > 1 and byte(s, last) ~= 0x7f do last = last - 1 end
    return sub(s, 1, last) .. rng.pick(EXTREMES) .. rng.pick(EXTREMES) ..
      uleb(0) .. 'end'
  end,
}

M.KINDS = { 'move', 'shuffle', 'reverse', 'duplicate', 'delete', 'lie',
  'flip', 'cut', 'insert', 'counts' }

-- One to three mutations of a valid file; its bytes, and the mutations'
-- names joined by '+'.
function M.mutate(base, rng)
  local records, names = base.records, {}
  local kept_whole, bytes = true, nil
  for _ = 1, rng.int(1, 3) do
    local kind = rng.pick(M.KINDS)
    names[#names + 1] = kind
    if RECORD_CHANGES[kind] and kept_whole and #records > 0 then
      records = RECORD_CHANGES[kind](records, rng)
    elseif kind == 'lie' and kept_whole and #records > 0 then
      records = copy(records)
      local i = rng.int(1, #records)
      records[i] = lie(base, records[i], rng)
    else
      if kept_whole then
        local epilogue = rng.int(1, 2) == 1 and base.epilogue or
          epilogue_of(base, records)
        bytes = base.header .. concat(records) .. epilogue
        kept_whole = false
      end
      bytes = (BYTE_CHANGES[kind] or BYTE_CHANGES.flip)(bytes, rng)
    end
  end
  if kept_whole then
    local epilogue = rng.int(1, 2) == 1 and base.epilogue or
      epilogue_of(base, records)
    bytes = base.header .. concat(records) .. epilogue
  end
  return bytes, concat(names, '+')
end

-- The file with one to three object records moved later, past
-- references from them: the same graph, so the same report.
function M.objects_later(base, rng)
  local records = copy(base.records)
  for _ = 1, rng.int(1, 3) do
    local objects = {}
    for i, rec in ipairs(records) do
      if byte(rec, 1) == 1 and i < #records then objects[#objects + 1] = i end
    end
    local i = rng.pick(objects)
    table.insert(records, rng.int(i + 1, #records), table.remove(records, i))
  end
  return base.header .. concat(records) .. base.epilogue
end

-- ---- Valid files to start from -------------------------------------------

-- A list `depth` deep under registry.list (each node { next = ... }, its
-- key string '"next"' once).
function M.list(depth)
  local b = H.new()
  local registry = b:table(100)
  b:root('registry', registry)
  local key = b:string('next', 28)
  local node = b:table(56, { nodes = 1 })
  b:named(registry, 'list', node, 28)
  for _ = 2, depth do
    local nxt = b:table(56, { nodes = 1 })
    b:key(node, key)
    b:field(node, key, nxt)
    node = nxt
  end
  return b
end

-- A cache of `n` strings and tables that refer to each other in a cycle.
local function cache_and_cycle(n)
  local b = H.new()
  local registry = b:table(100)
  b:root('registry', registry)
  local cache = b:table(64 + 16 * n, { asize = n + 1 })
  b:named(registry, 'cache', cache, 30)
  for i = 1, n do b:index(cache, i, b:string('entry ' .. i, 40)) end
  local a, c = b:table(40), b:table(40)
  b:named(registry, 'a', a, 24)
  b:by_key(a, c, c)
  b:index(c, -1, a)
  b:upvalue_value(b:upvalue(24), a)
  local th = b:thread(200, 20, 3)
  b:root('main thread', th)
  b:stack(th, c, 1, 0, '')
  return b
end

-- The valid files built byte by byte the mutations start from.
function M.bases()
  return {
    M.parse('known', graphs.known():bytes()),
    M.parse('list', M.list(40):bytes()),
    M.parse('cache', cache_and_cycle(24):bytes()),
  }
end

-- ---- Runs ------------------------------------------------------------------

local function read_all(path)
  local f = io.open(path, 'rb')
  if not f then return '' end
  local s = f:read('*a')
  f:close()
  return s
end

M.TIMEOUT = 20
-- Each child's address space (KiB): a reporter that ran away fails as
-- out of memory, not the machine.
M.MEMORY_KB = 4 * 1024 * 1024

-- Runs memprof-report on `path` in a child (opts.args: its options
-- before the file; opts.lua: the command that runs it, default luajit;
-- opts.timeout in seconds; opts.output: where its output goes); returns the outcome and the first line of
-- its errors (see the top of this file).
function M.run(path, opts)
  opts = opts or {}
  local err = path .. '.err'
  local command = string.format('ulimit -v %d; timeout -k 2 %d %s ' ..
    'bin/memprof-report %s %s >%s 2>%s; echo $?', M.MEMORY_KB,
    opts.timeout or M.TIMEOUT, opts.lua or 'luajit', opts.args or '', path,
    opts.output or '/dev/null', err)
  local p = io.popen(command)
  local code = tonumber(p:read('*a'):match('%d+'))
  p:close()
  local text = read_all(err)
  os.remove(err)
  local line = text:match('^[^\n]*')
  if code == 0 then
    return 'ok', line
  elseif code == 124 or code == 137 then
    return 'hang', line
  elseif code == nil or code > 128 then
    return 'crash', string.format('exit %s: %s', tostring(code), line)
  end
  -- One line of the program's, not a Lua error's (a traceback, a
  -- `file.lua:N:` position, out of memory).
  local plain = path:gsub('%p', '%%%0')
  if code ~= 1 or text:find('\n.', 1) or text:find('traceback', 1, true) or
    line:find('%.lua:%d+:') or line:find('not enough memory', 1, true) or
    not line:match('^memprof%-report: .') then
    return 'uncaught', text
  end
  if line:match('^memprof%-report: ' .. plain .. ': byte %d+: .') then
    return 'refused', line
  end
  return 'rejected', line
end

return M
