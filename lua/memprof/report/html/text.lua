-- memprof.report.html.text: numbers and text as the HTML page shows
-- them: escaped, valid UTF-8, sizes in B/KiB/MiB with three significant
-- digits, whole numbers with commas, shares and times.

local layout = require('memprof.report.layout')
local utf8 = require('memprof.encode.utf8')

local format = string.format

-- Text with every byte that is not valid UTF-8 replaced by U+FFFD (chunk
-- names are bytes, the page is UTF-8).
local function clean_text(text)
  return utf8.clean(tostring(text))
end

local HTML_ESCAPES = { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;',
  ['"'] = '&quot;', ["'"] = '&#39;' }

local function escape(text)
  return (clean_text(text):gsub('[&<>"\']', HTML_ESCAPES))
end

-- 1536 -> '1.50 KiB': three significant digits (up to TiB).
local function human_size(bytes)
  local scaled, unit = layout.scale_size(bytes, 5)
  if unit == 'B' then
    return format('%d B', bytes)
  end
  local magnitude = math.abs(scaled)
  local decimals = magnitude < 10 and 2 or magnitude < 100 and 1 or 0
  return format('%.' .. decimals .. 'f %s', scaled, unit)
end

-- 1234567 -> '1,234,567': the one comma formatter of every report.
local with_commas = require('memprof.words').commas

local function percent(part, whole)
  if whole == 0 then
    return 0
  end
  return part / whole * 100
end

local function percent_text(part, whole)
  local value = percent(part, whole)
  if value ~= 0 and math.abs(value) < 0.1 then
    return '&lt;0.1%'
  end
  return format('%.1f%%', value)
end

-- Nanoseconds in the unit that suits `scale` (ns): '850 µs', '12.3 ms'.
local function time_unit(scale)
  if scale >= 1e9 then
    return 1e9, 's'
  elseif scale >= 1e6 then
    return 1e6, 'ms'
  end
  return 1e3, 'µs'
end

local function human_time(ns)
  if ns == 0 then
    return '0 ms'
  end
  local unit, name = time_unit(ns)
  local scaled = ns / unit
  local decimals = scaled < 10 and 2 or scaled < 100 and 1 or 0
  return format('%.' .. decimals .. 'f %s', scaled, name)
end

-- A size with its exact number of bytes as a tooltip.
local function size_html(bytes)
  return format('<span title="%s bytes">%s</span>', with_commas(bytes),
    human_size(bytes))
end

return {
  clean_text = clean_text,
  escape = escape,
  human_size = human_size,
  with_commas = with_commas,
  percent = percent,
  percent_text = percent_text,
  time_unit = time_unit,
  human_time = human_time,
  size_html = size_html,
}
