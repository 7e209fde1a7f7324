/*
** Compiled-code attribution: the Lua function and line (and the inlined
** frames) of an event made while a JIT trace runs.
**
** Traces never allocate inline: every allocation is a call from the
** trace's machine code to a helper, so the return address into the trace
** is on the native stack: on x86-64 at a place the trace's stack
** adjustment gives, on arm64 (whose compiled code runs under vmstate 0)
** where unwinding the C frames by their CFI finds it (unwind.h), which
** names the trace too. Since upstream LuaJIT a32aeadc every snapshot knows
** where its region of machine code begins (SnapShot.mcofs): the return address
*gives
** the snapshot, the snapshot its bytecode PC (where the interpreter would
** resume) and its frame links (the inlined callers). Every offset used here
** is found and verified at calibration (vm_trace_calib.c), including a run
** whose allocations on known lines must resolve to those lines; any check
** that fails here leaves the event at the trace's start, as before.
*/
#ifndef MEMPROF_TRACE_LINES_H
#define MEMPROF_TRACE_LINES_H

#include <stdint.h>

#include "unwind.h"
#include "vm_inspect.h"

/* Frames of a place: the innermost function, then its inlined callers. */
#define TL_MAX_FRAMES 8
/* Instructions scanned back from a PC to its function's header. */
#define TL_MAX_SCAN 65536
/* Bytes between the hook's frame and the C frame a trace runs on. */
#define TL_STACK_SPAN 65536
/* JLOOP's stack adjustment below the C frame (x86-64 interpreter). */
#define TL_JLOOP_ADJUST 16

/* Bytes of an MCode unit (snapshot offsets count them). */
#if defined(__aarch64__)
#define TL_MCODE_UNIT 4
#else
#define TL_MCODE_UNIT 1
#endif

#define TL_SNAP_FRAME 0x10000u
#define TL_SNAP_CONT 0x20000u
#define TL_REF_BIAS 0x8000u
#define TL_IRINS_SIZE 8

/* Where an event made by compiled code belongs. */
struct tl_place {
  uintptr_t pt;  /* The innermost prototype. */
  uint32_t line; /* Its line. */
  int nframes;   /* Frames, innermost first: frames[0] is pt's. */
  struct vm_raw_frame frames[TL_MAX_FRAMES];
  uint32_t stack_id; /* Of these frames in the stream, 0 until known
                        (stack ids stay valid for the whole stream). */
  /* The outermost frame's base, in slots above the trace's base frame's
  ** (g->jit_base): a frame a stitched trace began in lies above it; -1
  ** if not known (then the outermost frame is taken to be the base's). */
  int16_t base_ofs;
  /* The trace replaced the outermost frame's function by a tail call: the
  ** stack's slot still holds the function called before. */
  uint8_t base_replaced;
  /* frames[0] is a built-in that the outermost frame tail-called: the
  ** event is that frame's caller's (see tl_tail_builtin). */
  uint8_t tail_base;
  /* The place's location as an event of the stream gives it (pt, then the
  ** line, as ULEB128): loc_len bytes of loc, written by the hook at the
  ** place's first event; 0 until then. */
  uint8_t loc_len;
  uint64_t loc[2];
};

/* The prototype whose bytecode holds pc: the nearest function header at
** or before it (ops FUNCF .. FUNCF+7 start every prototype and appear
** nowhere else). Sets *pos to pc's index. Returns the GCproto or 0. */
VM_INLINE uintptr_t tl_proto_of_pc(const struct vm_layout *lay, int safe,
                                   uintptr_t pc, uint32_t *pos)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t at = pc, pt, bc;
  uint32_t sizebc, n;
  uint8_t op;
  if (pc == 0 || (pc & 3) != 0)
    return 0;
  for (n = 0; n < TL_MAX_SCAN; n++, at -= 4) {
    if (!vm_u8(safe, at, &op))
      return 0;
    if ((uint8_t)(op - tl->bc_funcf) < 8)
      break;
  }
  if (n == TL_MAX_SCAN)
    return 0;
  pt = at - lay->pt_size;
  bc = at;
  if (!vm_is_gc(lay, safe, pt, GCT_PROTO) ||
      !vm_u32(safe, pt + lay->pt_sizebc, &sizebc) ||
      pc >= bc + 4 * (uintptr_t)sizebc)
    return 0;
  *pos = n;
  return pt;
}

/* The base of the trace's base frame (g->jit_base), inside the thread's
** stack. Returns 1 with *base set. */
VM_INLINE int tl_jit_base(const struct vm_layout *lay, int safe, uintptr_t g,
                          const struct vm_thread *th, uintptr_t *base)
{
  uintptr_t b;
  if (!vm_ref(lay, safe, g + lay->tl.g_jit_base, &b) || b <= th->stack ||
      b >= th->limit || ((b - th->stack) & 7) != 0)
    return 0;
  *base = b;
  return 1;
}

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

/* arm64: whether a call (BL imm26 or BLR Xn) precedes `ret` in mcode. */
VM_INLINE int tl_called_before(int safe, uintptr_t ret, uintptr_t mcode)
{
  uint32_t ins;
  if (ret < mcode + 4 || (ret & 3) != 0 || !vm_u32(safe, ret - 4, &ins))
    return 0;
  return (ins & 0xfc000000u) == 0x94000000u ||
         (ins & 0xfffffc1fu) == 0xd63f0000u;
}

#if defined(__aarch64__)
/*
** arm64 (compiled code runs under vmstate 0): the trace whose helper call
** is now running, found by unwinding the C frames (unwind.h) from the
** caller's to the first return address into a trace's machine code after
** a call. Sets *traceno, *ret, *mcode, *cfa (the trace's stack pointer
** at the call, unchecked: see tl_trace_sp) and *cf (the C frame). With
** `steps`, the frames
** from the one returning to ip0 with CFA cfa0 are learned. Returns the
** trace, or 0. Bounded: the trace array's size per frame, UNWIND_FRAMES.
*/
uintptr_t tl_unwind_trace(const struct vm_layout *lay, int safe, uintptr_t g,
                          struct unwind_steps *steps, uintptr_t ip0,
                          uintptr_t cfa0, uint32_t *traceno, uintptr_t *ret,
                          uintptr_t *mcode, uintptr_t *cfa, uintptr_t *cf);
#endif

/* The snapshot whose region of T's machine code holds byte `ofs`: the last
** one whose mcofs <= ofs. Returns it, or -1. */
VM_INLINE int tl_snapshot_at(const struct vm_layout *lay, int safe, uintptr_t T,
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

/* The offset in MCode units of the call before `ret` (as lj_trace_unwind
** takes it: the unit before the return address). */
VM_INLINE uint32_t tl_mcode_ofs(uintptr_t ret, uintptr_t mcode)
{
  return (uint32_t)((ret - TL_MCODE_UNIT - mcode) / TL_MCODE_UNIT);
}

/* The FR2 frame link of a snapshot entry: a 64-bit IR constant. */
VM_INLINE int tl_fr2_link(const struct vm_layout *lay, int safe, uintptr_t T,
                          uint32_t entry, uintptr_t *link)
{
  uintptr_t ir;
  uint32_t ref = entry & 0xffff, nk;
  uint64_t v;
  if (ref >= TL_REF_BIAS || !vm_ptr(safe, T + lay->tl.tr_ir, &ir) ||
      !vm_u32(safe, T + lay->tl.tr_nk, &nk) || ref < nk ||
      !vm_u64(safe, ir + TL_IRINS_SIZE * ((uintptr_t)ref + 1), &v))
    return 0;
  *link = (uintptr_t)v;
  return 1;
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

/* Resolves snapshot `sn` of T to its place. Returns 1 on success. */
VM_INLINE int tl_snapshot_place(const struct vm_layout *lay, int safe,
                                uintptr_t T, uintptr_t snap, int sn,
                                struct tl_place *pl)
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

/* arm64: instructions scanned back from a BLR to the load of its
** register, and registers followed through moves and additions. (The
** decoding below compiles everywhere: build/a64_const_check tests it on
** any host.) */
#define TL_MAX_KSCAN 256
#define TL_MAX_KHOPS 3

/* arm64: whether instruction `ins` may write general register `r`: a
** store, a conditional branch, a compare or test and branch, an access
** to SIMD and FP registers only read it (but for their conversions and
** moves to a general register); any other instruction naming it
** as Rd or Rt, as a loaded pair's Rt2, or as a base written back (pre- or
** post-index), is taken to write it. */
VM_INLINE int tl_a64_writes(uint32_t ins, uint32_t r)
{
  int pair, single, uimm, literal, load;
  if ((ins & 0xff000010u) == 0x54000000u || /* B.cond */
      (ins & 0x7e000000u) == 0x34000000u || /* CBZ, CBNZ */
      (ins & 0x7e000000u) == 0x36000000u)   /* TBZ, TBNZ */
    return 0;
  if ((ins & 0x0e000000u) == 0x0e000000u) /* SIMD and FP: to a GPR only */
    return (ins & 31) == r &&             /* its conversions and moves. */
           ((ins & 0x5f20fc00u) == 0x1e200000u ||
            (ins & 0x9fe0ec00u) == 0x0e002c00u);
  if ((ins & 0x0a000000u) != 0x08000000u) /* Not a load or a store. */
    return (ins & 31) == r;
  pair = (ins & 0x38000000u) == 0x28000000u;
  single = (ins & 0x3b000000u) == 0x38000000u;
  uimm = (ins & 0x3b000000u) == 0x39000000u;
  literal = (ins & 0x3b000000u) == 0x18000000u;
  if (!pair && !single && !uimm && !literal)
    return (ins & 31) == r || ((ins >> 16) & 31) == r; /* Exclusive... */
  if (((ins >> 5) & 31) == r &&
      ((pair && (ins & 0x00800000u) != 0) ||
       (single && (ins & 0x00200000u) == 0 && (ins & 0x400u) != 0)))
    return 1;
  if ((ins & 0x04000000u) != 0) /* SIMD and FP registers. */
    return 0;
  load =
      literal || (pair ? (ins & 0x00400000u) != 0 : (ins & 0x00c00000u) != 0);
  return load && ((ins & 31) == r || (pair && ((ins >> 10) & 31) == r));
}

/* arm64: the constant general register `r` holds at the instruction at
** `at` (not included), from the last instruction before it that writes
** it, back to `lo` on the linear path (a trace's code runs straight on
** but for side exits and its loop's back branch, which reaches its loop
** with the same registers): MOVZ or MOVN then MOVKs, ADR, ADRP (plus
** ADD), an LDR literal, or a move or addition from a register that holds
** one (followed TL_MAX_KHOPS times). A call on the way clobbers X0 to
** X18. Returns 1 with *k set. */
VM_INLINE int tl_a64_const(int safe, uintptr_t at, uintptr_t lo, uint32_t r,
                           uint64_t *k)
{
  uint64_t movk = 0, mask = 0, v, add = 0;
  uint32_t ins, n, hw, rn;
  int64_t imm;
  int hops = 0, adds = 0;
  for (n = 0; n < TL_MAX_KSCAN && at >= lo + 4; n++) {
    at -= 4;
    if (!vm_u32(safe, at, &ins))
      return 0;
    if ((ins & 0xfc000000u) == 0x14000000u || /* B: not reached from */
        (ins & 0xfffffc1fu) == 0xd61f0000u)   /* above; nor after BR. */
      return 0;
    if ((ins & 0xfc000000u) == 0x94000000u ||
        (ins & 0xfffffc1fu) == 0xd63f0000u) { /* BL, BLR */
      if (r <= 18 || r == 30)
        return 0;
      continue;
    }
    if (!tl_a64_writes(ins, r))
      continue;
    rn = (ins >> 5) & 31;
    hw = ((ins >> 21) & 3) * 16;
    switch (ins & 0xff800000u) {
    case 0x72800000u: /* MOVK w */
      if (hw > 16)
        return 0;
      /* Fall through. */
    case 0xf2800000u: /* MOVK x: the latest fragment wins. */
      if (!(mask & ((uint64_t)0xffff << hw)))
        movk |= (uint64_t)((ins >> 5) & 0xffff) << hw;
      mask |= (uint64_t)0xffff << hw;
      continue;
    case 0xd2800000u: /* MOVZ x */
    case 0x92800000u: /* MOVN x */
    case 0x52800000u: /* MOVZ w */
    case 0x12800000u: /* MOVN w */
      v = (uint64_t)((ins >> 5) & 0xffff) << hw;
      if ((ins & 0x40000000u) == 0) /* MOVN */
        v = ~v;
      if ((ins & 0x80000000u) == 0) { /* w: 32 bits, zero-extended */
        if (hw > 16 || (mask >> 32) != 0)
          return 0;
        v &= 0xffffffffu;
      }
      *k = ((v & ~mask) | movk) + add;
      return 1;
    case 0x91000000u: /* ADD x, #imm12 (LSL 12) */
    case 0xd1000000u: /* SUB x, #imm12 (LSL 12) */
      if (mask != 0 || adds++ > 0 || rn == 31)
        return 0;
      imm = (int64_t)((ins >> 10) & 0xfff) << ((ins >> 22) & 1 ? 12 : 0);
      add += (ins & 0x40000000u) ? (uint64_t)-imm : (uint64_t)imm;
      if (rn != r && hops++ >= TL_MAX_KHOPS)
        return 0;
      r = rn;
      continue;
    default:
      break;
    }
    if (mask != 0)
      return 0;
    if ((ins & 0x9f000000u) == 0x10000000u || /* ADR */
        (ins & 0x9f000000u) == 0x90000000u) { /* ADRP */
      imm = (int64_t)(((ins >> 5) & 0x7ffff) << 2 | ((ins >> 29) & 3));
      imm = (imm ^ 0x100000) - 0x100000;
      if (ins & 0x80000000u)
        *k = (at & ~(uintptr_t)0xfff) + (uint64_t)(imm * 4096) + add;
      else
        *k = at + (uint64_t)imm + add;
      return 1;
    }
    if ((ins & 0xff000000u) == 0x58000000u) { /* LDR x, literal */
      imm = (int64_t)((ins >> 5) & 0x7ffff);
      imm = (imm ^ 0x40000) - 0x40000;
      if (!vm_u64(safe, at + (uintptr_t)(imm * 4), &v))
        return 0;
      *k = v + add;
      return 1;
    }
    if ((ins & 0xffe0ffe0u) == 0xaa0003e0u && hops++ < TL_MAX_KHOPS) {
      r = (ins >> 16) & 31; /* MOV x, Xm */
      continue;
    }
    return 0;
  }
  return 0;
}

/* The address the call before return address `ret` went to, or 0. */
VM_INLINE uintptr_t tl_call_target(int safe, uintptr_t ret, uintptr_t mcode)
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

/* IR instructions of a snapshot's region scanned (table.concat, PROF). */
#define TL_MAX_REGION 1024
/* Bytecodes walked after an inlined call returns. */
#define TL_MAX_AFTER 32

/* The kinds of bytecode ops (vm_trace_layout.bc_kind). */
enum {
  TL_BC_STOP = 0, /* Anything else: a branch, a loop, a closure... */
  TL_BC_QUIET,    /* Moves and constants: no call, no allocation. */
  TL_BC_EFFECT,   /* Straight on, but may call a helper or a metamethod. */
  TL_BC_RETURN,   /* RET, RET0, RET1, RETM. */
  TL_BC_CALL,     /* CALL, CALLM: straight on once the callee returns. */
  TL_BC_TAILCALL  /* CALLT, CALLMT: the callee takes the caller's frame. */
};

/* Whether op is a table store that may add a key (TSETV, TSETS, TSETB). */
VM_INLINE int tl_is_store(const struct vm_trace_layout *tl, uint8_t op)
{
  return op == tl->bc_tsetv || op == tl->bc_tsets || op == tl->bc_tsetb;
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
  int i;
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
  for (i = 1; i < pl->nframes; i++)
    pl->frames[i - 1] = pl->frames[i];
  pl->nframes--;
  pl->frames[0].pc = pc + 4;
  pl->pt = pt;
  pl->line = line;
}

/* IR instruction `ref` of the IR at `ir`: its op and operands. */
VM_INLINE int tl_ir_ins(int safe, uintptr_t ir, uint32_t ref, uint8_t *o,
                        uint16_t *op1, uint16_t *op2)
{
  uintptr_t at = ir + TL_IRINS_SIZE * (uintptr_t)ref;
  return vm_u16(safe, at, op1) && vm_u16(safe, at + 2, op2) &&
         vm_u8(safe, at + 5, o);
}

/* Whether the BUFSTR at `ref` makes table.concat's string: its buffer's
** last (and only) put is the CALLL to lj_buf_puttab that only
** table.concat's recorder emits, into the freshly reset buffer the
** BUFSTR reads (its header, at the bottom of the call's arguments). */
VM_INLINE int tl_concat_string(const struct vm_trace_layout *tl, int safe,
                               uintptr_t ir, uint32_t ref, uint16_t call,
                               uint16_t hdr)
{
  uint16_t op1, op2, a;
  uint8_t o;
  int k;
  if (call < TL_REF_BIAS || call >= ref || hdr < TL_REF_BIAS || hdr >= call ||
      !tl_ir_ins(safe, ir, call, &o, &a, &op2) || o != tl->ir_calll ||
      op2 != tl->puttab_id)
    return 0;
  for (k = 0; k < 8 && a != hdr; k++) { /* The arguments, last first. */
    uint16_t next;
    if (a <= hdr || a >= call || !tl_ir_ins(safe, ir, a, &o, &next, &op2) ||
        o != tl->ir_carg)
      return 0;
    a = next;
  }
  return a == hdr && tl_ir_ins(safe, ir, hdr, &o, &op1, &op2) &&
         o == tl->ir_bufhdr && op2 == tl->bufhdr_reset;
}

/* IR PROF instructions in snapshot sn's region, or -1. */
VM_INLINE int tl_region_profs(const struct vm_layout *lay, int safe,
                              uintptr_t T, uintptr_t snap, int sn)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t s = snap + (uintptr_t)sn * tl->snap_size, ir;
  uint16_t from, to, op1, op2;
  uint32_t ref;
  uint8_t o;
  int n = 0;
  if (!vm_u16(safe, s + tl->snap_ref, &from) ||
      !vm_u16(safe, s + tl->snap_size + tl->snap_ref, &to) ||
      from < TL_REF_BIAS || to < from || to - from > TL_MAX_REGION ||
      !vm_ptr(safe, T + tl->tr_ir, &ir) || ir == 0)
    return -1;
  for (ref = from; ref < to; ref++) {
    if (!tl_ir_ins(safe, ir, ref, &o, &op1, &op2))
      return -1;
    n += o == tl->ir_prof;
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
      !tl_snapshot_place(lay, safe, T, snap, sn + 1, &next) ||
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
  for (i = 1; i < pl->nframes; i++)
    pl->frames[i - 1] = pl->frames[i];
  pl->nframes--;
  pl->frames[0].pc = first + 4;
  pl->pt = pt;
  pl->line = line;
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
    if (!tl_ir_ins(safe, ir, ref, &x, &op1, &op2))
      return -1;
    if (x == o && n++ == 0)
      *at = ref;
  }
  return n;
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
    if (!tl_ir_ins(safe, ir, loop, &o, &op1, &op2))
      return 0;
    if (o == tl->ir_loop)
      break;
  }
  if (loop == TL_REF_BIAS ||
      tl_count_op(safe, ir, from, to, tl->ir_newref, &at) != 1)
    return 0;
  /* The copies' sources: the last snapshot of the first pass with sn's PC
  ** that a later one with sn + 1's PC follows. */
  for (j = (uint32_t)sn; j-- > 0;) {
    if (!tl_snap_key(lay, safe, T, snap, j, &ref_j, &w))
      return 0;
    if (ref_j >= loop || w != w1)
      continue;
    for (j2 = j + 1; j2 < (uint32_t)sn; j2++) {
      if (!tl_snap_key(lay, safe, T, snap, j2, &ref, &w))
        return 0;
      if (ref >= loop)
        break;
      if (w == w2)
        break;
    }
    if (j2 < (uint32_t)sn && ref < loop && w == w2)
      break;
  }
  if (j == (uint32_t)-1 ||
      tl_count_op(safe, ir, ref_j, ref, tl->ir_newref, &r) != 1)
    return 0;
  /* The first pass's snapshot of that NEWREF: the last at or before it. */
  for (k = j, i = j + 1; i < j2; i++) {
    if (!tl_snap_key(lay, safe, T, snap, i, &ref, &w))
      return 0;
    if (ref <= r)
      k = i;
  }
  if (k == j || !tl_snapshot_place(lay, safe, T, snap, (int)k, &first) ||
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
    if (x <= hdr || x >= ref || !tl_ir_ins(safe, ir, x, &o, &op1, &op2))
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
      if (x <= hdr || x >= ref || !tl_ir_ins(safe, ir, x, &o, &op1, &op2))
        return 0;
      if (o != tl->ir_carg)
        break;
    }
    if (j == 8)
      return 0;
  }
  return x == hdr && calls > 0 && tl_ir_ins(safe, ir, hdr, &o, &op1, &op2) &&
         o == tl->ir_bufhdr && op2 == tl->bufhdr_reset;
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

/*
** A built-in's frame for an event of compiled code, where the call proves
** which built-in made it: compiled code calls the helpers of a built-in it
** runs inline, while the interpreter's stack holds the built-in's frame
** above its Lua caller. table.concat is proven by a call to
** lj_buf_puttab, or to lj_buf_tostr when every BUFSTR of the snapshot's
** region of IR makes table.concat's string; string.format by a call to
** lj_buf_tostr when every BUFSTR there makes its string (the machine code
** of a snapshot's region is that of its IR instructions, which is how
** LuaJIT unwinds an error of a helper; lj_buf_tostr is called for BUFSTR
** only). Helpers shared with other built-ins or operators get no frame.
*/
VM_INLINE void tl_builtin_frame(const struct vm_layout *lay, int safe,
                                uintptr_t T, uintptr_t snap, int sn,
                                uintptr_t target, struct tl_place *pl)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t s = snap + (uintptr_t)sn * tl->snap_size, ir;
  uint16_t from, to, nsnap, op1, op2;
  uint32_t ref, concats = 0, formats = 0;
  uint8_t o, ffid = tl->concat_ffid;
  int i;
  if (!tl->concat_ok || target == 0 || pl->nframes >= TL_MAX_FRAMES ||
      (target != tl->buf_tostr && target != tl->buf_puttab))
    return;
  if (target == tl->buf_tostr) {
    if (!vm_u16(safe, T + tl->tr_nsnap, &nsnap) || (uint32_t)sn + 1 >= nsnap ||
        !vm_u16(safe, s + tl->snap_ref, &from) ||
        !vm_u16(safe, s + tl->snap_size + tl->snap_ref, &to) ||
        from < TL_REF_BIAS || to <= from || to - from > TL_MAX_REGION ||
        !vm_ptr(safe, T + tl->tr_ir, &ir) || ir == 0)
      return;
    for (ref = from; ref < to; ref++) {
      if (!tl_ir_ins(safe, ir, ref, &o, &op1, &op2))
        return;
      if (o != tl->ir_bufstr)
        continue;
      if (tl_concat_string(tl, safe, ir, ref, op1, op2))
        concats++;
      else if (tl->format_ok && tl_format_string(tl, safe, ir, ref, op1, op2))
        formats++;
      else
        return;
    }
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

/* The snapshot of the helper call now running in trace T (numbered
** traceno), and the return address it was found by. Returns the snapshot
** number, or -1. */
VM_INLINE int tl_current_snapshot(const struct vm_layout *lay, int safe,
                                  uintptr_t g, uintptr_t T, uintptr_t low,
                                  uintptr_t *ret_out, uintptr_t *snap_out)
{
  uintptr_t mcode, ret = tl_return_address(lay, safe, g, T, low, &mcode);
  if (ret == 0)
    return -1;
  *ret_out = ret;
  return tl_snapshot_at(lay, safe, T, tl_mcode_ofs(ret, mcode), snap_out);
}

/* The trace whose helper call is now running and the return address into
** its machine code: on x86-64 the trace numbered *traceno (vmstate) and
** the slot its stack adjustment gives, on arm64 an unwind of the C frames
** (*traceno is set). Returns the trace, or 0. */
VM_INLINE uintptr_t tl_locate(const struct vm_layout *lay, int safe,
                              uintptr_t g, uint32_t *traceno, uintptr_t low,
                              uintptr_t *ret, uintptr_t *mcode)
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

/* The Lua function and line that called the outermost frame of place pl
** (at pl->base_ofs above the trace's base, g->jit_base): read from that
** frame's link, which the trace has not changed. Returns 1 on success. */
VM_INLINE int tl_base_caller(const struct vm_layout *lay, int safe, uintptr_t g,
                             const struct vm_thread *th,
                             const struct tl_place *pl, uintptr_t *pt,
                             uint32_t *line)
{
  uintptr_t base, ret;
  intptr_t link;
  uint32_t pos, sizebc;
  if (pl->base_ofs < 0 || !tl_jit_base(lay, safe, g, th, &base) ||
      (base += TVALUE_SIZE * (uintptr_t)pl->base_ofs) >= th->limit ||
      !vm_frame_link(lay, safe, base - TVALUE_SIZE, &link) || (link & 3) != 0)
    return 0;
  ret = vm_link_pc(lay, link);
  if ((*pt = tl_proto_of_pc(lay, safe, ret - 4, &pos)) == 0 ||
      !vm_u32(safe, *pt + lay->pt_sizebc, &sizebc))
    return 0;
  return vm_proto_line(lay, safe, *pt, pos, sizebc, line);
}

/* ---- The hook's side: a cache of places (trace_lines.c) ----------------- */

#define TL_CACHE_BITS 9
#define TL_CACHE_SLOTS (1 << TL_CACHE_BITS)

struct tl_cache_slot {
  uintptr_t key; /* Return address, or (T, exit) for an exit; 0: empty. */
  uintptr_t T;
  uint32_t traceno;
  unsigned frees; /* symbols.trace_frees when it was filled. */
  struct tl_place place;
};

struct trace_lines {
  int on; /* Events of traces are resolved. */
  /* trace_lines 'walk': from the snapshot's PC to the event's op. */
  int walk;
  struct tl_cache_slot *slot; /* TL_CACHE_SLOTS, malloc'd. */
  struct unwind_steps *steps; /* arm64: the C frames learned, malloc'd. */
  uint64_t unwinds; /* arm64: events whose C frames were not all learned. */
  struct tl_cache_slot scratch; /* For a trace not described yet. */
};

/* The cache slot of a key: the top bits of a multiplicative hash (one
** multiply and a shift on the hook's fast path). */
VM_INLINE size_t tl_slot_of(uintptr_t key)
{
  return (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ULL) >>
                  (64 - TL_CACHE_BITS));
}

/*
** The hook's fast path: the cached place of the helper call now running in
** trace `traceno`, or NULL (then trace_lines_place decides). `lay` gives
** the object offsets (it may be a family's constant table), `rt` the
** verified layout's global and trace offsets. Only loads:
** the trace must be the one the symbols follow (`described`, live while
** `frees` is unchanged), and the stack slot is read only inside the range
** tl_return_address checks.
*/
VM_INLINE struct tl_place *
tl_cached_place(struct trace_lines *t, const struct vm_layout *lay,
                const struct vm_layout *rt, uintptr_t g, uint32_t traceno,
                uintptr_t low, uintptr_t described, unsigned frees)
{
  struct tl_cache_slot *s;
  uintptr_t arr, T, L, cf, slot, ret;
  uint16_t spadjust;
  /* J->trace[traceno] is the described trace: the number was below
  ** J->sizetrace when it was described, and the array never shrinks. */
  memcpy(&arr, (const void *)(g + rt->g_trace), sizeof(arr));
  if (arr == 0 ||
      !vm_ref(lay, 0, arr + (uintptr_t)traceno * lay->ref_size, &T) ||
      T != described || T == 0)
    return NULL;
  memcpy(&spadjust, (const void *)(T + rt->tl.tr_spadjust), 2);
  if (!vm_ref(lay, 0, g + rt->g_cur_L, &L) || L == 0 ||
      !vm_ptr(0, L + lay->L_cframe, &cf))
    return NULL;
  /* (A C frame too low for the slot wraps it far above `low`.) */
  slot = (cf & ~(uintptr_t)3) - TL_JLOOP_ADJUST - spadjust - 8;
  if (slot <= low || slot - low > TL_STACK_SPAN)
    return NULL;
  memcpy(&ret, (const void *)slot, sizeof(ret));
  s = &t->slot[tl_slot_of(ret)];
  if (s->key != ret || s->T != T || s->frees != frees)
    return NULL;
  return &s->place;
}

/* Returns 0 or ENOMEM. */
int trace_lines_init(struct trace_lines *t, int on);
void trace_lines_free(struct trace_lines *t);

/*
** The place of an event made while trace `traceno` runs (`exitno` < 0) or
** while the VM leaves it through exit `exitno`, or NULL (the event stays at
** the trace's start). On arm64 *traceno is 0 on entry (vmstate) and set
** to the trace found. `low` is an address in the hook's frame. Places are
** cached only for a trace the stream has described (`described`: the trace
** objects the symbols name, by number), whose freeing the symbols see:
** `frees` counts the described traces freed so far, and a cached place
** holds while it is unchanged. Runs in the hook: plain reads, each
** range-checked.
*/
struct tl_place *trace_lines_place(struct trace_lines *t,
                                   const struct vm_layout *lay, uintptr_t g,
                                   uint32_t *traceno, int exitno, uintptr_t low,
                                   const uintptr_t *described,
                                   uint32_t ndescribed, unsigned frees);

#endif
