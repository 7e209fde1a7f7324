/*
** The Lua binding: memprof.start/stop/is_running/info and misc.memprof.
** It parses arguments, turns results into Lua values and loads the module;
** a profile's life (start, stop, lua_close, exit, fork, the allocator chain
** shared with other hooks) is in lifecycle.c.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "attach.h"
#include "heap_remote.h"
#include "heapwalk.h"
#include "lifecycle.h"
#include "lua.h"
#include "profiler.h"  /* struct profile_stats */
#include "safe_read.h" /* safe_read_calls */
#include "snapshot.h"
#include "stacks.h" /* MAX_STACK_DEPTH */
#include "vm_learn.h"
#include "writer.h" /* writer_strerror */

#define SENTINEL_KEY "memprof.sentinel"
#define MESSAGES_KEY "memprof.messages"

/* Per-VM state kept in the registry: what the lifecycle knows of the VM's
** profiles. (The layout is learned once per process: vm_learn.c.) */
struct sentinel {
  struct vm_profiles profiles;
};

/* ---- Helpers ------------------------------------------------------------ */

static int push_failure(lua_State *L, const char *msg, int err)
{
  lua_pushnil(L);
  lua_pushstring(L, msg);
  lua_pushinteger(L, err);
  return 3;
}

static int push_file_failure(lua_State *L, const char *path, int err)
{
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", path, writer_strerror(err));
  lua_pushinteger(L, err);
  return 3;
}

static struct sentinel *get_sentinel(lua_State *L)
{
  struct sentinel *s;
  lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL_KEY);
  s = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return s;
}

/* The smallest size cap: both headers, a few events, the final records. */
#define MIN_MAX_BYTES 64

/* The mean bytes between samples of `sample_bytes = true` (and of
** `memprof run --sample-bytes`): Go's heap profile rate, 512 KiB
** (docs/sampling.md says why). */
#define DEFAULT_SAMPLE_BYTES (512 * 1024)

/* An integer option from `min` to 2^53. Returns 1, or 0 with a message. */
static int read_integer(lua_State *L, const char *name, lua_Number min,
                        uint64_t *out, char *msg, size_t len)
{
  lua_Number v = lua_tonumber(L, -1);
  if (lua_type(L, -1) != LUA_TNUMBER || !(v >= min) || v > 9007199254740992.0 ||
      v != (lua_Number)(int64_t)v) {
    snprintf(msg, len,
             "option '%s' must be an integer from %.0f to 2^53, got %s", name,
             (double)min,
             lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1)
                                            : luaL_typename(L, -1));
    return 0;
  }
  *out = (uint64_t)v;
  return 1;
}

/* sample_bytes: an integer, or true for the default. */
static int read_sample_bytes(lua_State *L, struct profile_options *o, char *msg,
                             size_t len)
{
  if (lua_type(L, -1) == LUA_TBOOLEAN && lua_toboolean(L, -1)) {
    o->sample_bytes = DEFAULT_SAMPLE_BYTES;
    return 1;
  }
  if (lua_type(L, -1) != LUA_TNUMBER) {
    snprintf(msg, len,
             "option 'sample_bytes' must be an integer from 1 to 2^53 or "
             "true, got %s",
             luaL_typename(L, -1));
    return 0;
  }
  return read_integer(L, "sample_bytes", 1, &o->sample_bytes, msg, len);
}

/* trace_lines: 'exact', 'resume' or 'start' (memprof run's
** --trace-lines spellings), or false, the same as 'start'. */
static int read_trace_lines(lua_State *L, struct profile_options *o, char *msg,
                            size_t len)
{
  const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  if ((lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) ||
      (v != NULL && strcmp(v, "start") == 0))
    o->trace_lines = TRACE_LINES_START;
  else if (v != NULL && strcmp(v, "resume") == 0)
    o->trace_lines = TRACE_LINES_RESUME;
  else if (v != NULL && strcmp(v, "exact") == 0)
    o->trace_lines = TRACE_LINES_EXACT;
  else if (v != NULL && strcmp(v, "walk") == 0)
    o->trace_lines = TRACE_LINES_WALK;
  else {
    snprintf(msg, len,
             "option 'trace_lines' must be 'exact', 'walk', 'resume' or "
             "'start' (or "
             "false, the same as 'start'), got %s%.40s%s",
             v != NULL ? "the string '" : "a ",
             v != NULL ? v : luaL_typename(L, -1), v != NULL ? "'" : "");
    return 0;
  }
  return 1;
}

/* One option's value, into the profile_options at ctx. Returns 1, or 0
** with a message. */
static int read_option(lua_State *L, const char *name, void *ctx, char *msg,
                       size_t len)
{
  struct profile_options *o = ctx;
  if (strcmp(name, "stack_depth") == 0) {
    lua_Number v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || v != (lua_Number)(int)v || v < 1 ||
        v > MAX_STACK_DEPTH) {
      snprintf(msg, len,
               "option 'stack_depth' must be an integer from 1 to "
               "%d, got %s",
               MAX_STACK_DEPTH,
               lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1)
                                              : luaL_typename(L, -1));
      return 0;
    }
    o->stack_depth = (int)v;
    return 1;
  }
  if (strcmp(name, "timestamps") == 0) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) {
      snprintf(msg, len, "option 'timestamps' must be a boolean, got %s",
               luaL_typename(L, -1));
      return 0;
    }
    o->timestamps = lua_toboolean(L, -1);
    return 1;
  }
  if (strcmp(name, "collect_at_stop") == 0) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) {
      snprintf(msg, len, "option 'collect_at_stop' must be a boolean, got %s",
               luaL_typename(L, -1));
      return 0;
    }
    o->collect_at_stop = lua_toboolean(L, -1);
    return 1;
  }
  if (strcmp(name, "snapshots") == 0) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) {
      snprintf(msg, len, "option 'snapshots' must be a boolean, got %s",
               luaL_typename(L, -1));
      return 0;
    }
    o->snapshots = lua_toboolean(L, -1);
    return 1;
  }
  if (strcmp(name, "trace_lines") == 0)
    return read_trace_lines(L, o, msg, len);
  if (strcmp(name, "max_bytes") == 0)
    return read_integer(L, name, MIN_MAX_BYTES, &o->max_bytes, msg, len);
  if (strcmp(name, "sample_bytes") == 0)
    return read_sample_bytes(L, o, msg, len);
  if (strcmp(name, "seed") == 0) {
    o->has_seed = 1;
    return read_integer(L, name, 0, &o->seed, msg, len);
  }
  snprintf(msg, len, "unknown option '%s'", name);
  return 0;
}

/* Calls read(L, name, ctx, msg, len) for each field of the options table
** at idx (nil: none), with the value on top of the stack. Iterating
** allocates nothing. Returns 1, or 0 with a message. */
static int read_option_table(lua_State *L, int idx,
                             int (*read)(lua_State *L, const char *name,
                                         void *ctx, char *msg, size_t len),
                             void *ctx, char *msg, size_t len)
{
  if (lua_isnoneornil(L, idx))
    return 1;
  if (!lua_istable(L, idx)) {
    snprintf(msg, len, "options must be a table, got %s",
             luaL_typename(L, idx));
    return 0;
  }
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      snprintf(msg, len, "option names must be strings, got %s",
               luaL_typename(L, -2));
      lua_pop(L, 2);
      return 0;
    }
    if (!read(L, lua_tostring(L, -2), ctx, msg, len)) {
      lua_pop(L, 2);
      return 0;
    }
    lua_pop(L, 1);
  }
  return 1;
}

/* Reads memprof.start's options table (nil: none). Returns 1, or 0 with a
** message; nothing has started then. */
static int read_options(lua_State *L, int idx, struct profile_options *o,
                        char *msg, size_t len)
{
  memset(o, 0, sizeof(*o));
  if (!read_option_table(L, idx, read_option, o, msg, len))
    return 0;
  if (o->has_seed && o->sample_bytes == 0) {
    snprintf(msg, len, "option 'seed' needs option 'sample_bytes'");
    return 0;
  }
  return 1;
}

/* ---- Lua API ------------------------------------------------------------ */

/* The message and errno of each refusal. They are interned at load (see
** anchor_messages), so that pushing one allocates nothing. */
static const struct {
  const char *text;
  int err;
} life_messages[LIFE_STATUSES] = {
    [LIFE_RUNNING] = {"profiler is running already", EINVAL},
    [LIFE_NOT_RUNNING] = {"profiler is not running", EINVAL},
    [LIFE_DETACHED] = {"profiler is not running: another allocator hook "
                       "took it out of the VM's allocator, and its profile "
                       "ends there",
                       EINVAL},
    [LIFE_BUILTIN] = {"the VM's built-in misc.memprof is running: stop it "
                      "first",
                      EBUSY},
    [LIFE_BUILTIN_UNKNOWN] = {"cannot tell whether the VM's built-in "
                              "misc.memprof is running",
                              EBUSY},
    [LIFE_CLOSING] = {"the VM is being closed", EINVAL},
    [LIFE_FORKED] = {"profiler is not running in this process: it was "
                     "started before fork(), and a path without %p is not "
                     "followed into a child",
                     EINVAL},
};

static int push_status(lua_State *L, enum life_status st)
{
  return push_failure(L, life_messages[st].text, life_messages[st].err);
}

/* memprof.start(path [, options]) -> true | nil, message, errno */
/* An explicit trace_lines this build cannot do is refused, naming why
** (the default falls back, and the profile's note says so). */
static int trace_lines_supported(const struct vm_layout *lay,
                                 const struct profile_options *o, char *msg,
                                 size_t len)
{
  const struct vm_trace_layout *tl = &lay->tl;
  const char *why = NULL;
  if ((o->trace_lines == TRACE_LINES_RESUME ||
       o->trace_lines == TRACE_LINES_EXACT ||
       o->trace_lines == TRACE_LINES_WALK) &&
      !tl->ok)
    why = tl->why;
  else if (o->trace_lines == TRACE_LINES_EXACT && !tl->prof_ok)
    why = tl->prof_why;
  else if (o->trace_lines == TRACE_LINES_WALK && !tl->walk_ok)
    why = "jit.vmdef or jit.util does not name the table helpers and the "
          "ops the walk needs";
  if (why == NULL)
    return 1;
  snprintf(msg, len,
           "option 'trace_lines' = '%s' is not supported by this build: %s "
           "(memprof.info().trace_lines; 'start' charges compiled code to "
           "its trace's start)",
           o->trace_lines == TRACE_LINES_EXACT  ? "exact"
           : o->trace_lines == TRACE_LINES_WALK ? "walk"
                                                : "resume",
           why);
  return 0;
}

static int l_start(lua_State *L)
{
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  struct sentinel *s = get_sentinel(L);
  struct profile_options opts;
  struct vm_layout layout;
  enum life_status st;
  char msg[600], error[512];
  int err = 0;

  /* The system would take the path up to its first NUL: another file. */
  if (strlen(path) != len) {
    snprintf(msg, sizeof(msg),
             "the profile's path has a NUL byte (at byte %u of %u)",
             (unsigned)strlen(path), (unsigned)len);
    return push_failure(L, msg, EINVAL);
  }
  if (len == 0)
    return push_failure(L, "the profile's path is empty", EINVAL);

  /* First, and without allocating: the VM's built-in misc.memprof may be
  ** running, and it charges every allocation made here heavily. */
  if (s != NULL && (st = lifecycle_may_start(L, &s->profiles)) != LIFE_OK)
    return push_status(L, st);
  if (!read_options(L, 2, &opts, msg, sizeof(msg)))
    return push_failure(L, msg, EINVAL);
  if (s == NULL)
    return push_failure(L, "module state is missing", ENOTSUP);
  /* (Compiled code by line is calibrated only for a start that asks.) */
  if (!vm_learn_layout_for(L, opts.trace_lines != TRACE_LINES_START, &layout,
                           error, sizeof(error))) {
    snprintf(msg, sizeof(msg), "cannot verify this VM's layout: %s", error);
    return push_failure(L, msg, ENOTSUP);
  }
  if (!trace_lines_supported(&layout, &opts, msg, sizeof(msg)))
    return push_failure(L, msg, ENOTSUP);
  if (lifecycle_start(L, &s->profiles, &layout, &opts, path,
                      lua_upvalueindex(1), &err) != LIFE_OK) {
    char *file = lifecycle_file_name(path);
    int n = push_file_failure(L, file != NULL ? file : path, err);
    free(file);
    return n;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* memprof.stop() -> true | nil, message, errno */
static int l_stop(lua_State *L)
{
  struct sentinel *s = get_sentinel(L);
  enum life_status st = LIFE_NOT_RUNNING;
  struct life_ended ended = {0, NULL, 0};
  if (s != NULL)
    st = lifecycle_stop(L, &s->profiles, lua_upvalueindex(1), &ended);
  if (st == LIFE_MAX_BYTES) {
    char cap[24];
    snprintf(cap, sizeof(cap), "%llu", (unsigned long long)ended.max_bytes);
    lua_pushnil(L);
    lua_pushfstring(L, "%s: profile reached max_bytes (%s)", ended.path, cap);
    lua_pushinteger(L, ended.err);
  } else if (st == LIFE_FILE_ERROR) {
    push_file_failure(L, ended.path, ended.err);
  }
  free(ended.path);
  if (st == LIFE_MAX_BYTES || st == LIFE_FILE_ERROR)
    return 3;
  if (st != LIFE_OK)
    return push_status(L, st);
  lua_pushboolean(L, 1);
  return 1;
}

/* What snapshot's options ask for. */
struct snapshot_options {
  int format;  /* An enum snapshot_format. */
  int collect; /* A full collection before a heap snapshot. */
};

#define SNAPSHOT_FORMATS "'pprof', 'memprof' or 'heap'"

/* snapshot's option 'format'. Returns 1, or 0 with a message. */
static int read_snapshot_format(lua_State *L, int *format, char *msg,
                                size_t len)
{
  /* lua_tostring would turn a number into a string in place. */
  const char *name =
      lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  if (name != NULL && strcmp(name, "pprof") == 0)
    *format = SNAPSHOT_PPROF;
  else if (name != NULL && strcmp(name, "memprof") == 0)
    *format = SNAPSHOT_MEMPROF;
  else if (name != NULL && strcmp(name, "heap") == 0)
    *format = SNAPSHOT_HEAP;
  else if (name != NULL) {
    snprintf(msg, len, "option 'format' must be " SNAPSHOT_FORMATS ", got '%s'",
             name);
    return 0;
  } else {
    snprintf(msg, len, "option 'format' must be " SNAPSHOT_FORMATS ", got %s",
             luaL_typename(L, -1));
    return 0;
  }
  return 1;
}

static int read_snapshot_option(lua_State *L, const char *name, void *ctx,
                                char *msg, size_t len)
{
  struct snapshot_options *o = ctx;
  if (strcmp(name, "format") == 0)
    return read_snapshot_format(L, &o->format, msg, len);
  if (strcmp(name, "collect") == 0) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) {
      snprintf(msg, len, "option 'collect' must be a boolean, got %s",
               luaL_typename(L, -1));
      return 0;
    }
    o->collect = lua_toboolean(L, -1);
    return 1;
  }
  snprintf(msg, len, "unknown option '%s'", name);
  return 0;
}

/* Reads snapshot's options table (nil: none). Returns 1, or 0 with a
** message. */
static int read_snapshot_options(lua_State *L, int idx,
                                 struct snapshot_options *o, char *msg,
                                 size_t len)
{
  o->format = SNAPSHOT_PPROF;
  o->collect = 0;
  if (!read_option_table(L, idx, read_snapshot_option, o, msg, len))
    return 0;
  if (o->collect && o->format != SNAPSHOT_HEAP) {
    snprintf(msg, len, "option 'collect' is for format 'heap' only");
    return 0;
  }
  return 1;
}

/* A full collection that leaves a stopped collector stopped: a full
** collection sets a new threshold, which restarts it. LUA_GCISRUNNING
** (LuaJIT 2.1's C API) tells whether it was stopped; a VM that does not
** know that option answers -1 and is refused. Returns 1, or 0. */
static int collect_keeping_state(lua_State *L)
{
  int running = lua_gc(L, LUA_GCISRUNNING, 0);
  if (running < 0)
    return 0;
  lua_gc(L, LUA_GCCOLLECT, 0);
  if (running == 0)
    lua_gc(L, LUA_GCSTOP, 0);
  return 1;
}

/* A heap snapshot: the live object graph, with or without a profile; a
** running profile is noted with the bytes it has written so far. */
static int heap_snapshot(lua_State *L, struct sentinel *s, const char *path,
                         int collect)
{
  struct heap_profile_note note = {0, 0, 0};
  struct profile_stats stats;
  uint64_t sample_bytes;
  char msg[600];
  int err;
  if (collect && !collect_keeping_state(L))
    return push_failure(L,
                        "option 'collect': this VM's lua_gc does not tell "
                        "whether its collector is stopped "
                        "(LUA_GCISRUNNING), and a full collection would "
                        "restart it",
                        ENOTSUP);
  if (s != NULL)
    note.running = lifecycle_stats(L, &s->profiles, &stats, &sample_bytes,
                                   &note.written) == LIFE_OK;
  if ((err = snapshot_write_heap(L, path, &note, msg, sizeof(msg))) != 0)
    return push_failure(L, msg, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* memprof.snapshot(path [, options]) -> true | nil, message, errno. On
** success it allocates nothing through the VM: the running profile does
** not see it. */
static int l_snapshot(lua_State *L)
{
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  struct sentinel *s = get_sentinel(L);
  struct snapshot_options opts;
  enum life_status st;
  char msg[600];
  int err = 0;
  if (strlen(path) != len) {
    snprintf(msg, sizeof(msg),
             "the snapshot's path has a NUL byte (at byte %u of %u)",
             (unsigned)strlen(path), (unsigned)len);
    return push_failure(L, msg, EINVAL);
  }
  if (len == 0)
    return push_failure(L, "the snapshot's path is empty", EINVAL);
  if (!read_snapshot_options(L, 2, &opts, msg, sizeof(msg)))
    return push_failure(L, msg, EINVAL);
  if (opts.format == SNAPSHOT_HEAP)
    return heap_snapshot(L, s, path, opts.collect);
  st = s == NULL ? LIFE_NOT_RUNNING
                 : lifecycle_snapshot(L, &s->profiles, path, opts.format, msg,
                                      sizeof(msg), &err);
  if (st == LIFE_NOT_RUNNING) /* Say what works without a profile. */
    return push_failure(L,
                        "profiler is not running (format = 'heap', the live "
                        "objects, needs no profile)",
                        EINVAL);
  if (st == LIFE_SNAPSHOT_FAILED)
    return push_failure(L, msg, err);
  if (st != LIFE_OK)
    return push_status(L, st);
  lua_pushboolean(L, 1);
  return 1;
}

/* Whether a profile runs in L's VM. */
static int is_running(lua_State *L)
{
  struct sentinel *s = get_sentinel(L);
  return s != NULL && lifecycle_is_running(L, &s->profiles);
}

static int l_is_running(lua_State *L)
{
  lua_pushboolean(L, is_running(L));
  return 1;
}

static void set_int(lua_State *L, const char *key, lua_Integer v)
{
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}

static void set_number(lua_State *L, const char *key, double v)
{
  lua_pushnumber(L, v);
  lua_setfield(L, -2, key);
}

/* The sources of events, by their number in a header (bits 2-4). */
static const char *const stat_sources[] = {NULL, "internal", "lua", "c",
                                           "trace"};

/* One total of the events with header bits i (kind and source): events
** (which 0), bytes allocated (1) or freed (2); exact, or with sampling the
** estimate. */
static double stat_value(const struct profile_stats *st, int sampled,
                         unsigned i, int which)
{
  unsigned kind = i & 3;
  if (which == 1 && kind == 2)
    return 0; /* A free allocates nothing. */
  if (which == 2 && kind == 1)
    return 0; /* An allocation frees nothing. */
  if (which == 0)
    return sampled ? st->est_events[i] : (double)st->events[i];
  if (which == 1)
    return sampled ? st->est_allocated[i] : (double)st->allocated[i];
  return sampled ? st->est_freed[i] : (double)st->freed[i];
}

/* Totals of one source (or of all, source 0) into the table on top; with
** sampling, estimates rounded to whole numbers. Returns the net bytes
** (allocated less freed). */
static double push_stat_totals(lua_State *L, const struct profile_stats *st,
                               int sampled, unsigned source)
{
  static const char *const kinds[] = {NULL, "allocs", "frees", "reallocs"};
  double allocated = 0, freed = 0;
  unsigned s, k;
  for (k = 1; k <= 3; k++) {
    double n = 0;
    for (s = 1; s <= 4; s++)
      if (source == 0 || s == source) {
        n += stat_value(st, sampled, (s << 2) | k, 0);
        allocated += stat_value(st, sampled, (s << 2) | k, 1);
        freed += stat_value(st, sampled, (s << 2) | k, 2);
      }
    set_number(L, kinds[k], floor(n + 0.5));
  }
  allocated = floor(allocated + 0.5);
  freed = floor(freed + 0.5);
  set_number(L, "allocated", allocated);
  set_number(L, "freed", freed);
  return allocated - freed;
}

/* memprof.stats() -> totals since start | nil, message, errno */
static int l_stats(lua_State *L)
{
  struct sentinel *s = get_sentinel(L);
  struct profile_stats st;
  uint64_t sample_bytes = 0, written = 0;
  enum life_status status = LIFE_NOT_RUNNING;
  unsigned source;
  int sampled;
  if (s != NULL)
    status = lifecycle_stats(L, &s->profiles, &st, &sample_bytes, &written);
  if (status != LIFE_OK)
    return push_status(L, status);
  sampled = sample_bytes != 0;
  lua_newtable(L);
  set_number(L, "net", push_stat_totals(L, &st, sampled, 0));
  lua_newtable(L);
  for (source = 1; source <= 4; source++) {
    lua_newtable(L);
    push_stat_totals(L, &st, sampled, source);
    lua_setfield(L, -2, stat_sources[source]);
  }
  lua_setfield(L, -2, "sources");
  set_number(L, "bytes_written", (double)written);
  set_number(L, "dropped", (double)st.dropped);
  set_number(L, "unwinds", (double)st.unwinds);
  if (sampled) {
    double samples = 0;
    unsigned i;
    for (i = 0; i < 32; i++)
      samples += (double)st.events[i];
    set_number(L, "sample_bytes", (double)sample_bytes);
    set_number(L, "samples", samples);
    set_number(L, "live_bytes", floor(st.est_live_bytes + 0.5));
    set_number(L, "live_blocks", floor(st.est_live_blocks + 0.5));
  }
  return 1;
}

/* Every verified offset, by field name; g_trace is -1 when traces could
** not be verified. */
static void push_offsets(lua_State *L, const struct vm_layout *lay)
{
  const struct vm_layout_field *f;
  lua_newtable(L);
  for (f = vm_layout_fields; f->name != NULL; f++)
    set_int(L, f->name, vm_layout_get(lay, f));
  set_int(L, "g_trace", lay->trace_ok ? lay->g_trace : -1);
  set_int(L, "g_parent", lay->exit_ok ? lay->g_parent : -1);
  lua_setfield(L, -2, "offsets");
}

/* info().trace_lines: what compiled-code attribution this build supports
** ('resume', and 'exact' with J->prof_mode), and why not; `calibrated`
** false until a start that wants it (or info{trace_lines = true}). */
static void push_trace_lines(lua_State *L, const struct vm_trace_layout *tl,
                             int calibrated)
{
  lua_newtable(L);
  lua_pushboolean(L, calibrated);
  lua_setfield(L, -2, "calibrated");
  lua_pushboolean(L, tl->ok);
  lua_setfield(L, -2, "resume");
  lua_pushboolean(L, tl->ok && tl->prof_ok);
  lua_setfield(L, -2, "exact");
  lua_pushboolean(L, tl->ok && tl->walk_ok);
  lua_setfield(L, -2, "walk");
  lua_pushboolean(L, tl->ok && tl->walk_ok && tl->upval_ok);
  lua_setfield(L, -2, "walk_upvalues");
  lua_pushboolean(L, tl->ok && tl->exit_ok);
  lua_setfield(L, -2, "exits");
  lua_pushboolean(L, tl->ok && tl->base_ok);
  lua_setfield(L, -2, "stacks");
  lua_pushboolean(L, tl->ok && tl->newkey_ok);
  lua_setfield(L, -2, "stores_after_calls");
  lua_pushboolean(L, tl->ok && tl->concat_ok);
  lua_setfield(L, -2, "builtin_frames");
  lua_pushboolean(L, tl->ok && tl->concat_ok && tl->format_ok);
  lua_setfield(L, -2, "format_frames");
  lua_pushboolean(L, tl->ok && tl->concat_ok && tl->format_ok &&
                         tl->format_put_ok);
  lua_setfield(L, -2, "format_puts");
  lua_pushboolean(L, tl->ok && tl->after_ok);
  lua_setfield(L, -2, "after_returns");
  if (!tl->ok) {
    lua_pushstring(L, tl->why);
    lua_setfield(L, -2, "why");
  } else if (!tl->prof_ok) {
    lua_pushstring(L, tl->prof_why);
    lua_setfield(L, -2, "why");
  }
  if (tl->ok) {
    lua_newtable(L);
    set_int(L, "mcode", tl->tr_mcode);
    set_int(L, "szmcode", tl->tr_szmcode);
    set_int(L, "spadjust", tl->tr_spadjust);
    set_int(L, "nsnap", tl->tr_nsnap);
    set_int(L, "snap", tl->tr_snap);
    set_int(L, "snapmap", tl->tr_snapmap);
    set_int(L, "nsnapmap", tl->tr_nsnapmap);
    set_int(L, "ir", tl->tr_ir);
    set_int(L, "nk", tl->tr_nk);
    set_int(L, "snap_size", tl->snap_size);
    set_int(L, "snap_mapofs", tl->snap_mapofs);
    set_int(L, "snap_mcofs", tl->snap_mcofs);
    set_int(L, "snap_nent", tl->snap_nent);
    set_int(L, "bc_funcf", tl->bc_funcf);
    set_int(L, "g_prof_mode", tl->prof_ok ? tl->g_prof_mode : -1);
    set_int(L, "g_jit_base", tl->base_ok ? tl->g_jit_base : -1);
    set_int(L, "g_jit_on", tl->jit_on_ok ? tl->g_jit_on : -1);
    lua_setfield(L, -2, "offsets");
  }
  lua_setfield(L, -2, "trace_lines");
}

/* Whether info's options ask for compiled code by line ({trace_lines =
** true}); raises on options that are not a table. */
static int info_wants_lines(lua_State *L)
{
  int lines;
  if (lua_isnoneornil(L, 1))
    return 0;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "trace_lines");
  lines = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return lines;
}

/* memprof.info([{trace_lines = true}]) -> what was detected, for bug
** reports; compiled code by line only once calibrated (by a start that
** wants it, or this call's option). */
static int l_info(lua_State *L)
{
  struct vm_layout lay;
  struct vm_learn_status st;
  char error[512];
  int lines = info_wants_lines(L);
  /* The reads made before this call (its own check makes a few). */
  unsigned long reads = safe_read_calls();
  int ok = vm_learn_layout_for(L, lines, &lay, error, sizeof(error));
  vm_learn_status(&st);
  lua_newtable(L);
  vm_learn_push_library(L, "jit");
  if (lua_istable(L, -1))
    lua_getfield(L, -1, "version");
  else
    lua_pushnil(L);
  lua_setfield(L, -3, "version");
  lua_pop(L, 1);
  lua_pushboolean(L, ok);
  lua_setfield(L, -2, "calibrated");
  set_int(L, "calibrations", st.calibrations);
  lua_pushnumber(L, (lua_Number)reads);
  lua_setfield(L, -2, "reads");
  if (st.where != NULL) {
    lua_pushstring(L, st.where);
    lua_setfield(L, -2, "calibrated_in");
  }
  lua_pushboolean(L, is_running(L));
  lua_setfield(L, -2, "running");
  if (!ok) {
    lua_pushstring(L, error);
    lua_setfield(L, -2, "error");
    return 1;
  }
  lua_pushstring(L, lay.family);
  lua_setfield(L, -2, "family");
  lua_pushboolean(L, lay.gc64);
  lua_setfield(L, -2, "gc64");
  lua_pushboolean(L, lay.trace_ok);
  lua_setfield(L, -2, "traces");
  lua_pushboolean(L, lay.exit_ok);
  lua_setfield(L, -2, "trace_exits");
  lua_pushboolean(L, lay.record_ok);
  lua_setfield(L, -2, "recording");
  lua_pushstring(L, lay.exact ? "specialised" : "generic");
  lua_setfield(L, -2, "hook");
  lua_pushstring(L, lay.build != NULL ? "matched" : "discovered");
  lua_setfield(L, -2, "layout");
  if (lay.build != NULL) {
    lua_pushstring(L, lay.build);
    lua_setfield(L, -2, "build");
  }
  lua_newtable(L);
  set_int(L, "lua", lay.st_lua);
  set_int(L, "c", lay.st_c);
  set_int(L, "gc", lay.st_gc);
  lua_pushstring(L, lay.state_numbering);
  lua_setfield(L, -2, "numbering");
  lua_setfield(L, -2, "vmstate");
  push_offsets(L, &lay);
  push_trace_lines(L, &lay.tl, st.traced);
  return 1;
}

/* ---- Module loading ----------------------------------------------------- */

/* lua_close: stop before the package library unloads C modules. */
static int sentinel_gc(lua_State *L)
{
  struct sentinel *s = lua_touserdata(L, 1);
  if (s != NULL)
    lifecycle_close(L, &s->profiles);
  return 0;
}

/* Whether the VM has a misc.memprof of its own (Tarantool's fork): one
** that is there before this module installs its own. */
static int has_builtin_memprof(lua_State *L)
{
  int found = 0, top = lua_gettop(L);
  vm_learn_push_library(L, "_G");
  if (lua_istable(L, -1))
    lua_getfield(L, -1, "misc");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "memprof");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "start");
      found = lua_iscfunction(L, -1) && lua_tocfunction(L, -1) != l_start;
    }
  }
  lua_settop(L, top);
  return found;
}

static void install_sentinel(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL_KEY);
  if (lua_isnil(L, -1)) {
    struct sentinel *s = lua_newuserdata(L, sizeof(*s));
    memset(s, 0, sizeof(*s));
    s->profiles.has_builtin = has_builtin_memprof(L);
    lua_newtable(L);
    lua_pushcfunction(L, sentinel_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, SENTINEL_KEY);
  }
  lua_pop(L, 1);
}

/* Keep this shared object mapped for the life of the process: a hook may
** still be called after the package library's dlclose. */
static void pin_module(void)
{
  Dl_info info;
  if (dladdr((void *)pin_module, &info) != 0 && info.dli_fname != NULL)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

/* Pushes stop: l_stop with, as its upvalue, the closure that collects
** garbage for collect_at_stop (made now, so that stop makes nothing). */
static void push_stop(lua_State *L)
{
  lua_pushcfunction(L, lifecycle_collector);
  lua_pushcclosure(L, l_stop, 1);
}

/* start flushes traces through the same closure (trace_lines 'exact'). */
static void push_start(lua_State *L)
{
  lua_pushcfunction(L, lifecycle_collector);
  lua_pushcclosure(L, l_start, 1);
}

/* Keeps the refusal messages alive in the registry: they stay interned, so
** pushing one later allocates nothing (see life_messages). */
static void anchor_messages(lua_State *L)
{
  int i, n = 0;
  lua_getfield(L, LUA_REGISTRYINDEX, MESSAGES_KEY);
  if (lua_isnil(L, -1)) {
    lua_newtable(L);
    for (i = 0; i < LIFE_STATUSES; i++)
      if (life_messages[i].text != NULL) {
        lua_pushstring(L, life_messages[i].text);
        lua_rawseti(L, -2, ++n);
      }
    lua_setfield(L, LUA_REGISTRYINDEX, MESSAGES_KEY);
  }
  lua_pop(L, 1);
}

/* misc.memprof.start/stop, as in Tarantool; an existing one is kept. The
** global table is reached through the registry and written with rawset,
** so that a host's guard on new globals (ngx_lua warns on every one) is
** not triggered. */
static void install_misc(lua_State *L)
{
  vm_learn_push_library(L, "_G");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, "misc");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushliteral(L, "misc");
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "memprof");
    if (lua_isnil(L, -1)) {
      lua_newtable(L);
      push_start(L);
      lua_setfield(L, -2, "start");
      push_stop(L);
      lua_setfield(L, -2, "stop");
      lua_pushcfunction(L, l_snapshot);
      lua_setfield(L, -2, "snapshot");
      lua_pushliteral(L, "memprof");
      lua_pushvalue(L, -2);
      lua_rawset(L, -5);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
}

__attribute__((visibility("default"))) int luaopen_memprof(lua_State *L)
{
  static const luaL_Reg api[] = {{"is_running", l_is_running},
                                 {"info", l_info},
                                 {"stats", l_stats},
                                 {"snapshot", l_snapshot},
                                 {"heap_of_process", heap_remote_l_snapshot},
                                 {"attach_process", attach_l_start},
                                 {"detach_process", attach_l_stop},
                                 {"attached_process", attach_l_status},
                                 {NULL, NULL}};
  lifecycle_init_process();
  pin_module();
  install_sentinel(L);
  anchor_messages(L);
  install_misc(L);
  lua_newtable(L);
  luaL_register(L, NULL, api);
  push_start(L);
  lua_setfield(L, -2, "start");
  push_stop(L);
  lua_setfield(L, -2, "stop");
  return 1;
}
