-- A small program to profile: a cache that keeps some of what it builds.
-- `make demo` profiles it with stacks and prints what it leaves live.
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
assert(memprof.start(out, { stack_depth = 8, collect_at_stop = true }))
local bytes = 0
for request = 1, 2000 do bytes = bytes + handle(request) end
assert(memprof.stop())
io.stderr:write(string.format('served %d bytes; profile written to %s\n',
  bytes, out))
