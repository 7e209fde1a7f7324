/*
** Sampled recording: which allocations are recorded (docs/format.md,
** "Sampling").
**
** Allocated bytes are a Poisson process of mean rate one sample per `mean`
** bytes. The distance to the next sample is drawn from an exponential
** distribution of mean `mean` bytes; each allocation of s bytes takes s
** from it, and the allocation that brings it to zero or below is sampled
** (then a new distance is drawn). An exponential distance has no memory,
** so whatever came before, an allocation of s bytes is sampled with
** probability 1 - exp(-s / mean), and a sampled block stands for
** 1 / (1 - exp(-s / mean)) blocks of its size: the reports scale by it.
** Rounding the distance up to a whole byte changes nothing, as sizes are
** whole bytes.
*/
#ifndef MEMPROF_SAMPLE_H
#define MEMPROF_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

struct sampler {
  int64_t countdown; /* Bytes to allocate before the next sample. */
  uint64_t mean;     /* Mean bytes between two samples; 0: not sampling. */
  uint64_t state;    /* The generator's state (never 0). */
  uint64_t seed;     /* The seed it started from. */
};

/* Starts sampling one allocation per `mean` bytes on average, with the
** generator seeded from `seed`, and draws the first distance. */
void sampler_init(struct sampler *s, uint64_t mean, uint64_t seed);

/* A seed that differs from run to run: the clock and the process id. */
uint64_t sampler_default_seed(void);

/* The seed of a sampler that goes on in a forked child (see
** follow_into_child): the parent's seed mixed with the child's process
** id, so that children sample differently from their parent and from one
** another, and a given seed and process id always sample alike. */
uint64_t sampler_child_seed(uint64_t seed, uint64_t pid);

/* Draws the distance to the next sample. */
void sampler_next(struct sampler *s);

/* Takes an allocation of `size` bytes from the distance: whether it is
** sampled. The caller then draws the next distance (sampler_next), out of
** the hook's fast path. */
static inline int sampler_due(struct sampler *s, size_t size)
{
  s->countdown -= (int64_t)size;
  return s->countdown <= 0;
}

/* How many blocks a sampled block of `size` bytes stands for:
** 1 / (1 - exp(-size / mean)). */
double sampler_weight(uint64_t mean, size_t size);

#endif
