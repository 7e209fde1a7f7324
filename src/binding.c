/*
** The Lua binding: memprof.start/stop/is_running/info and misc.memprof.
**
** Lifetimes: a profiler is malloc'd at start and freed at stop. Three other
** ways out are handled: lua_close (a registry-anchored sentinel's __gc stops
** the profiler and restores the allocator before the package library
** unloads C modules; the module is also pinned in memory), exit() without
** lua_close (an atexit handler completes every open stream), and fork() (the
** child drops its events and never writes to the parent's file).
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lauxlib.h"
#include "lua.h"
#include "profiler.h"
#include "vm_inspect.h"

#define SENTINEL_KEY "memprof.sentinel"
#define WRITE_BUFFER_SIZE (1u << 20)

/* Per-VM state kept in the registry: the verified layout. */
struct sentinel {
  int calibrated;
  struct vm_layout layout;
  char error[512];
};

/* ---- Profilers of this process ---------------------------------------- */

static pthread_mutex_t running_lock = PTHREAD_MUTEX_INITIALIZER;
static struct profiler *running_list;
static pthread_once_t process_once = PTHREAD_ONCE_INIT;

static void list_add(struct profiler *p)
{
  pthread_mutex_lock(&running_lock);
  p->next = running_list;
  running_list = p;
  pthread_mutex_unlock(&running_lock);
}

static void list_remove(struct profiler *p)
{
  struct profiler **pp;
  pthread_mutex_lock(&running_lock);
  for (pp = &running_list; *pp != NULL; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  pthread_mutex_unlock(&running_lock);
}

/* exit() without lua_close: complete every stream this process owns. The
** hooks stay installed (the VMs still exist) and only forward from now on. */
static void finish_all_at_exit(void)
{
  struct profiler *p;
  pthread_mutex_lock(&running_lock);
  for (p = running_list; p != NULL; p = p->next)
    if (p->fork_generation == profiler_fork_generation && p->out.fd >= 0)
      profiler_finish(p);
  pthread_mutex_unlock(&running_lock);
}

static void before_fork(void)
{
  pthread_mutex_lock(&running_lock);
}

static void after_fork_parent(void)
{
  pthread_mutex_unlock(&running_lock);
}

static void after_fork_child(void)
{
  profiler_fork_generation++;
  pthread_mutex_unlock(&running_lock);
}

static void setup_process(void)
{
  writer_tables_init();
  atexit(finish_all_at_exit);
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* ---- Helpers ------------------------------------------------------------ */

static int push_failure(lua_State *L, const char *msg, int err)
{
  lua_pushnil(L);
  lua_pushstring(L, msg);
  lua_pushinteger(L, err);
  return 3;
}

static int push_file_failure(lua_State *L, const char *path, int err)
{
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", path, strerror(err));
  lua_pushinteger(L, err);
  return 3;
}

static struct profiler *running_profiler(lua_State *L)
{
  void *ud = NULL;
  return profiler_is_hook(lua_getallocf(L, &ud)) ? ud : NULL;
}

static struct sentinel *get_sentinel(lua_State *L)
{
  struct sentinel *s;
  lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL_KEY);
  s = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return s;
}

/* Pushes a loaded library's table (registry._LOADED[name]), or nil. The
** module never looks at globals: hosts replace them (OpenResty's ngx_lua
** guards writes to them and replaces coroutine.*). */
static void push_library(lua_State *L, const char *name)
{
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1))
    lua_getfield(L, -1, name);
  else
    lua_pushnil(L);
  lua_remove(L, -2);
}

/* Whether the JIT compiler is on (the jit library's status()). */
static int jit_is_on(lua_State *L)
{
  int on = 0, top = lua_gettop(L);
  push_library(L, "jit");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "status");
    if (lua_isfunction(L, -1) && lua_pcall(L, 0, 1, 0) == 0)
      on = lua_toboolean(L, -1);
  }
  lua_settop(L, top);
  return on;
}

/* Calibrates once per VM; the layout cannot change while the VM lives.
** Traces are looked for again at a later start if they could not be
** verified (the JIT compiler was off then, or busy) and it is on now. */
static struct sentinel *verified_layout(lua_State *L)
{
  struct sentinel *s = get_sentinel(L);
  if (s == NULL)
    return NULL;
  if (!s->calibrated) {
    s->error[0] = '\0';
    s->calibrated =
        vm_layout_calibrate(L, &s->layout, s->error, sizeof(s->error));
  } else if (!s->layout.trace_ok && jit_is_on(L)) {
    struct vm_layout again;
    char error[sizeof(s->error)];
    if (vm_layout_calibrate(L, &again, error, sizeof(error)))
      s->layout = again;
  }
  return s;
}

/* What memprof.start's options table asks for. */
struct options {
  int stack_depth; /* 0: no stacks. */
  int timestamps;
};

/* One option's value. Returns 1, or 0 with a message. */
static int read_option(lua_State *L, const char *name, struct options *o,
                       char *msg, size_t len)
{
  if (strcmp(name, "stack_depth") == 0) {
    lua_Number v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || v != (lua_Number)(int)v || v < 1 ||
        v > MAX_STACK_DEPTH) {
      snprintf(msg, len,
               "option 'stack_depth' must be an integer from 1 to "
               "%d, got %s",
               MAX_STACK_DEPTH,
               lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1)
                                              : luaL_typename(L, -1));
      return 0;
    }
    o->stack_depth = (int)v;
    return 1;
  }
  if (strcmp(name, "timestamps") == 0) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) {
      snprintf(msg, len, "option 'timestamps' must be a boolean, got %s",
               luaL_typename(L, -1));
      return 0;
    }
    o->timestamps = lua_toboolean(L, -1);
    return 1;
  }
  snprintf(msg, len, "unknown option '%s'", name);
  return 0;
}

/* Reads memprof.start's options table (nil: none). Returns 1, or 0 with a
** message; nothing has started then. */
static int read_options(lua_State *L, int idx, struct options *o, char *msg,
                        size_t len)
{
  memset(o, 0, sizeof(*o));
  if (lua_isnoneornil(L, idx))
    return 1;
  if (!lua_istable(L, idx)) {
    snprintf(msg, len, "options must be a table, got %s",
             luaL_typename(L, idx));
    return 0;
  }
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      snprintf(msg, len, "option names must be strings, got %s",
               luaL_typename(L, -2));
      lua_pop(L, 2);
      return 0;
    }
    if (!read_option(L, lua_tostring(L, -2), o, msg, len)) {
      lua_pop(L, 2);
      return 0;
    }
    lua_pop(L, 1);
  }
  return 1;
}

/* Names the built-ins (ffid >= 2) of one library table: "string.rep". */
static void name_builtins_in(lua_State *L, struct profiler *p, const char *lib)
{
  const struct vm_layout *lay = &p->layout;
  char name[256];
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    uintptr_t fn = (uintptr_t)lua_topointer(L, -1);
    uint8_t ffid;
    if (lua_type(L, -1) == LUA_TFUNCTION && lua_type(L, -2) == LUA_TSTRING &&
        vm_is_gc(lay, 0, fn, GCT_FUNC) && vm_u8(0, fn + lay->fn_ffid, &ffid) &&
        ffid > FFID_C) {
      if (lib[0] == '\0')
        snprintf(name, sizeof(name), "%s", lua_tostring(L, -2));
      else
        snprintf(name, sizeof(name), "%s.%s", lib, lua_tostring(L, -2));
      symbols_name_builtin(&p->syms, ffid, name);
    }
    lua_pop(L, 1);
  }
}

/* Names the built-in that calling lib.fn(args) returns (iterators and the
** function coroutine.wrap makes: no library table holds them). It is
** called only if lib.fn is itself a built-in, so that a host's replacement
** is never run. */
static void name_made_builtin(lua_State *L, struct profiler *p, const char *lib,
                              const char *fn, int nargs, const char *name)
{
  const struct vm_layout *lay = &p->layout;
  int top = lua_gettop(L) - nargs;
  uintptr_t f;
  uint8_t ffid;
  push_library(L, lib);
  if (lua_istable(L, -1))
    lua_getfield(L, -1, fn);
  else
    lua_pushnil(L);
  f = (uintptr_t)lua_topointer(L, -1);
  if (lua_type(L, -1) == LUA_TFUNCTION && vm_u8(0, f + lay->fn_ffid, &ffid) &&
      ffid > FFID_C) {
    lua_insert(L, top + 1); /* The function below its arguments. */
    lua_pop(L, 1);          /* The library table. */
    if (lua_pcall(L, nargs, 1, 0) == 0) {
      f = (uintptr_t)lua_topointer(L, -1);
      if (lua_type(L, -1) == LUA_TFUNCTION && vm_is_gc(lay, 0, f, GCT_FUNC) &&
          vm_u8(0, f + lay->fn_ffid, &ffid) && ffid > FFID_C)
        symbols_name_builtin(&p->syms, ffid, name);
    }
  }
  lua_settop(L, top);
}

/* C function for coroutine.wrap to wrap: it never runs. */
static int never_runs(lua_State *L)
{
  (void)L;
  return 0;
}

static void name_hidden_builtins(lua_State *L, struct profiler *p)
{
  lua_pushliteral(L, "");
  lua_pushliteral(L, "");
  name_made_builtin(L, p, "string", "gmatch", 2, "string.gmatch iterator");
  lua_newtable(L);
  name_made_builtin(L, p, "_G", "ipairs", 1, "ipairs iterator");
  lua_pushcfunction(L, never_runs);
  name_made_builtin(L, p, "coroutine", "wrap", 1, "coroutine.wrap");
}

/* Learns built-in names from the standard libraries, first match wins. */
static void name_builtins(lua_State *L, struct profiler *p)
{
  static const char *const libs[] = {
      "_G",    "string", "table", "math",    "io",  "os", "coroutine",
      "debug", "bit",    "jit",   "package", "ffi", NULL};
  int i, top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  for (i = 0; libs[i] != NULL; i++) {
    lua_getfield(L, -1, libs[i]);
    if (lua_istable(L, -1))
      name_builtins_in(L, p, strcmp(libs[i], "_G") == 0 ? "" : libs[i]);
    lua_pop(L, 1);
  }
  lua_getfield(L, LUA_REGISTRYINDEX, "FILE*");
  if (lua_istable(L, -1))
    name_builtins_in(L, p, "file");
  lua_settop(L, top);
  name_hidden_builtins(L, p);
}

static void free_profiler(struct profiler *p)
{
  symbols_free(&p->syms);
  stacks_free(&p->stacks);
  free(p->path);
  free(p);
}

static struct profiler *new_profiler(lua_State *L, const struct vm_layout *lay,
                                     const struct options *opts,
                                     const char *path, int *err)
{
  struct profiler *p = calloc(1, sizeof(*p));
  if (p == NULL || (p->path = strdup(path)) == NULL ||
      symbols_init(&p->syms) != 0 ||
      (opts->stack_depth > 0 && stacks_init(&p->stacks) != 0)) {
    if (p != NULL)
      free_profiler(p);
    *err = ENOMEM;
    return NULL;
  }
  p->layout = *lay;
  p->out.fd = -1;
  p->stack_depth = opts->stack_depth;
  p->timestamps = opts->timestamps;
  p->extended = opts->stack_depth > 0 || opts->timestamps;
  vm_ref(lay, 0, (uintptr_t)L + lay->L_glref, &p->g);
  name_builtins(L, p);
  return p;
}

/* Stops p, which must be the running profiler of L's VM. */
static int stop_profiler(lua_State *L, struct profiler *p)
{
  int err = 0;
  lua_setallocf(L, p->orig_alloc, p->orig_ud); /* First: nothing more hits p. */
  list_remove(p);
  if (p->fork_generation != profiler_fork_generation)
    writer_abandon(&p->out); /* The file belongs to the parent process. */
  else
    err = profiler_finish(p);
  return err;
}

/* ---- Lua API ------------------------------------------------------------ */

/* memprof.start(path [, options]) -> true | nil, message, errno */
static int l_start(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  struct sentinel *s;
  struct profiler *p;
  struct options opts;
  char msg[600];
  int fd, err = 0;

  if (running_profiler(L) != NULL)
    return push_failure(L, "profiler is running already", EINVAL);
  if (!read_options(L, 2, &opts, msg, sizeof(msg)))
    return push_failure(L, msg, EINVAL);
  s = verified_layout(L);
  if (s == NULL || !s->calibrated) {
    snprintf(msg, sizeof(msg), "cannot verify this VM's layout: %s",
             s ? s->error : "module state is missing");
    return push_failure(L, msg, ENOTSUP);
  }
  p = new_profiler(L, &s->layout, &opts, path, &err);
  if (p == NULL)
    return push_file_failure(L, path, err);
  fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    err = errno;
    free_profiler(p);
    return push_file_failure(L, path, err);
  }
  if ((err = writer_init(&p->out, fd, WRITE_BUFFER_SIZE, 1)) != 0) {
    close(fd);
    free_profiler(p);
    return push_file_failure(L, path, err);
  }
  profiler_write_prologue(p); /* Buffered: errors show at stop. */
  p->fork_generation = profiler_fork_generation;
  p->state = PROFILER_RECORDING;
  p->orig_alloc = lua_getallocf(L, &p->orig_ud);
  list_add(p);
  /* Last step: from here on every allocator call is recorded. */
  lua_setallocf(L, profiler_hook_for(p), p);
  lua_pushboolean(L, 1);
  return 1;
}

/* memprof.stop() -> true | nil, message, errno */
static int l_stop(lua_State *L)
{
  struct profiler *p = running_profiler(L);
  int err;
  if (p == NULL)
    return push_failure(L, "profiler is not running", EINVAL);
  err = stop_profiler(L, p);
  if (err != 0) {
    push_file_failure(L, p->path, err);
    free_profiler(p);
    return 3;
  }
  free_profiler(p);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_is_running(lua_State *L)
{
  lua_pushboolean(L, running_profiler(L) != NULL);
  return 1;
}

static void set_int(lua_State *L, const char *key, lua_Integer v)
{
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}

/* Every verified offset, by field name; g_trace is -1 when traces could
** not be verified. */
static void push_offsets(lua_State *L, const struct vm_layout *lay)
{
  const struct vm_layout_field *f;
  lua_newtable(L);
  for (f = vm_layout_fields; f->name != NULL; f++)
    set_int(L, f->name, vm_layout_get(lay, f));
  set_int(L, "g_trace", lay->trace_ok ? lay->g_trace : -1);
  set_int(L, "g_parent", lay->exit_ok ? lay->g_parent : -1);
  lua_setfield(L, -2, "offsets");
}

/* memprof.info() -> what was detected, for bug reports. */
static int l_info(lua_State *L)
{
  struct sentinel *s = verified_layout(L);
  lua_newtable(L);
  push_library(L, "jit");
  if (lua_istable(L, -1))
    lua_getfield(L, -1, "version");
  else
    lua_pushnil(L);
  lua_setfield(L, -3, "version");
  lua_pop(L, 1);
  lua_pushboolean(L, s != NULL && s->calibrated);
  lua_setfield(L, -2, "calibrated");
  lua_pushboolean(L, running_profiler(L) != NULL);
  lua_setfield(L, -2, "running");
  if (s == NULL || !s->calibrated) {
    lua_pushstring(L, s ? s->error : "module state is missing");
    lua_setfield(L, -2, "error");
    return 1;
  }
  lua_pushstring(L, s->layout.family);
  lua_setfield(L, -2, "family");
  lua_pushboolean(L, s->layout.gc64);
  lua_setfield(L, -2, "gc64");
  lua_pushboolean(L, s->layout.trace_ok);
  lua_setfield(L, -2, "traces");
  lua_pushboolean(L, s->layout.exit_ok);
  lua_setfield(L, -2, "trace_exits");
  lua_pushboolean(L, s->layout.record_ok);
  lua_setfield(L, -2, "recording");
  lua_pushstring(L, s->layout.exact ? "specialised" : "generic");
  lua_setfield(L, -2, "hook");
  lua_pushstring(L, s->layout.build != NULL ? "matched" : "discovered");
  lua_setfield(L, -2, "layout");
  if (s->layout.build != NULL) {
    lua_pushstring(L, s->layout.build);
    lua_setfield(L, -2, "build");
  }
  lua_newtable(L);
  set_int(L, "lua", s->layout.st_lua);
  set_int(L, "c", s->layout.st_c);
  set_int(L, "gc", s->layout.st_gc);
  lua_pushstring(L, s->layout.state_numbering);
  lua_setfield(L, -2, "numbering");
  lua_setfield(L, -2, "vmstate");
  push_offsets(L, &s->layout);
  return 1;
}

/* ---- Module loading ----------------------------------------------------- */

/* lua_close: stop before the package library unloads C modules. */
static int sentinel_gc(lua_State *L)
{
  struct profiler *p = running_profiler(L);
  if (p != NULL) {
    stop_profiler(L, p);
    free_profiler(p);
  }
  return 0;
}

static void install_sentinel(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL_KEY);
  if (lua_isnil(L, -1)) {
    struct sentinel *s = lua_newuserdata(L, sizeof(*s));
    memset(s, 0, sizeof(*s));
    lua_newtable(L);
    lua_pushcfunction(L, sentinel_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, SENTINEL_KEY);
  }
  lua_pop(L, 1);
}

/* Keep this shared object mapped for the life of the process: a hook may
** still be called after the package library's dlclose. */
static void pin_module(void)
{
  Dl_info info;
  if (dladdr((void *)pin_module, &info) != 0 && info.dli_fname != NULL)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

/* misc.memprof.start/stop, as in Tarantool; an existing one is kept. The
** global table is reached through the registry and written with rawset,
** so that a host's guard on new globals (ngx_lua warns on every one) is
** not triggered. */
static void install_misc(lua_State *L)
{
  push_library(L, "_G");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, "misc");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushliteral(L, "misc");
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "memprof");
    if (lua_isnil(L, -1)) {
      lua_newtable(L);
      lua_pushcfunction(L, l_start);
      lua_setfield(L, -2, "start");
      lua_pushcfunction(L, l_stop);
      lua_setfield(L, -2, "stop");
      lua_pushliteral(L, "memprof");
      lua_pushvalue(L, -2);
      lua_rawset(L, -5);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
}

__attribute__((visibility("default"))) int luaopen_memprof(lua_State *L)
{
  static const luaL_Reg api[] = {{"start", l_start},
                                 {"stop", l_stop},
                                 {"is_running", l_is_running},
                                 {"info", l_info},
                                 {NULL, NULL}};
  pthread_once(&process_once, setup_process);
  pin_module();
  install_sentinel(L);
  install_misc(L);
  lua_newtable(L);
  luaL_register(L, NULL, api);
  return 1;
}
