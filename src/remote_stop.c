/*
** Stopping every thread of another process (see remote_stop.h).
*/
#define _GNU_SOURCE
#include "remote_stop.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>

#include "remote_proc.h"

/* Threads a process may have; rounds of listing its threads until no new
** one appears (a thread may start one while others are being stopped);
** how long a thread may take to stop (one in an uninterruptible sleep). */
#define THREADS_MAX 65536
#define ROUNDS_MAX 16
#define STOP_WAIT_NS 2000000000LL

static int seized(const struct remote_stop *s, pid_t tid)
{
  size_t i;
  for (i = 0; i < s->n; i++)
    if (s->tid[i] == tid)
      return 1;
  return 0;
}

static int add(struct remote_stop *s, pid_t tid)
{
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    pid_t *t = realloc(s->tid, cap * sizeof(*t));
    int *g, *h;
    if (t != NULL)
      s->tid = t;
    g = t != NULL ? realloc(s->sig, cap * sizeof(*g)) : NULL;
    if (g != NULL)
      s->sig = g;
    h = g != NULL ? realloc(s->held, cap * sizeof(*h)) : NULL;
    if (h == NULL || cap > THREADS_MAX)
      return 0;
    s->held = h;
    s->cap = cap;
  }
  s->tid[s->n] = tid;
  s->sig[s->n] = 0;
  s->held[s->n] = 0;
  s->n++;
  return 1;
}

/* Seizes and interrupts the threads not seized yet. Returns how many were
** new, or -errno. */
static int seize_new(struct remote_stop *s)
{
  char name[64];
  struct dirent *e;
  DIR *d;
  int added = 0, err = 0;
  snprintf(name, sizeof(name), "/proc/%d/task", (int)s->pid);
  if ((d = opendir(name)) == NULL)
    return errno == ENOENT ? -ESRCH : -errno;
  while (err == 0 && (e = readdir(d)) != NULL) {
    pid_t tid = (pid_t)atoi(e->d_name);
    if (tid <= 0 || seized(s, tid))
      continue;
    if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0) {
      if (errno != ESRCH || tid == s->pid)
        err = errno; /* A thread that just ended is no failure. */
      continue;
    }
    if (!add(s, tid)) {
      ptrace(PTRACE_DETACH, tid, NULL, NULL);
      err = ENOMEM;
      continue;
    }
    ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
    added++;
  }
  closedir(d);
  return err != 0 ? -err : added;
}

static long long now_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Waits for thread i's stop. Returns 0, or ESRCH (it ended) or ETIMEDOUT. */
static int wait_stop(struct remote_stop *s, size_t i, long long deadline)
{
  struct timespec nap = {0, 200000};
  int st;
  for (;;) {
    pid_t got = waitpid(s->tid[i], &st, __WALL | WNOHANG);
    if (got == s->tid[i] && WIFSTOPPED(st)) {
      /* A signal-delivery stop keeps its signal for the detach. */
      if ((st >> 16) != PTRACE_EVENT_STOP)
        s->sig[i] = WSTOPSIG(st);
      s->held[i] = 1;
      return 0;
    }
    if (got == s->tid[i] || (got < 0 && errno == ECHILD))
      return ESRCH;
    if (now_ns() > deadline)
      return ETIMEDOUT;
    nanosleep(&nap, NULL);
  }
}

int remote_stop_all(struct remote_stop *s, pid_t pid, char *msg, size_t len)
{
  long long deadline = now_ns() + STOP_WAIT_NS;
  int round, got = 1, err = 0;
  size_t i;
  memset(s, 0, sizeof(*s));
  s->pid = pid;
  for (round = 0; round < ROUNDS_MAX && got > 0; round++)
    got = seize_new(s);
  if (got < 0)
    err = -got;
  else if (got > 0)
    err = EAGAIN;
  for (i = 0; i < s->n && err == 0; i++) {
    int e = wait_stop(s, i, deadline);
    if (e == ESRCH && s->tid[i] != pid)
      continue; /* A thread that ended on its way. */
    err = e;
  }
  if (err == 0)
    return 0;
  if (err == EPERM || err == EACCES)
    remote_explain_refusal(pid, err, msg, len);
  else if (err == ESRCH)
    snprintf(msg, len, "process %d exited while it was being stopped",
             (int)pid);
  else if (err == ETIMEDOUT)
    snprintf(msg, len,
             "a thread of process %d did not stop within %lld ms (an "
             "uninterruptible wait?)",
             (int)pid, STOP_WAIT_NS / 1000000);
  else if (err == EAGAIN)
    snprintf(msg, len,
             "process %d kept starting threads while they were being "
             "stopped",
             (int)pid);
  else
    snprintf(msg, len, "cannot stop process %d: %s", (int)pid, strerror(err));
  remote_resume_all(s);
  return err;
}

void remote_resume_all(struct remote_stop *s)
{
  size_t i;
  for (i = 0; i < s->n; i++)
    /* A thread not stopped yet cannot be detached: it is let go when this
    ** process exits, which the caller does on this path. */
    if (s->held[i])
      ptrace(PTRACE_DETACH, s->tid[i], NULL, (void *)(intptr_t)s->sig[i]);
  free(s->tid);
  free(s->sig);
  free(s->held);
  memset(s, 0, sizeof(*s));
}

int remote_thread_pc(pid_t tid, uintptr_t *pc)
{
  struct user_regs_struct r;
  struct iovec io = {&r, sizeof(r)};
  if (ptrace(PTRACE_GETREGSET, tid, (void *)NT_PRSTATUS, &io) != 0)
    return 0;
#if defined(__x86_64__)
  *pc = (uintptr_t)r.rip;
#elif defined(__aarch64__)
  *pc = (uintptr_t)r.pc;
#else
#error "remote_thread_pc: x86_64 and arm64 only"
#endif
  return 1;
}
