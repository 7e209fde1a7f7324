/*
** The sampled blocks that are live: an open-addressing hash table of
** addresses (linear probing, deletion by shifting back, so no tombstones),
** in memory from mmap, never from the Lua allocator. The sampling hook
** looks up every freed or reallocated block in it: a free of a block that
** was not sampled is not recorded. It grows by doubling while at most half
** full, up to LIVE_MAX_SLOTS.
*/
#ifndef MEMPROF_LIVE_H
#define MEMPROF_LIVE_H

#include <stddef.h>
#include <stdint.h>

/* 2^23 slots of 24 bytes (192 MiB): at most 4,194,304 live sampled
** blocks, about 2 TiB of heap at the default rate. */
#define LIVE_MIN_SLOTS 1024
#define LIVE_MAX_SLOTS (1u << 23)

struct live_block {
  uintptr_t addr; /* 0: an empty slot. */
  size_t size;
  uint32_t place; /* Its place and stack in the model (places.h), */
  uint32_t stack; /* when the profile keeps one; else 0. */
};

struct live_table {
  struct live_block *slots;
  size_t mask;  /* Slots - 1 (a power of two, less one). */
  size_t count; /* Blocks in the table. */
};

/* Returns 0 or ENOMEM. */
int live_init(struct live_table *t);
void live_free(struct live_table *t);

/* Adds a block (not in the table). Returns 0, or ENOMEM when the table is
** full and cannot grow. */
int live_insert(struct live_table *t, uintptr_t addr, size_t size,
                uint32_t place, uint32_t stack);

/* Removes a block; returns its size, or 0 if it was not there. */
size_t live_remove(struct live_table *t, uintptr_t addr);

/* The slot where addr's probe starts: bits 32 and up of a multiplicative
** hash (at most 23 of them are used), which depend on every bit of the
** address. A fixed shift keeps the hook's look-up free of a variable
** shift (and of the register moves one needs on x86). */
static inline size_t live_home(const struct live_table *t, uintptr_t addr)
{
  return (size_t)(((uint64_t)addr * 0x9e3779b97f4a7c15ULL) >> 32) & t->mask;
}

/* Whether addr is a live sampled block. */
static inline int live_contains(const struct live_table *t, uintptr_t addr)
{
  size_t i = live_home(t, addr);
  for (;;) {
    uintptr_t a = t->slots[i].addr;
    if (a == addr)
      return 1;
    if (a == 0)
      return 0;
    i = (i + 1) & t->mask;
  }
}

#endif
