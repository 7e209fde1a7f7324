/*
** Call stacks for the extended format: interned, so each distinct stack is
** written once (a stack definition) and events refer to it by id.
**
** Two tables. Raw stacks (prototype and PC per frame, what the hook reads
** cheaply) map to ids for the common case; it is emptied when a described
** object goes away (symbols.generation), since an address may then be
** reused by another function. On a miss the frames are resolved to what a
** reader sees (each Lua frame's chunk name, first line and current line,
** each C frame's function) and that content is looked up in the second
** table, which keeps a 128-bit digest of it per stack id: a prototype
** freed and loaded again, at any address, gives the same content and so
** the same id. Both tables are bounded (see max_stacks): past a bound a
** table is emptied, and stacks are defined again from then on. Everything
** is malloc'd, never Lua memory.
*/
#ifndef MEMPROF_STACKS_H
#define MEMPROF_STACKS_H

#include <stddef.h>
#include <stdint.h>

#include "symbols.h"
#include "vm_inspect.h"
#include "writer.h"

#define MAX_STACK_DEPTH 64

struct stack_key_table {
  struct stack_slot {
    uint64_t hash; /* 0: empty. */
    uint32_t id;
    uint32_t start; /* Index of the first frame in the pool. */
    uint32_t count;
  } * slots;
  size_t mask, used;
  struct vm_raw_frame *pool; /* The frames of every key, end to end. */
  size_t pool_len, pool_cap;
};

/* Bounds of the tables: the content table holds at most max_stacks
** stacks (at most two slots of 24 bytes each), the raw table as many
** stacks and twice as many frames (24 bytes each): with the default,
** about 72 MB in all at worst. MEMPROF_MAX_STACKS sets max_stacks. */
#define STACKS_MAX_STACKS (1u << 19)

/* Content digests of the stacks defined in the stream. */
struct stack_content_table {
  struct stack_digest {
    uint64_t h1, h2; /* 128-bit digest of the content; h1 = 0: empty. */
    uint32_t id;
  } * slots;
  size_t mask, used;
};

struct places;

struct stacks {
  struct stack_key_table raw;         /* (proto, pc) frames -> id */
  struct stack_content_table content; /* digest of the content -> id */
  uint32_t next_id;                   /* Ids are never reused. */
  struct vm_walk_cache walk;          /* The steps of the last walk, */
  unsigned walk_generation;           /* valid in this symbols.generation. */
  /* The last stack seen: loops repeat it event after event. */
  struct vm_raw_frame last[MAX_STACK_DEPTH];
  int last_count;
  uint32_t last_id;
  unsigned generation;  /* symbols.generation of the tables. */
  size_t max_stacks;    /* The bound of both tables (see above). */
  struct places *model; /* Kept informed of new stacks, or NULL. */
};

/* Returns 0, or ENOMEM. Reads MEMPROF_MAX_STACKS (call it outside the
** hook). */
int stacks_init(struct stacks *st);
void stacks_free(struct stacks *st);

/*
** The id of the stack frames[0..n-1], writing its definition (and the
** symbols its frames need) first if the stream does not have it. Returns
** 0 on ENOMEM or a write failure (the event then goes without a stack).
*/
uint32_t stacks_id(struct stacks *st, struct symbols *syms, struct writer *w,
                   const struct vm_layout *lay, const struct vm_raw_frame *f,
                   int n, int *err);

#endif
