-- memprof.analyze: read a stream once and feed every analysis pass.
--
--   local result = analyze.run(stream [, opts])
--   result.heap      -- memprof.heap pass (always run, first)
--   result.sites     -- memprof.sites pass
--   result.stream    -- the stream (name, warning, events, aliases, ...;
--                    -- sample_bytes for a sampled profile, whose figures
--                    -- are all estimates: memprof.sampling)
--   result.grouper   -- the memprof.groups grouper of the rows
--   result.leaks, result.peak, result.temporary, result.timeline
--                    -- the views asked for (see each module)
--   result.cumulative -- rows grouped by function or stack: each row's
--                    -- figures with its callees' (memprof.cumulative)
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
--   overrides false: the sites pass keeps no overrides (memprof.sites),
--             for a format that does not show them
--   live_blocks  false: once every pass has finished, the heap pass
--             forgets its live blocks (result.heap:each_live_block()
--             then raises an error): the reports need none, and a large
--             profile has a record per live block.  When, besides, the
--             rows are by line and no pass but the sites' runs, the heap
--             keeps no facts of each block at all (memprof.heap's option
--             blocks = false), which makes each event cheaper
--
-- A pass has feed(ev, owner, heap), called for every event in order (ev
-- is the reader's reused table: copy what you keep; owner is the site
-- that produced the block a realloc or free releases; heap is the heap
-- pass, which has already seen the event and tells about the released
-- block), and optionally finish(stream, heap), whose result (if not nil)
-- replaces the pass in result[name].
--
-- The views need nothing more than the passes' results to be printed or
-- exported: no pass keeps a reference to the reader's event table.

local groups = require('memprof.groups')
local heap = require('memprof.heap')
local sites = require('memprof.sites')
local leaks = require('memprof.leaks')
local peak = require('memprof.peak')
local temporary = require('memprof.temporary')
local timeline = require('memprof.timeline')
local cumulative = require('memprof.cumulative')
local sampling = require('memprof.sampling')

local M = {}

-- The views, in the order their passes run and reports print them.
M.VIEWS = { 'leaks', 'peak', 'temporary', 'timeline' }

-- What each view needs from the stream beyond the version 3 format.
M.VIEW_NEEDS = { timeline = 'time' }

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

-- A sampled profile's events are scaled into estimates first
-- (memprof.sampling), so that every pass and format shows estimates.
-- The loops call functions held in locals: when events take different
-- branches (allocations, frees), LuaJIT runs the start of its compiled
-- loop again for each, lookups of methods included.
local function feed_all(stream, heap_pass, passes)
  local feed = chain(passes, 1) or nothing
  local scale = sampling.scaler(stream)
  local next_event, feed_heap = stream.next, heap_pass.feed
  local ev = next_event(stream)
  if scale then
    while ev do
      scale(ev)
      feed(ev, feed_heap(heap_pass, ev), heap_pass)
      ev = next_event(stream)
    end
    return
  end
  while ev do
    feed(ev, feed_heap(heap_pass, ev), heap_pass)
    ev = next_event(stream)
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
