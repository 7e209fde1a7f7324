/*
** The trace-lines calibration's searches: jit.util's view of the traces
** compiled by the first run, then the fields of GCtrace (machine code,
** snapshots, constants, IR, stack adjustment), SnapShot's layout with its
** machine code offsets, g->jit_base and the function header op, each found
** where every trace shows what jit.util gives (the offsets of known builds
** tried first). The reads are fault-safe; what is found is proven by the
** known-answer runs (vm_trace_calib.c).
*/
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "vm_trace_calib.h"

/* ---- What jit.util says ------------------------------------------------- */

/* Calls jit.util.NAME(args...) (ju at index `ju`); leaves `nres` results. */
int tlc_ju_call(lua_State *L, int ju, const char *name, int nargs, int nres)
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

int tlc_ju_field(lua_State *L, int idx, const char *key, lua_Number *out)
{
  int ok;
  lua_getfield(L, idx, key);
  ok = lua_isnumber(L, -1);
  *out = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return ok;
}

/* Gathers jit.util's view of trace n. */
int tlc_ju_trace(lua_State *L, int ju, struct tlc *t, uint32_t n)
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
  if (!tlc_ju_call(L, ju, "traceinfo", 1, 1) || !lua_istable(L, -1))
    goto fail;
  if (!tlc_ju_field(L, -1, "nexit", &v))
    goto fail;
  tr->nsnap = (int)v;
  if (!tlc_ju_field(L, -1, "nk", &v))
    goto fail;
  tr->nk = (uint32_t)(TL_REF_BIAS - (int32_t)v);
  if (!tlc_ju_field(L, -1, "nins", &v))
    goto fail;
  tr->nins = (uint32_t)v;
  lua_settop(L, top);
  lua_pushinteger(L, n);
  if (!tlc_ju_call(L, ju, "tracemc", 1, 3) || !lua_isstring(L, -3) ||
      !lua_isnumber(L, -2))
    goto fail;
  tr->szmcode = (uint32_t)lua_objlen(L, -3);
  tr->mcode = (uintptr_t)lua_tonumber(L, -2);
  lua_settop(L, top);
  tr->nsnap_read = tr->nsnap < TLC_SNAPS ? tr->nsnap : TLC_SNAPS;
  for (i = 0; i < tr->nsnap_read; i++) {
    lua_pushinteger(L, n);
    lua_pushinteger(L, i);
    if (!tlc_ju_call(L, ju, "tracesnap", 2, 1) || !lua_istable(L, -1))
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
    if (!tlc_ju_call(L, ju, "traceir", 2, 2) || !lua_isnumber(L, -1))
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
      got = size == 8   ? copy_u64(tr->window, (size_t)o)
            : size == 4 ? copy_u32(tr->window, (size_t)o)
                        : copy_u16(tr->window, (size_t)o);
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
    uintptr_t p = (uintptr_t)copy_u64(tr->window, (size_t)snapo);
    if (tr->nsnap_read == 0)
      continue;
    if (p == 0 || !safe_read(p, buf, (size_t)tr->nsnap_read * (size_t)size))
      return 0;
    for (k = 0; k < tr->nsnap_read; k++) {
      const uint8_t *s = buf + k * size;
      if (copy_u16(s, (size_t)ro) != tr->snap[k].ref ||
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
    uintptr_t map = (uintptr_t)copy_u64(tr->window, (size_t)mapo),
              snap = (uintptr_t)copy_u64(tr->window, tl->tr_snap);
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
    uintptr_t snap = (uintptr_t)copy_u64(tr->window, tl->tr_snap);
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
                tlc_fail(tl,
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
                  tlc_fail(tl, "the snapshot map does not hold what "
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
                tlc_fail(tl,
                         "no snapshot offsets in this build (before 2021-03): "
                         "no field of SnapShot (%d bytes) holds machine code "
                         "offsets",
                         size);
                return 0;
              }
            }
    }
  }
  tlc_fail(tl, "no array in GCtrace holds the snapshots jit.util.tracesnap "
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
      uintptr_t ir = (uintptr_t)copy_u64(tr->window, (size_t)oo);
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
  tlc_fail(tl, "no pointer in GCtrace leads to the IR jit.util.traceir gives");
  return 0;
}

static int set_field(struct vm_trace_layout *tl, uint8_t *f, int o,
                     const char *name)
{
  if (o < 0) {
    tlc_fail(tl, "no field of GCtrace holds the %s jit.util gives", name);
    return 0;
  }
  *f = (uint8_t)o;
  return 1;
}

int tlc_find_trace_fields(struct tlc *t)
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
    uintptr_t snap = (uintptr_t)copy_u64(tr->window, tl->tr_snap);
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
            copy_u32(t->traces[i].window, (size_t)o) >= t->traces[i].maplen &&
            copy_u32(t->traces[i].window, (size_t)o) <=
                t->traces[i].maplen + 16;
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
int tlc_find_stack_adjust(lua_State *L, struct tlc *t)
{
  struct vm_trace_layout *tl = &t->c->lay.tl;
  int hint = t->c->lay.gc64 ? 102 : 78;
#if defined(__aarch64__)
  /* The u16 of GCtrace that holds each sample's adjustment: the usual
  ** offset, else the only one. */
  int top = lua_gettop(L), o, i, found = -1, fits_at = 0;
  t->check = TLC_UNWIND;
  t->nsps = 0;
  tlc_run_known(L, t, "=memprof.calibration.lines");
  lua_settop(L, top);
  for (o = 4; o + 2 <= TLC_WINDOW && t->nsps > 0; o += 2) {
    int fits = 1;
    for (i = 0; i < t->nsps && fits; i++)
      fits = t->sps[i].adj < 65536 &&
             copy_u16(t->sps[i].window, (size_t)o) == t->sps[i].adj;
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
void tlc_find_jit_base(struct tlc *t)
{
  const struct vm_layout *lay = &t->c->lay;
  size_t o, r = lay->ref_size;
  int i;
  for (o = r; o + r <= CALIB_G_WINDOW; o += r) {
    int fits = t->nsamples > 0;
    uintptr_t now;
    for (i = 0; i < t->nsamples && fits; i++) {
      const struct tlc_sample *s = &t->samples[i];
      uintptr_t v = lay->gc64 ? (uintptr_t)copy_u64(s->g, o)
                              : (uintptr_t)copy_u32(s->g, o);
      fits = v > s->stack && v < s->limit && ((v - s->stack) & 7) == 0;
    }
    if (fits && vm_ref(lay, 1, t->c->g + o, &now) && now == 0) {
      t->c->lay.tl.g_jit_base = (uint16_t)o;
      return;
    }
  }
}

/* ---- The function header op --------------------------------------------- */

int tlc_find_header_op(lua_State *L, struct tlc *t, int ju)
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
    tlc_fail(tl, "the header op probe does not run");
    return 0;
  }
  for (i = 0; i < 2; i++) {
    pt[i] = vm_func_proto(lay, 1, (uintptr_t)lua_topointer(L, top + 1 + i));
    if (pt[i] == 0 || !vm_u8(1, pt[i] + lay->pt_size, &op[i])) {
      lua_settop(L, top);
      tlc_fail(tl, "a function's bytecode is unreadable");
      return 0;
    }
    /* jit.util.funcbc(f, 0): the header instruction. */
    lua_pushvalue(L, top + 1 + i);
    lua_pushinteger(L, 0);
    if (!tlc_ju_call(L, ju, "funcbc", 2, 1) || !lua_isnumber(L, -1) ||
        (lua_tointeger(L, -1) & 0xff) != op[i]) {
      lua_settop(L, top);
      tlc_fail(tl, "the op at a prototype's start differs from "
                   "jit.util.funcbc(f, 0)");
      return 0;
    }
    lua_pop(L, 1);
  }
  lua_settop(L, top);
  /* FUNCF, then IFUNCF, JFUNCF, FUNCV: a vararg function's is 3 above. */
  if (op[1] != op[0] + 3) {
    tlc_fail(tl,
             "the header ops of fixed and vararg functions (%u, %u) are "
             "not FUNCF and FUNCV",
             op[0], op[1]);
    return 0;
  }
  tl->bc_funcf = op[0];
  return 1;
}
