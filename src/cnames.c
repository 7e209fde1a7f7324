/*
** Names of C functions from dynamic symbols and ELF symbol tables.
*/
#define _GNU_SOURCE
#include "cnames.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if UINTPTR_MAX > 0xffffffffu
#define NATIVE_CLASS ELFCLASS64
#else
#define NATIVE_CLASS ELFCLASS32
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif

/* A function symbol: its address in the object's numbering, its name. */
struct cname_sym {
  uintptr_t value;
  uint32_t name; /* Offset in cname_object.names. */
  uint32_t rank; /* Global 0, weak 1, local 2: the best name of an address
                    comes first. */
};

struct cname_object {
  struct cname_object *next;
  uintptr_t bias;         /* What the loader added to the object's addresses. */
  uintptr_t lo, hi;       /* Range of its loaded segments. */
  char *loader_name;      /* The loader's name for it ("" for the program). */
  char *path;             /* Its real path, for names. */
  struct cname_sym *syms; /* Sorted by value, one per value. */
  size_t nsyms;
  char *names;
};

int cnames_init(struct cnames *c)
{
  const char *dir = getenv("MEMPROF_DEBUG_DIR");
  memset(c, 0, sizeof(*c));
  c->debug_dir = strdup(dir != NULL && dir[0] != '\0' ? dir : CNAMES_DEBUG_DIR);
  return c->debug_dir != NULL ? 0 : ENOMEM;
}

static void free_object(struct cname_object *o)
{
  free(o->loader_name);
  free(o->path);
  free(o->syms);
  free(o->names);
  free(o);
}

void cnames_free(struct cnames *c)
{
  while (c->objects != NULL) {
    struct cname_object *o = c->objects;
    c->objects = o->next;
    free_object(o);
  }
  free(c->debug_dir);
  memset(c, 0, sizeof(*c));
}

/* ---- One ELF file, mapped ---------------------------------------------- */

struct elf_file {
  const uint8_t *data;
  size_t size;
  dev_t dev;
  ino_t ino;
  const ElfW(Shdr) * sh;
  size_t shnum;
  const ElfW(Shdr) * shstr; /* Section names, or NULL. */
};

/* The bytes of a section, or NULL if they are not all in the file. */
static const uint8_t *section_data(const struct elf_file *f,
                                   const ElfW(Shdr) * s)
{
  if (s->sh_type == SHT_NOBITS || s->sh_offset > f->size ||
      s->sh_size > f->size - s->sh_offset)
    return NULL;
  return f->data + s->sh_offset;
}

static const char *section_name(const struct elf_file *f, const ElfW(Shdr) * s)
{
  const uint8_t *names;
  if (f->shstr == NULL || (names = section_data(f, f->shstr)) == NULL ||
      s->sh_name >= f->shstr->sh_size ||
      memchr(names + s->sh_name, 0, f->shstr->sh_size - s->sh_name) == NULL)
    return "";
  return (const char *)names + s->sh_name;
}

static int check_header(struct elf_file *f)
{
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)f->data;
  size_t shnum, shstrndx;
  if (f->size < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
      eh->e_ident[EI_CLASS] != NATIVE_CLASS ||
      eh->e_ident[EI_DATA] != NATIVE_DATA || eh->e_shoff == 0 ||
      eh->e_shentsize != sizeof(ElfW(Shdr)) ||
      eh->e_shoff % sizeof(uintptr_t) != 0 || eh->e_shoff > f->size ||
      f->size - eh->e_shoff < sizeof(ElfW(Shdr)))
    return 0;
  f->sh = (const ElfW(Shdr) *)(f->data + eh->e_shoff);
  /* Past 0xff00 sections, the first section header holds the counts. */
  shnum = eh->e_shnum != 0 ? eh->e_shnum : (size_t)f->sh[0].sh_size;
  shstrndx = eh->e_shstrndx != SHN_XINDEX ? eh->e_shstrndx : f->sh[0].sh_link;
  if (shnum == 0 || shnum > (f->size - eh->e_shoff) / sizeof(ElfW(Shdr)))
    return 0;
  f->shnum = shnum;
  f->shstr =
      shstrndx != SHN_UNDEF && shstrndx < shnum ? &f->sh[shstrndx] : NULL;
  return 1;
}

/* Maps the ELF file at path. Returns 1, or 0 (nothing to unmap). */
static int elf_open(const char *path, struct elf_file *f)
{
  struct stat st;
  void *data;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  memset(f, 0, sizeof(*f));
  if (fd < 0)
    return 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      (uint64_t)st.st_size < sizeof(ElfW(Ehdr)) ||
      (uint64_t)st.st_size > SIZE_MAX) {
    close(fd);
    return 0;
  }
  data = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (data == MAP_FAILED)
    return 0;
  f->data = data;
  f->size = (size_t)st.st_size;
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  if (!check_header(f)) {
    munmap(data, f->size);
    return 0;
  }
  return 1;
}

static void elf_close(struct elf_file *f)
{
  if (f->data != NULL)
    munmap((void *)f->data, f->size);
  memset(f, 0, sizeof(*f));
}

/* The first section of a type (and name, unless NULL), or NULL. */
static const ElfW(Shdr) *
    find_section(const struct elf_file *f, uint32_t type, const char *name)
{
  size_t i;
  for (i = 0; i < f->shnum; i++)
    if (f->sh[i].sh_type == type &&
        (name == NULL || strcmp(section_name(f, &f->sh[i]), name) == 0))
      return &f->sh[i];
  return NULL;
}

#define MAX_BUILD_ID 64

/* The GNU build-id of f: its length (0: none), the bytes in id. */
static size_t build_id(const struct elf_file *f, uint8_t *id)
{
  size_t i;
  for (i = 0; i < f->shnum; i++) {
    const uint8_t *p = section_data(f, &f->sh[i]), *end;
    if (f->sh[i].sh_type != SHT_NOTE || p == NULL || (uintptr_t)p % 4 != 0)
      continue;
    end = p + f->sh[i].sh_size;
    while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
      const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
      size_t name = ((size_t)n->n_namesz + 3) & ~(size_t)3;
      size_t desc = ((size_t)n->n_descsz + 3) & ~(size_t)3;
      p += sizeof(*n);
      if (name > (size_t)(end - p) || desc > (size_t)(end - p) - name)
        break;
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
          memcmp(p, "GNU", 4) == 0 && n->n_descsz > 0 &&
          n->n_descsz <= MAX_BUILD_ID) {
        memcpy(id, p + name, n->n_descsz);
        return n->n_descsz;
      }
      p += name + desc;
    }
  }
  return 0;
}

/* ---- Symbols of one file ----------------------------------------------- */

static int by_value_then_rank(const void *a, const void *b)
{
  const struct cname_sym *x = a, *y = b;
  if (x->value != y->value)
    return x->value < y->value ? -1 : 1;
  if (x->rank != y->rank)
    return x->rank < y->rank ? -1 : 1;
  return x->name < y->name ? -1 : x->name > y->name;
}

/* The name of a function symbol worth keeping, or NULL. */
static const char *function_name(const ElfW(Sym) * s, const char *strtab,
                                 size_t strsize)
{
  if (ELF32_ST_TYPE(s->st_info) != STT_FUNC || s->st_shndx == SHN_UNDEF ||
      s->st_value == 0 || s->st_name == 0 || s->st_name >= strsize ||
      memchr(strtab + s->st_name, 0, strsize - s->st_name) == NULL)
    return NULL;
  return strtab + s->st_name;
}

static uint32_t rank_of(const ElfW(Sym) * s)
{
  switch (ELF32_ST_BIND(s->st_info)) {
  case STB_GLOBAL:
    return 0;
  case STB_WEAK:
    return 1;
  default:
    return 2;
  }
}

/* Reads the function symbols of f's .symtab into o. Returns 1 if it has
** any, 0 if not or out of memory. */
static int read_symtab(struct cname_object *o, const struct elf_file *f)
{
  const ElfW(Shdr) *tab = find_section(f, SHT_SYMTAB, NULL), *str;
  const ElfW(Sym) * syms;
  const char *strtab;
  size_t n, i, count = 0, bytes = 0, kept;
  if (tab == NULL || tab->sh_entsize != sizeof(ElfW(Sym)) ||
      tab->sh_link >= f->shnum ||
      (syms = (const ElfW(Sym) *)section_data(f, tab)) == NULL ||
      (uintptr_t)syms % sizeof(uintptr_t) != 0)
    return 0;
  str = &f->sh[tab->sh_link];
  if (str->sh_type != SHT_STRTAB ||
      (strtab = (const char *)section_data(f, str)) == NULL)
    return 0;
  n = tab->sh_size / sizeof(ElfW(Sym));
  for (i = 0; i < n; i++) {
    const char *name = function_name(&syms[i], strtab, str->sh_size);
    if (name != NULL) {
      count++;
      bytes += strlen(name) + 1;
    }
  }
  if (count == 0 || bytes > UINT32_MAX)
    return 0;
  o->syms = malloc(count * sizeof(*o->syms));
  o->names = malloc(bytes);
  if (o->syms == NULL || o->names == NULL) {
    free(o->syms);
    free(o->names);
    o->syms = NULL;
    o->names = NULL;
    return 0;
  }
  bytes = 0;
  count = 0;
  for (i = 0; i < n; i++) {
    const char *name = function_name(&syms[i], strtab, str->sh_size);
    size_t len;
    if (name == NULL)
      continue;
    len = strlen(name) + 1;
    memcpy(o->names + bytes, name, len);
    o->syms[count].value = (uintptr_t)syms[i].st_value;
    o->syms[count].name = (uint32_t)bytes;
    o->syms[count].rank = rank_of(&syms[i]);
    count++;
    bytes += len;
  }
  qsort(o->syms, count, sizeof(*o->syms), by_value_then_rank);
  /* One symbol per address: the first, the best ranked. */
  for (i = 0, kept = 0; i < count; i++)
    if (kept == 0 || o->syms[kept - 1].value != o->syms[i].value)
      o->syms[kept++] = o->syms[i];
  o->nsyms = kept;
  return 1;
}

/* ---- Separate debug files ---------------------------------------------- */

/* CRC-32 (the one of .gnu_debuglink, zlib's). */
static uint32_t crc32_of(const uint8_t *p, size_t n)
{
  uint32_t table[256], crc = 0xffffffffu;
  uint32_t i, k;
  for (i = 0; i < 256; i++) {
    uint32_t c = i;
    for (k = 0; k < 8; k++)
      c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  while (n-- > 0)
    crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

/* What a debug file must match: the object's build-id, or else the CRC of
** its debug link. */
struct debug_want {
  uint8_t id[MAX_BUILD_ID];
  size_t id_len;
  uint32_t crc;
  int has_crc;
  dev_t dev; /* The object itself, which is never its own debug file. */
  ino_t ino;
};

static int debug_matches(const struct elf_file *d, const struct debug_want *w)
{
  uint8_t id[MAX_BUILD_ID];
  size_t len;
  if (d->dev == w->dev && d->ino == w->ino)
    return 0;
  len = build_id(d, id);
  if (w->id_len != 0 && len != 0)
    return len == w->id_len && memcmp(id, w->id, len) == 0;
  return w->has_crc && crc32_of(d->data, d->size) == w->crc;
}

/* Opens the file at path as o's debug file if it matches and has a symbol
** table; reads it into o. */
static int try_debug_file(struct cname_object *o, const char *path,
                          const struct debug_want *w)
{
  struct elf_file d;
  int ok;
  if (!elf_open(path, &d))
    return 0;
  ok = debug_matches(&d, w) && read_symtab(o, &d);
  elf_close(&d);
  return ok;
}

/* Tries the debug file at the path a + b + c. */
static int try_path(struct cname_object *o, const struct debug_want *w,
                    const char *a, const char *b, const char *c)
{
  char path[PATH_MAX];
  int n = snprintf(path, sizeof(path), "%s%s%s", a, b, c);
  return n > 0 && (size_t)n < sizeof(path) && try_debug_file(o, path, w);
}

/* Looks for o's separate debug file: by build-id under the debug
** directory, then by debug link next to the object, in its .debug
** directory, and under the debug directory. */
static int read_debug_file(struct cname_object *o, const struct elf_file *f,
                           const char *debug_dir)
{
  const ElfW(Shdr) *link = find_section(f, SHT_PROGBITS, ".gnu_debuglink");
  const uint8_t *data;
  const char *name;
  struct debug_want w;
  /* "xx/" then the rest of the id in hex, ".debug". */
  char id_path[3 * MAX_BUILD_ID + 8], *dir;
  size_t i, len;
  int found;
  memset(&w, 0, sizeof(w));
  w.dev = f->dev;
  w.ino = f->ino;
  w.id_len = build_id(f, w.id);
  if (w.id_len > 1) {
    for (i = 0, len = 0; i < w.id_len; i++)
      len += (size_t)sprintf(id_path + len, i == 0 ? "%02x/" : "%02x", w.id[i]);
    strcpy(id_path + len, ".debug");
    if (try_path(o, &w, debug_dir, "/.build-id/", id_path))
      return 1;
  }
  if (link == NULL || (data = section_data(f, link)) == NULL)
    return 0;
  name = (const char *)data;
  len = strnlen(name, link->sh_size);
  /* The name, its NUL, padding to 4 bytes, then the CRC. */
  if (len == 0 || strchr(name, '/') != NULL ||
      ((len + 4) & ~(size_t)3) + 4 > link->sh_size)
    return 0;
  memcpy(&w.crc, data + ((len + 4) & ~(size_t)3), 4);
  w.has_crc = 1;
  /* The object's directory, with its final slash. */
  if (strrchr(o->path, '/') == NULL || (dir = strdup(o->path)) == NULL)
    return 0;
  strrchr(dir, '/')[1] = '\0';
  found = try_path(o, &w, dir, "", name) ||
          try_path(o, &w, dir, ".debug/", name) ||
          try_path(o, &w, debug_dir, dir, name);
  free(dir);
  return found;
}

/* Reads o's function symbols: from its debug file if one is installed,
** else from its own symbol table. The program is read through
** /proc/self/exe, whatever its path says now. */
static void read_symbols(struct cname_object *o, const char *debug_dir,
                         int is_program)
{
  struct elf_file f;
  if (!elf_open(is_program ? "/proc/self/exe" : o->path, &f))
    return;
  if (!read_debug_file(o, &f, debug_dir))
    read_symtab(o, &f);
  elf_close(&f);
}

/* ---- Objects ------------------------------------------------------------- */

/* What dl_iterate_phdr tells of the object that holds an address. */
struct found {
  uintptr_t addr;
  int index, is_program;
  uintptr_t bias, lo, hi;
  char *name; /* strdup'd; NULL if not found or out of memory. */
};

static int find_object(struct dl_phdr_info *info, size_t size, void *data)
{
  struct found *fd = data;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  int hit = 0, i;
  (void)size;
  for (i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type != PT_LOAD)
      continue;
    if (start < lo)
      lo = start;
    if (start + ph->p_memsz > hi)
      hi = start + ph->p_memsz;
    if (fd->addr >= start && fd->addr - start < ph->p_memsz)
      hit = 1;
  }
  if (!hit) {
    fd->index++;
    return 0;
  }
  /* The program comes first; the loader names it "". */
  fd->is_program = fd->index == 0;
  fd->bias = info->dlpi_addr;
  fd->lo = lo;
  fd->hi = hi;
  fd->name = strdup(info->dlpi_name != NULL ? info->dlpi_name : "");
  return 1;
}

/* The real path of the object: /proc/self/exe's target for the program
** (its command line may have been rewritten into a process title). */
static char *real_path(const struct found *fd)
{
  char buf[PATH_MAX];
  char *path;
  if (fd->is_program) {
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) {
      buf[n] = '\0';
      return strdup(buf);
    }
  } else if ((path = realpath(fd->name, NULL)) != NULL) {
    return path;
  }
  return strdup(fd->name[0] != '\0' ? fd->name : "?");
}

/* The object that holds addr, read on first use; NULL if none (or out of
** memory). */
static struct cname_object *object_of(struct cnames *c, uintptr_t addr)
{
  struct found fd;
  struct cname_object *o;
  memset(&fd, 0, sizeof(fd));
  fd.addr = addr;
  if (dl_iterate_phdr(find_object, &fd) == 0 || fd.name == NULL)
    return NULL;
  for (o = c->objects; o != NULL; o = o->next)
    if (o->bias == fd.bias && o->lo == fd.lo && o->hi == fd.hi &&
        strcmp(o->loader_name, fd.name) == 0) {
      free(fd.name);
      return o;
    }
  o = calloc(1, sizeof(*o));
  if (o == NULL || (o->path = real_path(&fd)) == NULL) {
    free(o);
    free(fd.name);
    return NULL;
  }
  o->loader_name = fd.name;
  o->bias = fd.bias;
  o->lo = fd.lo;
  o->hi = fd.hi;
  read_symbols(o, c->debug_dir, fd.is_program);
  o->next = c->objects;
  c->objects = o;
  return o;
}

/* The name of the function at value in o's numbering, or NULL. */
static const char *symbol_at(const struct cname_object *o, uintptr_t value)
{
  size_t lo = 0, hi = o->nsyms;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (o->syms[mid].value == value)
      return o->names + o->syms[mid].name;
    if (o->syms[mid].value < value)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* Writes a symbol's name, demangled if it is a C++ one and the process
** has the demangler. */
static void put_symbol(struct cnames *c, const char *name, char *buf,
                       size_t len)
{
  char *plain = NULL;
  int status = -1;
  if (name[0] == '_' && name[1] == 'Z') {
    if (!c->demangler_known) {
      void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
      memcpy(&c->demangle, &f, sizeof(f));
      c->demangler_known = 1;
    }
    if (c->demangle != NULL)
      plain = c->demangle(name, NULL, NULL, &status);
  }
  snprintf(buf, len, "%s", plain != NULL && status == 0 ? plain : name);
  free(plain);
}

int cnames_name(struct cnames *c, uintptr_t addr, char *buf, size_t len)
{
  Dl_info info;
  const struct cname_object *o;
  const char *name;
  if (dladdr((void *)addr, &info) != 0 && info.dli_sname != NULL &&
      (uintptr_t)info.dli_saddr == addr) {
    put_symbol(c, info.dli_sname, buf, len);
    return 1;
  }
  if ((o = object_of(c, addr)) == NULL) {
    snprintf(buf, len, "CFUNC 0x%lx", (unsigned long)addr);
    return 0;
  }
  if ((name = symbol_at(o, addr - o->bias)) != NULL) {
    put_symbol(c, name, buf, len);
    return 1;
  }
  snprintf(buf, len, "%s+0x%lx", o->path, (unsigned long)(addr - o->bias));
  return 0;
}
