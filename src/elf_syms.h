/*
** The symbols of an ELF file on disk (elf_syms.c), and what they prove of
** another process: whether any file it maps code of is a LuaJIT.
*/
#ifndef MEMPROF_ELF_SYMS_H
#define MEMPROF_ELF_SYMS_H

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <sys/types.h>

#include "remote_proc.h"

/* One symbol table of a file and its strings (NUL-terminated). */
struct elf_syms {
  ElfW(Sym) * sym;
  size_t n;
  char *str;
  size_t strsize;
};

/* The symbol table of section type `type` (SHT_DYNSYM or SHT_SYMTAB) of
** the ELF file at path, found by its section headers. Returns 1, or 0
** (no such table, or the file unreadable) with d empty. */
int elf_syms_read(const char *path, unsigned type, struct elf_syms *d);
void elf_syms_free(struct elf_syms *d);

/* The name of symbol i ("" if its name is out of the strings). */
const char *elf_syms_name(const struct elf_syms *d, size_t i);

/* Whether d defines a function named name. */
int elf_syms_defines(const struct elf_syms *d, const char *name);

/* Whether process pid is proven to run no LuaJIT: every file it maps code
** of (its executable and libraries) was read, and none defines a luaJIT_
** symbol or lua_newstate in its dynamic or its full symbol table (sleep,
** python3). Then returns 1 with the refusal in msg (touching nothing of
** the process); else 0 (a LuaJIT, or a file that could not be read). */
int elf_syms_not_luajit(pid_t pid, const struct remote_maps *maps, char *msg,
                        size_t len);

#endif
