-- memprof.encode.json_text: Lua values written as JSON text, the same text for
-- the same values on every run, in pieces for long documents.
--
--   local json_text = require('memprof.encode.json_text')
--   json_text.encode(value [, opts]) -> the text
--   json_text.write(out, value [, opts [, tail]])  -- the text, then tail
--   local writer = json_text.writer(out [, opts])  -- out:write(text)
--   writer:value(value)        -- appends its text, written to out in
--                              -- pieces of json_text.FLUSH_PARTS parts
--   writer:part(text)          -- appends text as it is
--   writer:finish()            -- writes what is left
--
-- Values:
--   table     an array when marked (json_text.array(list), even empty)
--             or when t[1] is not nil; else an object, whose keys (strings)
--             are written in sorted order: Lua's order of keys can change
--             from run to run, with the seed of its string hash
--   string    made valid UTF-8 first (memprof.encode.utf8: each byte that is not
--             part of a valid sequence becomes U+FFFD), then escaped:
--             '"', '\', and control characters
--   number    whole numbers exactly, in full (however large); others
--             with opts.float (a format, default '%.14g'); NaN and
--             infinities as null
--   boolean, json_text.null (null), nil (null, in an array)
--   json_text.raw(text)            JSON text made elsewhere, as it is
--             (a string, or a list of strings one after the other)
--   json_text.list(items, entry_of)  an array of entry_of(item, entry)
--             for each item (of a list, or each whole number from 1 to
--             items; or items is a function that gives either when the
--             list is written), made and written one at a time (a
--             document's long lists: the document is never held whole,
--             nor each list's items before it is written); entry is an
--             empty table that entry_of may fill and return, the same
--             table for every item of the list (hundreds of thousands of
--             entries made no garbage of tables, which the collector
--             would have had to sweep while it went over the analysis)
--   json_text.custom(write)        write(writer) appends the value's
--             text itself, through writer:part(text) and writer:value()
--
-- opts.script = true also escapes '<', '>' and '&' (text inside an HTML
-- <script> element).

local utf8 = require('memprof.encode.utf8')

local M = {}

local format, floor, concat, sort, unpack = string.format, math.floor,
  table.concat, table.sort, unpack

local ARRAY = {}
local RAW = {}
local LIST = {}
local CUSTOM = {}

M.null = {}

function M.array(list)
  return setmetatable(list or {}, ARRAY)
end

function M.raw(text)
  return setmetatable({ text = text }, RAW)
end

function M.list(items, entry_of)
  return setmetatable({ items = items, entry_of = entry_of }, LIST)
end

function M.custom(write)
  return setmetatable({ write = write }, CUSTOM)
end

-- Strings ----------------------------------------------------------------

local ESCAPES = { ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n',
  ['\r'] = '\\r', ['\t'] = '\\t', ['\b'] = '\\b', ['\f'] = '\\f' }

local function escape(char)
  return ESCAPES[char] or format('\\u%04x', char:byte())
end

-- The characters escaped: control characters (%c, DEL included), '"'
-- and '\'; in a script, '<', '>' and '&' too.
local PLAIN_PATTERN, SCRIPT_PATTERN = '[%c"\\]', '[%c"\\<>&]'

-- A string's text between its quotes.
local function inner_text(text, pattern)
  text = utf8.clean(text)
  if text:find(pattern) then
    text = text:gsub(pattern, escape)
  end
  return text
end

local function string_text(text, pattern)
  return '"' .. inner_text(text, pattern) .. '"'
end

function M.string(text, opts)
  return string_text(text, opts and opts.script and SCRIPT_PATTERN or
    PLAIN_PATTERN)
end

-- Numbers ----------------------------------------------------------------

local EXACT = 2 ^ 53

local function number_text(n, float)
  if n ~= n or n == math.huge or n == -math.huge then
    return 'null'
  elseif n == floor(n) then
    if n < EXACT and n > -EXACT then
      return format('%d', n)
    end
    return format('%.0f', n)
  end
  return format(float, n)
end

-- Whole numbers below this (in magnitude) go into the parts as numbers:
-- table.concat writes them as '%.14g' does, exactly, without a string
-- each (a long document has millions of numbers).
local CONCAT_EXACT = 1e14

-- A number as a part: itself, or its text.
local function number_part(n, float)
  if n == floor(n) and n ~= 0 and n < CONCAT_EXACT and n > -CONCAT_EXACT then
    return n
  end
  return number_text(n, float)
end

-- The writer ---------------------------------------------------------------

-- How many parts (a key, a value, a bracket) a writer gathers before it
-- writes them; read when a writer is made.
M.FLUSH_PARTS = 4096

local Writer = {}
Writer.__index = Writer

function M.writer(out, opts)
  opts = opts or {}
  return setmetatable({ out = out, parts = {}, count = 0,
    flush_parts = M.FLUSH_PARTS, depth = 0, entries = {}, last_keys = {},
    pattern = opts.script and SCRIPT_PATTERN or PLAIN_PATTERN,
    float = opts.float or '%.14g' }, Writer)
end

-- The parts go to out:write as they are, not joined into one string
-- first: the text of a long document would be its own size in garbage.
function Writer:flush()
  local parts = self.parts
  if self.count == 0 then
    return
  end
  self.out:write(unpack(parts, 1, self.count))
  for i = self.count, 1, -1 do
    parts[i] = nil
  end
  self.count = 0
end

function Writer:part(text)
  local count = self.count + 1
  self.parts[count] = text
  self.count = count
  if count >= self.flush_parts then
    self:flush()
  end
end

-- A string in three parts: its text is not copied between quotes into
-- a new string (a string per name written, hundreds of thousands).
function Writer:string(text)
  local count, parts = self.count, self.parts
  parts[count + 1] = '"'
  parts[count + 2] = inner_text(text, self.pattern)
  parts[count + 3] = '"'
  self.count = count + 3
  if count + 3 >= self.flush_parts then
    self:flush()
  end
end

function Writer:finish()
  self:flush()
end

-- The keys of an object, sorted, their set, and the text that comes
-- before each value ('{"key":' for the first, ',"key":' after).
local function sorted_keys(object, pattern)
  local keys, set, parts, n = {}, {}, {}, 0
  for key in pairs(object) do
    n = n + 1
    keys[n] = key
    set[key] = true
  end
  sort(keys)
  for i = 1, n do
    parts[i] = (i == 1 and '{' or ',') .. string_text(keys[i], pattern) .. ':'
  end
  return { list = keys, set = set, count = n, parts = parts }
end

-- The sorted keys of an object: those of the last object written at
-- the same depth of lists when it has the same keys (the entries of a
-- list do, and a list's entries alternate with those of the lists in
-- them), without a new list.
function Writer:keys(object)
  local last = self.last_keys[self.depth]
  if last then
    local set, n = last.set, 0
    for key in pairs(object) do
      if not set[key] then
        n = -1
        break
      end
      n = n + 1
    end
    if n == last.count then
      return last
    end
  end
  last = sorted_keys(object, self.pattern)
  self.last_keys[self.depth] = last
  return last
end

function Writer:object(object)
  local keys = self:keys(object)
  local list, n = keys.list, keys.count
  if n == 0 then
    self:part('{}')
    return
  end
  local parts = keys.parts
  for i = 1, n do
    self:part(parts[i])
    self:value(object[list[i]])
  end
  self:part('}')
end

-- An array of list[1..n] (n = #list, or the array's length as marked).
function Writer:array(list)
  local n = #list
  if n == 0 then
    self:part('[]')
    return
  end
  self:part('[')
  for i = 1, n do
    if i > 1 then
      self:part(',')
    end
    self:value(list[i])
  end
  self:part(']')
end

-- Raw text: a string, or a list of strings written one after the other.
function Writer:raw(text)
  if type(text) == 'string' then
    self:part(text)
    return
  end
  for _, chunk in ipairs(text) do
    self:part(chunk)
  end
end

-- Empties a table, keeping its room for the same keys.
local function empty(entry)
  for key in pairs(entry) do
    entry[key] = nil
  end
end

-- The items of a list as it is written, and their number: a list, or
-- a count n (the items are the numbers 1 to n), or a function that
-- gives either (so that a long list is made only while it is written).
function M.items(list)
  local items = list.items
  if type(items) == 'function' then
    items = items()
  end
  if type(items) == 'number' then
    return false, items
  end
  return items, #items
end

-- A list's entries are made in one table per depth of lists in lists,
-- reused from list to list.
function Writer:list(list)
  local entry_of = list.entry_of
  local depth = self.depth + 1
  local entry = self.entries[depth] or {}
  self.depth, self.entries[depth] = depth, entry
  self:part('[')
  local items, count = M.items(list)
  for i = 1, count do
    if i > 1 then
      self:part(',')
    end
    self:value(entry_of(items and items[i] or i, entry))
    empty(entry)
  end
  self:part(']')
  self.depth = depth - 1
end

function Writer:table(value)
  local meta = getmetatable(value)
  if meta == ARRAY then
    self:array(value)
  elseif value == M.null then
    self:part('null')
  elseif meta == RAW then
    self:raw(value.text)
  elseif meta == LIST then
    self:list(value)
  elseif meta == CUSTOM then
    value.write(self)
  elseif value[1] ~= nil then
    self:array(value)
  else
    self:object(value)
  end
end

function Writer:value(value)
  local kind = type(value)
  if kind == 'table' then
    self:table(value)
  elseif kind == 'string' then
    self:string(value)
  elseif kind == 'number' then
    self:part(number_part(value, self.float))
  elseif kind == 'boolean' then
    self:part(value and 'true' or 'false')
  else
    self:part('null')
  end
end

-- Collects the text instead of writing it.
local Collected = {}
Collected.__index = Collected

function Collected:write(...)
  local n = #self
  for i = 1, select('#', ...) do
    self[n + i] = select(i, ...)
  end
end

-- Writes the JSON text of value to out, in pieces, then the text tail
-- (such as a newline) if given.
function M.write(out, value, opts, tail)
  local writer = M.writer(out, opts)
  writer:value(value)
  if tail then
    writer:part(tail)
  end
  writer:finish()
end

function M.encode(value, opts)
  local collected = setmetatable({}, Collected)
  local writer = M.writer(collected, opts)
  writer:value(value)
  writer:finish()
  return concat(collected)
end

return M
