-- What holds the memory of a heap snapshot (docs/heap-format.md): the
-- dominator tree of its object graph, each object's retained size (the
-- bytes that would be freed if it went), and the paths from a root that
-- hold the most, grouped by pattern.
--
-- The graph has a virtual root whose edges are the snapshot's roots; weak
-- references are not edges (they hold nothing).  Immediate dominators are
-- computed by the iterative algorithm of Cooper, Harvey and Kennedy ("A
-- Simple, Fast Dominance Algorithm") over a reverse postorder: a few passes
-- over the nodes and their predecessors on the graphs of programs.  The
-- graph is kept in arrays indexed by node and by reference (no table per
-- object), so memory is proportional to objects and references.
--
--   local dom = require('memprof.analysis.dominators')
--   local a = dom.analyse_file(path)   -- streams the file
--   local a = dom.analyse(require('memprof.read.heap').load(path))
--   a.retained[addr], a.idom[addr], a.pattern[addr], a.path(addr),
--   a.groups (largest first), a.total (bytes reachable), a.roots,
--   a.references, a.header and a.epilogue (the file's), a.nodes: the
--   objects by node 2 .. nodes.n (addr, type, size; a node without a
--   retained size is unreachable)
--   dom.sort_largest(list, count, name) -- sorts by list[i][count]
--   descending, ties by list[i][name]

local heap = require('memprof.read.heap')

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
  table.sort(list, function(a, b)
    if a[count] ~= b[count] then return a[count] > b[count] end
    return a[name] < b[name]
  end)
  return list
end

local ENTRY = { field = true, index = true, by_key = true, by_number = true,
  by_bool = true, by_lightud = true }

-- ---- The graph ----------------------------------------------------------

-- A graph being read: node 1 is the virtual root, node i + 1 the i-th
-- object. Per node: address, type, size, and for short strings the text;
-- per reference: source node, target address, kind, weakness and name.
local function new_graph()
  return { n = 1, node = {}, addr = {}, type = {}, size = {}, text = {},
    text_of = {}, nrefs = 0, rfrom = {}, rto = {}, rkind = {}, rname = {},
    rweak = {} }
end

local function add_object(g, addr, t, size, text)
  local v = g.n + 1
  g.n = v
  g.node[addr], g.addr[v], g.type[v], g.size[v] = v, addr, t, size
  if text and #text <= KEEP_TEXT then
    g.text_of[addr] = text
  end
end

-- A reference's name, one value: what a path shows of it.
local function add_ref(g, from, to, kind, weak, a, b, c)
  local j = g.nrefs + 1
  g.nrefs = j
  g.rfrom[j], g.rto[j], g.rkind[j] = from, to, kind
  g.rweak[j] = weak or nil
  local name = a
  if kind == 'upvalue' then
    name = b ~= '' and b or a
  elseif kind == 'stack' then
    name = c ~= '' and c or a
  elseif kind == 'frame_function' then
    name = b
  end
  g.rname[j] = name
end

-- Where each node's run starts in compressed rows of count[v] entries for
-- nodes 1 .. n (first[n + 1] is one past the last), and a copy of the
-- starts to fill the runs by.
local function row_starts(count, n)
  local first, fill = {}, {}
  local at = 1
  for v = 1, n do
    first[v], fill[v] = at, at
    at = at + count[v]
  end
  first[n + 1] = at
  return first, fill
end

-- The edges in compressed rows: succ[first[v] .. first[v + 1] - 1] are v's
-- successors and edge[] the references they come from.
local function finish_graph(g)
  local n, node, rfrom, rto = g.n, g.node, g.rfrom, g.rto
  local count, from_of, to_of = {}, {}, {}
  for v = 1, n + 1 do count[v] = 0 end
  for j = 1, g.nrefs do
    local from = rfrom[j] == 0 and 1 or node[rfrom[j]]
    local to = node[rto[j]]
    if not g.rweak[j] and from and to then
      from_of[j], to_of[j] = from, to
      count[from] = count[from] + 1
    end
  end
  local first, fill = row_starts(count, n)
  local succ, edge = {}, {}
  for j = 1, g.nrefs do
    local from = from_of[j]
    if from then
      local k = fill[from]
      succ[k], edge[k] = to_of[j], j
      fill[from] = k + 1
    end
  end
  g.first, g.succ, g.edge = first, succ, edge
  return g
end

-- ---- Dominators ---------------------------------------------------------

-- Postorder numbers of the nodes reachable from the root (an explicit
-- stack: the graph can be deep), and the nodes by number.
local function postorder(g)
  local first, succ = g.first, g.succ
  local post, order, seen = {}, {}, { [1] = true }
  local stack, next_edge = { 1 }, { first[1] }
  local top, k = 1, 0
  while top > 0 do
    local v = stack[top]
    local e = next_edge[top]
    if e < first[v + 1] then
      next_edge[top] = e + 1
      local w = succ[e]
      if not seen[w] then
        seen[w] = true
        top = top + 1
        stack[top], next_edge[top] = w, first[w]
      end
    else
      k = k + 1
      post[v], order[k] = k, v
      stack[top] = nil
      top = top - 1
    end
  end
  return post, order
end

-- Predecessors of the reachable nodes, in compressed rows.
local function predecessors(g, post)
  local n, first, succ = g.n, g.first, g.succ
  local count, pred = {}, {}
  for v = 1, n do count[v] = 0 end
  for v = 1, n do
    if post[v] then
      for e = first[v], first[v + 1] - 1 do
        local w = succ[e]
        count[w] = count[w] + 1
      end
    end
  end
  local pfirst, fill = row_starts(count, n)
  for v = 1, n do
    if post[v] then
      for e = first[v], first[v + 1] - 1 do
        local w = succ[e]
        pred[fill[w]] = v
        fill[w] = fill[w] + 1
      end
    end
  end
  return pfirst, pred
end

local function intersect(idom, post, a, b)
  while a ~= b do
    while post[a] < post[b] do a = idom[a] end
    while post[b] < post[a] do b = idom[b] end
  end
  return a
end

-- Immediate dominators by node (the root's is itself).
local function dominators(g, post, order)
  local pfirst, pred = predecessors(g, post)
  local idom = { [1] = 1 }
  local changed = true
  while changed do
    changed = false
    for k = #order - 1, 1, -1 do
      local b = order[k]
      local new
      for e = pfirst[b], pfirst[b + 1] - 1 do
        local p = pred[e]
        if idom[p] then
          new = new and intersect(idom, post, p, new) or p
        end
      end
      if idom[b] ~= new then
        idom[b] = new
        changed = true
      end
    end
  end
  return idom
end

-- ---- Paths ---------------------------------------------------------------

local function quote(text)
  return (format('%q', text):gsub('\\\n', '\\n'))
end

local function is_name(text)
  return text:match('^[%a_][%w_]*$') ~= nil
end

-- The step of a path along reference j (to a table entry, its key; to
-- anything else, what the reference is).
local function step(g, j, many, under_loaded)
  local kind, name = g.rkind[j], g.rname[j]
  if many and ENTRY[kind] then
    return '[*]'
  elseif kind == 'field' then
    local text = g.text_of[name]
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
    local v = g.node[name]
    return format('[<%s 0x%x>]', v and g.type[v] or 'object', name)
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

-- Whether each node is a collection whose entries are one group: more than
-- M.MANY entries, nine in ten of them objects of one type other than
-- functions (a cache of strings, a list of records; not a module's or the
-- globals' table, whose entries are names of their own).
local function collections(g)
  local out = {}
  for v = 1, g.n do
    local n, types = 0, {}
    for e = g.first[v], g.first[v + 1] - 1 do
      if ENTRY[g.rkind[g.edge[e]]] then
        local t = g.type[g.succ[e]]
        n = n + 1
        types[t] = (types[t] or 0) + 1
      end
    end
    local most = 0
    for t, k in pairs(types) do
      if t ~= 'function' and k > most then most = k end
    end
    out[v] = n > M.MANY and most * 10 >= n * 9
  end
  return out
end

-- The references from the object at addr of a kind (and a key's text).
local function refs_from(g, addr, kind, key)
  local v = addr == 0 and 1 or g.node[addr]
  local out = {}
  if v == nil then return out end
  for e = g.first[v], g.first[v + 1] - 1 do
    local j = g.edge[e]
    if g.rkind[j] == kind and (key == nil or g.text_of[g.rname[j]] == key) then
      out[#out + 1] = j
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
  local registry = refs_from(g, 0, 'root')
  local loaded
  for _, j in ipairs(registry) do
    if g.rname[j] == 'registry' then
      loaded = refs_from(g, g.rto[j], 'field', '_LOADED')[1]
    end
  end
  if loaded then
    local at = g.rto[loaded]
    add(g.node[at], 'package.loaded')
    for _, j in ipairs(refs_from(g, at, 'field')) do
      local name = g.text_of[g.rname[j]] or '?'
      add(g.node[g.rto[j]], name == '_G' and '_G' or
        'package.loaded[' .. quote(name) .. ']')
    end
  end
  for _, j in ipairs(registry) do add(g.node[g.rto[j]], g.rname[j]) end
  return names, queue
end

-- Shortest paths from the starts (breadth first): each node's parent on
-- its path and the reference from it, and its pattern. Patterns repeat,
-- and Lua keeps one copy of each; paths are made on demand.
local function paths(g)
  local many = collections(g)
  local names, queue = starts(g)
  local parent, via, pattern = {}, {}, {}
  for _, v in ipairs(queue) do parent[v], pattern[v] = 0, names[v] end
  local head = 1
  while head <= #queue do
    local v = queue[head]
    head = head + 1
    local under_loaded = pattern[v] == 'package.loaded'
    for e = g.first[v], g.first[v + 1] - 1 do
      local w = g.succ[e]
      if parent[w] == nil then
        local j = g.edge[e]
        parent[w], via[w] = v, j
        pattern[w] = pattern[v] .. step(g, j, many[v], under_loaded)
        queue[#queue + 1] = w
      end
    end
  end
  local function path(v)
    local steps = {}
    while parent[v] ~= 0 do
      steps[#steps + 1] = step(g, via[v], false,
        names[parent[v]] == 'package.loaded')
      v = parent[v]
    end
    steps[#steps + 1] = names[v]
    local out = {}
    for i = #steps, 1, -1 do out[#out + 1] = steps[i] end
    return table.concat(out)
  end
  return path, pattern, parent
end

-- ---- The analysis --------------------------------------------------------

-- Whether v's immediate dominator is of pattern p.
local function in_group(idom, pattern, v, p)
  local d = idom[v]
  return d ~= 1 and pattern[d] == p
end

-- Groups of objects by pattern: count, retained bytes, their types;
-- largest first. A member dominated by another member (a closure's upvalue
-- object and its value share a pattern) adds no retained bytes of its own:
-- its holder's count them. One group may hold another.
local function groups(g, order, idom, retained, pattern)
  local by, list = {}, {}
  for k = 1, #order - 1 do
    local v = order[k]
    local p = pattern[v]
    if p and idom[v] then
      local grp = by[p]
      if not grp then
        grp = { pattern = p, objects = 0, retained = 0, types = {} }
        by[p] = grp
        list[#list + 1] = grp
      end
      local t = g.type[v]
      grp.objects = grp.objects + 1
      if not in_group(idom, pattern, v, p) then
        grp.retained = grp.retained + retained[v]
      end
      grp.types[t] = (grp.types[t] or 0) + 1
    end
  end
  return M.sort_largest(list, 'retained', 'pattern')
end

local function analyse_graph(g)
  finish_graph(g)
  local post, order = postorder(g)
  local idom = dominators(g, post, order)
  local retained = { [1] = 0 }
  for v = 2, g.n do retained[v] = post[v] and g.size[v] or 0 end
  for k = 1, #order - 1 do
    local v = order[k]
    local d = idom[v]
    retained[d] = retained[d] + retained[v]
  end
  local path, pattern, parent = paths(g)
  local out = { idom = {}, retained = {}, pattern = {}, total = retained[1],
    roots = #refs_from(g, 0, 'root'), references = g.nrefs,
    nodes = { n = g.n, addr = g.addr, type = g.type, size = g.size } }
  for v = 2, g.n do
    if post[v] then
      local addr = g.addr[v]
      local d = idom[v]
      out.idom[addr] = d == 1 and 0 or g.addr[d]
      out.retained[addr] = retained[v]
      out.pattern[addr] = pattern[v]
    end
  end
  -- The path from a start to the object at addr, or nil.
  function out.path(addr)
    local v = g.node[addr]
    return v and parent[v] and path(v) or nil
  end
  out.groups = groups(g, order, idom, retained, pattern)
  return out
end

-- The analysis of the snapshot file at `path`, read as a stream: by
-- address, each reachable object's immediate dominator (0: the root),
-- retained size and pattern; its path (a.path(addr)); the groups.
function M.analyse_file(path)
  local g = new_graph()
  local r = heap.open(path)
  local ok, err = pcall(function()
    while true do
      local rec, x, y, z, a, b, c, d = r:next_values()
      if rec == 'object' then
        add_object(g, x, y, z, y == 'string' and b or nil)
      elseif rec == 'ref' then
        add_ref(g, x, y, z, a, b, c, d)
      else
        break
      end
    end
  end)
  r:close()
  if not ok then error(err, 0) end
  local out = analyse_graph(g)
  out.header, out.epilogue = r.header, r.epilogue
  return out
end

-- The same for a loaded snapshot (memprof.read.heap.load).
function M.analyse(s)
  local g = new_graph()
  for _, o in ipairs(s.list) do
    add_object(g, o.addr, o.type, o.size, o.text)
  end
  for _, r in ipairs(s.refs) do
    local a, b, c = r.name, nil, nil
    local kind = r.kind
    if kind == 'field' or kind == 'by_key' then
      a = r.key
    elseif kind == 'index' or kind == 'constant' then
      a = r.index
    elseif kind == 'by_number' then
      a = r.number
    elseif kind == 'by_bool' then
      a = r.bool
    elseif kind == 'by_lightud' then
      a = r.pointer
    elseif kind == 'upvalue' then
      a, b = r.index, r.name
    elseif kind == 'stack' then
      a, b, c = r.slot, r.level, r.name
    elseif kind == 'frame_function' then
      a, b = r.slot, r.level
    end
    add_ref(g, r.from, r.to, kind, r.weak, a, b, c)
  end
  local out = analyse_graph(g)
  out.header, out.epilogue = s.header, s.epilogue
  return out
end

return M
