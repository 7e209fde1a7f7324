-- A small program to profile: a cache that keeps some of what it builds.
-- `make demo` profiles it, snapshots its heap: what is live, who holds it.
local memprof = require('memprof')

local function render(user)
  return string.format('<li>%s (%d)</li>', user.name, user.visits)
end

local function build_page(users)
  local parts = {}
  for i, user in ipairs(users) do parts[i] = render(user) end
  return table.concat(parts, '\n')
end

local cache = {}
local function handle(request)
  local users = {}
  for i = 1, 20 do
    users[i] = { name = 'user' .. (request * 20 + i), visits = i }
  end
  local page = build_page(users)
  if request % 10 == 0 then cache[request] = page end -- The leak.
  return #page
end

local out = arg and arg[1] or 'demo.bin'
local bytes, heap, as_heap = 0, out .. '.heap', { format = 'heap' }
assert(memprof.start(out, { stack_depth = 8, collect_at_stop = true }))
for request = 1, 2000 do bytes = bytes + handle(request) end
assert(memprof.snapshot(heap, as_heap))
assert(memprof.stop())
io.stderr:write(string.format('served %d bytes; profile written to %s, ' ..
  'heap snapshot to %s\n', bytes, out, heap))
