/*
** Reading the VM's state from inside the allocator hook.
**
** Every function here takes the verified layout and a `safe` flag. With
** safe = 1 (calibration, where offsets are still being checked) each read
** goes through safe_read(), which cannot fault. With safe = 0 (the hook,
** after calibration) reads are plain loads; the functions are inlined with
** a constant flag so the checks cost a few compares. In both modes every
** pointer taken from VM memory is range-checked against what it must point
** into (the thread's stack, the prototype's bytecode, the trace array)
** before it is dereferenced, and every object's type byte is checked.
*/
#ifndef MEMPROF_VM_INSPECT_H
#define MEMPROF_VM_INSPECT_H

#include <stdint.h>
#include <string.h>

#include "gc_object.h"
#include "stream_format.h"
#include "vm_layout.h"

/* Where the VM was when the allocator was called. */
struct vm_site {
  uint8_t source;   /* SOURCE_INTERNAL, SOURCE_LUA, SOURCE_C, SOURCE_TRACE */
  uint8_t ffid;     /* For a built-in reported as C: its function id. */
  uint32_t line;    /* SOURCE_LUA: current line. */
  uint32_t traceno; /* SOURCE_TRACE: trace number. */
  uintptr_t addr;   /* SOURCE_LUA: GCproto; SOURCE_C: function address. */
  uint8_t exit;     /* SOURCE_TRACE: made while the VM leaves the trace. */
  uint8_t compiled; /* SOURCE_LUA: made by trace `traceno` (resolved by
                       trace_lines.c). */
};

/* The function object in the frame slot `frame` (a TValue address). */
VM_INLINE uintptr_t vm_frame_func(const struct vm_layout *lay, int safe,
                                  uintptr_t frame)
{
  uintptr_t fn = 0;
  if (lay->gc64) {
    uint64_t tv;
    if (!vm_u64(safe, frame - TVALUE_SIZE, &tv) ||
        ((int64_t)tv >> 47) != (int32_t)TAG_OF(GCT_FUNC))
      return 0;
    fn = (uintptr_t)(tv & GC64_ADDR_MASK);
  } else {
    uint32_t lo;
    if (!vm_u32(safe, frame, &lo))
      return 0;
    fn = lo;
  }
  return vm_is_gc(lay, safe, fn, GCT_FUNC) ? fn : 0;
}

/* The frame link (PC of a Lua frame, or delta and type). */
VM_INLINE int vm_frame_link(const struct vm_layout *lay, int safe,
                            uintptr_t frame, intptr_t *out)
{
  if (lay->gc64) {
    uint64_t v;
    if (!vm_u64(safe, frame, &v))
      return 0;
    *out = (intptr_t)v;
  } else {
    int32_t v;
    if (!vm_i32(safe, frame + 4, &v))
      return 0;
    *out = (intptr_t)v;
  }
  return 1;
}

/* A frame link as a bytecode pointer (a 32-bit MRef without GC64). */
VM_INLINE uintptr_t vm_link_pc(const struct vm_layout *lay, intptr_t link)
{
  return lay->gc64 ? (uintptr_t)link : (uintptr_t)(uint32_t)link;
}

/* The prototype of a Lua function, checked to be one. */
VM_INLINE uintptr_t vm_func_proto(const struct vm_layout *lay, int safe,
                                  uintptr_t fn)
{
  uintptr_t pc;
  if (!vm_ref(lay, safe, fn + lay->fn_pc, &pc) || pc < lay->pt_size)
    return 0;
  pc -= lay->pt_size;
  return vm_is_gc(lay, safe, pc, GCT_PROTO) ? pc : 0;
}

/* Source line of bytecode position pos (as lj_debug_line computes it). */
VM_INLINE int vm_proto_line(const struct vm_layout *lay, int safe, uintptr_t pt,
                            uint32_t pos, uint32_t sizebc, uint32_t *line)
{
  uintptr_t info;
  int32_t first, numline;
  if (!vm_ref(lay, safe, pt + lay->pt_lineinfo, &info) ||
      !vm_i32(safe, pt + lay->pt_firstline, &first) ||
      !vm_i32(safe, pt + lay->pt_numline, &numline))
    return 0;
  if (info == 0 || pos > sizebc) { /* No debug info: line 0. */
    *line = 0;
    return 1;
  }
  if (pos == sizebc) {
    *line = (uint32_t)(first + numline);
    return 1;
  }
  if (pos == 0) {
    *line = (uint32_t)first;
    return 1;
  }
  pos--;
  if (numline < 256) {
    uint8_t d;
    if (!vm_u8(safe, info + pos, &d))
      return 0;
    *line = (uint32_t)first + d;
  } else if (numline < 65536) {
    uint16_t d;
    if (!vm_u16(safe, info + 2 * (uintptr_t)pos, &d))
      return 0;
    *line = (uint32_t)first + d;
  } else {
    uint32_t d;
    if (!vm_u32(safe, info + 4 * (uintptr_t)pos, &d))
      return 0;
    *line = (uint32_t)first + d;
  }
  return 1;
}

/*
** Line of the instruction before `ins` in prototype pt. ins must point into
** the prototype's bytecode: bc < ins <= bc + sizebc instructions.
*/
VM_INLINE int vm_pc_line(const struct vm_layout *lay, int safe, uintptr_t pt,
                         uintptr_t ins, uint32_t *line)
{
  uint32_t sizebc;
  uintptr_t bc = pt + lay->pt_size;
  if (!vm_u32(safe, pt + lay->pt_sizebc, &sizebc))
    return 0;
  if (ins <= bc || ins > bc + 4 * (uintptr_t)sizebc || (ins & 3) != 0)
    return 0;
  return vm_proto_line(lay, safe, pt, (uint32_t)((ins - bc) / 4 - 1), sizebc,
                       line);
}

/* The thread whose frames are current, and its stack bounds. */
struct vm_thread {
  uintptr_t L, stack, base, limit; /* limit = stack + stacksize slots. */
};

/* cur_L_at is the address of g->cur_L: global_State offsets always come
** from the verified layout (they move between builds of one family),
** while the object layouts may be a family's constants. */
VM_INLINE int vm_current_thread(const struct vm_layout *lay, int safe,
                                uintptr_t cur_L_at, struct vm_thread *th)
{
  uint32_t size;
  if (!vm_ref(lay, safe, cur_L_at, &th->L) || th->L == 0 ||
      !vm_ref(lay, safe, th->L + lay->L_stack, &th->stack) ||
      !vm_ptr(safe, th->L + lay->L_base, &th->base) ||
      !vm_u32(safe, th->L + lay->L_stacksize, &size))
    return 0;
  th->limit = th->stack + (uintptr_t)size * TVALUE_SIZE;
  return 1;
}

/* A frame slot must lie above the bottom frame and inside the stack. */
VM_INLINE int vm_frame_ok(const struct vm_layout *lay,
                          const struct vm_thread *th, uintptr_t frame)
{
  return frame > th->stack + (uintptr_t)lay->fr2 * TVALUE_SIZE &&
         frame < th->limit && ((frame - th->stack) & 7) == 0;
}

/* The saved PC of the C frame (the interpreter's current instruction, +1),
** or 0 when the VM seeded that slot with L ("no PC yet"). */
VM_INLINE uintptr_t vm_top_pc(const struct vm_layout *lay, int safe,
                              const struct vm_thread *th)
{
  uintptr_t cf, pc, cfL;
  if (!vm_ptr(safe, th->L + lay->L_cframe, &cf))
    return 0;
  cf &= ~(uintptr_t)3;
  if (cf == 0 || !vm_ref(lay, safe, cf + lay->cf_pc, &pc) ||
      !vm_ref(lay, safe, cf + lay->cf_L, &cfL) || pc == cfL)
    return 0;
  return pc;
}

/* The line of the last top PC located in a prototype: loops allocate at
** the same instruction again and again. Its owner must clear `pt` when
** that prototype is freed (another may take its address). */
struct vm_line_memo {
  uintptr_t pt, pc;
  uint32_t line;
};

/* The hook's memos: the line of the last top Lua frame's PC, and the
** prototype and line of the last call instruction a built-in was called
** from (a return PC lies in one live prototype's bytecode: its frame's).
** Whoever frees or forgets a memo's pt clears it. */
struct vm_line_memos {
  struct vm_line_memo top, caller;
};

/* A Lua function on top of the stack: its line comes from the C frame's
** saved PC. `memo` may be NULL. */
VM_INLINE int vm_locate_lua_top(const struct vm_layout *lay, int safe,
                                const struct vm_thread *th, uintptr_t fn,
                                struct vm_line_memo *memo, struct vm_site *site)
{
  uintptr_t pc, pt = vm_func_proto(lay, safe, fn);
  if (pt == 0 || (pc = vm_top_pc(lay, safe, th)) == 0)
    return 0;
  if (memo != NULL && pt == memo->pt && pc == memo->pc) {
    site->line = memo->line;
  } else {
    if (!vm_pc_line(lay, safe, pt, pc, &site->line))
      return 0;
    if (memo != NULL) {
      memo->pt = pt;
      memo->pc = pc;
      memo->line = site->line;
    }
  }
  site->source = SOURCE_LUA;
  site->addr = pt;
  return 1;
}

/* A built-in called from Lua is charged to the calling Lua line. `memo`
** may be NULL. */
VM_INLINE int vm_locate_lua_caller(const struct vm_layout *lay, int safe,
                                   const struct vm_thread *th, uintptr_t frame,
                                   intptr_t link, struct vm_line_memo *memo,
                                   struct vm_site *site)
{
  uintptr_t ins = vm_link_pc(lay, link), caller, fn, pt;
  uint32_t call;
  if (memo != NULL && ins == memo->pc && memo->pt != 0) {
    site->line = memo->line;
    site->source = SOURCE_LUA;
    site->addr = memo->pt;
    return 1;
  }
  if (ins < 4 || (ins & 3) != 0 || !vm_u32(safe, ins - 4, &call))
    return 0;
  caller =
      frame - TVALUE_SIZE * (1 + (uintptr_t)lay->fr2 + ((call >> 8) & 0xff));
  if (!vm_frame_ok(lay, th, caller))
    return 0;
  fn = vm_frame_func(lay, safe, caller);
  if (fn == 0 || (pt = vm_func_proto(lay, safe, fn)) == 0)
    return 0;
  if (!vm_pc_line(lay, safe, pt, ins, &site->line))
    return 0;
  if (memo != NULL) {
    memo->pt = pt;
    memo->pc = ins;
    memo->line = site->line;
  }
  site->source = SOURCE_LUA;
  site->addr = pt;
  return 1;
}

/* A built-in called through a continuation frame (a trace stitching around
** a call it cannot compile, or a metamethod) is charged to the Lua line the
** continuation returns to. */
#define FRAME_CONT 2
VM_INLINE int vm_locate_cont_caller(const struct vm_layout *lay, int safe,
                                    const struct vm_thread *th, uintptr_t frame,
                                    intptr_t link, struct vm_site *site)
{
  uintptr_t caller = frame - (uintptr_t)(link & ~(intptr_t)7), fn, pt;
  intptr_t cont;
  if (link <= 0 || !vm_frame_ok(lay, th, caller) ||
      !vm_frame_link(lay, safe, frame - TVALUE_SIZE * (1 + (uintptr_t)lay->fr2),
                     &cont))
    return 0;
  fn = vm_frame_func(lay, safe, caller);
  if (fn == 0 || (pt = vm_func_proto(lay, safe, fn)) == 0 ||
      !vm_pc_line(lay, safe, pt, vm_link_pc(lay, cont), &site->line))
    return 0;
  site->source = SOURCE_LUA;
  site->addr = pt;
  return 1;
}

/* Classifies the top frame of the current thread. ptr is the block being
** reallocated or freed (NULL for a new allocation). */
VM_INLINE void vm_locate_frame(const struct vm_layout *lay, int safe,
                               uintptr_t cur_L_at, uintptr_t ptr,
                               struct vm_line_memos *memo, struct vm_site *site)
{
  struct vm_thread th;
  uintptr_t frame, fn;
  uint8_t ffid;
  intptr_t link;

  site->source = SOURCE_INTERNAL;
  if (!vm_current_thread(lay, safe, cur_L_at, &th))
    return;
  /* The running thread's own stack is being resized: base and top still
  ** point into the old block, so its frames must not be walked. */
  if (ptr != 0 && ptr == th.stack)
    return;
  frame = th.base - TVALUE_SIZE;
  if (!vm_frame_ok(lay, &th, frame) || th.base > th.limit)
    return;
  fn = vm_frame_func(lay, safe, frame);
  if (fn == 0 || !vm_u8(safe, fn + lay->fn_ffid, &ffid))
    return; /* Host code: the bottom frame holds the thread itself. */
  if (ffid == FFID_LUA) {
    vm_locate_lua_top(lay, safe, &th, fn, memo != NULL ? &memo->top : NULL,
                      site);
    return;
  }
  if (ffid == FFID_C) {
    if (vm_ptr(safe, fn + lay->fn_cfunc, &site->addr) && site->addr != 0)
      site->source = SOURCE_C;
    return;
  }
  if (vm_frame_link(lay, safe, frame, &link) &&
      ((link & 3) == 0
           ? vm_locate_lua_caller(lay, safe, &th, frame, link,
                                  memo != NULL ? &memo->caller : NULL, site)
           : (link & 7) == FRAME_CONT &&
                 vm_locate_cont_caller(lay, safe, &th, frame, link, site)))
    return;
  /* A built-in not called from Lua (e.g. through pcall or from C) is
  ** reported as a C function, identified by its id (see BUILTIN_ADDR). */
  site->source = SOURCE_C;
  site->addr = BUILTIN_ADDR(ffid);
  site->ffid = ffid;
}

/* Steps one stack walk may take (frames, dummy and vararg frames). */
#define MAX_WALK_STEPS 80

/* One frame of a call stack, before lines and names are looked up. */
struct vm_raw_frame {
  uintptr_t obj; /* Lua: GCproto; C: function; built-in: BUILTIN_ADDR. */
  uintptr_t pc;  /* Lua: the instruction after the current one, or 0. */
  uint8_t ffid;  /* FFID_LUA, FFID_C, or a built-in's id. */
};

#define FRAME_VARG 3

/* The PC of a Lua function whose frame is below `next` (the frame it
** called), as lj_debug's debug_framepc finds it; 0 if it cannot tell. */
VM_INLINE uintptr_t vm_caller_pc(const struct vm_layout *lay, int safe,
                                 uintptr_t next, intptr_t next_link)
{
  intptr_t cont;
  if ((next_link & 3) == 0)
    return vm_link_pc(lay, next_link);
  if ((next_link & 7) == FRAME_CONT &&
      vm_frame_link(lay, safe, next - TVALUE_SIZE * (1 + (uintptr_t)lay->fr2),
                    &cont))
    return vm_link_pc(lay, cont);
  return 0;
}

/* The frame below `frame`, from its link; 0 if it leaves the stack or
** does not go down. *varg is set for a vararg pseudo-frame. */
VM_INLINE uintptr_t vm_frame_below(const struct vm_layout *lay, int safe,
                                   const struct vm_thread *th, uintptr_t frame,
                                   intptr_t link, int *varg)
{
  uintptr_t below;
  *varg = 0;
  if ((link & 3) == 0) {
    uintptr_t ins = vm_link_pc(lay, link);
    uint32_t call;
    if (ins < 4 || (ins & 3) != 0 || !vm_u32(safe, ins - 4, &call))
      return 0;
    below =
        frame - TVALUE_SIZE * (1 + (uintptr_t)lay->fr2 + ((call >> 8) & 0xff));
  } else {
    if ((link & ~(intptr_t)7) <= 0)
      return 0;
    *varg = (link & 7) == FRAME_VARG;
    below = frame - (uintptr_t)(link & ~(intptr_t)7);
  }
  return below < frame && vm_frame_ok(lay, th, below) ? below : 0;
}

/* One step of the last walk, to recognise the same frame next time. */
struct vm_walk_step {
  uintptr_t frame; /* Address of the frame slot. */
  uint64_t tv;     /* Its function slot, as stored. */
  intptr_t link;   /* Its link. */
  uint8_t kept;    /* The step produced frame `raw` (not skipped). */
  uint8_t varg;    /* It is a vararg pseudo-frame (the next step is not). */
  uintptr_t below; /* The next frame down, 0 at the end. */
  struct vm_raw_frame raw;
};

/* One cached walk: its thread and stack block, and its steps. */
struct vm_walk_entry {
  uintptr_t L, stack, limit; /* The thread and its stack then. */
  uintptr_t top_pc;          /* The top frame's PC in that walk. */
  int top_step;              /* The step whose PC is read afresh, or -1. */
  int frames;                /* The number of frames the walk returned. */
  int max; /* The most it could return (a walk cut there is no other max's). */
  int count;         /* Steps; 0: the entry is empty. */
  unsigned used;     /* When it was last used (cache.clock). */
  uint32_t stack_id; /* The hook's id for its stack, 0: none yet. */
  struct vm_walk_step step[MAX_WALK_STEPS];
};

/*
** The last few walks. A step is the same frame as before when its slot,
** function slot and link are unchanged and the function object is still
** the same: a function in a live frame cannot be freed, and every free
** that is recorded goes through the hook, which calls vm_walk_forget() to
** empty the cache when it frees an object whose address is in `functions`
** (a 64-bit filter of the functions of every entry); a sampled profile,
** whose hook lets most frees through unseen, empties it before each walk.
** Several entries, because loops often allocate from two or three stacks
** in turn.
*/
#define VM_WALK_WAYS 4
struct vm_walk_cache {
  uint64_t functions; /* Filter of the function objects of the steps. */
  unsigned clock;     /* Counts walks, for `used`. */
  int last;           /* The entry of the last walk. */
  struct vm_walk_entry entry[VM_WALK_WAYS];
};

/* The filter bit of a GC object's address (objects are 8-byte aligned). */
VM_INLINE uint64_t vm_walk_bit(uintptr_t obj)
{
  return 1ULL << (((obj >> 3) ^ (obj >> 9)) & 63);
}

/* Empties every entry. */
VM_INLINE void vm_walk_clear(struct vm_walk_cache *cache)
{
  int i;
  for (i = 0; i < VM_WALK_WAYS; i++)
    cache->entry[i].count = 0;
  cache->functions = 0;
}

/* The VM frees or moves the block at ptr: if it may be a function of a
** cached walk, the cache is emptied (another function may take its place). */
VM_INLINE void vm_walk_forget(struct vm_walk_cache *cache, uintptr_t ptr)
{
  if (cache->functions & vm_walk_bit(ptr))
    vm_walk_clear(cache);
}

/* The function slot of a frame as stored (before any check). */
VM_INLINE int vm_frame_tv(const struct vm_layout *lay, int safe,
                          uintptr_t frame, uint64_t *tv)
{
  uint32_t lo;
  if (lay->gc64)
    return vm_u64(safe, frame - TVALUE_SIZE, tv);
  if (!vm_u32(safe, frame, &lo))
    return 0;
  *tv = lo;
  return 1;
}

/* Fills a step for the frame whose function slot and link were read: the
** function, its raw frame and the frame below. */
VM_INLINE void vm_walk_step(const struct vm_layout *lay, int safe,
                            const struct vm_thread *th, uintptr_t next,
                            intptr_t next_link, int skip,
                            struct vm_walk_step *st)
{
  uintptr_t fn = vm_frame_func(lay, safe, st->frame), code;
  struct vm_raw_frame *f = &st->raw;
  uint8_t ffid;
  int varg;
  st->kept = 0;
  f->obj = 0;
  f->pc = 0;
  f->ffid = 0;
  if (fn != 0 && vm_u8(safe, fn + lay->fn_ffid, &ffid)) {
    f->ffid = ffid;
    if (ffid == FFID_C) {
      f->obj = vm_ptr(safe, fn + lay->fn_cfunc, &code) ? code : 0;
    } else {
      /* A built-in is identified by its id, as in vm_locate_frame. */
      f->obj =
          ffid == FFID_LUA ? vm_func_proto(lay, safe, fn) : BUILTIN_ADDR(ffid);
      if (ffid == FFID_LUA && next != 0)
        f->pc = vm_caller_pc(lay, safe, next, next_link);
    }
    st->kept = !skip && f->obj != 0;
  }
  st->below = vm_frame_below(lay, safe, th, st->frame, st->link, &varg);
  st->varg = (uint8_t)varg;
}

/* A step of the last walk found again: the same slot, function and link.
** Its frame's PC and whether it is kept depend on the frame above. */
VM_INLINE void vm_walk_again(const struct vm_layout *lay, int safe,
                             const struct vm_walk_step *old, uintptr_t next,
                             intptr_t next_link, int skip,
                             struct vm_walk_step *st)
{
  *st = *old;
  if (st->raw.ffid == FFID_LUA)
    st->raw.pc = next != 0 ? vm_caller_pc(lay, safe, next, next_link) : 0;
  st->kept = !skip && st->raw.obj != 0;
}

/* Whether every step of entry e is still the same frame, from `frame`
** (the top frame slot) down. */
VM_INLINE int vm_walk_same_steps(const struct vm_layout *lay, int safe,
                                 const struct vm_walk_entry *e, uintptr_t frame)
{
  const struct vm_walk_step *st = e->step;
  int k;
  for (k = 0; k < e->count; k++, st++) {
    uint64_t tv;
    intptr_t link;
    if (st->frame != frame || !vm_frame_tv(lay, safe, frame, &tv) ||
        tv != st->tv || !vm_frame_link(lay, safe, frame, &link) ||
        link != st->link)
      return 0;
    frame = st->below;
  }
  return k > 0;
}

/* Copies the kept frames of entry e to out; returns their number. */
VM_INLINE int vm_walk_output(const struct vm_walk_entry *e,
                             struct vm_raw_frame *out)
{
  int i, n = 0;
  for (i = 0; i < e->count; i++)
    if (e->step[i].kept)
      out[n++] = e->step[i].raw;
  if (e->top_step >= 0)
    out[0].pc = e->top_pc;
  return n;
}

/* The entry that holds the current stack unchanged, or NULL. */
VM_INLINE struct vm_walk_entry *
vm_walk_find(const struct vm_layout *lay, int safe, struct vm_walk_cache *cache,
             const struct vm_thread *th, uintptr_t frame, int max)
{
  int i;
  for (i = 0; i < VM_WALK_WAYS; i++) {
    struct vm_walk_entry *e = &cache->entry[(cache->last + i) % VM_WALK_WAYS];
    if (e->count > 0 && e->max == max && e->step[0].frame == frame &&
        e->L == th->L && e->stack == th->stack && e->limit == th->limit &&
        vm_walk_same_steps(lay, safe, e, frame))
      return e;
  }
  return NULL;
}

/* The entry a new walk goes to: an empty one, else the least recently
** used, never the last walk's (the new walk takes frames from it). */
VM_INLINE struct vm_walk_entry *vm_walk_victim(struct vm_walk_cache *cache)
{
  struct vm_walk_entry *victim = NULL;
  int i;
  for (i = 0; i < VM_WALK_WAYS; i++) {
    struct vm_walk_entry *e = &cache->entry[i];
    if (i == cache->last)
      continue;
    if (victim == NULL || e->count == 0 ||
        (victim->count != 0 && e->used < victim->used))
      victim = e;
    if (e->count == 0)
      break;
  }
  return victim;
}

/*
** The raw call stack of the current thread, innermost first, at most max
** frames, from its base or from `base` if not 0 (a trace's base frame: the
** top frame's PC, from the C frame, is then not its own), as lj_debug
** walks levels: dummy frames (holding the thread) are
** skipped, and a vararg function is seen at its pseudo-frame only.
** Returns the number of frames (0: no stack, e.g. a stack being resized),
** and the cache entry that holds them in *entry.
**
** `cache` holds the last walks (see struct vm_walk_cache). Loops allocate
** from the same few stacks again and again: when an entry's steps are all
** the same frames and the top frame's PC is unchanged too, *same is set
** and `out` is not filled; when only the PC moved, `out` is filled from
** the entry. Otherwise the stack is walked again into another entry, and
** each frame found in the last walk (frames lie at decreasing addresses in
** both) is taken from it: typically only the top frames change, in a deep
** stack that does not.
*/
VM_INLINE int vm_walk_stack_at(const struct vm_layout *lay, int safe,
                               uintptr_t cur_L_at, uintptr_t base,
                               uintptr_t ptr, struct vm_raw_frame *out, int max,
                               struct vm_walk_cache *cache,
                               struct vm_walk_entry **entry, int *same)
{
  struct vm_thread th;
  const struct vm_walk_entry *prev = &cache->entry[cache->last];
  const struct vm_walk_step *old = prev->step;
  struct vm_walk_entry *e;
  struct vm_walk_step *steps;
  uintptr_t frame, next = 0;
  intptr_t next_link = 0;
  int n = 0, skip = 0, k = 0, j = 0, nold, i;
  *same = 0;
  if (!vm_current_thread(lay, safe, cur_L_at, &th) ||
      (ptr != 0 && ptr == th.stack))
    return 0;
  if (base != 0)
    th.base = base;
  frame = th.base - TVALUE_SIZE;
  cache->clock++;
  if ((e = vm_walk_find(lay, safe, cache, &th, frame, max)) != NULL) {
    uintptr_t top_pc = e->top_step >= 0 ? vm_top_pc(lay, safe, &th) : 0;
    cache->last = (int)(e - cache->entry);
    e->used = cache->clock;
    *entry = e;
    if (top_pc == e->top_pc) {
      *same = 1;
      return e->frames;
    }
    e->top_pc = top_pc;
    e->stack_id = 0;
    return vm_walk_output(e, out);
  }
  /* Cached frames are only valid in the same thread and stack block. */
  nold = prev->L == th.L && prev->stack == th.stack && prev->limit == th.limit
             ? prev->count
             : 0;
  e = vm_walk_victim(cache);
  steps = e->step;
  e->L = th.L;
  e->stack = th.stack;
  e->limit = th.limit;
  e->top_step = -1;
  e->stack_id = 0;
  while (n < max && k < MAX_WALK_STEPS && frame != 0) {
    struct vm_walk_step *st = &steps[k];
    uint64_t tv;
    intptr_t link;
    int found;
    while (j < nold && old[j].frame > frame)
      j++;
    found = j < nold && old[j].frame == frame;
    if (!found && !vm_frame_ok(lay, &th, frame))
      break;
    if (!vm_frame_tv(lay, safe, frame, &tv) ||
        !vm_frame_link(lay, safe, frame, &link))
      break;
    if (found && old[j].tv == tv && old[j].link == link) {
      vm_walk_again(lay, safe, &old[j], next, next_link, skip, st);
    } else {
      st->frame = frame;
      st->tv = tv;
      st->link = link;
      vm_walk_step(lay, safe, &th, next, next_link, skip, st);
    }
    if (st->kept && n++ == 0 && st->raw.ffid == FFID_LUA)
      e->top_step = k;
    k++;
    next = frame;
    next_link = link;
    skip = st->varg; /* The real frame of a vararg function follows. */
    frame = st->below;
  }
  e->count = k;
  e->frames = n;
  e->max = max;
  e->top_pc = e->top_step >= 0 ? vm_top_pc(lay, safe, &th) : 0;
  e->used = cache->clock;
  cache->last = (int)(e - cache->entry);
  *entry = e;
  /* Bits of the entry it replaces stay set until the cache is emptied: a
  ** stale bit only costs an early emptying. */
  for (i = 0; i < e->count; i++)
    cache->functions |=
        vm_walk_bit(lay->gc64 ? (uintptr_t)(steps[i].tv & GC64_ADDR_MASK)
                              : (uintptr_t)steps[i].tv);
  return vm_walk_output(e, out);
}

VM_INLINE int vm_walk_stack(const struct vm_layout *lay, int safe,
                            uintptr_t cur_L_at, uintptr_t ptr,
                            struct vm_raw_frame *out, int max,
                            struct vm_walk_cache *cache,
                            struct vm_walk_entry **entry, int *same)
{
  return vm_walk_stack_at(lay, safe, cur_L_at, 0, ptr, out, max, cache, entry,
                          same);
}

/* Full classification of one allocator call. `lay` gives the offsets (it
** may be a family's constant table); `rt` is the verified layout, for what
** is learned at run time: the vmstate classes and the trace offsets. */
/* vm_locate with the VM's state st already read (the hook's dispatcher
** reads it once). */
VM_INLINE void vm_locate_state(const struct vm_layout *lay,
                               const struct vm_layout *rt, int safe,
                               uintptr_t g, int32_t st, uintptr_t ptr,
                               struct vm_line_memos *memo, struct vm_site *site)
{
  site->ffid = 0;
  site->traceno = 0;
  site->exit = site->compiled = 0;
  site->source = SOURCE_INTERNAL;
  /* A trace is running: never walk frames. Traces are numbered from 1;
  ** 0 is what arm64 stores in every trace (it does not store numbers). */
  if (st >= 0) {
    site->source = SOURCE_TRACE;
    site->traceno = (uint32_t)st;
    return;
  }
  if ((uint32_t)~st >= VM_STATE_SLOTS)
    return;
  switch (rt->state_class[~st]) {
  case STATE_WALK:
    vm_locate_frame(lay, safe, g + rt->g_cur_L, ptr, memo, site);
    break;
  case STATE_EXIT: {
    /* A trace exit restores objects the trace had sunk: they belong to
    ** the trace being left. */
    uint32_t parent;
    if (rt->exit_ok && vm_u32(safe, g + rt->g_parent, &parent) && parent > 0 &&
        parent < 65536) {
      site->source = SOURCE_TRACE;
      site->traceno = parent;
      site->exit = 1;
    }
    break;
  }
  default:
    break;
  }
}

VM_INLINE void vm_locate(const struct vm_layout *lay,
                         const struct vm_layout *rt, int safe, uintptr_t g,
                         uintptr_t ptr, struct vm_line_memos *memo,
                         struct vm_site *site)
{
  int32_t st;
  /* (Unreadable: a state past the slots, which is internal.) */
  if (!vm_i32(safe, g + rt->g_vmstate, &st))
    st = -1 - VM_STATE_SLOTS;
  vm_locate_state(lay, rt, safe, g, st, ptr, memo, site);
}

/* What the VM is doing, for an event vm_locate() found internal: the
** kind of its state (INTERNAL_*; a profile in Tarantool's format has a
** table of zeroes). Every internal event's kind follows from the state
** alone, so it is read only for internal events. */
VM_INLINE uint8_t vm_internal_kind(const struct vm_layout *rt, uintptr_t g)
{
  int32_t st;
  memcpy(&st, (const void *)(g + rt->g_vmstate), sizeof(st));
  return (uint32_t)~st < VM_STATE_SLOTS ? rt->internal_kind[~st] : 0;
}

/* The heap's size in bytes (g->gc.total). Returns 1 on success. */
VM_INLINE int vm_heap_size(const struct vm_layout *rt, int safe, uintptr_t g,
                           uint64_t *out)
{
  uint32_t small;
  if (rt->gc64)
    return vm_u64(safe, g + rt->g_gctotal, out);
  if (!vm_u32(safe, g + rt->g_gctotal, &small))
    return 0;
  *out = small;
  return 1;
}

/* Whether vm_locate() would walk frames: the VM runs Lua or C code, and
** the event is charged to a Lua line or a C function (or host code). */
VM_INLINE int vm_in_frames(const struct vm_layout *rt, int safe, uintptr_t g)
{
  int32_t st;
  return vm_i32(safe, g + rt->g_vmstate, &st) && st <= 0 &&
         (uint32_t)~st < VM_STATE_SLOTS && rt->state_class[~st] == STATE_WALK;
}

/* The trace object J->trace[traceno], or 0 (no trace, or out of range). */
VM_INLINE uintptr_t vm_trace_object(const struct vm_layout *lay, int safe,
                                    uintptr_t g, uint32_t traceno)
{
  uintptr_t arr, T;
  uint32_t size;
  if (!lay->trace_ok || !vm_ptr(safe, g + lay->g_trace, &arr) || arr == 0 ||
      !vm_u32(safe, g + lay->g_sizetrace, &size) || traceno >= size ||
      !vm_ref(lay, safe, arr + (uintptr_t)traceno * lay->ref_size, &T))
    return 0;
  return T;
}

/* The trace object for traceno and where it starts (prototype and line).
** Returns the GCtrace address, or 0 if it cannot be verified. */
VM_INLINE uintptr_t vm_trace_start(const struct vm_layout *lay, int safe,
                                   uintptr_t g, uint32_t traceno,
                                   uintptr_t *proto, uint32_t *line)
{
  uintptr_t T = vm_trace_object(lay, safe, g, traceno), pt, startpc;
  uint32_t sizebc;
  uint16_t no;
  if (!vm_is_gc(lay, safe, T, GCT_TRACE) ||
      !vm_u16(safe, T + lay->tr_traceno, &no) || no != traceno ||
      !vm_ref(lay, safe, T + lay->tr_startpt, &pt) ||
      !vm_is_gc(lay, safe, pt, GCT_PROTO) ||
      !vm_ref(lay, safe, T + lay->tr_startpc, &startpc) ||
      !vm_u32(safe, pt + lay->pt_sizebc, &sizebc))
    return 0;
  uintptr_t bc = pt + lay->pt_size;
  if (startpc < bc || startpc >= bc + 4 * (uintptr_t)sizebc ||
      (startpc & 3) != 0)
    return 0;
  if (!vm_proto_line(lay, safe, pt, (uint32_t)((startpc - bc) / 4), sizebc,
                     line))
    return 0;
  *proto = pt;
  return T;
}

/* The chunk name and first line of a prototype. */
VM_INLINE int vm_proto_source(const struct vm_layout *lay, int safe,
                              uintptr_t pt, const char **name, uint32_t *len,
                              int32_t *firstline)
{
  uintptr_t str;
  if (!vm_ref(lay, safe, pt + lay->pt_chunkname, &str) ||
      !vm_is_gc(lay, safe, str, GCT_STR) ||
      !vm_u32(safe, str + lay->str_len, len) ||
      !vm_i32(safe, pt + lay->pt_firstline, firstline))
    return 0;
  *name = (const char *)(str + lay->str_size);
  return 1;
}

#endif
