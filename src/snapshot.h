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

/* Opens where a snapshot goes: a regular file (or a new one) as a
** temporary file next to it (*tmp, malloc'd, unique per thread and per
** call), renamed by snapshot_finish_target once complete; a device such as
** /dev/null or a FIFO in place (*tmp NULL), since renaming over it would
** replace the device node. Returns the descriptor, or -1 with errno. */
int snapshot_open_target(const char *path, char **tmp);

/* Why path could not be opened (err, from snapshot_open_target), in msg;
** a FIFO that nobody reads is said so. Returns err. */
int snapshot_open_error(char *msg, size_t len, const char *path, int err);

/* Closes fd, and renames tmp (if any) to path when err is 0, or removes
** it. Frees tmp. Returns err, or the error of closing or renaming. */
int snapshot_finish_target(int fd, char *tmp, const char *path, int err,
                           char *msg, size_t len);

#endif
