/*
** A function's bytecode dump read back (vm_dump.c).
*/
#ifndef MEMPROF_VM_DUMP_H
#define MEMPROF_VM_DUMP_H

#include <stdint.h>

#include "lua.h"

/* Dumps the function on top of L's stack (lua_dump, the C API): its flags
** byte and, of its own prototype (the last one dumped), the number of
** instructions. Returns 1 if the dump could be read. */
int vm_dump_function(lua_State *L, int *flags, uint32_t *sizebc);

#endif
