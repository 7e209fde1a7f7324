-- Heap snapshots whose records come in an order the format does not
-- promise (docs/heap-format.md: an object's record before its references)
-- read as the same graph (analysis/dominators.lua), and a file that
-- changes between the reader's two passes is refused, never written past.
local H = require('helpers.heap_builder')
local dom = require('memprof.analysis.dominators')
local heap = require('memprof.read.heap_snapshot')

local temp = {}
local function temp_path()
  local p = os.tmpname()
  temp[#temp + 1] = p
  return p
end

local function write(path, bytes)
  local f = assert(io.open(path, 'wb'))
  f:write(bytes)
  f:close()
  return path
end

-- What an analysis says of each reachable object (by address: objects()
-- follows the file's order), and its groups.
local function summary(a)
  local objects, groups = {}, {}
  for addr, pattern, retained in a.objects() do
    objects[#objects + 1] = { addr = addr, pattern = pattern,
      retained = retained, idom = a.idom[addr], path = a.path(addr) }
  end
  table.sort(objects, function(x, y) return x.addr < y.addr end)
  for i, g in ipairs(a.groups) do
    groups[i] = { pattern = g.pattern, objects = g.objects,
      retained = g.retained }
  end
  return { total = a.total, objects = objects, groups = groups }
end

-- A registry holding a list of three tables and a string, each table's
-- record at parts[i] of the builder.
local function list_builder()
  local b = H.new()
  local registry = b:table(100)
  local a, c, d = b:table(40), b:table(50), b:table(60)
  local s = b:string('payload', 30)
  b:root('registry', registry)
  b:index(registry, 1, a)
  b:index(a, 1, c)
  b:index(a, 2, s)
  b:index(c, 1, d)
  b:index(d, 1, s)
  return b
end

-- The builder's records with the one at position `from` (2: the first
-- object) moved to position `to`.
local function moved(b, from, to)
  local parts = {}
  for i, p in ipairs(b.parts) do parts[i] = p end
  table.insert(parts, to, table.remove(parts, from))
  local copy = setmetatable({ parts = parts, objects = b.objects,
    refs = b.refs }, getmetatable(b))
  return copy:bytes()
end

describe('heap snapshot records in any order', function()
  after_each(function()
    for _, p in ipairs(temp) do os.remove(p) end
    temp = {}
  end)

  it('reads objects whose records come after their references', function()
    local b = list_builder()
    local want = summary(dom.analyse_file(write(temp_path(), b:bytes())))
    assert.are.equal(280, want.total)
    assert.are.equal('registry[1][1][1]', want.objects[4].path)
    -- Parts: the header, registry, a, c, d, s, then the six references.
    -- Each table's record moved after every reference (the last first:
    -- past the rows' end; the others: into the next object's row).
    for from = 2, 5 do
      local path = write(temp_path(), moved(b, from, #b.parts))
      assert.are.same(want, summary(dom.analyse_file(path)))
    end
  end)

  it('reads a reference before its source between other records', function()
    local b = list_builder()
    local want = summary(dom.analyse_file(write(temp_path(), b:bytes())))
    -- a's record (part 3) after the references from a (parts 9, 10).
    local path = write(temp_path(), moved(b, 3, 10))
    assert.are.same(want, summary(dom.analyse_file(path)))
  end)

  it('refuses a file that changes between its two passes', function()
    local b = list_builder()
    local path = write(temp_path(), b:bytes())
    -- The second pass reads a file with one more reference from d.
    local more = list_builder()
    local d = 0x1000 + 3 * 0x100
    more:index(d, 2, 0x1000 + 4 * 0x100)
    local changed = more:bytes()
    local open, opened = heap.open, 0
    heap.open = function(p, ...)
      opened = opened + 1
      if opened == 2 then write(p, changed) end
      return open(p, ...)
    end
    local ok, err = pcall(dom.analyse_file, path)
    heap.open = open
    assert.is_false(ok)
    -- The extra reference is the last record before the epilogue.
    local at = #changed - #('\127' .. '\6\7\0end') - #more.parts[#more.parts]
    assert.are.equal(path .. ': byte ' .. at .. ': more references from ' ..
      'an object than when the file was first read: it changed while it ' ..
      'was read', err)
  end)
end)
