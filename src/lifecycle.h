/*
** The life of a profile: start, stop, and the ways a profile ends without
** stop (lua_close, exit() without lua_close, fork()); and the VM's
** allocator chain, which the profile shares with other allocator hooks
** such as the built-in misc.memprof of Tarantool's LuaJIT fork. The
** binding (binding.c) parses arguments and turns the statuses below into
** Lua results; everything else about a profile's life is here.
*/
#ifndef MEMPROF_LIFECYCLE_H
#define MEMPROF_LIFECYCLE_H

#include <stddef.h>
#include <stdint.h>

#include "lua.h"
#include "vm_layout.h"

/* What memprof.start's options table asks for. */
struct profile_options {
  int stack_depth; /* 0: no stacks. */
  int timestamps;
  int collect_at_stop;   /* Collect garbage at stop, recorded. */
  uint64_t max_bytes;    /* 0: no size cap. */
  uint64_t sample_bytes; /* 0: record every event. */
  uint64_t seed;         /* Of the sampler, if has_seed. */
  int has_seed;
  int snapshots;   /* Keep the model of pprof snapshots in full mode too. */
  int trace_lines; /* TRACE_LINES_*: events of compiled code by line. */
};

/* The start option trace_lines: how events made by compiled code are
** attributed (trace_lines.h). */
enum {
  TRACE_LINES_DEFAULT = 0, /* Not given: see lifecycle.c. */
  TRACE_LINES_START,       /* false: the trace's start. */
  TRACE_LINES_RESUME,      /* 'resume': the snapshot's place. */
  TRACE_LINES_EXACT,       /* 'exact': per-line snapshots (J->prof_mode). */
  TRACE_LINES_WALK,        /* 'walk': from the snapshot's PC to the event's
                              bytecode (trace_lines.c). */
};

/* How a stopped profile ended, for stop's message. */
struct life_ended {
  int err;            /* errno of a file error, or EFBIG when capped. */
  char *path;         /* The profile's path (malloc'd: the caller frees it). */
  uint64_t max_bytes; /* The cap it reached (LIFE_MAX_BYTES). */
};

/* One of our hooks in a VM's allocator chain (lifecycle.c). */
struct chain_link;

/*
** What this module knows of one VM's profiles. It lives in the VM's
** registry sentinel (binding.c) and is used only from the VM's own thread:
** by the Lua API and by the sentinel's __gc at lua_close. Whether a profile
** runs is kept here rather than deduced from lua_getallocf: another hook
** installed above ours hides it.
*/
struct vm_profiles {
  struct chain_link *active; /* The profile started and not yet stopped. */
  struct chain_link *parked; /* Our hooks that another hook may still call:
                                they only forward (see lifecycle.c). */
  int has_builtin;           /* The VM came with its own misc.memprof. */
  int closing;               /* lua_close has begun: nothing starts any more. */
  int detached; /* The last profile was taken out of the allocator chain
                   by another hook; the next stop says so. */
};

/* How a call went; binding.c has the message of each. */
enum life_status {
  LIFE_OK,
  LIFE_RUNNING,         /* A profile runs already. */
  LIFE_NOT_RUNNING,     /* No profile runs. */
  LIFE_DETACHED,        /* No profile runs: another hook removed ours. */
  LIFE_BUILTIN,         /* The VM's built-in misc.memprof is running. */
  LIFE_BUILTIN_UNKNOWN, /* Whether it is running cannot be told. */
  LIFE_CLOSING,         /* The VM is being closed. */
  LIFE_FORKED,          /* No profile runs in this process: it was started
                           before fork() and its path has no %p. */
  LIFE_FILE_ERROR,      /* An errno about the profile's file. */
  LIFE_MAX_BYTES,       /* The profile stopped at its size cap. */
  LIFE_SNAPSHOT_FAILED, /* A snapshot could not be written: see its message. */
  LIFE_STATUSES
};

/* Once per process, before anything else here (idempotent). */
void lifecycle_init_process(void);

/* Whether a profile may start in L's VM now. Allocates nothing through
** the VM (see lifecycle.c). */
enum life_status lifecycle_may_start(lua_State *L, struct vm_profiles *vm);

/* The file name of a profile path in this process: "%p" is replaced by the
** process id and "%%" by "%"; any other "%" is kept. malloc'd; NULL when
** memory is short. */
char *lifecycle_file_name(const char *path);

/* Whether a profile to `path` goes on in a child after fork() (into the
** child's own file): whether the path names the process ("%p"). */
int lifecycle_path_follows_fork(const char *path);

/* Starts a profile to `path` (after lifecycle_may_start said LIFE_OK and
** with a verified layout). The file is lifecycle_file_name(path).
** `collector`: the stack index of the lifecycle_collector closure, through
** which trace_lines 'exact' flushes the traces (0: none). LIFE_OK, or
** LIFE_FILE_ERROR with *err. */
enum life_status lifecycle_start(lua_State *L, struct vm_profiles *vm,
                                 const struct vm_layout *lay,
                                 const struct profile_options *opts,
                                 const char *path, int collector, int *err);

/* A lua_CFunction, for lua_cpcall: throws the VM's compiled traces away
** (luaJIT_setmode, found at run time: the module links no LuaJIT), and
** with a non-NULL userdata starts the hot counters again as LuaJIT does
** when its compiler is turned on (engine off, then on): else an outer
** loop whose counter ran out before its inner loop was compiled again
** aborts its recording (an unwind through the C library's unwinder).
** Raises in a finalizer. */
int lifecycle_flush_traces(lua_State *L);

/* Whether the VM's compiler is on (lay's learned word of its flags): the
** hot counters are started again only then, so that a compiler the program
** turned off stays off. 0 where the word is not learned. */
int lifecycle_jit_on(uintptr_t g, const struct vm_layout *lay);

/* The trace_lines mode (TRACE_LINES_*) a start with opts takes on a build
** of layout lay: the default resolved, limited to what the build does. */
int lifecycle_trace_lines_mode(const struct vm_layout *lay,
                               const struct profile_options *opts);

/* A full collection, for collect_at_stop. The binding makes its closure
** when the module loads and passes its stack index to lifecycle_stop, so
** that stop allocates nothing to run it. */
int lifecycle_collector(lua_State *L);

/* Stops the running profile and completes its file; with collect_at_stop,
** collects garbage first by calling the lifecycle_collector closure at
** stack index `collector`. LIFE_OK, LIFE_NOT_RUNNING, LIFE_DETACHED, or
** LIFE_FILE_ERROR or LIFE_MAX_BYTES with *ended filled in. */
enum life_status lifecycle_stop(lua_State *L, struct vm_profiles *vm,
                                int collector, struct life_ended *ended);

struct profile_stats;

/* The running profile's totals (memprof.stats) into *out, with its
** sampling rate (0: none) and bytes written. LIFE_OK, LIFE_NOT_RUNNING,
** LIFE_DETACHED or LIFE_FORKED. */
enum life_status lifecycle_stats(lua_State *L, struct vm_profiles *vm,
                                 struct profile_stats *out,
                                 uint64_t *sample_bytes, uint64_t *written);

/* Writes a snapshot of the running profile to `path` in `format` (an
** enum snapshot_format) without stopping it. LIFE_OK, LIFE_NOT_RUNNING,
** LIFE_DETACHED, or LIFE_SNAPSHOT_FAILED with a message in msg and *err. */
enum life_status lifecycle_snapshot(lua_State *L, struct vm_profiles *vm,
                                    const char *path, int format, char *msg,
                                    size_t len, int *err);

/* Whether a thread is inside the hook of one of vm's profiles (running or
** parked) now: for memprof detach, which reads it with every other thread
** stopped (profiler.busy). */
int lifecycle_hook_busy(const struct vm_profiles *vm);

/* Whether a profile runs (what stop would find). */
int lifecycle_is_running(lua_State *L, struct vm_profiles *vm);

/* lua_close: ends the profile and takes our hooks out of the chain where
** that can be done. */
void lifecycle_close(lua_State *L, struct vm_profiles *vm);

#endif
