/*
** Fault injection, compiled in only for the specs (-DMEMPROF_FAULTS: the
** module in build/faults/). With MEMPROF_FAULT_SOURCE set to a chunk name,
** the symbol table fails to keep the prototypes of that chunk, as when its
** growth fails, after their symbol is written: the path of a failed
** allocation in the middle of an event, which nothing else reaches. With
** MEMPROF_FAULT_TRACES set, the heap calibration reads every trace
** constant's object 8 bytes off, as on a build whose trace layout differs:
** traces cannot be verified. With MEMPROF_FAULT_REMOTE_EXIT set, `memprof
** heap PID` kills its target once it is stopped: a process that exits
** while it is read; with MEMPROF_FAULT_REMOTE_CRASH set, the child that
** walks the copy faults before the walk: a copy that reads inconsistently
** (and `memprof attach PID` kills its target once it is stopped). With
** MEMPROF_FAULT_ATTACH_CRASH set in the target, the entry point memprof
** attach calls there faults at once: a call that never returns to 0.
** With MEMPROF_FAULT_TRACE_DECOY set, the layout's first search for the
** trace array sees a decoy before it (a copy of J->trace in a slot that
** is not J->trace), as a build whose memory happens to look so would.
** With MEMPROF_FAULT_CHUNKNAME set, the discovery of a prototype's fields
** looks for a chunk name one byte off: none fits (seen twice in CI).
** With MEMPROF_FAULT_VMDEF_TEXT set, jit.vmdef's text is taken as not in
** the generated shape: the module is run instead, as for any other text.
** With MEMPROF_FAULT_PIPE_EINTR=N, fault-safe reads go through their pipe,
** as where process_vm_readv is refused, and each write and read of the
** pipe fails N times with EINTR before it runs, as a signal whose handler
** was installed without SA_RESTART would interrupt it.
*/
#ifndef MEMPROF_FAULT_H
#define MEMPROF_FAULT_H

#include <stddef.h>

#ifdef MEMPROF_FAULTS
/* Each says whether its fault is asked for (fault.c). */
int fault_in_source(const char *name, size_t len);
int fault_traces(void);
int fault_remote_exit(void);
int fault_remote_crash(void);
int fault_attach_crash(void);
int fault_trace_decoy(void);
int fault_chunkname(void);
int fault_vmdef_text(void);
int fault_pipe_eintr(void);
#else
/* No fault in a build for use: each test folds away. */
#define fault_in_source(name, len) ((void)(name), (void)(len), 0)
#define fault_traces() 0
#define fault_remote_exit() 0
#define fault_remote_crash() 0
#define fault_attach_crash() 0
#define fault_trace_decoy() 0
#define fault_chunkname() 0
#define fault_vmdef_text() 0
#define fault_pipe_eintr() 0
#endif

#endif
