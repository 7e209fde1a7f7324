-- memprof.report.model.named_rows: the rows of a pass keyed by name, in
-- columns (an array per figure, by row number): a large profile has a
-- row per place, and only the rows a format shows are made records.
-- The name of a key is its row's name (memprof.analysis.groups interns
-- groups by name), so a row is one group of the analysis' grouping.
--
--   local rows, index = named_rows.group(keys, values, key, fields)
--     keys    a pass's keys (sites or groups; key i is in slot i)
--     values  its figures by slot: values[field][slot]
--     key     function(site or group) -> the row's name
--     fields  the figures summed per row
--     index   the row number of each name (for add)
--   rows.n, rows.keys, rows.name[i], rows.first[i] (the slot of its first
--   key), rows.more[i] (the slots of the others, or false: most names
--   have one key), rows[field][i]
--   named_rows.add(rows, index, keys, values, key, sums) sums another pass's
--     figures into the rows of the same names: sums = { { field of the
--     rows, field of values }, ... }; a row none of whose keys has any
--     keeps false
--   named_rows.record(rows, i, fields, shape) -> row i as a record
--   named_rows.sorted(rows, keep, value) -> the numbers of the rows that
--     keep(i) keeps, by value(i), largest first, then by name
--   named_rows.first(rows, keep, value, count) -> the first `count` of
--     them, without sorting them all (a format that shows the first rows
--     of a list that may have a row per place)
--   named_rows.slots(rows, i) -> the slots of row i, in order
--   named_rows.group(rows, i, grouper) -> the group of row i
--   named_rows.overrides(slots, overrides_at, key, counted) -> names,
--     sites, blocks: the rows whose blocks the events of those slots
--     released (overrides_at(slot) -> owners, their blocks by owner):
--     their names in order of first appearance, the first key of each
--     name, and when counted the blocks of each name

local group_of = require('memprof.report.rows').group_of
local array = require('memprof.record').array
local table_new = require('table.new')

local M = {}

-- Groups the keys of a pass by name: one row per name, with the figures
-- summed.  A row keeps the slot of its first key, and a list of the
-- others' only when there are any.  The columns have room for a row per
-- key made at once (there are at most as many rows as keys).
function M.group(keys, values, key, fields)
  local size = #keys
  local rows = { n = 0, keys = keys, name = array(size), first = array(size),
    more = array(size) }
  for _, field in ipairs(fields) do
    rows[field] = array(size)
  end
  local index = table_new(0, size)
  for slot, item in ipairs(keys) do
    local name = key(item)
    local i = index[name]
    if not i then
      i = rows.n + 1
      rows.n = i
      index[name] = i
      rows.name[i], rows.first[i], rows.more[i] = name, slot, false
      for _, field in ipairs(fields) do
        rows[field][i] = 0
      end
    else
      local more = rows.more[i] or {}
      more[#more + 1] = slot
      rows.more[i] = more
    end
    for _, field in ipairs(fields) do
      local column = rows[field]
      column[i] = column[i] + values[field][slot]
    end
  end
  return rows, index
end

function M.add(rows, index, keys, values, key, sums)
  for _, sum in ipairs(sums) do
    if not rows[sum[1]] then
      local column = array(rows.n)
      for i = 1, rows.n do
        column[i] = false
      end
      rows[sum[1]] = column
    end
  end
  for slot, item in ipairs(keys) do
    local i = index[key(item)]
    if not i then
      error('memprof.report.model.named_rows: no row named ' .. key(item), 2)
    end
    for _, sum in ipairs(sums) do
      local column = rows[sum[1]]
      column[i] = (column[i] or 0) + values[sum[2]][slot]
    end
  end
  return rows
end

function M.slots(rows, i)
  local slots = { rows.first[i] }
  for k, slot in ipairs(rows.more[i] or {}) do
    slots[k + 1] = slot
  end
  return slots
end

function M.record(rows, i, fields, shape)
  local keys = rows.keys
  local first = keys[rows.first[i]]
  local slots, more = M.slots(rows, i), false
  if rows.more[i] then
    more = {}
    for k = 2, #slots do
      more[k - 1] = keys[slots[k]]
    end
  end
  local row = shape.make({ rows.name[i], first, first.frames, more, slots,
    0, 0, 0, 0 })
  for _, field in ipairs(fields) do
    row[field] = rows[field][i]
  end
  return row
end

-- Whether row a comes before row b: by value(), largest first, then by
-- name.
local function order(rows, value)
  local names = rows.name
  return function(a, b)
    local va, vb = value(a), value(b)
    if va ~= vb then
      return va > vb
    end
    return names[a] < names[b]
  end
end

function M.sorted(rows, keep, value)
  local numbers = {}
  for i = 1, rows.n do
    if keep(i) then
      numbers[#numbers + 1] = i
    end
  end
  table.sort(numbers, order(rows, value))
  return numbers
end

-- Each row kept is compared with the last of those found so far, and
-- most go no further.
function M.first(rows, keep, value, count)
  local before, first, n = order(rows, value), {}, 0
  if count < 1 then
    return first
  end
  for i = 1, rows.n do
    if keep(i) and (n < count or before(i, first[n])) then
      local k = n < count and n + 1 or n
      while k > 1 and before(i, first[k - 1]) do
        first[k] = first[k - 1]
        k = k - 1
      end
      first[k] = i
      n = n < count and n + 1 or n
    end
  end
  return first
end

function M.group_of(rows, i, grouper)
  return group_of(grouper, rows.keys[rows.first[i]])
end

function M.overrides(slots, overrides_at, key, counted)
  local names, sites = {}, {}
  local blocks = counted and {} or nil
  for _, slot in ipairs(slots) do
    local owners, owner_blocks = overrides_at(slot)
    for _, owner in ipairs(owners or {}) do
      local name = key(owner)
      if not sites[name] then
        names[#names + 1], sites[name] = name, owner
      end
      if counted then
        blocks[name] = (blocks[name] or 0) + owner_blocks[owner]
      end
    end
  end
  return names, sites, blocks
end

return M
