-- memprof.read.trace_stacks: call stacks for the events of compiled code.
--
-- The stream gives no stack for an event in a trace (compiled code keeps
-- the VM's frames in registers, so the writer does not walk them), but
-- it gives the place where the trace starts: a line of a Lua function.
-- The stacks of the other events say who called that function.  For an
-- event in a trace, the reader makes a stack of the trace's site
-- followed by the callers of the function where the trace starts, as
-- the stream last gave them:
--   1. the callers in the stack of the last event that had one, if that
--      stack passes through the function (the program was running it);
--   2. else the callers in the last stack defined through the function;
--   3. else none: the event has no stack.
-- Where the function appears several times in a stack (recursion), its
-- innermost frame is the one taken.
--
--   local trace_stacks = require('memprof.read.trace_stacks')
--   local inferred = trace_stacks.new()
--   inferred:defined(stack)         -- every stack definition, in order
--   inferred:stack_for(trace, context) -> a stack, or nil (also
--     trace_stacks.stack_for(inferred, trace, context))
--     trace    { site = the trace's site, func = the function table of
--              its start (memprof.read.stream's site.func) }, one table per
--              trace symbol instance; it keeps its last answer in the
--              fields context, stack, from_last and generation
--     context  the stack of the last event that had one, or nil
--   inferred.list   every stack made, in order
--
-- A stack made here is { inferred = true, index = N, frames = { site,
-- caller, ... }, next_of_hash = (used here) }, interned by its frames: two traces from one place
-- with the same callers share one.  Memory grows with the traces and
-- the distinct stacks made, never with the events.

local M = {}

local TraceStacks = {}
TraceStacks.__index = TraceStacks

function M.new()
  return setmetatable({
    list = {},
    by_hash = {},       -- a hash of the frames -> stack
    last_through = {},  -- function table -> the last stack defined through it
    sites_of = {},      -- function table -> set of its sites seen in stacks
    generation = 0,     -- how many stacks were defined
  }, TraceStacks)
end

-- Remembers a stack as the last one defined through each Lua function
-- it passes, and each Lua frame as one of its function's sites.
function TraceStacks:defined(stack)
  self.generation = self.generation + 1
  local frames, last, sites_of = stack.frames, self.last_through,
    self.sites_of
  for i = 1, #frames do
    local frame = frames[i]
    if frame.source == 'lua' then
      local func = frame.func
      last[func] = stack
      local sites = sites_of[func]
      if not sites then
        sites = {}
        sites_of[func] = sites
      end
      sites[frame] = true
    end
  end
end

-- The index of the innermost frame of func in a stack defined before,
-- or nil.  Its frames are looked up among the function's sites rather
-- than followed to their function: in a large profile the sites are
-- spread over the memory, and reading each is what would cost.
function TraceStacks:index_of(stack, func)
  local sites, frames = self.sites_of[func], stack.frames
  if not sites then
    return nil
  end
  for i = 1, #frames do
    if sites[frames[i]] then
      return i
    end
  end
  return nil
end

-- A hash of the frames site, frames[at + 1 ...]: a number below 2^32,
-- so that every step is exact in a double.
local function hash_of(site, frames, at)
  local hash = site.id
  for i = at + 1, #frames do
    hash = (hash * 1000003 + frames[i].id) % 4294967296
  end
  return hash
end

-- Whether stack has the frames site, frames[at + 1 ...].
local function same_frames(stack, site, frames, at)
  local made = stack.frames
  if made[1] ~= site or #made ~= #frames - at + 1 then
    return false
  end
  for i = at + 1, #frames do
    if made[i - at + 1] ~= frames[i] then
      return false
    end
  end
  return true
end

-- The stack of site followed by frames[at + 1 ...], interned by a hash
-- of its frames (stacks of one hash are chained by `next_of_hash`).
function TraceStacks:intern(site, frames, at)
  local hash = hash_of(site, frames, at)
  local first = self.by_hash[hash]
  local stack = first
  while stack and not same_frames(stack, site, frames, at) do
    stack = stack.next_of_hash
  end
  if not stack then
    local made = { site }
    for i = at + 1, #frames do
      made[#made + 1] = frames[i]
    end
    stack = { inferred = true, index = #self.list + 1, frames = made,
      next_of_hash = first }
    self.list[stack.index] = stack
    self.by_hash[hash] = stack
  end
  return stack
end

-- The stack for a trace's event in this context, and whether it came
-- from the last stack defined through the function (rule 2).
function TraceStacks:make(trace, context)
  local func = trace.func
  local at = context and self:index_of(context, func)
  if at then
    return self:intern(trace.site, context.frames, at), false
  end
  local last = self.last_through[func]
  if last then
    return self:intern(trace.site, last.frames, self:index_of(last, func)),
      true
  end
  return nil, true
end

-- Each trace remembers its last answer: the events of a compiled loop
-- come one after another in one context.
function TraceStacks:stack_for(trace, context)
  if trace.generation and trace.context == context and
      (not trace.from_last or trace.generation == self.generation) then
    return trace.stack
  end
  local stack, from_last = self:make(trace, context)
  trace.context, trace.stack, trace.from_last = context, stack, from_last
  trace.generation = self.generation
  return stack
end

-- The method as a function, stack_for(inferred, trace, context), for a
-- caller that calls it for each event (a call through the metatable
-- looks the method up each time).
M.stack_for = TraceStacks.stack_for

return M
