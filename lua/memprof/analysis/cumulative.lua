-- memprof.analysis.cumulative: the bytes of each row including those of its
-- callees (inclusive, or cumulative, figures), from the call stacks of
-- the extended format, as an analysis pass.  analyze.run adds it when
-- the rows are grouped by function or by stack.
--
--   local pass = cumulative.new(grouper)   -- mode 'function' or 'stack'
--   -- analyze.run feeds it, then finish(stream, tracker) gives:
--   { mode = 'function' | 'stack',
--     rows = { { group = <row>, events =, bytes =, live_blocks =,
--                live_bytes =, self_events =, self_bytes = }, ... } }
--
-- events and bytes count the allocation events (allocations and
-- reallocations, at their new size) of the row and of its callees;
-- live_blocks and live_bytes, the blocks of those events still live at
-- the end; self_events and self_bytes, the row's own events (as in
-- ALLOCATIONS and REALLOCATIONS).  Rows come in no particular order.
--
-- By function: an event counts for the function of its place and for
-- every function of its stack, once each (recursion counts once).  A
-- function that only called others (a main chunk, a built-in charged to
-- its Lua caller) is a row too, with no own events.
--
-- By stack: a row is a stack S (innermost frame first) that had events;
-- an event counts for S when its stack ends with S's frames: it happened
-- at S or in a function called from S's innermost line.  Frames match by
-- name, as rows do.
--
-- Events without a stack (the VM's own work, compiled code, streams
-- without stacks) count for their own row only.  The pass keeps one
-- record per (stack, place) and, at the end, one row per function or
-- stack: memory grows with the distinct stacks, never the events.

local M = {}

M.MODES = { ['function'] = true, stack = true }

local Cumulative = {}
Cumulative.__index = Cumulative

-- Records are kept in parallel arrays indexed by record number (a few
-- numbers each, no table per record): the place and stack of their
-- events, and their sums.  index[stack] is the record of the stack (of
-- the place, for events without a stack); a stack seen at a second
-- place (which the stream does not do) gets its record in
-- index_of_pair[stack][site].
function M.new(grouper)
  assert(M.MODES[grouper.mode], 'cumulative figures are by function or stack')
  return setmetatable({ grouper = grouper, count = 0, index = {},
    index_of_pair = {}, site_of = {}, stack_of = {}, events = {},
    bytes = {}, live_blocks = {}, live_bytes = {} }, Cumulative)
end

function Cumulative:new_record(site, stack)
  local i = self.count + 1
  self.count = i
  self.site_of[i], self.stack_of[i] = site, stack or false
  self.events[i], self.bytes[i] = 0, 0
  self.live_blocks[i], self.live_bytes[i] = 0, 0
  return i
end

-- The number of the record of events at `site` with `stack` (nil: none).
function Cumulative:record(site, stack)
  local key = stack or site
  local i = self.index[key]
  if not i then
    i = self:new_record(site, stack)
    self.index[key] = i
    return i
  end
  if self.site_of[i] == site then
    return i
  end
  local by_site = self.index_of_pair[key]
  if not by_site then
    by_site = {}
    self.index_of_pair[key] = by_site
  end
  i = by_site[site]
  if not i then
    i = self:new_record(site, stack)
    by_site[site] = i
  end
  return i
end

function Cumulative:feed(kind, site, stack, _, nsize, _, nweight)
  if kind ~= 'free' then
    local i = self:record(site, stack)
    self.events[i] = self.events[i] + nweight
    self.bytes[i] = self.bytes[i] + nsize
  end
end

-- Rows by group, created empty on first use.
local function row_table()
  local rows, by_group = {}, {}
  return rows, function(group)
    local row = by_group[group]
    if not row then
      row = { group = group, events = 0, bytes = 0, live_blocks = 0,
        live_bytes = 0, self_events = 0, self_bytes = 0 }
      by_group[group] = row
      rows[#rows + 1] = row
    end
    return row
  end
end

-- Adds record i of the pass to the totals of `into` (a row or a node).
function Cumulative:add_total(into, i)
  into.events = into.events + self.events[i]
  into.bytes = into.bytes + self.bytes[i]
  into.live_blocks = into.live_blocks + self.live_blocks[i]
  into.live_bytes = into.live_bytes + self.live_bytes[i]
end

function Cumulative:add_self(row, i)
  row.self_events = row.self_events + self.events[i]
  row.self_bytes = row.self_bytes + self.bytes[i]
end

-- The stack frames of record i ({} without a stack).
function Cumulative:frames(i)
  local stack = self.stack_of[i]
  return stack and stack.frames or {}
end

-- The row of record i's own events.
function Cumulative:own_group(i)
  return self.grouper:key(self.site_of[i], self.stack_of[i] or nil)
end

-- By function: each record counts for its own row and for the function
-- of each frame of its stack, once per row.
function Cumulative:function_rows()
  local grouper = self.grouper
  local rows, row_of = row_table()
  -- counted_for[group] == i: record i has counted for the group (one
  -- table for all the records).
  local counted_for = {}
  for i = 1, self.count do
    local own = self:own_group(i)
    self:add_self(row_of(own), i)
    self:add_total(row_of(own), i)
    counted_for[own] = i
    for _, frame in ipairs(self:frames(i)) do
      local group = grouper:key(frame, nil)
      if counted_for[group] ~= i then
        counted_for[group] = i
        self:add_total(row_of(group), i)
      end
    end
  end
  return rows
end

-- A tree of the stacks' frames by name, outermost first: each node sums
-- the records whose stacks pass through it.
function Cumulative:suffix_tree()
  local root = { children = {} }
  for i = 1, self.count do
    local frames = self:frames(i)
    local node = root
    for k = #frames, 1, -1 do
      local name = frames[k].name
      local child = node.children[name]
      if not child then
        child = { children = {}, events = 0, bytes = 0, live_blocks = 0,
          live_bytes = 0 }
        node.children[name] = child
      end
      self:add_total(child, i)
      node = child
    end
  end
  return root
end

-- The node of a stack's frames in the tree.
local function node_of(root, frames)
  local node = root
  for i = #frames, 1, -1 do
    node = node.children[frames[i].name]
  end
  return node
end

local function add_sums(row, node)
  row.events = row.events + node.events
  row.bytes = row.bytes + node.bytes
  row.live_blocks = row.live_blocks + node.live_blocks
  row.live_bytes = row.live_bytes + node.live_bytes
end

-- By stack: a stack row takes the sums of its node in the tree; a row
-- of events without a stack, its own.
function Cumulative:stack_rows()
  local root = self:suffix_tree()
  local rows, row_of = row_table()
  for i = 1, self.count do
    local own = self:own_group(i)
    local row = row_of(own)
    self:add_self(row, i)
    if not own.frames then
      self:add_total(row, i)
    end
  end
  for _, row in ipairs(rows) do
    if row.group.frames then
      add_sums(row, node_of(root, row.group.frames))
    end
  end
  return rows
end

function Cumulative:finish(_, tracker)
  tracker:each_live_block(function(_, size, site, stack, _, weight)
    local i = self:record(site, stack)
    self.live_blocks[i] = self.live_blocks[i] + weight
    self.live_bytes[i] = self.live_bytes[i] + size
  end)
  local mode = self.grouper.mode
  local rows = mode == 'function' and self:function_rows() or
    self:stack_rows()
  return { mode = mode, rows = rows }
end

return M
