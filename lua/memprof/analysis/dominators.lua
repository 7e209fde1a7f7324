-- What holds the memory of a heap snapshot (docs/heap-format.md): its
-- graph (memprof.analysis.heap_graph), the dominator tree and each
-- object's retained size (memprof.analysis.dominator_tree), and the
-- paths from a root that hold the most, grouped by pattern
-- (memprof.analysis.heap_paths), put together as one analysis; the file
-- read by memprof.read.heap_snapshot (twice, as a stream: the objects, then the
-- references).
--
--   local dom = require('memprof.analysis.dominators')
--   local a = dom.analyse_file(path)
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

local heap = require('memprof.read.heap_snapshot')
local G = require('memprof.analysis.heap_graph')
local dominator_tree = require('memprof.analysis.dominator_tree')
local heap_paths = require('memprof.analysis.heap_paths')
local path_patterns = require('memprof.analysis.path_patterns')
local ffi = require('ffi')

local M = {}

-- Tables of more than this many entries of one type are shown as `[*]`.
M.MANY = heap_paths.MANY

local TYPES = G.TYPES
local DOUBLES, INT32S, BYTES = G.DOUBLES, G.INT32S, G.BYTES
local new_graph, add_object, count_ref, start_refs, add_ref, finish_graph =
  G.new, G.add_object, G.count_ref, G.start_refs, G.add_ref, G.finish
local ref_of, text_of, release = G.ref_of, G.text_of, G.release
local paths, path_of = heap_paths.paths, heap_paths.path_of

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
  local order, count, idom, retained = dominator_tree.tree(g)
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
  local r = heap.each_record(path, function(addr, t, size, x, text, z, at)
    add_object(g, addr, t, size, t == 'string' and text or nil, at,
      t == 'proto' and x or nil)
    if seen then seen(g.n, addr, t, x, text, z) end
  end, function(from, _, _, weak, _, _, _, at)
    count_ref(g, from, weak, at)
  end)
  start_refs(g)
  heap.each_record(path, nil, function(from, to, kind, weak, a, b, c, at)
    add_ref(g, from, to, kind, weak, a, b, c, at)
  end)
  local out = analyse_graph(g)
  out.header, out.epilogue = r.header, r.epilogue
  return out
end

return M
