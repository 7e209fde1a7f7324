/*
** LuaJIT's objects as the heap walk reads them, through a verified heap
** layout (heap_layout.h): the sizes of tables, strings and cdata blocks,
** names of upvalues and locals from a prototype's debug info. The
** calibration (heap_layout.c) checks these same readers against the
** public API before any walk uses them.
**
** Every read is a plain load: the walk reads objects it has checked (type
** byte, alignment) in a VM that does not run meanwhile, or in a copy of
** another process's heap; only the FFI's C type table, which the heap
** does not reach, is read with fault-safe reads.
*/
#ifndef MEMPROF_HEAP_OBJECTS_H
#define MEMPROF_HEAP_OBJECTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gc_object.h"
#include "heap_layout.h"

/* CTState (lj_ctype.h) starts with native pointers and 32-bit numbers:
** tab, top, sizetab, L, g (L is set only while it works). */
#define CTS_TOP 8
#define CTS_G 24
#define CTS_MIN 32
/* CType: info (the kind in its top 4 bits, a child id in its low 16) then
** size. */
#define CT_KIND(info) ((info) >> 28)
#define CT_KIND_NUM 0
#define CT_KIND_STRUCT 1
/* GCcdataVar, just below a variable-length cdata: offset, extra, len. */
#define CDV_OFFSET 8
#define CDV_EXTRA 6
#define CDV_LEN 4
#define CD_VAR 0x80 /* In `marked`: a variable-length cdata. */

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

/* The C type record of id in ct, following attributes as ctype_raw does,
** with its info in *info; 0 if an id is out of the table. */
uintptr_t heap_ctype_raw(const struct heap_layout *h,
                         const struct heap_ctypes *ct, uint32_t id,
                         uint32_t *info);

/* The size of the block of a string of len characters. */
static inline uint64_t heap_str_size(const struct heap_layout *h, uint32_t len)
{
  if (h->str_pad4)
    return h->base.str_size + (((uint64_t)len + 4) & ~(uint64_t)3);
  return h->base.str_size + (uint64_t)len + 1;
}

/* Whether the GCstr at s holds the n bytes at text. */
int heap_str_is(const struct heap_layout *h, uintptr_t s, const char *text,
                size_t n);

/* The bytes of the table at t: its block (with the colocated array), a
** separate array and the hash part. */
static inline uint64_t heap_table_size(const struct heap_layout *h, uintptr_t t)
{
  int8_t colo = (int8_t)vm_load_u8(t + h->tab_colo);
  uint32_t hmask = vm_load_u32(t + h->tab_hmask);
  uint64_t size = h->tab_size + (uint64_t)(colo & 0x7f) * TVALUE_SIZE;
  if (colo <= 0)
    size += (uint64_t)vm_load_u32(t + h->tab_asize) * TVALUE_SIZE;
  if (hmask != 0)
    size += ((uint64_t)hmask + 1) * h->node_size;
  return size;
}

/* The name of upvalue i (from 0) of prototype pt, or "" (no debug info). */
const char *heap_upvalue_name(const struct heap_layout *h, uintptr_t pt,
                              uint32_t i);

/* The name of local `slot` (from 0) of prototype pt at bytecode position
** pos, from its debug info (as lj_debug_varname reads it) into out.
** Returns 0 if pt has no debug info or no local there (a temporary). */
int heap_local_name(const struct heap_layout *h, uintptr_t pt, uint32_t pos,
                    uint32_t slot, char *out, size_t len);

#endif
