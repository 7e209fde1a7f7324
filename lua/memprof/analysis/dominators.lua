-- What holds the memory of a heap snapshot (docs/heap-format.md): the
-- dominator tree of its object graph, each object's retained size (the
-- bytes that would be freed if it went), and the paths from a root that
-- hold the most, grouped by pattern.
--
-- The graph has a virtual root whose edges are the snapshot's roots; weak
-- references are not edges (they hold nothing).  Immediate dominators are
-- computed by the iterative algorithm of Cooper, Harvey and Kennedy ("A
-- Simple, Fast Dominance Algorithm") over a reverse postorder: a few passes
-- over the nodes and their predecessors on the graphs of programs.  Every
-- array is indexed by node number, so memory is proportional to objects
-- and references.
--
--   local dom = require('memprof.analysis.dominators')
--   local a = dom.analyse(require('memprof.read.heap').load(path))
--   a.retained[addr], a.idom[addr], a.pattern[addr], a.path(addr),
--   a.groups (largest first)

local format = string.format

local M = {}

-- Tables of more than this many entries of one type are shown as `[*]` in
-- patterns: the entries of a cache are one group.
M.MANY = 16

local ENTRY = { field = true, index = true, by_key = true, by_number = true,
  by_bool = true, by_lightud = true }

-- The graph in compressed rows: node 1 is the virtual root, node i + 1 the
-- i-th object of s.list; succ[first[v] .. first[v + 1] - 1] are v's
-- successors, edge[] the references they come from.
local function build(s)
  local list, refs = s.list, s.refs
  local n = #list + 1
  local node, count = {}, {}
  for i = 1, #list do node[list[i].addr] = i + 1 end
  for v = 1, n + 1 do count[v] = 0 end
  local from_of, to_of = {}, {}
  for ri = 1, #refs do
    local r = refs[ri]
    local from = r.from == 0 and 1 or node[r.from]
    local to = node[r.to]
    if not r.weak and from and to then
      from_of[ri], to_of[ri] = from, to
      count[from] = count[from] + 1
    end
  end
  local first, fill = {}, {}
  local at = 1
  for v = 1, n do
    first[v], fill[v] = at, at
    at = at + count[v]
  end
  first[n + 1] = at
  local succ, edge = {}, {}
  for ri = 1, #refs do
    local from = from_of[ri]
    if from then
      local k = fill[from]
      succ[k], edge[k] = to_of[ri], ri
      fill[from] = k + 1
    end
  end
  return { n = n, node = node, first = first, succ = succ, edge = edge }
end

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
  local count, pfirst, fill, pred = {}, {}, {}, {}
  for v = 1, n do count[v] = 0 end
  for v = 1, n do
    if post[v] then
      for e = first[v], first[v + 1] - 1 do
        local w = succ[e]
        count[w] = count[w] + 1
      end
    end
  end
  local at = 1
  for v = 1, n do
    pfirst[v], fill[v] = at, at
    at = at + count[v]
  end
  pfirst[n + 1] = at
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
  return format('%q', text):gsub('\\\n', '\\n')
end

local function is_name(text)
  return text:match('^[%a_][%w_]*$') ~= nil
end

-- The step of a path along reference r (to a table entry, its key; to
-- anything else, what the reference is).
local function step(s, r, many, under_loaded)
  local kind = r.kind
  if many and ENTRY[kind] then
    return '[*]'
  elseif kind == 'field' then
    local key = s.objects[r.key]
    local text = key and key.text or '?'
    if is_name(text) and not under_loaded then return '.' .. text end
    return '[' .. quote(text) .. ']'
  elseif kind == 'index' then
    return format('[%d]', r.index)
  elseif kind == 'by_number' then
    return format('[%.17g]', r.number)
  elseif kind == 'by_bool' then
    return format('[%s]', tostring(r.bool))
  elseif kind == 'by_lightud' then
    return format('[<light userdata 0x%x>]', r.pointer)
  elseif kind == 'by_key' then
    local key = s.objects[r.key]
    return format('[<%s 0x%x>]', key and key.type or 'object', r.key)
  elseif kind == 'key' then
    return '<key>'
  elseif kind == 'upvalue' then
    return r.name ~= '' and format('<upvalue %s>', r.name)
      or format('<upvalue %d>', r.index)
  elseif kind == 'upvalue_value' then
    return ''
  elseif kind == 'stack' then
    return r.name ~= '' and format('<local %s>', r.name)
      or format('<stack slot %d>', r.slot)
  elseif kind == 'frame_function' then
    return format('<function of frame %d>', r.level)
  elseif kind == 'constant' then
    return format('<constant %d>', r.index)
  end
  return '<' .. kind .. '>'
end

-- Whether each node is a collection whose entries are one group: more than
-- M.MANY entries, nine in ten of them objects of one type other than
-- functions (a cache of strings, a list of records; not a module's or the
-- globals' table, whose entries are names of their own).
local function collections(s, g)
  local refs, list = s.refs, s.list
  local out = {}
  for v = 1, g.n do
    local n, types = 0, {}
    for e = g.first[v], g.first[v + 1] - 1 do
      if ENTRY[refs[g.edge[e]].kind] then
        local t = list[g.succ[e] - 1].type
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

-- The names that start paths: the loaded modules by their names, then the
-- roots. registry._LOADED is `package.loaded` and its _G is `_G`.
local function starts(s, g)
  local names, queue = {}, {}
  local function add(v, name)
    if v and not names[v] then
      names[v] = name
      queue[#queue + 1] = v
    end
  end
  local registry, loaded
  for _, r in ipairs(s.refs) do
    if r.from == 0 and r.kind == 'root' and r.name == 'registry' then
      registry = r.to
    end
  end
  for _, r in ipairs(s.refs) do
    if r.from == registry and r.kind == 'field' and
        s.objects[r.key].text == '_LOADED' then
      loaded = r.to
    end
  end
  add(g.node[loaded], 'package.loaded')
  for _, r in ipairs(s.refs) do
    if loaded and r.from == loaded and r.kind == 'field' and not r.weak then
      local name = s.objects[r.key].text
      add(g.node[r.to], name == '_G' and '_G' or
        'package.loaded[' .. quote(name) .. ']')
    end
  end
  for _, r in ipairs(s.refs) do
    if r.from == 0 then add(g.node[r.to], r.name) end
  end
  return names, queue
end

-- Shortest paths from the starts (breadth first): each node's parent on
-- its path and the reference from it, and its pattern (entries of a table
-- of many shown as `[*]`). Patterns repeat, and Lua keeps one copy of each;
-- paths are made on demand.
local function paths(s, g)
  local refs = s.refs
  local many = collections(s, g)
  local names, queue = starts(s, g)
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
        local r = refs[g.edge[e]]
        parent[w], via[w] = v, g.edge[e]
        pattern[w] = pattern[v] .. step(s, r, many[v], under_loaded)
        queue[#queue + 1] = w
      end
    end
  end
  local function path(v)
    local steps = {}
    while parent[v] ~= 0 do
      steps[#steps + 1] = step(s, refs[via[v]], false,
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

-- Whether a dominator of v (up to the first of another pattern) is of
-- pattern p.
local function in_group(idom, pattern, v, p)
  local d = idom[v]
  return d ~= 1 and pattern[d] == p
end

-- Groups of objects by pattern: count, retained bytes, their types;
-- largest first. A member dominated by another member (a closure's upvalue
-- object and its value share a pattern) adds no retained bytes of its own:
-- its holder's count them. One group may hold another.
local function groups(s, order, idom, retained, pattern)
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
      local t = s.list[v - 1].type
      grp.objects = grp.objects + 1
      if not in_group(idom, pattern, v, p) then
        grp.retained = grp.retained + retained[v]
      end
      grp.types[t] = (grp.types[t] or 0) + 1
    end
  end
  table.sort(list, function(a, b)
    if a.retained ~= b.retained then return a.retained > b.retained end
    return a.pattern < b.pattern
  end)
  return list
end

-- The analysis of a loaded snapshot (memprof.read.heap.load): by address,
-- each reachable object's immediate dominator (0: the root), retained
-- size, path and pattern; and the groups.
function M.analyse(s)
  local g = build(s)
  local post, order = postorder(g)
  local idom = dominators(g, post, order)
  local list = s.list
  local retained = {}
  for v = 2, g.n do retained[v] = post[v] and list[v - 1].size or 0 end
  retained[1] = 0
  for k = 1, #order - 1 do
    local v = order[k]
    local d = idom[v]
    retained[d] = retained[d] + retained[v]
  end
  local path, pattern, parent = paths(s, g)
  local out = { idom = {}, retained = {}, pattern = {}, total = retained[1] }
  for v = 2, g.n do
    if post[v] then
      local addr = list[v - 1].addr
      local d = idom[v]
      out.idom[addr] = d == 1 and 0 or list[d - 1].addr
      out.retained[addr] = retained[v]
      out.pattern[addr] = pattern[v]
    end
  end
  -- The path from a start to the object at addr, or nil.
  function out.path(addr)
    local v = g.node[addr]
    return v and parent[v] and path(v) or nil
  end
  out.groups = groups(s, order, idom, retained, pattern)
  return out
end

return M
