/*
** memprof's side of attach and detach (see attach.h): a call of dlopen and
** of memprof_attach_call made by a thread of the target, through ptrace.
**
** How a call is made: every thread is stopped (remote_stop.h); a thread
** stopped in a system call that waits (epoll_wait, poll, a sleep, a read)
** is taken, since it holds no lock of the C library there; its registers
** (general and vector) and the stack below its red zone are saved; the
** request is written there, the thread's registers are set to call the
** function with a return address of 0, and it runs until it returns to
** address 0 (a SIGSEGV at pc 0 that is never delivered). Its registers
** and memory are then put back and every thread is let go: the system
** call it waited in is restarted as after any ptrace stop.
*/
#define _GNU_SOURCE
#include "attach.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "elf_syms.h"
#include "fault.h"
#include "lauxlib.h"
#include "remote_proc.h"
#include "remote_stop.h"
#include "writer.h"

#define TRIES_MAX 25
#define RETRY_NS 20000000LL
/* How long a call may take with the other threads stopped: the first
** attach learns the layout (about a second; more on a loaded machine). */
#define CALL_NS 30000000000LL
#define XSTATE_MAX 16384
/* Below the stack pointer: the red zone and some slack, then the request. */
#define BELOW_SP 512

/* ---- Addresses in the target ------------------------------------------- */

/* A file mapped here, and where the same file is mapped in the target. */
struct object {
  unsigned dev_major, dev_minor;
  uint64_t inode;
  uintptr_t own_base, target_base;
  char path[256];
};

/* The file mapped here that holds addr, and the base (offset 0) of the
** copy that holds it. */
static int own_object(const void *addr, struct object *o)
{
  Dl_info info;
  struct remote_maps maps;
  const struct remote_map *m;
  size_t i;
  int ok = 0;
  if (remote_maps_read(0, &maps) != 0)
    return 0;
  m = remote_maps_find(&maps, (uintptr_t)addr);
  if (m != NULL && m->inode != 0) {
    memset(o, 0, sizeof(*o));
    o->dev_major = m->dev_major, o->dev_minor = m->dev_minor;
    o->inode = m->inode;
    snprintf(o->path, sizeof(o->path), "%s", m->path);
    /* The copy that holds addr: a file loaded twice (a helper's
    ** dlmopen namespace) is mapped twice. */
    if (dladdr(addr, &info) != 0 && info.dli_fbase != NULL) {
      const struct remote_map *b =
          remote_maps_find(&maps, (uintptr_t)info.dli_fbase);
      if (b != NULL && b->inode == o->inode && b->offset == 0)
        o->own_base = b->lo, ok = 1;
    }
    for (i = 0; i < maps.n && !ok; i++)
      if (maps.m[i].inode == o->inode && maps.m[i].offset == 0 &&
          maps.m[i].dev_major == o->dev_major &&
          maps.m[i].dev_minor == o->dev_minor)
        o->own_base = maps.m[i].lo, ok = 1;
  }
  remote_maps_free(&maps);
  return ok;
}

/* Where the target maps o's file (the same file, or failing that one with
** the same build-id). Returns 1 if it does. */
static int target_object(pid_t pid, const struct remote_maps *maps,
                         struct object *o)
{
  uint8_t id[64], theirs[64];
  size_t i, n = remote_build_id(getpid(), o->own_base, id, sizeof(id));
  for (i = 0; i < maps->n; i++) {
    const struct remote_map *m = &maps->m[i];
    if (m->offset == 0 && m->inode == o->inode &&
        m->dev_major == o->dev_major && m->dev_minor == o->dev_minor) {
      o->target_base = m->lo;
      return 1;
    }
  }
  for (i = 0; n > 0 && i < maps->n; i++) {
    const struct remote_map *m = &maps->m[i];
    if (m->offset == 0 && m->inode != 0 &&
        remote_build_id(pid, m->lo, theirs, sizeof(theirs)) == n &&
        memcmp(id, theirs, n) == 0) {
      o->target_base = m->lo;
      return 1;
    }
  }
  return 0;
}

uintptr_t attach_own_address(pid_t pid, const struct remote_maps *maps,
                             uintptr_t addr)
{
  struct object self;
  const struct remote_map *m = remote_maps_find(maps, addr);
  if (m == NULL || !own_object((const void *)attach_own_address, &self) ||
      !target_object(pid, maps, &self) || m->inode != self.inode ||
      m->dev_major != self.dev_major || m->dev_minor != self.dev_minor)
    return 0;
  return addr - self.target_base + self.own_base;
}

/* ---- One thread, taken over -------------------------------------------- */

#if defined(__x86_64__)

static uintptr_t in_target(const struct object *o, const void *own)
{
  return o->target_base + ((uintptr_t)own - o->own_base);
}

static long long now_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

struct thread_state {
  pid_t tid;
  struct user_regs_struct regs;
  uint8_t *xstate;
  size_t xlen;
  int xnote;        /* NT_X86_XSTATE, or NT_PRFPREG where it is refused. */
  uintptr_t lo, hi; /* The stack memory written, saved in mem. */
  uint8_t *mem;
  int pending[8]; /* Signals that arrived during a call, sent again. */
  int npending;
};

static int get_regs(pid_t tid, struct user_regs_struct *r)
{
  struct iovec io = {r, sizeof(*r)};
  return ptrace(PTRACE_GETREGSET, tid, (void *)NT_PRSTATUS, &io) == 0;
}

static int set_regs(pid_t tid, const struct user_regs_struct *r)
{
  struct iovec io = {(void *)r, sizeof(*r)};
  return ptrace(PTRACE_SETREGSET, tid, (void *)NT_PRSTATUS, &io) == 0;
}

/* System calls a thread waits in with no lock of the C library held. */
static int waiting_call(long nr)
{
  static const long calls[] = {
      SYS_read,
      SYS_poll,
      SYS_select,
      SYS_pause,
      SYS_nanosleep,
      SYS_wait4,
      SYS_epoll_wait,
      SYS_epoll_pwait,
      SYS_ppoll,
      SYS_pselect6,
      SYS_clock_nanosleep,
      SYS_recvfrom,
      SYS_recvmsg,
      SYS_accept,
      SYS_accept4,
      SYS_rt_sigsuspend,
      SYS_rt_sigtimedwait,
      SYS_waitid,
  };
  size_t i;
  for (i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
    if (calls[i] == nr)
      return 1;
  return 0;
}

/* Which stopped thread to take: one that waits in a system call, the main
** thread first. Returns its index, or -1. */
static int pick_thread(const struct remote_stop *s)
{
  size_t i;
  int best = -1;
  for (i = 0; i < s->n; i++) {
    struct user_regs_struct r;
    if (!s->held[i] || !get_regs(s->tid[i], &r) ||
        !waiting_call((long)r.orig_rax))
      continue;
    if (best < 0 || s->tid[i] == s->pid)
      best = (int)i;
  }
  return best;
}

static int save_thread(struct thread_state *t, pid_t tid,
                       const struct remote_maps *maps, size_t need, char *msg,
                       size_t len)
{
  struct iovec io;
  const struct remote_map *m;
  memset(t, 0, sizeof(*t));
  t->tid = tid;
  if (!get_regs(tid, &t->regs))
    return remote_fail(msg, len, errno, "cannot read thread %d's registers: %s",
                       (int)tid, strerror(errno));
  if ((t->xstate = malloc(XSTATE_MAX)) == NULL)
    return remote_fail(msg, len, ENOMEM, "out of memory");
  io.iov_base = t->xstate, io.iov_len = XSTATE_MAX;
  t->xnote = NT_X86_XSTATE;
  if (ptrace(PTRACE_GETREGSET, tid, (void *)NT_X86_XSTATE, &io) != 0) {
    io.iov_len = XSTATE_MAX;
    t->xnote = NT_PRFPREG;
    if (ptrace(PTRACE_GETREGSET, tid, (void *)NT_PRFPREG, &io) != 0)
      return remote_fail(msg, len, errno,
                         "cannot read thread %d's vector registers: %s",
                         (int)tid, strerror(errno));
  }
  t->xlen = io.iov_len;
  t->hi = (uintptr_t)t->regs.rsp - BELOW_SP;
  t->lo = (t->hi - need) & ~(uintptr_t)63;
  m = remote_maps_find(maps, t->lo);
  if (m == NULL || m != remote_maps_find(maps, (uintptr_t)t->regs.rsp - 1) ||
      m->perms[1] != 'w')
    return remote_fail(
        msg, len, ENOTSUP,
        "check 'stack room' failed: the %zu bytes below thread %d's "
        "stack pointer (0x%llx) are not in its stack mapping",
        need + BELOW_SP, (int)tid, (unsigned long long)t->regs.rsp);
  if ((t->mem = malloc(t->hi - t->lo)) == NULL)
    return remote_fail(msg, len, ENOMEM, "out of memory");
  if (!remote_read(tid, t->lo, t->mem, t->hi - t->lo))
    return remote_fail(msg, len, EIO, "cannot read thread %d's stack",
                       (int)tid);
  return 0;
}

static int write_mem(pid_t pid, uintptr_t at, const void *src, size_t n)
{
  struct iovec l = {(void *)src, n}, r = {(void *)at, n};
  return process_vm_writev(pid, &l, 1, &r, 1, 0) == (ssize_t)n;
}

/* Puts back what the calls changed: memory first, then registers. */
static int restore_thread(struct thread_state *t)
{
  struct iovec io = {t->xstate, t->xlen};
  int ok = 1;
  if (t->mem != NULL)
    ok = write_mem(t->tid, t->lo, t->mem, t->hi - t->lo);
  if (t->xstate != NULL && t->xlen > 0)
    ok = ptrace(PTRACE_SETREGSET, t->tid, (void *)(intptr_t)t->xnote, &io) ==
             0 &&
         ok;
  ok = set_regs(t->tid, &t->regs) && ok;
  free(t->xstate);
  free(t->mem);
  t->xstate = NULL;
  t->mem = NULL;
  return ok;
}

/* Calls fn(a0, a1) on thread t; *ret is what it returned. */
/* Lets every stopped thread go on but t's (and, with writers_only, only
** memprof's writer threads, which never touch the VM). */
static void release_others(struct remote_stop *s, pid_t keep, int writers_only)
{
  size_t i;
  for (i = 0; i < s->n; i++) {
    char name[64], comm[32] = "";
    FILE *f;
    if (!s->held[i] || s->tid[i] == keep)
      continue;
    if (writers_only) {
      snprintf(name, sizeof(name), "/proc/%d/task/%d/comm", (int)s->pid,
               (int)s->tid[i]);
      if ((f = fopen(name, "re")) == NULL)
        continue;
      if (fgets(comm, sizeof(comm), f) == NULL)
        comm[0] = '\0';
      fclose(f);
      comm[strcspn(comm, "\n")] = '\0';
      if (strcmp(comm, WRITER_THREAD_NAME) != 0)
        continue;
    }
    ptrace(PTRACE_DETACH, s->tid[i], NULL, (void *)(intptr_t)s->sig[i]);
    s->held[i] = 0;
  }
}

/* Stops thread t, running the call, so that its registers can be put
** back (the call is abandoned). */
static void interrupt(struct thread_state *t)
{
  long long deadline = now_ns() + 2000000000LL;
  struct timespec nap = {0, 200000};
  int st;
  ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL);
  while (now_ns() < deadline) {
    pid_t got = waitpid(t->tid, &st, __WALL | WNOHANG);
    if (got == t->tid && WIFSTOPPED(st))
      return;
    if (got == t->tid || (got < 0 && errno != EINTR))
      return;
    nanosleep(&nap, NULL);
  }
}

static int call(struct thread_state *t, struct remote_stop *s, uintptr_t fn,
                uintptr_t a0, uintptr_t a1, uintptr_t a2, uint64_t *ret,
                char *msg, size_t len)
{
  int grace = 0;
  struct user_regs_struct r = t->regs;
  uint64_t zero = 0;
  long long deadline = now_ns() + CALL_NS;
  struct timespec nap = {0, 100000};
  /* The return address, in the saved memory below the request; the stack
  ** is aligned as at a function's entry. */
  uintptr_t sp = ((t->lo + 64) & ~(uintptr_t)15) - 8;
  if (!write_mem(t->tid, sp, &zero, sizeof(zero)))
    return remote_fail(msg, len, EIO, "cannot write thread %d's stack",
                       (int)t->tid);
  r.rip = fn;
  r.rdi = a0;
  r.rsi = a1;
  r.rdx = a2;
  r.rsp = sp;
  r.rax = 0;
  r.orig_rax = (unsigned long long)-1; /* No system call to restart. */
  if (!set_regs(t->tid, &r) || ptrace(PTRACE_CONT, t->tid, NULL, NULL) != 0)
    return remote_fail(msg, len, errno, "cannot run thread %d: %s", (int)t->tid,
                       strerror(errno));
  for (;;) {
    int st;
    pid_t got = waitpid(t->tid, &st, __WALL | WNOHANG);
    if (got == t->tid && (WIFEXITED(st) || WIFSIGNALED(st)))
      return remote_fail(msg, len, ESRCH, "the process exited during the call");
    if (got == t->tid && WIFSTOPPED(st)) {
      int sig = WSTOPSIG(st);
      struct user_regs_struct now;
      if ((st >> 16) == 0 && sig == SIGSEGV && get_regs(t->tid, &now) &&
          now.rip == 0) {
        *ret = now.rax;
        return 0;
      }
      if ((st >> 16) == 0 &&
          (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE)) {
        get_regs(t->tid, &now);
        return remote_fail(msg, len, EFAULT,
                           "the call in thread %d raised signal %d at 0x%llx",
                           (int)t->tid, sig, (unsigned long long)now.rip);
      }
      /* Another signal: kept for after the call. A ptrace event stop
      ** (a group stop, say) just goes on. */
      if ((st >> 16) == 0 && t->npending < 8)
        t->pending[t->npending++] = sig;
      ptrace(PTRACE_CONT, t->tid, NULL, NULL);
      continue;
    }
    if (got < 0 && errno != EINTR)
      return remote_fail(msg, len, ESRCH, "thread %d is gone", (int)t->tid);
    if (now_ns() > deadline && !grace) {
      /* A stopped thread may hold a lock the call waits for. */
      release_others(s, t->tid, 0);
      grace = 1;
      deadline = now_ns() + CALL_NS;
    } else if (now_ns() > deadline) {
      interrupt(t);
      return remote_fail(
          msg, len, ETIMEDOUT,
          "the call in thread %d did not return within %lld s, nor "
          "%lld s after the other threads were let go; it was "
          "abandoned",
          (int)t->tid, CALL_NS / 1000000000LL, CALL_NS / 1000000000LL);
    }
    nanosleep(&nap, NULL);
  }
}

static int thread_pcs(const struct remote_stop *s, struct attach_call *c)
{
  size_t i;
  c->npcs = 0;
  for (i = 0; i < s->n; i++) {
    uintptr_t pc;
    if (!s->held[i] || !remote_thread_pc(s->tid[i], &pc))
      continue;
    if (c->npcs == ATTACH_PCS_MAX)
      return 0;
    c->pcs[c->npcs++] = pc;
  }
  return 1;
}

#endif

/* ---- A session --------------------------------------------------------- */

struct result {
  int tries;
  uint64_t pause_ns; /* The last stop, stopped to resumed. */
  int loaded;        /* dlopen was called. */
  size_t shed;       /* Pages the calls made resident, dropped after. */
};

/* Where dlopen and dlerror are in the target, from this process's C
** library (the target must map the same file). */
struct libc_fns {
  uintptr_t dlopen, dlerror, madvise;
};

#if defined(__x86_64__)

static int libc_in_target(pid_t pid, const struct remote_maps *maps,
                          struct libc_fns *f, char *msg, size_t len)
{
  struct object a;
  void *own = dlsym(RTLD_DEFAULT, "dlopen"),
       *err = dlsym(RTLD_DEFAULT, "dlerror"),
       *adv = dlsym(RTLD_DEFAULT, "madvise");
  struct object o;
  if (own == NULL || err == NULL || adv == NULL || !own_object(own, &o) ||
      !own_object(adv, &a) || a.inode != o.inode)
    return remote_fail(
        msg, len, ENOTSUP,
        "check 'dlopen' failed: it is in no file this process maps");
  if (!target_object(pid, maps, &o))
    return remote_fail(
        msg, len, ENOTSUP,
        "check 'same C library' failed: process %d does not map %s "
        "(this process's dlopen), nor a file with its build-id",
        (int)pid, o.path);
  f->dlopen = in_target(&o, own);
  f->dlerror = in_target(&o, err);
  f->madvise = in_target(&o, adv);
  return 0;
}

/* ---- What the calls left resident ------------------------------------- */

#define PM_PRESENT (1ULL << 63)
#define PM_FILE (1ULL << 61)
#define PAGE 4096
#define SHED_CALLS_MAX 512

/* The clean pages (present, the file's own, not a private copy) of the
** target's read-only private file mappings: what the calls' code and
** read-only data brought in, dropped after them if not resident at the
** stop (madvise: read again from the page cache if they run again). A
** private copy (relocated data) is never dropped: it is not the file's. */
struct clean_pages {
  uintptr_t *page;
  size_t n, cap;
};

static int sheddable(const struct remote_map *m)
{
  return m->inode != 0 && m->perms[0] == 'r' && m->perms[1] != 'w' &&
         m->perms[3] == 'p';
}

/* The pagemap entries of mapping m of pid into *pm (grown to *cap
** entries as needed). Returns 1, or 0 when they could not be read. */
static int map_pagemap(pid_t pid, const struct remote_map *m, uint64_t **pm,
                       size_t *cap)
{
  size_t n = (m->hi - m->lo) / PAGE;
  if (n > *cap) {
    uint64_t *p = realloc(*pm, n * sizeof(**pm));
    if (p == NULL)
      return 0;
    *pm = p, *cap = n;
  }
  return remote_pagemap(pid, m->lo, m->hi, *pm);
}

/* The clean pages of pid's read-only file mappings, sorted. */
static void clean_pages(pid_t pid, const struct remote_maps *maps,
                        struct clean_pages *out)
{
  uint64_t *pm = NULL;
  size_t i, k, cap = 0;
  out->n = 0;
  for (i = 0; i < maps->n; i++) {
    const struct remote_map *m = &maps->m[i];
    size_t n = (m->hi - m->lo) / PAGE;
    if (!sheddable(m) || !map_pagemap(pid, m, &pm, &cap))
      continue;
    for (k = 0; k < n; k++) {
      if ((pm[k] & (PM_PRESENT | PM_FILE)) != (PM_PRESENT | PM_FILE))
        continue;
      if (out->n == out->cap) {
        size_t c2 = out->cap ? 2 * out->cap : 1024;
        uintptr_t *p = realloc(out->page, c2 * sizeof(*p));
        if (p == NULL)
          continue;
        out->page = p, out->cap = c2;
      }
      out->page[out->n++] = m->lo + k * PAGE;
    }
  }
  free(pm);
}

static int had_page(const struct clean_pages *c, uintptr_t page)
{
  size_t lo = 0, hi = c->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c->page[mid] < page)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < c->n && c->page[lo] == page;
}

/* Drops the clean pages of read-only file mappings that the calls made
** resident (not in before), and with drop_self all of memprof.so's (no
** profile runs: nothing there runs until the next call, which the thread
** about to return to address 0 no longer needs; dropped inside the call,
** fault-around would bring 16 pages back for each one it runs), through
** madvise(MADV_DONTNEED) calls made by the same thread. Returns the pages
** dropped. */
static size_t shed_pages(struct thread_state *t, struct remote_stop *s,
                         uintptr_t madv, const struct clean_pages *before,
                         const struct object *self, int drop_self)
{
  struct remote_maps maps = {NULL, 0};
  uint64_t *pm = NULL, ret;
  size_t i, k, cap = 0, calls = 0, shed = 0;
  char msg[200];
  if (madv == 0 || remote_maps_read(s->pid, &maps) != 0)
    return 0;
  for (i = 0; i < maps.n && calls < SHED_CALLS_MAX; i++) {
    const struct remote_map *m = &maps.m[i];
    size_t n = (m->hi - m->lo) / PAGE;
    uintptr_t lo = 0, hi = 0;
    int own = drop_self && m->inode == self->inode &&
              m->dev_major == self->dev_major &&
              m->dev_minor == self->dev_minor;
    if (!sheddable(m) || !map_pagemap(s->pid, m, &pm, &cap))
      continue;
    for (k = 0; k <= n && calls < SHED_CALLS_MAX; k++) {
      uintptr_t p = m->lo + k * PAGE;
      if (k < n && (pm[k] & (PM_PRESENT | PM_FILE)) == (PM_PRESENT | PM_FILE) &&
          (own || !had_page(before, p))) {
        if (p != hi)
          lo = p;
        hi = p + PAGE;
        continue;
      }
      if (hi > lo) {
        if (call(t, s, madv, lo, hi - lo, MADV_DONTNEED, &ret, msg,
                 sizeof(msg)) != 0) {
          calls = SHED_CALLS_MAX;
          break;
        }
        calls++;
        shed += ret == 0 ? (hi - lo) / PAGE : 0;
      }
      lo = hi = 0;
    }
  }
  free(pm);
  remote_maps_free(&maps);
  return shed;
}

/* One stop: dlopen if memprof.so is not loaded yet, then the entry point.
** Returns the entry point's answer (EAGAIN: not a safe moment) or a
** failure; every thread is let go on every path. */
static int one_stop(pid_t pid, const char *so, struct object *self,
                    struct attach_call *c, struct result *res, char *msg,
                    size_t len)
{
  struct remote_stop s;
  struct remote_maps maps = {NULL, 0};
  struct thread_state t;
  struct libc_fns lf = {0, 0, 0};
  struct clean_pages before = {NULL, 0, 0};
  char libc_why[200];
  int calls_ok = 1, answered = 0;
  size_t solen = strlen(so) + 1, need = sizeof(*c) + solen + 128;
  uintptr_t at_call, at_path;
  uint64_t ret = 0;
  long long t0;
  int err, i, restored = 1;
  memset(&t, 0, sizeof(t));
  if ((err = remote_stop_all(&s, pid, msg, len)) != 0)
    return err;
  t0 = now_ns();
  if (fault_remote_exit()) {
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
      ;
  }
  if ((err = remote_maps_read_target(pid, &maps, msg, len)) != 0) {
    if (err == ESRCH)
      remote_fail(msg, len, ESRCH, "process %d exited while it was stopped",
                  (int)pid);
    goto out;
  }
  /* The C library's functions, where the target maps this one's (dlopen
  ** needs it; dropping pages again is skipped without it). */
  if (libc_in_target(pid, &maps, &lf, libc_why, sizeof(libc_why)) == 0)
    clean_pages(pid, &maps, &before);
  if ((i = pick_thread(&s)) < 0) {
    err =
        remote_fail(msg, len, EAGAIN,
                    "no thread was waiting in a system call (epoll_wait, poll, "
                    "a sleep, a read)");
    goto out;
  }
  if (!thread_pcs(&s, c)) {
    err = remote_fail(msg, len, ENOTSUP, "process %d has more than %d threads",
                      (int)pid, ATTACH_PCS_MAX);
    goto out;
  }
  if ((err = save_thread(&t, s.tid[i], &maps, need + 128, msg, len)) != 0)
    goto out;
  restored = 0;
  at_call = (t.lo + 128 + 15) & ~(uintptr_t)15;
  at_path = at_call + sizeof(*c);
  if (!target_object(pid, &maps, self)) {
    if (c->op != ATTACH_START) {
      err =
          remote_fail(msg, len, ENOENT,
                      "memprof was never attached to process %d (memprof.so is "
                      "not loaded there)",
                      (int)pid);
      goto out;
    }
    if (lf.dlopen == 0 &&
        (err = libc_in_target(pid, &maps, &lf, msg, len)) != 0)
      goto out;
    if (!write_mem(t.tid, at_path, so, solen)) {
      err = remote_fail(msg, len, EIO, "cannot write thread %d's stack",
                        (int)t.tid);
      goto out;
    }
    res->loaded = 1;
    if ((err = call(&t, &s, lf.dlopen, at_path, RTLD_NOW, 0, &ret, msg, len)) !=
        0) {
      calls_ok = 0;
      goto out;
    }
    if (ret == 0) {
      char why[400] = "";
      if (call(&t, &s, lf.dlerror, 0, 0, 0, &ret, msg, len) != 0)
        calls_ok = 0;
      else if (ret != 0)
        remote_read(t.tid, (uintptr_t)ret, why, sizeof(why) - 1);
      why[sizeof(why) - 1] = '\0';
      char exe[256] = "?", link[64];
      ssize_t n;
      snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
      if ((n = readlink(link, exe, sizeof(exe) - 1)) > 0)
        exe[n] = '\0';
      err =
          remote_fail(msg, len, ENOTSUP,
                      "check 'LuaJIT API' failed: process %d (%s) cannot load "
                      "memprof.so (%s): memprof attaches to a process whose "
                      "LuaJIT exports its Lua API to the modules it loads; it "
                      "runs on untouched",
                      (int)pid, exe, why[0] ? why : "dlopen failed");
      goto out;
    }
    remote_maps_free(&maps);
    if ((err = remote_maps_read_target(pid, &maps, msg, len)) != 0)
      goto out;
    if (!target_object(pid, &maps, self)) {
      err = remote_fail(
          msg, len, ENOTSUP,
          "process %d holds another file loaded as %s (a memprof.so "
          "replaced since?), not this one",
          (int)pid, so);
      goto out;
    }
  }
  if (!write_mem(t.tid, at_call, c, sizeof(*c))) {
    err = remote_fail(msg, len, EIO, "cannot write thread %d's stack",
                      (int)t.tid);
    goto out;
  }
  /* Stopping a profile waits for its writer thread. */
  release_others(&s, t.tid, 1);
  if ((err = call(&t, &s, in_target(self, (const void *)memprof_attach_call),
                  at_call, 0, 0, &ret, msg, len)) != 0) {
    calls_ok = 0;
    goto out;
  }
  if (!remote_read(t.tid, at_call, c, sizeof(*c)) || c->magic != ATTACH_MAGIC) {
    err = remote_fail(msg, len, EIO, "cannot read the answer of process %d",
                      (int)pid);
    goto out;
  }
  c->msg[sizeof(c->msg) - 1] = '\0';
  c->file[sizeof(c->file) - 1] = '\0';
  answered = 1;
  err = (int)(int32_t)ret;
  if (err != 0)
    remote_fail(msg, len, err, "%s", c->msg[0] ? c->msg : strerror(err));
out:
  if (!restored && calls_ok)
    res->shed = shed_pages(&t, &s, lf.madvise, &before, self,
                           answered && c->attached == 0);
  free(before.page);
  if (!restored && !restore_thread(&t) && err == 0)
    err = remote_fail(msg, len, EIO, "cannot put back thread %d's state",
                      (int)t.tid);
  else if (restored) {
    free(t.xstate);
    free(t.mem);
  }
  remote_maps_free(&maps);
  remote_resume_all(&s);
  for (i = 0; i < t.npending; i++)
    syscall(SYS_tgkill, pid, t.tid, t.pending[i]);
  res->pause_ns = (uint64_t)(now_ns() - t0);
  return err;
}

#endif

/* Runs request c in process pid, stopping it again while it is not at a
** safe moment (at most TRIES_MAX times). */
static int run(pid_t pid, struct attach_call *c, struct result *res, char *msg,
               size_t len)
{
  char so[PATH_MAX], why[ATTACH_MSG_MAX] = "";
  struct remote_maps maps = {NULL, 0};
  struct object self;
  Dl_info info;
  int err = EAGAIN;
  memset(res, 0, sizeof(*res));
  if (pid <= 0 || pid == (int)getpid())
    return remote_fail(msg, len, EINVAL,
                       pid <= 0 ? "no process %d" : "process %d is this one",
                       pid);
  if (!dladdr((void *)memprof_attach_call, &info) || info.dli_fname == NULL ||
      realpath(info.dli_fname, so) == NULL ||
      !own_object((void *)memprof_attach_call, &self))
    return remote_fail(msg, len, ENOTSUP, "cannot find memprof.so's own path");
  if ((err = remote_maps_read_target(pid, &maps, msg, len)) != 0)
    return err;
  /* Refused from its files, before any stop: no call is made into a
  ** process that has no LuaJIT to profile. */
  if (c->op == ATTACH_START && elf_syms_not_luajit(pid, &maps, msg, len)) {
    remote_maps_free(&maps);
    return ENOTSUP;
  }
  if (c->op != ATTACH_START && !target_object(pid, &maps, &self)) {
    remote_maps_free(&maps);
    return remote_fail(
        msg, len, ENOENT,
        "memprof was never attached to process %d (memprof.so is not "
        "loaded there)",
        (int)pid);
  }
  remote_maps_free(&maps);
#if defined(__x86_64__)
  err = EAGAIN;
  while (err == EAGAIN && res->tries < TRIES_MAX) {
    struct timespec nap = {0, RETRY_NS * (res->tries % 5 + 1)};
    if (res->tries++ > 0)
      nanosleep(&nap, NULL);
    err = one_stop(pid, so, &self, c, res, msg, len);
    if (err == EAGAIN)
      snprintf(why, sizeof(why), "%s", msg);
  }
  if (err == EAGAIN)
    return remote_fail(
        msg, len, EAGAIN,
        "process %d was never at a safe moment in %d stops (the last "
        "time: %s); it runs on untouched",
        (int)pid, res->tries, why);
  return err;
#else
  (void)so;
  (void)why;
  return remote_fail(
      msg, len, ENOTSUP,
      "memprof attach runs on x86_64 only for now (a call made by a "
      "thread of the target is not written for this architecture)");
#endif
}

/* ---- Lua --------------------------------------------------------------- */

static void set_number(lua_State *L, const char *name, double v)
{
  lua_pushnumber(L, v);
  lua_setfield(L, -2, name);
}

static int push_error(lua_State *L, const char *msg, int err)
{
  lua_pushnil(L);
  lua_pushstring(L, msg);
  lua_pushinteger(L, err);
  return 3;
}

static int push_info(lua_State *L, const struct attach_call *c,
                     const struct result *res)
{
  lua_createtable(L, 0, 8);
  lua_pushstring(L, c->file);
  lua_setfield(L, -2, "file");
  lua_pushfstring(L, "%p", (void *)(uintptr_t)c->main_thread);
  lua_setfield(L, -2, "main_thread");
  set_number(L, "vms", c->vms);
  set_number(L, "attached", c->attached);
  set_number(L, "tries", res->tries);
  set_number(L, "pause_ms", (double)res->pause_ns / 1e6);
  lua_pushboolean(L, res->loaded);
  lua_setfield(L, -2, "loaded");
  return 1;
}

static lua_Number opt_number(lua_State *L, int t, const char *name,
                             lua_Number dflt)
{
  lua_Number v;
  lua_getfield(L, t, name);
  v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : dflt;
  lua_pop(L, 1);
  return v;
}

static int read_trace_lines(lua_State *L, int t)
{
  const char *s;
  int mode = TRACE_LINES_DEFAULT;
  lua_getfield(L, t, "trace_lines");
  s = lua_tostring(L, -1);
  if (lua_isboolean(L, -1) && !lua_toboolean(L, -1))
    mode = TRACE_LINES_START;
  else if (s != NULL)
    mode = strcmp(s, "exact") == 0    ? TRACE_LINES_EXACT
           : strcmp(s, "walk") == 0   ? TRACE_LINES_WALK
           : strcmp(s, "resume") == 0 ? TRACE_LINES_RESUME
           : strcmp(s, "start") == 0  ? TRACE_LINES_START
                                      : -1;
  lua_pop(L, 1);
  return mode;
}

static struct attach_call *new_call(int op)
{
  struct attach_call *c = calloc(1, sizeof(*c));
  if (c != NULL) {
    c->magic = ATTACH_MAGIC;
    c->size = sizeof(*c);
    c->op = op;
    c->vm = 1;
  }
  return c;
}

int attach_l_start(lua_State *L)
{
  int pid = (int)luaL_checkinteger(L, 1), err;
  size_t plen;
  const char *path = luaL_checklstring(L, 2, &plen);
  struct attach_call *c;
  struct result res;
  char msg[ATTACH_MSG_MAX + 200];
  if (path[0] != '/' || plen >= ATTACH_PATH_MAX || strlen(path) != plen)
    return luaL_argerror(L, 2, "an absolute path shorter than 1024 bytes");
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
  } else {
    lua_settop(L, 2);
    lua_newtable(L); /* At index 3. */
  }
  if ((c = new_call(ATTACH_START)) == NULL)
    return push_error(L, "out of memory", ENOMEM);
  memcpy(c->path, path, plen + 1);
  c->vm = (int)opt_number(L, 3, "vm", 1);
  c->opts.stack_depth = (int)opt_number(L, 3, "stack_depth", 0);
  c->opts.timestamps = opt_number(L, 3, "timestamps", 0) != 0;
  c->opts.max_bytes = (uint64_t)opt_number(L, 3, "max_bytes", 0);
  c->opts.sample_bytes = (uint64_t)opt_number(L, 3, "sample_bytes", 0);
  c->opts.seed = (uint64_t)opt_number(L, 3, "seed", 0);
  c->opts.has_seed = opt_number(L, 3, "seed", -1) >= 0;
  c->opts.trace_lines = read_trace_lines(L, 3);
  if (c->opts.stack_depth < 0 || c->opts.stack_depth > 64 ||
      c->opts.trace_lines < 0) {
    free(c);
    return push_error(L,
                      "bad options (stack_depth 0 to 64; trace_lines "
                      "exact, walk, resume or start)",
                      EINVAL);
  }
  err = run((pid_t)pid, c, &res, msg, sizeof(msg));
  if (err != 0) {
    free(c);
    return push_error(L, msg, err);
  }
  push_info(L, c, &res);
  set_number(L, "started_ns", (double)c->started_ns);
  free(c);
  return 1;
}

static int simple(lua_State *L, int op)
{
  int pid = (int)luaL_checkinteger(L, 1), err;
  struct attach_call *c = new_call(op);
  struct result res;
  char msg[ATTACH_MSG_MAX + 200];
  if (c == NULL)
    return push_error(L, "out of memory", ENOMEM);
  if (op == ATTACH_STOP) {
    /* Which VM's profile: {vm = N} or {main_thread = '0x...'}; else the
    ** first attached. */
    c->vm = 0;
    if (lua_istable(L, 2)) {
      c->vm = (int)opt_number(L, 2, "vm", 0);
      lua_getfield(L, 2, "main_thread");
      if (lua_isstring(L, -1))
        c->which = (uint64_t)strtoull(lua_tostring(L, -1), NULL, 0);
      lua_pop(L, 1);
    }
  }
  err = run((pid_t)pid, c, &res, msg, sizeof(msg));
  if (err != 0) {
    free(c);
    return push_error(L, msg, err);
  }
  push_info(L, c, &res);
  if (c->msg[0] != '\0') {
    lua_pushstring(L, c->msg);
    lua_setfield(L, -2, "note");
  }
  free(c);
  return 1;
}

int attach_l_stop(lua_State *L)
{
  return simple(L, ATTACH_STOP);
}

int attach_l_status(lua_State *L)
{
  return simple(L, ATTACH_STATUS);
}
