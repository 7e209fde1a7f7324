/*
** Layout knowledge and its verification.
**
** Offsets come from per-family candidate tables (x86_64). A candidate is
** accepted only if every check below agrees with what the public API says
** about the same VM; the first failing check is reported by name. Reads
** during calibration go through safe_read(), so a wrong candidate is
** rejected, never dereferenced blindly.
*/
#define _GNU_SOURCE
#include "vm_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lauxlib.h"
#include "vm_candidates.h"
#include "vm_inspect.h"

/* ---- Fault-safe reads ------------------------------------------------- */

/* Reads through a pipe: write(2) reports EFAULT instead of faulting. */
static int pipe_read(uintptr_t addr, void *dst, size_t n)
{
  int fds[2], ok = 0;
  if (pipe2(fds, O_CLOEXEC) != 0)
    return 0;
  if (write(fds[1], (const void *)addr, n) == (ssize_t)n &&
      read(fds[0], dst, n) == (ssize_t)n)
    ok = 1;
  close(fds[0]);
  close(fds[1]);
  return ok;
}

int safe_read(uintptr_t addr, void *dst, size_t n)
{
  struct iovec local = {dst, n}, remote = {(void *)addr, n};
  int saved = errno, ok;
  ssize_t got;
  if (addr < 4096)
    return 0;
  got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (got == (ssize_t)n)
    ok = 1;
  else if (got < 0 && (errno == ENOSYS || errno == EPERM))
    ok = pipe_read(addr, dst, n);
  else
    ok = 0;
  errno = saved;
  return ok;
}

/* J->sizetrace follows J->trace (a pointer) and J->freetrace (u32). */
#define SIZETRACE_AFTER_TRACE 12

/* ---- Calibration context --------------------------------------------- */

/* What the temporary allocator saw while a probe window was open. */
#define CALIB_EVENTS 256
struct calib_event {
  uintptr_t ptr, nptr;
  size_t nsize;
  int32_t vmstate;
  uint32_t parent; /* J->parent at the candidate offset (exit window). */
  uintptr_t cur_L;
  struct vm_site site;
};

struct calib {
  lua_State *L;
  uintptr_t g;
  struct vm_layout lay;
  const struct vm_candidate *cand;
  lua_Alloc orig_alloc;
  void *orig_ud;
  int window;         /* Which probe window is open (0: none). */
  uintptr_t only_ptr; /* If set, the window records only frees of this. */
  int32_t only_state; /* If set, the window records only this vmstate. */
  int32_t also_state; /* ... and also this one (RECORD). */
  int record_walks;   /* Code run while recording was located right. */
  int nevents;
  struct calib_event events[CALIB_EVENTS];
  char *err;
  size_t errlen;
  char spare_err[256]; /* Failures of later candidates (not reported). */
  int failed;
};

static int fail(struct calib *c, const char *check, const char *fmt, ...)
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

/* The allocator installed during the probe windows: it records what the
** hook would compute, using the candidate layout and fault-safe reads. */
static void *calib_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  struct calib *c = ud;
  int32_t st = 0;
  if (c->window != 0 && c->nevents < CALIB_EVENTS &&
      vm_i32(1, c->g + c->lay.g_vmstate, &st) &&
      (c->only_ptr == 0 || (uintptr_t)ptr == c->only_ptr) &&
      (c->only_state == 0 || st == c->only_state || st == c->also_state)) {
    struct calib_event *e = &c->events[c->nevents++];
    memset(e, 0, sizeof(*e));
    e->ptr = (uintptr_t)ptr;
    e->nsize = nsize;
    e->vmstate = st;
    vm_ref(&c->lay, 1, c->g + c->lay.g_cur_L, &e->cur_L);
    if (c->only_state != 0 && st == c->only_state)
      vm_u32(1, c->g + c->lay.g_parent, &e->parent);
    else /* Classify as if this state were walkable. */
      vm_locate_frame(&c->lay, 1, c->g, e->ptr, NULL, &e->site);
    e->nptr = (uintptr_t)c->orig_alloc(c->orig_ud, ptr, osize, nsize);
    return (void *)e->nptr;
  }
  return c->orig_alloc(c->orig_ud, ptr, osize, nsize);
}

static struct calib *calib_of(lua_State *L)
{
  return lua_touserdata(L, lua_upvalueindex(1));
}

/* ---- Checks run from C functions called by the driver chunk ----------- */

/* Mode: the bytecode dump flags say whether frames take two slots. */
static int check_mode(struct calib *c, int dump_flags)
{
  int fr2 = (dump_flags & 0x08) != 0;
  if (fr2 != c->lay.fr2)
    return fail(c, "bytecode dump flags",
                "the VM uses %s frames, the candidate %s ones",
                fr2 ? "two-slot" : "one-slot",
                c->lay.fr2 ? "two-slot" : "one-slot");
  return 1;
}

static int check_global_state(struct calib *c, lua_State *L)
{
  void *ud = NULL;
  lua_Alloc f = lua_getallocf(L, &ud);
  uintptr_t g, af, ad;
  if (!vm_ref(&c->lay, 1, (uintptr_t)L + c->lay.L_glref, &g) || g == 0)
    return fail(c, "global state reference", "lua_State+%u is unreadable",
                c->lay.L_glref);
  if (!vm_ptr(1, g + c->lay.g_allocf, &af) ||
      !vm_ptr(1, g + c->lay.g_allocd, &ad) || af != (uintptr_t)f ||
      ad != (uintptr_t)ud)
    return fail(c, "allocator in global state",
                "g+%u/g+%u do not hold what lua_getallocf returns",
                c->lay.g_allocf, c->lay.g_allocd);
  if (c->g != 0 && c->g != g)
    return fail(c, "global state reference",
                "a coroutine points to another global state");
  c->g = g;
  return 1;
}

static int check_stack(struct calib *c, lua_State *L)
{
  const struct vm_layout *lay = &c->lay;
  uintptr_t l = (uintptr_t)L, base, top, top2, stack, maxstack;
  uint32_t size;
  int extra = 5 + 2 * lay->fr2;
  if (!vm_ptr(1, l + lay->L_base, &base) || !vm_ptr(1, l + lay->L_top, &top) ||
      top < base || (top - base) / TVALUE_SIZE != (uintptr_t)lua_gettop(L))
    return fail(c, "stack base and top", "top-base disagrees with lua_gettop");
  lua_pushnil(L);
  if (!vm_ptr(1, l + lay->L_top, &top2) || top2 != top + TVALUE_SIZE) {
    lua_pop(L, 1);
    return fail(c, "stack base and top", "pushing a value did not move top");
  }
  lua_pop(L, 1);
  if (!vm_ref(lay, 1, l + lay->L_stack, &stack) ||
      !vm_ref(lay, 1, l + lay->L_maxstack, &maxstack) ||
      !vm_u32(1, l + lay->L_stacksize, &size) ||
      maxstack != stack + TVALUE_SIZE * ((uintptr_t)size - 1 - extra) ||
      base <= stack || top > maxstack)
    return fail(c, "stack bounds",
                "stack, maxstack and stacksize are inconsistent");
  return 1;
}

static int check_current_thread(struct calib *c, lua_State *L)
{
  uintptr_t cur, cf, cfL;
  if (!vm_ref(&c->lay, 1, c->g + c->lay.g_cur_L, &cur) || cur != (uintptr_t)L)
    return fail(c, "current thread (cur_L)",
                "g+%u does not hold the running lua_State", c->lay.g_cur_L);
  if (!vm_ptr(1, (uintptr_t)L + c->lay.L_cframe, &cf) ||
      (cf &= ~(uintptr_t)3) == 0 ||
      !vm_ref(&c->lay, 1, cf + c->lay.cf_L, &cfL) || cfL != (uintptr_t)L)
    return fail(c, "C frame", "the C frame's lua_State slot (+%u) is not L",
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
    return fail(c, "prototype fields", "the chunk name is unreadable");
  if (len != slen || slen >= sizeof(buf) ||
      !safe_read((uintptr_t)name, buf, len) || memcmp(buf, ar->source, len))
    return fail(c, "prototype fields",
                "the chunk name differs from lua_getinfo's source");
  if (first != ar->linedefined || first + numline != ar->lastlinedefined)
    return fail(c, "prototype fields",
                "first line %d and line count %d disagree with lua_getinfo",
                (int)first, (int)numline);
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

  if (!vm_current_thread(lay, 1, c->g, &th))
    return fail(c, "frame function", "the current thread is unreadable");
  frame = th.base - TVALUE_SIZE;
  if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "f", &ar))
    return fail(c, "frame function", "lua_getstack(0) failed");
  expect = lua_topointer(L, -1);
  lua_pop(L, 1);
  fn = vm_frame_func(lay, 1, frame);
  if (fn == 0 || fn != (uintptr_t)expect ||
      !vm_u8(1, fn + lay->fn_ffid, &ffid) || ffid != FFID_C ||
      !vm_ptr(1, fn + lay->fn_cfunc, &cfn) || cfn != (uintptr_t)self)
    return fail(c, "frame function",
                "the function below base is not the running C function");
  if (!vm_frame_link(lay, 1, frame, &link) || (link & 3) != 0)
    return fail(c, "frame link",
                "a C function called from Lua has no Lua link");
  memset(&site, 0, sizeof(site));
  if (!vm_locate_lua_caller(lay, 1, &th, frame, link, &site))
    return fail(c, "caller frame", "the Lua caller cannot be located");
  if (!lua_getstack(L, 1, &ar) || !lua_getinfo(L, "fSl", &ar))
    return fail(c, "caller frame", "lua_getstack(1) failed");
  expect = lua_topointer(L, -1);
  lua_pop(L, 1);
  if (vm_func_proto(lay, 1, (uintptr_t)expect) != site.addr)
    return fail(c, "caller frame", "the frame below is not the Lua caller");
  if ((int)site.line != ar.currentline)
    return fail(c, "current line", "computed line %u, lua_getinfo says %d",
                site.line, ar.currentline);
  return check_proto_source(c, site.addr, &ar);
}

/* probe(): checks the layout from inside a C function called from Lua. */
static int calib_probe(lua_State *L)
{
  struct calib *c = calib_of(L);
  if (!c->failed && check_global_state(c, L) && check_stack(c, L) &&
      check_current_thread(c, L))
    check_frames(c, L, calib_probe);
  return 0;
}

/* Built-ins are told apart from Lua and C functions by their id. */
static int check_function_ids(struct calib *c, lua_State *L)
{
  uint8_t lua_id = 0, builtin_id = 0;
  uintptr_t lf = (uintptr_t)lua_topointer(L, 3);
  uintptr_t bf = (uintptr_t)lua_topointer(L, 4);
  if (!vm_is_gc(&c->lay, 1, lf, GCT_FUNC) ||
      !vm_is_gc(&c->lay, 1, bf, GCT_FUNC) ||
      !vm_u8(1, lf + c->lay.fn_ffid, &lua_id) ||
      !vm_u8(1, bf + c->lay.fn_ffid, &builtin_id) || lua_id != FFID_LUA ||
      builtin_id <= FFID_C)
    return fail(c, "function ids", "Lua function id %d, string.rep id %d",
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
    return fail(c, "allocation in Lua code", "the table was not seen");
  if (e->cur_L != (uintptr_t)L)
    return fail(c, "allocation in Lua code", "cur_L is not the running thread");
  if (e->site.source != SOURCE_LUA || (int)e->site.line != line)
    return fail(c, "saved PC in the C frame",
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
    return fail(c, "allocation in a built-in", "the string was not seen");
  if (e->site.source != SOURCE_LUA || (int)e->site.line != line)
    return fail(c, "allocation in a built-in",
                "string.rep was located at line %u, expected %d", e->site.line,
                line);
  return 1;
}

static int check_gc_state(struct calib *c, uintptr_t garbage)
{
  const struct calib_event *e = find_event(c, 0, garbage);
  if (e == NULL)
    return fail(c, "collector state", "the garbage table was not freed");
  c->lay.st_gc = e->vmstate;
  return 1;
}

/* mark(n, ...): opens and closes the probe windows of the driver chunk. */
static int calib_mark(lua_State *L)
{
  struct calib *c = calib_of(L);
  int step = (int)lua_tointeger(L, 1);
  if (c->failed)
    return 0;
  switch (step) {
  case 0: /* Mode, function ids, and the state C code runs under. */
    if (check_mode(c, (int)lua_tointeger(L, 2)) && check_function_ids(c, L) &&
        !vm_i32(1, c->g + c->lay.g_vmstate, &c->lay.st_c))
      fail(c, "VM state", "g+%u is unreadable", c->lay.g_vmstate);
    break;
  case 1: /* Window for an allocation in Lua code. */
  case 3: /* Window for a built-in's allocation. */
    c->nevents = 0;
    c->window = step;
    break;
  case 2:
    c->window = 0;
    check_lua_allocation(c, L, (int)lua_tointeger(L, 3));
    break;
  case 4:
    c->window = 0;
    check_builtin_allocation(c, L, (int)lua_tointeger(L, 3));
    break;
  case 5: /* Window for a full collection freeing a known table. */
    c->nevents = 0;
    c->only_ptr = (uintptr_t)lua_topointer(L, 2);
    c->window = step;
    break;
  case 6:
    c->window = 0;
    check_gc_state(c, c->only_ptr);
    c->only_ptr = 0;
    break;
  }
  return 0;
}

/* The number of a trace of lay's trace array that starts in prototype
** want at line, or 0. */
static uint32_t trace_number(struct calib *c, const struct vm_layout *lay,
                             uintptr_t want, int line)
{
  uint32_t size, n;
  if (want == 0 || !vm_u32(1, c->g + lay->g_sizetrace, &size) || size > 65536)
    return 0;
  for (n = 1; n < size; n++) {
    uintptr_t pt = 0;
    uint32_t tline = 0;
    if (vm_trace_start(lay, 1, c->g, n, &pt, &tline) && pt == want &&
        (int)tline == line)
      return n;
  }
  return 0;
}

/* find_trace(f, line): looks for the trace compiled for f's loop, trying
** each place J->trace may have. */
static int calib_find_trace(lua_State *L)
{
  struct calib *c = calib_of(L);
  uintptr_t want = vm_func_proto(&c->lay, 1, (uintptr_t)lua_topointer(L, 1));
  int line = (int)lua_tointeger(L, 2), i;
  for (i = 0; i < 4 && c->cand->trace[i] != 0; i++) {
    struct vm_layout lay = c->lay;
    lay.trace_ok = 1;
    lay.g_trace = c->cand->trace[i];
    lay.g_sizetrace = lay.g_trace + SIZETRACE_AFTER_TRACE;
    if (trace_number(c, &lay, want, line) != 0) {
      c->lay.trace_ok = 1;
      c->lay.g_trace = lay.g_trace;
      c->lay.g_sizetrace = lay.g_sizetrace;
      c->lay.g_parent = lay.g_trace + c->cand->parent_after_trace;
      lua_pushboolean(L, 1);
      return 1;
    }
  }
  lua_pushboolean(L, 0);
  return 1;
}

/* The stored vmstate of trace exits (and of recording, one below), by the
** numbering seen so far; 0 if the numbering is unknown. */
static int32_t exit_state(const struct calib *c)
{
  if (c->lay.st_lua == -1 && c->lay.st_c == -2 && c->lay.st_gc == -3)
    return -4;
  if (c->lay.st_lua == -2 && c->lay.st_c == -4 && c->lay.st_gc == -5)
    return -6;
  return 0;
}

/* exits(open): opens the window for the allocations made while traces
** exit, then (open = false, f, line) checks that J->parent named the trace
** of f's loop during them. Sinking may be off: then exits stay internal. */
static int calib_exits(lua_State *L)
{
  struct calib *c = calib_of(L);
  int i, matched = 0, walked = 0, line;
  uint32_t root, size;
  uintptr_t want;
  if (c->failed || !c->lay.trace_ok)
    return 0;
  if (lua_toboolean(L, 1)) {
    c->nevents = 0;
    c->only_state = exit_state(c);
    c->also_state = c->only_state - 1; /* RECORD */
    c->window = c->only_state != 0;
    return 0;
  }
  c->window = 0;
  want = vm_func_proto(&c->lay, 1, (uintptr_t)lua_topointer(L, 2));
  line = (int)lua_tointeger(L, 3);
  root = trace_number(c, &c->lay, want, line);
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
  lua_pushboolean(L, c->lay.exit_ok && c->record_walks);
  return 1;
}

/* ---- The driver ------------------------------------------------------- */

/*
** Runs the probes. Line numbers are taken with debug.getinfo on the same
** line as the allocation they describe, so nothing here is hard-coded.
** The JIT compiler is off for the driver's own functions (hot counters are
** shared, so fresh code can start a trace at once, and a trace stitching
** around a probe would change its frames). The two loops whose traces are
** looked for are fresh chunks, tried up to three times: in a busy VM a
** trace may be aborted, or all traces flushed when jit.opt maxtrace is
** reached.
*/
static const char driver[] =
    "local mark, probe, find_trace, exits = ...\n"
    "if jit and jit.off then jit.off(debug.getinfo(1, 'f').func, true) end\n"
    "mark(0, string.byte(string.dump(function() end), 5), function() end,\n"
    "     string.rep)\n"
    "local function call_probe() probe() return true end\n"
    "call_probe()\n"
    "local function in_lua()\n"
    "  mark(1)\n"
    "  local t = {} local line = debug.getinfo(1, 'l').currentline\n"
    "  mark(2, t, line)\n"
    "end\n"
    "in_lua()\n"
    "local function in_builtin()\n"
    "  local unique = tostring({})\n"
    "  mark(3)\n"
    "  local s = string.rep(unique, 3) local line = "
    "debug.getinfo(1, 'l').currentline\n"
    "  mark(4, s, line)\n"
    "end\n"
    "in_builtin()\n"
    "local garbage = {}\n"
    "mark(5, garbage)\n"
    "garbage = nil\n"
    "collectgarbage()\n"
    "mark(6)\n"
    "local co = coroutine.wrap(function() call_probe() end)\n"
    "co()\n"
    "if jit and jit.status and jit.status() then\n"
    "  for attempt = 1, 3 do\n"
    "    local hot = loadstring(\"local x = 0 for i = 1, 500 do \" ..\n"
    "      \"x = x + i end return debug.getinfo(1, 'l').currentline\",\n"
    "      '=memprof.calibration.trace')\n"
    "    if find_trace(hot, hot()) then break end\n"
    "  end\n"
    "  for attempt = 1, 3 do\n"
    "    local sinking = loadstring(\"local keep = {} for i = 1, 400 do \" ..\n"
    "      \"local t = {i, i} if i % 40 == 0 then keep[#keep + 1] = t \" ..\n"
    "      \"end end return keep, debug.getinfo(1, 'l').currentline\",\n"
    "      '=memprof.calibration.exit')\n"
    "    exits(true)\n"
    "    local _, line = sinking()\n"
    "    if exits(false, sinking, line) then break end\n"
    "  end\n"
    "end\n";

/*
** MEMPROF_LAYOUT_OVERRIDE="field=offset,...": replaces candidate offsets
** before verification, to try a build whose offsets are not known yet. The
** checks still run, so a wrong value is refused, never used.
*/
/* clang-format off */
#define FIELD16(f) {#f, offsetof(struct vm_layout, f), 1}
#define FIELD8(f) {#f, offsetof(struct vm_layout, f), 0}
/* clang-format on */
const struct vm_layout_field vm_layout_fields[] = {
    FIELD16(L_glref),     FIELD16(L_base),    FIELD16(L_top),
    FIELD16(L_maxstack),  FIELD16(L_stack),   FIELD16(L_cframe),
    FIELD16(L_stacksize), FIELD16(g_allocf),  FIELD16(g_allocd),
    FIELD16(g_vmstate),   FIELD16(g_cur_L),   FIELD8(gct),
    FIELD8(fn_ffid),      FIELD8(fn_pc),      FIELD8(fn_cfunc),
    FIELD8(pt_size),      FIELD8(pt_sizebc),  FIELD8(pt_chunkname),
    FIELD8(pt_firstline), FIELD8(pt_numline), FIELD8(pt_lineinfo),
    FIELD8(str_size),     FIELD8(str_len),    FIELD8(cf_pc),
    FIELD8(cf_L),         {NULL, 0, 0}};

static int apply_overrides(struct vm_layout *lay, char *err, size_t errlen)
{
  const char *spec = getenv("MEMPROF_LAYOUT_OVERRIDE");
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
    spec = *end == ',' ? end + 1 : end;
  }
  return 1;
}

/* Whether every offset of a equals b's (no override changed one). */
static int offsets_equal(const struct vm_layout *a, const struct vm_layout *b)
{
  const struct vm_layout_field *f;
  for (f = vm_layout_fields; f->name != NULL; f++)
    if (vm_layout_get(a, f) != vm_layout_get(b, f))
      return 0;
  return 1;
}

/* Names the vmstate numbering the observed values belong to. */
static int classify_states(struct calib *c)
{
  struct vm_layout *lay = &c->lay;
  int i;
  memset(lay->state_class, STATE_INTERNAL, sizeof(lay->state_class));
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
  return fail(c, "VM state numbering",
              "Lua code runs under %d, C code under %d, the collector under "
              "%d: no known numbering matches",
              (int)lay->st_lua, (int)lay->st_c, (int)lay->st_gc);
}

/* Tries one candidate. Returns 1 if every check passed. */
static int try_candidate(lua_State *L, struct calib *c)
{
  int top = lua_gettop(L), status;
  c->lay.trace_ok = 0;
  c->lay.exit_ok = 0;
  c->lay.st_lua = c->lay.st_c = c->lay.st_gc = 0;
  if (luaL_loadbuffer(L, driver, sizeof(driver) - 1, "=memprof.calibration")) {
    lua_settop(L, top);
    return fail(c, "calibration chunk", "it does not compile");
  }
  lua_pushlightuserdata(L, c);
  lua_pushcclosure(L, calib_mark, 1);
  lua_pushlightuserdata(L, c);
  lua_pushcclosure(L, calib_probe, 1);
  lua_pushlightuserdata(L, c);
  lua_pushcclosure(L, calib_find_trace, 1);
  lua_pushlightuserdata(L, c);
  lua_pushcclosure(L, calib_exits, 1);
  /* Run the driver under the recording allocator; it is always removed. */
  c->g = 0;
  if (!check_global_state(c, L)) {
    lua_settop(L, top);
    return 0;
  }
  c->orig_alloc = lua_getallocf(L, &c->orig_ud);
  lua_setallocf(L, calib_alloc, c);
  status = lua_pcall(L, 4, 0, 0);
  lua_setallocf(L, c->orig_alloc, c->orig_ud);
  if (status != 0) {
    fail(c, "calibration chunk", "%s",
         lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
    lua_settop(L, top);
    return 0;
  }
  lua_settop(L, top);
  return !c->failed && classify_states(c);
}

/* Whether frames take two slots: the flags byte of a bytecode dump has
** BCDUMP_F_FR2 (0x08). Returns 0 or 1, or -1 if it cannot be told. */
static int dump_fr2(lua_State *L)
{
  static const char chunk[] =
      "return string.byte(string.dump(function() end), 5)";
  int flags = -1, top = lua_gettop(L);
  if (luaL_loadbuffer(L, chunk, sizeof(chunk) - 1, "=memprof") == 0 &&
      lua_pcall(L, 0, 1, 0) == 0 && lua_isnumber(L, -1))
    flags = (int)lua_tointeger(L, -1);
  lua_settop(L, top);
  return flags < 0 ? -1 : (flags & 0x08) != 0;
}

int vm_layout_calibrate(lua_State *L, struct vm_layout *out, char *err,
                        size_t errlen)
{
  struct calib *c;
  size_t i;
  int fr2 = dump_fr2(L), tried = 0;
#if !defined(__x86_64__)
  snprintf(err, errlen,
           "check 'architecture' failed: only x86_64 layouts "
           "are known");
  return 0;
#endif
  if (fr2 < 0) {
    snprintf(err, errlen,
             "check 'bytecode dump flags' failed: "
             "string.dump is not available");
    return 0;
  }
  if ((c = malloc(sizeof(*c))) == NULL) {
    snprintf(err, errlen, "check 'memory' failed: out of memory");
    return 0;
  }
  /* Only families with the VM's frame mode are tried; the first failure
  ** among them is the one reported. */
  for (i = 0; i < VM_CANDIDATES; i++) {
    if (vm_candidates[i].layout.fr2 != fr2)
      continue;
    memset(c, 0, sizeof(*c));
    c->L = L;
    c->cand = &vm_candidates[i];
    c->lay = vm_candidates[i].layout;
    c->err = tried ? c->spare_err : err;
    c->errlen = tried ? sizeof(c->spare_err) : errlen;
    tried = 1;
    if (!apply_overrides(&c->lay, err, errlen))
      break;
    if (try_candidate(L, c)) {
      c->lay.candidate = (int)i;
      c->lay.exact = offsets_equal(&c->lay, &vm_candidates[i].layout);
      *out = c->lay;
      free(c);
      return 1;
    }
  }
  if (!tried)
    snprintf(err, errlen,
             "check 'bytecode dump flags' failed: no known "
             "family uses %s frames",
             fr2 ? "two-slot" : "one-slot");
  free(c);
  return 0;
}
