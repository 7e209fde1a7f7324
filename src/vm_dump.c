/*
** A function's bytecode dump (lua_dump, the C API), read as the discovery
** of a prototype's fields needs it (vm_discover.c).
*/
#include "vm_dump.h"

#include <stdlib.h>
#include <string.h>

struct dump_buf {
  uint8_t b[4096];
  size_t n;
};

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud)
{
  struct dump_buf *d = ud;
  (void)L;
  if (sz > sizeof(d->b) - d->n)
    return 1;
  memcpy(d->b + d->n, p, sz);
  d->n += sz;
  return 0;
}

static int get_uleb(const struct dump_buf *d, size_t *pos, uint32_t *v)
{
  uint32_t r = 0;
  int shift = 0;
  while (*pos < d->n && shift < 32) {
    uint8_t b = d->b[(*pos)++];
    r |= (uint32_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return 1;
    }
    shift += 7;
  }
  return 0;
}

int vm_dump_function(lua_State *L, int *flags, uint32_t *sizebc)
{
  struct dump_buf *d = malloc(sizeof(*d));
  size_t pos = 5, last = 0;
  uint32_t len, f, skip;
  int ok = 0;
  if (d == NULL)
    return 0;
  d->n = 0;
  if (lua_dump(L, dump_writer, d) != 0 || d->n < 6 || d->b[0] != 0x1b ||
      d->b[1] != 'L' || d->b[2] != 'J')
    goto done;
  pos = 4;
  if (!get_uleb(d, &pos, &f))
    goto done;
  *flags = (int)f;
  if (!(f & 2) && (!get_uleb(d, &pos, &skip) || (pos += skip) > d->n))
    goto done; /* The chunk name of an unstripped dump. */
  while (get_uleb(d, &pos, &len) && len != 0 && pos + len <= d->n) {
    last = pos;
    pos += len;
  }
  if (last != 0) {
    /* pflags, numparams, framesize, sizeuv, then sizekgc, sizekn, sizebc. */
    pos = last + 4;
    ok = get_uleb(d, &pos, &skip) && get_uleb(d, &pos, &skip) &&
         get_uleb(d, &pos, sizebc);
  } else {
    ok = 1;
  }
done:
  free(d);
  return ok;
}
