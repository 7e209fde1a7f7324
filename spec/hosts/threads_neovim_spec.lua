-- Hosts other than a plain interpreter: a C program running several VMs
-- in threads, and Neovim.
local h = require('helpers.profile')
local C = require('helpers.command')

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

local function run(command)
  local pipe = assert(io.popen(C.CLEAN_ENV .. 'timeout 120 ' .. command ..
    ' 2>&1; echo "exit=$?"'))
  local out = pipe:read('*a')
  pipe:close()
  return out:gsub('exit=%d+%s*$', ''), tonumber(out:match('exit=(%d+)%s*$'))
end

local CPATH = './build/?.so;;'

-- The threads host links a VM: Debian's LuaJIT, and OpenResty's luajit2
-- when it is unpacked into build/luajit2 (CI does that).
local HOSTS = { 'build/threads_host' }
if exists('build/threads_host_luajit2') then
  HOSTS[#HOSTS + 1] = 'build/threads_host_luajit2'
end

describe('several VMs in threads', function()
  for _, host in ipairs(HOSTS) do
    it('profile themselves at the same time into separate files (' ..
      host .. ')', function()
      local dir = h.tmpname('.d')
      assert.equal(0, C.run('mkdir ' .. C.quote(dir)))
      local out, code = run(host .. " '" .. CPATH .. "' " .. dir .. ' 4')
      assert.equal('', out)
      assert.equal(0, code)
      for i = 1, 4 do
        local events, stream = h.read(dir .. '/thread' .. i .. '.bin')
        assert.is_nil(stream.warning)
        -- Thread i made 1000 * i tables at line 2 of its own chunk, and
        -- nothing of the other threads is in its file.
        assert.equal(1000 * i, #h.at(events, '@thread' .. i .. '.lua:2',
          'alloc'))
        for _, ev in ipairs(events) do
          local other = ev.name:match('^@thread(%d+)%.lua')
          if other then assert.equal(i, tonumber(other)) end
        end
        os.remove(dir .. '/thread' .. i .. '.bin')
      end
      os.remove(dir)
    end)

    -- Four VMs, 50 heap snapshots each into one path, all at once: each
    -- must succeed, and the file read back after each be a whole
    -- snapshot (the host reads it with memprof.read.heap_snapshot).
    it('snapshot into one path at the same time, each a whole file (' ..
      host .. ')', function()
      local dir = h.tmpname('.d')
      assert.equal(0, C.run('mkdir ' .. C.quote(dir)))
      local out, code = run(host .. " '" .. CPATH .. "' " .. dir ..
        " 4 50 './lua/?.lua;;'")
      local _, listing = C.run('ls -A ' .. C.quote(dir))
      C.remove_tree(dir)
      assert.equal('', out)
      assert.equal(0, code)
      -- No temporary file is left behind.
      assert.equal('shared.heap\n', listing)
    end)
  end
end)

describe('Neovim', function()
  it('profiles commands in nvim --headless and the report reads it',
    function()
    local path = h.tmpname()
    local script = h.tmpname('.lua')
    local f = assert(io.open(script, 'w'))
    f:write(string.format([[
package.cpath = %q .. package.cpath jit.off()
local memprof = require('memprof')
assert(memprof.start(%q))
local lines = {} for i = 1, 200 do lines[i] = false end
for i = 1, 200 do lines[i] = 'line ' .. i end
vim.cmd('enew') vim.api.nvim_buf_set_lines(0, 0, -1, false, lines)
for i = 1, 200 do local _ = vim.fn.getline(i) end
assert(memprof.stop())
]], './build/?.so;', path))
    f:close()
    local out, code = run('nvim --headless --clean -c ' ..
      h.shell_quote('luafile ' .. script) .. ' -c qa!')
    os.remove(script)
    assert.equal(0, code, out)
    local events, stream = h.read(path)
    assert.is_nil(stream.warning)
    -- Line 5 makes 200 strings of 6 to 8 characters: blocks of 32 or 36
    -- bytes in Neovim's LuaJIT (a 24-byte header, characters rounded up
    -- to 4). Anything else there (the string table growing) is larger.
    local strings = 0
    for _, ev in ipairs(h.at(events, '@' .. script .. ':5', 'alloc')) do
      if ev.nsize == 32 or ev.nsize == 36 then strings = strings + 1 end
    end
    assert.equal(200, strings)
    local report, rcode = run('bin/memprof-report ' .. path)
    assert.equal(0, rcode)
    assert.matches('HEAP SUMMARY (by bytes held):', report, 1, true)
    -- The script is the only absolute chunk name: named from its
    -- directory on.
    local dir, name = script:match('^(.*/)([^/]*)$')
    assert.are.equal('Files under ' .. dir .. ' are named from there on: ' ..
      '@…/name.lua is @' .. dir .. 'name.lua.\n', report:match('^[^\n]*\n'))
    assert.matches('\n@…/' .. name .. ':5: ', report, 1, true)
    os.remove(path)
  end)
end)
