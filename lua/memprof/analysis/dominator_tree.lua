-- memprof.analysis.dominator_tree: the dominator tree of a heap
-- snapshot's graph (memprof.analysis.heap_graph) and each object's
-- retained size (the bytes that would be freed if it went).  Immediate
-- dominators by the algorithm of Lengauer and Tarjan: near-linear time
-- whatever the graph's depth.
--
--   local order, count, idom, retained = require(
--     'memprof.analysis.dominator_tree').tree(g)
--   -- the reachable nodes in postorder (order[1 .. count]; the root
--   -- last), each node's immediate dominator (the root's is itself; 0:
--   -- not reached) and retained size (C arrays by node)

local G = require('memprof.analysis.heap_graph')

local M = {}

local INT32S, DOUBLES = G.INT32S, G.DOUBLES
local row_starts, release = G.row_starts, G.release


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
-- its own (as address_map.lua's index probes).
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

-- The nodes in postorder, their immediate dominators and retained sizes.
function M.tree(g)
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

return M
