-- The report of heap snapshots (memprof-report HEAP, --diff OLD NEW;
-- report/model/holders.lua, model/heap_growth.lua and their text, json
-- and html renderers, cli/heap_report.lua) on known graphs built byte by
-- byte.
local graphs = require('helpers.heap_graphs')
local json_text = require('memprof.encode.json_text')

local run = require('helpers.report_run')
local report, temp_path, remove_temp = run.report, run.temp_path,
  run.remove_temp

local KNOWN_TEXT = [[
HEAP SNAPSHOT %s
41 objects, 4,404B, 46 references from 2 roots; GC64; 3 JIT traces alive
taken 2026-11-28 21:06:40 UTC by process 4242, with no profile running

WHAT HOLDS THE MEMORY (objects by their path from a root, the most bytes first; retaining: freed if they went)
package.loaded["catalog"].rendered_cache[*]: 20 strings, 2,000B
package.loaded["catalog"].rendered_cache: 1 table, 500B, retaining 2,500B
main thread: 1 thread, 400B
registry[1]: 1 thread, 300B, retaining 450B
_G: 1 table, 200B, retaining 686B
registry[1]<local pending>: 1 table, 150B
_G.record<upvalue history>: 2 objects (1 table, 1 upvalue), 144B, retaining 312B
registry: 1 table, 100B, retaining 3,318B
package.loaded: 1 table, 80B, retaining 2,738B
_G.seen: 1 table, 80B
package.loaded["catalog"]: 1 table, 64B, retaining 2,604B
_G.record<upvalue history>[1]: 1 table, 56B
_G.record<upvalue history>[2]: 1 table, 56B
_G.record<upvalue history>[3]: 1 table, 56B
_G<key>: 2 strings, 54B
package.loaded<key>: 2 strings, 54B
_G.record: 1 function, 40B, retaining 352B
package.loaded["catalog"]<key>: 1 string, 40B
registry<key>: 1 string, 30B

OBJECTS BY TYPE
string: 26 objects, 2,178B
    held by package.loaded["catalog"].rendered_cache[*]: 20 objects, 2,000B
    held by _G<key>: 2 objects, 54B
    held by package.loaded<key>: 2 objects, 54B
    and by 2 more paths
table: 11 objects, 1,462B
    held by package.loaded["catalog"].rendered_cache: 1 object, 500B
    held by _G: 1 object, 200B
    held by registry[1]<local pending>: 1 object, 150B
    and by 8 more paths
thread: 2 objects, 700B
    held by main thread: 1 object, 400B
    held by registry[1]: 1 object, 300B
function: 1 object, 40B
    held by _G.record: 1 object, 40B
upvalue: 1 object, 24B
    held by _G.record<upvalue history>: 1 object, 24B
]]

describe('memprof-report of a heap snapshot', function()
  after_each(remove_temp)

  it('says what holds the memory of a known graph, as text', function()
    local path = graphs.known({ traces = 3 }):write(temp_path())
    local code, out, err = report('--all', path)
    assert.equal('', err)
    assert.equal(0, code)
    assert.equal(KNOWN_TEXT:format(path), out)
  end)

  -- A thread whose frame of level 2 runs `fn` of a prototype defined at
  -- `firstline` of chunk `chunk`, at `line`, and holds a local `cache`.
  local function frame_graph(version, chunk, firstline, line)
    local H = require('helpers.heap_builder')
    local b = H.new({ version = version })
    local thread = b:thread(400, 40, 8)
    b:root('main thread', thread)
    local name = b:string(chunk, 40)
    local proto = b:proto(200, firstline, 10)
    b:chunkname(proto, name)
    local fn = b:func(40)
    b:proto_ref(fn, proto)
    b:frame_function(thread, fn, 4, 2, line)
    local cache = b:table(100)
    b:stack(thread, cache, 5, 2, 'cache')
    return b:write(temp_path())
  end

  -- The row of the local `cache` of frame_graph(...).
  local function cache_row(...)
    local code, out, err = report(frame_graph(...))
    assert.equal(0, code, err)
    return out:match('\n(main thread<local[^\n]*)')
  end

  it("names a local by its frame's function and the line it runs",
    function()
    assert.equal('main thread<local cache in function at @app.lua:12, ' ..
      'line 20>: 1 table, 100B', cache_row(3, '@app.lua', 12, 20))
    assert.equal('main thread<local cache in main chunk of @app.lua, ' ..
      'line 3>: 1 table, 100B', cache_row(3, '@app.lua', 0, 3))
    -- The name its source gives the function, where the report can read
    -- it; a chunk loaded from a string, on one line.
    local source = temp_path('.lua')
    local f = assert(io.open(source, 'w'))
    f:write('local function load(n)\n  return n\nend\n')
    f:close()
    assert.equal('main thread<local cache in load (@' .. source .. ':1), ' ..
      'line 2>: 1 table, 100B', cache_row(3, '@' .. source, 1, 2))
    assert.equal('main thread<local cache in function at [string ' ..
      '"local t = {}"...]:1, line 2>: 1 table, 100B',
      cache_row(3, 'local t = {}\nreturn t', 1, 2))
    -- A file of version 2 knows the function, not the line; a frame whose
    -- line is not known, nor that.
    assert.equal('main thread<local cache in function at @app.lua:12>: ' ..
      '1 table, 100B', cache_row(2, '@app.lua', 12))
    assert.equal('main thread<local cache in function at @app.lua:12>: ' ..
      '1 table, 100B', cache_row(3, '@app.lua', 12, nil))
  end)

  it('says when the snapshot could not size its cdata, and when and where ' ..
    'it was taken', function()
    local path = graphs.known({ cdata_unknown = true, traces = 3 }):write(temp_path())
    local code, out = report(path)
    assert.equal(0, code)
    assert.equal('41 objects, 4,404B, 46 references from 2 roots; GC64; ' ..
      '3 JIT traces alive; cdata sizes unknown ' ..
      "(the FFI's layout was not verified)", out:match('\n([^\n]*)\n'))
    code, out = report('--format=json', path)
    assert.equal(0, code)
    assert.is_true(require('cjson').decode(out).header.cdata_sizes_unknown)
    code, out = report('--format=html', path)
    assert.equal(0, code)
    assert.truthy(out:find("cdata sizes unknown (the FFI&#39;s layout was " ..
      'not verified)', 1, true))
    assert.truthy(out:find('taken 2026-11-28 21:06:40 UTC by process 4242, ' ..
      'with no profile running', 1, true))
  end)

  it('cuts each list at --top and says how many rows it left out', function()
    local path = graphs.known():write(temp_path())
    local code, out = report('--top=1', '--human-readable', path)
    assert.equal(0, code)
    assert.equal(([[
HEAP SNAPSHOT %s
41 objects, 4.30KiB, 46 references from 2 roots; GC64
taken 2026-11-28 21:06:40 UTC by process 4242, with no profile running

WHAT HOLDS THE MEMORY (objects by their path from a root, the most bytes first; retaining: freed if they went)
package.loaded["catalog"].rendered_cache[*]: 20 strings, 1.95KiB

OBJECTS BY TYPE
string: 26 objects, 2.13KiB
    held by package.loaded["catalog"].rendered_cache[*]: 20 objects, 1.95KiB
    held by _G<key>: 2 objects, 54B
    held by package.loaded<key>: 2 objects, 54B
    and by 2 more paths
(22 rows left out: each list shows its first 1; --top=N shows N, --all every row)
]]):format(path), out)
  end)

  it('writes the same rows as JSON', function()
    local path = graphs.known():write(temp_path())
    local code, out = report('--format=json', path)
    assert.equal(0, code)
    local function holder(pattern, objects, types, bytes, retained)
      local list = {}
      for t, n in pairs(types) do
        list[#list + 1] = { type = t, objects = n }
      end
      table.sort(list, function(a, b) return a.type < b.type end)
      return { pattern = pattern, objects = objects,
        types = json_text.array(list), bytes = bytes,
        retained = retained or bytes }
    end
    local function held(pattern, objects, bytes)
      return { pattern = pattern, objects = objects, bytes = bytes }
    end
    local c = 'package.loaded["catalog"]'
    local h = '_G.record<upvalue history>'
    local expected = {
      kind = 'memprof heap snapshot report', version = 1,
      header = { file = path, objects = 41, bytes = 4404, references = 46,
        roots = 2, gc64 = true, time = 1795900000, pid = 4242 },
      holders = {
        holder(c .. '.rendered_cache[*]', 20, { string = 20 }, 2000),
        holder(c .. '.rendered_cache', 1, { table = 1 }, 500, 2500),
        holder('main thread', 1, { thread = 1 }, 400),
        holder('registry[1]', 1, { thread = 1 }, 300, 450),
        holder('_G', 1, { table = 1 }, 200, 686),
        holder('registry[1]<local pending>', 1, { table = 1 }, 150),
        holder(h, 2, { table = 1, upvalue = 1 }, 144, 312),
        holder('registry', 1, { table = 1 }, 100, 3318),
        holder('package.loaded', 1, { table = 1 }, 80, 2738),
        holder('_G.seen', 1, { table = 1 }, 80),
        holder(c, 1, { table = 1 }, 64, 2604),
        holder(h .. '[1]', 1, { table = 1 }, 56),
        holder(h .. '[2]', 1, { table = 1 }, 56),
        holder(h .. '[3]', 1, { table = 1 }, 56),
        holder('_G<key>', 2, { string = 2 }, 54),
        holder('package.loaded<key>', 2, { string = 2 }, 54),
        holder('_G.record', 1, { ['function'] = 1 }, 40, 352),
        holder(c .. '<key>', 1, { string = 1 }, 40),
        holder('registry<key>', 1, { string = 1 }, 30),
      },
      by_type = {
        { type = 'string', objects = 26, bytes = 2178, holders = {
          held(c .. '.rendered_cache[*]', 20, 2000), held('_G<key>', 2, 54),
          held('package.loaded<key>', 2, 54), held(c .. '<key>', 1, 40),
          held('registry<key>', 1, 30) } },
        { type = 'table', objects = 11, bytes = 1462, holders = {
          held(c .. '.rendered_cache', 1, 500), held('_G', 1, 200),
          held('registry[1]<local pending>', 1, 150), held(h, 1, 120),
          held('registry', 1, 100), held('_G.seen', 1, 80),
          held('package.loaded', 1, 80), held(c, 1, 64),
          held(h .. '[1]', 1, 56), held(h .. '[2]', 1, 56),
          held(h .. '[3]', 1, 56) } },
        { type = 'thread', objects = 2, bytes = 700, holders = {
          held('main thread', 1, 400), held('registry[1]', 1, 300) } },
        { type = 'function', objects = 1, bytes = 40, holders = {
          held('_G.record', 1, 40) } },
        { type = 'upvalue', objects = 1, bytes = 24, holders = {
          held(h, 1, 24) } },
      },
    }
    assert.equal(json_text.encode(expected) .. '\n', out)
  end)

  it('names the holders of what grew between two snapshots', function()
    local old = graphs.known():write(temp_path())
    local new = graphs.known({ added = 5 }):write(temp_path())
    local code, out, err = report('--diff', old, new)
    assert.equal('', err)
    assert.equal(0, code)
    assert.equal(([[
HEAP GROWTH from %s to %s
before: 41 objects, 4,404B; after: 46 objects, 4,904B (+500B)

WHAT GREW (the paths that hold new objects, by retained growth)
package.loaded["catalog"].rendered_cache[*]: 5 new, 25 strings now (20 before), +500B retained (2,500B now)

OTHER CHANGES (the paths to those, and groups that changed without new objects)
package.loaded: +500B retained (3,238B now), 1 object (1 before)
package.loaded["catalog"]: +500B retained (3,104B now), 1 object (1 before)
package.loaded["catalog"].rendered_cache: +500B retained (3,000B now), 1 object (1 before)
registry: +500B retained (3,818B now), 1 object (1 before)
]]):format(old, new), out)
    code, out = report('--diff', '--format=json', old, new)
    assert.equal(0, code)
    local row = out:match('"grew":%[(.*)%],"kind"')
    assert.equal('{"growth":500,"new_objects":5,"objects":25,' ..
      '"old_objects":20,"old_retained":2000,"own_growth":500,' ..
      '"pattern":"package.loaded[\\"catalog\\"].rendered_cache[*]",' ..
      '"retained":2500,"types":[{"objects":25,"type":"string"}]}', row)
  end)

  it('writes the page of what grew between two snapshots', function()
    local C = require('helpers.command')
    local old = graphs.known():write(temp_path())
    local new = graphs.known({ added = 5 }):write(temp_path())
    local code, page, err = report('--diff', '--format=html', old, new)
    assert.equal('', err)
    assert.equal(0, code)
    local _, json = report('--diff', '--format=json', old, new)
    local head, style, body = page:match('^(.-)<style>\n(.-)</style>\n(.*)$')
    assert.equal('<!DOCTYPE html>\n<html lang="en">\n<head>\n' ..
      '<meta charset="utf-8">\n<meta name="viewport" content="' ..
      'width=device-width, initial-scale=1">\n<meta name="generator" ' ..
      'content="memprof-report">\n<title>memprof: ' .. old .. ' to ' ..
      new .. '</title>\n', head)
    assert.equal(C.read_file('lua/memprof/report/html/holders.css'), style)
    local row = '<tr><td class="mono">%s</td><td class="num" ' ..
      'title="500 bytes">+500 B</td><td class="num" title="%s bytes">%s' ..
      '</td><td class="num">1</td><td class="num">1</td></tr>\n'
    local catalog = 'package.loaded[&quot;catalog&quot;]'
    -- The profile's page's tables: heads of numbers aligned as they are.
    local function heads(list)
      local out = { '<div class="table-wrap"><table><thead><tr>\n' }
      for i, h in ipairs(list) do
        out[i + 1] = (h:sub(1, 1) == '#' and '<th scope="col" ' ..
          'class="num">' .. h:sub(2) or '<th scope="col">' .. h) ..
          '</th>\n'
      end
      return table.concat(out) .. '</tr></thead><tbody>\n'
    end
    assert.equal('</head>\n<body>\n<header><h1>Heap growth from ' .. old ..
      ' to ' .. new .. '</h1><p>before: 41 objects, 4.30 KiB; after: 46 ' ..
      'objects, 4.79 KiB (+500 B)</p></header>\n<main>\n' ..
      '<section id="what-grew"><h2>What grew</h2><p class="note">The ' ..
      'paths that hold objects the older snapshot did not have, the ' ..
      'largest growth of retained bytes first (retained: what would be ' ..
      'freed if they went).</p>' .. heads({ 'Path from a root',
        '#New objects', 'Objects now', '#Before', '#Retained growth',
        '#Retained now' }) .. '<tr>' ..
      '<td class="mono">' .. catalog .. '.rendered_cache[*]</td><td ' ..
      'class="num">5</td><td>25 strings</td><td class="num">20</td><td ' ..
      'class="num" title="500 bytes">+500 B</td><td class="num" ' ..
      'title="2,500 bytes">2.44 KiB</td></tr>\n</tbody><tfoot>\n' ..
      '</tfoot></table></div></section>\n' ..
      '<section id="other-changes"><h2>Other changes</h2><p class="note">' ..
      'The paths to those, and the groups that changed without new ' ..
      'objects.</p>' .. heads({ 'Path from a root', '#Retained growth',
        '#Retained now', '#Objects now', '#Before' }) ..
      row:format('package.loaded', '3,238', '3.16 KiB') ..
      row:format(catalog, '3,104', '3.03 KiB') ..
      row:format(catalog .. '.rendered_cache', '3,000', '2.93 KiB') ..
      row:format('registry', '3,818', '3.73 KiB') ..
      '</tbody><tfoot>\n</tfoot></table></div></section>\n</main>\n' ..
      '<footer>Generated by ' ..
      'memprof-report. This page is one file with no external resources.' ..
      '</footer>\n<script type="application/json" ' ..
      'id="memprof-heap-growth-data">' .. json:gsub('\n$', '') ..
      '</script>\n</body>\n</html>\n', body)
    -- --top cuts each table, and says in its foot how many rows it left
    -- out.
    code, page = report('--diff', '--format=html', '--top=1', old, new)
    assert.equal(0, code)
    assert.is_truthy(page:find('</tbody><tfoot>\n<tr><td colspan="5">… ' ..
      'and 3 more rows (--all shows every row)</td></tr>\n</tfoot></table>' ..
      '</div></section>\n</main>', 1, true))
  end)

  it('cuts each table of its page at --top, and says how many rows it ' ..
    'left out', function()
    local path = graphs.known():write(temp_path())
    local code, page = report('--format=html', '--top=2', path)
    assert.equal(0, code)
    local more = {}
    for n in page:gmatch('<tfoot>\n<tr><td colspan="%d">… and (%d+) more ' ..
      'rows %(%-%-all shows every row%)</td></tr>\n</tfoot>') do
      more[#more + 1] = tonumber(n)
    end
    -- 19 paths and 5 types.
    assert.same({ 17, 3 }, more)
    code, page = report('--format=html', path)
    assert.equal(0, code)
    assert.is_nil(page:find('colspan', 1, true))
  end)

  it('names the byte where a cut or corrupt snapshot goes wrong', function()
    local bytes = graphs.known():bytes()
    local cut = temp_path()
    local file = assert(io.open(cut, 'wb'))
    file:write(bytes:sub(1, 47))
    file:close()
    local code, out, err = report(cut)
    assert.equal(1, code)
    assert.equal('', out)
    assert.equal('memprof-report: ' .. cut .. ': byte 47: the file is ' ..
      "truncated: expected an object's type\n", err)
    local corrupt = temp_path()
    file = assert(io.open(corrupt, 'wb'))
    -- The first object's type byte (after "ljh", version, flags, notes,
    -- the time in 5 bytes and the pid in 2, the record's tag and its
    -- address 0x1000 in two bytes).
    file:write(bytes:sub(1, 17) .. string.char(99) .. bytes:sub(19))
    file:close()
    code, out, err = report(corrupt)
    assert.equal(1, code)
    assert.equal('memprof-report: ' .. corrupt .. ': byte 17: expected an ' ..
      'object type, got 99\n', err)
  end)

  it('refuses what does not apply to a heap snapshot', function()
    local path = graphs.known():write(temp_path())
    local code, _, err = report('--leaks', path)
    assert.equal(1, code)
    assert.equal('memprof-report: --leaks does not apply to a heap ' ..
      'snapshot (see --help)\n', err)
    code, _, err = report('--diff', '--format=pprof', path, path)
    assert.equal(1, code)
    assert.equal('memprof-report: --format=pprof does not apply to --diff ' ..
      'of heap snapshots (see --help)\n', err)
    code, _, err = report('--profile=' .. path, path)
    assert.equal(1, code)
    assert.equal('memprof-report: --profile=' .. path .. ': the heap ' ..
      'snapshot was taken with no profile running: it cannot be joined ' ..
      'with one\n', err)
  end)

  it('refuses --heap without --leaks, of another file, or of a snapshot ' ..
    'taken without a profile', function()
    local B = require('helpers.stream_builder')
    local stream = B.new():lfunc(0x100, '@app.lua', 1):events()
    stream:alloc(B.lua(0x100, 3), 0x10, 2048)
    local profile = temp_path('.bin')
    local file = assert(io.open(profile, 'wb'))
    file:write(stream:epilogue():bytes())
    file:close()
    local heap = graphs.known():write(temp_path())
    local code, _, err = report('--heap=' .. heap, profile)
    assert.equal(1, code)
    assert.equal('memprof-report: --heap=SNAPSHOT goes with --leaks (or ' ..
      '--format=json or html) (see --help)\n', err)
    code, _, err = report('--leaks', '--heap=' .. profile, profile)
    assert.equal(1, code)
    assert.equal('memprof-report: --heap=' .. profile .. ': not a heap ' ..
      "snapshot (made by memprof.snapshot(path, {format = 'heap'}))\n", err)
    code, _, err = report('--leaks', '--heap=' .. heap, profile)
    assert.equal(1, code)
    assert.equal('memprof-report: --heap=' .. heap .. ': the heap snapshot ' ..
      'was taken with no profile running: it cannot be joined with one\n',
      err)
  end)

  it("has a page style that checks as CSS, and is in the page", function()
    local C = require('helpers.command')
    local css = 'lua/memprof/report/html/holders.css'
    local code, out = C.run('NODE_PATH=build/node_modules ' ..
      C.command('node', 'spec/support/css_check.js', css))
    assert.equal(0, code, out)
    assert.equal('{"rules":16,"declarations":55,"errors":[]}', out:match(
      '^(.-)%s*$'))
    local path = graphs.known():write(temp_path())
    local page
    code, page = report('--format=html', path)
    assert.equal(0, code)
    assert.equal(C.read_file(css), page:match('<style>\n(.-)</style>'))
  end)

  local known_profile = graphs.known_profile

  it('says where each group was allocated, given the profile', function()
    local profile = temp_path('.bin')
    local path = graphs.known({ profile = known_profile(profile) })
      :write(temp_path())
    local code, out, err = report('--top=8', '--profile=' .. profile, path)
    assert.equal('', err)
    assert.equal(0, code)
    assert.equal(([[
HEAP SNAPSHOT %s
41 objects, 4,404B, 46 references from 2 roots; GC64
taken 2026-11-28 21:06:40 UTC by process 4242, during a profile (after its first 282 bytes); allocation places from %s

WHAT HOLDS THE MEMORY (objects by their path from a root, the most bytes first; retaining: freed if they went)
package.loaded["catalog"].rendered_cache[*]: 20 strings, 2,000B, allocated at @catalog.lua:46 (from @handler.lua:7)
package.loaded["catalog"].rendered_cache: 1 table, 500B, retaining 2,500B, allocated before the profile
main thread: 1 thread, 400B, allocated before the profile
registry[1]: 1 thread, 300B, retaining 450B, allocated before the profile
_G: 1 table, 200B, retaining 686B, allocated before the profile
registry[1]<local pending>: 1 table, 150B, allocated before the profile
_G.record<upvalue history>: 2 objects (1 table, 1 upvalue), 144B, retaining 312B, allocated before the profile
registry: 1 table, 100B, retaining 3,318B, allocated before the profile

]]):format(path, profile), out:sub(1, out:find('\nOBJECTS BY TYPE')))
    assert.equal([[
OBJECTS BY ALLOCATION PLACE
allocated before the profile: 18 objects, 2,236B
    held by package.loaded["catalog"].rendered_cache: 1 object, 500B
    held by main thread: 1 object, 400B
    held by registry[1]: 1 object, 300B
    and by 12 more paths
@catalog.lua:46: 20 objects, 2,000B (from @handler.lua:7)
    held by package.loaded["catalog"].rendered_cache[*]: 20 objects, 2,000B
@handler.lua:12: 3 objects, 168B
    held by _G.record<upvalue history>[1]: 1 object, 56B
    held by _G.record<upvalue history>[2]: 1 object, 56B
    held by _G.record<upvalue history>[3]: 1 object, 56B
(11 rows left out: each list shows its first 8; --top=N shows N, --all every row)
]], out:sub((out:find('OBJECTS BY ALLOCATION PLACE', 1, true))))
    code, out = report('--format=json', '--profile=' .. profile, path)
    assert.equal(0, code)
    local doc = require('cjson').decode(out)
    assert.same({ written = 282, file = profile }, doc.header.profile)
    assert.same({ pattern = 'package.loaded["catalog"].rendered_cache[*]',
      objects = 20, types = { { type = 'string', objects = 20 } },
      bytes = 2000, retained = 2000, place = '@catalog.lua:46',
      callers = '@handler.lua:7', places = 1 }, doc.holders[1])
    assert.same({ place = '@handler.lua:12', objects = 3, bytes = 168,
      holders = {
        { pattern = '_G.record<upvalue history>[1]', objects = 1, bytes = 56 },
        { pattern = '_G.record<upvalue history>[2]', objects = 1, bytes = 56 },
        { pattern = '_G.record<upvalue history>[3]', objects = 1, bytes = 56 },
      } }, doc.by_place[3])
  end)

  it("names each live place's holders in the profile's JSON with --heap",
    function()
    local profile = temp_path('.bin')
    local path = graphs.known({ profile = known_profile(profile) })
      :write(temp_path())
    local code, out, err = report('--format=json', '--heap=' .. path,
      profile)
    assert.equal('', err)
    assert.equal(0, code)
    local doc = require('cjson').decode(out)
    assert.same({ heap = path, places = {
      { place = '@catalog.lua:46', objects = 20, bytes = 2000,
        callers = '@handler.lua:7', holders = {
          { pattern = 'package.loaded["catalog"].rendered_cache[*]',
            objects = 20, bytes = 2000 } } },
      { place = '@handler.lua:12', objects = 3, bytes = 168, holders = {
        { pattern = '_G.record<upvalue history>[1]', objects = 1, bytes = 56 },
        { pattern = '_G.record<upvalue history>[2]', objects = 1, bytes = 56 },
        { pattern = '_G.record<upvalue history>[3]', objects = 1, bytes = 56 },
      } } } }, doc.who_holds)
    -- The same places as the text's WHO HOLDS IT, which shows the first
    -- holders of each.
    code, out = report('--leaks', '--heap=' .. path, profile)
    assert.equal(0, code)
    assert.equal(([[
WHO HOLDS IT (the objects of the heap snapshot %s by allocating place, with the paths that hold them)
@catalog.lua:46: 20 objects, 2,000B (from @handler.lua:7)
    held by package.loaded["catalog"].rendered_cache[*]: 20 objects, 2,000B
@handler.lua:12: 3 objects, 168B
    held by _G.record<upvalue history>[1]: 1 object, 56B
    held by _G.record<upvalue history>[2]: 1 object, 56B
    held by _G.record<upvalue history>[3]: 1 object, 56B
]]):format(path), out:sub((out:find('WHO HOLDS IT', 1, true))))
    -- Without --heap, the document has no such key.
    code, out = report('--format=json', profile)
    assert.equal(0, code)
    assert.is_nil(require('cjson').decode(out).who_holds)
    assert.is_nil(out:find('who_holds', 1, true))
  end)
end)

describe('memprof-report of arrays', function()
  -- _G.listeners, an array of `n` closures (an event listener list).
  local function listeners(n, path)
    local H = require('helpers.heap_builder')
    local b = H.new()
    local registry = b:table(100)
    b:root('registry', registry)
    local loaded = b:table(80)
    b:named(registry, '_LOADED', loaded, 30)
    local globals = b:table(200)
    b:named(loaded, '_G', globals, 24)
    local list = b:table(64 + 16 * n, { asize = n + 1 })
    b:named(globals, 'listeners', list, 33)
    for i = 1, n do b:index(list, i, b:func(40, 0)) end
    return b:write(path)
  end

  after_each(remove_temp)

  it('groups an array of closures as [*], in the report and in --diff',
    function()
      local old = listeners(500, temp_path())
      local code, out = report('--top=2', old)
      assert.equal(0, code)
      assert.equal('_G.listeners[*]: 500 functions, 20,000B\n' ..
        '_G.listeners: 1 table, 8,064B, retaining 28,064B',
        out:match('WHAT HOLDS THE MEMORY[^\n]*\n(.-)\n\n'))
      local new = listeners(501, temp_path())
      code, out = report('--diff', old, new)
      assert.equal(0, code)
      assert.equal('_G.listeners[*]: 1 new, 501 functions now (500 ' ..
        'before), +40B retained (20,040B now)',
        out:match('WHAT GREW[^\n]*\n(.-)\n'))
    end)
end)

describe('memprof-report of a heap snapshot joined with a profile', function()
  local B = require('helpers.stream_builder')

  after_each(remove_temp)

  -- A profile of `n` allocations at @other.lua:1 (another run's).
  local function other_profile(path, n)
    local s = B.new():lfunc(0x100, '@other.lua', 1)
      :events({ version = B.EXTENDED })
    for i = 1, n do s:alloc(B.lua(0x100, 1), 0x70000 + 0x100 * i, 64) end
    local file = assert(io.open(path, 'wb'))
    file:write(s:epilogue():bytes())
    file:close()
    return path
  end

  it('warns, naming both files, when the profile does not hold the ' ..
    "snapshot's moment", function()
      local profile = temp_path('.bin')
      local heap = graphs.known({ profile = graphs.known_profile(profile) })
        :write(temp_path())
      local code, _, err = report('--profile=' .. profile, heap)
      assert.same({ 0, '' }, { code, err })
      -- The same when a symbol, not an event, follows that byte.
      local defined = temp_path('.bin')
      local later = graphs.known({ profile = graphs.known_profile(defined,
        { defined_after = true }) }):write(temp_path())
      code, _, err = report('--profile=' .. defined, later)
      assert.same({ 0, '' }, { code, err })
      local short = other_profile(temp_path('.bin'), 3)
      code, _, err = report('--profile=' .. short, heap)
      assert.equal(0, code)
      assert.equal(('memprof-report: warning: %s was taken after byte 282 ' ..
        "of its profile, but %s ends at byte 55: it is not that profile " ..
        "(another run's?), so the places named may be wrong\n")
        :format(heap, short), err)
      local long = other_profile(temp_path('.bin'), 60)
      code, _, err = report('--leaks', '--heap=' .. heap, long)
      assert.equal(0, code)
      assert.equal(('memprof-report: warning: %s was taken after byte 282 ' ..
        'of its profile, but %s has no event that starts there (one ' ..
        "starts at byte 286): it is not that profile (another run's?), " ..
        'so the places named may be wrong\n'):format(heap, long), err)
      code, _, err = report('--format=heapsnapshot', '--profile=' .. long,
        '--output=' .. temp_path('.heapsnapshot'), heap)
      assert.equal(0, code)
      assert.truthy(err:find('^memprof%-report: warning: .- has no event ' ..
        'that starts there'), err)
    end)
end)
