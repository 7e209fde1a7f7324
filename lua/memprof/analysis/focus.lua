-- memprof.analysis.focus: --focus=TEXT and --ignore=TEXT: only the
-- blocks of the places a text names reach the passes, so that every view
-- and format shows them alone.
--
--   local filter = focus.new({ focus = TEXT, ignore = TEXT })
--     nil when neither is given (the loop then runs as without it)
--   feed = filter:wrap(feed)       -- between the tracker and the passes
--   view = filter:tracker(tracker) -- what the passes' finish see
--
-- A place matches a text when the text is a plain substring (no
-- pattern characters) of its name or of its function's name
-- (`@app/cache.lua:12`, `function at @app/cache.lua:10`), or of any
-- frame of its stack.  A block is kept when the event that produced it
-- matches `focus` (if given) and does not match `ignore` (as pprof's
-- -focus and -ignore keep a sample by its stack).  A free is kept when
-- the block it frees was kept, whoever freed it (the collector, say); a
-- realloc is kept as such when both blocks are, as an alloc or a free
-- when one is.  Blocks allocated before the profile are kept when the
-- event that releases them matches.  The net bytes are those of the
-- kept events, so every view still adds up.

local M = {}

local find = string.find

-- Whether `text` is in the name of a site or of its function.
local function names_match(site, text)
  if find(site.name, text, 1, true) then
    return true
  end
  local func = site.func
  return func ~= nil and func ~= site and func.name ~= nil and
    find(func.name, text, 1, true) ~= nil
end

-- match(site, stack) -> whether the place or a frame of its stack has
-- `text`, remembered per site and per stack.
local function matcher(text)
  local by_site, by_stack = {}, {}
  local function site_matches(site)
    local known = by_site[site]
    if known == nil then
      known = names_match(site, text)
      by_site[site] = known
    end
    return known
  end
  return function(site, stack)
    if site_matches(site) then
      return true
    end
    if not stack then
      return false
    end
    local known = by_stack[stack]
    if known == nil then
      known = false
      for _, frame in ipairs(stack.frames or stack) do
        if site_matches(frame) then
          known = true
          break
        end
      end
      by_stack[stack] = known
    end
    return known
  end
end

local Filter = {}
Filter.__index = Filter

function M.new(opts)
  if not (opts and (opts.focus or opts.ignore)) then
    return nil
  end
  local focus = opts.focus and matcher(opts.focus)
  local ignore = opts.ignore and matcher(opts.ignore)
  local self = setmetatable({ total = 0 }, Filter)
  function self.keeps(site, stack)
    if focus and not focus(site, stack) then
      return false
    end
    return not (ignore and ignore(site, stack))
  end
  return self
end

-- The feed of the passes, given only the kept events (or their kept
-- halves), with the net bytes of those in facts.total.
function Filter:wrap(feed)
  local keeps = self.keeps
  local function released(site, stack, owner_id, facts)
    if owner_id == 0 or not facts.owner then
      return keeps(site, stack)
    end
    return keeps(facts.owner, facts.owner_stack)
  end
  return function(kind, site, stack, osize, nsize, oweight, nweight,
      owner_id, facts)
    local old = kind ~= 'alloc' and released(site, stack, owner_id, facts)
    local new = kind ~= 'free' and keeps(site, stack)
    if old and new then
      self.total = self.total + nsize - osize
    elseif new then
      kind, osize, owner_id = 'alloc', 0, nil
      self.total = self.total + nsize
    elseif old then
      kind, nsize = 'free', 0
      self.total = self.total - osize
    else
      return
    end
    facts.total = self.total
    return feed(kind, site, stack, osize, nsize, oweight, nweight, owner_id,
      facts)
  end
end

-- The tracker as the passes' finish see it: the net bytes of the kept
-- events, and the live blocks of the kept places (the tracker's
-- live_blocks, inherited, lists those of view:each_live_block).
function Filter:tracker(tracker)
  local keeps, total = self.keeps, self.total
  local view = setmetatable({ total = total }, { __index = tracker })
  function view.each_live_block(_, fn)
    tracker:each_live_block(function(addr, size, site, stack, born, weight)
      if keeps(site, stack) then
        fn(addr, size, site, stack, born, weight)
      end
    end)
  end
  function view.forget(_)
    tracker:forget()
  end
  return view
end

return M
