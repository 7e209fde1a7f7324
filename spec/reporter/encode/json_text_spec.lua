-- Specs for memprof.encode.json_text: the JSON text of Lua values, keys sorted,
-- written in pieces (checked against lua-cjson's decoder).

local json_text = require('memprof.encode.json_text')
local cjson = require('cjson')

local encode = json_text.encode

describe('json_text', function()
  it('writes the keys of an object in sorted order', function()
    assert.are.equal('{"a":[2,3],"b":1,"c":null,"d":{}}',
      encode({ d = {}, c = json_text.null, b = 1, a = { 2, 3 } }))
    -- 200 keys: Lua's order of them is not theirs.
    local object, names = {}, {}
    for i = 1, 200 do
      local name = string.format('k%03d', (i * 7) % 200)
      object[name] = i
      names[#names + 1] = name
    end
    table.sort(names)
    local text = encode(object)
    local order = {}
    for name in text:gmatch('"(k%d+)":') do
      order[#order + 1] = name
    end
    assert.are.same(names, order)
    assert.are.same(object, cjson.decode(text))
    -- Objects in a row with as many keys, not the same ones.
    assert.are.equal('[{"a":1,"b":2},{"c":3,"d":4},{"a":5,"d":6},' ..
      '{"a":7,"b":8,"c":9},{"b":10}]', encode({ { b = 2, a = 1 },
      { d = 4, c = 3 }, { d = 6, a = 5 }, { c = 9, b = 8, a = 7 },
      { b = 10 } }))
  end)

  it('writes marked lists as arrays, even empty', function()
    assert.are.equal('{"empty":[],"list":[1,[]],"object":{}}',
      encode({ empty = json_text.array(), object = {},
        list = { 1, json_text.array({}) } }))
    assert.are.equal('[true,false,null]',
      encode(json_text.array({ true, false, json_text.null })))
  end)

  it('escapes quotes, backslashes and control characters', function()
    local text = 'a"b\\c\nd\re\tf\bg\fh\1i\127j/k'
    assert.are.equal('"a\\"b\\\\c\\nd\\re\\tf\\bg\\fh\\u0001i\\u007fj/k"',
      encode(text))
    assert.are.equal(text, cjson.decode(encode({ text }))[1])
    -- In a script, '<', '>' and '&' too.
    assert.are.equal('"\\u003c/script\\u003e\\u0026"',
      encode('</script>&', { script = true }))
    assert.are.equal('"</script>&"', encode('</script>&'))
  end)

  it('replaces each byte that is not valid UTF-8 by U+FFFD', function()
    assert.are.equal('"@caf\239\191\189.lua"', encode('@caf\233.lua'))
    assert.are.equal('"@café.lua"', encode('@café.lua'))
    assert.are.equal('{"\239\191\189\239\191\189":1}',
      encode({ ['\255\254'] = 1 }))
  end)

  -- A whole number is the double's exact value: -123456789012345678901
  -- is the double -123456789012345683968.
  it('writes whole numbers exactly, fractions with 14 digits', function()
    assert.are.equal('[0,-5,9007199254740994,100000000000000000000,' ..
      '-123456789012345683968,0.1,0.33333333333333,null,null,null]',
      encode({ 0, -5, 2 ^ 53 + 2, 1e20, -123456789012345678901, 0.1, 1 / 3,
        0 / 0, math.huge, -math.huge }))
    -- Below 1e14, whole numbers are written by table.concat: the same.
    assert.are.equal('[0,0,99999999999999,-99999999999999,100000000000000,' ..
      '123456789]', encode({ 0, -0, 1e14 - 1, 1 - 1e14, 1e14, 123456789 }))
    assert.are.equal('[0.333333,2.5]', encode({ 1 / 3, 2.5 },
      { float = '%.6g' }))
    assert.are.equal('9007199254740994', encode(2 ^ 53 + 2))
    assert.are.equal('0.333333', encode(1 / 3, { float = '%.6g' }))
  end)

  it('writes raw text, lists made entry by entry, and custom values',
    function()
    local made = 0
    local list = json_text.list({ 1, 2, 3 }, function(item)
      made = made + 1
      return { n = item * 10 }
    end)
    local custom = json_text.custom(function(writer)
      writer:part('[')
      writer:value('x')
      writer:part(']')
    end)
    assert.are.equal('{"custom":["x"],"list":[{"n":10},{"n":20},{"n":30}],' ..
      '"raw":{"made":"elsewhere"}}', encode({ list = list, custom = custom,
      raw = json_text.raw('{"made":"elsewhere"}') }))
    assert.are.equal(3, made)
    assert.are.equal('[]', encode(json_text.list({}, tostring)))
  end)

  -- Each piece's parts are given to out:write as they are, not joined
  -- (whole numbers as numbers, a string's quotes apart from its text).
  it('writes in pieces of FLUSH_PARTS parts', function()
    local writes = {}
    local out = { write = function(_, ...) writes[#writes + 1] = { ... } end }
    local flush_parts = json_text.FLUSH_PARTS
    json_text.FLUSH_PARTS = 4
    local writer = json_text.writer(out)
    json_text.FLUSH_PARTS = flush_parts
    writer:value({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 })
    assert.are.same({ { '[', 1, ',', 2 }, { ',', 3, ',', 4 },
      { ',', 5, ',', 6 }, { ',', 7, ',', 8 }, { ',', 9, ',', 10 } }, writes)
    writer:value('a\nb')
    writer:finish()
    assert.are.same({ ']', '"', 'a\\nb', '"' }, writes[6])
    assert.are.equal(6, #writes)
    -- A whole number is a part as itself where table.concat writes it
    -- exactly (0, for -0, and 1e14 and more are text).
    writes = {}
    writer = json_text.writer(out)
    writer:value({ 12, 0, 1e14, 0.5 })
    writer:finish()
    assert.are.same({ { '[', 12, ',', '0', ',', '100000000000000', ',',
      '0.5', ']' } }, writes)
  end)

  it('writes raw text given as a list of chunks one after the other',
      function()
    assert.are.equal('{"tree":{"b":1,"c":[]}}', encode({
      tree = json_text.raw({ '{"b":', 1, ',"c":[', ']}' }) }))
  end)

  it('makes the entries of a list in one reused table per depth',
      function()
    local seen = {}
    local inner = json_text.list(2, function(i, entry)
      seen[#seen + 1] = entry
      entry.i = i
      return entry
    end)
    local outer = json_text.list({ 'a', 'b' }, function(name, entry)
      seen[#seen + 1] = entry
      assert.is_nil(next(entry))
      entry.name, entry.inner = name, inner
      return entry
    end)
    assert.are.equal('[{"inner":[{"i":1},{"i":2}],"name":"a"},' ..
      '{"inner":[{"i":1},{"i":2}],"name":"b"}]', encode(outer))
    assert.are.equal(6, #seen)
    assert.are.equal(seen[1], seen[4])
    assert.are.equal(seen[2], seen[3])
    assert.are.equal(seen[2], seen[5])
    assert.are.equal(seen[5], seen[6])
    assert.are_not.equal(seen[1], seen[2])
  end)
end)
