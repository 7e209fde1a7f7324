/*
** The entry point memprof calls inside a target it attaches to (see
** attach.h). It runs on a thread of the target taken over by ptrace while
** every other thread is stopped, so nothing here may wait for another
** thread, and the target's VM is never entered: no Lua runs in it. What
** this file reads of the target's VM is verified first, and any failure
** leaves the VM as it was.
*/
#define _GNU_SOURCE
#include "attach.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "builtin_memprof.h"
#include "fault.h"
#include "heap_layout.h"
#include "lauxlib.h"
#include "luajit.h"
#include "profiler.h"
#include "remote_proc.h"
#include "safe_read.h"
#include "vm_inspect.h"
#include "vm_learn.h"

/* At most this many VMs are told apart (by the address of their main
** thread), as memprof heap does. */
#define VMS_MAX 64
#define G_WINDOW 1024
/* VMs of the process profiled at once. */
#define ATTACHED_MAX 8

/* The profiles attached in this process, one per VM. Only
** memprof_attach_call touches them, and it is called only while the
** target's other threads are stopped. */
struct attached_vm {
  int active;
  lua_State *L;
  uintptr_t g;
  struct vm_profiles vm; /* Kept: a parked hook stays listed here. */
  struct vm_layout lay;
  int flush; /* trace_lines 'exact': flush the traces at stop too. */
  char path[ATTACH_PATH_MAX], file[ATTACH_PATH_MAX];
};
static struct attached_vm attached[ATTACHED_MAX];

static int attached_count(void)
{
  int i, n = 0;
  for (i = 0; i < ATTACHED_MAX; i++)
    n += attached[i].active;
  return n;
}

/* The profile attached to the VM of main thread L, or NULL. */
static struct attached_vm *attached_to(uintptr_t L)
{
  int i;
  for (i = 0; i < ATTACHED_MAX; i++)
    if (attached[i].active && (uintptr_t)attached[i].L == L)
      return &attached[i];
  return NULL;
}

static int fail(struct attach_call *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct attach_call *c, int err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
  va_end(ap);
  c->err = err;
  return err;
}

/* ---- A safe moment ------------------------------------------------------ */

/* The executable segments of the object that holds lua_newstate: the
** target's LuaJIT, whichever file it is (the executable, libluajit). */
struct code_ranges {
  uintptr_t probe, lo[8], hi[8];
  int n;
};

static int find_code(struct dl_phdr_info *info, size_t size, void *data)
{
  struct code_ranges *r = data;
  int i, holds = 0;
  (void)size;
  for (i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && r->probe >= lo && r->probe < lo + ph->p_memsz)
      holds = 1;
  }
  if (!holds)
    return 0;
  for (i = 0; i < info->dlpi_phnum && r->n < 8; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      r->lo[r->n] = info->dlpi_addr + ph->p_vaddr;
      r->hi[r->n] = r->lo[r->n] + ph->p_memsz;
      r->n++;
    }
  }
  return 1;
}

/* Whether every thread was outside LuaJIT's code (the interpreter, the
** collector, the allocator, an API call) and outside anonymous executable
** memory (compiled traces). */
static int threads_outside(struct attach_call *c,
                           const struct remote_maps *maps)
{
  struct code_ranges r;
  uint32_t i;
  int k;
  int luajit;
  memset(&r, 0, sizeof(r));
  r.probe = (uintptr_t)&lua_newstate;
  dl_iterate_phdr(find_code, &r);
  luajit = r.n;
  /* memprof.so's own code too: a thread in the hook (or in what it calls
  ** from there, which this cannot see) must not find its profile gone. */
  r.probe = (uintptr_t)&memprof_attach_call;
  dl_iterate_phdr(find_code, &r);
  if (luajit == 0)
    return fail(c, ENOTSUP,
                "check 'LuaJIT code' failed: no loaded object holds "
                "lua_newstate (0x%llx)",
                (unsigned long long)r.probe);
  for (i = 0; i < c->npcs && i < ATTACH_PCS_MAX; i++) {
    uintptr_t pc = (uintptr_t)c->pcs[i];
    const struct remote_map *m = remote_maps_find(maps, pc);
    for (k = 0; k < r.n; k++)
      if (pc >= r.lo[k] && pc < r.hi[k])
        return fail(c, EAGAIN, "a thread was running %s code (at 0x%llx)",
                    k < luajit ? "LuaJIT's" : "memprof's",
                    (unsigned long long)pc);
    if (m != NULL && m->inode == 0 && m->path[0] != '[')
      return fail(c, EAGAIN,
                  "a thread was running code outside any file (at 0x%llx: "
                  "compiled Lua?)",
                  (unsigned long long)pc);
  }
  return 0;
}

/* ---- The layout, learned in a throw-away VM of the target's build ------ */

struct learn_job {
  struct heap_layout h;
  int ok, lines; /* lines: the start wants compiled code by line. */
  char err[400];
};

static int learn_in(lua_State *T)
{
  struct learn_job *j = lua_touserdata(T, 1);
  j->ok = heap_layout_learn(T, &j->h, j->err, sizeof(j->err)) &&
          (!j->lines ||
           vm_learn_layout_for(T, 1, &j->h.base, j->err, sizeof(j->err)));
  return 0;
}

static int learn(struct attach_call *c, struct heap_layout *h)
{
  lua_State *(*newstate)(void);
  struct learn_job *j = calloc(1, sizeof(*j));
  lua_State *T;
  int ok;
  if (j == NULL)
    return fail(c, ENOMEM, "out of memory");
  j->lines = c->opts.trace_lines != TRACE_LINES_START;
  *(void **)&newstate = dlsym(RTLD_DEFAULT, "luaL_newstate");
  if (newstate == NULL || (T = newstate()) == NULL) {
    free(j);
    return fail(c, ENOTSUP,
                "check 'throw-away VM' failed: luaL_newstate is not exported "
                "by the target or made no VM");
  }
  if (lua_cpcall(T, learn_in, j) != 0 && j->err[0] == '\0')
    snprintf(j->err, sizeof(j->err), "learning the layout raised %s",
             lua_isstring(T, -1) ? lua_tostring(T, -1) : "an error");
  lua_close(T);
  ok = j->ok;
  if (ok)
    *h = j->h;
  else
    fail(c, ENOTSUP, "cannot verify the target's LuaJIT layout: %s", j->err);
  free(j);
  return ok ? 0 : c->err;
}

/* ---- The VMs of this process, by structure ----------------------------- */

static int scannable(const struct remote_map *m)
{
  if (m->perms[0] != 'r' || m->perms[1] != 'w' || m->perms[3] != 'p')
    return 0;
  /* Anonymous memory and the brk heap: no file page that may be past the
  ** end of its file (a read there would raise SIGBUS). */
  return m->inode == 0 &&
         (m->path[0] == '\0' || strcmp(m->path, "[heap]") == 0 ||
          strncmp(m->path, "[anon:", 6) == 0);
}

static int readable(const struct remote_maps *maps, uintptr_t a, size_t n)
{
  const struct remote_map *m = remote_maps_find(maps, a);
  return m != NULL && scannable(m) && a + n <= m->hi;
}

#define PAGE 4096
#define PM_BATCH 512
#define PM_IN ((1ULL << 63) | (1ULL << 62)) /* Present or swapped. */

/* Whether the allocator of the VM whose global_State is at g could be a
** live VM's: code of a loaded file, and if memprof.so's, one of its hooks.
** A VM closed in this process (the throw-away VMs memprof learns in) may
** still look whole in freed memory: its allocator's slot overwritten by
** the C library's free lists, or one of memprof's own allocators. */
static int live_allocator(const struct remote_maps *maps,
                          const struct heap_layout *h, uintptr_t g)
{
  uintptr_t f;
  const struct remote_map *m;
  Dl_info at, self;
  if (h->base.g_allocf + sizeof(f) > G_WINDOW)
    return 1; /* Past what the scan read: checked when the VM is picked. */
  f = *(const uintptr_t *)(g + h->base.g_allocf);
  m = remote_maps_find(maps, f);
  if (m == NULL || m->perms[2] != 'x' || m->inode == 0)
    return 0;
  return dladdr((void *)f, &at) == 0 ||
         dladdr((void *)&memprof_attach_call, &self) == 0 ||
         at.dli_fbase != self.dli_fbase || profiler_is_hook((lua_Alloc)f);
}

/* The main threads in [lo, hi): a thread object whose global_State names
** it as its main thread, with an allocator a live VM could have. */
static int scan_range(const struct remote_maps *maps,
                      const struct heap_layout *h, uintptr_t lo, uintptr_t hi,
                      uintptr_t *out, int n)
{
  uintptr_t a;
  for (a = lo; a + 64 <= hi && n < VMS_MAX; a += 8) {
    uintptr_t g;
    if (*(const uint8_t *)(a + h->base.gct) != GCT_THREAD)
      continue;
    g = vm_load_ref(&h->base, a + h->base.L_glref);
    if ((g & 7) == 0 && g != 0 && readable(maps, g, G_WINDOW) &&
        vm_load_ref(&h->base, g + h->g_mainth) == a &&
        live_allocator(maps, h, g))
      out[n++] = a;
  }
  return n;
}

/* The main threads of the process's anonymous writable memory, in the
** pages that hold anything (present or swapped, from pagemap: untouched
** memory is not made resident by the scan). Nothing is allocated or freed
** during the scan, so the mappings read before it hold. */
static int find_vms(const struct remote_maps *maps, const struct heap_layout *h,
                    uintptr_t *out)
{
  uint64_t *pm = malloc(PM_BATCH * sizeof(*pm)); /* Freed: not kept. */
  size_t r;
  int n = 0, fd;
  if (pm == NULL)
    return 0;
  fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  for (r = 0; r < maps->n && n < VMS_MAX; r++) {
    const struct remote_map *m = &maps->m[r];
    uintptr_t at = m->lo;
    if (!scannable(m) || m->hi - m->lo < 64)
      continue;
    while (at < m->hi && n < VMS_MAX) {
      size_t pages = (m->hi - at) / PAGE, i, run = 0;
      if (pages > PM_BATCH)
        pages = PM_BATCH;
      if (fd < 0 || pread(fd, pm, pages * sizeof(pm[0]),
                          (off_t)(at / PAGE * sizeof(pm[0]))) !=
                        (ssize_t)(pages * sizeof(pm[0]))) {
        n = scan_range(maps, h, at, m->hi, out, n); /* No pagemap: all. */
        break;
      }
      for (i = 0; i <= pages; i++) {
        if (i < pages && (pm[i] & PM_IN) != 0) {
          run++;
        } else if (run > 0) {
          uintptr_t lo = at + (i - run) * PAGE;
          n = scan_range(maps, h, lo, lo + run * PAGE, out, n);
          run = 0;
        }
      }
      at += pages * PAGE;
    }
  }
  if (fd >= 0)
    close(fd);
  free(pm);
  return n;
}

/* The VM's state as the checks read it: what the profile relies on. */
static int check_vm(struct attach_call *c, const struct vm_layout *lay,
                    lua_State *L, uintptr_t *gout)
{
  uintptr_t l = (uintptr_t)L, g, base, top, stack, maxstack, af, ad;
  uint32_t size;
  int32_t state;
  void *ud = NULL;
  lua_Alloc f;
  Dl_info info;
  if (!vm_ref(lay, 1, l + lay->L_glref, &g) || g == 0)
    return fail(c, ENOTSUP, "check 'global state' failed: L+%u is unreadable",
                lay->L_glref);
  f = lua_getallocf(L, &ud);
  if (!vm_ptr(1, g + lay->g_allocf, &af) ||
      !vm_ptr(1, g + lay->g_allocd, &ad) || af != (uintptr_t)f ||
      ad != (uintptr_t)ud || dladdr((void *)f, &info) == 0)
    return fail(c, ENOTSUP,
                "check 'allocator' failed: g+%u is no function of a loaded "
                "object",
                lay->g_allocf);
  if (!vm_ptr(1, l + lay->L_base, &base) || !vm_ptr(1, l + lay->L_top, &top) ||
      !vm_ref(lay, 1, l + lay->L_stack, &stack) ||
      !vm_ref(lay, 1, l + lay->L_maxstack, &maxstack) ||
      !vm_u32(1, l + lay->L_stacksize, &size) ||
      maxstack !=
          stack + TVALUE_SIZE * ((uintptr_t)size - 1 - lay->stack_extra) ||
      base < stack || top < base || top > maxstack)
    return fail(c, ENOTSUP,
                "check 'main thread stack' failed: stack, base, top and "
                "maxstack are inconsistent");
  if (!vm_u32(1, g + lay->g_vmstate, (uint32_t *)&state))
    return fail(c, ENOTSUP, "check 'VM state' failed: g+%u is unreadable",
                lay->g_vmstate);
  if (state != lay->st_c)
    return fail(c, EAGAIN, "the VM was not in C code (vmstate %d: %s)",
                (int)state, vm_state_what(lay, state));
  *gout = g;
  return 0;
}

/* Whether the object of info is a memprof.so (another file than this
** one): it exports luaopen_memprof itself. */
static int another_memprof(const Dl_info *info)
{
  Dl_info at;
  void *h, *open;
  int found = 0;
  if (info->dli_fname == NULL ||
      (h = dlopen(info->dli_fname, RTLD_NOW | RTLD_NOLOAD)) == NULL)
    return 0;
  open = dlsym(h, "luaopen_memprof");
  found =
      open != NULL && dladdr(open, &at) != 0 && at.dli_fbase == info->dli_fbase;
  dlclose(h);
  return found;
}

/* Why a profile may not start in L's VM: one of ours or another runs. */
static int check_free(struct attach_call *c, lua_State *L)
{
  lua_Alloc f = lua_getallocf(L, NULL);
  Dl_info info;
  if (profiler_is_hook(f))
    return fail(c, EBUSY,
                "a profile started by the program's own code runs in this VM "
                "(its allocator is memprof's hook); stop it there first");
  if (dladdr((void *)f, &info) != 0 && another_memprof(&info))
    return fail(c, EBUSY,
                "a profile of another memprof (%s) runs in this VM; stop it "
                "first",
                info.dli_fname);
  if (builtin_memprof_state(L) == BUILTIN_RUNNING)
    return fail(c, EBUSY, "the VM's built-in misc.memprof is running");
  return 0;
}

/* ---- Traces ------------------------------------------------------------ */

/* Throws the traces away (trace_lines 'exact': the next ones are compiled
** with per-line snapshots), in a protected call; the VM's current thread
** is put back, since a protected call from C makes L the current one. */
static void flush_traces(lua_State *L, uintptr_t g, const struct vm_layout *lay)
{
  uintptr_t cur = 0;
  int saved = vm_ptr(1, g + lay->g_cur_L, &cur);
  static int cold; /* Its address: start the hot counters again. */
  if (lua_cpcall(L, lifecycle_flush_traces,
                 lifecycle_jit_on(g, lay) ? &cold : NULL) != 0)
    lua_pop(L, 1);
  if (saved)
    memcpy((void *)(g + lay->g_cur_L), &cur, lay->ref_size);
}

/* ---- Start and stop ---------------------------------------------------- */

static int trace_lines_ok(struct attach_call *c, const struct vm_layout *lay)
{
  const struct vm_trace_layout *tl = &lay->tl;
  int mode = c->opts.trace_lines;
  if ((mode == TRACE_LINES_RESUME || mode == TRACE_LINES_EXACT ||
       mode == TRACE_LINES_WALK) &&
      !tl->ok)
    return fail(c, ENOTSUP,
                "option 'trace_lines' is not supported by this build: %s",
                tl->why);
  if (mode == TRACE_LINES_EXACT && !tl->prof_ok)
    return fail(c, ENOTSUP,
                "option 'trace_lines' = 'exact' is not supported by this "
                "build: %s",
                tl->prof_why);
  if (mode == TRACE_LINES_WALK && !tl->walk_ok)
    return fail(c, ENOTSUP,
                "option 'trace_lines' = 'walk' is not supported by this "
                "build: jit.vmdef or jit.util does not name the table "
                "helpers and the ops the walk needs");
  return 0;
}

static int compare_addr(const void *a, const void *b)
{
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* The main thread of VM number c->vm (from 1), found and checked. */
static int pick_vm(struct attach_call *c, const struct heap_layout *h,
                   const struct remote_maps *maps, lua_State **L, uintptr_t *g)
{
  uintptr_t vms[VMS_MAX];
  int n = find_vms(maps, h, vms);
  c->vms = n;
  if (n == 0)
    return fail(c, ENOTSUP,
                "check 'find VMs' failed: no thread in the process's memory "
                "is the main thread of its global_State");
  qsort(vms, (size_t)n, sizeof(vms[0]), compare_addr);
  if (c->vm < 1 || c->vm > n)
    return fail(c, EINVAL, "the process has %d LuaJIT VM%s, not %d", n,
                n == 1 ? "" : "s", (int)c->vm);
  *L = (lua_State *)vms[c->vm - 1];
  c->main_thread = (uint64_t)vms[c->vm - 1];
  return check_vm(c, &h->base, *L, g);
}

/* A free slot for a profile of the VM of main thread L, or why not. */
static struct attached_vm *slot_for(struct attach_call *c, lua_State *L)
{
  struct attached_vm *a = attached_to((uintptr_t)L), *free_slot = NULL;
  int i;
  if (a != NULL) {
    fail(c, EALREADY,
         "memprof is attached already (its profile to %s runs): memprof "
         "detach first",
         a->file);
    return NULL;
  }
  for (i = 0; i < ATTACHED_MAX; i++) {
    if (!attached[i].active) {
      if (free_slot == NULL)
        free_slot = &attached[i];
    } else if (strcmp(attached[i].path, c->path) == 0) {
      fail(c, EBUSY,
           "%s is the profile of another VM attached (main thread %p): "
           "give this one another file (-o)",
           attached[i].file, (void *)attached[i].L);
      return NULL;
    }
  }
  if (free_slot == NULL)
    fail(c, EBUSY, "%d VMs of this process are attached already, the most",
         ATTACHED_MAX);
  else
    memset(free_slot, 0, sizeof(*free_slot));
  return free_slot;
}

static int start(struct attach_call *c, const struct remote_maps *maps)
{
  struct heap_layout *h;
  struct attached_vm *a = NULL;
  lua_State *L;
  uintptr_t g;
  int err = 0;
  struct timespec t;
  if ((h = calloc(1, sizeof(*h))) == NULL)
    return fail(c, ENOMEM, "out of memory");
  if ((err = learn(c, h)) != 0 || (err = pick_vm(c, h, maps, &L, &g)) != 0)
    goto out;
  if ((a = slot_for(c, L)) == NULL) {
    err = c->err;
    goto out;
  }
  if ((err = check_free(c, L)) != 0 || (err = trace_lines_ok(c, &h->base)) != 0)
    goto out;
  if (lifecycle_may_start(L, &a->vm) != LIFE_OK) {
    err = fail(c, EBUSY, "a profile of this module runs in the VM already");
    goto out;
  }
  /* 'exact' (the default of a full profile): traces compiled from now on
  ** keep a snapshot per line; those compiled before go first. */
  a->flush =
      lifecycle_trace_lines_mode(&h->base, &c->opts) == TRACE_LINES_EXACT &&
      *(const int32_t *)(g + h->base.tl.g_prof_mode) == 0;
  if (a->flush)
    flush_traces(L, g, &h->base);
  if (lifecycle_start(L, &a->vm, &h->base, &c->opts, c->path, 0, &err) !=
      LIFE_OK) {
    err = fail(c, err, "%s: %s", c->path, strerror(err));
    goto out;
  }
  clock_gettime(CLOCK_MONOTONIC, &t);
  c->started_ns = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
  a->active = 1;
  a->L = L;
  a->g = g;
  a->lay = h->base;
  {
    char *file = lifecycle_file_name(c->path);
    snprintf(c->file, sizeof(c->file), "%s", file != NULL ? file : c->path);
    snprintf(a->file, sizeof(a->file), "%s", c->file);
    snprintf(a->path, sizeof(a->path), "%s", c->path);
    free(file);
  }
out:
  free(h);
  return err;
}

/* Whether the VM attached to is still there: its main thread still names
** the same global_State, which names it as its main thread. */
static int still_there(const struct attached_vm *a)
{
  uintptr_t g = 0, main = 0;
  const struct vm_layout *lay = &a->lay;
  return vm_ref(lay, 1, (uintptr_t)a->L + lay->L_glref, &g) && g == a->g &&
         vm_ptr(1, g + lay->g_allocf, &main);
}

/* The profile a stop names: of main thread c->which, of VM number c->vm,
** or the first attached. */
static struct attached_vm *stop_which(struct attach_call *c,
                                      const struct remote_maps *maps)
{
  struct attached_vm *a = NULL;
  int i;
  if (attached_count() == 0) {
    fail(c, ENOENT, "memprof is not attached to this process");
    return NULL;
  }
  if (c->which == 0 && c->vm > 0) {
    struct heap_layout *h = calloc(1, sizeof(*h));
    lua_State *L;
    uintptr_t g;
    if (h == NULL) {
      fail(c, ENOMEM, "out of memory");
      return NULL;
    }
    if (learn(c, h) == 0 && pick_vm(c, h, maps, &L, &g) != ENOTSUP &&
        c->main_thread != 0)
      c->which = c->main_thread;
    free(h);
    if (c->which == 0)
      return NULL;
    c->err = 0;
  }
  for (i = 0; i < ATTACHED_MAX && a == NULL; i++)
    if (attached[i].active &&
        (c->which == 0 || (uintptr_t)attached[i].L == c->which))
      a = &attached[i];
  if (a == NULL)
    fail(c, ENOENT, "memprof is not attached to VM %d of this process",
         (int)c->vm);
  return a;
}

static int stop(struct attach_call *c, const struct remote_maps *maps)
{
  struct life_ended ended = {0, NULL, 0};
  enum life_status st;
  uintptr_t g;
  struct attached_vm *a = stop_which(c, maps);
  if (a == NULL)
    return c->err;
  if (!still_there(a))
    return fail(c, ENOTSUP,
                "the VM attached to is gone (closed?); its profile is "
                "completed when the process exits");
  c->main_thread = (uint64_t)(uintptr_t)a->L;
  if (check_vm(c, &a->lay, a->L, &g) != 0)
    return c->err;
  /* A thread stopped in what the hook calls (the real allocator, the C
  ** library) is outside memprof.so's code, which threads_outside checks,
  ** and would return into a profile freed here. */
  if (lifecycle_hook_busy(&a->vm))
    return fail(c, EAGAIN,
                "a thread was inside memprof's allocator hook of the VM");
  st = lifecycle_stop(a->L, &a->vm, 0, &ended);
  a->active = 0;
  if (a->flush)
    flush_traces(a->L, g, &a->lay);
  snprintf(c->file, sizeof(c->file), "%s", a->file);
  free(ended.path);
  switch (st) {
  case LIFE_OK:
    return 0;
  case LIFE_MAX_BYTES:
    return fail(c, 0, "the profile had reached max_bytes (%llu)",
                (unsigned long long)ended.max_bytes);
  case LIFE_FILE_ERROR:
    return fail(c, ended.err, "%s: %s", c->file, strerror(ended.err));
  case LIFE_DETACHED:
    return fail(c, ENOTSUP,
                "another allocator hook took memprof's out of the VM's "
                "allocator chain during the profile; the profile ended then");
  default:
    return fail(c, ENOENT,
                "no profile ran (in a child after fork(), the profile stays "
                "with the parent)");
  }
}

/* ---- What stays resident ----------------------------------------------- */

/* memprof.so stays loaded, inactive, after a detach (or a failed attach):
** the pages of its code and read-only data that the call touched are
** dropped from the process's resident memory (read again from the file if
** they run again). Only whole pages of segments without write permission
** that no writable segment shares: a written page of a private file
** mapping (data, relocations) must never be dropped. */
static int shed_read_only(struct dl_phdr_info *info, size_t size, void *data)
{
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), self = (uintptr_t)data;
  uintptr_t wlo = UINTPTR_MAX, whi = 0;
  int i, ours = 0;
  (void)size;
  for (i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (ph->p_type != PT_LOAD)
      continue;
    ours |= self >= lo && self < hi;
    if (ph->p_flags & PF_W) {
      wlo = lo / page * page < wlo ? lo / page * page : wlo;
      whi = (hi + page - 1) / page * page > whi ? (hi + page - 1) / page * page
                                                : whi;
    }
  }
  for (i = 0; ours && i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    lo = (lo + page - 1) / page * page;
    hi = hi / page * page;
    if (ph->p_type == PT_LOAD && !(ph->p_flags & PF_W) && lo < hi &&
        (hi <= wlo || lo >= whi))
      madvise((void *)lo, hi - lo, MADV_DONTNEED);
  }
  return ours;
}

__attribute__((visibility("default"))) int
memprof_attach_call(struct attach_call *c)
{
  struct remote_maps maps = {NULL, 0};
  int err;
  if (c == NULL || c->magic != ATTACH_MAGIC || c->size != sizeof(*c))
    return EINVAL;
  c->err = 0;
  c->msg[0] = '\0';
  if (fault_attach_crash())
    raise(SIGSEGV);
  lifecycle_init_process();
  if (c->op == ATTACH_STATUS) {
    int i;
    c->attached = attached_count();
    for (i = ATTACHED_MAX - 1; i >= 0; i--)
      if (attached[i].active) {
        c->main_thread = (uint64_t)(uintptr_t)attached[i].L;
        snprintf(c->file, sizeof(c->file), "%s", attached[i].file);
      }
    return c->err = c->attached > 0 ? 0 : ENOENT;
  }
  if ((err = remote_maps_read(0, &maps)) != 0)
    return fail(c, err, "cannot read /proc/self/maps: %s", strerror(err));
  if ((err = threads_outside(c, &maps)) == 0)
    err = c->op == ATTACH_START ? start(c, &maps)
          : c->op == ATTACH_STOP
              ? stop(c, &maps)
              : fail(c, EINVAL, "unknown request %d", (int)c->op);
  remote_maps_free(&maps);
  c->attached = attached_count();
  if (c->attached == 0) {
    dl_iterate_phdr(shed_read_only, (void *)(uintptr_t)&memprof_attach_call);
#ifdef __GLIBC__
    /* What the call and the profile allocated is freed by now; the C
    ** library keeps the pages it freed resident unless told. */
    malloc_trim(0);
#endif
    safe_read_release();
  }
  c->err = err;
  return err;
}
