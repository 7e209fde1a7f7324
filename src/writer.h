/*
** Buffered writer of the profile stream.
**
** The allocator hook appends bytes to one of two mapped buffers. When it
** fills up, it is handed to a background thread that writes it to the file
** while the hook fills the other one, so the program does not wait for the
** disk (it waits only if the disk falls a whole buffer behind). Without the
** thread (it could not be created) buffers are written in place. The first
** write error is latched: the writer then drops everything, and the error
** (with its errno) is reported when profiling stops. Nothing here allocates
** through Lua.
**
** At most a second is lost. Once a second the thread also writes what the
** hook has committed to the buffer being filled (writer_commit publishes
** it), so a process killed, or idle, leaves a file current to within about
** a second, without any work added to the hook's path.
*/
#ifndef MEMPROF_WRITER_H
#define MEMPROF_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hot_inline.h"

/* Longest encoding of one unsigned 64-bit LEB128 number. */
#define ULEB128_MAX 10

struct writer_thread; /* The background writer, if running (writer.c). */

struct writer {
  uint8_t *buf;     /* Start of the buffer being filled. */
  uint8_t *pos;     /* Next free byte. */
  uint8_t *limit;   /* Flush before an append would pass this point; NULL
                       once a write failed, so that the hook's room test
                       sends it to its full path, which sees the error.
                       Accessed only with atomic builtins (the thread
                       lowers it). */
  size_t size;      /* Size of each buffer. */
  uint64_t handed;  /* Bytes of the stream before this buffer. */
  uint64_t budget;  /* 0, or the stream's length that no event may pass:
                       limit is lowered to keep the fast path below it. */
  int fd;           /* Destination; -1 once closed. */
  int failed_errno; /* 0, or errno of the first failed write (atomic). */
  int tick;         /* Set by the thread every tick period. Accessed only
                       with atomic builtins (helgrind, which does not model
                       them, reports them as races). */
  struct writer_thread *thread;
};

/* The stream's length so far (written or buffered). */
static inline uint64_t writer_total(const struct writer *w)
{
  return w->handed + (uint64_t)(w->pos - w->buf);
}

/* The latched write error, or 0. */
static inline int writer_failed(const struct writer *w)
{
  return __atomic_load_n(&w->failed_errno, __ATOMIC_RELAXED);
}

/* Returns 0, or an errno value if the buffers cannot be allocated. Starts
** the background thread when `background` is set (falls back to writing
** in place if it cannot be created). */
int writer_init(struct writer *w, int fd, size_t size, int background);

/* Makes the background thread set w->tick every period_ns nanoseconds.
** Returns 0 if there is no thread (the caller then counts events). */
int writer_tick_every(struct writer *w, long period_ns);

/* Whether a tick came since the last writer_ticked(). */
static inline int writer_tick_pending(const struct writer *w)
{
  return __atomic_load_n(&w->tick, __ATOMIC_RELAXED) != 0;
}

/* Whether a tick came since the last call (and clears it). */
static inline int writer_ticked(struct writer *w)
{
  return __atomic_load_n(&w->tick, __ATOMIC_RELAXED) &&
         __atomic_exchange_n(&w->tick, 0, __ATOMIC_RELAXED);
}

/* Hands what is buffered to the file. Returns 0 or the latched errno. */
int writer_flush(struct writer *w);

/* Hands what is buffered to the file and waits until the background
** thread has written it: the file then holds writer_total bytes (unless a
** write failed). The thread goes on. Returns 0 or the latched errno. */
int writer_sync(struct writer *w);

/* Flushes, waits until everything is written, stops the thread, closes
** the descriptor, frees the buffers. Returns 0 or errno. */
int writer_close(struct writer *w);

/* Keeps the fast path's reservations below `budget` bytes of stream
** (writer_reserve and writer_bytes still go past it: the caller checks
** writer_total after each record and cuts the stream). */
void writer_set_budget(struct writer *w, uint64_t budget);

/* The stream's prologue: an empty symbol table section (the symbols follow
** as events), then the header of the event section, of Tarantool's format
** or, with `extended`, of the extended one (stream_format.h). */
void writer_prologue(struct writer *w, int extended);

/* The epilogue that ends the event section. */
void writer_epilogue(struct writer *w);

/* As writer_close, but the stream ends at byte `at`, followed by the
** epilogue: the file is cut there (or, where it cannot be, as on a pipe,
** the epilogue follows what was written). */
int writer_close_at(struct writer *w, uint64_t at);

/* Releases the buffers and closes the descriptor without writing anything.
** Used in a forked child, where the thread does not exist and the file
** belongs to the parent. */
void writer_abandon(struct writer *w);

void writer_bytes(struct writer *w, const void *data, size_t len);

/* Whether `need` bytes fit below the limit: false once a write failed
** (the limit is then NULL), so that this one test covers the error. */
static inline int writer_has_room(const struct writer *w, size_t need)
{
  return (uintptr_t)w->pos + need <=
         (uintptr_t)__atomic_load_n(&w->limit, __ATOMIC_RELAXED);
}

/* Make room for `need` bytes (at most ULEB128_MAX * 8) before raw appends. */
static inline int writer_reserve(struct writer *w, size_t need)
{
  if (!writer_has_room(w, need))
    writer_flush(w);
  return writer_failed(w) == 0;
}

/* Commits the bytes up to p: the background thread may write them to the
** file from now on (see writer.c), so they must all be stored first. */
static inline void writer_commit(struct writer *w, uint8_t *p)
{
  __atomic_store_n(&w->pos, p, __ATOMIC_RELEASE);
}

static inline void writer_put_byte(struct writer *w, uint8_t b)
{
  *w->pos = b;
  writer_commit(w, w->pos + 1);
}

/* By the index of the highest set bit of a number of 1 to 56 significant
** bits: its LEB128 length, and the continuation bits of all but its last
** byte (none for a number of one byte). Filled by writer_tables_init(),
** which also sets writer_fast_pdep. */
struct writer_uleb {
  uint64_t more[64];
  uint8_t length[64]; /* (One base address for both, on the hook's path.) */
};
extern struct writer_uleb writer_uleb;
void writer_tables_init(void);

/* Whether this CPU has a fast PDEP instruction (BMI2, and not an AMD CPU
** before Zen 3, where it is microcoded). */
extern int writer_fast_pdep;

#if defined(__x86_64__) && defined(__GNUC__)
#define WRITER_HAS_PDEP 1
#else
#define WRITER_HAS_PDEP 0
#endif

/*
** The LEB128 bytes of v < 2^56 as one little-endian word, and their
** number, given msb, the index of the highest set bit of v (of 1 for 0):
** v's 7-bit groups are spread one to a byte, then the continuation bits
** are set. With `pdep` (a constant at every call, true only where
** writer_fast_pdep is) one PDEP instruction spreads them; otherwise three
** halving steps do, without a data-dependent loop.
*/
HOT_INLINE uint64_t uleb128_word_msb(uint64_t v, unsigned msb, unsigned *len,
                                     int pdep)
{
  uint64_t x;
#if WRITER_HAS_PDEP
  if (pdep) {
    __asm__("pdep %2, %1, %0" : "=r"(x) : "r"(v), "r"(0x7f7f7f7f7f7f7f7fULL));
  } else
#endif
  {
    (void)pdep;
    x = (v & 0x0fffffffULL) | ((v << 4) & 0x0fffffff00000000ULL);
    x = (x & 0x00003fff00003fffULL) | ((x << 2) & 0x3fff00003fff0000ULL);
    x = (x & 0x007f007f007f007fULL) | ((x << 1) & 0x7f007f007f007f00ULL);
  }
  *len = writer_uleb.length[msb];
  return x | writer_uleb.more[msb];
}

/* The index of the highest set bit of v, not 0 (63 ^ the count of leading
** zeros: one BSR instruction on x86_64). */
HOT_INLINE unsigned uleb128_msb(uint64_t v)
{
  return 63u ^ (unsigned)__builtin_clzll(v);
}

/* The same for 0x80 <= v < 2^56. */
HOT_INLINE uint64_t uleb128_word_with(uint64_t v, unsigned *len, int pdep)
{
  return uleb128_word_msb(v, uleb128_msb(v), len, pdep);
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ULEB128_WORDS 1
#else
#define ULEB128_WORDS 0
#endif

/* Writes v as unsigned LEB128 at p and returns the end. A number below
** 2^56 (every address and size on x86_64) is stored as one 8-byte word;
** the caller's reservation (ULEB128_MAX bytes per number) covers the bytes
** past the encoding. */
HOT_INLINE uint8_t *uleb128_put_with(uint8_t *p, uint64_t v, int pdep)
{
  if (v < 0x80) {
    *p = (uint8_t)v;
    return p + 1;
  }
  if (ULEB128_WORDS && v < (1ULL << 56)) {
    unsigned len;
    uint64_t x = uleb128_word_with(v, &len, pdep);
    memcpy(p, &x, 8);
    return p + len;
  }
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

/* Whether every address and every block size is below 2^56: a 32-bit
** build, or x86_64 and arm64, whose user addresses have at most 56 bits
** (57-bit paging) and 52 bits. */
#if ULEB128_WORDS && (UINTPTR_MAX <= 0xffffffffu || defined(__x86_64__) ||     \
                      defined(__aarch64__))
#define ULEB128_BLOCKS_WORDS 1
#else
#define ULEB128_BLOCKS_WORDS 0
#endif

/* As uleb128_put_with, for an address or the size of a block (below 2^56,
** see ULEB128_BLOCKS_WORDS): always one word, without a test of the
** number's range (0 too: its leading zeros are counted from 1, whose
** encoding, one byte, is 0's). */
HOT_INLINE uint8_t *uleb128_put_block(uint8_t *p, uint64_t v, int pdep)
{
#if ULEB128_BLOCKS_WORDS
  unsigned len;
  uint64_t x = uleb128_word_msb(v, uleb128_msb(v | 1), &len, pdep);
  memcpy(p, &x, 8);
  return p + len;
#else
  return uleb128_put_with(p, v, pdep);
#endif
}

/* As uleb128_put_block, for a number known not to be 0. */
HOT_INLINE uint8_t *uleb128_put_block_nonzero(uint8_t *p, uint64_t v, int pdep)
{
#if ULEB128_BLOCKS_WORDS
  unsigned len;
  uint64_t x = uleb128_word_msb(v, uleb128_msb(v), &len, pdep);
  memcpy(p, &x, 8);
  return p + len;
#else
  return uleb128_put_with(p, v, pdep);
#endif
}

static inline uint8_t *uleb128_put(uint8_t *p, uint64_t v)
{
  return uleb128_put_with(p, v, 0);
}

static inline void writer_put_uleb128(struct writer *w, uint64_t v)
{
  writer_commit(w, uleb128_put(w->pos, v));
}

/* A string: its length as ULEB128, then its bytes. */
void writer_string(struct writer *w, const char *s, size_t len);

/* How long a write to a non-blocking descriptor (a FIFO: a snapshot's, a
** profile's) may wait for its reader to take a byte, unless the
** environment's MEMPROF_STALL_SECONDS (1 to 3600) says otherwise; a write
** that waited so long in vain fails with ETIMEDOUT. */
#define WRITER_STALL_SECONDS 10

/* Writes len bytes to fd, retrying short writes and EINTR (the stream's
** buffers, and the snapshots' files). On a non-blocking descriptor it
** waits for room, the stall bound at most without progress. SIGPIPE
** never reaches the program: a reader gone is EPIPE. Returns 0 or errno. */
int writer_write_all(int fd, const void *data, size_t len);

/* strerror, with the text of a write that waited too long (ETIMEDOUT). */
const char *writer_strerror(int err);

/* The name of the writer thread (/proc/PID/task/TID/comm). */
#define WRITER_THREAD_NAME "memprof-writer"

#endif
