/*
** A heap snapshot of another process (see heap_remote.h, docs/attach.md).
**
** Why a copy: the heap walk reads objects with plain loads at their
** addresses. Copied to the same addresses in a child process, the target's
** memory reads there as it read in the target at the stop, so the same
** walk code makes both snapshots, and the target runs on while the copy is
** walked. Every GC object is written by the collector (its mark), so it
** lives in private writable memory: that is what is copied, and of an
** anonymous mapping only the pages present (or swapped), from pagemap.
*/
#define _GNU_SOURCE
#include "heap_remote.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "elf_syms.h"
#include "fault.h"
#include "heap_layout.h"
#include "heap_remote_exe.h"
#include "heap_remote_host.h"
#include "heapwalk.h"
#include "lauxlib.h"
#include "profiler.h"
#include "remote_proc.h"
#include "remote_stop.h"
#include "snapshot.h"
#include "vm_inspect.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define PAGE 4096
#define G_WINDOW 1024
#define BUILD_ID_MAX 64
/* Stops tried before the VM is found at a safe moment, and the pause
** between two (growing with each). */
#define TRIES_MAX 25
#define RETRY_NS 20000000LL

/* The target's LuaJIT: the executable mappings of its file. */
struct luajit_file {
  unsigned dev_major, dev_minor;
  uint64_t inode;
  uint8_t id[BUILD_ID_MAX];
  size_t idlen;
  char path[256];
};

static long long now_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void hex(const uint8_t *id, size_t n, char *out, size_t len)
{
  size_t i;
  out[0] = '\0';
  for (i = 0; i < n && 2 * i + 2 < len; i++)
    snprintf(out + 2 * i, 3, "%02x", id[i]);
  if (n == 0)
    snprintf(out, len, "none");
}

/* ---- Which LuaJIT ------------------------------------------------------ */

/* The file of this process's LuaJIT (the one lua_newstate is in). */
static int own_luajit(struct luajit_file *f, char *msg, size_t len)
{
  struct remote_maps maps;
  const struct remote_map *m;
  void *fn = dlsym(RTLD_DEFAULT, "lua_newstate");
  size_t i;
  int err = remote_maps_read(0, &maps);
  if (err != 0)
    return remote_fail(msg, len, err, "cannot read this process's mappings: %s",
                       strerror(err));
  m = fn != NULL ? remote_maps_find(&maps, (uintptr_t)fn) : NULL;
  if (m == NULL || m->inode == 0) {
    remote_maps_free(&maps);
    return remote_fail(
        msg, len, ENOTSUP,
        "check 'own LuaJIT' failed: lua_newstate is in no file this "
        "process maps");
  }
  memset(f, 0, sizeof(*f));
  f->dev_major = m->dev_major, f->dev_minor = m->dev_minor;
  f->inode = m->inode;
  snprintf(f->path, sizeof(f->path), "%s", m->path);
  for (i = 0; i < maps.n; i++)
    if (maps.m[i].inode == f->inode && maps.m[i].offset == 0 &&
        maps.m[i].dev_major == f->dev_major &&
        maps.m[i].dev_minor == f->dev_minor)
      f->idlen = remote_build_id(getpid(), maps.m[i].lo, f->id, sizeof(f->id));
  remote_maps_free(&maps);
  return 0;
}

static int same_file(const struct remote_map *m, const struct luajit_file *f)
{
  return m->inode == f->inode && m->dev_major == f->dev_major &&
         m->dev_minor == f->dev_minor;
}

/* The message for a target that maps no LuaJIT of this build. */
static int not_this_build(pid_t pid, const struct remote_maps *maps,
                          const struct luajit_file *own, char *msg, size_t len)
{
  char exe[256] = "?", link[64], ours[2 * BUILD_ID_MAX + 1], theirs[256] = "";
  ssize_t n;
  size_t i;
  snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
  if ((n = readlink(link, exe, sizeof(exe) - 1)) > 0)
    exe[n] = '\0';
  hex(own->id, own->idlen, ours, sizeof(ours));
  for (i = 0; i < maps->n && theirs[0] == '\0'; i++)
    if (maps->m[i].offset == 0 && strstr(maps->m[i].path, "luajit") != NULL) {
      uint8_t id[BUILD_ID_MAX];
      char h[2 * BUILD_ID_MAX + 1];
      hex(id, remote_build_id(pid, maps->m[i].lo, id, sizeof(id)), h,
          sizeof(h));
      snprintf(theirs, sizeof(theirs), "; it maps %.80s (build-id %s)",
               maps->m[i].path, h);
    }
  return remote_fail(
      msg, len, ENOTSUP,
      "check 'same LuaJIT build' failed: process %d (%s) maps no "
      "file of the LuaJIT memprof runs on (%s, build-id %s)%s; run "
      "memprof with a LuaJIT of the target's build",
      (int)pid, exe, own->path, ours, theirs);
}

/* Finds the file of the target's LuaJIT: the same file as this process's,
** or one with the same build-id. */
static int target_luajit(pid_t pid, const struct remote_maps *maps,
                         struct luajit_file *f, char *msg, size_t len)
{
  struct luajit_file own;
  size_t i;
  int err = own_luajit(&own, msg, len);
  if (err != 0)
    return err;
  for (i = 0; i < maps->n; i++) {
    const struct remote_map *m = &maps->m[i];
    uint8_t id[BUILD_ID_MAX];
    size_t n;
    if (m->offset != 0 || m->inode == 0)
      continue;
    n = same_file(m, &own) ? own.idlen
                           : remote_build_id(pid, m->lo, id, sizeof(id));
    if (same_file(m, &own) ||
        (own.idlen > 0 && n == own.idlen && memcmp(id, own.id, n) == 0)) {
      *f = own;
      f->dev_major = m->dev_major, f->dev_minor = m->dev_minor;
      f->inode = m->inode;
      snprintf(f->path, sizeof(f->path), "%s", m->path);
      return 0;
    }
  }
  return not_this_build(pid, maps, &own, msg, len);
}

/* ---- Roots' layout ----------------------------------------------------- */

static int nothing(lua_State *L)
{
  (void)L;
  return 0;
}

static void push_kind(lua_State *T, int kind)
{
  switch (kind) {
  case 0:
    lua_pushnil(T);
    break;
  case 1:
    lua_pushboolean(T, 0);
    break;
  case 2:
    lua_pushnumber(T, 0);
    break;
  case 3:
    lua_pushlightuserdata(T, NULL);
    break;
  case 4:
    lua_pushlstring(T, "", 0);
    break;
  case 5:
    lua_pushthread(T);
    break;
  default:
    lua_pushcfunction(T, nothing);
  }
}

/* The lowest offset in g's window of a reference to o (-1: none). The
** boolean metatable is kept twice (true, false): false's is the lower. */
static int find_ref(const struct heap_layout *h, uintptr_t g, uintptr_t o)
{
  int at;
  for (at = 0; at + h->base.ref_size <= G_WINDOW; at += h->base.ref_size)
    if (vm_load_ref(&h->base, g + (uintptr_t)at) == o)
      return at;
  return -1;
}

static int learn_in(lua_State *T, const struct heap_layout *h,
                    struct roots_layout *out, char *msg, size_t len)
{
  uintptr_t g = vm_load_ref(&h->base, (uintptr_t)T + h->base.L_glref), reg, obj;
  uint8_t gct;
  int at, kind;
  reg = (uintptr_t)lua_topointer(T, LUA_REGISTRYINDEX);
  for (at = 0; at + 8 <= G_WINDOW; at += 8)
    if (vm_load_gc(&h->base, g + (uintptr_t)at, &obj, &gct) && obj == reg &&
        gct == GCT_TAB)
      break;
  if (at + 8 > G_WINDOW)
    return remote_fail(
        msg, len, ENOTSUP,
        "check 'registry in global_State' failed: no TValue in its "
        "first %d bytes holds the registry",
        G_WINDOW);
  out->g_registry = (uint16_t)at;
  for (kind = 0; kind < HEAP_BASEMT_N; kind++) {
    uintptr_t mt;
    push_kind(T, kind);
    lua_newtable(T);
    mt = (uintptr_t)lua_topointer(T, -1);
    lua_newtable(T); /* The newest object: the collector's list head. */
    lua_pop(T, 1);
    lua_setmetatable(T, -2);
    lua_pop(T, 1);
    if ((at = find_ref(h, g, mt)) < 0 || at == out->g_registry)
      return remote_fail(
          msg, len, ENOTSUP,
          "check 'base metatables' failed: the metatable of kind %d "
          "is not referenced from global_State's first %d bytes",
          kind, G_WINDOW);
    out->g_basemt[kind] = (uint16_t)at;
    push_kind(T, kind);
    lua_pushnil(T);
    lua_setmetatable(T, -2);
    lua_pop(T, 1);
    if (vm_load_ref(&h->base, g + (uintptr_t)at) != 0)
      return remote_fail(msg, len, ENOTSUP,
                         "check 'base metatables' failed: g+%d still holds the "
                         "metatable of kind %d once it is removed",
                         at, kind);
  }
  return 0;
}

/* Learns where global_State keeps the roots, in a throw-away VM. */
static int learn_roots(const struct heap_layout *h, struct roots_layout *out,
                       char *msg, size_t len)
{
  lua_State *(*newstate)(void);
  lua_State *T;
  int err;
  *(void **)&newstate = dlsym(RTLD_DEFAULT, "luaL_newstate");
  if (newstate == NULL || (T = newstate()) == NULL)
    return remote_fail(
        msg, len, ENOTSUP,
        "check 'roots' failed: no VM could be made to learn where "
        "global_State keeps the roots (luaL_newstate)");
  err = learn_in(T, h, out, msg, len);
  lua_close(T);
  return err;
}

int heap_remote_learn(lua_State *L, struct heap_layout *h,
                      struct roots_layout *rl, char *msg, size_t len)
{
  if (!heap_layout_learn(L, h, msg, len))
    return ENOTSUP;
  return learn_roots(h, rl, msg, len);
}

/* ---- The copy ---------------------------------------------------------- */

struct mirror {
  uintptr_t *lo, *hi;
  size_t n, cap;
  uint64_t bytes;
};

static int mirror_has(const struct mirror *mr, uintptr_t a, size_t n)
{
  size_t lo = 0, hi = mr->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (mr->hi[mid] <= a)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < mr->n && mr->lo[lo] <= a && a + n <= mr->hi[lo];
}

static void mirror_drop(struct mirror *mr)
{
  size_t i;
  for (i = 0; i < mr->n; i++)
    munmap((void *)mr->lo[i], mr->hi[i] - mr->lo[i]);
  free(mr->lo);
  free(mr->hi);
  memset(mr, 0, sizeof(*mr));
}

/* Private writable memory: anonymous (named or not), the brk heap, a
** file's data. Not the main stack (no GC object is there) nor the kernel's
** pages. */
static int copyable(const struct remote_map *m)
{
  if (m->perms[0] != 'r' || m->perms[1] != 'w' || m->perms[3] != 'p')
    return 0;
  return m->path[0] != '[' || strcmp(m->path, "[heap]") == 0 ||
         strncmp(m->path, "[anon:", 6) == 0;
}

/* Copies [lo, hi) of pid to the same addresses here; a page that cannot be
** read stays zero. Returns 0, or ESRCH if the process is gone. */
static int copy_range(pid_t pid, uintptr_t lo, uintptr_t hi, uint64_t *bytes)
{
  while (lo < hi) {
    struct iovec l = {(void *)lo, hi - lo}, r = {(void *)lo, hi - lo};
    ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0 && errno == ESRCH)
      return ESRCH;
    if (got <= 0)
      got = PAGE; /* Skip an unreadable page. */
    else
      *bytes += (uint64_t)got;
    lo += ((uintptr_t)got + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
  }
  return 0;
}

#define PM_BATCH 4096
#define PM_PRESENT (1ULL << 63)
#define PM_SWAPPED (1ULL << 62)

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Makes [lo, hi) of the copy's pages now (Linux 5.14: one call for the
** range), so that copying them during the stop faults no page: each fault
** costs more than the copy of its page. Where it is refused, they fault
** in during the copy. */
static int populate(pid_t pid, uintptr_t lo, uintptr_t hi, uint64_t *bytes)
{
  (void)pid;
  (void)bytes;
  madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
  return 0;
}

typedef int (*range_fn)(pid_t pid, uintptr_t lo, uintptr_t hi, uint64_t *bytes);

/* Calls fn on each run of pages of anonymous memory [lo, hi) that hold
** anything (present or swapped out, from pagemap). */
static int each_present(pid_t pid, int pagemap, uintptr_t lo, uintptr_t hi,
                        range_fn fn, uint64_t *bytes)
{
  static uint64_t pm[PM_BATCH];
  while (lo < hi) {
    size_t n = (hi - lo) / PAGE, i, run = 0;
    ssize_t got;
    if (n > PM_BATCH)
      n = PM_BATCH;
    got = pread(pagemap, pm, n * sizeof(pm[0]),
                (off_t)(lo / PAGE * sizeof(pm[0])));
    if (got != (ssize_t)(n * sizeof(pm[0])))
      return fn(pid, lo, hi, bytes); /* No pagemap: all. */
    for (i = 0; i <= n; i++) {
      int in = i < n && (pm[i] & (PM_PRESENT | PM_SWAPPED)) != 0;
      if (in) {
        run++;
      } else if (run > 0) {
        uintptr_t at = lo + (i - run) * PAGE;
        int err = fn(pid, at, at + run * PAGE, bytes);
        if (err != 0)
          return err;
        run = 0;
      }
    }
    lo += n * PAGE;
  }
  return 0;
}

static int mirror_add(struct mirror *mr, uintptr_t lo, uintptr_t hi)
{
  if (mr->n == mr->cap) {
    size_t cap = mr->cap ? 2 * mr->cap : 64;
    uintptr_t *a = realloc(mr->lo, cap * sizeof(*a)), *b;
    if (a == NULL)
      return 0;
    mr->lo = a;
    if ((b = realloc(mr->hi, cap * sizeof(*b))) == NULL)
      return 0;
    mr->hi = b;
    mr->cap = cap;
  }
  mr->lo[mr->n] = lo, mr->hi[mr->n] = hi;
  mr->n++;
  return 1;
}

static int open_pagemap(pid_t pid)
{
  char name[64];
  snprintf(name, sizeof(name), "/proc/%d/pagemap", (int)pid);
  return open(name, O_RDONLY | O_CLOEXEC);
}

/* Calls fn on what the copy holds of each copyable mapping: the pages
** that hold anything of anonymous memory, all of a file's. */
static int each_copied(pid_t pid, const struct remote_maps *maps,
                       struct mirror *mr, range_fn fn)
{
  size_t i;
  int pagemap = open_pagemap(pid), err = 0;
  for (i = 0; i < maps->n && err == 0; i++) {
    const struct remote_map *m = &maps->m[i];
    if (!copyable(m))
      continue;
    if (m->inode == 0 && pagemap >= 0)
      err = each_present(pid, pagemap, m->lo, m->hi, fn, &mr->bytes);
    else
      err = fn(pid, m->lo, m->hi, &mr->bytes);
  }
  if (pagemap >= 0)
    close(pagemap);
  return err;
}

/* Frees [lo, hi) of this process's address space where it is only this
** process's own VM memory without GC64: anonymous, below 4 GiB (where such
** a LuaJIT keeps its objects, and nothing else of this process is). Only
** the child that makes the copy calls it: it runs no Lua, and a target of
** the same build keeps its objects at the same low addresses. Returns
** whether the range is free now. */
static int free_own_low(uintptr_t lo, uintptr_t hi)
{
  struct remote_maps own;
  size_t i;
  int ok = 1;
  if (hi > ((uintptr_t)1 << 32) || remote_maps_read(0, &own) != 0)
    return 0;
  for (i = 0; i < own.n && ok; i++)
    if (own.m[i].lo < hi && own.m[i].hi > lo)
      ok = own.m[i].inode == 0 && own.m[i].path[0] == '\0';
  remote_maps_free(&own);
  return ok && munmap((void *)lo, hi - lo) == 0;
}

static void *map_at(uintptr_t lo, size_t size)
{
  return mmap((void *)lo, size, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
              -1, 0);
}

/* Maps the copy's memory at the addresses of process pid's private
** writable memory, its pages made, before the process is stopped. */
static int mirror_map(pid_t pid, const struct remote_maps *maps,
                      struct mirror *mr, char *msg, size_t len)
{
  size_t i;
  memset(mr, 0, sizeof(*mr));
  for (i = 0; i < maps->n; i++) {
    const struct remote_map *m = &maps->m[i];
    size_t size = m->hi - m->lo;
    void *p;
    if (!copyable(m))
      continue;
    p = map_at(m->lo, size);
    if (p == MAP_FAILED && errno == EEXIST && free_own_low(m->lo, m->hi))
      p = map_at(m->lo, size);
    if (p == MAP_FAILED || p != (void *)m->lo) {
      if (p != MAP_FAILED)
        munmap(p, size);
      mirror_drop(mr);
      /* A file's data at the same address in both: a program not built as
      ** position-independent (Tarantool), the same every run. */
      return remote_fail(
          msg, len, EADDRINUSE,
          "check 'address space' failed: the target's memory at "
          "0x%llx-0x%llx %s overlaps memprof's own; %s",
          (unsigned long long)m->lo, (unsigned long long)m->hi, m->path,
          m->inode != 0 ? "that file is mapped at a fixed address (not built "
                          "as position-independent), in memprof's process "
                          "too"
                        : "run memprof again (its addresses are chosen at "
                          "random)");
    }
    if (!mirror_add(mr, m->lo, m->hi)) {
      munmap(p, size);
      mirror_drop(mr);
      return remote_fail(msg, len, ENOMEM, "out of memory for the copy's map");
    }
  }
  each_copied(pid, maps, mr, populate);
  return 0;
}

/* Copies the private writable memory of stopped process pid into the
** copy mapped by mirror_map. */
static int mirror_fill(pid_t pid, const struct remote_maps *maps,
                       struct mirror *mr, char *msg, size_t len)
{
  int err;
  mr->bytes = 0;
  err = each_copied(pid, maps, mr, copy_range);
  if (err == ESRCH)
    return remote_fail(msg, len, ESRCH,
                       "process %d exited while it was being read", (int)pid);
  return err;
}

/* ---- The VMs in the copy ----------------------------------------------- */

/* Main threads found by structure: a thread whose global_State names it
** as its main thread, with an allocator a live VM could have. */
#define VMS_MAX 64
struct vms {
  uintptr_t L[VMS_MAX];
  int n;
};

/* Whether the allocator of the VM whose global_State is at g (in the copy)
** could be a live VM's: code of a file the target maps and, if memprof.so's,
** one of its hooks. A VM closed in the process (memprof's throw-away VMs
** of an attach, a host's) can still look whole in freed memory, its
** allocator's slot overwritten or naming what no longer runs; attach's
** scan (attach_entry.c) applies the same test. */
static int live_allocator(pid_t pid, const struct remote_maps *maps,
                          const struct mirror *mr, const struct heap_layout *h,
                          uintptr_t g)
{
  uintptr_t f, own;
  const struct remote_map *m;
  if (!mirror_has(mr, g + h->base.g_allocf, sizeof(f)))
    return 0;
  memcpy(&f, (const void *)(g + h->base.g_allocf), sizeof(f));
  m = remote_maps_find(maps, f);
  if (m == NULL || m->perms[2] != 'x' || m->inode == 0)
    return 0;
  own = attach_own_address(pid, maps, f);
  return own == 0 || profiler_is_hook((lua_Alloc)own);
}

static void find_vms(pid_t pid, const struct remote_maps *maps,
                     const struct mirror *mr, const struct heap_layout *h,
                     struct vms *out)
{
  size_t r;
  out->n = 0;
  for (r = 0; r < mr->n && out->n < VMS_MAX; r++) {
    uintptr_t a, end = mr->hi[r] - 64;
    for (a = mr->lo[r]; a < end && out->n < VMS_MAX; a += 8) {
      uintptr_t g;
      if (*(const uint8_t *)(a + h->base.gct) != GCT_THREAD)
        continue;
      g = vm_load_ref(&h->base, a + h->base.L_glref);
      if ((g & 7) == 0 && mirror_has(mr, g, G_WINDOW) &&
          vm_load_ref(&h->base, g + h->g_mainth) == a &&
          live_allocator(pid, maps, mr, h, g))
        out->L[out->n++] = a;
    }
  }
}

/* Whether the executable mapping at pc is the target's LuaJIT. */
static int in_luajit(const struct remote_maps *maps,
                     const struct luajit_file *f, uintptr_t pc)
{
  const struct remote_map *m = remote_maps_find(maps, pc);
  return m != NULL && same_file(m, f);
}

/* Whether the stopped threads are all outside LuaJIT's code: none is in
** the middle of the VM's work (the interpreter, the collector, the
** allocator, an API call). */
static int threads_outside(const struct remote_stop *s,
                           const struct remote_maps *maps,
                           const struct luajit_file *f, char *why, size_t len)
{
  size_t i;
  for (i = 0; i < s->n; i++) {
    uintptr_t pc;
    if (s->held[i] && remote_thread_pc(s->tid[i], &pc) &&
        in_luajit(maps, f, pc)) {
      snprintf(why, len, "thread %d was running LuaJIT's code (at 0x%llx)",
               (int)s->tid[i], (unsigned long long)pc);
      return 0;
    }
  }
  return 1;
}

/* Whether the VM of main thread L reads as one, at a moment the walk may
** read it: every check is named. Returns 0 (safe), EAGAIN (not now: why),
** or ENOTSUP (the layout does not hold). */
static int check_vm(const struct mirror *mr, const struct heap_layout *h,
                    const struct roots_layout *rl,
                    const struct remote_maps *maps, uintptr_t L,
                    struct heap_roots *roots, char *why, size_t len)
{
  const struct vm_layout *lay = &h->base;
  uintptr_t g = vm_load_ref(&h->base, L + lay->L_glref), stack, base, top,
            allocf, o;
  uint32_t size;
  int32_t state;
  uint8_t gct;
  int k;
  const struct remote_map *m;
  size_t gsize = (size_t)lay->g_vmstate + 4;
  if ((size_t)lay->g_allocf + 8 > gsize)
    gsize = (size_t)lay->g_allocf + 8;
  if (!mirror_has(mr, g, gsize))
    return remote_fail(
        why, len, ENOTSUP,
        "check 'global_State' failed: its first %zu bytes are not in "
        "the copy",
        gsize);
  stack = vm_load_ref(&h->base, L + lay->L_stack);
  memcpy(&size, (const void *)(L + lay->L_stacksize), sizeof(size));
  memcpy(&base, (const void *)(L + lay->L_base), sizeof(base));
  memcpy(&top, (const void *)(L + lay->L_top), sizeof(top));
  if (!mirror_has(mr, stack, (size_t)size * TVALUE_SIZE) || base < stack ||
      top < base || top > stack + (uintptr_t)size * TVALUE_SIZE)
    return remote_fail(
        why, len, ENOTSUP,
        "check 'main thread stack' failed: its stack does not hold "
        "its base and top");
  memcpy(&allocf, (const void *)(g + lay->g_allocf), sizeof(allocf));
  if ((m = remote_maps_find(maps, allocf)) == NULL || m->perms[2] != 'x')
    return remote_fail(
        why, len, ENOTSUP,
        "check 'allocator' failed: g+%u (0x%llx) is no code of the "
        "process",
        lay->g_allocf, (unsigned long long)allocf);
  if (!vm_load_gc(&h->base, g + rl->g_registry, &o, &gct) || gct != GCT_TAB ||
      !mirror_has(mr, o, 8))
    return remote_fail(why, len, ENOTSUP,
                       "check 'registry' failed: g+%u holds no table",
                       rl->g_registry);
  memset(roots, 0, sizeof(*roots));
  roots->registry = o;
  roots->main = roots->running = L;
  for (k = 0; k < HEAP_BASEMT_N; k++) {
    uintptr_t mt = vm_load_ref(&h->base, g + rl->g_basemt[k]);
    if (mt != 0 && (!mirror_has(mr, mt, 8) ||
                    *(const uint8_t *)(mt + lay->gct) != GCT_TAB))
      return remote_fail(why, len, ENOTSUP,
                         "check 'base metatables' failed: g+%u holds no table",
                         rl->g_basemt[k]);
    roots->basemt[k] = mt;
  }
  memcpy(&state, (const void *)(g + lay->g_vmstate), sizeof(state));
  if (state != lay->st_c)
    return remote_fail(why, len, EAGAIN,
                       "the VM was not in C code (vmstate %d: %s)", (int)state,
                       vm_state_what(lay, state));
  return 0;
}

/* ---- The child --------------------------------------------------------- */

struct child_report {
  int err;
  char msg[600];
  struct heap_remote_result res;
};

struct job {
  pid_t pid;
  int vm, fd;
  struct remote_maps *maps; /* Read again when they changed. */
  const struct luajit_file *lj;
  const struct heap_layout *h;
  const struct roots_layout *rl;
};

/* Fault injection: the target ends while it is stopped (killed, and
** waited for, so that its memory is gone before it is read). */
static void exit_now(pid_t pid)
{
  int st = 0;
  kill(pid, SIGKILL);
  while (waitpid(pid, &st, __WALL) == pid && !WIFEXITED(st) && !WIFSIGNALED(st))
    ;
}

/* Whether the copyable mappings of a and b are the same. */
static int same_copyable(const struct remote_maps *a,
                         const struct remote_maps *b)
{
  size_t i = 0, k = 0;
  for (;;) {
    while (i < a->n && !copyable(&a->m[i]))
      i++;
    while (k < b->n && !copyable(&b->m[k]))
      k++;
    if (i == a->n || k == b->n)
      return i == a->n && k == b->n;
    if (a->m[i].lo != b->m[k].lo || a->m[i].hi != b->m[k].hi ||
        a->m[i].inode != b->m[k].inode)
      return 0;
    i++, k++;
  }
}

/* Whether the stopped process still has the mappings the copy was mapped
** for (it may have mapped memory since they were read); if not, the new
** ones replace them for the next stop. */
static int maps_hold(struct remote_maps *maps, pid_t pid, char *why, size_t len)
{
  struct remote_maps now;
  if (remote_maps_read(pid, &now) != 0)
    return 1; /* Gone: the copy says so. */
  if (same_copyable(maps, &now)) {
    remote_maps_free(&now);
    return 1;
  }
  remote_maps_free(maps);
  *maps = now;
  snprintf(why, len, "its memory mappings changed while it ran");
  return 0;
}

/* One stop: the threads checked, the memory copied, the target let go.
** Returns 0 with the copy made, EAGAIN (not a safe moment: why), or a
** failure. */
static int one_stop(const struct job *j, struct mirror *mr,
                    struct heap_remote_result *res, char *msg, size_t len)
{
  struct remote_stop s;
  long long t0;
  int err;
  if ((err = mirror_map(j->pid, j->maps, mr, msg, len)) != 0)
    return err;
  if ((err = remote_stop_all(&s, j->pid, msg, len)) != 0) {
    mirror_drop(mr);
    return err;
  }
  t0 = now_ns();
  if (fault_remote_exit())
    exit_now(j->pid);
  if (!maps_hold(j->maps, j->pid, msg, len) ||
      !threads_outside(&s, j->maps, j->lj, msg, len))
    err = EAGAIN;
  else
    err = mirror_fill(j->pid, j->maps, mr, msg, len);
  remote_resume_all(&s);
  res->pause_ns = (uint64_t)(now_ns() - t0);
  res->copied = err == 0 ? mr->bytes : 0;
  if (err != 0)
    mirror_drop(mr);
  return err;
}

/* A profile of memprof's that runs in the VM (one memprof attach started,
** or the program's own, with the same memprof.so): its hook is the VM's
** allocator. The snapshot then notes how much of its stream was written
** at the stop, as memprof.snapshot does, so that the two can be joined. */
static void note_profile(const struct job *j, const struct mirror *mr,
                         uintptr_t L, struct heap_profile_note *note)
{
  const struct vm_layout *lay = &j->h->base;
  uintptr_t g = vm_load_ref(&j->h->base, L + lay->L_glref), f, ud, own;
  const struct profiler *p;
  if (!mirror_has(mr, g + lay->g_allocf, 8) ||
      !mirror_has(mr, g + lay->g_allocd, 8))
    return;
  memcpy(&f, (const void *)(g + lay->g_allocf), sizeof(f));
  memcpy(&ud, (const void *)(g + lay->g_allocd), sizeof(ud));
  own = attach_own_address(j->pid, j->maps, f);
  if (own == 0 || !profiler_is_hook((lua_Alloc)own) ||
      !mirror_has(mr, ud, sizeof(struct profiler)))
    return;
  p = (const struct profiler *)ud;
  if (p->state != PROFILER_RECORDING)
    return;
  note->running = 1;
  note->written = p->capped ? p->cut_at : writer_total(&p->out);
}

static int walk_copy(const struct job *j, struct mirror *mr,
                     struct heap_remote_result *res, char *msg, size_t len)
{
  struct heap_profile_note note = {0, 0, (uint64_t)j->pid};
  struct heap_roots roots;
  struct vms vms;
  uintptr_t L;
  long long t0;
  int err;
  find_vms(j->pid, j->maps, mr, j->h, &vms);
  res->vms = vms.n;
  if (vms.n == 0)
    return remote_fail(
        msg, len, ENOTSUP,
        "check 'find VMs' failed: no thread in process %d's memory "
        "is the main thread of its global_State",
        (int)j->pid);
  if (j->vm > vms.n)
    return remote_fail(msg, len, EINVAL,
                       "process %d has %d LuaJIT VM%s, not %d", (int)j->pid,
                       vms.n, vms.n == 1 ? "" : "s", j->vm);
  L = vms.L[j->vm - 1];
  res->main = L;
  if ((err = check_vm(mr, j->h, j->rl, j->maps, L, &roots, msg, len)) != 0)
    return err;
  note_profile(j, mr, L, &note);
  t0 = now_ns();
  if (fault_remote_crash())
    raise(SIGSEGV);
  err = heapwalk_write_at(L, &roots, j->h, j->fd, &note, msg, len);
  res->walk_ns = (uint64_t)(now_ns() - t0);
  return err;
}

static void child(const struct job *j, struct child_report *rep)
{
  struct mirror mr;
  int err = EAGAIN;
  char why[600] = "";
  rep->res.tries = 0;
  while (err == EAGAIN && rep->res.tries < TRIES_MAX) {
    struct timespec nap = {0, RETRY_NS * (rep->res.tries % 5 + 1)};
    if (rep->res.tries++ > 0)
      nanosleep(&nap, NULL);
    err = one_stop(j, &mr, &rep->res, rep->msg, sizeof(rep->msg));
    if (err == 0) {
      err = walk_copy(j, &mr, &rep->res, rep->msg, sizeof(rep->msg));
      mirror_drop(&mr);
    }
    if (err == EAGAIN)
      snprintf(why, sizeof(why), "%s", rep->msg);
  }
  if (err == EAGAIN)
    snprintf(rep->msg, sizeof(rep->msg),
             "process %d was never at a safe moment in %d stops (the last "
             "time: %.400s); it runs on untouched",
             (int)j->pid, rep->res.tries, why);
  rep->err = err;
}

/* ---- The parent -------------------------------------------------------- */

/* Runs the job in a child process: its copy of the target and any fault
** of the walk stay there. */
static int run_child(const struct job *j, struct heap_remote_result *res,
                     char *msg, size_t len)
{
  struct child_report *rep = calloc(1, sizeof(*rep));
  int fds[2], st = 0;
  pid_t c;
  if (rep == NULL)
    return remote_fail(msg, len, ENOMEM, "out of memory");
  if (pipe2(fds, O_CLOEXEC) != 0 || (c = fork()) < 0) {
    free(rep);
    return remote_fail(msg, len, errno, "cannot start the reader: %s",
                       strerror(errno));
  }
  if (c == 0) {
    close(fds[0]);
    child(j, rep);
    _exit(remote_write_all(fds[1], rep, sizeof(*rep)) ? 0 : 1);
  }
  close(fds[1]);
  if (remote_read_all(fds[0], rep, sizeof(*rep), REMOTE_NO_DEADLINE) !=
      sizeof(*rep))
    rep->err = -1;
  close(fds[0]);
  while (waitpid(c, &st, 0) < 0 && errno == EINTR)
    ;
  if (rep->err == -1)
    rep->err = remote_fail(
        rep->msg, sizeof(rep->msg), EIO,
        "the reader of process %d's copy ended (%s %d) before "
        "it finished; process %d runs on untouched",
        (int)j->pid, WIFSIGNALED(st) ? "signal" : "status",
        WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), (int)j->pid);
  *res = rep->res;
  snprintf(msg, len, "%s", rep->msg);
  st = rep->err;
  free(rep);
  return st;
}

/* A target whose executable holds another LuaJIT build (Tarantool): the
** layout learned in a helper of that executable, which must be the file
** whose code the helper's LuaJIT is. Else the refusal of target_luajit,
** whose message is in msg, or, of a process proven to run no LuaJIT at
** all, that. */
static int exe_luajit(pid_t pid, const struct remote_maps *maps,
                      struct luajit_file *lj, struct heap_layout *h,
                      struct roots_layout *rl, char *msg, size_t len)
{
  struct exe_file file;
  char why[600];
  size_t i;
  int has = heap_exe_has_api(pid, why, sizeof(why)), err;
  if (has == 0) {
    elf_syms_not_luajit(pid, maps, msg, len);
    return ENOTSUP;
  }
  if (has < 0)
    return remote_fail(msg, len, ENOTSUP, "%s", why);
  if ((err = heap_exe_learn(pid, h, rl, &file, msg, len)) != 0)
    return err;
  for (i = 0; i < maps->n; i++) {
    const struct remote_map *m = &maps->m[i];
    if (m->inode == file.inode && m->dev_major == file.dev_major &&
        m->dev_minor == file.dev_minor) {
      memset(lj, 0, sizeof(*lj));
      lj->dev_major = m->dev_major, lj->dev_minor = m->dev_minor;
      lj->inode = m->inode;
      snprintf(lj->path, sizeof(lj->path), "%s", m->path);
      return 0;
    }
  }
  return remote_fail(msg, len, ENOTSUP,
                     "check 'same LuaJIT build' failed: the helper process of "
                     "process %d's executable runs a LuaJIT in a file that "
                     "process %d does not map",
                     (int)pid, (int)pid);
}

int heap_remote_snapshot(lua_State *L, int pid, const char *path, int vm,
                         int hosted, struct heap_remote_result *res, char *msg,
                         size_t len)
{
  char lib[320];
  struct remote_maps maps = {NULL, 0};
  struct luajit_file lj;
  struct heap_layout h;
  struct roots_layout rl = {0, {0}};
  struct job j;
  char *tmp;
  int err, fd;
  memset(res, 0, sizeof(*res));
  if (pid <= 0 || pid == (int)getpid())
    return remote_fail(msg, len, EINVAL,
                       pid <= 0
                           ? "no process %d"
                           : "process %d is this one: use memprof.snapshot",
                       pid);
  if ((err = remote_maps_read_target(pid, &maps, msg, len)) != 0)
    return err;
  err = target_luajit(pid, &maps, &lj, msg, len);
  if (err == ENOTSUP && !hosted &&
      heap_host_library(pid, &maps, lib, sizeof(lib))) {
    remote_maps_free(&maps);
    return heap_host_run(lib, pid, path, vm, res, msg, len);
  }
  if (err == ENOTSUP && !hosted)
    err = exe_luajit(pid, &maps, &lj, &h, &rl, msg, len);
  else if (err == 0)
    err = heap_remote_learn(L, &h, &rl, msg, len);
  if (err != 0) {
    remote_maps_free(&maps);
    return err;
  }
  if ((fd = snapshot_open_target(path, &tmp)) < 0) {
    err = snapshot_open_error(msg, len, path, errno);
  } else {
    j.pid = pid, j.vm = vm, j.fd = fd, j.maps = &maps, j.lj = &lj;
    j.h = &h, j.rl = &rl;
    err = run_child(&j, res, msg, len);
    err = snapshot_finish_target(fd, tmp, path, err, msg, len);
  }
  remote_maps_free(&maps);
  return err;
}

static void set_number(lua_State *L, const char *name, double v)
{
  lua_pushnumber(L, v);
  lua_setfield(L, -2, name);
}

int heap_remote_l_snapshot(lua_State *L)
{
  struct heap_remote_result res;
  char msg[700];
  int pid = (int)luaL_checkinteger(L, 1);
  const char *path = luaL_checkstring(L, 2);
  int vm = (int)luaL_optinteger(L, 3, 1), err;
  int hosted = lua_toboolean(L, 4);
  if (vm < 1)
    return luaL_argerror(L, 3, "a VM's number counts from 1");
  err = heap_remote_snapshot(L, pid, path, vm, hosted, &res, msg, sizeof(msg));
  if (err != 0) {
    lua_pushnil(L);
    lua_pushstring(L, msg);
    lua_pushinteger(L, err);
    return 3;
  }
  lua_createtable(L, 0, 6);
  set_number(L, "tries", res.tries);
  set_number(L, "vms", res.vms);
  set_number(L, "pause_ms", (double)res.pause_ns / 1e6);
  set_number(L, "walk_ms", (double)res.walk_ns / 1e6);
  set_number(L, "copied", (double)res.copied);
  lua_pushfstring(L, "%p", (void *)res.main);
  lua_setfield(L, -2, "main_thread");
  return 1;
}
