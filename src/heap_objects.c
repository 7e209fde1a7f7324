/*
** The heap walk's readers of LuaJIT's objects (see heap_objects.h): cdata
** sizes through the FFI's C type table, and the names of upvalues and
** locals in a prototype's debug info.
*/
#include "heap_objects.h"

#include <stdio.h>
#include <string.h>

/* ---- cdata and the FFI's C type table --------------------------------- */

/* CType kinds beyond those of heap_objects.h: the last whose size field is
** its size, and an attribute (resolved to its child); a pointer's size;
** how many attributes a type may stack. */
#define CT_KIND_HASSIZE 5
#define CT_KIND_ATTRIB 8
#define CT_PTR_SIZE 8
#define CT_ATTRIB_DEPTH 8

uintptr_t heap_ctype_raw(const struct heap_layout *h,
                         const struct heap_ctypes *ct, uint32_t id,
                         uint32_t *info)
{
  int depth;
  for (depth = 0; depth < CT_ATTRIB_DEPTH; depth++) {
    uintptr_t rec = ct->tab + (uintptr_t)id * h->ct_size;
    if (ct->tab == 0 || id >= ct->top)
      return 0;
    *info = vm_load_u32(rec);
    if (CT_KIND(*info) != CT_KIND_ATTRIB)
      return rec;
    id = *info & 0xffff;
  }
  return 0;
}

int heap_cdata_known(const struct heap_layout *h, uintptr_t g,
                     struct heap_ctypes *ct)
{
  uintptr_t cts, gg;
  uint32_t sizetab;
  uint8_t last;
  ct->tab = 0, ct->top = 0;
  if (!h->cd_ok || !vm_ref(&h->base, 1, g + h->g_ctype, &cts))
    return 0;
  if (cts == 0)
    return 1;
  /* The table's last type is readable: every id below top is. */
  if (!vm_ptr(1, cts + CTS_G, &gg) || gg != g || !vm_ptr(1, cts, &ct->tab) ||
      !vm_u32(1, cts + CTS_TOP, &ct->top) ||
      !vm_u32(1, cts + CTS_TOP + 4, &sizetab) || ct->top > sizetab ||
      ct->tab == 0 || ct->top == 0 ||
      !vm_u8(1, ct->tab + (uintptr_t)ct->top * h->ct_size - 1, &last)) {
    ct->tab = 0, ct->top = 0;
    return 0;
  }
  return 1;
}

uint64_t heap_cdata_size(const struct heap_layout *h,
                         const struct heap_ctypes *ct, uintptr_t cd)
{
  uintptr_t rec;
  uint32_t info;
  if (!h->cd_ok)
    return 0;
  if (vm_load_u8(cd + h->base.gct - 1) & CD_VAR) /* Its block is below it. */
    return (uint64_t)vm_load_u16(cd - CDV_EXTRA) + vm_load_u32(cd - CDV_LEN);
  rec = heap_ctype_raw(h, ct, vm_load_u16(cd + h->cd_ctypeid), &info);
  if (rec == 0)
    return 0;
  if (CT_KIND(info) > CT_KIND_HASSIZE)
    return (uint64_t)h->cd_size + CT_PTR_SIZE;
  return (uint64_t)h->cd_size + vm_load_u32(rec + 4);
}

/* ---- Strings ----------------------------------------------------------- */

int heap_str_is(const struct heap_layout *h, uintptr_t s, const char *text,
                size_t n)
{
  return vm_load_u8(s + h->base.gct) == GCT_STR &&
         vm_load_u32(s + h->base.str_len) == n &&
         memcmp((const void *)(s + h->base.str_size), text, n) == 0;
}

/* ---- Debug info -------------------------------------------------------- */

const char *heap_upvalue_name(const struct heap_layout *h, uintptr_t pt,
                              uint32_t i)
{
  const char *p = (const char *)vm_load_ref(&h->base, pt + h->pt_uvinfo);
  uint32_t n = vm_load_u8(pt + h->pt_sizeuv);
  if (p == NULL || i >= n)
    return "";
  while (i-- > 0)
    p += strlen(p) + 1;
  return p;
}

/* Reads a ULEB128 number at *p (varinfo's numbers are 32-bit). */
static uint32_t read_uleb(const uint8_t **p)
{
  uint32_t v = 0;
  int shift = 0;
  uint8_t b;
  do {
    b = *(*p)++;
    if (shift < 32)
      v |= (uint32_t)(b & 0x7f) << shift;
    shift += 7;
  } while (b & 0x80);
  return v;
}

/* The names the parser gives its hidden loop variables (VARNAME_* of
** lj_debug.h, numbered from 1; 0 ends the list). */
static const char *const hidden_names[] = {
    NULL,           "(for index)",     "(for limit)",
    "(for step)",   "(for generator)", "(for state)",
    "(for control)"};
#define HIDDEN_NAMES 7

int heap_local_name(const struct heap_layout *h, uintptr_t pt, uint32_t pos,
                    uint32_t slot, char *out, size_t len)
{
  const uint8_t *p = (const uint8_t *)vm_load_ref(&h->base, pt + h->pt_varinfo);
  uint32_t last = 0;
  if (p == NULL)
    return 0;
  for (;;) {
    const uint8_t *name = p;
    uint32_t vn = *p, startpc, endpc;
    if (vn < HIDDEN_NAMES) {
      if (vn == 0)
        return 0;
      p++;
    } else {
      p += strlen((const char *)p) + 1;
    }
    last = startpc = last + read_uleb(&p);
    if (startpc > pos)
      return 0;
    endpc = startpc + read_uleb(&p);
    if (pos < endpc && slot-- == 0) {
      snprintf(out, len, "%s",
               vn < HIDDEN_NAMES ? hidden_names[vn] : (const char *)name);
      return 1;
    }
  }
}
