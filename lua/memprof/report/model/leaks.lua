-- memprof.report.model.leaks: the blocks live at the end as every format
-- shows them, decided once: the rows and their order, the totals, what
-- was freed of the blocks from before the profile, and whether the
-- blocks are known to be reachable, with its wording.
--
--   local model = leaks_model.new(leaks)   -- the leaks pass's result
--   model.count, model.bytes   the blocks live at the end
--   model.total                the stream's net bytes
--   model.freed_before         bytes freed of the blocks allocated before
--                              the profile (0 when none)
--   model.collected            the file has the note of a collection at
--                              stop: every live block was reachable
--   model.note                 that fact in a sentence
--   model.empty                no block was live at the end
--   model:rows(opts)           the rows shown (at most opts.top; by bytes,
--                              or by blocks with opts.sort = 'count') and
--                              the rest ({ rows, count, bytes })

local M = {}

local Model = {}
Model.__index = Model

-- Whether the blocks live at the end are known to be reachable: only
-- memprof.stop() with collect_at_stop = true writes the note of a
-- collection at stop (a profile completed at lua_close or exit never
-- collects, whatever its options).
function M.collection_note(collected)
  if collected then
    return 'Garbage was collected at stop: these blocks were reachable.'
  end
  return 'The profile ended without a collection at stop (only ' ..
    'memprof.stop() with collect_at_stop = true collects; a profile ' ..
    'completed at lua_close or exit does not): some of these blocks may ' ..
    'be unreachable.'
end

function M.new(leaks)
  local collected = leaks.collected_at_stop and true or false
  return setmetatable({ leaks = leaks, count = leaks.count,
    bytes = leaks.bytes, total = leaks.total,
    freed_before = -leaks.before_profiling, collected = collected,
    note = M.collection_note(collected), empty = #leaks.groups == 0 },
    Model)
end

function Model:rows(opts)
  return self.leaks:top({ by = opts.sort == 'count' and 'count' or 'bytes',
    top = opts.top, sums = { 'count', 'bytes' } })
end

return M
