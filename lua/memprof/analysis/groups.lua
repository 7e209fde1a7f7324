-- memprof.analysis.groups: what the rows of a report stand for.
--
--   local groups = require('memprof.analysis.groups')
--   local grouper = groups.new('caller')
--   local group = grouper:key(site, stack)   -- stack may be nil; site
--                             -- is a memprof.read.stream site (found by its
--                             -- id, which a site keeps first: site[1])
--
-- Modes (groups.MODES):
--   line      the place of the event: '@f.lua:12', 'string.rep',
--             'TRACE started at @f.lua:40', 'INTERNAL' (the default)
--   function  the function that place belongs to (site.func):
--             'function at @f.lua:10', 'main chunk of @f.lua', the C
--             function's name, the trace, 'INTERNAL'
--   caller    the Lua line that called the function in which the
--             allocation happened: the first frame of the stack equal to
--             the event's place is found, and the caller is the next Lua
--             frame after it
--   stack     the whole call stack
--
-- Groups are interned by name: key() returns the same table for every
-- (site, stack) whose row has the same name, so a group can be used as a
-- table key and results need no merging.  (A stack's group is interned
-- by the names of its frames, and its name is joined the first time it
-- is read: the names of every stack are a large part of a report's
-- memory, and the flame graph formats, which name frames themselves,
-- never read them.)  A group's fields:
--   id       dense from 1, in order of first appearance
--   mode     the grouper's mode
--   name     the one-line name of the row, unique within the grouper; for
--            a stack, its frames innermost first, joined by ' <- '
--   source   'lua' | 'c' | 'trace' | 'internal' | 'before' (the pseudo-
--            site of blocks allocated before profiling, which is its own
--            row in every mode)
--   site     what the row is named after: the site (line), the
--            function table of the site (function, see memprof.read.stream),
--            the caller's frame (caller), the innermost frame (stack)
--   frames   stack mode: the stack's frames (sites), innermost first
--   note     nil, or why the row is not what the mode asks for:
--            'no stack' (the event carried no stack, so the row is its
--            own place: internal events, trace events whose callers no
--            stack shows, streams without stacks) or 'no caller' (no Lua frame follows the place in
--            the stack: the top level, or the stack was cut short)
--   aliases  the aliases ('function_alias_N') that the name uses (a
--            name without any shares one empty list: never modify it)
--
-- A group is a memprof.record (a large profile has a group per place):
-- groups.Group is its shape.  A group named after one site, with no
-- note and no alias (most groups), is a smaller record of its id and
-- site only, whose other fields are read from the site: 88 bytes where
-- a Group takes 136.  Either keeps its id first (group[groups.ID]).
--
-- Modes 'caller' and 'stack' need streams with stacks
-- (groups.needs_stacks(mode)).

local record = require('memprof.record')

local M = {}

local FIELDS = { 'id', 'mode', 'name', 'source', 'site', 'frames', 'note',
  'aliases' }
local Group = record.shape(FIELDS)
M.Group = Group

-- Where a group's id is in its record: the views' hot paths read
-- group[groups.ID] (group.id is a call of the shape's __index, on every
-- event).
M.ID = 1

-- The name of a stack's group: its frames' names, innermost first (from
-- frame `from` on, default 1).
local function stack_name(frames, from)
  local names = {}
  for i = from or 1, #frames do
    names[#names + 1] = frames[i].name
  end
  return table.concat(names, ' <- ')
end
M.stack_name = stack_name

-- A stack's group: a Group whose name is joined from its frames when
-- it is first read, then kept.
local StackGroup = record.shape(FIELDS)
assert(Group.index.id == M.ID and StackGroup.index.id == M.ID)
do
  local NAME, FRAMES = StackGroup.index.name, StackGroup.index.frames
  local read = StackGroup.meta.__index
  StackGroup.meta.__index = function(self, field)
    if field == 'name' then
      local name = stack_name(rawget(self, FRAMES))
      rawset(self, NAME, name)
      return name
    end
    return read(self, field)
  end
end

-- The aliases of every group whose name uses none: one list for all, as
-- most names use none and a large profile has hundreds of thousands of
-- groups.
local NO_ALIASES = {}

-- The metatable of the groups of one site (id, site) in one mode.  (Its
-- __index is a vararg function for the reason given in memprof.record:
-- LuaJIT never starts a trace there.)
local SiteGroup = {}
-- luacheck: push no unused args
function SiteGroup.meta(mode)
  return {
    __index = function(self, field, ...)
      if field == 'id' then
        return rawget(self, 1)
      end
      local site = rawget(self, 2)
      if field == 'site' then
        return site
      elseif field == 'name' or field == 'source' then
        return site[field]
      elseif field == 'mode' then
        return mode
      elseif field == 'aliases' then
        return NO_ALIASES
      end
      return nil
    end,
    __newindex = function(self, field, ...)
      error(string.format("a group's field '%s' cannot be changed",
        tostring(field)), 2)
    end,
  }
end
-- luacheck: pop

M.MODES = { 'line', 'function', 'caller', 'stack' }

local NEEDS_STACKS = { caller = true, stack = true }

local NOTE_SUFFIX = {
  ['no stack'] = ' (no call stack)',
  ['no caller'] = ' (no Lua caller in the stack)',
}

function M.is_mode(mode)
  for _, known in ipairs(M.MODES) do
    if mode == known then
      return true
    end
  end
  return false
end

function M.needs_stacks(mode)
  return NEEDS_STACKS[mode] == true
end

local SPACE = (' '):byte()

-- Whether name is the start of (and shorter than) text.
local function starts(text, name)
  return #name < #text and text:find(name, 1, true) == 1
end

-- Where frame i of stack a is named x and of stack b y, and x is the
-- start of y: the byte after x in a's name against the byte after it in
-- b's name (y's next byte).  After x come ' <- ' when a has more frames,
-- or nothing.  Returns -1 (a's name first), 1, or 0 when both bytes are
-- spaces (the names must then be joined).
local function after_start(a, i, x, y)
  local next_byte = y:byte(#x + 1)
  if i == #a or SPACE < next_byte then
    return -1
  elseif next_byte < SPACE then
    return 1
  end
  return 0
end

-- Whether the name of one stack's group sorts before another's, the
-- names joined from the frames only where the frames cannot tell.
local function stack_name_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = a[i].name, b[i].name
    if x ~= y then
      local order
      if starts(y, x) then
        order = after_start(a, i, x, y)
      elseif starts(x, y) then
        order = -after_start(b, i, y, x)
      else
        return x < y
      end
      if order == 0 then
        return stack_name(a, i) < stack_name(b, i)
      end
      return order < 0
    end
  end
  return #a < #b
end

-- Whether group a's name sorts before group b's (a < b as strings),
-- without joining the names of stack groups (see above).
function M.name_less(a, b)
  local meta = StackGroup.meta
  if getmetatable(a) == meta and getmetatable(b) == meta then
    return stack_name_less(a.frames, b.frames)
  end
  return a.name < b.name
end

local Grouper = {}
Grouper.__index = Grouper

function M.new(mode)
  assert(M.is_mode(mode), 'unknown grouping mode')
  return setmetatable({
    mode = mode,
    uses_stacks = M.needs_stacks(mode),
    list = {},        -- every group, by id
    by_name = {},     -- name -> group
    by_site_id = {},  -- a site's id -> its group (events without a
                      -- stack): the ids are dense, so mostly an array
    by_stack = {},    -- stack -> group (stack mode)
                      -- stack -> site -> group (caller mode)
    by_frames = {},   -- the ids of a stack's frame names -> group
    name_ids = {},    -- a frame's name -> its number (stack mode)
    names = 0,        -- how many names have a number
    ids = {},         -- frames_key's list, reused (no garbage per stack)
    site_group_meta = SiteGroup.meta(mode),
  }, Grouper)
end

-- The aliases used by a list of sites (or function tables).
local function aliases_of(sites)
  local list, seen = NO_ALIASES, nil
  for _, site in ipairs(sites) do
    local alias = site.alias
    if alias and not (seen and seen[alias]) then
      if list == NO_ALIASES then
        list, seen = {}, {}
      end
      seen[alias] = true
      list[#list + 1] = alias
    end
  end
  return list
end

-- A new group (its id the next one): listed, and found again by `key`
-- in `index`.
local function listed(self, index, key, group)
  self.list[group[M.ID]] = group
  index[key] = group
  return group
end

-- The group called `name`, created if it is new: its site, frames
-- (or nil), note (or nil) and aliases.
function Grouper:intern(name, site, frames, note, aliases)
  return self.by_name[name] or listed(self, self.by_name, name, Group.make({
    #self.list + 1, self.mode, name, site.source, site, frames, note,
    aliases }))
end

-- A row named after one site (or function table), with an optional note.
function Grouper:site_group(site, note)
  local name = site.name
  if note then
    name = name .. NOTE_SUFFIX[note]
  elseif not site.alias then
    return self.by_name[name] or listed(self, self.by_name, name,
      setmetatable({ #self.list + 1, site }, self.site_group_meta))
  end
  return self:intern(name, site, nil, note, aliases_of({ site }))
end

-- The position of the event's place in a stack's frames, or nil.
local function place_in(frames, site)
  for i = 1, #frames do
    if frames[i] == site then
      return i
    end
  end
  -- The same place under another symbol instance (the C symbol nearest
  -- to an address can change between the definition and the event).
  for i = 1, #frames do
    if frames[i].name == site.name then
      return i
    end
  end
  return nil
end

-- The Lua frame that called the function in which the event happened.
function M.caller_of(frames, site)
  local at = place_in(frames, site)
  if not at then
    return nil
  end
  for i = at + 1, #frames do
    if frames[i].source == 'lua' then
      return frames[i]
    end
  end
  return nil
end

function Grouper:caller_group(site, stack)
  local caller = M.caller_of(stack.frames, site)
  if caller then
    return self:site_group(caller)
  end
  return self:site_group(site, 'no caller')
end

-- The key of a stack's frames by name: the numbers of their names
-- (a few bytes a frame, where the names take tens).
function Grouper:frames_key(frames)
  local ids, name_ids = self.ids, self.name_ids
  for i, frame in ipairs(frames) do
    local name = frame.name
    local id = name_ids[name]
    if not id then
      id = self.names + 1
      self.names = id
      name_ids[name] = id
    end
    ids[i] = id
  end
  return table.concat(ids, ' ', 1, #frames)
end

function Grouper:stack_group(stack)
  local frames = stack.frames
  local key = self:frames_key(frames)
  return self.by_frames[key] or listed(self, self.by_frames, key,
    StackGroup.make({ #self.list + 1, self.mode, nil, frames[1].source,
      frames[1], frames, nil, aliases_of(frames) }))
end

-- The group of a site alone: in line and function modes, and for events
-- without a stack in the other modes.
function Grouper:site_only_group(site)
  local mode = self.mode
  if mode == 'line' or site.source == 'before' then
    return self:site_group(site)
  elseif mode == 'function' then
    return self:site_group(site.func or site)
  end
  return self:site_group(site, 'no stack')
end

-- The frames of a group, innermost first: a stack's, or the one place a
-- group of another mode is named after (folded and pprof name a row by
-- its frames).
function M.frames_of(group)
  if group.frames then
    return group.frames
  end
  return { group.site or group }
end

-- After the last event: empties the cache of groups by stack (an entry
-- per stack, which only events need; a later key() finds the same group
-- again).
function Grouper:finish()
  self.by_stack = {}
end

-- The group of an event (or block) with this site and stack (nil if
-- none), computed once per site and stack.
function Grouper:key(site, stack)
  if not stack or not self.uses_stacks then
    local id = site[1]
    local group = self.by_site_id[id]
    if not group then
      group = self:site_only_group(site)
      self.by_site_id[id] = group
    end
    return group
  end
  if self.mode == 'stack' then
    local group = self.by_stack[stack]
    if not group then
      group = self:stack_group(stack)
      self.by_stack[stack] = group
    end
    return group
  end
  local by_site = self.by_stack[stack]
  if not by_site then
    by_site = {}
    self.by_stack[stack] = by_site
  end
  local group = by_site[site]
  if not group then
    group = self:caller_group(site, stack)
    by_site[site] = group
  end
  return group
end

return M
