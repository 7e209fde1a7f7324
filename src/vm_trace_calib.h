/*
** The trace-lines calibration's shared state (vm_trace_calib.c, the driver
** and its runs; vm_trace_search.c, the searches of GCtrace, SnapShot and
** the stack adjustment; vm_trace_frames.c, what refines a place: stores
** after a call, built-ins' frames, ops after a return, the walk). Each
** function returns 1 when it found what it looks for, 0 after tlc_fail
** (or, for the optional refinements, leaves the layout's flag at 0).
*/
#ifndef MEMPROF_VM_TRACE_CALIB_H
#define MEMPROF_VM_TRACE_CALIB_H

#include <stdint.h>

#include "lua.h"
#include "trace_lines.h"
#include "vm_calib.h"
#include "vm_vmdef.h"

#define TLC_TRACES 12
#define TLC_SNAPS 48
#define TLC_ENTRIES 24
#define TLC_SAMPLES 8
#define TLC_WORDS 512
#define TLC_RESULTS 256
/* Events resolved by the known chunk's run (each must resolve right; the
** judge needs the table's and the inlined callee's), and call targets
** noted by a run. The built-ins' runs resolve up to TLC_RESULTS: their
** first events can come from a trace that shows one line alone (the
** string.format chunk's, on upstream-2026-gc64), the others later. */
#define TLC_KNOWN_EVENTS 24
#define TLC_TARGETS 16
/* Rounds of a known-answer loop whose run compiles it (LuaJIT's hotloop
** is 56), and of the built-ins' runs that are resolved; the same where
** loops are compiled at their first rounds (hotloop=1, in the throw-away
** VM): their resolved runs make over 100 events in compiled code. */
#define TLC_COMPILE_ROUNDS 400
#define TLC_RESOLVE_ROUNDS 400
#define TLC_EARLY_COMPILE_ROUNDS 40
#define TLC_EARLY_RESOLVE_ROUNDS 60
#define TLC_WINDOW 160
#define TLC_MEMOS 32
#define TLC_MCODE_MAX (1u << 20) /* A trace's machine code, at most. */

struct tlc_sample {
  uint8_t g[CALIB_G_WINDOW]; /* global_State. */
  uintptr_t stack, limit;    /* The running thread's stack. */
  uint32_t traceno;
  uintptr_t cf, from; /* The copy holds [from, cf). */
  int nwords;
  uint64_t words[TLC_WORDS];
};

struct tlc_result {
  uint32_t traceno;
  int ok;
  /* From g->jit_base: the trace's base frame and the one below it. */
  uintptr_t base_pt, below_pt;
  uint32_t below_line;
  int exit; /* Made by an exit (J->parent, J->exitno). */
  struct tl_place place;
};

struct tlc_trace {
  uint32_t no;
  uintptr_t T, mcode;
  uint32_t szmcode, nk, nins;
  int nsnap, nsnap_read;
  uint8_t window[TLC_WINDOW];
  struct {
    uint16_t ref;
    uint8_t nslots, nent;
    uint32_t entry[TLC_ENTRIES];
  } snap[TLC_SNAPS];
  uint16_t ot[4]; /* Of the first IR instructions. */
  int nir;
  int spadjust;    /* Seen on the stack, or -1. */
  uint32_t maplen; /* At least the snapshot map's length. */
};

/* A place resolved in this run (TLC_RESOLVE, TLC_RESOLVE_BUILTIN), by its
** key. */
struct tlc_memo {
  uintptr_t T, ret;
  uint32_t traceno;
  int ok;
  struct tl_place place;
};

/* What the recording allocator does with an event of a trace in the
** current run (struct tlc's check). */
enum tlc_check {
  TLC_SAMPLE = 0,      /* Copy the native stack: nothing is known yet. */
  TLC_RESOLVE,         /* Resolve it (and exits) with the layout found. */
  TLC_TARGET,          /* Note the helper the trace's call went to. */
  TLC_RESOLVE_BUILTIN, /* Resolve it, with the built-in that helper names. */
  TLC_UNWIND           /* arm64: the trace's stack pointer, by the unwinder. */
};

struct tlc {
  struct calib *c;
  lua_Alloc orig;
  void *orig_ud;
  enum tlc_check check;
  int nsamples, nresults, dropped;
  int want_results;      /* Results this run resolves, at most TLC_RESULTS. */
  int want_bases;        /* ... with the frames below their trace (judged in the
                         ** known chunk's run alone). */
  int nmemo;             /* Emptied by each run. */
  struct vm_vmdef vmdef; /* Its names (buf NULL: none). */
  int compile_rounds;    /* TLC_COMPILE_ROUNDS, or TLC_EARLY_... */
  int resolve_rounds;
  uintptr_t stack_end; /* In the calibration's own C frame. */
  uintptr_t g_end;     /* GG_State reads whole from g up to here. */
  int ntraces;
  int based;    /* The known-answer run found the frames below its traces. */
  int ntargets; /* Call targets of trace allocations (TLC_TARGET). */
  int nsps;     /* arm64: stack pointers the C unwinder found (TLC_UNWIND). */
  /* The arrays, from here on, are not cleared: an entry is written whole
  ** before its count covers it (then only the pages used are touched). */
  struct tlc_memo memo[TLC_MEMOS];
  struct tlc_sample samples[TLC_SAMPLES];
  struct tlc_result results[TLC_RESULTS];
  struct tlc_trace traces[TLC_TRACES];
  uintptr_t targets[TLC_TARGETS];
  struct {
    uintptr_t adj; /* The C frame less JLOOP's adjustment and the sp. */
    uint8_t window[TLC_WINDOW]; /* Of the trace found. */
  } sps[TLC_SAMPLES];
};

/* Records why the calibration failed (the first reason only); tl->ok = 0. */
void tlc_fail(struct vm_trace_layout *tl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The runs (vm_trace_calib.c). */
int tlc_pcall(lua_State *L, struct tlc *t, int nargs, int nres);
int tlc_run_known(lua_State *L, struct tlc *t, const char *name);

/* jit.util (ju: its stack index) and the searches (vm_trace_search.c). */
int tlc_ju_call(lua_State *L, int ju, const char *name, int nargs, int nres);
int tlc_ju_field(lua_State *L, int idx, const char *key, lua_Number *out);
int tlc_ju_trace(lua_State *L, int ju, struct tlc *t, uint32_t n);
void tlc_find_jit_base(struct tlc *t);
int tlc_find_trace_fields(struct tlc *t);
int tlc_find_stack_adjust(lua_State *L, struct tlc *t);
int tlc_find_header_op(lua_State *L, struct tlc *t, int ju);

/* The refinements of a place (vm_trace_frames.c). */
void tlc_find_store_after_return(lua_State *L, struct tlc *t, int ju);
void tlc_find_builtin_frames(lua_State *L, struct tlc *t, int ju);
void tlc_find_format_frame(lua_State *L, struct tlc *t);

/* string.format's frame on its strings of puts alone (an integer's `%d`
** on dual-number builds): the guard on its callee, proven by a run. */
void tlc_find_format_puts(lua_State *L, struct tlc *t);
void tlc_find_after_return(lua_State *L, struct tlc *t);
void tlc_find_walk(lua_State *L, struct tlc *t, int ju);

#endif
