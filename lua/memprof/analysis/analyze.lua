-- memprof.analysis.analyze: read a stream once and feed every analysis pass.
--
--   local result = analyze.run(stream [, opts])
--   result.heap      -- memprof.analysis.heap pass (always run, first)
--   result.sites     -- memprof.analysis.sites pass
--   result.stream    -- the stream (name, warning, events, aliases, ...;
--                    -- sample_bytes for a sampled profile, whose figures
--                    -- are all estimates: memprof.analysis.sampling)
--   result.grouper   -- the memprof.analysis.groups grouper of the rows
--   result.leaks, result.peak, result.temporary, result.timeline
--                    -- the views asked for (see each module)
--   result.cumulative -- rows grouped by function or stack: each row's
--                    -- figures with its callees' (memprof.analysis.cumulative)
--
-- opts (all optional):
--   group     'line' (default) | 'function' | 'caller' | 'stack': what the
--             rows of the heap and sites passes and of the views are.
--             With 'line', the heap and sites passes keep one record per
--             site, as they always have; with another mode, one per group.
--   views     a set of views to compute: { leaks = true, peak = true,
--             temporary = true, timeline = true }
--   temporary_limit   the age limit of temporary blocks (default 1)
--   passes    more passes: { { name = 'mine', pass = my_pass }, ... }
--   cumulative   false: no result.cumulative, even by function or stack
--             (a format that does not show it saves its memory: a
--             record per stack)
--   overrides false: the sites pass keeps no overrides (memprof.analysis.sites),
--             for a format that does not show them
--   live_blocks  false: once every pass has finished, the heap pass
--             forgets its live blocks (result.heap:each_live_block()
--             then raises an error): the reports need none, and a large
--             profile has a record per live block.  When, besides, the
--             rows are by line and no pass but the sites' runs, the heap
--             keeps no facts of each block at all (memprof.analysis.heap's option
--             blocks = false), which makes each event cheaper
--
-- A pass has feed(ev, owner, heap), called for every event in order (ev
-- is the reader's reused table: copy what you keep; owner is the site
-- that produced the block a realloc or free releases; heap is the heap
-- pass, which has already seen the event and tells about the released
-- block), and optionally finish(stream, heap), whose result (if not nil)
-- replaces the pass in result[name].
--
-- The heap pass without the blocks' facts and the sites pass by line
-- also take an event as values, feed_values(...) (see each): when they
-- are the only passes and the events are not scaled, the loop hands
-- them the values of stream:next_values() and no event table is filled.
--
-- The views need nothing more than the passes' results to be printed or
-- exported: no pass keeps a reference to the reader's event table.

local groups = require('memprof.analysis.groups')
local heap = require('memprof.analysis.heap')
local sites = require('memprof.analysis.sites')
local leaks = require('memprof.analysis.leaks')
local peak = require('memprof.analysis.peak')
local temporary = require('memprof.analysis.temporary')
local timeline = require('memprof.analysis.timeline')
local cumulative = require('memprof.analysis.cumulative')
local sampling = require('memprof.analysis.sampling')

local M = {}

-- The views, in the order their passes run and reports print them.
M.VIEWS = { 'leaks', 'peak', 'temporary', 'timeline' }

local function view_pass(name, grouper, opts)
  if name == 'leaks' then
    return leaks.new(grouper)
  elseif name == 'peak' then
    return peak.new(grouper)
  elseif name == 'temporary' then
    return temporary.new(grouper, opts.temporary_limit or 1)
  end
  return timeline.new()
end

function M.default_passes(grouper, overrides)
  return { { name = 'sites', pass = sites.new({ grouper = grouper,
    overrides = overrides }) } }
end

-- The passes for opts, after the heap.
local function make_passes(grouper, by_group, opts)
  local entries = M.default_passes(by_group, opts.overrides)
  local views = opts.views or {}
  for _, name in ipairs(M.VIEWS) do
    if views[name] then
      entries[#entries + 1] = { name = name,
        pass = view_pass(name, grouper, opts) }
    end
  end
  if cumulative.MODES[grouper.mode] and opts.cumulative ~= false then
    entries[#entries + 1] = { name = 'cumulative',
      pass = cumulative.new(grouper) }
  end
  for _, entry in ipairs(opts.passes or {}) do
    entries[#entries + 1] = entry
  end
  return entries
end

-- Whether the heap must keep the facts of each live block: for the
-- live blocks asked for (opts.live_blocks), and for the passes that read
-- the released block's (heap.released_*), that is every pass but the
-- sites', which needs them only by group.  Without them each event costs
-- less (heap option blocks = false).
local function needs_blocks(by_group, entries, opts)
  if opts.live_blocks ~= false or by_group then
    return true
  end
  for _, entry in ipairs(entries) do
    if entry.name ~= 'sites' then
      return true
    end
  end
  return false
end

-- One function that feeds passes[first..] in turn.  Calls chained this
-- way, rather than a loop over the passes inside the loop over the
-- events, let LuaJIT compile the whole loop over the events.  Each
-- pass's feed is looked up once, here, not for every event.
local function chain(passes, first)
  local pass = passes[first]
  if not pass then
    return nil
  end
  local feed = pass.feed
  local rest = chain(passes, first + 1)
  if not rest then
    return function(ev, owner, heap_pass)
      return feed(pass, ev, owner, heap_pass)
    end
  end
  return function(ev, owner, heap_pass)
    feed(pass, ev, owner, heap_pass)
    return rest(ev, owner, heap_pass)
  end
end

local function nothing() end

-- The loop of the default analysis (the heap without the blocks' facts
-- and the sites pass alone, rows by line, no sampling): each event is
-- handed from the reader to the two passes as values.  Written into the
-- reader's event table and read back, they cost a store and a load
-- each, and LuaJIT's code for an event that leaves the loop's own path
-- (most do: allocations and frees, sources, lengths of numbers take
-- paths of their own) reads them again, with a check of each key and
-- type: the text report of a 535 MB profile took 3.04 s of CPU time
-- instead of 2.34 s.
local function feed_values(stream, heap_values, sites_values)
  local next_values = stream.next_values
  while true do
    local kind, site, oaddr, osize, naddr, nsize = next_values(stream)
    if not kind then
      return
    end
    sites_values(kind, site, heap_values(kind, site, oaddr, osize, naddr,
      nsize, 1, 1), osize, nsize, 1, 1)
  end
end

-- Whether the passes can be fed values (feed_values): only the sites
-- pass after a heap that has the functions, and a stream with
-- next_values whose events are not scaled.
local function takes_values(stream, heap_pass, passes, scale)
  return not scale and stream.next_values and heap_pass.feed_values and
    #passes == 1 and passes[1].feed_values and true or false
end

-- A sampled profile's events are scaled into estimates first
-- (memprof.analysis.sampling), so that every pass and format shows estimates.
-- The loops call functions held in locals: when events take different
-- branches (allocations, frees), LuaJIT runs the start of its compiled
-- loop again for each, lookups of methods included.
--
-- The reader returns one table for every event, so `ev` is changed in
-- the loop only for a stream that does not: LuaJIT's code for an event
-- that leaves the loop's own path then stores nothing into its slot
-- before it goes back to the loop's start, which reads it.  A table
-- stored there is written in two parts (the pointer, then its type), so
-- reading it whole cannot take it from the stores on their way to the
-- cache and waits for them: perf's samples fell on that read, and the
-- text report of a 535 MB profile took 13% longer with it (when it read
-- event tables).
local function feed_all(stream, heap_pass, passes)
  local scale = sampling.scaler(stream)
  if takes_values(stream, heap_pass, passes, scale) then
    return feed_values(stream, heap_pass.feed_values, passes[1].feed_values)
  end
  scale = scale or nothing
  local feed = chain(passes, 1) or nothing
  local next_event, feed_heap = stream.next, heap_pass.feed
  local ev = next_event(stream)
  if not ev then
    return
  end
  while true do
    scale(ev)
    feed(ev, feed_heap(heap_pass, ev), heap_pass)
    local got = next_event(stream)
    if got ~= ev then
      if not got then
        return
      end
      ev = got
    end
  end
end

function M.run(stream, opts)
  opts = opts or {}
  local grouper = groups.new(opts.group or 'line')
  -- The heap and sites passes group by line with the sites themselves.
  local by_group = grouper.mode ~= 'line' and grouper or nil
  local entries = make_passes(grouper, by_group, opts)
  local heap_pass = heap.new({ grouper = by_group,
    blocks = needs_blocks(by_group, entries, opts) })
  local passes = {}
  for i, entry in ipairs(entries) do
    passes[i] = entry.pass
  end
  feed_all(stream, heap_pass, passes)
  heap_pass:finish()
  -- The indexes only events needed (the reader's, the heap's map) are
  -- garbage now: a full cycle frees them before the passes' finish make
  -- their results (with a site per place, the analysis' peak is then
  -- 30 to 40 MB lower for 400,000 places; the cycle takes a fraction of
  -- the time the stream took).
  collectgarbage('collect')
  local result = { stream = stream, heap = heap_pass, grouper = grouper }
  for _, entry in ipairs(entries) do
    local finished = entry.pass.finish and
      entry.pass:finish(stream, heap_pass)
    if finished == nil then
      finished = entry.pass
    end
    result[entry.name] = finished
  end
  if opts.live_blocks == false then
    heap_pass:forget_blocks()
  end
  grouper:finish()
  return result
end

return M
