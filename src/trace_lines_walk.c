/*
** trace_lines 'walk': the place of a helper call of compiled code found
** without per-line snapshots, by walking the bytecode forward from its
** snapshot's resume PC (tl_walk_forward, trace_lines.h). Runs on a cache
** miss of the hook's full path: plain reads, each range-checked, bounded.
*/
#include "trace_lines.h"

/* Bytecodes walked from a snapshot's PC to the event's, on every path. */
#define TL_MAX_WALK 16384

/* What a helper makes, by the bytecodes whose recording calls it. */
enum {
  WALK_NONE,  /* Not known (a call target not read): no walk. */
  WALK_TABLE, /* lj_tab_new1, lj_tab_new_ah, lj_tab_dup: TNEW, TDUP. */
  WALK_KEY,   /* lj_tab_newkey: a table store, GSET. */
  WALK_OTHER  /* Strings, buffers and the rest: CAT, or a built-in's call. */
};

static int helper_kind(const struct vm_trace_layout *tl, uintptr_t target)
{
  if (target == 0)
    return WALK_NONE;
  if (target == tl->tab_new1 || target == tl->tab_new_ah ||
      target == tl->tab_dup)
    return WALK_TABLE;
  return target == tl->newkey ? WALK_KEY : WALK_OTHER;
}

/* (`string_keys`: a new key's store is not a TSETB, whose key is a
** number.) */
static int walk_matches(const struct vm_trace_layout *tl, int kind,
                        int string_keys, uint8_t op)
{
  if (kind == WALK_TABLE)
    return op == tl->bc_tnew || op == tl->bc_tdup;
  if (kind == WALK_KEY)
    return (tl_is_store(tl, op) && !(string_keys && op == tl->bc_tsetb)) ||
           op == tl->bc_gset;
  return op == tl->bc_cat;
}

/* The prototype a CALL at `call` in w's innermost frame enters, when the
** next snapshot runs in it: that snapshot has w's frames (the innermost
** returning to the call) and more above them. Else 0. */
static uintptr_t proven_callee(const struct tl_place *w,
                               const struct tl_place *next, uintptr_t call)
{
  int d = next->nframes - w->nframes, i;
  if (d < 1 || next->frames[d].obj != w->frames[0].obj ||
      next->frames[d].pc != call + 4)
    return 0;
  for (i = 1; i < w->nframes; i++)
    if (next->frames[d + i].obj != w->frames[i].obj ||
        next->frames[d + i].pc != w->frames[i].pc)
      return 0;
  return next->frames[d - 1].ffid == FFID_LUA ? next->frames[d - 1].obj : 0;
}

/* The prototype a tail call in w's innermost frame enters, when the next
** snapshot runs in it: that snapshot has w's callers, and in the
** innermost frame's place a Lua function (the callee, or one it called).
** Not for the outermost frame: a snapshot after a return below it looks
** the same. Sets *d to the frames above it. Else 0. */
static uintptr_t proven_tail_callee(const struct tl_place *w,
                                    const struct tl_place *next, int *d)
{
  int i;
  *d = next->nframes - w->nframes;
  if (*d < 0 || w->nframes < 2)
    return 0;
  for (i = 1; i < w->nframes; i++)
    if (next->frames[*d + i].obj != w->frames[i].obj ||
        next->frames[*d + i].pc != w->frames[i].pc)
      return 0;
  return next->frames[*d].ffid == FFID_LUA ? next->frames[*d].obj : 0;
}

/* Whether w stands where the next snapshot resumes (the same frames). */
static int at_next(const struct tl_place *w, const struct tl_place *next)
{
  int i;
  if (w->nframes != next->nframes)
    return 0;
  for (i = 0; i < w->nframes; i++)
    if (w->frames[i].obj != next->frames[i].obj ||
        w->frames[i].pc != next->frames[i].pc)
      return 0;
  return 1;
}

/* The bounds of prototype pt's bytecode. Returns 1 on success. */
static int bc_bounds(const struct vm_layout *lay, uintptr_t pt,
                     uintptr_t *start, uintptr_t *end)
{
  uint32_t sizebc;
  if (!vm_u32(0, pt + lay->pt_sizebc, &sizebc) || sizebc > (1u << 24))
    return 0;
  *start = pt + lay->pt_size;
  *end = *start + 4 * (uintptr_t)sizebc;
  return 1;
}

/* Ops scanned back from a compiled loop's op to its start. */
#define TL_MAX_LOOP_SCAN 4096

/* Conditional branches (each followed by a JMP) the walk follows. */
#define TL_MAX_BRANCHES 8

/* One walk: what it looks for and what bounds it. */
struct walk {
  const struct vm_layout *lay;
  int want;             /* WALK_*. */
  int have_next;        /* The next snapshot's place is known. */
  struct tl_place next; /* It. */
  uint32_t steps;       /* Ops walked, on every path. */
  uintptr_t T, snap;    /* The trace, its snapshots. */
  int sn;               /* The event's snapshot. */
  int string_keys;      /* Every new key of sn's region is a GC constant. */
};

/*
** Whether every NEWREF of snapshot sn's region (there is one at least)
** has a GC object constant for its key (KGC: a TSETS's or a GSET's
** string). lj_tab_newkey is called from compiled code by NEWREF alone, so
** a new key's event is one of them, and a TSETB (a number key, which the
** recorder makes a number constant or a conversion) cannot be its store.
** Not for the last snapshot, whose region's end is not read.
*/
static int region_string_keys(const struct vm_layout *lay, uintptr_t T,
                              uintptr_t snap, int sn)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t ir;
  uint16_t from, to, op1, key;
  uint32_t ref, nk;
  uint8_t o;
  int n = 0;
  if (tl->ir_newref == 0xff || tl->ir_kgc == 0xff ||
      !tl_region(lay, 0, T, snap, sn, &from, &to, &ir) ||
      !vm_u32(0, T + tl->tr_nk, &nk))
    return 0;
  for (ref = from; ref < to; ref++) {
    if (!ir_ins(0, ir, ref, &o, &op1, &key))
      return 0;
    if (o != tl->ir_newref)
      continue;
    if (key >= TL_REF_BIAS || key < nk || !ir_ins(0, ir, key, &o, &op1, &op1) ||
        o != tl->ir_kgc)
      return 0;
    n++;
  }
  return n > 0;
}

/*
** The closure of snapshot sn's innermost frame, of prototype pt: the
** snapshot's entry for that frame's function slot (with FR2 two below its
** base; without, the highest entry flagged SNAP_FRAME), a constant (an
** inlined callee's closure; in the trace's base frame, the closure the
** recording specialised the trace to, or the one a tail call put there),
** checked to be a closure of pt; without such an entry, for the trace's base
** frame (the only frame), the function slot of the Lua stack below
** g->jit_base, which the trace does not write while it runs. Else 0.
*/
static uintptr_t inner_closure(const struct walk *k, uintptr_t g,
                               const struct tl_place *pl)
{
  const struct vm_layout *lay = k->lay;
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t s = k->snap + (uintptr_t)k->sn * tl->snap_size, map, fn = 0, base;
  uintptr_t pt = pl->frames[0].obj, ir;
  uint32_t mapofs, e, i, nk;
  uint64_t pcword;
  uint8_t nent;
  struct vm_thread th;
  if (!vm_u32(0, s + tl->snap_mapofs, &mapofs) ||
      !vm_u8(0, s + tl->snap_nent, &nent) ||
      !vm_ptr(0, k->T + tl->tr_snapmap, &map))
    return 0;
  if (lay->fr2) {
    if (!vm_u64(0, map + 4 * ((uintptr_t)mapofs + nent), &pcword))
      return 0;
    for (i = 0; i < nent; i++) {
      if (!vm_u32(0, map + 4 * ((uintptr_t)mapofs + i), &e))
        return 0;
      if ((e >> 24) != (uint32_t)(pcword & 0xff))
        continue;
      /* (The constant's type is checked fault-safe: the entry's ref is
      ** not checked to be a KGC.) */
      if ((e & (TL_SNAP_FRAME | TL_SNAP_CONT)) != 0 ||
          !tl_fr2_link(lay, 0, k->T, e, &fn) ||
          !vm_is_gc(lay, 1, fn, GCT_FUNC) || vm_func_proto(lay, 0, fn) != pt)
        return 0;
      return fn;
    }
  } else if (vm_ptr(0, k->T + tl->tr_ir, &ir) &&
             vm_u32(0, k->T + tl->tr_nk, &nk)) {
    /* Without FR2 each frame's function slot is an entry flagged
    ** SNAP_FRAME, the innermost frame's the highest; an inlined callee's
    ** holds its closure, a 32-bit GC constant. */
    uint32_t top = 0, ref, v;
    int have = 0;
    for (i = 0; i < nent; i++) {
      if (!vm_u32(0, map + 4 * ((uintptr_t)mapofs + i), &e))
        return 0;
      if ((e & TL_SNAP_FRAME) != 0 && (!have || (e >> 24) > (top >> 24))) {
        top = e;
        have = 1;
      }
    }
    ref = top & 0xffff;
    if (have && (top & TL_SNAP_CONT) == 0 && ref < TL_REF_BIAS && ref >= nk &&
        vm_u32(0, ir + TL_IRINS_SIZE * (uintptr_t)ref, &v) &&
        vm_is_gc(lay, 1, (uintptr_t)v, GCT_FUNC) &&
        vm_func_proto(lay, 0, (uintptr_t)v) == pt)
      return (uintptr_t)v;
  }
  if (pl->nframes != 1 || pl->base_ofs < 0 || pl->base_replaced ||
      !tl->base_ok || !vm_current_thread(lay, 0, g + lay->g_cur_L, &th) ||
      !tl_jit_base(lay, 0, g, &th, &base) ||
      (base += TVALUE_SIZE * (uintptr_t)pl->base_ofs) >= th.limit)
    return 0;
  fn = vm_frame_func(lay, 0, base - TVALUE_SIZE);
  return fn != 0 && vm_func_proto(lay, 0, fn) == pt ? fn : 0;
}

/*
** The function called through upvalue `uv` of the closure fn, when that
** upvalue is immutable (never assigned after its declaration, so it holds
** the value the recording called: the JIT compiler specialises every
** call in a trace to its callee, by a constant or a guard, and inlines a
** call through an immutable upvalue of a constant closure without a
** guard, so when a Lua callee returns before any snapshot nothing else
** names it), with its function id in *ffid. Offsets verified by the
** calibration (upval_ok). 0 if a check fails.
*/
static uintptr_t upvalue_callee(const struct vm_layout *lay, uintptr_t fn,
                                uint32_t uv, uint8_t *ffid)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t u, v, callee;
  uint64_t tv;
  uint8_t n, immutable;
  if (fn == 0 || !tl->upval_ok || !vm_u8(0, fn + lay->fn_ffid + 1, &n) ||
      uv >= n ||
      !vm_ref(lay, 0, fn + tl->fn_uv + (uintptr_t)uv * lay->ref_size, &u) ||
      !vm_is_gc(lay, 0, u, GCT_UPVAL) ||
      !vm_u8(0, u + tl->uv_immutable, &immutable) || immutable != 1 ||
      !vm_ref(lay, 0, u + tl->uv_v, &v) || v == 0 || (v & 7) != 0 ||
      !vm_u64(0, v, &tv) ||
      vm_tv_split(lay->gc64, tv, &callee) != TAG_OF(GCT_FUNC) ||
      !vm_is_gc(lay, 0, callee, GCT_FUNC) ||
      !vm_u8(0, callee + lay->fn_ffid, ffid))
    return 0;
  return callee;
}

/* Whether built-in `ffid` is one that makes a string, found by the
** calibration (tostring, string.sub...): a string charged to its call is
** made in its frame. */
static int string_builtin(const struct vm_trace_layout *tl, uint8_t ffid)
{
  int i;
  for (i = 0; i < TL_STRING_BUILTINS; i++)
    if (tl->string_ffids[i] == ffid && ffid > FFID_C)
      return 1;
  return 0;
}

/*
** FR2: the prototype the outermost frame tail-called, from the next
** snapshot (at the same base, or not resolved: a stitch's last snapshot,
** whose innermost frame is a continuation): its entry for that frame's
** function slot (two below its base, `base_ofs` above the trace's base),
** a constant Lua function other than the frame's own. Else 0.
*/
static uintptr_t tail_callee_slot(const struct walk *k,
                                  const struct tl_place *w)
{
  const struct vm_layout *lay = k->lay;
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t s, map, fn, pt;
  uint32_t mapofs, e, i;
  uint16_t nsnap;
  uint8_t nent, ffid;
  if (!lay->fr2 || w->nframes != 1 || w->base_ofs < 0 ||
      !vm_u16(0, k->T + tl->tr_nsnap, &nsnap) || (uint32_t)k->sn + 1 >= nsnap)
    return 0;
  s = k->snap + (uintptr_t)(k->sn + 1) * tl->snap_size;
  if (!vm_u32(0, s + tl->snap_mapofs, &mapofs) ||
      !vm_u8(0, s + tl->snap_nent, &nent) ||
      !vm_ptr(0, k->T + tl->tr_snapmap, &map))
    return 0;
  for (i = 0; i < nent; i++) {
    if (!vm_u32(0, map + 4 * ((uintptr_t)mapofs + i), &e))
      return 0;
    if ((e >> 24) != (uint32_t)w->base_ofs)
      continue;
    if ((e & (TL_SNAP_FRAME | TL_SNAP_CONT)) != 0 ||
        !tl_fr2_link(lay, 0, k->T, e, &fn) || !vm_is_gc(lay, 0, fn, GCT_FUNC) ||
        !vm_u8(0, fn + lay->fn_ffid, &ffid) || ffid != FFID_LUA ||
        (pt = vm_func_proto(lay, 0, fn)) == 0 || pt == w->frames[0].obj)
      return 0;
    return pt;
  }
  return 0;
}

/* Whether the next snapshot is at the entry of the callee w just entered
** (bytecode from `start`): such a snapshot (a link to the callee's own
** trace) resumes at its header. */
static int entry_is_next(const struct walk *k, struct tl_place *w,
                         uintptr_t start)
{
  w->frames[0].pc = start + 4;
  return k->have_next && at_next(w, &k->next);
}

/* Where a path found its event: the place, or none, and the built-in a
** string was charged to the call of (proven by its upvalue), or 0. */
struct walk_found {
  int found;
  uint8_t ffid;
  struct tl_place at;
};

static int walk_set(const struct vm_layout *lay, const struct tl_place *w,
                    uintptr_t pc, uintptr_t start, uintptr_t end,
                    struct walk_found *f)
{
  uint32_t line;
  if (!vm_proto_line(lay, 0, w->frames[0].obj, (uint32_t)((pc - start) / 4),
                     (uint32_t)((end - start) / 4), &line))
    return 0;
  f->found = 1;
  f->ffid = 0;
  f->at = *w;
  f->at.frames[0].pc = pc + 4;
  f->at.pt = w->frames[0].obj;
  f->at.line = line;
  return 1;
}

/* Whether two places found are the same. */
static int same_found(const struct walk_found *a, const struct walk_found *b)
{
  return a->at.nframes == b->at.nframes &&
         a->at.frames[0].obj == b->at.frames[0].obj &&
         a->at.frames[0].pc == b->at.frames[0].pc;
}

/* What a path found (walk_path's result, bits). */
#define WALK_CALL 1    /* Only a call whose callee is not proven. */
#define WALK_MATCH 2   /* A bytecode of the event's kind. */
#define WALK_REACHED 4 /* And the path reached the next snapshot's PC. */

/* A path's rank at a branch: reaching the next snapshot first. */
static int walk_rank(int r)
{
  return (r & WALK_REACHED ? 4 : 0) + (r & WALK_MATCH ? 2 : 0) +
         (r & WALK_CALL ? 1 : 0);
}

/* The slot a UGET loaded, and the upvalue, while the op at hand is still
** in the frame of that UGET and no op wrote that slot since. */
struct walk_uget {
  int slot; /* -1: none. */
  uint32_t uv;
};

/* What op `ins` (of kind `kind`) leaves of u: a call's results, KNIL's
** range or any other op's A operand may write its slot. (An op that reads
** A, a store, forgets it too.) */
static void uget_after(const struct vm_trace_layout *tl, struct walk_uget *u,
                       uint32_t ins, uint8_t op, uint8_t kind)
{
  int a = (int)((ins >> 8) & 0xff);
  if (op == tl->bc_uget) {
    u->slot = a;
    u->uv = ins >> 16;
  } else if (kind == TL_BC_CALL || kind == TL_BC_TAILCALL ||
             kind == TL_BC_RETURN || kind >= TL_BC_ITERC || a == u->slot ||
             (op == tl->bc_knil && a <= u->slot &&
              u->slot <= (int)(ins >> 16))) {
    u->slot = -1;
  }
}

/* The body of the loop whose JFORL or JITERL is at pc (its D is a trace's
** number): after the FORI or JFORI whose D is the op after a JFORL; after
** the first JMP or ISNEXT to the op before a JITERL (its ITERC or ITERN:
** a goto to the body's end, later, goes there too, and none can come from
** before the loop). A bounded scan back to the prototype's start; 0 if
** not found. */
static uintptr_t loop_body(const struct vm_trace_layout *tl, uint8_t op,
                           uintptr_t pc, uintptr_t start)
{
  uintptr_t at, to, body = 0;
  uint32_t ins, n;
  uint8_t o, kind;
  for (at = pc - 4, n = 0; at > start; at -= 4, n++) {
    if (n == TL_MAX_LOOP_SCAN || !vm_u32(0, at, &ins))
      return 0;
    o = (uint8_t)(ins & 0xff);
    kind = tl->bc_kind[o];
    to = at + 4 + ((uintptr_t)(ins >> 16) - 0x8000) * 4;
    if (op == tl->bc_jforl && kind == TL_BC_LOOPIN && to == pc + 4)
      return at + 4;
    if (op != tl->bc_jforl && (o == tl->bc_jmp || kind == TL_BC_JUMP) &&
        to == pc - 4)
      body = at + 4;
  }
  return body;
}

/*
** One path of the walk, from pc in w's innermost frame (of closure fn, 0
** if not known), with `call`, the
** first call passed whose callee is not proven (where the event is when
** nothing else is found). Returns WALK_* bits, *out set if any. A path
** ends at the next snapshot's PC: what the event is lies before it. On a
** path past a conditional branch (`branched`) the walk goes on after the
** event's bytecode, to tell whether that way reaches the next snapshot.
*/
static int walk_path(struct walk *k, struct tl_place w, uintptr_t fn,
                     uintptr_t pc, int branches, int branched,
                     struct walk_found call, struct walk_found *out)
{
  const struct vm_layout *lay = k->lay;
  const struct vm_trace_layout *tl = &lay->tl;
  struct walk_found a, b, match;
  uintptr_t start, end, callee, jump;
  uint32_t ins;
  uint8_t op, kind;
  int i, first = 1, ra, rb, reached = 0, loop;
  struct walk_uget uget = {-1, 0}, before;
  match.found = 0;
  if (!bc_bounds(lay, w.frames[0].obj, &start, &end))
    return 0;
  for (;; first = 0) {
    if (k->steps++ >= TL_MAX_WALK || pc <= start || pc >= end ||
        !vm_u32(0, pc, &ins))
      break;
    w.frames[0].pc = pc + 4;
    if (!first && k->have_next && at_next(&w, &k->next)) {
      reached = WALK_REACHED;
      break;
    }
    op = (uint8_t)(ins & 0xff);
    kind = tl->bc_kind[op];
    before = uget;
    uget_after(tl, &uget, ins, op, kind);
    if (!match.found && walk_matches(tl, k->want, k->string_keys, op)) {
      if (!walk_set(lay, &w, pc, start, end, &match))
        return 0;
      if (!branched)
        break;
    }
    jump = pc + 4 + ((uintptr_t)(ins >> 16) - 0x8000) * 4;
    if (op == tl->bc_jmp || kind == TL_BC_JUMP) {
      pc = jump;
    } else if ((loop = kind == TL_BC_LOOPBACK || kind == TL_BC_JLOOPBACK ||
                       kind == TL_BC_LOOPIN) ||
               (uint8_t)(op - tl->bc_islt) <= tl->bc_isf - tl->bc_islt) {
      /* Both ways (a loop's D, or on; a condition's JMP, or past it): the
      ** one that reaches the next snapshot, that finds the event's kind of
      ** bytecode (a tie: the same one, or none). */
      if (kind == TL_BC_JLOOPBACK && (jump = loop_body(tl, op, pc, start)) == 0)
        break;
      if (branches == 0)
        break;
      ra = walk_path(k, w, fn, loop ? jump : pc + 4, branches - 1, 1, call, &a);
      rb = walk_path(k, w, fn, loop ? pc + 4 : pc + 8, branches - 1, 1, call,
                     &b);
      if (k->steps >= TL_MAX_WALK)
        return 0; /* A way cut short: which one the trace took is unknown. */
      if (match.found) { /* Only whether this path reaches it. */
        reached = (ra | rb) & WALK_REACHED;
        break;
      }
      if (walk_rank(ra) == walk_rank(rb) && (ra == 0 || !same_found(&a, &b)))
        return 0;
      if (walk_rank(rb) > walk_rank(ra)) {
        ra = rb;
        a = b;
      }
      *out = a;
      return ra;
    } else if (kind == TL_BC_QUIET || kind == TL_BC_EFFECT ||
               kind == TL_BC_NEXT || op == tl->bc_loop) {
      pc += 4;
    } else if (kind == TL_BC_LINK) {
      /* JLOOP: a LOOP or an ITERN, then, that went on at the next op (the
      ** bytecode is patched when a loop gets a trace, so this trace may
      ** have run either); or a link to that loop's trace, where this
      ** trace's last snapshot is, at this op or the next. */
      if (!k->have_next)
        break;
      pc += 4;
    } else if (kind == TL_BC_CALL || kind == TL_BC_TAILCALL ||
               kind == TL_BC_ITERC) {
      int d = 0;
      uintptr_t callee_fn = 0;
      uint8_t ffid = FFID_C;
      callee = !k->have_next            ? 0
               : kind != TL_BC_TAILCALL ? proven_callee(&w, &k->next, pc)
                                        : proven_tail_callee(&w, &k->next, &d);
      if (callee == 0 && kind == TL_BC_TAILCALL &&
          (!k->have_next || k->next.base_ofs == w.base_ofs) &&
          (callee = tail_callee_slot(k, &w)) != 0)
        w.base_replaced = 1; /* The stack's slot holds the caller still. */
      /* (Not for a new key: a store in the callee, to a table made from
      ** a template with that key, adds none.) */
      if (callee == 0 && kind == TL_BC_CALL &&
          (int)((ins >> 8) & 0xff) == before.slot &&
          (callee_fn = upvalue_callee(lay, fn, before.uv, &ffid)) != 0 &&
          ffid == FFID_LUA && k->want != WALK_KEY)
        callee = vm_func_proto(lay, 0, callee_fn);
      if (callee != 0 && kind == TL_BC_TAILCALL) {
        /* The callee takes the caller's frame. */
        if (!bc_bounds(lay, callee, &start, &end))
          return 0;
        w.frames[0].obj = callee;
        fn = 0;
        if (entry_is_next(k, &w, start)) {
          reached = WALK_REACHED;
          break;
        }
        pc = start + 4;
        continue;
      }
      if (callee == 0) {
        /* A built-in's call, run inline: a string is its (past a
        ** branch, only if that way holds no CAT: a built-in the JIT
        ** compiler does not compile stitches, and its way is not the
        ** trace's; not an iterator's, ipairs' or next's, which make
        ** nothing); a table or a key is its only if nothing else is. */
        if (!match.found && k->want == WALK_OTHER && !branched &&
            kind != TL_BC_ITERC) {
          if (!walk_set(lay, &w, pc, start, end, &match))
            return 0;
          if (kind == TL_BC_CALL && string_builtin(tl, ffid))
            match.ffid = ffid;
          break;
        }
        if (!call.found && !walk_set(lay, &w, pc, start, end, &call))
          return 0;
        if (kind == TL_BC_TAILCALL)
          break;
        pc += 4;
        continue;
      }
      if (w.nframes >= TL_MAX_FRAMES || !bc_bounds(lay, callee, &start, &end))
        return 0;
      for (i = w.nframes; i > 0; i--)
        w.frames[i] = w.frames[i - 1];
      w.nframes++;
      w.frames[0].obj = callee;
      w.frames[0].ffid = FFID_LUA;
      fn = callee_fn;
      if (entry_is_next(k, &w, start)) {
        reached = WALK_REACHED;
        break;
      }
      pc = start + 4; /* After the function header. */
    } else if (kind == TL_BC_RETURN && w.nframes >= 2) {
      for (i = 1; i < w.nframes; i++)
        w.frames[i - 1] = w.frames[i];
      w.nframes--;
      fn = 0;
      if (!bc_bounds(lay, w.frames[0].obj, &start, &end))
        return 0;
      pc = w.frames[0].pc; /* The op after the call. */
    } else {
      break;
    }
  }
  if (match.found) {
    *out = match;
    return WALK_MATCH | reached;
  }
  if (!call.found)
    return 0;
  *out = call;
  return WALK_CALL | reached;
}

int tl_walk_forward(const struct vm_layout *lay, uintptr_t g, uintptr_t T,
                    uintptr_t snap, int sn, uintptr_t target,
                    struct tl_place *pl)
{
  const struct vm_trace_layout *tl = &lay->tl;
  struct walk k;
  struct walk_found none, out;
  uintptr_t fn;
  uint16_t nsnap;
  k.lay = lay;
  k.T = T;
  k.snap = snap;
  k.sn = sn;
  k.want = helper_kind(tl, target);
  k.steps = 0;
  k.next.nframes = 0;
  none.found = 0;
  if (!tl->walk_ok || k.want == WALK_NONE)
    return 0;
  fn = tl->upval_ok ? inner_closure(&k, g, pl) : 0;
  k.have_next = vm_u16(0, T + tl->tr_nsnap, &nsnap) &&
                (uint32_t)sn + 1 < nsnap &&
                tl_snapshot_place(lay, 0, T, snap, sn + 1, &k.next);
  k.string_keys =
      k.want == WALK_KEY && k.have_next && region_string_keys(lay, T, snap, sn);
  if (!walk_path(&k, *pl, fn, pl->frames[0].pc - 4, TL_MAX_BRANCHES, 0, none,
                 &out))
    return 0;
  out.at.stack_id = pl->stack_id;
  *pl = out.at;
  if (out.ffid != 0 && pl->nframes < TL_MAX_FRAMES) {
    /* The built-in's frame above its caller, as the interpreter's. */
    int i;
    for (i = pl->nframes; i > 0; i--)
      pl->frames[i] = pl->frames[i - 1];
    pl->frames[0].obj = BUILTIN_ADDR(out.ffid);
    pl->frames[0].pc = 0;
    pl->frames[0].ffid = out.ffid;
    pl->nframes++;
  }
  return 1;
}
