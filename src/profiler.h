/*
** One profiler per VM (global_State). It lives in malloc'd memory and is
** the `ud` of the allocator hook, so several VMs in one process, each in
** its own thread, are profiled independently.
*/
#ifndef MEMPROF_PROFILER_H
#define MEMPROF_PROFILER_H

#include <stdint.h>

#include "live.h"
#include "places.h"
#include "lua.h"
#include "sample.h"
#include "stacks.h"
#include "symbols.h"
#include "trace_lines.h"
#include "vm_layout.h"
#include "writer.h"

enum profiler_state {
  PROFILER_RECORDING, /* Events are encoded and written. */
  PROFILER_HALTED,    /* Writing failed or the stream was finished (exit):
                         the hook only forwards. */
};

/*
** Totals since start (memprof.stats), by the header of the recorded event
** (header & 0x1f: its kind and source bits): events, bytes of the new
** block, bytes of the old one (meaningful for frees and reallocs only).
** With sampling, the same totals count the sampled events, and the
** estimates (each sampled block weighted as sample.h says) are kept
** beside them.
*/
struct profile_stats {
  uint64_t events[32];
  uint64_t allocated[32];
  uint64_t freed[32];
  uint64_t dropped; /* Allocator calls not recorded after a halt. */
  uint64_t unwinds; /* arm64: C frames unwound by libgcc (trace_lines.h). */
  /* Sampling: estimates, by header & 0x1f too. */
  double est_events[32];
  double est_allocated[32];
  double est_freed[32];
  double est_live_bytes, est_live_blocks; /* Of the live sampled blocks. */
};

struct profiler {
  /* Read on every allocator call; with sampling, the live table's slots
  ** and mask and the sampler's countdown too, which follow at once so
  ** that an unsampled call reads one or two cache lines of the profiler. */
  lua_Alloc orig_alloc;
  void *orig_ud;
  volatile int state;
  /* 1 from the hook's entry until it has done with the profile (its last
  ** call out of memprof.so returned, or the real allocator is its tail
  ** call): memprof detach reads it in a stopped process (attach_entry.c). */
  volatile int busy;
  unsigned fork_generation; /* Value of profiler_fork_generation at start. */
  /* Sampled recording (memprof.start's sample_bytes): sampler.mean is 0
  ** when every event is recorded. */
  struct live_table live; /* The sampled blocks that are live (every block
                             with snapshots). */
  struct sampler sampler;
  uintptr_t g;
  /* Where g's vmstate and cur_L are: the hook reads them on every call. */
  uintptr_t vmstate_at, cur_L_at;
  uint32_t located_states; /* See lifecycle.c, located_states. */
  struct vm_layout layout;
  struct writer out;
  struct symbols syms;
  struct location_cache {
    uintptr_t addr;
    uint64_t word;
    unsigned len;
  } last_location; /* Encoding of the last location address. */

  /* Extended format (0 and 0 for Tarantool's format). */
  int extended;        /* Any of the two below: version 100. */
  int stack_depth;     /* Frames per event, 0: no stacks. */
  int timestamps;      /* Write time marks. */
  int collect_at_stop; /* Collect garbage at stop (and note it). */
  struct stacks stacks;
  unsigned clock_countdown; /* Events until the clock is read again. */
  uint64_t clock_start;     /* Monotonic ns at start. */
  uint64_t last_mark;       /* ns since start of the last time mark. */

  /* The model of pprof snapshots (places.h), kept with sampling and with
  ** the start option snapshots. */
  int keeps_model;
  int snapshots; /* The start option: the model in full mode too. */
  int live_full; /* Full mode: the live table passed LIVE_MAX_SLOTS. */
  struct places model;

  /* Compiled code by line (the start option trace_lines). */
  struct trace_lines tlines;
  int trace_lines;     /* TRACE_LINES_* (lifecycle.h). */
  int prof_mode_set;   /* We set J->prof_mode to 'l' ('exact'). */
  uint8_t attribution; /* The value of NOTE_COMPILED_CODE. */

  /* The totals since start that memprof.stats() reads. */
  struct profile_stats stats;

  /* The size cap (memprof.start's max_bytes). */
  uint64_t max_bytes; /* 0: none. */
  int capped;         /* Reached: the stream ends at cut_at. */
  uint64_t cut_at;

  /* Bookkeeping. */
  int error;  /* errno that halted recording (write error, ENOMEM, EFBIG
                 when capped). */
  char *path; /* The file (for messages). */
  char *path_template;   /* The path given to start when it names the
                            process ("%p"): a forked child goes on into a
                            file of its own (lifecycle.c). Else NULL. */
  struct profiler *next; /* All running profilers, for the exit handler. */
};

/* Incremented in a child after fork(); a profiler started in another
** process drops its events and never writes to the parent's file. */
extern volatile unsigned profiler_fork_generation;

/* The allocator that records p's events (its ud is p): a family's
** specialised hook when p's verified layout is exactly that family's, else
** the generic one; with PDEP where it is fast. */
lua_Alloc profiler_hook_for(const struct profiler *p);

/* Whether f is one of the recording allocators. */
int profiler_is_hook(lua_Alloc f);

/* Writes both section headers. Returns 0 or errno. */
int profiler_write_prologue(struct profiler *p);

/* Notes in the stream that garbage was collected at stop, and the heap's
** size after it. Extended format only. */
void profiler_note_collected(struct profiler *p, uint64_t heap);

/* Writes the epilogue and closes the file. Returns 0 or errno. */
int profiler_finish(struct profiler *p);

#endif
