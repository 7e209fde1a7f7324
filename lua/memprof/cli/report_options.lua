-- memprof.cli.report_options: memprof-report's command line (its
-- parser is memprof.cli.options): the formats and the options each
-- takes, what --diff takes, the options and --help.

local analyze = require('memprof.analysis.analyze')
local groups = require('memprof.analysis.groups')
local folded = require('memprof.report.folded')
local option_parser = require('memprof.cli.options')

local M = {}

local PROGRAM = 'memprof-report'

-- Rows per section of the text report and --diff without --top or --all.
M.DEFAULT_TOP = 30

local format = string.format
local whole_number, one_of = option_parser.whole_number, option_parser.one_of

-- The formats, in the order --help lists them.  `takes`: the keys of
-- the options that apply to the format.
local function keys(list, more)
  local set = { focus = true, ignore = true }
  for _, key in ipairs(list) do
    set[key] = true
  end
  for _, key in ipairs(more or {}) do
    set[key] = true
  end
  return set
end

M.FORMATS = {
  { name = 'text', help = 'the report, or the views asked for (default)',
    takes = keys(analyze.VIEWS, { 'group', 'top', 'all', 'sort', 'leak_only',
      'human_readable', 'output', 'split_traces', 'heap' }) },
  { name = 'json', help = 'every view as JSON (docs/json.md)',
    takes = keys({ 'group', 'temporary', 'output', 'split_traces',
      'heap' }) },
  { name = 'folded', help = 'collapsed stacks for flame graphs (--metric)',
    takes = keys({ 'group', 'metric', 'output', 'split_traces' }) },
  { name = 'pprof', help = 'gzipped profile.proto for go tool pprof',
    takes = keys({ 'output', 'split_traces' }) },
  { name = 'chrome', help = 'the heap over time as a Chrome trace',
    takes = keys({ 'output', 'split_traces' }) },
  { name = 'html', help = 'a page of every view, for a browser',
    takes = keys({ 'group', 'top', 'all', 'sort', 'temporary', 'output',
      'split_traces', 'heap' }) },
  { name = 'heapsnapshot', help = 'of a heap snapshot: V8\'s ' ..
      '.heapsnapshot, for Chrome DevTools and memlab', heap_only = true,
    takes = keys({ 'output' }) },
}

local FORMAT_NAMES = {}
for i, entry in ipairs(M.FORMATS) do
  FORMAT_NAMES[i] = entry.name
end

-- What --diff takes.
M.DIFF_TAKES = keys({ 'group', 'top', 'all', 'sort', 'human_readable',
  'output', 'diff', 'split_traces' })

-- A text to look for in names: not empty.
local function some_text(value)
  if value == '' then
    return nil, 'expected some text, found nothing'
  end
  return value
end

M.OPTIONS = {
  { name = 'format', value = 'NAME', key = 'format',
    check = one_of(FORMAT_NAMES), help = 'the output format (see below)' },
  { name = 'group', value = 'G', key = 'group', check = one_of(groups.MODES),
    help = 'rows by line (default), function, caller or stack' },
  { name = 'top', value = 'N', key = 'top', check = whole_number(1),
    help = 'at most N rows per section (text: 30 by default)' },
  { name = 'all', key = 'all', help = 'every row of each section' },
  { name = 'sort', value = 'S', key = 'sort',
    check = one_of({ 'bytes', 'count', 'live' }),
    help = 'bytes (default), count; --diff: live (default), bytes, count' },
  { name = 'focus', value = 'TEXT', key = 'focus', check = some_text,
    help = 'only blocks whose place or stack has TEXT (every view)' },
  { name = 'ignore', value = 'TEXT', key = 'ignore', check = some_text,
    help = 'leave out blocks whose place or stack has TEXT' },
  { name = 'leaks', key = 'leaks',
    help = 'view: blocks live at the end, with their stacks' },
  { name = 'peak', key = 'peak',
    help = "view: the heap's peak, and what held it" },
  { name = 'temporary', value = 'N', optional = true, default = 1,
    key = 'temporary', check = whole_number(0),
    help = 'view: blocks freed within N allocations (default 1)' },
  { name = 'timeline', key = 'timeline',
    help = 'view: live bytes over time (needs time marks)' },
  { name = 'split-traces', key = 'split_traces',
    help = 'one row per trace number, not per start place' },
  { name = 'leak-only', key = 'leak_only',
    help = 'default report: only the heap summary' },
  { name = 'human-readable', key = 'human_readable',
    help = 'sizes in B, KiB, MiB, GiB' },
  { name = 'metric', value = 'M', key = 'metric', check = one_of(folded.METRICS),
    help = 'folded: alloc-bytes|alloc-count|live-bytes|peak-bytes' },
  { name = 'output', value = 'PATH', key = 'output',
    help = 'write to PATH (folded: to PATH.METRIC.folded)' },
  { name = 'diff', key = 'diff',
    help = 'compare two profiles: --diff BEFORE AFTER' },
  { name = 'heap', value = 'SNAPSHOT', key = 'heap',
    help = 'with --leaks, json, html: who holds what each place made' },
  { name = 'profile', value = 'PROFILE', key = 'heap_profile',
    help = 'of a heap snapshot: the profile it was taken in' },
  option_parser.HELP,
  { name = 'version', key = 'version',
    help = 'show the version (and the interpreter) and exit' },
}

local USAGE = [[
Usage: {program} [OPTIONS] FILE
       {program} --diff [OPTIONS] BEFORE AFTER
       {program} [--profile=PROFILE] [OPTIONS] HEAP
       {program} --diff [OPTIONS] OLD.heap NEW.heap

Print a report of a memprof profile: allocations, reallocations and
deallocations per site, and what is still allocated at the end.
With --leaks, --peak, --temporary or --timeline, print those views
instead.  --group=caller and --group=stack need a profile recorded
with call stacks (memprof.start(path, {stack_depth = N})), --timeline
one recorded with time marks (memprof.start(path, {timestamps = true})).
Rows are sorted by bytes (--sort=count: by events, Tarantool's order).
With --diff, print which rows grew or shrank from BEFORE to AFTER,
by growth in live bytes at the end (--sort=bytes: in bytes allocated).
The text report and --diff show the first {top} rows of each section
(--top=N for N, --all for every row).  The report goes to stdout, or
to the file of --output (--output=- is stdout too).
Of a heap snapshot (memprof.snapshot(path, {format = 'heap'})), print
what holds the memory, and with --diff what grew (docs/holders.md).

Options:
]]

function M.usage()
  local formats = { 'Formats (--format=NAME; docs/formats.md):' }
  for _, entry in ipairs(M.FORMATS) do
    formats[#formats + 1] = format('  %-22s %s', entry.name, entry.help)
  end
  return option_parser.help(USAGE, M.OPTIONS, formats,
    { program = PROGRAM, top = M.DEFAULT_TOP })
end

return M
