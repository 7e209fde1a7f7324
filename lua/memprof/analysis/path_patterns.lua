-- memprof.analysis.path_patterns: the path patterns of a heap snapshot's
-- objects (analysis/dominators.lua) as a tree: a pattern is a start's
-- name, or its parent pattern and one step, so that memory is linear in
-- the patterns whatever their length (a list 2,000,000 deep has as many
-- patterns, the longest 2,000,000 steps); a text is made when asked for.
--
--   local patterns = require('memprof.analysis.path_patterns')
--   local set = patterns.new(most)   -- room for `most` patterns
--   set:start(name)         -- a start's pattern (one per name)
--   set:child(p, step)      -- p's pattern and the step (p for '')
--   set:text(id)            -- the pattern's text
--   set:before(a, b)        -- whether a's text sorts before b's (equal
--                           -- texts: by number), without making them;
--                           -- indices in numeric order (order_key)
--   set.count

local ffi = require('ffi')
local intern = require('memprof.record').intern

local M = {}

local INT32S = ffi.typeof('int32_t[?]')
local concat, sort, sub = table.concat, table.sort, string.sub

local Set = {}
Set.__index = Set

function M.new(most)
  return setmetatable({ count = 0, most = most, parent = INT32S(most + 1),
    step = INT32S(most + 1), steps = {}, step_ids = {}, starts = {},
    children = {} }, Set)
end

local function step_id(self, text)
  return (intern(self.steps, self.step_ids, text))
end

local function add(self, parent, sid)
  local id = self.count + 1
  assert(id <= self.most, 'more path patterns than objects')
  self.count = id
  self.parent[id], self.step[id] = parent, sid
  self.rank = nil
  return id
end

function Set:start(name)
  local id = self.starts[name]
  if not id then
    id = add(self, 0, step_id(self, name))
    self.starts[name] = id
  end
  return id
end

-- The children are found by step, then by parent: one table per
-- distinct step, not one per pattern.
function Set:child(p, text)
  if text == '' then return p end
  local sid = step_id(self, text)
  local by = self.children[sid]
  if not by then
    by = {}
    self.children[sid] = by
  end
  local id = by[p]
  if not id then
    id = add(self, p, sid)
    by[p] = id
  end
  return id
end

function Set:text(id)
  local steps, step, parent = self.steps, self.step, self.parent
  local parts = {}
  while id ~= 0 do
    parts[#parts + 1] = steps[step[id]]
    id = parent[id]
  end
  local n = #parts
  for i = 1, math.floor(n / 2) do
    parts[i], parts[n + 1 - i] = parts[n + 1 - i], parts[i]
  end
  return concat(parts)
end

-- ---- The order of the texts -------------------------------------------------

-- Each pattern's children in compressed rows (row 0: the starts).
local function child_rows(self)
  local n, parent = self.count, self.parent
  local first, fill = INT32S(n + 2), INT32S(n + 2)
  for id = 1, n do
    local p = parent[id]
    first[p] = first[p] + 1
  end
  local at = 0
  for p = 0, n do
    local c = first[p]
    first[p], fill[p] = at, at
    at = at + c
  end
  first[n + 1] = at
  local kids = INT32S(n + 1)
  for id = 1, n do
    local p = parent[id]
    kids[fill[p]] = id
    fill[p] = fill[p] + 1
  end
  return first, kids
end

-- A text as it sorts: each index step's number widened to 20 digits, so
-- that `[100]`, `[101]`, `[1000]` come in numeric order (and a text
-- without indices is itself).
local WIDTH = 20
local function widened(digits)
  if #digits >= WIDTH then return nil end
  return '[' .. ('0'):rep(WIDTH - #digits) .. digits .. ']'
end
function M.order_key(text)
  if type(text) ~= 'string' or not text:find('[', 1, true) then
    return text
  end
  return (text:gsub('%[(%d+)%]', widened))
end

local function by_key(a, b)
  if a.key ~= b.key then return a.order < b.order end
  return a.id < b.id
end

-- The entries below a pattern: its children keyed by their steps.
local function add_children(self, rows, id, out)
  local first, kids = rows[1], rows[2]
  for k = first[id], first[id + 1] - 1 do
    local c = kids[k]
    local key = self.steps[self.step[c]]
    out[#out + 1] = { key = key, order = M.order_key(key), id = c }
  end
  return out
end

local function merge_into(e, f)
  e.alias = e.alias or {}
  e.alias[#e.alias + 1] = f
  for _, a in ipairs(f.alias or {}) do e.alias[#e.alias + 1] = a end
  if f.extra then
    e.extra = e.extra or {}
    for _, x in ipairs(f.extra) do e.extra[#e.extra + 1] = x end
  end
  f.alias, f.extra = nil, nil
end

-- The entries in the order of their texts: sorted by key, and an entry
-- whose key starts with an earlier one's (a step '.aB' after '.a') moved
-- below it, keyed by the rest ('B'), to be ordered among the earlier
-- one's children ('.a.x' < '.aB' < '.a[1]'); an equal key (a file's
-- names can make two paths one text) merged with it.
local function arranged(list)
  if #list == 1 then return list end
  sort(list, by_key)
  local out, i = {}, 1
  while i <= #list do
    local e = list[i]
    local len = #e.key
    local j = i + 1
    while j <= #list and sub(list[j].key, 1, len) == e.key do
      local f = list[j]
      if #f.key == len then
        merge_into(e, f)
      else
        f.key = sub(f.key, len + 1)
        f.order = M.order_key(f.key)
        e.extra = e.extra or {}
        e.extra[#e.extra + 1] = f
      end
      j = j + 1
    end
    out[#out + 1] = e
    i = j
  end
  return out
end

-- Ranks in the order of the texts, depth first over the tree (an explicit
-- stack: the tree can be as deep as the graph); a finished list of
-- entries leaves the stack before its last entry's children join it.
local function ranks(self)
  local rank = INT32S(self.count + 1)
  local rows = { child_rows(self) }
  local stack, pos = { arranged(add_children(self, rows, 0, {})) }, { 1 }
  local top, r = 1, 0
  while top > 0 do
    local list, i = stack[top], pos[top]
    if i > #list then
      stack[top], top = nil, top - 1
    else
      pos[top] = i + 1
      local e = list[i]
      r = r + 1
      rank[e.id] = r
      -- A chain of only children (a list's) is ranked without tables.
      if not (e.extra or e.alias) then
        local id, first, kids = e.id, rows[1], rows[2]
        while first[id + 1] - first[id] == 1 do
          id = kids[first[id]]
          r = r + 1
          rank[id] = r
        end
        e = { id = id }
      end
      local below = add_children(self, rows, e.id, e.extra or {})
      for _, a in ipairs(e.alias or {}) do
        rank[a.id] = r
        add_children(self, rows, a.id, below)
      end
      if #below > 0 then
        if i == #list then stack[top], top = nil, top - 1 end
        top = top + 1
        stack[top], pos[top] = arranged(below), 1
      end
    end
  end
  return rank
end

function Set:before(a, b)
  local rank = self.rank
  if not rank then
    rank = ranks(self)
    self.rank = rank
  end
  if rank[a] ~= rank[b] then return rank[a] < rank[b] end
  return a < b
end

return M
