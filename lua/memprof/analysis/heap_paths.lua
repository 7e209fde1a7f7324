-- memprof.analysis.heap_paths: the paths that hold each object of a heap
-- snapshot's graph (memprof.analysis.heap_graph): the shortest from a
-- start (the loaded modules by name, then the roots), each kept as its
-- parent and the reference from it, and grouped by pattern (the entries
-- of a collection are one step, `[*]`; memprof.analysis.path_patterns).
--
--   local P = require('memprof.analysis.heap_paths')
--   local p = P.paths(g)  -- p.parent, p.via_kind, p.via_name, p.pid (a
--                         -- node's pattern number; 0: not reached),
--                         -- p.patterns, p.names (of the starts), p.roots
--   P.path_of(g, p, v)    -- the path's text

local G = require('memprof.analysis.heap_graph')
local ffi = require('ffi')
local path_patterns = require('memprof.analysis.path_patterns')
local sources = require('memprof.read.sources')

local format = string.format

local M = {}

-- Tables of more than this many entries of one type are shown as `[*]` in
-- patterns: the entries of a cache are one group.
M.MANY = 16

local ENTRY, ENTRY_CODE, KIND_CODE, WIDE = G.ENTRY, G.ENTRY_CODE,
  G.KIND_CODE, G.WIDE
local TYPE_CODE, TYPES = G.TYPE_CODE, G.TYPES
local INT32S, BYTES = G.INT32S, G.BYTES
local ref_of, text_of = G.ref_of, G.text_of


local function quote(text)
  return (format('%q', text):gsub('\\\n', '\\n'))
end

local function is_name(text)
  return text:match('^[%a_][%w_]*$') ~= nil
end

-- The target of node v's first reference of a kind, or nil.
local function first_ref(g, v, kind)
  local code = KIND_CODE[kind]
  for e = g.first[v], g.first[v + 1] - 1 do
    if g.rkind[e] == code then return g.succ[e] end
  end
  return nil
end

-- A chunk name as a path shows it: on one line (a chunk loaded from a
-- string is named by its text).
local function chunk_text(text)
  if text == nil then return '?' end
  local line = text:match('^[^\n]*')
  if line ~= text then return format('[string %q...]', line:sub(1, 40)) end
  return text
end

-- The function of prototype node p, named as the reports of profiles name
-- it (memprof.read.names): 'load (@app.lua:3)' when its source says,
-- 'function at @app.lua:3', 'main chunk of @app.lua'.
local function function_name(g, p)
  local firstline = g.firstline[p] or 0
  local at = first_ref(g, p, 'chunkname')
  local chunkname = at and text_of(g, g.addr[at])
  local chunk = chunk_text(chunkname)
  if firstline == 0 then return 'main chunk of ' .. chunk end
  local named = chunkname and sources.function_name(chunkname, firstline)
  if named then return format('%s (%s:%d)', named, chunk, firstline) end
  return format('function at %s:%d', chunk, firstline)
end

-- What a local's step says of its frame in thread node v: ' in' the
-- function and ', line' the line it runs, when the file has them (name
-- id: the local's number among the names, which gives its frame's level).
-- Kept per thread (g.frame_text): a path is written after the rows of
-- references that name the function are dropped.
local function frame_of(g, v, id)
  local texts = g.frame_text[v]
  if texts and texts[id] then return texts[id] end
  local level = g.name_level[id]
  local fns = level and g.frame_fn[v]
  local fn = fns and fns[level]
  local proto = fn and first_ref(g, fn, 'proto')
  local text = ''
  if proto then
    local line = g.frame_line[v][level]
    text = ' in ' .. function_name(g, proto) ..
      (line and format(', line %d', line) or '')
  end
  if texts == nil then
    texts = {}
    g.frame_text[v] = texts
  end
  texts[id] = text
  return text
end

-- The step of a path along a reference of `kind` named `name` (to a table
-- entry, its key; to anything else, what the reference is), from node v
-- (its name's id: id).
local function step(g, kind, name, many, under_loaded, v, id)
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
    return type(name) == 'string' and
      format('<local %s%s>', name, frame_of(g, v, id))
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
function M.paths(g)
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
        pid[w] = pats:child(p, step(g, kind, name, is_many, under_loaded,
          v, rname[e]))
        tail = tail + 1
        queue[tail] = w
      end
    end
  end
  return { names = names, parent = parent, via_kind = via_kind,
    via_name = via_name, pid = pid, patterns = pats, roots = nroots }
end

-- The path from a start to node v.
function M.path_of(g, p, v)
  local steps = {}
  while p.parent[v] ~= v do
    local u = p.parent[v]
    local kind, name = ref_of(g, p.via_kind[v], p.via_name[v])
    steps[#steps + 1] = step(g, kind, name, false,
      p.names[u] == 'package.loaded', u, p.via_name[v])
    v = u
  end
  steps[#steps + 1] = p.names[v]
  local out = {}
  for i = #steps, 1, -1 do out[#out + 1] = steps[i] end
  return table.concat(out)
end

return M
