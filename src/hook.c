/*
** The allocator hook and event encoding.
**
** Rule zero of the hook: capture everything before calling the real
** allocator (a stack reallocation moves the frames being read), never call
** lua_*, never raise, never allocate through the Lua allocator, and return
** exactly what the real allocator returned.
*/
#include "profiler.h"

#include <string.h>

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
             const struct vm_site *site, uintptr_t ptr, size_t osize,
             uintptr_t nptr, size_t nsize)
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
  *p++ = (uint8_t)(kind | site->source);
  if (site->source == SOURCE_LUA) {
    p = put_location_addr(lc, p, site->addr);
    p = uleb128_put(p, site->line);
  } else if (site->source == SOURCE_C) {
    p = put_location_addr(lc, p, site->addr);
  } else if (site->source == SOURCE_TRACE) {
    p = uleb128_put(p, site->traceno);
  }
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

/*
** Records one allocator call. `lay` gives the offsets: the profiler's own
** verified layout (generic hook) or a family's constant table, in which
** case the compiler folds every offset and mode test into the code.
*/
static inline __attribute__((always_inline)) void *
record(struct profiler *p, const struct vm_layout *lay, void *ptr, size_t osize,
       size_t nsize)
{
  struct vm_site site;
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
  /* Only prototypes and traces are cached, and no block smaller than a
  ** GCproto can be one of them. */
  if (ptr != NULL && osize >= lay->pt_size)
    symbols_forget(&p->syms, (uintptr_t)ptr);

  nptr = p->orig_alloc(p->orig_ud, ptr, osize, nsize);

  /* A failed allocation changes nothing (LuaJIT raises the error itself);
  ** neither does freeing NULL. */
  if ((nptr != NULL || nsize == 0) && (ptr != NULL || nsize != 0))
    encode_event(&p->out, &p->last_location, &site, (uintptr_t)ptr, osize,
                 (uintptr_t)nptr, nsize);
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
  return record(p, &p->layout, ptr, osize, nsize);
}

#define FAMILY_HOOK(name, index)                                               \
  static void *name(void *ud, void *ptr, size_t osize, size_t nsize)           \
  {                                                                            \
    struct profiler *p = ud;                                                   \
    if (forward_only(p))                                                       \
      return p->orig_alloc(p->orig_ud, ptr, osize, nsize);                     \
    return record(p, &vm_candidates[index].layout, ptr, osize, nsize);         \
  }
FAMILY_HOOK(hook_gc64, VM_CANDIDATE_GC64)
FAMILY_HOOK(hook_nongc64, VM_CANDIDATE_NONGC64)
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
  static const uint8_t events[] = {'l', 'j', 'm', EVENTS_VERSION, 0, 0, 0};
  writer_bytes(&p->out, symtab, sizeof(symtab));
  writer_bytes(&p->out, events, sizeof(events));
  return writer_failed(&p->out);
}

int profiler_finish(struct profiler *p)
{
  int err;
  if (p->state == PROFILER_RECORDING && writer_reserve(&p->out, 1))
    writer_put_byte(&p->out, EVENTS_EPILOGUE);
  err = writer_close(&p->out);
  p->state = PROFILER_HALTED;
  if (p->error == 0)
    p->error = err;
  return p->error;
}
