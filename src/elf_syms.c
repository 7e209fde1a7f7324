/*
** The symbols of an ELF file on disk (see elf_syms.h).
*/
#define _GNU_SOURCE
#include "elf_syms.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The most bytes of one table read (a symbol table or its strings). */
#define SYMS_MAX (16u << 20)

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

static int syms_of_fd(int fd, unsigned type, struct elf_syms *d)
{
  ElfW(Ehdr) eh;
  ElfW(Shdr) *sh = NULL;
  int ok = 0;
  unsigned i;
  memset(d, 0, sizeof(*d));
  if (pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) &&
      memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
      eh.e_ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) &&
      eh.e_shentsize == sizeof(ElfW(Shdr)) && eh.e_shnum > 0 &&
      (sh = read_at(fd, eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(*sh))) !=
          NULL) {
    for (i = 0; i < eh.e_shnum && !ok; i++) {
      if (sh[i].sh_type != type || sh[i].sh_link >= eh.e_shnum ||
          sh[i].sh_entsize != sizeof(ElfW(Sym)))
        continue;
      d->sym = read_at(fd, sh[i].sh_offset, sh[i].sh_size);
      d->str =
          read_at(fd, sh[sh[i].sh_link].sh_offset, sh[sh[i].sh_link].sh_size);
      d->n = sh[i].sh_size / sizeof(ElfW(Sym));
      d->strsize = sh[sh[i].sh_link].sh_size;
      ok = d->sym != NULL && d->str != NULL && d->strsize > 0;
      if (!ok)
        elf_syms_free(d);
    }
  }
  free(sh);
  if (ok)
    d->str[d->strsize - 1] = '\0';
  return ok;
}

int elf_syms_read(const char *path, unsigned type, struct elf_syms *d)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC), ok;
  if (fd < 0) {
    memset(d, 0, sizeof(*d));
    return 0;
  }
  ok = syms_of_fd(fd, type, d);
  close(fd);
  return ok;
}

void elf_syms_free(struct elf_syms *d)
{
  free(d->sym);
  free(d->str);
  memset(d, 0, sizeof(*d));
}

const char *elf_syms_name(const struct elf_syms *d, size_t i)
{
  return d->sym[i].st_name < d->strsize ? d->str + d->sym[i].st_name : "";
}

int elf_syms_defines(const struct elf_syms *d, const char *name)
{
  size_t i;
  for (i = 0; i < d->n; i++)
    if (d->sym[i].st_shndx != SHN_UNDEF &&
        ELF64_ST_TYPE(d->sym[i].st_info) == STT_FUNC &&
        strcmp(elf_syms_name(d, i), name) == 0)
      return 1;
  return 0;
}

/* Whether d defines a symbol of LuaJIT: every build exports luaJIT_setmode
** beside its Lua API, and lua_newstate is kept too, for an exports list
** that left luaJIT_ out. */
static int luajit_symbol(const struct elf_syms *d)
{
  size_t i;
  for (i = 0; i < d->n; i++) {
    const char *name = elf_syms_name(d, i);
    if (d->sym[i].st_shndx != SHN_UNDEF &&
        (strncmp(name, "luaJIT_", 7) == 0 || strcmp(name, "lua_newstate") == 0))
      return 1;
  }
  return 0;
}

/* Whether the file at path, which must be the mapped file m (its device
** and inode: a path can name another file in this mount namespace; where
** they differ, as a file system may show them, nothing is proven), is a
** LuaJIT (1), is not (0), or cannot be read as m (-1). A file without a
** .symtab (stripped) is judged by its .dynsym; one with neither is no ELF
** file that can be read. */
static int file_luajit(const char *path, const struct remote_map *m)
{
  struct elf_syms d;
  struct stat st;
  int read = 0, found = 0, fd = open(path, O_RDONLY | O_CLOEXEC);
  unsigned types[2] = {SHT_DYNSYM, SHT_SYMTAB}, t;
  if (fd < 0)
    return -1;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != m->inode ||
      major(st.st_dev) != m->dev_major || minor(st.st_dev) != m->dev_minor) {
    close(fd);
    return -1;
  }
  for (t = 0; t < 2 && !found; t++) {
    if (!syms_of_fd(fd, types[t], &d))
      continue;
    read = 1;
    found = luajit_symbol(&d);
    elf_syms_free(&d);
  }
  close(fd);
  return found ? 1 : read ? 0 : -1;
}

/* Whether an earlier mapping than maps->m[i] is of the same file. */
static int seen_before(const struct remote_maps *maps, size_t i)
{
  size_t j;
  for (j = 0; j < i; j++)
    if (maps->m[j].inode == maps->m[i].inode &&
        maps->m[j].dev_major == maps->m[i].dev_major &&
        maps->m[j].dev_minor == maps->m[i].dev_minor &&
        maps->m[j].perms[2] == 'x')
      return 1;
  return 0;
}

/* 1: a file process pid maps code of is a LuaJIT; 0: each was read and
** none is; -1: one could not be read. *files: the files read. */
static int luajit_mapped(pid_t pid, const struct remote_maps *maps, int *files)
{
  char path[320];
  size_t i;
  int out = 0;
  *files = 0;
  for (i = 0; i < maps->n && out != 1; i++) {
    const struct remote_map *m = &maps->m[i];
    int is;
    if (m->perms[2] != 'x' || m->inode == 0 || m->path[0] != '/' ||
        seen_before(maps, i))
      continue;
    /* Through the process's root: its mount namespace may differ. */
    snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, m->path);
    if ((is = file_luajit(path, m)) < 0)
      is = file_luajit(m->path, m);
    if (is >= 0)
      (*files)++;
    if (is != 0)
      out = is > 0 ? 1 : -1;
  }
  return out;
}

int elf_syms_not_luajit(pid_t pid, const struct remote_maps *maps, char *msg,
                        size_t len)
{
  char exe[256] = "?", link[64];
  ssize_t n;
  int files;
  if (luajit_mapped(pid, maps, &files) != 0)
    return 0;
  snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
  if ((n = readlink(link, exe, sizeof(exe) - 1)) > 0)
    exe[n] = '\0';
  remote_fail(msg, len, ENOTSUP,
              "process %d (%s) does not run LuaJIT: none of the %d files it "
              "maps code of (its executable and libraries) defines a luaJIT_ "
              "symbol or lua_newstate; it runs on untouched",
              (int)pid, exe, files);
  return 1;
}
