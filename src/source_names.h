/*
** The names memprof-report gives the functions of a pprof snapshot, made
** when the snapshot is written (pprof.c), never in the hook: the model
** (places.h) names a Lua function by where it is defined ("function at
** @app.lua:3"), and the reporter by its source ("handler (@app.lua:3)")
** where the file is readable; it names the host program's C frames by the
** program ("luajit+0x92c0 (host program)"), the model by its path.
**
** Invariant: the source reading and the patterns mirror
** lua/memprof/read/sources.lua (MAX_FILE, MAX_FILES, MAX_TEXT, the four
** patterns of PATTERNS, the trimming of a line) and the host program's
** name read/names.lua's program_name; a change to either is made to both.
**
** Only chunk names of files ('@path', relative to the current directory)
** are read, each once, as regular files of at most SOURCE_NAMES_MAX_FILE
** bytes, and at most SOURCE_NAMES_MAX_FILES chunks are tried, in the order
** of the functions. A file that cannot be read keeps the model's name.
** Memory is malloc'd, never the Lua allocator's.
*/
#ifndef MEMPROF_SOURCE_NAMES_H
#define MEMPROF_SOURCE_NAMES_H

#include <stdint.h>

#include "places.h"

#define SOURCE_NAMES_MAX_FILE (4u << 20)
#define SOURCE_NAMES_MAX_FILES 256
#define SOURCE_NAMES_MAX_TEXT 160

struct source_names {
  char **names; /* By function (0-based): the reporter's name, or NULL
                   where it is the model's. */
  uint32_t count;
};

/* The names of `count` functions, function k being the one of place
** first[k] of m. Returns 0, or ENOMEM (nothing to free then). */
int source_names_make(struct source_names *s, const struct places *m,
                      const uint32_t *first, uint32_t count);
void source_names_free(struct source_names *s);

#endif
