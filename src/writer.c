/*
** Buffered writer of the profile stream.
*/
#include "writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Room kept free at the end of the buffer so that one event (header,
** location and four numbers) always fits after a single reserve check. */
#define WRITER_SLACK (ULEB128_MAX * 8)

int writer_init(struct writer *w, int fd, size_t size)
{
  memset(w, 0, sizeof(*w));
  w->fd = fd;
  if (size < 4 * WRITER_SLACK)
    size = 4 * WRITER_SLACK;
  w->buf = malloc(size);
  if (w->buf == NULL)
    return ENOMEM;
  w->pos = w->buf;
  w->limit = w->buf + size - WRITER_SLACK;
  return 0;
}

/* Writes len bytes, retrying short writes and EINTR. */
static int write_all(int fd, const uint8_t *p, size_t len)
{
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    if (n == 0)
      return EIO;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int writer_flush(struct writer *w)
{
  size_t len = (size_t)(w->pos - w->buf);
  if (w->buf == NULL)
    return w->failed_errno;
  w->pos = w->buf;
  if (w->failed_errno == 0 && len > 0) {
    int saved = errno; /* The host must not see our errno. */
    w->failed_errno = write_all(w->fd, w->buf, len);
    if (w->failed_errno == 0)
      w->written += len;
    errno = saved;
  }
  return w->failed_errno;
}

void writer_bytes(struct writer *w, const void *data, size_t len)
{
  const uint8_t *p = data;
  while (len > 0 && w->failed_errno == 0) {
    size_t room = (size_t)(w->limit - w->pos);
    size_t n = len < room ? len : room;
    memcpy(w->pos, p, n);
    w->pos += n;
    p += n;
    len -= n;
    if (len > 0)
      writer_flush(w);
  }
}

void writer_string(struct writer *w, const char *s, size_t len)
{
  if (!writer_reserve(w, ULEB128_MAX))
    return;
  writer_put_uleb128(w, len);
  writer_bytes(w, s, len);
}

int writer_close(struct writer *w)
{
  int err = writer_flush(w);
  if (w->fd >= 0 && close(w->fd) != 0 && err == 0)
    err = errno;
  w->fd = -1;
  free(w->buf);
  w->buf = w->pos = w->limit = NULL;
  if (err != 0 && w->failed_errno == 0)
    w->failed_errno = err;
  return w->failed_errno;
}

void writer_abandon(struct writer *w)
{
  free(w->buf);
  w->buf = w->pos = w->limit = NULL;
  w->fd = -1;
}
