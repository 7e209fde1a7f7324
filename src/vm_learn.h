/*
** What the module learns once per process about the LuaJIT build it runs
** in: the verified layout (vm_layout.c) and the names of the built-ins.
**
** Both are learned in a throw-away VM of the same build (luaL_newstate and
** luaL_openlibs, as the host exports them), so that the profiled VM's heap
** and collector never see the calibration: no object of it is in the
** profile, and the program's collector settings (stopped, pause, step
** multiplier) are never touched. Every VM that starts a profile is then
** checked against the public API with reads that allocate nothing
** (vm_layout_check_vm). Only where no VM can be made is the calibration
** run in the VM that asks; that VM's collector is then left as it was
** found (a stopped one stays stopped) and the calibration's garbage is
** collected before the profile starts.
*/
#ifndef MEMPROF_VM_LEARN_H
#define MEMPROF_VM_LEARN_H

#include "lua.h"
#include "symbols.h"
#include "vm_layout.h"

/* What memprof.info() tells of the calibration. */
struct vm_learn_status {
  int calibrated;    /* A layout is verified. */
  int calibrations;  /* Calibrations run in this process. */
  const char *where; /* "separate VM" or "profiled VM"; NULL before any. */
  int traced;        /* Compiled code by line was calibrated (layout.tl). */
};

/* Pushes a loaded library's table (registry._LOADED[name]), or nil. The
** module never looks at globals: hosts replace them (OpenResty's ngx_lua
** guards writes to them and replaces coroutine.*). */
void vm_learn_push_library(lua_State *L, const char *name);

/*
** The verified layout, for L's VM: learned at the first call (and tried
** again at later calls, at most VM_LEARN_ATTEMPTS times in all, if it
** could not be verified or its traces could not), then checked against
** L's VM. With lines, what compiled code by line needs (out->tl) is
** calibrated too, once per process; without, out->tl is what an earlier
** call calibrated, else says it is not calibrated yet (a heap snapshot,
** info() and a start with trace_lines = false need none of it). Returns
** 1 with *out set, or 0 with a message naming the failed check in err.
** Must be called from a C function (never from the hook). Allocates
** nothing in L's VM once learned.
*/
int vm_learn_layout_for(lua_State *L, int lines, struct vm_layout *out,
                        char *err, size_t errlen);

/* The same without lines. */
int vm_learn_layout(lua_State *L, struct vm_layout *out, char *err,
                    size_t errlen);

#define VM_LEARN_ATTEMPTS 3

/* Gives s the names of the built-ins learned with the layout, and of the
** standard libraries' plain C functions. Returns 0 or ENOMEM. */
int vm_learn_name_builtins(struct symbols *s);

void vm_learn_status(struct vm_learn_status *st);

/* Around fork(): no lock of this file is held by another thread across
** it (lifecycle.c's fork handlers call these). */
void vm_learn_lock(void);
void vm_learn_unlock(void);

#endif
