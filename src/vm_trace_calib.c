/*
** Calibration of compiled-code attribution (trace_lines.h).
**
** A chunk whose loop allocates on known lines (one of them in an inlined
** callee) is compiled in the calibration VM and run twice. The first run
** copies the native stack at each allocation made by a trace; then the
** trace objects are searched for the values jit.util gives of the same
** traces (tracemc: the machine code's address and size; traceinfo: the
** number of snapshots and constants; tracesnap: each snapshot's IR
** reference, slots and entries; traceir: the IR instructions), and the
** stack copies for the return address into the trace, which gives the
** stack adjustment. The function header op is read at the start of a
** prototype and checked with jit.util.funcbc. The second run, with a fresh
** chunk, resolves every such allocation with the layout found and must
** find the known lines and the inlined frame. J->prof_mode is found by
** what luaJIT_profile_start sets. Whatever fails leaves tl.ok = 0 and says
** why; the rest of the layout is not affected.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "trace_lines.h"
#include "vm_calib.h"

#define TLC_TRACES 12
#define TLC_SNAPS 48
#define TLC_ENTRIES 24
#define TLC_SAMPLES 8
#define TLC_WORDS 512
#define TLC_RESULTS 256
/* Events resolved by the known chunk's run (each must resolve right; the
** judge needs the table's and the inlined callee's), and call targets
** noted by a run. The built-ins' runs resolve up to TLC_RESULTS: their
** first events can come from a trace that shows one line alone (the
** string.format chunk's, on upstream-2026-gc64), the others later. */
#define TLC_KNOWN_EVENTS 24
#define TLC_TARGETS 16
/* Rounds of a known-answer loop that compiles it (LuaJIT's hotloop is
** 56), and of one whose traces are compiled already. */
#define TLC_COMPILE_ROUNDS 400
#define TLC_COMPILED_ROUNDS 400
#define TLC_WINDOW 160
#define TLC_MEMOS 32
#define TLC_MCODE_MAX (1u << 20) /* A trace's machine code, at most. */

/* The chunk. Each allocation the check expects is on a line marked with a
** tag; every allocation follows a store, after which the compiler takes a
** snapshot at the next line, so the resume point is the allocating line
** in either mode (no per-line snapshots needed). The callee is inlined. */
static const char known_chunk[] = "local keep = {0, 0, 0, 0, 0, 0, 0, 0}\n"
                                  "local function inner(box, i)\n"
                                  "  box[1] = i\n"
                                  "  local t = {i, i, i} --@inner\n"
                                  "  return t\n"
                                  "end\n"
                                  "local function run(n)\n"
                                  "  for i = 1, n do\n"
                                  "    keep[i % 8 + 1] = i\n"
                                  "    local a = {i, i} --@table\n"
                                  "    keep[i % 8 + 1] = a\n"
                                  "    local s = 'k' .. i --@concat\n"
                                  "    keep[i % 8 + 1] = s\n"
                                  "    local b = inner(keep, i) --@call\n"
                                  "    keep[i % 8 + 1] = b\n"
                                  "  end\n"
                                  "end\n"
                                  "local function outer(n)\n"
                                  "  run(n) --@outer\n"
                                  "  return true\n"
                                  "end\n"
                                  "return outer, inner, run\n";

/* The line of a tag in the chunk. */
static int tag_line(const char *tag)
{
  const char *at = strstr(known_chunk, tag), *p;
  int line = 1;
  if (at == NULL)
    return 0;
  for (p = known_chunk; p < at; p++)
    line += *p == '\n';
  return line;
}

struct tlc_sample {
  uint8_t g[CALIB_G_WINDOW]; /* global_State. */
  uintptr_t stack, limit;    /* The running thread's stack. */
  uint32_t traceno;
  uintptr_t cf, from; /* The copy holds [from, cf). */
  int nwords;
  uint64_t words[TLC_WORDS];
};

struct tlc_result {
  uint32_t traceno;
  int ok;
  /* From g->jit_base: the trace's base frame and the one below it. */
  uintptr_t base_pt, below_pt;
  uint32_t below_line;
  int exit; /* Made by an exit (J->parent, J->exitno). */
  struct tl_place place;
};

struct tlc_trace {
  uint32_t no;
  uintptr_t T, mcode;
  uint32_t szmcode, nk, nins;
  int nsnap, nsnap_read;
  uint8_t window[TLC_WINDOW];
  struct {
    uint16_t ref;
    uint8_t nslots, nent;
    uint32_t entry[TLC_ENTRIES];
  } snap[TLC_SNAPS];
  uint16_t ot[4]; /* Of the first IR instructions. */
  int nir;
  int spadjust;    /* Seen on the stack, or -1. */
  uint32_t maplen; /* At least the snapshot map's length. */
};

/* A place resolved in this run (TLC_RESOLVE, TLC_RESOLVE_BUILTIN), by its
** key. */
struct tlc_memo {
  uintptr_t T, ret;
  uint32_t traceno;
  int ok;
  struct tl_place place;
};

/* What the recording allocator does with an event of a trace in the
** current run (struct tlc's check). */
enum tlc_check {
  TLC_SAMPLE = 0,      /* Copy the native stack: nothing is known yet. */
  TLC_RESOLVE,         /* Resolve it (and exits) with the layout found. */
  TLC_TARGET,          /* Note the helper the trace's call went to. */
  TLC_RESOLVE_BUILTIN, /* Resolve it, with the built-in that helper names. */
  TLC_UNWIND           /* arm64: the trace's stack pointer, by the unwinder. */
};

struct tlc {
  struct calib *c;
  lua_Alloc orig;
  void *orig_ud;
  enum tlc_check check;
  int nsamples, nresults, dropped;
  int want_results;    /* Results this run resolves, at most TLC_RESULTS. */
  int want_bases;      /* ... with the frames below their trace (judged in the
                       ** known chunk's run alone). */
  int nmemo;           /* Emptied by each run. */
  int vmdef;           /* The stack index of jit.vmdef, or 0. */
  uintptr_t stack_end; /* In the calibration's own C frame. */
  uintptr_t g_end;     /* GG_State reads whole from g up to here. */
  int ntraces;
  int based;    /* The known-answer run found the frames below its traces. */
  int ntargets; /* Call targets of trace allocations (TLC_TARGET). */
  int nsps;     /* arm64: stack pointers the C unwinder found (TLC_UNWIND). */
  /* The arrays, from here on, are not cleared: an entry is written whole
  ** before its count covers it (then only the pages used are touched). */
  struct tlc_memo memo[TLC_MEMOS];
  struct tlc_sample samples[TLC_SAMPLES];
  struct tlc_result results[TLC_RESULTS];
  struct tlc_trace traces[TLC_TRACES];
  uintptr_t targets[TLC_TARGETS];
  struct {
    uintptr_t adj; /* The C frame less JLOOP's adjustment and the sp. */
    uint8_t window[TLC_WINDOW]; /* Of the trace found. */
  } sps[TLC_SAMPLES];
};

static void tl_fail(struct vm_trace_layout *tl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tl_fail(struct vm_trace_layout *tl, const char *fmt, ...)
{
  va_list ap;
  if (tl->why[0] != '\0')
    return;
  tl->ok = 0;
  va_start(ap, fmt);
  vsnprintf(tl->why, sizeof(tl->why), fmt, ap);
  va_end(ap);
}

/* ---- The runs ----------------------------------------------------------- */

static void take_stack(struct tlc *t, uint32_t traceno, uintptr_t low)
{
  const struct vm_layout *lay = &t->c->lay;
  struct tlc_sample *s;
  uintptr_t L, cf, from;
  if (t->nsamples >= TLC_SAMPLES ||
      !vm_ref(lay, 1, t->c->g + lay->g_cur_L, &L) ||
      !vm_ptr(1, L + lay->L_cframe, &cf))
    return;
  cf &= ~(uintptr_t)3;
  from = cf - 8 * TLC_WORDS;
  if (from <= low)
    from = (low + 8) & ~(uintptr_t)7;
  if (cf <= from || (cf & 7) != 0)
    return;
  s = &t->samples[t->nsamples];
  {
    struct vm_thread th;
    if (!vm_current_thread(lay, 1, t->c->g + lay->g_cur_L, &th) ||
        !safe_read(t->c->g, s->g, sizeof(s->g)))
      return;
    s->stack = th.stack;
    s->limit = th.limit;
  }
  s->traceno = traceno;
  s->cf = cf;
  s->from = from;
  s->nwords = (int)((cf - from) / 8);
  if (safe_read(from, s->words, cf - from))
    t->nsamples++;
}

/* The trace's base frame (at g->jit_base as found) and its caller. */
static void base_frames(struct tlc *t, struct tlc_result *r)
{
  const struct vm_layout *lay = &t->c->lay;
  struct vm_thread th;
  uintptr_t frame, below, fn;
  intptr_t link;
  int varg;
  if (lay->tl.g_jit_base == 0 ||
      !vm_current_thread(lay, 1, t->c->g + lay->g_cur_L, &th) ||
      !tl_jit_base(lay, 1, t->c->g, &th, &frame))
    return;
  frame -= TVALUE_SIZE;
  if ((fn = vm_frame_func(lay, 1, frame)) == 0 ||
      !vm_frame_link(lay, 1, frame, &link))
    return;
  r->base_pt = vm_func_proto(lay, 1, fn);
  below = vm_frame_below(lay, 1, &th, frame, link, &varg);
  if (below == 0 || (fn = vm_frame_func(lay, 1, below)) == 0)
    return;
  r->below_pt = vm_func_proto(lay, 1, fn);
  if (r->below_pt != 0)
    vm_pc_line(lay, 1, r->below_pt, vm_caller_pc(lay, 1, frame, link),
               &r->below_line);
}

/* The memo of (T, traceno, ret), or a free one with T = 0 to fill, or
** NULL if full. A place depends on nothing else: a trace's snapshots, IR
** and prototypes do not change while it lives, and a run frees no trace
** (the hook caches places on the same key). */
static struct tlc_memo *tlc_memo_of(struct tlc *t, uintptr_t T,
                                    uint32_t traceno, uintptr_t ret)
{
  int i;
  for (i = 0; i < t->nmemo; i++)
    if (t->memo[i].T == T && t->memo[i].traceno == traceno &&
        t->memo[i].ret == ret)
      return &t->memo[i];
  if (t->nmemo == TLC_MEMOS)
    return NULL;
  t->memo[t->nmemo].T = 0;
  return &t->memo[t->nmemo++];
}

static void resolve_now(struct tlc *t, uint32_t traceno, uintptr_t low)
{
  const struct vm_layout *lay = &t->c->lay;
  struct tlc_memo *m;
  struct tlc_result *r;
  uintptr_t T, ret, snap, mcode;
  int sn;
  if (t->nresults >= t->want_results) {
    t->dropped++;
    return;
  }
  r = &t->results[t->nresults++];
  memset(r, 0, sizeof(*r));
  T = tl_locate(lay, 1, t->c->g, &traceno, low, &ret, &mcode);
  r->traceno = traceno;
  if (T == 0)
    return;
  if ((m = tlc_memo_of(t, T, traceno, ret)) != NULL && m->T == T) {
    r->ok = m->ok;
    r->place = m->place;
  } else {
    sn = tl_snapshot_at(lay, 1, T, tl_mcode_ofs(ret, mcode), &snap);
    r->ok = sn >= 0 && tl_snapshot_place(lay, 1, T, snap, sn, &r->place);
    if (r->ok && t->check == TLC_RESOLVE_BUILTIN)
      tl_builtin_frame(lay, 1, T, snap, sn, tl_call_target(1, ret, mcode),
                       &r->place);
    if (m != NULL) {
      m->T = T;
      m->traceno = traceno;
      m->ret = ret;
      m->ok = r->ok;
      m->place = r->place;
    }
  }
  if (t->want_bases)
    base_frames(t, r);
}

/* An exit restoring a sunk object: the place of snapshot J->exitno of
** trace J->parent. J->exitno follows J->parent in every known build; the
** place the check expects proves it. */
static void resolve_exit(struct tlc *t)
{
  const struct vm_layout *lay = &t->c->lay;
  struct tlc_result *r;
  uintptr_t T, snap;
  uint32_t parent, exitno;
  uint16_t nsnap;
  if (!lay->exit_ok || t->nresults >= t->want_results)
    return;
  r = &t->results[t->nresults++];
  memset(r, 0, sizeof(*r));
  r->exit = 1;
  if (!vm_u32(1, t->c->g + lay->g_parent, &parent) ||
      !vm_u32(1, t->c->g + lay->g_parent + 4, &exitno))
    return;
  r->traceno = parent;
  T = vm_trace_object(lay, 1, t->c->g, parent);
  if (!vm_is_gc(lay, 1, T, GCT_TRACE) ||
      !vm_u16(1, T + lay->tl.tr_nsnap, &nsnap) || exitno >= nsnap ||
      !vm_ptr(1, T + lay->tl.tr_snap, &snap))
    return;
  r->ok = tl_snapshot_place(lay, 1, T, snap, (int)exitno, &r->place);
}

/* The helper a trace's allocation went through. */
static void note_target(struct tlc *t, uint32_t traceno, uintptr_t low)
{
  const struct vm_layout *lay = &t->c->lay;
  uintptr_t T, ret = 0, mcode = 0;
  if (t->ntargets >= TLC_TARGETS)
    return;
  T = tl_locate(lay, 1, t->c->g, &traceno, low, &ret, &mcode);
  t->targets[t->ntargets++] = T != 0 ? tl_call_target(1, ret, mcode) : 0;
}

#if defined(__aarch64__)
/* arm64: the trace's stack pointer at its helper call, as the C unwinder
** finds it, and the C frame it runs on. */
static void unwound_sp(struct tlc *t)
{
  const struct vm_layout *lay = &t->c->lay;
  uintptr_t cf, ret, mcode, sp, T;
  uint32_t traceno = 0;
  if (t->nsps >= TLC_SAMPLES ||
      (T = tl_unwind_trace(lay, 1, t->c->g, NULL, 0, 0, &traceno, &ret, &mcode,
                           &sp, &cf)) == 0 ||
      !safe_read(T, t->sps[t->nsps].window, TLC_WINDOW))
    return;
  t->sps[t->nsps].adj = cf - TL_JLOOP_ADJUST - sp;
  t->nsps++;
}
#endif

/* Compiled code runs under its trace's number on x86-64, under 0 on
** arm64 (its VM stores no trace number). */
#if defined(__aarch64__)
#define IN_TRACE(st) ((st) == 0)
#else
#define IN_TRACE(st) ((st) > 0)
#endif

/* Whether an event of compiled code is still wanted by the run: each
** kind of run keeps a bounded number of them. */
static int tlc_wants(const struct tlc *t)
{
  switch (t->check) {
  case TLC_SAMPLE:
    return t->nsamples < TLC_SAMPLES;
  case TLC_TARGET:
    return t->ntargets < TLC_TARGETS;
#if defined(__aarch64__)
  case TLC_UNWIND:
    return t->nsps < TLC_SAMPLES;
#endif
  default:
    return t->nresults < t->want_results;
  }
}

/* The end of lua_State's fields that the layout knows. */
static uintptr_t thread_fields_end(const struct vm_layout *lay)
{
  uint16_t o[] = {lay->L_glref,    lay->L_base,  lay->L_top,
                  lay->L_maxstack, lay->L_stack, lay->L_cframe};
  uintptr_t end = (uintptr_t)lay->L_stacksize + 4;
  size_t i;
  for (i = 0; i < sizeof(o) / sizeof(o[0]); i++)
    if ((uintptr_t)o[i] + 8 > end)
      end = (uintptr_t)o[i] + 8;
  return end;
}

#if !defined(__aarch64__)
/* The end of the fields of GCtrace that the layouts know (all of them
** within the object: LuaJIT allocates a trace's IR and snapshots after
** it, in the same block). */
static uintptr_t trace_fields_end(const struct vm_layout *lay)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t o[][2] = {
      {lay->gct, 1},        {lay->tr_traceno, 2}, {lay->tr_startpt, 8},
      {lay->tr_startpc, 8}, {tl->tr_mcode, 8},    {tl->tr_szmcode, 4},
      {tl->tr_spadjust, 2}, {tl->tr_nsnap, 2},    {tl->tr_snap, 8},
      {tl->tr_snapmap, 8},  {tl->tr_nsnapmap, 4}, {tl->tr_ir, 8},
      {tl->tr_nk, 4}};
  uintptr_t end = 0;
  size_t i;
  for (i = 0; i < sizeof(o) / sizeof(o[0]); i++)
    if (o[i][0] + o[i][1] > end)
      end = o[i][0] + o[i][1];
  return end;
}
#endif

/* The end of the fields of GG_State (global_State, then jit_State) the
** layout knows, from g. */
static uintptr_t g_fields_end(const struct vm_layout *lay)
{
  uintptr_t end = CALIB_G_WINDOW;
  if (lay->trace_ok && (uintptr_t)lay->g_sizetrace + 4 > end)
    end = (uintptr_t)lay->g_sizetrace + 4;
  if (lay->trace_ok && (uintptr_t)lay->g_trace + 8 > end)
    end = (uintptr_t)lay->g_trace + 8;
  if (lay->exit_ok && (uintptr_t)lay->g_parent + 8 > end)
    end = (uintptr_t)lay->g_parent + 8;
  return end;
}

/* What a batch may read in place, being readable until the allocator
** returns: this thread's stack from the hook's frame up to the
** calibration's (the chunks run on it); the VM's global state up to the
** last field of jit_State the layout verified (GG_State, one block: read
** whole at the start of this calibration); the trace array; the running
** lua_State's known fields and its Lua stack, found as the hook finds
** them, through offsets verified before this calibration. */
static void tlc_trust(const struct tlc *t, int batch, uintptr_t low, int32_t st)
{
  const struct vm_layout *lay = &t->c->lay;
  struct vm_thread th;
  if (!batch)
    return;
  uintptr_t arr;
  uint32_t size;
  safe_read_batch_trust(batch, low, t->stack_end);
  safe_read_batch_trust(batch, t->c->g, t->g_end);
  /* J->trace, as the layout verified it: while the VM stands still it
  ** holds J->sizetrace entries (a growth of it is in the allocator before
  ** J is updated). Each event reads it to find its trace. */
  if (vm_ptr(0, t->c->g + lay->g_trace, &arr) &&
      vm_u32(0, t->c->g + lay->g_sizetrace, &size) && arr != 0 && size <= 65536)
    safe_read_batch_trust(batch, arr, arr + (uintptr_t)size * lay->ref_size);
  if (vm_current_thread(lay, 0, t->c->g + lay->g_cur_L, &th)) {
    safe_read_batch_trust(batch, th.L, th.L + thread_fields_end(lay));
    safe_read_batch_trust(batch, th.stack, th.limit);
  }
#if !defined(__aarch64__)
  /* In the runs that check (the trace's fields are found, checked against
  ** jit.util.tracemc for every trace): the running trace's machine code,
  ** mapped while the trace lives. */
  if (t->check != TLC_SAMPLE && IN_TRACE(st)) {
    uintptr_t T = vm_trace_object(lay, 1, t->c->g, (uint32_t)st), mcode;
    uint32_t size;
    /* Its GCtrace, alive while it runs: the fields found, in place. */
    if (T != 0 && (T & 7) == 0)
      safe_read_batch_trust(batch, T, T + trace_fields_end(lay));
    if (vm_is_gc(lay, 1, T, GCT_TRACE) &&
        vm_ptr(1, T + lay->tl.tr_mcode, &mcode) &&
        vm_u32(1, T + lay->tl.tr_szmcode, &size) && mcode != 0 &&
        size <= TLC_MCODE_MAX)
      safe_read_batch_trust(batch, mcode, mcode + size);
  }
#else
  (void)st;
#endif
}

/* The VM stands still in its allocator: the reads of one call are one
** batch. The state is read as the hook reads it: the layout's calibration
** verified g and g->vmstate before this one starts. */
static void *tlc_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  struct tlc *t = ud;
  int32_t st = 0;
  uintptr_t low = (uintptr_t)__builtin_frame_address(0);
  int batch;
  if (nsize != 0)
    vm_i32(0, t->c->g + t->c->lay.g_vmstate, &st);
  if (nsize == 0 ||
      !(IN_TRACE(st) ||
        (t->check != TLC_SAMPLE && st < 0 && (uint32_t)~st < VM_STATE_SLOTS &&
         t->c->lay.state_class[~st] == STATE_EXIT)))
    return t->orig(t->orig_ud, ptr, osize, nsize);
  if (!tlc_wants(t)) {
    t->dropped += t->check != TLC_SAMPLE;
    return t->orig(t->orig_ud, ptr, osize, nsize);
  }
  batch = safe_read_batch_begin();
  tlc_trust(t, batch, low, st);
  if (!IN_TRACE(st))
    resolve_exit(t);
  else if (t->check == TLC_TARGET)
    note_target(t, (uint32_t)st, low);
#if defined(__aarch64__)
  else if (t->check == TLC_UNWIND)
    unwound_sp(t);
#endif
  else if (t->check != TLC_SAMPLE)
    resolve_now(t, (uint32_t)st, low);
  else
    take_stack(t, (uint32_t)st, low);
  safe_read_batch_end(batch);
  return t->orig(t->orig_ud, ptr, osize, nsize);
}

/* Loads the chunk and runs its loop under the recording allocator; leaves
** the chunk's three functions on the stack (outer, inner, run). */
static int run_known(lua_State *L, struct tlc *t, const char *name)
{
  int top = lua_gettop(L), status;
  if (luaL_loadbuffer(L, known_chunk, sizeof(known_chunk) - 1, name) != 0 ||
      lua_pcall(L, 0, 3, 0) != 0 || !lua_isfunction(L, -3)) {
    lua_settop(L, top);
    return 0;
  }
  lua_pushvalue(L, -3);
  lua_pushinteger(L, TLC_COMPILE_ROUNDS);
  t->orig = lua_getallocf(L, &t->orig_ud);
  t->nmemo = 0;
  lua_setallocf(L, tlc_alloc, t);
  status = lua_pcall(L, 1, 0, 0);
  lua_setallocf(L, t->orig, t->orig_ud);
  if (status != 0) {
    lua_settop(L, top);
    return 0;
  }
  return 1;
}

/* ---- What jit.util says ------------------------------------------------- */

/* Calls jit.util.NAME(args...) (ju at index `ju`); leaves `nres` results. */
static int ju_call(lua_State *L, int ju, const char *name, int nargs, int nres)
{
  lua_getfield(L, ju, name);
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1 + nargs);
    return 0;
  }
  lua_insert(L, -1 - nargs);
  if (lua_pcall(L, nargs, nres, 0) != 0) {
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

static int ju_field(lua_State *L, int idx, const char *key, lua_Number *out)
{
  int ok;
  lua_getfield(L, idx, key);
  ok = lua_isnumber(L, -1);
  *out = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return ok;
}

/* Gathers jit.util's view of trace n. */
static int ju_trace(lua_State *L, int ju, struct tlc *t, uint32_t n)
{
  const struct vm_layout *lay = &t->c->lay;
  struct tlc_trace *tr = &t->traces[t->ntraces];
  lua_Number v;
  int i, k, top = lua_gettop(L);
  memset(tr, 0, sizeof(*tr));
  tr->no = n;
  tr->spadjust = -1;
  tr->T = vm_trace_object(lay, 1, t->c->g, n);
  if (tr->T == 0 || !vm_is_gc(lay, 1, tr->T, GCT_TRACE))
    return 0;
  lua_pushinteger(L, n);
  if (!ju_call(L, ju, "traceinfo", 1, 1) || !lua_istable(L, -1))
    goto fail;
  if (!ju_field(L, -1, "nexit", &v))
    goto fail;
  tr->nsnap = (int)v;
  if (!ju_field(L, -1, "nk", &v))
    goto fail;
  tr->nk = (uint32_t)(TL_REF_BIAS - (int32_t)v);
  if (!ju_field(L, -1, "nins", &v))
    goto fail;
  tr->nins = (uint32_t)v;
  lua_settop(L, top);
  lua_pushinteger(L, n);
  if (!ju_call(L, ju, "tracemc", 1, 3) || !lua_isstring(L, -3) ||
      !lua_isnumber(L, -2))
    goto fail;
  tr->szmcode = (uint32_t)lua_objlen(L, -3);
  tr->mcode = (uintptr_t)lua_tonumber(L, -2);
  lua_settop(L, top);
  tr->nsnap_read = tr->nsnap < TLC_SNAPS ? tr->nsnap : TLC_SNAPS;
  for (i = 0; i < tr->nsnap_read; i++) {
    lua_pushinteger(L, n);
    lua_pushinteger(L, i);
    if (!ju_call(L, ju, "tracesnap", 2, 1) || !lua_istable(L, -1))
      goto fail;
    lua_rawgeti(L, -1, 0);
    tr->snap[i].ref = (uint16_t)(lua_tointeger(L, -1) + TL_REF_BIAS);
    lua_rawgeti(L, -2, 1);
    tr->snap[i].nslots = (uint8_t)lua_tointeger(L, -1);
    lua_pop(L, 2);
    for (k = 0; k < 255; k++) {
      int32_t e;
      lua_rawgeti(L, -1, k + 2);
      e = (int32_t)lua_tointeger(L, -1);
      lua_pop(L, 1);
      if ((uint32_t)e == 0xff000000u)
        break;
      if (k < TLC_ENTRIES)
        tr->snap[i].entry[k] = (uint32_t)e;
    }
    tr->snap[i].nent = (uint8_t)k;
    lua_settop(L, top);
  }
  for (i = 0; i < 4 && (uint32_t)i + 1 < tr->nins; i++) {
    lua_pushinteger(L, n);
    lua_pushinteger(L, i + 1);
    if (!ju_call(L, ju, "traceir", 2, 2) || !lua_isnumber(L, -1))
      goto fail;
    tr->ot[i] = (uint16_t)lua_tointeger(L, -1);
    tr->nir = i + 1;
    lua_settop(L, top);
  }
  if (!safe_read(tr->T, tr->window, sizeof(tr->window)))
    goto fail;
  t->ntraces++;
  return 1;
fail:
  lua_settop(L, top);
  return 0;
}

/* ---- Searches ----------------------------------------------------------- */

static uint64_t win_u64(const uint8_t *w, size_t o)
{
  uint64_t v;
  memcpy(&v, w + o, 8);
  return v;
}
static uint32_t win_u32(const uint8_t *w, size_t o)
{
  uint32_t v;
  memcpy(&v, w + o, 4);
  return v;
}
static uint16_t win_u16(const uint8_t *w, size_t o)
{
  uint16_t v;
  memcpy(&v, w + o, 2);
  return v;
}

/* The value trace tr must show at a field, for each kind of field. */
enum tl_want { WANT_MCODE, WANT_SZMCODE, WANT_NSNAP, WANT_NK, WANT_SPADJUST };

static int want_value(const struct tlc_trace *tr, int w, uint64_t *v)
{
  switch (w) {
  case WANT_MCODE:
    *v = tr->mcode;
    return 1;
  case WANT_SZMCODE:
    *v = tr->szmcode;
    return 1;
  case WANT_NSNAP:
    *v = (uint64_t)tr->nsnap;
    return 1;
  case WANT_NK:
    *v = tr->nk;
    return 1;
  case WANT_SPADJUST:
    *v = (uint64_t)tr->spadjust;
    return tr->spadjust >= 0;
  default:
    return 0;
  }
}

/* The offset in GCtrace where every trace shows its wanted value, at
** `size` bytes: the hint (the offset of known builds) if it fits, else the
** lowest; -1 if none. */
static int find_field(const struct tlc *t, int w, size_t size, int hint)
{
  int o, best = -1, i, seen;
  /* Past the GC header's link (a native pointer with GC64, 4 bytes
  ** without). */
  for (o = size == 8 ? 8 : 4; o + (int)size <= TLC_WINDOW; o += (int)size) {
    int fits = 1;
    seen = 0;
    for (i = 0; i < t->ntraces && fits; i++) {
      const struct tlc_trace *tr = &t->traces[i];
      uint64_t v, got;
      if (!want_value(tr, w, &v))
        continue;
      seen++;
      got = size == 8   ? win_u64(tr->window, (size_t)o)
            : size == 4 ? win_u32(tr->window, (size_t)o)
                        : win_u16(tr->window, (size_t)o);
      fits = got == v;
    }
    if (!fits || seen == 0)
      continue;
    if (o == hint)
      return o;
    if (best < 0)
      best = o;
  }
  return best;
}

/* SnapShot: its size and the offsets of ref, nslots and nent, checked on
** every snapshot of every trace; the array at `snapo` in GCtrace. */
static int snap_layout_fits(const struct tlc *t, int snapo, int size, int ro,
                            int so, int no)
{
  int i, k;
  uint8_t buf[TLC_SNAPS * 16];
  for (i = 0; i < t->ntraces; i++) {
    const struct tlc_trace *tr = &t->traces[i];
    uintptr_t p = (uintptr_t)win_u64(tr->window, (size_t)snapo);
    if (tr->nsnap_read == 0)
      continue;
    if (p == 0 || !safe_read(p, buf, (size_t)tr->nsnap_read * (size_t)size))
      return 0;
    for (k = 0; k < tr->nsnap_read; k++) {
      const uint8_t *s = buf + k * size;
      if (win_u16(s, (size_t)ro) != tr->snap[k].ref ||
          s[so] != tr->snap[k].nslots || s[no] != tr->snap[k].nent)
        return 0;
    }
  }
  return 1;
}

static int overlaps(int a, int alen, int b, int blen)
{
  return a < b + blen && b < a + alen;
}

/* The snapshot map's array and each snapshot's offset into it: the entries
** jit.util gives are there. */
static int map_fits(const struct tlc *t, int mapo, int mofs)
{
  const struct vm_trace_layout *tl = &t->c->lay.tl;
  int i, k, e;
  for (i = 0; i < t->ntraces; i++) {
    const struct tlc_trace *tr = &t->traces[i];
    uintptr_t map = (uintptr_t)win_u64(tr->window, (size_t)mapo),
              snap = (uintptr_t)win_u64(tr->window, tl->tr_snap);
    for (k = 0; k < tr->nsnap_read; k++) {
      uint32_t ofs, got[TLC_ENTRIES];
      int n = tr->snap[k].nent < TLC_ENTRIES ? tr->snap[k].nent : TLC_ENTRIES;
      if (!vm_u32(1, snap + (uintptr_t)k * tl->snap_size + (uintptr_t)mofs,
                  &ofs) ||
          (n > 0 && !safe_read(map + 4 * (uintptr_t)ofs, got, 4 * (size_t)n)))
        return 0;
      for (e = 0; e < n; e++)
        if (got[e] != tr->snap[k].entry[e])
          return 0;
    }
  }
  return 1;
}

/* Machine code offsets: 0 for the first snapshot, never decreasing, inside
** the machine code, and not all 0. */
static int mcofs_fits(const struct tlc *t, int o)
{
  const struct vm_trace_layout *tl = &t->c->lay.tl;
  int i, k, moved = 0;
  for (i = 0; i < t->ntraces; i++) {
    const struct tlc_trace *tr = &t->traces[i];
    uintptr_t snap = (uintptr_t)win_u64(tr->window, tl->tr_snap);
    uint16_t prev = 0, v;
    for (k = 0; k < tr->nsnap_read; k++) {
      if (!vm_u16(1, snap + (uintptr_t)k * tl->snap_size + (uintptr_t)o, &v) ||
          (k == 0 && v != 0) || v < prev || v >= tr->szmcode)
        return 0;
      moved = moved || v != 0;
      prev = v;
    }
  }
  return moved;
}

static int find_snapshots(struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  int gc64 = t->c->lay.gc64, o, size, ro, so, no, found = 0, mo;
  static const int sizes[] = {12, 8, 16};
  int hint_snap = gc64 ? 48 : 32, hint_map = gc64 ? 56 : 40, i;
  for (o = 8; o + 8 <= TLC_WINDOW && !found; o += 8) {
    int oo = o == 8 ? hint_snap : (o == hint_snap ? 8 : o);
    for (i = 0; i < 3 && !found; i++) {
      size = sizes[i];
      for (ro = 0; ro + 2 <= size && !found; ro += 2)
        for (so = 0; so < size && !found; so++)
          for (no = 0; no < size && !found; no++)
            if (so != no && !overlaps(so, 1, ro, 2) &&
                !overlaps(no, 1, ro, 2) &&
                snap_layout_fits(t, oo, size, ro, so, no)) {
              found = 1;
              tl->tr_snap = (uint8_t)oo;
              tl->snap_size = (uint8_t)size;
              tl->snap_nent = (uint8_t)no;
              tl->snap_ref = (uint8_t)ro;
              if (size < 12) {
                tl->no_mcofs = tl->why[0] == '\0';
                tl_fail(tl,
                        "no snapshot offsets in this build (before 2021-03): "
                        "SnapShot is %d bytes, without mcofs",
                        size);
                return 0;
              }
              /* The map's offset: a 32-bit field apart from the others. */
              {
                int mofs = -1, k;
                for (k = 0; k + 4 <= size && mofs < 0; k += 4) {
                  if (overlaps(k, 4, ro, 2) || overlaps(k, 4, so, 1) ||
                      overlaps(k, 4, no, 1))
                    continue;
                  for (mo = 8; mo + 8 <= TLC_WINDOW; mo += 8) {
                    int mm = mo == 8 ? hint_map : (mo == hint_map ? 8 : mo);
                    if (mm == oo)
                      continue;
                    if (map_fits(t, mm, k)) {
                      mofs = k;
                      tl->tr_snapmap = (uint8_t)mm;
                      break;
                    }
                  }
                }
                if (mofs < 0) {
                  tl_fail(tl, "the snapshot map does not hold what "
                              "jit.util.tracesnap gives");
                  return 0;
                }
                tl->snap_mapofs = (uint8_t)mofs;
                for (k = 0; k + 2 <= size; k += 2) {
                  if (overlaps(k, 2, mofs, 4) || overlaps(k, 2, ro, 2) ||
                      overlaps(k, 2, so, 1) || overlaps(k, 2, no, 1))
                    continue;
                  if (mcofs_fits(t, k)) {
                    tl->snap_mcofs = (uint8_t)k;
                    return 1;
                  }
                }
                tl->no_mcofs = tl->why[0] == '\0';
                tl_fail(tl,
                        "no snapshot offsets in this build (before 2021-03): "
                        "no field of SnapShot (%d bytes) holds machine code "
                        "offsets",
                        size);
                return 0;
              }
            }
    }
  }
  tl_fail(tl, "no array in GCtrace holds the snapshots jit.util.tracesnap "
              "gives");
  return 0;
}

#if !defined(__aarch64__)
/* The stack adjustment each stack copy shows: the return address into the
** trace's machine code nearest the C frame, after a call instruction. */
static void find_spadjust(struct tlc *t)
{
  int i, j, k;
  for (i = 0; i < t->nsamples; i++) {
    const struct tlc_sample *s = &t->samples[i];
    struct tlc_trace *tr = NULL;
    for (j = 0; j < t->ntraces; j++)
      if (t->traces[j].no == s->traceno)
        tr = &t->traces[j];
    if (tr == NULL)
      continue;
    for (k = s->nwords - 1; k >= 0; k--) {
      uintptr_t w = (uintptr_t)s->words[k], slot = s->from + 8 * (uintptr_t)k;
      uint8_t b[5];
      intptr_t adj;
      if (w < tr->mcode + 5 || w >= tr->mcode + tr->szmcode ||
          !safe_read(w - 5, b, 5) ||
          !(b[0] == 0xe8 || (b[3] == 0xff && b[4] == 0xd0)))
        continue;
      adj = (intptr_t)(s->cf - TL_JLOOP_ADJUST - 8 - slot);
      if (adj >= 0 && adj < 65536 && (tr->spadjust < 0 || tr->spadjust == adj))
        tr->spadjust = (int)adj;
      else
        tr->spadjust = -2; /* Two answers: not this trace. */
      break;
    }
  }
}
#endif

/* IR instructions: the u16 op and type of the first ones are where traceir
** says. */
static int find_ir(struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  int hint = t->c->lay.gc64 ? 32 : 16, o, i, k;
  for (o = 8; o + 8 <= TLC_WINDOW; o += 8) {
    int oo = o == 8 ? hint : (o == hint ? 8 : o), fits = 1, seen = 0;
    for (i = 0; i < t->ntraces && fits; i++) {
      const struct tlc_trace *tr = &t->traces[i];
      uintptr_t ir = (uintptr_t)win_u64(tr->window, (size_t)oo);
      for (k = 0; k < tr->nir && fits; k++) {
        uint16_t ot;
        fits =
            ir != 0 &&
            vm_u16(1, ir + TL_IRINS_SIZE * ((uintptr_t)TL_REF_BIAS + 1 + k) + 4,
                   &ot) &&
            ot == tr->ot[k];
        seen++;
      }
    }
    if (fits && seen > 0) {
      tl->tr_ir = (uint8_t)oo;
      return 1;
    }
  }
  tl_fail(tl, "no pointer in GCtrace leads to the IR jit.util.traceir gives");
  return 0;
}

static int set_field(struct vm_trace_layout *tl, uint8_t *f, int o,
                     const char *name)
{
  if (o < 0) {
    tl_fail(tl, "no field of GCtrace holds the %s jit.util gives", name);
    return 0;
  }
  *f = (uint8_t)o;
  return 1;
}

static int find_trace_fields(struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  int gc64 = t->c->lay.gc64, i, last;
  if (!set_field(tl, &tl->tr_mcode,
                 find_field(t, WANT_MCODE, 8, gc64 ? 88 : 64),
                 "machine code address") ||
      !set_field(tl, &tl->tr_szmcode,
                 find_field(t, WANT_SZMCODE, 4, gc64 ? 84 : 60),
                 "machine code size") ||
      !set_field(tl, &tl->tr_nsnap, find_field(t, WANT_NSNAP, 2, gc64 ? 10 : 6),
                 "number of snapshots") ||
      !set_field(tl, &tl->tr_nk, find_field(t, WANT_NK, 4, gc64 ? 40 : 24),
                 "lowest IR constant") ||
      !find_snapshots(t) || !find_ir(t))
    return 0;
  /* The map's length: the last snapshot's entries and its PC (with FR2 a
  ** 64-bit word, else one entry: the loop's last snapshot has no frame). */
  for (i = 0; i < t->ntraces; i++) {
    struct tlc_trace *tr = &t->traces[i];
    uintptr_t snap = (uintptr_t)win_u64(tr->window, tl->tr_snap);
    uint32_t ofs;
    last = tr->nsnap - 1;
    if (last < 0 || last >= TLC_SNAPS ||
        !vm_u32(1, snap + (uintptr_t)last * tl->snap_size + tl->snap_mapofs,
                &ofs))
      continue;
    tr->maplen = ofs + tr->snap[last].nent + (t->c->lay.fr2 ? 2u : 1u);
  }
  {
    int o, hint = gc64 ? 44 : 28, best = -1;
    for (o = 8; o + 4 <= TLC_WINDOW; o += 4) {
      int fits = 1;
      for (i = 0; i < t->ntraces && fits; i++)
        fits =
            win_u32(t->traces[i].window, (size_t)o) >= t->traces[i].maplen &&
            win_u32(t->traces[i].window, (size_t)o) <= t->traces[i].maplen + 16;
      if (fits && (o == hint || best < 0))
        best = o;
      if (fits && o == hint)
        break;
    }
    if (!set_field(tl, &tl->tr_nsnapmap, best, "snapshot map length"))
      return 0;
  }
  return 1;
}

/* GCtrace's stack adjustment: on x86-64 from the stack copies, on arm64
** from a run whose helper calls the C unwinder follows to the trace (its
** machine code now known). */
static int find_stack_adjust(lua_State *L, struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  int hint = t->c->lay.gc64 ? 102 : 78;
#if defined(__aarch64__)
  /* The u16 of GCtrace that holds each sample's adjustment: the usual
  ** offset, else the only one. */
  int top = lua_gettop(L), o, i, found = -1, fits_at = 0;
  t->check = TLC_UNWIND;
  t->nsps = 0;
  run_known(L, t, "=memprof.calibration.lines");
  lua_settop(L, top);
  for (o = 4; o + 2 <= TLC_WINDOW && t->nsps > 0; o += 2) {
    int fits = 1;
    for (i = 0; i < t->nsps && fits; i++)
      fits = t->sps[i].adj < 65536 &&
             win_u16(t->sps[i].window, (size_t)o) == t->sps[i].adj;
    if (fits && o == hint) {
      found = o;
      fits_at = 1;
      break;
    }
    if (fits) {
      found = o;
      fits_at++;
    }
  }
  return set_field(tl, &tl->tr_spadjust, fits_at == 1 ? found : -1,
                   "stack adjustment (seen by the C unwinder)");
#else
  /* The stack copies are searched in C alone: one batch. */
  int batch = safe_read_batch_begin();
  (void)L;
  find_spadjust(t);
  safe_read_batch_end(batch);
  return set_field(tl, &tl->tr_spadjust, find_field(t, WANT_SPADJUST, 2, hint),
                   "stack adjustment (seen on the stack)");
#endif
}

/* g->jit_base: the reference of global_State that points into the running
** thread's stack at every allocation made by a trace, and is NULL now (no
** trace runs). The known-answer run proves it (the frames below its
** traces); else those frames are left out. */
static void find_jit_base(struct tlc *t)
{
  const struct vm_layout *lay = &t->c->lay;
  size_t o, r = lay->ref_size;
  int i;
  for (o = r; o + r <= CALIB_G_WINDOW; o += r) {
    int fits = t->nsamples > 0;
    uintptr_t now;
    for (i = 0; i < t->nsamples && fits; i++) {
      const struct tlc_sample *s = &t->samples[i];
      uintptr_t v =
          lay->gc64 ? (uintptr_t)win_u64(s->g, o) : (uintptr_t)win_u32(s->g, o);
      fits = v > s->stack && v < s->limit && ((v - s->stack) & 7) == 0;
    }
    if (fits && vm_ref(lay, 1, t->c->g + o, &now) && now == 0) {
      t->c->lay.tl.g_jit_base = (uint16_t)o;
      return;
    }
  }
}

/* ---- The function header op --------------------------------------------- */

static int find_header_op(lua_State *L, struct tlc *t, int ju)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_layout *lay = &t->c->lay;
  static const char code[] = "return function(a) return a end, "
                             "function(...) return ... end";
  uintptr_t pt[2];
  uint8_t op[2];
  int top = lua_gettop(L), i;
  if (luaL_loadbuffer(L, code, sizeof(code) - 1, "=memprof.calibration.ops") ||
      lua_pcall(L, 0, 2, 0) != 0) {
    lua_settop(L, top);
    tl_fail(tl, "the header op probe does not run");
    return 0;
  }
  for (i = 0; i < 2; i++) {
    pt[i] = vm_func_proto(lay, 1, (uintptr_t)lua_topointer(L, top + 1 + i));
    if (pt[i] == 0 || !vm_u8(1, pt[i] + lay->pt_size, &op[i])) {
      lua_settop(L, top);
      tl_fail(tl, "a function's bytecode is unreadable");
      return 0;
    }
    /* jit.util.funcbc(f, 0): the header instruction. */
    lua_pushvalue(L, top + 1 + i);
    lua_pushinteger(L, 0);
    if (!ju_call(L, ju, "funcbc", 2, 1) || !lua_isnumber(L, -1) ||
        (lua_tointeger(L, -1) & 0xff) != op[i]) {
      lua_settop(L, top);
      tl_fail(tl, "the op at a prototype's start differs from "
                  "jit.util.funcbc(f, 0)");
      return 0;
    }
    lua_pop(L, 1);
  }
  lua_settop(L, top);
  /* FUNCF, then IFUNCF, JFUNCF, FUNCV: a vararg function's is 3 above. */
  if (op[1] != op[0] + 3) {
    tl_fail(tl,
            "the header ops of fixed and vararg functions (%u, %u) are "
            "not FUNCF and FUNCV",
            op[0], op[1]);
    return 0;
  }
  tl->bc_funcf = op[0];
  return 1;
}

/* ---- A store right after an inlined call -------------------------------- */

/* The ops of table stores, MOV and returns, from jit.util.funcbc on
** functions whose bytecode is known; then lj_tab_newkey: the one helper
** every allocation of a loop that only adds keys goes through, one of
** jit.util.ircalladdr's. Without them the places stay as found. */
static void find_store_after_return(lua_State *L, struct tlc *t, int ju)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  static const char code[] =
      "return function(t, k, v) t[k] = v t.x = v t[1] = v end, "
      "function(a) local b = a return b end, "
      "function(a, b) return a, b end";
  static const char adds[] = "local grow = {} "
                             "for i = 1, 300 do grow[i + 0.5] = i end "
                             "return grow";
  static const struct {
    int fn, pc;
  } at[] = {{1, 1}, {1, 2}, {1, 3}, {1, 4}, {2, 1}, {2, 2}, {3, 3}};
  uint8_t op[7];
  int top = lua_gettop(L), i, status;
  uintptr_t target = 0;
  if (luaL_loadbuffer(L, code, sizeof(code) - 1, "=memprof.calibration.ops") ||
      lua_pcall(L, 0, 3, 0) != 0) {
    lua_settop(L, top);
    return;
  }
  for (i = 0; i < 7; i++) {
    lua_pushvalue(L, top + at[i].fn);
    lua_pushinteger(L, at[i].pc);
    if (!ju_call(L, ju, "funcbc", 2, 1) || !lua_isnumber(L, -1)) {
      lua_settop(L, top);
      return;
    }
    op[i] = (uint8_t)(lua_tointeger(L, -1) & 0xff);
    lua_pop(L, 1);
  }
  lua_settop(L, top);
  /* (`return a, b` moves a and b to the frame's top first: RET is the
  ** third op.) Seven ops, all different, none a function header. */
  for (i = 0; i < 7; i++) {
    int j;
    if (op[i] >= tl->bc_funcf)
      return;
    for (j = 0; j < i; j++)
      if (op[j] == op[i])
        return;
  }
  tl->bc_tsetv = op[0];
  tl->bc_tsets = op[1];
  tl->bc_tsetb = op[2];
  tl->bc_ret0 = op[3];
  tl->bc_mov = op[4];
  tl->bc_ret1 = op[5];
  tl->bc_ret = op[6];
  t->check = TLC_TARGET;
  t->ntargets = 0;
  if (luaL_loadbuffer(L, adds, sizeof(adds) - 1, "=memprof.calibration.adds"))
    return;
  t->orig = lua_getallocf(L, &t->orig_ud);
  t->nmemo = 0;
  lua_setallocf(L, tlc_alloc, t);
  status = lua_pcall(L, 0, 1, 0);
  lua_setallocf(L, t->orig, t->orig_ud);
  lua_settop(L, top);
  for (i = 0; i < t->ntargets; i++)
    if (t->targets[i] == 0 || (target != 0 && t->targets[i] != target))
      return;
    else
      target = t->targets[i];
  if (status != 0 || t->ntargets < 3)
    return;
  /* One of the IR's call targets. */
  for (i = 0; i < 256; i++) {
    lua_pushinteger(L, i);
    if (!ju_call(L, ju, "ircalladdr", 1, 1) || !lua_isnumber(L, -1)) {
      lua_settop(L, top);
      return;
    }
    if ((uintptr_t)lua_tonumber(L, -1) == target) {
      lua_settop(L, top);
      tl->newkey = target;
      tl->newkey_ok = 1;
      return;
    }
    lua_pop(L, 1);
  }
  lua_settop(L, top);
}

/* ---- table.concat's frame ---------------------------------------------- */

/* jit.vmdef (the build's names of IR ops and IR calls), loaded from
** package.path as require would find it, without registering it. Leaves
** it on the stack, or returns 0 with the stack as it was. */
static int load_vmdef(lua_State *L)
{
  int top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "package");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "searchpath");
      lua_pushstring(L, "jit.vmdef");
      lua_getfield(L, -3, "path");
      if (lua_isfunction(L, -3) && lua_isstring(L, -1) &&
          lua_pcall(L, 2, 1, 0) == 0 && lua_isstring(L, -1) &&
          luaL_loadfile(L, lua_tostring(L, -1)) == 0 &&
          lua_pcall(L, 0, 1, 0) == 0 && lua_istable(L, -1)) {
        lua_replace(L, top + 1);
        lua_settop(L, top + 1);
        return 1;
      }
    }
  }
  lua_settop(L, top);
  return 0;
}

/* Pushes jit.vmdef, loaded once by the calibration (t->vmdef: its index,
** 0 if it could not be). */
static int push_vmdef(lua_State *L, const struct tlc *t)
{
  if (t->vmdef == 0)
    return 0;
  lua_pushvalue(L, t->vmdef);
  return 1;
}

/* The number of `name` in the list of names vmdef[field] (6 characters a
** name: irnames, bcnames), or -1. */
static int vmdef_number(lua_State *L, int vmdef, const char *field,
                        const char *name)
{
  const char *names;
  size_t len, n = strlen(name), i;
  int op = -1;
  lua_getfield(L, vmdef, field);
  names = lua_tolstring(L, -1, &len);
  for (i = 0; names != NULL && i + 6 <= len && op < 0; i += 6)
    if (memcmp(names + i, name, n) == 0 &&
        (n == 6 || strspn(names + i + n, " ") >= 6 - n))
      op = (int)(i / 6);
  lua_pop(L, 1);
  return op < 256 ? op : -1;
}

/* The number of IR op `name` in vmdef.irnames, or -1. */
static int vmdef_op(lua_State *L, int vmdef, const char *name)
{
  return vmdef_number(L, vmdef, "irnames", name);
}

/* The id of IR call `name` in vmdef.ircall (0-based), or -1. */
static int vmdef_call(lua_State *L, int vmdef, const char *name)
{
  int id, found = -1;
  lua_getfield(L, vmdef, "ircall");
  for (id = 0; id < 1024 && lua_istable(L, -1); id++) {
    const char *s;
    lua_rawgeti(L, -1, id);
    s = lua_tostring(L, -1);
    lua_pop(L, 1);
    if (s == NULL)
      break;
    if (strcmp(s, name) == 0)
      found = id;
  }
  lua_pop(L, 1);
  return found;
}

/* jit.util.traceir(n, ref): op, op1, op2 (refs unbiased). */
static int ju_ir(lua_State *L, int ju, uint32_t n, int ref, int *o, int *op1,
                 int *op2)
{
  lua_pushinteger(L, n);
  lua_pushinteger(L, ref);
  if (!ju_call(L, ju, "traceir", 2, 4))
    return 0;
  if (!lua_isnumber(L, -3)) {
    lua_pop(L, 4);
    return 0;
  }
  *o = (int)(lua_tointeger(L, -3) >> 8);
  *op1 = (int)lua_tointeger(L, -2);
  *op2 = (int)lua_tointeger(L, -1);
  lua_pop(L, 4);
  return 1;
}

/* A trace of the concat chunk as jit.util shows it: a BUFSTR whose op1 is
** the CALLL of lj_buf_puttab whose first argument is the BUFSTR's op2, a
** BUFHDR; its mode is the reset one. The same instructions are read from
** the trace's IR in memory, proving the operands' offsets. */
static int concat_shape(lua_State *L, int ju, struct tlc *t, uint32_t n)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_layout *lay = &t->c->lay;
  uintptr_t T = vm_trace_object(lay, 1, t->c->g, n), ir;
  int ref, o, op1, op2, co, c1, c2, k, a;
  lua_Number nins;
  if (T == 0 || !vm_ptr(1, T + tl->tr_ir, &ir) || ir == 0)
    return 0;
  lua_pushinteger(L, n);
  if (!ju_call(L, ju, "traceinfo", 1, 1) || !lua_istable(L, -1) ||
      !ju_field(L, -1, "nins", &nins)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pop(L, 1);
  for (ref = 1; ref < (int)nins && ref < 4096; ref++) {
    uint16_t m1, m2;
    uint8_t mo;
    if (!ju_ir(L, ju, n, ref, &o, &op1, &op2))
      return 0;
    if (o != tl->ir_bufstr || op1 <= 0 || op2 <= 0 ||
        !ju_ir(L, ju, n, op1, &co, &c1, &c2) || co != tl->ir_calll ||
        c2 != tl->puttab_id)
      continue;
    for (a = c1, k = 0; k < 8 && a != op2 && a > 0; k++) {
      int ao, a2;
      if (!ju_ir(L, ju, n, a, &ao, &a, &a2) || ao != tl->ir_carg)
        return 0;
    }
    if (a != op2 || !ju_ir(L, ju, n, op2, &co, &c1, &c2) || co != tl->ir_bufhdr)
      return 0;
    tl->bufhdr_reset = (uint16_t)c2;
    /* The same in memory. */
    if (!tl_ir_ins(1, ir, TL_REF_BIAS + (uint32_t)ref, &mo, &m1, &m2) ||
        mo != tl->ir_bufstr || m1 != TL_REF_BIAS + op1 ||
        m2 != TL_REF_BIAS + op2 ||
        !tl_concat_string(tl, 1, ir, TL_REF_BIAS + (uint32_t)ref, m1, m2))
      return 0;
    return 1;
  }
  return 0;
}

/* The chunk: table.concat (given) on one line, a concatenation on another,
** each after a store (so a snapshot is taken at its line). Each run makes
** strings of its own (from `base`): an interned one is not allocated. */
static const char concat_chunk[] = "local concat, base, rounds = ...\n"
                                   "local t, keep = {0, 'b'}, {0, 0, 0, 0}\n"
                                   "local other = {0, 0, 0, 0}\n"
                                   "for i = base, base + rounds - 1 do\n"
                                   "  t[1] = i\n"
                                   "  local s = concat(t, ',') --@join\n"
                                   "  keep[i % 4 + 1] = s\n"
                                   "  local c = 'k' .. i --@cat\n"
                                   "  other[i % 4 + 1] = c\n"
                                   "end\n";

/* Runs a known-answer chunk (the function at index `chunk`), given the
** built-in at index fn, under the recording allocator: the first (`run`
** 1) or the second run. Each run is of a chunk loaded afresh: a second run
** through the first's traces left string.format's frame unproven in some
** processes (7 of 26 environments of OpenResty's luajit2). Returns the
** chunk's prototype, or 0. */
static uintptr_t run_builtin_chunk(lua_State *L, struct tlc *t, int fn, int run,
                                   int chunk)
{
  uintptr_t pt;
  int top = lua_gettop(L), status;
  pt = vm_func_proto(&t->c->lay, 1, (uintptr_t)lua_topointer(L, chunk));
  if (pt == 0)
    return 0;
  lua_pushvalue(L, chunk);
  lua_pushvalue(L, fn);
  lua_pushinteger(L, run == 1 ? 1000000 : 2000000);
  /* The first run compiles (the loop is hot after 56 rounds); the second
  ** runs in its traces. */
  lua_pushinteger(L, run == 1 ? TLC_COMPILE_ROUNDS : TLC_COMPILED_ROUNDS);
  t->orig = lua_getallocf(L, &t->orig_ud);
  t->nmemo = 0;
  lua_setallocf(L, tlc_alloc, t);
  status = lua_pcall(L, 3, 0, 0);
  lua_setallocf(L, t->orig, t->orig_ud);
  lua_settop(L, top);
  return status == 0 ? pt : 0;
}

/* Of a known-answer chunk's events in compiled code, run with the frames
** found: those on the line marked `mark` have the frame of built-in ffid
** above the chunk's, those of the line marked --@cat (a concatenation)
** none, and no other gets one. */
static int builtin_known(const struct tlc *t, uintptr_t pt, const char *chunk,
                         const char *mark, uint8_t ffid)
{
  int i, framed_n = 0, cats = 0, l_mark = 0, l_cat = 0, line = 1;
  size_t mlen = strlen(mark);
  const char *p;
  for (p = chunk; *p != '\0'; p++) {
    if (strncmp(p, mark, mlen) == 0)
      l_mark = line;
    if (strncmp(p, "--@cat", 6) == 0)
      l_cat = line;
    line += *p == '\n';
  }
  for (i = 0; i < t->nresults; i++) {
    const struct tl_place *pl = &t->results[i].place;
    int framed = pl->nframes >= 2 && pl->frames[0].ffid == ffid &&
                 pl->frames[0].obj == BUILTIN_ADDR(ffid) &&
                 pl->frames[1].obj == pt && pl->frames[1].ffid == FFID_LUA;
    if (!t->results[i].ok || pl->pt != pt)
      return 0;
    if ((int)pl->line == l_mark && framed)
      framed_n++;
    else if ((int)pl->line == l_cat && pl->frames[0].ffid == FFID_LUA)
      cats++;
    else if (pl->frames[0].ffid != FFID_LUA)
      return 0;
  }
  return framed_n >= 3 && cats >= 3;
}

/* Pushes a known-answer chunk of `size` bytes as a function named `name`,
** or nil if it does not load. */
static void push_chunk(lua_State *L, const char *chunk, size_t size,
                       const char *name)
{
  if (luaL_loadbuffer(L, chunk, size, name) != 0) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

static int concat_known(const struct tlc *t, uintptr_t pt)
{
  return builtin_known(t, pt, concat_chunk, "--@join",
                       t->c->lay.tl.concat_ffid);
}

/* table.concat's frame on events of its string: the IR names from
** jit.vmdef, checked against this build (the helper's address that the
** trace's allocations call, the chain's shape jit.util shows, the same
** IR in memory), then a known-answer run. Without them no frame is
** added. */
static void find_builtin_frames(lua_State *L, struct tlc *t, int ju)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_layout *lay = &t->c->lay;
  int top = lua_gettop(L), vmdef, fn, ops[4], tostr_id, puttab_id, i, shaped;
  int chunk;
  uint32_t n, size;
  uintptr_t pt;
  uint8_t ffid;
  if (!push_vmdef(L, t))
    return;
  vmdef = lua_gettop(L);
  ops[0] = vmdef_op(L, vmdef, "BUFHDR");
  ops[1] = vmdef_op(L, vmdef, "BUFSTR");
  ops[2] = vmdef_op(L, vmdef, "CALLL");
  ops[3] = vmdef_op(L, vmdef, "CARG");
  tostr_id = vmdef_call(L, vmdef, "lj_buf_tostr");
  puttab_id = vmdef_call(L, vmdef, "lj_buf_puttab");
  for (i = 0; i < 4; i++)
    if (ops[i] < 0)
      goto done;
  if (tostr_id < 0 || puttab_id < 0)
    goto done;
  tl->ir_bufhdr = (uint8_t)ops[0];
  tl->ir_bufstr = (uint8_t)ops[1];
  tl->ir_calll = (uint8_t)ops[2];
  tl->ir_carg = (uint8_t)ops[3];
  tl->puttab_id = (uint16_t)puttab_id;
  lua_pushinteger(L, tostr_id);
  if (!ju_call(L, ju, "ircalladdr", 1, 1) || !lua_isnumber(L, -1))
    goto done;
  tl->buf_tostr = (uintptr_t)lua_tonumber(L, -1);
  lua_pushinteger(L, puttab_id);
  if (!ju_call(L, ju, "ircalladdr", 1, 1) || !lua_isnumber(L, -1))
    goto done;
  tl->buf_puttab = (uintptr_t)lua_tonumber(L, -1);
  /* table.concat itself, a built-in. */
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (!lua_istable(L, -1))
    goto done;
  lua_getfield(L, -1, "table");
  if (!lua_istable(L, -1))
    goto done;
  lua_getfield(L, -1, "concat");
  fn = lua_gettop(L);
  if (!lua_isfunction(L, fn) ||
      !vm_u8(1, (uintptr_t)lua_topointer(L, fn) + lay->fn_ffid, &ffid) ||
      ffid <= FFID_C)
    goto done;
  tl->concat_ffid = ffid;
  push_chunk(L, concat_chunk, sizeof(concat_chunk) - 1,
             "=memprof.calibration.concat");
  chunk = lua_gettop(L);
  /* Every allocation of the chunk's trace goes to lj_buf_tostr. */
  t->check = TLC_TARGET;
  t->ntargets = 0;
  if (run_builtin_chunk(L, t, fn, 1, chunk) == 0 || t->ntargets < 3)
    goto done;
  for (i = 0; i < t->ntargets; i++)
    if (t->targets[i] != tl->buf_tostr)
      goto done;
  if (!vm_u32(1, t->c->g + lay->g_sizetrace, &size))
    goto done;
  for (n = 1, shaped = 0; n < size && n < 65536 && !shaped; n++)
    if (vm_trace_object(lay, 1, t->c->g, n) != 0)
      shaped = concat_shape(L, ju, t, n);
  if (!shaped)
    goto done;
  tl->concat_ok = 1;
  t->check = TLC_RESOLVE_BUILTIN;
  t->nresults = t->dropped = 0;
  t->want_results = TLC_RESULTS;
  push_chunk(L, concat_chunk, sizeof(concat_chunk) - 1,
             "=memprof.calibration.concat");
  pt = run_builtin_chunk(L, t, fn, 2, lua_gettop(L));
  if (pt == 0 || !concat_known(t, pt))
    tl->concat_ok = 0;
done:
  lua_settop(L, top);
}

/* ---- string.format's frame --------------------------------------------- */

/* The chunk: string.format (given) on one line, a concatenation on
** another, each stored (so a snapshot is taken at its line); `%5.1f`
** calls lj_strfmt_putfnum. Each run makes strings of its own. */
static const char format_chunk[] = "local format, base, rounds = ...\n"
                                   "local keep, other = {0, 0, 0, 0}, "
                                   "{0, 0, 0, 0}\n"
                                   "for i = base, base + rounds - 1 do\n"
                                   "  keep[i % 4 + 1] = format('%5.1f', i + "
                                   "0.5) --@fmt\n"
                                   "  other[i % 4 + 1] = 'k' .. i --@cat\n"
                                   "end\n";

static int format_known(const struct tlc *t, uintptr_t pt)
{
  return builtin_known(t, pt, format_chunk, "--@fmt", t->c->lay.tl.format_ffid);
}

/* string.format's frame on events of its string: the IR call ids of the
** helpers only its recorder emits and IR BUFPUT, by their names in
** jit.vmdef (table.concat's frame, proven first, verified the reads of a
** buffer's IR), then a known-answer run. Without them string.format gets
** no frame. */
static void find_format_frame(lua_State *L, struct tlc *t)
{
  static const char *const helpers[TL_FORMAT_IDS] = {
      "lj_strfmt_putfnum_int", "lj_strfmt_putfnum_uint", "lj_strfmt_putfnum",
      "lj_strfmt_putfstr",     "lj_strfmt_putfchar",     "lj_strfmt_putquoted"};
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_layout *lay = &t->c->lay;
  int top = lua_gettop(L), vmdef, fn, i, bufput, chunk;
  uintptr_t pt;
  uint8_t ffid;
  if (!tl->concat_ok || !push_vmdef(L, t))
    return;
  vmdef = lua_gettop(L);
  bufput = vmdef_op(L, vmdef, "BUFPUT");
  if (bufput < 0)
    goto done;
  tl->ir_bufput = (uint8_t)bufput;
  for (i = 0; i < TL_FORMAT_IDS; i++) {
    int id = vmdef_call(L, vmdef, helpers[i]);
    if (id < 0)
      goto done;
    tl->format_ids[i] = (uint16_t)id;
  }
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (!lua_istable(L, -1))
    goto done;
  lua_getfield(L, -1, "string");
  if (!lua_istable(L, -1))
    goto done;
  lua_getfield(L, -1, "format");
  fn = lua_gettop(L);
  if (!lua_isfunction(L, fn) ||
      !vm_u8(1, (uintptr_t)lua_topointer(L, fn) + lay->fn_ffid, &ffid) ||
      ffid <= FFID_C || ffid == tl->concat_ffid)
    goto done;
  tl->format_ffid = ffid;
  push_chunk(L, format_chunk, sizeof(format_chunk) - 1,
             "=memprof.calibration.format");
  chunk = lua_gettop(L);
  /* A first run compiles the loop; the second is resolved. */
  t->check = TLC_TARGET;
  t->ntargets = 0;
  if (run_builtin_chunk(L, t, fn, 1, chunk) == 0)
    goto done;
  tl->format_ok = 1;
  t->check = TLC_RESOLVE_BUILTIN;
  t->nresults = t->dropped = 0;
  t->want_results = TLC_RESULTS;
  push_chunk(L, format_chunk, sizeof(format_chunk) - 1,
             "=memprof.calibration.format");
  pt = run_builtin_chunk(L, t, fn, 2, lua_gettop(L));
  if (pt == 0 || !format_known(t, pt))
    tl->format_ok = 0;
done:
  lua_settop(L, top);
}

/* ---- An event after an inlined call returned ---------------------------- */

/* The number of bytecode op `name` in vmdef.bcnames, or -1. */
static int vmdef_bc(lua_State *L, int vmdef, const char *name)
{
  return vmdef_number(L, vmdef, "bcnames", name);
}

/* The kinds of the bytecode ops walked (trace_lines.h, TL_BC_*), by their
** names in jit.vmdef: those that run straight on without calling, those
** that run straight on but may call (a helper, a built-in, a metamethod),
** calls, tail calls and returns. Every other op stops a walk. */
static const char *const quiet_ops[] = {"MOV",  "KSTR", "KSHORT", "KNUM",
                                        "KPRI", "KNIL", "UGET"};
static const char *const effect_ops[] = {
    "NOT",   "UNM",   "LEN",   "ADDVN", "SUBVN", "MULVN", "DIVVN", "MODVN",
    "ADDNV", "SUBNV", "MULNV", "DIVNV", "MODNV", "ADDVV", "SUBVV", "MULVV",
    "DIVVV", "MODVV", "POW",   "CAT",   "TNEW",  "TDUP",  "GGET",  "GSET",
    "TGETV", "TGETS", "TGETB", "TSETV", "TSETS", "TSETB"};
static const char *const call_ops[] = {"CALL", "CALLM"};
static const char *const tail_ops[] = {"CALLT", "CALLMT"};
static const char *const return_ops[] = {"RET", "RET0", "RET1", "RETM"};

static int set_kinds(lua_State *L, int vmdef, struct vm_trace_layout *tl,
                     const char *const *names, size_t n, uint8_t kind)
{
  size_t i;
  for (i = 0; i < n; i++) {
    int op = vmdef_bc(L, vmdef, names[i]);
    if (op < 0 || tl->bc_kind[op] != TL_BC_STOP)
      return 0;
    tl->bc_kind[op] = kind;
  }
  return 1;
}

/* The ops' kinds from jit.vmdef, which must name this build's ops: those
** jit.util.funcbc showed (the function header, MOV, table stores and
** returns) have the same numbers there. Then PROF, the IR op of a
** per-line snapshot. Without them no place moves this way. */
static void find_after_return(lua_State *L, struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  int top = lua_gettop(L), vmdef, prof, loop, newref;
  memset(tl->bc_kind, TL_BC_STOP, sizeof(tl->bc_kind));
  tl->ir_loop = tl->ir_newref = 0xff;
  if (tl->bc_mov == 0 || !push_vmdef(L, t))
    return;
  vmdef = lua_gettop(L);
  if (vmdef_bc(L, vmdef, "FUNCF") != tl->bc_funcf ||
      vmdef_bc(L, vmdef, "MOV") != tl->bc_mov ||
      vmdef_bc(L, vmdef, "TSETV") != tl->bc_tsetv ||
      vmdef_bc(L, vmdef, "TSETS") != tl->bc_tsets ||
      vmdef_bc(L, vmdef, "TSETB") != tl->bc_tsetb ||
      vmdef_bc(L, vmdef, "RET0") != tl->bc_ret0 ||
      vmdef_bc(L, vmdef, "RET1") != tl->bc_ret1 ||
      vmdef_bc(L, vmdef, "RET") != tl->bc_ret)
    goto done;
  prof = vmdef_op(L, vmdef, "PROF");
  if (!set_kinds(L, vmdef, tl, quiet_ops,
                 sizeof(quiet_ops) / sizeof(quiet_ops[0]), TL_BC_QUIET) ||
      !set_kinds(L, vmdef, tl, effect_ops,
                 sizeof(effect_ops) / sizeof(effect_ops[0]), TL_BC_EFFECT) ||
      !set_kinds(L, vmdef, tl, call_ops, sizeof(call_ops) / sizeof(call_ops[0]),
                 TL_BC_CALL) ||
      !set_kinds(L, vmdef, tl, tail_ops, sizeof(tail_ops) / sizeof(tail_ops[0]),
                 TL_BC_TAILCALL) ||
      !set_kinds(L, vmdef, tl, return_ops,
                 sizeof(return_ops) / sizeof(return_ops[0]), TL_BC_RETURN))
    goto done;
  /* (Without PROF no trace has per-line snapshots: 0xff is no op.) */
  tl->ir_prof = prof < 0 ? 0xff : (uint8_t)prof;
  loop = vmdef_op(L, vmdef, "LOOP");
  newref = vmdef_op(L, vmdef, "NEWREF");
  tl->ir_loop = loop < 0 || newref < 0 ? 0xff : (uint8_t)loop;
  tl->ir_newref = loop < 0 || newref < 0 ? 0xff : (uint8_t)newref;
  tl->after_ok = 1;
done:
  if (!tl->after_ok)
    memset(tl->bc_kind, TL_BC_STOP, sizeof(tl->bc_kind));
  lua_settop(L, top);
}

/* ---- trace_lines 'walk' ------------------------------------------------- */

/* The helper of IR call `name`: its address (jit.util.ircalladdr), or 0. */
static uintptr_t ircall_address(lua_State *L, int ju, int vmdef,
                                const char *name)
{
  int id = vmdef_call(L, vmdef, name);
  uintptr_t a = 0;
  if (id < 0)
    return 0;
  lua_pushinteger(L, id);
  if (!ju_call(L, ju, "ircalladdr", 1, 1))
    return 0;
  if (lua_isnumber(L, -1))
    a = (uintptr_t)lua_tonumber(L, -1);
  lua_pop(L, 1);
  return a;
}

/* What the walk of trace_lines 'walk' needs beyond find_after_return's
** ops (whose numbers there prove jit.vmdef's): the table helpers of TNEW
** and TDUP, the ops TNEW, TDUP, CAT, GSET, JMP, LOOP and UGET, and the
** conditional branches, one run of ops from ISLT to ISF. Without them
** 'walk' is refused. */
static void find_walk(lua_State *L, struct tlc *t, int ju)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  static const char *const names[] = {"TNEW", "TDUP", "CAT", "GSET",
                                      "JMP",  "LOOP", "UGET"};
  static const char *const branches[] = {
      "ISLT",  "ISGE",  "ISLE",  "ISGT",  "ISEQV", "ISNEV", "ISEQS", "ISNES",
      "ISEQN", "ISNEN", "ISEQP", "ISNEP", "ISTC",  "ISFC",  "IST",   "ISF"};
  int top = lua_gettop(L), vmdef, op[7], i, first;
  if (!tl->after_ok || !tl->newkey_ok || !push_vmdef(L, t))
    return;
  vmdef = lua_gettop(L);
  for (i = 0; i < 7; i++)
    if ((op[i] = vmdef_bc(L, vmdef, names[i])) < 0)
      goto done;
  first = vmdef_bc(L, vmdef, branches[0]);
  for (i = 0; i < 16; i++)
    if (first < 0 || vmdef_bc(L, vmdef, branches[i]) != first + i)
      goto done;
  tl->bc_islt = (uint8_t)first;
  tl->bc_isf = (uint8_t)(first + 15);
  tl->tab_new1 = ircall_address(L, ju, vmdef, "lj_tab_new1");
  tl->tab_new_ah = ircall_address(L, ju, vmdef, "lj_tab_new_ah");
  tl->tab_dup = ircall_address(L, ju, vmdef, "lj_tab_dup");
  if (tl->tab_new1 == 0 || tl->tab_new_ah == 0 || tl->tab_dup == 0)
    goto done;
  tl->bc_tnew = (uint8_t)op[0];
  tl->bc_tdup = (uint8_t)op[1];
  tl->bc_cat = (uint8_t)op[2];
  tl->bc_gset = (uint8_t)op[3];
  tl->bc_jmp = (uint8_t)op[4];
  tl->bc_loop = (uint8_t)op[5];
  tl->bc_uget = (uint8_t)op[6];
  tl->walk_ok = 1;
done:
  lua_settop(L, top);
}

/* ---- The known-answer run ----------------------------------------------- */

/* One known-answer run: 1 if it proved the layout, 0 if a read went wrong
** (after tl_fail), -1 if it saw too little (the loop's recording aborted
** and the callee got a trace of its own, say): worth another run. */
/* The known-answer run's events, judged (no Lua code runs: one batch of
** reads). */
static int judge_known(struct tlc *t, uintptr_t run_pt, uintptr_t inner_pt,
                       uintptr_t outer_pt)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_layout *lay = &t->c->lay;
  int i, hits[3] = {0, 0, 0};
  int l_table = tag_line("--@table"), l_concat = tag_line("--@concat"),
      l_inner = tag_line("--@inner"), l_call = tag_line("--@call");
  int based = 0, traced = 0, l_outer = tag_line("--@outer");
  for (i = 0; i < t->nresults; i++) {
    const struct tlc_result *r = &t->results[i];
    const struct tl_place *p = &r->place;
    uint32_t cl = 0;
    if (!r->ok) {
      tl_fail(tl,
              "an allocation by trace %u could not be resolved to its "
              "snapshot (known-answer run)",
              (unsigned)r->traceno);
      return 0;
    }
    if (p->pt == run_pt && (int)p->line == l_table)
      hits[0]++;
    else if (p->pt == run_pt && (int)p->line == l_concat)
      hits[1]++;
    else if (p->pt == inner_pt && (int)p->line == l_inner && p->nframes >= 2 &&
             p->frames[1].obj == run_pt &&
             vm_pc_line(lay, 1, run_pt, p->frames[1].pc, &cl) &&
             (int)cl == l_call)
      hits[2]++;
    else if (!(p->pt == inner_pt && (int)p->line == l_inner &&
               p->nframes == 1)) {
      /* (The callee in a trace of its own has no caller frame.) */
      tl_fail(tl,
              "an allocation of the known-answer run resolved to line %u "
              "(%d frames), not to a known line",
              (unsigned)p->line, p->nframes);
      return 0;
    }
  }
  /* The interpreter frames below the trace: every event of a trace has
  ** run's base frame, called from outer's line, or (the callee in a trace
  ** of its own) inner's, called from run's. (An exit's event is the
  ** restore of a sunk object, made while no trace runs: not one.) */
  for (i = 0; i < t->nresults; i++) {
    const struct tlc_result *r = &t->results[i];
    traced += !r->exit;
    based += !r->exit && ((r->base_pt == run_pt && r->below_pt == outer_pt &&
                           (int)r->below_line == l_outer) ||
                          (r->base_pt == inner_pt && r->below_pt == run_pt &&
                           (int)r->below_line == l_call));
  }
  t->based = traced > 0 && based == traced;
  /* A build that does not compile the concatenation leaves it to the
  ** interpreter: only the table and the inlined callee must be seen. */
  return hits[0] > 0 && hits[2] > 0 ? 1 : -1;
}

static int known_run(lua_State *L, struct tlc *t)
{
  const struct vm_layout *lay = &t->c->lay;
  int top = lua_gettop(L), batch, r;
  uintptr_t run_pt, inner_pt, outer_pt;
  t->check = TLC_RESOLVE;
  t->nresults = t->dropped = 0;
  t->want_results = TLC_KNOWN_EVENTS;
  t->want_bases = 1;
  if (!run_known(L, t, "=memprof.calibration.lines")) {
    t->want_bases = 0;
    lua_settop(L, top);
    tl_fail(&t->c->lay.tl, "the known-answer chunk does not run");
    return 0;
  }
  run_pt = vm_func_proto(lay, 1, (uintptr_t)lua_topointer(L, -1));
  inner_pt = vm_func_proto(lay, 1, (uintptr_t)lua_topointer(L, -2));
  outer_pt = vm_func_proto(lay, 1, (uintptr_t)lua_topointer(L, -3));
  lua_settop(L, top);
  t->want_bases = 0;
  batch = safe_read_batch_begin();
  r = judge_known(t, run_pt, inner_pt, outer_pt);
  safe_read_batch_end(batch);
  return r;
}

static int check_known(lua_State *L, struct tlc *t)
{
  int attempt, r = -1;
  for (attempt = 0; attempt < 3 && r < 0; attempt++)
    r = known_run(L, t);
  if (r < 0)
    tl_fail(&t->c->lay.tl,
            "no allocation of the known-answer run resolved to the table's "
            "line, or to the inlined callee's line with its caller's frame "
            "(%d events in traces)",
            t->nresults);
  return r > 0;
}

/* A loop on one line whose trace sinks its tables and exits every 40
** rounds, which makes the sunk table: the exit's place is that line. */
static const char exit_chunk[] =
    "local keep = {} "
    "for i = 1, 400 do local t = {i, i} "
    "if i % 40 == 0 then keep[#keep + 1] = t end end "
    "return keep";

/* Exits: every object an exit makes resolves to the loop's line, in the
** loop's function. Sinking may be off (no exit makes anything): then
** exits stay at the trace's start. */
static void check_exits(lua_State *L, struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_layout *lay = &t->c->lay;
  int top = lua_gettop(L), i, seen, status, attempt;
  uintptr_t pt;
  for (attempt = 0; attempt < 3 && !tl->exit_ok; attempt++) {
    t->check = TLC_RESOLVE;
    t->nresults = t->dropped = seen = 0;
    t->want_results = TLC_RESULTS;
    if (luaL_loadbuffer(L, exit_chunk, sizeof(exit_chunk) - 1,
                        "=memprof.calibration.exits") != 0) {
      lua_settop(L, top);
      return;
    }
    pt = vm_func_proto(lay, 1, (uintptr_t)lua_topointer(L, -1));
    t->orig = lua_getallocf(L, &t->orig_ud);
    t->nmemo = 0;
    lua_setallocf(L, tlc_alloc, t);
    status = lua_pcall(L, 0, 1, 0);
    lua_setallocf(L, t->orig, t->orig_ud);
    lua_settop(L, top);
    if (status != 0)
      return;
    for (i = 0; i < t->nresults; i++) {
      const struct tlc_result *r = &t->results[i];
      if (!r->exit)
        continue;
      if (!r->ok || r->place.pt != pt || r->place.line != 1)
        return;
      seen++;
    }
    if (seen > 0) {
      tl->exit_ok = 1;
      tl->g_exitno = (uint16_t)(lay->g_parent + 4);
    }
  }
}

/* ---- J->prof_mode ------------------------------------------------------- */

typedef void (*prof_cb)(void *data, lua_State *L, int samples, int vmstate);
typedef void (*prof_start_fn)(lua_State *L, const char *mode, prof_cb cb,
                              void *data);
typedef void (*prof_stop_fn)(lua_State *L);

static void no_samples(void *data, lua_State *L, int samples, int vmstate)
{
  (void)data;
  (void)L;
  (void)samples;
  (void)vmstate;
}

#define PROF_WINDOW 4096

static void prof_fail(struct vm_trace_layout *tl, const char *why)
{
  tl->prof_ok = 0;
  snprintf(tl->prof_why, sizeof(tl->prof_why), "%s", why);
}

static void find_prof_mode(lua_State *L, struct calib *c, int apart)
{
  struct vm_trace_layout *tl = &c->lay.tl;
  prof_start_fn start;
  prof_stop_fn stop;
  uint8_t *w = malloc(5 * PROF_WINDOW);
  uintptr_t from = c->g + c->lay.g_trace;
  int o, found = -1, i;
  *(void **)&start = dlsym(RTLD_DEFAULT, "luaJIT_profile_start");
  *(void **)&stop = dlsym(RTLD_DEFAULT, "luaJIT_profile_stop");
  if (w == NULL)
    return prof_fail(tl, "out of memory");
  if (!apart || start == NULL || stop == NULL) {
    free(w);
    return prof_fail(tl, apart ? "luaJIT_profile_start is not exported"
                               : "calibrated in the profiled VM");
  }
  if (!safe_read(from, w, PROF_WINDOW)) {
    free(w);
    return prof_fail(tl, "jit_State is unreadable");
  }
  /* A start sets the mode first; a stop clears it only if this VM holds
  ** the profiler (another VM may). */
  start(L, "l", no_samples, NULL);
  safe_read(from, w + PROF_WINDOW, PROF_WINDOW);
  stop(L);
  safe_read(from, w + 2 * PROF_WINDOW, PROF_WINDOW);
  start(L, "f", no_samples, NULL);
  safe_read(from, w + 3 * PROF_WINDOW, PROF_WINDOW);
  stop(L);
  safe_read(from, w + 4 * PROF_WINDOW, PROF_WINDOW);
  for (o = 0; o + 4 <= PROF_WINDOW && o + c->lay.g_trace < 65536; o += 4) {
    int32_t v[5];
    for (i = 0; i < 5; i++)
      memcpy(&v[i], w + i * PROF_WINDOW + o, 4);
    if (v[0] == 0 && v[1] == 'l' && (v[2] == 0 || v[2] == 'l') && v[3] == 'f' &&
        (v[4] == 0 || v[4] == 'f')) {
      found = o;
      break;
    }
  }
  if (found < 0) {
    free(w);
    return prof_fail(tl, "no int of jit_State follows luaJIT_profile_start's "
                         "mode");
  }
  {
    /* Another VM holds LuaJIT's profiler: this one keeps 'f'. */
    int32_t v;
    memcpy(&v, w + 4 * PROF_WINDOW + found, 4);
    if (v != 0) {
      int32_t zero = 0;
      memcpy((void *)(from + (uintptr_t)found), &zero, 4);
    }
  }
  free(w);
  tl->g_prof_mode = (uint16_t)(c->lay.g_trace + found);
  tl->prof_ok = 1;
}

/* ---- The driver --------------------------------------------------------- */

/* jit.util: loaded, or made by its loader in the registry's _PRELOAD (as
** require would, without touching any global); nil if neither. */
static void push_jit_util(lua_State *L)
{
  int top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "jit.util");
    if (lua_istable(L, -1)) {
      lua_replace(L, top + 1);
      lua_settop(L, top + 1);
      return;
    }
  }
  lua_settop(L, top);
  lua_getfield(L, LUA_REGISTRYINDEX, "_PRELOAD");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "jit.util");
    if (lua_isfunction(L, -1)) {
      lua_pushstring(L, "jit.util");
      if (lua_pcall(L, 1, 1, 0) == 0 && lua_istable(L, -1)) {
        lua_replace(L, top + 1);
        lua_settop(L, top + 1);
        return;
      }
    }
  }
  lua_settop(L, top);
  lua_pushnil(L);
}

void calibrate_trace_lines(lua_State *L, struct calib *c, int apart)
{
  struct vm_trace_layout *tl = &c->lay.tl;
  struct tlc *t;
  int top = lua_gettop(L), ju, batch, found;
  uint32_t n, size;
  memset(tl, 0, sizeof(*tl));
  prof_fail(tl, "compiled-code attribution is not verified");
#if !defined(__x86_64__) && !defined(__aarch64__)
  tl_fail(tl, "compiled code is attributed on x86-64 and arm64 only");
  return;
#endif
  if (!c->lay.trace_ok) {
    tl_fail(tl, "the trace array is not verified");
    return;
  }
  push_jit_util(L);
  if (!lua_istable(L, -1)) {
    lua_settop(L, top);
    tl_fail(tl, "jit.util is not loaded");
    return;
  }
  ju = lua_gettop(L);
  if ((t = malloc(sizeof(*t))) == NULL) {
    lua_settop(L, top);
    tl_fail(tl, "out of memory");
    return;
  }
  memset(t, 0, offsetof(struct tlc, memo));
  t->c = c;
  t->stack_end = (uintptr_t)&top;
  t->g_end = c->g + g_fields_end(&c->lay);
  if (!safe_readable(c->g, t->g_end - c->g))
    t->g_end = c->g + CALIB_G_WINDOW;
  if (!run_known(L, t, "=memprof.calibration.lines")) {
    tl_fail(tl, "the known-answer chunk does not run");
    goto done;
  }
  lua_settop(L, ju);
  if (!vm_u32(1, c->g + c->lay.g_sizetrace, &size))
    size = 0;
  for (n = 1; n < size && n < 65536 && t->ntraces < TLC_TRACES; n++)
    if (vm_trace_object(&c->lay, 1, c->g, n) != 0)
      ju_trace(L, ju, t, n);
  if (t->ntraces == 0 || t->nsamples == 0) {
    tl_fail(tl, "no trace was compiled (is the JIT compiler on?)");
    goto done;
  }
  tl->ok = 1;
  find_jit_base(t);
  /* The searches read the traces in C alone: one batch. */
  batch = safe_read_batch_begin();
  found = find_trace_fields(t);
  safe_read_batch_end(batch);
  if (!found || !find_stack_adjust(L, t) || !find_header_op(L, t, ju) ||
      !check_known(L, t))
    goto done;
  tl->base_ok = t->based;
  check_exits(L, t);
  t->vmdef = load_vmdef(L) ? lua_gettop(L) : 0;
  find_store_after_return(L, t, ju);
  find_builtin_frames(L, t, ju);
  find_format_frame(L, t);
  find_after_return(L, t);
  find_walk(L, t, ju);
  find_prof_mode(L, c, apart);
done:
  lua_settop(L, top);
  free(t);
  if (tl->why[0] != '\0')
    tl->ok = 0;
}
