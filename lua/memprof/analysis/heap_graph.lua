-- memprof.analysis.heap_graph: the object graph of a heap snapshot
-- (docs/heap-format.md) in C arrays indexed by node and by reference (no
-- table per object), so that memory is proportional to objects and
-- references; a virtual root (node 1) whose edges are the snapshot's
-- roots; weak references are not edges (they hold nothing), unless a
-- writer of the whole graph keeps them (g.weak).
--
--   local G = require('memprof.analysis.heap_graph')
--   local g = G.new(name)        -- name: the file, for messages
--   G.add_object(g, addr, type, size, text, offset, firstline)  -- first
--                                -- pass (firstline: a prototype's)
--   G.count_ref(g, from, weak, offset)
--   G.start_refs(g)              -- between the passes
--   G.add_ref(g, from, to, kind, weak, a, b, c, offset)  -- second pass
--   G.finish(g)                  -- the rows of references
--   G.ref_of(g, kind_code, name) -> a reference's kind and name
--   G.text_of(g, addr)           -- the kept text of a string object

local heap = require('memprof.read.heap_snapshot')
local ffi = require('ffi')
local tobit = require('bit').tobit
local address_map = require('memprof.analysis.address_map')
local intern = require('memprof.record').intern

local format = string.format

local M = {}

-- Texts of strings longer than this are not kept (a field's name longer
-- than it is shown by its start).
local KEEP_TEXT = 64

local ENTRY = { field = true, index = true, by_key = true, by_number = true,
  by_bool = true, by_lightud = true }


-- The arrays are C arrays (ffi.new: in the Lua heap, but one object each,
-- which the collector does not look into), grown by doubling while the
-- objects are read; node 1 is the virtual root, node i + 1 the i-th
-- object.  The references are read in a second pass over the records,
-- once every object has its node, straight into compressed rows by
-- source node: succ[e] (target node), rkind[e] (kind number) and rname[e]
-- (its name in 32 bits: a number, a key's node, or with a flag on the kind
-- the index of a text in g.names or of a wider number in g.wide) for e in
-- first[v] .. first[v + 1] - 1.  Weak references are not kept.

local KIND_CODE = {}
for code, kind in ipairs(heap.KINDS) do KIND_CODE[kind] = code end
local KIND = heap.KINDS
-- A kind number's flags (the kinds are numbered below 32): its name is
-- the index of a text in g.names, or of a number in g.wide (one that is
-- not a 32-bit integer, or a key that is no object of the file).
local NAMED, WIDE = 0x40, 0x20
assert(#KIND < WIDE, 'reference kinds must be numbered below 32')
local TYPE_CODE = {}
local TYPES = heap.TYPES
for code, t in pairs(TYPES) do TYPE_CODE[t] = code end

local ENTRY_CODE = {}
for kind in pairs(ENTRY) do
  ENTRY_CODE[KIND_CODE[kind]] = true
  ENTRY_CODE[KIND_CODE[kind] + WIDE] = true
end
-- The kinds whose name is a key object's address, kept as its node.
local KEYED = { field = true, by_key = true }

local DOUBLES, INT32S, BYTES = ffi.typeof('double[?]'),
  ffi.typeof('int32_t[?]'), ffi.typeof('uint8_t[?]')

-- A copy of the first `used` elements of arr in an array of `size`.
local function resized(ctype, arr, used, size, width)
  local out = ctype(size)
  if used > 0 then ffi.copy(out, arr, used * width) end
  return out
end

-- The most objects, references and bytes of kept texts a graph holds:
-- its arrays are indexed by 32-bit numbers (node 1 is the root, and a
-- row's end is one past its last entry).
local MOST = 2 ^ 31 - 3

-- Refuses the file at byte `at` (as memprof.read.heap_snapshot does).
local function refuse(g, at, message)
  error(format('%s: byte %d: %s', g.name, at or 0, message), 0)
end

local function new_graph(name)
  local cap = 1024
  return { name = name, n = 1, cap = cap, node = address_map.index(),
    addr = DOUBLES(cap), type = BYTES(cap), size = DOUBLES(cap),
    toff = INT32S(cap), tlen = BYTES(cap), count = INT32S(cap + 1),
    text = BYTES(4096), text_cap = 4096, text_used = 0, nrefs = 0,
    later = {}, names = {}, name_ids = {}, wide = {},
    firstline = {}, name_level = {}, frame_fn = {}, frame_line = {},
    frame_text = {} }
end

local function grow_nodes(g)
  local cap, used = g.cap * 2, g.n + 1
  g.addr = resized(DOUBLES, g.addr, used, cap, 8)
  g.size = resized(DOUBLES, g.size, used, cap, 8)
  g.type = resized(BYTES, g.type, used, cap, 1)
  g.tlen = resized(BYTES, g.tlen, used, cap, 1)
  g.toff = resized(INT32S, g.toff, used, cap, 4)
  g.count = resized(INT32S, g.count, used, cap + 1, 4)
  g.cap = cap
end

-- Keeps a string's text (tlen: its length plus one; 0: not kept).
local function keep_text(g, v, text, offset)
  local len = #text
  local at = g.text_used
  if at + len > MOST then
    refuse(g, offset, format('the texts of strings exceed %d bytes, the ' ..
      'most this reporter keeps', MOST))
  end
  if at + len > g.text_cap then
    local cap = g.text_cap
    while at + len > cap do cap = cap * 2 end
    g.text = resized(BYTES, g.text, at, cap, 1)
    g.text_cap = cap
  end
  ffi.copy(g.text + at, text, len)
  g.toff[v], g.tlen[v] = at, len + 1
  g.text_used = at + len
end

local function add_object(g, addr, t, size, text, offset, firstline)
  local v = g.n + 1
  if v > MOST then
    refuse(g, offset, format('more than %d objects, the most this ' ..
      'reporter reads', MOST - 1))
  end
  if v >= g.cap then grow_nodes(g) end
  g.n = v
  g.addr[v], g.type[v], g.size[v] = addr, TYPE_CODE[t], size
  g.node:put(g.addr, v)
  if t == 'proto' then g.firstline[v] = firstline end
  if text then
    if #text <= KEEP_TEXT then
      keep_text(g, v, text, offset)
    elseif g.prefix then
      g.prefix[v] = text:sub(1, KEEP_TEXT)
    end
  end
end

-- The text of the string object at addr, if it was kept.
local function text_of(g, addr)
  local v = g.node:get(g.addr, addr)
  if v == nil or g.tlen[v] == 0 then return nil end
  return ffi.string(g.text + g.toff[v], g.tlen[v] - 1)
end

-- The first pass counts each source's strong references; those of a
-- source whose record has not come yet (the format puts it first, a file
-- may not) are counted by its address, and added once every object is
-- read (count_later), so that the rows fit whatever the order.
local function count_ref(g, from, weak, offset)
  g.nrefs = g.nrefs + 1
  if g.nrefs > MOST then
    refuse(g, offset, format('more than %d references, the most this ' ..
      'reporter reads', MOST))
  end
  if weak then return end
  local v = from == 0 and 1 or g.node:get(g.addr, from)
  if v then
    g.count[v] = g.count[v] + 1
  else
    g.later[from] = (g.later[from] or 0) + 1
  end
end

local function count_later(g)
  for from, n in pairs(g.later) do
    local v = g.node:get(g.addr, from)
    if v then g.count[v] = g.count[v] + n end
  end
  g.later = nil
end

-- Where each node's run starts in rows of count[v] entries for nodes
-- 1 .. n (first[n + 1] is one past the last), and a copy to fill by.
local function row_starts(count, n)
  local first, fill = INT32S(n + 2), INT32S(n + 2)
  local at = 1
  for v = 1, n do
    first[v], fill[v] = at, at
    at = at + count[v]
  end
  first[n + 1] = at
  return first, fill
end

-- Frees the arrays the last phase dropped before the next one takes its
-- own, so that the process holds one phase's arrays, not the collector's
-- arrears (a full collection costs little here: the big arrays are C
-- data, which the collector does not look into).
local function release()
  collectgarbage()
end

-- After the objects: the node arrays cut to the nodes, and the rows of
-- references made for the second pass.
local function start_refs(g)
  local used = g.n + 1
  g.addr = resized(DOUBLES, g.addr, used, used, 8)
  g.size = resized(DOUBLES, g.size, used, used, 8)
  g.type = resized(BYTES, g.type, used, used, 1)
  g.tlen = resized(BYTES, g.tlen, used, used, 1)
  g.toff = resized(INT32S, g.toff, used, used, 4)
  g.text = resized(BYTES, g.text, g.text_used, g.text_used + 1, 1)
  g.cap, g.text_cap = used, g.text_used + 1
  count_later(g)
  local first, fill = row_starts(g.count, g.n)
  g.count = nil
  release()
  local m = first[g.n + 1]
  g.first, g.fill = first, fill
  g.succ, g.rkind, g.rname = INT32S(m), BYTES(m), INT32S(m)
end

-- The number of a text among the names of references.
local function name_id(g, text)
  return (intern(g.names, g.name_ids, text))
end

-- The number of a local's name in the frame of `level`: a name of its
-- own per level (g.name_level), so that a path can name the frame's
-- function; g.names holds the local's name alone.
local function local_id(g, text, level)
  local key = text .. '\0' .. level
  local id = g.name_ids[key]
  if id == nil then
    id = #g.names + 1
    g.names[id], g.name_ids[key], g.name_level[id] = text, id, level
  end
  return id
end

-- Notes the function of thread v's frame of `level` (node w) and the line
-- it runs (nil: not known).
local function note_frame(g, v, level, w, line)
  local fns, lines = g.frame_fn[v], g.frame_line[v]
  if fns == nil then
    fns, lines = {}, {}
    g.frame_fn[v], g.frame_line[v] = fns, lines
  end
  fns[level], lines[level] = w, line
end

-- The second pass puts each strong reference to an object in its row,
-- with its name, one value: what a path shows of it.  A row already full
-- means that the file changed between the passes: refused, never written
-- past.
local function add_ref(g, from, to, kind, weak, a, b, c, offset)
  if weak and not g.weak then return end
  local v = from == 0 and 1 or g.node:get(g.addr, from)
  local w = g.node:get(g.addr, to)
  if not (v and w) then return end
  if not weak and g.fill[v] >= g.first[v + 1] then
    refuse(g, offset, 'more references from an object than when the ' ..
      'file was first read: it changed while it was read')
  end
  local code = KIND_CODE[kind]
  local name, level = a, nil
  if kind == 'upvalue' then
    name = b ~= '' and b or a
  elseif kind == 'stack' then
    name, level = c ~= '' and c or a, b
  elseif kind == 'frame_function' then
    name = b
    note_frame(g, v, b, w, c)
  elseif kind == 'by_bool' then
    name = a and 1 or 0
  end
  name = name or 0
  local key = KEYED[kind] and g.node:get(g.addr, name)
  if type(name) == 'string' then
    code, name = code + NAMED,
      level and local_id(g, name, level) or name_id(g, name)
  elseif key then
    name = key
  elseif KEYED[kind] or kind == 'by_number' or name ~= tobit(name) then
    local wide = g.wide
    wide[#wide + 1] = name
    code, name = code + WIDE, #wide
  end
  if weak then
    local list = g.weak
    list[#list + 1], list[#list + 2], list[#list + 3], list[#list + 4] =
      v, w, code, name
    return
  end
  local e = g.fill[v]
  g.fill[v] = e + 1
  g.succ[e], g.rkind[e], g.rname[e] = w, code, name
end

-- Closes the rows' gaps left by references to no object (none in a
-- well-formed file: only weak references may lack their target).
local function finish_graph(g)
  local first, fill, n = g.first, g.fill, g.n
  local succ, rkind, rname = g.succ, g.rkind, g.rname
  local at = 1
  for v = 1, n do
    local from, to = first[v], fill[v]
    first[v] = at
    for e = from, to - 1 do
      succ[at], rkind[at], rname[at] = succ[e], rkind[e], rname[e]
      at = at + 1
    end
  end
  first[n + 1] = at
  g.fill = nil
  return g
end

-- The kind and the name of a reference from its kind number and name as
-- the rows keep them (a key as its address).
local function ref_of(g, kind_code, name)
  if kind_code >= NAMED then
    return KIND[kind_code - NAMED], g.names[name]
  elseif kind_code >= WIDE then
    return KIND[kind_code - WIDE], g.wide[name]
  end
  local kind = KIND[kind_code]
  if KEYED[kind] then return kind, g.addr[name] end
  if kind == 'by_bool' then return kind, name == 1 end
  return kind, name
end


M.ENTRY, M.ENTRY_CODE, M.KIND_CODE, M.KIND, M.WIDE = ENTRY, ENTRY_CODE,
  KIND_CODE, KIND, WIDE
M.TYPE_CODE, M.TYPES = TYPE_CODE, TYPES
M.DOUBLES, M.INT32S, M.BYTES = DOUBLES, INT32S, BYTES
M.row_starts, M.release = row_starts, release
M.new, M.add_object, M.text_of, M.count_ref = new_graph, add_object,
  text_of, count_ref
M.start_refs, M.add_ref, M.finish, M.ref_of = start_refs, add_ref,
  finish_graph, ref_of

return M
