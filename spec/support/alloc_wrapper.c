/*
** Another allocator hook, for the specs of the allocator chain: it behaves
** as the built-in misc.memprof of Tarantool's fork does towards the chain.
** install() keeps the VM's allocator as its original and installs its own
** with the original's ud; restore() puts that original back without
** looking at what is installed. calls() counts the calls it forwarded.
** Like the built-in (part of the VM), it stays mapped until the process
** ends: the VM may call it after the package library's dlclose.
*/
#define _GNU_SOURCE
#include <dlfcn.h>

#include "lauxlib.h"
#include "lua.h"

static lua_Alloc orig_alloc;
static void *orig_ud;
static double calls;
static size_t fail_size;

static void *wrapper(void *ud, void *ptr, size_t osize, size_t nsize)
{
  calls++;
  if (fail_size != 0 && nsize >= fail_size)
    return NULL;
  return orig_alloc(ud, ptr, osize, nsize);
}

static int fail_from(lua_State *L)
{
  fail_size = (size_t)luaL_checknumber(L, 1);
  return 0;
}

static int install(lua_State *L)
{
  orig_alloc = lua_getallocf(L, &orig_ud);
  lua_setallocf(L, wrapper, orig_ud);
  return 0;
}

static int restore(lua_State *L)
{
  lua_setallocf(L, orig_alloc, orig_ud);
  return 0;
}

static int count(lua_State *L)
{
  lua_pushnumber(L, calls);
  return 1;
}

__attribute__((visibility("default"))) int luaopen_alloc_wrapper(lua_State *L)
{
  Dl_info info;
  if (dladdr((void *)wrapper, &info) != 0 && info.dli_fname != NULL)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  lua_newtable(L);
  lua_pushcfunction(L, install);
  lua_setfield(L, -2, "install");
  lua_pushcfunction(L, restore);
  lua_setfield(L, -2, "restore");
  lua_pushcfunction(L, count);
  lua_setfield(L, -2, "calls");
  lua_pushcfunction(L, fail_from);
  lua_setfield(L, -2, "fail_from");
  return 1;
}
