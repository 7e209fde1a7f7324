-- memprof-report run in the suite's VM (cli/report.lua's main), its
-- output and errors caught, and temporary files that go after each spec.
--
--   local run = require('helpers.report_run')
--   local code, out, err = run.report('--format=json', path)
--   local out = run.sink()        -- out:write(...), out.text()
--   local path = run.temp_path('.heap'); after_each(run.remove_temp)

local cli = require('memprof.cli.report')

local M = {}

-- A file handle's write that keeps what is written; text() gives it.
function M.sink()
  local parts = {}
  return { write = function(self, ...)
    for _, s in ipairs({ ... }) do parts[#parts + 1] = tostring(s) end
    return self
  end, text = function() return table.concat(parts) end }
end

-- memprof-report's exit code, output and errors.
function M.report(...)
  local out, err = M.sink(), M.sink()
  local code = cli.main({ ... }, out, err)
  return code, out.text(), err.text()
end

local temp = {}

-- A new temporary path ending in `suffix` (default '.heap').
-- (os.tmpname makes its file: it goes with the ones named after it.)
function M.temp_path(suffix)
  local base = os.tmpname()
  local path = base .. (suffix or '.heap')
  temp[#temp + 1] = base
  temp[#temp + 1] = path
  return path
end

function M.remove_temp()
  for _, path in ipairs(temp) do os.remove(path) end
  temp = {}
end

return M
