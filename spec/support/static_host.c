/*
** A host program for the specs of C function names: it registers a static
** C function that allocates (so only the program's symbol table names
** it), and rewrites its command line into a process title, as Tarantool
** does, so that the name the loader gives the program is the title.
**
** usage: static_host SCRIPT
** Runs SCRIPT with the standard libraries and a global function
** host_make_tables(n), which creates a table of n tables from C. Exits 0
** if the script ran, else prints the error and exits 1.
*/
#include <stdio.h>
#include <string.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

static int host_make_tables(lua_State *L)
{
  int n = (int)luaL_checkinteger(L, 1), i;
  lua_createtable(L, n, 0);
  for (i = 1; i <= n; i++) {
    lua_newtable(L);
    lua_rawseti(L, -2, i);
  }
  return 1;
}

int main(int argc, char **argv)
{
  static const char title[] = "host <running>";
  size_t room = strlen(argv[0]);
  lua_State *L;
  int status;
  if (argc != 2) {
    fprintf(stderr, "usage: static_host SCRIPT\n");
    return 1;
  }
  /* The title takes argv[0]'s place, cut to its length. */
  memset(argv[0], 0, room);
  memcpy(argv[0], title, room < sizeof(title) - 1 ? room : sizeof(title) - 1);
  L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushcfunction(L, host_make_tables);
  lua_setglobal(L, "host_make_tables");
  status = luaL_dofile(L, argv[1]);
  if (status != 0)
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
  lua_close(L);
  return status != 0;
}
