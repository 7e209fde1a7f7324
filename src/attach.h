/*
** `memprof attach PID` and `memprof detach PID` (docs/attach.md): a profile
** of a running process that never loaded memprof.
**
** memprof (attach_inject.c) stops every thread of the target with ptrace,
** makes one thread that waits in a system call call dlopen(memprof.so)
** and then memprof_attach_call (attach_entry.c) with a struct attach_call
** written below its stack pointer, and puts back that thread's registers
** and the memory it wrote. The entry point runs in the target while every
** other thread is stopped: it learns the layout of the target's own
** LuaJIT build in a throw-away VM, finds the VM's main thread, checks
** that no thread was in LuaJIT's code and that the VM is in C code, and
** wraps (or, at detach, unwraps) the VM's allocator. Both sides are the
** same memprof.so, so the struct below is one contract.
*/
#ifndef MEMPROF_ATTACH_H
#define MEMPROF_ATTACH_H

#include <stdint.h>

#include "lifecycle.h"
#include "lua.h"
#include "remote_proc.h"

#define ATTACH_MAGIC 0x4d504154u /* "MPAT" */
#define ATTACH_PCS_MAX 64
#define ATTACH_PATH_MAX 1024
#define ATTACH_MSG_MAX 600

enum attach_op {
  ATTACH_START = 1, /* Start a profile of VM number `vm` into path. */
  ATTACH_STOP,      /* Stop a profile attached, restore its allocator: of
                       the VM whose main thread is `which`, else of VM
                       number `vm`, else (both 0) the first attached. */
  ATTACH_STATUS,    /* Only say whether a profile is attached. */
};

/* The request and its answer, in the target's memory. */
struct attach_call {
  uint32_t magic, size; /* ATTACH_MAGIC, sizeof(struct attach_call). */
  int32_t op, vm;
  uint64_t which; /* ATTACH_STOP: the main thread of the VM to stop. */
  struct profile_options opts;
  char path[ATTACH_PATH_MAX]; /* Absolute: the target's cwd is its own. */
  /* The program counter of every thread of the target at the stop. */
  uint32_t npcs;
  uint64_t pcs[ATTACH_PCS_MAX];
  /* The answer. */
  int32_t err;      /* 0, or an errno (EAGAIN: not a safe moment now). */
  int32_t vms;      /* VMs found in the process. */
  int32_t attached; /* Profiles attached after the call. */
  uint64_t main_thread;
  uint64_t started_ns; /* CLOCK_MONOTONIC at the start of the profile. */
  char file[ATTACH_PATH_MAX];
  char msg[ATTACH_MSG_MAX];
};

/* The entry point memprof runs in the target (exported by memprof.so). */
int memprof_attach_call(struct attach_call *c);

/* The address in this process of what address addr of process pid is in
** the memprof.so both map (the same file); 0 if it is not in it. */
uintptr_t attach_own_address(pid_t pid, const struct remote_maps *maps,
                             uintptr_t addr);

/* Lua bindings of attach_inject.c (binding.c registers them):
** memprof.attach_process(pid, path, options) -> info | nil, message, errno
** memprof.detach_process(pid [, {vm = N | main_thread = 'ADDR'}]) -> info
**   | nil, message, errno
** memprof.attached_process(pid) -> info | nil, message, errno */
int attach_l_start(lua_State *L);
int attach_l_stop(lua_State *L);
int attach_l_status(lua_State *L);

#endif
