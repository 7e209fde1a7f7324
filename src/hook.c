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
#include "vm_inspect.h"

volatile unsigned profiler_fork_generation;

static void halt(struct profiler *p, int err)
{
  if (p->error == 0)
    p->error = err;
  p->state = PROFILER_HALTED;
}

static void put_location(struct writer *w, const struct vm_site *site)
{
  switch (site->source) {
  case SOURCE_LUA:
    writer_put_uleb128(w, site->addr);
    writer_put_uleb128(w, site->line);
    break;
  case SOURCE_C:
    writer_put_uleb128(w, site->addr);
    break;
  case SOURCE_TRACE:
    writer_put_uleb128(w, site->traceno);
    break;
  default:
    break;
  }
}

static void encode_event(struct writer *w, const struct vm_site *site,
                         uintptr_t ptr, size_t osize, uintptr_t nptr,
                         size_t nsize)
{
  uint8_t kind;
  if (nsize == 0)
    kind = EVENT_FREE;
  else if (ptr == 0)
    kind = EVENT_ALLOC;
  else
    kind = EVENT_REALLOC;
  if (!writer_reserve(w, 1 + 6 * ULEB128_MAX))
    return;
  writer_put_byte(w, (uint8_t)(kind | site->source));
  put_location(w, site);
  if (kind != EVENT_ALLOC) {
    writer_put_uleb128(w, ptr);
    writer_put_uleb128(w, osize);
  }
  if (kind != EVENT_FREE) {
    writer_put_uleb128(w, nptr);
    writer_put_uleb128(w, nsize);
  }
}

void *profiler_hook(void *ud, void *ptr, size_t osize, size_t nsize)
{
  struct profiler *p = ud;
  struct vm_site site;
  void *nptr;
  int err;

  if (p->state != PROFILER_RECORDING ||
      p->fork_generation != profiler_fork_generation)
    return p->orig_alloc(p->orig_ud, ptr, osize, nsize);

  /* Before the real allocator: where the VM is, and the symbols it needs. */
  vm_locate(&p->layout, 0, p->g, (uintptr_t)ptr, &site);
  err = symbols_describe(&p->syms, &p->out, &p->layout, p->g, &site);
  if (ptr != NULL)
    symbols_forget(&p->syms, (uintptr_t)ptr);

  nptr = p->orig_alloc(p->orig_ud, ptr, osize, nsize);

  /* A failed allocation changes nothing (LuaJIT raises the error itself);
  ** neither does freeing NULL. */
  if ((nptr != NULL || nsize == 0) && (ptr != NULL || nsize != 0))
    encode_event(&p->out, &site, (uintptr_t)ptr, osize, (uintptr_t)nptr, nsize);
  if (err != 0)
    halt(p, err);
  else if (p->out.failed_errno != 0)
    halt(p, p->out.failed_errno);
  return nptr;
}

int profiler_write_prologue(struct profiler *p)
{
  static const uint8_t symtab[] = {'l', 'j', 's', SYMTAB_VERSION,
                                   0,   0,   0,   SYMTAB_FINAL};
  static const uint8_t events[] = {'l', 'j', 'm', EVENTS_VERSION, 0, 0, 0};
  writer_bytes(&p->out, symtab, sizeof(symtab));
  writer_bytes(&p->out, events, sizeof(events));
  return p->out.failed_errno;
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
