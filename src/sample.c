/*
** Sampled recording: the random distances between samples (sample.h).
** The generator is xorshift64* (Marsaglia's xorshift, its output
** multiplied by an odd constant), seeded through the SplitMix64 mixing
** function so that nearby seeds give unrelated sequences; libc's rand is
** neither fast nor private to the profile.
*/
#define _GNU_SOURCE
#include "sample.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

/* The mixing function of SplitMix64: every bit of x affects every bit of
** the result. */
static uint64_t mix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint64_t next_random(struct sampler *s)
{
  uint64_t x = s->state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  s->state = x;
  return x * 0x2545f4914f6cdd1dULL;
}

void sampler_next(struct sampler *s)
{
  /* u in (0, 1]: 53 random bits, never 0, so that log(u) is finite. */
  double u = (double)((next_random(s) >> 11) + 1) * (1.0 / 9007199254740992.0);
  double distance = ceil(-log(u) * (double)s->mean);
  s->countdown = (int64_t)distance;
}

void sampler_init(struct sampler *s, uint64_t mean, uint64_t seed)
{
  s->mean = mean;
  s->seed = seed;
  s->state = mix64(seed);
  if (s->state == 0)
    s->state = 0x2545f4914f6cdd1dULL;
  sampler_next(s);
}

uint64_t sampler_default_seed(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
         (uint64_t)getpid();
}

uint64_t sampler_child_seed(uint64_t seed, uint64_t pid)
{
  return seed ^ mix64(pid);
}

double sampler_weight(uint64_t mean, size_t size)
{
  double p = -expm1(-(double)size / (double)mean);
  return p > 0 ? 1.0 / p : 1.0;
}
