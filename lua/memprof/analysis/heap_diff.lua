-- What grew between two heap snapshots (docs/heap-format.md): the groups
-- of the newer one by path pattern, ranked by how much more they retain
-- than in the older one, with the objects that are new (an address the
-- older snapshot did not have). The leak hunt: snapshot, run traffic,
-- snapshot again, and read what holds the growth.
--
--   local dom = require('memprof.analysis.dominators')
--   local diff = require('memprof.analysis.heap_diff')
--   local rows = diff.compare(dom.analyse_file(old), dom.analyse_file(new))
--   rows[i] = { pattern, objects, old_objects, retained, old_retained,
--               growth, own_growth, new_objects, types }
--
-- A group also retains the groups its paths lead to (package.loaded holds
-- every module), so the growth of a cache shows in every group on its
-- path too. own_growth is a row's growth less that of the rows whose
-- patterns extend its own (the rows it holds): the cache's entries, not
-- package.loaded, have the largest.

local dom = require('memprof.analysis.dominators')

local M = {}

-- Each row's growth less that of the rows nearest under it: those whose
-- longest pattern among the rows' that begins theirs is its own.
local function own_growth(rows)
  local by = {}
  for _, row in ipairs(rows) do
    by[row.pattern] = row
    row.own_growth = row.growth
  end
  for _, row in ipairs(rows) do
    local p = row.pattern
    for k = #p - 1, 1, -1 do
      local parent = by[p:sub(1, k)]
      if parent then
        parent.own_growth = parent.own_growth - row.growth
        break
      end
    end
  end
end

-- The rows of every pattern of either analysis whose retained bytes or
-- objects changed, the largest growth first.
function M.compare(old, new)
  local old_groups = {}
  for _, g in ipairs(old.groups) do old_groups[g.pattern] = g end
  -- Objects of the newer snapshot the older did not have, by pattern.
  local fresh = {}
  for addr, pattern in new.objects() do
    if old.retained[addr] == nil then
      fresh[pattern] = (fresh[pattern] or 0) + 1
    end
  end
  local rows, seen = {}, {}
  local function add(pattern, g, o)
    seen[pattern] = true
    local row = {
      pattern = pattern,
      objects = g and g.objects or 0, old_objects = o and o.objects or 0,
      retained = g and g.retained or 0, old_retained = o and o.retained or 0,
      new_objects = fresh[pattern] or 0, types = g and g.types or {},
    }
    row.growth = row.retained - row.old_retained
    if row.growth ~= 0 or row.objects ~= row.old_objects or
        row.new_objects ~= 0 then
      rows[#rows + 1] = row
    end
  end
  for _, g in ipairs(new.groups) do add(g.pattern, g, old_groups[g.pattern]) end
  for _, o in ipairs(old.groups) do
    if not seen[o.pattern] then add(o.pattern, nil, o) end
  end
  own_growth(rows)
  return dom.sort_largest(rows, 'growth', 'pattern')
end

return M
