/*
** The pprof encoding of a snapshot (see pprof.h).
**
** The message follows report/pprof.lua: sample types alloc_space (bytes),
** alloc_objects (count), inuse_space (bytes), inuse_objects (count), in
** this order; here the default is inuse_space, and the period type is
** space (bytes) with the sampling mean as the period (1 without
** sampling). No time is written, so that a run with a fixed seed gives
** the same bytes. Each place is a location of one line, whose function is
** named as the reports name it (source_names.h: by its source where the
** file is readable, the names the model lacks being strings added after
** the fixed ones); one sample per stack that the model keeps
** (its frames innermost first), and one per place for the events without
** one. Values are whole numbers: with sampling, rounded estimates.
**
** The gzip file holds stored deflate blocks (RFC 1951, type 0) and the
** CRC-32 of the content (RFC 1952), as memprof.gzip writes them in Lua.
*/
#define _GNU_SOURCE
#include "pprof.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler.h"
#include "source_names.h"

/* Field numbers of profile.proto. */
enum {
  PROFILE_SAMPLE_TYPE = 1,
  PROFILE_SAMPLE = 2,
  PROFILE_MAPPING = 3,
  PROFILE_LOCATION = 4,
  PROFILE_FUNCTION = 5,
  PROFILE_STRING_TABLE = 6,
  PROFILE_PERIOD_TYPE = 11,
  PROFILE_PERIOD = 12,
  PROFILE_COMMENT = 13,
  PROFILE_DEFAULT_SAMPLE_TYPE = 14,
};

/* The strings the encoding adds after the model's. */
enum {
  S_ALLOC_SPACE,
  S_ALLOC_OBJECTS,
  S_INUSE_SPACE,
  S_INUSE_OBJECTS,
  S_BYTES,
  S_COUNT,
  S_SPACE,
  S_LUA,
  S_COMMENT,
  S_SAMPLING,
  S_OVERFLOW,
  S_EXTRA
};

/* A growing byte buffer in malloc'd memory; `failed` once it cannot grow. */
struct buf {
  uint8_t *data;
  size_t len, cap;
  int failed;
};

static void buf_room(struct buf *b, size_t n)
{
  size_t cap = b->cap ? b->cap : 256;
  uint8_t *data;
  if (b->failed || b->len + n <= b->cap)
    return;
  while (cap < b->len + n)
    cap *= 2;
  if ((data = realloc(b->data, cap)) == NULL) {
    b->failed = 1;
    return;
  }
  b->data = data;
  b->cap = cap;
}

static void put_raw(struct buf *b, const void *p, size_t n)
{
  buf_room(b, n);
  if (b->failed)
    return;
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

static void put_varint(struct buf *b, uint64_t v)
{
  uint8_t tmp[10];
  size_t n = 0;
  while (v >= 0x80) {
    tmp[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  tmp[n++] = (uint8_t)v;
  put_raw(b, tmp, n);
}

/* A varint field (wire type 0); 0 is left out, as proto3 does. */
static void put_number(struct buf *b, unsigned field, uint64_t v)
{
  if (v == 0)
    return;
  put_varint(b, (uint64_t)field << 3);
  put_varint(b, v);
}

/* A length-delimited field (wire type 2). */
static void put_bytes(struct buf *b, unsigned field, const void *p, size_t n)
{
  put_varint(b, (uint64_t)field << 3 | 2);
  put_varint(b, n);
  put_raw(b, p, n);
}

/* An embedded message, then the buffer that held it emptied. */
static void put_message(struct buf *b, unsigned field, struct buf *m)
{
  if (m->failed)
    b->failed = 1;
  put_bytes(b, field, m->data, m->len);
  m->len = 0;
}

/* ---- The profile --------------------------------------------------------- */

/* What is live now, by place (no kept stack) and by stack. */
struct inuse {
  double *place_bytes, *place_objects;
  double *stack_bytes, *stack_objects;
};

static int sum_live(const struct profiler *p, struct inuse *u)
{
  const struct places *m = &p->model;
  size_t i;
  u->place_bytes = calloc(m->count + 1, sizeof(double));
  u->place_objects = calloc(m->count + 1, sizeof(double));
  u->stack_bytes = calloc(m->stacks_cap + 1, sizeof(double));
  u->stack_objects = calloc(m->stacks_cap + 1, sizeof(double));
  if (u->place_bytes == NULL || u->place_objects == NULL ||
      u->stack_bytes == NULL || u->stack_objects == NULL)
    return ENOMEM;
  for (i = 0; i <= p->live.mask; i++) {
    const struct live_block *b = &p->live.slots[i];
    double w;
    if (b->addr == 0)
      continue;
    w = p->sampler.mean != 0 ? sampler_weight(p->sampler.mean, b->size) : 1;
    if (places_has_stack(m, b->stack)) {
      u->stack_bytes[b->stack] += w * (double)b->size;
      u->stack_objects[b->stack] += w;
    } else if (b->place < m->count) {
      u->place_bytes[b->place] += w * (double)b->size;
      u->place_objects[b->place] += w;
    }
  }
  return 0;
}

static void free_inuse(struct inuse *u)
{
  free(u->place_bytes);
  free(u->place_objects);
  free(u->stack_bytes);
  free(u->stack_objects);
}

static uint64_t whole(double v)
{
  return v > 0 ? (uint64_t)llround(v) : 0;
}

/* One sample: its locations (place ids, innermost first) and values. Left
** out when every value is 0. */
static void put_sample(struct buf *b, struct buf *m, struct buf *packed,
                       const uint32_t *places, uint32_t n,
                       const double values[4])
{
  uint64_t v[4];
  uint32_t i;
  for (i = 0; i < 4; i++)
    v[i] = whole(values[i]);
  if (v[0] == 0 && v[1] == 0 && v[2] == 0 && v[3] == 0)
    return;
  for (i = 0; i < n; i++)
    put_varint(packed, (uint64_t)places[i] + 1);
  put_message(m, 1, packed);
  for (i = 0; i < 4; i++)
    put_varint(packed, v[i]);
  put_message(m, 2, packed);
  put_message(b, PROFILE_SAMPLE, m);
}

static void put_samples(const struct profiler *p, const struct inuse *u,
                        struct buf *b, struct buf *m, struct buf *packed)
{
  const struct places *model = &p->model;
  uint32_t i;
  for (i = 0; i < model->count; i++) {
    double values[4];
    values[0] = model->list[i].alloc_bytes;
    values[1] = model->list[i].alloc_objects;
    values[2] = u->place_bytes[i];
    values[3] = u->place_objects[i];
    put_sample(b, m, packed, &i, 1, values);
  }
  for (i = 0; i < model->stacks_cap; i++) {
    const struct model_stack *st = &model->stacks[i];
    double values[4];
    if (st->count == 0)
      continue;
    values[0] = st->alloc_bytes;
    values[1] = st->alloc_objects;
    values[2] = u->stack_bytes[i];
    values[3] = u->stack_objects[i];
    put_sample(b, m, packed, model->frames + st->start, st->count, values);
  }
}

/* The function ids of the places: one per distinct (name, file, first
** line), numbered from 1 in order of first use. */
static uint32_t *function_ids(const struct places *m, uint32_t *count)
{
  size_t size = 16, mask, i;
  uint32_t *ids = calloc(m->count + 1, sizeof(*ids)), *slots, n = 0;
  while (size < 2 * (size_t)m->count + 2)
    size *= 2;
  mask = size - 1;
  slots = calloc(size, sizeof(*slots)); /* Place index + 1 of a function. */
  if (ids == NULL || slots == NULL) {
    free(ids);
    free(slots);
    return NULL;
  }
  for (i = 0; i < m->count; i++) {
    const struct place *pl = &m->list[i];
    size_t j = (size_t)symbols_mix64((uint64_t)pl->func << 32 ^ pl->file ^
                                     (uint64_t)pl->start_line << 20) &
               mask;
    for (; slots[j] != 0; j = (j + 1) & mask) {
      const struct place *q = &m->list[slots[j] - 1];
      if (q->func == pl->func && q->file == pl->file &&
          q->start_line == pl->start_line)
        break;
    }
    if (slots[j] == 0) {
      slots[j] = (uint32_t)i + 1;
      ids[i] = ++n;
    } else {
      ids[i] = ids[slots[j] - 1];
    }
  }
  free(slots);
  *count = n;
  return ids;
}

static void put_value_type(struct buf *b, struct buf *m, unsigned field,
                           uint64_t type, uint64_t unit)
{
  put_number(m, 1, type);
  put_number(m, 2, unit);
  put_message(b, field, m);
}

/* The first place of each function (by id - 1), and the names the reports
** give them. Returns 0 or ENOMEM. */
static int name_functions(const struct places *model, const uint32_t *fid,
                          uint32_t nfunc, struct source_names *names)
{
  uint32_t *first = malloc(((size_t)nfunc + 1) * sizeof(*first)), i, done = 0;
  int err;
  if (first == NULL)
    return ENOMEM;
  for (i = 0; i < model->count && done < nfunc; i++)
    if (fid[i] == done + 1)
      first[done++] = i;
  err = source_names_make(names, model, first, nfunc);
  free(first);
  return err;
}

/* Locations (one per place, id = place + 1) and functions; a name of
** `names` is string `extra` + its rank among them. */
static int put_places(const struct places *model, struct buf *b, struct buf *m,
                      struct buf *line, struct source_names *names,
                      uint64_t extra)
{
  uint32_t nfunc = 0, i, done = 0;
  uint32_t *fid = function_ids(model, &nfunc);
  if (fid == NULL || name_functions(model, fid, nfunc, names) != 0) {
    free(fid);
    return ENOMEM;
  }
  for (i = 0; i < model->count; i++) {
    const struct place *pl = &model->list[i];
    put_number(line, 1, fid[i]);
    put_number(line, 2, pl->line);
    put_number(m, 1, (uint64_t)i + 1);
    put_number(m, 2, 1);
    put_message(m, 4, line);
    put_message(b, PROFILE_LOCATION, m);
  }
  /* Functions in id order: the first place of each. */
  for (i = 0; i < model->count && done < nfunc; i++) {
    const struct place *pl = &model->list[i];
    uint64_t name = pl->func;
    if (fid[i] != done + 1)
      continue;
    if (names->names[done] != NULL)
      name = extra++;
    put_number(m, 1, fid[i]);
    put_number(m, 2, name);
    put_number(m, 3, name);
    put_number(m, 4, pl->file);
    put_number(m, 5, pl->start_line);
    put_message(b, PROFILE_FUNCTION, m);
    done++;
  }
  free(fid);
  return 0;
}

static void put_strings(const struct profiler *p, const char *name,
                        const struct source_names *names, struct buf *b)
{
  static const char *const fixed[] = {
      "alloc_space", "alloc_objects", "inuse_space", "inuse_objects",
      "bytes",       "count",         "space",       "lua"};
  char text[600];
  const struct places *m = &p->model;
  uint32_t i;
  for (i = 0; i < m->strings; i++) {
    const char *s = places_string(m, i);
    put_bytes(b, PROFILE_STRING_TABLE, s, strlen(s));
  }
  for (i = 0; i < S_COMMENT; i++)
    put_bytes(b, PROFILE_STRING_TABLE, fixed[i], strlen(fixed[i]));
  snprintf(text, sizeof(text), "memprof snapshot of %s", name);
  put_bytes(b, PROFILE_STRING_TABLE, text, strlen(text));
  snprintf(text, sizeof(text),
           "sampled: one sample per %llu bytes on average; figures are "
           "estimates",
           (unsigned long long)p->sampler.mean);
  put_bytes(b, PROFILE_STRING_TABLE, text, strlen(text));
  snprintf(text, sizeof(text),
           "more places or stacks than memprof keeps: the rest are left out");
  put_bytes(b, PROFILE_STRING_TABLE, text, strlen(text));
  /* From S_EXTRA on, in the order put_places numbered them. */
  for (i = 0; i < names->count; i++)
    if (names->names[i] != NULL)
      put_bytes(b, PROFILE_STRING_TABLE, names->names[i],
                strlen(names->names[i]));
}

/* The profile message of p into b. Returns 0 or errno. */
static int encode(const struct profiler *p, const char *name, struct buf *b)
{
  const struct places *model = &p->model;
  uint64_t base = model->strings; /* The first string added here. */
  struct buf m = {0}, line = {0};
  struct inuse u = {0};
  struct source_names names = {0};
  int err = sum_live(p, &u);
  if (err == 0) {
    put_value_type(b, &m, PROFILE_SAMPLE_TYPE, base + S_ALLOC_SPACE,
                   base + S_BYTES);
    put_value_type(b, &m, PROFILE_SAMPLE_TYPE, base + S_ALLOC_OBJECTS,
                   base + S_COUNT);
    put_value_type(b, &m, PROFILE_SAMPLE_TYPE, base + S_INUSE_SPACE,
                   base + S_BYTES);
    put_value_type(b, &m, PROFILE_SAMPLE_TYPE, base + S_INUSE_OBJECTS,
                   base + S_COUNT);
    put_samples(p, &u, b, &m, &line);
    /* One mapping, the program: pprof then needs no binary. */
    put_number(&m, 1, 1);
    put_number(&m, 5, base + S_LUA);
    put_number(&m, 7, 1);
    put_number(&m, 8, 1);
    put_number(&m, 9, 1);
    put_message(b, PROFILE_MAPPING, &m);
    err = put_places(model, b, &m, &line, &names, base + S_EXTRA);
  }
  if (err == 0) {
    put_strings(p, name, &names, b);
    put_value_type(b, &m, PROFILE_PERIOD_TYPE, base + S_SPACE, base + S_BYTES);
    put_number(b, PROFILE_PERIOD, p->sampler.mean != 0 ? p->sampler.mean : 1);
    put_number(b, PROFILE_COMMENT, base + S_COMMENT);
    if (p->sampler.mean != 0)
      put_number(b, PROFILE_COMMENT, base + S_SAMPLING);
    if (model->overflow)
      put_number(b, PROFILE_COMMENT, base + S_OVERFLOW);
    put_number(b, PROFILE_DEFAULT_SAMPLE_TYPE, base + S_INUSE_SPACE);
  }
  if (err == 0 && (b->failed || m.failed || line.failed))
    err = ENOMEM;
  free(m.data);
  free(line.data);
  free_inuse(&u);
  source_names_free(&names);
  return err;
}

/* ---- gzip ------------------------------------------------------------------
 */

uint32_t pprof_crc32(uint32_t crc, const uint8_t *data, size_t n)
{
  size_t i;
  crc = ~crc;
  for (i = 0; i < n; i++) {
    int k;
    crc ^= data[i];
    for (k = 0; k < 8; k++)
      crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

static void put_le32(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

/* data as a gzip file of stored blocks into out. */
static void gzip_wrap(const uint8_t *data, size_t n, struct buf *out)
{
  static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  uint8_t tail[8];
  size_t at = 0;
  put_raw(out, header, sizeof(header));
  do {
    size_t len = n - at < 65535 ? n - at : 65535;
    uint8_t block[5];
    block[0] = at + len == n ? 1 : 0;
    block[1] = (uint8_t)len;
    block[2] = (uint8_t)(len >> 8);
    block[3] = (uint8_t)~len;
    block[4] = (uint8_t)(~len >> 8);
    put_raw(out, block, sizeof(block));
    put_raw(out, data + at, len);
    at += len;
  } while (at < n);
  put_le32(tail, pprof_crc32(0, data, n));
  put_le32(tail + 4, (uint32_t)n);
  put_raw(out, tail, sizeof(tail));
}

int pprof_write(const struct profiler *p, int fd, const char *name)
{
  struct buf message = {0}, file = {0};
  int err = encode(p, name, &message);
  if (err == 0) {
    gzip_wrap(message.data, message.len, &file);
    err = file.failed ? ENOMEM : writer_write_all(fd, file.data, file.len);
  }
  free(message.data);
  free(file.data);
  return err;
}
