/*
** A heap snapshot of another process, read from outside (heap_remote.c,
** docs/attach.md): `memprof heap PID`.
**
** The target's LuaJIT must be the build this process runs (the same file,
** or the same GNU build-id), so the layout learned here holds there. A
** child process stops every thread of the target (ptrace), copies its
** private writable memory to the same addresses in its own address space,
** lets the target go on, and walks the copy with the heap walk of
** heapwalk.h. Nothing is written to the target and no code runs there; on
** any failure the target is let go (and if the child dies, the kernel
** lets it go).
*/
#ifndef MEMPROF_HEAP_REMOTE_H
#define MEMPROF_HEAP_REMOTE_H

#include <stdint.h>

#include "lua.h"

/* What a snapshot of another process did. */
struct heap_remote_result {
  int tries;         /* Stops until the VM was at a safe moment. */
  int vms;           /* LuaJIT VMs found in the process. */
  uint64_t pause_ns; /* The last stop, stopped to resumed. */
  uint64_t copied;   /* Bytes of memory copied at that stop. */
  uint64_t walk_ns;  /* The walk of the copy. */
  uintptr_t main;    /* The main thread of the VM walked. */
};

/*
** Writes a heap snapshot of VM number `vm` (from 1, by the address of its
** main thread) of process pid to path (a temporary file renamed at the
** end; nothing is left on failure). L is a VM of this process, used to
** learn the layout. Returns 0, or an errno with a message naming the
** failed check in msg (EPERM: not permitted; ESRCH: no such process or it
** exited; ENOTSUP: not a LuaJIT of this build, or a layout that does not
** hold there; EAGAIN: never at a safe moment). A target whose LuaJIT is
** another build's shared library is read by a helper process on that
** library (heap_remote_host.h), unless `hosted` (this is that helper).
*/
int heap_remote_snapshot(lua_State *L, int pid, const char *path, int vm,
                         int hosted, struct heap_remote_result *res, char *msg,
                         size_t len);

/* memprof.heap_of_process(pid, path [, vm [, hosted]]) -> info table |
** nil, message, errno (binding.c registers it). */
int heap_remote_l_snapshot(lua_State *L);

#endif
