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

#include "gc_object.h"
#include "lua.h"
#include "vm_layout.h"

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

/*
** The verified heap layout for L's VM, learned at the first call in the
** process (in a separate VM; never in L's) and reused after. Returns 1
** with *out set, or 0 with a message naming the failed check in err.
** Allocates nothing in L's VM once the base layout is learned.
*/
int heap_layout_learn(lua_State *L, struct heap_layout *out, char *err,
                      size_t errlen);

#endif
