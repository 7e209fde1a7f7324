/*
** Symbols: lazy description of prototypes, C functions and traces.
**
** The stream describes a symbol right before the first event that refers
** to it. The cache remembers which addresses have been described; when the
** VM frees a block at a cached address (a prototype or a trace), the entry
** is dropped, so an object later allocated at the same address is described
** again. Everything here runs inside the allocator hook: memory comes from
** malloc, never from the Lua allocator.
*/
#ifndef MEMPROF_SYMBOLS_H
#define MEMPROF_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

#include "cnames.h"
#include "vm_inspect.h"
#include "writer.h"

#define MAX_FFID 256

/* Plain C functions of the standard libraries, named by the field that
** holds them ("package.loaders[2]"): at most this many. */
#define MAX_LIBRARY_CFUNCS 32

struct library_cfunc {
  uintptr_t addr;
  char *name;
};

struct symbol_slot {
  uintptr_t addr;     /* 0: empty. */
  uint32_t traceno;   /* For a trace object: its number; else 0. */
  uint32_t has_ident; /* For a prototype: ident is known. */
  uint64_t ident[2];  /* See symbols_proto_ident. */
};

/* Bits of a filter in front of the cache: a clear bit means "no cached
** address hashes here", so most frees cost one bit test. */
#define SYMBOL_FILTER_BITS 4096

#define SYMBOL_PROTO_MEMO 8

/* The slot of prototype pt in symbols.proto_memo (prototypes are 16-byte
** aligned and longer than 100 bytes: the next bits tell neighbours
** apart). */
static inline size_t symbols_proto_slot(uintptr_t pt)
{
  return (size_t)(pt >> 4) & (SYMBOL_PROTO_MEMO - 1);
}

struct symbols {
  uint64_t filter[SYMBOL_FILTER_BITS / 64];
  struct symbol_slot *slots;
  size_t mask;          /* Number of slots - 1 (a power of two minus one). */
  size_t count;         /* Occupied slots. */
  uintptr_t last_proto; /* The prototype described most recently. */
  /* Prototypes described lately, by symbols_proto_slot: the hook's fast
  ** path knows them described (a loop cycles through a few: coroutines,
  ** three). 0: none. */
  uintptr_t proto_memo[SYMBOL_PROTO_MEMO];
  struct vm_line_memos line_memo; /* The hook's; their pt a cached one. */
  uintptr_t last_c;               /* The C function described most recently. */
  uintptr_t *trace_obj;           /* Per trace number: the trace described. */
  uint32_t trace_cap;
  /* 0, or trace_cap as the hook last saw it with trace lines on: its fast
  ** path looks for cached places of traces numbered below it. */
  uint32_t place_cap;
  char *builtin[MAX_FFID]; /* Names of built-ins by id ("string.rep"). */
  struct library_cfunc library[MAX_LIBRARY_CFUNCS];
  unsigned libraries;   /* Entries of library[] in use. */
  unsigned generation;  /* Bumped when a described object goes away (a
                           prototype or a trace: trace_obj is cleared). */
  struct cnames cnames; /* Names of C functions. */
};

/* Returns 0, or ENOMEM. Reads the environment (cnames_init): call it
** outside the hook. */
int symbols_init(struct symbols *s);
void symbols_free(struct symbols *s);

/* Names a built-in function id (learned at start). Returns 0 or ENOMEM. */
int symbols_name_builtin(struct symbols *s, unsigned ffid, const char *name);

/* Names a plain C function of a standard library by the field that holds
** it (learned at start), for when no symbol names it. Returns 0 or ENOMEM;
** past MAX_LIBRARY_CFUNCS, the name is left out. */
int symbols_name_library_cfunc(struct symbols *s, uintptr_t addr,
                               const char *name);

/* Which filter bit an address maps to. */
static inline size_t symbols_filter_bit(uintptr_t addr)
{
  return (size_t)((addr >> 3) ^ (addr >> 15)) & (SYMBOL_FILTER_BITS - 1);
}

/* Whether the cache may hold addr (a clear filter bit: it does not). */
static inline int symbols_may_hold(const struct symbols *s, uintptr_t addr)
{
  size_t bit = symbols_filter_bit(addr);
  return (s->filter[bit / 64] & (1ULL << (bit % 64))) != 0;
}

/* The VM is about to free or move the block at addr. */
void symbols_forget_slow(struct symbols *s, uintptr_t addr);
static inline void symbols_forget(struct symbols *s, uintptr_t addr)
{
  if (symbols_may_hold(s, addr))
    symbols_forget_slow(s, addr);
}

/*
** Writes the symbol events that the event located at `site` needs and that
** the stream does not hold yet. Reads the VM, so it runs before the real
** allocator. Returns 0, or ENOMEM if the cache cannot grow.
*/
int symbols_describe(struct symbols *s, struct writer *w,
                     const struct vm_layout *lay, uintptr_t g,
                     const struct vm_site *site);

/* Describe one prototype, or one C function or built-in (ffid > 1), if
** the stream does not hold it yet. Return 0, or ENOMEM. */
int symbols_describe_proto(struct symbols *s, struct writer *w,
                           const struct vm_layout *lay, uintptr_t pt);
int symbols_describe_c(struct symbols *s, struct writer *w, uintptr_t addr,
                       uint8_t ffid);

/* The name of a C function or built-in (ffid > 1), as its symbol event
** gives it. */
void symbols_c_name(struct symbols *s, uintptr_t addr, uint8_t ffid, char *name,
                    size_t len);

/*
** What a reader names prototype pt by, for call stacks: a 128-bit digest
** of its chunk name and first line, so that a prototype freed and loaded
** again (at any address) has the same one. Describes pt first if the
** stream does not hold it yet; the digest is computed once per described
** prototype. A prototype whose source cannot be read is known by its
** address (as a reader shows it: LFUNC 0xADDR). Returns 0, or ENOMEM.
*/
int symbols_proto_ident(struct symbols *s, struct writer *w,
                        const struct vm_layout *lay, uintptr_t pt,
                        uint64_t ident[2]);

/* The finaliser of murmur3's 64-bit hash: every input bit changes about
** half of the output bits. */
static inline uint64_t symbols_mix64(uint64_t h)
{
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

#endif
