/*
** Symbols: lazy description of prototypes, C functions and traces.
*/
#define _GNU_SOURCE
#include "symbols.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "stream_format.h"

#define INITIAL_SLOTS 1024

int symbols_init(struct symbols *s)
{
  memset(s, 0, sizeof(*s));
  s->slots = calloc(INITIAL_SLOTS, sizeof(*s->slots));
  if (s->slots == NULL)
    return ENOMEM;
  s->mask = INITIAL_SLOTS - 1;
  if (cnames_init(&s->cnames) != 0) {
    symbols_free(s);
    return ENOMEM;
  }
  return 0;
}

void symbols_free(struct symbols *s)
{
  unsigned i;
  for (i = 0; i < MAX_FFID; i++)
    free(s->builtin[i]);
  for (i = 0; i < s->libraries; i++)
    free(s->library[i].name);
  free(s->slots);
  free(s->trace_obj);
  cnames_free(&s->cnames);
  memset(s, 0, sizeof(*s));
}

int symbols_name_builtin(struct symbols *s, unsigned ffid, const char *name)
{
  if (ffid >= MAX_FFID || s->builtin[ffid] != NULL)
    return 0;
  s->builtin[ffid] = strdup(name);
  return s->builtin[ffid] ? 0 : ENOMEM;
}

/* ---- Address cache: open addressing, linear probing ------------------- */

/* The hook's line memos name prototype pt no more. */
static void forget_line_memos(struct symbols *s, uintptr_t pt)
{
  if (s->line_memo.top.pt == pt)
    s->line_memo.top.pt = 0;
  if (s->line_memo.caller.pt == pt)
    s->line_memo.caller.pt = 0;
}

static size_t slot_of(const struct symbols *s, uintptr_t addr)
{
  uint64_t h = (uint64_t)(addr >> 3) * 0x9e3779b97f4a7c15ULL;
  return (size_t)(h >> 32) & s->mask;
}

static struct symbol_slot *lookup(const struct symbols *s, uintptr_t addr)
{
  size_t i = slot_of(s, addr);
  while (s->slots[i].addr != 0) {
    if (s->slots[i].addr == addr)
      return &s->slots[i];
    i = (i + 1) & s->mask;
  }
  return NULL;
}

static struct symbol_slot *place(struct symbols *s, uintptr_t addr,
                                 uint32_t traceno)
{
  size_t i = slot_of(s, addr), bit = symbols_filter_bit(addr);
  /* Bits are never cleared: a stale bit only costs a lookup. */
  s->filter[bit / 64] |= 1ULL << (bit % 64);
  while (s->slots[i].addr != 0 && s->slots[i].addr != addr)
    i = (i + 1) & s->mask;
  if (s->slots[i].addr == 0)
    s->count++;
  s->slots[i].addr = addr;
  s->slots[i].traceno = traceno;
  s->slots[i].has_ident = 0;
  return &s->slots[i];
}

static int grow(struct symbols *s)
{
  struct symbol_slot *old = s->slots;
  size_t n = s->mask + 1, i;
  struct symbol_slot *slots = calloc(2 * n, sizeof(*slots));
  if (slots == NULL)
    return ENOMEM;
  s->slots = slots;
  s->mask = 2 * n - 1;
  s->count = 0;
  for (i = 0; i < n; i++)
    if (old[i].addr != 0)
      *place(s, old[i].addr, old[i].traceno) = old[i];
  free(old);
  return 0;
}

static int remember(struct symbols *s, uintptr_t addr, uint32_t traceno)
{
  if (2 * (s->count + 1) > s->mask + 1 && grow(s) != 0)
    return ENOMEM;
  place(s, addr, traceno);
  return 0;
}

void symbols_forget_slow(struct symbols *s, uintptr_t addr)
{
  struct symbol_slot *hit = lookup(s, addr);
  size_t i, j;
  if (hit == NULL)
    return;
  if (hit->traceno != 0 && hit->traceno < s->trace_cap &&
      s->trace_obj[hit->traceno] == addr)
    s->trace_obj[hit->traceno] = 0;
  if (s->last_proto == addr)
    s->last_proto = 0;
  if (s->proto_memo[symbols_proto_slot(addr)] == addr)
    s->proto_memo[symbols_proto_slot(addr)] = 0;
  forget_line_memos(s, addr);
  if (s->last_c == addr)
    s->last_c = 0;
  s->generation++;
  /* Backward-shift deletion keeps every probe chain unbroken. */
  i = (size_t)(hit - s->slots);
  s->slots[i].addr = 0;
  s->count--;
  for (j = (i + 1) & s->mask; s->slots[j].addr != 0; j = (j + 1) & s->mask) {
    size_t home = slot_of(s, s->slots[j].addr);
    /* Move j back to the hole unless its home lies cyclically in (i, j]. */
    if ((j > i && (home <= i || home > j)) ||
        (j < i && (home <= i && home > j))) {
      s->slots[i] = s->slots[j];
      s->slots[j].addr = 0;
      i = j;
    }
  }
}

/* ---- Symbol events ---------------------------------------------------- */

/* pt, described (and cached, so that its free reaches
** symbols_forget_slow), is the last prototype described. */
static void note_proto(struct symbols *s, uintptr_t pt)
{
  s->last_proto = pt;
  s->proto_memo[symbols_proto_slot(pt)] = pt;
}

int symbols_describe_proto(struct symbols *s, struct writer *w,
                           const struct vm_layout *lay, uintptr_t pt)
{
  const char *name;
  uint32_t len;
  int32_t firstline;
  if (pt == s->last_proto || lookup(s, pt) != NULL) {
    note_proto(s, pt);
    return 0;
  }
  if (!vm_proto_source(lay, 0, pt, &name, &len, &firstline) ||
      !writer_reserve(w, 1 + 2 * ULEB128_MAX)) {
    /* Not cached, so its free would not reach the hook's line memo. */
    forget_line_memos(s, pt);
    return 0;
  }
  writer_put_byte(w, EVENT_SYMBOL | SOURCE_LUA);
  writer_put_uleb128(w, pt);
  writer_string(w, name, len);
  if (!writer_reserve(w, ULEB128_MAX))
    return 0;
  writer_put_uleb128(w, (uint64_t)(uint32_t)firstline);
  note_proto(s, pt);
  if (fault_in_source(name, len))
    return ENOMEM;
  return remember(s, pt, 0);
}

int symbols_name_library_cfunc(struct symbols *s, uintptr_t addr,
                               const char *name)
{
  char *copy;
  if (s->libraries == MAX_LIBRARY_CFUNCS)
    return 0;
  if ((copy = strdup(name)) == NULL)
    return ENOMEM;
  s->library[s->libraries].addr = addr;
  s->library[s->libraries++].name = copy;
  return 0;
}

/* The library field that holds the C function at addr, or NULL. */
static const char *library_cfunc(const struct symbols *s, uintptr_t addr)
{
  unsigned i;
  for (i = 0; i < s->libraries; i++)
    if (s->library[i].addr == addr)
      return s->library[i].name;
  return NULL;
}

void symbols_c_name(struct symbols *s, uintptr_t addr, uint8_t ffid, char *name,
                    size_t len)
{
  const char *field;
  if (ffid > FFID_C && s->builtin[ffid] != NULL)
    snprintf(name, len, "%s", s->builtin[ffid]);
  else if (ffid > FFID_C)
    snprintf(name, len, "builtin#%u", (unsigned)ffid);
  else if (!cnames_name(&s->cnames, addr, name, len) &&
           (field = library_cfunc(s, addr)) != NULL)
    snprintf(name, len, "%s", field);
}

int symbols_describe_c(struct symbols *s, struct writer *w, uintptr_t addr,
                       uint8_t ffid)
{
  char name[512];
  if (addr == s->last_c || lookup(s, addr) != NULL) {
    s->last_c = addr;
    return 0;
  }
  symbols_c_name(s, addr, ffid, name, sizeof(name));
  if (!writer_reserve(w, 1 + ULEB128_MAX))
    return 0;
  writer_put_byte(w, EVENT_SYMBOL | SOURCE_C);
  writer_put_uleb128(w, addr);
  writer_string(w, name, strlen(name));
  s->last_c = addr;
  return remember(s, addr, 0);
}

/* A digest of the bytes of a name, from a seed. */
static uint64_t hash_bytes(const char *p, uint32_t len, uint64_t seed)
{
  uint64_t h = symbols_mix64(seed ^ len);
  uint32_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t word;
    memcpy(&word, p + i, 8);
    h = symbols_mix64(h ^ word) + 0x9e3779b97f4a7c15ULL;
  }
  if (i < len) {
    uint64_t word = 0;
    memcpy(&word, p + i, len - i);
    h = symbols_mix64(h ^ word ^ ((uint64_t)(len - i) << 56));
  }
  return h;
}

int symbols_proto_ident(struct symbols *s, struct writer *w,
                        const struct vm_layout *lay, uintptr_t pt,
                        uint64_t ident[2])
{
  struct symbol_slot *slot;
  const char *name;
  uint32_t len;
  int32_t firstline;
  int err = symbols_describe_proto(s, w, lay, pt);
  if (err != 0)
    return err;
  slot = lookup(s, pt);
  if (slot != NULL && slot->has_ident) {
    ident[0] = slot->ident[0];
    ident[1] = slot->ident[1];
    return 0;
  }
  if (slot == NULL || !vm_proto_source(lay, 0, pt, &name, &len, &firstline)) {
    /* Not described: the reader knows it by its address only. */
    ident[0] = pt;
    ident[1] = 0;
    return 0;
  }
  ident[0] = hash_bytes(name, len, 0x243f6a8885a308d3ULL) ^
             symbols_mix64((uint64_t)(uint32_t)firstline);
  ident[1] = hash_bytes(name, len, 0x13198a2e03707344ULL) +
             (uint64_t)(uint32_t)firstline;
  /* Never the form of an undescribed prototype. */
  ident[1] |= ident[1] == 0;
  slot->ident[0] = ident[0];
  slot->ident[1] = ident[1];
  slot->has_ident = 1;
  return 0;
}

static int grow_traces(struct symbols *s, uint32_t traceno)
{
  uint32_t cap = s->trace_cap ? s->trace_cap : 64;
  uintptr_t *arr;
  while (cap <= traceno)
    cap *= 2;
  arr = realloc(s->trace_obj, cap * sizeof(*arr));
  if (arr == NULL)
    return ENOMEM;
  memset(arr + s->trace_cap, 0, (cap - s->trace_cap) * sizeof(*arr));
  s->trace_obj = arr;
  s->trace_cap = cap;
  return 0;
}

static int describe_trace(struct symbols *s, struct writer *w,
                          const struct vm_layout *lay, uintptr_t g,
                          uint32_t traceno)
{
  uintptr_t pt = 0, T;
  uint32_t line = 0;
  int err;
  /* jit.flush() empties the trace array at once but leaves the objects to
  ** the collector, so a number can be reused while the old trace lives:
  ** the description holds while the array still has the same object. */
  if (traceno < s->trace_cap && s->trace_obj[traceno] != 0 &&
      s->trace_obj[traceno] == vm_trace_object(lay, 0, g, traceno))
    return 0;
  T = vm_trace_start(lay, 0, g, traceno, &pt, &line);
  if (T == 0)
    return 0;
  if ((err = symbols_describe_proto(s, w, lay, pt)) != 0)
    return err;
  if (traceno >= s->trace_cap && (err = grow_traces(s, traceno)) != 0)
    return err;
  if (!writer_reserve(w, 1 + 3 * ULEB128_MAX))
    return 0;
  writer_put_byte(w, EVENT_SYMBOL | SOURCE_TRACE);
  writer_put_uleb128(w, traceno);
  writer_put_uleb128(w, pt);
  writer_put_uleb128(w, line);
  s->trace_obj[traceno] = T;
  return remember(s, T, traceno);
}

int symbols_describe(struct symbols *s, struct writer *w,
                     const struct vm_layout *lay, uintptr_t g,
                     const struct vm_site *site)
{
  switch (site->source) {
  case SOURCE_LUA: {
    int err = symbols_describe_proto(s, w, lay, site->addr);
    /* An event of compiled code names its trace too (and a described
    ** trace is followed until it is freed). */
    if (err == 0 && site->compiled && lay->trace_ok)
      err = describe_trace(s, w, lay, g, site->traceno);
    return err;
  }
  case SOURCE_C:
    return symbols_describe_c(s, w, site->addr, site->ffid);
  case SOURCE_TRACE:
    return lay->trace_ok ? describe_trace(s, w, lay, g, site->traceno) : 0;
  default:
    return 0;
  }
}
