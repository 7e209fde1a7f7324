/*
** The heap walk's layout (see heap_layout.h): its candidates, and their
** verification in a throw-away VM whose allocator counts what each public
** API call allocates.
*/
#define _GNU_SOURCE
#include "heap_layout.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap_objects.h"
#include "heap_traces.h"
#include "lauxlib.h"
#include "vm_inspect.h"
#include "vm_learn.h"

/* A candidate offset: the first on GC64 builds, the second on the others. */
static uint8_t by_mode(const struct heap_layout *h, uint8_t gc64, uint8_t gc32)
{
  return h->base.gc64 ? gc64 : gc32;
}

/* The candidates of a mode (lj_obj.h's structures; the base layout gives
** the rest). L_size is measured, g_mainth searched. */
static void candidates(struct heap_layout *h)
{
  int r = h->base.ref_size;
  h->tab_colo = by_mode(h, 11, 7);
  h->tab_array = by_mode(h, 16, 8);
  h->tab_mt = by_mode(h, 32, 16);
  h->tab_node = by_mode(h, 40, 20);
  h->tab_asize = by_mode(h, 48, 24);
  h->tab_hmask = by_mode(h, 52, 28);
  h->tab_size = by_mode(h, 64, 32);
  h->fn_env = by_mode(h, 16, 8);
  h->fn_nupvalues = by_mode(h, 11, 7);
  h->fnl_uv = by_mode(h, 40, 20);
  h->fnc_up = by_mode(h, 48, 32);
  h->uv_v = by_mode(h, 32, 16);
  h->uv_size = by_mode(h, 48, 24);
  h->pt_k = by_mode(h, 32, 16);
  h->pt_sizekgc = by_mode(h, 48, 24);
  h->pt_sizekn = by_mode(h, 52, 28);
  h->pt_sizept = by_mode(h, 56, 32);
  h->pt_sizeuv = by_mode(h, 60, 36);
  h->ud_env = by_mode(h, 16, 8);
  h->ud_len = by_mode(h, 24, 12);
  h->ud_mt = by_mode(h, 32, 16);
  h->ud_size = by_mode(h, 48, 24);
  h->cd_size = by_mode(h, 16, 8);
  h->cd_ctypeid = by_mode(h, 10, 6);
  h->ct_size = by_mode(h, 24, 16);
  h->node_size = 24, h->node_val = 0, h->node_key = 8;
  h->pt_uvinfo = (uint8_t)(h->base.pt_lineinfo + r);
  h->pt_varinfo = (uint8_t)(h->base.pt_lineinfo + 2 * r);
  h->L_env = (uint16_t)(h->base.L_cframe - r);
}

/* ---- The counting allocator ------------------------------------------- */

#define CALIB_EVENTS 4096

struct event {
  uintptr_t got; /* What the allocator returned. */
  uintptr_t ptr; /* The block it was given (0: a new one). */
  size_t osize, nsize;
};

struct hcalib {
  lua_Alloc orig;
  void *orig_ud;
  int on, n;
  struct event ev[CALIB_EVENTS];
  struct heap_layout h;
  char *err;
  size_t errlen;
  int ok;
};

static void *count_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  struct hcalib *c = ud;
  void *got = c->orig(c->orig_ud, ptr, osize, nsize);
  if (c->on && c->n < CALIB_EVENTS) {
    struct event *e = &c->ev[c->n++];
    e->got = (uintptr_t)got;
    e->ptr = (uintptr_t)ptr;
    e->osize = ptr != NULL ? osize : 0;
    e->nsize = nsize;
  }
  return got;
}

static void start(struct hcalib *c)
{
  c->n = 0;
  c->on = 1;
}

/* The size of the new block at p seen since start(), or 0. */
static size_t block(const struct hcalib *c, uintptr_t p)
{
  int i;
  for (i = c->n - 1; i >= 0; i--) /* The last: a block may be reused. */
    if (c->ev[i].ptr == 0 && c->ev[i].got == p)
      return c->ev[i].nsize;
  return 0;
}

/* The net bytes allocated since start(). */
static long net(const struct hcalib *c)
{
  long sum = 0;
  int i;
  for (i = 0; i < c->n; i++)
    sum += (long)c->ev[i].nsize - (long)c->ev[i].osize;
  return sum;
}

static int fail(struct hcalib *c, const char *check, const char *fmt, ...)
{
  char detail[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof(detail), fmt, ap);
  va_end(ap);
  snprintf(c->err, c->errlen, "check 'heap %s' failed: %s", check, detail);
  return 0;
}

/* The slot below L's top. */
static uintptr_t top_slot(const struct heap_layout *h, lua_State *L)
{
  uintptr_t top;
  memcpy(&top, (const char *)L + h->base.L_top, sizeof(top));
  return top - TVALUE_SIZE;
}

static uint64_t bits(double d)
{
  uint64_t v;
  memcpy(&v, &d, sizeof(v));
  return v;
}

/* Whether the reference at `at` points to the value at stack index idx. */
static int ref_is(const struct heap_layout *h, lua_State *T, uintptr_t at,
                  int idx)
{
  return vm_load_ref(&h->base, at) == (uintptr_t)lua_topointer(T, idx);
}

/* The value on top gets a new metatable: whether the reference at `at`
** reads it. */
static int new_metatable_at(const struct heap_layout *h, lua_State *T,
                            uintptr_t at)
{
  int ok;
  lua_newtable(T);
  lua_setmetatable(T, -2);
  lua_getmetatable(T, -1);
  ok = ref_is(h, T, at, -1);
  lua_pop(T, 1);
  return ok;
}

/* Whether the reference at `at` reads the environment of the value on
** top. */
static int env_at(const struct heap_layout *h, lua_State *T, uintptr_t at)
{
  int ok;
  lua_getfenv(T, -1);
  ok = ref_is(h, T, at, -1);
  lua_pop(T, 1);
  return ok;
}

/* ---- Checks ------------------------------------------------------------ */

static int check_tvalue(struct hcalib *c, lua_State *T)
{
  const struct heap_layout *h = &c->h;
  uintptr_t obj;
  uint8_t gct;
  lua_newtable(T);
  if (!vm_load_gc(&h->base, top_slot(h, T), &obj, &gct) ||
      obj != (uintptr_t)lua_topointer(T, -1) || gct != GCT_TAB)
    return fail(c, "TValue", "a table on the stack does not read as one");
  lua_pop(T, 1);
  lua_pushnumber(T, 2.5);
  if (vm_load_gc(&h->base, top_slot(h, T), &obj, &gct) ||
      vm_load_u64(top_slot(h, T)) != bits(2.5))
    return fail(c, "TValue", "the number 2.5 does not read as its bits");
  lua_pop(T, 1);
  return 1;
}

static int check_small_table(struct hcalib *c, lua_State *T)
{
  const struct heap_layout *h = &c->h;
  uintptr_t t;
  start(c);
  lua_createtable(T, 3, 0);
  c->on = 0;
  t = (uintptr_t)lua_topointer(T, -1);
  if (block(c, t) != (size_t)h->tab_size + 4 * TVALUE_SIZE)
    return fail(c, "table size",
                "lua_createtable(L, 3, 0) allocated %zu bytes, not %u + 4 "
                "slots",
                block(c, t), h->tab_size);
  if (vm_load_u8(t + h->base.gct) != GCT_TAB ||
      vm_load_u8(t + h->tab_colo) != 4 || vm_load_u32(t + h->tab_asize) != 4 ||
      vm_load_u32(t + h->tab_hmask) != 0 ||
      vm_load_ref(&h->base, t + h->tab_array) != t + h->tab_size ||
      vm_load_ref(&h->base, t + h->tab_mt) != 0)
    return fail(c, "table fields",
                "a table of 3 colocated slots does not read type, colo, "
                "asize, hmask, array and metatable");
  lua_pushnumber(T, 7.25);
  lua_rawseti(T, -2, 2);
  if (vm_load_u64(t + h->tab_size + 2 * TVALUE_SIZE) != bits(7.25))
    return fail(c, "table array", "t[2] = 7.25 is not in the array part");
  lua_pop(T, 1);
  return 1;
}

/* The node of t whose key is the TValue with bits `key`, or 0. */
static uintptr_t node_with_key(const struct heap_layout *h, uintptr_t t,
                               uint64_t key)
{
  uintptr_t node = vm_load_ref(&h->base, t + h->tab_node);
  uint32_t i, hmask = vm_load_u32(t + h->tab_hmask);
  for (i = 0; i <= hmask; i++) {
    uintptr_t n = node + (uintptr_t)i * h->node_size;
    if (vm_load_u64(n + h->node_key) == key)
      return n;
  }
  return 0;
}

static int check_hash_table(struct hcalib *c, lua_State *T)
{
  const struct heap_layout *h = &c->h;
  uintptr_t t, node, n, key;
  uint32_t i;
  int found = 0;
  uint8_t gct;
  start(c);
  lua_createtable(T, 40, 5);
  c->on = 0;
  t = (uintptr_t)lua_topointer(T, -1);
  node = vm_load_ref(&h->base, t + h->tab_node);
  if (vm_load_u32(t + h->tab_asize) != 41 ||
      vm_load_u32(t + h->tab_hmask) != 7 || vm_load_u8(t + h->tab_colo) != 0 ||
      block(c, t) != h->tab_size || block(c, node) != 8u * h->node_size ||
      block(c, vm_load_ref(&h->base, t + h->tab_array)) != 41 * TVALUE_SIZE ||
      net(c) != (long)heap_table_size(h, t))
    return fail(c, "table parts",
                "lua_createtable(L, 40, 5) does not read 41 array slots and "
                "8 nodes of %u bytes (allocated %ld bytes)",
                h->node_size, net(c));
  lua_pushnumber(T, 2.5);
  lua_pushnumber(T, 42.5);
  lua_rawset(T, -3);
  n = node_with_key(h, t, bits(2.5));
  if (n == 0 || vm_load_u64(n + h->node_val) != bits(42.5))
    return fail(c, "node", "t[2.5] = 42.5 is in no node");
  lua_pushboolean(T, 1);
  lua_setfield(T, -2, "heapkey");
  for (i = 0; i <= 7; i++) {
    n = node + (uintptr_t)i * h->node_size;
    if (vm_load_gc(&h->base, n + h->node_key, &key, &gct) && gct == GCT_STR &&
        heap_str_is(h, key, "heapkey", 7) &&
        (vm_load_u64(n + h->node_val) >> 47) != 0)
      found++;
  }
  if (found != 1)
    return fail(c, "node", "t.heapkey = true is in %d nodes", found);
  if (!new_metatable_at(h, T, t + h->tab_mt))
    return fail(c, "table metatable", "the metatable is not at +%u", h->tab_mt);
  lua_pop(T, 1);
  return 1;
}

/* A colocated array that grew: its first slots stay in the table's block. */
static int check_moved_array(struct hcalib *c, lua_State *T)
{
  const struct heap_layout *h = &c->h;
  uintptr_t t;
  int8_t colo;
  int i;
  start(c);
  lua_createtable(T, 2, 0);
  for (i = 1; i <= 40; i++) {
    lua_pushnumber(T, i);
    lua_rawseti(T, -2, i);
  }
  c->on = 0;
  t = (uintptr_t)lua_topointer(T, -1);
  colo = (int8_t)vm_load_u8(t + h->tab_colo);
  if (colo >= 0 || (colo & 0x7f) != 3 || net(c) != (long)heap_table_size(h, t))
    return fail(c, "table grown",
                "a colocated table grown to 40 slots reads %ld bytes, "
                "allocated %ld",
                (long)heap_table_size(h, t), net(c));
  lua_pop(T, 1);
  return 1;
}

/* A new string of n characters: its size as the allocator saw it. */
static size_t string_block(struct hcalib *c, lua_State *T, size_t n)
{
  const struct heap_layout *h = &c->h;
  char text[64];
  uintptr_t s;
  uint8_t gct;
  size_t size;
  memset(text, 'h', n);
  snprintf(text, sizeof(text), "%u heap calibration", (unsigned)n);
  text[strlen(text)] = 'h';
  start(c);
  lua_pushlstring(T, text, n);
  c->on = 0;
  if (!vm_load_gc(&h->base, top_slot(h, T), &s, &gct) || gct != GCT_STR ||
      !heap_str_is(h, s, text, n))
    size = 0;
  else
    size = block(c, s);
  lua_pop(T, 1);
  return size;
}

/* Strings of 37 and 40 characters tell the two ways of sizing them. */
static int check_string(struct hcalib *c, lua_State *T)
{
  size_t a = string_block(c, T, 37), b = string_block(c, T, 40);
  c->h.str_pad4 = a == (size_t)c->h.base.str_size + 40;
  if (a != heap_str_size(&c->h, 37) || b != heap_str_size(&c->h, 40))
    return fail(c, "string size",
                "new strings of 37 and 40 bytes allocated %zu and %zu bytes, "
                "with a header of %u",
                a, b, c->h.base.str_size);
  return 1;
}

static int a_c_function(lua_State *L)
{
  (void)L;
  return 0;
}

static int check_c_closure(struct hcalib *c, lua_State *T)
{
  const struct heap_layout *h = &c->h;
  uintptr_t fn;
  lua_pushnumber(T, 1.25);
  lua_pushnumber(T, 2.5);
  start(c);
  lua_pushcclosure(T, a_c_function, 2);
  c->on = 0;
  fn = (uintptr_t)lua_topointer(T, -1);
  if (block(c, fn) != (size_t)h->fnc_up + 2 * TVALUE_SIZE ||
      vm_load_u8(fn + h->fn_nupvalues) != 2 ||
      (uintptr_t)lua_upvalueid(T, -1, 2) != fn + h->fnc_up + TVALUE_SIZE ||
      vm_load_u64(fn + h->fnc_up) != bits(1.25))
    return fail(c, "C closure",
                "a C closure of 2 upvalues does not read its size (%zu), "
                "count or upvalues",
                block(c, fn));
  if (!env_at(h, T, fn + h->fn_env))
    return fail(c, "function env", "a C function's env is not at +%u",
                h->fn_env);
  lua_pop(T, 1);
  return 1;
}

static const char probe_chunk[] = "local first, second = {}, {}\n"
                                  "return function(x)\n"
                                  "  local alpha, beta = x, first\n"
                                  "  local gamma = second\n"
                                  "  coroutine.yield(alpha)\n"
                                  "  return alpha, beta, gamma, 'kconst', 3.5\n"
                                  "end\n";

/* The constant string `text` and number `num` are among pt's constants. */
static int has_constants(const struct heap_layout *h, uintptr_t pt,
                         const char *text, double num)
{
  uintptr_t k = vm_load_ref(&h->base, pt + h->pt_k);
  uint32_t i, nkgc = vm_load_u32(pt + h->pt_sizekgc);
  uint32_t nkn = vm_load_u32(pt + h->pt_sizekn);
  int str = 0, n = 0;
  for (i = 0; i < nkgc && i < 64; i++) {
    uintptr_t o =
        vm_load_ref(&h->base, k - (uintptr_t)(i + 1) * h->base.ref_size);
    str |= heap_str_is(h, o, text, strlen(text));
  }
  for (i = 0; i < nkn && i < 64; i++)
    n |= vm_load_u64(k + (uintptr_t)i * TVALUE_SIZE) == bits(num);
  return str && n;
}

static int check_lua_closure(struct hcalib *c, lua_State *T)
{
  const struct heap_layout *h = &c->h;
  uintptr_t fn, pt, uv, val;
  const char *name;
  uint8_t gct;
  start(c);
  if (luaL_loadstring(T, probe_chunk) != 0)
    return fail(c, "Lua closure", "the probe chunk does not load");
  c->on = 0;
  pt = vm_func_proto(&h->base, 1, (uintptr_t)lua_topointer(T, -1));
  if (pt == 0 || block(c, pt) != vm_load_u32(pt + h->pt_sizept))
    return fail(c, "prototype size",
                "sizept at +%u reads %u, not the block's size %zu",
                h->pt_sizept, pt ? vm_load_u32(pt + h->pt_sizept) : 0,
                pt ? block(c, pt) : 0);
  start(c);
  lua_call(T, 0, 1);
  c->on = 0;
  fn = (uintptr_t)lua_topointer(T, -1);
  pt = vm_func_proto(&h->base, 1, fn);
  uv = vm_load_ref(&h->base, fn + h->fnl_uv);
  if (pt == 0 || block(c, fn) != (size_t)h->fnl_uv + 2u * h->base.ref_size ||
      vm_load_u8(fn + h->fn_nupvalues) != 2 ||
      vm_load_u8(pt + h->pt_sizeuv) != 2 ||
      (uintptr_t)lua_upvalueid(T, -1, 1) != uv ||
      vm_load_u8(uv + h->base.gct) != GCT_UPVAL || block(c, uv) != h->uv_size)
    return fail(c, "Lua closure",
                "a closure of 2 upvalues does not read its size (%zu), "
                "count or upvalue objects",
                block(c, fn));
  name = lua_getupvalue(T, -1, 1);
  if (name == NULL ||
      !vm_load_gc(&h->base, vm_load_ref(&h->base, uv + h->uv_v), &val, &gct) ||
      val != (uintptr_t)lua_topointer(T, -1) ||
      strcmp(name, heap_upvalue_name(h, pt, 0)) != 0)
    return fail(c, "upvalue", "upvalue 1 (%s) does not read its value or name",
                name != NULL ? name : "?");
  lua_pop(T, 1);
  if (!env_at(h, T, fn + h->fn_env))
    return fail(c, "function env", "a Lua function's env is not at +%u",
                h->fn_env);
  if (!has_constants(h, pt, "kconst", 3.5))
    return fail(c, "constants",
                "'kconst' and 3.5 are not among the "
                "prototype's constants");
  return 1;
}

/* The locals of the probe closure suspended in a coroutine: their names as
** lua_getlocal gives them, and as heap_local_name reads them. */
static int check_locals(struct hcalib *c, lua_State *T)
{
  const struct heap_layout *h = &c->h;
  const struct vm_layout *lay = &h->base;
  lua_State *co;
  lua_Debug ar;
  struct vm_thread th;
  uintptr_t frame, below, pc, fn, pt, co_ptr;
  intptr_t link;
  uint32_t size;
  int varg, slot;
  start(c);
  co = lua_newthread(T);
  c->on = 0;
  co_ptr = (uintptr_t)lua_topointer(T, -1);
  memcpy(&size, (const char *)co + lay->L_stacksize, sizeof(size));
  if (block(c, co_ptr) == 0 || block(c, co_ptr) > 1024 ||
      net(c) != (long)(block(c, co_ptr) + (size_t)size * TVALUE_SIZE))
    return fail(c, "thread size",
                "a new thread allocated %ld bytes with a stack of %u slots",
                net(c), size);
  c->h.L_size = (uint16_t)block(c, co_ptr);
  if (vm_load_ref(&h->base, co_ptr + h->L_env) !=
      (uintptr_t)lua_topointer(T, LUA_GLOBALSINDEX))
    return fail(c, "thread env", "a thread's env is not at +%u", h->L_env);
  lua_pushvalue(T, -2);
  lua_xmove(T, co, 1);
  lua_newtable(co);
  if (lua_resume(co, 1) != LUA_YIELD || !lua_getstack(co, 1, &ar))
    return fail(c, "locals", "the probe closure did not yield");
  th.L = co_ptr;
  th.stack = vm_load_ref(&h->base, co_ptr + lay->L_stack);
  memcpy(&th.base, (const char *)co + lay->L_base, sizeof(th.base));
  th.limit = th.stack + (uintptr_t)size * TVALUE_SIZE;
  frame = th.base - TVALUE_SIZE;
  if (!vm_frame_link(lay, 1, frame, &link) ||
      (pc = vm_caller_pc(lay, 1, frame, link)) == 0 ||
      (below = vm_frame_below(lay, 1, &th, frame, link, &varg)) == 0 ||
      (fn = vm_frame_func(lay, 1, below)) != (uintptr_t)lua_topointer(T, -2) ||
      (pt = vm_func_proto(lay, 1, fn)) == 0)
    return fail(c, "locals",
                "the frames of a suspended coroutine do not "
                "lead to the yielding closure");
  for (slot = 0; slot < 4; slot++) {
    char mine[64];
    const char *name = lua_getlocal(co, &ar, slot + 1);
    if (name == NULL)
      return fail(c, "locals", "lua_getlocal has no local %d", slot + 1);
    lua_pop(co, 1);
    if (!heap_local_name(h, pt, (uint32_t)((pc - pt - lay->pt_size) / 4 - 1),
                         (uint32_t)slot, mine, sizeof(mine)) ||
        strcmp(mine, name) != 0)
      return fail(c, "locals", "local %d reads '%s', not '%s'", slot + 1, mine,
                  name);
  }
  lua_newtable(T);
  lua_pushvalue(T, -1);
  lua_setfenv(T, -3);
  if (!ref_is(h, T, co_ptr + h->L_env, -1))
    return fail(c, "thread env", "a thread's new env is not at +%u", h->L_env);
  lua_pop(T, 3);
  return 1;
}

static int check_userdata(struct hcalib *c, lua_State *T)
{
  const struct heap_layout *h = &c->h;
  uintptr_t ud;
  start(c);
  ud = (uintptr_t)lua_newuserdata(T, 13) - h->ud_size;
  c->on = 0;
  if (block(c, ud) != (size_t)h->ud_size + 13 ||
      vm_load_u8(ud + h->base.gct) != GCT_UDATA ||
      vm_load_u32(ud + h->ud_len) != 13)
    return fail(c, "userdata", "a userdata of 13 bytes allocated %zu",
                block(c, ud));
  if (!new_metatable_at(h, T, ud + h->ud_mt) || !env_at(h, T, ud + h->ud_env))
    return fail(c, "userdata", "its metatable or env is not at +%u, +%u",
                h->ud_mt, h->ud_env);
  lua_pop(T, 1);
  return 1;
}

/* ---- The main thread in global_State --------------------------------- */

#define G_WINDOW 1024

struct mainth_search {
  const struct heap_layout *h;
  uintptr_t g, main;
  uint8_t hit[G_WINDOW];
};

/* Marks the offsets of g that hold the main thread now. */
static void mainth_mark(struct mainth_search *s, int pass)
{
  unsigned o;
  for (o = 0; o + s->h->base.ref_size <= G_WINDOW; o += s->h->base.ref_size)
    if (s->hit[o] == pass && vm_load_ref(&s->h->base, s->g + o) == s->main)
      s->hit[o] = (uint8_t)(pass + 1);
}

static int mainth_in_thread(lua_State *L)
{
  mainth_mark(lua_touserdata(L, lua_upvalueindex(1)), 1);
  return 0;
}

static int find_mainth(struct hcalib *c, lua_State *T)
{
  struct mainth_search *s = calloc(1, sizeof(*s));
  lua_State *co;
  unsigned o, found = 0, n = 0;
  if (s == NULL)
    return fail(c, "main thread", "out of memory");
  s->h = &c->h;
  s->main = (uintptr_t)T;
  s->g = vm_load_ref(&c->h.base, (uintptr_t)T + c->h.base.L_glref);
  mainth_mark(s, 0);
  co = lua_newthread(T);
  lua_pushlightuserdata(co, s);
  lua_pushcclosure(co, mainth_in_thread, 1);
  if (lua_resume(co, 0) != 0) {
    free(s);
    return fail(c, "main thread", "a coroutine did not run");
  }
  lua_pop(T, 1);
  for (o = 0; o < G_WINDOW; o++)
    if (s->hit[o] == 2)
      found = o, n++;
  free(s);
  if (n != 1)
    return fail(c, "main thread",
                "%u offsets of global_State hold the main thread both in it "
                "and in a coroutine, not one",
                n);
  c->h.g_mainth = (uint16_t)found;
  return 1;
}

/* ---- cdata and the FFI's C type state --------------------------------- */

/* Runs code (a chunk given the ffi module) and leaves its results. */
static int run(lua_State *T, const char *code, int nres)
{
  if (luaL_loadstring(T, code) != 0)
    return 0;
  lua_pushvalue(T, -2);
  return lua_pcall(T, 1, nres, 0) == 0;
}

/* The size of the block at p as last (re)allocated since start(), or 0. */
static size_t last_size(const struct hcalib *c, uintptr_t p)
{
  int i;
  for (i = c->n - 1; i >= 0; i--)
    if (c->ev[i].got == p)
      return c->ev[i].nsize;
  return 0;
}

/* Finds g->ctype_state: the one reference of global_State that was 0
** before the FFI was loaded and then points to a new block whose g is this
** VM's and whose type table is a block of sizetab CTypes. */
static int find_ctype_state(struct hcalib *c, lua_State *T, uint8_t *zero)
{
  const struct heap_layout *h = &c->h;
  uintptr_t g = vm_load_ref(&h->base, (uintptr_t)T + h->base.L_glref);
  unsigned o, n = 0, found = 0;
  for (o = 0; o + h->base.ref_size <= G_WINDOW; o += h->base.ref_size)
    zero[o] = vm_load_ref(&h->base, g + o) == 0;
  lua_getglobal(T, "require");
  lua_pushstring(T, "ffi");
  start(c);
  if (lua_pcall(T, 1, 1, 0) != 0) {
    c->on = 0;
    lua_pop(T, 1);
    return fail(c, "cdata ffi", "the FFI cannot be loaded");
  }
  c->on = 0;
  if (c->n >= CALIB_EVENTS)
    return fail(c, "cdata ffi", "loading the FFI made over %d blocks",
                CALIB_EVENTS);
  for (o = 0; o + h->base.ref_size <= G_WINDOW; o += h->base.ref_size) {
    uintptr_t cts = vm_load_ref(&h->base, g + o), tab, gg;
    uint32_t top, sizetab;
    if (!zero[o] || cts == 0 || block(c, cts) < CTS_MIN)
      continue;
    memcpy(&tab, (const void *)cts, sizeof(tab));
    top = vm_load_u32(cts + CTS_TOP);
    sizetab = vm_load_u32(cts + CTS_TOP + 4);
    memcpy(&gg, (const void *)(cts + CTS_G), sizeof(gg));
    if (gg == g && top <= sizetab &&
        last_size(c, tab) == (size_t)sizetab * h->ct_size)
      found = o, n++;
  }
  if (n != 1)
    return fail(c, "cdata ffi",
                "%u references of global_State point to a new C type state "
                "of this VM with a table of %u-byte types, not one",
                n, h->ct_size);
  c->h.g_ctype = (uint16_t)found;
  return 1;
}

/* A C type id's kind and size, from the table as the walk reads it. */
static int check_ctype(struct hcalib *c, const struct heap_ctypes *cts,
                       lua_Number id, uint32_t kind, lua_Number size)
{
  uint32_t info;
  uintptr_t ct = heap_ctype_raw(&c->h, cts, (uint32_t)id, &info);
  if (ct == 0 || CT_KIND(info) != kind || vm_load_u32(ct + 4) != size)
    return fail(c, "cdata ctype",
                "C type %.0f is not of kind %u and size %.0f in a table of "
                "%u-byte types",
                id, kind, size, c->h.ct_size);
  return 1;
}

/* The cdata at stack index idx: its block is `want` bytes (at cd, or
** below it for a variable-length one), and the walk reads that size. */
static int check_cdata_block(struct hcalib *c, lua_State *T,
                             const struct heap_ctypes *ct, int idx,
                             lua_Number want, int var, const char *what)
{
  const struct heap_layout *h = &c->h;
  uintptr_t cd = (uintptr_t)lua_topointer(T, idx) - h->cd_size;
  uintptr_t at = cd;
  if (var)
    at = cd - vm_load_u16(cd - CDV_OFFSET);
  if (vm_load_u8(cd + h->base.gct) != GCT_CDATA ||
      ((vm_load_u8(cd + h->base.gct - 1) & CD_VAR) != 0) != var ||
      block(c, at) != (size_t)want || heap_cdata_size(h, ct, cd) != want)
    return fail(c, "cdata size",
                "%s: the allocator saw %zu bytes, the layout reads %llu, "
                "expected %.0f",
                what, block(c, at),
                (unsigned long long)heap_cdata_size(h, ct, cd), want);
  return 1;
}

/* Types made before counting: a scalar, a struct, a VLA and an attribute
** type (its record is CT_ATTRIB, resolved to int); then the objects of the
** first three, and the ids and the struct's size. */
static const char CDATA_CODE[] =
    "local ffi = ...\n"
    "local I, S = ffi.typeof('int64_t'), ffi.typeof('struct { double a; "
    "char b[21]; }')\n"
    "local V = ffi.typeof('int[?]')\n"
    "local A = ffi.typeof('int __attribute__((aligned(8)))')\n"
    "return function() return ffi.new(I), ffi.new(S), ffi.new(V, 7) end,\n"
    "  tonumber(I), tonumber(S), ffi.sizeof(S), tonumber(A)\n";

static int check_cdata(struct hcalib *c, lua_State *T)
{
  struct heap_layout *h = &c->h;
  uint8_t *zero = calloc(1, G_WINDOW);
  uintptr_t g = vm_load_ref(&h->base, (uintptr_t)T + h->base.L_glref);
  struct heap_ctypes cts;
  lua_Number sid, ssize;
  int ok;
  if (zero == NULL)
    return fail(c, "cdata", "out of memory");
  ok = find_ctype_state(c, T, zero);
  free(zero);
  if (!ok)
    return 0;
  if (!run(T, CDATA_CODE, 5))
    return fail(c, "cdata", "the FFI types cannot be made");
  sid = lua_tonumber(T, -3), ssize = lua_tonumber(T, -2);
  h->cd_ok = 1; /* For the walk's functions while checking. */
  ok = (heap_cdata_known(h, g, &cts) && cts.tab != 0) ||
       fail(c, "cdata ctype", "the C type table cannot be read");
  ok = ok && check_ctype(c, &cts, lua_tonumber(T, -4), CT_KIND_NUM, 8) &&
       check_ctype(c, &cts, sid, CT_KIND_STRUCT, ssize) &&
       check_ctype(c, &cts, lua_tonumber(T, -1), CT_KIND_NUM, 4);
  lua_pop(T, 4);
  if (ok) {
    start(c);
    ok = lua_pcall(T, 0, 3, 0) == 0;
    c->on = 0;
    ok = ok || fail(c, "cdata", "the FFI objects cannot be made");
  }
  ok = ok &&
       check_cdata_block(c, T, &cts, -3, h->cd_size + 8, 0, "an int64_t") &&
       check_cdata_block(c, T, &cts, -2, h->cd_size + ssize, 0, "a struct") &&
       check_cdata_block(c, T, &cts, -1, 8 + h->cd_size + 28, 1, "an int[7]");
  h->cd_ok = (uint8_t)ok;
  return ok;
}

/* ---- Learning --------------------------------------------------------- */

static int calibrate_in(lua_State *T)
{
  struct hcalib *c = lua_touserdata(T, 1);
  void (*openlibs)(lua_State *);
  *(void **)&openlibs = dlsym(RTLD_DEFAULT, "luaL_openlibs");
  if (openlibs != NULL)
    openlibs(T);
  lua_gc(T, LUA_GCSTOP, 0);
  c->orig = lua_getallocf(T, &c->orig_ud);
  lua_setallocf(T, count_alloc, c);
  c->ok = check_tvalue(c, T) && check_small_table(c, T) &&
          check_hash_table(c, T) && check_moved_array(c, T) &&
          check_string(c, T) && check_c_closure(c, T) &&
          check_lua_closure(c, T) && check_locals(c, T) &&
          check_userdata(c, T) && find_mainth(c, T);
  /* Without a verified FFI layout a snapshot is still written, with cdata
  ** sizes unknown (its header says so). */
  if (c->ok && !check_cdata(c, T))
    c->h.cd_ok = 0;
  c->on = 0;
  /* Without verified traces a snapshot is still written, without them
  ** (its header says why). */
  if (c->ok)
    heap_traces_learn(
        T, vm_load_ref(&c->h.base, (uintptr_t)T + c->h.base.L_glref), &c->h);
  lua_setallocf(T, c->orig, c->orig_ud);
  return 0;
}

static int calibrate(const struct vm_layout *base, struct heap_layout *out,
                     char *err, size_t errlen)
{
  lua_State *(*newstate)(void);
  struct hcalib *c;
  lua_State *T;
  int ok;
  *(void **)&newstate = dlsym(RTLD_DEFAULT, "luaL_newstate");
  if (newstate == NULL || (T = newstate()) == NULL) {
    snprintf(err, errlen,
             "check 'heap separate VM' failed: no VM of this build can be "
             "made to verify the heap layout in (luaL_newstate)");
    return 0;
  }
  if ((c = calloc(1, sizeof(*c))) == NULL) {
    lua_close(T);
    snprintf(err, errlen, "check 'memory' failed: out of memory");
    return 0;
  }
  c->h.base = *base;
  candidates(&c->h);
  c->err = err;
  c->errlen = errlen;
  if (lua_cpcall(T, calibrate_in, c) != 0) {
    snprintf(err, errlen,
             "check 'heap separate VM' failed: calibrating in it raised %s",
             lua_isstring(T, -1) ? lua_tostring(T, -1) : "an error");
    c->ok = 0;
  }
  lua_close(T);
  ok = c->ok;
  if (ok)
    *out = c->h;
  free(c);
  return ok;
}

static pthread_mutex_t learn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int done, attempts;
  struct heap_layout h;
  char error[300];
} learned;

#define LEARN_ATTEMPTS 3

/* What a verified layout must find in L's own VM. */
static int check_vm(lua_State *L, const struct heap_layout *h, char *err,
                    size_t errlen)
{
  uintptr_t g = vm_load_ref(&h->base, (uintptr_t)L + h->base.L_glref);
  uintptr_t main = vm_load_ref(&h->base, g + h->g_mainth);
  uintptr_t reg = (uintptr_t)lua_topointer(L, LUA_REGISTRYINDEX);
  if (!vm_is_gc(&h->base, 1, main, GCT_THREAD) ||
      vm_load_ref(&h->base, main + h->base.L_glref) != g) {
    snprintf(err, errlen,
             "check 'heap main thread' failed: g+%u is not a thread of "
             "this VM",
             h->g_mainth);
    return 0;
  }
  if (!vm_is_gc(&h->base, 1, reg, GCT_TAB) ||
      vm_load_ref(&h->base, (uintptr_t)L + h->L_env) !=
          (uintptr_t)lua_topointer(L, LUA_GLOBALSINDEX)) {
    snprintf(err, errlen,
             "check 'heap registry' failed: the registry is not a table or "
             "the thread's env is not its globals");
    return 0;
  }
  return 1;
}

int heap_layout_learn(lua_State *L, struct heap_layout *out, char *err,
                      size_t errlen)
{
  struct vm_layout base;
  int ok;
  if (!vm_learn_layout(L, &base, err, errlen))
    return 0;
  pthread_mutex_lock(&learn_lock);
  if (!learned.done && learned.attempts < LEARN_ATTEMPTS) {
    learned.attempts++;
    learned.done =
        calibrate(&base, &learned.h, learned.error, sizeof(learned.error));
  }
  ok = learned.done;
  if (ok)
    *out = learned.h;
  else
    snprintf(err, errlen, "%s", learned.error);
  pthread_mutex_unlock(&learn_lock);
  if (ok)
    out->base = base;
  return ok && check_vm(L, out, err, errlen);
}
