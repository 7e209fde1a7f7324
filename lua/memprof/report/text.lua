-- memprof.report.text: the default text report (the layout of
-- Tarantool's memprof report).
--
--   text.write(result, out, opts)
--     result  from memprof.analyze.run()
--     out     a file handle (default io.stdout)
--     opts    leak_only: only the HEAP SUMMARY (and ALIASES)
--             human_readable: sizes in B/KiB/MiB/GiB
--             key: function(site) -> row name (default: site.name)
--
-- Rows are grouped by name: sites with the same name (a function
-- reloaded at another address, say) are reported as one row.
--
-- Sections ALLOCATIONS, REALLOCATIONS, DEALLOCATIONS: one row per site
-- with its event count and bytes allocated (+) and freed (-), sorted by
-- count (then name); realloc and free rows list under "Overrides:" the
-- sites that had produced the released blocks.
--
-- HEAP SUMMARY: every site whose holds are not zero, by holds (then
-- name), then the TOTAL (the net bytes of the stream).  "N allocs" counts
-- the events at the site that produced a block, alloc or realloc; when
-- all of them were reallocations the row ends with "(all allocs were
-- reallocations)", when only some were, with "(K of the allocs were
-- reallocations)": a reallocated block belongs to the site that gave it
-- its current size.
--
-- ALIASES: the multi-line chunk names used by the rows above.

local M = {}

local format, concat, floor, abs = string.format, table.concat, math.floor,
  math.abs

local UNITS = { 'B', 'KiB', 'MiB', 'GiB' }

-- 1536 -> '1536B', or '1.50KiB' in human-readable form.
function M.format_size(bytes, human_readable)
  if not human_readable then
    return format('%dB', bytes)
  end
  local unit, scaled = 1, bytes
  while abs(scaled) >= 1024 and unit < #UNITS do
    scaled = scaled / 1024
    unit = unit + 1
  end
  if scaled == floor(scaled) then
    return format('%d%s', scaled, UNITS[unit])
  end
  return format('%.2f%s', scaled, UNITS[unit])
end

local function site_name(site)
  return site.name
end

-- Groups records by the name of their site: one row per name, with the
-- numeric fields summed and the sites listed.  `fields` names the summed
-- fields; `merge(row, record)` adds anything else.
local function group_by_name(records, key, fields, merge)
  local rows, by_name = {}, {}
  for _, record in ipairs(records) do
    local name = key(record.site)
    local row = by_name[name]
    if not row then
      row = { name = name, sites = {} }
      for _, field in ipairs(fields) do row[field] = 0 end
      by_name[name] = row
      rows[#rows + 1] = row
    end
    for _, field in ipairs(fields) do
      row[field] = row[field] + record[field]
    end
    row.sites[#row.sites + 1] = record.site
    if merge then merge(row, record) end
  end
  return rows
end

-- Sorts rows by `field`, largest first, then by name.
local function sort_by(rows, field)
  table.sort(rows, function(a, b)
    if a[field] ~= b[field] then
      return a[field] > b[field]
    end
    return a.name < b.name
  end)
  return rows
end

-- Rows for one event kind, grouped by name.
local function event_rows(records, key)
  local rows = group_by_name(records, key, { 'count', 'plus', 'minus' },
    function(row, record)
      row.overrides = row.overrides or {}
      for _, owner in ipairs(record.overrides) do
        row.overrides[key(owner)] = owner
      end
    end)
  return sort_by(rows, 'count')
end

-- Heap rows with nonzero holds, grouped by name.
local function heap_rows(stats_list, key)
  local kept = {}
  for _, row in ipairs(group_by_name(stats_list, key,
      { 'holds', 'allocs', 'reallocs', 'frees' })) do
    if row.holds ~= 0 then
      kept[#kept + 1] = row
    end
  end
  return sort_by(kept, 'holds')
end

local function sorted_keys(set)
  local keys = {}
  for k in pairs(set) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

local function note_used_aliases(used, sites)
  for _, site in pairs(sites) do
    if site.alias then
      used[site.alias] = true
    end
  end
end

local SECTIONS = {
  { kind = 'alloc', title = 'ALLOCATIONS' },
  { kind = 'realloc', title = 'REALLOCATIONS' },
  { kind = 'free', title = 'DEALLOCATIONS' },
}

local function write_events(out, rows, title, size, used_aliases)
  out:write(title, '\n')
  for _, row in ipairs(rows) do
    out:write(format('%s: %d events\t+%s\t-%s\n', row.name, row.count,
      size(row.plus), size(row.minus)))
    local overrides = sorted_keys(row.overrides)
    if #overrides > 0 then
      out:write('\tOverrides:\n')
      for _, name in ipairs(overrides) do
        out:write('\t\t', name, '\n')
      end
    end
    note_used_aliases(used_aliases, row.sites)
    note_used_aliases(used_aliases, row.overrides)
  end
  out:write('\n')
end

local function realloc_note(row)
  if row.reallocs == 0 then
    return ''
  end
  if row.reallocs == row.allocs then
    return ' (all allocs were reallocations)'
  end
  return format(' (%d of the allocs were reallocations)', row.reallocs)
end

local function write_heap(out, rows, total, size, used_aliases)
  out:write('HEAP SUMMARY:\n')
  for _, row in ipairs(rows) do
    out:write(format('%s holds %s: %d allocs, %d frees%s\n', row.name,
      size(row.holds), row.allocs, row.frees, realloc_note(row)))
    note_used_aliases(used_aliases, row.sites)
  end
  out:write(format('TOTAL holds %s (net bytes of the stream)\n', size(total)))
  out:write('\n')
end

-- The lines of a chunk name, without the empty piece after a final
-- newline.
local function source_lines(chunkname)
  local lines = {}
  for line in (chunkname .. '\n'):gmatch('(.-)\n') do
    lines[#lines + 1] = line
  end
  if chunkname:sub(-1) == '\n' then
    lines[#lines] = nil
  end
  return lines
end

local function write_aliases(out, aliases, used)
  local shown = {}
  for _, alias in ipairs(aliases) do
    if used[alias.name] then
      shown[#shown + 1] = alias
    end
  end
  if #shown == 0 then
    return
  end
  out:write('ALIASES:\n')
  for _, alias in ipairs(shown) do
    out:write(alias.name, ':\n')
    for number, line in ipairs(source_lines(alias.chunkname)) do
      out:write(format('%d\t| %s\n', number, line))
    end
    out:write('\n')
  end
end

function M.write(result, out, opts)
  out = out or io.stdout
  opts = opts or {}
  local key = opts.key or site_name
  local function size(bytes)
    return M.format_size(bytes, opts.human_readable)
  end
  local used_aliases = {}
  if not opts.leak_only then
    for _, section in ipairs(SECTIONS) do
      local rows = event_rows(result.sites.kinds[section.kind], key)
      write_events(out, rows, section.title, size, used_aliases)
    end
  end
  write_heap(out, heap_rows(result.heap.sites, key), result.heap.total, size,
    used_aliases)
  write_aliases(out, result.stream.aliases, used_aliases)
end

-- The report as a string (for tests and embedding).
function M.render(result, opts)
  local parts = {}
  local buffer = { write = function(self, ...)
    for i = 1, select('#', ...) do
      parts[#parts + 1] = select(i, ...)
    end
    return self
  end }
  M.write(result, buffer, opts)
  return concat(parts)
end

return M
