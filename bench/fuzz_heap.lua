-- make fuzz: memprof-report on mutated heap snapshots for a bounded time
-- (spec/helpers/heap_fuzz.lua makes the cases and runs each reporter in a
-- child with a time limit; spec/reporter/heap_fuzz_spec.lua runs a few).
--
-- The files mutated: those the helper builds byte by byte, and snapshots
-- of this process taken by memprof.so when it loads (a list, a cache,
-- closures, a suspended coroutine).  One case in five is reported as
-- JSON, one in ten as HTML, one in ten compared with its base (--diff).
--
--   FUZZ_SECONDS  the time to run (default 60)
--   FUZZ_CASES    at most this many cases (default: no bound)
--   FUZZ_SEED     the first case's seed (default 1)
--   FUZZ_KEEP     where the cases that failed are kept (default
--                 build/fuzz-failures)
-- Prints the count of each outcome; exits 1 if any case crashed, hung or
-- failed with anything but a message of one line (`FILE: byte N: ...`,
-- or the command's own, as --diff's for a file that is no snapshot).

local C = require('helpers.command')
local fuzz = require('helpers.heap_fuzz')

local SECONDS = tonumber(os.getenv('FUZZ_SECONDS')) or 60
local CASES = tonumber(os.getenv('FUZZ_CASES')) or math.huge
local SEED = tonumber(os.getenv('FUZZ_SEED')) or 1
local KEEP = os.getenv('FUZZ_KEEP') or 'build/fuzz-failures'

local DIR = string.format('/tmp/memprof-fuzz-%d', math.floor(os.time() %
  100000 * 1000 + os.clock() * 1000))

local write = C.write_file

local function read_all(path)
  return assert(C.read_file(path))
end

-- A snapshot of this process with the module, or nil without it.
local function module_base()
  local ok, memprof = pcall(require, 'memprof')
  if not ok then return nil end
  local list = nil
  for i = 1, 300 do list = { next = list, i = i } end
  local cache = {}
  for i = 1, 200 do cache['key ' .. i] = ('v'):rep(i % 40) end
  local counters = {}
  for i = 1, 20 do counters[i] = function() i = i + 1; return i end end
  local co = coroutine.create(function(x)
    local pending = { x, list }
    coroutine.yield(pending)
  end)
  coroutine.resume(co, cache)
  local path = DIR .. '/module.heap'
  assert(memprof.snapshot(path, { format = 'heap' }))
  local bytes = read_all(path)
  os.remove(path)
  return fuzz.parse('module', bytes), { list, cache, counters, co }
end

local function main()
  assert(os.execute('mkdir -p ' .. DIR) == 0)
  local bases = fuzz.bases()
  local from_module, keep_alive = module_base()
  if from_module then bases[#bases + 1] = from_module end
  local base_paths = {}
  for i, b in ipairs(bases) do
    base_paths[i] = write(string.format('%s/base-%d.heap', DIR, i), b.bytes)
  end
  local counts = { ok = 0, refused = 0, rejected = 0, crash = 0, hang = 0,
    uncaught = 0 }
  local kept, started, n = 0, os.time(), 0
  local rng = fuzz.rng(SEED)
  local path = DIR .. '/case.heap'
  while n < CASES and os.time() - started < SECONDS do
    n = n + 1
    local i = (n - 1) % #bases + 1
    local bytes, how = fuzz.mutate(bases[i], rng)
    write(path, bytes)
    local args = ''
    if n % 10 == 0 then
      args = '--diff ' .. base_paths[i]
    elseif n % 10 == 5 then
      args = '--format=html'
    elseif n % 5 == 2 then
      args = '--format=json'
    end
    local outcome, detail = fuzz.run(path, { args = args })
    counts[outcome] = counts[outcome] + 1
    if outcome ~= 'ok' and outcome ~= 'refused' and
      outcome ~= 'rejected' then
      kept = kept + 1
      os.execute('mkdir -p ' .. KEEP)
      local name = string.format('%s/case-%d-%d.heap', KEEP, SEED, n)
      write(name, bytes)
      print(string.format('case %d (%s, %s%s): %s: %s -> %s', n,
        bases[i].name, how, args ~= '' and ', ' .. args or '', outcome,
        detail, name))
    end
  end
  for _, p in ipairs(base_paths) do os.remove(p) end
  os.remove(path)
  os.execute('rmdir ' .. DIR)
  print(string.format('fuzz: %d mutated heap snapshots from %d bases ' ..
    '(seed %d) in %d s: %d reported, %d refused with FILE: byte N, ' ..
    '%d refused otherwise (one line), %d crashes, %d hangs, ' ..
    '%d uncaught errors', n, #bases, SEED, os.time() - started, counts.ok,
    counts.refused, counts.rejected, counts.crash, counts.hang,
    counts.uncaught))
  assert(keep_alive or not from_module)
  return kept == 0 and 0 or 1
end

os.exit(main())
