/*
** The in-memory model of a profile, for pprof snapshots (snapshot.c): the
** places of the recorded allocations and the frames of their stacks, with
** what was allocated at each since the profile started. Kept by the hook
** for every recorded allocation (with sampling, every sampled one) when
** the profile keeps a model (sampling, or the start option snapshots).
** The live blocks themselves, with their place and stack, are in the live
** table (live.h).
**
** A place is what an event's location is in the reports: a line of a Lua
** function, a C function or built-in, the place where a trace starts, or
** the VM itself (INTERNAL, of a kind). Each is named once, when first
** seen, while its objects are alive, and interned by its content (the
** names and lines): a function loaded again at another address keeps its
** places. An address cache in front, emptied when a described object goes
** away (symbols.generation), finds the place of an event's location
** without naming it again. Every name is a string in a pool of interned
** strings, which is also the string table of the pprof encoding.
**
** Everything is malloc'd, never Lua memory, and bounded (PLACES_MAX,
** PLACES_POOL_MAX, PLACES_MAX_STACKS, PLACES_MAX_FRAMES): past a bound,
** new places share one place, "(places past memprof's bound)", and new
** stacks are left out (their blocks count at their place alone);
** `overflow` says which bound was passed.
*/
#ifndef MEMPROF_PLACES_H
#define MEMPROF_PLACES_H

#include <stddef.h>
#include <stdint.h>

#include "symbols.h"
#include "vm_inspect.h"

#define PLACES_MAX (1u << 20)
#define PLACES_POOL_MAX (64u << 20)
#define PLACES_MAX_STACKS (1u << 20)
#define PLACES_MAX_FRAMES (1u << 24)

struct place {
  uint32_t func;        /* String: the function's name. */
  uint32_t file;        /* String: its file (0, "", when it has none). */
  uint32_t start_line;  /* The function's first line (Lua), or 0. */
  uint32_t line;        /* The line (Lua), or 0. */
  double alloc_bytes;   /* Allocated here since start (estimates when */
  double alloc_objects; /* sampled), by events without a known stack. */
};

/* A kept stack: its frames (place ids, innermost first) in `frames`. */
struct model_stack {
  uint32_t start, count; /* count 0: not kept. */
  double alloc_bytes, alloc_objects;
};

struct places {
  /* Strings: index -> offset in pool (index 0 is ""). */
  char *pool;
  size_t pool_len, pool_cap;
  uint32_t *string_at;
  uint32_t strings, strings_cap;
  uint32_t *string_slots; /* Index + 1 by hash; 0: empty. */
  size_t string_mask;
  /* Places, by id (index). */
  struct place *list;
  uint32_t count, cap;
  uint32_t *place_slots; /* Id + 1 by hash of the content; 0: empty. */
  size_t place_mask;
  /* Address cache: (source, address, line) -> id. */
  struct place_key {
    uintptr_t addr;
    uint64_t extra; /* Line, trace object, kind; with the source. */
    uint32_t id1;   /* Id + 1; 0: empty. */
  } * keys;
  size_t key_mask, key_used;
  unsigned generation;   /* symbols.generation of the cache. */
  struct place_key last; /* The key found last (loops repeat it). */
  /* Stacks by stack id (stacks.c). */
  struct model_stack *stacks;
  uint32_t stacks_cap;
  uint32_t *frames;
  size_t frames_len, frames_cap;
  uint32_t spill; /* Place id of the shared place past the bound + 1. */
  int overflow;   /* A bound was passed (see above). */
  int failed;     /* ENOMEM: the model lacks events from then on. */
};

/* Returns 0 or ENOMEM. */
int places_init(struct places *m);
void places_free(struct places *m);

/* The string at index i. */
const char *places_string(const struct places *m, uint32_t i);

/*
** The place of an event located at `site` (its internal kind `kind` when
** internal), named now if it is new. Reads the VM: it runs before the real
** allocator. Returns the place id; past a bound, or when memory runs out,
** the shared place (setting `failed` when even that cannot be made).
*/
uint32_t places_of(struct places *m, struct symbols *syms,
                   const struct vm_layout *lay, uintptr_t g,
                   const struct vm_site *site, uint8_t kind);

/* Keeps stack `id`'s frames (lines resolved: pc holds the line) as
** places, when stacks.c defines it. Memory running out sets `failed`:
** the model never stops the profile. */
void places_define_stack(struct places *m, struct symbols *syms,
                         const struct vm_layout *lay, uint32_t id,
                         const struct vm_raw_frame *f, int n);

/* Whether stack `id` is kept. */
static inline int places_has_stack(const struct places *m, uint32_t id)
{
  return id != 0 && id < m->stacks_cap && m->stacks[id].count != 0;
}

/* Counts an allocation of `bytes` bytes standing for `objects` blocks at
** place `place` with stack `stack` (0: none). */
static inline void places_count(struct places *m, uint32_t place,
                                uint32_t stack, double bytes, double objects)
{
  if (places_has_stack(m, stack)) {
    m->stacks[stack].alloc_bytes += bytes;
    m->stacks[stack].alloc_objects += objects;
  } else if (place < m->count) {
    m->list[place].alloc_bytes += bytes;
    m->list[place].alloc_objects += objects;
  }
}

#endif
