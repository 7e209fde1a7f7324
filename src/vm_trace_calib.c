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
#include "luajit.h"
#include "vm_trace_calib.h"

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

void tlc_fail(struct vm_trace_layout *tl, const char *fmt, ...)
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

/* Calls the function below nargs arguments under the recording allocator
** (each run starts with an empty memo); the allocator is put back after.
** Returns lua_pcall's status. */
int tlc_pcall(lua_State *L, struct tlc *t, int nargs, int nres)
{
  int status;
  t->orig = lua_getallocf(L, &t->orig_ud);
  t->nmemo = 0;
  lua_setallocf(L, tlc_alloc, t);
  status = lua_pcall(L, nargs, nres, 0);
  lua_setallocf(L, t->orig, t->orig_ud);
  return status;
}

/* Loads the chunk and runs its loop under the recording allocator; leaves
** the chunk's three functions on the stack (outer, inner, run). */
int tlc_run_known(lua_State *L, struct tlc *t, const char *name)
{
  int top = lua_gettop(L), status;
  if (luaL_loadbuffer(L, known_chunk, sizeof(known_chunk) - 1, name) != 0 ||
      lua_pcall(L, 0, 3, 0) != 0 || !lua_isfunction(L, -3)) {
    lua_settop(L, top);
    return 0;
  }
  lua_pushvalue(L, -3);
  lua_pushinteger(L, t->compile_rounds);
  status = tlc_pcall(L, t, 1, 0);
  if (status != 0) {
    lua_settop(L, top);
    return 0;
  }
  return 1;
}

/* ---- The known-answer run ----------------------------------------------- */

/* One known-answer run: 1 if it proved the layout, 0 if a read went wrong
** (after tlc_fail), -1 if it saw too little (the loop's recording aborted
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
      tlc_fail(tl,
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
      tlc_fail(tl,
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
  if (!tlc_run_known(L, t, "=memprof.calibration.lines")) {
    t->want_bases = 0;
    lua_settop(L, top);
    tlc_fail(&t->c->lay.tl, "the known-answer chunk does not run");
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
    tlc_fail(&t->c->lay.tl,
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
    status = tlc_pcall(L, t, 0, 1);
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

/* ---- Whether the JIT compiler is on ----------------------------------- */

typedef int (*setmode_fn)(lua_State *L, int idx, int mode);

/* The last 32-bit word of g up to J->trace whose bit 0 alone is cleared by
** luaJIT_setmode's engine off and set again by its on, in the throw-away
** VM (its compiler is on: it compiled the known-answer traces). */
static void find_jit_on(lua_State *L, struct calib *c, int apart)
{
  struct vm_trace_layout *tl = &c->lay.tl;
  setmode_fn set;
  size_t len = c->lay.g_trace, o;
  uint8_t *w;
  tl->jit_on_ok = 0;
  *(void **)&set = dlsym(RTLD_DEFAULT, "luaJIT_setmode");
  if (!apart || set == NULL || len < 4 || len >= 65536 ||
      (w = malloc(3 * len)) == NULL)
    return;
  if (safe_read(c->g, w, len)) {
    set(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    safe_read(c->g, w + len, len);
    set(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_ON);
    safe_read(c->g, w + 2 * len, len);
    for (o = 0; o + 4 <= len; o += 4) {
      uint32_t on, off, again;
      memcpy(&on, w + o, 4);
      memcpy(&off, w + len + o, 4);
      memcpy(&again, w + 2 * len + o, 4);
      if ((on & 1) && off == (on & ~1u) && again == on)
        tl->jit_on_ok = 1, tl->g_jit_on = (uint16_t)o;
    }
  }
  free(w);
}

/* ---- The driver --------------------------------------------------------- */

/* In the throw-away VM (ours, closed after the calibration), loops are
** compiled at their first rounds (jit.opt.start's hotloop=1, which also
** resets the hot counters): the runs need a tenth of their rounds to
** reach the same traces. Returns 1 if the option was taken. */
static int compile_early(lua_State *L)
{
  int top = lua_gettop(L), ok = 0;
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "jit.opt");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "start");
      if (lua_isfunction(L, -1)) {
        lua_pushliteral(L, "hotloop=1");
        ok = lua_pcall(L, 1, 0, 0) == 0;
      }
    }
  }
  lua_settop(L, top);
  return ok;
}

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
  tlc_fail(tl, "compiled code is attributed on x86-64 and arm64 only");
  return;
#endif
  if (!c->lay.trace_ok) {
    tlc_fail(tl, "the trace array is not verified");
    return;
  }
  push_jit_util(L);
  if (!lua_istable(L, -1)) {
    lua_settop(L, top);
    tlc_fail(tl, "jit.util is not loaded");
    return;
  }
  ju = lua_gettop(L);
  if ((t = malloc(sizeof(*t))) == NULL) {
    lua_settop(L, top);
    tlc_fail(tl, "out of memory");
    return;
  }
  memset(t, 0, offsetof(struct tlc, memo));
  t->c = c;
  t->stack_end = (uintptr_t)&top;
  t->g_end = c->g + g_fields_end(&c->lay);
  if (!safe_readable(c->g, t->g_end - c->g))
    t->g_end = c->g + CALIB_G_WINDOW;
  /* (In the profiled VM its JIT compiler's settings are left alone.) */
  if (apart && compile_early(L)) {
    t->compile_rounds = TLC_EARLY_COMPILE_ROUNDS;
    t->resolve_rounds = TLC_EARLY_RESOLVE_ROUNDS;
  } else {
    t->compile_rounds = TLC_COMPILE_ROUNDS;
    t->resolve_rounds = TLC_RESOLVE_ROUNDS;
  }
  if (!tlc_run_known(L, t, "=memprof.calibration.lines")) {
    tlc_fail(tl, "the known-answer chunk does not run");
    goto done;
  }
  lua_settop(L, ju);
  if (!vm_u32(1, c->g + c->lay.g_sizetrace, &size))
    size = 0;
  for (n = 1; n < size && n < 65536 && t->ntraces < TLC_TRACES; n++)
    if (vm_trace_object(&c->lay, 1, c->g, n) != 0)
      tlc_ju_trace(L, ju, t, n);
  if (t->ntraces == 0 || t->nsamples == 0) {
    tlc_fail(tl, "no trace was compiled (is the JIT compiler on?)");
    goto done;
  }
  tl->ok = 1;
  tlc_find_jit_base(t);
  /* The searches read the traces in C alone: one batch. */
  batch = safe_read_batch_begin();
  found = tlc_find_trace_fields(t);
  safe_read_batch_end(batch);
  if (!found || !tlc_find_stack_adjust(L, t) || !tlc_find_header_op(L, t, ju) ||
      !check_known(L, t))
    goto done;
  tl->base_ok = t->based;
  check_exits(L, t);
  vm_vmdef_load(L, &t->vmdef);
  tlc_find_store_after_return(L, t, ju);
  tlc_find_builtin_frames(L, t, ju);
  tlc_find_format_frame(L, t);
  tlc_find_after_return(L, t);
  tlc_find_walk(L, t, ju);
  tlc_find_format_puts(L, t);
  find_prof_mode(L, c, apart);
  find_jit_on(L, c, apart);
done:
  lua_settop(L, top);
  vm_vmdef_free(&t->vmdef);
  free(t);
  if (tl->why[0] != '\0')
    tl->ok = 0;
}
