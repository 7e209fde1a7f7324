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
--   local live, warning = join.live_blocks(analysis, 'profile.bin',
--     '--profile=profile.bin', 'snapshot.heap')
--   live[addr]  -> { site = <reader site>, stack = <reader stack> } | nil
-- report/model/holders.lua counts the objects by place from it.
local reader = require('memprof.read.stream')
local commas = require('memprof.words').commas

local M = {}

-- The blocks live at byte `written` of the profile at `path`: by address,
-- the site and stack of the event that made each; and when the profile
-- cannot be the one that ran when the snapshot was taken (it ends before
-- that byte, or no event of it starts there: the profile of another run),
-- what is wrong, as a phrase about the profile.
function M.live_at(path, written)
  local stream = reader.open(path)
  -- The record after the snapshot may be a symbol or a stack defined for
  -- the next event rather than an event: one must start at `written`.
  local record, at_written = stream.record, false
  function stream.record(self, header, pos)
    if self:offset_of(pos) == written then at_written = true end
    return record(self, header, pos)
  end
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
  elseif kind ~= nil and offset ~= written and not at_written then
    wrong = string.format('has no event that starts there (one starts ' ..
      'at byte %d)', offset)
  end
  return live, wrong
end

-- The profile's blocks live when the snapshot analysed as `a`
-- (memprof.analysis.dominators) was taken, or nil without a profile, and
-- a warning naming both files when the profile does not hold that moment;
-- raises when a profile is given for a snapshot that has none (`option`
-- names the option that gave the file, for the message).
function M.live_blocks(a, profile, option, path)
  if not profile then return nil end
  local note = a.header and a.header.profile
  if not note then
    error(string.format('%s: the heap snapshot was taken with no profile ' ..
      'running: it cannot be joined with one', option or profile), 0)
  end
  local live, wrong = M.live_at(profile, note.written)
  local warning = wrong and string.format('%s was taken after byte %s of ' ..
    "its profile, but %s %s: it is not that profile (another run's?), so " ..
    'the places named may be wrong', path, commas(note.written), profile,
    wrong)
  return live, warning
end

-- The name of the rows of objects older than the profile.
M.BEFORE = 'allocated before the profile'

return M
