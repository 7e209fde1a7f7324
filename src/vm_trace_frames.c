/*
** The trace-lines calibration's refinements of a place, each optional and
** each proven on this build before it is used: a table store right after
** an inlined call, table.concat's and string.format's frames on events of
** their strings (known-answer runs), the kinds of the ops after an inlined
** call's return, and what trace_lines 'walk' needs. The names of ops and
** IR calls come from jit.vmdef, checked against what jit.util shows.
*/
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "vm_trace_calib.h"

/* ---- A store right after an inlined call -------------------------------- */

/* The ops of table stores, MOV and returns, from jit.util.funcbc on
** functions whose bytecode is known; then lj_tab_newkey: the one helper
** every allocation of a loop that only adds keys goes through, one of
** jit.util.ircalladdr's. Without them the places stay as found. */
void tlc_find_store_after_return(lua_State *L, struct tlc *t, int ju)
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
    if (!tlc_ju_call(L, ju, "funcbc", 2, 1) || !lua_isnumber(L, -1)) {
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
  status = tlc_pcall(L, t, 0, 1);
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
    if (!tlc_ju_call(L, ju, "ircalladdr", 1, 1) || !lua_isnumber(L, -1)) {
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

/* jit.util.traceir(n, ref): op, op1, op2 (refs unbiased). */
static int ju_ir(lua_State *L, int ju, uint32_t n, int ref, int *o, int *op1,
                 int *op2)
{
  lua_pushinteger(L, n);
  lua_pushinteger(L, ref);
  if (!tlc_ju_call(L, ju, "traceir", 2, 4))
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
  if (!tlc_ju_call(L, ju, "traceinfo", 1, 1) || !lua_istable(L, -1) ||
      !tlc_ju_field(L, -1, "nins", &nins)) {
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
/* A known-answer chunk: its code and its chunk name. */
struct known_chunk {
  const char *code, *name;
};

static const struct known_chunk concat_chunk = {
    "local concat, base, rounds = ...\n"
    "local t, keep = {0, 'b'}, {0, 0, 0, 0}\n"
    "local other = {0, 0, 0, 0}\n"
    "for i = base, base + rounds - 1 do\n"
    "  t[1] = i\n"
    "  local s = concat(t, ',') --@join\n"
    "  keep[i % 4 + 1] = s\n"
    "  local c = 'k' .. i --@cat\n"
    "  other[i % 4 + 1] = c\n"
    "end\n",
    "=memprof.calibration.concat"};

/* Runs a known-answer chunk (the function at index `chunk`), given the
** built-in at index fn, under the recording allocator: `run` 1 and 2 are
** table.concat's first and second runs, 3 and 4 string.format's (odd: the
** run that compiles). Each run is of a chunk loaded afresh, and makes
** strings no other run made (from run * 1000000): a string still in the
** VM's string table is not allocated again, and string.format's chunk
** once made the very strings of table.concat's, which then had no events
** on the concatenation's line whenever the collector had not swept them
** yet. Returns the chunk's prototype, or 0. */
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
  lua_pushinteger(L, run * 1000000);
  /* The first run compiles; the second is resolved. */
  lua_pushinteger(L, run % 2 == 1 ? t->compile_rounds : t->resolve_rounds);
  status = tlc_pcall(L, t, 3, 0);
  lua_settop(L, top);
  return status == 0 ? pt : 0;
}

/* Of a known-answer chunk's events in compiled code, run with the frames
** found: those on the line marked `mark` have the frame of built-in ffid
** above the chunk's, those of the line marked --@cat (a concatenation)
** none, and no other gets one. */
static int builtin_known(const struct tlc *t, uintptr_t pt,
                         const struct known_chunk *chunk, const char *mark,
                         uint8_t ffid)
{
  int i, framed_n = 0, cats = 0, l_mark = 0, l_cat = 0, line = 1;
  size_t mlen = strlen(mark);
  const char *p;
  for (p = chunk->code; *p != '\0'; p++) {
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

/* Pushes a known-answer chunk as a function, or nil if it does not
** load. */
static void push_chunk(lua_State *L, const struct known_chunk *chunk)
{
  if (luaL_loadbuffer(L, chunk->code, strlen(chunk->code), chunk->name) != 0) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

/* The first run (`run`, odd) of a chunk, which compiles it: the helpers
** its trace's allocations call are noted (TLC_TARGET). Returns the
** chunk's prototype, or 0. */
static uintptr_t compile_builtin_chunk(lua_State *L, struct tlc *t, int fn,
                                       int run, const struct known_chunk *chunk)
{
  int at;
  push_chunk(L, chunk);
  at = lua_gettop(L);
  t->check = TLC_TARGET;
  t->ntargets = 0;
  return run_builtin_chunk(L, t, fn, run, at);
}

/* Run `run` of a chunk whose events are resolved and kept (TLC_RESULTS of
** them), after a run that compiled it. Returns the chunk's prototype, or
** 0. */
static uintptr_t resolve_builtin_chunk(lua_State *L, struct tlc *t, int fn,
                                       int run, const struct known_chunk *chunk)
{
  t->check = TLC_RESOLVE_BUILTIN;
  t->nresults = t->dropped = 0;
  t->want_results = TLC_RESULTS;
  push_chunk(L, chunk);
  return run_builtin_chunk(L, t, fn, run, lua_gettop(L));
}

/* Pushes the built-in package.loaded[lib][name]: its stack index if it is
** a function, else 0. */
static int push_builtin(lua_State *L, const char *lib, const char *name)
{
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (!lua_istable(L, -1))
    return 0;
  lua_getfield(L, -1, lib);
  if (!lua_istable(L, -1))
    return 0;
  lua_getfield(L, -1, name);
  return lua_isfunction(L, -1) ? lua_gettop(L) : 0;
}

/* The fast function id of the built-in at index fn into *ffid: whether
** it reads as one. */
static int builtin_ffid(lua_State *L, const struct vm_layout *lay, int fn,
                        uint8_t *ffid)
{
  return vm_u8(1, (uintptr_t)lua_topointer(L, fn) + lay->fn_ffid, ffid) &&
         *ffid > FFID_C;
}

static int concat_known(const struct tlc *t, uintptr_t pt)
{
  return builtin_known(t, pt, &concat_chunk, "--@join",
                       t->c->lay.tl.concat_ffid);
}

/* table.concat's frame on events of its string: the IR names from
** jit.vmdef, checked against this build (the helper's address that the
** trace's allocations call, the chain's shape jit.util shows, the same
** IR in memory), then a known-answer run. Without them no frame is
** added. */
void tlc_find_builtin_frames(lua_State *L, struct tlc *t, int ju)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_layout *lay = &t->c->lay;
  int top = lua_gettop(L), fn, ops[4], tostr_id, puttab_id, i, shaped;
  uint32_t n, size;
  uintptr_t pt;
  uint8_t ffid;
  if (t->vmdef.buf == NULL)
    return;
  ops[0] = vm_vmdef_ir(&t->vmdef, "BUFHDR");
  ops[1] = vm_vmdef_ir(&t->vmdef, "BUFSTR");
  ops[2] = vm_vmdef_ir(&t->vmdef, "CALLL");
  ops[3] = vm_vmdef_ir(&t->vmdef, "CARG");
  tostr_id = vm_vmdef_call(&t->vmdef, "lj_buf_tostr");
  puttab_id = vm_vmdef_call(&t->vmdef, "lj_buf_puttab");
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
  if (!tlc_ju_call(L, ju, "ircalladdr", 1, 1) || !lua_isnumber(L, -1))
    goto done;
  tl->buf_tostr = (uintptr_t)lua_tonumber(L, -1);
  lua_pushinteger(L, puttab_id);
  if (!tlc_ju_call(L, ju, "ircalladdr", 1, 1) || !lua_isnumber(L, -1))
    goto done;
  tl->buf_puttab = (uintptr_t)lua_tonumber(L, -1);
  /* table.concat itself, a built-in. */
  fn = push_builtin(L, "table", "concat");
  if (fn == 0 || !builtin_ffid(L, lay, fn, &ffid))
    goto done;
  tl->concat_ffid = ffid;
  /* Every allocation of the chunk's trace goes to lj_buf_tostr. */
  if (compile_builtin_chunk(L, t, fn, 1, &concat_chunk) == 0 || t->ntargets < 3)
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
  pt = resolve_builtin_chunk(L, t, fn, 2, &concat_chunk);
  if (pt == 0 || !concat_known(t, pt))
    tl->concat_ok = 0;
done:
  lua_settop(L, top);
}

/* ---- string.format's frame --------------------------------------------- */

/* The chunks of string.format: a call of it (given, as `format`) on one
** line, a concatenation on another, each stored (so a snapshot is taken
** at its line). Each run makes strings of its own. */
#define FORMAT_CHUNK(call)                                                     \
  "local format, base, rounds = ...\n"                                         \
  "local keep, other = {0, 0, 0, 0}, {0, 0, 0, 0}\n"                           \
  "for i = base, base + rounds - 1 do\n"                                       \
  "  keep[i % 4 + 1] = " call " --@fmt\n"                                      \
  "  other[i % 4 + 1] = 'k' .. i --@cat\n"                                     \
  "end\n"

/* `%5.1f` calls lj_strfmt_putfnum. */
static const struct known_chunk format_chunk = {
    FORMAT_CHUNK("format('%5.1f', i + 0.5)"), "=memprof.calibration.format"};

static int format_known(const struct tlc *t, uintptr_t pt)
{
  return builtin_known(t, pt, &format_chunk, "--@fmt",
                       t->c->lay.tl.format_ffid);
}

/* string.format's frame on events of its string: the IR call ids of the
** helpers only its recorder emits and IR BUFPUT, by their names in
** jit.vmdef (table.concat's frame, proven first, verified the reads of a
** buffer's IR), then a known-answer run. Without them string.format gets
** no frame. */
void tlc_find_format_frame(lua_State *L, struct tlc *t)
{
  static const char *const helpers[TL_FORMAT_IDS] = {
      "lj_strfmt_putfnum_int", "lj_strfmt_putfnum_uint", "lj_strfmt_putfnum",
      "lj_strfmt_putfstr",     "lj_strfmt_putfchar",     "lj_strfmt_putquoted"};
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_layout *lay = &t->c->lay;
  int top = lua_gettop(L), fn, i, bufput;
  uintptr_t pt;
  uint8_t ffid;
  if (!tl->concat_ok || t->vmdef.buf == NULL)
    return;
  bufput = vm_vmdef_ir(&t->vmdef, "BUFPUT");
  if (bufput < 0)
    goto done;
  tl->ir_bufput = (uint8_t)bufput;
  for (i = 0; i < TL_FORMAT_IDS; i++) {
    int id = vm_vmdef_call(&t->vmdef, helpers[i]);
    if (id < 0)
      goto done;
    tl->format_ids[i] = (uint16_t)id;
  }
  fn = push_builtin(L, "string", "format");
  if (fn == 0 || !builtin_ffid(L, lay, fn, &ffid) || ffid == tl->concat_ffid)
    goto done;
  tl->format_ffid = ffid;
  /* A first run compiles the loop; the second is resolved. */
  if (compile_builtin_chunk(L, t, fn, 3, &format_chunk) == 0)
    goto done;
  tl->format_ok = 1;
  pt = resolve_builtin_chunk(L, t, fn, 4, &format_chunk);
  if (pt == 0 || !format_known(t, pt))
    tl->format_ok = 0;
done:
  lua_settop(L, top);
}

/* ---- string.format's string of puts alone ------------------------------ */

/* string.format of integers: puts alone where the build keeps integers,
** as dual-number builds do. */
static const struct known_chunk format_put_chunk = {
    FORMAT_CHUNK("format('%d:%d', i, i)"), "=memprof.calibration.format_put"};

/* string.format's frame on its strings of puts alone: the IR ops EQ and
** KGC by their names in jit.vmdef, then a
** known-answer run with the helpers' proof (tlc_find_format_frame) turned
** off, so that only this proof can give the frame: where the build puts
** an integer's `%d` otherwise, it stays unproven. Needs the loop's ops
** (tlc_find_after_return). */
void tlc_find_format_puts(lua_State *L, struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  int top = lua_gettop(L), fn, eq, kgc;
  uintptr_t pt;
  if (!tl->format_ok || tl->ir_loop == 0xff || t->vmdef.buf == NULL)
    return;
  eq = vm_vmdef_ir(&t->vmdef, "EQ");
  kgc = vm_vmdef_ir(&t->vmdef, "KGC");
  if (eq < 0 || kgc < 0)
    goto done;
  tl->ir_eq = (uint8_t)eq;
  tl->ir_kgc = (uint8_t)kgc;
  fn = push_builtin(L, "string", "format");
  if (fn == 0 || compile_builtin_chunk(L, t, fn, 5, &format_put_chunk) == 0)
    goto done;
  tl->format_put_ok = 1;
  tl->format_ok = 0;
  pt = resolve_builtin_chunk(L, t, fn, 6, &format_put_chunk);
  tl->format_ok = 1;
  if (pt == 0 ||
      !builtin_known(t, pt, &format_put_chunk, "--@fmt", tl->format_ffid))
    tl->format_put_ok = 0;
done:
  lua_settop(L, top);
}

/* ---- An event after an inlined call returned ---------------------------- */

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

static int set_kinds(const struct vm_vmdef *vmdef, struct vm_trace_layout *tl,
                     const char *const *names, size_t n, uint8_t kind)
{
  size_t i;
  for (i = 0; i < n; i++) {
    int op = vm_vmdef_bc(vmdef, names[i]);
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
void tlc_find_after_return(lua_State *L, struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  const struct vm_vmdef *vmdef = &t->vmdef;
  int top = lua_gettop(L), prof, loop, newref, kgc;
  memset(tl->bc_kind, TL_BC_STOP, sizeof(tl->bc_kind));
  tl->ir_loop = tl->ir_newref = tl->ir_kgc = 0xff;
  if (tl->bc_mov == 0 || t->vmdef.buf == NULL)
    return;
  if (vm_vmdef_bc(vmdef, "FUNCF") != tl->bc_funcf ||
      vm_vmdef_bc(vmdef, "MOV") != tl->bc_mov ||
      vm_vmdef_bc(vmdef, "TSETV") != tl->bc_tsetv ||
      vm_vmdef_bc(vmdef, "TSETS") != tl->bc_tsets ||
      vm_vmdef_bc(vmdef, "TSETB") != tl->bc_tsetb ||
      vm_vmdef_bc(vmdef, "RET0") != tl->bc_ret0 ||
      vm_vmdef_bc(vmdef, "RET1") != tl->bc_ret1 ||
      vm_vmdef_bc(vmdef, "RET") != tl->bc_ret)
    goto done;
  prof = vm_vmdef_ir(&t->vmdef, "PROF");
  if (!set_kinds(&t->vmdef, tl, quiet_ops,
                 sizeof(quiet_ops) / sizeof(quiet_ops[0]), TL_BC_QUIET) ||
      !set_kinds(&t->vmdef, tl, effect_ops,
                 sizeof(effect_ops) / sizeof(effect_ops[0]), TL_BC_EFFECT) ||
      !set_kinds(&t->vmdef, tl, call_ops,
                 sizeof(call_ops) / sizeof(call_ops[0]), TL_BC_CALL) ||
      !set_kinds(&t->vmdef, tl, tail_ops,
                 sizeof(tail_ops) / sizeof(tail_ops[0]), TL_BC_TAILCALL) ||
      !set_kinds(&t->vmdef, tl, return_ops,
                 sizeof(return_ops) / sizeof(return_ops[0]), TL_BC_RETURN))
    goto done;
  /* (Without PROF no trace has per-line snapshots: 0xff is no op.) */
  tl->ir_prof = prof < 0 ? 0xff : (uint8_t)prof;
  loop = vm_vmdef_ir(&t->vmdef, "LOOP");
  newref = vm_vmdef_ir(&t->vmdef, "NEWREF");
  tl->ir_loop = loop < 0 || newref < 0 ? 0xff : (uint8_t)loop;
  tl->ir_newref = loop < 0 || newref < 0 ? 0xff : (uint8_t)newref;
  kgc = vm_vmdef_ir(&t->vmdef, "KGC");
  tl->ir_kgc = kgc < 0 ? 0xff : (uint8_t)kgc;
  tl->after_ok = 1;
done:
  if (!tl->after_ok)
    memset(tl->bc_kind, TL_BC_STOP, sizeof(tl->bc_kind));
  lua_settop(L, top);
}

/* ---- trace_lines 'walk' ------------------------------------------------- */

/* The helper of IR call `name`: its address (jit.util.ircalladdr), or 0. */
static uintptr_t ircall_address(lua_State *L, int ju,
                                const struct vm_vmdef *vmdef, const char *name)
{
  int id = vm_vmdef_call(vmdef, name);
  uintptr_t a = 0;
  if (id < 0)
    return 0;
  lua_pushinteger(L, id);
  if (!tlc_ju_call(L, ju, "ircalladdr", 1, 1))
    return 0;
  if (lua_isnumber(L, -1))
    a = (uintptr_t)lua_tonumber(L, -1);
  lua_pop(L, 1);
  return a;
}

/* A closure of three upvalues, the second assigned after its declaration:
** the parser makes the first and third immutable, the second not. */
static const struct known_chunk upvalue_chunk = {
    "local a, b, c = {}, {}, {}\n"
    "b = {}\n"
    "return function() return a, b, c end\n",
    "=memprof.calibration.upvalues"};

/* The built-ins that make a string (vm_trace_layout.string_ffids), by
** their ids read from the functions of the libraries loaded. */
static void string_builtins(lua_State *L, struct tlc *t)
{
  static const char *const names[TL_STRING_BUILTINS][2] = {
      {"_G", "tostring"},   {"string", "sub"},   {"string", "rep"},
      {"string", "char"},   {"string", "lower"}, {"string", "upper"},
      {"string", "reverse"}};
  const struct vm_layout *lay = &t->c->lay;
  struct vm_trace_layout *tl = &t->c->lay.tl;
  int i, top = lua_gettop(L);
  uint8_t ffid;
  for (i = 0; i < TL_STRING_BUILTINS; i++) {
    tl->string_ffids[i] = 0;
    lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, names[i][0]);
      if (lua_istable(L, -1)) {
        lua_getfield(L, -1, names[i][1]);
        if (lua_isfunction(L, -1) &&
            vm_u8(1, (uintptr_t)lua_topointer(L, -1) + lay->fn_ffid, &ffid) &&
            ffid > FFID_C)
          tl->string_ffids[i] = ffid;
      }
    }
    lua_settop(L, top);
  }
}

/*
** Where the walk reads a callee from a closure's upvalue (trace_lines_walk.c):
** a Lua closure's upvalue refs (after its pc), an upvalue's pointer to its
** value and its immutable flag (two bytes after its type byte), the
** candidates of lj_obj.h's GCfuncL and GCupval. Verified on the closure of
** upvalue_chunk: the count is 3, each ref is the upvalue lua_upvalueid names,
*each value
** pointer leads to the table lua_getupvalue gives, and the flag reads 1, 0,
** 1. Without them the walk reads no upvalue.
*/
static void find_upvalues(lua_State *L, struct tlc *t)
{
  const struct vm_layout *lay = &t->c->lay;
  struct vm_trace_layout *tl = &t->c->lay.tl;
  uintptr_t fn, uv, val, obj;
  uint64_t tv;
  uint8_t imm;
  int i, top = lua_gettop(L), batch = 0;
  tl->fn_uv = (uint8_t)(lay->fn_pc + lay->ref_size);
  tl->uv_v = lay->gc64 ? 32 : 16;
  tl->uv_immutable = (uint8_t)(lay->gct + 2);
  push_chunk(L, &upvalue_chunk);
  if (!lua_isfunction(L, -1) || lua_pcall(L, 0, 1, 0) != 0 ||
      !lua_isfunction(L, -1))
    goto done;
  fn = (uintptr_t)lua_topointer(L, -1);
  /* (The closure and its upvalues stand still: one batch of reads.) */
  batch = safe_read_batch_begin();
  if (!vm_u8(1, fn + lay->fn_ffid + 1, &imm) || imm != 3)
    goto done;
  for (i = 0; i < 3; i++) {
    if (!vm_ref(lay, 1, fn + tl->fn_uv + (uintptr_t)i * lay->ref_size, &uv) ||
        uv != (uintptr_t)lua_upvalueid(L, -1, i + 1) ||
        !vm_is_gc(lay, 1, uv, GCT_UPVAL) ||
        !vm_ref(lay, 1, uv + tl->uv_v, &val) || !vm_u64(1, val, &tv) ||
        vm_tv_split(lay->gc64, tv, &obj) != TAG_OF(GCT_TAB) ||
        !vm_u8(1, uv + tl->uv_immutable, &imm) || imm != (i != 1) ||
        lua_getupvalue(L, -1, i + 1) == NULL)
      goto done;
    val = (uintptr_t)lua_topointer(L, -1);
    lua_pop(L, 1);
    if (val != obj)
      goto done;
  }
  tl->upval_ok = 1;
  string_builtins(L, t);
done:
  safe_read_batch_end(batch);
  lua_settop(L, top);
}

/* The loop ops the walk follows (TL_BC_ITERC ..), each where jit.vmdef
** names it and no other kind has it (ITERN and ISNEXT are newer than
** 2.1's first builds): one missing leaves that op stopping a walk. */
static void set_loop_kinds(const struct vm_vmdef *vmdef,
                           struct vm_trace_layout *tl)
{
  static const struct {
    const char *name;
    uint8_t kind;
  } loops[] = {{"ITERC", TL_BC_ITERC},     {"ITERN", TL_BC_NEXT},
               {"ISNEXT", TL_BC_JUMP},     {"FORL", TL_BC_LOOPBACK},
               {"ITERL", TL_BC_LOOPBACK},  {"FORI", TL_BC_LOOPIN},
               {"JFORL", TL_BC_JLOOPBACK}, {"JITERL", TL_BC_JLOOPBACK},
               {"JFORI", TL_BC_LOOPIN},    {"JLOOP", TL_BC_LINK}};
  size_t i;
  int jforl;
  for (i = 0; i < sizeof(loops) / sizeof(loops[0]); i++) {
    int op = vm_vmdef_bc(vmdef, loops[i].name);
    if (op >= 0 && tl->bc_kind[op] == TL_BC_STOP)
      tl->bc_kind[op] = loops[i].kind;
  }
  jforl = vm_vmdef_bc(vmdef, "JFORL");
  tl->bc_jforl =
      jforl > 0 && tl->bc_kind[jforl] == TL_BC_JLOOPBACK ? (uint8_t)jforl : 0;
}

/* What the walk of trace_lines 'walk' needs beyond tlc_find_after_return's
** ops (whose numbers there prove jit.vmdef's): the table helpers of TNEW
** and TDUP, the ops TNEW, TDUP, CAT, GSET, JMP, LOOP, UGET and KNIL, and the
** conditional branches, one run of ops from ISLT to ISF. Without them
** 'walk' is refused. Then where a closure's upvalues are read. */
void tlc_find_walk(lua_State *L, struct tlc *t, int ju)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  static const char *const names[] = {"TNEW", "TDUP", "CAT",  "GSET",
                                      "JMP",  "LOOP", "UGET", "KNIL"};
  static const char *const branches[] = {
      "ISLT",  "ISGE",  "ISLE",  "ISGT",  "ISEQV", "ISNEV", "ISEQS", "ISNES",
      "ISEQN", "ISNEN", "ISEQP", "ISNEP", "ISTC",  "ISFC",  "IST",   "ISF"};
  int top = lua_gettop(L), op[8], i, first;
  const struct vm_vmdef *vmdef = &t->vmdef;
  if (!tl->after_ok || !tl->newkey_ok || t->vmdef.buf == NULL)
    return;
  for (i = 0; i < 8; i++)
    if ((op[i] = vm_vmdef_bc(vmdef, names[i])) < 0)
      goto done;
  first = vm_vmdef_bc(vmdef, branches[0]);
  for (i = 0; i < 16; i++)
    if (first < 0 || vm_vmdef_bc(vmdef, branches[i]) != first + i)
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
  tl->bc_knil = (uint8_t)op[7];
  set_loop_kinds(vmdef, tl);
  tl->walk_ok = 1;
  find_upvalues(L, t);
done:
  lua_settop(L, top);
}
