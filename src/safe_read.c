/*
** Fault-safe reads of this process's memory: a wrong address gives a
** failed read, never a fault. Calibration reads through them while the
** offsets it tries are still unverified.
*/
#define _GNU_SOURCE
#include "safe_read.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

/* Reads through a pipe: write(2) reports EFAULT instead of faulting. The
** pipe holds less than some windows, so the copy goes a page at a time. */
#define PIPE_CHUNK 4096
static int pipe_read(uintptr_t addr, void *dst, size_t n)
{
  int fds[2], ok = 1;
  size_t done, k;
  if (pipe2(fds, O_CLOEXEC) != 0)
    return 0;
  for (done = 0; done < n && ok; done += k) {
    k = n - done < PIPE_CHUNK ? n - done : PIPE_CHUNK;
    ok = write(fds[1], (const void *)(addr + done), k) == (ssize_t)k &&
         read(fds[0], (char *)dst + done, k) == (ssize_t)k;
  }
  close(fds[0]);
  close(fds[1]);
  return ok;
}

/* The process id safe_read reads from, 0 until known: a start makes
** thousands of reads, and one getpid() each would be as many system calls
** again. A child after fork() forgets it (safe_read_forget_pid, from the
** fork handler), before any of its code can read. */
static pid_t own_pid;

void safe_read_forget_pid(void)
{
  __atomic_store_n(&own_pid, 0, __ATOMIC_RELAXED);
}

static pid_t self_pid(void)
{
  pid_t pid = __atomic_load_n(&own_pid, __ATOMIC_RELAXED);
  if (pid == 0) {
    pid = getpid();
    __atomic_store_n(&own_pid, pid, __ATOMIC_RELAXED);
  }
  return pid;
}

int safe_read(uintptr_t addr, void *dst, size_t n)
{
  struct iovec local = {dst, n}, remote = {(void *)addr, n};
  int saved = errno, ok;
  ssize_t got;
  if (addr < 4096)
    return 0;
  got = process_vm_readv(self_pid(), &local, 1, &remote, 1, 0);
  if (got == (ssize_t)n)
    ok = 1;
  else if (got < 0 && (errno == ENOSYS || errno == EPERM))
    ok = pipe_read(addr, dst, n);
  else
    ok = 0;
  errno = saved;
  return ok;
}
