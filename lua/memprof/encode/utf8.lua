-- memprof.encode.utf8: text that is valid UTF-8, for the outputs that must be
-- (JSON, the HTML page).  Chunk names and C symbols are bytes: a file
-- name in Latin-1, a corrupted stream, anything.
--
--   utf8.clean(text) -> text with every byte that does not belong to a
--     valid UTF-8 sequence replaced by U+FFFD (the replacement
--     character, bytes EF BF BD); valid text is returned as it is
--   utf8.REPLACEMENT   the bytes of U+FFFD
--
-- Valid is RFC 3629's definition: no overlong forms (C0, C1, E0 80..9F,
-- F0 80..8F), no surrogates (ED A0..BF), nothing above U+10FFFF (F4
-- 90..BF, F5..FF).  Each invalid byte becomes one U+FFFD: a sequence
-- cut short (E2 82 followed by an ASCII letter) gives two.

local M = {}

M.REPLACEMENT = '\239\191\189'

local byte, concat = string.byte, table.concat

-- By lead byte: the length of the sequence and the range of its second
-- byte (the later ones are 80..BF).
local LEADS = {}
for lead = 0xc2, 0xdf do
  LEADS[lead] = { 2, 0x80, 0xbf }
end
for lead = 0xe0, 0xef do
  LEADS[lead] = { 3, 0x80, 0xbf }
end
LEADS[0xe0] = { 3, 0xa0, 0xbf }
LEADS[0xed] = { 3, 0x80, 0x9f }
for lead = 0xf0, 0xf4 do
  LEADS[lead] = { 4, 0x80, 0xbf }
end
LEADS[0xf0] = { 4, 0x90, 0xbf }
LEADS[0xf4] = { 4, 0x80, 0x8f }

-- The length of the valid sequence that starts at text[i] (a byte of 80
-- or more), or nil.
local function sequence_length(text, i)
  local lead = LEADS[byte(text, i)]
  if not lead then
    return nil
  end
  local second = byte(text, i + 1)
  if not second or second < lead[2] or second > lead[3] then
    return nil
  end
  for k = i + 2, i + lead[1] - 1 do
    local following = byte(text, k)
    if not following or following < 0x80 or following > 0xbf then
      return nil
    end
  end
  return lead[1]
end

function M.clean(text)
  local first = text:find('[\128-\255]')
  if not first then
    return text
  end
  -- From the first byte of 80 or more: the valid stretches as they are,
  -- each invalid byte as U+FFFD.
  local parts, i = { text:sub(1, first - 1) }, first
  while i <= #text do
    local stop = text:find('[\128-\255]', i)
    if not stop then
      parts[#parts + 1] = text:sub(i)
      break
    end
    if stop > i then
      parts[#parts + 1] = text:sub(i, stop - 1)
    end
    local length = sequence_length(text, stop)
    if length then
      parts[#parts + 1] = text:sub(stop, stop + length - 1)
      i = stop + length
    else
      parts[#parts + 1] = M.REPLACEMENT
      i = stop + 1
    end
  end
  return concat(parts)
end

return M
