-- memprof.analysis.analyze: read a stream once and feed every analysis pass.
--
--   local result = analyze.run(stream [, opts])
--   result.heap      -- memprof.analysis.heap pass (always run)
--   result.sites     -- memprof.analysis.sites pass (always run)
--   result.blocks    -- the block tracker (memprof.analysis.blocks): the
--                    -- blocks live at the end
--   result.stream    -- the stream (name, warning, events, aliases, ...;
--                    -- sample_bytes for a sampled profile, whose figures
--                    -- are all estimates: memprof.analysis.sampling)
--   result.grouper   -- the memprof.analysis.groups grouper of the rows
--   result.leaks, result.peak, result.temporary, result.timeline
--                    -- the views asked for (see each module)
--   result.cumulative -- rows grouped by function or stack: each row's
--                    -- figures with its callees' (memprof.analysis.cumulative)
--   analyze.chain(passes, 1) -> feed(...): one function that feeds every
--                    -- pass of a list in turn (for memprof.analysis.live)
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
--   focus, ignore   texts: only the blocks of the places whose name or
--             stack has `focus` and not `ignore` reach the passes
--             (memprof.analysis.focus)
--   overrides false: the sites pass keeps no overrides (memprof.analysis.sites),
--             for a format that does not show them
--   live_blocks  false: once every pass has finished, the tracker
--             forgets the live blocks (result.blocks:each_live_block()
--             then raises an error): the reports need none, and a large
--             profile has a record per live block.  When, besides, the
--             rows are by line and no pass but the heap's and the sites'
--             runs, the tracker keeps no facts of each block at all
--             (memprof.analysis.blocks' option facts = false), which
--             makes each event cheaper
--
-- Every pass takes the events through one call, in order:
--
--   pass:feed(kind, site, stack, osize, nsize, oweight, nweight, owner_id,
--     facts)
--
-- kind, site, stack, osize and nsize are the reader's
-- (stream:next_values()); oweight and nweight how many blocks the old
-- and the new block stand for (1 unless the profile is sampled: then
-- the sizes are estimates too, memprof.analysis.sampling); owner_id
-- (nil for an alloc) is the id of the site that produced the block a
-- realloc or free releases (0: the block is not known), and facts the
-- rest of what the block tracker knows (memprof.analysis.blocks: the
-- released block's owner, stack, age, size and weight, the net bytes,
-- the time, the offset and the number of the event), or nil when no
-- pass but the heap's and the sites' runs, by line.  (Few
-- arguments: each one more is a value LuaJIT's code for an event keeps
-- live through every pass.)  Then
-- optionally pass:finish(stream, tracker) (the tracker lists the blocks
-- live at the end), whose result (if not nil) replaces the pass in
-- result[name].  No pass reads another's fields.
--
-- The views need nothing more than the passes' results to be printed or
-- exported: no pass keeps a reference to the reader's values.

local groups = require('memprof.analysis.groups')
local heap = require('memprof.analysis.heap')
local blocks = require('memprof.analysis.blocks')
local sites = require('memprof.analysis.sites')
local leaks = require('memprof.analysis.leaks')
local peak = require('memprof.analysis.peak')
local temporary = require('memprof.analysis.temporary')
local timeline = require('memprof.analysis.timeline')
local cumulative = require('memprof.analysis.cumulative')
local sampling = require('memprof.analysis.sampling')
local focus = require('memprof.analysis.focus')

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
  return { { name = 'heap', pass = heap.new({ grouper = grouper }) },
    { name = 'sites', pass = sites.new({ grouper = grouper,
      overrides = overrides }) } }
end

-- The passes for opts.
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

-- Whether the tracker must keep the facts of each live block: for the
-- live blocks asked for (opts.live_blocks), and for every pass but the
-- heap's and the sites', which need only the owner of a released block
-- when the rows are by line.  Without them each event costs less.
local function needs_facts(by_group, entries, opts)
  if opts.live_blocks ~= false or by_group or opts.focus or opts.ignore then
    return true
  end
  for _, entry in ipairs(entries) do
    if entry.name ~= 'heap' and entry.name ~= 'sites' then
      return true
    end
  end
  return false
end

-- One function that feeds passes[first..] in turn, two at a time.
-- Calls chained this way, rather than a loop over the passes inside the
-- loop over the events, let LuaJIT compile the whole loop over the
-- events; each pass's feed is looked up once, here, and two passes a
-- function keep the frames few (LuaJIT's code restores each frame of a
-- call when an event leaves its path).
local function chain(passes, first)
  local pass, second = passes[first], passes[first + 1]
  if not pass then
    return nil
  end
  local feed = pass.feed
  if not second then
    return function(kind, site, stack, osize, nsize, oweight, nweight,
        owner_id, facts)
      return feed(pass, kind, site, stack, osize, nsize, oweight, nweight,
        owner_id, facts)
    end
  end
  local feed_second = second.feed
  local rest = chain(passes, first + 2)
  if not rest then
    return function(kind, site, stack, osize, nsize, oweight, nweight,
        owner_id, facts)
      feed(pass, kind, site, stack, osize, nsize, oweight, nweight,
        owner_id, facts)
      return feed_second(second, kind, site, stack, osize, nsize, oweight,
        nweight, owner_id, facts)
    end
  end
  return function(kind, site, stack, osize, nsize, oweight, nweight,
      owner_id, facts)
    feed(pass, kind, site, stack, osize, nsize, oweight, nweight, owner_id,
      facts)
    feed_second(second, kind, site, stack, osize, nsize, oweight, nweight,
      owner_id, facts)
    return rest(kind, site, stack, osize, nsize, oweight, nweight, owner_id,
      facts)
  end
end

M.chain = chain

-- next_values for a stream that has only next() (a table per event).
local function values_of_next(stream)
  local next_event = stream.next
  return function()
    local ev = next_event(stream)
    if not ev then
      return nil
    end
    stream.time = ev.time
    return ev.kind, ev.site, ev.oaddr, ev.osize, ev.naddr, ev.nsize,
      ev.stack, ev.offset
  end
end

-- An unsampled profile's events as they are, each block standing for
-- one.
local function unscaled(_, osize, _, nsize)
  return osize, nsize, 1, 1
end

-- The loop over the events: the reader hands each as values to the
-- tracker, then to the passes; a sampled profile's events are scaled
-- into estimates first.  (The functions are held in locals: when events
-- take different branches, LuaJIT runs the start of its compiled loop
-- again for each, lookups included.)
local function feed_all(stream, tracker, feed)
  local next_values = stream.next_values or values_of_next(stream)
  local track = tracker.track
  local scale = sampling.scaler(stream) or unscaled
  while true do
    local kind, site, oaddr, osize, naddr, nsize, stack, offset =
      next_values(stream)
    if not kind then
      return
    end
    local oweight, nweight
    osize, nsize, oweight, nweight = scale(oaddr, osize, naddr, nsize)
    local owner_id, facts = track(kind, site, stack, oaddr, osize, naddr,
      nsize, nweight, offset)
    feed(kind, site, stack, osize, nsize, oweight, nweight, owner_id, facts)
  end
end

function M.run(stream, opts)
  opts = opts or {}
  local grouper = groups.new(opts.group or 'line')
  -- The heap and sites passes group by line with the sites themselves.
  local by_group = grouper.mode ~= 'line' and grouper or nil
  local entries = make_passes(grouper, by_group, opts)
  local tracker = blocks.new({ facts = needs_facts(by_group, entries,
    opts), sites = stream.sites, stream = stream })
  local passes = {}
  for i, entry in ipairs(entries) do
    passes[i] = entry.pass
  end
  local filter = focus.new(opts)
  local feed = chain(passes, 1)
  feed_all(stream, tracker, filter and filter:wrap(feed) or feed)
  tracker:finish()
  -- The indexes only events needed (the reader's, the tracker's) are
  -- garbage now: a full cycle frees them before the passes' finish make
  -- their results.
  collectgarbage('collect')
  if filter then
    tracker = filter:tracker(tracker)
  end
  local result = { stream = stream, blocks = tracker, grouper = grouper }
  for _, entry in ipairs(entries) do
    local finished = entry.pass.finish and
      entry.pass:finish(stream, tracker)
    if finished == nil then
      finished = entry.pass
    end
    result[entry.name] = finished
  end
  if opts.live_blocks == false then
    tracker:forget()
  end
  grouper:finish()
  return result
end

return M
