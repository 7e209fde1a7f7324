/*
** Snapshots of a running profile (memprof.snapshot): what the profile has
** recorded so far, written to a file of its own while the profile goes on.
** Nothing here allocates through the Lua allocator.
*/
#ifndef MEMPROF_SNAPSHOT_H
#define MEMPROF_SNAPSHOT_H

#include <stddef.h>

#include "lua.h"

struct profiler;

/* The formats of a snapshot. */
enum snapshot_format {
  SNAPSHOT_PPROF,   /* The blocks live now, as a gzipped pprof profile. */
  SNAPSHOT_MEMPROF, /* The stream so far and an epilogue: a profile file. */
  SNAPSHOT_HEAP,    /* The live object graph (heapwalk.h); needs no profile. */
};

struct heap_profile_note;

/* Writes a snapshot of p to `path` (through a temporary file next to it,
** renamed at the end). Returns 0, or an errno with a message in msg. */
int snapshot_write(struct profiler *p, const char *path,
                   enum snapshot_format format, char *msg, size_t len);

/* Writes a heap snapshot of L's VM to `path` (as snapshot_write does: a
** temporary file renamed at the end). The file is opened before anything
** else, so a bad path changes nothing. Returns 0, or an errno with a
** message in msg. */
int snapshot_write_heap(lua_State *L, const char *path,
                        const struct heap_profile_note *note, char *msg,
                        size_t len);

#endif
