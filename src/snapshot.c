/*
** Snapshots of a running profile (see snapshot.h).
**
** The 'memprof' format: the writer is synced (everything the hook has
** committed is in the profile's file), the file's bytes so far are copied
** into the snapshot, and the epilogue byte ends it, so that the report reads
** it as a profile stopped now. The running profile's file and writer go on
** as before: only their buffer was handed to the disk earlier than usual.
**
** A snapshot into a regular file is written to a temporary file of its
** own next to PATH ("PATH.tmp-PID-TID-N": each thread and each call has
** its own, as VMs in several threads may write to one PATH at once) and
** renamed to PATH once complete, so a reader never sees half a snapshot;
** a device or FIFO is written in place (see open_target), non-blocking:
** a FIFO that nobody reads is refused at once, and one whose reader stops
** reading fails after the stall bound (writer_write_all). SIGPIPE
** never reaches the program: a reader gone is EPIPE.
*/
#define _GNU_SOURCE
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "heapwalk.h"
#include "pprof.h"
#include "profiler.h"
#include "stream_format.h"

/* The bytes copied at a time when copy_file_range cannot be used. */
#define COPY_CHUNK 65536

/* A refusal: its message (what, and the file it is about, if any), and
** its errno. */
static int fail(char *msg, size_t len, int err, const char *what,
                const char *path)
{
  snprintf(msg, len, "%s%s%s", what, path != NULL ? ": " : "",
           path != NULL ? path : "");
  return err;
}

static int file_error(char *msg, size_t len, const char *path, int err)
{
  snprintf(msg, len, "%s: %s", path, writer_strerror(err));
  return err;
}

int snapshot_open_error(char *msg, size_t len, const char *path, int err)
{
  struct stat st;
  if (err == ENXIO && stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) {
    snprintf(msg, len, "%s: no process reads this FIFO (%s)", path,
             strerror(err));
    return err;
  }
  return file_error(msg, len, path, err);
}

/* Copies the first `n` bytes of `from` to the end of `to`. Returns 0 or
** errno, with *reading 1 when reading `from` failed (0: writing `to`). */
static int copy_prefix(int from, int to, uint64_t n, int *reading)
{
  char buf[COPY_CHUNK];
  loff_t in = 0;
  int err;
  while (n > 0) {
    ssize_t got = copy_file_range(from, &in, to, NULL, (size_t)n, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break; /* Not supported here (or the file is shorter): read. */
    n -= (uint64_t)got;
  }
  while (n > 0) {
    size_t want = n < sizeof(buf) ? (size_t)n : sizeof(buf);
    ssize_t got = pread(from, buf, want, (off_t)in);
    if (got < 0 && errno == EINTR)
      continue;
    *reading = 1;
    if (got <= 0)
      return got < 0 ? errno : EIO;
    *reading = 0;
    if ((err = writer_write_all(to, buf, (size_t)got)) != 0)
      return err;
    in += got;
    n -= (uint64_t)got;
  }
  return 0;
}

/* A descriptor that reads the profile's file: its own is write-only. */
static int open_profile_for_reading(const struct profiler *p)
{
  char proc[64];
  int fd;
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", p->out.fd);
  fd = open(proc, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fd = open(p->path, O_RDONLY | O_CLOEXEC);
  return fd;
}

/* Why p cannot be copied now (0: it can). */
static int check_copyable(struct profiler *p, char *msg, size_t len)
{
  struct stat st;
  if (p->fork_generation != profiler_fork_generation)
    return fail(msg, len, EINVAL,
                "the profile was started before fork() and does not go on "
                "in this process",
                NULL);
  if (p->out.fd < 0 || (p->error != 0 && !p->capped))
    return file_error(msg, len, p->path, p->error != 0 ? p->error : EBADF);
  if (fstat(p->out.fd, &st) != 0)
    return file_error(msg, len, p->path, errno);
  if (!S_ISREG(st.st_mode))
    return fail(msg, len, ESPIPE,
                "a 'memprof' snapshot copies the profile's file, and this "
                "profile is not written to a regular file",
                p->path);
  return 0;
}

/* The stream so far into `fd`, the snapshot at `path`. Returns 0 or
** errno. */
static int write_memprof(struct profiler *p, int fd, const char *path,
                         char *msg, size_t len)
{
  uint64_t upto;
  int in, err, reading = 0;
  if ((err = check_copyable(p, msg, len)) != 0)
    return err;
  if ((err = writer_sync(&p->out)) != 0)
    return file_error(msg, len, p->path, err);
  /* A capped stream ends where the event that passed the cap began. */
  upto = p->capped ? p->cut_at : writer_total(&p->out);
  if ((in = open_profile_for_reading(p)) < 0)
    return file_error(msg, len, p->path, errno);
  err = copy_prefix(in, fd, upto, &reading);
  close(in);
  if (err != 0)
    return file_error(msg, len, reading ? p->path : path, err);
  return 0;
}

/* Why p's model cannot make a pprof snapshot now (0: it can). */
static int check_model(const struct profiler *p, char *msg, size_t len)
{
  if (p->fork_generation != profiler_fork_generation)
    return fail(msg, len, EINVAL,
                "the profile was started before fork() and does not go on "
                "in this process",
                NULL);
  if (!p->keeps_model)
    return fail(msg, len, EINVAL,
                "a pprof snapshot of a profile that records every event "
                "needs the start option snapshots = true (or sample_bytes); "
                "format = 'heap' writes the live objects without it",
                NULL);
  if (p->live_full) {
    snprintf(msg, len,
             "the profile's table of live blocks passed its bound of %u "
             "blocks: a pprof snapshot would miss blocks (a 'memprof' "
             "snapshot has them all)",
             (unsigned)(LIVE_MAX_SLOTS / 2));
    return ENOMEM;
  }
  if (p->model.failed != 0)
    return fail(msg, len, p->model.failed,
                "memory ran out for the places of pprof snapshots: a "
                "snapshot would miss allocations",
                NULL);
  if (p->state != PROFILER_RECORDING)
    return file_error(msg, len, p->path, p->error != 0 ? p->error : EINVAL);
  return 0;
}

/* Whether path names the profile's own file, which a snapshot must not
** replace. */
static int is_profile_file(const struct profiler *p, const char *path)
{
  struct stat a, b;
  return p->out.fd >= 0 && stat(path, &a) == 0 && fstat(p->out.fd, &b) == 0 &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Calls of temp_name in this process. */
static unsigned temp_calls;

/* "PATH.tmp-PID-TID-N" (malloc'd), N this process's count of calls, or
** NULL: no other call of any thread or process has it. */
static char *temp_name(const char *path)
{
  size_t n = strlen(path) + 64;
  char *tmp = malloc(n);
  unsigned call = __atomic_fetch_add(&temp_calls, 1, __ATOMIC_RELAXED);
  if (tmp != NULL)
    snprintf(tmp, n, "%s.tmp-%ld-%ld-%u", path, (long)getpid(),
             (long)syscall(SYS_gettid), call);
  return tmp;
}

/* Creates the temporary file of a snapshot to path (*tmp, its malloc'd
** name). O_EXCL: a file left by a process that died with this pid and
** thread id is never shared, the next name is taken. Returns the
** descriptor, or -1 with errno. */
static int create_temp(const char *path, char **tmp)
{
  int tries, fd = -1;
  for (tries = 0; tries < 16 && fd < 0; tries++) {
    if ((*tmp = temp_name(path)) == NULL) {
      errno = ENOMEM;
      return -1;
    }
    fd = open(*tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
      int saved = errno;
      free(*tmp);
      *tmp = NULL;
      errno = saved;
      if (saved != EEXIST)
        break;
    }
  }
  return fd;
}

/* A regular file (or a new one) is a temporary file (create_temp) until
** renamed; a device or FIFO that exists is opened in place and stays
** non-blocking (our own open file: the program's are not changed), so a
** FIFO that nobody reads is refused at once (ENXIO) and a write waits at
** most the stall bound for a reader that stopped reading. */
int snapshot_open_target(const char *path, char **tmp)
{
  struct stat st;
  *tmp = NULL;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  return create_temp(path, tmp);
}

int snapshot_finish_target(int fd, char *tmp, const char *path, int err,
                           char *msg, size_t len)
{
  if (close(fd) != 0 && err == 0)
    err = file_error(msg, len, path, errno);
  if (tmp != NULL) {
    if (err == 0 && rename(tmp, path) != 0)
      err = file_error(msg, len, path, errno);
    if (err != 0)
      unlink(tmp);
    free(tmp);
  }
  return err;
}

int snapshot_write(struct profiler *p, const char *path,
                   enum snapshot_format format, char *msg, size_t len)
{
  static const uint8_t epilogue[] = {EVENTS_EPILOGUE};
  char *tmp;
  int fd, err;
  if (is_profile_file(p, path))
    return fail(msg, len, EINVAL,
                "a snapshot cannot replace the running profile's own file",
                path);
  if ((fd = snapshot_open_target(path, &tmp)) < 0)
    return snapshot_open_error(msg, len, path, errno);
  if (format == SNAPSHOT_MEMPROF) {
    err = write_memprof(p, fd, path, msg, len);
    if (err == 0 &&
        (err = writer_write_all(fd, epilogue, sizeof(epilogue))) != 0)
      file_error(msg, len, path, err);
  } else if ((err = check_model(p, msg, len)) == 0 &&
             (err = pprof_write(p, fd, path)) != 0) {
    file_error(msg, len, path, err);
  }
  return snapshot_finish_target(fd, tmp, path, err, msg, len);
}

/* Whether this process has the file at path open for writing: the running
** profile's own file, which a snapshot must not replace, is one (the
** profile's writer is not reachable from here, its descriptor is). A
** character device (/dev/null, a terminal) is no profile's own file: a
** program may well have it open, as its output. */
static int open_for_writing_here(const char *path)
{
  struct stat target, st;
  struct dirent *e;
  DIR *dir;
  int found = 0;
  if (stat(path, &target) != 0 || S_ISCHR(target.st_mode) ||
      (dir = opendir("/proc/self/fd")) == NULL)
    return 0;
  while (!found && (e = readdir(dir)) != NULL) {
    int fd = atoi(e->d_name), mode;
    if (e->d_name[0] == '.' || fd == dirfd(dir) || fstat(fd, &st) != 0)
      continue;
    mode = fcntl(fd, F_GETFL);
    found = st.st_dev == target.st_dev && st.st_ino == target.st_ino &&
            mode >= 0 && (mode & O_ACCMODE) != O_RDONLY;
  }
  closedir(dir);
  return found;
}

int snapshot_write_heap(lua_State *L, const char *path,
                        const struct heap_profile_note *note, char *msg,
                        size_t len)
{
  struct heap_layout h;
  char why[400];
  char *tmp;
  int fd, err = 0;
  if (note->running && open_for_writing_here(path))
    return fail(msg, len, EINVAL,
                "a snapshot cannot replace the running profile's own file",
                path);
  if ((fd = snapshot_open_target(path, &tmp)) < 0)
    return snapshot_open_error(msg, len, path, errno);
  if (!heap_layout_learn(L, &h, why, sizeof(why)))
    err = fail(msg, len, ENOTSUP, why, NULL);
  else if ((err = heapwalk_write(L, &h, fd, note, why, sizeof(why))) != 0 &&
           why[0] == '\0')
    file_error(msg, len, path, err); /* Writing failed. */
  else if (err != 0)
    snprintf(msg, len, "%s: heap snapshot: %s", path, why);
  return snapshot_finish_target(fd, tmp, path, err, msg, len);
}
