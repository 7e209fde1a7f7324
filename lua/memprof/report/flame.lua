-- memprof.report.flame: bytes and counts per call stack, and the flame
-- trees made of them, for the HTML page (memprof.report.html).
--
-- A profile of 400,000 places has 400,000 paths and trees of as many
-- nodes; a table per path and three per node took more memory than the
-- rest of the analysis.  Both are kept in columns here: one array per
-- figure, indexed by a path's or a node's number.
--
--   local flame = require('memprof.report.flame')
--   local paths = flame.paths()
--   flame.add(paths, site, stack, bytes, count)    -- summed per stack
--                                                  -- (per site without)
--   flame.append(paths, site, stack, bytes, count) -- a path of its own
--   flame.pass() -> an analysis pass whose result is
--                   { allocated = paths, live = paths }
--   flame.tree(paths, opts) -> JSON text (a list of chunks), merged, top
--     opts  frame_id(site), name_of(frame number), max_nodes,
--           number_of(frame number): the number written for a frame
--           (default: its own),
--           json: the options of the memprof.encode.json_text writer that
--           writes the text (how numbers are written)
--
-- A path is a stack (anything with `frames`, innermost first) or, with
-- no stack, one frame: its site.  frame_id(site) gives a frame's number
-- (frames of one name are one frame: the tree merges them), in the order
-- the frames are first met, outermost first, path by path; name_of(number)
-- its name.
--
-- The tree is the JSON text of { f = frame number (absent for the root),
-- b = bytes, n = count, c = children, largest first, then by name },
-- each object with its keys sorted.  When the tree has more than
-- max_nodes nodes, max_nodes are kept (the largest; of the nodes as large
-- as the smallest kept, the first written) and each node's children not
-- kept are merged into one last child { o = how many, b = their bytes,
-- n = their count }; `merged` counts the nodes not kept.  Paths of no
-- bytes are left out.  top: { bytes = the root's, frames =, sizes = } the
-- frame numbers and bytes of the root's children that are not merged.

local json_text = require('memprof.encode.json_text')

local M = {}

local concat = table.concat

-- Paths -----------------------------------------------------------------------

-- A path is found (add) by its stack's id (the stacks the reader makes
-- for compiled code have none: by the stack itself), or without a
-- stack by its site's id (which a site keeps first): arrays mostly,
-- where an index by the stacks and sites themselves is a hash table
-- three times their size.
function M.paths()
  return { n = 0, stack = {}, site = {}, bytes = {}, count = {},
    by_stack = {}, by_site = {} }
end

function M.append(paths, site, stack, bytes, count)
  local i = paths.n + 1
  paths.n = i
  paths.stack[i], paths.site[i] = stack or false, site
  paths.bytes[i], paths.count[i] = bytes, count
  return i
end

function M.add(paths, site, stack, bytes, count)
  local index, key
  if stack then
    index, key = paths.by_stack, stack.id or stack
  else
    index, key = paths.by_site, site[1]
  end
  local i = index[key]
  if not i then
    i = M.append(paths, site, stack, 0, 0)
    index[key] = i
  end
  paths.bytes[i] = paths.bytes[i] + bytes
  paths.count[i] = paths.count[i] + count
end

-- The pass -------------------------------------------------------------------

-- Bytes allocated and live per call stack (per site for events without a
-- stack), whatever the grouping of the report's rows.
local Pass = {}
Pass.__index = Pass

function M.pass()
  return setmetatable({ allocated = M.paths() }, Pass)
end

function Pass:feed(kind, site, stack, _, nsize, _, nweight)
  if kind ~= 'free' then
    M.add(self.allocated, site, stack, nsize, nweight)
  end
end

function Pass:finish(_, tracker)
  local live = M.paths()
  tracker:each_live_block(function(_, size, site, stack, _, weight)
    M.add(live, site, stack, size, weight)
  end)
  -- The paths' index is needed no more.
  for _, paths in ipairs({ self.allocated, live }) do
    paths.by_stack, paths.by_site = nil, nil
  end
  return { allocated = self.allocated, live = live }
end

-- Trees ----------------------------------------------------------------------

-- A child's key in the tree's one map of children: its parent's number
-- and its frame's, in one number (exact: below 2^53 while there are
-- fewer than 2^27 nodes and frames).
local FRAME_SPAN = 2 ^ 26

local function new_tree()
  -- Node 1 is the root; `first` and `after` link each node's children.
  return { n = 1, frame = { false }, bytes = { 0 }, count = { 0 },
    first = { false }, after = { false }, child_at = {} }
end

-- The child of `node` for frame number `id`, made if new.
local function child_of(tree, node, id)
  local key = node * FRAME_SPAN + id
  local child = tree.child_at[key]
  if not child then
    child = tree.n + 1
    tree.n = child
    tree.frame[child], tree.bytes[child], tree.count[child] = id, 0, 0
    tree.first[child] = false
    tree.after[child] = tree.first[node]
    tree.first[node] = child
    tree.child_at[key] = child
  end
  return child
end

local function add_path(tree, frame_id, paths, i)
  local bytes, count = paths.bytes[i], paths.count[i]
  local sums, counts = tree.bytes, tree.count
  local node = 1
  sums[1], counts[1] = sums[1] + bytes, counts[1] + count
  local stack = paths.stack[i]
  if stack then
    local frames = stack.frames
    for k = #frames, 1, -1 do
      node = child_of(tree, node, frame_id(frames[k]))
      sums[node], counts[node] = sums[node] + bytes, counts[node] + count
    end
  else
    node = child_of(tree, node, frame_id(paths.site[i]))
    sums[node], counts[node] = sums[node] + bytes, counts[node] + count
  end
end

-- The size below which nodes are merged, and how many nodes of that
-- size are kept: max_nodes in all (the root too), the largest.  A node is
-- never smaller than its children, so the nodes kept form a tree; among
-- nodes of the limit's size (a profile of many places of one size has
-- hundreds of thousands), the first met are kept, in the order the tree
-- is written (add_node), so a node of that size is kept only after its
-- parent.  (Keeping every node of the limit's size could keep all of
-- such a tree.)
local function size_limit(tree, max_nodes)
  if tree.n <= max_nodes then
    return 0, tree.n
  end
  local sizes = {}
  for node = 1, tree.n do
    sizes[node] = tree.bytes[node]
  end
  table.sort(sizes, function(a, b) return a > b end)
  local limit = sizes[max_nodes]
  local larger = max_nodes - 1
  while larger > 0 and sizes[larger] == limit do
    larger = larger - 1
  end
  return limit, max_nodes - larger
end

-- The text of a tree is written by a memprof.encode.json_text writer (opts:
-- its options, numbers as it writes them) into chunks, each its parts
-- joined: no string per node, and no node's text copied into its
-- parent's (a tree of 400,000 nodes made ten times its text in garbage).
local function new_text(opts)
  local chunks = {}
  local out = { write = function(_, ...)
    chunks[#chunks + 1] = concat({ ... })
  end }
  return json_text.writer(out, opts), chunks
end

-- A writer of a tree's nodes: `sorted` lists of children, one per depth
-- and reused, and one comparison for every sort (largest first, then by
-- name).
local function new_walk(tree, limits, opts, text)
  local bytes, frame, name_of = tree.bytes, tree.frame, opts.name_of
  return { tree = tree, limit = limits[1], at_limit = limits[2], text = text,
    number_of = opts.number_of or function(id) return id end, written = 0,
    sorted = {}, before = function(a, b)
      if bytes[a] ~= bytes[b] then
        return bytes[a] > bytes[b]
      end
      return name_of(frame[a]) < name_of(frame[b])
    end }
end

-- The children of a node, sorted, in the list of that depth.
local function sorted_children(walk, node, depth)
  local list = walk.sorted[depth] or {}
  walk.sorted[depth] = list
  local tree, n = walk.tree, 0
  local child = tree.first[node]
  while child do
    n = n + 1
    list[n] = child
    child = tree.after[child]
  end
  for i = #list, n + 1, -1 do
    list[i] = nil
  end
  table.sort(list, walk.before)
  return list, n
end

-- The "other" child of the children from `from` on, which are smaller
-- than the limit.
local function add_other(walk, list, from, n)
  local tree, text = walk.tree, walk.text
  local bytes, count = 0, 0
  for i = from, n do
    bytes, count = bytes + tree.bytes[list[i]], count + tree.count[list[i]]
  end
  text:part('{"b":')
  text:value(bytes)
  text:part(',"n":')
  text:value(count)
  text:part(',"o":')
  text:value(n - from + 1)
  text:part('}')
end

-- Whether a node is kept (size_limit): larger than the limit, or of its
-- size while some of those are still to be kept.
local function kept(walk, size)
  if size ~= walk.limit then
    return size > walk.limit
  end
  if walk.at_limit == 0 then
    return false
  end
  walk.at_limit = walk.at_limit - 1
  return true
end

-- The JSON text of a node and the nodes below it kept: an object with
-- its keys sorted, as the page's encoder writes one.  `top`, if given,
-- gets the frame numbers and bytes of the node's children that are kept,
-- in order.
local function add_node(walk, node, depth, top)
  local tree, text = walk.tree, walk.text
  local bytes = tree.bytes
  walk.written = walk.written + 1
  text:part('{"b":')
  text:value(bytes[node])
  local list, n = sorted_children(walk, node, depth)
  if n > 0 then
    text:part(',"c":[')
    for i = 1, n do
      local child = list[i]
      if i > 1 then
        text:part(',')
      end
      if not kept(walk, bytes[child]) then
        add_other(walk, list, i, n)
        break
      end
      add_node(walk, child, depth + 1)
      if top then
        top.frames[#top.frames + 1] = tree.frame[child]
        top.sizes[#top.sizes + 1] = bytes[child]
      end
    end
    text:part(']')
  end
  local frame = tree.frame[node]
  if frame then
    text:part(',"f":')
    text:value(walk.number_of(frame))
  end
  text:part(',"n":')
  text:value(tree.count[node])
  text:part('}')
end

-- The tree of the paths as JSON text (a list of chunks, to be written
-- one after the other), how many of its nodes were merged, and its
-- top: { bytes = the root's, frames =, sizes = } (add_node).
function M.tree(paths, opts)
  local tree = new_tree()
  local bytes = paths.bytes
  for i = 1, paths.n do
    if bytes[i] > 0 then
      add_path(tree, opts.frame_id, paths, i)
    end
  end
  local limits = { size_limit(tree, opts.max_nodes) }
  local text, chunks = new_text(opts.json)
  local walk = new_walk(tree, limits, opts, text)
  local top = { bytes = tree.bytes[1], frames = {}, sizes = {} }
  kept(walk, tree.bytes[1])
  add_node(walk, 1, 1, top)
  text:finish()
  return chunks, tree.n - walk.written, top
end

return M
