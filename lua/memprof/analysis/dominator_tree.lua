-- memprof.analysis.dominator_tree: the dominator tree of a heap
-- snapshot's graph (memprof.analysis.heap_graph) and each object's
-- retained size (the bytes that would be freed if it went).  Immediate
-- dominators by the algorithm of Lengauer and Tarjan: near-linear time
-- whatever the graph's depth.
--
--   local order, count, idom, retained = require(
--     'memprof.analysis.dominator_tree').tree(g)
--   -- the reachable nodes, each before its dominator (order[1 ..
--   -- count], the reverse of a depth-first preorder: the root last),
--   -- each node's immediate dominator (the root's is itself; 0: not
--   -- reached) and retained size (C arrays by node)

local G = require('memprof.analysis.heap_graph')

local M = {}

local INT32S, DOUBLES = G.INT32S, G.DOUBLES
local row_starts, release = G.row_starts, G.release


-- A depth-first walk from the root (an explicit stack: the graph can be
-- deep): the reachable nodes' preorder numbers (pre[v], 0: not reached),
-- the nodes by preorder (vertex[1 .. count]) and their parents in the
-- walk's tree; its stack and a scratch array of n + 1 entries, which
-- the dominators reuse.
local function walk(g)
  local first, succ, n = g.first, g.succ, g.n
  local pre, vertex, parent = INT32S(n + 1), INT32S(n + 1), INT32S(n + 1)
  local stack, next_edge = INT32S(n + 1), INT32S(n + 1)
  stack[1], next_edge[1], pre[1], vertex[1] = 1, first[1], 1, 1
  local top, count = 1, 1
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
      top = top - 1
    end
  end
  return { pre = pre, vertex = vertex, parent = parent, count = count,
    stack = stack, scratch = next_edge }
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
-- path compression, no balancing) in f's arrays: ancestor, label, semi
-- and a stack. eval(f, v) is the node of least semidominator on the path
-- from v up to its tree's root, the path compressed on the way (an
-- explicit stack: a path can be as long as the graph is deep).  Loops
-- here are functions that call themselves in tail position: LuaJIT gives
-- up compiling a loop whose body holds loops of its own (as
-- address_map.lua's index probes).  They are the module's and take the
-- arrays as arguments: a compiled trace keeps the closures it calls
-- alive, and closures holding the arrays as upvalues kept them (27 MB of
-- 1,000,000 objects) for as long as the traces lived.

-- Pushes the path from u up to the node below its tree's root.
local function climb(ancestor, stack, u, top)
  if ancestor[ancestor[u]] == 0 then return top end
  stack[top + 1] = u
  return climb(ancestor, stack, ancestor[u], top + 1)
end

-- Compresses the pushed path, the node nearest the root first.
local function unwind(ancestor, label, semi, stack, top)
  if top == 0 then return end
  local x = stack[top]
  local a = ancestor[x]
  if semi[label[a]] < semi[label[x]] then label[x] = label[a] end
  ancestor[x] = ancestor[a]
  return unwind(ancestor, label, semi, stack, top - 1)
end

local function eval(f, v)
  local ancestor, label = f.ancestor, f.label
  local a = ancestor[v]
  if a == 0 then return v end
  if ancestor[a] ~= 0 then
    local stack = f.stack
    unwind(ancestor, label, f.semi, stack, climb(ancestor, stack, v, 0))
  end
  return label[v]
end

-- The least semidominator of the evaluated predecessors e .. stop - 1.
local function least(f, pred, e, stop, s)
  if e >= stop then return s end
  local su = f.semi[eval(f, pred[e])]
  return least(f, pred, e + 1, stop, su < s and su or s)
end

-- Each node y of a bucket of parent p: its dominator, or a node with the
-- same one (settled in the last pass).
local function settle(f, idom, bnext, y, p)
  if y == 0 then return end
  local u = eval(f, y)
  local semi = f.semi
  idom[y] = semi[u] < semi[y] and u or p
  return settle(f, idom, bnext, bnext[y], p)
end

-- Immediate dominators by node (the root's is itself; 0: not reached), by
-- the algorithm of Lengauer and Tarjan ("A Fast Algorithm for Finding
-- Dominators in a Flowgraph"): near-linear time whatever the graph's
-- shape (the iterative algorithm is quadratic in the depth of a list
-- whose nodes share a key string).  Semidominators are preorder numbers.
-- Its arrays are the walk's where it can (a node's semidominator starts
-- as its preorder number, its dominator is set once its parent was read,
-- the walk's stack and scratch array are free), and the counts of
-- predecessors are freed before it takes its own: besides the graph, 10
-- arrays at most (the predecessors' one entry per reference), where it
-- held 17.
local function dominators(g, w)
  local pfirst, pred = predecessors(g, w.pre)
  release()
  local n, vertex, parent = g.n, w.vertex, w.parent
  local semi, idom, bnext = w.pre, w.parent, w.scratch
  local f = { ancestor = INT32S(n + 1), label = INT32S(n + 1), semi = semi,
    stack = w.stack }
  local ancestor, label = f.ancestor, f.label
  local bucket = INT32S(n + 1)
  for i = 1, w.count do
    local v = vertex[i]
    label[v] = v
  end
  for i = w.count, 2, -1 do
    local x = vertex[i]
    semi[x] = least(f, pred, pfirst[x], pfirst[x + 1], semi[x])
    local s = vertex[semi[x]]
    bnext[x], bucket[s] = bucket[s], x
    local p = parent[x]
    ancestor[x] = p
    local y = bucket[p]
    bucket[p] = 0
    settle(f, idom, bnext, y, p)
  end
  for i = 2, w.count do
    local x = vertex[i]
    if idom[x] ~= vertex[semi[x]] then idom[x] = idom[idom[x]] end
  end
  idom[1] = 1
  return idom
end

-- The reachable nodes, each before its dominator (the walk's preorder
-- reversed, in its own array), their count, their immediate dominators
-- and whether each node was reached (not 0).
local function dominated(g)
  local w = walk(g)
  local idom = dominators(g, w)
  local order, count = w.vertex, w.count
  for k = 1, math.floor(count / 2) do
    order[k], order[count + 1 - k] = order[count + 1 - k], order[k]
  end
  return order, count, idom, w.pre
end

-- The nodes in order, their immediate dominators and retained sizes; the
-- arrays that the rows of references and the dominators dropped are freed
-- before the next ones are taken.
function M.tree(g)
  release()
  local order, count, idom, reached = dominated(g)
  release()
  local n = g.n
  local retained = DOUBLES(n + 1)
  for v = 2, n do retained[v] = reached[v] ~= 0 and g.size[v] or 0 end
  for k = 1, count - 1 do
    local v = order[k]
    local d = idom[v]
    retained[d] = retained[d] + retained[v]
  end
  return order, count, idom, retained
end

return M
