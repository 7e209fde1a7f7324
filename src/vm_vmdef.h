/*
** The names of bytecode ops, IR ops and IR calls in jit.vmdef, which the
** trace-lines calibration checks against jit.util before it uses them.
*/
#ifndef MEMPROF_VM_VMDEF_H
#define MEMPROF_VM_VMDEF_H

#include <stddef.h>

#include "lua.h"

struct vm_vmdef {
  char *buf;      /* malloc'd: the three lists below point into it. */
  const char *bc; /* bcnames: 6 characters a name. */
  size_t bclen;
  const char *ir; /* irnames: 6 characters a name. */
  size_t irlen;
  const char *calls; /* ircall from 0 on: each name '\0'-ended. */
  size_t ncalls;
};

/* Finds jit.vmdef on package.path as require would (in L, the
** calibration's VM) and reads its lists from the file's text when it is
** in the generated shape, else by running it without registering it.
** Returns 0 (d cleared) when neither works. */
int vm_vmdef_load(lua_State *L, struct vm_vmdef *d);
void vm_vmdef_free(struct vm_vmdef *d);

/* The number of bytecode op / IR op `name`, or -1 (or over 255). */
int vm_vmdef_bc(const struct vm_vmdef *d, const char *name);
int vm_vmdef_ir(const struct vm_vmdef *d, const char *name);
/* The id of IR call `name`, or -1. */
int vm_vmdef_call(const struct vm_vmdef *d, const char *name);

#endif
