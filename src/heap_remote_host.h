/*
** `memprof heap PID` of a process whose LuaJIT is a shared library that is
** not the one memprof runs on, as nginx's Lua module links luajit2's
** libluajit-5.1.so.2 (heap_remote_host.c): the snapshot is made by a
** child process that loads that library in a link-map namespace of its
** own (dlmopen), makes a VM there and loads memprof.so into it, so that
** memprof runs on the target's very build and learns its layout there.
*/
#ifndef MEMPROF_HEAP_REMOTE_HOST_H
#define MEMPROF_HEAP_REMOTE_HOST_H

#include <stddef.h>
#include <sys/types.h>

#include "heap_remote.h"
#include "remote_proc.h"

/* The shared LuaJIT library process pid maps (a file whose name has
** "libluajit"), as a path this process can open, into out. Returns 1 if
** there is one. */
int heap_host_library(pid_t pid, const struct remote_maps *maps, char *out,
                      size_t len);

/* Makes the snapshot of heap_remote_snapshot in a child process on library
** lib. Returns 0, or an errno with a message. */
int heap_host_run(const char *lib, int pid, const char *path, int vm,
                  struct heap_remote_result *res, char *msg, size_t len);

#endif
