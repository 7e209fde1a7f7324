/*
** Constants of the profile stream (see docs/format.md).
**
** The default stream is byte-compatible with Tarantool's memprof output:
** a symbol table section ("ljs", version 3) followed by an event section
** ("ljm", version 3). Only the constants live here; the writer encodes them.
*/
#ifndef MEMPROF_STREAM_FORMAT_H
#define MEMPROF_STREAM_FORMAT_H

#define SYMTAB_MAGIC "ljs"
#define SYMTAB_VERSION 3
#define SYMTAB_FINAL 0x80

#define EVENTS_MAGIC "ljm"
#define EVENTS_VERSION 3
#define EVENTS_EPILOGUE 0x80

/* Event kind: the low two bits of an event header. */
#define EVENT_SYMBOL 0x00
#define EVENT_ALLOC 0x01
#define EVENT_FREE 0x02
#define EVENT_REALLOC 0x03

/* Source of an allocation: bits 2..4 of an event header. */
#define SOURCE_INTERNAL (1 << 2)
#define SOURCE_LUA (2 << 2)
#define SOURCE_C (3 << 2)
#define SOURCE_TRACE (4 << 2)

/* The extended format (docs/format.md): the event section's version, the
** flag of an allocation event that carries a stack id, and two records. */
#define EVENTS_VERSION_EXTENDED 100
#define EVENT_HAS_STACK 0x20
/* On a Lua-line event of the extended format: it ran in compiled code,
** and the trace's number follows the location. */
#define EVENT_COMPILED 0x40
/* On an internal event of the extended format: its kind follows the
** header (INTERNAL_* in vm_layout.h). */
#define EVENT_HAS_KIND 0x20
/* A note (0x1C): its kind, then a number. */
#define RECORD_NOTE 0x1C
#define NOTE_HEAP_AT_START 1
#define NOTE_COLLECTED_AT_STOP 2
/* How events of compiled code are attributed: NOTE_COMPILED_* plus 4 times
** why (NOTE_WHY_*), right after the heap at start. */
#define NOTE_COMPILED_CODE 3
#define NOTE_COMPILED_AT_START 0 /* The trace's start. */
#define NOTE_COMPILED_RESUME 1   /* The snapshot's resume point. */
#define NOTE_COMPILED_EXACT 2    /* Per-line snapshots. */
#define NOTE_COMPILED_WALK 3     /* The walk from the resume point. */
#define NOTE_WHY_ASKED 0         /* As the option (or its default) says. */
#define NOTE_WHY_NO_MCOFS 1      /* The build's snapshots have no mcofs. */
#define NOTE_WHY_NOT_VERIFIED 2  /* Another check of the calibration. */
#define NOTE_WHY_NO_PROF_MODE 3  /* J->prof_mode was not found. */
#define NOTE_WHY_PROGRAM_PROF 4  /* The program runs LuaJIT's profiler. */
#define RECORD_STACK 0x14
#define RECORD_TIME 0x18

/* The sampling record, right after the header of an extended event
** section whose events are sampled: 0x5c, the scheme, the mean bytes
** between samples. Scheme 1: a Poisson process over allocated bytes. */
#define RECORD_SAMPLING 0x5c
#define SAMPLING_POISSON_BYTES 1

#endif
