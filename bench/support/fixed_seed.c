/*
** Preloaded (LD_PRELOAD) into the callgrind runs of bench/callgrind.lua.
**
** LuaJIT seeds its PRNG from syscall(SYS_getrandom, ...) when a VM is
** created, and the JIT compiler draws from it (random penalties for traces
** that abort): on a recursive workload such as bench/workloads/trees.lua,
** which traces are compiled differs from run to run, and so does the
** share of events that take the hook's slow path (about 125 to 185
** instructions per event). With the bytes fixed, a run is repeatable, and
** the runs with the specialised and the generic hook see the same JIT
** decisions, so that their ratio is the hooks' alone.
**
** getrandom answers with a splitmix64 stream seeded from MEMPROF_BENCH_SEED
** (a decimal number, 1 if unset); every other system call is passed on.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>

static uint64_t splitmix64(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void fixed_random(unsigned char *buf, size_t len)
{
  /* One stream for the process (LuaJIT asks once per VM). */
  static uint64_t state;
  static int seeded;
  size_t i;
  if (!seeded) {
    const char *seed = getenv("MEMPROF_BENCH_SEED");
    state = seed != NULL ? strtoull(seed, NULL, 10) : 1;
    seeded = 1;
  }
  for (i = 0; i < len; i++)
    buf[i] = (unsigned char)splitmix64(&state);
}

/* Exported despite -fvisibility=hidden: it must interpose libc's. */
__attribute__((visibility("default"))) long syscall(long number, ...)
{
  static long (*real)(long, ...);
  long a[6];
  va_list ap;
  int i;
  /* A system call takes at most six arguments; reading six whatever the
  ** caller passed is what libc's own syscall() does on x86-64. */
  va_start(ap, number);
  for (i = 0; i < 6; i++)
    a[i] = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_getrandom) {
    fixed_random((unsigned char *)a[0], (size_t)a[1]);
    return a[1];
  }
  if (real == NULL)
    real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
