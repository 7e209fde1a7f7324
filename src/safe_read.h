/*
** Fault-safe reads of this process's memory (safe_read.c).
*/
#ifndef MEMPROF_SAFE_READ_H
#define MEMPROF_SAFE_READ_H

#include <stddef.h>
#include <stdint.h>

/* Reads n bytes at addr without faulting. Returns 1 on success. */
int safe_read(uintptr_t addr, void *dst, size_t n);

/* After fork(), in the child: safe_read's process id is the child's. */
void safe_read_forget_pid(void);

#endif
