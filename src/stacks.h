/*
** Call stacks for the extended format: interned, so each distinct stack is
** written once (a stack definition) and events refer to it by id.
**
** Two tables: raw stacks (prototype and PC per frame, what the hook reads
** cheaply) map to ids for the common case; on a miss the frames are
** resolved to lines and looked up among resolved stacks, so two raw stacks
** on the same lines share one definition. Both are emptied when a described
** object goes away (symbols.generation), since an address may then be
** reused by another function. Everything is malloc'd, never Lua memory.
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

struct stacks {
  struct stack_key_table raw;      /* (proto, pc) frames -> id */
  struct stack_key_table resolved; /* (proto, line) frames -> id */
  uint32_t next_id;                /* Ids are never reused. */
  struct vm_walk_cache walk;       /* The steps of the last walk, */
  unsigned walk_generation;        /* valid in this symbols.generation. */
  /* The last stack seen: loops repeat it event after event. */
  struct vm_raw_frame last[MAX_STACK_DEPTH];
  int last_count;
  uint32_t last_id;
  unsigned generation; /* symbols.generation of the tables. */
};

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
