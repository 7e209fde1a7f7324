/*
** The state of one calibration, shared by the probes that run the VM
** (vm_layout.c) and the searches that find offsets in what they saw
** (vm_discover.c).
**
** A calibration has two passes over the same probes. The first discovers:
** the probes copy windows of VM memory at known moments (a C function
** running, a table allocated at a known line, the collector freeing a
** known table, a coroutine running) and the searches look in those copies
** for the values the public API predicts. The second verifies: the same
** probes run again and every check is made with the discovered layout, as
** it would be for any layout.
*/
#ifndef MEMPROF_VM_CALIB_H
#define MEMPROF_VM_CALIB_H

#include <stddef.h>
#include <stdint.h>

#include "lua.h"
#include "vm_inspect.h"
#include "vm_layout.h"

/* Bytes copied from the start of global_State in each sample: every field
** the hook reads lies in the first 512 bytes in every known build. */
#define CALIB_G_WINDOW 1024
/* Bytes of the running thread's C frame copied in each sample. */
#define CALIB_CF_WINDOW 256
/* Where J->parent is looked for: bytes after J->trace. */
#define CALIB_J_FROM 1024
#define CALIB_J_WINDOW 3072

#define CALIB_EVENTS 256
#define CALIB_SAMPLES 48
#define CALIB_EXIT_SAMPLES 24
#define CALIB_PROBES 4
#define CALIB_PLACES 2

/* Copies of VM memory taken at one moment. */
struct calib_sample {
  uint8_t g[CALIB_G_WINDOW];
  uint8_t cf[CALIB_CF_WINDOW];
  uintptr_t L, cf_addr; /* The running thread and its C frame. */
  uint8_t g_ok, cf_ok;
};

/* What the calibration allocator saw while a probe window was open. */
struct calib_event {
  uintptr_t ptr, nptr;
  size_t nsize;
  int32_t vmstate;
  uint32_t parent; /* J->parent (verification of the exit window). */
  uintptr_t cur_L;
  struct vm_site site;
  int sample;      /* Index into samples, or -1. */
  int exit_sample; /* Index into exit_samples, or -1. */
};

/* A Lua function whose table allocation was seen at a known line. */
struct calib_place {
  uintptr_t fn;
  int line;                /* Of the allocation. */
  int firstline, lastline; /* lua_getinfo's linedefined, lastlinedefined. */
  char source[64];
  uint32_t sizebc; /* From lua_dump, without the header. */
  uint8_t numparams, framesize;
  int sample; /* The sample of the allocation, or -1. */
};

struct calib {
  lua_State *L;
  uintptr_t g;
  int g_read; /* The window of CALIB_G_WINDOW bytes at g read whole. */
  struct vm_layout lay;
  uint64_t given;   /* Fields set by MEMPROF_LAYOUT_OVERRIDE (bits). */
  int discover;     /* First pass: take samples, check nothing. */
  int have_thread;  /* lua_State and its C frame offsets are known. */
  int have_globals; /* vmstate and cur_L are known. */
  lua_Alloc orig_alloc;
  void *orig_ud;
  lua_State *running; /* The thread the probes run on now. */
  int window;         /* Which probe window is open (0: none). */
  uintptr_t only_ptr; /* If set, the window records only frees of this. */
  int32_t only_state; /* If set, the window records only this vmstate. */
  int32_t also_state; /* ... and also this one (RECORD). */
  int record_walks;   /* Code run while recording was located right. */
  int nevents;
  int nsamples, nexit_samples;

  /* Discovery's notes from the first pass. */
  int nprobes, nplaces;
  int gc_sample;             /* A free by the collector, or -1. */
  uint64_t cf_L_slots;       /* C frame slots that held L in every probe. */
  uintptr_t trace_protos[2]; /* Prototypes of the hot loops. */
  int trace_lines[2];
  uintptr_t exit_proto; /* Prototype of the loop whose traces exit. */
  int exit_line;
  /* The trace array is searched for from g + trace_from (0: the start);
  ** trace_refused: the J->trace the first pass found and the second
  ** refused (0: none). */
  uint16_t trace_from, trace_refused;

  char *err;
  size_t errlen;
  int failed;

  /* The arrays last (CALIB_ARRAYS): a check that uses only the layout
  ** clears the fields above them, and touches none of their pages. */
  struct calib_event events[CALIB_EVENTS];
  struct calib_sample samples[CALIB_SAMPLES];
  uint8_t exit_samples[CALIB_EXIT_SAMPLES][CALIB_J_WINDOW];
  struct calib_sample probes[CALIB_PROBES]; /* In C functions. */
  struct calib_place places[CALIB_PLACES];
};

/* The size of struct calib's fields before its arrays. */
#define CALIB_ARRAYS offsetof(struct calib, events)

/* Records the first failed check in c->err. Returns 0. */
int calib_fail(struct calib *c, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Whether MEMPROF_LAYOUT_OVERRIDE set the field at this offset of struct
** vm_layout (then discovery takes its value as it is). */
int calib_given(const struct calib *c, size_t field);

/* Copies the windows of a sample: global_State and the C frame of thread
** L (when its offsets are known). */
void calib_take_sample(struct calib *c, uintptr_t L, struct calib_sample *s);

/* Discovery (vm_discover.c). Each returns 1, or 0 after calib_fail. */
int discover_mode(struct calib *c, lua_State *L);
int discover_strings(struct calib *c, lua_State *L);
int discover_cfunc(struct calib *c, lua_State *L, lua_CFunction f);
int discover_thread(struct calib *c, lua_State *L);
void discover_probe(struct calib *c, lua_State *L);
int discover_place(struct calib *c, lua_State *L, int line, int sample);
int discover_globals(struct calib *c);
int discover_traces(struct calib *c);
void discover_parent(struct calib *c, uint32_t root);

/* Compiled-code attribution (vm_trace_*.c): sets c->lay.tl, saying
** why not when a check fails. Runs after the layout is verified. */
void calibrate_trace_lines(lua_State *L, struct calib *c, int apart);

/* The number of the trace of lay's trace array that starts in prototype
** want at line, or 0. */
uint32_t calib_trace_number(struct calib *c, const struct vm_layout *lay,
                            uintptr_t want, int line);

#endif
