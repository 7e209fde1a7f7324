/*
** What the heap walk knows of LuaJIT's objects, beyond the base layout of
** vm_layout.h: tables and their nodes, closures and upvalues, prototypes'
** constants and debug info, threads' environment, userdata, and where
** global_State keeps the main thread.
**
** Each mode (GC64 or not) has one candidate set of offsets, taken from
** LuaJIT's lj_obj.h (the same in every supported build). A candidate is
** never used as it is: at the first heap snapshot of the process it is
** verified in a throw-away VM of the same build against the public API
** (lua_createtable and the sizes its allocator sees, lua_topointer,
** lua_upvalueid, lua_getupvalue and lua_getlocal names; for cdata, the
** FFI's type ids, ffi.sizeof and the blocks of ffi.new), and the object
** sizes that differ between builds (lua_State) are measured there. A
** failed check is reported by name and no walk runs; a failed FFI check
** only leaves cdata sizes unknown (cd_ok 0).
*/
#ifndef MEMPROF_HEAP_LAYOUT_H
#define MEMPROF_HEAP_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lua.h"
#include "vm_layout.h"

/* GC object types (~LJ_Txxx) beyond those of vm_layout.h. */
#define GCT_UPVAL 5
#define GCT_CDATA 10
#define GCT_TAB 11
#define GCT_UDATA 12

struct heap_layout {
  struct vm_layout base; /* The verified base layout it extends. */
  /* GCtab */
  uint8_t tab_colo, tab_array, tab_mt, tab_node, tab_asize, tab_hmask;
  uint8_t tab_size; /* sizeof(GCtab): a colocated array follows it. */
  /* Node: the hash part's slots. */
  uint8_t node_size, node_val, node_key;
  /* GCfunc: environment, upvalue count; where the upvalue refs of a Lua
  ** function and the upvalue TValues of a C function start (its size is
  ** that offset plus the upvalues). */
  uint8_t fn_env, fn_nupvalues, fnl_uv, fnc_up;
  /* GCupval: the pointer to its value, and its size. */
  uint8_t uv_v, uv_size;
  /* GCproto */
  uint8_t pt_k, pt_sizekgc, pt_sizekn, pt_sizept, pt_uvinfo, pt_varinfo;
  uint8_t pt_sizeuv;
  /* GCudata: environment, payload length, metatable; the payload follows
  ** ud_size bytes of header. */
  uint8_t ud_env, ud_len, ud_mt, ud_size;
  /* lua_State: environment; its size (without the stack) differs between
  ** builds of one mode (OpenResty appends fields), so it is measured. */
  uint16_t L_env, L_size;
  /* global_State: the main thread. */
  uint16_t g_mainth;
  /* A string's block: its header and characters with a NUL, or (newer
  ** builds) the characters rounded up to 4 bytes past a NUL. Measured. */
  uint8_t str_pad4;
  /* cdata (lj_obj.h, lj_ctype.h): GCcdata's size and type id; where
  ** global_State points to the FFI's C type state (0 until the FFI is
  ** loaded) and the size of a CType in its table. cd_ok: all verified,
  ** else cdata sizes are unknown (0). */
  uint8_t cd_ok, cd_size, cd_ctypeid, ct_size;
  uint16_t g_ctype;
  /* JIT traces (heap_traces.h): tr_ok, every check passed, else tr_why
  ** says why and the walk does not visit traces. The IR ops of a GC
  ** constant, of the 64-bit null and of the first and last constant op;
  ** the IR types whose constants take two slots; GCtrace's IR, lowest
  ** constant, IR count, snapshot count and snapshot map count (whose
  ** width is 2 or 4 bytes); a snapshot's size and the bytes of a trace's
  ** block before its IR; where a side trace names its root trace. */
  uint8_t tr_ok, ir_kgc, ir_knull, ir_kfirst, ir_klast;
  uint8_t tr_ir, tr_nk, tr_nins, tr_nsnap, tr_nsnapmap, tr_map_width;
  uint8_t tr_root; /* GCtrace's root trace number (0: a root trace). */
  uint8_t tr_snap_size;
  uint16_t tr_head;
  uint32_t irt_is64;
  char tr_why[160];
};

/* The FFI's C type table of a VM, as the walk reads it (see
** heap_cdata_known). tab 0: no FFI loaded, so no cdata. */
struct heap_ctypes {
  uintptr_t tab;
  uint32_t top; /* Ids from 0 to top - 1 are in the table. */
};

/* Whether cdata sizes can be read in the VM of global_State g: the FFI
** layout was verified, and the VM has no C type state (no FFI loaded) or
** one whose g is g, then read into *ct with fault-safe reads. The table
** stays put while no Lua code runs. */
int heap_cdata_known(const struct heap_layout *h, uintptr_t g,
                     struct heap_ctypes *ct);

/* The block size of the cdata at cd (as lj_cdata_free computes it), or 0
** if it cannot be known; ct from heap_cdata_known. */
uint64_t heap_cdata_size(const struct heap_layout *h,
                         const struct heap_ctypes *ct, uintptr_t cd);

/* The size of the block of a string of len characters. */
static inline uint64_t heap_str_size(const struct heap_layout *h, uint32_t len)
{
  if (h->str_pad4)
    return h->base.str_size + (((uint64_t)len + 4) & ~(uint64_t)3);
  return h->base.str_size + (uint64_t)len + 1;
}

/* Type tags of a TValue (the itype, LJ_Txxx) that hold a GC object: from
** ~LJ_TSTR down to ~LJ_TUDATA. The object's type byte is ~tag. */
#define TAG_GC_FIRST 0xfffffff3u /* ~12: userdata */
#define TAG_GC_LAST 0xfffffffbu  /* ~4: string */

/* The type tag of the TValue at `at`, and its GC object's address (only
** meaningful for a tag from TAG_GC_FIRST to TAG_GC_LAST). */
static inline uint32_t heap_tv(const struct heap_layout *h, uintptr_t at,
                               uintptr_t *obj)
{
  uint64_t v;
  memcpy(&v, (const void *)at, sizeof(v));
  if (h->base.gc64) {
    *obj = (uintptr_t)(v & 0x00007fffffffffffULL);
    return (uint32_t)((int64_t)v >> 47);
  }
  *obj = (uintptr_t)(uint32_t)v; /* Little-endian: {gcr, it}. */
  return (uint32_t)(v >> 32);
}

/* Whether the TValue at `at` holds a GC object: its address and type. */
static inline int heap_tv_gc(const struct heap_layout *h, uintptr_t at,
                             uintptr_t *obj, uint8_t *gct)
{
  uint32_t tag = heap_tv(h, at, obj);
  if (tag < TAG_GC_FIRST || tag > TAG_GC_LAST || *obj == 0)
    return 0;
  *gct = (uint8_t)~tag;
  return 1;
}

/* A GCRef or MRef at `at` (8 bytes with GC64, 4 without). */
static inline uintptr_t heap_ref(const struct heap_layout *h, uintptr_t at)
{
  if (h->base.gc64) {
    uint64_t v;
    memcpy(&v, (const void *)at, sizeof(v));
    return (uintptr_t)v;
  } else {
    uint32_t v;
    memcpy(&v, (const void *)at, sizeof(v));
    return (uintptr_t)v;
  }
}

static inline uint32_t heap_u32(uintptr_t at)
{
  uint32_t v;
  memcpy(&v, (const void *)at, sizeof(v));
  return v;
}

static inline uint8_t heap_u8(uintptr_t at)
{
  return *(const uint8_t *)at;
}

/*
** The verified heap layout for L's VM, learned at the first call in the
** process (in a separate VM; never in L's) and reused after. Returns 1
** with *out set, or 0 with a message naming the failed check in err.
** Allocates nothing in L's VM once the base layout is learned.
*/
int heap_layout_learn(lua_State *L, struct heap_layout *out, char *err,
                      size_t errlen);

/* The name of local `slot` (from 0) of prototype pt at bytecode position
** pos, from its debug info (as lj_debug_varname reads it) into out.
** Returns 0 if pt has no debug info or no local there (a temporary). */
int heap_local_name(const struct heap_layout *h, uintptr_t pt, uint32_t pos,
                    uint32_t slot, char *out, size_t len);

#endif
