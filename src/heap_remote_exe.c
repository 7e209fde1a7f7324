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
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "lauxlib.h"
#include "remote_proc.h"

#define EXE_MAGIC 0x4d50584cu /* "MPXL" */
#define HELPER_FD_ENV "MEMPROF_LAYOUT_HELPER_FD"
/* The helper learns in about a second; a loaded machine gets more. */
#define HELPER_MS 30000
#define SYMS_MAX (16u << 20)

struct exe_answer {
  uint32_t magic, size;
  int32_t err;
  char msg[400];
  struct exe_file file;
  struct heap_layout h;
  struct roots_layout rl;
};

/* ---- The executable's dynamic symbols ---------------------------------- */

struct dynsyms {
  ElfW(Sym) * sym;
  size_t n;
  char *str;
  size_t strsize;
};

static void *read_at(int fd, uint64_t off, uint64_t size)
{
  char *p;
  size_t got = 0;
  if (size == 0 || size > SYMS_MAX || (p = malloc((size_t)size)) == NULL)
    return NULL;
  while (got < size) {
    ssize_t r = pread(fd, p + got, (size_t)size - got, (off_t)(off + got));
    if (r <= 0) {
      free(p);
      return NULL;
    }
    got += (size_t)r;
  }
  return p;
}

/* The .dynsym of the ELF file at path (its section headers). Returns 1. */
static int dynsyms_read(const char *path, struct dynsyms *d)
{
  ElfW(Ehdr) eh;
  ElfW(Shdr) *sh = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC), ok = 0;
  unsigned i;
  memset(d, 0, sizeof(*d));
  if (fd < 0)
    return 0;
  if (pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) &&
      memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
      eh.e_ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) &&
      eh.e_shentsize == sizeof(ElfW(Shdr)) && eh.e_shnum > 0 &&
      (sh = read_at(fd, eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(*sh))) !=
          NULL) {
    for (i = 0; i < eh.e_shnum && !ok; i++) {
      if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh.e_shnum ||
          sh[i].sh_entsize != sizeof(ElfW(Sym)))
        continue;
      d->sym = read_at(fd, sh[i].sh_offset, sh[i].sh_size);
      d->str =
          read_at(fd, sh[sh[i].sh_link].sh_offset, sh[sh[i].sh_link].sh_size);
      d->n = sh[i].sh_size / sizeof(ElfW(Sym));
      d->strsize = sh[sh[i].sh_link].sh_size;
      ok = d->sym != NULL && d->str != NULL && d->strsize > 0;
    }
  }
  free(sh);
  close(fd);
  if (ok)
    d->str[d->strsize - 1] = '\0';
  return ok;
}

static void dynsyms_free(struct dynsyms *d)
{
  free(d->sym);
  free(d->str);
}

static const char *sym_name(const struct dynsyms *d, size_t i)
{
  return d->sym[i].st_name < d->strsize ? d->str + d->sym[i].st_name : "";
}

static int defines(const struct dynsyms *d, const char *name)
{
  size_t i;
  for (i = 0; i < d->n; i++)
    if (d->sym[i].st_shndx != SHN_UNDEF &&
        ELF64_ST_TYPE(d->sym[i].st_info) == STT_FUNC &&
        strcmp(sym_name(d, i), name) == 0)
      return 1;
  return 0;
}

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
  struct dynsyms theirs, ours;
  struct stat st;
  const char *so = own_path();
  size_t i;
  int has;
  snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)pid);
  if (!dynsyms_read(exe, &theirs))
    return 0;
  has = defines(&theirs, "lua_newstate");
  if (has && (so == NULL || !dynsyms_read(so, &ours))) {
    remote_fail(msg, len, 0, "cannot read memprof.so's own symbols (%s)",
                so != NULL ? so : "its path unknown");
    has = -1;
  } else if (has) {
    for (i = 0; i < ours.n && has == 1; i++) {
      const char *name = sym_name(&ours, i);
      if (ours.sym[i].st_shndx == SHN_UNDEF && strncmp(name, "lua", 3) == 0 &&
          !defines(&theirs, name)) {
        remote_fail(msg, len, 0,
                    "check 'LuaJIT API' failed: the executable of process %d "
                    "exports no %s, which memprof.so needs to learn its layout",
                    (int)pid, name);
        has = -1;
      }
    }
    dynsyms_free(&ours);
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
  dynsyms_free(&theirs);
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
