/*
** The allocator hook and event encoding.
**
** Rule zero of the hook: capture everything before calling the real
** allocator (a stack reallocation moves the frames being read), never call
** lua_*, never raise, never allocate through the Lua allocator, and return
** exactly what the real allocator returned.
*/
#define _GNU_SOURCE
#include "profiler.h"

#include <string.h>
#include <time.h>

#include "stream_format.h"
#include "vm_candidates.h"
#include "vm_inspect.h"

volatile unsigned profiler_fork_generation;

static void halt(struct profiler *p, int err)
{
  if (p->error == 0)
    p->error = err;
  p->state = PROFILER_HALTED;
}

/* The location's address (a prototype or C function) repeats from event
** to event; its encoding is kept for the next event from the same place
** (profiler.last_location). */
static inline __attribute__((always_inline)) uint8_t *
put_location_addr(struct location_cache *lc, uint8_t *p, uintptr_t addr)
{
  if (!ULEB128_WORDS || addr < 0x80 || addr >= (1ULL << 56))
    return uleb128_put(p, addr);
  if (addr != lc->addr) {
    lc->word = uleb128_word(addr, &lc->len);
    lc->addr = addr;
  }
  memcpy(p, &lc->word, 8);
  return p + lc->len;
}

/* Encodes one allocation event: header, location, then the old block
** (realloc, free) and the new block (alloc, realloc). */
static inline __attribute__((always_inline)) void
encode_event(struct writer *w, struct location_cache *lc,
             const struct vm_site *site, uint32_t stack, uintptr_t ptr,
             size_t osize, uintptr_t nptr, size_t nsize)
{
  uint8_t kind, *p;
  if (nsize == 0)
    kind = EVENT_FREE;
  else if (ptr == 0)
    kind = EVENT_ALLOC;
  else
    kind = EVENT_REALLOC;
  if (!writer_reserve(w, 1 + 6 * ULEB128_MAX))
    return;
  p = w->pos;
  *p++ = (uint8_t)(kind | site->source | (stack ? EVENT_HAS_STACK : 0));
  if (site->source == SOURCE_LUA) {
    p = put_location_addr(lc, p, site->addr);
    p = uleb128_put(p, site->line);
  } else if (site->source == SOURCE_C) {
    p = put_location_addr(lc, p, site->addr);
  } else if (site->source == SOURCE_TRACE) {
    p = uleb128_put(p, site->traceno);
  }
  if (stack)
    p = uleb128_put(p, stack);
  if (kind != EVENT_ALLOC) {
    p = uleb128_put(p, ptr);
    p = uleb128_put(p, osize);
  }
  if (kind != EVENT_FREE) {
    p = uleb128_put(p, nptr);
    p = uleb128_put(p, nsize);
  }
  w->pos = p;
}

/* Monotonic nanoseconds. */
static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Events between two readings of the clock. */
#define CLOCK_EVERY 1024
/* A time mark is written when at least this much has passed. */
#define MARK_EVERY_NS 1000000u

/* Writes a time mark if a millisecond has passed (or if forced). */
static void mark_time(struct profiler *p, int force)
{
  uint64_t t = now_ns() - p->clock_start;
  p->clock_countdown = CLOCK_EVERY;
  if ((force || t - p->last_mark >= MARK_EVERY_NS) &&
      writer_reserve(&p->out, 1 + ULEB128_MAX)) {
    writer_put_byte(&p->out, RECORD_TIME);
    writer_put_uleb128(&p->out, t);
    p->last_mark = t;
  }
}

/* The extended part of an event: the time mark it may need and the id of
** its call stack (0: none). Runs before the real allocator, like everything
** that reads the VM; inlined so the walk gets the family's constant
** offsets too. */
static inline __attribute__((always_inline)) uint32_t
record_extended(struct profiler *p, const struct vm_layout *lay,
                const struct vm_site *site, void *ptr, int *err)
{
  struct vm_raw_frame frames[MAX_STACK_DEPTH];
  int n, same;
  /* The writer thread ticks every millisecond; without it, events are
  ** counted between two readings of the clock. */
  if (p->timestamps && (writer_ticked(&p->out) || --p->clock_countdown == 0))
    mark_time(p, 0);
  if (p->stack_depth == 0 ||
      (site->source != SOURCE_LUA && site->source != SOURCE_C))
    return 0;
  n = vm_walk_stack(lay, 0, p->g, (uintptr_t)ptr, frames, p->stack_depth,
                    &p->stacks.walk, &same);
  if (n == 0)
    return 0;
  if (same && stacks_unchanged(&p->stacks, &p->syms))
    return p->stacks.last_id;
  return stacks_id(&p->stacks, &p->syms, &p->out, &p->layout, frames, n, err);
}

/*
** Records one allocator call. `lay` gives the offsets: the profiler's own
** verified layout (generic hook) or a family's constant table, in which
** case the compiler folds every offset and mode test into the code.
*/
/* The extended part, out of line so that the default path stays small;
** one per family, so the stack walk also gets constant offsets. */
typedef uint32_t (*extended_fn)(struct profiler *p, const struct vm_site *site,
                                void *ptr, int *err);

static __attribute__((noinline)) uint32_t
extended_generic(struct profiler *p, const struct vm_site *site, void *ptr,
                 int *err)
{
  return record_extended(p, &p->layout, site, ptr, err);
}

#define FAMILY_EXTENDED(name, index)                                           \
  static __attribute__((noinline)) uint32_t name(                              \
      struct profiler *p, const struct vm_site *site, void *ptr, int *err)     \
  {                                                                            \
    return record_extended(p, &vm_candidates[index].layout, site, ptr, err);   \
  }
FAMILY_EXTENDED(extended_gc64, VM_CANDIDATE_GC64)
FAMILY_EXTENDED(extended_nongc64, VM_CANDIDATE_NONGC64)
#undef FAMILY_EXTENDED

static inline __attribute__((always_inline)) void *
record(struct profiler *p, const struct vm_layout *lay, extended_fn extended,
       void *ptr, size_t osize, size_t nsize)
{
  struct vm_site site;
  uint32_t stack = 0;
  void *nptr;
  int err = 0;

  /* Before the real allocator: where the VM is, and the symbols it needs. */
  vm_locate(lay, &p->layout, 0, p->g, (uintptr_t)ptr, &site);
  if (!(site.source == SOURCE_INTERNAL ||
        (site.source == SOURCE_LUA && site.addr == p->syms.last_proto) ||
        (site.source == SOURCE_TRACE && site.traceno < p->syms.trace_cap &&
         p->syms.trace_obj[site.traceno] != 0 &&
         p->syms.trace_obj[site.traceno] ==
             vm_trace_object(&p->layout, 0, p->g, site.traceno))))
    err = symbols_describe(&p->syms, &p->out, &p->layout, p->g, &site);
  if (p->extended && err == 0)
    stack = extended(p, &site, ptr, &err);
  /* Only prototypes and traces are cached, and no block smaller than a
  ** GCproto can be one of them. */
  if (ptr != NULL && osize >= lay->pt_size)
    symbols_forget(&p->syms, (uintptr_t)ptr);

  nptr = p->orig_alloc(p->orig_ud, ptr, osize, nsize);

  /* A failed allocation changes nothing (LuaJIT raises the error itself);
  ** neither does freeing NULL. */
  if ((nptr != NULL || nsize == 0) && (ptr != NULL || nsize != 0))
    encode_event(&p->out, &p->last_location, &site, stack, (uintptr_t)ptr,
                 osize, (uintptr_t)nptr, nsize);
  if (err != 0)
    halt(p, err);
  else if (writer_failed(&p->out) != 0)
    halt(p, writer_failed(&p->out));
  return nptr;
}

/* Recording is off (halted, or this is a forked child): only forward. */
static inline int forward_only(const struct profiler *p)
{
  return p->state != PROFILER_RECORDING ||
         p->fork_generation != profiler_fork_generation;
}

static void *hook_generic(void *ud, void *ptr, size_t osize, size_t nsize)
{
  struct profiler *p = ud;
  if (forward_only(p))
    return p->orig_alloc(p->orig_ud, ptr, osize, nsize);
  return record(p, &p->layout, extended_generic, ptr, osize, nsize);
}

#define FAMILY_HOOK(name, index, extended)                                     \
  static void *name(void *ud, void *ptr, size_t osize, size_t nsize)           \
  {                                                                            \
    struct profiler *p = ud;                                                   \
    if (forward_only(p))                                                       \
      return p->orig_alloc(p->orig_ud, ptr, osize, nsize);                     \
    return record(p, &vm_candidates[index].layout, extended, ptr, osize,       \
                  nsize);                                                      \
  }
FAMILY_HOOK(hook_gc64, VM_CANDIDATE_GC64, extended_gc64)
FAMILY_HOOK(hook_nongc64, VM_CANDIDATE_NONGC64, extended_nongc64)
#undef FAMILY_HOOK

lua_Alloc profiler_hook_for(const struct vm_layout *lay)
{
  if (lay->exact && lay->candidate == VM_CANDIDATE_GC64)
    return hook_gc64;
  if (lay->exact && lay->candidate == VM_CANDIDATE_NONGC64)
    return hook_nongc64;
  return hook_generic;
}

int profiler_is_hook(lua_Alloc f)
{
  return f == hook_generic || f == hook_gc64 || f == hook_nongc64;
}

int profiler_write_prologue(struct profiler *p)
{
  static const uint8_t symtab[] = {'l', 'j', 's', SYMTAB_VERSION,
                                   0,   0,   0,   SYMTAB_FINAL};
  uint8_t events[] = {'l', 'j', 'm', EVENTS_VERSION, 0, 0, 0};
  if (p->extended)
    events[3] = EVENTS_VERSION_EXTENDED;
  writer_bytes(&p->out, symtab, sizeof(symtab));
  writer_bytes(&p->out, events, sizeof(events));
  if (p->timestamps) {
    p->clock_start = now_ns();
    mark_time(p, 1); /* Time 0. */
    writer_tick_every(&p->out, MARK_EVERY_NS);
  }
  return writer_failed(&p->out);
}

int profiler_finish(struct profiler *p)
{
  int err;
  if (p->state == PROFILER_RECORDING && p->timestamps)
    mark_time(p, 1);
  if (p->state == PROFILER_RECORDING && writer_reserve(&p->out, 1))
    writer_put_byte(&p->out, EVENTS_EPILOGUE);
  err = writer_close(&p->out);
  p->state = PROFILER_HALTED;
  if (p->error == 0)
    p->error = err;
  return p->error;
}
