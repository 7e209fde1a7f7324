/*
** The live sampled blocks (live.h).
*/
#define _GNU_SOURCE
#include "live.h"

#include <errno.h>
#include <sys/mman.h>

static struct live_block *map_slots(size_t n)
{
  void *m = mmap(NULL, n * sizeof(struct live_block), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return m == MAP_FAILED ? NULL : m;
}

static void set_slots(struct live_table *t, struct live_block *slots, size_t n)
{
  t->slots = slots;
  t->mask = n - 1;
}

int live_init(struct live_table *t)
{
  struct live_block *slots = map_slots(LIVE_MIN_SLOTS);
  if (slots == NULL)
    return ENOMEM;
  set_slots(t, slots, LIVE_MIN_SLOTS);
  t->count = 0;
  return 0;
}

void live_free(struct live_table *t)
{
  if (t->slots != NULL)
    munmap(t->slots, (t->mask + 1) * sizeof(struct live_block));
  t->slots = NULL;
  t->count = 0;
}

static void put(struct live_table *t, const struct live_block *b)
{
  size_t i = live_home(t, b->addr);
  while (t->slots[i].addr != 0)
    i = (i + 1) & t->mask;
  t->slots[i] = *b;
}

/* Twice as many slots, every block moved over. */
static int grow(struct live_table *t)
{
  size_t old_n = t->mask + 1, i;
  struct live_block *old = t->slots, *slots;
  if (old_n >= LIVE_MAX_SLOTS || (slots = map_slots(old_n * 2)) == NULL)
    return ENOMEM;
  set_slots(t, slots, old_n * 2);
  for (i = 0; i < old_n; i++)
    if (old[i].addr != 0)
      put(t, &old[i]);
  munmap(old, old_n * sizeof(struct live_block));
  return 0;
}

int live_insert(struct live_table *t, uintptr_t addr, size_t size,
                uint32_t place, uint32_t stack)
{
  struct live_block b;
  if ((t->count + 1) * 2 > t->mask + 1 && grow(t) != 0)
    return ENOMEM;
  b.addr = addr;
  b.size = size;
  b.place = place;
  b.stack = stack;
  put(t, &b);
  t->count++;
  return 0;
}

size_t live_remove(struct live_table *t, uintptr_t addr)
{
  size_t i = live_home(t, addr), j, size;
  while (t->slots[i].addr != addr) {
    if (t->slots[i].addr == 0)
      return 0;
    i = (i + 1) & t->mask;
  }
  size = t->slots[i].size;
  t->count--;
  /* Shift back the blocks after it whose probe would pass slot i. */
  j = i;
  for (;;) {
    size_t home;
    j = (j + 1) & t->mask;
    if (t->slots[j].addr == 0)
      break;
    home = live_home(t, t->slots[j].addr);
    /* The block at j stays if its home lies cyclically in (i, j]. */
    if (i <= j ? (home > i && home <= j) : (home > i || home <= j))
      continue;
    t->slots[i] = t->slots[j];
    i = j;
  }
  t->slots[i].addr = 0;
  t->slots[i].size = 0;
  return size;
}
