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

#include <errno.h>
#include <stdlib.h>
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
HOT_INLINE uint8_t *put_location_addr(struct location_cache *lc, uint8_t *p,
                                      uintptr_t addr, int pdep)
{
  if (!ULEB128_WORDS || addr < 0x80 || addr >= (1ULL << 56))
    return uleb128_put_with(p, addr, pdep);
  if (addr != lc->addr) {
    lc->word = uleb128_word_with(addr, &lc->len, pdep);
    lc->addr = addr;
  }
  memcpy(p, &lc->word, 8);
  return p + lc->len;
}

/* The location of a place of compiled code (its prototype and line), as
** begin_event writes it, kept with the place for its next events. */
static __attribute__((noinline)) void encode_place(struct tl_place *pl)
{
  uint8_t bytes[2 * ULEB128_MAX + 8], *end;
  end = uleb128_put(bytes, pl->pt);
  end = uleb128_put(end, pl->line);
  memcpy(pl->loc, bytes, sizeof(pl->loc));
  pl->loc_len = (uint8_t)(end - bytes);
  tl_place_encoded(pl);
}

/* Writes the location of the place of an event of compiled code: the
** bytes encode_place kept (at most 15: a 64-bit and a 32-bit ULEB128),
** copied as two words. The event's reservation covers the bytes past
** them. */
HOT_INLINE uint8_t *put_place(uint8_t *p, const struct tl_place *pl,
                              unsigned loc_len)
{
  memcpy(p, pl->loc, sizeof(pl->loc));
  return p + loc_len;
}

/* The longest allocation event: a header, then up to eight numbers (the
** location's address, its line or a trace number, the trace of compiled
** code, the stack id, the old block and the new block), of which the line,
** the trace and the stack id are 32-bit numbers of at most 5 bytes. */
#define EVENT_MAX_BYTES (1 + 7 * ULEB128_MAX)

/*
** Encodes an allocation event up to its new block: header, location (for
** an internal event of the extended format, its kind, from the VM state:
** `rt` and `g`; `ext` is the extended format), stack id, then the old block
** (realloc, free). The bytes go past the writer's position without
** advancing it: the event is committed once the real allocator has
** succeeded (put_new_block, then writer_commit). Returns where the
** new block goes, or NULL if the writer has failed. `reserved`: the caller
** has checked that the buffer has room and the writer has not failed.
** `pl`: NULL, or the place of compiled code whose prototype and line are
** the site's (its encoding is kept with it).
*/
HOT_INLINE uint8_t *begin_event(struct writer *w, struct location_cache *lc,
                                const struct vm_site *site, struct tl_place *pl,
                                const struct vm_layout *rt, uintptr_t g,
                                uint32_t stack, uintptr_t ptr, size_t osize,
                                size_t nsize, int pdep, int ext, int reserved)
{
  uint8_t kind, internal_kind, *p;
  /* (Read before the header's store, which may alias it.) */
  unsigned loc_len = pl != NULL ? pl->loc_len : 0;
  if (nsize == 0)
    kind = EVENT_FREE;
  else if (ptr == 0)
    kind = EVENT_ALLOC;
  else
    kind = EVENT_REALLOC;
  if (!reserved && !writer_reserve(w, EVENT_MAX_BYTES))
    return NULL;
  p = w->pos;
  *p++ = (uint8_t)(kind | site->source | (stack ? EVENT_HAS_STACK : 0));
  if (site->source == SOURCE_LUA && pl != NULL) {
    p = put_place(p, pl, loc_len);
    if (ext) {
      *w->pos |= EVENT_COMPILED;
      p = uleb128_put_with(p, site->traceno, pdep);
    }
  } else if (site->source == SOURCE_LUA) {
    p = put_location_addr(lc, p, site->addr, pdep);
    p = uleb128_put_with(p, site->line, pdep);
    if (ext && site->compiled) {
      /* Ran in compiled code: the trace follows the location. */
      *w->pos |= EVENT_COMPILED;
      p = uleb128_put_with(p, site->traceno, pdep);
    }
  } else if (site->source == SOURCE_C) {
    p = put_location_addr(lc, p, site->addr, pdep);
  } else if (site->source == SOURCE_TRACE) {
    p = uleb128_put_with(p, site->traceno, pdep);
  } else if (ext && (internal_kind = vm_internal_kind(rt, g)) != 0) {
    /* Only internal events pay for their kind (extended format). */
    p[-1] |= EVENT_HAS_KIND;
    *p++ = internal_kind;
  }
  if (stack)
    p = uleb128_put_with(p, stack, pdep);
  if (kind != EVENT_ALLOC) {
    /* (The fast paths know the old block is not NULL: the test folds.) */
    p = ptr != 0 ? uleb128_put_block_nonzero(p, ptr, pdep)
                 : uleb128_put_block(p, 0, pdep);
    p = uleb128_put_block(p, osize, pdep);
  }
  return p;
}

/* Adds the new block (alloc, realloc) to an event begun at `p`; returns
** its end, for writer_commit. Called only once the allocation succeeded:
** nptr is not NULL where nsize is not 0. */
HOT_INLINE uint8_t *put_new_block(uint8_t *p, uintptr_t nptr, size_t nsize,
                                  int pdep)
{
  if (nsize != 0) { /* (Then nptr is not NULL either: see the callers.) */
    p = uleb128_put_block_nonzero(p, nptr, pdep);
    p = uleb128_put_block_nonzero(p, nsize, pdep);
  }
  return p;
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

/* The id of the call stack of an event at a Lua line or in a C function
** (0: none). Reads the VM, so it runs before the real allocator. */
HOT_INLINE uint32_t record_stack(struct profiler *p,
                                 const struct vm_layout *lay, void *ptr,
                                 int *err)
{
  struct vm_raw_frame frames[MAX_STACK_DEPTH];
  struct vm_walk_entry *e;
  uint32_t id;
  int n, same;
  /* A described prototype went away: the bytecode a cached step read
  ** (the call instruction of its caller) may have been replaced. A
  ** sampled profile walks too seldom for the cache to pay, and its hook
  ** does not follow the functions that unsampled calls free: it starts
  ** each walk with the cache empty. */
  if (p->stacks.walk_generation != p->syms.generation || p->sampler.mean != 0) {
    vm_walk_clear(&p->stacks.walk);
    p->stacks.walk_generation = p->syms.generation;
  }
  n = vm_walk_stack(lay, 0, p->cur_L_at, (uintptr_t)ptr, frames, p->stack_depth,
                    &p->stacks.walk, &e, &same);
  if (n == 0)
    return 0;
  if (same && e->stack_id != 0)
    return e->stack_id;
  if (same)
    vm_walk_output(e, frames);
  id = stacks_id(&p->stacks, &p->syms, &p->out, &p->layout, frames, n, err);
  e->stack_id = id;
  return id;
}

/* The stack walk is out of line so that the default path stays small; one
** per family, so that it gets the family's constant offsets too. */
typedef uint32_t (*stack_fn)(struct profiler *p, void *ptr, int *err);

static __attribute__((noinline)) uint32_t stack_generic(struct profiler *p,
                                                        void *ptr, int *err)
{
  return record_stack(p, &p->layout, ptr, err);
}

#define FAMILY_STACK(name, index)                                              \
  static __attribute__((noinline)) uint32_t name(struct profiler *p,           \
                                                 void *ptr, int *err)          \
  {                                                                            \
    return record_stack(p, &vm_candidates[index].layout, ptr, err);            \
  }
FAMILY_STACK(stack_gc64, VM_CANDIDATE_GC64)
FAMILY_STACK(stack_nongc64, VM_CANDIDATE_NONGC64)
#undef FAMILY_STACK

/* An address in the hook's own frame, below every frame of its callers
** (trace_lines.h bounds its reads of the C stack from it). The stack
** pointer, where it can be read: __builtin_frame_address would make the
** fast path keep a frame pointer. */
HOT_INLINE uintptr_t hook_frame_low(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
  uintptr_t sp;
  __asm__("mov %%rsp, %0" : "=r"(sp));
  return sp;
#else
  return (uintptr_t)__builtin_frame_address(0);
#endif
}

/* Makes site an event of the Lua line of place pl made in compiled code,
** when pl is not NULL; returns pl. */
HOT_INLINE struct tl_place *at_place(struct vm_site *site, struct tl_place *pl)
{
  if (pl == NULL)
    return NULL;
  site->source = SOURCE_LUA;
  site->addr = pl->pt;
  site->line = pl->line;
  site->compiled = 1;
  return pl;
}

/* The place of an event of trace site->traceno (or of its exit), which
** then becomes an event of that Lua line made in compiled code; NULL if
** it cannot be resolved (it stays at the trace's start). A place the fast
** path may take (its event is the place's own, not its caller's) gets its
** location written here: the caller describes its prototype and trace
** before the event, or halts. */
static __attribute__((noinline)) struct tl_place *
compiled_site(struct profiler *p, struct vm_site *site)
{
  const struct symbols *s = &p->syms;
  struct tl_place *pl;
  uint32_t exitno = 0;
  if (site->exit &&
      (!p->layout.tl.exit_ok ||
       !vm_u32(0, p->g + p->layout.tl.g_exitno, &exitno) || exitno > 65535))
    return NULL;
  /* The fast path looks for places of traces numbered below place_cap:
  ** trace lines are on, and the symbols hold that many trace numbers
  ** (they never hold fewer later). */
  p->syms.place_cap = s->trace_cap;
  pl = trace_lines_place(&p->tlines, &p->layout, p->g, &site->traceno,
                         site->exit ? (int)exitno : -1, hook_frame_low(),
                         s->trace_obj, s->trace_cap, s->generation);
  if (at_place(site, pl) != NULL && pl->tail_base) {
    /* A built-in the outermost frame tail-called: its caller's event. */
    struct vm_thread th;
    uintptr_t pt;
    uint32_t line;
    if (vm_current_thread(&p->layout, 0, p->cur_L_at, &th) &&
        tl_base_caller(&p->layout, 0, p->g, &th, pl, &pt, &line)) {
      site->addr = pt;
      site->line = line;
    }
  } else if (pl != NULL && pl->loc_len == 0) {
    encode_place(pl);
  }
  return pl;
}

/* The fast path's part of compiled_site: a cached place only (loads, no
** call). Exits go to the full path. */
HOT_INLINE struct tl_place *cached_site(struct profiler *p,
                                        const struct vm_layout *lay,
                                        struct vm_site *site)
{
  const struct symbols *s = &p->syms;
  /* (traceno < s->place_cap <= s->trace_cap: see compiled_site.) */
  if (site->exit || TL_MCODE_UNIT != 1)
    return NULL; /* (arm64: found by an unwind, on the full path.) */
  return at_place(site,
                  tl_cached_place(&p->tlines, lay, p->cur_L_at, site->traceno,
                                  hook_frame_low(), s->trace_obj[site->traceno],
                                  s->generation));
}

/* The stack of an event of compiled code: its place's frames, the
** innermost function then its inlined callers down to the trace's base
** frame, then the interpreter frames below that (walked from
** g->jit_base, where the build's calibration proved it: those can change
** from event to event; else the place's frames alone, kept with it). */
static __attribute__((noinline)) uint32_t
compiled_stack(struct profiler *p, struct tl_place *pl, int *err)
{
  struct vm_raw_frame frames[MAX_STACK_DEPTH];
  struct vm_walk_entry *e;
  struct vm_thread th;
  uintptr_t base;
  int n = pl->nframes < p->stack_depth ? pl->nframes : p->stack_depth, same,
      below;
  if (!p->layout.tl.base_ok || n < pl->nframes) {
    pl->stack_id = stacks_id(&p->stacks, &p->syms, &p->out, &p->layout,
                             pl->frames, n, err);
    return pl->stack_id;
  }
  memcpy(frames, pl->frames, (size_t)n * sizeof(frames[0]));
  if (p->stacks.walk_generation != p->syms.generation || p->sampler.mean != 0) {
    vm_walk_clear(&p->stacks.walk);
    p->stacks.walk_generation = p->syms.generation;
  }
  /* The walk's first frame is the base frame, already there with its
  ** line (its PC in the C frame is not the trace's). */
  if (vm_current_thread(&p->layout, 0, p->cur_L_at, &th) &&
      tl_jit_base(&p->layout, 0, p->g, &th, &base) &&
      (base += TVALUE_SIZE * (uintptr_t)(pl->base_ofs > 0 ? pl->base_ofs : 0)) <
          th.limit) {
    below =
        vm_walk_stack_at(&p->layout, 0, p->cur_L_at, base, 0, frames + n - 1,
                         p->stack_depth - n + 1, &p->stacks.walk, &e, &same);
    if (below > 0 && same)
      below = vm_walk_output(e, frames + n - 1);
    if (below > 0 &&
        (frames[n - 1].obj == pl->frames[n - 1].obj || pl->base_replaced))
      n += below - 1;
    frames[pl->nframes - 1] = pl->frames[pl->nframes - 1];
    /* A built-in the outermost frame tail-called took that frame. */
    if (pl->tail_base && below > 1 && n == pl->nframes + below - 1) {
      memmove(frames + pl->nframes - 1, frames + pl->nframes,
              (size_t)(n - pl->nframes) * sizeof(frames[0]));
      n--;
    }
  }
  return stacks_id(&p->stacks, &p->syms, &p->out, &p->layout, frames, n, err);
}

/*
** The extended part of an event: the time mark it may need, and the id of
** its call stack. The writer thread ticks every millisecond; without it,
** events are counted between two readings of the clock.
*/
HOT_INLINE uint32_t record_extended(struct profiler *p, stack_fn stack_of,
                                    const struct vm_site *site,
                                    struct tl_place *compiled, void *ptr,
                                    int *err)
{
  uint32_t stack = 0;
  if (p->timestamps && (writer_ticked(&p->out) || --p->clock_countdown == 0))
    mark_time(p, 0);
  if (p->stack_depth != 0 && *err == 0 && compiled != NULL)
    stack = compiled->stack_id != 0 ? compiled->stack_id
                                    : compiled_stack(p, compiled, err);
  else if (p->stack_depth != 0 && *err == 0 &&
           (site->source == SOURCE_LUA || site->source == SOURCE_C))
    stack = stack_of(p, ptr, err);
  /* A function freed may be replaced by another at its address. */
  if (ptr != NULL)
    vm_walk_forget(&p->stacks.walk, (uintptr_t)ptr);
  return stack;
}

/* Whether the next event needs a time mark (record_extended would write
** one). Changes nothing. */
static inline int time_mark_due(const struct profiler *p)
{
  return writer_tick_pending(&p->out) || p->clock_countdown <= 1;
}

/* The extended part of an event that needs neither a stack nor a time
** mark (see time_mark_due): what record_extended does then. */
HOT_INLINE void count_extended(struct profiler *p, void *ptr)
{
  if (p->timestamps)
    p->clock_countdown--;
  if (ptr != NULL)
    vm_walk_forget(&p->stacks.walk, (uintptr_t)ptr);
}

/*
** What a sampled allocator call is recorded as (hook_sampled): the old
** block only if it was sampled, the new one only if it is sampled. NULL
** everywhere else: the event is the call.
*/
struct recorded_as {
  void *ptr;
  size_t osize, nsize;
  /* Set by record_before for a new block when the profile keeps the model
  ** of snapshots: its place and stack there (places.h). */
  uint32_t place, stack;
};

/* Counts an event (memprof.stats) by its kind and source bits `i`. */
HOT_INLINE void count_event(struct profiler *p, unsigned i, size_t osize,
                            size_t nsize)
{
  p->stats.events[i]++;
  p->stats.allocated[i] += nsize;
  if ((i & 3) != EVENT_ALLOC) /* (Read for frees and reallocs only.) */
    p->stats.freed[i] += osize;
}

/* Takes back the count of a failed allocation, not recorded: its header
** is the first byte past the writer's position. */
static void uncount_event(struct profiler *p, size_t osize, size_t nsize)
{
  unsigned i = *p->out.pos & 0x1f;
  p->stats.events[i]--;
  p->stats.allocated[i] -= nsize;
  if ((i & 3) != EVENT_ALLOC)
    p->stats.freed[i] -= osize;
}

/* The place and stack of a new block in the model of snapshots. A model
** short of memory says so (places.failed); the profile goes on. */
static void model_place(struct profiler *p, struct recorded_as *as,
                        const struct vm_site *site, uint32_t stack)
{
  uint8_t kind =
      site->source == SOURCE_INTERNAL ? vm_internal_kind(&p->layout, p->g) : 0;
  as->place = places_of(&p->model, &p->syms, &p->layout, p->g, site, kind);
  as->stack = stack;
}

/* The fast paths: any event, or one the VM's state makes internal (the
** collector's frees, mostly: see vm_state_internal), whose code reads no
** frame and no trace and so needs few registers, or one made while a
** trace runs, whose code reads no frame. */
#define FAST_ANY 1
#define FAST_INTERNAL 2
/* One made while a trace whose places may be cached runs: its number is
** below place_cap (the dispatcher checks). */
#define FAST_TRACE 3
/* One made while any other trace runs: charged to the trace's start
** (trace lines off), or left to the full path. */
#define FAST_START 4

/* The VM's state (vmstate) as vm_locate reads it: a trace's number while
** one runs. */
HOT_INLINE int32_t vm_state(const struct profiler *p)
{
  int32_t st;
  memcpy(&st, (const void *)p->vmstate_at, sizeof(st));
  return st;
}

/* Whether vm_locate would find the VM's state st internal: st is not a
** trace's (the dispatcher sent those elsewhere), and its class walks no
** frames and leaves no trace. */
HOT_INLINE int vm_state_internal(const struct profiler *p, int32_t st)
{
  uint32_t k = ~(uint32_t)st;
  return k >= VM_STATE_SLOTS || !((p->located_states >> k) & 1);
}

/* What the fast path does with an event it leaves to the full one: sets
** the caller's flag (a local of the caller, known on every path once
** inlined: the paths that record test nothing) and returns NULL. */
#define FULL_PATH (*full = 1, (uint8_t *)NULL)

/*
** Records one allocator call up to the real allocator: locates the event,
** writes the symbols and stack it needs, and encodes it up to its new
** block (see begin_event). Returns where the new block goes, or NULL if
** nothing can be written.
**
** `lay` gives the offsets: the profiler's own verified layout (generic
** hook) or a family's constant table, in which case the compiler folds
** every offset and mode test into the code. With `fast` set, it does only
** what needs no function call (the common case: a known place, room in the
** buffer, and in the extended format no time mark and no stack, which
** only Lua lines and C functions have: see vm_in_frames) and
** leaves anything else to the full path (FULL_PATH sets *full), so that the
*fast path keeps its few
** values in registers. `ext` (a constant in each hook: p->extended) leaves
** out of the hooks of Tarantool's format all that the extended format
** adds.
*/
HOT_INLINE uint8_t *record_before(struct profiler *p,
                                  const struct vm_layout *lay,
                                  stack_fn stack_of, int pdep, int ext,
                                  int fast, int32_t st, void *ptr, size_t osize,
                                  size_t nsize, struct recorded_as *as,
                                  int *full)
{
  struct vm_site site;
  struct tl_place *compiled = NULL;
  uint32_t stack = 0;
  uint8_t *event;
  int err = 0;

  if (fast && (!writer_has_room(&p->out, EVENT_MAX_BYTES) ||
               (ext && fast != FAST_INTERNAL && p->stack_depth != 0 &&
                vm_in_frames(&p->layout, 0, p->g))))
    return FULL_PATH;
  /* (vm_locate sets the line and address of every Lua or C site, but not
  ** so that every compiler can tell: stores merged with vm_locate's.) */
  site.line = 0;
  site.addr = 0;
  if (fast == FAST_INTERNAL) {
    site.source = SOURCE_INTERNAL; /* (What vm_locate would find.) */
    site.ffid = 0;
    site.traceno = 0;
    site.exit = site.compiled = 0;
  } else if (fast == FAST_TRACE || fast == FAST_START) {
    /* (st: the VM's state as vm_locate reads it, a trace's number.) */
    site.source = SOURCE_TRACE;
    site.traceno = (uint32_t)st;
    site.ffid = 0;
    site.exit = site.compiled = 0;
  } else if (fast) {
    vm_locate_state(lay, &p->layout, 0, p->g, st, (uintptr_t)ptr,
                    &p->syms.line_memo, &site);
  } else {
    vm_locate(lay, &p->layout, 0, p->g, (uintptr_t)ptr, &p->syms.line_memo,
              &site);
  }
  /* Compiled code by line: the fast path takes a cached place of a trace
  ** the stream has described, the full one resolves and describes. */
  if (fast == FAST_TRACE) {
    compiled = cached_site(p, lay, &site);
    /* (Its stack is the place's frames: the full path writes it once.) */
    if (compiled == NULL ||
        (ext && p->stack_depth != 0 && compiled->stack_id == 0))
      return FULL_PATH;
    if (ext)
      stack = compiled->stack_id;
  } else if (site.source == SOURCE_TRACE && p->tlines.on) {
    if (fast)
      return FULL_PATH;
    compiled = compiled_site(p, &site);
  }
  /* (A cached place of the fast path proves its prototype and trace
  ** described: see tl_cached_place.) */
  if (!(site.source == SOURCE_INTERNAL || (fast && compiled != NULL) ||
        (site.source == SOURCE_LUA && compiled == NULL &&
         site.addr == p->syms.proto_memo[symbols_proto_slot(site.addr)]) ||
        (site.source == SOURCE_TRACE && site.traceno < p->syms.trace_cap &&
         p->syms.trace_obj[site.traceno] != 0 &&
         p->syms.trace_obj[site.traceno] ==
             vm_trace_object(&p->layout, 0, p->g, site.traceno)))) {
    if (fast)
      return FULL_PATH;
    err = symbols_describe(&p->syms, &p->out, &p->layout, p->g, &site);
  }
  if (fast && ext && p->timestamps && time_mark_due(p))
    return FULL_PATH;
  /* Only prototypes and traces are cached, and no block smaller than a
  ** GCproto can be one of them. Neither is freed or moved while a trace
  ** runs: the collector frees both under vmstate GC (lj_gc_step sets it,
  ** lj_gc_step_jit included), a flush only unlinks traces, and neither
  ** is ever reallocated; so an event with a cached place of compiled
  ** code (vmstate a trace's number) skips the filter. */
  if (ptr != NULL && osize >= lay->pt_size && !(fast && compiled != NULL) &&
      symbols_may_hold(&p->syms, (uintptr_t)ptr)) {
    if (fast)
      return FULL_PATH;
    symbols_forget_slow(&p->syms, (uintptr_t)ptr);
  }
  if (!fast && ext)
    stack = record_extended(p, stack_of, &site, compiled, ptr, &err);
  else if (fast && ext)
    count_extended(p, ptr);
  if (as != NULL && as->nsize != 0 && p->keeps_model)
    model_place(p, as, &site, stack);
  /* (The full path's place may be charged to its caller: see
  ** compiled_site.) */
  if (as != NULL)
    event = begin_event(&p->out, &p->last_location, &site, NULL, &p->layout,
                        p->g, stack, (uintptr_t)as->ptr, as->osize, as->nsize,
                        pdep, ext, fast);
  else
    event = begin_event(&p->out, &p->last_location, &site,
                        fast ? compiled : NULL, &p->layout, p->g, stack,
                        (uintptr_t)ptr, osize, nsize, pdep, ext, fast);
  if (!fast && (err != 0 || event == NULL)) {
    /* The records it needs are not all in the stream: it is not
    ** committed, and counts as dropped. */
    halt(p, err != 0 ? err : writer_failed(&p->out));
    p->stats.dropped++;
    return NULL;
  }
  if (as == NULL)
    count_event(p,
                (nsize == 0    ? EVENT_FREE
                 : ptr == NULL ? EVENT_ALLOC
                               : EVENT_REALLOC) |
                    site.source,
                osize, nsize);
  return event;
}

/* The size cap is reached: the stream ends at byte `at`, before the
** records of the event that would pass it, and recording stops. Only the
** full path can pass it (the writer's limit keeps the fast path below). */
static void cut_stream(struct profiler *p, uint64_t at)
{
  p->capped = 1;
  p->cut_at = at;
  halt(p, EFBIG);
}

/* Whether an event that ends at `end` (not yet committed) keeps the
** stream within the size cap. */
static inline int within_cap(const struct profiler *p, const uint8_t *end)
{
  return p->out.budget == 0 ||
         writer_total(&p->out) + (uint64_t)(end - p->out.pos) <= p->out.budget;
}

/* An event counted by record_before that would pass the cap: it is not in
** the stream, so it counts as dropped, not as recorded (its header is the
** first byte past the writer's position). */
static void uncap_event(struct profiler *p, uint64_t at, size_t osize,
                        size_t nsize)
{
  uncount_event(p, osize, nsize);
  p->stats.dropped++;
  cut_stream(p, at);
}

/* The records written for an event that was not committed (symbols, a
** stack) went past the budget on their own: the stream ends before them. */
static void check_cap(struct profiler *p, uint64_t at)
{
  if (p->out.budget != 0 && p->state == PROFILER_RECORDING &&
      writer_total(&p->out) > p->out.budget)
    cut_stream(p, at);
}

/* A free (of a block, not NULL) cannot fail: its event is committed before
** the real allocator, which is then a tail call. The fast path leaves what
** it cannot record to `full`. */
HOT_INLINE void *record_free(struct profiler *p, const struct vm_layout *lay,
                             stack_fn stack_of, int pdep, int ext, int fast,
                             int32_t st, void *ptr, size_t osize,
                             void *(*full)(struct profiler *, void *, size_t))
{
  uint64_t at = fast ? 0 : writer_total(&p->out);
  int to_full = 0;
  uint8_t *event = record_before(p, lay, stack_of, pdep, ext, fast, st, ptr,
                                 osize, 0, NULL, &to_full);
  if (fast && to_full)
    return full(p, ptr, osize);
  if (event != NULL && (fast || within_cap(p, event)))
    writer_commit(&p->out, event);
  else if (event != NULL)
    uncap_event(p, at, osize, 0);
  if (!fast)
    check_cap(p, at);
  p->busy = 0;
  return p->orig_alloc(p->orig_ud, ptr, osize, 0);
}

/* An allocation or reallocation is committed once it has succeeded (a
** failed one changes nothing; LuaJIT raises the error itself). The fast
** path leaves what it cannot record to `full`. */
HOT_INLINE void *record_alloc(struct profiler *p, const struct vm_layout *lay,
                              stack_fn stack_of, int pdep, int ext, int fast,
                              int32_t st, void *ptr, size_t osize, size_t nsize,
                              void *(*full)(struct profiler *, void *, size_t,
                                            size_t))
{
  uint64_t at = fast ? 0 : writer_total(&p->out);
  uint8_t *event, *end;
  void *nptr;
  int to_full = 0;
  if (nsize == 0)
    __builtin_unreachable(); /* The hooks send frees to record_free. */
  event = record_before(p, lay, stack_of, pdep, ext, fast, st, ptr, osize,
                        nsize, NULL, &to_full);
  if (fast && to_full)
    return full(p, ptr, osize, nsize);
  nptr = p->orig_alloc(p->orig_ud, ptr, osize, nsize);
  p->busy = 0; /* What follows calls nothing outside memprof.so. */
  if (event == NULL)
    return nptr;
  if (nptr == NULL) {
    /* Failed: not recorded. (A new block's event frees nothing: then
    ** osize is not kept across the call.) */
    uncount_event(p, ptr != NULL ? osize : 0, nsize);
    return nptr;
  }
  end = put_new_block(event, (uintptr_t)nptr, nsize, pdep);
  if (fast || within_cap(p, end))
    writer_commit(&p->out, end);
  else
    uncap_event(p, at, osize, nsize);
  return nptr;
}

/* Recording is off (halted, or this is a forked child where the profile
** does not go on: after_fork_child halts it there): only forward. */
static inline int forward_only(const struct profiler *p)
{
  return p->state != PROFILER_RECORDING;
}

/* Forwards a call that is not recorded because recording is off; one
** after a halt in this process is counted as dropped (memprof.stats). */
static __attribute__((noinline)) void *forward(struct profiler *p, void *ptr,
                                               size_t osize, size_t nsize)
{
  if (p->state != PROFILER_RECORDING &&
      p->fork_generation == profiler_fork_generation &&
      !(nsize == 0 && ptr == NULL))
    p->stats.dropped++;
  p->busy = 0;
  return p->orig_alloc(p->orig_ud, ptr, osize, nsize);
}

/* With sampling: the estimates of a sampled call (memprof.stats), before
** it is committed. The header of its event is past the writer's position. */
static void count_sampled(struct profiler *p, const struct recorded_as *as)
{
  unsigned i = *p->out.pos & 0x1f;
  double old_w = 0, new_w = 0;
  count_event(p, i, as->osize, as->nsize);
  if (p->sampler.mean == 0) {
    /* Every call is recorded (full mode with snapshots): no estimates. */
    if (as->nsize != 0)
      places_count(&p->model, as->place, as->stack, (double)as->nsize, 1);
    return;
  }
  if (as->ptr != NULL) {
    old_w = sampler_weight(p->sampler.mean, as->osize);
    p->stats.est_freed[i] += old_w * (double)as->osize;
    p->stats.est_live_bytes -= old_w * (double)as->osize;
    p->stats.est_live_blocks -= old_w;
  }
  if (as->nsize != 0) {
    new_w = sampler_weight(p->sampler.mean, as->nsize);
    p->stats.est_allocated[i] += new_w * (double)as->nsize;
    p->stats.est_live_bytes += new_w * (double)as->nsize;
    p->stats.est_live_blocks += new_w;
    places_count(&p->model, as->place, as->stack, new_w * (double)as->nsize,
                 new_w);
  }
  /* An event counts as many events as the block it is about. */
  p->stats.est_events[i] += as->nsize != 0 ? new_w : old_w;
}

/*
** A sampled allocator call: one whose new block is sampled (`fresh`) or
** whose old block was (`held`). It is recorded as the sampled part of it:
** a realloc of a sampled block into one that is not is a free of the
** sampled block; a realloc of a block that was not sampled into one that
** is, an allocation. The live table follows the blocks.
*/
HOT_INLINE void *record_sampled(struct profiler *p, const struct vm_layout *lay,
                                stack_fn stack_of, int pdep, void *ptr,
                                size_t osize, size_t nsize, int held, int fresh)
{
  uint64_t at = writer_total(&p->out);
  struct recorded_as as;
  uint8_t *event;
  void *nptr;
  int to_full = 0; /* (The full path: never set.) */
  as.ptr = held ? ptr : NULL;
  as.osize = held ? osize : 0;
  as.nsize = fresh ? nsize : 0;
  as.place = as.stack = 0;
  /* Sampling forces the extended format. */
  event = record_before(p, lay, stack_of, pdep, 1, 0, 0, ptr, osize, nsize, &as,
                        &to_full);
  nptr = p->orig_alloc(p->orig_ud, ptr, osize, nsize);
  if (nsize != 0 && nptr == NULL)
    return NULL; /* Failed: nothing changed. */
  if (held)
    live_remove(&p->live, (uintptr_t)ptr);
  if (fresh && !p->live_full &&
      live_insert(&p->live, (uintptr_t)nptr, nsize, as.place, as.stack) != 0) {
    /* Sampling needs every sampled block; snapshots of a full profile are
    ** refused from now on, and the profile goes on. */
    if (p->sampler.mean != 0)
      halt(p, ENOMEM);
    else
      p->live_full = 1;
  }
  if (event != NULL && p->state == PROFILER_RECORDING) {
    uint8_t *end = put_new_block(event, (uintptr_t)nptr, as.nsize, pdep);
    if (within_cap(p, end)) {
      count_sampled(p, &as);
      writer_commit(&p->out, end);
    } else {
      p->stats.dropped++;
      cut_stream(p, at);
    }
  }
  check_cap(p, at);
  return nptr;
}

/* A free or realloc that sampling does not record may still free or move
** a prototype the symbol cache names: the sampled hook calls this when
** the cache's filter says it may (the stack walk's cache needs no such
** care: a sampled profile empties it before each walk, see record_stack).
*/
static __attribute__((noinline)) void *
forget_prototype(struct profiler *p, void *ptr, size_t osize, size_t nsize)
{
  symbols_forget_slow(&p->syms, (uintptr_t)ptr);
  p->busy = 0;
  return p->orig_alloc(p->orig_ud, ptr, osize, nsize);
}

/* The start of every hook: a call is forwarded at once when recording is
** off (after a halt, or in a child that does not follow the profile), and
** freeing NULL is no event. */
#define RETURN_IF_NOT_RECORDED(p, ptr, osize, nsize)                           \
  do {                                                                         \
    if (forward_only(p))                                                       \
      return forward(p, ptr, osize, nsize);                                    \
    if (nsize == 0 && ptr == NULL)                                             \
      return p->busy = 0, p->orig_alloc(p->orig_ud, ptr, osize, nsize);        \
  } while (0)

/* The fast paths of one kind of event (`mode`, a FAST_ value; `st_ok`,
** what the dispatcher proved of the VM's state st): a resize, a new block
** (the hook's arguments as they come; not cloned, so that they pass
** through unmoved) and a free (of a block, never NULL: see _free_fast).
** What they cannot record goes to the full path. */
#define STATE_PATHS(name, kind, mode, st_ok, family_layout, stack_of, pdep,    \
                    ext)                                                       \
  static __attribute__((noinline)) void *name##_alloc_##kind(                  \
      struct profiler *p, void *ptr, size_t osize, size_t nsize, int32_t st)   \
  {                                                                            \
    if (ptr == NULL || !(st_ok))                                               \
      __builtin_unreachable();                                                 \
    return record_alloc(p, family_layout, stack_of, pdep, ext, mode, st, ptr,  \
                        osize, nsize, name##_alloc);                           \
  }                                                                            \
  static __attribute__((noinline, noclone)) void *name##_new_##kind(           \
      struct profiler *p, void *ptr, size_t osize, size_t nsize, int32_t st)   \
  {                                                                            \
    (void)ptr;                                                                 \
    if (!(st_ok))                                                              \
      __builtin_unreachable();                                                 \
    return record_alloc(p, family_layout, stack_of, pdep, ext, mode, st, NULL, \
                        osize, nsize, name##_alloc);                           \
  }                                                                            \
  static __attribute__((noinline)) void *name##_free_##kind(                   \
      struct profiler *p, void *ptr, size_t osize, int32_t st)                 \
  {                                                                            \
    if (ptr == NULL || !(st_ok))                                               \
      __builtin_unreachable();                                                 \
    return record_free(p, family_layout, stack_of, pdep, ext, mode, st, ptr,   \
                       osize, name##_free);                                    \
  }

/*
** The hooks: the generic one, for any verified layout, and one per build
** family with constant offsets; each with and without PDEP for LEB128
** (see writer_fast_pdep), and for each format (the hooks of Tarantool's
** format have none of the extended format's work). Each takes the fast
** path (see record_before) and falls back on the full one, in functions
** of their own, so that the fast path saves few registers and calls the
** real allocator of a free as a tail call. Each sets p->busy at its entry
** and clears it when done with p (profiler.h: for memprof detach).
*/
#define HOOK(name, family_layout, stack_of, pdep, ext)                         \
  static __attribute__((noinline)) void *name##_free(struct profiler *p,       \
                                                     void *ptr, size_t osize)  \
  {                                                                            \
    return record_free(p, family_layout, stack_of, pdep, ext, 0, 0, ptr,       \
                       osize, NULL);                                           \
  }                                                                            \
  static __attribute__((noinline)) void *name##_alloc(                         \
      struct profiler *p, void *ptr, size_t osize, size_t nsize)               \
  {                                                                            \
    uint64_t at = writer_total(&p->out);                                       \
    void *r = record_alloc(p, family_layout, stack_of, pdep, ext, 0, 0, ptr,   \
                           osize, nsize, NULL);                                \
    check_cap(p, at);                                                          \
    return r;                                                                  \
  }                                                                            \
  /* A trace below place_cap: its places may be cached. */                     \
  STATE_PATHS(name, trace, FAST_TRACE, st >= 0, family_layout, stack_of, pdep, \
              ext)                                                             \
  /* Any other trace: charged to its start, or left to the full path. */       \
  STATE_PATHS(name, start, FAST_START, st >= 0, family_layout, stack_of, pdep, \
              ext)                                                             \
  /* Lua or C code, or a trace's exit: the event is located. */                \
  STATE_PATHS(name, any, FAST_ANY, st < 0, family_layout, stack_of, pdep, ext) \
  /* An internal free (the collector's, mostly) needs few registers, and */    \
  /* saves none, without the others' code. */                                  \
  static __attribute__((noinline)) void *name##_free_fast(                     \
      struct profiler *p, void *ptr, size_t osize, int32_t st)                 \
  {                                                                            \
    if (ptr == NULL)                                                           \
      return p->busy = 0, p->orig_alloc(p->orig_ud, ptr, osize, 0);            \
    if ((uint32_t)st < p->syms.place_cap)                                      \
      return name##_free_trace(p, ptr, osize, st);                             \
    if (st >= 0)                                                               \
      return name##_free_start(p, ptr, osize, st);                             \
    if (!vm_state_internal(p, st))                                             \
      return name##_free_any(p, ptr, osize, st);                               \
    return record_free(p, family_layout, stack_of, pdep, ext, FAST_INTERNAL,   \
                       0, ptr, osize, name##_free);                            \
  }                                                                            \
  /* Saves no register: the fast paths are tail calls. */                      \
  static void *name(void *ud, void *ptr, size_t osize, size_t nsize)           \
  {                                                                            \
    struct profiler *p = ud;                                                   \
    int32_t st;                                                                \
    p->busy = 1;                                                               \
    if (forward_only(p))                                                       \
      return forward(p, ptr, osize, nsize);                                    \
    st = vm_state(p);                                                          \
    if (nsize == 0)                                                            \
      return name##_free_fast(p, ptr, osize, st);                              \
    /* (A trace's number below place_cap: st is not negative.) */              \
    if (ptr == NULL && (uint32_t)st < p->syms.place_cap)                       \
      return name##_new_trace(p, ptr, osize, nsize, st);                       \
    if (ptr == NULL && st >= 0)                                                \
      return name##_new_start(p, ptr, osize, nsize, st);                       \
    if (ptr == NULL)                                                           \
      return name##_new_any(p, ptr, osize, nsize, st);                         \
    if ((uint32_t)st < p->syms.place_cap)                                      \
      return name##_alloc_trace(p, ptr, osize, nsize, st);                     \
    if (st >= 0)                                                               \
      return name##_alloc_start(p, ptr, osize, nsize, st);                     \
    return name##_alloc_any(p, ptr, osize, nsize, st);                         \
  }
/* The sampling twin of a hook of the extended format (sampling forces
** it). */
#define SAMPLED_HOOK(name, family_layout, stack_of, pdep)                      \
  static __attribute__((noinline)) void *name##_sample(                        \
      struct profiler *p, void *ptr, size_t osize, size_t nsize, int held,     \
      int fresh)                                                               \
  {                                                                            \
    void *r = record_sampled(p, family_layout, stack_of, pdep, ptr, osize,     \
                             nsize, held, fresh);                              \
    p->busy = 0;                                                               \
    return r;                                                                  \
  }                                                                            \
  /* The sampler took the new block: is the old one a sampled block too? */    \
  static __attribute__((noinline)) void *name##_fresh(                         \
      struct profiler *p, void *ptr, size_t osize, size_t nsize)               \
  {                                                                            \
    int held = ptr != NULL && live_contains(&p->live, (uintptr_t)ptr);         \
    sampler_next(&p->sampler);                                                 \
    return name##_sample(p, ptr, osize, nsize, held, 1);                       \
  }                                                                            \
  /* With sampling: an unsampled call costs the countdown and, for a free or   \
  ** realloc, a look-up in the live table. Whatever is more goes to a          \
  ** function of its own, called last, so that this one saves no register      \
  ** and ends in a jump to the real allocator. Freeing NULL goes through as    \
  ** a free of a block that was not sampled. */                                \
  static void *name##_sampled(void *ud, void *ptr, size_t osize, size_t nsize) \
  {                                                                            \
    struct profiler *p = ud;                                                   \
    p->busy = 1;                                                               \
    if (forward_only(p))                                                       \
      return forward(p, ptr, osize, nsize);                                    \
    if (nsize != 0 && sampler_due(&p->sampler, nsize))                         \
      return name##_fresh(p, ptr, osize, nsize);                               \
    if (ptr != NULL) {                                                         \
      if (live_contains(&p->live, (uintptr_t)ptr))                             \
        return name##_sample(p, ptr, osize, nsize, 1, 0);                      \
      if (osize >= (family_layout)->pt_size &&                                 \
          symbols_may_hold(&p->syms, (uintptr_t)ptr))                          \
        return forget_prototype(p, ptr, osize, nsize);                         \
    }                                                                          \
    p->busy = 0;                                                               \
    return p->orig_alloc(p->orig_ud, ptr, osize, nsize);                       \
  }
/* A full profile that keeps the model of snapshots (the start option
** snapshots) records every call as the sampling twin records a sampled
** one, and the live table follows every block. */
#define MODELLED_HOOK(name)                                                    \
  static void *name##_modelled(void *ud, void *ptr, size_t osize,              \
                               size_t nsize)                                   \
  {                                                                            \
    struct profiler *p = ud;                                                   \
    p->busy = 1;                                                               \
    RETURN_IF_NOT_RECORDED(p, ptr, osize, nsize);                              \
    return name##_sample(p, ptr, osize, nsize, ptr != NULL, nsize != 0);       \
  }
/* Each hook in both formats, Tarantool's (ext 0) and the extended one,
** its sampling twin and its modelled twin. */
#define HOOKS(name, family_layout, stack_of, pdep)                             \
  HOOK(name, family_layout, stack_of, pdep, 0)                                 \
  HOOK(name##_ext, family_layout, stack_of, pdep, 1)                           \
  SAMPLED_HOOK(name, family_layout, stack_of, pdep)                            \
  MODELLED_HOOK(name)
HOOKS(hook_generic, &p->layout, stack_generic, 0)
HOOKS(hook_generic_pdep, &p->layout, stack_generic, 1)
HOOKS(hook_gc64, &vm_candidates[VM_CANDIDATE_GC64].layout, stack_gc64, 0)
HOOKS(hook_gc64_pdep, &vm_candidates[VM_CANDIDATE_GC64].layout, stack_gc64, 1)
HOOKS(hook_nongc64, &vm_candidates[VM_CANDIDATE_NONGC64].layout, stack_nongc64,
      0)
HOOKS(hook_nongc64_pdep, &vm_candidates[VM_CANDIDATE_NONGC64].layout,
      stack_nongc64, 1)
#undef HOOKS
#undef MODELLED_HOOK
#undef SAMPLED_HOOK
#undef HOOK
#undef STATE_PATHS

/* By layout (generic, or a family's), without or with PDEP, for
** Tarantool's format or the extended one. */
static const lua_Alloc hooks[3][2][2] = {
    {{hook_generic, hook_generic_ext},
     {hook_generic_pdep, hook_generic_pdep_ext}},
    {{hook_gc64, hook_gc64_ext}, {hook_gc64_pdep, hook_gc64_pdep_ext}},
    {{hook_nongc64, hook_nongc64_ext},
     {hook_nongc64_pdep, hook_nongc64_pdep_ext}},
};

/* The same with sampling (in the extended format only). */
static const lua_Alloc sampled_hooks[3][2] = {
    {hook_generic_sampled, hook_generic_pdep_sampled},
    {hook_gc64_sampled, hook_gc64_pdep_sampled},
    {hook_nongc64_sampled, hook_nongc64_pdep_sampled},
};

/* The same for a full profile with the model of snapshots. */
static const lua_Alloc modelled_hooks[3][2] = {
    {hook_generic_modelled, hook_generic_pdep_modelled},
    {hook_gc64_modelled, hook_gc64_pdep_modelled},
    {hook_nongc64_modelled, hook_nongc64_pdep_modelled},
};

/* Whether a family's hook may read the trace offsets its fast path reads
** (tl_cached_place) from the family's table: they are the layout's, or
** trace lines are off (no place is cached). */
static int trace_offsets_match(const struct vm_layout *lay)
{
  const struct vm_layout *k = &vm_candidates[lay->candidate].layout;
  return !lay->tl.ok || (lay->tr_traceno == k->tr_traceno &&
                         lay->tl.tr_spadjust == k->tl.tr_spadjust);
}

lua_Alloc profiler_hook_for(const struct profiler *p)
{
  const struct vm_layout *lay = &p->layout;
  const char *force = getenv("MEMPROF_HOOK");
  int family = 0;
  /* MEMPROF_HOOK=generic: the hook a layout unlike every mode table gets,
  ** so that the benchmark can compare the two on one build. */
  if (force != NULL && strcmp(force, "generic") == 0)
    family = 0;
  else if (!lay->exact || !trace_offsets_match(lay))
    family = 0;
  else if (lay->candidate == VM_CANDIDATE_GC64)
    family = 1;
  else if (lay->candidate == VM_CANDIDATE_NONGC64)
    family = 2;
  if (p->sampler.mean != 0)
    return sampled_hooks[family][writer_fast_pdep != 0];
  if (p->snapshots)
    return modelled_hooks[family][writer_fast_pdep != 0];
  return hooks[family][writer_fast_pdep != 0][p->extended != 0];
}

int profiler_is_hook(lua_Alloc f)
{
  const lua_Alloc *h = &hooks[0][0][0];
  size_t i;
  for (i = 0; i < sizeof(hooks) / sizeof(hooks[0][0][0]); i++)
    if (h[i] == f)
      return 1;
  h = &sampled_hooks[0][0];
  for (i = 0; i < sizeof(sampled_hooks) / sizeof(sampled_hooks[0][0]); i++)
    if (h[i] == f)
      return 1;
  h = &modelled_hooks[0][0];
  for (i = 0; i < sizeof(modelled_hooks) / sizeof(modelled_hooks[0][0]); i++)
    if (h[i] == f)
      return 1;
  return 0;
}

/* What a stream that ends cleanly adds after its last event: a time mark
** and the epilogue, and with collect_at_stop a note. A size cap keeps room
** for them. */
#define FINAL_RECORDS_MAX (1 + ULEB128_MAX + 1)
#define NOTE_MAX (2 + ULEB128_MAX)

/* A note: its kind and a number. */
static void write_note(struct profiler *p, uint8_t kind, uint64_t value)
{
  if (writer_reserve(&p->out, NOTE_MAX)) {
    writer_put_byte(&p->out, RECORD_NOTE);
    writer_put_byte(&p->out, kind);
    writer_put_uleb128(&p->out, value);
  }
}

void profiler_note_collected(struct profiler *p, uint64_t heap)
{
  if (p->state == PROFILER_RECORDING && p->extended)
    write_note(p, NOTE_COLLECTED_AT_STOP, heap);
}

int profiler_write_prologue(struct profiler *p)
{
  uint64_t heap = 0;
  if (p->max_bytes != 0)
    writer_set_budget(&p->out, p->max_bytes - FINAL_RECORDS_MAX -
                                   (p->collect_at_stop ? NOTE_MAX : 0));
  writer_prologue(&p->out, p->extended);
  /* The sampling record, then the heap when the profile starts (nothing
  ** allocates through the VM from here until the hook is installed). */
  if (p->sampler.mean != 0 && writer_reserve(&p->out, 2 + ULEB128_MAX)) {
    writer_put_byte(&p->out, RECORD_SAMPLING);
    writer_put_byte(&p->out, SAMPLING_POISSON_BYTES);
    writer_put_uleb128(&p->out, p->sampler.mean);
  }
  if (p->extended && vm_heap_size(&p->layout, 0, p->g, &heap))
    write_note(p, NOTE_HEAP_AT_START, heap);
  if (p->extended)
    write_note(p, NOTE_COMPILED_CODE, p->attribution);
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
  if (p->state == PROFILER_RECORDING)
    writer_epilogue(&p->out);
  if (p->capped)
    err = writer_close_at(&p->out, p->cut_at);
  else
    err = writer_close(&p->out);
  p->state = PROFILER_HALTED;
  if (p->error == 0)
    p->error = err;
  return p->error;
}
