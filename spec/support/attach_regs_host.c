/*
** A LuaJIT host for spec/hosts/attach_regs_spec.lua: its one thread sets
** callee-saved and vector registers to known values, sleeps in a system
** call made without the C library (so nothing but the kernel and a tracer
** can touch them), and checks them after each sleep. memprof attach takes
** this very thread over for its calls, and must put every register back:
** a difference is written to DIR/bad. DIR/count holds the sleeps done.
*/
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

/* Sleeps 20 ms; returns which register differed after (0: none; 1 to 5:
** rbx, r12 to r15; 10 + N: xmmN). The vector registers are low ones, which
** the C library's string functions use. */
static long sleep_checked(const struct timespec *ts)
{
  long bad;
  __asm__ volatile("movabs $0x1111111111111111, %%rbx\n\t"
                   "movabs $0x2222222222222222, %%r12\n\t"
                   "movabs $0x3333333333333333, %%r13\n\t"
                   "movabs $0x4444444444444444, %%r14\n\t"
                   "movabs $0x5555555555555555, %%r15\n\t"
                   "movq %%r12, %%xmm0\n\t"
                   "movq %%r13, %%xmm1\n\t"
                   "movq %%r14, %%xmm7\n\t"
                   "mov $35, %%eax\n\t" /* nanosleep */
                   "mov %[ts], %%rdi\n\t"
                   "xor %%esi, %%esi\n\t"
                   "syscall\n\t"
                   "mov $1, %%edx\n\t"
                   "movabs $0x1111111111111111, %%rcx\n\t"
                   "cmp %%rcx, %%rbx\n\t"
                   "jne 1f\n\t"
                   "mov $2, %%edx\n\t"
                   "movabs $0x2222222222222222, %%rcx\n\t"
                   "cmp %%rcx, %%r12\n\t"
                   "jne 1f\n\t"
                   "mov $3, %%edx\n\t"
                   "movabs $0x3333333333333333, %%rcx\n\t"
                   "cmp %%rcx, %%r13\n\t"
                   "jne 1f\n\t"
                   "mov $4, %%edx\n\t"
                   "movabs $0x4444444444444444, %%rcx\n\t"
                   "cmp %%rcx, %%r14\n\t"
                   "jne 1f\n\t"
                   "mov $5, %%edx\n\t"
                   "movabs $0x5555555555555555, %%rcx\n\t"
                   "cmp %%rcx, %%r15\n\t"
                   "jne 1f\n\t"
                   "mov $10, %%edx\n\t"
                   "movq %%xmm0, %%rcx\n\t"
                   "cmp %%rcx, %%r12\n\t"
                   "jne 1f\n\t"
                   "mov $11, %%edx\n\t"
                   "movq %%xmm1, %%rcx\n\t"
                   "cmp %%rcx, %%r13\n\t"
                   "jne 1f\n\t"
                   "mov $17, %%edx\n\t"
                   "movq %%xmm7, %%rcx\n\t"
                   "cmp %%rcx, %%r14\n\t"
                   "jne 1f\n\t"
                   "xor %%edx, %%edx\n\t"
                   "1: mov %%rdx, %[bad]\n\t"
                   : [bad] "=r"(bad)
                   : [ts] "r"(ts)
                   : "rax", "rcx", "rdx", "rsi", "rdi", "r11", "rbx", "r12",
                     "r13", "r14", "r15", "xmm0", "xmm1", "xmm7", "memory",
                     "cc");
  return bad;
}

static void put(const char *dir, const char *name, long v)
{
  char path[4096], tmp[4200];
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  if ((f = fopen(tmp, "w")) == NULL)
    exit(2);
  fprintf(f, "%ld", v);
  fclose(f);
  rename(tmp, path);
}

int main(int argc, char **argv)
{
  struct timespec ts = {0, 20000000};
  lua_State *L;
  long count = 0;
  if (argc != 2)
    return 2;
  L = luaL_newstate();
  luaL_openlibs(L);
  if (luaL_dostring(L, "held = {} for i = 1, 100 do held[i] = {i} end"))
    return 3;
  put(argv[1], "ready", 1);
  for (;;) {
    long bad = sleep_checked(&ts);
    if (bad != 0)
      put(argv[1], "bad", bad);
    if (++count % 5 == 0)
      put(argv[1], "count", count);
  }
}
