/*
** Compiled-code attribution in the hook: a cache of the places of
** (trace, return address) and of (trace, exit), filled by the reads
** below, which calibration (vm_trace_calib.c) proves with `safe`
** set. See trace_lines.h.
*/
#define _GNU_SOURCE
#include "trace_lines.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The C frame the running thread's Lua code runs on (cur_L->cframe).
** Returns 1 with *cf set. */
VM_INLINE int tl_cframe(const struct vm_layout *lay, int safe, uintptr_t g,
                        uintptr_t *cf)
{
  uintptr_t L;
  if (!vm_ref(lay, safe, g + lay->g_cur_L, &L) || L == 0 ||
      !vm_ptr(safe, L + lay->L_cframe, cf))
    return 0;
  *cf &= ~(uintptr_t)3;
  return 1;
}

/* The stack pointer of trace T at a helper call, run on C frame cf: cf
** less JLOOP's adjustment and the trace's own. Returns 0 if unreadable. */
VM_INLINE uintptr_t tl_trace_sp(const struct vm_layout *lay, int safe,
                                uintptr_t cf, uintptr_t T)
{
  uint16_t spadjust;
  if (!vm_u16(safe, T + lay->tl.tr_spadjust, &spadjust) ||
      cf < TL_JLOOP_ADJUST + (uintptr_t)spadjust)
    return 0;
  return cf - TL_JLOOP_ADJUST - spadjust;
}

#if !defined(__aarch64__)
/* The return address into T's machine code of the helper call now
** running, or 0. `low` is an address in the caller's own frame: the slot
** read lies between it and the C frame the trace runs on. */
VM_INLINE uintptr_t tl_return_address(const struct vm_layout *lay, int safe,
                                      uintptr_t g, uintptr_t T, uintptr_t low,
                                      uintptr_t *mcode_out)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t cf, sp, slot, ret, mcode;
  uint32_t szmcode;
  uint8_t b[2];
  if (!tl_cframe(lay, safe, g, &cf) || (sp = tl_trace_sp(lay, safe, cf, T)) < 8)
    return 0;
  slot = sp - 8;
  if (slot <= low || slot - low > TL_STACK_SPAN || !vm_ptr(safe, slot, &ret) ||
      !vm_ptr(safe, T + tl->tr_mcode, &mcode) ||
      !vm_u32(safe, T + tl->tr_szmcode, &szmcode))
    return 0;
  /* A call before it: E8 rel32, or FF D0 (call rax). */
  if (ret < mcode + 5 || ret >= mcode + szmcode ||
      !vm_read(safe, ret - 2, b, 2))
    return 0;
  if (!(b[0] == 0xff && b[1] == 0xd0) &&
      !(vm_u8(safe, ret - 5, &b[0]) && b[0] == 0xe8))
    return 0;
  *mcode_out = mcode;
  return ret;
}

#else
/* arm64: whether a call (BL imm26 or BLR Xn) precedes `ret` in mcode. */
VM_INLINE int tl_called_before(int safe, uintptr_t ret, uintptr_t mcode)
{
  uint32_t ins;
  if (ret < mcode + 4 || (ret & 3) != 0 || !vm_u32(safe, ret - 4, &ins))
    return 0;
  return (ins & 0xfc000000u) == 0x94000000u ||
         (ins & 0xfffffc1fu) == 0xd63f0000u;
}
#endif

VM_INLINE int snapshot_at(const struct vm_layout *lay, int safe, uintptr_t T,
                          uint32_t ofs, uintptr_t *snap_out)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t snap;
  uint16_t nsnap, mcofs;
  uint32_t lo = 0, hi;
  if (!vm_u16(safe, T + tl->tr_nsnap, &nsnap) || nsnap == 0 ||
      !vm_ptr(safe, T + tl->tr_snap, &snap) || snap == 0)
    return -1;
  hi = nsnap;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (!vm_u16(safe, snap + mid * (uintptr_t)tl->snap_size + tl->snap_mcofs,
                &mcofs))
      return -1;
    if (ofs < mcofs)
      hi = mid;
    else
      lo = mid + 1;
  }
  if (lo == 0)
    return -1;
  *snap_out = snap;
  return (int)lo - 1;
}

VM_INLINE uint32_t mcode_ofs(uintptr_t ret, uintptr_t mcode)
{
  return (uint32_t)((ret - TL_MCODE_UNIT - mcode) / TL_MCODE_UNIT);
}

/* Adds the caller frame whose return PC is `ret` (a Lua frame link). */
VM_INLINE int tl_add_caller(const struct vm_layout *lay, int safe,
                            struct tl_place *pl, uintptr_t ret)
{
  uint32_t pos;
  uintptr_t pt;
  if ((ret & 3) != 0 || pl->nframes >= TL_MAX_FRAMES)
    return 0;
  pt = tl_proto_of_pc(lay, safe, ret - 4, &pos);
  if (pt == 0)
    return 0;
  pl->frames[pl->nframes].obj = pt;
  pl->frames[pl->nframes].pc = ret;
  pl->frames[pl->nframes].ffid = FFID_LUA;
  pl->nframes++;
  return 1;
}

VM_INLINE int snapshot_place(const struct vm_layout *lay, int safe, uintptr_t T,
                             uintptr_t snap, int sn, struct tl_place *pl)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t s = snap + (uintptr_t)sn * tl->snap_size, map, pc, pt;
  uint32_t mapofs, nsnapmap, end, pos, sizebc, k, depth = 0, e, cur = 0;
  uint16_t nsnap;
  uint8_t nent;
  if (!vm_u32(safe, s + tl->snap_mapofs, &mapofs) ||
      !vm_u8(safe, s + tl->snap_nent, &nent) ||
      !vm_ptr(safe, T + tl->tr_snapmap, &map) ||
      !vm_u32(safe, T + tl->tr_nsnapmap, &nsnapmap) ||
      !vm_u16(safe, T + tl->tr_nsnap, &nsnap))
    return 0;
  /* This snapshot's entries and links end where the next one's begin. */
  end = nsnapmap;
  if ((uint32_t)sn + 1 < nsnap &&
      !vm_u32(safe, s + tl->snap_size + tl->snap_mapofs, &end))
    return 0;
  if (end > nsnapmap || mapofs + nent + (lay->fr2 ? 2u : 1u) > end)
    return 0;
  map += 4 * (uintptr_t)mapofs;
  if (lay->fr2) {
    uint64_t w;
    if (!vm_u64(safe, map + 4 * (uintptr_t)nent, &w))
      return 0;
    pc = (uintptr_t)(w >> 8);
    cur = (uint32_t)(w & 0xff) + 2; /* The innermost frame's base slot. */
  } else {
    uint32_t w;
    if (!vm_u32(safe, map + 4 * (uintptr_t)nent, &w))
      return 0;
    pc = w;
  }
  pt = tl_proto_of_pc(lay, safe, pc, &pos);
  if (pt == 0 || !vm_u32(safe, pt + lay->pt_sizebc, &sizebc) ||
      !vm_proto_line(lay, safe, pt, pos, sizebc, &pl->line))
    return 0;
  pl->pt = pt;
  pl->frames[0].obj = pt;
  pl->frames[0].pc = pc + 4;
  pl->frames[0].ffid = FFID_LUA;
  pl->nframes = 1;
  pl->base_ofs = 0;
  pl->base_replaced = 0;
  pl->tail_base = 0;
  /* The inlined callers, innermost first; the chain ends at the first
  ** frame that is not a Lua call (a continuation, a vararg frame). With
  ** FR2 each frame's base slot follows from its callee's and the call's
  ** A operand (the link of the frame based at slot b is at b - 1), and an
  ** entry for the outermost frame's function slot (two below its base) is
  ** a tail call made there; without FR2, one for slot 0 is (the base
  ** frame's slot), and the outermost frame is taken to be the base's. */
  if (lay->fr2) {
    int whole = 1, known = 1;
    for (k = nent; k-- > 0;) {
      uintptr_t link;
      uint32_t call;
      if (!vm_u32(safe, map + 4 * (uintptr_t)k, &e))
        return 0;
      if (!whole || !(e & TL_SNAP_FRAME) || (e >> 24) < 2)
        continue;
      if (!tl_fr2_link(lay, safe, T, e, &link) ||
          !tl_add_caller(lay, safe, pl, link)) {
        whole = 0;
        continue;
      }
      known = known && (e >> 24) + 1 == cur && vm_u32(safe, link - 4, &call) &&
              cur >= 4 + ((call >> 8) & 0xff);
      if (known)
        cur -= 2 + ((call >> 8) & 0xff);
    }
    pl->base_ofs = (int16_t)(whole && known ? (int)cur - 2 : -1);
    for (k = 0; pl->base_ofs >= 0 && k < nent; k++) {
      if (!vm_u32(safe, map + 4 * (uintptr_t)k, &e))
        return 0;
      if ((e >> 24) == cur - 2)
        pl->base_replaced = 1;
    }
  } else {
    int base = 0;
    for (k = 0; k < nent; k++) {
      if (!vm_u32(safe, map + 4 * (uintptr_t)k, &e))
        return 0;
      depth += (e & (TL_SNAP_FRAME | TL_SNAP_CONT)) && (e >> 24) != 0;
      base |= (e & TL_SNAP_FRAME) && (e >> 24) == 0;
    }
    for (k = 0; k < depth && mapofs + nent + 1 + k < end; k++) {
      if (!vm_u32(safe, map + 4 * ((uintptr_t)nent + 1 + k), &e) ||
          !tl_add_caller(lay, safe, pl, e))
        break;
    }
    pl->base_replaced = (uint8_t)(k == depth && base);
  }
  return 1;
}

VM_INLINE uintptr_t call_target(int safe, uintptr_t ret, uintptr_t mcode)
{
#if defined(__aarch64__)
  /* BL imm26, or BLR Xn with Xn's constant. */
  uint32_t ins;
  int32_t imm;
  uint64_t k;
  if (ret < mcode + 4 || !vm_u32(safe, ret - 4, &ins))
    return 0;
  if ((ins & 0xfffffc1fu) == 0xd63f0000u)
    return tl_a64_const(safe, ret - 4, mcode, (ins >> 5) & 31, &k)
               ? (uintptr_t)k
               : 0;
  if ((ins & 0xfc000000u) != 0x94000000u)
    return 0;
  imm = (int32_t)(ins << 6) >> 6;
  return ret - 4 + (uintptr_t)((intptr_t)imm * 4);
#else
  uint8_t b[2];
  int32_t rel;
  uint64_t imm;
  if (ret < mcode + 5 || !vm_read(safe, ret - 2, b, 2))
    return 0;
  if (b[0] == 0xff && b[1] == 0xd0) { /* mov rax, imm64; call rax */
    if (ret < mcode + 12 || !vm_read(safe, ret - 12, b, 2) || b[0] != 0x48 ||
        b[1] != 0xb8 || !vm_u64(safe, ret - 10, &imm))
      return 0;
    return (uintptr_t)imm;
  }
  if (!vm_u8(safe, ret - 5, &b[0]) || b[0] != 0xe8 ||
      !vm_i32(safe, ret - 4, &rel))
    return 0;
  return ret + (uintptr_t)(intptr_t)rel;
#endif
}

/* Bytecodes walked after an inlined call returns. */
#define TL_MAX_AFTER 32

/* The innermost frame of pl returned: its caller, prototype pt, is the
** event's, at the bytecode after the call at pc, on `line`. */
VM_INLINE void tl_returned_to(struct tl_place *pl, uintptr_t pt, uintptr_t pc,
                              uint32_t line)
{
  int i;
  for (i = 1; i < pl->nframes; i++)
    pl->frames[i - 1] = pl->frames[i];
  pl->nframes--;
  pl->frames[0].pc = pc + 4;
  pl->pt = pt;
  pl->line = line;
}

/*
** A new key stored right after an inlined call returned (`t.name = f(i)`):
** its snapshot can be the callee's last one (LuaJIT's loop optimisation
** drops a snapshot no guard follows, the per-line one included), so the
** place is the callee's. When the call went to lj_tab_newkey, the callee's
** code from the snapshot's PC reaches a return before any store, and the
** caller's next instruction (after a MOV at most) is a store, the event is
** that store's: the place moves to the caller's frame. Bounded scans of
** live bytecode; anything else leaves the place as it is.
*/
VM_INLINE void tl_store_after_return(const struct vm_layout *lay, int safe,
                                     uintptr_t target, struct tl_place *pl)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t pc, end, pt;
  uint32_t sizebc, line, pos, k;
  uint8_t op;
  if (!tl->newkey_ok || target != tl->newkey || pl->nframes < 2)
    return;
  pt = pl->frames[0].obj;
  if (!vm_u32(safe, pt + lay->pt_sizebc, &sizebc))
    return;
  end = pt + lay->pt_size + 4 * (uintptr_t)sizebc;
  for (pc = pl->frames[0].pc - 4, k = 0; k < 16 && pc < end; k++, pc += 4) {
    if (!vm_u8(safe, pc, &op) || tl_is_store(tl, op))
      return;
    if (op == tl->bc_ret0 || op == tl->bc_ret1 || op == tl->bc_ret)
      break;
  }
  if (k == 16 || pc >= end)
    return;
  pt = pl->frames[1].obj;
  pc = pl->frames[1].pc; /* The instruction after the call. */
  if (!vm_u32(safe, pt + lay->pt_sizebc, &sizebc))
    return;
  end = pt + lay->pt_size + 4 * (uintptr_t)sizebc;
  for (k = 0; k < 2 && pc < end; k++, pc += 4) {
    if (!vm_u8(safe, pc, &op))
      return;
    if (tl_is_store(tl, op))
      break;
    if (op != tl->bc_mov)
      return;
  }
  if (k == 2 || pc >= end)
    return;
  pos = (uint32_t)((pc - (pt + lay->pt_size)) / 4);
  if (!vm_proto_line(lay, safe, pt, pos, sizebc, &line))
    return;
  tl_returned_to(pl, pt, pc, line);
}

VM_INLINE int concat_string(const struct vm_trace_layout *tl, int safe,
                            uintptr_t ir, uint32_t ref, uint16_t call,
                            uint16_t hdr)
{
  uint16_t op1, op2, a;
  uint8_t o;
  int k;
  if (call < TL_REF_BIAS || call >= ref || hdr < TL_REF_BIAS || hdr >= call ||
      !ir_ins(safe, ir, call, &o, &a, &op2) || o != tl->ir_calll ||
      op2 != tl->puttab_id)
    return 0;
  for (k = 0; k < 8 && a != hdr; k++) { /* The arguments, last first. */
    uint16_t next;
    if (a <= hdr || a >= call || !ir_ins(safe, ir, a, &o, &next, &op2) ||
        o != tl->ir_carg)
      return 0;
    a = next;
  }
  return a == hdr && ir_ins(safe, ir, hdr, &o, &op1, &op2) &&
         o == tl->ir_bufhdr && op2 == tl->bufhdr_reset;
}

/* IR PROF instructions in snapshot sn's region, or -1. */
VM_INLINE int tl_region_profs(const struct vm_layout *lay, int safe,
                              uintptr_t T, uintptr_t snap, int sn)
{
  uintptr_t ir;
  uint16_t from, to, op1, op2;
  uint32_t ref;
  uint8_t o;
  int n = 0;
  if (!tl_region(lay, safe, T, snap, sn, &from, &to, &ir))
    return -1;
  for (ref = from; ref < to; ref++) {
    if (!ir_ins(safe, ir, ref, &o, &op1, &op2))
      return -1;
    n += o == lay->tl.ir_prof;
  }
  return n;
}

/*
** An event made after an inlined callee returned, in a snapshot region
** that runs on into the caller: LuaJIT's loop optimisation drops the
** looping part's snapshots that no guard separates (the per-line ones
** too), so the last snapshot left can be the callee's, at its return.
** Proven when the callee's code from the snapshot's PC is moves and
** constants up to a return (nothing there can call), the next snapshot
** is in the caller's frame (its callers the same), and the caller's
** bytecode from the call to that snapshot's PC runs straight on, every op
** that may call on one line: the event is that line's, in the caller's
** frame. With per-line snapshots, the region's PROF instructions (one at
** each change of line or function the recorder saw) must not outnumber
** the caller's lines walked: more would mean a callee inlined unseen.
** Bounded scans of live bytecode and IR; returns 1 if the place moved.
*/
VM_INLINE int tl_after_return(const struct vm_layout *lay, int safe,
                              uintptr_t T, uintptr_t snap, int sn,
                              struct tl_place *pl)
{
  const struct vm_trace_layout *tl = &lay->tl;
  struct tl_place next;
  uintptr_t pc, end, pt, first = 0;
  uint32_t sizebc, line = 0, prev = 0, at, k, lines = 0;
  uint16_t nsnap;
  uint8_t op, kind;
  int i, profs;
  if (!tl->after_ok || pl->nframes < 2 || pl->nframes >= TL_MAX_FRAMES)
    return 0;
  pt = pl->frames[0].obj;
  if (!vm_u32(safe, pt + lay->pt_sizebc, &sizebc))
    return 0;
  end = pt + lay->pt_size + 4 * (uintptr_t)sizebc;
  for (pc = pl->frames[0].pc - 4, k = 0;; k++, pc += 4) {
    if (k == TL_MAX_AFTER || pc >= end || !vm_u8(safe, pc, &op))
      return 0;
    kind = tl->bc_kind[op];
    if (kind == TL_BC_RETURN)
      break;
    if (kind != TL_BC_QUIET)
      return 0;
  }
  if (!vm_u16(safe, T + tl->tr_nsnap, &nsnap) || (uint32_t)sn + 1 >= nsnap ||
      !snapshot_place(lay, safe, T, snap, sn + 1, &next) ||
      next.nframes != pl->nframes - 1)
    return 0;
  for (i = 0; i < next.nframes; i++)
    if (next.frames[i].obj != pl->frames[i + 1].obj ||
        (i > 0 && next.frames[i].pc != pl->frames[i + 1].pc))
      return 0;
  pt = pl->frames[1].obj;
  if (!vm_u32(safe, pt + lay->pt_sizebc, &sizebc))
    return 0;
  end = next.frames[0].pc - 4; /* The next snapshot's PC. */
  pc = pl->frames[1].pc;       /* The op after the call. */
  if (end < pc || end - pc > 4 * TL_MAX_AFTER ||
      end >= pt + lay->pt_size + 4 * (uintptr_t)sizebc)
    return 0;
  for (k = 0; pc < end; pc += 4, k++) {
    uint32_t l;
    at = (uint32_t)((pc - (pt + lay->pt_size)) / 4);
    if (!vm_u8(safe, pc, &op) || !vm_proto_line(lay, safe, pt, at, sizebc, &l))
      return 0;
    lines += k == 0 || l != prev;
    prev = l;
    kind = tl->bc_kind[op];
    if (kind == TL_BC_QUIET)
      continue;
    if ((kind != TL_BC_EFFECT && kind != TL_BC_CALL) ||
        (first != 0 && l != line))
      return 0;
    if (first == 0) {
      first = pc;
      line = l;
    }
  }
  profs = tl_region_profs(lay, safe, T, snap, sn);
  if (first == 0 || profs < 0 || (uint32_t)profs > lines)
    return 0;
  tl_returned_to(pl, pt, first, line);
  return 1;
}

/* IR instructions scanned back from a snapshot to the trace's LOOP. */
#define TL_MAX_LOOP_SCAN 4096

/* Snapshot i's first IR reference and the word of its PC (with FR2 the
** PC and base slot, else the PC). Returns 1 on success. */
VM_INLINE int tl_snap_key(const struct vm_layout *lay, int safe, uintptr_t T,
                          uintptr_t snap, uint32_t i, uint16_t *ref,
                          uint64_t *pcword)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t s = snap + (uintptr_t)i * tl->snap_size, map;
  uint32_t mapofs, w;
  uint8_t nent;
  if (!vm_u16(safe, s + tl->snap_ref, ref) ||
      !vm_u32(safe, s + tl->snap_mapofs, &mapofs) ||
      !vm_u8(safe, s + tl->snap_nent, &nent) ||
      !vm_ptr(safe, T + tl->tr_snapmap, &map))
    return 0;
  map += 4 * ((uintptr_t)mapofs + nent);
  if (lay->fr2)
    return vm_u64(safe, map, pcword);
  if (!vm_u32(safe, map, &w))
    return 0;
  *pcword = w;
  return 1;
}

/* The IR instructions of op `o` in [from, to): their number (stopping at
** 2), the first's reference in *at. -1 if unreadable. */
VM_INLINE int tl_count_op(int safe, uintptr_t ir, uint32_t from, uint32_t to,
                          uint8_t o, uint32_t *at)
{
  uint32_t ref;
  uint16_t op1, op2;
  uint8_t x;
  int n = 0;
  if (to < from || to - from > TL_MAX_REGION)
    return -1;
  for (ref = from; ref < to && n < 2; ref++) {
    if (!ir_ins(safe, ir, ref, &x, &op1, &op2))
      return -1;
    if (x == o && n++ == 0)
      *at = ref;
  }
  return n;
}

/* The copies' sources of snapshot sn, in a loop's copied body (LOOP at
** `loop`), whose PC words are w1 and (sn + 1's) w2: the last snapshot j of
** the first pass with sn's PC that a later one j2 with sn + 1's PC
** follows, and their refs. Returns 1 if found. */
VM_INLINE int tl_loop_source(const struct vm_layout *lay, int safe, uintptr_t T,
                             uintptr_t snap, uint32_t sn, uint32_t loop,
                             uint64_t w1, uint64_t w2, uint32_t *j_out,
                             uint32_t *j2_out, uint16_t *ref_j, uint16_t *ref)
{
  uint64_t w = 0;
  uint32_t j, j2;
  for (j = sn; j-- > 0;) {
    if (!tl_snap_key(lay, safe, T, snap, j, ref_j, &w))
      return 0;
    if (*ref_j >= loop || w != w1)
      continue;
    for (j2 = j + 1; j2 < sn; j2++) {
      if (!tl_snap_key(lay, safe, T, snap, j2, ref, &w))
        return 0;
      if (*ref >= loop || w == w2)
        break;
    }
    if (j2 < sn && *ref < loop && w == w2) {
      *j_out = j;
      *j2_out = j2;
      return 1;
    }
  }
  return 0;
}

/*
** A new key stored in the copied body of a loop (after IR LOOP): LuaJIT's
** loop optimisation drops a copied snapshot that no guard follows, the
** per-line one of the store too, so its region can be the snapshot of an
** earlier line. The body is a copy of the first pass, in order, and each
** snapshot kept is a copy of one there (the same PC): when the call went
** to lj_tab_newkey, the region holds one NEWREF, and the first pass
** between the copies' sources holds one too, the event is charged to the
** first pass's snapshot of that NEWREF. Bounded scans of live IR; returns
** 1 if the place moved.
*/
VM_INLINE int tl_loop_newkey(const struct vm_layout *lay, int safe, uintptr_t T,
                             uintptr_t snap, int sn, uintptr_t target,
                             struct tl_place *pl)
{
  const struct vm_trace_layout *tl = &lay->tl;
  struct tl_place first;
  uintptr_t ir;
  uint64_t w1, w2, w;
  uint32_t loop, r, at, i, j, k, j2;
  uint16_t nsnap, from, to, ref, ref_j;
  uint16_t op1, op2;
  uint8_t o;
  int f;
  if (!tl->after_ok || !tl->newkey_ok || target != tl->newkey ||
      tl->ir_loop == 0xff || !vm_u16(safe, T + tl->tr_nsnap, &nsnap) ||
      (uint32_t)sn + 1 >= nsnap || !vm_ptr(safe, T + tl->tr_ir, &ir) ||
      ir == 0 || !tl_snap_key(lay, safe, T, snap, (uint32_t)sn, &from, &w1) ||
      !tl_snap_key(lay, safe, T, snap, (uint32_t)sn + 1, &to, &w2) ||
      from <= TL_REF_BIAS || from - TL_REF_BIAS > TL_MAX_LOOP_SCAN)
    return 0;
  for (loop = from; --loop > TL_REF_BIAS;) {
    if (!ir_ins(safe, ir, loop, &o, &op1, &op2))
      return 0;
    if (o == tl->ir_loop)
      break;
  }
  if (loop == TL_REF_BIAS ||
      tl_count_op(safe, ir, from, to, tl->ir_newref, &at) != 1 ||
      !tl_loop_source(lay, safe, T, snap, (uint32_t)sn, loop, w1, w2, &j, &j2,
                      &ref_j, &ref) ||
      tl_count_op(safe, ir, ref_j, ref, tl->ir_newref, &r) != 1)
    return 0;
  /* The first pass's snapshot of that NEWREF: the last at or before it. */
  for (k = j, i = j + 1; i < j2; i++) {
    if (!tl_snap_key(lay, safe, T, snap, i, &ref, &w))
      return 0;
    if (ref <= r)
      k = i;
  }
  if (k == j || !snapshot_place(lay, safe, T, snap, (int)k, &first) ||
      first.nframes < pl->nframes)
    return 0;
  /* It runs in the same frames, or in callees inlined above them. */
  for (f = 1; f <= pl->nframes - 1; f++)
    if (first.frames[first.nframes - f].obj != pl->frames[pl->nframes - f].obj)
      return 0;
  (void)at;
  first.stack_id = pl->stack_id;
  *pl = first;
  return 1;
}

/* Whether IR call `id` is one that only string.format's recorder emits. */
VM_INLINE int tl_format_call(const struct vm_trace_layout *tl, uint16_t id)
{
  int i;
  for (i = 0; i < TL_FORMAT_IDS; i++)
    if (tl->format_ids[i] == id)
      return 1;
  return 0;
}

/* Whether the BUFSTR at `ref` makes string.format's string: its buffer's
** chain, from its last put down to the freshly reset buffer the BUFSTR
** reads (its header), is BUFPUTs and CALLLs only, at least one a call to
** a helper that only string.format's recorder emits (an integer `%d` or a
** plain `%s` is a BUFPUT, as in a concatenation: alone they prove
** nothing) and none to another helper (string.rep's, table.concat's). */
VM_INLINE int tl_format_string(const struct vm_trace_layout *tl, int safe,
                               uintptr_t ir, uint32_t ref, uint16_t last,
                               uint16_t hdr)
{
  uint16_t x = last, op1, op2;
  uint8_t o;
  int k, j, calls = 0;
  if (hdr < TL_REF_BIAS || hdr >= ref)
    return 0;
  for (k = 0; k < 64 && x != hdr; k++) {
    if (x <= hdr || x >= ref || !ir_ins(safe, ir, x, &o, &op1, &op2))
      return 0;
    if (o == tl->ir_bufput) {
      x = op1;
      continue;
    }
    if (o != tl->ir_calll || !tl_format_call(tl, op2))
      return 0;
    calls++;
    /* The arguments, last first: the first is the buffer so far. */
    for (j = 0, x = op1; j < 8 && x != hdr; j++, x = op1) {
      if (x <= hdr || x >= ref || !ir_ins(safe, ir, x, &o, &op1, &op2))
        return 0;
      if (o != tl->ir_carg)
        break;
    }
    if (j == 8)
      return 0;
  }
  return x == hdr && calls > 0 && ir_ins(safe, ir, hdr, &o, &op1, &op2) &&
         o == tl->ir_bufhdr && op2 == tl->bufhdr_reset;
}

/* Whether the BUFSTR at `ref` reads a chain of BUFPUTs only (an integer's
** `%d`, a plain `%s`, or a concatenation: the same IR) from `last` down to
** the freshly reset buffer `hdr`; their number in *nputs. */
VM_INLINE int tl_put_chain(const struct vm_trace_layout *tl, int safe,
                           uintptr_t ir, uint32_t ref, uint16_t last,
                           uint16_t hdr, uint32_t *nputs)
{
  uint16_t x = last, op1, op2;
  uint8_t o;
  uint32_t k;
  if (hdr < TL_REF_BIAS || hdr >= ref)
    return 0;
  for (k = 0; k < 64 && x != hdr; k++) {
    if (x <= hdr || x >= ref || !ir_ins(safe, ir, x, &o, &op1, &op2) ||
        o != tl->ir_bufput)
      return 0;
    x = op1;
  }
  *nputs = k;
  return x == hdr && k > 0 && ir_ins(safe, ir, hdr, &o, &op1, &op2) &&
         o == tl->ir_bufhdr && op2 == tl->bufhdr_reset;
}

/* Whether the instruction right before the buffer header `hdr`, in the
** same snapshot region (which begins at `from`), is the guard a call of
** string.format emits on its callee (IR EQ with the constant of a
** function whose fast function id is string.format's), which the recorder
** emits just before the built-in's own IR: a comparison's EQ is followed
** by a new snapshot. */
VM_INLINE int tl_format_guard(const struct vm_layout *lay, int safe,
                              uintptr_t ir, uint32_t from, uint32_t hdr)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t at, fn;
  uint16_t op1, op2, k;
  uint8_t o, ffid;
  if (hdr < from + 1 || !ir_ins(safe, ir, hdr - 1, &o, &op1, &k) ||
      o != tl->ir_eq || k >= TL_REF_BIAS || k < 2 ||
      !ir_ins(safe, ir, k, &o, &op1, &op2) || o != tl->ir_kgc)
    return 0;
  at = ir + TL_IRINS_SIZE * (uintptr_t)k;
  if (lay->gc64) {
    uint64_t v;
    if (!vm_u64(safe, at + TL_IRINS_SIZE, &v))
      return 0;
    fn = (uintptr_t)v;
  } else {
    uint32_t v;
    if (!vm_u32(safe, at, &v))
      return 0;
    fn = (uintptr_t)v;
  }
  return vm_is_gc(lay, safe, fn, GCT_FUNC) &&
         vm_u8(safe, fn + lay->fn_ffid, &ffid) && ffid == tl->format_ffid;
}

/*
** string.format's string made of puts alone (dual-number builds put an
** integer's `%d` as a concatenation puts it): proven by the guard on its
** callee right before its buffer's header (tl_format_guard). In a loop's
** copied body, where that guard is hoisted, the region must be a copy of
** a first pass's region (as tl_loop_newkey finds it) whose only BUFSTR,
** of as many puts, is proven so. Bounded scans of live IR.
*/
VM_INLINE int tl_format_puts(const struct vm_layout *lay, int safe, uintptr_t T,
                             uintptr_t snap, int sn, uintptr_t ir,
                             uint32_t from, uint32_t hdr, uint32_t nputs)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uint64_t w1, w2;
  uint32_t loop, j, j2, i, ref, at = 0, n0;
  uint16_t r, ref_j, ref_j2, op1, op2;
  uint8_t o;
  if (!tl->format_put_ok || from <= TL_REF_BIAS ||
      from - TL_REF_BIAS > TL_MAX_LOOP_SCAN)
    return 0;
  /* (The region of the first pass's last snapshot begins at LOOP.) */
  for (loop = from + 1; --loop > TL_REF_BIAS;) {
    if (!ir_ins(safe, ir, loop, &o, &op1, &op2))
      return 0;
    if (tl->ir_loop != 0xff && o == tl->ir_loop)
      break;
  }
  if (loop == TL_REF_BIAS) /* The first pass. */
    return tl_format_guard(lay, safe, ir, from, hdr);
  if (hdr < from || !tl_snap_key(lay, safe, T, snap, (uint32_t)sn, &r, &w1) ||
      !tl_snap_key(lay, safe, T, snap, (uint32_t)sn + 1, &r, &w2) ||
      !tl_loop_source(lay, safe, T, snap, (uint32_t)sn, loop, w1, w2, &j, &j2,
                      &ref_j, &ref_j2) ||
      tl_count_op(safe, ir, ref_j, ref_j2, tl->ir_bufstr, &at) != 1 ||
      !ir_ins(safe, ir, at, &o, &op1, &op2) ||
      !tl_put_chain(tl, safe, ir, at, op1, op2, &n0) || n0 != nputs)
    return 0;
  /* The first pass's region that holds the header. */
  for (ref = ref_j, i = j + 1; i < j2; i++) {
    if (!tl_snap_key(lay, safe, T, snap, i, &r, &w1))
      return 0;
    if (r <= op2)
      ref = r;
  }
  return tl_format_guard(lay, safe, ir, ref, op2);
}

/*
** A built-in called by a tail call (`return table.concat(t)`) takes its
** caller's frame in the interpreter: the event is then the caller's
** caller's, at its call. Proven when, from the place's PC on its line,
** the first call is a tail call and the place has an inlined caller.
** When the caller is the outermost frame, whose caller lies below and is
** known only event by event, the frame is added as for a call and
** `tail_base` set: the hook's full path then charges the event to that
** frame's caller and drops the caller's frame from the stack. Returns 1
** if frame 0 became the built-in's, with its caller's place. Bounded
** scan of live bytecode.
*/
VM_INLINE int tl_tail_builtin(const struct vm_layout *lay, int safe,
                              struct tl_place *pl, uint8_t ffid)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t pt = pl->frames[0].obj, pc, end, caller;
  uint32_t sizebc, k, l, pos;
  uint8_t op, kind = TL_BC_STOP;
  if (!tl->after_ok || (pl->nframes < 2 && (pl->base_ofs < 0 || !lay->fr2)) ||
      !vm_u32(safe, pt + lay->pt_sizebc, &sizebc))
    return 0;
  end = pt + lay->pt_size + 4 * (uintptr_t)sizebc;
  for (pc = pl->frames[0].pc - 4, k = 0; k < TL_MAX_AFTER && pc < end;
       k++, pc += 4) {
    pos = (uint32_t)((pc - (pt + lay->pt_size)) / 4);
    if (!vm_u8(safe, pc, &op) ||
        !vm_proto_line(lay, safe, pt, pos, sizebc, &l) || l != pl->line)
      return 0;
    kind = tl->bc_kind[op];
    if (kind != TL_BC_QUIET && kind != TL_BC_EFFECT)
      break;
  }
  if (kind != TL_BC_TAILCALL)
    return 0;
  if (pl->nframes < 2) {
    pl->tail_base = 1;
    return 0;
  }
  caller = pl->frames[1].obj;
  if (!vm_u32(safe, caller + lay->pt_sizebc, &sizebc))
    return 0;
  pos = (uint32_t)((pl->frames[1].pc - 4 - (caller + lay->pt_size)) / 4);
  if (!vm_proto_line(lay, safe, caller, pos, sizebc, &l))
    return 0;
  pl->frames[0].obj = BUILTIN_ADDR(ffid);
  pl->frames[0].pc = 0;
  pl->frames[0].ffid = ffid;
  pl->pt = caller;
  pl->line = l;
  return 1;
}

VM_INLINE void builtin_frame(const struct vm_layout *lay, int safe, uintptr_t T,
                             uintptr_t snap, int sn, uintptr_t target,
                             struct tl_place *pl)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t ir;
  uint16_t from, to, op1, op2;
  uint32_t ref, concats = 0, formats = 0, puts = 0, nputs = 0, hdr = 0;
  uint8_t o, ffid = tl->concat_ffid;
  int i;
  /* (Not again where the walk gave the place a built-in's frame.) */
  if (!tl->concat_ok || target == 0 || pl->nframes >= TL_MAX_FRAMES ||
      pl->frames[0].ffid != FFID_LUA ||
      (target != tl->buf_tostr && target != tl->buf_puttab))
    return;
  if (target == tl->buf_tostr) {
    if (!tl_region(lay, safe, T, snap, sn, &from, &to, &ir) || to == from)
      return;
    for (ref = from; ref < to; ref++) {
      if (!ir_ins(safe, ir, ref, &o, &op1, &op2))
        return;
      if (o != tl->ir_bufstr)
        continue;
      if (concat_string(tl, safe, ir, ref, op1, op2))
        concats++;
      else if (tl->format_ok && tl_format_string(tl, safe, ir, ref, op1, op2))
        formats++;
      else if (tl->format_put_ok &&
               tl_put_chain(tl, safe, ir, ref, op1, op2, &nputs))
        puts++, hdr = op2;
      else
        return;
    }
    /* Puts alone prove nothing but as the region's only string. */
    if (puts > 0 &&
        (puts > 1 || concats > 0 || formats > 0 ||
         !tl_format_puts(lay, safe, T, snap, sn, ir, from, hdr, nputs)))
      return;
    formats += puts;
    if ((concats == 0) == (formats == 0))
      return;
    if (formats > 0)
      ffid = tl->format_ffid;
  }
  if (tl_tail_builtin(lay, safe, pl, ffid))
    return;
  for (i = pl->nframes; i > 0; i--)
    pl->frames[i] = pl->frames[i - 1];
  pl->frames[0].obj = BUILTIN_ADDR(ffid);
  pl->frames[0].pc = 0;
  pl->frames[0].ffid = ffid;
  pl->nframes++;
}

VM_INLINE uintptr_t locate(const struct vm_layout *lay, int safe, uintptr_t g,
                           uint32_t *traceno, uintptr_t low, uintptr_t *ret,
                           uintptr_t *mcode)
{
#if defined(__aarch64__)
  /* The frame found must be the running trace's: its stack pointer. */
  uintptr_t cfa, cf,
      T = tl_unwind_trace(lay, safe, g, NULL, 0, 0, traceno, ret, mcode, &cfa,
                          &cf);
  (void)low;
  return T != 0 && cfa == tl_trace_sp(lay, safe, cf, T) ? T : 0;
#else
  uintptr_t T = vm_trace_object(lay, safe, g, *traceno);
  uint16_t no;
  if (!vm_is_gc(lay, safe, T, GCT_TRACE) ||
      !vm_u16(safe, T + lay->tr_traceno, &no) || no != *traceno)
    return 0;
  *ret = tl_return_address(lay, safe, g, T, low, mcode);
  return *ret != 0 ? T : 0;
#endif
}

/* The cache's slots (120 KiB): mapped, so that a start touches none of its
** pages (calloc cleared them all when the heap had been used: 24 page
** faults a start); a page is touched when a slot in it is first used. */
#define TL_CACHE_BYTES (TL_CACHE_SLOTS * sizeof(struct tl_cache_slot))

/* The reads for calibration (vm_trace_calib.c, `safe` set). The hook's
** side below inlines them instead. */
int tl_snapshot_at(const struct vm_layout *lay, int safe, uintptr_t T,
                   uint32_t ofs, uintptr_t *snap_out)
{
  return snapshot_at(lay, safe, T, ofs, snap_out);
}

uint32_t tl_mcode_ofs(uintptr_t ret, uintptr_t mcode)
{
  return mcode_ofs(ret, mcode);
}

int tl_snapshot_place(const struct vm_layout *lay, int safe, uintptr_t T,
                      uintptr_t snap, int sn, struct tl_place *pl)
{
  return snapshot_place(lay, safe, T, snap, sn, pl);
}

uintptr_t tl_call_target(int safe, uintptr_t ret, uintptr_t mcode)
{
  return call_target(safe, ret, mcode);
}

int tl_ir_ins(int safe, uintptr_t ir, uint32_t ref, uint8_t *o, uint16_t *op1,
              uint16_t *op2)
{
  return ir_ins(safe, ir, ref, o, op1, op2);
}

int tl_concat_string(const struct vm_trace_layout *tl, int safe, uintptr_t ir,
                     uint32_t ref, uint16_t call, uint16_t hdr)
{
  return concat_string(tl, safe, ir, ref, call, hdr);
}

void tl_builtin_frame(const struct vm_layout *lay, int safe, uintptr_t T,
                      uintptr_t snap, int sn, uintptr_t target,
                      struct tl_place *pl)
{
  builtin_frame(lay, safe, T, snap, sn, target, pl);
}

uintptr_t tl_locate(const struct vm_layout *lay, int safe, uintptr_t g,
                    uint32_t *traceno, uintptr_t low, uintptr_t *ret,
                    uintptr_t *mcode)
{
  return locate(lay, safe, g, traceno, low, ret, mcode);
}

int trace_lines_init(struct trace_lines *t, int on)
{
  memset(t, 0, sizeof(*t));
  t->on = on;
  if (!on)
    return 0;
  t->slot = mmap(NULL, TL_CACHE_BYTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (t->slot == MAP_FAILED)
    t->slot = NULL;
#if defined(__aarch64__)
  t->steps = calloc(1, sizeof(*t->steps));
  if (t->steps == NULL && t->slot != NULL) {
    munmap(t->slot, TL_CACHE_BYTES);
    t->slot = NULL;
  }
#endif
  if (t->slot == NULL) {
    t->on = 0;
    return ENOMEM;
  }
  return 0;
}

void trace_lines_free(struct trace_lines *t)
{
  if (t->slot != NULL)
    munmap(t->slot, TL_CACHE_BYTES);
  free(t->steps);
  t->slot = NULL;
  t->steps = NULL;
  t->on = 0;
}

/* An exit's key: its trace object and number; never a code address (those
** are even, this is odd). */
static uintptr_t exit_key(uintptr_t T, int exitno)
{
  return (T ^ ((uintptr_t)exitno << 20)) | 1;
}

#if defined(__aarch64__)
/* The traces' machine code, for the unwinder: which trace a return
** address is in (after a call). */
struct tl_code {
  const struct vm_layout *lay;
  int safe;
  uintptr_t arr, lo, hi; /* The trace array, the span of all machine code. */
  uint32_t size;
  uintptr_t T, mcode; /* Of the trace found. */
  uint32_t traceno;
};

/* A return address into a trace after a call (1), or elsewhere in the
** machine code's span (-1: its frames are not C frames; the unwind stops
** there), or outside it (0). */
static int in_trace(void *ud, uintptr_t ip)
{
  struct tl_code *c = ud;
  const struct vm_layout *lay = c->lay;
  uintptr_t T, mcode;
  uint32_t n, sz;
  uint16_t no;
  if (ip < c->lo || ip >= c->hi)
    return 0;
  if ((ip & 3) != 0)
    return -1;
  for (n = 1; n < c->size; n++) {
    if (!vm_ref(lay, c->safe, c->arr + (uintptr_t)n * lay->ref_size, &T) ||
        T == 0 || !vm_ptr(c->safe, T + lay->tl.tr_mcode, &mcode) ||
        !vm_u32(c->safe, T + lay->tl.tr_szmcode, &sz) || ip <= mcode ||
        ip >= mcode + sz)
      continue;
    if (!tl_called_before(c->safe, ip, mcode) ||
        !vm_is_gc(lay, c->safe, T, GCT_TRACE) ||
        !vm_u16(c->safe, T + lay->tr_traceno, &no) || no != n)
      return -1;
    c->T = T;
    c->mcode = mcode;
    c->traceno = n;
    return 1;
  }
  return -1;
}

uintptr_t tl_unwind_trace(const struct vm_layout *lay, int safe, uintptr_t g,
                          struct unwind_steps *steps, uintptr_t ip0,
                          uintptr_t cfa0, uint32_t *traceno, uintptr_t *ret,
                          uintptr_t *mcode, uintptr_t *cfa, uintptr_t *cf)
{
  struct tl_code c;
  uintptr_t T, mc;
  uint32_t n, sz;
  memset(&c, 0, sizeof(c));
  c.lay = lay;
  c.safe = safe;
  c.lo = ~(uintptr_t)0;
  if (!tl_cframe(lay, safe, g, cf) || !vm_ptr(safe, g + lay->g_trace, &c.arr) ||
      c.arr == 0 || !vm_u32(safe, g + lay->g_sizetrace, &c.size) ||
      c.size > 65536)
    return 0;
  for (n = 1; n < c.size; n++) { /* The span of all machine code. */
    if (!vm_ref(lay, safe, c.arr + (uintptr_t)n * lay->ref_size, &T))
      return 0;
    if (T == 0)
      continue;
    if (!vm_ptr(safe, T + lay->tl.tr_mcode, &mc) ||
        !vm_u32(safe, T + lay->tl.tr_szmcode, &sz))
      return 0;
    c.lo = mc < c.lo ? mc : c.lo;
    c.hi = mc + sz > c.hi ? mc + sz : c.hi;
  }
  if (!unwind_find(in_trace, &c, *cf, steps, ip0, cfa0, ret, cfa))
    return 0;
  *traceno = c.traceno;
  *mcode = c.mcode;
  return c.T;
}

/* arm64: the cached place of the helper call now running, found by
** replaying the C frames learned from (ip0, cfa0) to the return address
** into the trace, of a trace still in the array and still followed, whose
** stack pointer the replay reached. */
static struct tl_place *
replay_cached(struct trace_lines *t, const struct vm_layout *lay, uintptr_t g,
              uint32_t *traceno, uintptr_t ip0, uintptr_t cfa0,
              const uintptr_t *described, uint32_t ndescribed, unsigned frees)
{
  uintptr_t cf, ret, cfa;
  struct tl_cache_slot *s;
  if (!tl_cframe(lay, 0, g, &cf) || cf <= cfa0 || cf - cfa0 > TL_STACK_SPAN ||
      !unwind_replay(t->steps, ip0, cfa0, cf, &ret, &cfa))
    return NULL;
  s = &t->slot[tl_slot_of(ret)];
  if (ret == 0 || !tl_slot_holds(s, ret) || s->frees != frees ||
      s->traceno >= ndescribed || described[s->traceno] != s->T ||
      vm_trace_object(lay, 0, g, s->traceno) != s->T ||
      cfa != tl_trace_sp(lay, 0, cf, s->T))
    return NULL;
  *traceno = s->traceno;
  return &s->place;
}
#endif

struct tl_place *trace_lines_place(struct trace_lines *t,
                                   const struct vm_layout *lay, uintptr_t g,
                                   uint32_t *traceno, int exitno, uintptr_t low,
                                   const uintptr_t *described,
                                   uint32_t ndescribed, unsigned frees)
{
  uintptr_t T, key, snap = 0, ret = 0, mcode = 0, desc;
  struct tl_cache_slot *s;
  uint16_t no, nsnap;
  int sn;
  if (!t->on)
    return NULL;
  if (exitno < 0) {
#if defined(__aarch64__)
    /* This function's return address and CFA start the C frames between
    ** it and the trace (it is never inlined: its callers are elsewhere). */
    uintptr_t ip0 = (uintptr_t)__builtin_return_address(0),
              cfa0 = (uintptr_t)__builtin_dwarf_cfa(), cfa, cf;
    struct tl_place *pl = replay_cached(t, lay, g, traceno, ip0, cfa0,
                                        described, ndescribed, frees);
    (void)low;
    if (pl != NULL)
      return pl;
    t->unwinds++;
    T = tl_unwind_trace(lay, 0, g, t->steps, ip0, cfa0, traceno, &ret, &mcode,
                        &cfa, &cf);
    if (T == 0 || cfa != tl_trace_sp(lay, 0, cf, T))
      return NULL;
#else
    T = locate(lay, 0, g, traceno, low, &ret, &mcode);
    if (T == 0)
      return NULL;
#endif
    key = ret;
  } else {
    T = vm_trace_object(lay, 0, g, *traceno);
    if (!vm_is_gc(lay, 0, T, GCT_TRACE) ||
        !vm_u16(0, T + lay->tr_traceno, &no) || no != *traceno)
      return NULL;
    key = exit_key(T, exitno);
  }
  desc = *traceno < ndescribed ? described[*traceno] : 0;
  s = &t->slot[tl_slot_of(key)];
  if (desc != T)
    s = &t->scratch; /* Not followed: resolved, not kept. */
  else if (tl_slot_holds(s, key) && s->T == T && s->frees == frees)
    return &s->place;
  if (exitno < 0) {
    sn = snapshot_at(lay, 0, T, mcode_ofs(ret, mcode), &snap);
    if (sn < 0)
      return NULL;
  } else {
    /* An exit restores the state of its snapshot: the exit's number. */
    if (!vm_u16(0, T + lay->tl.tr_nsnap, &nsnap) || exitno >= nsnap ||
        !vm_ptr(0, T + lay->tl.tr_snap, &snap) || snap == 0)
      return NULL;
    sn = exitno;
  }
  s->key = 0;
  s->place.stack_id = 0;
  if (!snapshot_place(lay, 0, T, snap, sn, &s->place))
    return NULL;
  if (exitno < 0) {
    uintptr_t target = call_target(0, ret, mcode);
    if (!(t->walk && tl_walk_forward(lay, g, T, snap, sn, target, &s->place)) &&
        !tl_loop_newkey(lay, 0, T, snap, sn, target, &s->place) &&
        !tl_after_return(lay, 0, T, snap, sn, &s->place))
      tl_store_after_return(lay, 0, target, &s->place);
    builtin_frame(lay, 0, T, snap, sn, target, &s->place);
  }
  s->place.loc_len = 0; /* (Its pt and line are final here.) */
  s->key = key | TL_KEY_PENDING;
  s->T = T;
  s->traceno = *traceno;
  s->frees = frees;
  return &s->place;
}
