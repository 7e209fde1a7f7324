/*
** `memprof heap PID` of a process whose LuaJIT is linked into its
** executable, a build other than the one memprof runs on, as Tarantool's
** (heap_remote_exe.c, docs/attach.md). The layout is learned in a helper
** process of that very executable (memprof.so preloaded into it: its
** constructor learns the layout and exits before the program's main), and
** the copy is walked in memprof's own process, where a program not built
** as position-independent has nothing at the addresses of its data.
*/
#ifndef MEMPROF_HEAP_REMOTE_EXE_H
#define MEMPROF_HEAP_REMOTE_EXE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "heap_layout.h"
#include "heapwalk.h"

/* Where global_State keeps the roots the API reads: the registry (a
** TValue) and the base metatables (GCRefs), in heapwalk's order. */
struct roots_layout {
  uint16_t g_registry;
  uint16_t g_basemt[HEAP_BASEMT_N];
};

/* The file that holds the helper's LuaJIT (lua_newstate). */
struct exe_file {
  uint64_t dev_major, dev_minor, inode;
};

/* Whether process pid's executable defines every Lua API function
** memprof.so needs: 1 yes, 0 it defines no lua_newstate (not a LuaJIT
** program), or -1 with why it cannot serve as a helper in msg. */
int heap_exe_has_api(pid_t pid, char *msg, size_t len);

/* Learns h and rl in a helper process of process pid's executable, and
** which file holds its LuaJIT. Returns 0, or an errno with a message. */
int heap_exe_learn(pid_t pid, struct heap_layout *h, struct roots_layout *rl,
                   struct exe_file *file, char *msg, size_t len);

/* Learns h and rl in this process (heap_remote.c). Returns 0 or ENOTSUP
** with a message. */
int heap_remote_learn(lua_State *L, struct heap_layout *h,
                      struct roots_layout *rl, char *msg, size_t len);

#endif
