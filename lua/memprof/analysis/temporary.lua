-- memprof.analysis.temporary: short-lived blocks, as an analysis pass.
--
-- A block's age when it is released (freed, or reallocated away) is the
-- number of allocation events (allocs and reallocs) between the event
-- that produced it and the release.  A block is temporary when its age
-- is at most `limit`: with limit 1, a block freed before any other
-- allocation, or after just one, is temporary.  Every block produced
-- during the profile is counted once, in one of three classes:
--   temporary   released at an age of at most `limit`
--   freed       released later
--   live        still live at the end
-- so for each group, and in total, blocks = temporary + freed + live
-- (counts and bytes).  Blocks allocated before profiling are not counted.
--
--   local pass = temporary.new(grouper, limit)
--   -- analyze.run feeds it, then finish(stream, tracker)
--   -- gives a memprof.analysis.rows set of temporary.Row, its groups in order
--   -- of first appearance, with two more fields:
--   {
--     limit = <limit>,
--     totals = { blocks, bytes, temporary_blocks, ... }  -- the figures
--   }
-- A row's figures: blocks (produced), bytes (their bytes),
-- temporary_blocks, temporary_bytes, freed_blocks, freed_bytes,
-- live_blocks, live_bytes.  Bytes are the size each block was produced
-- with.  result.rows lists the rows as records (memprof.analysis.rows).

local record = require('memprof.record')
local rows = require('memprof.analysis.rows')

local ID = require('memprof.analysis.groups').ID

local M = {}

M.FIELDS = { 'blocks', 'bytes', 'temporary_blocks', 'temporary_bytes',
  'freed_blocks', 'freed_bytes', 'live_blocks', 'live_bytes' }

local Row = record.shape({ 'blocks', 'bytes', 'temporary_blocks',
  'temporary_bytes', 'freed_blocks', 'freed_bytes', 'live_blocks',
  'live_bytes', 'group' })
M.Row = Row

local Temporary = {}
Temporary.__index = Temporary

function M.new(grouper, limit)
  local set = rows.new(Row)
  local c = set.columns
  return setmetatable({ grouper = grouper, limit = limit or 1, set = set,
    blocks = c.blocks, bytes = c.bytes,
    temporary_blocks = c.temporary_blocks,
    temporary_bytes = c.temporary_bytes, freed_blocks = c.freed_blocks,
    freed_bytes = c.freed_bytes }, Temporary)
end

local function new_counts(fields)
  for _, field in ipairs(M.FIELDS) do
    fields[field] = 0
  end
  return fields
end

-- The id of a group's row, made if it is new.
local function row_id(self, group)
  local id = group[ID]
  if self.blocks[id] == nil then
    self.set:add(group)
  end
  return id
end

function Temporary:feed(kind, site, stack, _, nsize, oweight, nweight,
    owner_id, facts)
  local grouper = self.grouper
  local age = owner_id and facts.age
  if age then
    local id = row_id(self, grouper:key(facts.owner, facts.owner_stack))
    if age <= self.limit then
      local blocks, bytes = self.temporary_blocks, self.temporary_bytes
      blocks[id] = blocks[id] + oweight
      bytes[id] = bytes[id] + facts.size
    else
      local blocks, bytes = self.freed_blocks, self.freed_bytes
      blocks[id] = blocks[id] + oweight
      bytes[id] = bytes[id] + facts.size
    end
  end
  if kind ~= 'free' then
    local id = row_id(self, grouper:key(site, stack))
    local blocks, bytes = self.blocks, self.bytes
    blocks[id] = blocks[id] + nweight
    bytes[id] = bytes[id] + nsize
  end
end

function Temporary:finish(_, tracker)
  local grouper, set = self.grouper, self.set
  local live_blocks, live_bytes = set.columns.live_blocks,
    set.columns.live_bytes
  tracker:each_live_block(function(_, size, site, stack, _, weight)
    local id = row_id(self, grouper:key(site, stack))
    live_blocks[id] = live_blocks[id] + weight
    live_bytes[id] = live_bytes[id] + size
  end)
  local totals = new_counts({})
  for _, field in ipairs(M.FIELDS) do
    local values, sum = set.columns[field], 0
    for _, group in ipairs(set.groups) do
      sum = sum + values[group.id]
    end
    totals[field] = sum
  end
  set.limit, set.totals = self.limit, totals
  return set
end

return M
