/*
** Whether the built-in misc.memprof of Tarantool's fork runs in a VM
** (builtin_memprof.c): no profile of ours starts while it does.
*/
#ifndef MEMPROF_BUILTIN_MEMPROF_H
#define MEMPROF_BUILTIN_MEMPROF_H

#include "lua.h"

enum builtin_state { BUILTIN_NOT_RUNNING, BUILTIN_RUNNING, BUILTIN_UNKNOWN };

/* Whether the built-in runs in L's VM (its hook is the VM's allocator);
** BUILTIN_UNKNOWN if its hook could not be learned. Allocates nothing
** through L's VM. Ask only when no hook of ours is the VM's allocator:
** the built-in is never above ours. */
enum builtin_state builtin_memprof_state(lua_State *L);

/* Around fork(): no other thread holds the lock while it is learned. */
void builtin_memprof_lock(void);
void builtin_memprof_unlock(void);

#endif
