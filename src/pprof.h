/*
** A pprof heap profile (profile.proto, gzip-compressed) of a profile's
** model (places.h) and live table (live.h): what snapshot.c writes for
** memprof.snapshot's format 'pprof'. Nothing here allocates through Lua.
*/
#ifndef MEMPROF_PPROF_H
#define MEMPROF_PPROF_H

#include <stddef.h>
#include <stdint.h>

struct profiler;

/* Writes p's blocks live now and its allocations since start to fd.
** `name` goes in the profile's comment. Returns 0 or errno. */
int pprof_write(const struct profiler *p, int fd, const char *name);

/* CRC-32 (as gzip's) of n bytes, continuing from crc (0 to start). */
uint32_t pprof_crc32(uint32_t crc, const uint8_t *data, size_t n);

#endif
