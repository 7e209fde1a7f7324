/*
** arm64: the constant a general register holds before a BLR, from the
** instructions that load it (tl_a64_const, trace_lines.h): how the target
** of a helper called through a register is known. Plain decoding of
** instructions read with bounds checks; compiled on every host.
*/
#include "trace_lines.h"

/* arm64: instructions scanned back from a BLR to the load of its
** register, and registers followed through moves and additions. (The
** decoding compiles everywhere: build/a64_const_check tests it on any
** host.) */
#define TL_MAX_KSCAN 256
#define TL_MAX_KHOPS 3

/* arm64: whether instruction `ins` may write general register `r`: a
** store, a conditional branch, a compare or test and branch, an access
** to SIMD and FP registers only read it (but for their conversions and
** moves to a general register); any other instruction naming it
** as Rd or Rt, as a loaded pair's Rt2, or as a base written back (pre- or
** post-index), is taken to write it. */
static int a64_writes(uint32_t ins, uint32_t r)
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

int tl_a64_const(int safe, uintptr_t at, uintptr_t lo, uint32_t r, uint64_t *k)
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
    if (!a64_writes(ins, r))
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
