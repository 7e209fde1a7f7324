/*
** Fault-safe reads of this process's memory: a wrong address gives a
** failed read, never a fault. Calibration reads through them while the
** offsets it tries are still unverified.
*/
#define _GNU_SOURCE
#include "safe_read.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fault.h"

/* Tries of a write or read of the pipe that a signal interrupts (its
** handler installed without SA_RESTART): a read fails, never loops, if
** signals come faster than the calls. */
#define EINTR_TRIES 8

/* A write (to_pipe) or read of k bytes at p through the pipe's end fd,
** tried again while a signal interrupts it before it transfers anything.
** Returns what the call returned. */
static ssize_t pipe_call(int fd, void *p, size_t k, int to_pipe)
{
  ssize_t r = -1;
  int tries;
  for (tries = 0; tries < EINTR_TRIES; tries++) {
    if (fault_pipe_eintr() > tries)
      errno = EINTR;
    else
      r = to_pipe ? write(fd, p, k) : read(fd, p, k);
    if (r >= 0 || errno != EINTR)
      break;
  }
  return r;
}

/* Reads through a pipe: write(2) of an unreadable range reports EFAULT,
** or writes less, instead of faulting. The pipe holds less than some
** windows, so the copy goes a page at a time: a page written whole (else
** the read fails), then read back, never more than is left of it. */
#define PIPE_CHUNK 4096
static int pipe_read(uintptr_t addr, void *dst, size_t n)
{
  int fds[2], ok = 1;
  size_t done, k, got;
  if (pipe2(fds, O_CLOEXEC) != 0)
    return 0;
  for (done = 0; done < n && ok; done += k) {
    k = n - done < PIPE_CHUNK ? n - done : PIPE_CHUNK;
    ok = pipe_call(fds[1], (void *)(addr + done), k, 1) == (ssize_t)k;
    for (got = 0; ok && got < k;) {
      ssize_t r = pipe_call(fds[0], (char *)dst + done + got, k - got, 0);
      if (r <= 0 || (size_t)r > k - got)
        ok = 0;
      else
        got += (size_t)r;
    }
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

/* System calls made by reads, for memprof.info(). */
static unsigned long read_calls;

static pid_t self_pid(void)
{
  pid_t pid = __atomic_load_n(&own_pid, __ATOMIC_RELAXED);
  if (pid == 0) {
    pid = getpid();
    __atomic_store_n(&own_pid, pid, __ATOMIC_RELAXED);
  }
  return pid;
}

/* One read of the kernel's. */
static int read_once(uintptr_t addr, void *dst, size_t n)
{
  struct iovec local = {dst, n}, remote = {(void *)addr, n};
  int saved = errno, ok;
  ssize_t got;
  __atomic_add_fetch(&read_calls, 1, __ATOMIC_RELAXED);
  got = fault_pipe_eintr() > 0
            ? (errno = EPERM, -1)
            : process_vm_readv(self_pid(), &local, 1, &remote, 1, 0);
  if (got == (ssize_t)n)
    ok = 1;
  else if (got < 0 && (errno == ENOSYS || errno == EPERM))
    ok = pipe_read(addr, dst, n);
  else
    ok = 0;
  errno = saved;
  return ok;
}

/* The kernel's reads of [addr, addr + n) into one buffer of SCRATCH bytes,
** SCRATCH_PARTS parts a call. */
#define SCRATCH 4096u
#define SCRATCH_PARTS 128u
int safe_readable(uintptr_t addr, size_t n)
{
  uint8_t scratch[SCRATCH];
  struct iovec local[SCRATCH_PARTS], remote;
  int saved = errno, ok = 1;
  if (addr < 4096 || addr + n < addr)
    return 0;
  while (n > 0 && ok) {
    size_t call = 0, k;
    unsigned parts = 0;
    for (; parts < SCRATCH_PARTS && call < n; parts++, call += k) {
      k = n - call < SCRATCH ? n - call : SCRATCH;
      local[parts].iov_base = scratch;
      local[parts].iov_len = k;
    }
    remote.iov_base = (void *)addr;
    remote.iov_len = call;
    __atomic_add_fetch(&read_calls, 1, __ATOMIC_RELAXED);
    ok = fault_pipe_eintr() == 0 &&
         process_vm_readv(self_pid(), local, parts, &remote, 1, 0) ==
             (ssize_t)call;
    if (!ok && fault_pipe_eintr() > 0)
      errno = EPERM;
    if (!ok && (errno == ENOSYS || errno == EPERM)) {
      /* Where the kernel refuses: a part at a time through the pipe. */
      for (k = 0, ok = 1; k < call && ok; k += SCRATCH)
        ok = pipe_read(addr + k, scratch,
                       call - k < SCRATCH ? call - k : SCRATCH);
    }
    addr += call;
    n -= call;
  }
  errno = saved;
  return ok;
}

/* ---- Batches ------------------------------------------------------------ */

/* A batch keeps copies of whole blocks: BATCH_BLOCK bytes aligned, so
** that a block never spans two pages and reads whole exactly when any
** byte of it reads (pages are the unit of mapping; 4096 bytes is the
** smallest page of x86-64 and arm64). One thread owns the batch at a
** time; another one's reads go to the kernel as before. */
#define BATCH_BLOCK 4096u
#define BATCH_SLOTS 16
#define BATCH_TRUSTED 8

static pthread_mutex_t batch_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t batch_owner; /* The owner's pthread_self(), 0: none. */
static struct {
  unsigned used, next;   /* Slots filled; the next one to replace. */
  unsigned last;         /* The slot found last. */
  unsigned ntrusted;     /* Ranges read in place (safe_read_batch_trust). */
  unsigned last_trusted; /* The range found last. */
  uintptr_t trusted[BATCH_TRUSTED][2];
  struct {
    uintptr_t base;
    int ok; /* The block was readable. */
  } slot[BATCH_SLOTS];
  uint8_t data[BATCH_SLOTS][BATCH_BLOCK];
} batch;

int safe_read_batch_begin(void)
{
  if (pthread_mutex_trylock(&batch_lock) != 0)
    return 0;
  batch.used = batch.next = batch.last = batch.ntrusted = 0;
  batch.last_trusted = 0;
  __atomic_store_n(&batch_owner, (uintptr_t)pthread_self(), __ATOMIC_RELEASE);
  return 1;
}

void safe_read_batch_end(int began)
{
  if (!began)
    return;
  __atomic_store_n(&batch_owner, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&batch_lock);
}

void safe_read_release(void)
{
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)batch.data + page - 1) / page * page;
  uintptr_t hi = ((uintptr_t)batch.data + sizeof(batch.data)) / page * page;
  if (pthread_mutex_trylock(&batch_lock) != 0)
    return;
  /* Only whole pages of the copies: the batch is reset at its begin, and
  ** its slots' contents are dead until then. */
  if (lo < hi)
    madvise((void *)lo, hi - lo, MADV_DONTNEED);
  pthread_mutex_unlock(&batch_lock);
}

void safe_read_batch_trust(int began, uintptr_t from, uintptr_t to)
{
  if (began && from >= 4096 && from < to && batch.ntrusted < BATCH_TRUSTED) {
    batch.trusted[batch.ntrusted][0] = from;
    batch.trusted[batch.ntrusted][1] = to;
    batch.ntrusted++;
  }
}

/* A trusted range may be another frame of this thread's stack: the copy
** is left out of AddressSanitizer's checks (which would call a caller's
** padding an overflow) and is not a memcpy it intercepts. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_ASAN __attribute__((no_sanitize("address")))
#endif
#endif
#if !defined(NO_ASAN) && defined(__SANITIZE_ADDRESS__)
#define NO_ASAN __attribute__((no_sanitize_address))
#endif
#ifndef NO_ASAN
#define NO_ASAN
#endif
NO_ASAN static void plain_copy(void *dst, uintptr_t addr, size_t n)
{
  const volatile uint8_t *from = (const volatile uint8_t *)addr;
  uint8_t *to = dst;
  size_t i;
  /* (The reads of a field: one load each.) */
  switch (n) {
  case 8:
    __builtin_memcpy(dst, (const void *)addr, 8);
    return;
  case 4:
    __builtin_memcpy(dst, (const void *)addr, 4);
    return;
  case 2:
    __builtin_memcpy(dst, (const void *)addr, 2);
    return;
  case 1:
    __builtin_memcpy(dst, (const void *)addr, 1);
    return;
  default:
    for (i = 0; i < n; i++)
      to[i] = from[i];
  }
}

/* A copy out of a block, with the sizes of fields inlined. */
static void block_copy(void *dst, const uint8_t *from, size_t n)
{
  switch (n) {
  case 8:
    memcpy(dst, from, 8);
    return;
  case 4:
    memcpy(dst, from, 4);
    return;
  case 2:
    memcpy(dst, from, 2);
    return;
  case 1:
    memcpy(dst, from, 1);
    return;
  default:
    memcpy(dst, from, n);
  }
}

/* Whether [addr, addr + n) lies in a trusted range (the one found last
** first: a resolution reads one object's fields in a row). */
static int trusted(uintptr_t addr, size_t n)
{
  unsigned i = batch.last_trusted;
  if (i < batch.ntrusted && addr >= batch.trusted[i][0] &&
      n <= batch.trusted[i][1] - addr)
    return 1;
  for (i = 0; i < batch.ntrusted; i++)
    if (addr >= batch.trusted[i][0] && n <= batch.trusted[i][1] - addr) {
      batch.last_trusted = i;
      return 1;
    }
  return 0;
}

static int in_batch(void)
{
  uintptr_t owner = __atomic_load_n(&batch_owner, __ATOMIC_ACQUIRE);
  return owner != 0 && owner == (uintptr_t)pthread_self();
}

/* The slot holding the block at base, read at first use. */
static unsigned batch_slot(uintptr_t base)
{
  unsigned i = batch.last;
  if (i < batch.used && batch.slot[i].base == base)
    return i;
  for (i = 0; i < batch.used; i++)
    if (batch.slot[i].base == base)
      return batch.last = i;
  if (batch.used < BATCH_SLOTS)
    i = batch.used++;
  else {
    i = batch.next;
    batch.next = (batch.next + 1) % BATCH_SLOTS;
  }
  batch.slot[i].base = base;
  batch.slot[i].ok = read_once(base, batch.data[i], BATCH_BLOCK);
  return batch.last = i;
}

/* A read of at most one block's size, from the batch's copies. */
static int batch_read(uintptr_t addr, void *dst, size_t n)
{
  size_t done = 0;
  while (done < n) {
    uintptr_t at = addr + done, base = at & ~(uintptr_t)(BATCH_BLOCK - 1);
    size_t k = base + BATCH_BLOCK - at;
    unsigned i = batch_slot(base);
    if (!batch.slot[i].ok)
      return 0;
    if (k > n - done)
      k = n - done;
    block_copy((char *)dst + done, batch.data[i] + (at - base), k);
    done += k;
  }
  return 1;
}

/* ---- Reads -------------------------------------------------------------- */

void safe_read_forget_pid(void)
{
  uintptr_t owner;
  __atomic_store_n(&own_pid, 0, __ATOMIC_RELAXED);
  /* A batch of a thread that the child does not have is over (its lock,
  ** held by no thread of the child, is made anew). */
  owner = __atomic_load_n(&batch_owner, __ATOMIC_RELAXED);
  if (owner != 0 && owner != (uintptr_t)pthread_self()) {
    __atomic_store_n(&batch_owner, 0, __ATOMIC_RELAXED);
    pthread_mutex_init(&batch_lock, NULL);
  }
}

unsigned long safe_read_calls(void)
{
  return __atomic_load_n(&read_calls, __ATOMIC_RELAXED);
}

int safe_read(uintptr_t addr, void *dst, size_t n)
{
  if (addr < 4096 || addr + n < addr)
    return 0;
  if (n <= BATCH_BLOCK && in_batch()) {
    /* (Fields only: a larger copy of a stack may hold slots never
    ** written, which valgrind would follow; the kernel's copy it does
    ** not.) */
    if (n <= 8 && trusted(addr, n)) {
      plain_copy(dst, addr, n);
      return 1;
    }
    return batch_read(addr, dst, n);
  }
  return read_once(addr, dst, n);
}

uint64_t copy_u64(const uint8_t *b, size_t o)
{
  uint64_t v;
  memcpy(&v, b + o, 8);
  return v;
}

uint32_t copy_u32(const uint8_t *b, size_t o)
{
  uint32_t v;
  memcpy(&v, b + o, 4);
  return v;
}

uint16_t copy_u16(const uint8_t *b, size_t o)
{
  uint16_t v;
  memcpy(&v, b + o, 2);
  return v;
}
