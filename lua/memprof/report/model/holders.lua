-- memprof.report.model.holders: the report of a heap snapshot, "what
-- holds the memory" (docs/holders.md), as every format shows it, decided
-- once: text (report/holders_text.lua), json (report/holders_json.lua)
-- and html (report/holders_html.lua) render this model and nothing else.
--
--   local model = require('memprof.report.model.holders')
--   local m = model.of_file(path, { profile = PROFILE, option = '--profile=P' })
--   local who = model.who_holds(heap_path, profile_path)   -- for --heap
--
-- The model:
--   header    what the file holds: objects, bytes, references, roots,
--             traces, gc64, cdata_sizes_unknown (true if cdata are
--             counted as 0 bytes), time (seconds since the epoch) and
--             pid of the process it was taken in, profile (the note of a
--             running profile: written; and file, when the profile was
--             given)
--   holders   the groups of objects by path pattern (analysis/
--             dominators.lua), each with its objects, types, bytes (the
--             objects' own) and retained bytes (what would be freed if
--             they went): the most bytes first, so that a cache's 100,000
--             entries (one pattern, `[*]`) come before the module that
--             holds them (which retains them all, and is one table); with
--             a profile, the place that allocated most of their bytes
--   by_type   the objects by type, each with its main holders
--   by_place  with a profile: the objects by allocating place, each with
--             its stack and its main holders
--   warning   when the profile given is not the one the snapshot was
--             taken in (analysis/heap_join.lua's live_blocks)
--
-- Time is linear in objects and references (one pass over the analysis'
-- nodes), memory proportional to objects and groups; the rows of groups
-- are made when read (a text report makes those it shows: holders_top(k),
-- and each row's holders_top(k)).

local dom = require('memprof.analysis.dominators')
local ffi = require('ffi')
local join = require('memprof.analysis.heap_join')
local layout = require('memprof.report.layout')

local M = {}

local concat = table.concat

-- The place of the objects older than the profile.
M.BEFORE = join.BEFORE

-- Callers shown after an allocating place.
M.CALLERS = 3

local by_count_then_name = dom.sort_largest

-- A set of counters by name as a sorted list of { [name_key], objects,
-- bytes }.
local function tally_list(set, name_key)
  local list = {}
  for name, t in pairs(set) do
    list[#list + 1] = { [name_key] = name, objects = t.objects,
      bytes = t.bytes }
  end
  return by_count_then_name(list, 'bytes', name_key)
end

local function add_to(set, name, bytes)
  local t = set[name]
  if not t then
    t = { objects = 0, bytes = 0 }
    set[name] = t
  end
  t.objects = t.objects + 1
  t.bytes = t.bytes + bytes
end

-- A count of objects by type as a list of { type, objects }, most first.
function M.types_list(types)
  local list = {}
  for t, n in pairs(types) do list[#list + 1] = { type = t, objects = n } end
  return by_count_then_name(list, 'objects', 'type')
end

-- The callers in a stack of the place `site` (the frames after the one
-- at the site: a built-in's frame comes before it), innermost first, as
-- one text: '@a.lua:3 <- @b.lua:9'.
local function callers_text(site, stack)
  if not stack then return nil end
  local at = 1
  for i, frame in ipairs(stack) do
    if frame.name == site.name then
      at = i
      break
    end
  end
  local names = {}
  for i = at + 1, math.min(#stack, at + M.CALLERS) do
    names[#names + 1] = layout.place_name(stack[i])
  end
  if #names == 0 then return nil end
  return concat(names, ' <- ')
end


-- The first k of `ids` in the order of `before` (k below #ids), by one
-- pass that keeps them sorted: a text report shows a few of millions.
local function best(ids, k, before)
  local out = {}
  for _, id in ipairs(ids) do
    if #out < k or before(id, out[#out]) then
      local i = math.min(#out, k - 1)
      while i > 0 and before(id, out[i]) do
        out[i + 1] = out[i]
        i = i - 1
      end
      out[i + 1] = id
    end
  end
  return out
end

-- Rows of patterns, made when read: a deep graph has as many patterns
-- as objects, and the texts of their patterns together grow as the square
-- of its depth, so the text report makes the rows it shows
-- (rows.top(k): the first k rows, all without k, and how many are left
-- out), json and html all of them.  `ids` are pattern numbers, sorted by
-- `before`; make(id) is the row of one.
local function lazy_rows(ids, before, make)
  local rows = {}
  function rows.top(k)
    local first
    if k and k < #ids then
      first = best(ids, k, before)
    else
      table.sort(ids, before)
      first = ids
    end
    local shown = {}
    for i = 1, #first do shown[i] = make(first[i]) end
    return shown, #ids - #first
  end
  return rows
end

-- A table whose `field` is made by rows.top() when first read.
local function all_rows_as(t, field, rows)
  t[field .. '_top'] = rows.top
  return setmetatable(t, { __index = function(self, key)
    if key == field then
      local list = rows.top(nil)
      rawset(self, key, list)
      return list
    end
  end })
end

-- One pass over the reachable objects: by type and by place (the objects
-- and bytes of each pattern, by number), own bytes by pattern, and for
-- each group the places of its members.
local function count_into(rows, field, key, id, size)
  local row = rows[key]
  if not row then
    row = { [field] = key, objects = 0, bytes = 0, by_objects = {},
      by_bytes = {} }
    rows[key] = row
  end
  row.objects, row.bytes = row.objects + 1, row.bytes + size
  row.by_objects[id] = (row.by_objects[id] or 0) + 1
  row.by_bytes[id] = (row.by_bytes[id] or 0) + size
end

local function tally(a, live)
  local nodes = a.nodes
  local addr_of, type_of, size_of = nodes.addr, nodes.type, nodes.size
  local pattern_of, names = nodes.pattern, nodes.TYPES
  local types, places, group_places = {}, {}, {}
  local own = ffi.new('double[?]', a.pattern_count + 1)
  local callers = {}
  local objects = 0
  for v = 2, nodes.n do
    local id = pattern_of[v]
    if id ~= 0 then
      local addr = addr_of[v]
      objects = objects + 1
      local t, size = names[type_of[v]], size_of[v]
      own[id] = own[id] + size
      count_into(types, 'type', t, id, size)
      if live then
        -- The place that allocated it; the callers of the first stack
        -- seen of each place.
        local at = live[addr]
        local name = at and layout.place_name(at.site) or join.BEFORE
        if callers[name] == nil then
          callers[name] = at and callers_text(at.site, at.stack) or false
        end
        count_into(places, 'place', name, id, size)
        local gp = group_places[id]
        if not gp then
          gp = {}
          group_places[id] = gp
        end
        add_to(gp, name, size)
      end
    end
  end
  return types, places, group_places, callers, objects, own
end

-- A row's holders: { pattern, objects, bytes } of each pattern of its
-- objects, the most bytes first, ties in the order of the patterns'
-- texts; made when read (holders, holders_top).
local function with_holders(a, row)
  local objects, bytes = row.by_objects, row.by_bytes
  row.by_objects, row.by_bytes = nil, nil
  local ids = {}
  for id in pairs(objects) do ids[#ids + 1] = id end
  local before = a.pattern_before
  return all_rows_as(row, 'holders', lazy_rows(ids, function(x, y)
    if bytes[x] ~= bytes[y] then return bytes[x] > bytes[y] end
    return before(x, y)
  end, function(id)
    return a.with_pattern({ pattern_id = id, objects = objects[id],
      bytes = bytes[id] })
  end))
end

local function rows_of(a, set, name_key)
  local list = {}
  for _, row in pairs(set) do list[#list + 1] = with_holders(a, row) end
  return by_count_then_name(list, 'bytes', name_key)
end

-- The header: what the file holds.
local function header_of(a, path, objects, profile)
  local h = a.header or {}
  local header = { file = path, objects = objects, bytes = a.total,
    references = a.references, roots = a.roots, gc64 = h.gc64 or false,
    traces = h.traces, cdata_sizes_unknown = h.cdata_sizes_unknown or nil,
    time = h.time, pid = h.pid }
  if h.profile then
    header.profile = { written = h.profile.written, file = profile }
  end
  return header
end

-- The model of an analysis (dominators.analyse_file) of the snapshot at
-- `path`; `live` (heap_join.live_at) gives the allocating places.  Its
-- holders (and each row's) are made when read (see lazy_rows).
function M.from_analysis(a, path, live, profile)
  local types, places, group_places, callers, objects, own = tally(a, live)
  local gobjects, gretained = a.group_objects, a.group_retained
  local ids = {}
  for id = 1, a.pattern_count do
    if gobjects[id] > 0 then ids[#ids + 1] = id end
  end
  local before = a.pattern_before
  local rows = lazy_rows(ids, function(x, y)
    if own[x] ~= own[y] then return own[x] > own[y] end
    if gretained[x] ~= gretained[y] then return gretained[x] > gretained[y] end
    return before(x, y)
  end, function(id)
    local row = a.with_pattern({ pattern_id = id, objects = gobjects[id],
      retained = gretained[id], bytes = own[id],
      types = M.types_list(a.group_types(id)) })
    local gp = group_places[id]
    if gp then
      local list = tally_list(gp, 'place')
      row.place = list[1].place
      row.callers = callers[row.place] or nil
      row.places = #list
    end
    return row
  end)
  local model = all_rows_as({ header = header_of(a, path, objects, profile),
    by_type = rows_of(a, types, 'type') }, 'holders', rows)
  if live then
    model.by_place = rows_of(a, places, 'place')
    for _, row in ipairs(model.by_place) do
      row.callers = callers[row.place] or nil
    end
  end
  return model
end

-- The model of the snapshot at `path` (opts.profile: the profile that ran
-- when it was taken; opts.option: the option that named a file, for a
-- message); model.warning: see heap_join.live_blocks.
function M.of_file(path, opts)
  opts = opts or {}
  local a = dom.analyse_file(path)
  local live, warning = join.live_blocks(a, opts.profile, opts.option, path)
  local model = M.from_analysis(a, path, live, opts.profile)
  model.warning = warning
  return model
end

-- For a profile's report with --heap=SNAPSHOT (the WHO HOLDS IT section,
-- json's who_holds, the page's "Who holds it"): the places of the objects
-- of a snapshot taken during the profile at `profile`, each with its
-- holders ({ heap = path, rows = the model's by_place but the objects
-- older than the profile, warning }); raises when the file is not a heap
-- snapshot taken during a profile.
function M.who_holds(heap_path, profile)
  local model = M.of_file(heap_path, { profile = profile,
    option = '--heap=' .. heap_path })
  local rows = {}
  for _, row in ipairs(model.by_place) do
    if row.place ~= M.BEFORE then rows[#rows + 1] = row end
  end
  return { heap = heap_path, rows = rows, warning = model.warning }
end

return M
