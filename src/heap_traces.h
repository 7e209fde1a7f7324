/*
** JIT traces in the heap walk: what a trace keeps alive.
**
** LuaJIT's collector marks, for each trace it reaches (a prototype holds
** its root traces), the trace's start prototype and the GC objects among
** its IR constants (IR_KGC in ir[nk .. REF_TRUE-1]; a constant of a 64-bit
** type takes two slots, but for KNULL; with GC64 the object's pointer is
** in the second slot, else in op12). What the walk reads of a trace beyond
** the base layout (the trace array, number and start prototype) is
** verified at the first heap snapshot, in the heap layout's throw-away VM,
** against jit.util on traces compiled there: the IR's place, its lowest
** constant and count, the KGC op, every object a trace's KGC constants
** read as against the value jit.util.tracek gives, every constant operand
** of every instruction landing on a constant's first slot, and the
** trace's block as its allocator saw it (which fixes where the snapshot
** counts are and a snapshot's size). If any check fails the walk does not
** visit traces and the snapshot's header says why.
*/
#ifndef MEMPROF_HEAP_TRACES_H
#define MEMPROF_HEAP_TRACES_H

#include <stddef.h>
#include <stdint.h>

#include "heap_layout.h"
#include "lua.h"

/* IR references are biased (lj_ir.h): constants lie below REF_BIAS, the
** last three of them the fixed nil, false and true. */
#define HT_REF_BIAS 0x8000u
#define HT_REF_TRUE (HT_REF_BIAS - 3)
#define HT_IRINS_SIZE 8
/* Constants a trace may have, at most (its IR refs are 16-bit). */
#define HT_MAX_CONSTANTS 0x8000u

/*
** Verifies the trace fields of h (h->tr_*) in T, a throw-away VM of the
** same build whose base layout h->base is verified; g is T's
** global_State. Runs Lua code in T. Sets h->tr_ok, or leaves it 0 with
** h->tr_why naming the failed check.
*/
void heap_traces_learn(lua_State *T, uintptr_t g, struct heap_layout *h);

/* The bytes of trace T's block (as lj_trace_free frees it), or 0 if its
** counts do not read. */
uint64_t heap_trace_size(const struct heap_layout *h, uintptr_t T);

/*
** The next GC constant of trace T from IR reference *ref (start with
** *ref = 0: the trace's first constant): returns 1 with the object in
** *obj and its reference in *at, and *ref moved past it; 0 at the end; -1
** if a constant does not read as one (not a constant op, or past
** REF_TRUE).
*/
int heap_trace_next_kgc(const struct heap_layout *h, uintptr_t T, uint32_t *ref,
                        uint32_t *at, uintptr_t *obj);

#endif
