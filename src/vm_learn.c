/*
** What is learned once per process about the LuaJIT build (see
** vm_learn.h): the verified layout and the names of the built-ins.
*/
#define _GNU_SOURCE
#include "vm_learn.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm_inspect.h"

static pthread_mutex_t learn_lock = PTHREAD_MUTEX_INITIALIZER;

/* Everything below is read and written with learn_lock held. */
static struct {
  int calibrated;
  int calibrations;       /* Calibrations run, for the layout ... */
  int trace_calibrations; /* ... and again for its traces. */
  int traced;             /* The trace lines' calibration ran (layout.tl). */
  const char *where;
  struct vm_layout layout;
  char error[512];
  int named;               /* The built-ins' names are learned. */
  char *builtin[MAX_FFID]; /* "string.rep", by function id. */
  struct library_cfunc library[MAX_LIBRARY_CFUNCS]; /* Plain C functions. */
  unsigned libraries;
} learned;

void vm_learn_lock(void)
{
  pthread_mutex_lock(&learn_lock);
}

void vm_learn_unlock(void)
{
  pthread_mutex_unlock(&learn_lock);
}

/* ---- Names of the built-ins ------------------------------------------- */

static void name_builtin(unsigned ffid, const char *name)
{
  if (ffid < MAX_FFID && learned.builtin[ffid] == NULL)
    learned.builtin[ffid] = strdup(name);
}

/* Names the plain C function at idx (not a built-in: one whose function id
** is FFID_C), by its address, if it has none yet. */
static void name_library_cfunc(lua_State *L, const struct vm_layout *lay,
                               int idx, const char *name)
{
  uintptr_t fn = (uintptr_t)lua_topointer(L, idx), addr;
  uint8_t ffid;
  unsigned i;
  if (lua_type(L, idx) != LUA_TFUNCTION || !vm_is_gc(lay, 1, fn, GCT_FUNC) ||
      !vm_u8(1, fn + lay->fn_ffid, &ffid) || ffid != FFID_C ||
      (addr = (uintptr_t)lua_tocfunction(L, idx)) == 0 ||
      learned.libraries == MAX_LIBRARY_CFUNCS)
    return;
  for (i = 0; i < learned.libraries; i++)
    if (learned.library[i].addr == addr)
      return;
  if ((learned.library[i].name = strdup(name)) != NULL) {
    learned.library[i].addr = addr;
    learned.libraries++;
  }
}

/* Whether the value at idx is a built-in (ffid >= 2); its id in *ffid. */
static int builtin_at(lua_State *L, const struct vm_layout *lay, int idx,
                      uint8_t *ffid)
{
  uintptr_t fn = (uintptr_t)lua_topointer(L, idx);
  return lua_type(L, idx) == LUA_TFUNCTION && vm_is_gc(lay, 1, fn, GCT_FUNC) &&
         vm_u8(1, fn + lay->fn_ffid, ffid) && *ffid > FFID_C;
}

/* "lib.key" (or "key" for lib ""), cut to size as snprintf would: the
** names of some 200 functions, where snprintf cost half the naming. */
static void join_name(char *out, size_t size, const char *lib, const char *key)
{
  size_t n = 0, k;
  if (lib[0] != '\0') {
    k = strlen(lib);
    n = k < size - 1 ? k : size - 1;
    memcpy(out, lib, n);
    if (n < size - 1)
      out[n++] = '.';
  }
  k = strlen(key);
  if (k > size - 1 - n)
    k = size - 1 - n;
  memcpy(out + n, key, k);
  out[n + k] = '\0';
}

/* Names the built-ins of the library table on top ("string.rep"), and
** its plain C functions. */
static void name_builtins_in(lua_State *L, const struct vm_layout *lay,
                             const char *lib)
{
  char name[256];
  uint8_t ffid;
  /* lua_next and the reads allocate nothing in the VM: one batch. */
  int batch = safe_read_batch_begin();
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      join_name(name, sizeof(name), lib, lua_tostring(L, -2));
      if (builtin_at(L, lay, -1, &ffid))
        name_builtin(ffid, name);
      else
        name_library_cfunc(L, lay, -1, name);
    }
    lua_pop(L, 1);
  }
  safe_read_batch_end(batch);
}

void vm_learn_push_library(lua_State *L, const char *name)
{
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1))
    lua_getfield(L, -1, name);
  else
    lua_pushnil(L);
  lua_remove(L, -2);
}

/* Names the C functions of the array package[field] ("package.loaders[2]":
** the loaders that require runs, plain C functions). */
static void name_package_array(lua_State *L, const struct vm_layout *lay,
                               const char *field)
{
  char name[64];
  int i, top = lua_gettop(L);
  vm_learn_push_library(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, field);
    for (i = 1; lua_istable(L, -1) && i <= 8; i++) {
      lua_rawgeti(L, -1, i);
      snprintf(name, sizeof(name), "package.%s[%d]", field, i);
      name_library_cfunc(L, lay, -1, name);
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
}

/* Names the built-in that calling lib.fn(args) returns (iterators and the
** function coroutine.wrap makes: no library table holds them). It is
** called only if lib.fn is itself a built-in, so that a host's replacement
** is never run. */
static void name_made_builtin(lua_State *L, const struct vm_layout *lay,
                              const char *lib, const char *fn, int nargs,
                              const char *name)
{
  int top = lua_gettop(L) - nargs;
  uint8_t ffid;
  vm_learn_push_library(L, lib);
  if (lua_istable(L, -1))
    lua_getfield(L, -1, fn);
  else
    lua_pushnil(L);
  if (builtin_at(L, lay, -1, &ffid)) {
    lua_insert(L, top + 1); /* The function below its arguments. */
    lua_pop(L, 1);          /* The library table. */
    if (lua_pcall(L, nargs, 1, 0) == 0 && builtin_at(L, lay, -1, &ffid))
      name_builtin(ffid, name);
  }
  lua_settop(L, top);
}

/* C function for coroutine.wrap to wrap: it never runs. */
static int never_runs(lua_State *L)
{
  (void)L;
  return 0;
}

/* Learns built-in names from the standard libraries, first match wins. */
static void name_builtins(lua_State *L, const struct vm_layout *lay)
{
  static const char *const libs[] = {
      "_G",    "string", "table", "math",    "io",  "os", "coroutine",
      "debug", "bit",    "jit",   "package", "ffi", NULL};
  int i, top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  for (i = 0; libs[i] != NULL && lua_istable(L, top + 1); i++) {
    lua_getfield(L, -1, libs[i]);
    if (lua_istable(L, -1))
      name_builtins_in(L, lay, strcmp(libs[i], "_G") == 0 ? "" : libs[i]);
    lua_pop(L, 1);
  }
  lua_getfield(L, LUA_REGISTRYINDEX, "FILE*");
  if (lua_istable(L, -1))
    name_builtins_in(L, lay, "file");
  lua_settop(L, top);
  lua_pushliteral(L, "");
  lua_pushliteral(L, "");
  name_made_builtin(L, lay, "string", "gmatch", 2, "string.gmatch iterator");
  lua_newtable(L);
  name_made_builtin(L, lay, "_G", "ipairs", 1, "ipairs iterator");
  lua_pushcfunction(L, never_runs);
  name_made_builtin(L, lay, "coroutine", "wrap", 1, "coroutine.wrap");
  name_package_array(L, lay, "loaders");
  name_package_array(L, lay, "searchers");
  learned.named = 1;
}

int vm_learn_name_builtins(struct symbols *s)
{
  unsigned i;
  int err = 0;
  pthread_mutex_lock(&learn_lock);
  for (i = 0; i < MAX_FFID && err == 0; i++)
    if (learned.builtin[i] != NULL)
      err = symbols_name_builtin(s, i, learned.builtin[i]);
  for (i = 0; i < learned.libraries && err == 0; i++)
    err = symbols_name_library_cfunc(s, learned.library[i].addr,
                                     learned.library[i].name);
  pthread_mutex_unlock(&learn_lock);
  return err;
}

/* ---- Calibration ------------------------------------------------------ */

struct job {
  void (*openlibs)(lua_State *);
  struct vm_layout layout;
  char *err;
  size_t errlen;
  int ok;
  int lines_only; /* Only the trace lines of layout (verified). */
  int lines;      /* The layout, then its trace lines. */
};

/* The calibration of one job in T (the throw-away VM, or L's). */
static void run_job(lua_State *T, struct job *j, int apart)
{
  if (j->lines_only) {
    vm_layout_calibrate_trace_lines(T, &j->layout, apart);
    j->ok = 1;
    return;
  }
  j->ok = vm_layout_calibrate(T, &j->layout, j->err, j->errlen, apart);
  if (j->ok && !learned.named)
    name_builtins(T, &j->layout);
  /* Asked for already: in the same VM. */
  if (j->ok && j->lines)
    vm_layout_calibrate_trace_lines(T, &j->layout, apart);
}

/* In the throw-away VM (protected). */
static int calibrate_in(lua_State *T)
{
  struct job *j = lua_touserdata(T, 1);
  j->openlibs(T);
  run_job(T, j, 1);
  return 0;
}

/* In a throw-away VM of this build. Returns 1 if one could be made. */
static int calibrate_apart(struct job *j)
{
  lua_State *(*newstate)(void);
  lua_State *T;
  *(void **)&newstate = dlsym(RTLD_DEFAULT, "luaL_newstate");
  *(void **)&j->openlibs = dlsym(RTLD_DEFAULT, "luaL_openlibs");
  if (newstate == NULL || j->openlibs == NULL || (T = newstate()) == NULL)
    return 0;
  if (lua_cpcall(T, calibrate_in, j) != 0) {
    snprintf(j->err, j->errlen,
             "check 'separate VM' failed: calibrating in it raised %s",
             lua_isstring(T, -1) ? lua_tostring(T, -1) : "an error");
    j->ok = 0;
  }
  lua_close(T);
  learned.where = "separate VM";
  return 1;
}

/* In L's VM, as before a profile: its collector is left running or stopped
** as found, and the calibration's garbage is collected. */
static void calibrate_here(lua_State *L, struct job *j)
{
  int running = lua_gc(L, LUA_GCISRUNNING, 0) != 0;
  run_job(L, j, 0);
  lua_gc(L, LUA_GCCOLLECT, 0);
  if (!running)
    lua_gc(L, LUA_GCSTOP, 0);
  learned.where = "profiled VM";
}

static int profiled_vm_asked(void)
{
  const char *v = getenv("MEMPROF_CALIBRATE");
  return v != NULL && strcmp(v, "profiled-vm") == 0;
}

/* Calibrates *out, and its trace lines if `lines`; or (lines_only) the
** trace lines of the verified layout *out. */
static int calibrate(lua_State *L, struct vm_layout *out, char *err,
                     size_t errlen, int lines_only, int lines)
{
  struct job *j = calloc(1, sizeof(*j));
  int ok;
  if (j == NULL) {
    snprintf(err, errlen, "check 'memory' failed: out of memory");
    return 0;
  }
  j->err = err;
  j->errlen = errlen;
  j->lines_only = lines_only;
  j->lines = lines;
  if (lines_only)
    j->layout = *out;
  /* MEMPROF_CALIBRATE=profiled-vm: as where no VM can be made. */
  if (profiled_vm_asked() || !calibrate_apart(j))
    calibrate_here(L, j);
  ok = j->ok;
  if (lines_only && !ok) {
    /* (Raised in the middle: nothing of it is kept.) */
    vm_layout_trace_lines_unknown(&j->layout);
    snprintf(j->layout.tl.why, sizeof(j->layout.tl.why), "%.150s", err);
  }
  if (ok || lines_only)
    *out = j->layout;
  free(j);
  return ok;
}

/* Learns the layout, or tries again (see vm_learn.h). Traces are looked
** for again only in a separate VM: in the profiled one, every try would
** leave its garbage in the profile. */
static void learn(lua_State *L, int lines)
{
  if (!learned.calibrated && learned.calibrations < VM_LEARN_ATTEMPTS) {
    learned.calibrations++;
    learned.calibrated = calibrate(L, &learned.layout, learned.error,
                                   sizeof(learned.error), 0, lines);
    learned.traced = lines;
  } else if (learned.calibrated && !learned.layout.trace_ok &&
             learned.trace_calibrations < VM_LEARN_ATTEMPTS &&
             strcmp(learned.where, "separate VM") == 0) {
    struct vm_layout again;
    char error[sizeof(learned.error)];
    learned.trace_calibrations++;
    if (calibrate(L, &again, error, sizeof(error), 0, lines) &&
        again.trace_ok) {
      learned.layout = again;
      learned.traced = lines;
    }
  }
  /* Compiled code by line: calibrated once, when first asked for. */
  if (lines && learned.calibrated && !learned.traced) {
    char error[sizeof(learned.error)];
    learned.traced = 1;
    calibrate(L, &learned.layout, error, sizeof(error), 1, 1);
  }
}

int vm_learn_layout_for(lua_State *L, int lines, struct vm_layout *out,
                        char *err, size_t errlen)
{
  int ok;
  pthread_mutex_lock(&learn_lock);
  learn(L, lines);
  ok = learned.calibrated;
  if (ok)
    *out = learned.layout;
  else
    snprintf(err, errlen, "%s", learned.error);
  pthread_mutex_unlock(&learn_lock);
  return ok && vm_layout_check_vm(L, out, err, errlen);
}

int vm_learn_layout(lua_State *L, struct vm_layout *out, char *err,
                    size_t errlen)
{
  return vm_learn_layout_for(L, 0, out, err, errlen);
}

void vm_learn_status(struct vm_learn_status *st)
{
  pthread_mutex_lock(&learn_lock);
  st->calibrated = learned.calibrated;
  st->calibrations = learned.calibrations + learned.trace_calibrations;
  st->where = learned.where;
  st->traced = learned.traced;
  pthread_mutex_unlock(&learn_lock);
}
