-- Reads a memcheck log (valgrind --log-file) and fails if any error record
-- involves the module's own code: a frame in memprof.so or in one of its
-- sources. Errors of the VM itself (LuaJIT reads whole words past a
-- string's end, for one) are counted, not failed on.
local path = assert(arg[1], 'usage: valgrind_ours.lua LOG')

-- Run from the tree's root.
package.path = './spec/?.lua;' .. package.path
local OURS = require('helpers.sources').patterns('.')

local function is_ours(record)
  for _, pattern in ipairs(OURS) do
    if record:find(pattern) then return true end
  end
  return false
end

-- Records are the runs of lines between blank "==PID== " lines.
local function records(text)
  local list, current = {}, {}
  for line in (text .. '\n'):gmatch('([^\n]*)\n') do
    local body = line:match('^==%d+== ?(.*)$')
    if body == '' or body == nil then
      if #current > 0 then list[#list + 1] = table.concat(current, '\n') end
      current = {}
    else
      current[#current + 1] = body
    end
  end
  if #current > 0 then list[#list + 1] = table.concat(current, '\n') end
  return list
end

local f = assert(io.open(path, 'r'))
local text = f:read('*a')
f:close()
local errors, ours = 0, {}
for _, record in ipairs(records(text)) do
  local first = record:match('^[^\n]*')
  -- Error records start with what went wrong, then "at 0x...".
  if record:find('\n%s+at 0x') and not first:find('SUMMARY') then
    errors = errors + 1
    if is_ours(record) then ours[#ours + 1] = record end
  end
end
local summary = text:match('ERROR SUMMARY: [^\n]*') or 'no ERROR SUMMARY'
print(string.format('valgrind: %d error records, %d in the module (%s)',
  errors, #ours, summary))
for _, record in ipairs(ours) do print(record .. '\n') end
os.exit(#ours == 0 and text:find('ERROR SUMMARY') and 0 or 1)
