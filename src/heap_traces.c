/*
** JIT traces in the heap walk (see heap_traces.h): reading a trace's GC
** constants and size, and verifying that reading in a throw-away VM.
*/
#include "heap_traces.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "lauxlib.h"
#include "vm_inspect.h"

/* IR types (lj_ir.h's IRTDEF, the same in every supported build) whose
** constants take two IR slots (irt_is64): NUM, I64, U64, P64 and
** LIGHTUD, and with GC64 the GC types STR, THREAD, PROTO, FUNC, CDATA,
** TAB and UDATA. */
#define IRT_BIT(t) (1u << (t))
#define IS64_BASE                                                              \
  (IRT_BIT(14) | IRT_BIT(21) | IRT_BIT(22) | IRT_BIT(9) | IRT_BIT(3))
#define IS64_GC                                                                \
  (IRT_BIT(4) | IRT_BIT(6) | IRT_BIT(7) | IRT_BIT(8) | IRT_BIT(10) |           \
   IRT_BIT(11) | IRT_BIT(12))

/* The constant ops follow each other in lj_ir.h's IRDEF of every
** supported build: KPRI KINT KGC KPTR KKPTR KNULL KNUM KINT64 KSLOT. */
#define KGC_TO_KPRI 2
#define KGC_TO_KNULL 3
#define KGC_TO_KSLOT 6

/* ---- Reading ------------------------------------------------------------ */

/* The IR of trace T and its lowest constant. */
static int trace_ir(const struct heap_layout *h, uintptr_t T, uintptr_t *ir,
                    uint32_t *nk)
{
  return vm_ptr(1, T + h->tr_ir, ir) && *ir != 0 &&
         vm_u32(1, T + h->tr_nk, nk) && *nk < HT_REF_BIAS &&
         HT_REF_BIAS - *nk <= HT_MAX_CONSTANTS;
}

/* The op and type of IR instruction `ref`. */
static int ir_ot(uintptr_t ir, uint32_t ref, uint8_t *o, uint8_t *t)
{
  uintptr_t at = ir + (uintptr_t)HT_IRINS_SIZE * ref;
  return vm_u8(1, at + 4, t) && vm_u8(1, at + 5, o);
}

/* The slots the constant of op o and type t takes. */
static uint32_t slots(const struct heap_layout *h, uint8_t o, uint8_t t)
{
  return ((h->irt_is64 >> (t & 31)) & 1) && o != h->ir_knull ? 2 : 1;
}

/* The object of the KGC constant at `ref`. */
static int kgc_object(const struct heap_layout *h, uintptr_t ir, uint32_t ref,
                      uintptr_t *obj)
{
  uintptr_t at = ir + (uintptr_t)HT_IRINS_SIZE * ref;
  if (h->base.gc64) {
    uint64_t v;
    if (!vm_u64(1, at + HT_IRINS_SIZE, &v))
      return 0;
    *obj = (uintptr_t)v;
  } else {
    uint32_t v;
    if (!vm_u32(1, at, &v))
      return 0;
    *obj = (uintptr_t)v;
  }
  return 1;
}

static int next_kgc(const struct heap_layout *h, uintptr_t T, uint32_t *ref,
                    uint32_t *at, uintptr_t *obj)
{
  uintptr_t ir;
  uint32_t nk, r = *ref;
  if (!trace_ir(h, T, &ir, &nk))
    return -1;
  if (r < nk)
    r = nk;
  while (r < HT_REF_TRUE) {
    uint8_t o, t;
    uint32_t here = r;
    if (!ir_ot(ir, r, &o, &t) || o < h->ir_kfirst || o > h->ir_klast)
      return -1;
    r += slots(h, o, t);
    if (o == h->ir_kgc) {
      if (r > HT_REF_TRUE || !kgc_object(h, ir, here, obj))
        return -1;
      *ref = r;
      *at = here;
      return 1;
    }
  }
  *ref = r;
  return r == HT_REF_TRUE ? 0 : -1;
}

/* The trace stands still while C code reads it: the reads of one call are
** one batch, each block of its IR read once. */
int heap_trace_next_kgc(const struct heap_layout *h, uintptr_t T, uint32_t *ref,
                        uint32_t *at, uintptr_t *obj)
{
  int batch = safe_read_batch_begin(), r = next_kgc(h, T, ref, at, obj);
  safe_read_batch_end(batch);
  return r;
}

/* Where a trace's snapshot counts are and how large a snapshot is. */
struct snap_fields {
  uint8_t nsnap, nsnapmap, map_width, snap_size;
};

/* The bytes of T's block after its header (IR, snapshots, map), and its
** snapshot count. */
static int trace_body(const struct heap_layout *h, uintptr_t T,
                      const struct snap_fields *f, uint64_t *body,
                      uint16_t *nsnap)
{
  uint32_t nins, nk, nmap;
  uint16_t map16;
  if (!vm_u32(1, T + h->tr_nins, &nins) || !vm_u32(1, T + h->tr_nk, &nk) ||
      nins < nk || !vm_u16(1, T + f->nsnap, nsnap))
    return 0;
  if (f->map_width == 4) {
    if (!vm_u32(1, T + f->nsnapmap, &nmap))
      return 0;
  } else {
    if (!vm_u16(1, T + f->nsnapmap, &map16))
      return 0;
    nmap = map16;
  }
  *body = (uint64_t)(nins - nk) * HT_IRINS_SIZE +
          (uint64_t)*nsnap * f->snap_size + (uint64_t)nmap * 4;
  return 1;
}

uint64_t heap_trace_size(const struct heap_layout *h, uintptr_t T)
{
  struct snap_fields f = {h->tr_nsnap, h->tr_nsnapmap, h->tr_map_width,
                          h->tr_snap_size};
  uint64_t body;
  uint16_t nsnap;
  if (!trace_body(h, T, &f, &body, &nsnap))
    return 0;
  return h->tr_head + body;
}

/* ---- Verification ------------------------------------------------------- */

/* A function of four loops of different sizes (their traces have
** different counts of snapshots and entries), each a root trace whose
** constants hold the closure holder.f (the call's target) and the string
** "f" (its key); the last one's other branch becomes a side trace. What
** jit.attach sees gives each trace's root trace (0: a root trace). */
static const char chunk[] =
    "local holder = {f = function(x) return x + 1 end}\n"
    "local function loops(n)\n"
    "  local s, t = 0, {0, 0, 0}\n"
    "  for i = 1, n do s = s + holder.f(i) end\n"
    "  for i = 1, n do\n"
    "    t[1] = holder.f(i)\n"
    "    t[2] = s\n"
    "    s = s + 2 * holder.f(i)\n"
    "  end\n"
    "  for i = 1, n do\n"
    "    local a = holder.f(i) % 7\n"
    "    t[1] = a\n"
    "    local b = holder.f(s % 5)\n"
    "    t[2] = b\n"
    "    local c = holder.f(i) * 3\n"
    "    t[3] = c\n"
    "    s = s + a + b + c\n"
    "  end\n"
    "  for i = 1, n do\n"
    "    if i > 100 then s = s + holder.f(i) else s = s - 1 end\n"
    "  end\n"
    "  return s\n"
    "end\n"
    "local parents = {}\n"
    "local function started(what, tr, func, pc, otr)\n"
    "  if what == 'start' then parents[tr] = otr or 0 end\n"
    "end\n"
    "jit.attach(started, 'trace')\n"
    "loops(300)\n"
    "jit.attach(started)\n"
    "local roots = {}\n"
    "for tr, r in pairs(parents) do\n"
    "  while r ~= 0 and parents[r] ~= 0 do r = parents[r] end\n"
    "  roots[tr] = r\n"
    "end\n"
    "return loops, holder.f, 'f', require('jit.util'), roots\n";

#define RING 4096
#define MIN_TRACES 4
/* Candidate places of the snapshot counts and sizes of a snapshot. */
#define CANDIDATES 48

struct ht {
  struct heap_layout *h;
  lua_State *L;
  int ju;    /* jit.util's index. */
  int roots; /* The root trace of each trace, by number. */
  int sides; /* Side traces checked. */
  uintptr_t closure, str;
  int found_closure, found_str;
  lua_Alloc orig;
  void *orig_ud;
  int ncand; /* Snapshot fields that fit every trace so far ... */
  struct snap_fields cand[CANDIDATES];
  uint64_t head[CANDIDATES]; /* ... with the header size they give. */
  unsigned n;                /* New blocks seen, the last RING of them kept. */
  struct {
    uintptr_t got;
    size_t size;
  } ring[RING];
  uint8_t start[HT_MAX_CONSTANTS]; /* Slots that begin a constant. */
};

static void why(struct heap_layout *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void why(struct heap_layout *h, const char *fmt, ...)
{
  va_list ap;
  h->tr_ok = 0;
  va_start(ap, fmt);
  vsnprintf(h->tr_why, sizeof(h->tr_why), fmt, ap);
  va_end(ap);
}

static void *ring_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  struct ht *c = ud;
  void *got = c->orig(c->orig_ud, ptr, osize, nsize);
  if (ptr == NULL && got != NULL) {
    c->ring[c->n % RING].got = (uintptr_t)got;
    c->ring[c->n % RING].size = nsize;
    c->n++;
  }
  return got;
}

/* The size of the newest block the allocator gave at p, or 0. */
static size_t block_at(const struct ht *c, uintptr_t p)
{
  unsigned i, n = c->n < RING ? c->n : RING;
  for (i = 1; i <= n; i++)
    if (c->ring[(c->n - i) % RING].got == p)
      return c->ring[(c->n - i) % RING].size;
  return 0;
}

/* Calls jit.util.NAME(n, arg) for `nres` results; 0 if it gives none. */
static int ju(struct ht *c, const char *name, uint32_t n, int arg, int with,
              int nres)
{
  lua_State *L = c->L;
  lua_getfield(L, c->ju, name);
  lua_pushinteger(L, (lua_Integer)n);
  if (with)
    lua_pushinteger(L, arg);
  if (lua_pcall(L, with ? 2 : 1, nres, 0) != 0) {
    lua_pop(L, 1);
    return 0;
  }
  if (lua_isnil(L, -nres)) {
    lua_pop(L, nres);
    return 0;
  }
  return 1;
}

static int info_field(lua_State *L, const char *key, lua_Integer *v)
{
  int ok;
  lua_getfield(L, -1, key);
  ok = lua_isnumber(L, -1);
  *v = lua_tointeger(L, -1);
  lua_pop(L, 1);
  return ok;
}

/* The KGC op: that of the constant jit.util.tracek gives as the closure. */
static int learn_kgc(struct ht *c, uint32_t n, uintptr_t ir, uint32_t nk)
{
  struct heap_layout *h = c->h;
  uint32_t r = nk;
  while (r < HT_REF_TRUE) {
    uint8_t o, t;
    if (!ir_ot(ir, r, &o, &t))
      return 0;
    if (ju(c, "tracek", n, (int)r - (int)HT_REF_BIAS, 1, 2)) {
      int is = lua_type(c->L, -2) == LUA_TFUNCTION &&
               (uintptr_t)lua_topointer(c->L, -2) == c->closure;
      lua_pop(c->L, 2);
      if (is && o >= KGC_TO_KPRI) {
        h->ir_kgc = o;
        h->ir_kfirst = (uint8_t)(o - KGC_TO_KPRI);
        h->ir_knull = (uint8_t)(o + KGC_TO_KNULL);
        h->ir_klast = (uint8_t)(o + KGC_TO_KSLOT);
        return 1;
      }
    }
    /* No KNULL in this chunk's traces: the type alone sizes a slot. */
    r += ((h->irt_is64 >> (t & 31)) & 1) ? 2 : 1;
  }
  return 0;
}

/* Trace n's constants: each begins on a constant op, they end at
** REF_TRUE, each KGC object is the value tracek gives, and the reader the
** walk uses (heap_trace_next_kgc) finds the same ones. */
static int check_constants(struct ht *c, uint32_t n, uintptr_t T, uintptr_t ir,
                           uint32_t nk)
{
  struct heap_layout *h = c->h;
  lua_State *L = c->L;
  uint32_t r = nk, next = 0, at;
  uintptr_t obj, read;
  memset(c->start, 0, sizeof(c->start));
  while (r < HT_REF_TRUE) {
    uint8_t o, t;
    if (!ir_ot(ir, r, &o, &t) || o < h->ir_kfirst || o > h->ir_klast) {
      why(h, "trace %u's IR %d is not a constant", n,
          (int)r - (int)HT_REF_BIAS);
      return 0;
    }
    c->start[r - nk] = 1;
    if (o == h->ir_kgc) {
      int got = kgc_object(h, ir, r, &obj);
      if (fault_traces()) /* fault.h: a layout that differs. */
        obj += 8;
      if (!got || !ju(c, "tracek", n, (int)r - (int)HT_REF_BIAS, 1, 2) ||
          (uintptr_t)lua_topointer(L, -2) != obj) {
        why(h,
            "trace %u's constant %d does not read as jit.util.tracek "
            "gives it",
            n, (int)HT_REF_BIAS - (int)r);
        return 0;
      }
      lua_pop(L, 2);
      c->found_closure |= obj == c->closure;
      c->found_str |= obj == c->str;
      if (heap_trace_next_kgc(h, T, &next, &at, &read) != 1 || at != r ||
          read != obj) {
        why(h, "trace %u's constant %d is not the walk's", n,
            (int)HT_REF_BIAS - (int)r);
        return 0;
      }
    }
    r += slots(h, o, t);
  }
  if (r != HT_REF_TRUE || heap_trace_next_kgc(h, T, &next, &at, &read) != 0) {
    why(h, "trace %u's constants do not end at the fixed ones", n);
    return 0;
  }
  return 1;
}

/* Every constant operand of trace n's instructions (jit.util.traceir)
** begins a constant; each instruction's op and type are where it says. */
static int check_operands(struct ht *c, uint32_t n, uintptr_t ir, uint32_t nk,
                          lua_Integer nins)
{
  lua_State *L = c->L;
  lua_Integer i;
  for (i = 1; i <= nins && i < 4096; i++) {
    lua_Integer ot, ops[2];
    uint8_t o, t;
    int k;
    if (!ju(c, "traceir", n, (int)i, 1, 4)) {
      why(c->h, "jit.util.traceir gives no instruction %d of trace %u", (int)i,
          n);
      return 0;
    }
    ot = lua_tointeger(L, -3);
    ops[0] = lua_tointeger(L, -2);
    ops[1] = lua_tointeger(L, -1);
    lua_pop(L, 4);
    if (!ir_ot(ir, HT_REF_BIAS + (uint32_t)i, &o, &t) ||
        o != (uint8_t)(ot >> 8) || t != (uint8_t)ot) {
      why(c->h, "trace %u's instruction %d is not where jit.util says", n,
          (int)i);
      return 0;
    }
    for (k = 0; k < 2; k++) {
      lua_Integer ref = (lua_Integer)HT_REF_BIAS + ops[k];
      if (ops[k] < 0 && ref < (lua_Integer)HT_REF_TRUE &&
          (ref < (lua_Integer)nk || !c->start[ref - nk])) {
        why(c->h,
            "trace %u's instruction %d uses constant %d, which the "
            "walk's reading does not begin",
            n, (int)i, (int)-ops[k]);
        return 0;
      }
    }
  }
  return 1;
}

/* T's block as the allocator gave it: its IR, snapshots and map after a
** header of the same size in every trace, for one place of the snapshot
** counts and one size of a snapshot (the candidates that fit all). */
static int check_size(struct ht *c, uint32_t n, uintptr_t T, lua_Integer nexit,
                      int first)
{
  size_t block = block_at(c, T);
  int i, kept = 0;
  if (block == 0) {
    why(c->h, "trace %u's block was not seen allocated", n);
    return 0;
  }
  for (i = 0; i < c->ncand; i++) {
    uint64_t body;
    uint16_t nsnap;
    if (!trace_body(c->h, T, &c->cand[i], &body, &nsnap) || nsnap != nexit ||
        body + 32 > block || block - body > 512 || (block - body) % 8 != 0 ||
        (!first && block - body != c->head[i]))
      continue;
    c->cand[kept] = c->cand[i];
    c->head[kept++] = block - body;
  }
  c->ncand = kept;
  if (kept == 0) {
    why(c->h,
        "trace %u's block of %zu bytes is not the size of its counts "
        "(jit.util.traceinfo)",
        n, block);
    return 0;
  }
  return 1;
}

/* Trace n's root trace is where jit.attach saw its parents lead. */
static int check_root(struct ht *c, uint32_t n, uintptr_t T)
{
  lua_Integer want;
  uint16_t root;
  lua_rawgeti(c->L, c->roots, (int)n);
  want = lua_isnumber(c->L, -1) ? lua_tointeger(c->L, -1) : -1;
  lua_pop(c->L, 1);
  if (!vm_u16(1, T + c->h->tr_root, &root) || root != want) {
    why(c->h, "trace %u's root trace is not at +%u", n, c->h->tr_root);
    return 0;
  }
  c->sides += root != 0;
  return 1;
}

static int check_trace(struct ht *c, uint32_t n, uintptr_t T, int first)
{
  struct heap_layout *h = c->h;
  lua_State *L = c->L;
  lua_Integer nk_count, nins, nexit;
  uintptr_t ir;
  uint32_t nk, v;
  if (!ju(c, "traceinfo", n, 0, 0, 1))
    return 0;
  if (!info_field(L, "nk", &nk_count) || !info_field(L, "nins", &nins) ||
      !info_field(L, "nexit", &nexit)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pop(L, 1);
  if (!trace_ir(h, T, &ir, &nk) ||
      (lua_Integer)nk != (lua_Integer)HT_REF_BIAS - nk_count) {
    why(h, "trace %u's lowest constant is not what jit.util gives", n);
    return 0;
  }
  if (!vm_u32(1, T + h->tr_nins, &v) ||
      (lua_Integer)v != (lua_Integer)HT_REF_BIAS + nins + 1) {
    why(h, "trace %u's IR count is not at +%u", n, h->tr_nins);
    return 0;
  }
  if (first && !learn_kgc(c, n, ir, nk)) {
    why(h, "no constant of trace %u is the closure it calls", n);
    return 0;
  }
  return check_root(c, n, T) && check_constants(c, n, T, ir, nk) &&
         check_operands(c, n, ir, nk, nins) &&
         check_size(c, n, T, nexit, first);
}

/* Runs the chunk under the ring allocator; leaves its 5 results. */
static int run_chunk(struct ht *c)
{
  lua_State *L = c->L;
  int status;
  if (luaL_loadbuffer(L, chunk, sizeof(chunk) - 1,
                      "=memprof.calibration.traces") != 0) {
    lua_pop(L, 1);
    return 0;
  }
  c->orig = lua_getallocf(L, &c->orig_ud);
  lua_setallocf(L, ring_alloc, c);
  status = lua_pcall(L, 0, 5, 0);
  lua_setallocf(L, c->orig, c->orig_ud);
  if (status != 0) {
    lua_pop(L, 1);
    return 0;
  }
  return lua_istable(L, -1) && lua_istable(L, -2);
}

static void learn_in(struct ht *c, uintptr_t g, int top)
{
  struct heap_layout *h = c->h;
  const struct vm_layout *lay = &h->base;
  uintptr_t pt;
  uint32_t size, n;
  int checked = 0;
  if (!run_chunk(c)) {
    why(h, "the chunk that makes traces does not run");
    return;
  }
  c->ju = top + 4;
  c->roots = top + 5;
  pt = vm_func_proto(lay, 1, (uintptr_t)lua_topointer(c->L, top + 1));
  c->closure = (uintptr_t)lua_topointer(c->L, top + 2);
  c->str = (uintptr_t)lua_topointer(c->L, top + 3);
  if (pt == 0 || !vm_u32(1, g + lay->g_sizetrace, &size))
    size = 0;
  for (n = 1; n < size && n < 65536; n++) {
    uintptr_t T = vm_trace_object(lay, 1, g, n), start;
    uint16_t no;
    if (T == 0 || !vm_is_gc(lay, 1, T, GCT_TRACE) ||
        !vm_u16(1, T + lay->tr_traceno, &no) || no != n ||
        !vm_ref(lay, 1, T + lay->tr_startpt, &start) || start != pt)
      continue;
    if (!check_trace(c, n, T, checked == 0)) {
      if (h->tr_why[0] == '\0')
        why(h, "jit.util gives no information of trace %u", n);
      return;
    }
    checked++;
  }
  if (checked < MIN_TRACES || c->sides == 0) {
    why(h,
        "%d traces (%d side traces) were compiled of the chunk's 4 loops "
        "(is the JIT compiler on?)",
        checked, c->sides);
    return;
  }
  if (c->ncand != 1) {
    why(h, "%d places of GCtrace's snapshot counts fit its traces' blocks",
        c->ncand);
    return;
  }
  h->tr_nsnap = c->cand[0].nsnap;
  h->tr_nsnapmap = c->cand[0].nsnapmap;
  h->tr_map_width = c->cand[0].map_width;
  h->tr_snap_size = c->cand[0].snap_size;
  h->tr_head = (uint16_t)c->head[0];
  if (!c->found_closure || !c->found_str) {
    why(h, "the traces' constants do not hold the closure and the string "
           "they use");
    return;
  }
  h->tr_ok = 1;
}

/* Adds value v to a list of n distinct ones (0: none). */
static int add_distinct(uint8_t *list, int n, uint8_t v)
{
  int i;
  for (i = 0; i < n; i++)
    if (list[i] == v)
      return n;
  if (v != 0)
    list[n++] = v;
  return n;
}

/* GCtrace's fields: where compiled-code attribution found them, else
** where lj_jit.h puts them (GC64 or not; the IR, lowest constant and IR
** count are at the same offsets in every supported build). The snapshot
** counts moved (LuaJIT before 2021-03 has 16-bit counts after nk) and a
** snapshot grew (8, 12 or 16 bytes): every combination is a candidate. */
static void candidates(struct ht *c)
{
  struct heap_layout *h = c->h;
  const struct vm_trace_layout *tl = &h->base.tl;
  int gc64 = h->base.gc64, a, b, k, ns = 0, nm = 0, nz = 0;
  uint8_t nsnap[3], map[3], width[3], size[4];
  h->tr_ir = tl->tr_ir != 0 ? tl->tr_ir : (uint8_t)(gc64 ? 32 : 16);
  h->tr_nk = tl->tr_nk != 0 ? tl->tr_nk : (uint8_t)(gc64 ? 40 : 24);
  h->tr_nins = gc64 ? 12 : 8;
  /* traceno, link, root: 16 bits each. */
  h->tr_root = (uint8_t)(h->base.tr_traceno + 4);
  ns = add_distinct(nsnap, ns, tl->tr_nsnap);
  ns = add_distinct(nsnap, ns, gc64 ? 10 : 6);
  ns = add_distinct(nsnap, ns, gc64 ? 44 : 28);
  if (tl->tr_nsnapmap != 0)
    map[nm] = tl->tr_nsnapmap, width[nm++] = 4;
  if (tl->tr_nsnapmap != (gc64 ? 44 : 28))
    map[nm] = gc64 ? 44 : 28, width[nm++] = 4;
  map[nm] = gc64 ? 46 : 30, width[nm++] = 2;
  nz = add_distinct(size, nz, tl->snap_size);
  nz = add_distinct(size, nz, 8);
  nz = add_distinct(size, nz, 12);
  nz = add_distinct(size, nz, 16);
  c->ncand = 0;
  for (a = 0; a < ns; a++)
    for (b = 0; b < nm; b++)
      for (k = 0; k < nz && c->ncand < CANDIDATES; k++) {
        struct snap_fields *f = &c->cand[c->ncand++];
        f->nsnap = nsnap[a];
        f->nsnapmap = map[b];
        f->map_width = width[b];
        f->snap_size = size[k];
      }
}

void heap_traces_learn(lua_State *T, uintptr_t g, struct heap_layout *h)
{
  struct ht *c;
  int top = lua_gettop(T);
  h->tr_ok = 0;
  h->tr_why[0] = '\0';
  h->irt_is64 = IS64_BASE | (h->base.gc64 ? IS64_GC : 0);
  if (!h->base.trace_ok) {
    why(h, "the trace array is not verified");
    return;
  }
  if ((c = calloc(1, sizeof(*c))) == NULL) {
    why(h, "out of memory");
    return;
  }
  c->h = h;
  c->L = T;
  candidates(c);
  learn_in(c, g, top);
  lua_settop(T, top);
  free(c);
}
