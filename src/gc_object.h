/*
** LuaJIT's GC objects as the module reads them: type bytes, TValue tags,
** function ids, and the readers of words, references and values that the
** VM's inspection (vm_inspect.h), compiled-code attribution
** (trace_lines.h) and the heap walk (heap_objects.h) share.
**
** The readers come in two forms over one implementation (vm_read):
** vm_u8 .. vm_ref take a `safe` flag and say whether the read succeeded:
** with safe = 1 (calibration, memory not yet known readable) a read goes
** through safe_read() and cannot fault; with safe = 0 (the hook) it is a
** plain load, and a constant flag folds away. vm_load_* are the plain
** loads as values, for memory known readable: an object the walk has
** checked, a copy of another process's heap.
*/
#ifndef MEMPROF_GC_OBJECT_H
#define MEMPROF_GC_OBJECT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hot_inline.h"
#include "safe_read.h"
#include "vm_layout.h"

/* Inlined into its caller, so that a constant `safe` flag and a constant
** layout fold away. */
#define VM_INLINE HOT_INLINE

/* GC object type bytes (~LJ_Txxx); the same in every supported build. */
#define GCT_STR 4
#define GCT_UPVAL 5
#define GCT_THREAD 6
#define GCT_PROTO 7
#define GCT_FUNC 8
#define GCT_TRACE 9
#define GCT_CDATA 10
#define GCT_TAB 11
#define GCT_UDATA 12

/* A TValue's type tag (its itype, LJ_Txxx) as vm_load_tv gives it. A GC
** object's tag is ~type: from ~GCT_UDATA to ~GCT_STR. Numbers are the tags
** up to TAG_NUMX. */
#define TAG_NIL 0xffffffffu
#define TAG_FALSE 0xfffffffeu
#define TAG_TRUE 0xfffffffdu
#define TAG_LIGHTUD 0xfffffffcu
#define TAG_OF(gct) (~(uint32_t)(gct))
#define TAG_GC_FIRST TAG_OF(GCT_UDATA)
#define TAG_GC_LAST TAG_OF(GCT_STR)
#define TAG_NUMX 0xfffffff2u

#define TVALUE_SIZE 8
#define GC64_ADDR_MASK 0x00007fffffffffffULL

/* Function ids: 0 Lua function, 1 C function, >= 2 built-in. */
#define FFID_LUA 0
#define FFID_C 1

VM_INLINE int vm_read(int safe, uintptr_t addr, void *dst, size_t n)
{
  if (safe)
    return safe_read(addr, dst, n);
  memcpy(dst, (const void *)addr, n);
  return 1;
}

#define VM_READER(name, type)                                                  \
  VM_INLINE int name(int safe, uintptr_t addr, type *out)                      \
  {                                                                            \
    return vm_read(safe, addr, out, sizeof(type));                             \
  }
VM_READER(vm_u8, uint8_t)
VM_READER(vm_u16, uint16_t)
VM_READER(vm_u32, uint32_t)
VM_READER(vm_i32, int32_t)
VM_READER(vm_u64, uint64_t)
#undef VM_READER

/* A native pointer (8 bytes in every supported build). */
VM_INLINE int vm_ptr(int safe, uintptr_t addr, uintptr_t *out)
{
  uint64_t v;
  if (!vm_u64(safe, addr, &v))
    return 0;
  *out = (uintptr_t)v;
  return 1;
}

/* A GCRef or MRef: 8 bytes with GC64, 4 bytes without. */
VM_INLINE int vm_ref(const struct vm_layout *lay, int safe, uintptr_t addr,
                     uintptr_t *out)
{
  if (lay->gc64)
    return vm_ptr(safe, addr, out);
  uint32_t v;
  if (!vm_u32(safe, addr, &v))
    return 0;
  *out = (uintptr_t)v;
  return 1;
}

/* A GC object pointer is non-NULL, 8-byte aligned and of the given type. */
VM_INLINE int vm_is_gc(const struct vm_layout *lay, int safe, uintptr_t obj,
                       uint8_t gct)
{
  uint8_t t;
  if (obj == 0 || (obj & 7) != 0)
    return 0;
  return vm_u8(safe, obj + lay->gct, &t) && t == gct;
}

/* The tag of a TValue's 64 bits, and its GC object's address (meaningful
** only for a tag from TAG_GC_FIRST to TAG_GC_LAST). With GC64 the tag is
** the top 17 bits, sign-extended; without, the high word ({gcr, it},
** little-endian). */
VM_INLINE uint32_t vm_tv_split(int gc64, uint64_t v, uintptr_t *obj)
{
  if (gc64) {
    *obj = (uintptr_t)(v & GC64_ADDR_MASK);
    return (uint32_t)((int64_t)v >> 47);
  }
  *obj = (uintptr_t)(uint32_t)v;
  return (uint32_t)(v >> 32);
}

/* ---- Plain loads, for memory known readable --------------------------- */

#define VM_LOADER(name, reader, type)                                          \
  VM_INLINE type name(uintptr_t at)                                            \
  {                                                                            \
    type v;                                                                    \
    reader(0, at, &v);                                                         \
    return v;                                                                  \
  }
VM_LOADER(vm_load_u8, vm_u8, uint8_t)
VM_LOADER(vm_load_u16, vm_u16, uint16_t)
VM_LOADER(vm_load_u32, vm_u32, uint32_t)
VM_LOADER(vm_load_u64, vm_u64, uint64_t)
#undef VM_LOADER

/* A GCRef or MRef at `at`. */
VM_INLINE uintptr_t vm_load_ref(const struct vm_layout *lay, uintptr_t at)
{
  uintptr_t v;
  vm_ref(lay, 0, at, &v);
  return v;
}

/* The tag of the TValue at `at`, and its GC object's address (see
** vm_tv_split). */
VM_INLINE uint32_t vm_load_tv(const struct vm_layout *lay, uintptr_t at,
                              uintptr_t *obj)
{
  return vm_tv_split(lay->gc64, vm_load_u64(at), obj);
}

/* Whether the TValue at `at` holds a GC object: its address and type. */
VM_INLINE int vm_load_gc(const struct vm_layout *lay, uintptr_t at,
                         uintptr_t *obj, uint8_t *gct)
{
  uint32_t tag = vm_load_tv(lay, at, obj);
  if (tag < TAG_GC_FIRST || tag > TAG_GC_LAST || *obj == 0)
    return 0;
  *gct = (uint8_t)~tag;
  return 1;
}

#endif
