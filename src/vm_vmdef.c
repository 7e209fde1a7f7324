/*
** jit.vmdef's lists of names (bytecode ops, IR ops, IR calls), read from
** the module's text where it has the shape LuaJIT's build generates:
** parsing and running the whole file (its traceerr and ffnames too) was
** most of the cost of looking names up. Any other text is run as before.
*/
#define _GNU_SOURCE
#include "vm_vmdef.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fault.h"
#include "lauxlib.h"

#define VMDEF_MAX (256 * 1024) /* Bytes of jit.vmdef read, at most. */
#define VMDEF_CALLS 1024       /* IR calls looked at, at most. */

static const char header[] = "-- This is a generated file. DO NOT EDIT!\n\n";
static const char check[] = "assert(require(\"jit\").version == \"";
static const char checked[] =
    "\", \"LuaJIT core/library version mismatch\")\n\n";
static const char opening[] = "return {\n";

/* The generated shape: the header, the version check if any (which must
** hold: `version` is the running jit.version), the table, `}` ending it
** on a line of its own at the end. */
static int shaped(const char *buf, size_t len, const char *version)
{
  size_t at = sizeof(header) - 1, end = len, n;
  while (end > 0 && buf[end - 1] == '\n')
    end--;
  if (end < at + sizeof(opening) + 1 || memcmp(buf, header, at) != 0 ||
      buf[end - 1] != '}' || buf[end - 2] != '\n')
    return 0;
  if (len - at > sizeof(check) - 1 &&
      memcmp(buf + at, check, sizeof(check) - 1) == 0) {
    at += sizeof(check) - 1;
    n = version != NULL ? strlen(version) : 0;
    if (n == 0 || len - at < n + sizeof(checked) - 1 ||
        memcmp(buf + at, version, n) != 0 ||
        memcmp(buf + at + n, checked, sizeof(checked) - 1) != 0)
      return 0;
    at += n + sizeof(checked) - 1;
  }
  return len - at >= sizeof(opening) - 1 &&
         memcmp(buf + at, opening, sizeof(opening) - 1) == 0;
}

static int name_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_';
}

/* Where `\nKEY = ` starts the one line that sets KEY (0 if none, or if
** two do: the file would mean the last). */
static size_t field_at(const char *text, size_t len, const char *key)
{
  char pat[32];
  int n = snprintf(pat, sizeof(pat), "\n%s = ", key);
  const char *p = memmem(text, len, pat, (size_t)n), *q;
  if (p == NULL)
    return 0;
  q = memmem(p + n, len - (size_t)(p + n - text), pat, (size_t)n);
  return q != NULL ? 0 : (size_t)(p + n - text);
}

/* A list of 6-character names: `"..."`, then `,`. Its length, or 0. */
static size_t names_at(const char *text, size_t len, size_t at)
{
  size_t i;
  if (at == 0 || at >= len || text[at] != '"')
    return 0;
  for (i = at + 1; i < len && text[i] != '"'; i++)
    if (!name_char(text[i]) && text[i] != ' ')
      return 0;
  if (i + 1 >= len || text[i + 1] != ',' || (i - at - 1) % 6 != 0)
    return 0;
  return i - at - 1;
}

/* The lists from the text (buf, len: the whole file), moved to the start
** of buf each '\0'-ended (each comes from further on, in order). */
static int from_text(char *buf, size_t len, const char *version,
                     struct vm_vmdef *d)
{
  size_t bc, ir, calls, bclen, irlen, i, n;
  char *out = buf;
  if (fault_vmdef_text() || !shaped(buf, len, version))
    return 0;
  bc = field_at(buf, len, "bcnames");
  ir = field_at(buf, len, "irnames");
  calls = field_at(buf, len, "ircall");
  bclen = names_at(buf, len, bc);
  irlen = names_at(buf, len, ir);
  if (bclen == 0 || irlen == 0 || ir < bc || calls < ir || calls + 6 > len ||
      memcmp(buf + calls, "{\n[0]=", 6) != 0)
    return 0;
  memmove(out, buf + bc + 1, bclen);
  out[bclen] = '\0';
  d->bc = out;
  d->bclen = bclen;
  out += bclen + 1;
  memmove(out, buf + ir + 1, irlen);
  out[irlen] = '\0';
  d->ir = out;
  d->irlen = irlen;
  out += irlen + 1;
  d->calls = out;
  /* `"name",` a line, until `}`. */
  for (i = calls + 6; i < len && buf[i] == '"' && d->ncalls < VMDEF_CALLS;) {
    for (n = 0; i + 1 + n < len && name_char(buf[i + 1 + n]); n++)
      ;
    if (n == 0 || i + n + 4 > len || buf[i + 1 + n] != '"' ||
        buf[i + 2 + n] != ',' || buf[i + 3 + n] != '\n')
      return 0;
    memmove(out, buf + i + 1, n);
    out[n] = '\0';
    out += n + 1;
    d->ncalls++;
    i += n + 4;
  }
  return d->ncalls > 0 && i < len && buf[i] == '}';
}

/* The file's text, at most VMDEF_MAX bytes (malloc'd to its size: a
** buffer of VMDEF_MAX would be mapped afresh, pages faulted in), or NULL. */
static char *read_text(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  struct stat st;
  char *buf = NULL;
  if (f == NULL)
    return NULL;
  if (fstat(fileno(f), &st) == 0 && st.st_size > 0 && st.st_size <= VMDEF_MAX &&
      (buf = malloc((size_t)st.st_size + 1)) != NULL) {
    /* (One byte more than its size: a file that grew is refused.) */
    *len = fread(buf, 1, (size_t)st.st_size + 1, f);
    if (ferror(f) || *len != (size_t)st.st_size) {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  return buf;
}

/* The module run (its table on the stack at idx): the lists copied. */
static int from_module(lua_State *L, int idx, struct vm_vmdef *d)
{
  size_t bclen, irlen, size, len, n = 0;
  const char *bc, *ir;
  char *out;
  lua_getfield(L, idx, "bcnames");
  lua_getfield(L, idx, "irnames");
  lua_getfield(L, idx, "ircall");
  bc = lua_type(L, -3) == LUA_TSTRING ? lua_tolstring(L, -3, &bclen) : NULL;
  ir = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &irlen) : NULL;
  if (bc == NULL || ir == NULL || !lua_istable(L, -1))
    return 0;
  size = bclen + irlen + 2;
  for (; n < VMDEF_CALLS; n++) {
    lua_rawgeti(L, -1, (int)n);
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 1);
      break;
    }
    lua_tolstring(L, -1, &len);
    size += len + 1;
    lua_pop(L, 1);
  }
  if ((d->buf = out = malloc(size)) == NULL)
    return 0;
  memcpy(out, bc, bclen + 1);
  d->bc = out;
  d->bclen = bclen;
  out += bclen + 1;
  memcpy(out, ir, irlen + 1);
  d->ir = out;
  d->irlen = irlen;
  out += irlen + 1;
  d->calls = out;
  for (d->ncalls = 0; d->ncalls < n; d->ncalls++) {
    const char *s;
    lua_rawgeti(L, -1, (int)d->ncalls);
    s = lua_tolstring(L, -1, &len);
    memcpy(out, s, len);
    out[len] = '\0';
    out += strlen(out) + 1;
    lua_pop(L, 1);
  }
  return 1;
}

int vm_vmdef_load(lua_State *L, struct vm_vmdef *d)
{
  int top = lua_gettop(L), ok = 0;
  const char *path = NULL, *version = NULL;
  char *text;
  size_t len = 0;
  memset(d, 0, sizeof(*d));
  /* (Both strings stay on the stack until the end.) */
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, top + 1)) {
    lua_getfield(L, top + 1, "jit");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "version");
      if (lua_type(L, -1) == LUA_TSTRING)
        version = lua_tostring(L, -1);
    }
    lua_getfield(L, top + 1, "package");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "searchpath");
      lua_pushstring(L, "jit.vmdef");
      lua_getfield(L, -3, "path");
      if (lua_isfunction(L, -3) && lua_isstring(L, -1) &&
          lua_pcall(L, 2, 1, 0) == 0 && lua_isstring(L, -1))
        path = lua_tostring(L, -1);
    }
  }
  if (path != NULL && (text = read_text(path, &len)) != NULL) {
    d->buf = text;
    if (!(ok = from_text(text, len, version, d)))
      vm_vmdef_free(d);
  }
  if (!ok && path != NULL && luaL_loadfile(L, path) == 0 &&
      lua_pcall(L, 0, 1, 0) == 0 && lua_istable(L, -1) &&
      !(ok = from_module(L, lua_gettop(L), d)))
    vm_vmdef_free(d);
  lua_settop(L, top);
  return ok;
}

void vm_vmdef_free(struct vm_vmdef *d)
{
  free(d->buf);
  memset(d, 0, sizeof(*d));
}

/* The number of `name` in a list of 6-character names, or -1. */
static int number_in(const char *names, size_t len, const char *name)
{
  size_t n = strlen(name), i;
  if (names == NULL || n == 0 || n > 6)
    return -1;
  for (i = 0; i + 6 <= len && i / 6 < 256; i += 6)
    if (names[i] == name[0] && memcmp(names + i, name, n) == 0 &&
        strspn(names + i + n, " ") >= 6 - n)
      return (int)(i / 6);
  return -1;
}

int vm_vmdef_bc(const struct vm_vmdef *d, const char *name)
{
  return number_in(d->bc, d->bclen, name);
}

int vm_vmdef_ir(const struct vm_vmdef *d, const char *name)
{
  return number_in(d->ir, d->irlen, name);
}

int vm_vmdef_call(const struct vm_vmdef *d, const char *name)
{
  const char *s = d->calls;
  size_t id;
  int found = -1;
  for (id = 0; s != NULL && id < d->ncalls; id++, s += strlen(s) + 1)
    if (s[0] == name[0] && strcmp(s, name) == 0)
      found = (int)id;
  return found;
}
