-- memprof.read.names: the names of the places of a stream (sites) and
-- of their functions, made from the symbols the stream defines.
--
-- These are methods of a stream (memprof.read.stream mixes them in):
--   stream:define_lfunc(addr, chunkname, firstline)   -- a symbol record
--   stream:define_cfunc(addr, name)
--   stream:define_trace(traceno, proto_addr, line)
--   stream:lua_site(addr, line), stream:c_site(addr),
--   stream:trace_site(traceno), stream:internal(),
--   stream:internal_kind_site(kind, at)   -- the site of an event, made
--                                        -- on its first use and interned
-- names.Site is the shape (memprof.record) of a site; the fields are
-- listed in memprof.read.stream.

local record = require('memprof.record')

local sources = require('memprof.read.sources')

local M = {}

local methods = {}
M.methods = methods

local format = string.format
local next_key = next

-- What the VM was doing during an internal event of the extended format.
local INTERNAL_KINDS = { 'garbage collector', 'JIT compiler', 'trace exit',
  'interpreter' }
-- The first line of LuaJIT's built-ins written in Lua (~0 as 32 bits; a
-- writer that widens it as a signed number gives 2^64 - 1).
local BUILTIN_FIRSTLINE = 2 ^ 32 - 1

local function hex(n)
  return format('0x%x', n)
end

-- A site is a memprof.record (a large profile has hundreds of thousands
-- of sites): M.Site is its shape.  new_site takes its fields by name.
-- The fields that most sites lack come last: a site of a Lua line or a
-- C function is made with the first seven only (an array part of eight
-- slots, not twelve: 32 bytes less per place).
local Site = record.shape({ 'id', 'source', 'name', 'chunkname', 'line',
  'addr', 'func', 'alias', 'internal_kind', 'traceno', 'traces' })
M.Site = Site

function methods:new_site(fields)
  local id = #self.sites + 1
  local site
  if fields.alias or fields.internal_kind or fields.traceno or
      fields.traces then
    site = Site.make({ id, fields.source, fields.name, fields.chunkname,
      fields.line, fields.addr, fields.func, fields.alias,
      fields.internal_kind, fields.traceno, fields.traces })
  else
    site = Site.make({ id, fields.source, fields.name, fields.chunkname,
      fields.line, fields.addr, fields.func })
  end
  self.sites[id] = site
  return site
end

-- The chunk name as shown in site names.  A multi-line chunk name (code
-- loaded from a string) is replaced by a numbered alias, numbered in order
-- of first use; the alias is returned too.
function methods:display_chunkname(chunkname)
  if not chunkname:find('\n', 1, true) then
    return chunkname, nil
  end
  local alias = self.alias_of[chunkname]
  if not alias then
    alias = 'function_alias_' .. (#self.aliases + 1)
    self.alias_of[chunkname] = alias
    self.aliases[#self.aliases + 1] = { name = alias, chunkname = chunkname }
  end
  return alias, alias
end

-- Whether a Lua symbol is one of LuaJIT's built-ins written in Lua.
local function is_builtin(sym)
  return sym.firstline ~= nil and sym.firstline >= BUILTIN_FIRSTLINE
end

local function builtin_name(sym)
  return '[builtin:' .. sym.chunkname .. ']'
end

-- 'CHUNKNAME:LINE' for a line of a Lua function (and the alias used, if
-- any); 'LFUNC 0xADDR:LINE' if the stream never described the function.
function methods:lua_location(sym, line)
  if not sym.chunkname then
    return format('LFUNC %s:%d', hex(sym.addr), line), nil
  end
  if is_builtin(sym) then
    return builtin_name(sym), nil
  end
  local chunkname, alias = self:display_chunkname(sym.chunkname)
  return format('%s:%d', chunkname, line), alias
end

function methods:define_lfunc(addr, chunkname, firstline)
  self.lfuncs[addr] = { addr = addr, chunkname = chunkname,
    firstline = firstline, sites = {} }
end

-- The name of a C function that no symbol names: the recorder gives the
-- object's path and the offset (what addr2line takes).  The program's
-- own object (a path that names no shared library) is named by the
-- program: '/usr/bin/luajit+0x92c0' is 'luajit+0x92c0 (host program)'.
local function program_name(name)
  local path, offset = name:match('^(/.+)(%+0x%x+)$')
  if not path then
    return name
  end
  local base = path:match('[^/]*$')
  if base == '' or base:find('%.so$') or base:find('%.so%.') then
    return name
  end
  return base .. offset .. ' (host program)'
end
M.program_name = program_name

function methods:define_cfunc(addr, name)
  name = program_name(name)
  if not self.cfuncs[addr] then
    self.c_sorted = nil
  end
  self.cfuncs[addr] = { addr = addr, name = name, sites = {} }
  -- Resolved addresses may now resolve differently.
  if next_key(self.c_sites) ~= nil then
    self.c_sites = {}
  end
end

-- The trace keeps the function that is at proto_addr now; it is named
-- when its first event arrives.
function methods:define_trace(traceno, proto_addr, line)
  self.traces[traceno] = { traceno = traceno, line = line,
    proto = self.lfuncs[proto_addr] or { addr = proto_addr } }
  self.trace_sites[traceno] = nil
end

function methods:internal()
  local site = self:new_site({ source = 'internal', name = 'INTERNAL' })
  site.func = site
  self.internal_site = site
  return site
end

-- The site of the internal events of one kind (extended format), at the
-- offset `at` of the kind.
function methods:internal_kind_site(kind, at)
  local site = self.internal_kind_sites[kind]
  if site then
    return site
  end
  local what = INTERNAL_KINDS[kind]
  if not what then
    self:fail(self:offset_of(at), format('expected the kind of an ' ..
      'internal event (1 to %d), found %d', #INTERNAL_KINDS, kind))
  end
  site = self:new_site({ source = 'internal', internal_kind = what,
    name = 'INTERNAL (' .. what .. ')' })
  site.func = site
  self.internal_kind_sites[kind] = site
  return site
end

-- The function of a Lua symbol, named by where it is defined: one table
-- per symbol instance, shared by the sites of the function.
function methods:lua_function(sym)
  if sym.func then
    return sym.func
  end
  local name, alias
  if not sym.chunkname then
    name = 'function at LFUNC ' .. hex(sym.addr)
  elseif is_builtin(sym) then
    name = builtin_name(sym)
  else
    local chunkname
    chunkname, alias = self:display_chunkname(sym.chunkname)
    local named = sym.firstline > 0 and
      sources.function_name(sym.chunkname, sym.firstline)
    if sym.firstline == 0 then
      name = 'main chunk of ' .. chunkname
    elseif named then
      name = format('%s (%s:%d)', named, chunkname, sym.firstline)
    else
      name = format('function at %s:%d', chunkname, sym.firstline)
    end
  end
  sym.func = { source = 'lua', name = name, chunkname = sym.chunkname,
    line = sym.firstline, addr = sym.addr, alias = alias }
  return sym.func
end

-- The function of a C symbol: its name, without an offset.
function methods:c_function(sym)
  if not sym.func then
    local name = sym.name
    if name == '' then
      name = 'CFUNC ' .. hex(sym.addr)
    end
    sym.func = { source = 'c', name = name, addr = sym.addr }
  end
  return sym.func
end

function methods:lua_site(addr, line)
  local sym = self.lfuncs[addr]
  if not sym then
    sym = { addr = addr, sites = {} }
    self.lfuncs[addr] = sym
  end
  local name, alias = self:lua_location(sym, line)
  local site = self:new_site({ source = 'lua', chunkname = sym.chunkname,
    line = line, name = name, alias = alias, addr = addr,
    func = self:lua_function(sym) })
  sym.sites[line] = site
  return site
end

-- The C symbol with the highest address at or below addr, if any.
function methods:nearest_cfunc(addr)
  local sorted = self.c_sorted
  if not sorted then
    sorted = {}
    for symbol_addr in pairs(self.cfuncs) do
      sorted[#sorted + 1] = symbol_addr
    end
    table.sort(sorted)
    self.c_sorted = sorted
  end
  local low, high = 1, #sorted
  local found
  while low <= high do
    local middle = math.floor((low + high) / 2)
    if sorted[middle] <= addr then
      found = sorted[middle]
      low = middle + 1
    else
      high = middle - 1
    end
  end
  return found and self.cfuncs[found]
end

function methods:c_site(addr)
  local sym = self.cfuncs[addr] or self:nearest_cfunc(addr)
  local site
  if sym then
    local offset = addr - sym.addr
    site = sym.sites[offset]
    if not site then
      local name = sym.name
      if name == '' then
        name = 'CFUNC ' .. hex(sym.addr)
      end
      if offset > 0 then
        name = name .. '+' .. hex(offset)
      end
      site = self:new_site({ source = 'c', name = name, addr = addr,
        func = self:c_function(sym) })
      sym.sites[offset] = site
    end
  else
    site = self.unknown_c[addr]
    if not site then
      site = self:new_site({ source = 'c', name = 'CFUNC ' .. hex(addr),
        addr = addr })
      site.func = site
      self.unknown_c[addr] = site
    end
  end
  self.c_sites[addr] = site
  return site
end

-- A site of its own for one trace.
function methods:own_trace_site(sym, name, alias)
  local site = self:new_site({ source = 'trace', name = name,
    traceno = sym.traceno, alias = alias })
  site.func = site
  return site
end

-- The site shared by the traces that start at `name`.
function methods:trace_start_site(name, alias)
  local site = self.trace_starts[name]
  if not site then
    site = self:new_site({ source = 'trace', name = name, alias = alias,
      traces = 0 })
    site.func = site
    self.trace_starts[name] = site
  end
  site.traces = site.traces + 1
  return site
end

function methods:name_trace(sym)
  local traceno = sym.traceno
  if traceno == 0 then
    -- Traces are numbered from 1; a VM that does not store the number
    -- of the running trace (arm64) records 0 for all of them.
    return self:own_trace_site(sym,
      'TRACE (compiled code, trace not known)')
  elseif not sym.proto then
    return self:own_trace_site(sym, format('TRACE [%d]', traceno))
  end
  local location, alias = self:lua_location(sym.proto, sym.line)
  -- The function where it starts, for the stacks of its events.
  sym.func = self:lua_function(sym.proto)
  if self.split_traces then
    return self:own_trace_site(sym,
      format('TRACE [%d] started at %s', traceno, location), alias)
  end
  return self:trace_start_site('TRACE started at ' .. location, alias)
end

function methods:trace_site(traceno)
  local sym = self.traces[traceno]
  if not sym then
    sym = { traceno = traceno }
    self.traces[traceno] = sym
  end
  if not sym.site then
    sym.site = self:name_trace(sym)
  end
  self.trace_sites[traceno] = sym.site
  return sym.site
end

return M
