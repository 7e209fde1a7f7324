/*
** A host program for the specs: runs several Lua VMs, one per thread, each
** profiling itself into its own file at the same time.
**
** usage: threads_host CPATH DIR N [SNAPSHOTS LUA_PATH]
** Thread i (1..N) creates a VM, requires memprof through CPATH, starts a
** profile into DIR/thread<i>.bin, and (once every thread is profiling)
** creates 1000 * i tables at line 2 of a chunk named "@thread<i>.lua".
** With SNAPSHOTS, each VM instead takes that many heap snapshots into the
** one file DIR/shared.heap (all at once, after a barrier), and reads the
** file back with the reader (memprof.read.heap_snapshot, through
** LUA_PATH) after each: every snapshot must succeed, and every file read
** back be whole.
** Exits 0 if every VM succeeded, else prints the error and exits 1.
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

#define MAX_THREADS 16

static const char *cpath, *dir, *lua_path;
static int snapshots;
static pthread_barrier_t all_profiling;

static int barrier(lua_State *L)
{
  (void)L;
  pthread_barrier_wait(&all_profiling);
  return 0;
}

static const char body[] = "local n, path, barrier = ...\n"
                           "for i = 1, 1000 * n do local t = {} end\n"
                           "return path\n";

static const char driver[] =
    "local cpath, n, path, barrier, body = ...\n"
    "package.cpath = cpath\n"
    "jit.off()\n"
    "local memprof = require('memprof')\n"
    "local ok, err = memprof.start(path)\n"
    "barrier()\n" /* Even after a failed start: the others wait for it. */
    "assert(ok, err)\n"
    "local f = assert(loadstring(body, '@thread' .. n .. '.lua'))\n"
    "f(n, path)\n"
    "assert(memprof.stop())\n";

static const char snapshot_driver[] =
    "local cpath, n, path, barrier, lua_path, count = ...\n"
    "package.cpath = cpath\n"
    "package.path = lua_path\n"
    "jit.off()\n"
    "local memprof = require('memprof')\n"
    "local heap = require('memprof.read.heap_snapshot')\n"
    "barrier()\n"
    "for i = 1, count do\n"
    "  local ok, err = memprof.snapshot(path, { format = 'heap' })\n"
    "  if not ok then error('snapshot ' .. i .. ': ' .. err, 0) end\n"
    /* Another thread may have renamed its own snapshot over this one
    ** since: whichever it is, it must be whole. */
    "  local read, why = pcall(heap.each_record, path)\n"
    "  if not read then\n"
    "    error('snapshot ' .. i .. ' read back: ' .. tostring(why), 0)\n"
    "  end\n"
    "end\n";

struct job {
  int n;
  char error[512];
};

/* The snapshots' run of a thread's VM: loads snapshot_driver and calls it;
** returns what lua_pcall returns (or the load's error). */
static int run_snapshots(lua_State *L, int n)
{
  char path[4096];
  snprintf(path, sizeof(path), "%s/shared.heap", dir);
  if (luaL_loadbuffer(L, snapshot_driver, sizeof(snapshot_driver) - 1,
                      "=snapshot_driver") != 0)
    return 1;
  lua_pushstring(L, cpath);
  lua_pushinteger(L, n);
  lua_pushstring(L, path);
  lua_pushcfunction(L, barrier);
  lua_pushstring(L, lua_path);
  lua_pushinteger(L, snapshots);
  return lua_pcall(L, 6, 0, 0);
}

static void *run(void *arg)
{
  struct job *job = arg;
  char path[4096];
  lua_State *L = luaL_newstate();
  snprintf(path, sizeof(path), "%s/thread%d.bin", dir, job->n);
  luaL_openlibs(L);
  if (snapshots > 0) {
    if (run_snapshots(L, job->n) != 0)
      snprintf(job->error, sizeof(job->error), "thread %d: %s", job->n,
               lua_tostring(L, -1));
  } else if (luaL_loadbuffer(L, driver, sizeof(driver) - 1, "=driver") != 0) {
    snprintf(job->error, sizeof(job->error), "%s", lua_tostring(L, -1));
  } else {
    lua_pushstring(L, cpath);
    lua_pushinteger(L, job->n);
    lua_pushstring(L, path);
    lua_pushcfunction(L, barrier);
    lua_pushlstring(L, body, sizeof(body) - 1);
    if (lua_pcall(L, 5, 0, 0) != 0)
      snprintf(job->error, sizeof(job->error), "thread %d: %s", job->n,
               lua_tostring(L, -1));
  }
  lua_close(L);
  return NULL;
}

int main(int argc, char **argv)
{
  pthread_t threads[MAX_THREADS];
  struct job jobs[MAX_THREADS];
  int n, i, failed = 0;
  if ((argc != 4 && argc != 6) || (n = atoi(argv[3])) < 1 || n > MAX_THREADS ||
      (argc == 6 && (snapshots = atoi(argv[4])) < 1)) {
    fprintf(stderr,
            "usage: threads_host CPATH DIR N (1..%d) [SNAPSHOTS LUA_PATH]\n",
            MAX_THREADS);
    return 2;
  }
  cpath = argv[1];
  dir = argv[2];
  lua_path = argc == 6 ? argv[5] : "";
  pthread_barrier_init(&all_profiling, NULL, (unsigned)n);
  for (i = 0; i < n; i++) {
    memset(&jobs[i], 0, sizeof(jobs[i]));
    jobs[i].n = i + 1;
    pthread_create(&threads[i], NULL, run, &jobs[i]);
  }
  for (i = 0; i < n; i++) {
    pthread_join(threads[i], NULL);
    if (jobs[i].error[0] != '\0') {
      fprintf(stderr, "%s\n", jobs[i].error);
      failed = 1;
    }
  }
  return failed;
}
