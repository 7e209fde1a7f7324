/*
** The life of a profile (see lifecycle.h).
**
** A profile is a struct profiler, malloc'd at start; it is the `ud` of the
** allocator hook that records it (hook.c). Besides stop, three ways out
** are handled: lua_close (the binding's registry sentinel calls
** lifecycle_close from its __gc, before the package library unloads C
** modules; the module is also pinned in memory), exit() without lua_close
** (an atexit handler completes every open stream), and fork() (the child
** never writes to the parent's file: a profile whose path names the process
** with "%p" goes on in the child into a file of the child's own, from a
** fresh stream; any other profile drops the child's events).
**
** The allocator chain. start wraps whatever allocator the VM has and stop
** puts it back, but other code wraps the allocator too. The built-in
** misc.memprof of Tarantool's fork (its lj_memprof.c) does: at its start it
** keeps the allocator it finds as its "original" and installs its own with
** that original's ud; at its stop, and first thing in lua_close, it puts
** that original back without looking at what is installed. So:
**
**  - A stop puts our original back only while our hook is the VM's
**    allocator. When another hook sits above ours, that hook calls ours
**    and will put ours back at its own stop: ours stays installed, its
**    profile is completed, and from then on it only forwards (a halted
**    profiler does nothing else: profiler.h). Such a hook is "parked": its
**    memory is never freed while something may call it. Once it is the
**    VM's allocator again, the next start takes its place in the chain (it
**    is taken out, and the new hook wraps what it wrapped) instead of
**    stacking on it, and lua_close takes it out likewise. A hook still
**    below another one when the VM is closed stays allocated: the VM frees
**    its last blocks through it.
**
**  - Whether a profile runs is kept per VM (struct vm_profiles), not
**    deduced from lua_getallocf, so that is_running and stop agree while a
**    hook sits above ours.
**
**  - A hook that another one took out of the chain (the VM's allocator is
**    again exactly the one our hook wraps, so nothing can reach ours) is
**    noticed at the next start, stop or is_running: its profile is
**    completed then, is_running says false, and stop says what happened.
**    The hook is parked, not freed: whoever held it might install it again.
**
**  - No profile starts while the built-in misc.memprof runs (see
**    builtin_memprof.c for why, and how that is told).
*/
#define _GNU_SOURCE
#include "lifecycle.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builtin_memprof.h"
#include "lauxlib.h"
#include "luajit.h"
#include "profiler.h"
#include "snapshot.h"
#include "stream_format.h"
#include "vm_inspect.h"
#include "vm_learn.h"

#define WRITE_BUFFER_SIZE (1u << 20)

/* One of our hooks: the profiler is its ud, hence the first member. */
struct chain_link {
  struct profiler p;
  struct chain_link *next; /* In vm_profiles.parked. */
};

/* ---- Profilers of this process ---------------------------------------- */

static pthread_mutex_t running_lock = PTHREAD_MUTEX_INITIALIZER;
static struct profiler *running_list;
static pthread_once_t process_once = PTHREAD_ONCE_INIT;

static void list_add(struct profiler *p)
{
  pthread_mutex_lock(&running_lock);
  p->next = running_list;
  running_list = p;
  pthread_mutex_unlock(&running_lock);
}

static void list_remove(struct profiler *p)
{
  struct profiler **pp;
  pthread_mutex_lock(&running_lock);
  for (pp = &running_list; *pp != NULL; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  pthread_mutex_unlock(&running_lock);
}

/* exit() without lua_close: complete every stream this process owns. The
** hooks stay installed (the VMs still exist) and only forward from now on. */
static void finish_all_at_exit(void)
{
  struct profiler *p;
  pthread_mutex_lock(&running_lock);
  for (p = running_list; p != NULL; p = p->next)
    if (p->fork_generation == profiler_fork_generation && p->out.fd >= 0)
      profiler_finish(p);
  pthread_mutex_unlock(&running_lock);
}

/* No lock is held by another thread across fork(): the child would never
** see it released. */
static void before_fork(void)
{
  vm_learn_lock();
  builtin_memprof_lock();
  pthread_mutex_lock(&running_lock);
}

static void after_fork_parent(void)
{
  pthread_mutex_unlock(&running_lock);
  builtin_memprof_unlock();
  vm_learn_unlock();
}

static int follow_into_child(struct profiler *p);

static void after_fork_child(void)
{
  struct profiler *p;
  unsigned parent = profiler_fork_generation++;
  safe_read_forget_pid();
  builtin_memprof_unlock();
  vm_learn_unlock();
  /* The child has one thread, this one: no hook runs until we return.
  ** A profile that does not go on in the child stops recording here, so
  ** that the hooks need to look at p->state only (see forward_only). */
  for (p = running_list; p != NULL; p = p->next) {
    if (p->fork_generation != parent || p->state != PROFILER_RECORDING)
      continue;
    if (p->path_template != NULL)
      p->error = follow_into_child(p);
    if (p->path_template == NULL || p->error != 0)
      p->state = PROFILER_HALTED;
  }
  pthread_mutex_unlock(&running_lock);
}

static void setup_process(void)
{
  writer_tables_init();
  atexit(finish_all_at_exit);
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void lifecycle_init_process(void)
{
  pthread_once(&process_once, setup_process);
}

/* ---- Profiles ----------------------------------------------------------- */

/* Writes the file name of `path` for process id `digits` to out (if not
** NULL) and returns its length. */
static size_t expand_path(const char *path, const char *digits, char *out)
{
  size_t n = 0, d = strlen(digits);
  const char *c;
  for (c = path; *c != '\0'; c++) {
    if (c[0] == '%' && c[1] == 'p') {
      if (out != NULL)
        memcpy(out + n, digits, d);
      n += d;
      c++;
      continue;
    }
    if (out != NULL)
      out[n] = *c;
    n++;
    if (c[0] == '%' && c[1] == '%')
      c++;
  }
  return n;
}

char *lifecycle_file_name(const char *path)
{
  char digits[24];
  char *out;
  size_t n;
  snprintf(digits, sizeof(digits), "%ld", (long)getpid());
  n = expand_path(path, digits, NULL);
  if ((out = malloc(n + 1)) == NULL)
    return NULL;
  expand_path(path, digits, out);
  out[n] = '\0';
  return out;
}

int lifecycle_path_follows_fork(const char *path)
{
  /* The file name depends on the process id exactly when it has one. */
  return expand_path(path, "", NULL) != expand_path(path, "0", NULL);
}

/* Opens p's file (p->path) and sets up its writer. Returns 0 or errno. */
static int open_stream(struct profiler *p)
{
  int err;
  /* Without O_NONBLOCK, opening a FIFO that nobody reads would wait for a
  ** reader for ever; with it, that open fails at once (ENXIO). It stays
  ** non-blocking (our own open file; it changes nothing for a regular
  ** one): a reader that stops reading fails the profile after
  ** the stall bound (writer_write_all) instead of holding the writer,
  ** and then the hook, for ever. */
  int fd = open(p->path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC | O_NONBLOCK,
                0644);
  if (fd < 0)
    return errno;
  if ((err = writer_init(&p->out, fd, WRITE_BUFFER_SIZE, 1)) != 0) {
    close(fd);
    return err;
  }
  return 0;
}

/* What a profile holds besides the hook's fields: a parked hook needs none
** of it (it only forwards). */
static void free_profile_data(struct profiler *p)
{
  trace_lines_free(&p->tlines);
  symbols_free(&p->syms);
  stacks_free(&p->stacks);
  live_free(&p->live);
  places_free(&p->model);
  free(p->path);
  free(p->path_template);
  p->path = p->path_template = NULL;
}

/* Empty tables of what the stream has described (symbols and stacks) and,
** with sampling, of the live sampled blocks. Returns 0 or ENOMEM. */
static int fresh_tables(struct profiler *p)
{
  if (symbols_init(&p->syms) != 0 ||
      (p->stack_depth > 0 && stacks_init(&p->stacks) != 0) ||
      (p->keeps_model && live_init(&p->live) != 0) ||
      (p->keeps_model && places_init(&p->model) != 0) ||
      trace_lines_init(&p->tlines, p->trace_lines != TRACE_LINES_START) != 0 ||
      vm_learn_name_builtins(&p->syms) != 0)
    return ENOMEM;
  if (p->keeps_model && p->stack_depth > 0)
    p->stacks.model = &p->model;
  p->tlines.walk = p->trace_lines == TRACE_LINES_WALK;
  p->live_full = 0;
  return 0;
}

/* Writes the stream's prologue into the file before the profile records
** (the writer thread writes it, and this waits): a process that dies at
** once leaves a profile with no event, never an empty file. A write
** error shows at stop. */
static void write_prologue_now(struct profiler *p)
{
  profiler_write_prologue(p);
  writer_sync(&p->out);
}

/*
** In a child after fork(), a profile whose path names the process starts
** again into the child's own file: a new stream (headers, symbols described
** anew, stack ids from 1, time from now) with a new writer, as the parent's
** buffers and writer thread are not the child's. The parent's descriptor
** is closed here; the parent's file is untouched. Returns 0 or errno (the
** child then records nothing and its stop reports the error).
*/
static int follow_into_child(struct profiler *p)
{
  char *path = lifecycle_file_name(p->path_template);
  int err;
  writer_abandon(&p->out);
  trace_lines_free(&p->tlines);
  symbols_free(&p->syms);
  stacks_free(&p->stacks);
  live_free(&p->live);    /* The parent's sampled blocks are not the child's. */
  places_free(&p->model); /* Nor is what it allocated. */
  memset(&p->stats, 0, sizeof(p->stats));
  if (p->sampler.mean != 0)
    sampler_init(&p->sampler, p->sampler.mean,
                 sampler_child_seed(p->sampler.seed, (uint64_t)getpid()));
  if (path == NULL)
    return ENOMEM;
  free(p->path);
  p->path = path;
  if ((err = fresh_tables(p)) != 0 || (err = open_stream(p)) != 0)
    return err;
  memset(&p->last_location, 0, sizeof(p->last_location));
  p->capped = 0;
  p->cut_at = 0;
  p->clock_countdown = 0;
  p->last_mark = 0;
  p->fork_generation = profiler_fork_generation;
  write_prologue_now(p);
  return 0;
}

static void free_link(struct chain_link *l)
{
  free_profile_data(&l->p);
  free(l);
}

/* A full profile's default (docs/builds.md: the cost of each mode). */
#define TRACE_LINES_FULL TRACE_LINES_EXACT

/*
** How events of compiled code are attributed: as asked, else 'exact' for a
** full profile (its cost to the program is in docs/builds.md) and 'resume'
** for a sampled one, which changes nothing in the compiled code; each
** limited to what the build supports (memprof.info().trace_lines).
*/
int lifecycle_trace_lines_mode(const struct vm_layout *lay,
                               const struct profile_options *opts)
{
  int mode = opts->trace_lines;
  if (mode == TRACE_LINES_DEFAULT)
    mode = opts->sample_bytes > 0 ? TRACE_LINES_RESUME : TRACE_LINES_FULL;
  if (mode == TRACE_LINES_EXACT && !lay->tl.prof_ok)
    mode = TRACE_LINES_RESUME;
  if (mode == TRACE_LINES_WALK && !lay->tl.walk_ok)
    mode = TRACE_LINES_RESUME;
  if (mode != TRACE_LINES_START && !lay->tl.ok)
    mode = TRACE_LINES_START;
  return mode;
}

/* The note of how events of compiled code are attributed (mode, as
** trace_lines_mode chose it) and why, when that is not what was asked. */
static uint8_t attribution_note(const struct vm_layout *lay,
                                const struct profile_options *opts, int mode)
{
  int asked = opts->trace_lines, why = NOTE_WHY_ASKED;
  if (asked == TRACE_LINES_DEFAULT)
    asked = opts->sample_bytes > 0 ? TRACE_LINES_RESUME : TRACE_LINES_FULL;
  if (mode != asked)
    why = !lay->tl.ok
              ? (lay->tl.no_mcofs ? NOTE_WHY_NO_MCOFS : NOTE_WHY_NOT_VERIFIED)
          : asked == TRACE_LINES_WALK ? NOTE_WHY_NOT_VERIFIED
                                      : NOTE_WHY_NO_PROF_MODE;
  if (mode == TRACE_LINES_START)
    return (uint8_t)(NOTE_COMPILED_AT_START + 4 * why);
  return (uint8_t)((mode == TRACE_LINES_EXACT  ? NOTE_COMPILED_EXACT
                    : mode == TRACE_LINES_WALK ? NOTE_COMPILED_WALK
                                               : NOTE_COMPILED_RESUME) +
                   4 * why);
}

typedef int (*setmode_fn)(lua_State *L, int idx, int mode);

/* The flush, and with `cold` the hot counters started again (engine off,
** then on). luaJIT_setmode raises in a finalizer: callers run this in a
** protected call. */
static void flush_in(lua_State *L, int cold)
{
  setmode_fn set;
  *(void **)&set = dlsym(RTLD_DEFAULT, "luaJIT_setmode");
  if (set == NULL)
    return;
  set(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_FLUSH);
  if (cold) {
    set(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    set(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_ON);
  }
}

int lifecycle_flush_traces(lua_State *L)
{
  flush_in(L, lua_touserdata(L, 1) != NULL);
  return 0;
}

int lifecycle_jit_on(uintptr_t g, const struct vm_layout *lay)
{
  uint32_t flags;
  return lay->tl.jit_on_ok && vm_u32(1, g + lay->tl.g_jit_on, &flags) &&
         (flags & 1);
}

/* Throws away every trace, so that the next ones are compiled with the
** current J->prof_mode, through the closure of lifecycle_collector at
** stack index `collector` (made when the module was loaded: calling it
** allocates nothing); none without it. LuaJIT refuses a flush in a
** finalizer (a stop at lua_close) with an error, caught here: the traces
** then stay, and their profiler checks only cost a test each. */
static void flush_traces(lua_State *L, int collector, int cold)
{
  if (collector == 0 || lua_tocfunction(L, collector) != lifecycle_collector)
    return;
  lua_pushvalue(L, collector);
  lua_pushboolean(L, 1);
  lua_pushboolean(L, cold);
  if (lua_pcall(L, 2, 0, 0) != 0)
    lua_pop(L, 1);
}

/* 'exact': per-line snapshots, as LuaJIT's line profiler asks for them,
** unless the program runs that profiler (its mode is left alone). */
static void set_prof_mode(lua_State *L, struct profiler *p, int collector)
{
  int32_t *mode = (int32_t *)(p->g + p->layout.tl.g_prof_mode);
  if (p->trace_lines != TRACE_LINES_EXACT)
    return;
  if (*mode != 0) { /* Per-line snapshots only in the program's 'l'. */
    if (*mode != 'l')
      p->attribution = NOTE_COMPILED_RESUME + 4 * NOTE_WHY_PROGRAM_PROF;
    return;
  }
  *mode = 'l';
  p->prof_mode_set = 1;
  flush_traces(L, collector, lifecycle_jit_on(p->g, &p->layout));
}

/* The VM states whose events the hook locates (their frames, or a trace
** exit): a bit per state slot (hook.c, vm_state_internal). */
static uint32_t located_states(const struct vm_layout *lay)
{
  uint32_t mask = 0;
  unsigned k;
  for (k = 0; k < VM_STATE_SLOTS; k++)
    if (lay->state_class[k] == STATE_WALK || lay->state_class[k] == STATE_EXIT)
      mask |= (uint32_t)1 << k;
  return mask;
}
/* At stop, once the profile is complete (the flush is no event of it):
** the VM's own mode again, if it is still ours. A VM being closed gets
** its mode back, and no flush: its traces go with it. */
static void restore_prof_mode(lua_State *L, struct vm_profiles *vm,
                              struct profiler *p, int collector)
{
  int32_t *mode = (int32_t *)(p->g + p->layout.tl.g_prof_mode);
  if (!p->prof_mode_set)
    return;
  p->prof_mode_set = 0;
  if (*mode == 'l') {
    *mode = 0;
    if (!vm->closing && collector != 0)
      flush_traces(L, collector, lifecycle_jit_on(p->g, &p->layout));
  }
}

static struct chain_link *new_link(lua_State *L, const struct vm_layout *lay,
                                   const struct profile_options *opts,
                                   const char *path, int *err)
{
  struct chain_link *l = calloc(1, sizeof(*l));
  struct profiler *p = l != NULL ? &l->p : NULL;
  if (p == NULL)
    goto no_memory;
  p->layout = *lay;
  p->out.fd = -1;
  p->state = PROFILER_HALTED; /* Until it is installed. */
  p->stack_depth = opts->stack_depth;
  p->timestamps = opts->timestamps;
  p->max_bytes = opts->max_bytes;
  p->collect_at_stop = opts->collect_at_stop;
  /* Only the extended format can say that its events are sampled. */
  p->snapshots = opts->snapshots;
  p->keeps_model = opts->snapshots || opts->sample_bytes > 0;
  /* The model is kept by the sampling hooks, of the extended format. */
  p->extended = opts->stack_depth > 0 || opts->timestamps ||
                opts->collect_at_stop || p->keeps_model;
  /* Tarantool's format has no kinds of internal events. */
  if (!p->extended)
    memset(p->layout.internal_kind, INTERNAL_UNKNOWN,
           sizeof(p->layout.internal_kind));
  p->trace_lines = lifecycle_trace_lines_mode(lay, opts);
  p->attribution = attribution_note(lay, opts, p->trace_lines);
  if (opts->sample_bytes > 0)
    sampler_init(&p->sampler, opts->sample_bytes,
                 opts->has_seed ? opts->seed : sampler_default_seed());
  vm_ref(lay, 0, (uintptr_t)L + lay->L_glref, &p->g);
  p->vmstate_at = p->g + p->layout.g_vmstate;
  p->cur_L_at = p->g + p->layout.g_cur_L;
  p->located_states = located_states(&p->layout);
  if ((p->path = lifecycle_file_name(path)) == NULL ||
      (lifecycle_path_follows_fork(path) &&
       (p->path_template = strdup(path)) == NULL) ||
      fresh_tables(p) != 0)
    goto no_memory;
  return l;
no_memory:
  if (l != NULL)
    free_link(l);
  *err = ENOMEM;
  return NULL;
}

/* Completes p's stream (or drops it in a forked child, where the file
** belongs to the parent). From here on p's hook only forwards. Returns 0 or
** errno. */
static int end_profile(struct profiler *p)
{
  list_remove(p);
  if (p->fork_generation != profiler_fork_generation) {
    writer_abandon(&p->out);
    p->state = PROFILER_HALTED;
    return p->error; /* Why it could not go on in this child, or 0. */
  }
  return profiler_finish(p);
}

/* Whether p's hook is the VM's allocator (the top of the chain). */
static int at_top(lua_State *L, const struct profiler *p)
{
  void *ud = NULL;
  lua_Alloc f = lua_getallocf(L, &ud);
  return ud == p && profiler_is_hook(f);
}

static void park(struct vm_profiles *vm, struct chain_link *l)
{
  free_profile_data(&l->p);
  l->next = vm->parked;
  vm->parked = l;
}

/* Takes out of the chain the parked hooks that are the VM's allocator, one
** below the other: nothing calls them any more. */
static void unpark_top(lua_State *L, struct vm_profiles *vm)
{
  struct chain_link **ll = &vm->parked;
  while (*ll != NULL) {
    struct chain_link *l = *ll;
    if (!at_top(L, &l->p)) {
      ll = &l->next;
      continue;
    }
    lua_setallocf(L, l->p.orig_alloc, l->p.orig_ud);
    *ll = l->next;
    free_link(l);
    ll = &vm->parked; /* What it wrapped may be parked too. */
  }
}

/*
** Whether the running profile's hook has been taken out of the chain: the
** VM's allocator is no hook of ours, and it is the allocator our hook wraps
** or runs with that allocator's ud. Nothing can reach our hook then: what
** is below it does not lead back to it, and a hook installed above ours
** found ours, so it runs with our ud (if it keeps the ud it found, as the
** built-in does) or with one of its own, never with the ud of what is
** below ours. A NULL ud tells nothing. A hook below ours that has a ud of
** its own and puts back what it wrapped removes ours unseen: that cannot
** be told from here. If taken out, the profile ends there.
*/
static void notice_detachment(lua_State *L, struct vm_profiles *vm)
{
  struct chain_link *l = vm->active;
  void *ud = NULL;
  lua_Alloc f;
  if (l == NULL || at_top(L, &l->p))
    return;
  f = lua_getallocf(L, &ud);
  if (!(f == l->p.orig_alloc && ud == l->p.orig_ud) &&
      (ud == NULL || ud != l->p.orig_ud))
    return;
  vm->active = NULL;
  vm->detached = 1;
  end_profile(&l->p);
  restore_prof_mode(L, vm, &l->p, 0);
  park(vm, l);
}

/* Ends the running profile l; see the top of this file. `collector`: as
** for flush_traces (0: none). Returns 0 or errno. */
static int stop_link(lua_State *L, struct vm_profiles *vm, struct chain_link *l,
                     int collector, char **path)
{
  int err;
  vm->active = NULL;
  if (at_top(L, &l->p)) {
    /* First: nothing more hits p. */
    lua_setallocf(L, l->p.orig_alloc, l->p.orig_ud);
    err = end_profile(&l->p);
    restore_prof_mode(L, vm, &l->p, collector);
    *path = l->p.path;
    l->p.path = NULL;
    free_link(l);
  } else {
    /* The hook above ours still calls it and will put it back. */
    err = end_profile(&l->p);
    restore_prof_mode(L, vm, &l->p, collector);
    *path = l->p.path;
    l->p.path = NULL;
    park(vm, l);
  }
  return err;
}

/* Whether the running profile was started in the parent of this process
** and does not go on here (its path has no %p): nothing is recorded in
** this process, so it does not run here. */
static int left_in_parent(const struct vm_profiles *vm)
{
  const struct profiler *p = vm->active != NULL ? &vm->active->p : NULL;
  return p != NULL && p->fork_generation != profiler_fork_generation &&
         p->path_template == NULL;
}

/* What a call finds when no profile runs here: LIFE_FORKED (and the
** parent's profile ends in this process), LIFE_DETACHED once, or
** LIFE_NOT_RUNNING. */
static enum life_status not_running(lua_State *L, struct vm_profiles *vm)
{
  char *path = NULL;
  if (left_in_parent(vm)) {
    stop_link(L, vm, vm->active, 0, &path);
    free(path);
    return LIFE_FORKED;
  }
  if (vm->detached) {
    vm->detached = 0;
    return LIFE_DETACHED;
  }
  return LIFE_NOT_RUNNING;
}

/* ---- The API ------------------------------------------------------------ */

enum life_status lifecycle_may_start(lua_State *L, struct vm_profiles *vm)
{
  if (vm->closing)
    return LIFE_CLOSING;
  notice_detachment(L, vm);
  if (left_in_parent(vm))
    not_running(L, vm); /* A start in the child replaces it. */
  if (vm->active != NULL)
    return LIFE_RUNNING;
  /* When ours is the VM's allocator, nothing is above it. */
  if (vm->has_builtin && !profiler_is_hook(lua_getallocf(L, NULL))) {
    switch (builtin_memprof_state(L)) {
    case BUILTIN_RUNNING:
      return LIFE_BUILTIN;
    case BUILTIN_UNKNOWN:
      return LIFE_BUILTIN_UNKNOWN;
    case BUILTIN_NOT_RUNNING:
      break;
    }
  }
  return LIFE_OK;
}

enum life_status lifecycle_start(lua_State *L, struct vm_profiles *vm,
                                 const struct vm_layout *lay,
                                 const struct profile_options *opts,
                                 const char *path, int collector, int *err)
{
  struct chain_link *l = new_link(L, lay, opts, path, err);
  struct profiler *p;
  if (l == NULL)
    return LIFE_FILE_ERROR;
  p = &l->p;
  if ((*err = open_stream(p)) != 0) {
    free_link(l);
    return LIFE_FILE_ERROR;
  }
  set_prof_mode(L, p, collector); /* Before the hook is in. */
  write_prologue_now(p);
  p->fork_generation = profiler_fork_generation;
  p->state = PROFILER_RECORDING;
  /* A parked hook of ours that is the VM's allocator gives its place to
  ** this one. No allocation happens from here to the last step. */
  unpark_top(L, vm);
  p->orig_alloc = lua_getallocf(L, &p->orig_ud);
  list_add(p);
  vm->active = l;
  vm->detached = 0;
  /* Last step: from here on every allocator call is recorded. */
  lua_setallocf(L, profiler_hook_for(p), p);
  return LIFE_OK;
}

int lifecycle_collector(lua_State *L)
{
  /* With an argument: flushes the traces instead (trace_lines 'exact'). */
  int running;
  if (lua_toboolean(L, 1)) {
    flush_in(L, lua_toboolean(L, 2));
    return 0;
  }
  /* A full collection restarts a stopped collector: stopped again
  ** (LUA_GCISRUNNING, LuaJIT 2.1's C API; -1 from a VM without it). */
  running = lua_gc(L, LUA_GCISRUNNING, 0);
  lua_gc(L, LUA_GCCOLLECT, 0);
  if (running == 0)
    lua_gc(L, LUA_GCSTOP, 0);
  return 0;
}

/* collect_at_stop: a full collection while the hook still records, so
** that its frees are in the stream, then a note of it. The collection runs
** in the closure of lifecycle_collector at stack index `collector` (made
** when the module was loaded: calling it allocates nothing, where
** lua_cpcall would make a closure that the profile would show), in
** protected mode: a finalizer's error ends it early, and nothing is noted
** then. Returns l, or NULL if a finalizer ended the profile. */
static struct chain_link *collect_at_stop(lua_State *L, struct vm_profiles *vm,
                                          struct chain_link *l, int collector)
{
  uint64_t heap = 0;
  int failed;
  if (!l->p.collect_at_stop || l->p.state != PROFILER_RECORDING ||
      !at_top(L, &l->p) || lua_tocfunction(L, collector) != lifecycle_collector)
    return l;
  lua_pushvalue(L, collector);
  failed = lua_pcall(L, 0, 0, 0) != 0;
  if (failed)
    lua_pop(L, 1);
  notice_detachment(L, vm);
  if (vm->active != l)
    return NULL;
  if (!failed && vm_heap_size(&l->p.layout, 0, l->p.g, &heap))
    profiler_note_collected(&l->p, heap);
  return l;
}

enum life_status lifecycle_stop(lua_State *L, struct vm_profiles *vm,
                                int collector, struct life_ended *ended)
{
  struct chain_link *l;
  char *path = NULL;
  notice_detachment(L, vm);
  if (vm->active == NULL || left_in_parent(vm))
    return not_running(L, vm);
  l = collect_at_stop(L, vm, vm->active, collector);
  if (l == NULL)
    return LIFE_NOT_RUNNING;
  ended->max_bytes = l->p.capped ? l->p.max_bytes : 0;
  ended->err = stop_link(L, vm, l, collector, &path);
  if (ended->err == 0) {
    free(path);
    return LIFE_OK;
  }
  ended->path = path;
  return ended->max_bytes != 0 ? LIFE_MAX_BYTES : LIFE_FILE_ERROR;
}

enum life_status lifecycle_stats(lua_State *L, struct vm_profiles *vm,
                                 struct profile_stats *out,
                                 uint64_t *sample_bytes, uint64_t *written)
{
  struct profiler *p;
  notice_detachment(L, vm);
  if (vm->active == NULL || left_in_parent(vm))
    return not_running(L, vm);
  p = &vm->active->p;
  *out = p->stats;
  out->unwinds = p->tlines.unwinds;
  *sample_bytes = p->sampler.mean;
  /* A capped stream keeps its bytes up to the cut (then the epilogue). */
  *written = p->capped ? p->cut_at : writer_total(&p->out);
  return LIFE_OK;
}

enum life_status lifecycle_snapshot(lua_State *L, struct vm_profiles *vm,
                                    const char *path, int format, char *msg,
                                    size_t len, int *err)
{
  notice_detachment(L, vm);
  if (vm->active == NULL && vm->detached)
    return LIFE_DETACHED;
  if (vm->active == NULL || left_in_parent(vm))
    return not_running(L, vm);
  *err = snapshot_write(&vm->active->p, path, (enum snapshot_format)format, msg,
                        len);
  return *err == 0 ? LIFE_OK : LIFE_SNAPSHOT_FAILED;
}

int lifecycle_hook_busy(const struct vm_profiles *vm)
{
  const struct chain_link *l;
  if (vm->active != NULL && vm->active->p.busy)
    return 1;
  for (l = vm->parked; l != NULL; l = l->next)
    if (l->p.busy)
      return 1;
  return 0;
}

int lifecycle_is_running(lua_State *L, struct vm_profiles *vm)
{
  notice_detachment(L, vm);
  return vm->active != NULL && !left_in_parent(vm);
}

void lifecycle_close(lua_State *L, struct vm_profiles *vm)
{
  char *path = NULL;
  vm->closing = 1;
  notice_detachment(L, vm);
  if (vm->active != NULL) {
    stop_link(L, vm, vm->active, 0, &path);
    free(path);
  }
  unpark_top(L, vm);
}
