-- Test helpers: the programs that read our exports, run from the specs.
--
--   local consumers = require('helpers.consumers')
--   consumers.pprof(dir, args...)       -> exit code, stdout, stderr
--   consumers.speedscope(path)          -> what its importer made of a file
--   consumers.have_chromium()
--   consumers.browser_pages(jobs)      -> { {report, problems}, ... }
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

-- (Chromium is driven by node: spec/support/browser_pages.js.)
function M.have_chromium()
  return C.have(M.CHROMIUM) and C.have('node')
end

local CHECK_SCRIPT = C.read_file('spec/support/html_check.js')

-- The window `chromium --headless --dump-dom` gives a page (innerWidth x
-- innerHeight), which the checks of the flame graphs' labels were written
-- against.
local CHECK_WINDOW = { 780, 437 }

-- Opens pages in one headless Chromium (spec/support/browser_pages.js):
-- starting it costs about 3 s of CPU, a page a few tenths. Each job is
-- { text = page, config = what spec/support/html_check.js does in it },
-- or { path = file, screenshot = PNG to write, window = { w, h } } for a
-- page as it is. Returns a list, for each job: the check's report (nil if
-- it did not run) and a list of problems: errors, console output,
-- exceptions, fetches, no report.
function M.browser_pages(jobs)
  local dir = profile.tmpname('-pages')
  os.execute('mkdir -p ' .. q(dir))
  local list = {}
  for i, job in ipairs(jobs) do
    local path, window = job.path, job.window
    if job.text then
      path = dir .. '/' .. i .. '.html'
      local at = job.text:find('</body>', 1, true)
      C.write_file(path, job.text:sub(1, at - 1) ..
        '<script>window.MEMPROF_CHECK = ' .. cjson.encode(job.config) ..
        ';</script>\n<script>' .. CHECK_SCRIPT .. '</script>\n' ..
        job.text:sub(at))
      window = CHECK_WINDOW
    end
    list[i] = { path = path, screenshot = job.screenshot or cjson.null,
      width = window and window[1], height = window and window[2] }
  end
  C.write_file(dir .. '/jobs.json', cjson.encode(list))
  local code, stdout, stderr = C.run('timeout 300 ' .. C.command('node',
    'spec/support/browser_pages.js', M.CHROMIUM, dir .. '/jobs.json'))
  os.execute('rm -rf ' .. q(dir))
  assert(code == 0, 'Chromium: ' .. stderr)
  local results = {}
  for i, opened in ipairs(cjson.decode(stdout)) do
    local json = opened.check ~= cjson.null and opened.check or nil
    local report = jobs[i].text and json and cjson.decode(json)
    local problems = opened.console
    if jobs[i].text and not report then
      problems[#problems + 1] = 'the check did not run' ..
        (opened.loaded and '' or ': the page did not load')
    elseif report then
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
    results[i] = { report = report or nil, problems = problems }
  end
  return results
end

-- One page `text` with the check script after its own (browser_pages).
-- Returns the check's report and the list of problems.
function M.browser_check(text, config)
  local opened = M.browser_pages({ { text = text, config = config } })[1]
  return opened.report, opened.problems
end

return M
