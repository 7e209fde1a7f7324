-- What holds the memory of a heap snapshot (docs/heap-format.md): the
-- dominator tree of its object graph, each object's retained size (the
-- bytes that would be freed if it went), and the paths from a root that
-- hold the most, grouped by pattern.
--
-- The graph has a virtual root whose edges are the snapshot's roots; weak
-- references are not edges (they hold nothing).  Immediate dominators are
-- computed by the algorithm of Lengauer and Tarjan: near-linear time
-- whatever the graph's depth; path patterns are kept as a tree
-- (memprof.analysis.path_patterns), their texts made when read.  The
-- graph is kept in C arrays indexed by node and by reference (no table per
-- object), so memory is proportional to objects and references.
--
--   local dom = require('memprof.analysis.dominators')
--   local a = dom.analyse_file(path)   -- reads the file twice, as a stream
--   local a = dom.analyse(require('memprof.read.heap').load(path))
--   a.retained[addr], a.idom[addr], a.pattern[addr] (computed when read:
--   not tables to iterate), a.path(addr), a.objects() (an iterator of
--   each reachable object's addr, pattern and retained size, in the
--   file's order), a.groups (largest first), a.total (bytes reachable),
--   a.roots, a.references, a.header and a.epilogue (the file's),
--   a.patterns (the patterns' texts by number, made when read: each
--   group has its number as pattern_id, and its text as pattern),
--   a.pattern_before(x, y) (whether pattern x sorts before y, by text),
--   a.with_pattern(row) (row.pattern: row.pattern_id's text, made when
--   read), a.pattern_count, by pattern number: a.group_objects and
--   a.group_retained (C arrays), a.group_types(id) (the objects by type
--   name), a.nodes: the objects by node
--   2 .. nodes.n, in C arrays: addr, type (the type byte, named by
--   nodes.TYPES), size, pattern (its number; 0: unreachable), retained
--   dom.sort_largest(list, count, name) -- sorts by list[i][count]
--   descending, ties by list[i][name] (indices in numeric order:
--   path_patterns.order_key)

local heap = require('memprof.read.heap')
local ffi = require('ffi')
local tobit = require('bit').tobit
local node_index = require('memprof.analysis.node_index')
local path_patterns = require('memprof.analysis.path_patterns')

local format = string.format

local M = {}

-- Tables of more than this many entries of one type are shown as `[*]` in
-- patterns: the entries of a cache are one group.
M.MANY = 16

-- Texts of strings longer than this are not kept (a field's name longer
-- than it is shown by its start).
local KEEP_TEXT = 64

-- Sorts `list` largest `count` field first, ties in the order of their
-- `name` field (the groups, the rows of growth, the types of a row).
function M.sort_largest(list, count, name)
  local order = {}
  for _, row in ipairs(list) do
    order[row] = path_patterns.order_key(row[name])
  end
  table.sort(list, function(a, b)
    if a[count] ~= b[count] then return a[count] > b[count] end
    return order[a] < order[b]
  end)
  return list
end

local ENTRY = { field = true, index = true, by_key = true, by_number = true,
  by_bool = true, by_lightud = true }

-- ---- The graph ----------------------------------------------------------

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

-- Refuses the file at byte `at` (as memprof.read.heap does).
local function refuse(g, at, message)
  error(format('%s: byte %d: %s', g.name, at or 0, message), 0)
end

local function new_graph(name)
  local cap = 1024
  return { name = name, n = 1, cap = cap, node = node_index.new(),
    addr = DOUBLES(cap), type = BYTES(cap), size = DOUBLES(cap),
    toff = INT32S(cap), tlen = BYTES(cap), count = INT32S(cap + 1),
    text = BYTES(4096), text_cap = 4096, text_used = 0, nrefs = 0,
    later = {}, names = {}, name_ids = {}, wide = {} }
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

local function add_object(g, addr, t, size, text, offset)
  local v = g.n + 1
  if v > MOST then
    refuse(g, offset, format('more than %d objects, the most this ' ..
      'reporter reads', MOST - 1))
  end
  if v >= g.cap then grow_nodes(g) end
  g.n = v
  g.addr[v], g.type[v], g.size[v] = addr, TYPE_CODE[t], size
  g.node:put(g.addr, v)
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
  local id = g.name_ids[text]
  if not id then
    id = #g.names + 1
    g.names[id], g.name_ids[text] = text, id
  end
  return id
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
  local name = a
  if kind == 'upvalue' then
    name = b ~= '' and b or a
  elseif kind == 'stack' then
    name = c ~= '' and c or a
  elseif kind == 'frame_function' then
    name = b
  elseif kind == 'by_bool' then
    name = a and 1 or 0
  end
  name = name or 0
  local key = KEYED[kind] and g.node:get(g.addr, name)
  if type(name) == 'string' then
    code, name = code + NAMED, name_id(g, name)
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

-- ---- Dominators ---------------------------------------------------------

-- A depth-first walk from the root (an explicit stack: the graph can be
-- deep): the reachable nodes' preorder numbers (pre[v], 0: not reached),
-- the nodes by preorder (vertex[1 .. count]) and their parents in the
-- walk's tree, and the nodes in postorder (order[1 .. count]).
local function walk(g)
  local first, succ, n = g.first, g.succ, g.n
  local pre, vertex, parent = INT32S(n + 1), INT32S(n + 1), INT32S(n + 1)
  local order = INT32S(n + 1)
  local stack, next_edge = INT32S(n + 1), INT32S(n + 1)
  stack[1], next_edge[1], pre[1], vertex[1] = 1, first[1], 1, 1
  local top, k, count = 1, 0, 1
  while top > 0 do
    local v = stack[top]
    local e = next_edge[top]
    if e < first[v + 1] then
      next_edge[top] = e + 1
      local w = succ[e]
      if pre[w] == 0 then
        count = count + 1
        pre[w], vertex[count], parent[w] = count, w, v
        top = top + 1
        stack[top], next_edge[top] = w, first[w]
      end
    else
      k = k + 1
      order[k] = v
      top = top - 1
    end
  end
  return { pre = pre, vertex = vertex, parent = parent, order = order,
    count = count }
end

-- Predecessors of the reachable nodes, in compressed rows.
local function predecessors(g, pre)
  local n, first, succ = g.n, g.first, g.succ
  local count = INT32S(n + 1)
  for v = 1, n do
    if pre[v] ~= 0 then
      for e = first[v], first[v + 1] - 1 do
        local w = succ[e]
        count[w] = count[w] + 1
      end
    end
  end
  local pfirst, fill = row_starts(count, n)
  local pred = INT32S(pfirst[n + 1])
  for v = 1, n do
    if pre[v] ~= 0 then
      for e = first[v], first[v + 1] - 1 do
        local w = succ[e]
        pred[fill[w]] = v
        fill[w] = fill[w] + 1
      end
    end
  end
  return pfirst, pred
end

-- The forest of processed nodes (Lengauer and Tarjan's "simple" version:
-- path compression, no balancing): eval(v) is the node of least
-- semidominator on the path from v up to its tree's root, the path
-- compressed on the way (an explicit stack: a path can be as long as the
-- graph is deep).  Loops here are functions that call themselves in tail
-- position: LuaJIT gives up compiling a loop whose body holds loops of
-- its own (as node_index.lua's probe).
local function forest(n, semi)
  local ancestor, label, stack = INT32S(n + 1), INT32S(n + 1), INT32S(n + 1)
  -- Pushes the path from u up to the node below its tree's root.
  local function climb(u, top)
    if ancestor[ancestor[u]] == 0 then return top end
    stack[top + 1] = u
    return climb(ancestor[u], top + 1)
  end
  -- Compresses the pushed path, the node nearest the root first.
  local function unwind(top)
    if top == 0 then return end
    local x = stack[top]
    local a = ancestor[x]
    if semi[label[a]] < semi[label[x]] then label[x] = label[a] end
    ancestor[x] = ancestor[a]
    return unwind(top - 1)
  end
  local function eval(v)
    local a = ancestor[v]
    if a == 0 then return v end
    if ancestor[a] ~= 0 then unwind(climb(v, 0)) end
    return label[v]
  end
  return ancestor, label, eval
end

-- Immediate dominators by node (the root's is itself; 0: not reached), by
-- the algorithm of Lengauer and Tarjan ("A Fast Algorithm for Finding
-- Dominators in a Flowgraph"): near-linear time whatever the graph's
-- shape (the iterative algorithm is quadratic in the depth of a list
-- whose nodes share a key string).  Semidominators are preorder numbers.
local function dominators(g, w)
  local pfirst, pred = predecessors(g, w.pre)
  local n, vertex, parent = g.n, w.vertex, w.parent
  local semi = INT32S(n + 1)
  local ancestor, label, eval = forest(n, semi)
  local idom = INT32S(n + 1)
  local bucket, bnext = INT32S(n + 1), INT32S(n + 1)
  -- The least semidominator of the evaluated predecessors e .. stop - 1.
  local function least(e, stop, s)
    if e >= stop then return s end
    local su = semi[eval(pred[e])]
    return least(e + 1, stop, su < s and su or s)
  end
  -- Each node y of a bucket of parent p: its dominator, or a node with
  -- the same one (settled in the last pass).
  local function settle(y, p)
    if y == 0 then return end
    local u = eval(y)
    idom[y] = semi[u] < semi[y] and u or p
    return settle(bnext[y], p)
  end
  for i = 1, w.count do
    local v = vertex[i]
    semi[v], label[v] = i, v
  end
  for i = w.count, 2, -1 do
    local x = vertex[i]
    semi[x] = least(pfirst[x], pfirst[x + 1], semi[x])
    local s = vertex[semi[x]]
    bnext[x], bucket[s] = bucket[s], x
    local p = parent[x]
    ancestor[x] = p
    local y = bucket[p]
    bucket[p] = 0
    settle(y, p)
  end
  for i = 2, w.count do
    local x = vertex[i]
    if idom[x] ~= vertex[semi[x]] then idom[x] = idom[idom[x]] end
  end
  idom[1] = 1
  return idom
end

-- ---- Paths ---------------------------------------------------------------

local function quote(text)
  return (format('%q', text):gsub('\\\n', '\\n'))
end

local function is_name(text)
  return text:match('^[%a_][%w_]*$') ~= nil
end

-- The step of a path along a reference of `kind` named `name` (to a table
-- entry, its key; to anything else, what the reference is).
local function step(g, kind, name, many, under_loaded)
  if many and ENTRY[kind] then
    return '[*]'
  elseif kind == 'field' then
    local text = text_of(g, name)
    if text == nil then return '[<long string>]' end
    if is_name(text) and not under_loaded then return '.' .. text end
    return '[' .. quote(text) .. ']'
  elseif kind == 'index' then
    return format('[%d]', name)
  elseif kind == 'by_number' then
    return format('[%.17g]', name)
  elseif kind == 'by_bool' then
    return format('[%s]', tostring(name))
  elseif kind == 'by_lightud' then
    return format('[<light userdata 0x%x>]', name)
  elseif kind == 'by_key' then
    local v = g.node:get(g.addr, name)
    return format('[<%s 0x%x>]', v and TYPES[g.type[v]] or 'object', name)
  elseif kind == 'key' then
    return '<key>'
  elseif kind == 'upvalue' then
    return type(name) == 'string' and format('<upvalue %s>', name)
      or format('<upvalue %d>', name)
  elseif kind == 'upvalue_value' then
    return ''
  elseif kind == 'stack' then
    return type(name) == 'string' and format('<local %s>', name)
      or format('<stack slot %d>', name)
  elseif kind == 'frame_function' then
    return format('<function of frame %d>', name)
  elseif kind == 'constant' then
    return format('<constant %d>', name)
  end
  return '<' .. kind .. '>'
end

-- Whether each node is a collection whose entries are one group (1): more
-- than M.MANY entries, and either nine in ten of them by number (an
-- array: of records, of closures such as a list of listeners, of
-- anything) or nine in ten of them objects of one type other than
-- functions (a cache of strings; not a module's or the globals' table,
-- whose entries, functions by name, are names of their own).
local FUNCTION = TYPE_CODE['function']
local BY_NUMBER = {}
for _, kind in ipairs({ 'index', 'by_number' }) do
  BY_NUMBER[KIND_CODE[kind]], BY_NUMBER[KIND_CODE[kind] + WIDE] = true, true
end
local function collections(g)
  local first, rkind, succ, typ = g.first, g.rkind, g.succ, g.type
  local out, types = BYTES(g.n + 1), INT32S(256)
  for v = 1, g.n do
    local n, numbered = 0, 0
    for e = first[v], first[v + 1] - 1 do
      local code = rkind[e]
      if ENTRY_CODE[code] then
        n = n + 1
        if BY_NUMBER[code] then numbered = numbered + 1 end
      end
    end
    if n > M.MANY and numbered * 10 >= n * 9 then
      out[v] = 1
    elseif n > M.MANY then
      ffi.fill(types, 256 * 4)
      for e = first[v], first[v + 1] - 1 do
        if ENTRY_CODE[rkind[e]] then
          local t = typ[succ[e]]
          types[t] = types[t] + 1
        end
      end
      local most = 0
      for t = 0, 255 do
        if t ~= FUNCTION and types[t] > most then most = types[t] end
      end
      out[v] = most * 10 >= n * 9 and 1 or 0
    end
  end
  return out
end

-- The row entries from node v of a kind (and a field's key text).
local function refs_from(g, v, kind, key)
  local out = {}
  if v == nil then return out end
  for e = g.first[v], g.first[v + 1] - 1 do
    local k, name = ref_of(g, g.rkind[e], g.rname[e])
    if k == kind and (key == nil or text_of(g, name) == key) then
      out[#out + 1] = e
    end
  end
  return out
end

-- The names that start paths: the loaded modules by their names, then the
-- roots. registry._LOADED is `package.loaded` and its _G is `_G`.
local function starts(g)
  local names, queue = {}, {}
  local function add(v, name)
    if v and not names[v] then
      names[v] = name
      queue[#queue + 1] = v
    end
  end
  local registry = refs_from(g, 1, 'root')
  local loaded
  for _, e in ipairs(registry) do
    if g.names[g.rname[e]] == 'registry' then
      loaded = refs_from(g, g.succ[e], 'field', '_LOADED')[1]
    end
  end
  if loaded then
    local at = g.succ[loaded]
    add(at, 'package.loaded')
    for _, e in ipairs(refs_from(g, at, 'field')) do
      local _, key = ref_of(g, g.rkind[e], g.rname[e])
      local name = text_of(g, key) or '?'
      add(g.succ[e], name == '_G' and '_G' or
        'package.loaded[' .. quote(name) .. ']')
    end
  end
  for _, e in ipairs(registry) do add(g.succ[e], g.names[g.rname[e]]) end
  return names, queue, #registry
end

-- Shortest paths from the starts (breadth first): each node's parent on
-- its path (itself for a start, 0 when not reached), the kind and name of
-- the reference from it, and its pattern's number (0: not reached).
local function paths(g)
  local n = g.n
  local many = collections(g)
  local names, list, nroots = starts(g)
  local first, succ, rkind, rname = g.first, g.succ, g.rkind, g.rname
  local parent, via_kind, via_name = INT32S(n + 1), BYTES(n + 1),
    INT32S(n + 1)
  local pid, queue = INT32S(n + 1), INT32S(n + 1)
  -- Patterns by number (1 ..): a node's is its parent's and a step, kept
  -- as such (memprof.analysis.path_patterns), at most one per node.
  local pats = path_patterns.new(n)
  local tail = 0
  for _, v in ipairs(list) do
    parent[v], pid[v] = v, pats:start(names[v])
    tail = tail + 1
    queue[tail] = v
  end
  local head = 1
  while head <= tail do
    local v = queue[head]
    head = head + 1
    local p = pid[v]
    local under_loaded = names[v] == 'package.loaded'
    local is_many = many[v] == 1
    for e = first[v], first[v + 1] - 1 do
      local w = succ[e]
      if parent[w] == 0 then
        local kind, name = ref_of(g, rkind[e], rname[e])
        parent[w], via_kind[w], via_name[w] = v, rkind[e], rname[e]
        pid[w] = pats:child(p, step(g, kind, name, is_many, under_loaded))
        tail = tail + 1
        queue[tail] = w
      end
    end
  end
  return { names = names, parent = parent, via_kind = via_kind,
    via_name = via_name, pid = pid, patterns = pats, roots = nroots }
end

-- The path from a start to node v.
local function path_of(g, p, v)
  local steps = {}
  while p.parent[v] ~= v do
    local u = p.parent[v]
    local kind, name = ref_of(g, p.via_kind[v], p.via_name[v])
    steps[#steps + 1] = step(g, kind, name, false,
      p.names[u] == 'package.loaded')
    v = u
  end
  steps[#steps + 1] = p.names[v]
  local out = {}
  for i = #steps, 1, -1 do out[#out + 1] = steps[i] end
  return table.concat(out)
end

-- ---- The analysis --------------------------------------------------------

-- Groups of objects by pattern, in arrays by pattern number: objects,
-- retained bytes, and the type code of their objects (SEVERAL: more than
-- one type, counted in `several`).  A member dominated by another member
-- (a closure's upvalue object and its value share a pattern) adds no
-- retained bytes of its own: its holder's count them. One group may hold
-- another.
local SEVERAL = 255
local function group_counts(g, order, count, idom, retained, p)
  local n = p.patterns.count
  local objects, bytes, gtype = INT32S(n + 1), DOUBLES(n + 1), BYTES(n + 1)
  local several = {}
  local pid, typ = p.pid, g.type
  for k = 1, count - 1 do
    local v = order[k]
    local id = pid[v]
    if id ~= 0 then
      local t = typ[v]
      if objects[id] == 0 then
        gtype[id] = t
      elseif gtype[id] ~= t and gtype[id] ~= SEVERAL then
        several[id] = { [TYPES[gtype[id]]] = objects[id] }
        gtype[id] = SEVERAL
      end
      if gtype[id] == SEVERAL then
        local types = several[id]
        types[TYPES[t]] = (types[TYPES[t]] or 0) + 1
      end
      objects[id] = objects[id] + 1
      local d = idom[v]
      if d == 1 or pid[d] ~= id then bytes[id] = bytes[id] + retained[v] end
    end
  end
  return { objects = objects, retained = bytes, type = gtype,
    several = several }
end

-- A group's count of objects by type name.
local function group_types(c, id)
  if c.type[id] == SEVERAL then
    local out = {}
    for t, k in pairs(c.several[id]) do out[t] = k end
    return out
  end
  return { [TYPES[c.type[id]]] = c.objects[id] }
end

-- The groups as tables (pattern_id, pattern, objects, retained, types),
-- largest first, ties in the order of the patterns' texts.
local function group_list(c, patterns, texts)
  local meta = { __index = function(row, key)
    if key == 'pattern' then return texts[rawget(row, 'pattern_id')] end
  end }
  local list = {}
  for id = 1, patterns.count do
    if c.objects[id] > 0 then
      list[#list + 1] = setmetatable({ pattern_id = id,
        objects = c.objects[id], retained = c.retained[id],
        types = group_types(c, id) }, meta)
    end
  end
  table.sort(list, function(x, y)
    if x.retained ~= y.retained then return x.retained > y.retained end
    return patterns:before(x.pattern_id, y.pattern_id)
  end)
  return list
end

-- A row's `pattern` made from its pattern_id when read: the texts of a
-- deep graph's patterns together grow as the square of its depth.
local function pattern_rows(patterns)
  local meta = { __index = function(row, key)
    if key == 'pattern' then
      return patterns:text(rawget(row, 'pattern_id'))
    end
  end }
  return function(row) return setmetatable(row, meta) end
end

-- The patterns' texts by number, made when read and kept, each from its
-- parent's (a.patterns, a.pattern, a.objects and a.groups: what compares
-- the patterns of two snapshots reads them all, as it did when every text
-- was made with the analysis).  A report's rows make theirs without
-- keeping them (a.with_pattern): a few of millions.
local function pattern_texts(patterns)
  local parent, step, steps = patterns.parent, patterns.step, patterns.steps
  local function text(memo, id)
    local chain, x = {}, id
    while x ~= 0 and rawget(memo, x) == nil do
      chain[#chain + 1] = x
      x = parent[x]
    end
    local t = x ~= 0 and rawget(memo, x) or ''
    for i = #chain, 1, -1 do
      local y = chain[i]
      t = t .. steps[step[y]]
      rawset(memo, y, t)
    end
    return t
  end
  return setmetatable({}, { __index = function(memo, id)
    if type(id) == 'number' and id >= 1 and id <= patterns.count and
      id % 1 == 0 then
      return text(memo, id)
    end
  end })
end

-- A table whose t[addr] is f(v) for the node v of a reachable object at
-- addr, computed when read (nil for any other address).
local function by_address(g, pid, f)
  return setmetatable({}, { __index = function(_, addr)
    local v = g.node:get(g.addr, addr)
    if v and pid[v] ~= 0 then return f(v) end
    return nil
  end })
end

-- The analysis' result: what the graph keeps for it (the nodes, the
-- texts, each node's dominator, retained size and path), the rows of
-- references dropped.
local function result(g, idom, retained, p, total, counts, with_pattern)
  local pid, set, addr = p.pid, p.patterns, g.addr
  local patterns = pattern_texts(set)
  -- a.groups is made when first read: a deep graph has as many groups
  -- as objects, which a report counts in the arrays below.
  local out = setmetatable({ total = total, roots = p.roots,
    references = g.nrefs, patterns = patterns, pattern_count = set.count,
    group_objects = counts.objects, group_retained = counts.retained,
    nodes = { n = g.n, addr = addr, type = g.type, size = g.size,
      pattern = pid, retained = retained, TYPES = TYPES } },
    { __index = function(t, key)
      if key == 'groups' then
        local list = group_list(counts, set, patterns)
        rawset(t, 'groups', list)
        return list
      end
    end })
  function out.group_types(id) return group_types(counts, id) end
  -- Whether pattern x's text sorts before y's (equal ones by number),
  -- without making the texts; a row given its pattern when read.
  function out.pattern_before(x, y) return set:before(x, y) end
  out.with_pattern = with_pattern
  out.idom = by_address(g, pid, function(v)
    local d = idom[v]
    return d == 1 and 0 or addr[d]
  end)
  out.retained = by_address(g, pid, function(v) return retained[v] end)
  out.pattern = by_address(g, pid, function(v) return patterns[pid[v]] end)
  -- The path from a start to the object at addr, or nil.
  function out.path(a)
    local v = g.node:get(g.addr, a)
    return v and pid[v] ~= 0 and path_of(g, p, v) or nil
  end
  -- The reachable objects in the file's order: addr, pattern, retained.
  function out.objects()
    local v = 1
    return function()
      repeat v = v + 1 until v > g.n or pid[v] ~= 0
      if v > g.n then return nil end
      return addr[v], patterns[pid[v]], retained[v]
    end
  end
  return out
end

-- The nodes in postorder, their immediate dominators and retained sizes.
local function dominator_tree(g)
  local w = walk(g)
  local idom = dominators(g, w)
  local pre, order, count = w.pre, w.order, w.count
  w = nil
  release()
  local n = g.n
  local retained = DOUBLES(n + 1)
  for v = 2, n do retained[v] = pre[v] ~= 0 and g.size[v] or 0 end
  for k = 1, count - 1 do
    local v = order[k]
    local d = idom[v]
    retained[d] = retained[d] + retained[v]
  end
  return order, count, idom, retained
end

-- What a writer of the whole graph reads (analyse_file's keep_graph):
-- the rows of strong references (first, succ, and ref(e): the kind and
-- name of reference e), the weak ones (weak: v, w, kind code, name, four
-- entries each, in the file's order; weak_ref(i) the kind and name of the
-- i-th), the kept text of a string node (text(v); prefix[v]: the first
-- bytes of a longer one), and the last step of each node's path
-- (via(v): nil for a start, else the kind and name of the reference).
local function graph_view(g, p, kept)
  local rkind, rname, weak = kept.rkind, kept.rname, kept.weak
  local view = { first = kept.first, succ = kept.succ, weak = weak,
    prefix = g.prefix, start_names = p.names }
  function view.ref(e) return ref_of(g, rkind[e], rname[e]) end
  function view.weak_ref(i) return ref_of(g, weak[i + 2], weak[i + 3]) end
  function view.text(v)
    if g.tlen[v] == 0 then return nil end
    return ffi.string(g.text + g.toff[v], g.tlen[v] - 1)
  end
  function view.text_of(addr) return text_of(g, addr) end
  function view.type_of(addr)
    local v = g.node:get(g.addr, addr)
    return v and TYPES[g.type[v]]
  end
  function view.via(v)
    if p.parent[v] == v or p.parent[v] == 0 then return nil end
    return ref_of(g, p.via_kind[v], p.via_name[v])
  end
  return view
end

-- Each phase's arrays are dropped, and released, as soon as the next
-- phases need them no more.
local function analyse_graph(g)
  finish_graph(g)
  local order, count, idom, retained = dominator_tree(g)
  local p = paths(g)
  local kept = g.weak and { first = g.first, succ = g.succ, rkind = g.rkind,
    rname = g.rname, weak = g.weak }
  g.first, g.succ, g.rkind, g.rname = nil, nil, nil, nil
  release()
  local counts = group_counts(g, order, count, idom, retained, p)
  local out = result(g, idom, retained, p, retained[1], counts,
    pattern_rows(p.patterns))
  if kept then out.graph = graph_view(g, p, kept) end
  return out
end

-- Reads the records of the snapshot at `path` once for each of the
-- visitors (objects, then references), each a function of a record's
-- values (memprof.read.heap's next_values); returns the reader.
-- The collector's pause while a file is read: the reader makes a string
-- or two per record, garbage at once, and the live data are a few big
-- arrays the collector does not look into, so a cycle costs little and
-- the default pause (200: the heap doubles before a cycle starts) would
-- only let the garbage pile up.
local READING_GC_PAUSE = 100

local function read_file(path, visit_object, visit_ref)
  local r = heap.open(path)
  local pause = collectgarbage('setpause', READING_GC_PAUSE)
  local ok, err = pcall(function()
    while true do
      local rec, x, y, z, a, b, c, d, e = r:next_values()
      if rec == 'object' then
        if visit_object then visit_object(x, y, z, a, b, c, d) end
      elseif rec == 'ref' then
        if visit_ref then visit_ref(x, y, z, a, b, c, d, e) end
      else
        break
      end
    end
  end)
  collectgarbage('setpause', pause)
  r:close()
  if not ok then error(err, 0) end
  return r
end

-- The analysis of the snapshot file at `path`, read as a stream twice (the
-- objects, then the references): by address, each reachable object's
-- immediate dominator (0: the root), retained size and pattern; its path
-- (a.path(addr)); the groups.
-- opts.keep_graph: the references kept, and what a writer of the whole
-- graph needs (a.graph, see graph_view; opts.object(v, addr, type, a, b,
-- c) is told each object's values as it is read).
function M.analyse_file(path, opts)
  local g = new_graph(path)
  local seen = opts and opts.object
  if opts and opts.keep_graph then g.weak, g.prefix = {}, {} end
  local r = read_file(path, function(addr, t, size, x, text, z, at)
    add_object(g, addr, t, size, t == 'string' and text or nil, at)
    if seen then seen(g.n, addr, t, x, text, z) end
  end, function(from, _, _, weak, _, _, _, at)
    count_ref(g, from, weak, at)
  end)
  start_refs(g)
  read_file(path, nil, function(from, to, kind, weak, a, b, c, at)
    add_ref(g, from, to, kind, weak, a, b, c, at)
  end)
  local out = analyse_graph(g)
  out.header, out.epilogue = r.header, r.epilogue
  return out
end

-- A loaded reference's name values, as next_values gives them.
local function name_values(r)
  local kind = r.kind
  if kind == 'field' or kind == 'by_key' then
    return r.key
  elseif kind == 'index' or kind == 'constant' then
    return r.index
  elseif kind == 'by_number' then
    return r.number
  elseif kind == 'by_bool' then
    return r.bool
  elseif kind == 'by_lightud' then
    return r.pointer
  elseif kind == 'upvalue' then
    return r.index, r.name
  elseif kind == 'stack' then
    return r.slot, r.level, r.name
  elseif kind == 'frame_function' then
    return r.slot, r.level
  end
  return r.name
end

-- The same for a loaded snapshot (memprof.read.heap.load).
function M.analyse(s)
  local g = new_graph(s.name or 'the snapshot')
  for _, o in ipairs(s.list) do
    add_object(g, o.addr, o.type, o.size, o.text, o.offset)
  end
  for _, r in ipairs(s.refs) do count_ref(g, r.from, r.weak, r.offset) end
  start_refs(g)
  for _, r in ipairs(s.refs) do
    local a, b, c = name_values(r)
    add_ref(g, r.from, r.to, r.kind, r.weak, a, b, c, r.offset)
  end
  local out = analyse_graph(g)
  out.header, out.epilogue = s.header, s.epilogue
  return out
end

return M
