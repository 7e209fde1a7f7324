-- memprof.report.html.holders_section: the "Who holds it" section of a
-- profile's HTML page, when a heap snapshot taken during the profile is
-- given (--heap=SNAPSHOT, docs/holders.md): each place where the
-- snapshot's live objects were allocated, with the paths that hold them,
-- and the link to it from a row of the live-at-end table.
--
--   section.link(holders, group) -> '' or a link to the place's entry
--   section.html(holders)        -> '' or the section
-- `holders`: { heap = path, rows = the model's by_place rows }.

local layout = require('memprof.report.layout')
local text = require('memprof.report.html.text')

local M = {}

local format, concat = string.format, table.concat
local escape, human_size, commas = text.escape, text.human_size,
  text.with_commas

-- Holders listed under each place.
M.MAIN_HOLDERS = 5

-- The id of a place's entry: its index among the rows.
local function index_of(holders, name)
  if not holders.index then
    holders.index = {}
    for i, row in ipairs(holders.rows) do holders.index[row.place] = i end
  end
  return holders.index[name]
end

-- A link from a live-at-end row (its group) to the entry of its place.
function M.link(holders, group)
  if not holders or not group.name then return '' end
  local i = index_of(holders, layout.place_name(group))
  if not i then return '' end
  return format(' <a class="who-holds" href="#who-holds-%d">who holds ' ..
    'it</a>', i)
end

local function entry(i, row)
  local items = {}
  for k = 1, math.min(M.MAIN_HOLDERS, #row.holders) do
    local h = row.holders[k]
    items[k] = format('<li><span class="mono">%s</span>: %s objects, %s' ..
      '</li>', escape(h.pattern), commas(h.objects), human_size(h.bytes))
  end
  if #row.holders > M.MAIN_HOLDERS then
    items[#items + 1] = format('<li>… and %s more paths</li>',
      commas(#row.holders - M.MAIN_HOLDERS))
  end
  return format('<li id="who-holds-%d"><span class="site">%s</span>: %s ' ..
    'objects, %s%s<ul>%s</ul></li>', i, escape(row.place),
    commas(row.objects), human_size(row.bytes),
    row.callers and ' (from ' .. escape(row.callers) .. ')' or '',
    concat(items))
end

function M.html(holders)
  if not holders then return '' end
  local items = {}
  for i, row in ipairs(holders.rows) do items[i] = entry(i, row) end
  return concat({
    '<section class="panel" id="who-holds-it" aria-labelledby="who-title">',
    '<div class="panel-head"><h2 id="who-title">Who holds it</h2></div>',
    format('<p class="note">The objects of the heap snapshot %s by the ' ..
      'place that allocated them, each with the paths from a root that ' ..
      'hold them.</p>', escape(holders.heap)),
    '<ol class="who-holds">', concat(items), '</ol>', '</section>',
  }, '\n') .. '\n'
end

return M
