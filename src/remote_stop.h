/*
** Stopping every thread of another process with ptrace, and letting it go
** on (remote_stop.c). PTRACE_SEIZE and PTRACE_INTERRUPT: no signal is
** sent, and a signal that arrives while a thread is stopped is handed back
** at the detach. If the process that stopped them dies, the kernel lets
** the threads go on by itself.
*/
#ifndef MEMPROF_REMOTE_STOP_H
#define MEMPROF_REMOTE_STOP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct remote_stop {
  pid_t pid;
  pid_t *tid; /* The threads seized, */
  int *sig;   /* the signal each was stopped for (0: ours), */
  int *held;  /* and whether each is stopped now. */
  size_t n, cap;
};

/* Stops every thread of pid. Returns 0, or an errno with a message (every
** thread seized is let go first): ESRCH the process is gone, EPERM not
** permitted, ETIMEDOUT a thread did not stop within the bound. */
int remote_stop_all(struct remote_stop *s, pid_t pid, char *msg, size_t len);

/* Lets every stopped thread go on, and frees s. */
void remote_resume_all(struct remote_stop *s);

/* The program counter of stopped thread tid. Returns 1 on success. */
int remote_thread_pc(pid_t tid, uintptr_t *pc);

#endif
