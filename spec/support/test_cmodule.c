/*
** A C module for the specs: its functions allocate through the Lua API so
** that C-function attribution can be checked by name.
*/
#include "lauxlib.h"
#include "lua.h"

/* Creates n tables from C; exported so dladdr can name it. */
__attribute__((visibility("default"))) int
test_cmodule_make_tables(lua_State *L)
{
  int n = (int)luaL_checkinteger(L, 1), i;
  lua_createtable(L, n, 0);
  for (i = 1; i <= n; i++) {
    lua_newtable(L);
    lua_rawseti(L, -2, i);
  }
  return 1;
}

/* Creates n tables from C; static, so only the module's symbol table
** names it. */
static int make_pairs(lua_State *L)
{
  int n = (int)luaL_checkinteger(L, 1), i;
  lua_createtable(L, 0, n);
  for (i = 1; i <= n; i++) {
    lua_newtable(L);
    lua_rawseti(L, -2, i);
  }
  return 1;
}

/* Creates a table of n tables from C, under the symbol a C++ compiler
** gives a static function cpp_tables(lua_State*). */
static int cpp_tables(lua_State *L) __asm__("_ZL10cpp_tablesP9lua_State");
static int cpp_tables(lua_State *L)
{
  int n = (int)luaL_checkinteger(L, 1), i;
  lua_newtable(L);
  for (i = 1; i <= n; i++) {
    lua_newtable(L);
    lua_rawseti(L, -2, i);
  }
  return 1;
}

/* Calls its argument; frames of the callee sit above a C frame. */
static int call(lua_State *L)
{
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

__attribute__((visibility("default"))) int luaopen_test_cmodule(lua_State *L)
{
  lua_newtable(L);
  lua_pushcfunction(L, test_cmodule_make_tables);
  lua_setfield(L, -2, "make_tables");
  lua_pushcfunction(L, make_pairs);
  lua_setfield(L, -2, "make_pairs");
  lua_pushcfunction(L, cpp_tables);
  lua_setfield(L, -2, "cpp_tables");
  lua_pushcfunction(L, call);
  lua_setfield(L, -2, "call");
  return 1;
}
