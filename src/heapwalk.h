/*
** The heap walk: every object reachable from the VM's roots and every
** reference between them, written to a file as the walk goes (the heap
** snapshot format, docs/heap-format.md).
**
** JIT traces are objects too (heap_traces.h), held by the prototype they
** start in, when their layout is verified.
**
** The walk runs in a C function of the VM it walks and changes nothing in
** it: it allocates nothing through the VM (its own memory is malloc'd,
** bounded by the objects visited), runs no Lua code and no metamethod,
** and leaves the collector's state alone. It reads objects only through
** the verified heap layout (heap_layout.h) and the public API, and stops
** with a message at the first object that does not read as its reference
** says.
*/
#ifndef MEMPROF_HEAPWALK_H
#define MEMPROF_HEAPWALK_H

#include <stddef.h>
#include <stdint.h>

#include "heap_layout.h"
#include "lua.h"

/* The file format's constants. */
#define HEAP_MAGIC "ljh"
#define HEAP_VERSION 3
#define HEAP_FLAG_GC64 1
#define HEAP_FLAG_CDATA_UNKNOWN 2 /* cdata are written with size 0. */
#define HEAP_RECORD_OBJECT 0x01
#define HEAP_RECORD_REF 0x02
#define HEAP_RECORD_END 0x7f
#define HEAP_END_MAGIC "end"
/* Bytes of a string object's text the file keeps. */
#define HEAP_STRING_KEEP 200
/* A reference's kind byte has this bit when the reference is weak. */
#define HEAP_REF_WEAK 0x80

enum heap_ref_kind {
  HREF_ROOT = 1,       /* From no object: a root, named. */
  HREF_FIELD,          /* A table's value under a string key. */
  HREF_INDEX,          /* A table's value under an integer key. */
  HREF_KEY,            /* A table's key object. */
  HREF_BY_KEY,         /* A table's value under an object key. */
  HREF_BY_NUMBER,      /* A table's value under a non-integer number. */
  HREF_BY_BOOL,        /* A table's value under true or false. */
  HREF_BY_LIGHTUD,     /* A table's value under a light userdata. */
  HREF_METATABLE,      /* A table's or userdata's metatable. */
  HREF_ENV,            /* A function's, thread's or userdata's env. */
  HREF_UPVALUE,        /* A function's upvalue (object or C value). */
  HREF_UPVALUE_VALUE,  /* An upvalue object's value. */
  HREF_PROTO,          /* A Lua function's prototype. */
  HREF_CONSTANT,       /* A prototype's constant. */
  HREF_CHUNKNAME,      /* A prototype's chunk name. */
  HREF_STACK,          /* A thread's stack slot. */
  HREF_FRAME_FUNCTION, /* The function of a thread's call frame. */
  HREF_TRACE,          /* A JIT trace its start prototype holds. */
};

/* What a heap snapshot notes of a running profile: the bytes of its stream
** written so far (the events the profile holds at the snapshot). */
struct heap_profile_note {
  int running;
  uint64_t written;
  uint64_t pid; /* The process the VM is in (0: this one). */
};

/* The roots of a VM as read from its global_State (heap_remote.h), for a
** VM where no API call can run. 0: none. */
#define HEAP_BASEMT_N 7
struct heap_roots {
  uintptr_t registry, main, running;
  /* The metatables of nil, booleans, numbers, light userdata, strings,
  ** threads and functions. */
  uintptr_t basemt[HEAP_BASEMT_N];
};

/*
** Writes the snapshot of L's VM to fd. Returns 0, or an errno with a
** message in msg (memory, or an object that does not read as the layout
** says); a write error's message is empty, the caller names its file.
*/
int heapwalk_write(lua_State *L, const struct heap_layout *h, int fd,
                   const struct heap_profile_note *note, char *msg, size_t len);

/*
** The same walk of a VM that is not this process's own: a copy of another
** process's memory at its own addresses (heap_remote.c), where L is that
** VM's main thread and r its roots. Calls no API function.
*/
int heapwalk_write_at(uintptr_t L, const struct heap_roots *r,
                      const struct heap_layout *h, int fd,
                      const struct heap_profile_note *note, char *msg,
                      size_t len);

#endif
