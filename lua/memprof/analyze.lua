-- memprof.analyze: read a stream once and feed every analysis pass.
--
--   local result = analyze.run(stream)
--   result.heap    -- memprof.heap pass (always run, first)
--   result.sites   -- memprof.sites pass
--   result.stream  -- the stream (name, warning, events, aliases, ...)
--
-- More passes: analyze.run(stream, { passes = { { name = 'peak',
-- pass = my_pass } } }).  A pass has feed(ev, owner), called for every
-- event in order (ev is the reader's reused table: copy what you keep;
-- owner is the site that produced the block a realloc or free releases),
-- and optionally finish(stream), whose result (if not nil) replaces the
-- pass in result[name].

local heap = require('memprof.heap')
local sites = require('memprof.sites')

local M = {}

function M.default_passes()
  return { { name = 'sites', pass = sites.new() } }
end

function M.run(stream, opts)
  opts = opts or {}
  local heap_pass = heap.new()
  local entries = M.default_passes()
  for _, entry in ipairs(opts.passes or {}) do
    entries[#entries + 1] = entry
  end
  local passes = {}
  for i, entry in ipairs(entries) do
    passes[i] = entry.pass
  end
  local count = #passes
  local ev = stream:next()
  while ev do
    local owner = heap_pass:feed(ev)
    for i = 1, count do
      passes[i]:feed(ev, owner)
    end
    ev = stream:next()
  end
  local result = { stream = stream, heap = heap_pass }
  for _, entry in ipairs(entries) do
    local finished = entry.pass.finish and entry.pass:finish(stream)
    if finished == nil then
      finished = entry.pass
    end
    result[entry.name] = finished
  end
  return result
end

return M
