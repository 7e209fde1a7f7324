/*
** Calibration: the probes that run the VM, and the verification of a
** layout.
**
** The probes are a small Lua chunk and C functions it calls. The chunk
** uses no global: everything it needs is passed in, and everything else
** goes through the C API (lua_dump, lua_newthread and lua_resume, lua_gc,
** lua_getinfo), so hosts that replace or disable library functions
** (OpenResty's ngx_lua replaces coroutine.*) cannot change what it sees.
** The first pass discovers the layout (vm_discover.c); the second checks
** every offset against what the public API says about the same VM, and
** the first failing check is reported by name. Reads during calibration go
** through safe_read(), so a wrong offset is rejected, never dereferenced
** blindly.
*/
#define _GNU_SOURCE
#include "vm_layout.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "luajit.h"
#include "vm_calib.h"
#include "vm_candidates.h"

/* ---- Calibration state -------------------------------------------------- */

int calib_fail(struct calib *c, const char *check, const char *fmt, ...)
{
  va_list ap;
  int n;
  if (c->failed)
    return 0;
  c->failed = 1;
  n = snprintf(c->err, c->errlen, "check '%s' failed: ", check);
  if (n < 0 || (size_t)n >= c->errlen)
    return 0;
  va_start(ap, fmt);
  vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return 0;
}

int calib_given(const struct calib *c, size_t field)
{
  int i;
  if (c->given == 0) /* (No override: the searches ask thousands of times.) */
    return 0;
  for (i = 0; vm_layout_fields[i].name != NULL; i++)
    if (vm_layout_fields[i].offset == field)
      return (c->given >> i) & 1;
  return 0;
}

void calib_take_sample(struct calib *c, uintptr_t L, struct calib_sample *s)
{
  uintptr_t cf;
  s->L = L;
  s->g_ok = c->g != 0 && safe_read(c->g, s->g, sizeof(s->g));
  c->g_read = c->g_read || s->g_ok;
  s->cf_ok = 0;
  s->cf_addr = 0;
  if (c->have_thread && vm_ptr(1, L + c->lay.L_cframe, &cf) &&
      (cf &= ~(uintptr_t)3) != 0) {
    s->cf_addr = cf;
    s->cf_ok = safe_read(cf, s->cf, sizeof(s->cf));
  }
}

/* The allocator installed during the probes. While a window is open it
** notes each event: in the first pass copies of VM memory, in the second
** what the hook would compute with the layout being verified. */
static void *calib_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  struct calib *c = ud;
  int32_t st = 0;
  struct calib_event *e;
  int batch;
  /* Windows 1 and 3 look for one new block: a collector step run by the
  ** same allocation can free hundreds of objects in a busy VM, which must
  ** not take the places that block needs. */
  if (c->window == 0 || c->nevents >= CALIB_EVENTS ||
      (c->only_ptr != 0 && (uintptr_t)ptr != c->only_ptr) ||
      ((c->window == 1 || c->window == 3) && (ptr != NULL || nsize == 0)))
    return c->orig_alloc(c->orig_ud, ptr, osize, nsize);
  /* The VM stands still in its allocator: this event's reads are one
  ** batch, and global_State's window (read whole once: a block of the VM
  ** that lives as long as it) is read in place. */
  batch = safe_read_batch_begin();
  if (c->g_read)
    safe_read_batch_trust(batch, c->g, c->g + CALIB_G_WINDOW);
  if (c->have_globals && !vm_i32(1, c->g + c->lay.g_vmstate, &st))
    st = 0;
  if (c->only_state != 0 && st != c->only_state && st != c->also_state) {
    safe_read_batch_end(batch);
    return c->orig_alloc(c->orig_ud, ptr, osize, nsize);
  }
  e = &c->events[c->nevents++];
  memset(e, 0, sizeof(*e));
  e->ptr = (uintptr_t)ptr;
  e->nsize = nsize;
  e->vmstate = st;
  e->sample = e->exit_sample = -1;
  if (c->discover) {
    if (c->only_state != 0 && st == c->only_state) {
      if (c->nexit_samples < CALIB_EXIT_SAMPLES &&
          safe_read(c->g + c->lay.g_trace + CALIB_J_FROM,
                    c->exit_samples[c->nexit_samples], CALIB_J_WINDOW))
        e->exit_sample = c->nexit_samples++;
    } else if (c->only_state == 0 && c->nsamples < CALIB_SAMPLES) {
      e->sample = c->nsamples++;
      calib_take_sample(c, (uintptr_t)c->running, &c->samples[e->sample]);
    }
  } else {
    vm_ref(&c->lay, 1, c->g + c->lay.g_cur_L, &e->cur_L);
    if (c->only_state != 0 && st == c->only_state)
      vm_u32(1, c->g + c->lay.g_parent, &e->parent);
    else /* Classify as if this state were walkable. */
      vm_locate_frame(&c->lay, 1, c->g + c->lay.g_cur_L, e->ptr, NULL,
                      &e->site);
  }
  safe_read_batch_end(batch);
  e->nptr = (uintptr_t)c->orig_alloc(c->orig_ud, ptr, osize, nsize);
  return (void *)e->nptr;
}

static struct calib *calib_of(lua_State *L)
{
  return lua_touserdata(L, lua_upvalueindex(1));
}

/* ---- Checks run from C functions called by the driver chunk ----------- */

/* ---- Checks run from C functions called by the driver chunk ----------- */

/* The heap's size (g->gc.total) is what lua_gc counts. */
static int check_heap_size(struct calib *c, lua_State *L)
{
  uint64_t want = (uint64_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 +
                  (uint64_t)lua_gc(L, LUA_GCCOUNTB, 0);
  uint64_t total;
  if (!vm_heap_size(&c->lay, 1, c->g, &total) || total != want)
    return calib_fail(c, "heap size",
                      "g+%u does not hold the heap's size that lua_gc counts "
                      "(%llu bytes)",
                      c->lay.g_gctotal, (unsigned long long)want);
  return 1;
}

static int check_global_state(struct calib *c, lua_State *L)
{
  void *ud = NULL;
  lua_Alloc f = lua_getallocf(L, &ud);
  uintptr_t g, af, ad;
  if (!vm_ref(&c->lay, 1, (uintptr_t)L + c->lay.L_glref, &g) || g == 0)
    return calib_fail(c, "global state reference", "lua_State+%u is unreadable",
                      c->lay.L_glref);
  if (!vm_ptr(1, g + c->lay.g_allocf, &af) ||
      !vm_ptr(1, g + c->lay.g_allocd, &ad) || af != (uintptr_t)f ||
      ad != (uintptr_t)ud)
    return calib_fail(c, "allocator in global state",
                      "g+%u/g+%u do not hold what lua_getallocf returns",
                      c->lay.g_allocf, c->lay.g_allocd);
  if (c->g != 0 && c->g != g)
    return calib_fail(c, "global state reference",
                      "a coroutine points to another global state");
  c->g = g;
  return check_heap_size(c, L);
}

static int check_stack(struct calib *c, lua_State *L)
{
  const struct vm_layout *lay = &c->lay;
  uintptr_t l = (uintptr_t)L, base, top, top2, stack, maxstack;
  uint32_t size;
  int extra = lay->stack_extra;
  if (!vm_ptr(1, l + lay->L_base, &base) || !vm_ptr(1, l + lay->L_top, &top) ||
      top < base || (top - base) / TVALUE_SIZE != (uintptr_t)lua_gettop(L))
    return calib_fail(c, "stack base and top",
                      "top-base disagrees with lua_gettop");
  lua_pushnil(L);
  if (!vm_ptr(1, l + lay->L_top, &top2) || top2 != top + TVALUE_SIZE) {
    lua_pop(L, 1);
    return calib_fail(c, "stack base and top",
                      "pushing a value did not move top");
  }
  lua_pop(L, 1);
  if (!vm_ref(lay, 1, l + lay->L_stack, &stack) ||
      !vm_ref(lay, 1, l + lay->L_maxstack, &maxstack) ||
      !vm_u32(1, l + lay->L_stacksize, &size) ||
      maxstack != stack + TVALUE_SIZE * ((uintptr_t)size - 1 - extra) ||
      base <= stack || top > maxstack)
    return calib_fail(c, "stack bounds",
                      "stack, maxstack and stacksize are inconsistent");
  return 1;
}

static int check_current_thread(struct calib *c, lua_State *L)
{
  uintptr_t cur, cf, cfL;
  if (!vm_ref(&c->lay, 1, c->g + c->lay.g_cur_L, &cur) || cur != (uintptr_t)L)
    return calib_fail(c, "current thread (cur_L)",
                      "g+%u does not hold the running lua_State",
                      c->lay.g_cur_L);
  if (!vm_ptr(1, (uintptr_t)L + c->lay.L_cframe, &cf) ||
      (cf &= ~(uintptr_t)3) == 0 ||
      !vm_ref(&c->lay, 1, cf + c->lay.cf_L, &cfL) || cfL != (uintptr_t)L)
    return calib_fail(c, "C frame",
                      "the C frame's lua_State slot (+%u) is not L",
                      c->lay.cf_L);
  return 1;
}

/* Compares a prototype's chunk name and lines with lua_getinfo "S". */
static int check_proto_source(struct calib *c, uintptr_t pt, lua_Debug *ar)
{
  const char *name;
  uint32_t len;
  int32_t first, numline;
  char buf[256];
  size_t slen = strlen(ar->source);
  if (!vm_proto_source(&c->lay, 1, pt, &name, &len, &first) ||
      !vm_i32(1, pt + c->lay.pt_numline, &numline))
    return calib_fail(c, "prototype fields", "the chunk name is unreadable");
  if (len != slen || slen >= sizeof(buf) ||
      !safe_read((uintptr_t)name, buf, len) || memcmp(buf, ar->source, len))
    return calib_fail(c, "prototype fields",
                      "the chunk name differs from lua_getinfo's source");
  if (first != ar->linedefined || first + numline != ar->lastlinedefined)
    return calib_fail(
        c, "prototype fields",
        "first line %d and line count %d disagree with lua_getinfo", (int)first,
        (int)numline);
  return 1;
}

/* The probe's own frame, its caller's frame and the caller's line. */
static int check_frames(struct calib *c, lua_State *L, lua_CFunction self)
{
  const struct vm_layout *lay = &c->lay;
  struct vm_thread th;
  struct vm_site site;
  lua_Debug ar;
  uintptr_t frame, fn, cfn;
  const void *expect;
  intptr_t link;
  uint8_t ffid;

  if (!vm_current_thread(lay, 1, c->g + lay->g_cur_L, &th))
    return calib_fail(c, "frame function", "the current thread is unreadable");
  frame = th.base - TVALUE_SIZE;
  if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "f", &ar))
    return calib_fail(c, "frame function", "lua_getstack(0) failed");
  expect = lua_topointer(L, -1);
  lua_pop(L, 1);
  fn = vm_frame_func(lay, 1, frame);
  if (fn == 0 || fn != (uintptr_t)expect ||
      !vm_u8(1, fn + lay->fn_ffid, &ffid) || ffid != FFID_C ||
      !vm_ptr(1, fn + lay->fn_cfunc, &cfn) || cfn != (uintptr_t)self)
    return calib_fail(c, "frame function",
                      "the function below base is not the running C function");
  if (!vm_frame_link(lay, 1, frame, &link) || (link & 3) != 0)
    return calib_fail(c, "frame link",
                      "a C function called from Lua has no Lua link");
  memset(&site, 0, sizeof(site));
  if (!vm_locate_lua_caller(lay, 1, &th, frame, link, NULL, &site))
    return calib_fail(c, "caller frame", "the Lua caller cannot be located");
  if (!lua_getstack(L, 1, &ar) || !lua_getinfo(L, "fSl", &ar))
    return calib_fail(c, "caller frame", "lua_getstack(1) failed");
  expect = lua_topointer(L, -1);
  lua_pop(L, 1);
  if (vm_func_proto(lay, 1, (uintptr_t)expect) != site.addr)
    return calib_fail(c, "caller frame",
                      "the frame below is not the Lua caller");
  if ((int)site.line != ar.currentline)
    return calib_fail(c, "current line",
                      "computed line %u, lua_getinfo says %d", site.line,
                      ar.currentline);
  return check_proto_source(c, site.addr, &ar);
}

/* Built-ins are told apart from Lua and C functions by their id. */
static int check_function_ids(struct calib *c, uintptr_t lf, uintptr_t bf)
{
  uint8_t lua_id = 0, builtin_id = 0;
  if (!vm_is_gc(&c->lay, 1, lf, GCT_FUNC) ||
      !vm_is_gc(&c->lay, 1, bf, GCT_FUNC) ||
      !vm_u8(1, lf + c->lay.fn_ffid, &lua_id) ||
      !vm_u8(1, bf + c->lay.fn_ffid, &builtin_id) || lua_id != FFID_LUA ||
      builtin_id <= FFID_C)
    return calib_fail(c, "function ids", "Lua function id %d, string.rep id %d",
                      lua_id, builtin_id);
  return 1;
}

static const struct calib_event *find_event(struct calib *c, uintptr_t nptr,
                                            uintptr_t ptr)
{
  int i;
  for (i = 0; i < c->nevents; i++) {
    const struct calib_event *e = &c->events[i];
    if ((nptr != 0 && e->nptr == nptr && e->ptr == 0 && e->nsize > 0) ||
        (ptr != 0 && e->ptr == ptr && e->nsize == 0))
      return e;
  }
  return NULL;
}

/* The saved PC of the C frame, seen by the allocator during `{}`. */
static int check_lua_allocation(struct calib *c, lua_State *L, int line)
{
  const struct calib_event *e =
      find_event(c, (uintptr_t)lua_topointer(L, 2), 0);
  if (e == NULL)
    return calib_fail(c, "allocation in Lua code", "the table was not seen");
  if (e->cur_L != (uintptr_t)L)
    return calib_fail(c, "allocation in Lua code",
                      "cur_L is not the running thread");
  if (e->site.source != SOURCE_LUA || (int)e->site.line != line)
    return calib_fail(c, "saved PC in the C frame",
                      "the allocation was located at line %u, expected %d",
                      e->site.line, line);
  c->lay.st_lua = e->vmstate;
  return 1;
}

/* A built-in called from Lua is charged to the calling line. */
static int check_builtin_allocation(struct calib *c, lua_State *L, int line)
{
  const struct calib_event *e =
      find_event(c, (uintptr_t)lua_topointer(L, 2), 0);
  if (e == NULL)
    return calib_fail(c, "allocation in a built-in", "the string was not seen");
  if (e->site.source != SOURCE_LUA || (int)e->site.line != line)
    return calib_fail(c, "allocation in a built-in",
                      "string.rep was located at line %u, expected %d",
                      e->site.line, line);
  return 1;
}

static int check_gc_state(struct calib *c, uintptr_t garbage)
{
  const struct calib_event *e = find_event(c, 0, garbage);
  if (e == NULL)
    return calib_fail(c, "collector state", "the garbage table was not freed");
  c->lay.st_gc = e->vmstate;
  return 1;
}

/* ---- C functions the driver chunk calls --------------------------------- */

/* probe(): learns (first pass) or checks (second pass) the layout from
** inside a C function called from Lua. */
static int calib_probe(lua_State *L)
{
  struct calib *c = calib_of(L);
  if (c->failed)
    return 0;
  if (c->discover) {
    if (!c->have_thread && discover_thread(c, L))
      c->have_thread = 1;
    if (c->have_thread)
      discover_probe(c, L);
    return 0;
  }
  if (check_global_state(c, L) && check_stack(c, L) &&
      check_current_thread(c, L) && check_frames(c, L, calib_probe) &&
      !vm_i32(1, c->g + c->lay.g_vmstate, &c->lay.st_c))
    calib_fail(c, "VM state", "g+%u is unreadable", c->lay.g_vmstate);
  return 0;
}

/* line(): the current line of the calling Lua function. */
static int calib_line(lua_State *L)
{
  lua_Debug ar;
  memset(&ar, 0, sizeof(ar));
  if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "l", &ar))
    lua_pushinteger(L, ar.currentline);
  else
    lua_pushinteger(L, -1);
  return 1;
}

/* in_thread(f): runs f in a new coroutine, through the C API only. */
static int calib_in_thread(lua_State *L)
{
  struct calib *c = calib_of(L);
  lua_State *co = lua_newthread(L), *was = c->running;
  int status;
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  c->running = co;
  status = lua_resume(co, 0);
  c->running = was;
  if (status != 0) {
    lua_xmove(co, L, 1);
    return lua_error(L);
  }
  lua_pop(L, 1);
  return 0;
}

/* collect(): a full collection, run by the collector's own state. */
static int calib_collect(lua_State *L)
{
  lua_gc(L, LUA_GCCOLLECT, 0);
  return 0;
}

/* The sample of the event that allocated nptr (or freed ptr), or -1. */
static int event_sample(struct calib *c, uintptr_t nptr, uintptr_t ptr)
{
  const struct calib_event *e = find_event(c, nptr, ptr);
  return e != NULL ? e->sample : -1;
}

/* mark(n, ...): opens and closes the probe windows of the driver chunk. */
static int calib_mark(lua_State *L)
{
  struct calib *c = calib_of(L);
  int step = (int)lua_tointeger(L, 1);
  if (c->failed)
    return 0;
  switch (step) {
  case 1: /* Window for an allocation in Lua code. */
  case 3: /* Window for a built-in's allocation. */
    c->nevents = 0;
    c->window = step;
    break;
  case 2:
    c->window = 0;
    if (c->discover)
      discover_place(c, L, (int)lua_tointeger(L, 3),
                     event_sample(c, (uintptr_t)lua_topointer(L, 2), 0));
    else
      check_lua_allocation(c, L, (int)lua_tointeger(L, 3));
    break;
  case 4:
    c->window = 0;
    if (!c->discover)
      check_builtin_allocation(c, L, (int)lua_tointeger(L, 3));
    break;
  case 5: /* Window for a full collection freeing a known table. */
    c->nevents = 0;
    c->only_ptr = (uintptr_t)lua_topointer(L, 2);
    c->window = step;
    break;
  case 6:
    c->window = 0;
    if (c->discover)
      c->gc_sample = event_sample(c, 0, c->only_ptr);
    else
      check_gc_state(c, c->only_ptr);
    c->only_ptr = 0;
    break;
  }
  return 0;
}

/* ---- The driver ------------------------------------------------------- */

/*
** The probes. Line numbers come from line(), called on the same line as
** the allocation they describe, so nothing here is hard-coded. The two
** places that allocate tables are different functions on different lines,
** far into the chunk (it starts with blank lines), so that the values a
** search looks for are unlike the small numbers around them. The JIT
** compiler is off for the chunk (hot counters are shared, so fresh code can
** start a trace at once, and a trace stitching around a probe would change
** its frames).
*/
#define DRIVER_PADDING 200
static const char driver[] =
    "local mark, probe, line, in_thread, collect, rep, unique = ...\n"
    "local function call_probe() probe() return true end\n"
    "call_probe()\n"
    "local function in_lua()\n"
    "  mark(1)\n"
    "  local t = {} local l = line()\n"
    "  mark(2, t, l)\n"
    "end\n"
    "in_lua()\n"
    "local function in_lua_again(a, b)\n"
    "  mark(1)\n"
    "  local x = a + b\n"
    "  local t = {x} local l = line()\n"
    "  mark(2, t, l)\n"
    "end\n"
    "in_lua_again(1, 2)\n"
    "local function in_builtin(s)\n"
    "  mark(3)\n"
    "  local r = rep(s, 3) local l = line()\n"
    "  mark(4, r, l)\n"
    "end\n"
    "in_builtin(unique)\n"
    "local garbage = {}\n"
    "mark(5, garbage)\n"
    "garbage = nil\n"
    "collect()\n"
    "mark(6)\n"
    "in_thread(call_probe)\n"
    "call_probe()\n"
    "in_thread(call_probe)\n";

/* A loop that compiles to a trace; returns the loop's line (not from a
** tail call, whose caller would be gone). */
static const char hot_loop[] = "local line = ... local x = 0 "
                               "for i = 1, 500 do x = x + i end "
                               "local l = line() return l";

/* A loop whose trace sinks its tables and exits every 40 iterations, which
** restores the sunk table; returns the loop's line. */
static const char sinking_loop[] =
    "local line = ... local keep = {} "
    "for i = 1, 400 do local t = {i, i} "
    "if i % 40 == 0 then keep[#keep + 1] = t end end "
    "local l = line() return l";

/* luaJIT_setmode, if the host exports it (the module links no VM). */
typedef int (*setmode_fn)(lua_State *L, int idx, int mode);

static void push_probe(lua_State *L, struct calib *c, lua_CFunction f)
{
  lua_pushlightuserdata(L, c);
  lua_pushcclosure(L, f, 1);
}

/* string.rep from the registry's loaded libraries (never a global, which a
** host may replace); nil if it is not there. */
static void push_builtin(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "string");
    lua_remove(L, -2);
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "rep");
      lua_remove(L, -2);
    }
  }
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

/* Runs the driver chunk under the calibration allocator, which is always
** removed afterwards. Returns 1 if it ran to its end. */
static int run_driver(lua_State *L, struct calib *c)
{
  /* On the stack: VMs in other threads may be calibrating too. */
  char chunk[DRIVER_PADDING + sizeof(driver)];
  int top = lua_gettop(L), status;
  void *set = dlsym(RTLD_DEFAULT, "luaJIT_setmode");
  memset(chunk, '\n', DRIVER_PADDING);
  memcpy(chunk + DRIVER_PADDING, driver, sizeof(driver));
  if (luaL_loadbuffer(L, chunk, sizeof(chunk) - 1, "=memprof.calibration")) {
    lua_settop(L, top);
    return calib_fail(c, "calibration chunk", "it does not compile");
  }
  if (set != NULL)
    ((setmode_fn)set)(L, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
  push_probe(L, c, calib_mark);
  push_probe(L, c, calib_probe);
  lua_pushcfunction(L, calib_line);
  push_probe(L, c, calib_in_thread);
  lua_pushcfunction(L, calib_collect);
  push_builtin(L);
  if (!check_function_ids(c, (uintptr_t)lua_topointer(L, top + 1),
                          (uintptr_t)lua_topointer(L, -1))) {
    lua_settop(L, top);
    return 0;
  }
  lua_pushfstring(L, "memprof %p %d", (void *)c, c->discover);
  c->running = L;
  c->orig_alloc = lua_getallocf(L, &c->orig_ud);
  lua_setallocf(L, calib_alloc, c);
  status = lua_pcall(L, 7, 0, 0);
  lua_setallocf(L, c->orig_alloc, c->orig_ud);
  c->window = 0;
  if (status != 0) {
    calib_fail(c, "calibration chunk", "%s",
               lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
    lua_settop(L, top);
    return 0;
  }
  lua_settop(L, top);
  return !c->failed;
}

/* Loads and runs one of the loops (left on the stack, so that its
** prototype lives); its prototype and the loop's line. */
static int run_loop(lua_State *L, struct calib *c, const char *code,
                    const char *name, uintptr_t *proto, int *line)
{
  if (luaL_loadbuffer(L, code, strlen(code), name) != 0) {
    lua_pop(L, 1);
    lua_pushnil(L);
    return 0;
  }
  lua_pushvalue(L, -1);
  lua_pushcfunction(L, calib_line);
  if (lua_pcall(L, 1, 1, 0) != 0) {
    lua_pop(L, 1);
    return 0;
  }
  *line = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  *proto = vm_func_proto(&c->lay, 1, (uintptr_t)lua_topointer(L, -1));
  return *proto != 0;
}

uint32_t calib_trace_number(struct calib *c, const struct vm_layout *lay,
                            uintptr_t want, int line)
{
  uint32_t size, n, found = 0;
  int batch;
  if (want == 0 || !vm_u32(1, c->g + lay->g_sizetrace, &size) || size > 65536)
    return 0;
  /* A scan in C alone (the trace array can hold 65,536): one batch. */
  batch = safe_read_batch_begin();
  for (n = 1; n < size && found == 0; n++) {
    uintptr_t pt = 0;
    uint32_t tline = 0;
    if (vm_trace_start(lay, 1, c->g, n, &pt, &tline) && pt == want &&
        (int)tline == line)
      found = n;
  }
  safe_read_batch_end(batch);
  return found;
}

/* Traces: compiles hot loops (when the JIT compiler is on) and finds
** (first pass) or checks (second pass) the trace array. A busy VM may
** abort a trace or flush all of them, so each loop is tried three times. */
static void calibrate_traces(lua_State *L, struct calib *c)
{
  int top = lua_gettop(L), attempt, i;
  for (attempt = 0; attempt < 3; attempt++) {
    lua_settop(L, top);
    for (i = 0; i < 2; i++)
      run_loop(L, c, hot_loop,
               i ? "=memprof.calibration.trace2" : "=memprof.calibration.trace",
               &c->trace_protos[i], &c->trace_lines[i]);
    if (c->discover ? discover_traces(c)
                    : calib_trace_number(c, &c->lay, c->trace_protos[0],
                                         c->trace_lines[0]) != 0)
      break;
  }
  lua_settop(L, top);
  if (attempt == 3)
    c->lay.trace_ok = 0;
}

/* The stored vmstate of trace exits (and of recording, one below), by the
** numbering of the VM states; 0 if the numbering is unknown. */
static int32_t exit_state(const struct calib *c)
{
  if (c->lay.st_lua == -1 && c->lay.st_c == -2 && c->lay.st_gc == -3)
    return -4;
  if (c->lay.st_lua == -2 && c->lay.st_c == -4 && c->lay.st_gc == -5)
    return -6;
  return 0;
}

/* Whether the events of the exit window show J->parent naming the loop's
** trace, and code run while recording located at the loop's line. */
static int check_exits(struct calib *c, uintptr_t want, int line)
{
  uint32_t root = calib_trace_number(c, &c->lay, want, line), size;
  int i, matched = 0, walked = 0;
  if (root == 0 || !vm_u32(1, c->g + c->lay.g_sizetrace, &size))
    return 0;
  for (i = 0; i < c->nevents; i++) {
    const struct calib_event *e = &c->events[i];
    if (e->vmstate == c->also_state) {
      /* The recorded iteration runs in the interpreter under RECORD. */
      walked += e->site.source == SOURCE_LUA && e->site.addr == want &&
                (int)e->site.line == line;
      continue;
    }
    if (e->parent == 0 || e->parent >= size)
      return 0; /* Not a trace number: the offset is wrong. */
    matched += e->parent == root;
  }
  c->lay.exit_ok = c->lay.exit_ok || matched > 0;
  c->record_walks = c->record_walks || walked > 0;
  return c->lay.exit_ok && c->record_walks;
}

/* Trace exits: a loop whose trace restores sunk tables when it exits.
** Sinking may be off: then exits stay internal. */
static void calibrate_exits(lua_State *L, struct calib *c)
{
  int top = lua_gettop(L), attempt, line = 0, done = 0;
  uintptr_t want = 0;
  c->lay.exit_ok = 0;
  if (!c->lay.trace_ok || exit_state(c) == 0)
    return;
  for (attempt = 0; attempt < 3 && !done; attempt++) {
    c->nevents = c->nexit_samples = 0;
    c->only_state = exit_state(c);
    c->also_state = c->only_state - 1; /* RECORD */
    c->orig_alloc = lua_getallocf(L, &c->orig_ud);
    lua_setallocf(L, calib_alloc, c);
    c->window = 7;
    run_loop(L, c, sinking_loop, "=memprof.calibration.exit", &want, &line);
    c->window = 0;
    lua_setallocf(L, c->orig_alloc, c->orig_ud);
    if (c->discover) {
      discover_parent(c, calib_trace_number(c, &c->lay, want, line));
      done = c->lay.exit_ok;
    } else {
      done = check_exits(c, want, line);
    }
    lua_settop(L, top);
  }
  c->only_state = c->also_state = 0;
}

/*
** MEMPROF_LAYOUT_OVERRIDE="field=offset,...": sets offsets instead of
** discovering them, to try a build where discovery fails. The checks still
** run, so a wrong value is refused, never used.
*/
/* clang-format off */
#define FIELD16(f, role) {#f, offsetof(struct vm_layout, f), 1, role}
#define FIELD8(f, role) {#f, offsetof(struct vm_layout, f), 0, role}
/* clang-format on */
const struct vm_layout_field vm_layout_fields[] = {
    FIELD16(L_glref, FIELD_OBJECT),      FIELD16(L_base, FIELD_OBJECT),
    FIELD16(L_top, FIELD_OBJECT),        FIELD16(L_maxstack, FIELD_OBJECT),
    FIELD16(L_stack, FIELD_OBJECT),      FIELD16(L_cframe, FIELD_OBJECT),
    FIELD16(L_stacksize, FIELD_OBJECT),  FIELD16(g_allocf, FIELD_RUNTIME),
    FIELD16(g_allocd, FIELD_RUNTIME),    FIELD16(g_vmstate, FIELD_RUNTIME),
    FIELD16(g_cur_L, FIELD_RUNTIME),     FIELD16(g_trace, FIELD_RUNTIME),
    FIELD16(g_sizetrace, FIELD_RUNTIME), FIELD16(g_parent, FIELD_RUNTIME),
    FIELD16(g_gctotal, FIELD_RUNTIME),   FIELD8(gct, FIELD_OBJECT),
    FIELD8(fn_ffid, FIELD_OBJECT),       FIELD8(fn_pc, FIELD_OBJECT),
    FIELD8(fn_cfunc, FIELD_OBJECT),      FIELD8(pt_size, FIELD_OBJECT),
    FIELD8(pt_sizebc, FIELD_OBJECT),     FIELD8(pt_chunkname, FIELD_OBJECT),
    FIELD8(pt_firstline, FIELD_OBJECT),  FIELD8(pt_numline, FIELD_OBJECT),
    FIELD8(pt_lineinfo, FIELD_OBJECT),   FIELD8(str_size, FIELD_RUNTIME),
    FIELD8(str_len, FIELD_RUNTIME),      FIELD8(cf_pc, FIELD_OBJECT),
    FIELD8(cf_L, FIELD_OBJECT),          FIELD8(tr_startpt, FIELD_RUNTIME),
    FIELD8(tr_startpc, FIELD_RUNTIME),   FIELD8(tr_traceno, FIELD_RUNTIME),
    FIELD8(stack_extra, FIELD_CONST),    {NULL, 0, 0, 0}};

unsigned vm_layout_get(const struct vm_layout *lay,
                       const struct vm_layout_field *f)
{
  const char *at = (const char *)lay + f->offset;
  return f->wide ? *(const uint16_t *)at : *(const uint8_t *)at;
}

const char *vm_state_what(const struct vm_layout *lay, int32_t state)
{
  return state >= 0             ? "compiled code"
         : state == lay->st_lua ? "the interpreter"
         : state == lay->st_gc  ? "the collector"
         : state == lay->st_c   ? "C code"
                                : "VM-internal work";
}

static int apply_overrides(struct calib *c, char *err, size_t errlen)
{
  const char *spec = getenv("MEMPROF_LAYOUT_OVERRIDE");
  struct vm_layout *lay = &c->lay;
  while (spec != NULL && *spec != '\0') {
    const struct vm_layout_field *f;
    size_t n = strcspn(spec, "=");
    char *end;
    unsigned long v;
    for (f = vm_layout_fields; f->name != NULL; f++)
      if (strlen(f->name) == n && strncmp(f->name, spec, n) == 0)
        break;
    if (f->name == NULL || spec[n] != '=') {
      snprintf(err, errlen,
               "check 'layout override' failed: unknown field "
               "in MEMPROF_LAYOUT_OVERRIDE at '%s'",
               spec);
      return 0;
    }
    v = strtoul(spec + n + 1, &end, 0);
    if (end == spec + n + 1 || v > (f->wide ? 65535ul : 255ul) ||
        (*end != ',' && *end != '\0')) {
      snprintf(err, errlen,
               "check 'layout override' failed: bad offset for "
               "%s in MEMPROF_LAYOUT_OVERRIDE",
               f->name);
      return 0;
    }
    if (f->wide)
      *(uint16_t *)((char *)lay + f->offset) = (uint16_t)v;
    else
      *((uint8_t *)lay + f->offset) = (uint8_t)v;
    c->given |= 1ULL << (f - vm_layout_fields);
    spec = *end == ',' ? end + 1 : end;
  }
  return 1;
}

/* Whether every offset of a with the given role equals b's. */
static int offsets_equal(const struct vm_layout *a, const struct vm_layout *b,
                         int role)
{
  const struct vm_layout_field *f;
  for (f = vm_layout_fields; f->name != NULL; f++)
    if (f->role == role && vm_layout_get(a, f) != vm_layout_get(b, f))
      return 0;
  return 1;
}

/* The mode table the layout's object offsets equal (then the hook can use
** them as constants), and the known build all its offsets equal. */
static void match_known(struct vm_layout *lay)
{
  size_t i;
  lay->candidate = lay->gc64 ? VM_CANDIDATE_GC64 : VM_CANDIDATE_NONGC64;
  lay->exact =
      offsets_equal(lay, &vm_candidates[lay->candidate].layout, FIELD_OBJECT);
  lay->build = NULL;
  for (i = 0; i < VM_KNOWN_BUILDS && lay->exact; i++) {
    const struct vm_known_build *k = &vm_known_builds[i];
#if defined(__aarch64__)
    if (!k->arm64)
      continue;
#else
    if (k->arm64)
      continue;
#endif
    if (k->candidate == lay->candidate && k->g_allocf == lay->g_allocf &&
        k->g_allocf + 8 == lay->g_allocd && k->g_vmstate == lay->g_vmstate &&
        k->g_cur_L == lay->g_cur_L && k->str_size == lay->str_size &&
        k->str_len == lay->str_len && k->stack_extra == lay->stack_extra &&
        (!lay->trace_ok ||
         (k->g_trace == lay->g_trace && k->g_trace + 12 == lay->g_sizetrace)) &&
        (!lay->exit_ok || k->g_parent == lay->g_parent)) {
      lay->build = k->name;
      return;
    }
  }
}

/* The kinds of internal events by state, in both numberings: the
** interpreter's states, then GC, EXIT and the compiler's three (RECORD,
** OPT, ASM), from slot `gc` on. */
static void name_internal_kinds(struct vm_layout *lay, int gc)
{
  int i;
  memset(lay->internal_kind, INTERNAL_UNKNOWN, sizeof(lay->internal_kind));
  for (i = 0; i < gc; i++)
    lay->internal_kind[i] = INTERNAL_INTERPRETER;
  lay->internal_kind[gc] = INTERNAL_GC;
  lay->internal_kind[gc + 1] = INTERNAL_EXIT;
  for (i = gc + 2; i <= gc + 4; i++)
    lay->internal_kind[i] = INTERNAL_JIT;
}

/* Names the vmstate numbering the observed values belong to. */
static int classify_states(struct calib *c)
{
  struct vm_layout *lay = &c->lay;
  int i;
  memset(lay->state_class, STATE_INTERNAL, sizeof(lay->state_class));
  name_internal_kinds(lay, -1 - lay->st_gc);
  if (lay->st_lua == -1 && lay->st_c == -2 && lay->st_gc == -3) {
    /* INTERP, C, GC, EXIT, RECORD, OPT, ASM */
    lay->state_numbering = "INTERP/C/GC/EXIT/RECORD/OPT/ASM";
    lay->state_class[0] = lay->state_class[1] = STATE_WALK;
    lay->state_class[2] = STATE_GC;
    lay->state_class[3] = STATE_EXIT;
    for (i = 4; i <= 6; i++)
      lay->state_class[i] = STATE_JIT;
    if ((lay->record_ok = c->record_walks))
      lay->state_class[4] = STATE_WALK;
    return 1;
  }
  if (lay->st_lua == -2 && lay->st_c == -4 && lay->st_gc == -5) {
    /* INTERP, LFUNC, FFUNC, CFUNC, GC, EXIT, RECORD, OPT, ASM */
    lay->state_numbering = "INTERP/LFUNC/FFUNC/CFUNC/GC/EXIT/RECORD/OPT/ASM";
    for (i = 1; i <= 3; i++)
      lay->state_class[i] = STATE_WALK;
    lay->state_class[4] = STATE_GC;
    lay->state_class[5] = STATE_EXIT;
    for (i = 6; i <= 8; i++)
      lay->state_class[i] = STATE_JIT;
    if ((lay->record_ok = c->record_walks))
      lay->state_class[6] = STATE_WALK;
    return 1;
  }
  return calib_fail(c, "VM state numbering",
                    "Lua code runs under %d, C code under %d, the collector "
                    "under %d: no known numbering matches",
                    (int)lay->st_lua, (int)lay->st_c, (int)lay->st_gc);
}

/* First pass: finds every offset. */
static int discover(lua_State *L, struct calib *c)
{
  c->discover = 1;
  c->gc_sample = -1;
  if (!discover_mode(c, L) || !discover_strings(c, L) ||
      !discover_cfunc(c, L, calib_probe) || !run_driver(L, c) ||
      !discover_globals(c))
    return 0;
  c->have_globals = 1;
  /* The numbering decides which state trace exits run under. */
  c->lay.st_lua = (int32_t)0;
  {
    const struct calib_sample *s = &c->samples[c->places[0].sample];
    int32_t v;
    memcpy(&v, s->g + c->lay.g_vmstate, 4);
    c->lay.st_lua = v;
    memcpy(&v, c->probes[0].g + c->lay.g_vmstate, 4);
    c->lay.st_c = v;
    memcpy(&v, c->samples[c->gc_sample].g + c->lay.g_vmstate, 4);
    c->lay.st_gc = v;
  }
  calibrate_traces(L, c); /* Searches take given fields as they are. */
  calibrate_exits(L, c);
  return 1;
}

/* Second pass: checks every offset found. */
static int verify(lua_State *L, struct calib *c)
{
  int trace_ok = c->lay.trace_ok;
  c->discover = 0;
  c->nevents = 0;
  c->lay.st_lua = c->lay.st_c = c->lay.st_gc = 0;
  if (!run_driver(L, c) || !classify_states(c))
    return 0;
  c->lay.trace_ok = trace_ok;
  if (trace_ok) {
    calibrate_traces(L, c);
    if (!c->lay.trace_ok)
      c->trace_refused = c->lay.g_trace;
  }
  calibrate_exits(L, c);
  return classify_states(c);
}

/* One calibration: discovery, then verification; c is zeroed (calloc's
** pages are zero already: only a second try clears what the first
** wrote, so that the first touches only the pages it uses). */
static int calibrate_once(lua_State *L, struct calib *c, char *err,
                          size_t errlen, int again, uint16_t trace_from)
{
  if (again)
    memset(c, 0, sizeof(*c));
  c->trace_from = trace_from;
  c->L = L;
  c->err = err;
  c->errlen = errlen;
  err[0] = '\0';
  return apply_overrides(c, err, errlen) && discover(L, c) && verify(L, c);
}

/* Checks a layout learned in another VM of this build against L's VM, with
** reads that allocate nothing in it (pushing a nil may grow nothing: the
** API guarantees LUA_MINSTACK free slots to a C function). */
int vm_layout_check_vm(lua_State *L, const struct vm_layout *lay, char *err,
                       size_t errlen)
{
  struct calib *c = malloc(sizeof(*c));
  uintptr_t g;
  int32_t state;
  int ok;
  if (c == NULL) {
    snprintf(err, errlen, "check 'memory' failed: out of memory");
    return 0;
  }
  memset(c, 0, CALIB_ARRAYS); /* (The checks use no array.) */
  c->lay = *lay;
  c->L = L;
  c->err = err;
  c->errlen = errlen;
  err[0] = '\0';
  ok = check_global_state(c, L) && check_stack(c, L) &&
       check_current_thread(c, L);
  g = c->g;
  if (ok && (!vm_u32(1, g + lay->g_vmstate, (uint32_t *)&state) ||
             state != lay->st_c))
    ok = calib_fail(c, "VM state",
                    "g+%u does not read the state of C code (%d) in a C "
                    "function of this VM",
                    lay->g_vmstate, (int)lay->st_c);
  free(c);
  return ok;
}

/* A J->trace that the first pass found and the second refused is not
** J->trace (a slot that only looked like it at that moment): the
** calibration runs again with the search from the next slot, and keeps
** the layout it had if that finds no verified one. In a separate VM only:
** each run leaves its garbage in the VM. */
static void calibrate_past_refused(lua_State *L, struct calib *c, char *err,
                                   size_t errlen)
{
  struct vm_layout had = c->lay;
  int tries, ok = 1;
  for (tries = 0; tries < 4 && ok && !c->lay.trace_ok &&
                  c->trace_refused != 0 && c->given == 0;
       tries++)
    ok = calibrate_once(L, c, err, errlen, 1, (uint16_t)(c->trace_refused + 8));
  if (!ok || !c->lay.trace_ok) {
    c->lay = had;
    err[0] = '\0';
  }
}

int vm_layout_calibrate(lua_State *L, struct vm_layout *out, char *err,
                        size_t errlen, int apart)
{
  struct calib *c;
  int ok;
#if !defined(__x86_64__) && !defined(__aarch64__)
  snprintf(err, errlen,
           "check 'architecture' failed: only x86_64 and arm64 are known");
  return 0;
#endif
  if ((c = calloc(1, sizeof(*c))) == NULL) {
    snprintf(err, errlen, "check 'memory' failed: out of memory");
    return 0;
  }
  /* A busy VM can disturb one run of the probes (a collector step or a
  ** trace in the middle of a window), so a failed calibration is tried
  ** once more; what is accepted is always what the checks verified. */
  ok = calibrate_once(L, c, err, errlen, 0, 0);
  if (!ok && c->given == 0)
    ok = calibrate_once(L, c, err, errlen, 1, 0);
  if (ok && apart)
    calibrate_past_refused(L, c, err, errlen);
  if (ok) {
    (void)apart; /* (The trace lines' calibration comes apart.) */
    vm_layout_trace_lines_unknown(&c->lay);
    match_known(&c->lay);
#if defined(__aarch64__)
    c->lay.family = c->lay.gc64 ? "LuaJIT 2.1 GC64 arm64" : "LuaJIT 2.1 arm64";
#else
    c->lay.family =
        c->lay.gc64 ? "LuaJIT 2.1 GC64 x86_64" : "LuaJIT 2.1 non-GC64 x86_64";
#endif
    *out = c->lay;
  }
  free(c);
  return ok;
}

void vm_layout_trace_lines_unknown(struct vm_layout *lay)
{
  memset(&lay->tl, 0, sizeof(lay->tl));
  snprintf(lay->tl.why, sizeof(lay->tl.why),
           "compiled-code attribution is not calibrated yet");
  snprintf(lay->tl.prof_why, sizeof(lay->tl.prof_why),
           "compiled-code attribution is not calibrated yet");
}

void vm_layout_calibrate_trace_lines(lua_State *L, struct vm_layout *lay,
                                     int apart)
{
  struct calib *c = malloc(sizeof(*c));
  char err[256];
  if (c == NULL) {
    vm_layout_trace_lines_unknown(lay);
    snprintf(lay->tl.why, sizeof(lay->tl.why), "out of memory");
    return;
  }
  memset(c, 0, CALIB_ARRAYS); /* (Its searches use no array of it.) */
  c->lay = *lay;
  c->L = L;
  c->err = err;
  c->errlen = sizeof(err);
  err[0] = '\0';
  /* g of this VM, as a check of a learned layout finds it. */
  if (check_global_state(c, L))
    calibrate_trace_lines(L, c, apart);
  else {
    vm_layout_trace_lines_unknown(&c->lay);
    snprintf(c->lay.tl.why, sizeof(c->lay.tl.why), "%.150s", err);
  }
  lay->tl = c->lay.tl;
  free(c);
}
