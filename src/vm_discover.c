/*
** Discovery of the VM's layout.
**
** Each search looks in a bounded window of one VM structure for the value
** the public API predicts at that moment: the pair lua_getallocf returns,
** a stack top that moves when a value is pushed, the running lua_State,
** a C function's address, a prototype's chunk name and first line, the
** line of a table allocated at a known place, a hot loop's trace. Fields
** are found, not assumed; the order of fields inside a structure is never
** used, only which structure holds them. Where two slots fit (a saved
** register can hold L too), the offset seen in a known build is preferred,
** else the lowest. All reads are fault-safe (safe_read), and whatever is
** found is verified afterwards by the same checks as any layout
** (vm_layout.c).
*/
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "fault.h"
#include "vm_calib.h"
#include "vm_dump.h"

/* ---- Reading copies --------------------------------------------------- */

/* Copies n bytes at addr (n a multiple of 8); pieces that cannot be read
** are zero. */
static void copy_window(uintptr_t addr, uint8_t *buf, size_t n)
{
  size_t i;
  if (safe_read(addr, buf, n))
    return;
  for (i = 0; i < n; i += 8)
    if (!safe_read(addr + i, buf + i, 8))
      memset(buf + i, 0, 8);
}

/* A GCRef or MRef in a copy. */
static uintptr_t get_ref(const struct vm_layout *lay, const uint8_t *b,
                         size_t off)
{
  return lay->gc64 ? (uintptr_t)copy_u64(b, off) : (uintptr_t)copy_u32(b, off);
}

static size_t round_up(size_t n, size_t to)
{
  return (n + to - 1) / to * to;
}

/* The offsets a search tries for a field: its given value only, or from
** `from` up to (not including) `to` by `step`. */
struct span {
  size_t from, to, step;
};

static unsigned field_value(const struct vm_layout *lay, size_t field)
{
  const struct vm_layout_field *f;
  for (f = vm_layout_fields; f->name != NULL; f++)
    if (f->offset == field)
      return vm_layout_get(lay, f);
  return 0;
}

static struct span span_of(const struct calib *c, size_t field, size_t from,
                           size_t to, size_t step)
{
  struct span s = {from, to, step};
  /* A window whose end was computed from a bad offset (a wrap below 0)
  ** is empty, never the whole address space. */
  if (to > 65536 || to < from)
    s.to = from;
  if (calib_given(c, field)) {
    s.from = field_value(&c->lay, field);
    s.to = s.from + 1;
    s.step = 1;
  }
  return s;
}

#define SPAN(c, f, from, to, step)                                             \
  span_of(c, offsetof(struct vm_layout, f), from, to, step)

static void set16(uint16_t *f, size_t v)
{
  *f = (uint16_t)v;
}

static void set8(uint8_t *f, size_t v)
{
  *f = (uint8_t)v;
}

/* Of the offsets in a mask of slots (bit i: offset i * step), the first
** that a known build uses, else the lowest; -1 for an empty mask. */
static long pick(uint64_t mask, size_t step, const uint16_t *hints)
{
  int i;
  for (; hints != NULL && *hints != 0; hints++)
    if (*hints % step == 0 && *hints / step < 64 &&
        (mask >> (*hints / step) & 1))
      return *hints;
  for (i = 0; i < 64; i++)
    if (mask >> i & 1)
      return (long)(i * step);
  return -1;
}

/* Offsets seen in known builds (see docs/builds.md), tried first where
** several slots fit. Each list ends with 0. */
static const uint16_t hint_cf_L[] = {16, 24, 0};
static const uint16_t hint_cf_pc[] = {24, 28, 8, 168, 0};
static const uint16_t hint_cur_L[] = {368, 376, 280, 296, 248,
                                      344, 384, 392, 480, 0};
static const uint16_t hint_vmstate[] = {184, 120, 136, 88, 128,
                                        344, 352, 440, 0};
static const uint16_t hint_traceno[] = {104, 80, 0};
static const uint16_t hint_parent[] = {2632, 2112, 2104, 2640, 0};

/* ---- Modes and small objects -------------------------------------------- */

/* Two-slot frames come with GC64, which makes references 8 bytes; every
** GC object starts with its next-object reference and two bytes, the
** second of which is its type. */
int discover_mode(struct calib *c, lua_State *L)
{
  struct vm_layout *lay = &c->lay;
  int flags = -1;
  uint32_t sizebc = 0;
  uint8_t t = 0, ffid = 0;
  if (luaL_loadbuffer(L, "return", 6, "=memprof") == 0) {
    if (!vm_dump_function(L, &flags, &sizebc))
      flags = -1;
  }
  lua_pop(L, 1);
  if (flags < 0)
    return calib_fail(c, "bytecode dump flags",
                      "lua_dump gives no readable dump");
  lay->fr2 = (flags & 0x08) != 0;
  lay->gc64 = lay->fr2;
  lay->ref_size = lay->gc64 ? 8 : 4;
  if (!calib_given(c, offsetof(struct vm_layout, gct)))
    lay->gct = (uint8_t)(lay->ref_size + 1);
  if (!calib_given(c, offsetof(struct vm_layout, fn_ffid)))
    lay->fn_ffid = (uint8_t)(lay->gct + 1);
  if (!vm_u8(1, (uintptr_t)L + lay->gct, &t) || t != GCT_THREAD ||
      !vm_u8(1, (uintptr_t)L + lay->fn_ffid, &ffid) || ffid != FFID_C)
    return calib_fail(c, "object header",
                      "a lua_State does not read as a thread at +%u", lay->gct);
  return 1;
}

/* GCstr: two strings of known lengths; the characters follow the header. */
int discover_strings(struct calib *c, lua_State *L)
{
  struct vm_layout *lay = &c->lay;
  static const size_t lens[2] = {37, 301};
  char text[301];
  uintptr_t data[2];
  struct span sz = SPAN(c, str_size, 12, 49, 4), sl;
  size_t size, off;
  int i, found = 0;
  for (i = 0; i < 2; i++) {
    memset(text, 'a' + i, sizeof(text));
    memcpy(text, "memprof calibration", 19);
    lua_pushlstring(L, text, lens[i]);
    data[i] = (uintptr_t)lua_tostring(L, -1);
  }
  for (size = sz.from; size < sz.to && !found; size += sz.step) {
    int typed = 1;
    for (i = 0; i < 2; i++) {
      uint8_t t;
      typed = typed && ((data[i] - size) & 7) == 0 &&
              vm_u8(1, data[i] - size + lay->gct, &t) && t == GCT_STR;
    }
    if (!typed)
      continue;
    sl = SPAN(c, str_len, round_up(lay->gct + 1u, 4), size - 3, 4);
    for (off = sl.from; off < sl.to && !found; off += sl.step) {
      uint32_t a = 0, b = 0;
      if (vm_u32(1, data[0] - size + off, &a) &&
          vm_u32(1, data[1] - size + off, &b) && a == lens[0] && b == lens[1]) {
        set8(&lay->str_size, size);
        set8(&lay->str_len, off);
        found = 1;
      }
    }
  }
  lua_pop(L, 2);
  if (!found)
    return calib_fail(c, "string fields",
                      "no header size and length slot fit two strings");
  return 1;
}

/* GCfuncC: the address of a C function is in its object. */
int discover_cfunc(struct calib *c, lua_State *L, lua_CFunction f)
{
  struct vm_layout *lay = &c->lay;
  struct span s = SPAN(c, fn_cfunc, round_up(lay->fn_ffid + 1u, 8), 97, 8);
  uintptr_t fn, v;
  uint8_t t = 0, ffid = 0;
  size_t off;
  lua_pushcfunction(L, f);
  fn = (uintptr_t)lua_topointer(L, -1);
  lua_pop(L, 1); /* Still referenced by the calibration's probes. */
  if (!vm_u8(1, fn + lay->gct, &t) || t != GCT_FUNC ||
      !vm_u8(1, fn + lay->fn_ffid, &ffid) || ffid != FFID_C)
    return calib_fail(c, "function ids", "a C function has type %u id %u", t,
                      ffid);
  for (off = s.from; off < s.to; off += s.step)
    if (vm_ptr(1, fn + off, &v) && v == (uintptr_t)f) {
      set8(&lay->fn_cfunc, off);
      return 1;
    }
  return calib_fail(c, "C function address",
                    "no slot of a C function object holds its address");
}

/* ---- The running thread (from inside a C function) ----------------------- */

#define L_WINDOW 128

/* The heap's size (g->gc.total): after the allocator pair, a GCSize (8
** bytes with GC64, 4 without) that equals what lua_gc counts. */
static int find_gc_total(struct calib *c, const uint8_t *gw, size_t after,
                         uint64_t total)
{
  struct vm_layout *lay = &c->lay;
  size_t w = lay->gc64 ? 8 : 4, o;
  struct span s = SPAN(c, g_gctotal, round_up(after, w), 256 - w + 1, w);
  for (o = s.from; o < s.to; o += s.step)
    if ((lay->gc64 ? copy_u64(gw, o) : copy_u32(gw, o)) == total) {
      set16(&lay->g_gctotal, o);
      return 1;
    }
  return calib_fail(c, "heap size",
                    "no field after the allocator in global state holds the "
                    "heap's size that lua_gc counts (%llu bytes)",
                    (unsigned long long)total);
}

/* glref and the allocator pair: the only reference in lua_State through
** which the pair lua_getallocf returns can be reached. */
static int find_global(struct calib *c, lua_State *L, const uint8_t *w)
{
  struct vm_layout *lay = &c->lay;
  void *ud = NULL;
  uintptr_t f = (uintptr_t)lua_getallocf(L, &ud);
  struct span s = SPAN(c, L_glref, round_up(lay->fn_ffid + 2u, lay->ref_size),
                       65, lay->ref_size);
  size_t o, a;
  /* Counting allocates nothing: the window copied below agrees. */
  uint64_t total = (uint64_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 +
                   (uint64_t)lua_gc(L, LUA_GCCOUNTB, 0);
  for (o = s.from; o < s.to; o += s.step) {
    uintptr_t g = get_ref(lay, w, o);
    uint8_t gw[256];
    struct span sa = SPAN(c, g_allocf, 0, 256 - 8, 8), sd;
    if (g == 0 || (g & 7) != 0)
      continue;
    copy_window(g, gw, sizeof(gw));
    for (a = sa.from; a < sa.to; a += sa.step) {
      size_t d;
      if (copy_u64(gw, a) != f)
        continue;
      sd = SPAN(c, g_allocd, a + 8, 256, 8);
      for (d = sd.from; d < sd.to; d += sd.step)
        if (copy_u64(gw, d) == (uint64_t)(uintptr_t)ud) {
          set16(&lay->L_glref, o);
          set16(&lay->g_allocf, a);
          set16(&lay->g_allocd, d);
          c->g = g;
          return find_gc_total(c, gw, d + 8, total);
        }
    }
  }
  return calib_fail(c, "allocator in global state",
                    "no reference in lua_State leads to the pair "
                    "lua_getallocf returns");
}

/* base and top: top moves by one slot when a value is pushed, and
** top - base is lua_gettop slots. */
static int find_base_top(struct calib *c, lua_State *L)
{
  struct vm_layout *lay = &c->lay;
  uint8_t a[L_WINDOW], b[L_WINDOW];
  int n = lua_gettop(L) + 3;
  struct span st = SPAN(c, L_top, 16, L_WINDOW - 7, 8), sb;
  size_t t, s;
  lua_pushnil(L);
  lua_pushnil(L);
  lua_pushnil(L);
  copy_window((uintptr_t)L, a, L_WINDOW);
  lua_pushnil(L);
  copy_window((uintptr_t)L, b, L_WINDOW);
  lua_pop(L, 4);
  for (t = st.from; t < st.to; t += st.step) {
    if (copy_u64(b, t) != copy_u64(a, t) + TVALUE_SIZE)
      continue;
    sb = SPAN(c, L_base, 16, L_WINDOW - 7, 8);
    for (s = sb.from; s < sb.to; s += sb.step)
      if (s != t && copy_u64(a, s) != 0 &&
          copy_u64(a, s) + (uint64_t)TVALUE_SIZE * n == copy_u64(a, t) &&
          copy_u64(b, s) == copy_u64(a, s)) {
        set16(&lay->L_top, t);
        set16(&lay->L_base, s);
        return 1;
      }
  }
  return calib_fail(c, "stack base and top",
                    "no pair of slots moves as lua_pushnil and lua_gettop "
                    "say");
}

/* Whether slots s (stack), m (maxstack) and z (stacksize) of thread copy w
** agree for extra slots e; `fresh`: a new thread, whose base is right
** above its bottom frame. */
static int stack_fits(const struct vm_layout *lay, const uint8_t *w, size_t s,
                      size_t m, size_t z, unsigned e, int fresh)
{
  uintptr_t stack = get_ref(lay, w, s), max = get_ref(lay, w, m);
  uintptr_t base = (uintptr_t)copy_u64(w, lay->L_base);
  uint32_t size = copy_u32(w, z);
  if (stack == 0 || size <= e + 1 || size > (1u << 24))
    return 0;
  if (max != stack + (uintptr_t)TVALUE_SIZE * (size - 1 - e))
    return 0;
  if (fresh)
    return base == stack + (uintptr_t)TVALUE_SIZE * (1 + lay->fr2);
  return stack < base && base <= max;
}

/* stack, maxstack, stacksize and the extra slots above maxstack (a build
** constant: 5, 7 or 8), in the running thread and a new one. */
static int find_stack(struct calib *c, lua_State *L)
{
  struct vm_layout *lay = &c->lay;
  uint8_t w[2][L_WINDOW];
  size_t r = lay->ref_size, s, m, z;
  struct span ss = SPAN(c, L_stack, 16, L_WINDOW - 7, r);
  unsigned e;
  lua_State *T = lua_newthread(L);
  copy_window((uintptr_t)L, w[0], L_WINDOW);
  copy_window((uintptr_t)T, w[1], L_WINDOW);
  lua_pop(L, 1);
  for (s = ss.from; s < ss.to; s += ss.step) {
    struct span sm = SPAN(c, L_maxstack, 16, L_WINDOW - 7, r);
    for (m = sm.from; m < sm.to; m += sm.step) {
      struct span sz = SPAN(c, L_stacksize, 16, L_WINDOW - 3, 4);
      if (m == s)
        continue;
      for (z = sz.from; z < sz.to; z += sz.step) {
        struct span se = SPAN(c, stack_extra, 4, 17, 1);
        if ((z < s + r && s < z + 4) || (z < m + r && m < z + 4))
          continue; /* It overlaps one of the references. */
        for (e = (unsigned)se.from; e < se.to; e++)
          if (stack_fits(lay, w[0], s, m, z, e, 0) &&
              stack_fits(lay, w[1], s, m, z, e, 1)) {
            set16(&lay->L_stack, s);
            set16(&lay->L_maxstack, m);
            set16(&lay->L_stacksize, z);
            set8(&lay->stack_extra, e);
            return 1;
          }
      }
    }
  }
  return calib_fail(c, "stack bounds",
                    "no slots of lua_State hold stack, maxstack and "
                    "stacksize consistently");
}

/* The slots of a C frame that hold thread L (bit i: offset i * ref). */
static uint64_t frame_L_slots(const struct vm_layout *lay, uintptr_t cf,
                              uintptr_t L)
{
  uint8_t w[CALIB_CF_WINDOW];
  uint64_t mask = 0;
  size_t k;
  copy_window(cf, w, sizeof(w));
  for (k = 0; k + lay->ref_size <= sizeof(w) && k / lay->ref_size < 64;
       k += lay->ref_size)
    if (get_ref(lay, w, k) == L)
      mask |= 1ULL << (k / lay->ref_size);
  return mask;
}

/* cframe: the one pointer of lua_State into the C stack above this frame
** (the interpreter's C frame, on the stack of the C code that entered the
** VM), which holds L in one of its slots. */
static int find_cframe(struct calib *c, lua_State *L)
{
  struct vm_layout *lay = &c->lay;
  uint8_t w[L_WINDOW];
  volatile char here = 0;
  uintptr_t low = (uintptr_t)&here;
  struct span s = SPAN(c, L_cframe, 16, L_WINDOW - 7, 8);
  size_t o;
  copy_window((uintptr_t)L, w, L_WINDOW);
  for (o = s.from; o < s.to; o += s.step) {
    uintptr_t cf = (uintptr_t)copy_u64(w, o) & ~(uintptr_t)3;
    uint64_t mask;
    if (cf <= low || cf - low > (1u << 20) || (cf & 7) != 0)
      continue;
    mask = frame_L_slots(lay, cf, (uintptr_t)L);
    if (mask != 0) {
      set16(&lay->L_cframe, o);
      c->cf_L_slots = mask;
      return 1;
    }
  }
  return calib_fail(c, "C frame",
                    "no pointer of lua_State leads to a C frame holding it");
}

int discover_thread(struct calib *c, lua_State *L)
{
  uint8_t w[L_WINDOW];
  copy_window((uintptr_t)L, w, L_WINDOW);
  return find_global(c, L, w) && find_base_top(c, L) && find_stack(c, L) &&
         find_cframe(c, L);
}

/* Each probe: a copy of global_State with the running thread known, and
** the C frame slots that hold that thread. */
void discover_probe(struct calib *c, lua_State *L)
{
  uintptr_t cf;
  if (c->nprobes >= CALIB_PROBES)
    return;
  calib_take_sample(c, (uintptr_t)L, &c->probes[c->nprobes++]);
  if (vm_ptr(1, (uintptr_t)L + c->lay.L_cframe, &cf) &&
      (cf &= ~(uintptr_t)3) != 0)
    c->cf_L_slots &= frame_L_slots(&c->lay, cf, (uintptr_t)L);
  else
    c->cf_L_slots = 0;
}

/* ---- Functions and prototypes ------------------------------------------- */

static uintptr_t place_proto(const struct calib *c, int i)
{
  return vm_func_proto(&c->lay, 1, c->places[i].fn);
}

/* A 32-bit slot of every place's prototype that holds what want() says. */
static int find_proto_u32(struct calib *c, size_t from, size_t to,
                          uint32_t (*want)(const struct calib_place *),
                          size_t *found)
{
  size_t o;
  int i;
  for (o = from; o < to; o += 4) {
    int fits = 1;
    for (i = 0; i < c->nplaces && fits; i++) {
      uint32_t v;
      fits = vm_u32(1, place_proto(c, i) + o, &v) && v == want(&c->places[i]);
    }
    if (fits) {
      *found = o;
      return 1;
    }
  }
  return 0;
}

/* What a search of the prototype's fields saw, for the message when no
** candidate fits (a failure seen twice in CI under load, never since). */
struct proto_why {
  char text[320];
};

static void why_add(struct proto_why *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void why_add(struct proto_why *w, const char *fmt, ...)
{
  size_t n = strlen(w->text);
  va_list ap;
  if (n + 1 >= sizeof(w->text))
    return;
  va_start(ap, fmt);
  vsnprintf(w->text + n, sizeof(w->text) - n, fmt, ap);
  va_end(ap);
}

static uint32_t want_sizebc(const struct calib_place *p)
{
  return p->sizebc + 1; /* The dump leaves out the function header. */
}

static uint32_t want_firstline(const struct calib_place *p)
{
  return (uint32_t)p->firstline;
}

static uint32_t want_numline(const struct calib_place *p)
{
  return (uint32_t)(p->lastline - p->firstline);
}

/* How far a slot of a prototype went towards the chunk name: read as a
** reference, to a string, of the source's length, read, equal. */
enum cn_step { CN_NONE, CN_REF, CN_STRING, CN_LENGTH, CN_READ, CN_EQUAL };
static const char *const cn_what[] = {
    "and every slot is unreadable",
    "leads to no string",
    "leads to a string whose length is unreadable",
    "leads to a string of another length",
    "leads to a string that reads "
    "otherwise",
    "fits"};

static enum cn_step chunkname_at(const struct calib *c,
                                 const struct calib_place *p, uintptr_t pt,
                                 size_t o, uintptr_t *s, uint32_t *len,
                                 char *buf)
{
  const struct vm_layout *lay = &c->lay;
  size_t n = strlen(p->source);
  if (!vm_ref(lay, 1, pt + o, s))
    return CN_NONE;
  if (!vm_is_gc(lay, 1, *s, GCT_STR))
    return CN_REF;
  if (!vm_u32(1, *s + lay->str_len, len))
    return CN_STRING;
  if (*len != n)
    return CN_LENGTH;
  if (!safe_read(*s + lay->str_size, buf, n))
    return CN_READ;
  return memcmp(buf, p->source, n) == 0 ? CN_EQUAL : CN_READ;
}

/* The chunk name: a reference to a string equal to lua_getinfo's source.
** Where none is, says how far each place's prototype went. */
static int find_chunkname(struct calib *c, size_t *found, struct proto_why *w)
{
  const struct vm_layout *lay = &c->lay;
  size_t o;
  int i;
  for (o = 8; o + lay->ref_size <= lay->pt_size; o += lay->ref_size) {
    int fits = 1;
    for (i = 0; i < c->nplaces && fits; i++) {
      const struct calib_place *p = &c->places[i];
      char buf[sizeof(p->source)];
      uintptr_t s;
      uint32_t len;
      fits =
          chunkname_at(c, p, place_proto(c, i), o, &s, &len, buf) == CN_EQUAL;
    }
    if (fits) {
      *found = o;
      return 1;
    }
  }
  for (i = 0; i < c->nplaces; i++) {
    const struct calib_place *p = &c->places[i];
    enum cn_step best = CN_NONE, step;
    size_t at = 0;
    uintptr_t s = 0, bs = 0, pt = place_proto(c, i);
    uint32_t len = 0, blen = 0;
    char buf[sizeof(p->source)];
    for (o = 8; o + lay->ref_size <= lay->pt_size && best < CN_EQUAL;
         o += lay->ref_size)
      if ((step = chunkname_at(c, p, pt, o, &s, &len, buf)) > best)
        best = step, at = o, bs = s, blen = len;
    why_add(w, "; place %d (prototype %#lx, source '%s'): pt+%u %s", i + 1,
            (unsigned long)pt, p->source, (unsigned)at, cn_what[best]);
    if (best >= CN_LENGTH)
      why_add(w, " (%u bytes at %#lx)", (unsigned)blen, (unsigned long)bs);
  }
  return 0;
}

/* The prototype's fields, for a candidate fn_pc and pt_size. Returns NULL,
** or what could not be found. */
static const char *find_proto_fields(struct calib *c, struct proto_why *w)
{
  struct vm_layout *lay = &c->lay;
  struct span s;
  size_t found;
#define FIND_U32(field, want, what)                                            \
  s = SPAN(c, field, 8, lay->pt_size - 3, 4);                                  \
  if (s.step == 1)                                                             \
    s.step = 4;                                                                \
  if (!find_proto_u32(c, s.from, s.to, want, &found)) {                        \
    why_add(w, "; want %u and %u in [pt+%u, pt+%u)", want(&c->places[0]),      \
            want(&c->places[1]), (unsigned)s.from, (unsigned)s.to);            \
    return what;                                                               \
  }                                                                            \
  set8(&lay->field, found)
  FIND_U32(pt_sizebc, want_sizebc, "number of instructions");
  FIND_U32(pt_firstline, want_firstline, "first line");
  FIND_U32(pt_numline, want_numline, "number of lines");
#undef FIND_U32
  if (!calib_given(c, offsetof(struct vm_layout, pt_chunkname))) {
    if (!find_chunkname(c, &found, w))
      return "chunk name";
    set8(&lay->pt_chunkname, found);
  }
  return NULL;
}

/* A Lua function's pc leads to its bytecode, right after its prototype,
** whose fields must all be found: a type byte alone can fit by chance. */
static int find_proto(struct calib *c)
{
  struct vm_layout *lay = &c->lay;
  struct span sp = SPAN(c, fn_pc, round_up(lay->fn_ffid + 2u, lay->ref_size),
                        lay->fn_cfunc, lay->ref_size);
  /* The fields in the order they are looked for: the message names the
  ** candidate that went furthest. */
  static const char *const order[] = {"number of instructions", "first line",
                                      "number of lines", "chunk name"};
  const char *missing = "type", *best_missing = "type";
  struct proto_why why, best;
  size_t o, size, best_o = 0, best_size = 0;
  int i, rank, best_rank = -1;
  best.text[0] = '\0';
  for (o = sp.from; o < sp.to; o += sp.step) {
    /* pt_size is a byte: 256 would wrap to 0, and every later window
    ** that ends at it would wrap to the whole address space. */
    struct span ss = SPAN(c, pt_size, 32, 249, 8);
    for (size = ss.from; size < ss.to; size += ss.step) {
      int fits = 1;
      for (i = 0; i < c->nplaces && fits; i++) {
        uintptr_t pc;
        uint8_t t;
        fits = vm_ref(lay, 1, c->places[i].fn + o, &pc) && pc > size &&
               ((pc - size) & 7) == 0 && vm_u8(1, pc - size + lay->gct, &t) &&
               t == GCT_PROTO;
      }
      if (!fits)
        continue;
      set8(&lay->fn_pc, o);
      set8(&lay->pt_size, size);
      why.text[0] = '\0';
      if ((missing = find_proto_fields(c, &why)) == NULL)
        return 1;
      for (rank = 0; rank < 4 && strcmp(order[rank], missing) != 0; rank++)
        ;
      if (rank > best_rank) {
        best_rank = rank;
        best_missing = missing;
        best = why;
        best_o = o;
        best_size = size;
      }
    }
  }
  if (best_rank < 0)
    return calib_fail(c, "prototype fields",
                      "no slot of a Lua function leads to a prototype whose "
                      "%s fits (functions %#lx and %#lx, slots fn+%u to "
                      "fn+%u)",
                      missing, (unsigned long)c->places[0].fn,
                      (unsigned long)c->places[1].fn, (unsigned)sp.from,
                      (unsigned)sp.to);
  return calib_fail(c, "prototype fields",
                    "no slot of a Lua function leads to a prototype whose "
                    "%s fits (furthest: fn+%u, a prototype of %u bytes%s)",
                    best_missing, (unsigned)best_o, (unsigned)best_size,
                    best.text);
}

/* The line of a saved PC in place i's prototype with lineinfo at li. */
static int line_at(struct calib *c, int i, size_t li, uintptr_t pc,
                   uint32_t *line)
{
  struct vm_layout lay = c->lay;
  set8(&lay.pt_lineinfo, li);
  return vm_pc_line(&lay, 1, place_proto(c, i), pc, line);
}

/* lineinfo and the C frame's saved PC, together: the PC saved while each
** place allocated must give that place's line through the line table. */
static int find_lines(struct calib *c)
{
  struct vm_layout *lay = &c->lay;
  size_t r = lay->ref_size, li, k;
  struct span sl = SPAN(c, pt_lineinfo, 8, lay->pt_size - r + 1, r);
  for (li = sl.from; li < sl.to; li += sl.step) {
    struct span sk = SPAN(c, cf_pc, 0, CALIB_CF_WINDOW - r + 1, r);
    uint64_t mask = 0;
    long pc_slot;
    for (k = sk.from; k < sk.to; k += sk.step) {
      int fits = k / r < 64, i;
      for (i = 0; i < c->nplaces && fits; i++) {
        const struct calib_place *p = &c->places[i];
        const struct calib_sample *s =
            p->sample >= 0 ? &c->samples[p->sample] : NULL;
        uint32_t line;
        uintptr_t pc;
        fits = s != NULL && s->cf_ok && (pc = get_ref(lay, s->cf, k)) != s->L &&
               line_at(c, i, li, pc, &line) && (int)line == p->line;
      }
      if (fits)
        mask |= 1ULL << (k / r);
    }
    if (calib_given(c, offsetof(struct vm_layout, cf_pc)))
      pc_slot = mask ? (long)lay->cf_pc : -1;
    else
      pc_slot = pick(mask, r, hint_cf_pc);
    if (pc_slot >= 0) {
      set8(&lay->pt_lineinfo, li);
      set8(&lay->cf_pc, (size_t)pc_slot);
      return 1;
    }
  }
  return calib_fail(c, "saved PC in the C frame",
                    "no line table and C frame slot give the lines of the "
                    "allocations seen");
}

int discover_place(struct calib *c, lua_State *L, int line, int sample)
{
  struct calib_place *p;
  lua_Debug ar;
  int flags, batch, ok;
  if (c->nplaces >= CALIB_PLACES)
    return 1;
  p = &c->places[c->nplaces];
  memset(&ar, 0, sizeof(ar));
  if (!lua_getstack(L, 1, &ar) || !lua_getinfo(L, "fS", &ar))
    return calib_fail(c, "allocation in Lua code", "lua_getstack(1) failed");
  p->fn = (uintptr_t)lua_topointer(L, -1);
  p->line = line;
  p->firstline = ar.linedefined;
  p->lastline = ar.lastlinedefined;
  p->sample = sample;
  snprintf(p->source, sizeof(p->source), "%s", ar.source);
  if (fault_chunkname() && p->source[0] != '\0')
    p->source[strlen(p->source) - 1] ^= 1;
  if (!vm_dump_function(L, &flags, &p->sizebc)) {
    lua_pop(L, 1);
    return calib_fail(c, "prototype fields", "lua_dump failed");
  }
  lua_pop(L, 1);
  if (++c->nplaces < CALIB_PLACES)
    return 1;
  /* The searches run no Lua code: the functions and prototypes they read
  ** do not change, and each block of them is read once. */
  batch = safe_read_batch_begin();
  ok = find_proto(c) && find_lines(c);
  safe_read_batch_end(batch);
  return ok;
}

/* ---- global_State: the running thread and the VM state ------------------ */

static int known_numbering(int32_t lua, int32_t cfn, int32_t gc)
{
  return (lua == -1 && cfn == -2 && gc == -3) ||
         (lua == -2 && cfn == -4 && gc == -5);
}

/* vmstate: one int32 that reads one value in every C function, another in
** every Lua allocation, a third in the collector, in a known numbering. */
static int find_vmstate(struct calib *c)
{
  struct vm_layout *lay = &c->lay;
  struct span s = SPAN(c, g_vmstate, 0, CALIB_G_WINDOW - 3, 4);
  const struct calib_sample *gc = &c->samples[c->gc_sample];
  uint16_t found[32];
  int nfound = 0, i;
  size_t o;
  for (o = s.from; o < s.to && nfound < 31; o += s.step) {
    int32_t cfn = (int32_t)copy_u32(c->probes[0].g, o);
    int32_t lua = (int32_t)copy_u32(c->samples[c->places[0].sample].g, o);
    int fits = known_numbering(lua, cfn, (int32_t)copy_u32(gc->g, o));
    for (i = 1; i < c->nprobes && fits; i++)
      fits = (int32_t)copy_u32(c->probes[i].g, o) == cfn;
    for (i = 1; i < c->nplaces && fits; i++)
      fits = (int32_t)copy_u32(c->samples[c->places[i].sample].g, o) == lua;
    if (fits)
      found[nfound++] = (uint16_t)o;
  }
  found[nfound] = 0;
  for (i = 0; hint_vmstate[i] != 0; i++) {
    int j;
    for (j = 0; j < nfound; j++)
      if (found[j] == hint_vmstate[i]) {
        lay->g_vmstate = found[j];
        return 1;
      }
  }
  if (nfound == 0)
    return calib_fail(c, "VM state",
                      "no int32 in the first %d bytes of global_State reads "
                      "the states of Lua code, C code and the collector",
                      CALIB_G_WINDOW);
  lay->g_vmstate = found[0];
  return 1;
}

/* cur_L: the reference that holds the running thread in every probe, in
** the calibration's thread and in two coroutines. */
static int find_cur_L(struct calib *c)
{
  struct vm_layout *lay = &c->lay;
  size_t r = lay->ref_size, o;
  struct span s = SPAN(c, g_cur_L, 0, CALIB_G_WINDOW - r + 1, r);
  long best = -1;
  for (o = s.from; o < s.to; o += s.step) {
    int fits = c->nprobes == CALIB_PROBES, i, h;
    for (i = 0; i < c->nprobes && fits; i++)
      fits = get_ref(lay, c->probes[i].g, o) == c->probes[i].L;
    if (!fits)
      continue;
    for (h = 0; hint_cur_L[h] != 0; h++)
      if (hint_cur_L[h] == o)
        break;
    if (hint_cur_L[h] != 0 || best < 0)
      best = (long)o;
    if (hint_cur_L[h] != 0)
      break;
  }
  if (best < 0)
    return calib_fail(c, "current thread (cur_L)",
                      "no reference in the first %d bytes of global_State "
                      "holds the running lua_State in every probe",
                      CALIB_G_WINDOW);
  lay->g_cur_L = (uint16_t)best;
  return 1;
}

int discover_globals(struct calib *c)
{
  struct vm_layout *lay = &c->lay;
  long k;
  if (c->nplaces < CALIB_PLACES || c->gc_sample < 0 || c->nprobes < 1)
    return calib_fail(c, "calibration chunk", "a probe did not run");
  if (!find_vmstate(c) || !find_cur_L(c))
    return 0;
  if (calib_given(c, offsetof(struct vm_layout, cf_L)))
    return 1;
  k = pick(c->cf_L_slots, lay->ref_size, hint_cf_L);
  if (k < 0)
    return calib_fail(c, "C frame",
                      "no slot of the C frame holds the running thread in "
                      "every probe");
  lay->cf_L = (uint8_t)k;
  return 1;
}

/* ---- Traces ---------------------------------------------------------------
 */

/* A trace in copy t (J->trace[n]) whose start slot holds one of the hot
** loops' prototypes: the offsets of startpt and startpc, and the mask of
** 16-bit slots that hold n (bit i: offset i * 2 after startpc). */
struct trace_hit {
  int which;
  size_t startpt, startpc;
  uint64_t traceno_mask;
};

static int trace_hit(struct calib *c, const uint8_t *t, size_t tsize,
                     uint32_t n, struct trace_hit *hit)
{
  const struct vm_layout *lay = &c->lay;
  size_t r = lay->ref_size, a, b, k;
  struct span sa = SPAN(c, tr_startpt, 8, tsize - r + 1, r);
  for (a = sa.from; a < sa.to; a += sa.step) {
    uintptr_t v = get_ref(lay, t, a);
    int which = v == c->trace_protos[0] ? 0 : v == c->trace_protos[1] ? 1 : -1;
    struct span sb = SPAN(c, tr_startpc, a + r, tsize - r + 1, r);
    if (which < 0 || v == 0)
      continue;
    for (b = sb.from; b < sb.to; b += sb.step) {
      uintptr_t pc = get_ref(lay, t, b), bc = v + lay->pt_size;
      uint32_t sizebc, line;
      if (!vm_u32(1, v + lay->pt_sizebc, &sizebc) || pc < bc ||
          pc >= bc + 4 * (uintptr_t)sizebc || (pc & 3) != 0 ||
          !vm_proto_line(lay, 1, v, (uint32_t)((pc - bc) / 4), sizebc, &line) ||
          (int)line != c->trace_lines[which])
        continue;
      hit->which = which;
      hit->startpt = a;
      hit->startpc = b;
      hit->traceno_mask = 0;
      for (k = b + r; k + 2 <= tsize && (k - b - r) / 2 < 64; k += 2) {
        uint16_t no;
        memcpy(&no, t + k, 2);
        if (no == n)
          hit->traceno_mask |= 1ULL << ((k - b - r) / 2);
      }
      return hit->traceno_mask != 0;
    }
  }
  return 0;
}

#define TRACE_WINDOW 192

/* Reads entry n of the candidate array at arr (size entries) through the
** block buffer refs (entries first .. first + have - 1). Returns 0 if the
** block does not read. */
#define TRACE_REFS_BLOCK 4096
struct refs_block {
  uint8_t refs[TRACE_REFS_BLOCK];
  uint32_t first, have;
};

static int trace_entry(const struct vm_layout *lay, struct refs_block *b,
                       uintptr_t arr, uint32_t size, uint32_t n, uintptr_t *T)
{
  size_t r = lay->ref_size, per = TRACE_REFS_BLOCK / r;
  if (n < b->first || n >= b->first + b->have) {
    b->first = n;
    b->have = size - n < per ? size - n : (uint32_t)per;
    if (!safe_read(arr + (uintptr_t)n * r, b->refs, (size_t)b->have * r))
      return 0;
  }
  *T = get_ref(lay, b->refs, (n - b->first) * r);
  return 1;
}

/* Whether every entry of the array at arr is empty or a trace whose 16-bit
** slot in `mask` (bit i: offset base + 2 * i) holds its index, as in J->trace
** (GCtrace's traceno): narrows *mask to the slots that do. A pointer that
** only looks like J->trace (a buffer shifted into it, whose traces sit at
** other indices, as seen on Tarantool GC64 builds) fails here. */
static int trace_numbers_fit(struct calib *c, uintptr_t arr, uint32_t size,
                             size_t base, uint64_t *mask)
{
  const struct vm_layout *lay = &c->lay;
  struct refs_block b;
  uint8_t t[TRACE_WINDOW];
  uint32_t n;
  b.first = b.have = 0;
  for (n = 1; n < size && *mask != 0; n++) {
    uintptr_t T;
    uint64_t holds = 0;
    uint8_t type;
    size_t k;
    if (!trace_entry(lay, &b, arr, size, n, &T))
      return 0;
    if (T == 0)
      continue;
    if ((T & 7) != 0 || !vm_u8(1, T + lay->gct, &type) || type != GCT_TRACE)
      return 0;
    copy_window(T, t, sizeof(t));
    for (k = 0; k < 64 && base + 2 * k + 2 <= sizeof(t); k++) {
      uint16_t no;
      memcpy(&no, t + base + 2 * k, 2);
      if (no == n)
        holds |= 1ULL << k;
    }
    *mask &= holds;
  }
  return *mask != 0;
}

/* Whether the array at `arr` with `size` entries holds traces of both hot
** loops, and every trace in it at its own number; sets the trace object
** offsets if so. The entries are read a block at a time as the walk needs
** them (a candidate's size is up to 65536 entries, and most candidates are
** not the array): the whole array must still read, checked without a copy. */
static int trace_array_fits(struct calib *c, uintptr_t arr, uint32_t size)
{
  struct vm_layout *lay = &c->lay;
  size_t r = lay->ref_size;
  struct refs_block b;
  uint8_t t[TRACE_WINDOW];
  struct trace_hit hits[2];
  int seen = 0;
  uint32_t n;
  b.first = b.have = 0;
  for (n = 1; n < size && seen != 3; n++) {
    uintptr_t T;
    struct trace_hit hit;
    uint8_t type;
    if (!trace_entry(lay, &b, arr, size, n, &T))
      return 0;
    if (T == 0)
      continue;
    /* In the trace array every entry is empty or a trace. */
    if ((T & 7) != 0 || !vm_u8(1, T + lay->gct, &type) || type != GCT_TRACE)
      break;
    copy_window(T, t, sizeof(t));
    if (!trace_hit(c, t, sizeof(t), n, &hit))
      continue;
    if (seen & (1 << hit.which))
      hits[hit.which].traceno_mask &= hit.traceno_mask;
    else
      hits[hit.which] = hit;
    seen |= 1 << hit.which;
  }
  if (seen != 3 || hits[0].startpt != hits[1].startpt ||
      hits[0].startpc != hits[1].startpc ||
      (hits[0].traceno_mask & hits[1].traceno_mask) == 0 ||
      !safe_readable(arr, (size_t)size * r))
    return 0;
  {
    uint64_t mask = hits[0].traceno_mask & hits[1].traceno_mask;
    size_t base = hits[0].startpc + r;
    long k = -1;
    int h, i;
    if (!trace_numbers_fit(c, arr, size, base, &mask))
      return 0;
    for (h = 0; hint_traceno[h] != 0 && k < 0; h++)
      if (hint_traceno[h] >= base && (hint_traceno[h] - base) % 2 == 0 &&
          (hint_traceno[h] - base) / 2 < 64 &&
          (mask >> ((hint_traceno[h] - base) / 2) & 1))
        k = hint_traceno[h];
    for (i = 0; i < 64 && k < 0; i++)
      if (mask >> i & 1)
        k = (long)(base + 2 * (size_t)i);
    if (calib_given(c, offsetof(struct vm_layout, tr_traceno)))
      k = lay->tr_traceno;
    set8(&lay->tr_startpt, hits[0].startpt);
    set8(&lay->tr_startpc, hits[0].startpc);
    set8(&lay->tr_traceno, (size_t)k);
  }
  return 1;
}

/* J->trace: a pointer after global_State (jit_State follows it) to an
** array holding the traces of the two hot loops. Its size is one of the
** two 32-bit numbers after it; the other is the lowest free trace number,
** never larger: the larger one that fits is the size (on a tie, the later
** slot, as in every known build). */
static int search_traces(struct calib *c);

int discover_traces(struct calib *c)
{
  int batch = safe_read_batch_begin(), found;
  /* A search in C alone, no Lua code runs: the VM's memory stands still,
  ** and each block of it is read once. */
  found = search_traces(c);
  safe_read_batch_end(batch);
  return found;
}

/* The first candidate at or after `from` in the window g whose array fits. */
static int first_trace_array(struct calib *c, const uint8_t *g, size_t window,
                             size_t from)
{
  struct vm_layout *lay = &c->lay;
  struct span s = SPAN(c, g_trace, from, window - 16, 8);
  size_t o, z;
  for (o = s.from; o < s.to; o += s.step) {
    uintptr_t arr = (uintptr_t)copy_u64(g, o);
    struct span sz = SPAN(c, g_sizetrace, o + 8, o + 16, 4);
    uint32_t best = 0;
    size_t best_z = 0;
    if (arr == 0 || (arr & 7) != 0)
      continue;
    for (z = sz.from; z < sz.to && z + 4 <= window; z += sz.step) {
      uint32_t size = copy_u32(g, z);
      if (size >= 2 && size <= 65536 && size >= best &&
          trace_array_fits(c, arr, size)) {
        best = size;
        best_z = z;
      }
    }
    if (best != 0) {
      lay->g_trace = (uint16_t)o;
      lay->g_sizetrace = (uint16_t)best_z;
      lay->trace_ok = 1;
      return 1;
    }
  }
  return 0;
}

/* fault.h: a decoy before J->trace in the window, a copy of the array
** (its traces at their numbers) with a bogus size, as a slot that only
** looks like J->trace would be: the second pass must refuse it. */
static void *plant_trace_decoy(struct calib *c, uint8_t *g, size_t window,
                               size_t from)
{
  enum { DECOY_SIZE = 32681 };
  struct vm_layout keep = c->lay;
  uintptr_t arr;
  uint32_t size;
  uint8_t *decoy;
  if (!first_trace_array(c, g, window, from) ||
      (decoy = calloc(DECOY_SIZE, c->lay.ref_size)) == NULL) {
    c->lay = keep;
    return NULL;
  }
  arr = (uintptr_t)copy_u64(g, c->lay.g_trace);
  size = copy_u32(g, c->lay.g_sizetrace);
  c->lay = keep;
  if (!safe_read(arr, decoy, (size_t)size * c->lay.ref_size)) {
    free(decoy);
    return NULL;
  }
  arr = (uintptr_t)decoy;
  size = DECOY_SIZE;
  memcpy(g + from, &arr, 8);
  memcpy(g + from + 12, &size, 4);
  return decoy;
}

static int search_traces(struct calib *c)
{
  enum { WINDOW = 4096 };
  uint8_t *g = malloc(WINDOW);
  /* After a candidate the second pass refused, the next one. */
  size_t from = c->trace_from > 256 ? c->trace_from : 256;
  void *decoy = NULL;
  int found;
  if (g == NULL)
    return 0;
  copy_window(c->g, g, WINDOW);
  if (fault_trace_decoy() && c->trace_from == 0)
    decoy = plant_trace_decoy(c, g, WINDOW, from);
  found = first_trace_array(c, g, WINDOW, from);
  free(decoy);
  free(g);
  return found;
}

/* J->parent: during every trace exit, a 32-bit slot of jit_State holds a
** trace number, at least once the root trace of the exiting loop. */
void discover_parent(struct calib *c, uint32_t root)
{
  struct vm_layout *lay = &c->lay;
  uint32_t size;
  size_t k;
  long best = -1;
  int i, h;
  if (calib_given(c, offsetof(struct vm_layout, g_parent))) {
    lay->exit_ok = 1;
    return;
  }
  if (c->nexit_samples == 0 || root == 0 ||
      !vm_u32(1, c->g + lay->g_sizetrace, &size))
    return;
  for (k = 0; k + 4 <= CALIB_J_WINDOW; k += 4) {
    int fits = 1, rooted = 0;
    for (i = 0; i < c->nexit_samples && fits; i++) {
      uint32_t v = copy_u32(c->exit_samples[i], k);
      fits = v > 0 && v < size;
      rooted = rooted || v == root;
    }
    if (!fits || !rooted)
      continue;
    for (h = 0; hint_parent[h] != 0; h++)
      if ((size_t)hint_parent[h] == CALIB_J_FROM + k)
        break;
    if (best < 0 || hint_parent[h] != 0)
      best = (long)k;
    if (hint_parent[h] != 0)
      break;
  }
  if (best >= 0) {
    lay->g_parent = (uint16_t)(lay->g_trace + CALIB_J_FROM + (size_t)best);
    lay->exit_ok = 1;
  }
}
