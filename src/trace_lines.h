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

#include <stddef.h>
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

#define TL_REF_BIAS 0x8000u
#define TL_IRINS_SIZE 8

/* Where an event made by compiled code belongs. (Its fields are packed so
** that a cache slot, struct tl_cache_slot, is 256 bytes: the hook's fast
** path finds one with a shift.) */
struct tl_place {
  uintptr_t pt;    /* The innermost prototype. */
  uint32_t line;   /* Its line. */
  int16_t nframes; /* Frames, innermost first: frames[0] is pt's. */
  /* The outermost frame's base, in slots above the trace's base frame's
  ** (g->jit_base): a frame a stitched trace began in lies above it; -1
  ** if not known (then the outermost frame is taken to be the base's). */
  int16_t base_ofs;
  struct vm_raw_frame frames[TL_MAX_FRAMES];
  uint32_t stack_id; /* Of these frames in the stream, 0 until known
                        (stack ids stay valid for the whole stream). */
  /* The trace replaced the outermost frame's function by a tail call: the
  ** stack's slot still holds the function called before. */
  uint8_t base_replaced;
  /* frames[0] is a built-in that the outermost frame tail-called: the
  ** event is that frame's caller's (see tl_tail_builtin). */
  uint8_t tail_base;
  /* The place's location as an event of the stream gives it (pt, then the
  ** line, as ULEB128): loc_len bytes of loc, written by the hook's full
  ** path (see tl_cached_place); 0 until then. */
  uint8_t loc_len;
  uint64_t loc[2];
};

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

/* The kinds of bytecode ops (vm_trace_layout.bc_kind). */
enum {
  TL_BC_STOP = 0, /* Anything else: a branch, a closure, a varg... */
  TL_BC_QUIET,    /* Moves and constants: no call, no allocation. */
  TL_BC_EFFECT,   /* Straight on, but may call a helper or a metamethod. */
  TL_BC_RETURN,   /* RET, RET0, RET1, RETM. */
  TL_BC_CALL,     /* CALL, CALLM: straight on once the callee returns. */
  TL_BC_TAILCALL, /* CALLT, CALLMT: the callee takes the caller's frame. */
  /* Loops, for the walk alone (each op where the build has it): */
  TL_BC_ITERC,     /* ITERC: a call of the iterator. */
  TL_BC_NEXT,      /* ITERN: next, which compiled code runs inline. */
  TL_BC_JUMP,      /* ISNEXT: a jump to D. */
  TL_BC_LOOPBACK,  /* FORL, ITERL: back to the body at D, or on. */
  TL_BC_JLOOPBACK, /* JFORL, JITERL: the same, their D a trace's number. */
  TL_BC_LOOPIN,    /* FORI, JFORI: into the body, or past the loop at D. */
  TL_BC_LINK       /* JLOOP: a LOOP or an ITERN whose loop has a trace. */
};

/* The snapshot whose region of T's machine code holds byte `ofs`: the last
** one whose mcofs <= ofs. Returns it, or -1. */
int tl_snapshot_at(const struct vm_layout *lay, int safe, uintptr_t T,
                   uint32_t ofs, uintptr_t *snap_out);

/* The offset in MCode units of the call before `ret` (as lj_trace_unwind
** takes it: the unit before the return address). */
uint32_t tl_mcode_ofs(uintptr_t ret, uintptr_t mcode);

/* Resolves snapshot `sn` of T to its place. Returns 1 on success. */
int tl_snapshot_place(const struct vm_layout *lay, int safe, uintptr_t T,
                      uintptr_t snap, int sn, struct tl_place *pl);

/* arm64: the constant general register `r` holds at the instruction at
** `at` (not included), from the last instruction before it that writes
** it, back to `lo` on the linear path (a trace's code runs straight on
** but for side exits and its loop's back branch, which reaches its loop
** with the same registers): MOVZ or MOVN then MOVKs, ADR, ADRP (plus
** ADD), an LDR literal, or a move or addition from a register that holds
** one (followed TL_MAX_KHOPS times). A call on the way clobbers X0 to
** X18. Returns 1 with *k set. */
int tl_a64_const(int safe, uintptr_t at, uintptr_t lo, uint32_t r, uint64_t *k);

/* The address the call before return address `ret` went to, or 0. */
uintptr_t tl_call_target(int safe, uintptr_t ret, uintptr_t mcode);

/* IR instruction `ref` of the IR at `ir`: its op and operands. */
int tl_ir_ins(int safe, uintptr_t ir, uint32_t ref, uint8_t *o, uint16_t *op1,
              uint16_t *op2);

/* Whether the BUFSTR at `ref` makes table.concat's string: its buffer's
** last (and only) put is the CALLL to lj_buf_puttab that only
** table.concat's recorder emits, into the freshly reset buffer the
** BUFSTR reads (its header, at the bottom of the call's arguments). */
int tl_concat_string(const struct vm_trace_layout *tl, int safe, uintptr_t ir,
                     uint32_t ref, uint16_t call, uint16_t hdr);

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
void tl_builtin_frame(const struct vm_layout *lay, int safe, uintptr_t T,
                      uintptr_t snap, int sn, uintptr_t target,
                      struct tl_place *pl);

/* The trace whose helper call is now running and the return address into
** its machine code: on x86-64 the trace numbered *traceno (vmstate) and
** the slot its stack adjustment gives, on arm64 an unwind of the C frames
** (*traceno is set). Returns the trace, or 0. */
uintptr_t tl_locate(const struct vm_layout *lay, int safe, uintptr_t g,
                    uint32_t *traceno, uintptr_t low, uintptr_t *ret,
                    uintptr_t *mcode);

/* ---- Shared by trace_lines.c and trace_lines_walk.c -------------------- */

/* A snapshot entry's flags (SNAP_FRAME, SNAP_CONT). */
#define TL_SNAP_FRAME 0x10000u
#define TL_SNAP_CONT 0x20000u

/* IR instructions of a snapshot's region scanned (table.concat, PROF, a
** new key's). */
#define TL_MAX_REGION 1024

/* IR instruction ref's op (o) and operands. */
VM_INLINE int ir_ins(int safe, uintptr_t ir, uint32_t ref, uint8_t *o,
                     uint16_t *op1, uint16_t *op2)
{
  uintptr_t at = ir + TL_IRINS_SIZE * (uintptr_t)ref;
  return vm_u16(safe, at, op1) && vm_u16(safe, at + 2, op2) &&
         vm_u8(safe, at + 5, o);
}

/* The IR of snapshot sn's region of trace T: refs [*from, *to), up to the
** next snapshot's (so not for the last snapshot), at most TL_MAX_REGION of
** them, and the IR array. Returns 1 if read. */
VM_INLINE int tl_region(const struct vm_layout *lay, int safe, uintptr_t T,
                        uintptr_t snap, int sn, uint16_t *from, uint16_t *to,
                        uintptr_t *ir)
{
  const struct vm_trace_layout *tl = &lay->tl;
  uintptr_t s = snap + (uintptr_t)sn * tl->snap_size;
  uint16_t nsnap;
  return vm_u16(safe, T + tl->tr_nsnap, &nsnap) && (uint32_t)sn + 1 < nsnap &&
         vm_u16(safe, s + tl->snap_ref, from) &&
         vm_u16(safe, s + tl->snap_size + tl->snap_ref, to) &&
         *from >= TL_REF_BIAS && *to >= *from && *to - *from <= TL_MAX_REGION &&
         vm_ptr(safe, T + tl->tr_ir, ir) && *ir != 0;
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

/* Whether op is a table store that may add a key (TSETV, TSETS, TSETB). */
VM_INLINE int tl_is_store(const struct vm_trace_layout *tl, uint8_t op)
{
  return op == tl->bc_tsetv || op == tl->bc_tsets || op == tl->bc_tsetb;
}

/*
** trace_lines 'walk': without per-line snapshots, the snapshot a helper
** call belongs to resumes at or before the bytecode that made the call,
** often lines before it and in a caller of an inlined function. The
** walk goes on from that PC, as the recorder did, to the first bytecode
** whose recording calls that kind of helper: into an inlined callee
** where the next snapshot runs in it (its frames prove the callee), or
** whose closure an immutable upvalue of the running closure holds (of the
** snapshot's innermost frame, or of a callee so entered; g gives the
** trace's base frame's), back to the caller at a return, through JMP, and both
*ways of a
** conditional branch, of which the one that reaches the next snapshot's
** PC counts. A call whose callee is not proven is taken to be a
** built-in's, run inline: a string is its; a table or a new key is its
** when the walk finds nothing else. It stops, leaving the place as it is,
** at an op it cannot follow, at the next snapshot's PC, past the frames
** it knows, after TL_MAX_WALK ops in all. Returns 1 if the place moved.
*/
int tl_walk_forward(const struct vm_layout *lay, uintptr_t g, uintptr_t T,
                    uintptr_t snap, int sn, uintptr_t target,
                    struct tl_place *pl);

/* ---- Inline: the hook's full path reads these at each compiled event -- */

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
  unsigned frees; /* The hook's `frees` (the symbols' generation) when it
                     was filled. */
  struct tl_place place;
};
#if UINTPTR_MAX > 0xffffffffu
/* (256 bytes on 64-bit builds: see struct tl_place.) */
typedef char
    tl_cache_slot_is_256_bytes[sizeof(struct tl_cache_slot) == 256 ? 1 : -1];
#endif

struct trace_lines {
  int on; /* Events of traces are resolved. */
  /* trace_lines 'walk': from the snapshot's PC to the event's op. */
  int walk;
  struct tl_cache_slot *slot; /* TL_CACHE_SLOTS, malloc'd. */
  struct unwind_steps *steps; /* arm64: the C frames learned, malloc'd. */
  uint64_t unwinds; /* arm64: events whose C frames were not all learned. */
  struct tl_cache_slot scratch; /* For a trace not described yet. */
};

/* A slot's key while its place has no location yet (loc_len 0): the
** return address with this bit set, which no user-space address has, so
** that the fast path's compare of the key also proves the location
** written (tl_place_encoded clears it). */
#define TL_KEY_PENDING ((uintptr_t)1 << (sizeof(uintptr_t) * 8 - 1))

/* Whether slot s holds key, its location written or not. */
VM_INLINE int tl_slot_holds(const struct tl_cache_slot *s, uintptr_t key)
{
  return (s->key & ~TL_KEY_PENDING) == key;
}

/* Place pl (of a slot, or the scratch one) has its location now. */
VM_INLINE void tl_place_encoded(struct tl_place *pl)
{
  struct tl_cache_slot *s =
      (struct tl_cache_slot *)(void *)((char *)pl -
                                       offsetof(struct tl_cache_slot, place));
  s->key &= ~TL_KEY_PENDING;
}

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
** the object and trace offsets (it may be a family's constant table: see
** profiler_hook_for), `cur_L_at` where g->cur_L is. Only loads.
** `described` is
** the trace the symbols describe under that number (0: none), live: the
** symbols forget it when it is freed. It is J->trace[traceno] while its
** own number is still traceno: a trace leaves the array only when it is
** freed or flushed, and a flush sets its number to 0. A slot holds while
** `generation` (the symbols', bumped whenever a described object goes
** away) is the one it was filled under; the hook marks the places it may
** take here by writing their location (loc_len, then tl_place_encoded),
** once the stream has described their prototype and trace. The stack
** slot is read only inside the range tl_return_address checks.
*/
VM_INLINE struct tl_place *tl_cached_place(struct trace_lines *t,
                                           const struct vm_layout *lay,
                                           uintptr_t cur_L_at, uint32_t traceno,
                                           uintptr_t low, uintptr_t described,
                                           unsigned generation)
{
  struct tl_cache_slot *s;
  uintptr_t T = described, L, cf, slot, ret;
  uint16_t spadjust, no;
  if (T == 0)
    return NULL;
  memcpy(&no, (const void *)(T + lay->tr_traceno), 2);
  if (no != traceno)
    return NULL;
  memcpy(&spadjust, (const void *)(T + lay->tl.tr_spadjust), 2);
  if (!vm_ref(lay, 0, cur_L_at, &L) || L == 0 ||
      !vm_ptr(0, L + lay->L_cframe, &cf))
    return NULL;
  /* (A C frame too low for the slot wraps it far above `low`.) */
  slot = (cf & ~(uintptr_t)3) - TL_JLOOP_ADJUST - spadjust - 8;
  if (slot <= low || slot - low > TL_STACK_SPAN)
    return NULL;
  memcpy(&ret, (const void *)slot, sizeof(ret));
  s = &t->slot[tl_slot_of(ret)];
  /* (A key without TL_KEY_PENDING: the location is written.) */
  if (s->key != ret || s->T != T || s->frees != generation)
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
