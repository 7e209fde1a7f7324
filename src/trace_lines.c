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

struct tl_place *trace_lines_place(struct trace_lines *t,
                                   const struct vm_layout *lay, uintptr_t g,
                                   uint32_t traceno, int exitno, uintptr_t low,
                                   uintptr_t described, unsigned frees)
{
  uintptr_t T = vm_trace_object(lay, 0, g, traceno), key, snap = 0, ret = 0,
            mcode = 0;
  struct tl_cache_slot *s;
  uint16_t no, nsnap;
  int sn;
  if (!t->on || !vm_is_gc(lay, 0, T, GCT_TRACE) ||
      !vm_u16(0, T + lay->tr_traceno, &no) || no != traceno)
    return NULL;
  if (exitno < 0) {
    ret = tl_return_address(lay, 0, g, T, low, &mcode);
    if (ret == 0)
      return NULL;
    key = ret;
  } else {
    key = exit_key(T, exitno);
  }
  s = &t->slot[tl_slot_of(key)];
  if (described != T)
    s = &t->scratch; /* Not followed: resolved, not kept. */
  else if (s->key == key && s->T == T && s->frees == frees)
    return &s->place;
  if (exitno < 0) {
    sn = tl_snapshot_at(lay, 0, T, (uint32_t)(ret - 1 - mcode), &snap);
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
  if (exitno < 0)
    tl_store_after_return(lay, 0, tl_call_target(0, ret, mcode), &s->place);
  s->key = key;
  s->T = T;
  s->frees = frees;
  return &s->place;
}
