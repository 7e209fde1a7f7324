/*
** Another process as /proc shows it (see remote_proc.h).
*/
#define _GNU_SOURCE
#include "remote_proc.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* More mappings than any real process has: the list stays bounded. */
#define MAPS_MAX 1000000

static int parse_line(const char *line, struct remote_map *m)
{
  unsigned long long lo, hi, off, ino;
  int at = 0;
  memset(m, 0, sizeof(*m));
  if (sscanf(line, "%llx-%llx %4s %llx %x:%x %llu %n", &lo, &hi, m->perms, &off,
             &m->dev_major, &m->dev_minor, &ino, &at) < 7)
    return 0;
  m->lo = (uintptr_t)lo, m->hi = (uintptr_t)hi;
  m->offset = off, m->inode = ino;
  if (at > 0)
    snprintf(m->path, sizeof(m->path), "%.*s", (int)strcspn(line + at, "\n"),
             line + at);
  return 1;
}

int remote_maps_read(pid_t pid, struct remote_maps *out)
{
  char name[64], line[4096 + 512];
  size_t cap = 256;
  FILE *f;
  out->n = 0;
  if (pid == 0)
    snprintf(name, sizeof(name), "/proc/self/maps");
  else
    snprintf(name, sizeof(name), "/proc/%d/maps", (int)pid);
  if ((f = fopen(name, "re")) == NULL)
    return errno;
  if ((out->m = malloc(cap * sizeof(*out->m))) == NULL) {
    fclose(f);
    return ENOMEM;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    if (out->n == cap) {
      struct remote_map *m;
      if (cap >= MAPS_MAX ||
          (m = realloc(out->m, 2 * cap * sizeof(*m))) == NULL) {
        fclose(f);
        remote_maps_free(out);
        return ENOMEM;
      }
      out->m = m, cap *= 2;
    }
    if (parse_line(line, &out->m[out->n]))
      out->n++;
  }
  /* A process that is gone reads as empty, not as an error. */
  fclose(f);
  return out->n == 0 ? ENOENT : 0;
}

void remote_maps_free(struct remote_maps *maps)
{
  free(maps->m);
  maps->m = NULL;
  maps->n = 0;
}

const struct remote_map *remote_maps_find(const struct remote_maps *maps,
                                          uintptr_t addr)
{
  size_t lo = 0, hi = maps->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (maps->m[mid].hi <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < maps->n && maps->m[lo].lo <= addr ? &maps->m[lo] : NULL;
}

int remote_read(pid_t pid, uintptr_t addr, void *dst, size_t n)
{
  struct iovec local = {dst, n}, remote = {(void *)addr, n};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)n;
}

#define NOTE_GNU_BUILD_ID 3
#define NOTE_MAX 4096

/* The build-id among the notes in [at, at + n) of pid. */
static size_t note_build_id(pid_t pid, uintptr_t at, size_t n, uint8_t *id,
                            size_t cap)
{
  uint8_t buf[NOTE_MAX];
  size_t o = 0;
  if (n > sizeof(buf))
    n = sizeof(buf);
  if (!remote_read(pid, at, buf, n))
    return 0;
  while (o + sizeof(Elf64_Nhdr) <= n) {
    Elf64_Nhdr h;
    size_t name, desc;
    memcpy(&h, buf + o, sizeof(h));
    name = (h.n_namesz + 3) & ~(size_t)3;
    desc = (h.n_descsz + 3) & ~(size_t)3;
    if (o + sizeof(h) + name + desc > n)
      return 0;
    if (h.n_type == NOTE_GNU_BUILD_ID && h.n_namesz == 4 &&
        memcmp(buf + o + sizeof(h), "GNU", 4) == 0 && h.n_descsz <= cap) {
      memcpy(id, buf + o + sizeof(h) + name, h.n_descsz);
      return h.n_descsz;
    }
    o += sizeof(h) + name + desc;
  }
  return 0;
}

#define PHDRS_MAX 64

size_t remote_build_id(pid_t pid, uintptr_t at, uint8_t *id, size_t cap)
{
  Elf64_Ehdr e;
  Elf64_Phdr ph[PHDRS_MAX];
  uintptr_t bias = 0;
  int i, n, have_bias = 0;
  if (!remote_read(pid, at, &e, sizeof(e)) ||
      memcmp(e.e_ident, ELFMAG, SELFMAG) != 0 ||
      e.e_ident[EI_CLASS] != ELFCLASS64 || e.e_phentsize != sizeof(Elf64_Phdr))
    return 0;
  n = e.e_phnum < PHDRS_MAX ? e.e_phnum : PHDRS_MAX;
  if (!remote_read(pid, at + e.e_phoff, ph, (size_t)n * sizeof(ph[0])))
    return 0;
  /* The first page maps the segment at file offset 0: the load bias. */
  for (i = 0; i < n && !have_bias; i++)
    if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0)
      bias = at - (uintptr_t)ph[i].p_vaddr, have_bias = 1;
  for (i = 0; i < n && have_bias; i++) {
    size_t got;
    if (ph[i].p_type == PT_NOTE &&
        (got = note_build_id(pid, bias + (uintptr_t)ph[i].p_vaddr,
                             (size_t)ph[i].p_filesz, id, cap)) > 0)
      return got;
  }
  return 0;
}

/* The uid that owns /proc/PID (the process's), or -1. */
static long owner_of(pid_t pid)
{
  char name[64];
  struct stat st;
  snprintf(name, sizeof(name), "/proc/%d", (int)pid);
  return stat(name, &st) == 0 ? (long)st.st_uid : -1;
}

/* kernel.yama.ptrace_scope, or -1 without Yama. */
static int yama_scope(void)
{
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
  int v = -1;
  if (f != NULL) {
    if (fscanf(f, "%d", &v) != 1)
      v = -1;
    fclose(f);
  }
  return v;
}

/* Whether this process has CAP_SYS_PTRACE (bit 19 of CapEff). */
static int has_cap_ptrace(void)
{
  FILE *f = fopen("/proc/self/status", "re");
  char line[256];
  unsigned long long eff = 0;
  int found = 0;
  if (f == NULL)
    return 0;
  while (!found && fgets(line, sizeof(line), f) != NULL)
    found = sscanf(line, "CapEff: %llx", &eff) == 1;
  fclose(f);
  return (eff >> 19) & 1;
}

/* The process tracing pid (TracerPid in /proc/PID/status), or 0. */
static long tracer_of(pid_t pid)
{
  char name[64], line[256];
  long tracer = 0;
  int found = 0;
  FILE *f;
  snprintf(name, sizeof(name), "/proc/%d/status", (int)pid);
  if ((f = fopen(name, "re")) == NULL)
    return 0;
  while (!found && fgets(line, sizeof(line), f) != NULL)
    found = sscanf(line, "TracerPid: %ld", &tracer) == 1;
  fclose(f);
  return tracer;
}

void remote_explain_refusal(pid_t pid, int err, char *msg, size_t len)
{
  long uid = owner_of(pid), tracer = tracer_of(pid);
  int scope = yama_scope(), cap = has_cap_ptrace();
  if (err == ESRCH || uid < 0)
    snprintf(msg, len, "process %d is gone", (int)pid);
  else if (tracer != 0)
    snprintf(msg, len,
             "process %d is already traced by process %ld (a debugger, "
             "strace?): a process has one tracer at a time",
             (int)pid, tracer);
  else if (uid != (long)geteuid() && !cap)
    snprintf(msg, len,
             "process %d runs as user %ld and memprof as user %ld, without "
             "CAP_SYS_PTRACE: run memprof as user %ld, or as root",
             (int)pid, uid, (long)geteuid(), uid);
  else if (scope >= 3)
    snprintf(msg, len,
             "kernel.yama.ptrace_scope is %d: no process may trace another "
             "until the next boot",
             scope);
  else if (scope == 2 && !cap)
    snprintf(msg, len,
             "kernel.yama.ptrace_scope is 2: only a process with "
             "CAP_SYS_PTRACE may trace another; run memprof as root");
  else if (scope == 1 && !cap)
    snprintf(msg, len,
             "kernel.yama.ptrace_scope is 1: only a process's ancestors may "
             "trace it; run memprof as root, or set the sysctl "
             "kernel.yama.ptrace_scope=0");
  else if (!cap)
    snprintf(msg, len,
             "process %d may not be traced (%s): it may have changed its "
             "user or be marked not dumpable; run memprof as root",
             (int)pid, strerror(err));
  else
    snprintf(msg, len,
             "process %d may not be traced (%s) although memprof has "
             "CAP_SYS_PTRACE: a security module (or a container without "
             "CAP_SYS_PTRACE) refuses",
             (int)pid, strerror(err));
}

int remote_maps_read_target(pid_t pid, struct remote_maps *maps, char *msg,
                            size_t len)
{
  int err = remote_maps_read(pid, maps);
  if (err == ENOENT || err == ESRCH) {
    snprintf(msg, len, "no process %d", (int)pid);
    return ESRCH;
  }
  if (err == EACCES || err == EPERM) {
    remote_explain_refusal(pid, EPERM, msg, len);
    return EPERM;
  }
  if (err != 0)
    snprintf(msg, len, "cannot read process %d's mappings: %s", (int)pid,
             strerror(err));
  return err;
}

int remote_pagemap(pid_t pid, uintptr_t lo, uintptr_t hi, uint64_t *out)
{
  char name[64];
  size_t n = (hi - lo) / 4096, got = 0;
  int fd;
  snprintf(name, sizeof(name), "/proc/%d/pagemap", (int)pid);
  if ((fd = open(name, O_RDONLY | O_CLOEXEC)) < 0)
    return 0;
  while (got < n * sizeof(*out)) {
    ssize_t r = pread(fd, (char *)out + got, n * sizeof(*out) - got,
                      (off_t)(lo / 4096 * sizeof(*out) + got));
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  close(fd);
  return got == n * sizeof(*out);
}

int remote_fail(char *msg, size_t len, int err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
  return err;
}

int remote_write_all(int fd, const void *p, size_t n)
{
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return 0;
    c += w, n -= (size_t)w;
  }
  return 1;
}

long long remote_now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Whether fd has something to read (or its end) before the deadline. */
static int readable_by(int fd, long long deadline)
{
  struct pollfd pf = {fd, POLLIN, 0};
  long long left = deadline - remote_now_ms();
  return left > 0 && poll(&pf, 1, (int)left) > 0;
}

size_t remote_read_all(int fd, void *p, size_t n, long long deadline)
{
  char *c = p;
  size_t got = 0;
  while (got < n) {
    ssize_t r;
    if (deadline != REMOTE_NO_DEADLINE && !readable_by(fd, deadline))
      break;
    r = read(fd, c + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  return got;
}
