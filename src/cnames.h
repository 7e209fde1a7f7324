/*
** Names of C functions: the dynamic symbols (dladdr), then the ELF symbol
** table (.symtab) of the object that holds the function, or of its
** separate debug file (found by build-id or .gnu_debuglink), so that
** static functions of the host program and of C modules are named too.
** Where nothing names a function: its object's real path and the offset
** in the object's own numbering (`/usr/bin/prog+0x4f2c0`, what
** `addr2line -e` takes); the process title is never used. C++ names are
** demangled if the process has the C++ runtime's demangler.
**
** Each object's symbol table is read once, on the first function looked up
** in it: its function symbols are kept in a sorted array (names in one
** block), the file is unmapped. Runs inside the allocator hook, on the
** full path only (a C function is named once per profile): memory comes
** from malloc and mmap, never from the Lua allocator.
*/
#ifndef MEMPROF_CNAMES_H
#define MEMPROF_CNAMES_H

#include <stddef.h>
#include <stdint.h>

/* The directory of separate debug files, unless MEMPROF_DEBUG_DIR says. */
#define CNAMES_DEBUG_DIR "/usr/lib/debug"

/* The C++ runtime's demangler (abi::__cxa_demangle). */
typedef char *(*cnames_demangler)(const char *name, char *buf, size_t *len,
                                  int *status);

struct cnames {
  struct cname_object *objects; /* Objects read so far. */
  char *debug_dir;
  int demangler_known;       /* demangle was looked up. */
  cnames_demangler demangle; /* NULL: the process has no C++ runtime. */
};

/* Returns 0, or ENOMEM. Reads MEMPROF_DEBUG_DIR (call it outside the
** hook). */
int cnames_init(struct cnames *c);
void cnames_free(struct cnames *c);

/* Writes a printable name of the C function at addr into buf. A C++ name
** is demangled when the process has the C++ runtime. Returns 1 if a
** symbol named it, 0 if buf holds the object and offset (or the address)
** instead. */
int cnames_name(struct cnames *c, uintptr_t addr, char *buf, size_t len);

#endif
