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
  if (t->slot == NULL) {
    t->on = 0;
    return ENOMEM;
  }
  return 0;
}

void trace_lines_free(struct trace_lines *t)
{
  free(t->slot);
  t->slot = NULL;
  t->on = 0;
}

/* An exit's key: its trace object and number; never a code address (those
** are even, this is odd). */
static uintptr_t exit_key(uintptr_t T, int exitno)
{
  return (T ^ ((uintptr_t)exitno << 20)) | 1;
}

#if defined(__aarch64__)
/* arm64: a cached place found by a saved return address on the stack
** (innermost first), of a trace still in the array and still followed. */
static struct tl_place *search_cached(struct trace_lines *t,
                                      const struct vm_layout *lay, uintptr_t g,
                                      uint32_t *traceno, uintptr_t low,
                                      const uintptr_t *described,
                                      uint32_t ndescribed, unsigned frees)
{
  uintptr_t L, cf, a, w, T;
  if (!vm_ref(lay, 0, g + lay->g_cur_L, &L) || L == 0 ||
      !vm_ptr(0, L + lay->L_cframe, &cf))
    return NULL;
  cf &= ~(uintptr_t)3;
  for (a = (low + 8) & ~(uintptr_t)7; a + 8 <= cf && a - low <= TL_STACK_SPAN;
       a += 8) {
    struct tl_cache_slot *s;
    memcpy(&w, (const void *)a, sizeof(w));
    s = &t->slot[tl_slot_of(w)];
    if (w == 0 || s->key != w || s->frees != frees ||
        s->traceno >= ndescribed || described[s->traceno] != s->T)
      continue;
    T = vm_trace_object(lay, 0, g, s->traceno);
    if (T != s->T)
      continue;
    *traceno = s->traceno;
    return &s->place;
  }
  return NULL;
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
    struct tl_place *pl =
        search_cached(t, lay, g, traceno, low, described, ndescribed, frees);
    if (pl != NULL)
      return pl;
#endif
    T = tl_locate(lay, 0, g, traceno, low, &ret, &mcode);
    if (T == 0)
      return NULL;
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
    if (!tl_after_return(lay, 0, T, snap, sn, &s->place))
      tl_store_after_return(lay, 0, target, &s->place);
    tl_builtin_frame(lay, 0, T, snap, sn, target, &s->place);
  }
  s->key = key;
  s->T = T;
  s->traceno = *traceno;
  s->frees = frees;
  return &s->place;
}
