/*
** Checks tl_a64_const (src/trace_lines_a64.c), which finds the target of an
** arm64 `BLR Xn` in a trace's machine code from the instructions that
** load Xn before it, on instruction sequences as LuaJIT's emitter writes
** them (lj_emit_arm64.h: emit_loadk, emit_kadrp, emit_kdelta, LDR
** literals) and on ones where Xn cannot be known. Runs on any host: the
** decoding reads memory only. Prints each case; exits with 1 at the first
** wrong answer.
**
**   a64_const_check
*/
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../../src/trace_lines.h"

#define X9 9u
#define X19 19u
#define BLR(r) (0xd63f0000u | (r) << 5)
#define MOVZ(r, imm, hw) (0xd2800000u | (hw) << 21 | (uint32_t)(imm) << 5 | (r))
#define MOVN(r, imm, hw) (0x92800000u | (hw) << 21 | (uint32_t)(imm) << 5 | (r))
#define MOVK(r, imm, hw) (0xf2800000u | (hw) << 21 | (uint32_t)(imm) << 5 | (r))
#define MOVZW(r, imm, hw)                                                      \
  (0x52800000u | (hw) << 21 | (uint32_t)(imm) << 5 | (r))
#define MOVKW(r, imm, hw)                                                      \
  (0x72800000u | (hw) << 21 | (uint32_t)(imm) << 5 | (r))
#define ADDI(d, n, imm) (0x91000000u | (uint32_t)(imm) << 10 | (n) << 5 | (d))
#define SUBI(d, n, imm) (0xd1000000u | (uint32_t)(imm) << 10 | (n) << 5 | (d))
#define MOV(d, m) (0xaa0003e0u | (m) << 16 | (d))
#define STR(t, n, ofs8) (0xf9000000u | (uint32_t)(ofs8) << 10 | (n) << 5 | (t))
#define LDR(t, n, ofs8) (0xf9400000u | (uint32_t)(ofs8) << 10 | (n) << 5 | (t))
#define LDP(t, t2, n) (0xa9400000u | (t2) << 10 | (n) << 5 | (t))
#define STR_PRE(t, n) (0xf8000c00u | 8u << 12 | (n) << 5 | (t))
#define BCOND(cond, words) (0x54000000u | (uint32_t)(words) << 5 | (cond))
#define CBZ(r, words) (0xb4000000u | (uint32_t)(words) << 5 | (r))
#define ADR(r, imm)                                                            \
  (0x10000000u | ((uint32_t)(imm)&3) << 29 |                                   \
   (((uint32_t)(imm) >> 2) & 0x7ffff) << 5 | (r))
#define ADRP(r, pages)                                                         \
  (0x90000000u | ((uint32_t)(pages)&3) << 29 |                                 \
   (((uint32_t)(pages) >> 2) & 0x7ffff) << 5 | (r))
#define LDRLIT(r, words) (0x58000000u | ((uint32_t)(words)&0x7ffff) << 5 | (r))
#define BL(words) (0x94000000u | ((uint32_t)(words)&0x3ffffff))
#define B(words) (0x14000000u | ((uint32_t)(words)&0x3ffffff))
#define FADD_D9 0x1e622929u    /* fadd d9, d9, d2: an FP register 9 */
#define FMOV_X9_D2 0x9e660049u /* fmov x9, d2 */
#define UMOV_W9 0x0e0c3c49u    /* umov w9, v2.s[1] */
#define END 0xffffffffu

static uint32_t code[64] __attribute__((aligned(4096)));
static int failed;

/* Copies the sequence (up to END) into code[] and asks for the constant of
** the register of the BLR that ends it; k is the expected value, known 0
** if none may be found. `lit`: a 64-bit literal placed after the BLR. */
static void check(const char *name, const uint32_t *ins, int known, uint64_t k,
                  uint64_t lit)
{
  int n = 0, ok;
  uint64_t got = 0;
  uint32_t blr;
  memset(code, 0, sizeof(code));
  while (ins[n] != END) {
    code[n] = ins[n];
    n++;
  }
  memcpy(&code[n], &lit, sizeof(lit));
  blr = code[n - 1];
  ok = tl_a64_const(0, (uintptr_t)&code[n - 1], (uintptr_t)code,
                    (blr >> 5) & 31, &got);
  if (ok != known || (known && got != k)) {
    printf("FAIL %s: found %d, 0x%" PRIx64 " (expected %d, 0x%" PRIx64 ")\n",
           name, ok, got, known, k);
    failed = 1;
  } else {
    printf("ok %s\n", name);
  }
}

int main(void)
{
  uintptr_t base = (uintptr_t)code;
  {
    const uint32_t s[] = {MOVZ(X9, 0x1234, 0),
                          MOVK(X9, 0x5678, 1),
                          MOVK(X9, 0xaaaa, 2),
                          MOVK(X9, 0xffff, 3),
                          BLR(X9),
                          END};
    check("MOVZ and three MOVKs", s, 1, 0xffffaaaa56781234ull, 0);
  }
  {
    const uint32_t s[] = {MOVN(X9, 0x1234, 1), MOVK(X9, 0x0042, 0), BLR(X9),
                          END};
    check("MOVN and a MOVK", s, 1, 0xffffffffedcb0042ull, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0x0001, 0), MOVK(X9, 0x2222, 0),
                          MOVK(X9, 0x3333, 0), BLR(X9), END};
    check("the last MOVK of a fragment wins", s, 1, 0x3333, 0);
  }
  {
    const uint32_t s[] = {MOVZW(X9, 0x5678, 0), MOVKW(X9, 0x0040, 1), BLR(X9),
                          END};
    check("32-bit MOVZ and MOVK", s, 1, 0x00405678, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0xbeef, 0),
                          MOVK(X9, 0x7f00, 2),
                          ADDI(10, 11, 4),
                          STR(X9, 31, 1),
                          BCOND(X9, 8),
                          CBZ(X9, 4),
                          FADD_D9,
                          LDR(10, X9, 0),
                          BLR(X9),
                          END};
    check("reads, stores and FP writes of the register between", s, 1,
          0x00007f000000beefull, 0);
  }
  {
    const uint32_t s[] = {ADR(X9, 0x100), BLR(X9), END};
    check("ADR", s, 1, base + 0x100, 0);
  }
  {
    const uint32_t s[] = {ADRP(X9, 2), ADDI(X9, X9, 0x10), BLR(X9), END};
    check("ADRP and ADD", s, 1, (base & ~(uintptr_t)0xfff) + 0x2010, 0);
  }
  {
    const uint32_t s[] = {LDRLIT(X9, 2), BLR(X9), END};
    check("LDR literal", s, 1, 0x0000ffff12345678ull, 0x0000ffff12345678ull);
  }
  {
    const uint32_t s[] = {MOVZ(X19, 0x4000, 1), BL(100), MOV(X9, X19), BLR(X9),
                          END};
    check("a move from a callee-saved register, across a call", s, 1,
          0x40000000, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X19, 0x4000, 1), ADDI(X9, X19, 0x20), BLR(X9),
                          END};
    check("an addition to another constant", s, 1, 0x40000020, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X19, 0x4000, 1), SUBI(X9, X19, 0x20), BLR(X9),
                          END};
    check("a subtraction from another constant", s, 1, 0x3fffffe0, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0x1234, 0), BL(100), BLR(X9), END};
    check("no: a call clobbers X9 after its load", s, 0, 0, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0x1234, 0), LDR(X9, 1, 0), BLR(X9), END};
    check("no: a load writes it", s, 0, 0, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0x1234, 0), LDP(2, X9, 1), BLR(X9), END};
    check("no: a load pair's second register", s, 0, 0, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0x1234, 0), STR_PRE(3, X9), BLR(X9), END};
    check("no: a store written back to it as a base", s, 0, 0, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0x1234, 0), FMOV_X9_D2, BLR(X9), END};
    check("no: an FP register moved to it", s, 0, 0, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0x1234, 0), UMOV_W9, BLR(X9), END};
    check("no: a vector element moved to it", s, 0, 0, 0);
  }
  {
    const uint32_t s[] = {MOVZ(X9, 0x1234, 0), B(4), BLR(X9), END};
    check("no: after an unconditional branch", s, 0, 0, 0);
  }
  {
    const uint32_t s[] = {ADDI(X9, X9, 8), BLR(X9), END};
    check("no: no load before the start of the code", s, 0, 0, 0);
  }
  {
    const uint32_t s[] = {MOVK(X9, 0x1234, 1), BLR(X9), END};
    check("no: MOVK without its MOVZ", s, 0, 0, 0);
  }
  return failed;
}
