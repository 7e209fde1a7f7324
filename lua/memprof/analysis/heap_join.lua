-- Where the objects of a heap snapshot were allocated: the join of a heap
-- snapshot taken while a profile ran with that profile's events
-- (docs/heap-format.md, "With a running profile").
--
-- The snapshot's header says how many bytes of the profile's stream were
-- written when it was taken. The events before that byte give the blocks
-- live then, each with the event that made it (its site and stack); an
-- object of the snapshot whose address is such a block was allocated
-- there, any other was allocated before the profile started. Events after
-- that byte are not read: they may reuse the address of an object freed
-- after the snapshot.
--
--   local join = require('memprof.analysis.heap_join')
--   local places = join.places(snapshot, 'profile.bin')  -- raises without
--   places[addr]  -> { site = <reader site>, stack = <reader stack> } | nil
--   join.by_place(snapshot, places, analysis)
--                 -> rows by allocating place, each with its main holders
local reader = require('memprof.read.stream')

local M = {}

-- The blocks live at byte `written` of the profile at `path`: by address,
-- the site and stack of the event that made each; and when the profile
-- cannot be the one that ran when the snapshot was taken (it ends before
-- that byte, or no event of it starts there: the profile of another run),
-- what is wrong, as a phrase about the profile.
function M.live_at(path, written)
  local stream = reader.open(path)
  local live = {}
  local kind, site, oaddr, naddr, stack, offset, _
  while true do
    kind, site, oaddr, _, naddr, _, stack, offset = stream:next_values()
    if kind == nil or offset >= written then break end
    if kind ~= 'alloc' then live[oaddr] = nil end
    if kind ~= 'free' then live[naddr] = { site = site, stack = stack } end
  end
  local read = stream.bytes_read
  stream:close()
  local wrong
  if kind == nil and read < written then
    wrong = string.format('ends at byte %d', read)
  elseif kind ~= nil and offset ~= written then
    wrong = string.format('has no event that starts there (one starts ' ..
      'at byte %d)', offset)
  end
  return live, wrong
end

-- The places of the objects of a loaded snapshot (memprof.read.heap.load),
-- from the profile that ran when it was taken. Objects the profile did not
-- see allocated have no place: they are older than the profile.
function M.places(snapshot, profile_path)
  local note = snapshot.header.profile
  if note == nil then
    error('the heap snapshot was taken with no profile running: ' ..
      'it cannot be joined with one', 0)
  end
  local live = M.live_at(profile_path, note.written)
  local out = {}
  for _, obj in ipairs(snapshot.list) do
    out[obj.addr] = live[obj.addr]
  end
  return out
end

-- The name of the rows of objects older than the profile.
M.BEFORE = 'allocated before the profile'

local function sorted(list, key)
  table.sort(list, function(a, b)
    if a[key] ~= b[key] then return a[key] > b[key] end
    return (a.place or a.pattern) < (b.place or b.pattern)
  end)
  return list
end

-- The objects of a snapshot by the place that allocated them (the site's
-- name, or M.BEFORE), each place with its objects, bytes and holders: the
-- path patterns of its objects (memprof.analysis.dominators), each with
-- its objects and bytes; the most bytes first.
function M.by_place(snapshot, places, analysis)
  local rows, by = {}, {}
  for _, obj in ipairs(snapshot.list) do
    local pattern = analysis.pattern[obj.addr]
    if pattern then
      local at = places[obj.addr]
      local name = at and at.site.name or M.BEFORE
      local row = by[name]
      if not row then
        row = { place = name, objects = 0, bytes = 0, holders = {}, by = {} }
        by[name] = row
        rows[#rows + 1] = row
      end
      row.objects = row.objects + 1
      row.bytes = row.bytes + obj.size
      local holder = row.by[pattern]
      if not holder then
        holder = { pattern = pattern, objects = 0, bytes = 0 }
        row.by[pattern] = holder
        row.holders[#row.holders + 1] = holder
      end
      holder.objects = holder.objects + 1
      holder.bytes = holder.bytes + obj.size
    end
  end
  for _, row in ipairs(rows) do
    row.by = nil
    sorted(row.holders, 'bytes')
  end
  return sorted(rows, 'bytes')
end

return M
