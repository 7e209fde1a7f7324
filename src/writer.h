/*
** Buffered writer of the profile stream.
**
** The allocator hook appends bytes to a malloc'd buffer and the buffer is
** written to a file descriptor when it fills up. The first write error is
** latched: the writer then drops everything, and the error (with its errno)
** is reported when profiling stops. Nothing here allocates through Lua.
*/
#ifndef MEMPROF_WRITER_H
#define MEMPROF_WRITER_H

#include <stddef.h>
#include <stdint.h>

/* Longest encoding of one unsigned 64-bit LEB128 number. */
#define ULEB128_MAX 10

struct writer {
  uint8_t *buf;     /* Start of the buffer. */
  uint8_t *pos;     /* Next free byte. */
  uint8_t *limit;   /* Flush before an append would pass this point. */
  int fd;           /* Destination; -1 once closed. */
  int failed_errno; /* 0, or errno of the first failed write. */
  uint64_t written; /* Bytes handed to the file so far. */
};

/* Returns 0, or an errno value if the buffer cannot be allocated. */
int writer_init(struct writer *w, int fd, size_t size);

/* Writes out what is buffered. Returns 0 or the latched errno. */
int writer_flush(struct writer *w);

/* Flushes, closes the descriptor, frees the buffer. Returns 0 or errno. */
int writer_close(struct writer *w);

/* Releases the buffer without writing anything (used in forked children). */
void writer_abandon(struct writer *w);

void writer_bytes(struct writer *w, const void *data, size_t len);

/* Make room for `need` bytes (at most ULEB128_MAX * 8) before raw appends. */
static inline int writer_reserve(struct writer *w, size_t need)
{
  if (w->pos + need > w->limit)
    writer_flush(w);
  return w->failed_errno == 0;
}

static inline void writer_put_byte(struct writer *w, uint8_t b)
{
  *w->pos++ = b;
}

static inline void writer_put_uleb128(struct writer *w, uint64_t v)
{
  uint8_t *p = w->pos;
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  w->pos = p;
}

/* A string: its length as ULEB128, then its bytes. */
void writer_string(struct writer *w, const char *s, size_t len);

#endif
