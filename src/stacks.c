/*
** Call stacks for the extended format.
*/
#include "stacks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "places.h"
#include "stream_format.h"

#define INITIAL_SLOTS 256

static int table_init(struct stack_key_table *t)
{
  memset(t, 0, sizeof(*t));
  t->slots = calloc(INITIAL_SLOTS, sizeof(*t->slots));
  if (t->slots == NULL)
    return ENOMEM;
  t->mask = INITIAL_SLOTS - 1;
  return 0;
}

static void table_free(struct stack_key_table *t)
{
  free(t->slots);
  free(t->pool);
  memset(t, 0, sizeof(*t));
}

static void table_clear(struct stack_key_table *t)
{
  memset(t->slots, 0, (t->mask + 1) * sizeof(*t->slots));
  t->used = 0;
  t->pool_len = 0;
}

static int content_init(struct stack_content_table *t)
{
  t->slots = calloc(INITIAL_SLOTS, sizeof(*t->slots));
  if (t->slots == NULL)
    return ENOMEM;
  t->mask = INITIAL_SLOTS - 1;
  t->used = 0;
  return 0;
}

int stacks_init(struct stacks *st)
{
  const char *max = getenv("MEMPROF_MAX_STACKS");
  char *end;
  unsigned long n = max != NULL ? strtoul(max, &end, 10) : 0;
  memset(st, 0, sizeof(*st));
  st->next_id = 1;
  st->max_stacks = max != NULL && *max != '\0' && *end == '\0' && n > 0 &&
                           n <= STACKS_MAX_STACKS
                       ? (size_t)n
                       : STACKS_MAX_STACKS;
  if (table_init(&st->raw) != 0 || content_init(&st->content) != 0) {
    stacks_free(st);
    return ENOMEM;
  }
  return 0;
}

void stacks_free(struct stacks *st)
{
  table_free(&st->raw);
  free(st->content.slots);
  memset(&st->content, 0, sizeof(st->content));
}

static uint64_t hash_frames(const struct vm_raw_frame *f, int n)
{
  uint64_t h = 0xcbf29ce484222325ULL;
  int i;
  for (i = 0; i < n; i++) {
    h = (h ^ f[i].obj) * 0x100000001b3ULL;
    h = (h ^ f[i].pc) * 0x100000001b3ULL;
    h = (h ^ f[i].ffid) * 0x100000001b3ULL;
  }
  return h | 1; /* Never 0, the empty mark. */
}

static int same_frames(const struct vm_raw_frame *a,
                       const struct vm_raw_frame *b, int n)
{
  int i;
  for (i = 0; i < n; i++)
    if (a[i].obj != b[i].obj || a[i].pc != b[i].pc || a[i].ffid != b[i].ffid)
      return 0;
  return 1;
}

static struct stack_slot *find(struct stack_key_table *t, uint64_t hash,
                               const struct vm_raw_frame *f, int n)
{
  size_t i = (size_t)(hash >> 16) & t->mask;
  for (; t->slots[i].hash != 0; i = (i + 1) & t->mask) {
    struct stack_slot *s = &t->slots[i];
    if (s->hash == hash && s->count == (uint32_t)n &&
        same_frames(&t->pool[s->start], f, n))
      return s;
  }
  return &t->slots[i]; /* The empty slot where it would go. */
}

static int grow_slots(struct stack_key_table *t)
{
  size_t n = t->mask + 1, i;
  struct stack_slot *old = t->slots;
  struct stack_slot *slots = calloc(2 * n, sizeof(*slots));
  if (slots == NULL)
    return ENOMEM;
  t->slots = slots;
  t->mask = 2 * n - 1;
  for (i = 0; i < n; i++) {
    if (old[i].hash != 0) {
      size_t j = (size_t)(old[i].hash >> 16) & t->mask;
      while (slots[j].hash != 0)
        j = (j + 1) & t->mask;
      slots[j] = old[i];
    }
  }
  free(old);
  return 0;
}

/* Adds frames under id. The slot must be the one find() returned. */
static int add(struct stack_key_table *t, struct stack_slot *slot,
               uint64_t hash, const struct vm_raw_frame *f, int n, uint32_t id)
{
  if (t->pool_len + (size_t)n > t->pool_cap) {
    size_t cap = t->pool_cap ? 2 * t->pool_cap : 1024;
    struct vm_raw_frame *pool;
    while (cap < t->pool_len + (size_t)n)
      cap *= 2;
    pool = realloc(t->pool, cap * sizeof(*pool));
    if (pool == NULL)
      return ENOMEM;
    t->pool = pool;
    t->pool_cap = cap;
  }
  memcpy(&t->pool[t->pool_len], f, (size_t)n * sizeof(*f));
  slot->hash = hash;
  slot->id = id;
  slot->start = (uint32_t)t->pool_len;
  slot->count = (uint32_t)n;
  t->pool_len += (size_t)n;
  t->used++;
  if (2 * t->used > t->mask + 1)
    return grow_slots(t);
  return 0;
}

/* ---- Content digests ---------------------------------------------------- */

/* The digest of frames resolved to lines: each Lua frame by its
** prototype's identity (symbols_proto_ident) and line, each C frame by
** its function. Describes the prototypes. Returns 0 or ENOMEM. */
static int digest(struct symbols *syms, struct writer *w,
                  const struct vm_layout *lay, const struct vm_raw_frame *f,
                  int n, uint64_t out[2])
{
  uint64_t h1 = symbols_mix64(0x452821e638d01377ULL ^ (uint64_t)n);
  uint64_t h2 = symbols_mix64(0xbe5466cf34e90c6cULL + (uint64_t)n);
  int i, err;
  for (i = 0; i < n; i++) {
    uint64_t a, b;
    if (f[i].ffid == FFID_LUA) {
      uint64_t ident[2];
      if ((err = symbols_proto_ident(syms, w, lay, f[i].obj, ident)) != 0)
        return err;
      a = ident[0];
      b = ident[1] ^ ((uint64_t)f[i].pc << 32);
    } else {
      a = f[i].obj;
      b = 0x8000000000000000ULL | f[i].ffid;
    }
    h1 = symbols_mix64(h1 ^ a) + b;
    h2 = symbols_mix64(h2 + b) ^ a;
  }
  out[0] = symbols_mix64(h1) | 1; /* Never 0, the empty mark. */
  out[1] = symbols_mix64(h2 ^ h1);
  return 0;
}

static struct stack_digest *content_find(struct stack_content_table *t,
                                         const uint64_t d[2])
{
  size_t i = (size_t)(d[0] >> 20) & t->mask;
  while (t->slots[i].h1 != 0 &&
         (t->slots[i].h1 != d[0] || t->slots[i].h2 != d[1]))
    i = (i + 1) & t->mask;
  return &t->slots[i];
}

/* Adds a digest at the slot content_find() returned. Past the bound the
** table is emptied first. Returns 0 or ENOMEM. */
static int content_add(struct stack_content_table *t, struct stack_digest *slot,
                       const uint64_t d[2], uint32_t id, size_t max)
{
  if (t->used >= max) {
    memset(t->slots, 0, (t->mask + 1) * sizeof(*t->slots));
    t->used = 0;
    slot = content_find(t, d);
  }
  if (2 * (t->used + 1) > t->mask + 1) {
    size_t n = t->mask + 1, i;
    struct stack_digest *old = t->slots;
    t->slots = calloc(2 * n, sizeof(*t->slots));
    if (t->slots == NULL) {
      t->slots = old;
      return ENOMEM;
    }
    t->mask = 2 * n - 1;
    for (i = 0; i < n; i++) {
      uint64_t od[2];
      od[0] = old[i].h1;
      od[1] = old[i].h2;
      if (od[0] != 0)
        *content_find(t, od) = old[i];
    }
    free(old);
    slot = content_find(t, d);
  }
  slot->h1 = d[0];
  slot->h2 = d[1];
  slot->id = id;
  t->used++;
  return 0;
}

/* ---- Definitions -------------------------------------------------------- */

/* The frames with lines instead of PCs (pc holds the line). */
static void resolve(const struct vm_layout *lay, const struct vm_raw_frame *f,
                    int n, struct vm_raw_frame *out)
{
  int i;
  for (i = 0; i < n; i++) {
    uint32_t line = 0;
    out[i] = f[i];
    if (f[i].ffid == FFID_LUA) {
      if (f[i].pc == 0 || !vm_pc_line(lay, 0, f[i].obj, f[i].pc, &line))
        line = 0;
      out[i].pc = line;
    }
  }
}

/* Writes the symbols of the frames, then the stack definition. */
static int define(struct symbols *syms, struct writer *w,
                  const struct vm_layout *lay, const struct vm_raw_frame *f,
                  int n, uint32_t id)
{
  int i, err;
  for (i = 0; i < n; i++) {
    err = f[i].ffid == FFID_LUA
              ? symbols_describe_proto(syms, w, lay, f[i].obj)
              : symbols_describe_c(syms, w, f[i].obj, f[i].ffid);
    if (err != 0)
      return err;
  }
  if (!writer_reserve(w, 1 + 2 * ULEB128_MAX))
    return 0;
  writer_put_byte(w, RECORD_STACK);
  writer_put_uleb128(w, id);
  writer_put_uleb128(w, (uint64_t)n);
  for (i = 0; i < n; i++) {
    if (!writer_reserve(w, 1 + 2 * ULEB128_MAX))
      return 0;
    if (f[i].ffid == FFID_LUA) {
      writer_put_byte(w, SOURCE_LUA);
      writer_put_uleb128(w, f[i].obj);
      writer_put_uleb128(w, f[i].pc);
    } else {
      writer_put_byte(w, SOURCE_C);
      writer_put_uleb128(w, f[i].obj);
    }
  }
  return 0;
}

static uint32_t remember_last(struct stacks *st, const struct vm_raw_frame *f,
                              int n, uint32_t id)
{
  memcpy(st->last, f, (size_t)n * sizeof(*f));
  st->last_count = n;
  st->last_id = id;
  return id;
}

uint32_t stacks_id(struct stacks *st, struct symbols *syms, struct writer *w,
                   const struct vm_layout *lay, const struct vm_raw_frame *f,
                   int n, int *err)
{
  struct vm_raw_frame lines[MAX_STACK_DEPTH];
  struct stack_digest *dslot;
  uint64_t hash, d[2];
  struct stack_slot *slot;
  uint32_t id;

  *err = 0;
  /* Addresses of the raw table may now be another function's. */
  if (st->generation != syms->generation) {
    table_clear(&st->raw);
    st->generation = syms->generation;
    st->last_count = 0;
  }
  if (n == st->last_count && same_frames(f, st->last, n))
    return st->last_id;
  hash = hash_frames(f, n);
  slot = find(&st->raw, hash, f, n);
  if (slot->hash != 0)
    return remember_last(st, f, n, slot->id);

  resolve(lay, f, n, lines);
  if ((*err = digest(syms, w, lay, lines, n, d)) != 0)
    return 0;
  dslot = content_find(&st->content, d);
  if (dslot->h1 != 0) {
    id = dslot->id;
  } else {
    id = st->next_id++;
    if (st->model != NULL)
      places_define_stack(st->model, syms, lay, id, lines, n);
    if ((*err = define(syms, w, lay, lines, n, id)) != 0 ||
        (*err = content_add(&st->content, dslot, d, id, st->max_stacks)) != 0)
      return 0;
  }
  if (st->raw.pool_len + (size_t)n > 2 * st->max_stacks ||
      st->raw.used >= st->max_stacks)
    table_clear(&st->raw);
  if ((*err = add(&st->raw, find(&st->raw, hash, f, n), hash, f, n, id)) != 0)
    return 0;
  return remember_last(st, f, n, id);
}
