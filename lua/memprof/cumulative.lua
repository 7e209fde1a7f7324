-- memprof.cumulative: the bytes of each row including those of its
-- callees (inclusive, or cumulative, figures), from the call stacks of
-- the extended format, as an analysis pass.  analyze.run adds it when
-- the rows are grouped by function or by stack.
--
--   local pass = cumulative.new(grouper)   -- mode 'function' or 'stack'
--   -- analyze.run feeds it, then finish(stream, heap) gives:
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

function M.new(grouper)
  assert(M.MODES[grouper.mode], 'cumulative figures are by function or stack')
  return setmetatable({ grouper = grouper, records = {}, by_stack = {},
    by_site = {} }, Cumulative)
end

local function new_record(records, site, stack)
  local record = { site = site, stack = stack, events = 0, bytes = 0,
    live_blocks = 0, live_bytes = 0 }
  records[#records + 1] = record
  return record
end

-- The record of events at `site` with `stack` (nil: none).
function Cumulative:record(site, stack)
  if not stack then
    local record = self.by_site[site]
    if not record then
      record = new_record(self.records, site, nil)
      self.by_site[site] = record
    end
    return record
  end
  local by_site = self.by_stack[stack]
  if not by_site then
    by_site = {}
    self.by_stack[stack] = by_site
  end
  local record = by_site[site]
  if not record then
    record = new_record(self.records, site, stack)
    by_site[site] = record
  end
  return record
end

function Cumulative:feed(ev)
  if ev.kind ~= 'free' then
    local record = self:record(ev.site, ev.stack)
    record.events = record.events + 1
    record.bytes = record.bytes + ev.nsize
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

local function add_total(row, record)
  row.events = row.events + record.events
  row.bytes = row.bytes + record.bytes
  row.live_blocks = row.live_blocks + record.live_blocks
  row.live_bytes = row.live_bytes + record.live_bytes
end

local function add_self(row, record)
  row.self_events = row.self_events + record.events
  row.self_bytes = row.self_bytes + record.bytes
end

-- By function: each record counts for its own row and for the function
-- of each frame of its stack, once per row.
local function function_rows(grouper, records)
  local rows, row_of = row_table()
  for _, record in ipairs(records) do
    local own = grouper:key(record.site, record.stack)
    add_self(row_of(own), record)
    add_total(row_of(own), record)
    local counted = { [own] = true }
    for _, frame in ipairs(record.stack and record.stack.frames or {}) do
      local group = grouper:key(frame, nil)
      if not counted[group] then
        counted[group] = true
        add_total(row_of(group), record)
      end
    end
  end
  return rows
end

-- A tree of the stacks' frames by name, outermost first: each node sums
-- the records whose stacks pass through it.
local function suffix_tree(records)
  local root = { children = {} }
  for _, record in ipairs(records) do
    local frames = record.stack and record.stack.frames
    local node = root
    for i = #(frames or {}), 1, -1 do
      local name = frames[i].name
      local child = node.children[name]
      if not child then
        child = { children = {}, events = 0, bytes = 0, live_blocks = 0,
          live_bytes = 0 }
        node.children[name] = child
      end
      add_total(child, record)
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

-- By stack: a stack row takes the sums of its node in the tree; a row
-- of events without a stack, its own.
local function stack_rows(grouper, records)
  local root = suffix_tree(records)
  local rows, row_of = row_table()
  for _, record in ipairs(records) do
    local own = grouper:key(record.site, record.stack)
    local row = row_of(own)
    add_self(row, record)
    if not own.frames then
      add_total(row, record)
    end
  end
  for _, row in ipairs(rows) do
    if row.group.frames then
      add_total(row, node_of(root, row.group.frames))
    end
  end
  return rows
end

function Cumulative:finish(_, heap)
  heap:each_live_block(function(_, size, site, stack)
    local record = self:record(site, stack)
    record.live_blocks = record.live_blocks + 1
    record.live_bytes = record.live_bytes + size
  end)
  local mode = self.grouper.mode
  local rows = mode == 'function' and function_rows(self.grouper,
    self.records) or stack_rows(self.grouper, self.records)
  return { mode = mode, rows = rows }
end

return M
