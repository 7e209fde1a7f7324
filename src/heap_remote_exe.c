/*
** The layout of a LuaJIT linked into another program's executable,
** learned in a helper process of that executable (see heap_remote_exe.h).
**
** The helper is the target's executable (/proc/PID/exe: the very file)
** run with memprof.so in LD_PRELOAD: the constructor below learns the
** layout on the executable's LuaJIT, writes it to the pipe it was given
** and exits, before any initializer or the main of the program runs.
** The preload only fails (and the program would then start) where the
** executable lacks a symbol memprof.so needs, or runs set-user-ID or with
** file capabilities (the loader ignores LD_PRELOAD): those are checked
** before, and the helper is started with "--version" and no input, under
** a time bound.
*/
#define _GNU_SOURCE
#include "heap_remote_exe.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "elf_syms.h"
#include "lauxlib.h"
#include "remote_proc.h"

#define EXE_MAGIC 0x4d50584cu /* "MPXL" */
#define HELPER_FD_ENV "MEMPROF_LAYOUT_HELPER_FD"
/* The helper learns in about a second; a loaded machine gets more. */
#define HELPER_MS 30000

struct exe_answer {
  uint32_t magic, size;
  int32_t err;
  char msg[400];
  struct exe_file file;
  struct heap_layout h;
  struct roots_layout rl;
};

/* This memprof.so's path. */
static const char *own_path(void)
{
  Dl_info self;
  if (!dladdr((void *)heap_exe_has_api, &self) || self.dli_fname == NULL)
    return NULL;
  return self.dli_fname;
}

int heap_exe_has_api(pid_t pid, char *msg, size_t len)
{
  char exe[64];
  struct elf_syms theirs, ours;
  struct stat st;
  const char *so = own_path();
  size_t i;
  int has;
  snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)pid);
  if (!elf_syms_read(exe, SHT_DYNSYM, &theirs))
    return 0;
  has = elf_syms_defines(&theirs, "lua_newstate");
  if (has && (so == NULL || !elf_syms_read(so, SHT_DYNSYM, &ours))) {
    remote_fail(msg, len, 0, "cannot read memprof.so's own symbols (%s)",
                so != NULL ? so : "its path unknown");
    has = -1;
  } else if (has) {
    for (i = 0; i < ours.n && has == 1; i++) {
      const char *name = elf_syms_name(&ours, i);
      if (ours.sym[i].st_shndx == SHN_UNDEF && strncmp(name, "lua", 3) == 0 &&
          !elf_syms_defines(&theirs, name)) {
        remote_fail(msg, len, 0,
                    "check 'LuaJIT API' failed: the executable of process %d "
                    "exports no %s, which memprof.so needs to learn its layout",
                    (int)pid, name);
        has = -1;
      }
    }
    elf_syms_free(&ours);
    if (has == 1 && (strchr(so, ' ') != NULL || strchr(so, ':') != NULL)) {
      remote_fail(msg, len, 0,
                  "memprof.so's path (%s) has a space or a colon: it cannot be "
                  "preloaded into a helper process",
                  so);
      has = -1;
    }
    if (has == 1 &&
        (stat(exe, &st) != 0 || (st.st_mode & (S_ISUID | S_ISGID)) ||
         getxattr(exe, "security.capability", NULL, 0) >= 0)) {
      remote_fail(
          msg, len, 0,
          "check 'helper process' failed: the executable of process %d "
          "runs set-user-ID, set-group-ID or with file capabilities, so "
          "memprof.so cannot be preloaded into a helper of it",
          (int)pid);
      has = -1;
    }
  }
  elf_syms_free(&theirs);
  return has;
}

/* ---- The helper -------------------------------------------------------- */

/* In the forked child: the executable of pid, memprof.so preloaded, the
** answer on fd 3, every other descriptor /dev/null. */
static void exec_helper(pid_t pid, int out, int err)
{
  char exe[64], preload[1100], fd[64];
  char *argv[] = {exe, "--version", NULL};
  char *envp[] = {preload, fd, NULL};
  int null = open("/dev/null", O_RDWR);
  snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)pid);
  snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", own_path());
  snprintf(fd, sizeof(fd), "%s=3", HELPER_FD_ENV);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(err, 2) < 0 ||
      dup2(out, 3) != 3)
    _exit(127);
  setsid();
  execve(exe, argv, envp);
  _exit(127);
}

int heap_exe_learn(pid_t pid, struct heap_layout *h, struct roots_layout *rl,
                   struct exe_file *file, char *msg, size_t len)
{
  struct exe_answer *a = calloc(1, sizeof(*a));
  char errtext[300] = "";
  int out[2] = {-1, -1}, err[2] = {-1, -1}, st = 0, ret;
  size_t got;
  long long deadline;
  pid_t c;
  if (a == NULL)
    return remote_fail(msg, len, ENOMEM, "out of memory");
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      (c = fork()) < 0) {
    ret = remote_fail(msg, len, errno, "cannot start a helper process: %s",
                      strerror(errno));
    close(out[0]), close(out[1]), close(err[0]), close(err[1]);
    free(a);
    return ret;
  }
  if (c == 0)
    exec_helper(pid, out[1], err[1]);
  close(out[1]);
  close(err[1]);
  deadline = remote_now_ms() + HELPER_MS;
  got = remote_read_all(out[0], a, sizeof(*a), deadline);
  errtext[remote_read_all(err[0], errtext, sizeof(errtext) - 1,
                          got == sizeof(*a) ? remote_now_ms()
                                            : remote_now_ms() + 200)] = '\0';
  /* It exits once it answered; one that did not is abandoned. */
  if (got != sizeof(*a) || waitpid(c, &st, WNOHANG) != c) {
    kill(c, SIGKILL);
    while (waitpid(c, &st, 0) < 0 && errno == EINTR)
      ;
  }
  errtext[strcspn(errtext, "\n")] = '\0';
  close(out[0]);
  close(err[0]);
  if (got != sizeof(*a) || a->magic != EXE_MAGIC || a->size != sizeof(*a)) {
    ret =
        remote_fail(msg, len, ENOTSUP,
                    "check 'layout helper' failed: a helper process of process "
                    "%d's executable with memprof.so preloaded gave no layout "
                    "(%s%s%s)",
                    (int)pid,
                    remote_now_ms() >= deadline ? "no answer in 30 s"
                    : got > 0                   ? "a cut answer"
                                                : "it ended without answering",
                    errtext[0] ? ": " : "", errtext);
  } else if (a->err != 0) {
    ret = remote_fail(msg, len, a->err, "%s", a->msg);
  } else {
    *h = a->h;
    *rl = a->rl;
    *file = a->file;
    /* Names of the helper's memory: not valid here. */
    h->base.family = "the target's build (learned in a helper)";
    h->base.build = NULL;
    h->base.state_numbering = NULL;
    ret = 0;
  }
  free(a);
  return ret;
}

/* ---- Inside the helper ------------------------------------------------- */

/* The file that holds this process's lua_newstate. */
static int own_file(struct exe_file *f, char *msg, size_t len)
{
  struct remote_maps maps;
  const struct remote_map *m;
  void *fn = dlsym(RTLD_DEFAULT, "lua_newstate");
  if (remote_maps_read(0, &maps) != 0)
    return remote_fail(msg, len, ENOTSUP,
                       "the helper cannot read its mappings");
  m = fn != NULL ? remote_maps_find(&maps, (uintptr_t)fn) : NULL;
  f->inode = 0;
  if (m != NULL) {
    f->dev_major = m->dev_major, f->dev_minor = m->dev_minor;
    f->inode = m->inode;
  }
  remote_maps_free(&maps);
  if (f->inode == 0)
    return remote_fail(
        msg, len, ENOTSUP,
        "check 'helper's LuaJIT' failed: its lua_newstate is in no "
        "file it maps");
  return 0;
}

static int learn_in(lua_State *T)
{
  struct exe_answer *a = lua_touserdata(T, 1);
  a->err = heap_remote_learn(T, &a->h, &a->rl, a->msg, sizeof(a->msg));
  return 0;
}

static void answer(int fd)
{
  struct exe_answer *a = calloc(1, sizeof(*a));
  lua_State *T = NULL;
  if (a == NULL)
    return;
  a->magic = EXE_MAGIC;
  a->size = sizeof(*a);
  a->err = own_file(&a->file, a->msg, sizeof(a->msg));
  if (a->err == 0)
    T = luaL_newstate();
  if (a->err == 0 && T == NULL)
    a->err =
        remote_fail(a->msg, sizeof(a->msg), ENOTSUP,
                    "check 'throw-away VM' failed: the helper's luaL_newstate "
                    "made no VM");
  else if (T != NULL) {
    a->err = ENOTSUP;
    snprintf(a->msg, sizeof(a->msg), "learning the layout raised an error");
    lua_cpcall(T, learn_in, a);
    lua_close(T);
  }
  remote_write_all(fd, a, sizeof(*a));
  free(a);
}

/* Runs only in a helper started by heap_exe_learn: it never returns into
** the program. */
__attribute__((constructor)) static void layout_helper(void)
{
  const char *fd = getenv(HELPER_FD_ENV);
  if (fd == NULL || strcmp(fd, "3") != 0)
    return;
  answer(3);
  _exit(0);
}
