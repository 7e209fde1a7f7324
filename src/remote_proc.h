/*
** Another process as /proc shows it (remote_proc.c): its mappings, reads
** of its memory, the build-id of a file it maps, and why ptrace or a read
** of it is refused. Nothing here writes to the process.
*/
#ifndef MEMPROF_REMOTE_PROC_H
#define MEMPROF_REMOTE_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct remote_map {
  uintptr_t lo, hi;
  uint64_t offset, inode;
  unsigned dev_major, dev_minor;
  char perms[5]; /* "rw-p" */
  char path[256];
};

struct remote_maps {
  struct remote_map *m;
  size_t n;
};

/* Reads /proc/PID/maps (pid 0: this process). Returns 0, or an errno
** (ENOENT: no such process; EACCES: not permitted). */
int remote_maps_read(pid_t pid, struct remote_maps *out);
void remote_maps_free(struct remote_maps *maps);

/* The mapping that holds addr, or NULL. Mappings are sorted. */
const struct remote_map *remote_maps_find(const struct remote_maps *maps,
                                          uintptr_t addr);

/* Reads n bytes at addr of process pid. Returns 1 on success. */
int remote_read(pid_t pid, uintptr_t addr, void *dst, size_t n);

/* The GNU build-id of the ELF file whose first page is mapped at `at` in
** pid (read from its program headers there) into id. Returns its length,
** 0 if it has none. */
size_t remote_build_id(pid_t pid, uintptr_t at, uint8_t *id, size_t cap);

/* The pagemap entries of process pid's pages [lo, hi), one per page, into
** out (bit 63: present, bit 61: a page of the file, not a private copy).
** Returns 1 on success. */
int remote_pagemap(pid_t pid, uintptr_t lo, uintptr_t hi, uint64_t *out);

/* Why process pid cannot be traced or read by this one (err, from ptrace
** or a read): which rule refuses and what to do, into msg. */
void remote_explain_refusal(pid_t pid, int err, char *msg, size_t len);

/* remote_maps_read of another process, its failures said in msg: ESRCH
** (no such process), EPERM (explained), or the errno. Returns 0 or that. */
int remote_maps_read_target(pid_t pid, struct remote_maps *maps, char *msg,
                            size_t len);

/* Formats a refusal into msg (len bytes) and returns err: the one form of
** the messages of attach and heap PID. */
int remote_fail(char *msg, size_t len, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes n bytes to fd (a pipe between memprof's processes), through
** EINTR. Returns 1, or 0 when it could not. */
int remote_write_all(int fd, const void *p, size_t n);

/* Milliseconds of CLOCK_MONOTONIC: the clock of remote_read_all's
** deadlines. */
long long remote_now_ms(void);

#define REMOTE_NO_DEADLINE (-1LL)

/* Reads n bytes from fd (a pipe between memprof's processes) into p,
** through EINTR, until the pipe's end or, unless it is
** REMOTE_NO_DEADLINE, the deadline (remote_now_ms()). Returns the bytes
** read. */
size_t remote_read_all(int fd, void *p, size_t n, long long deadline);

#endif
