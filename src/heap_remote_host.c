/*
** A snapshot of another process made on its own LuaJIT library (see
** heap_remote_host.h).
*/
#define _GNU_SOURCE
#include "heap_remote_host.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int heap_host_library(pid_t pid, const struct remote_maps *maps, char *out,
                      size_t len)
{
  size_t i;
  for (i = 0; i < maps->n; i++) {
    const struct remote_map *m = &maps->m[i];
    const char *base = strrchr(m->path, '/');
    if (m->offset == 0 && m->inode != 0 && base != NULL &&
        strncmp(base + 1, "libluajit", 9) == 0) {
      /* Through the process's root: its mount namespace may differ. */
      snprintf(out, len, "/proc/%d/root%s", (int)pid, m->path);
      if (access(out, R_OK) != 0)
        snprintf(out, len, "%s", m->path);
      return 1;
    }
  }
  return 0;
}

/* What the child reports. */
struct host_report {
  int err;
  char msg[700];
  struct heap_remote_result res;
};

/* Run in the VM made on the library: memprof.so loaded there, the
** snapshot made by it, "hosted" so that it never comes here again. */
static const char chunk[] =
    "local so, pid, path, vm = ...\n"
    "local open, why = package.loadlib(so, 'luaopen_memprof')\n"
    "if not open then return 'e', 'cannot load ' .. so .. ': ' .. why, 95 "
    "end\n"
    "local r, msg, err = open().heap_of_process(pid, path, vm, true)\n"
    "if not r then return 'e', msg, err end\n"
    "return 'o', r.tries, r.vms, r.pause_ms, r.walk_ms, r.copied,\n"
    "  tonumber(r.main_thread)\n";

typedef void *(*newstate_fn)(void);
typedef void (*state_fn)(void *);
typedef int (*loadstring_fn)(void *, const char *);
typedef int (*pcall_fn)(void *, int, int, int);
typedef void (*pushstring_fn)(void *, const char *);
typedef void (*pushinteger_fn)(void *, ptrdiff_t);
typedef const char *(*tolstring_fn)(void *, int, size_t *);
typedef double (*tonumber_fn)(void *, int);

struct api {
  newstate_fn newstate;
  state_fn openlibs;
  loadstring_fn loadstring;
  pcall_fn pcall;
  pushstring_fn pushstring;
  pushinteger_fn pushinteger;
  tolstring_fn tolstring;
  tonumber_fn tonumber;
};

static int bind_api(void *lib, struct api *a)
{
  *(void **)&a->newstate = dlsym(lib, "luaL_newstate");
  *(void **)&a->openlibs = dlsym(lib, "luaL_openlibs");
  *(void **)&a->loadstring = dlsym(lib, "luaL_loadstring");
  *(void **)&a->pcall = dlsym(lib, "lua_pcall");
  *(void **)&a->pushstring = dlsym(lib, "lua_pushstring");
  *(void **)&a->pushinteger = dlsym(lib, "lua_pushinteger");
  *(void **)&a->tolstring = dlsym(lib, "lua_tolstring");
  *(void **)&a->tonumber = dlsym(lib, "lua_tonumber");
  return a->newstate && a->openlibs && a->loadstring && a->pcall &&
         a->pushstring && a->pushinteger && a->tolstring && a->tonumber;
}

static void report_str(struct host_report *r, const struct api *a, void *L,
                       int idx)
{
  const char *s = a->tolstring(L, idx, NULL);
  snprintf(r->msg, sizeof(r->msg), "%s", s != NULL ? s : "(no message)");
}

static void in_child(const char *lib_path, int pid, const char *path, int vm,
                     struct host_report *r)
{
  struct api a;
  Dl_info self;
  void *lib, *L;
  const char *kind;
  r->err = ENOTSUP;
  if (!dladdr((void *)heap_host_run, &self) || self.dli_fname == NULL) {
    snprintf(r->msg, sizeof(r->msg), "cannot find memprof.so's own path");
    return;
  }
  if ((lib = dlmopen(LM_ID_NEWLM, lib_path, RTLD_NOW)) == NULL ||
      !bind_api(lib, &a) || (L = a.newstate()) == NULL) {
    snprintf(r->msg, sizeof(r->msg),
             "check 'target's LuaJIT library' failed: %s cannot be loaded "
             "as a LuaJIT in a helper process (%s)",
             lib_path, lib == NULL ? dlerror() : "no Lua API");
    return;
  }
  a.openlibs(L);
  if (a.loadstring(L, chunk) != 0) {
    report_str(r, &a, L, -1);
    return;
  }
  a.pushstring(L, self.dli_fname);
  a.pushinteger(L, pid);
  a.pushstring(L, path);
  a.pushinteger(L, vm);
  if (a.pcall(L, 4, 7, 0) != 0) {
    report_str(r, &a, L, -1);
    return;
  }
  kind = a.tolstring(L, -7, NULL);
  if (kind == NULL || kind[0] != 'o') {
    report_str(r, &a, L, -6);
    r->err = (int)a.tonumber(L, -5);
    if (r->err == 0)
      r->err = ENOTSUP;
    return;
  }
  r->err = 0;
  r->res.tries = (int)a.tonumber(L, -6);
  r->res.vms = (int)a.tonumber(L, -5);
  r->res.pause_ns = (uint64_t)(a.tonumber(L, -4) * 1e6);
  r->res.walk_ns = (uint64_t)(a.tonumber(L, -3) * 1e6);
  r->res.copied = (uint64_t)a.tonumber(L, -2);
  r->res.main = (uintptr_t)a.tonumber(L, -1);
}

int heap_host_run(const char *lib, int pid, const char *path, int vm,
                  struct heap_remote_result *res, char *msg, size_t len)
{
  struct host_report *r = calloc(1, sizeof(*r));
  int fds[2], st = 0, err;
  size_t got = 0;
  pid_t c;
  if (r == NULL)
    return snprintf(msg, len, "out of memory"), ENOMEM;
  if (pipe2(fds, O_CLOEXEC) != 0 || (c = fork()) < 0) {
    free(r);
    snprintf(msg, len, "cannot start the helper: %s", strerror(errno));
    return EAGAIN;
  }
  if (c == 0) {
    const char *p = (const char *)r;
    close(fds[0]);
    in_child(lib, pid, path, vm, r);
    while (got < sizeof(*r)) {
      ssize_t w = write(fds[1], p + got, sizeof(*r) - got);
      if (w <= 0)
        _exit(1);
      got += (size_t)w;
    }
    _exit(0);
  }
  close(fds[1]);
  while (got < sizeof(*r)) {
    ssize_t n = read(fds[0], (char *)r + got, sizeof(*r) - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  close(fds[0]);
  while (waitpid(c, &st, 0) < 0 && errno == EINTR)
    ;
  if (got != sizeof(*r)) {
    r->err = EIO;
    snprintf(r->msg, sizeof(r->msg),
             "the helper on %s ended (%s %d) before it finished; process "
             "%d runs on untouched",
             lib, WIFSIGNALED(st) ? "signal" : "status",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), pid);
  }
  *res = r->res;
  snprintf(msg, len, "%s", r->msg);
  err = r->err;
  free(r);
  return err;
}
