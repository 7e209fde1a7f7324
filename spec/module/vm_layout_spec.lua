-- The layout knowledge and its verification at start.
local h = require('helpers.profile')
local memprof = require('memprof')

local ENOTSUP = 95

local function script(body)
  return 'package.cpath = ' .. string.format('%q', package.cpath) .. '\n' ..
    'package.path = ' .. string.format('%q', package.path) .. '\n' .. body
end

-- Runs a script in a child with MEMPROF_LAYOUT_OVERRIDE set; returns what
-- it printed.
local function run_with_override(override, body)
  local file = h.tmpname('.lua')
  local f = assert(io.open(file, 'w'))
  f:write(script(body))
  f:close()
  local pipe = assert(io.popen('MEMPROF_LAYOUT_OVERRIDE=' ..
    h.shell_quote(override) .. ' ' .. h.lua .. ' ' .. file .. ' 2>&1'))
  local out = pipe:read('*a')
  pipe:close()
  os.remove(file)
  return out
end

-- start's results with an override, and whether the file exists.
local function start_with_override(override)
  local path = h.tmpname()
  local out = run_with_override(override, string.format([[
local memprof = require('memprof')
local ok, msg, err = memprof.start(%q)
if ok then memprof.stop() end
print(ok, msg, err, io.open(%q) ~= nil)
]], path, path))
  os.remove(path)
  return out
end

describe('memprof.info', function()
  local info = memprof.info()

  it('says the layout was verified and how', function()
    assert.is_true(info.calibrated)
    assert.is_nil(info.error)
    assert.equal(jit.version, info.version)
    -- Bytecode dumps flag two-slot frames (always with GC64 on x86_64).
    local flags = string.byte(string.dump(function() end), 5)
    assert.equal(math.floor(flags / 8) % 2 == 1, info.gc64)
    assert.matches(info.gc64 and 'GC64' or 'non%-GC64', info.family)
  end)

  it('reports the learned VM state values', function()
    local v = info.vmstate
    if v.numbering == 'INTERP/C/GC/EXIT/RECORD/OPT/ASM' then
      assert.same({ -1, -2, -3 }, { v.lua, v.c, v.gc })
    else
      assert.equal('INTERP/LFUNC/FFUNC/CFUNC/GC/EXIT/RECORD/OPT/ASM',
        v.numbering)
      assert.same({ -2, -4, -5 }, { v.lua, v.c, v.gc })
    end
  end)

  it('found the trace array when the JIT compiler is on', function()
    assert.is_true(info.traces)
    assert.is_true(info.offsets.g_trace > 0)
  end)

  it('names the known build its offsets match, or says it found new ones',
    function()
    -- The Makefile names the build each suite runs on ('discovered' for
    -- builds whose layout is in no table).
    local expected = os.getenv('MEMPROF_TEST_BUILD')
    assert.equal(info.build and 'matched' or 'discovered', info.layout)
    if expected == 'discovered' then
      assert.is_nil(info.build)
    elseif expected then
      assert.equal(expected, info.build)
    end
  end)

  it('learned the extra stack slots of this build', function()
    -- 5 + 2 * FR2 slots, 8 with two-slot frames since upstream d1a2fef8
    -- (2023-09).
    local o = info.offsets
    if info.gc64 then
      assert.is_true(o.stack_extra == 7 or o.stack_extra == 8)
    else
      assert.equal(5, o.stack_extra)
    end
  end)

  it('lists the offsets it verified', function()
    local o = info.offsets
    if info.gc64 then
      -- The saved PC sits at 8 in arm64's C frame, at 24 on x86_64.
      local cf_pc = jit.arch == 'arm64' and 8 or 24
      assert.same({ 16, 32, 40, 56, 80, cf_pc, 16 },
        { o.L_glref, o.L_base, o.L_top, o.L_stack, o.L_cframe,
          o.cf_pc, o.cf_L })
    else
      assert.same({ 8, 16, 24, 36, 48, 28, 24 },
        { o.L_glref, o.L_base, o.L_top, o.L_stack, o.L_cframe,
          o.cf_pc, o.cf_L })
    end
    -- The heap's size (gc.total) follows the allocator's pair in every
    -- known build.
    assert.equal(o.g_allocd + 8, o.g_gctotal)
  end)
end)

describe('traces', function()
  it('are verified in a separate VM, whatever this VM\'s JIT setting',
    function()
    local path = h.tmpname()
    local out, code = h.run_script(script(string.format([[
local memprof = require('memprof')
jit.off()
assert(memprof.start(%q)) assert(memprof.stop())
local i = memprof.info()
print(i.traces, i.calibrated_in, i.calibrations)
]], path)))
    os.remove(path)
    assert.equal(0, code)
    assert.equal('true\tseparate VM\t1\n', out)
  end)

  it('are not looked for again when calibrated in the profiled VM',
    function()
    local path = h.tmpname()
    local out, code = h.run_script(script(string.format([[
local memprof = require('memprof')
jit.off()
assert(memprof.start(%q)) assert(memprof.stop())
local before = memprof.info().traces
jit.on()
assert(memprof.start(%q)) assert(memprof.stop())
local i = memprof.info()
print(before, i.traces, i.calibrated_in, i.calibrations)
]], path, path)), 'MEMPROF_CALIBRATE=profiled-vm')
    os.remove(path)
    assert.equal(0, code)
    -- Each try would leave its garbage in that VM.
    assert.equal('false\tfalse\tprofiled VM\t1\n', out)
  end)
end)

describe('verification at start', function()
  local o = memprof.info().offsets

  it('refuses a wrong current-thread offset, naming the check', function()
    local out = start_with_override('g_cur_L=' .. (o.g_cur_L + 8))
    assert.equal(string.format("nil\tcannot verify this VM's layout: check " ..
      "'current thread (cur_L)' failed: no reference in the first 1024 " ..
      "bytes of global_State holds the running lua_State in every " ..
      "probe\t%d\tfalse\n", ENOTSUP), out)
  end)

  it('refuses a wrong saved-PC offset, naming the check', function()
    local out = start_with_override('cframe_pc=8')
    assert.matches("check 'layout override' failed: unknown field", out)
    out = start_with_override('cf_pc=' .. (o.cf_pc + 8))
    assert.equal("nil\tcannot verify this VM's layout: check 'saved PC " ..
      "in the C frame' failed: no line table and C frame slot give the " ..
      "lines of the allocations seen\t95\tfalse\n", out)
  end)

  -- The refusal of a prototype's fields names the functions and the slots
  -- of them it tried: from past the function id to the C function's slot.
  local function no_proto_type()
    local ref = require('memprof').info().gc64 and 8 or 4
    local from = math.ceil((o.fn_ffid + 2) / ref) * ref
    return "^nil\tcannot verify this VM's layout: check 'prototype " ..
      "fields' failed: no slot of a Lua function leads to a prototype " ..
      'whose type fits %(functions 0x%x+ and 0x%x+, slots fn%+' .. from ..
      ' to fn%+' .. o.fn_cfunc .. '%)\t95\tfalse\n$'
  end

  it('refuses a wrong prototype size, naming the check', function()
    local out = start_with_override('pt_size=' .. (o.pt_size + 8))
    assert.matches(no_proto_type(), out)
  end)

  it('refuses a wrong first line offset, naming what it wanted', function()
    -- (The places' functions start on lines 204 and 210 of the driver
    -- chunk, src/vm_layout.c, after its 200 blank lines.)
    local out = start_with_override('pt_firstline=' .. (o.pt_firstline + 4))
    assert.equal("nil\tcannot verify this VM's layout: check 'prototype " ..
      "fields' failed: no slot of a Lua function leads to a prototype " ..
      'whose first line fits (furthest: fn+' .. o.fn_pc .. ', a ' ..
      'prototype of ' .. o.pt_size .. ' bytes; want 204 and 210 in [pt+' ..
      (o.pt_firstline + 4) .. ', pt+' .. (o.pt_firstline + 5) .. '))' ..
      '\t95\tfalse\n', out)
  end)

  it('refuses a wrong VM state offset, naming the check', function()
    local out = start_with_override('g_vmstate=' .. (o.g_vmstate + 4))
    assert.equal("nil\tcannot verify this VM's layout: check 'VM state' " ..
      "failed: no int32 in the first 1024 bytes of global_State reads the " ..
      "states of Lua code, C code and the collector\t95\tfalse\n", out)
  end)

  it('refuses a wrong heap size offset, naming the check', function()
    local out = start_with_override('g_gctotal=' .. (o.g_gctotal + 8))
    assert.matches("^nil\tcannot verify this VM's layout: check 'heap " ..
      "size' failed: no field after the allocator in global state holds " ..
      "the heap's size that lua_gc counts %(%d+ bytes%)\t95\tfalse\n$", out)
  end)

  it('refuses a prototype size of 0, naming the check', function()
    -- Windows that end a few bytes before the prototype's size must not
    -- wrap around (a size of 256 found by chance once wrapped to 0, and
    -- the search that followed never ended).
    local out = start_with_override('pt_size=0')
    assert.matches(no_proto_type(), out)
  end)

  it('accepts an override equal to the verified value', function()
    local out = start_with_override('g_cur_L=' .. o.g_cur_L)
    assert.equal('true\tnil\tnil\ttrue\n', out)
  end)

  it('verifies trace fields set by an override', function()
    if not o.g_trace or o.g_trace < 0 then
      pending('the JIT compiler made no trace here')
      return
    end
    local function traces_with(override)
      return run_with_override(override, [[
local i = require('memprof').info()
print(i.calibrated, i.traces, i.offsets and i.offsets.g_trace)
]])
    end
    -- A wrong J->trace: the layout is used, its traces are not.
    assert.equal('true\tfalse\t-1\n',
      traces_with('g_trace=' .. (o.g_trace + 8)))
    assert.equal('true\ttrue\t' .. o.g_trace .. '\n',
      traces_with('g_trace=' .. o.g_trace .. ',tr_traceno=' .. o.tr_traceno))
  end)

  it('calibrates a VM it cannot verify three times, not at every start, ' ..
    'and never in the profiled VM', function()
    -- A calibration in the profiled VM would run a full collection there:
    -- an object only a weak table holds would be gone.
    local out = run_with_override('g_cur_L=' .. (o.g_cur_L + 8), [[
local memprof = require('memprof')
local weak = setmetatable({}, { __mode = 'v' })
local seen = {}
for i = 1, 5 do
  collectgarbage('stop')
  weak[1] = {}
  local ok = memprof.start('/nonexistent/dir/out.bin')
  seen[i] = tostring(ok) .. '/' .. tostring(weak[1] == nil)
end
print(table.concat(seen, ' '), memprof.info().calibrations)
]])
    assert.equal('nil/false nil/false nil/false nil/false nil/false\t3\n',
      out)
  end)

  it('rejects a malformed override', function()
    assert.equal("nil\tcannot verify this VM's layout: check 'layout " ..
      "override' failed: bad offset for g_cur_L in MEMPROF_LAYOUT_OVERRIDE" ..
      "\t95\tfalse\n", start_with_override('g_cur_L=x'))
  end)
end)

describe('spec helpers', function()
  it('start child VMs without the suite\'s per-build settings', function()
    local code = "local C = require('helpers.command') " ..
      "local _, out = C.run('echo \"[$MEMPROF_LAYOUT_OVERRIDE]" ..
      "[$MEMPROF_HOOK]\"') io.write(out)"
    local pipe = assert(io.popen("MEMPROF_LAYOUT_OVERRIDE=g_cur_L=1 " ..
      "MEMPROF_HOOK=generic LUA_PATH='./spec/?.lua;;' " .. h.lua ..
      ' -e ' .. h.shell_quote(code) .. ' 2>&1'))
    local out = pipe:read('*a')
    pipe:close()
    assert.equal('[][]\n', out)
  end)
end)
