-- memprof.report.heapsnapshot: a heap snapshot as V8's .heapsnapshot JSON
-- (docs/holders.md, "In Chrome DevTools and memlab"), which Chrome
-- DevTools' Memory panel and memlab open.
--
--   local heapsnapshot = require('memprof.report.heapsnapshot')
--   local model = heapsnapshot.model(path, { profile = PROFILE })
--   heapsnapshot.write(model, out)
--
-- The format (facts from V8's serializer and DevTools' loader): a JSON
-- object whose snapshot.meta names the fields of the flat arrays `nodes`
-- (NODE_FIELDS numbers per node) and `edges` (type, name or index, and
-- the target as its offset in `nodes`); each node's edge_count edges
-- follow those of the nodes before it; names are indices into `strings`.
-- The first node is the synthetic root, whose edges are the snapshot's
-- roots.  Only the objects reachable from the roots are written (those
-- the text report counts), so that the retained sizes DevTools and memlab
-- compute are ours; weak references are `weak` edges, which hold nothing.
-- With a profile, each object allocated during it has the place and stack
-- that allocated it: a trace node (DevTools' "Allocation stack") and a
-- location (its line, 0-based as V8's).

local dom = require('memprof.analysis.dominators')
local join = require('memprof.analysis.heap_join')
local json_text = require('memprof.encode.json_text')

local M = {}

local format, concat = string.format, table.concat

M.NODE_FIELDS = { 'type', 'name', 'id', 'self_size', 'edge_count',
  'trace_node_id', 'detachedness' }
M.NODE_TYPES = { 'hidden', 'array', 'string', 'object', 'code', 'closure',
  'regexp', 'number', 'native', 'synthetic', 'concatenated string',
  'sliced string', 'symbol', 'bigint', 'object shape' }
M.EDGE_FIELDS = { 'type', 'name_or_index', 'to_node' }
M.EDGE_TYPES = { 'context', 'element', 'property', 'internal', 'hidden',
  'shortcut', 'weak' }

local NODE_TYPE, EDGE_TYPE = {}, {}
for i, t in ipairs(M.NODE_TYPES) do NODE_TYPE[t] = i - 1 end
for i, t in ipairs(M.EDGE_TYPES) do EDGE_TYPE[t] = i - 1 end
local NF = #M.NODE_FIELDS

-- The V8 type of each Lua type (the node's name says the Lua type).
local V8_TYPE = { string = 'string', ['function'] = 'closure',
  proto = 'code', trace = 'code', table = 'object', userdata = 'object',
  cdata = 'object', thread = 'object', upvalue = 'object' }

-- Texts longer than this end with '...' in names.
M.NAME_TEXT = 64

-- ---- The model ------------------------------------------------------------

-- The strings of the file, each once.
local function string_table()
  local list, ids = {}, {}
  local function id(text)
    local i = ids[text]
    if not i then
      i = #list
      list[i + 1], ids[text] = text, i
    end
    return i
  end
  return list, id
end

-- What the reader tells of each object that names need: a prototype's
-- first line, a C function's address, a built-in's number, a trace's
-- number.
local function object_notes()
  local notes = {}
  local function seen(v, _, t, x, _, z)
    if t == 'proto' or t == 'trace' then
      notes[v] = x
    elseif t == 'function' and x ~= 0 then
      notes[v] = { ffid = x, cfunc = z }
    end
  end
  return notes, seen
end

-- The strong edges of node v of a kind, as the first target found.
local function target_of(graph, v, kind)
  for e = graph.first[v], graph.first[v + 1] - 1 do
    if graph.ref(e) == kind then return graph.succ[e] end
  end
  return nil
end

-- '@catalog.lua:44' for a prototype node, or nil; '[builtin:move]' for
-- a built-in LuaJIT writes in Lua (its first line 2^32 - 1 or 2^64 - 1,
-- its bare name as chunk name: named as the profile's places name it).
local function proto_place(graph, notes, proto)
  if not proto or notes[proto] == nil then return nil end
  local chunk = target_of(graph, proto, 'chunkname')
  local name = chunk and (graph.text(chunk) or graph.prefix[chunk])
  if notes[proto] >= 2 ^ 32 - 1 then
    return format('[builtin:%s]', name or '?')
  end
  return format('%s:%d', name or '?', notes[proto])
end

local function quoted_text(graph, v)
  local text = graph.text(v)
  if text then return text end
  return (graph.prefix[v] or ''):sub(1, M.NAME_TEXT) .. '...'
end

-- A node's name, as the text report's words: 'table', 'function render
-- @catalog.lua:44' (the name of the field, upvalue or local its path
-- ends with), 'prototype @catalog.lua:44'; a string's is its text (the
-- type `string` shows it quoted).
local function node_name(graph, notes, v, t)
  if t == 'string' then
    return quoted_text(graph, v)
  elseif t == 'function' then
    local kind, key = graph.via(v)
    local called
    if kind == 'field' then
      called = graph.text_of(key)
    elseif (kind == 'upvalue' or kind == 'stack') and type(key) == 'string'
    then
      called = key
    end
    local note = notes[v]
    if note then
      local what = note.ffid == 1 and (note.cfunc and
        format('(C, 0x%x)', note.cfunc) or '(C)') or
        format('(built-in #%d)', note.ffid)
      return called and format('function %s %s', called, what) or
        'function ' .. what
    end
    local place = proto_place(graph, notes, target_of(graph, v, 'proto'))
    local parts = { 'function' }
    parts[#parts + 1] = called
    parts[#parts + 1] = place
    return concat(parts, ' ')
  elseif t == 'proto' then
    local place = proto_place(graph, notes, v)
    return place and 'prototype ' .. place or 'prototype'
  elseif t == 'trace' then
    return format('trace %d', notes[v] or 0)
  end
  return t
end

-- An edge's V8 type and name (a string) or index (a number) from a
-- reference's kind and name: keys are properties, array indices
-- elements, upvalues and locals context variables, the rest internal.
local function edge_of(graph, kind, name)
  if kind == 'field' then
    local text = graph.text_of(name)
    return 'property', text or '[<long string>]'
  elseif kind == 'index' or kind == 'by_number' then
    if name >= 0 and name % 1 == 0 and name < 2 ^ 32 then
      return 'element', name
    end
    return 'property', format('[%.17g]', name)
  elseif kind == 'by_bool' then
    return 'property', format('[%s]', tostring(name))
  elseif kind == 'by_lightud' then
    return 'property', format('[<light userdata 0x%x>]', name)
  elseif kind == 'by_key' then
    return 'property', format('[<%s 0x%x>]', graph.type_of(name) or 'object',
      name)
  elseif kind == 'upvalue' then
    return 'context', type(name) == 'string' and name or
      format('upvalue %d', name)
  elseif kind == 'stack' then
    return 'context', type(name) == 'string' and name or
      format('stack slot %d', name)
  elseif kind == 'root' then
    return 'property', name
  elseif kind == 'upvalue_value' then
    return 'internal', 'value'
  elseif kind == 'frame_function' then
    return 'internal', format('function of frame %d', name)
  elseif kind == 'constant' then
    return 'internal', format('constant %d', name)
  end
  return 'internal', kind
end

-- The allocating places as V8's allocation traces: a function info per
-- place (its name, chunk and line), a tree of the stacks from the
-- outermost frame, each object's leaf, and the locations.
local function traces()
  local t = { infos = {}, info_of = {}, root = { id = 1, info = 0,
    count = 0, size = 0, kids = {}, order = {} }, next_id = 1,
    scripts = {}, script_count = 0 }
  t.infos[1] = { name = '(root)', script = '', script_id = 0, line = 0 }
  t.info_of['(root)'] = 0
  return t
end

local function script_id(t, chunk)
  if chunk == '' then return 0 end
  local id = t.scripts[chunk]
  if not id then
    t.script_count = t.script_count + 1
    id = t.script_count
    t.scripts[chunk] = id
  end
  return id
end

local function info_of(t, site)
  local name = site.name
  local i = t.info_of[name]
  if i then return i end
  local chunk = site.chunkname and site.chunkname:gsub('^@', '') or ''
  i = #t.infos
  t.infos[i + 1] = { name = name, script = chunk,
    script_id = script_id(t, chunk), line = site.line or 0 }
  t.info_of[name] = i
  return i
end

-- The trace node of a place's stack (innermost frame first: a built-in
-- that allocated, then the site's line and its callers), or of the place
-- alone without a stack; its counts raised by the object.
local function trace_leaf(t, site, stack, size)
  local frames = {}
  if stack and #stack > 0 then
    for i = #stack, 1, -1 do frames[#frames + 1] = stack[i] end
  else
    frames[1] = site
  end
  local node = t.root
  for _, frame in ipairs(frames) do
    local info = info_of(t, frame)
    local kid = node.kids[info]
    if not kid then
      t.next_id = t.next_id + 1
      kid = { id = t.next_id, info = info, count = 0, size = 0, kids = {},
        order = {} }
      node.kids[info] = kid
      node.order[#node.order + 1] = kid
    end
    node = kid
  end
  node.count, node.size = node.count + 1, node.size + size
  return node
end

-- The model of the snapshot at `path` (opts.profile: the profile that ran
-- when it was taken).
function M.model(path, opts)
  opts = opts or {}
  local notes, seen = object_notes()
  local a = dom.analyse_file(path, { keep_graph = true, object = seen })
  local live, warning = join.live_blocks(a, opts.profile,
    opts.profile and '--profile=' .. opts.profile, path)
  return { analysis = a, graph = a.graph, notes = notes, live = live,
    file = path, warning = warning }
end

-- ---- The file -------------------------------------------------------------

local function meta_text()
  local enc = json_text.encode
  return '{"snapshot":{"meta":{"node_fields":' .. enc(M.NODE_FIELDS) ..
    ',"node_types":[' .. enc(M.NODE_TYPES) ..
    ',"string","number","number","number","number","number"]' ..
    ',"edge_fields":' .. enc(M.EDGE_FIELDS) ..
    ',"edge_types":[' .. enc(M.EDGE_TYPES) .. ',"string_or_number","node"]' ..
    ',"trace_function_info_fields":["function_id","name","script_name",' ..
    '"script_id","line","column"],"trace_node_fields":["id",' ..
    '"function_info_index","count","size","children"],' ..
    '"sample_fields":["timestamp_us","last_assigned_id"],' ..
    '"location_fields":["object_index","script_id","line","column"]},'
end

-- The nodes written (the root and the reachable objects) by ordinal:
-- ordinal[v] (0-based; -1: not written).
local function ordinals(nodes)
  local ordinal, count = {}, 1
  ordinal[1] = 0
  for v = 2, nodes.n do
    if nodes.pattern[v] ~= 0 then
      ordinal[v] = count
      count = count + 1
    end
  end
  return ordinal, count
end

-- The weak edges by source node, { w, kind, name } each.
local function weak_edges(graph, ordinal)
  local by = {}
  local list = graph.weak
  for i = 1, #list, 4 do
    local v, w = list[i], list[i + 1]
    if ordinal[v] and ordinal[w] then
      local kind, name = graph.weak_ref(i)
      local row = by[v]
      if not row then
        row = {}
        by[v] = row
      end
      row[#row + 1] = { w, kind, name }
    end
  end
  return by
end

-- Writes pieces of one JSON array, a few thousand numbers at a time.
local function array_writer(out)
  local parts, n, first = {}, 0, true
  local w = {}
  function w.add(text)
    n = n + 1
    parts[n] = text
    if n >= 4096 then
      out:write(first and '' or ',', concat(parts, ',', 1, n))
      first, n = false, 0
    end
  end
  function w.finish()
    if n > 0 then out:write(first and '' or ',', concat(parts, ',', 1, n)) end
  end
  return w
end

local function trace_tree_text(node, out)
  out[#out + 1] = format('%d,%d,%d,%d,[', node.id, node.info, node.count,
    node.size)
  for i, kid in ipairs(node.order) do
    if i > 1 then out[#out + 1] = ',' end
    trace_tree_text(kid, out)
  end
  out[#out + 1] = ']'
end

-- Each written object's trace node (with a profile) and the locations:
-- trace[v] is a trace node id; locations a list of texts.
local function allocations(model, ordinal)
  local live, nodes = model.live, model.analysis.nodes
  if not live then return nil, {}, {} end
  local t, trace, locations = traces(), {}, {}
  for v = 2, nodes.n do
    local at = ordinal[v] and live[nodes.addr[v]]
    if at then
      trace[v] = trace_leaf(t, at.site, at.stack, nodes.size[v]).id
      if at.site.line then
        locations[#locations + 1] = format('%d,%d,%d,0', ordinal[v] * NF,
          script_id(t, at.site.chunkname and
            at.site.chunkname:gsub('^@', '') or ''), at.site.line - 1)
      end
    end
  end
  return t, trace, locations
end

local function write_nodes(out, model, ordinal, edge_counts, trace, sid)
  local graph, notes, nodes = model.graph, model.notes, model.analysis.nodes
  local typ, size, TYPES = nodes.type, nodes.size, nodes.TYPES
  local w = array_writer(out)
  w.add(format('%d,%d,1,0,%d,0,0', NODE_TYPE.synthetic, sid(''),
    edge_counts[1]))
  for v = 2, nodes.n do
    local k = ordinal[v]
    if k then
      local lt = TYPES[typ[v]]
      w.add(format('%d,%d,%d,%.0f,%d,%d,0', NODE_TYPE[V8_TYPE[lt] or 'hidden'],
        sid(node_name(graph, notes, v, lt)), 2 * k + 1, size[v],
        edge_counts[v], trace[v] or 0))
    end
  end
  w.finish()
end

local function write_edges(out, model, ordinal, weak, sid)
  local graph, n = model.graph, model.analysis.nodes.n
  local first, succ = graph.first, graph.succ
  local w = array_writer(out)
  local function add(etype, label, to)
    w.add(format('%d,%.0f,%d', EDGE_TYPE[etype],
      type(label) == 'number' and label or sid(label), ordinal[to] * NF))
  end
  for v = 1, n do
    if ordinal[v] then
      for e = first[v], first[v + 1] - 1 do
        local etype, label = edge_of(graph, graph.ref(e))
        add(etype, label, succ[e])
      end
      for _, r in ipairs(weak[v] or {}) do
        local _, label = edge_of(graph, r[2], r[3])
        add('weak', tostring(label), r[1])
      end
    end
  end
  w.finish()
end

local function write_traces(out, t, sid)
  out:write('],\n"trace_function_infos":[')
  if not t then return out:write('],\n"trace_tree":[') end
  local parts = {}
  for i, info in ipairs(t.infos) do
    parts[i] = format('%d,%d,%d,%d,%d,%d', i - 1, sid(info.name),
      sid(info.script), info.script_id, info.line, 0)
  end
  out:write(concat(parts, ','), '],\n"trace_tree":[')
  parts = {}
  trace_tree_text(t.root, parts)
  out:write(concat(parts))
end

-- Writes the model as a .heapsnapshot file.
function M.write(model, out)
  local graph, nodes = model.graph, model.analysis.nodes
  local strings, sid = string_table()
  local ordinal, count = ordinals(nodes)
  local weak = weak_edges(graph, ordinal)
  local t, trace, locations = allocations(model, ordinal)
  local edge_counts, edges = {}, 0
  for v = 1, nodes.n do
    if ordinal[v] then
      local k = graph.first[v + 1] - graph.first[v] +
        (weak[v] and #weak[v] or 0)
      edge_counts[v], edges = k, edges + k
    end
  end
  out:write(meta_text(), format('"node_count":%d,"edge_count":%d,' ..
    '"trace_function_count":%d},\n"nodes":[', count, edges,
    t and #t.infos or 0))
  write_nodes(out, model, ordinal, edge_counts, trace, sid)
  out:write('],\n"edges":[')
  write_edges(out, model, ordinal, weak, sid)
  write_traces(out, t, sid)
  out:write('],\n"samples":[],\n"locations":[', concat(locations, ','),
    '],\n"strings":[')
  local w = array_writer(out)
  for _, text in ipairs(strings) do w.add(json_text.string(text)) end
  w.finish()
  out:write(']}\n')
end

return M
