/*
** The reporter's names of a snapshot's functions (see source_names.h).
*/
#define _GNU_SOURCE
#include "source_names.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX "function at "
#define PREFIX_LEN (sizeof(PREFIX) - 1)

/* Lua's %s, %a and %w as LuaJIT defines them: ASCII only, no locale. */
static int is_space(char c)
{
  return c == ' ' || (c >= '\t' && c <= '\r');
}

static int is_alpha(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(char c)
{
  return c >= '0' && c <= '9';
}

static int is_hex(char c)
{
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static const char *spaces(const char *p, const char *e)
{
  while (p < e && is_space(*p))
    p++;
  return p;
}

/* `word` then at least one space (%s+), or NULL. */
static const char *word_spaces(const char *p, const char *e, const char *word)
{
  size_t n = strlen(word);
  if ((size_t)(e - p) <= n || memcmp(p, word, n) != 0 || !is_space(p[n]))
    return NULL;
  return spaces(p + n, e);
}

/* The end of NAME ([%a_][%w_]*[%.:%w_]*, which is as long as it can be:
** what may follow it is none of its characters), or NULL. */
static const char *name_end(const char *p, const char *e)
{
  if (p == e || !(is_alpha(*p) || *p == '_'))
    return NULL;
  for (p++; p < e; p++)
    if (!(is_alpha(*p) || is_digit(*p) || *p == '_' || *p == '.' || *p == ':'))
      break;
  return p;
}

/* %s*%( ends a definition's name. */
static int opens(const char *p, const char *e)
{
  p = spaces(p, e);
  return p < e && *p == '(';
}

/* %s*=%s*function%s*%( after an assigned name. */
static int assigns_function(const char *p, const char *e)
{
  p = spaces(p, e);
  if (p == e || *p != '=')
    return 0;
  p = spaces(p + 1, e);
  if ((size_t)(e - p) < 8 || memcmp(p, "function", 8) != 0)
    return 0;
  return opens(p + 8, e);
}

/* The name a line of Lua source gives the function defined on it, the
** patterns of read/sources.lua applied to the line as that module trims
** it: a pointer into line and its length in *len, or NULL. */
static const char *match(const char *line, size_t n, size_t *len)
{
  const char *p = line, *e = line + n, *q, *end;
  /* sources.line: trimmed of spaces, cut past MAX_TEXT bytes (the "..."
  ** it adds can complete no pattern, which all end in "("). */
  p = spaces(p, e);
  while (e > p && is_space(e[-1]))
    e--;
  if ((size_t)(e - p) > SOURCE_NAMES_MAX_TEXT)
    e = p + SOURCE_NAMES_MAX_TEXT - 3;
  /* In PATTERNS' order: `local function f(`, `function M.f(`,
  ** `local f = function(`, `f = function(`. */
  if ((q = word_spaces(p, e, "local")) != NULL) {
    const char *r = word_spaces(q, e, "function");
    if (r != NULL && (end = name_end(r, e)) != NULL && opens(end, e)) {
      *len = (size_t)(end - r);
      return r;
    }
  }
  if ((q = word_spaces(p, e, "function")) != NULL &&
      (end = name_end(q, e)) != NULL && opens(end, e)) {
    *len = (size_t)(end - q);
    return q;
  }
  if ((q = word_spaces(p, e, "local")) != NULL &&
      (end = name_end(q, e)) != NULL && assigns_function(end, e)) {
    *len = (size_t)(end - q);
    return q;
  }
  if ((end = name_end(p, e)) != NULL && assigns_function(end, e)) {
    *len = (size_t)(end - p);
    return p;
  }
  return NULL;
}

/* A function whose name is read from its file. */
struct wanted {
  uint32_t k;       /* Its index among the functions. */
  uint32_t ordinal; /* Its file's, in order of first use. */
  uint32_t line;    /* Its first line. */
  const char *path; /* The file, without the '@'. */
};

static int by_file_and_line(const void *a, const void *b)
{
  const struct wanted *x = a, *y = b;
  if (x->ordinal != y->ordinal)
    return x->ordinal < y->ordinal ? -1 : 1;
  if (x->line != y->line)
    return x->line < y->line ? -1 : 1;
  return x->k < y->k ? -1 : x->k > y->k;
}

/* The content of a regular file of at most MAX_FILE bytes (*size), or NULL.
** Never blocks on a FIFO or a device: only regular files are read. */
static char *read_source(const char *path, size_t *size)
{
  struct stat st;
  char *text = NULL;
  size_t got = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 &&
      (uint64_t)st.st_size <= SOURCE_NAMES_MAX_FILE &&
      (text = malloc((size_t)st.st_size + 1)) != NULL) {
    while (got < (size_t)st.st_size) {
      ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      got += (size_t)n;
    }
  }
  close(fd);
  *size = got;
  return text;
}

/* "NAME (@path:LINE)", as read/names.lua names a function, or NULL. */
static char *named(const char *name, size_t len, const char *path,
                   uint32_t line)
{
  size_t n = len + strlen(path) + 32;
  char *s = malloc(n);
  if (s != NULL)
    snprintf(s, n, "%.*s (@%s:%u)", (int)len, name, path, (unsigned)line);
  return s;
}

/* Names the functions of one file (want[0..n), by line) from its text.
** Returns 0 or ENOMEM. */
static int name_from(struct source_names *s, const struct wanted *want,
                     size_t n, const char *text, size_t size)
{
  const char *p = text, *e = text + size;
  uint32_t at = 1; /* The line that starts at p. */
  size_t i;
  for (i = 0; i < n; i++) {
    const char *end, *name;
    size_t len;
    while (at < want[i].line && p != NULL) {
      p = memchr(p, '\n', (size_t)(e - p));
      p = p != NULL ? p + 1 : NULL;
      at++;
    }
    if (p == NULL)
      return 0; /* Past the last line: these lines are not in the file. */
    end = memchr(p, '\n', (size_t)(e - p));
    name = match(p, (size_t)((end != NULL ? end : e) - p), &len);
    if (name != NULL &&
        (s->names[want[i].k] = named(name, len, want[i].path, at)) == NULL)
      return ENOMEM;
  }
  return 0;
}

/* "luajit+0x92c0 (host program)" for "/usr/bin/luajit+0x92c0", the name of
** a C frame in the host program (not in a shared library), else NULL. */
static char *program_name(const char *name, int *failed)
{
  size_t n = strlen(name), hex = 0, path_len;
  const char *base, *offset;
  char *s;
  while (hex < n && is_hex(name[n - 1 - hex]))
    hex++;
  if (hex == 0 || n < hex + 5 || memcmp(name + n - hex - 3, "+0x", 3) != 0 ||
      name[0] != '/')
    return NULL;
  path_len = n - hex - 3;
  offset = name + path_len;
  base = offset;
  while (base > name && base[-1] != '/')
    base--;
  /* A shared library's name ends in ".so" or holds ".so.". */
  if (base == offset ||
      (offset - base >= 3 && memcmp(offset - 3, ".so", 3) == 0) ||
      memmem(base, (size_t)(offset - base), ".so.", 4) != NULL)
    return NULL;
  n = (size_t)(offset - base) + hex + 3 + sizeof(" (host program)");
  if ((s = malloc(n)) == NULL) {
    *failed = 1;
    return NULL;
  }
  snprintf(s, n, "%.*s (host program)", (int)(n - sizeof(" (host program)")),
           base);
  return s;
}

/* The '@' file of a Lua function the model names "function at @FILE:LINE"
** (FILE being its file string and LINE its first line), or NULL: another
** chunk, or a chunk name the model cut ("..."), which names no file. */
static const char *source_file(const struct places *m, const struct place *pl)
{
  const char *func = places_string(m, pl->func);
  const char *file = places_string(m, pl->file);
  size_t len = strlen(file);
  char line[16];
  if (strncmp(func, PREFIX "@", PREFIX_LEN + 1) != 0 ||
      strncmp(func + PREFIX_LEN + 1, file, len) != 0)
    return NULL;
  snprintf(line, sizeof(line), ":%u", (unsigned)pl->start_line);
  if (strcmp(func + PREFIX_LEN + 1 + len, line) != 0 ||
      (len >= 3 && strcmp(file + len - 3, "...") == 0))
    return NULL;
  return file;
}

/* The functions to name from their files, by file (numbered in order of
** first use, as sources.lua counts the chunks it tries) and line. */
static struct wanted *wanted_of(const struct places *m, const uint32_t *first,
                                uint32_t count, size_t *n)
{
  uint32_t *ordinal = calloc(m->strings, sizeof(*ordinal)), files = 0, k;
  struct wanted *want = malloc(((size_t)count + 1) * sizeof(*want));
  *n = 0;
  if (ordinal == NULL || want == NULL) {
    free(ordinal);
    free(want);
    return NULL;
  }
  for (k = 0; k < count; k++) {
    const struct place *pl = &m->list[first[k]];
    const char *path;
    if (pl->file == 0 || pl->start_line == 0 ||
        strncmp(places_string(m, pl->func), PREFIX, PREFIX_LEN) != 0)
      continue;
    /* Every chunk tried counts, as in sources.lua, read or not. */
    if (ordinal[pl->file] == 0)
      ordinal[pl->file] = ++files;
    if (ordinal[pl->file] > SOURCE_NAMES_MAX_FILES ||
        (path = source_file(m, pl)) == NULL)
      continue;
    want[*n].k = k;
    want[*n].ordinal = ordinal[pl->file];
    want[*n].line = pl->start_line;
    want[*n].path = path;
    (*n)++;
  }
  free(ordinal);
  qsort(want, *n, sizeof(*want), by_file_and_line);
  return want;
}

int source_names_make(struct source_names *s, const struct places *m,
                      const uint32_t *first, uint32_t count)
{
  struct wanted *want;
  size_t n, i, j;
  int failed = 0;
  uint32_t k;
  s->count = count;
  s->names = calloc((size_t)count + 1, sizeof(*s->names));
  if (s->names == NULL || (want = wanted_of(m, first, count, &n)) == NULL) {
    source_names_free(s);
    return ENOMEM;
  }
  for (i = 0; i < n && !failed; i = j) {
    size_t size;
    char *text = read_source(want[i].path, &size);
    for (j = i + 1; j < n && want[j].ordinal == want[i].ordinal; j++)
      ;
    if (text != NULL)
      failed = name_from(s, want + i, j - i, text, size) != 0;
    free(text);
  }
  free(want);
  for (k = 0; k < count && !failed; k++) {
    const struct place *pl = &m->list[first[k]];
    if (pl->file == 0)
      s->names[k] = program_name(places_string(m, pl->func), &failed);
  }
  if (failed) {
    source_names_free(s);
    return ENOMEM;
  }
  return 0;
}

void source_names_free(struct source_names *s)
{
  uint32_t k;
  if (s->names != NULL)
    for (k = 0; k < s->count; k++)
      free(s->names[k]);
  free(s->names);
  s->names = NULL;
  s->count = 0;
}
