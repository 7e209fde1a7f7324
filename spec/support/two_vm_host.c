/*
** A LuaJIT host with two VMs, one per thread, for
** spec/hosts/attach_two_vms_spec.lua.
**
** usage: two_vm_host DIR
** VM 1 (the main thread, luaL_newstate) runs @vm1.lua: a request loop that
** keeps one page in ten (its leak, line 6) and sleeps 20 ms in C between
** rounds; it answers DIR/ping with DIR/pong: "LEAKED ROUNDS", ROUNDS being
** VM 2's rounds so far. VM 2 (a second thread, lua_newstate with this
** host's allocator, the C library's realloc and free) runs @vm2.lua: each
** round a C function allocates 200 strings through the Lua API (the VM in C
** code, inside the allocator hook while memprof is attached), Lua code
** allocates 50 tables, the round checks that the bytes the allocator holds
** are the bytes the VM counts (lua_gc), and the thread sleeps 1 ms; a
** mismatch is written to DIR/bad. Once DIR/park exists, the next allocation
** of that C function (the VM in C code) waits in the allocator, after
** writing DIR/parked, while DIR/hold exists (20 s at most). DIR/vm1 and
** DIR/vm2 hold each VM's main thread's address; DIR/ready is written once
** both run.
**
** usage: two_vm_host DIR PLUGIN
** First makes a third VM on PLUGIN's allocator (arena_plugin.c), closes it
** and unloads PLUGIN: a VM that still looks whole in memory, whose
** allocator is no longer code; DIR/vm3 holds its main thread's address.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

static const char *dir;
static volatile long rounds2; /* VM 2's rounds (read by VM 1's pong). */
static size_t held;           /* Bytes VM 2's allocator holds (thread 2). */
static int park_next;         /* Thread 2: the next allocation waits. */

static void path_of(char *out, size_t len, const char *name)
{
  snprintf(out, len, "%s/%s", dir, name);
}

static int exists(const char *name)
{
  char path[4096];
  path_of(path, sizeof(path), name);
  return access(path, F_OK) == 0;
}

/* Writes text to DIR/name through a temporary file and a rename. */
static void put(const char *name, const char *text)
{
  char path[4096], tmp[4200];
  FILE *f;
  path_of(path, sizeof(path), name);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  if ((f = fopen(tmp, "w")) == NULL)
    exit(2);
  fputs(text, f);
  fclose(f);
  rename(tmp, path);
}

static void sleep_ns(long ns)
{
  struct timespec t = {0, ns};
  nanosleep(&t, NULL);
}

/* VM 2's allocator: the C library's, counting what it holds. */
static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  void *n;
  (void)ud;
  if (nsize == 0) {
    free(ptr);
    held -= ptr != NULL ? osize : 0;
    return NULL;
  }
  if (park_next) {
    int i;
    park_next = 0;
    put("parked", "parked");
    for (i = 0; i < 2000 && exists("hold"); i++)
      sleep_ns(10000000);
  }
  if ((n = realloc(ptr, nsize)) != NULL)
    held += nsize - (ptr != NULL ? osize : 0);
  return n;
}

/* churn(n): n new strings through the API, the VM in C code. */
static int churn(lua_State *L)
{
  static unsigned long serial;
  int n = (int)luaL_checkinteger(L, 1), i;
  char buf[64];
  lua_createtable(L, n, 0);
  for (i = 1; i <= n; i++) {
    snprintf(buf, sizeof(buf), "churn %d %lu", i, ++serial);
    if (i == n / 2 && exists("park")) {
      unlink("park");
      park_next = 1;
    }
    lua_pushstring(L, buf);
    lua_rawseti(L, -2, i);
  }
  lua_pop(L, 1);
  return 0;
}

/* check(): the allocator's bytes are the VM's; the round is counted. */
static int check(lua_State *L)
{
  size_t vm = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 +
              (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
  if (vm != held) {
    char text[100];
    snprintf(text, sizeof(text), "VM 2 counts %zu bytes, its allocator %zu", vm,
             held);
    put("bad", text);
  }
  rounds2++;
  return 0;
}

static int sleep_ms(lua_State *L)
{
  sleep_ns((long)luaL_checkinteger(L, 1) * 1000000);
  return 0;
}

static int rounds(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)rounds2);
  return 1;
}

static const char vm1[] =
    "local dir = ...\n"
    "local cache, request = {}, 0\n"
    "local function handle(request)\n"
    "  local page = string.rep('x', 100) .. request\n"
    "  if request % 10 == 0 then\n"
    "    cache[#cache + 1] = page .. '!'\n"
    "  end\n"
    "end\n"
    "while true do\n"
    "  for _ = 1, 100 do request = request + 1; handle(request) end\n"
    "  sleep_ms(20)\n"
    "  local ping = io.open(dir .. '/ping')\n"
    "  if ping then\n"
    "    ping:close()\n"
    "    os.remove(dir .. '/ping')\n"
    "    local f = assert(io.open(dir .. '/pong.tmp', 'w'))\n"
    "    f:write(#cache, ' ', rounds())\n"
    "    f:close()\n"
    "    os.rename(dir .. '/pong.tmp', dir .. '/pong')\n"
    "  end\n"
    "end\n";

static const char vm2[] = "local round = 0\n"
                          "while true do\n"
                          "  churn(200)\n"
                          "  local t = {}\n"
                          "  for i = 1, 50 do t[i] = { i } end\n"
                          "  check()\n"
                          "  round = round + 1\n"
                          "  if round % 8 == 0 then sleep_ms(1) end\n"
                          "end\n";

static void put_vm(const char *name, lua_State *L)
{
  char text[40];
  snprintf(text, sizeof(text), "%p", (void *)L);
  put(name, text);
}

static void fail(lua_State *L, const char *which)
{
  char text[600];
  snprintf(text, sizeof(text), "%s: %s", which, lua_tostring(L, -1));
  put("bad", text);
  exit(3);
}

static void *run_vm2(void *arg)
{
  lua_State *L = arg;
  if (luaL_loadbuffer(L, vm2, sizeof(vm2) - 1, "@vm2.lua") != 0 ||
      lua_pcall(L, 0, 0, 0) != 0)
    fail(L, "VM 2");
  return NULL;
}

/* A VM made on the plugin's allocator, closed, and the plugin unloaded. */
static int closed_vm(const char *plugin)
{
  void *lib = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  lua_Alloc f;
  lua_State *L;
  if (lib == NULL || (*(void **)&f = dlsym(lib, "arena_alloc")) == NULL ||
      (L = lua_newstate(f, NULL)) == NULL)
    return 0;
  luaL_openlibs(L);
  put_vm("vm3", L);
  lua_close(L);
  return dlclose(lib) == 0;
}

int main(int argc, char **argv)
{
  lua_State *L1, *L2;
  pthread_t t;
  if (argc != 2 && argc != 3)
    return 2;
  dir = argv[1];
  if (argc == 3 && !closed_vm(argv[2]))
    return 6;
  L1 = luaL_newstate();
  L2 = lua_newstate(counting_alloc, NULL);
  if (L1 == NULL || L2 == NULL)
    return 4;
  luaL_openlibs(L1);
  luaL_openlibs(L2);
  lua_register(L1, "sleep_ms", sleep_ms);
  lua_register(L1, "rounds", rounds);
  lua_register(L2, "sleep_ms", sleep_ms);
  lua_register(L2, "churn", churn);
  lua_register(L2, "check", check);
  put_vm("vm1", L1);
  put_vm("vm2", L2);
  if (pthread_create(&t, NULL, run_vm2, L2) != 0)
    return 5;
  while (rounds2 < 10)
    sleep_ns(1000000);
  put("ready", "ready");
  lua_pushstring(L1, dir);
  if (luaL_loadbuffer(L1, vm1, sizeof(vm1) - 1, "@vm1.lua") != 0)
    fail(L1, "VM 1");
  lua_insert(L1, -2);
  if (lua_pcall(L1, 1, 0, 0) != 0)
    fail(L1, "VM 1");
  return 0;
}
