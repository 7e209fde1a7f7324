/*
** Snapshots of a running profile (memprof.snapshot): what the profile has
** recorded so far, written to a file of its own while the profile goes on.
** Nothing here allocates through the Lua allocator.
*/
#ifndef MEMPROF_SNAPSHOT_H
#define MEMPROF_SNAPSHOT_H

#include <stddef.h>

struct profiler;

/* The formats of a snapshot. */
enum snapshot_format {
  SNAPSHOT_PPROF,   /* The blocks live now, as a gzipped pprof profile. */
  SNAPSHOT_MEMPROF, /* The stream so far and an epilogue: a profile file. */
};

/* Writes a snapshot of p to `path` (through a temporary file next to it,
** renamed at the end). Returns 0, or an errno with a message in msg. */
int snapshot_write(struct profiler *p, const char *path,
                   enum snapshot_format format, char *msg, size_t len);

#endif
