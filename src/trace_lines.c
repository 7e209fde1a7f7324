/*
** Compiled-code attribution in the hook: a cache of the places of
** (trace, return address) and of (trace, exit), filled by the reads of
** trace_lines.h. See trace_lines.h.
*/
#include "trace_lines.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int trace_lines_init(struct trace_lines *t, int on)
{
  memset(t, 0, sizeof(*t));
  t->on = on;
  if (!on)
    return 0;
  t->slot = calloc(TL_CACHE_SLOTS, sizeof(*t->slot));
#if defined(__aarch64__)
  t->steps = calloc(1, sizeof(*t->steps));
  if (t->steps == NULL) {
    free(t->slot);
    t->slot = NULL;
  }
#endif
  if (t->slot == NULL) {
    t->on = 0;
    return ENOMEM;
  }
  return 0;
}

void trace_lines_free(struct trace_lines *t)
{
  free(t->slot);
  free(t->steps);
  t->slot = NULL;
  t->steps = NULL;
  t->on = 0;
}

/* An exit's key: its trace object and number; never a code address (those
** are even, this is odd). */
static uintptr_t exit_key(uintptr_t T, int exitno)
{
  return (T ^ ((uintptr_t)exitno << 20)) | 1;
}

#if defined(__aarch64__)
/* The traces' machine code, for the unwinder: which trace a return
** address is in (after a call). */
struct tl_code {
  const struct vm_layout *lay;
  int safe;
  uintptr_t arr, lo, hi; /* The trace array, the span of all machine code. */
  uint32_t size;
  uintptr_t T, mcode; /* Of the trace found. */
  uint32_t traceno;
};

/* A return address into a trace after a call (1), or elsewhere in the
** machine code's span (-1: its frames are not C frames; the unwind stops
** there), or outside it (0). */
static int in_trace(void *ud, uintptr_t ip)
{
  struct tl_code *c = ud;
  const struct vm_layout *lay = c->lay;
  uintptr_t T, mcode;
  uint32_t n, sz;
  uint16_t no;
  if (ip < c->lo || ip >= c->hi)
    return 0;
  if ((ip & 3) != 0)
    return -1;
  for (n = 1; n < c->size; n++) {
    if (!vm_ref(lay, c->safe, c->arr + (uintptr_t)n * lay->ref_size, &T) ||
        T == 0 || !vm_ptr(c->safe, T + lay->tl.tr_mcode, &mcode) ||
        !vm_u32(c->safe, T + lay->tl.tr_szmcode, &sz) || ip <= mcode ||
        ip >= mcode + sz)
      continue;
    if (!tl_called_before(c->safe, ip, mcode) ||
        !vm_is_gc(lay, c->safe, T, GCT_TRACE) ||
        !vm_u16(c->safe, T + lay->tr_traceno, &no) || no != n)
      return -1;
    c->T = T;
    c->mcode = mcode;
    c->traceno = n;
    return 1;
  }
  return -1;
}

uintptr_t tl_unwind_trace(const struct vm_layout *lay, int safe, uintptr_t g,
                          struct unwind_steps *steps, uintptr_t ip0,
                          uintptr_t cfa0, uint32_t *traceno, uintptr_t *ret,
                          uintptr_t *mcode, uintptr_t *cfa, uintptr_t *cf)
{
  struct tl_code c;
  uintptr_t T, mc;
  uint32_t n, sz;
  memset(&c, 0, sizeof(c));
  c.lay = lay;
  c.safe = safe;
  c.lo = ~(uintptr_t)0;
  if (!tl_cframe(lay, safe, g, cf) || !vm_ptr(safe, g + lay->g_trace, &c.arr) ||
      c.arr == 0 || !vm_u32(safe, g + lay->g_sizetrace, &c.size) ||
      c.size > 65536)
    return 0;
  for (n = 1; n < c.size; n++) { /* The span of all machine code. */
    if (!vm_ref(lay, safe, c.arr + (uintptr_t)n * lay->ref_size, &T))
      return 0;
    if (T == 0)
      continue;
    if (!vm_ptr(safe, T + lay->tl.tr_mcode, &mc) ||
        !vm_u32(safe, T + lay->tl.tr_szmcode, &sz))
      return 0;
    c.lo = mc < c.lo ? mc : c.lo;
    c.hi = mc + sz > c.hi ? mc + sz : c.hi;
  }
  if (!unwind_find(in_trace, &c, *cf, steps, ip0, cfa0, ret, cfa))
    return 0;
  *traceno = c.traceno;
  *mcode = c.mcode;
  return c.T;
}

/* arm64: the cached place of the helper call now running, found by
** replaying the C frames learned from (ip0, cfa0) to the return address
** into the trace, of a trace still in the array and still followed, whose
** stack pointer the replay reached. */
static struct tl_place *
replay_cached(struct trace_lines *t, const struct vm_layout *lay, uintptr_t g,
              uint32_t *traceno, uintptr_t ip0, uintptr_t cfa0,
              const uintptr_t *described, uint32_t ndescribed, unsigned frees)
{
  uintptr_t cf, ret, cfa;
  struct tl_cache_slot *s;
  if (!tl_cframe(lay, 0, g, &cf) || cf <= cfa0 || cf - cfa0 > TL_STACK_SPAN ||
      !unwind_replay(t->steps, ip0, cfa0, cf, &ret, &cfa))
    return NULL;
  s = &t->slot[tl_slot_of(ret)];
  if (ret == 0 || s->key != ret || s->frees != frees ||
      s->traceno >= ndescribed || described[s->traceno] != s->T ||
      vm_trace_object(lay, 0, g, s->traceno) != s->T ||
      cfa != tl_trace_sp(lay, 0, cf, s->T))
    return NULL;
  *traceno = s->traceno;
  return &s->place;
}
#endif

struct tl_place *trace_lines_place(struct trace_lines *t,
                                   const struct vm_layout *lay, uintptr_t g,
                                   uint32_t *traceno, int exitno, uintptr_t low,
                                   const uintptr_t *described,
                                   uint32_t ndescribed, unsigned frees)
{
  uintptr_t T, key, snap = 0, ret = 0, mcode = 0, desc;
  struct tl_cache_slot *s;
  uint16_t no, nsnap;
  int sn;
  if (!t->on)
    return NULL;
  if (exitno < 0) {
#if defined(__aarch64__)
    /* This function's return address and CFA start the C frames between
    ** it and the trace (it is never inlined: its callers are elsewhere). */
    uintptr_t ip0 = (uintptr_t)__builtin_return_address(0),
              cfa0 = (uintptr_t)__builtin_dwarf_cfa(), cfa, cf;
    struct tl_place *pl = replay_cached(t, lay, g, traceno, ip0, cfa0,
                                        described, ndescribed, frees);
    (void)low;
    if (pl != NULL)
      return pl;
    t->unwinds++;
    T = tl_unwind_trace(lay, 0, g, t->steps, ip0, cfa0, traceno, &ret, &mcode,
                        &cfa, &cf);
    if (T == 0 || cfa != tl_trace_sp(lay, 0, cf, T))
      return NULL;
#else
    T = tl_locate(lay, 0, g, traceno, low, &ret, &mcode);
    if (T == 0)
      return NULL;
#endif
    key = ret;
  } else {
    T = vm_trace_object(lay, 0, g, *traceno);
    if (!vm_is_gc(lay, 0, T, GCT_TRACE) ||
        !vm_u16(0, T + lay->tr_traceno, &no) || no != *traceno)
      return NULL;
    key = exit_key(T, exitno);
  }
  desc = *traceno < ndescribed ? described[*traceno] : 0;
  s = &t->slot[tl_slot_of(key)];
  if (desc != T)
    s = &t->scratch; /* Not followed: resolved, not kept. */
  else if (s->key == key && s->T == T && s->frees == frees)
    return &s->place;
  if (exitno < 0) {
    sn = tl_snapshot_at(lay, 0, T, tl_mcode_ofs(ret, mcode), &snap);
    if (sn < 0)
      return NULL;
  } else {
    /* An exit restores the state of its snapshot: the exit's number. */
    if (!vm_u16(0, T + lay->tl.tr_nsnap, &nsnap) || exitno >= nsnap ||
        !vm_ptr(0, T + lay->tl.tr_snap, &snap) || snap == 0)
      return NULL;
    sn = exitno;
  }
  s->key = 0;
  s->place.stack_id = 0;
  if (!tl_snapshot_place(lay, 0, T, snap, sn, &s->place))
    return NULL;
  if (exitno < 0) {
    uintptr_t target = tl_call_target(0, ret, mcode);
    if (!tl_loop_newkey(lay, 0, T, snap, sn, target, &s->place) &&
        !tl_after_return(lay, 0, T, snap, sn, &s->place))
      tl_store_after_return(lay, 0, target, &s->place);
    tl_builtin_frame(lay, 0, T, snap, sn, target, &s->place);
  }
  s->place.loc_len = 0; /* (Its pt and line are final here.) */
  s->key = key;
  s->T = T;
  s->traceno = *traceno;
  s->frees = frees;
  return &s->place;
}
