-- memprof.report.heap_words: the words of the reports of heap snapshots
-- that text and html share (docs/holders.md): counts of objects by type,
-- where objects were allocated, when and where a snapshot was taken.
--
--   heap_words.count_of(8000, 'string')      -> '8,000 strings'
--   heap_words.objects_text(12, types)       -> '12 objects (10 tables, 2 strings)'
--   heap_words.counted(1, 'object')          -> '1 object'
--   heap_words.place_text(row)               -> 'allocated at @a.lua:3 (from ...)'
--   heap_words.profile_text(header)          -> 'taken ... by process 42, ...'

local join = require('memprof.analysis.heap_join')
local layout = require('memprof.report.layout')
local commas = require('memprof.words').commas

local M = {}

local format, concat = string.format, table.concat

M.CDATA_UNKNOWN = "cdata sizes unknown (the FFI's layout was not verified)"

local PLURALS = { string = 'strings', upvalue = 'upvalues',
  thread = 'threads', proto = 'prototypes', ['function'] = 'functions',
  cdata = 'cdata', table = 'tables', userdata = 'userdata' }
local SINGULARS = { proto = 'prototype' }

-- '8,000 strings', '1 table'.
function M.count_of(n, type_name)
  if n == 1 then
    return '1 ' .. (SINGULARS[type_name] or type_name)
  end
  return commas(n) .. ' ' .. (PLURALS[type_name] or type_name .. 's')
end

-- A group's objects: '8,000 strings', or '12 objects (10 tables, 2
-- strings)' when they are of several types.
function M.objects_text(objects, types)
  if #types == 1 then
    return M.count_of(objects, types[1].type)
  end
  local parts = {}
  for i, t in ipairs(types) do
    parts[i] = M.count_of(t.objects, t.type)
  end
  return format('%s objects (%s)', commas(objects), concat(parts, ', '))
end

-- '1,234 objects', '1 object'.
function M.counted(n, word)
  return commas(n) .. ' ' .. (n == 1 and word or word .. 's')
end

-- 'allocated at @a.lua:3 (from @b.lua:9)', with the other places counted.
function M.place_text(row)
  if not row.place then return nil end
  local text = row.place == join.BEFORE and row.place or
    'allocated at ' .. row.place
  if row.callers then text = text .. ' (from ' .. row.callers .. ')' end
  if row.places and row.places > 1 then
    text = text .. format(' and %s', layout.plural(row.places - 1,
      'other place'))
  end
  return text
end

-- When and where the snapshot was taken, and what its note of a profile
-- says.
function M.profile_text(header)
  local p = header.profile
  local taken = format('taken %s by process %d, ', header.time and
    os.date('!%Y-%m-%d %H:%M:%S UTC', header.time) or 'at a time not known',
    header.pid or 0)
  if not p then
    return taken .. 'with no profile running'
  elseif p.file then
    return format('%sduring a profile (after its first %s bytes); ' ..
      'allocation places from %s', taken, commas(p.written), p.file)
  end
  return format('%sduring a profile (after its first %s bytes); ' ..
    '--profile=FILE names where its objects were allocated', taken,
    commas(p.written))
end

return M
