/*
** The built-in misc.memprof of Tarantool's fork, told from outside.
**
** No profile starts while the built-in runs, because its hook would then be
** below ours, and that order cannot work:
**  - for each allocation made in a C function, the built-in writes the
**    symbol tables of every loaded object again (some 120 KB), and reads
**    them through blocks it allocates from the VM's allocator, that is,
**    through our hook, which is in the middle of the event that called the
**    built-in: re-entered, it loses track of its write buffer (the process
**    crashed);
**  - its stop puts back the allocator it found, which drops our hook;
**  - memprof.start itself allocates from a C function, so every start
**    would add megabytes to the built-in's file.
** The other order is fine: the built-in's hook calls ours before it records
** anything, and its stop puts ours back.
**
** How it is told. The built-in's hook is a static function of the VM, and
** the VM has other allocators of its own (its default one; Tarantool wraps
** that in another, with the same ud, as the built-in does), so neither its
** address nor its behaviour can be recognised by looking. It is learned
** instead: the built-in is started on a throw-away VM (luaL_newstate and
** luaL_openlibs, as exported by the host), writing to /dev/null, that VM's
** allocator is read, and the built-in is stopped again. That start is
** refused with "profiler is running already" while the built-in runs
** anywhere in the process (its state is process-wide): then no profile
** starts either, and the next start asks again. Once learned, the built-in
** runs in a VM exactly when that function is the VM's allocator. A fork
** built without it answers "profiler misuse": it never runs then. Any
** other failure (no /dev/null, say) leaves the question open, and starts
** are refused. A VM whose allocator is still the one luaL_newstate gives
** (read once from a bare throw-away VM) runs no built-in: then nothing is
** learned.
**
** Nothing here allocates through the profiled VM: a refused start must not
** cost the built-in's file another copy of the symbol tables.
*/
#define _GNU_SOURCE
#include "builtin_memprof.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

/* Held while the built-in's allocator is learned. */
static pthread_mutex_t builtin_lock = PTHREAD_MUTEX_INITIALIZER;

void builtin_memprof_lock(void)
{
  pthread_mutex_lock(&builtin_lock);
}

void builtin_memprof_unlock(void)
{
  pthread_mutex_unlock(&builtin_lock);
}

static int builtin_learned;    /* builtin_hook is known (NULL: none). */
static lua_Alloc builtin_hook; /* The built-in's allocator. */

struct probe {
  void (*openlibs)(lua_State *);
  lua_Alloc hook;
  enum builtin_state state; /* RUNNING: busy; UNKNOWN: not learned. */
};

/* In the throw-away VM (protected): misc.memprof.start('/dev/null'), the
** VM's allocator, misc.memprof.stop(). lua_close stops the built-in too,
** should anything here fail between the two. */
static int probe_in(lua_State *T)
{
  struct probe *pr = lua_touserdata(T, 1);
  lua_Alloc before = lua_getallocf(T, NULL);
  pr->openlibs(T);
  lua_getglobal(T, "misc");
  if (!lua_istable(T, -1))
    return 0;
  lua_getfield(T, -1, "memprof");
  if (!lua_istable(T, -1))
    return 0;
  lua_getfield(T, -1, "start");
  lua_pushliteral(T, "/dev/null");
  lua_call(T, 1, 2);
  if (lua_toboolean(T, -2)) {
    lua_Alloc hook = lua_getallocf(T, NULL);
    if (hook != before) {
      pr->hook = hook;
      pr->state = BUILTIN_NOT_RUNNING;
    }
    lua_getfield(T, -3, "stop");
    lua_call(T, 0, 0);
  } else if (lua_isstring(T, -1)) {
    const char *msg = lua_tostring(T, -1);
    if (strcmp(msg, "profiler is running already") == 0)
      pr->state = BUILTIN_RUNNING;
    else if (strcmp(msg, "profiler misuse") == 0)
      pr->state = BUILTIN_NOT_RUNNING; /* Built without it: pr->hook NULL. */
  }
  return 0;
}

/* The built-in's allocator (NULL if it has none), learned once per
** process; BUILTIN_RUNNING if it could not be learned because the built-in
** is running. */
static enum builtin_state learn_builtin_hook(lua_Alloc *hook)
{
  struct probe pr;
  lua_State *(*newstate)(void);
  lua_State *T;
  pthread_mutex_lock(&builtin_lock);
  if (builtin_learned) {
    *hook = builtin_hook;
    pthread_mutex_unlock(&builtin_lock);
    return BUILTIN_NOT_RUNNING;
  }
  memset(&pr, 0, sizeof(pr));
  pr.state = BUILTIN_UNKNOWN;
  *(void **)&newstate = dlsym(RTLD_DEFAULT, "luaL_newstate");
  *(void **)&pr.openlibs = dlsym(RTLD_DEFAULT, "luaL_openlibs");
  if (newstate != NULL && pr.openlibs != NULL && (T = newstate()) != NULL) {
    lua_cpcall(T, probe_in, &pr);
    lua_close(T);
  }
  if (pr.state == BUILTIN_NOT_RUNNING) {
    builtin_hook = *hook = pr.hook;
    builtin_learned = 1;
  }
  pthread_mutex_unlock(&builtin_lock);
  return pr.state;
}

/* The allocator luaL_newstate gives a VM (read from a bare throw-away VM,
** once per process; NULL if none can be made). */
static lua_Alloc default_alloc(void)
{
  static int learned;
  static lua_Alloc alloc;
  lua_State *(*newstate)(void);
  lua_State *T;
  pthread_mutex_lock(&builtin_lock);
  if (!learned) {
    learned = 1;
    *(void **)&newstate = dlsym(RTLD_DEFAULT, "luaL_newstate");
    if (newstate != NULL && (T = newstate()) != NULL) {
      alloc = lua_getallocf(T, NULL);
      lua_close(T);
    }
  }
  pthread_mutex_unlock(&builtin_lock);
  return alloc;
}

enum builtin_state builtin_memprof_state(lua_State *L)
{
  lua_Alloc top = lua_getallocf(L, NULL), hook = NULL;
  enum builtin_state state;
  /* The built-in's start replaces the VM's allocator by its hook: a VM
  ** whose allocator is still the one it was made with runs no built-in,
  ** and the built-in's hook need not be learned (its start on a
  ** throw-away VM writes every loaded object's symbols: a third of a
  ** first start of ours on Tarantool's builds: 2 ms). */
  if (top != NULL && top == default_alloc())
    return BUILTIN_NOT_RUNNING;
  state = learn_builtin_hook(&hook);
  if (state != BUILTIN_NOT_RUNNING)
    return state;
  return hook != NULL && top == hook ? BUILTIN_RUNNING : BUILTIN_NOT_RUNNING;
}
