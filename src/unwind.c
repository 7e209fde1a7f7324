/*
** The C frames between the hook and the code that called into the VM:
** libgcc's unwinder, and the steps it teaches. See unwind.h.
*/
#include "unwind.h"

/* (Only arm64 needs it: x86-64 finds the return address at a fixed slot.) */
#if defined(__aarch64__)

#include <string.h>
#include <unwind.h>

struct unwind_run {
  unwind_stop_fn stop;
  void *ud;
  uintptr_t limit;
  int n, found;
  uintptr_t ip[UNWIND_FRAMES], cfa[UNWIND_FRAMES];
};

static _Unwind_Reason_Code unwind_frame(struct _Unwind_Context *ctx, void *arg)
{
  struct unwind_run *r = arg;
  uintptr_t ip = (uintptr_t)_Unwind_GetIP(ctx),
            cfa = (uintptr_t)_Unwind_GetCFA(ctx);
  int stop;
  if (ip == 0 || cfa >= r->limit || r->n >= UNWIND_FRAMES)
    return _URC_END_OF_STACK;
  r->ip[r->n] = ip;
  r->cfa[r->n] = cfa;
  r->n++;
  stop = r->stop(r->ud, ip);
  if (stop != 0) {
    r->found = stop > 0;
    return _URC_END_OF_STACK;
  }
  return _URC_NO_REASON;
}

/* A return address as a frame keeps it, without the pointer authentication
** code a function built with branch protection signs it with (XPACLRI is
** in the hint space: where there is no such code, it does nothing). */
static uintptr_t strip_code(uintptr_t w)
{
  /* (x30 is this function's own return address: kept in x16 meanwhile.) */
  __asm__("mov x16, x30\n\t"
          "mov x30, %0\n\t"
          "hint #7\n\t"
          "mov %0, x30\n\t"
          "mov x30, x16"
          : "+r"(w)
          :
          : "x16");
  return w;
}

static size_t step_slot(uintptr_t ip)
{
  return (size_t)((ip >> 2) ^ (ip >> 11)) & (UNWIND_STEP_SLOTS - 1);
}

/* The slot of ip's step, else the first free slot of the short run from
** ip's own where it would go, else (the run full) NULL. Steps are never
** removed, so a lookup can stop at a free slot; a path's few return
** addresses cannot evict each other. */
static struct unwind_step *probe(const struct unwind_steps *s, uintptr_t ip)
{
  size_t i, at = step_slot(ip);
  for (i = 0; i < UNWIND_PROBES; i++) {
    const struct unwind_step *st = &s->slot[(at + i) & (UNWIND_STEP_SLOTS - 1)];
    if (st->ip == ip || st->ip == 0)
      return (struct unwind_step *)st;
  }
  return NULL;
}

/* Whether the word at a holds the return address `to`. */
static int holds(uintptr_t a, uintptr_t to)
{
  uintptr_t w;
  memcpy(&w, (const void *)a, sizeof(w));
  return strip_code(w) == to;
}

/* The frame whose return address is ip, with CFA cfa, returning (from a
** frame whose CFA is next) to `to`: its size, and the words of the frame
** that hold `to`. The word its CFI names is one of them, but a stale copy
** can sit beside it (a frame that tail-called this one left its own
** return address, the same one, in the stack this frame reuses): the
** words kept are those that held `to` at every unwind, at most two, and
** a replay reads them all and trusts them only when they agree. Not
** learned when there are more, or none (a return address kept in a
** register). */
static void learn_step(struct unwind_steps *s, uintptr_t ip, uintptr_t cfa,
                       uintptr_t next, uintptr_t to)
{
  struct unwind_step *st = probe(s, ip);
  uintptr_t a;
  int32_t at[2] = {0, 0};
  int seen = 0;
  if (st == NULL || next <= cfa || next - cfa > UNWIND_MAX_FRAME ||
      ((next - cfa) & 7) != 0 || (cfa & 7) != 0)
    return;
  if (st->ip == ip) {
    /* Keep the words that held `to` this time too. */
    int ra, ra2;
    if (st->size != (uint32_t)(next - cfa)) {
      st->size = 0;
      return;
    }
    ra = holds(next + (uintptr_t)(intptr_t)st->ra, to);
    ra2 = holds(next + (uintptr_t)(intptr_t)st->ra2, to);
    if (!ra && !ra2)
      st->size = 0;
    else if (!ra)
      st->ra = st->ra2;
    else if (!ra2)
      st->ra2 = st->ra;
    return;
  }
  for (a = cfa; a < next; a += 8) {
    if (holds(a, to)) {
      if (seen < 2)
        at[seen] = (int32_t)(a - next);
      seen++;
    }
  }
  if (seen == 0 || seen > 2)
    return;
  st->ip = ip;
  st->size = (uint32_t)(next - cfa);
  st->ra = at[0];
  st->ra2 = at[seen - 1];
}

int unwind_find(unwind_stop_fn stop, void *ud, uintptr_t limit,
                struct unwind_steps *learn, uintptr_t ip0, uintptr_t cfa0,
                uintptr_t *ret, uintptr_t *cfa)
{
  struct unwind_run r;
  int k, j;
  r.stop = stop;
  r.ud = ud;
  r.limit = limit;
  r.n = r.found = 0;
  _Unwind_Backtrace(unwind_frame, &r);
  if (!r.found)
    return 0;
  *ret = r.ip[r.n - 1];
  *cfa = r.cfa[r.n - 1];
  if (learn == NULL)
    return 1;
  for (k = 0; k < r.n - 1; k++)
    if (r.ip[k] == ip0 && r.cfa[k] == cfa0)
      break;
  for (j = k; j < r.n - 1; j++)
    learn_step(learn, r.ip[j], r.cfa[j], r.cfa[j + 1], r.ip[j + 1]);
  return 1;
}

int unwind_replay(const struct unwind_steps *s, uintptr_t ip, uintptr_t cfa,
                  uintptr_t limit, uintptr_t *ret, uintptr_t *ret_cfa)
{
  int n;
  for (n = 0; n < UNWIND_FRAMES; n++) {
    const struct unwind_step *st = probe(s, ip);
    uintptr_t next, at, at2, ip2;
    if (st == NULL || st->ip != ip || st->size == 0) {
      *ret = ip;
      *ret_cfa = cfa;
      return 1;
    }
    next = cfa + st->size;
    at = next + (uintptr_t)(intptr_t)st->ra;
    at2 = next + (uintptr_t)(intptr_t)st->ra2;
    if (next < cfa || next > limit || at < cfa || at + 8 > next || at2 < cfa ||
        at2 + 8 > next)
      return 0;
    memcpy(&ip, (const void *)at, sizeof(ip));
    memcpy(&ip2, (const void *)at2, sizeof(ip2));
    if (ip != ip2) /* (One is a stale copy: which, only an unwind knows.) */
      return 0;
    ip = strip_code(ip);
    cfa = next;
  }
  return 0;
}

#endif
