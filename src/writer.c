/*
** Buffered writer of the profile stream.
*/
#define _GNU_SOURCE
#include "writer.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "stream_format.h"

#if WRITER_HAS_PDEP
#include <cpuid.h>
#endif

/* Room kept free at the end of the buffer so that one event (header,
** location and four numbers) always fits after a single reserve check. */
#define WRITER_SLACK (ULEB128_MAX * 8)

struct writer_uleb writer_uleb;

int writer_fast_pdep;

/* BMI2 is CPUID leaf 7, EBX bit 8. AMD implements PDEP in microcode
** before family 19h (Zen 3): hundreds of cycles, slower than the shifts. */
static int detect_fast_pdep(void)
{
#if WRITER_HAS_PDEP
  unsigned eax, ebx, ecx, edx, family;
  char vendor[13];
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx) || eax < 7)
    return 0;
  memcpy(vendor, &ebx, 4);
  memcpy(vendor + 4, &edx, 4);
  memcpy(vendor + 8, &ecx, 4);
  vendor[12] = '\0';
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
    return 0;
  family =
      ((eax >> 8) & 0xf) + ((eax >> 8 & 0xf) == 0xf ? (eax >> 20) & 0xff : 0);
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(ebx & (1u << 8)))
    return 0;
  if ((strcmp(vendor, "AuthenticAMD") == 0 ||
       strcmp(vendor, "HygonGenuine") == 0) &&
      family < 0x19)
    return 0;
  return 1;
#else
  return 0;
#endif
}

void writer_tables_init(void)
{
  writer_fast_pdep = detect_fast_pdep();
  unsigned msb;
  for (msb = 0; msb < 64; msb++) {
    unsigned bits = msb + 1, n = (bits + 6) / 7;
    writer_uleb.length[msb] = (uint8_t)n;
    writer_uleb.more[msb] =
        n >= 2 && n <= 8 ? ((1ULL << (8 * (n - 1))) - 1) & 0x8080808080808080ULL
                         : 0;
  }
}

/* How often the thread writes what the hook has committed. */
#define SYNC_EVERY_NS 1000000000L

/*
** The background writer: the hook hands it one full buffer at a time, and
** once a second it writes the committed part of the buffer being filled
** (the hook only ever appends past its committed position). While it does,
** `partial` is set and the hook waits before handing that buffer over;
** `done` says how much of it is written already, so that the hand-over
** writes only the rest.
*/
struct writer_thread {
  pthread_t id;
  pthread_mutex_t lock;
  pthread_cond_t changed; /* pending taken or returned, partial done, or
                             quit set. */
  uint8_t *pending;       /* A full buffer to write, or NULL. */
  size_t pending_len;
  size_t pending_done; /* Of it, written already. */
  size_t done;         /* Of the buffer being filled, written already. */
  int partial;         /* Writing part of the buffer being filled. */
  uint8_t *spare;      /* The buffer not being filled, when not pending. */
  int quit;
  int running;            /* thread_main has begun. */
  long tick_ns;           /* 0, or how often to set writer.tick. */
  struct timespec tick;   /* When to set it next. */
  struct timespec synced; /* When to write the committed part next. */
};

/* Monotonic time plus ns, for a timed wait. */
static struct timespec deadline_after(long ns)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += ns;
  while (t.tv_nsec >= 1000000000L) {
    t.tv_nsec -= 1000000000L;
    t.tv_sec++;
  }
  return t;
}

static int reached(const struct timespec *now, const struct timespec *t)
{
  return now->tv_sec > t->tv_sec ||
         (now->tv_sec == t->tv_sec && now->tv_nsec >= t->tv_nsec);
}

/* Sets the limit (the hook's thread). A write that fails meanwhile on the
** thread keeps it NULL: each side stores, fences, then reads or stores the
** other's word, so that the last store of the limit is NULL whenever a
** failure was latched (see set_failed). */
static void store_limit(struct writer *w, uint8_t *limit)
{
  __atomic_store_n(&w->limit, limit, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (writer_failed(w) != 0)
    __atomic_store_n(&w->limit, NULL, __ATOMIC_RELAXED);
}

/* Latches the first error and lowers the limit: the hook's fast path then
** leaves every event to its full path, which sees the error. */
static void set_failed(struct writer *w, int err)
{
  if (err != 0 && writer_failed(w) == 0) {
    __atomic_store_n(&w->failed_errno, err, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&w->limit, NULL, __ATOMIC_RELAXED);
  }
}

/* SIGPIPE held off the calling thread around a write, so that a pipe or
** FIFO whose reader left fails the write with EPIPE instead of killing the
** program. A SIGPIPE that the write raised is consumed before the mask is
** restored, unless one was pending already (then it is the program's).
** One sent by another process in that window is consumed too: the usual
** price of this pattern. A thread that blocks SIGPIPE itself (the writer
** thread blocks every signal) is left alone. */
struct pipe_guard {
  sigset_t old;
  int restore;     /* SIGPIPE was unblocked, and is blocked here. */
  int was_pending; /* A SIGPIPE was pending before the write. */
};

static void pipe_signal(sigset_t *set)
{
  sigemptyset(set);
  sigaddset(set, SIGPIPE);
}

static void guard_pipe(struct pipe_guard *g)
{
  sigset_t pipe, pending;
  pipe_signal(&pipe);
  g->restore = pthread_sigmask(SIG_BLOCK, &pipe, &g->old) == 0 &&
               !sigismember(&g->old, SIGPIPE);
  g->was_pending =
      g->restore && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
}

static void unguard_pipe(const struct pipe_guard *g)
{
  static const struct timespec now = {0, 0};
  sigset_t pipe, pending;
  if (!g->restore)
    return;
  pipe_signal(&pipe);
  if (!g->was_pending && sigpending(&pending) == 0 &&
      sigismember(&pending, SIGPIPE)) {
    while (sigtimedwait(&pipe, NULL, &now) < 0 && errno == EINTR)
      ;
  }
  pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* The bound of a stalled write (MEMPROF_STALL_SECONDS, 1 to 3600, else
** WRITER_STALL_SECONDS) and its message, set once per process. */
static int stall_seconds = WRITER_STALL_SECONDS;
static char stall_text[96];
static pthread_once_t stall_once = PTHREAD_ONCE_INIT;

static void stall_init(void)
{
  const char *v = getenv("MEMPROF_STALL_SECONDS");
  char *end;
  long n;
  if (v != NULL && *v != '\0') {
    n = strtol(v, &end, 10);
    if (*end == '\0' && n >= 1 && n <= 3600)
      stall_seconds = (int)n;
  }
  snprintf(stall_text, sizeof(stall_text),
           "the reader took no byte for %d second%s (a write waits no longer)",
           stall_seconds, stall_seconds == 1 ? "" : "s");
}

/* Waits until fd (non-blocking, full) takes bytes again, at most the
** stall bound. Returns 0, or ETIMEDOUT, or errno. */
static int wait_writable(int fd)
{
  struct pollfd p;
  int n;
  pthread_once(&stall_once, stall_init);
  p.fd = fd;
  p.events = POLLOUT;
  do
    n = poll(&p, 1, stall_seconds * 1000);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno;
  return n == 0 ? ETIMEDOUT : 0; /* POLLERR, POLLHUP: write says why. */
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
  int err;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return errno;
      if ((err = wait_writable(fd)) != 0)
        return err;
      continue;
    }
    if (n == 0)
      return EIO;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int writer_write_all(int fd, const void *data, size_t len)
{
  struct pipe_guard g;
  int err;
  guard_pipe(&g);
  err = write_all(fd, data, len);
  unguard_pipe(&g);
  return err;
}

const char *writer_strerror(int err)
{
  if (err == ETIMEDOUT) {
    pthread_once(&stall_once, stall_init);
    return stall_text;
  }
  return strerror(err);
}

/* Writes what the hook has committed to the buffer it fills and the
** thread has not written yet. Called and returns with the lock held. */
static void write_committed(struct writer *w, struct writer_thread *t)
{
  uint8_t *buf = w->buf;
  uint8_t *pos = __atomic_load_n(&w->pos, __ATOMIC_ACQUIRE);
  size_t upto = (size_t)(pos - buf);
  int err;
  if (pos < buf || upto > w->size || upto <= t->done || writer_failed(w))
    return;
  t->partial = 1;
  pthread_mutex_unlock(&t->lock);
  err = writer_write_all(w->fd, buf + t->done, upto - t->done);
  pthread_mutex_lock(&t->lock);
  set_failed(w, err);
  t->done = upto;
  t->partial = 0;
  pthread_cond_broadcast(&t->changed);
}

/* Waits for a buffer or the stop, setting the tick and writing what is
** committed when their times come. */
static void wait_for_work(struct writer *w, struct writer_thread *t)
{
  while (t->pending == NULL && !t->quit) {
    struct timespec now, until = t->synced;
    if (t->tick_ns > 0 && reached(&t->synced, &t->tick))
      until = t->tick;
    pthread_cond_timedwait(&t->changed, &t->lock, &until);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (t->tick_ns > 0 && reached(&now, &t->tick)) {
      __atomic_store_n(&w->tick, 1, __ATOMIC_RELAXED);
      t->tick = deadline_after(t->tick_ns);
    }
    if (reached(&now, &t->synced) && t->pending == NULL && !t->quit) {
      write_committed(w, t);
      t->synced = deadline_after(SYNC_EVERY_NS);
    }
  }
}

static void *thread_main(void *arg)
{
  struct writer *w = arg;
  struct writer_thread *t = w->thread;
  /* Named, so that memprof detach lets it run while it stops the others:
  ** stopping a profile waits for it (attach_inject.c). */
  prctl(PR_SET_NAME, WRITER_THREAD_NAME, 0, 0, 0);
  pthread_mutex_lock(&t->lock);
  t->synced = deadline_after(SYNC_EVERY_NS);
  t->running = 1;
  pthread_cond_broadcast(&t->changed);
  for (;;) {
    uint8_t *data;
    size_t len, done;
    wait_for_work(w, t);
    if (t->pending == NULL)
      break;
    data = t->pending;
    len = t->pending_len;
    done = t->pending_done;
    pthread_mutex_unlock(&t->lock);
    if (writer_failed(w) == 0 && len > done)
      set_failed(w, writer_write_all(w->fd, data + done, len - done));
    pthread_mutex_lock(&t->lock);
    t->spare = data;
    t->pending = NULL;
    pthread_cond_broadcast(&t->changed);
  }
  pthread_mutex_unlock(&t->lock);
  return NULL;
}

/* Starts the thread with every signal blocked, so that the host's signal
** handlers keep running on the host's own threads. */
static int start_thread(struct writer *w, uint8_t *spare)
{
  struct writer_thread *t = calloc(1, sizeof(*t));
  sigset_t all, old;
  int err;
  if (t == NULL)
    return ENOMEM;
  pthread_condattr_t attr;
  t->spare = spare;
  pthread_mutex_init(&t->lock, NULL);
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* For timed waits. */
  pthread_cond_init(&t->changed, &attr);
  pthread_condattr_destroy(&attr);
  w->thread = t;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  err = pthread_create(&t->id, NULL, thread_main, w);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err == 0) {
    /* A thread being created holds locks of the C library's and of
    ** sanitizers' thread bookkeeping; a fork() then would leave them held
    ** in the child for ever (LeakSanitizer's exit check hangs on one). So
    ** start returns only once the thread runs our code. */
    pthread_mutex_lock(&t->lock);
    while (!t->running)
      pthread_cond_wait(&t->changed, &t->lock);
    pthread_mutex_unlock(&t->lock);
  } else {
    pthread_cond_destroy(&t->changed);
    pthread_mutex_destroy(&t->lock);
    free(t);
    w->thread = NULL;
  }
  return err;
}

/* The buffers are mapped, not malloc'd: freeing a malloc'd block this
** large would raise the C library's mmap threshold for the whole process
** (a program memprof attached to would keep its heap larger after). */
static uint8_t *buffer_new(size_t size)
{
  void *b = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return b == MAP_FAILED ? NULL : b;
}

static void buffer_free(uint8_t *b, size_t size)
{
  if (b != NULL)
    munmap(b, size);
}

int writer_init(struct writer *w, int fd, size_t size, int background)
{
  uint8_t *spare = NULL;
  memset(w, 0, sizeof(*w));
  w->fd = fd;
  if (size < 4 * WRITER_SLACK)
    size = 4 * WRITER_SLACK;
  w->size = size;
  w->buf = buffer_new(size);
  if (background)
    spare = buffer_new(size);
  if (w->buf == NULL || (background && spare == NULL)) {
    buffer_free(w->buf, size);
    buffer_free(spare, size);
    w->buf = NULL;
    return ENOMEM;
  }
  w->pos = w->buf;
  store_limit(w, w->buf + size - WRITER_SLACK);
  if (background && start_thread(w, spare) != 0)
    buffer_free(spare, size); /* Write in place instead. */
  return 0;
}

int writer_tick_every(struct writer *w, long period_ns)
{
  struct writer_thread *t = w->thread;
  if (t == NULL)
    return 0;
  pthread_mutex_lock(&t->lock);
  t->tick_ns = period_ns;
  t->tick = deadline_after(period_ns);
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
  return 1;
}

/* Where the fast path's reservations stop: the buffer's end, or below it
** where the budget ends. */
static void set_limit(struct writer *w)
{
  uint8_t *end = w->buf + w->size - WRITER_SLACK;
  uint64_t left = w->budget > w->handed ? w->budget - w->handed : 0;
  if (w->budget != 0 && left < (uint64_t)(end - w->buf))
    end = w->buf + left;
  store_limit(w, end);
}

/* Starts filling w->buf from its start, after `len` bytes were handed on. */
static void restart_buffer(struct writer *w, size_t len)
{
  w->handed += len;
  set_limit(w);
  writer_commit(w, w->buf);
}

void writer_set_budget(struct writer *w, uint64_t budget)
{
  w->budget = budget;
  set_limit(w);
}

/* Hands the filled buffer to the thread and takes the spare one, waiting
** for it if the thread is still writing it (or a part of this one). The
** new buffer is set up under the lock: the thread reads buf and pos. */
static void hand_over(struct writer *w, size_t len)
{
  struct writer_thread *t = w->thread;
  pthread_mutex_lock(&t->lock);
  while (t->pending != NULL || t->partial)
    pthread_cond_wait(&t->changed, &t->lock);
  t->pending = w->buf;
  t->pending_len = len;
  t->pending_done = t->done;
  t->done = 0;
  w->buf = t->spare;
  t->spare = NULL;
  restart_buffer(w, len);
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
}

int writer_flush(struct writer *w)
{
  size_t len = (size_t)(w->pos - w->buf);
  int saved = errno; /* The host must not see our errno. */
  if (w->buf == NULL)
    return writer_failed(w);
  if (writer_failed(w) == 0 && len > 0 && w->thread != NULL) {
    hand_over(w, len);
  } else {
    if (writer_failed(w) == 0 && len > 0)
      set_failed(w, writer_write_all(w->fd, w->buf, len));
    restart_buffer(w, len);
  }
  errno = saved;
  return writer_failed(w);
}

int writer_sync(struct writer *w)
{
  struct writer_thread *t = w->thread;
  writer_flush(w);
  if (t != NULL) {
    pthread_mutex_lock(&t->lock);
    while (t->pending != NULL || t->partial)
      pthread_cond_wait(&t->changed, &t->lock);
    pthread_mutex_unlock(&t->lock);
  }
  return writer_failed(w);
}

void writer_bytes(struct writer *w, const void *data, size_t len)
{
  const uint8_t *p = data;
  while (len > 0 && writer_failed(w) == 0) {
    /* Up to the buffer's end, not the budget's limit. */
    size_t room = (size_t)(w->buf + w->size - WRITER_SLACK - w->pos);
    size_t n = len < room ? len : room;
    memcpy(w->pos, p, n);
    writer_commit(w, w->pos + n);
    p += n;
    len -= n;
    if (len > 0)
      writer_flush(w);
  }
}

void writer_string(struct writer *w, const char *s, size_t len)
{
  if (!writer_reserve(w, ULEB128_MAX))
    return;
  writer_put_uleb128(w, len);
  writer_bytes(w, s, len);
}

/* Waits until the thread has written everything, then stops it. */
static void stop_thread(struct writer *w)
{
  struct writer_thread *t = w->thread;
  pthread_mutex_lock(&t->lock);
  t->quit = 1;
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
  pthread_join(t->id, NULL);
  buffer_free(t->spare, w->size);
  pthread_cond_destroy(&t->changed);
  pthread_mutex_destroy(&t->lock);
  free(t);
  w->thread = NULL;
}

/* Everything written, the thread stopped. */
static void drain(struct writer *w)
{
  writer_flush(w);
  if (w->thread != NULL)
    stop_thread(w);
}

/* Closes the descriptor and frees the buffers. */
static int release(struct writer *w, int saved)
{
  if (w->fd >= 0 && close(w->fd) != 0)
    set_failed(w, errno);
  w->fd = -1;
  buffer_free(w->buf, w->size);
  w->buf = w->pos = NULL;
  __atomic_store_n(&w->limit, NULL, __ATOMIC_RELAXED);
  errno = saved;
  return writer_failed(w);
}

int writer_close(struct writer *w)
{
  int saved = errno;
  drain(w);
  return release(w, saved);
}

void writer_prologue(struct writer *w, int extended)
{
  uint8_t head[] = {0, 0, 0, SYMTAB_VERSION, 0, 0, 0, SYMTAB_FINAL,
                    0, 0, 0, EVENTS_VERSION, 0, 0, 0};
  memcpy(head, SYMTAB_MAGIC, 3);
  memcpy(head + 8, EVENTS_MAGIC, 3);
  if (extended)
    head[11] = EVENTS_VERSION_EXTENDED;
  writer_bytes(w, head, sizeof(head));
}

void writer_epilogue(struct writer *w)
{
  if (writer_reserve(w, 1))
    writer_put_byte(w, EVENTS_EPILOGUE);
}

int writer_close_at(struct writer *w, uint64_t at)
{
  static const uint8_t tail[] = {EVENTS_EPILOGUE};
  const size_t n = sizeof(tail);
  int saved = errno;
  drain(w);
  if (writer_failed(w) == 0 && w->fd >= 0) {
    if (ftruncate(w->fd, (off_t)at) == 0) {
      ssize_t done = pwrite(w->fd, tail, n, (off_t)at);
      if (done != (ssize_t)n)
        set_failed(w, done < 0 ? errno : EIO);
    } else {
      set_failed(w, writer_write_all(w->fd, tail, n));
    }
  }
  return release(w, saved);
}

void writer_abandon(struct writer *w)
{
  /* In a child the thread is gone and its lock may be held: only memory
  ** is released (a buffer it was writing is leaked, not raced for). */
  if (w->thread != NULL) {
    buffer_free(w->thread->spare, w->size);
    free(w->thread);
    w->thread = NULL;
  }
  buffer_free(w->buf, w->size);
  w->buf = w->pos = NULL;
  __atomic_store_n(&w->limit, NULL, __ATOMIC_RELAXED);
  /* The file's other descriptor, the parent's, stays open. */
  if (w->fd >= 0)
    close(w->fd);
  w->fd = -1;
}
