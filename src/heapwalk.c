/*
** The heap walk (see heapwalk.h).
**
** Objects are found depth first from the roots: a set of the addresses
** seen and a stack of those not yet written, both malloc'd and growing
** with the objects (at most 56 bytes per object, while the set doubles).
** An object's record is written when it is taken from the stack, followed
** by its references. A string has no references: it is written when first
** seen, so that the name of every table field (a key string) precedes the
** field in the file. A weak reference is written but never followed: what
** only weak tables hold is not in the file.
*/
#include "heapwalk.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "heap_objects.h"
#include "heap_traces.h"
#include "lauxlib.h"
#include "vm_inspect.h"
#include "writer.h"

#define OUT_SIZE 65536

/* A buffered file writer of its own: the profile's writer belongs to the
** allocator hook and may be running. */
struct out {
  int fd, err;
  size_t n;
  uint8_t buf[OUT_SIZE];
};

/* A live JIT trace and what holds it: a root trace the prototype it
** starts in, a side trace its root trace (by number). */
struct trace_at {
  uintptr_t side, key, T;
};

struct walk {
  const struct heap_layout *h;
  struct out *out;
  uintptr_t *seen; /* Open addressing, 0 = free. */
  size_t seen_mask, seen_count;
  uintptr_t *todo;
  size_t todo_n, todo_cap;
  size_t peak; /* Bytes of C memory held at most. */
  uint64_t objects, refs;
  uintptr_t mode_mt; /* The last metatable whose __mode was read. */
  uint8_t mode;
  uintptr_t cur;             /* The object being written (0: the roots). */
  uintptr_t g;               /* The VM's global_State. */
  int cd_known;              /* heap_cdata_known: cdata sizes can be read ... */
  struct heap_ctypes ctypes; /* ... through this table. */
  struct trace_at *traces;   /* The live traces by what holds them. */
  size_t ntraces, traces_cap;
  int err;
  char *msg;
  size_t msglen;
};

/* ---- Output ------------------------------------------------------------ */

static void out_flush(struct out *o)
{
  if (o->err == 0 && o->n > 0)
    o->err = writer_write_all(o->fd, o->buf, o->n);
  o->n = 0;
}

static void out_room(struct out *o, size_t need)
{
  if (o->n + need > OUT_SIZE)
    out_flush(o);
}

static void out_byte(struct out *o, uint8_t b)
{
  out_room(o, 1);
  o->buf[o->n++] = b;
}

static void out_uleb(struct out *o, uint64_t v)
{
  out_room(o, ULEB128_MAX);
  o->n = (size_t)(uleb128_put(o->buf + o->n, v) - o->buf);
}

static void out_bytes(struct out *o, const void *p, size_t n)
{
  if (n > OUT_SIZE / 2) {
    out_flush(o);
    if (o->err == 0)
      o->err = writer_write_all(o->fd, p, n);
    return;
  }
  out_room(o, n);
  memcpy(o->buf + o->n, p, n);
  o->n += n;
}

static void out_text(struct out *o, const char *s)
{
  size_t n = strlen(s);
  out_uleb(o, n);
  out_bytes(o, s, n);
}

/* ---- Failures ---------------------------------------------------------- */

static int failed(struct walk *w, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int failed(struct walk *w, int err, const char *fmt, ...)
{
  va_list ap;
  if (w->err != 0)
    return 0;
  va_start(ap, fmt);
  vsnprintf(w->msg, w->msglen, fmt, ap);
  va_end(ap);
  if (err == EINVAL) {
    size_t n = strlen(w->msg);
    if (w->cur != 0)
      snprintf(w->msg + n, w->msglen - n,
               " (in the object of type %u at 0x%llx)",
               vm_load_u8(w->cur + w->h->base.gct), (unsigned long long)w->cur);
    else
      snprintf(w->msg + n, w->msglen - n, " (in the roots)");
  }
  w->err = err;
  return 0;
}

/* ---- The set of objects seen, and those to write ------------------------ */

static size_t memory(const struct walk *w)
{
  return (w->seen_mask + 1) * sizeof(uintptr_t) +
         w->todo_cap * sizeof(uintptr_t) + sizeof(struct out) +
         w->traces_cap * sizeof(struct trace_at);
}

static size_t slot_of(uintptr_t a, size_t mask)
{
  return (size_t)(((uint64_t)(a >> 3) * 0x9e3779b97f4a7c15ULL) >> 20) & mask;
}

static int seen_grow(struct walk *w)
{
  size_t cap = (w->seen_mask + 1) * 2, i;
  uintptr_t *t = calloc(cap, sizeof(uintptr_t));
  if (t == NULL)
    return failed(w, ENOMEM, "out of memory for %zu objects seen",
                  w->seen_count);
  for (i = 0; i <= w->seen_mask; i++) {
    uintptr_t a = w->seen[i];
    if (a != 0) {
      size_t j = slot_of(a, cap - 1);
      while (t[j] != 0)
        j = (j + 1) & (cap - 1);
      t[j] = a;
    }
  }
  /* The old and new tables are both held for a moment. */
  if (memory(w) + cap * sizeof(uintptr_t) > w->peak)
    w->peak = memory(w) + cap * sizeof(uintptr_t);
  free(w->seen);
  w->seen = t;
  w->seen_mask = cap - 1;
  return 1;
}

/* Adds a to the set; returns 1 if it is new. */
static int seen_add(struct walk *w, uintptr_t a)
{
  size_t j;
  if ((w->seen_count + 1) * 2 > w->seen_mask + 1 && !seen_grow(w))
    return 0;
  for (j = slot_of(a, w->seen_mask); w->seen[j] != 0;
       j = (j + 1) & w->seen_mask)
    if (w->seen[j] == a)
      return 0;
  w->seen[j] = a;
  w->seen_count++;
  return 1;
}

static void todo_push(struct walk *w, uintptr_t a)
{
  if (w->todo_n == w->todo_cap) {
    size_t cap = w->todo_cap * 2;
    uintptr_t *t = realloc(w->todo, cap * sizeof(uintptr_t));
    if (t == NULL) {
      failed(w, ENOMEM, "out of memory for %zu objects to write", cap);
      return;
    }
    w->todo = t;
    w->todo_cap = cap;
    if (memory(w) > w->peak)
      w->peak = memory(w);
  }
  w->todo[w->todo_n++] = a;
}

/* ---- Objects ----------------------------------------------------------- */

static void object_header(struct walk *w, uintptr_t o, uint8_t gct,
                          uint64_t size)
{
  out_byte(w->out, HEAP_RECORD_OBJECT);
  out_uleb(w->out, o);
  out_byte(w->out, gct);
  out_uleb(w->out, size);
  w->objects++;
}

static void write_string(struct walk *w, uintptr_t s)
{
  const struct vm_layout *lay = &w->h->base;
  uint32_t len = vm_load_u32(s + lay->str_len);
  uint32_t keep = len < HEAP_STRING_KEEP ? len : HEAP_STRING_KEEP;
  object_header(w, s, GCT_STR, heap_str_size(w->h, len));
  out_uleb(w->out, len);
  out_uleb(w->out, keep);
  out_bytes(w->out, (const void *)(s + lay->str_size), keep);
}

/* Whether o reads as a GC object of type gct (or, gct 0, of any type a
** reference can hold; a trace only when asked for). Objects are 8-byte
** aligned, but for the empty string, which global_State holds (only 4-byte
** aligned without GC64). */
static int check_object(struct walk *w, uintptr_t o, uint8_t gct)
{
  uint8_t t;
  if (o == 0 || (o & 3) != 0)
    return failed(w, EINVAL,
                  "an object's address 0x%llx is not aligned: the heap "
                  "layout does not hold here",
                  (unsigned long long)o);
  t = vm_load_u8(o + w->h->base.gct);
  if ((o & 7) != 0 && t != GCT_STR)
    return failed(w, EINVAL,
                  "an object's address 0x%llx is not 8-byte aligned: the "
                  "heap layout does not hold here",
                  (unsigned long long)o);
  if ((gct != 0 && t != gct) || t < GCT_STR || t > GCT_UDATA ||
      (t == GCT_TRACE && gct != GCT_TRACE))
    return failed(w, EINVAL,
                  "the object at 0x%llx reads type %u, its reference says "
                  "%u: the heap layout does not hold here",
                  (unsigned long long)o, t, gct);
  return 1;
}

/* Notes a reference's target: a new object is written (a string) or kept
** to write. */
static void visit(struct walk *w, uintptr_t o, uint8_t gct)
{
  if (w->err != 0 || !check_object(w, o, gct) || !seen_add(w, o))
    return;
  if (vm_load_u8(o + w->h->base.gct) == GCT_STR)
    write_string(w, o);
  else
    todo_push(w, o);
}

/* A reference's record up to its name; the caller writes the name. A
** strong reference visits its target first. */
static void ref(struct walk *w, uintptr_t from, uintptr_t to, uint8_t gct,
                int kind, int weak)
{
  if (!weak || gct == GCT_STR) /* Strings are never weak. */
    visit(w, to, gct);
  out_byte(w->out, HEAP_RECORD_REF);
  out_uleb(w->out, from);
  out_uleb(w->out, to);
  out_byte(w->out,
           (uint8_t)(kind | (weak && gct != GCT_STR ? HEAP_REF_WEAK : 0)));
  w->refs++;
}

/* A reference through a GCRef (0: none). */
static void ref_gcref(struct walk *w, uintptr_t from, uintptr_t to, int kind)
{
  if (to != 0 && check_object(w, to, 0))
    ref(w, from, to, vm_load_u8(to + w->h->base.gct), kind, 0);
}

/* ---- Tables ------------------------------------------------------------ */

#define WEAK_KEYS 1
#define WEAK_VALUES 2

/* The weak mode of a table with metatable mt: its raw __mode field, read
** without a metamethod. */
static uint8_t weak_mode(struct walk *w, uintptr_t mt)
{
  const struct heap_layout *h = w->h;
  uintptr_t node, key, val;
  uint32_t i, hmask;
  uint8_t gct, mode = 0;
  if (mt == 0)
    return 0;
  if (mt == w->mode_mt)
    return w->mode;
  node = vm_load_ref(&h->base, mt + h->tab_node);
  hmask = vm_load_u32(mt + h->tab_hmask);
  for (i = 0; hmask != 0 && i <= hmask; i++) {
    uintptr_t n = node + (uintptr_t)i * h->node_size;
    if (vm_load_gc(&h->base, n + h->node_key, &key, &gct) && gct == GCT_STR &&
        heap_str_is(h, key, "__mode", 6) &&
        vm_load_gc(&h->base, n + h->node_val, &val, &gct) && gct == GCT_STR) {
      uint32_t k, len = vm_load_u32(val + h->base.str_len);
      const char *s = (const char *)(val + h->base.str_size);
      for (k = 0; k < len; k++)
        mode |= s[k] == 'k' ? WEAK_KEYS : s[k] == 'v' ? WEAK_VALUES : 0;
      break;
    }
  }
  w->mode_mt = mt;
  w->mode = mode;
  return mode;
}

static uint64_t zigzag(int64_t v)
{
  return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/* A value under a number key: an integer index or the number's bits. */
static void ref_number_key(struct walk *w, uintptr_t t, uintptr_t val,
                           uint8_t gct, int weak, uint64_t bits)
{
  double d;
  memcpy(&d, &bits, sizeof(d));
  if (d == d && d >= -9007199254740992.0 && d <= 9007199254740992.0 &&
      d == (double)(int64_t)d) {
    ref(w, t, val, gct, HREF_INDEX, weak);
    out_uleb(w->out, zigzag((int64_t)d));
  } else {
    ref(w, t, val, gct, HREF_BY_NUMBER, weak);
    out_bytes(w->out, &bits, sizeof(bits)); /* Little-endian IEEE 754. */
  }
}

static void table_node(struct walk *w, uintptr_t t, uintptr_t n, uint8_t weak)
{
  const struct heap_layout *h = w->h;
  uintptr_t key, val;
  uint8_t kgct = 0, vgct = 0;
  uint32_t ktag = vm_load_tv(&h->base, n + h->node_key, &key);
  int kgc = vm_load_gc(&h->base, n + h->node_key, &key, &kgct);
  int vgc = vm_load_gc(&h->base, n + h->node_val, &val, &vgct);
  int wv = (weak & WEAK_VALUES) != 0;
  uint64_t kbits;
  if (vm_load_tv(&h->base, n + h->node_val, &val) == TAG_NIL)
    return; /* A free node, or a key whose value was cleared. */
  if (kgc)
    ref(w, t, key, kgct, HREF_KEY, (weak & WEAK_KEYS) != 0);
  if (!vgc)
    return;
  kbits = vm_load_u64(n + h->node_key);
  if (kgc && kgct == GCT_STR) {
    ref(w, t, val, vgct, HREF_FIELD, wv);
    out_uleb(w->out, key);
  } else if (kgc) {
    ref(w, t, val, vgct, HREF_BY_KEY, wv);
    out_uleb(w->out, key);
  } else if (ktag == TAG_TRUE || ktag == TAG_FALSE) {
    ref(w, t, val, vgct, HREF_BY_BOOL, wv);
    out_byte(w->out, ktag == TAG_TRUE);
  } else if (ktag == TAG_LIGHTUD) {
    ref(w, t, val, vgct, HREF_BY_LIGHTUD, wv);
    out_uleb(w->out, key); /* The pointer's bits a TValue keeps. */
  } else if (ktag < TAG_NUMX) {
    ref_number_key(w, t, val, vgct, wv, kbits);
  } else if (ktag == TAG_NUMX) { /* A dual-number build's integer. */
    ref(w, t, val, vgct, HREF_INDEX, wv);
    out_uleb(w->out, zigzag((int32_t)(uint32_t)kbits));
  } else {
    failed(w, EINVAL, "a key of the table at 0x%llx has the unknown tag 0x%x",
           (unsigned long long)t, ktag);
  }
}

static void walk_table(struct walk *w, uintptr_t t)
{
  const struct heap_layout *h = w->h;
  uint32_t asize = vm_load_u32(t + h->tab_asize);
  uint32_t hmask = vm_load_u32(t + h->tab_hmask), i;
  uintptr_t mt = vm_load_ref(&h->base, t + h->tab_mt);
  uintptr_t array = vm_load_ref(&h->base, t + h->tab_array);
  uintptr_t node = vm_load_ref(&h->base, t + h->tab_node), val;
  uint8_t weak, gct;
  if (mt != 0 && !check_object(w, mt, GCT_TAB))
    return;
  weak = weak_mode(w, mt);
  object_header(w, t, GCT_TAB, heap_table_size(h, t));
  out_uleb(w->out, asize);
  out_uleb(w->out, hmask != 0 ? (uint64_t)hmask + 1 : 0);
  out_byte(w->out, weak);
  ref_gcref(w, t, mt, HREF_METATABLE);
  for (i = 0; i < asize && w->err == 0; i++) {
    if (vm_load_gc(&h->base, array + (uintptr_t)i * TVALUE_SIZE, &val, &gct)) {
      ref(w, t, val, gct, HREF_INDEX, (weak & WEAK_VALUES) != 0);
      out_uleb(w->out, zigzag(i));
    }
  }
  for (i = 0; hmask != 0 && i <= hmask && w->err == 0; i++)
    table_node(w, t, node + (uintptr_t)i * h->node_size, weak);
}

/* ---- Functions, upvalues, prototypes ----------------------------------- */

static void walk_function(struct walk *w, uintptr_t fn)
{
  const struct heap_layout *h = w->h;
  const struct vm_layout *lay = &h->base;
  uint8_t ffid = vm_load_u8(fn + lay->fn_ffid), gct;
  uint32_t nup = vm_load_u8(fn + h->fn_nupvalues), i;
  uintptr_t env = vm_load_ref(&h->base, fn + h->fn_env), val, cf;
  if (ffid == FFID_LUA) {
    uintptr_t pt = vm_func_proto(lay, 0, fn);
    if (pt == 0) {
      failed(w, EINVAL, "the Lua function at 0x%llx has no prototype",
             (unsigned long long)fn);
      return;
    }
    object_header(w, fn, GCT_FUNC, h->fnl_uv + (uint64_t)nup * lay->ref_size);
    out_byte(w->out, ffid);
    out_uleb(w->out, nup);
    ref_gcref(w, fn, env, HREF_ENV);
    ref(w, fn, pt, GCT_PROTO, HREF_PROTO, 0);
    for (i = 0; i < nup && w->err == 0; i++) {
      uintptr_t uv = vm_load_ref(&h->base, fn + h->fnl_uv + i * lay->ref_size);
      ref(w, fn, uv, GCT_UPVAL, HREF_UPVALUE, 0);
      out_uleb(w->out, i + 1);
      out_text(w->out, heap_upvalue_name(h, pt, i));
    }
    return;
  }
  object_header(w, fn, GCT_FUNC, h->fnc_up + (uint64_t)nup * TVALUE_SIZE);
  out_byte(w->out, ffid);
  out_uleb(w->out, nup);
  cf = (uintptr_t)vm_load_u64(fn + lay->fn_cfunc);
  out_uleb(w->out, cf);
  ref_gcref(w, fn, env, HREF_ENV);
  for (i = 0; i < nup && w->err == 0; i++)
    if (vm_load_gc(&h->base, fn + h->fnc_up + i * TVALUE_SIZE, &val, &gct)) {
      ref(w, fn, val, gct, HREF_UPVALUE, 0);
      out_uleb(w->out, i + 1);
      out_text(w->out, "");
    }
}

static void walk_upvalue(struct walk *w, uintptr_t uv)
{
  const struct heap_layout *h = w->h;
  uintptr_t v = vm_load_ref(&h->base, uv + h->uv_v), val;
  uint8_t gct;
  object_header(w, uv, GCT_UPVAL, h->uv_size);
  if (v != 0 && vm_load_gc(&h->base, v, &val, &gct))
    ref(w, uv, val, gct, HREF_UPVALUE_VALUE, 0);
}

static int trace_less(const struct trace_at *a, uintptr_t side, uintptr_t key)
{
  return a->side < side || (a->side == side && a->key < key);
}

static int trace_cmp(const void *a, const void *b)
{
  const struct trace_at *x = a, *y = b;
  return trace_less(x, y->side, y->key) ? -1 : trace_less(y, x->side, x->key);
}

/* The traces that `from` holds as LuaJIT's collector marks them: a
** prototype (side 0, key its address) its root traces, a root trace (side
** 1, key its number) its side traces. */
static void held_traces(struct walk *w, uintptr_t from, uintptr_t side,
                        uintptr_t key)
{
  size_t lo = 0, hi = w->ntraces;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (trace_less(&w->traces[mid], side, key))
      lo = mid + 1;
    else
      hi = mid;
  }
  for (; lo < w->ntraces && w->traces[lo].side == side &&
         w->traces[lo].key == key && w->err == 0;
       lo++)
    ref(w, from, w->traces[lo].T, GCT_TRACE, HREF_TRACE, 0);
}

static void walk_proto(struct walk *w, uintptr_t pt)
{
  const struct heap_layout *h = w->h;
  const struct vm_layout *lay = &h->base;
  uintptr_t k = vm_load_ref(&h->base, pt + h->pt_k);
  uint32_t nkgc = vm_load_u32(pt + h->pt_sizekgc), i;
  object_header(w, pt, GCT_PROTO, vm_load_u32(pt + h->pt_sizept));
  out_uleb(w->out, vm_load_u32(pt + lay->pt_firstline));
  out_uleb(w->out, vm_load_u32(pt + lay->pt_numline));
  ref_gcref(w, pt, vm_load_ref(&h->base, pt + lay->pt_chunkname),
            HREF_CHUNKNAME);
  for (i = 0; i < nkgc && w->err == 0; i++) {
    uintptr_t o = vm_load_ref(&h->base, k - (uintptr_t)(i + 1) * lay->ref_size);
    if (o != 0 && check_object(w, o, 0)) {
      ref(w, pt, o, vm_load_u8(o + lay->gct), HREF_CONSTANT, 0);
      out_uleb(w->out, i);
    }
  }
  held_traces(w, pt, 0, pt);
}

/* Whether a trace's constant o reads as an object: any type a reference
** can hold, or a trace (a stitched trace holds itself). */
static int check_constant(struct walk *w, uintptr_t o)
{
  if (o != 0 && (o & 7) == 0 && vm_load_u8(o + w->h->base.gct) == GCT_TRACE)
    return check_object(w, o, GCT_TRACE);
  return check_object(w, o, 0);
}

/* A trace: its start prototype, the objects of its IR constants (each
** named by its IR reference as jit.util.tracek takes it, negated) and, a
** root trace, its side traces. */
static void walk_trace(struct walk *w, uintptr_t T)
{
  const struct vm_layout *lay = &w->h->base;
  uint32_t next = 0, at;
  uint16_t no = 0;
  uintptr_t o;
  int got;
  vm_u16(1, T + lay->tr_traceno, &no);
  object_header(w, T, GCT_TRACE, heap_trace_size(w->h, T));
  out_uleb(w->out, no);
  ref_gcref(w, T, vm_load_ref(&w->h->base, T + lay->tr_startpt), HREF_PROTO);
  while (w->err == 0 &&
         (got = heap_trace_next_kgc(w->h, T, &next, &at, &o)) > 0)
    if (o != 0 && check_constant(w, o)) {
      ref(w, T, o, vm_load_u8(o + lay->gct), HREF_CONSTANT, 0);
      out_uleb(w->out, HT_REF_BIAS - at);
    }
  if (w->err == 0 && got < 0)
    failed(w, EINVAL, "a constant of trace %u does not read as one", no);
  held_traces(w, T, 1, no);
}

/* ---- Threads ----------------------------------------------------------- */

/* The stack slots [lo, hi) of thread L, named by frame level (0: none) and
** by the locals of prototype pt at position pos (pt 0: temporaries). */
static void stack_slots(struct walk *w, uintptr_t L, uintptr_t stack,
                        uintptr_t lo, uintptr_t hi, uint32_t level,
                        uintptr_t pt, uint32_t pos, const char *all)
{
  const struct heap_layout *h = w->h;
  uintptr_t s, val;
  uint8_t gct;
  char name[128];
  for (s = lo; s < hi && w->err == 0; s += TVALUE_SIZE) {
    if (!vm_load_gc(&h->base, s, &val, &gct))
      continue;
    if (all != NULL)
      snprintf(name, sizeof(name), "%s", all);
    else if (pt == 0 ||
             !heap_local_name(h, pt, pos, (uint32_t)((s - lo) / TVALUE_SIZE),
                              name, sizeof(name)))
      name[0] = '\0';
    ref(w, L, val, gct, HREF_STACK, 0);
    out_uleb(w->out, (s - stack) / TVALUE_SIZE);
    out_uleb(w->out, level);
    out_text(w->out, name);
  }
}

/* The position of the instruction a Lua frame runs (from the link of the
** frame above it), or -1. */
static int64_t frame_pos(const struct vm_layout *lay, uintptr_t pt,
                         uintptr_t next, intptr_t next_link)
{
  uintptr_t pc = vm_caller_pc(lay, 0, next, next_link);
  uintptr_t bc = pt + lay->pt_size;
  uint32_t sizebc = vm_load_u32(pt + lay->pt_sizebc);
  if (pc <= bc || pc > bc + 4 * (uintptr_t)sizebc || (pc & 3) != 0)
    return -1;
  return (int64_t)((pc - bc) / 4 - 1);
}

/* The line a Lua frame of prototype pt runs at position pos (pos -1: not
** known), or 0: not known (no debug info either). */
static uint32_t frame_line(const struct vm_layout *lay, uintptr_t pt,
                           int64_t pos)
{
  uint32_t line = 0;
  if (pos < 0 || !vm_proto_line(lay, 0, pt, (uint32_t)pos,
                                vm_load_u32(pt + lay->pt_sizebc), &line))
    return 0;
  return line;
}

static void walk_thread(struct walk *w, uintptr_t L)
{
  const struct heap_layout *h = w->h;
  const struct vm_layout *lay = &h->base;
  struct vm_thread th;
  uintptr_t top, upper, frame, next = 0;
  intptr_t next_link = 0;
  uint32_t size = vm_load_u32(L + lay->L_stacksize), level = 1, steps = 0;
  uint32_t line = 0;
  int skip = 0;
  th.L = L;
  th.stack = vm_load_ref(&h->base, L + lay->L_stack);
  th.base = (uintptr_t)vm_load_u64(L + lay->L_base);
  top = (uintptr_t)vm_load_u64(L + lay->L_top);
  th.limit = th.stack + (uintptr_t)size * TVALUE_SIZE;
  if (th.stack == 0 || top < th.stack || top > th.limit || th.base > top ||
      th.base < th.stack) {
    failed(w, EINVAL,
           "the thread at 0x%llx has a stack that does not hold its base "
           "and top",
           (unsigned long long)L);
    return;
  }
  object_header(w, L, GCT_THREAD, h->L_size + (uint64_t)size * TVALUE_SIZE);
  out_uleb(w->out, size);
  out_uleb(w->out, (top - th.stack) / TVALUE_SIZE);
  ref_gcref(w, L, vm_load_ref(&h->base, L + h->L_env), HREF_ENV);
  upper = top;
  frame = th.base - TVALUE_SIZE;
  while (w->err == 0 && vm_frame_ok(lay, &th, frame) && frame < upper &&
         steps++ < size) {
    uintptr_t fn = vm_frame_func(lay, 0, frame), pt = 0, fslot, below;
    intptr_t link;
    int64_t pos = -1;
    int varg;
    if (fn == 0 || !vm_frame_link(lay, 0, frame, &link))
      break;
    if (!skip && next != 0 && vm_load_u8(fn + lay->fn_ffid) == FFID_LUA &&
        (pt = vm_func_proto(lay, 0, fn)) != 0)
      pos = frame_pos(lay, pt, next, next_link);
    stack_slots(w, L, th.stack, frame + TVALUE_SIZE, upper, level,
                pos >= 0 ? pt : 0, pos >= 0 ? (uint32_t)pos : 0,
                skip ? "(vararg)" : NULL);
    fslot = lay->fr2 ? frame - TVALUE_SIZE : frame;
    /* A vararg frame's lower part (skip) is the same call: its line. */
    if (!skip)
      line = frame_line(lay, pt, pos);
    ref(w, L, fn, GCT_FUNC, HREF_FRAME_FUNCTION, 0);
    out_uleb(w->out, (fslot - th.stack) / TVALUE_SIZE);
    out_uleb(w->out, level);
    out_uleb(w->out, line);
    upper = fslot;
    below = vm_frame_below(lay, 0, &th, frame, link, &varg);
    if (!varg)
      level++;
    skip = varg;
    next = frame;
    next_link = link;
    if (below == 0)
      break;
    frame = below;
  }
  stack_slots(w, L, th.stack, th.stack, upper, 0, 0, 0, NULL);
}

static void walk_userdata(struct walk *w, uintptr_t ud)
{
  const struct heap_layout *h = w->h;
  uint32_t len = vm_load_u32(ud + h->ud_len);
  uintptr_t mt = vm_load_ref(&h->base, ud + h->ud_mt);
  object_header(w, ud, GCT_UDATA, (uint64_t)h->ud_size + len);
  out_uleb(w->out, len);
  if (mt != 0 && check_object(w, mt, GCT_TAB))
    ref_gcref(w, ud, mt, HREF_METATABLE);
  ref_gcref(w, ud, vm_load_ref(&h->base, ud + h->ud_env), HREF_ENV);
}

static void walk_object(struct walk *w, uintptr_t o)
{
  switch (vm_load_u8(o + w->h->base.gct)) {
  case GCT_TAB:
    walk_table(w, o);
    break;
  case GCT_FUNC:
    walk_function(w, o);
    break;
  case GCT_UPVAL:
    walk_upvalue(w, o);
    break;
  case GCT_PROTO:
    walk_proto(w, o);
    break;
  case GCT_THREAD:
    walk_thread(w, o);
    break;
  case GCT_UDATA:
    walk_userdata(w, o);
    break;
  case GCT_TRACE:
    walk_trace(w, o);
    break;
  case GCT_CDATA: /* 0 if its C type cannot be read: unknown. */
    object_header(w, o, GCT_CDATA,
                  w->cd_known ? heap_cdata_size(w->h, &w->ctypes, o) : 0);
    break;
  default:
    failed(w, EINVAL, "the object at 0x%llx has an unexpected type",
           (unsigned long long)o);
  }
}

/* ---- Roots ------------------------------------------------------------- */

static void root(struct walk *w, uintptr_t o, const char *name)
{
  if (o == 0 || w->err != 0 || !check_object(w, o, 0))
    return;
  ref(w, 0, o, vm_load_u8(o + w->h->base.gct), HREF_ROOT, 0);
  out_text(w->out, name);
}

/* The metatable of the value on top of L's stack (popped), as a root. */
static void basemt_root(struct walk *w, lua_State *L, const char *name)
{
  if (lua_getmetatable(L, -1)) {
    root(w, (uintptr_t)lua_topointer(L, -1), name);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* The roots, through the public API: pushing values that exist already
** allocates nothing (a C function has LUA_MINSTACK free slots). */
static void roots(struct walk *w, lua_State *L)
{
  const struct heap_layout *h = w->h;
  uintptr_t g = vm_load_ref(&h->base, (uintptr_t)L + h->base.L_glref);
  lua_Debug ar;
  root(w, (uintptr_t)lua_topointer(L, LUA_REGISTRYINDEX), "registry");
  root(w, vm_load_ref(&h->base, g + h->g_mainth), "main thread");
  root(w, (uintptr_t)L, "running thread");
  lua_pushnil(L);
  basemt_root(w, L, "metatable of nil");
  lua_pushboolean(L, 0);
  basemt_root(w, L, "metatable of booleans");
  lua_pushnumber(L, 0);
  basemt_root(w, L, "metatable of numbers");
  lua_pushlightuserdata(L, NULL);
  basemt_root(w, L, "metatable of light userdata");
  lua_pushlstring(L, "", 0); /* The VM's own empty string. */
  basemt_root(w, L, "metatable of strings");
  lua_pushthread(L);
  basemt_root(w, L, "metatable of threads");
  if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "f", &ar))
    basemt_root(w, L, "metatable of functions");
}

/* The roots read from the VM's memory (another process's VM: no API call
** can run there), under the names the API roots have. */
static void roots_at(struct walk *w, const struct heap_roots *r)
{
  static const char *const names[HEAP_BASEMT_N] = {
      "metatable of nil",      "metatable of booleans",
      "metatable of numbers",  "metatable of light userdata",
      "metatable of strings",  "metatable of threads",
      "metatable of functions"};
  int i;
  root(w, r->registry, "registry");
  root(w, r->main, "main thread");
  root(w, r->running, "running thread");
  for (i = 0; i < HEAP_BASEMT_N; i++)
    root(w, r->basemt[i], names[i]);
}

/* ---- The file ---------------------------------------------------------- */

/* The JIT traces alive in L's VM, plus one (0: unknown, the trace array
** was not verified). With a verified trace layout they are kept, sorted
** by what holds them, for the walk to visit from their holders. */
static uint64_t traces(struct walk *w, uintptr_t g)
{
  const struct vm_layout *lay = &w->h->base;
  uint32_t size, i;
  uint64_t n = 0;
  if (!lay->trace_ok || !vm_u32(1, g + lay->g_sizetrace, &size))
    return 0;
  if (w->h->tr_ok && size > 1 &&
      (w->traces = malloc((size_t)size * sizeof(*w->traces))) == NULL) {
    failed(w, ENOMEM, "out of memory for %u traces", size);
    return 0;
  }
  if (w->traces != NULL)
    w->traces_cap = size;
  for (i = 1; i < size; i++) {
    uintptr_t T = vm_trace_object(lay, 1, g, i), pt = 0;
    uint16_t no, root;
    if (T != 0 && vm_is_gc(lay, 1, T, GCT_TRACE) &&
        vm_u16(1, T + lay->tr_traceno, &no) && no == i) {
      n++;
      if (w->traces != NULL && vm_u16(1, T + w->h->tr_root, &root) &&
          root != 0) {
        struct trace_at *t = &w->traces[w->ntraces++];
        t->side = 1, t->key = root, t->T = T;
      } else if (w->traces != NULL) {
        struct trace_at *t = &w->traces[w->ntraces++];
        if (!vm_ref(lay, 1, T + lay->tr_startpt, &pt) ||
            !vm_is_gc(lay, 1, pt, GCT_PROTO))
          failed(w, EINVAL, "trace %u's start prototype does not read as one",
                 i);
        t->side = 0, t->key = pt, t->T = T;
      }
    }
  }
  if (w->ntraces > 0)
    qsort(w->traces, w->ntraces, sizeof(*w->traces), trace_cmp);
  if (memory(w) > w->peak)
    w->peak = memory(w);
  return n + 1;
}

static void header(struct walk *w, const struct heap_profile_note *note)
{
  time_t now;
  out_bytes(w->out, HEAP_MAGIC, 3);
  out_byte(w->out, HEAP_VERSION);
  out_uleb(w->out, (w->h->base.gc64 ? HEAP_FLAG_GC64 : 0) |
                       (w->cd_known ? 0 : HEAP_FLAG_CDATA_UNKNOWN));
  out_uleb(w->out, note != NULL && note->running);
  if (note != NULL && note->running)
    out_uleb(w->out, note->written);
  out_uleb(w->out, traces(w, w->g));
  out_uleb(w->out, w->h->tr_ok);
  if (!w->h->tr_ok)
    out_text(w->out, w->h->tr_why);
  now = time(NULL);
  out_uleb(w->out, now > 0 ? (uint64_t)now : 0);
  out_uleb(w->out,
           note != NULL && note->pid != 0 ? note->pid : (uint64_t)getpid());
}

static void epilogue(struct walk *w)
{
  out_byte(w->out, HEAP_RECORD_END);
  out_uleb(w->out, w->objects);
  out_uleb(w->out, w->refs);
  out_uleb(w->out, w->peak);
  out_bytes(w->out, HEAP_END_MAGIC, 3);
}

#define FIRST_SEEN 4096
#define FIRST_TODO 1024

/* The walk from L's VM's roots: through the API (r NULL) or as read. */
static int walk_from(lua_State *L, const struct heap_roots *r,
                     const struct heap_layout *h, int fd,
                     const struct heap_profile_note *note, char *msg,
                     size_t len)
{
  struct walk w;
  memset(&w, 0, sizeof(w));
  w.h = h;
  w.msg = msg;
  w.msglen = len;
  w.out = malloc(sizeof(*w.out));
  w.seen = calloc(FIRST_SEEN, sizeof(uintptr_t));
  w.todo = malloc(FIRST_TODO * sizeof(uintptr_t));
  w.seen_mask = FIRST_SEEN - 1;
  w.todo_cap = FIRST_TODO;
  if (w.out == NULL || w.seen == NULL || w.todo == NULL) {
    failed(&w, ENOMEM, "out of memory for the heap walk");
  } else {
    w.out->fd = fd;
    w.out->err = 0;
    w.out->n = 0;
    w.peak = memory(&w);
    w.g = vm_load_ref(&h->base, (uintptr_t)L + h->base.L_glref);
    w.cd_known = heap_cdata_known(h, w.g, &w.ctypes);
    header(&w, note);
    if (r != NULL)
      roots_at(&w, r);
    else
      roots(&w, L);
    while (w.err == 0 && w.todo_n > 0 && w.out->err == 0) {
      w.cur = w.todo[--w.todo_n];
      walk_object(&w, w.cur);
    }
    if (w.err == 0) {
      epilogue(&w);
      out_flush(w.out);
    }
    if (w.err == 0 && w.out->err != 0) {
      w.err = w.out->err; /* No message: the caller names the file. */
      if (len > 0)
        msg[0] = '\0';
    }
  }
  free(w.out);
  free(w.seen);
  free(w.todo);
  free(w.traces);
  return w.err;
}

int heapwalk_write(lua_State *L, const struct heap_layout *h, int fd,
                   const struct heap_profile_note *note, char *msg, size_t len)
{
  return walk_from(L, NULL, h, fd, note, msg, len);
}

int heapwalk_write_at(uintptr_t L, const struct heap_roots *r,
                      const struct heap_layout *h, int fd,
                      const struct heap_profile_note *note, char *msg,
                      size_t len)
{
  return walk_from((lua_State *)L, r, h, fd, note, msg, len);
}
