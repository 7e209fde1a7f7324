-- memprof.report.model.temporary: the temporary blocks as every format
-- shows them, decided once: what "temporary" means for the limit, the
-- rows that have any and their order, the rows that have none.
--
--   local model = temporary_model.new(temporary)  -- the pass's result
--   model.limit       the age limit (allocations in between)
--   model.meaning     'freed before any other allocation', or 'freed
--                     with at most N other allocations between their own
--                     and their free'
--   model.totals      the figures of every row (the pass's totals)
--   model:rows(opts)  the rows with temporary blocks shown (at most
--                     opts.top; by temporary bytes, or blocks with
--                     opts.sort = 'count') and the rest, with the sums
--                     of every figure
--   model:without()   the rows with no temporary block: { count, blocks,
--                     bytes }
--   model:groups()    the groups of every row, with or without temporary
--                     blocks, by temporary bytes, then by name

local plural = require('memprof.words').plural
local sort_groups = require('memprof.analysis.rows').sort_groups

local M = {}

local format = string.format

M.SUMS = { 'bytes', 'temporary_blocks', 'temporary_bytes', 'freed_blocks',
  'freed_bytes', 'live_blocks', 'live_bytes' }

local Model = {}
Model.__index = Model

local function meaning(limit)
  if limit == 0 then
    return 'freed before any other allocation'
  end
  return format('freed with at most %s between their own and their free',
    plural(limit, 'other allocation'))
end

function M.new(temporary)
  return setmetatable({ temporary = temporary, limit = temporary.limit,
    meaning = meaning(temporary.limit), totals = temporary.totals }, Model)
end

function Model:rows(opts)
  return self.temporary:top({ keep = 'temporary_blocks',
    by = opts.sort == 'count' and 'temporary_blocks' or 'temporary_bytes',
    top = opts.top, sums = M.SUMS })
end

function Model:groups()
  local temporary = self.temporary
  local list = {}
  for i, group in ipairs(temporary.groups) do
    list[i] = group
  end
  return sort_groups(list, temporary.columns.temporary_bytes)
end

function Model:without()
  local temporary = self.temporary
  local c = temporary.columns
  local temporary_blocks, blocks, bytes = c.temporary_blocks, c.blocks,
    c.bytes
  local sums = { count = 0, blocks = 0, bytes = 0 }
  for _, group in ipairs(temporary.groups) do
    local id = group.id
    if temporary_blocks[id] <= 0 then
      sums.count = sums.count + 1
      sums.blocks = sums.blocks + blocks[id]
      sums.bytes = sums.bytes + bytes[id]
    end
  end
  return sums
end

return M
