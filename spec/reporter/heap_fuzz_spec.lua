-- memprof-report on mutated heap snapshots (helpers/heap_fuzz.lua): a
-- bounded, seeded set of cases, each run in a child with a time limit;
-- every one reads or is refused with `FILE: byte N: ...`: no signal, no
-- hang, no traceback.  `make fuzz` runs many more (bench/fuzz_heap.lua).
local C = require('helpers.command')
local fuzz = require('helpers.heap_fuzz')

local CASES, SEED = 30, 30

local write = C.write_file

local function read_all(path)
  return assert(C.read_file(path))
end

describe('memprof-report on mutated heap snapshots', function()
  local path
  before_each(function() path = os.tmpname() end)
  after_each(function() os.remove(path) end)

  it('tells a report, a refusal and a failure apart', function()
    local base = fuzz.bases()[1]
    assert.are.same({ 'ok' }, { (fuzz.run(write(path, base.bytes))) })
    local outcome, line = fuzz.run(write(path, base.bytes:sub(1, 10)))
    assert.are.equal('refused', outcome)
    assert.are.equal('memprof-report: ' .. path .. ': byte 10: the file ' ..
      "is truncated: expected the time the snapshot was taken", line)
    outcome = fuzz.run(path, { lua = 'luajit -e "error(1)"' })
    assert.are.equal('uncaught', outcome)
    local known = write(path .. '.known', base.bytes)
    outcome, line = fuzz.run(write(path, 'no snapshot'),
      { args = '--diff ' .. known })
    os.remove(known)
    assert.are.equal('rejected', outcome)
    assert.are.equal('memprof-report: ' .. path .. ' is not a heap ' ..
      'snapshot: --diff compares two heap snapshots or two profiles (see ' ..
      '--help)', line)
    outcome = fuzz.run(path, { lua = 'luajit -e "local ffi = ' ..
      'require([[ffi]]); ffi.cdef([[int raise(int)]]); ffi.C.raise(11)"' })
    assert.are.equal('crash', outcome)
    outcome = fuzz.run(path, { lua = 'luajit -e "while true do end"',
      timeout = 1 })
    assert.are.equal('hang', outcome)
  end)

  it('reports the same graph whatever the order of its records', function()
    local rng = fuzz.rng(SEED)
    local output = path .. '.out'
    for _, base in ipairs(fuzz.bases()) do
      assert.are.equal('ok', (fuzz.run(write(path, base.bytes),
        { output = output })))
      local want = read_all(output)
      for _ = 1, 3 do
        write(path, fuzz.objects_later(base, rng))
        assert.are.equal('ok', (fuzz.run(path, { output = output })))
        assert.are.equal(want, read_all(output))
      end
    end
    os.remove(output)
  end)

  it('reads or refuses every case', function()
    local bases, rng = fuzz.bases(), fuzz.rng(SEED)
    local counts, bad, kinds = { ok = 0, refused = 0 }, {}, {}
    for i = 1, CASES do
      local base = bases[(i - 1) % #bases + 1]
      local bytes, how = fuzz.mutate(base, rng)
      for kind in how:gmatch('[^+]+') do kinds[kind] = true end
      local outcome, detail = fuzz.run(write(path, bytes))
      counts[outcome] = (counts[outcome] or 0) + 1
      if outcome ~= 'ok' and outcome ~= 'refused' and
        outcome ~= 'rejected' then
        bad[#bad + 1] = string.format('case %d (%s, %s): %s: %s', i,
          base.name, how, outcome, detail)
      end
    end
    assert.are.same({}, bad)
    -- Both outcomes came, and every kind of mutation.
    assert.is_true(counts.ok > 0 and counts.refused > 0)
    for _, kind in ipairs(fuzz.KINDS) do assert.is_true(kinds[kind], kind) end
  end)
end)
