-- Test helpers: the programs that read our exports, run from the specs.
--
--   local consumers = require('helpers.consumers')
--   consumers.pprof(dir, args...)       -> exit code, stdout, stderr
--   consumers.speedscope(path)          -> what its importer made of a file
--   consumers.have_chromium()
--   consumers.chromium(page_path, args) -> stdout, stderr
--   consumers.browser_check(text, config) -> report, problems
local cjson = require('cjson')
local C = require('helpers.command')
local profile = require('helpers.profile')

local M = {}

local q = C.quote

-- go tool pprof (Debian golang-go), offline, with its files under dir.
function M.pprof(dir, ...)
  local env = 'HOME=' .. q(dir) .. ' GOCACHE=' .. q(dir .. '/cache') ..
    ' GOFLAGS=-mod=mod GOPROXY=off PPROF_TMPDIR=' .. q(dir)
  return C.run(env .. ' go tool pprof ' .. C.command(...))
end

-- speedscope's own importer (npm speedscope, run with node) on a file.
M.SPEEDSCOPE = os.getenv('MEMPROF_SPEEDSCOPE') or
  'build/node_modules/speedscope'

function M.have_speedscope()
  return C.have('node') and
    C.read_file(M.SPEEDSCOPE .. '/package.json') ~= nil
end

function M.speedscope(path)
  local code, stdout, stderr = C.run(C.command('node',
    'spec/support/speedscope_import.js', M.SPEEDSCOPE, path))
  assert(code == 0 and stderr == '', 'speedscope: ' .. stderr)
  return cjson.decode(stdout)
end

-- Headless Chromium (Debian chromium). Its binary is started directly:
-- Debian's /usr/bin/chromium is a shell script that spends a second and
-- more on checks that a headless run does not need.
local DEBIAN_BINARY = '/usr/lib/chromium/chromium'
local function debian_binary()
  local file = io.open(DEBIAN_BINARY, 'rb')
  if file then
    file:close()
    return DEBIAN_BINARY
  end
end
M.CHROMIUM = os.getenv('MEMPROF_CHROMIUM') or debian_binary() or 'chromium'
-- memlab's heap API (npm @memlab/heap-analysis, in build/node_modules:
-- .ci/install-deps --tests; MEMPROF_MEMLAB names another node_modules).
M.MEMLAB = os.getenv('MEMPROF_MEMLAB') or 'build/node_modules'

function M.have_memlab()
  return C.have('node') and C.read_file(M.MEMLAB ..
    '/@memlab/heap-analysis/package.json') ~= nil
end

-- What memlab computes of a .heapsnapshot file
-- (spec/support/heapsnapshot_memlab.js).
function M.memlab(path)
  local code, stdout, stderr = C.run('NODE_PATH=' .. C.quote(M.MEMLAB) ..
    ' timeout 120 ' .. C.command('node', 'spec/support/heapsnapshot_memlab.js',
    path))
  assert(code == 0, 'memlab: ' .. stderr)
  return cjson.decode(stdout)
end

-- What Chrome DevTools' own loader computes of each .heapsnapshot file,
-- in one headless Chromium (spec/support/heapsnapshot_devtools.js): a list.
function M.devtools(...)
  local code, stdout, stderr = C.run('timeout 120 ' .. C.command('node',
    'spec/support/heapsnapshot_devtools.js', M.CHROMIUM, ...))
  assert(code == 0, 'DevTools: ' .. stderr)
  return cjson.decode(stdout)
end

local CHROMIUM_FLAGS = '--headless --no-sandbox --disable-gpu ' ..
  '--disable-background-networking --disable-component-update ' ..
  '--disable-sync --no-first-run --hide-scrollbars ' ..
  '--run-all-compositor-stages-before-draw --virtual-time-budget=5000'

function M.have_chromium()
  return C.have(M.CHROMIUM)
end

-- Runs Chromium on a page; returns its stdout and stderr.
function M.chromium(page_path, args)
  local dir = profile.tmpname('-chromium')
  local out, err = dir .. '.out', dir .. '.err'
  os.execute(string.format('mkdir -p %s && timeout 120 %s %s ' ..
    '--user-data-dir=%s %s %s >%s 2>%s', q(dir), q(M.CHROMIUM),
    CHROMIUM_FLAGS, q(dir), args, q('file://' .. page_path), q(out), q(err)))
  local stdout, stderr = C.read_file(out) or '', C.read_file(err) or ''
  os.execute('rm -rf ' .. q(dir) .. ' ' .. q(out) .. ' ' .. q(err))
  return stdout, stderr
end

local ENTITIES = { lt = '<', gt = '>', quot = '"', amp = '&', nbsp = ' ' }

local function unescape(text)
  text = text:gsub('&#(%d+);', function(code)
    return string.char(tonumber(code))
  end)
  return (text:gsub('&(%a+);', ENTITIES))
end

-- What the page's script wrote to the console (only this page's lines:
-- errors, uncaught exceptions, anything logged).
local function console_lines(stderr)
  local lines = {}
  for line in stderr:gmatch('[^\n]+') do
    if line:find('CONSOLE', 1, true) or line:find('Uncaught', 1, true) then
      lines[#lines + 1] = line
    end
  end
  return lines
end

local CHECK_SCRIPT = C.read_file('spec/support/html_check.js')

-- The page `text` with the check script (spec/support/html_check.js)
-- after its own, run in Chromium. Returns the check's report (nil if it
-- did not run) and a list of problems: errors, console output, fetches,
-- no report.
function M.browser_check(text, config)
  local path = profile.tmpname('.html')
  local at = text:find('</body>', 1, true)
  C.write_file(path, text:sub(1, at - 1) ..
    '<script>window.MEMPROF_CHECK = ' .. cjson.encode(config) ..
    ';</script>\n<script>' .. CHECK_SCRIPT .. '</script>\n' .. text:sub(at))
  local dom, stderr = M.chromium(path, '--enable-logging=stderr --v=0 ' ..
    '--dump-dom')
  os.remove(path)
  local json = dom:match('.*<pre id="memprof%-check">(.-)</pre>')
  local report = json and cjson.decode(unescape(json))
  local problems = console_lines(stderr)
  if not report then
    problems[#problems + 1] = 'the check did not run: ' .. stderr:sub(1, 500)
  else
    for _, message in ipairs(report.errors) do
      problems[#problems + 1] = message
    end
    if not report.ready then
      problems[#problems + 1] = 'the page did not finish its start'
    end
    if #report.resources > 0 then
      problems[#problems + 1] = 'the page fetched ' ..
        table.concat(report.resources, ', ')
    end
  end
  return report, problems
end

return M
