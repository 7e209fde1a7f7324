-- Known heap snapshots built byte by byte (helpers/heap_builder.lua), for
-- the specs of the reports of heap snapshots.
local H = require('helpers.heap_builder')

local M = {}

-- The known graph: a module-level cache of 20 pages, a closure's upvalue
-- `history` of 3 records, a suspended coroutine's local `pending`, and a
-- weak-keyed table whose keys are the records (never their holder), and
-- a key to an object only a weak reference reaches (not in the file).
-- opts.added: pages added to the cache after the rest (the objects before
-- them keep their addresses: a later snapshot of the same process).
-- b.pages and b.records are the addresses of the pages and records.
function M.known(opts)
  opts = opts or {}
  local b = H.new(opts)
  b.pages, b.records = {}, {}
  local registry = b:table(100)
  b:root('registry', registry)
  local loaded = b:table(80)
  b:named(registry, '_LOADED', loaded, 30)
  local catalog = b:table(64)
  b:named(loaded, 'catalog', catalog, 30)
  local cache = b:table(500, { asize = 21 })
  b:named(catalog, 'rendered_cache', cache, 40)
  for i = 1, 20 do
    b.pages[i] = b:string(('page %02d'):format(i), 100)
    b:index(cache, i, b.pages[i])
  end
  local globals = b:table(200)
  b:named(loaded, '_G', globals, 24)
  local record = b:func(40, 1)
  b:named(globals, 'record', record, 30)
  local upvalue = b:upvalue(24)
  b:upvalue_ref(record, upvalue, 1, 'history')
  local history = b:table(120, { asize = 4 })
  b:upvalue_value(upvalue, history)
  local records = b.records
  for i = 1, 3 do
    records[i] = b:table(56)
    b:index(history, i, records[i])
  end
  local seen = b:table(80, { nodes = 4, weak = 1 })
  b:named(globals, 'seen', seen, 24)
  for i = 1, 3 do b:key(seen, records[i], true) end
  b:key(seen, 0xdead00, true)
  local co = b:thread(300, 40, 5)
  b:index(registry, 1, co)
  local pending = b:table(150)
  b:stack(co, pending, 3, 1, 'pending')
  local main = b:thread(400, 40, 2)
  b:root('main thread', main)
  b:env(main, globals)
  for i = 21, 20 + (opts.added or 0) do
    b:index(cache, i, b:string(('page %02d'):format(i), 100))
  end
  return b
end

-- A profile (built byte by byte) of the known graph's pages (by
-- string.rep at catalog.lua:46, called from handler.lua:7) and records
-- (handler.lua:12); a block made and freed; after the byte the snapshot
-- notes, a record freed and its address reused elsewhere (not read);
-- opts.defined_after: a function defined first there, as a program that
-- calls a new function after its snapshot has it.
function M.known_profile(path, opts)
  local B = require('helpers.stream_builder')
  local s = B.new():lfunc(0x100, '@catalog.lua', 40)
    :lfunc(0x200, '@handler.lua', 1):cfunc(0x900, 'string.rep')
    :events({ version = B.EXTENDED })
  s:stack(1, { B.c(0x900), B.lua(0x100, 46), B.lua(0x200, 7) })
  s:stack(2, { B.lua(0x200, 12) })
  local probe = M.known()
  for _, addr in ipairs(probe.pages) do
    s:alloc(B.lua(0x100, 46, 1), addr, 100)
  end
  for _, addr in ipairs(probe.records) do
    s:alloc(B.lua(0x200, 12, 2), addr, 56)
  end
  s:alloc(B.lua(0x200, 12, 2), 0x99000, 56)
  s:free(B.internal(), 0x99000, 56)
  local written = s:size()
  if opts and opts.defined_after then
    s:define_lfunc(0x300, '@later.lua', 1)
  end
  s:free(B.internal(), probe.records[1], 56)
  s:alloc(B.lua(0x200, 99), probe.records[1], 56)
  local file = assert(io.open(path, 'wb'))
  file:write(s:epilogue():bytes())
  file:close()
  return written
end

return M
