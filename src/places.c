/*
** The in-memory model of a profile (see places.h).
*/
#define _GNU_SOURCE
#include "places.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream_format.h"

#define INITIAL_SLOTS 256

/* The first line LuaJIT gives its built-ins written in Lua. */
#define BUILTIN_FIRSTLINE 0xffffffffu

/* The longest name kept of a chunk; a longer one is cut with "...". */
#define CHUNKNAME_MAX 200

#define SPILL_NAME "(places past memprof's bound)"

static const char *const internal_names[] = {
    "INTERNAL", "INTERNAL (garbage collector)", "INTERNAL (JIT compiler)",
    "INTERNAL (trace exit)", "INTERNAL (interpreter)"};

static uint64_t hash_string(const char *s, size_t len)
{
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t i;
  for (i = 0; i < len; i++)
    h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
  return symbols_mix64(h ^ len);
}

static uint64_t hash_place(const struct place *p)
{
  return symbols_mix64(((uint64_t)p->func << 32 | p->file) ^
                       symbols_mix64((uint64_t)p->start_line << 32 | p->line));
}

/* A table of ids + 1 twice as large, every id placed again by `hash`. */
static int grow_ids(uint32_t **slots, size_t *mask, uint32_t n,
                    uint64_t (*hash)(const struct places *, uint32_t),
                    const struct places *m)
{
  size_t size = 2 * (*mask + 1), i;
  uint32_t *t = calloc(size, sizeof(*t));
  if (t == NULL)
    return ENOMEM;
  for (i = 0; i < n; i++) {
    size_t j = (size_t)hash(m, (uint32_t)i) & (size - 1);
    while (t[j] != 0)
      j = (j + 1) & (size - 1);
    t[j] = (uint32_t)i + 1;
  }
  free(*slots);
  *slots = t;
  *mask = size - 1;
  return 0;
}

static uint32_t intern_string(struct places *m, const char *s, size_t len);

static uint64_t string_hash_at(const struct places *m, uint32_t i)
{
  const char *s = places_string(m, i);
  return hash_string(s, strlen(s));
}

static uint64_t place_hash_at(const struct places *m, uint32_t i)
{
  return hash_place(&m->list[i]);
}

const char *places_string(const struct places *m, uint32_t i)
{
  return m->pool + m->string_at[i];
}

int places_init(struct places *m)
{
  memset(m, 0, sizeof(*m));
  m->pool = malloc(4096);
  m->pool_cap = 4096;
  m->string_at = malloc(INITIAL_SLOTS * sizeof(*m->string_at));
  m->strings_cap = INITIAL_SLOTS;
  m->string_slots = calloc(INITIAL_SLOTS, sizeof(*m->string_slots));
  m->string_mask = INITIAL_SLOTS - 1;
  m->list = malloc(INITIAL_SLOTS * sizeof(*m->list));
  m->cap = INITIAL_SLOTS;
  m->place_slots = calloc(INITIAL_SLOTS, sizeof(*m->place_slots));
  m->place_mask = INITIAL_SLOTS - 1;
  m->keys = calloc(INITIAL_SLOTS, sizeof(*m->keys));
  m->key_mask = INITIAL_SLOTS - 1;
  if (m->pool == NULL || m->string_at == NULL || m->string_slots == NULL ||
      m->list == NULL || m->place_slots == NULL || m->keys == NULL) {
    places_free(m);
    return ENOMEM;
  }
  /* String 0 is "", as in pprof's string table. */
  m->pool[0] = '\0';
  m->pool_len = 1;
  m->string_at[0] = 0;
  m->strings = 1;
  m->string_slots[hash_string("", 0) & m->string_mask] = 1;
  if (intern_string(m, SPILL_NAME, strlen(SPILL_NAME)) != 1) {
    places_free(m);
    return ENOMEM;
  }
  return 0;
}

void places_free(struct places *m)
{
  free(m->pool);
  free(m->string_at);
  free(m->string_slots);
  free(m->list);
  free(m->place_slots);
  free(m->keys);
  free(m->stacks);
  free(m->frames);
  memset(m, 0, sizeof(*m));
}

/* The index of string s (interned now if new), or UINT32_MAX when memory
** or the pool's bound runs out. */
static uint32_t intern_string(struct places *m, const char *s, size_t len)
{
  uint64_t h = hash_string(s, len);
  size_t i = (size_t)h & m->string_mask;
  uint32_t idx;
  for (; m->string_slots[i] != 0; i = (i + 1) & m->string_mask) {
    const char *t = places_string(m, m->string_slots[i] - 1);
    if (strncmp(t, s, len) == 0 && t[len] == '\0')
      return m->string_slots[i] - 1;
  }
  if (m->pool_len + len + 1 > PLACES_POOL_MAX)
    return UINT32_MAX;
  if (m->pool_len + len + 1 > m->pool_cap) {
    size_t cap = m->pool_cap;
    char *pool;
    while (cap < m->pool_len + len + 1)
      cap *= 2;
    if ((pool = realloc(m->pool, cap)) == NULL)
      return UINT32_MAX;
    m->pool = pool;
    m->pool_cap = cap;
  }
  if (m->strings == m->strings_cap) {
    uint32_t *at = realloc(m->string_at, 2 * m->strings_cap * sizeof(*at));
    if (at == NULL)
      return UINT32_MAX;
    m->string_at = at;
    m->strings_cap *= 2;
  }
  idx = m->strings++;
  m->string_at[idx] = (uint32_t)m->pool_len;
  memcpy(m->pool + m->pool_len, s, len);
  m->pool[m->pool_len + len] = '\0';
  m->pool_len += len + 1;
  m->string_slots[i] = idx + 1;
  if (2 * m->strings > m->string_mask + 1 &&
      grow_ids(&m->string_slots, &m->string_mask, m->strings, string_hash_at,
               m) != 0)
    return UINT32_MAX;
  return idx;
}

/* The id of the place with this content (added now if new), or UINT32_MAX
** when memory or the bound runs out. */
static uint32_t intern_place(struct places *m, const struct place *p)
{
  size_t i = (size_t)hash_place(p) & m->place_mask;
  uint32_t id;
  for (; m->place_slots[i] != 0; i = (i + 1) & m->place_mask) {
    const struct place *q = &m->list[m->place_slots[i] - 1];
    if (q->func == p->func && q->file == p->file &&
        q->start_line == p->start_line && q->line == p->line)
      return m->place_slots[i] - 1;
  }
  if (m->count + 1 >= PLACES_MAX) /* One is kept for the shared place. */
    return UINT32_MAX;
  if (m->count == m->cap) {
    struct place *list = realloc(m->list, 2 * m->cap * sizeof(*list));
    if (list == NULL)
      return UINT32_MAX;
    m->list = list;
    m->cap *= 2;
  }
  id = m->count++;
  m->list[id] = *p;
  m->list[id].alloc_bytes = m->list[id].alloc_objects = 0;
  m->place_slots[i] = id + 1;
  if (2 * m->count > m->place_mask + 1 &&
      grow_ids(&m->place_slots, &m->place_mask, m->count, place_hash_at, m) !=
          0)
    return UINT32_MAX;
  return id;
}

/* The shared place of everything past a bound. */
static uint32_t spill_place(struct places *m)
{
  struct place p;
  uint32_t id;
  m->overflow = 1;
  if (m->spill != 0)
    return m->spill - 1;
  memset(&p, 0, sizeof(p));
  p.func = 1; /* SPILL_NAME, interned first. */
  if (m->count == m->cap) {
    m->failed = ENOMEM;
    return 0;
  }
  id = m->count++;
  m->list[id] = p;
  m->spill = id + 1;
  return id;
}

/* A chunk name as kept: at most CHUNKNAME_MAX bytes, up to its first line
** break. Returns its length in out. */
static size_t chunk_display(const char *name, uint32_t len, char *out)
{
  size_t n = 0;
  while (n < len && n < CHUNKNAME_MAX && name[n] != '\n' && name[n] != '\0')
    n++;
  memcpy(out, name, n);
  if (n < len) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
  return n;
}

/* The content of the place at line `line` of prototype pt. */
static int name_lua(struct places *m, const struct vm_layout *lay, uintptr_t pt,
                    uint32_t line, struct place *p)
{
  char chunk[CHUNKNAME_MAX + 4], func[CHUNKNAME_MAX + 64];
  const char *name;
  uint32_t len;
  int32_t firstline;
  size_t n;
  if (!vm_proto_source(lay, 0, pt, &name, &len, &firstline)) {
    snprintf(func, sizeof(func), "function at LFUNC %#llx",
             (unsigned long long)pt);
    p->func = intern_string(m, func, strlen(func));
    p->line = line;
    return p->func != UINT32_MAX;
  }
  n = chunk_display(name, len, chunk);
  if ((uint32_t)firstline == BUILTIN_FIRSTLINE)
    snprintf(func, sizeof(func), "[builtin:%s]", chunk);
  else if (firstline == 0)
    snprintf(func, sizeof(func), "main chunk of %s", chunk);
  else
    snprintf(func, sizeof(func), "function at %s:%d", chunk, (int)firstline);
  p->func = intern_string(m, func, strlen(func));
  p->file = chunk[0] == '@' ? intern_string(m, chunk + 1, n - 1)
                            : intern_string(m, chunk, n);
  p->start_line =
      (uint32_t)firstline == BUILTIN_FIRSTLINE ? 0 : (uint32_t)firstline;
  p->line = (uint32_t)firstline == BUILTIN_FIRSTLINE ? 0 : line;
  return p->func != UINT32_MAX && p->file != UINT32_MAX;
}

/* The content of the place where trace `traceno` starts. */
static int name_trace(struct places *m, const struct vm_layout *lay,
                      uintptr_t g, uint32_t traceno, struct place *p)
{
  char chunk[CHUNKNAME_MAX + 4], func[CHUNKNAME_MAX + 64];
  const char *name;
  uint32_t len, line = 0;
  int32_t firstline;
  uintptr_t pt = 0;
  if (traceno == 0)
    snprintf(func, sizeof(func), "TRACE (compiled code, trace not known)");
  else if (!lay->trace_ok ||
           vm_trace_start(lay, 0, g, traceno, &pt, &line) == 0)
    snprintf(func, sizeof(func), "TRACE [%u]", (unsigned)traceno);
  else if (!vm_proto_source(lay, 0, pt, &name, &len, &firstline))
    snprintf(func, sizeof(func), "TRACE started at LFUNC %#llx:%u",
             (unsigned long long)pt, (unsigned)line);
  else {
    chunk_display(name, len, chunk);
    /* A built-in written in Lua has no lines: named as name_lua names it. */
    if ((uint32_t)firstline == BUILTIN_FIRSTLINE)
      snprintf(func, sizeof(func), "TRACE started at [builtin:%s]", chunk);
    else
      snprintf(func, sizeof(func), "TRACE started at %s:%u", chunk,
               (unsigned)line);
  }
  p->func = intern_string(m, func, strlen(func));
  return p->func != UINT32_MAX;
}

/* The content of a place, named from the VM. */
static int name_place(struct places *m, struct symbols *syms,
                      const struct vm_layout *lay, uintptr_t g, uint8_t source,
                      uintptr_t addr, uint32_t number, uint8_t ffid,
                      struct place *p)
{
  char cname[512];
  memset(p, 0, sizeof(*p));
  switch (source) {
  case SOURCE_LUA:
    return name_lua(m, lay, addr, number, p);
  case SOURCE_C:
    symbols_c_name(syms, addr, ffid, cname, sizeof(cname));
    if (cname[0] == '\0')
      snprintf(cname, sizeof(cname), "CFUNC %#llx", (unsigned long long)addr);
    p->func = intern_string(m, cname, strlen(cname));
    return p->func != UINT32_MAX;
  case SOURCE_TRACE:
    return name_trace(m, lay, g, number, p);
  default:
    p->func = intern_string(m, internal_names[number < 5 ? number : 0],
                            strlen(internal_names[number < 5 ? number : 0]));
    return p->func != UINT32_MAX;
  }
}

static size_t key_slot(const struct places *m, uintptr_t addr, uint64_t extra)
{
  return (size_t)symbols_mix64((uint64_t)addr * 0x9e3779b97f4a7c15ULL ^ extra) &
         m->key_mask;
}

/* Adds a key to the address cache (emptied past its bound). */
static void remember_key(struct places *m, size_t i, uintptr_t addr,
                         uint64_t extra, uint32_t id)
{
  if (2 * (m->key_used + 1) > m->key_mask + 1) {
    size_t size = 2 * (m->key_mask + 1);
    struct place_key *keys =
        size <= 4 * (size_t)PLACES_MAX ? calloc(size, sizeof(*keys)) : NULL;
    if (keys == NULL) {
      memset(m->keys, 0, (m->key_mask + 1) * sizeof(*m->keys));
    } else {
      free(m->keys);
      m->keys = keys;
      m->key_mask = size - 1;
    }
    m->key_used = 0;
    i = key_slot(m, addr, extra);
    while (m->keys[i].id1 != 0)
      i = (i + 1) & m->key_mask;
  }
  m->keys[i].addr = addr;
  m->keys[i].extra = extra;
  m->keys[i].id1 = id + 1;
  m->key_used++;
}

/* The place of a location given by its source, address and number (line,
** trace number or internal kind). */
static uint32_t place_at(struct places *m, struct symbols *syms,
                         const struct vm_layout *lay, uintptr_t g,
                         uint8_t source, uintptr_t addr, uint32_t number,
                         uint8_t ffid)
{
  uint64_t extra = (uint64_t)source << 56 | (uint64_t)ffid << 40 | number;
  size_t i;
  struct place p;
  uint32_t id;
  if (m->generation != syms->generation) {
    memset(m->keys, 0, (m->key_mask + 1) * sizeof(*m->keys));
    m->key_used = 0;
    m->last.id1 = 0;
    m->generation = syms->generation;
  }
  if (m->last.id1 != 0 && m->last.addr == addr && m->last.extra == extra)
    return m->last.id1 - 1;
  i = key_slot(m, addr, extra);
  for (; m->keys[i].id1 != 0; i = (i + 1) & m->key_mask)
    if (m->keys[i].addr == addr && m->keys[i].extra == extra) {
      m->last = m->keys[i];
      return m->keys[i].id1 - 1;
    }
  if (!name_place(m, syms, lay, g, source, addr, number, ffid, &p) ||
      (id = intern_place(m, &p)) == UINT32_MAX)
    return spill_place(m);
  remember_key(m, i, addr, extra, id);
  return id;
}

uint32_t places_of(struct places *m, struct symbols *syms,
                   const struct vm_layout *lay, uintptr_t g,
                   const struct vm_site *site, uint8_t kind)
{
  switch (site->source) {
  case SOURCE_LUA:
    return place_at(m, syms, lay, g, SOURCE_LUA, site->addr, site->line, 0);
  case SOURCE_C:
    return place_at(m, syms, lay, g, SOURCE_C, site->addr, 0, site->ffid);
  case SOURCE_TRACE:
    /* A trace number is reused once its trace is gone. */
    return place_at(m, syms, lay, g, SOURCE_TRACE,
                    lay->trace_ok ? vm_trace_object(lay, 0, g, site->traceno)
                                  : 0,
                    site->traceno, 0);
  default:
    return place_at(m, syms, lay, g, SOURCE_INTERNAL, 0, kind, 0);
  }
}

void places_define_stack(struct places *m, struct symbols *syms,
                         const struct vm_layout *lay, uint32_t id,
                         const struct vm_raw_frame *f, int n)
{
  int i;
  if (id >= PLACES_MAX_STACKS ||
      m->frames_len + (size_t)n > PLACES_MAX_FRAMES) {
    m->overflow = 1;
    return;
  }
  if (id >= m->stacks_cap) {
    uint32_t cap = m->stacks_cap ? m->stacks_cap : 1024;
    struct model_stack *st;
    while (cap <= id)
      cap *= 2;
    if ((st = realloc(m->stacks, cap * sizeof(*st))) == NULL) {
      m->failed = ENOMEM;
      return;
    }
    memset(st + m->stacks_cap, 0, (cap - m->stacks_cap) * sizeof(*st));
    m->stacks = st;
    m->stacks_cap = cap;
  }
  if (m->frames_len + (size_t)n > m->frames_cap) {
    size_t cap = m->frames_cap ? m->frames_cap : 4096;
    uint32_t *frames;
    while (cap < m->frames_len + (size_t)n)
      cap *= 2;
    if ((frames = realloc(m->frames, cap * sizeof(*frames))) == NULL) {
      m->failed = ENOMEM;
      return;
    }
    m->frames = frames;
    m->frames_cap = cap;
  }
  for (i = 0; i < n; i++)
    m->frames[m->frames_len + (size_t)i] =
        f[i].ffid == FFID_LUA
            ? place_at(m, syms, lay, 0, SOURCE_LUA, f[i].obj, (uint32_t)f[i].pc,
                       0)
            : place_at(m, syms, lay, 0, SOURCE_C, f[i].obj, 0, f[i].ffid);
  m->stacks[id].start = (uint32_t)m->frames_len;
  m->stacks[id].count = (uint32_t)n;
  m->frames_len += (size_t)n;
}
