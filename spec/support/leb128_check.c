/*
** Checks the writer's LEB128 encoders against the plain byte loop: the
** shift version always, the PDEP version where the CPU has BMI2. Prints
** what it checked; exits with 1 at the first difference.
**
**   leb128_check
*/
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../src/writer.h"

/* The reference: seven bits a byte, low first, the top bit on all but the
** last byte. */
static size_t reference(uint64_t v, uint8_t *out)
{
  size_t n = 0;
  do {
    uint8_t b = (uint8_t)(v & 0x7f);
    v >>= 7;
    out[n++] = (uint8_t)(v != 0 ? b | 0x80 : b);
  } while (v != 0);
  return n;
}

/* xorshift64: the same numbers on every run. */
static uint64_t next_random(uint64_t *state)
{
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

/* Encodes v with one of the writer's versions into a buffer with room for
** the 8-byte stores, and compares with the reference. */
static int same_as_reference(uint64_t v, int pdep)
{
  uint8_t want[ULEB128_MAX], got[ULEB128_MAX + 8];
  size_t n = reference(v, want), len;
  memset(got, 0xaa, sizeof(got));
  len = (size_t)(uleb128_put_with(got, v, pdep) - got);
  if (len == n && memcmp(got, want, n) == 0)
    return 1;
  printf("%s: 0x%llx encoded in %zu bytes, not %zu\n", pdep ? "pdep" : "shifts",
         (unsigned long long)v, len, n);
  return 0;
}

/* Every bit length from 0 to 64 at its bounds, then random numbers of
** random bit lengths. Returns how many numbers were checked, 0 on a
** difference. */
static unsigned check_all(int pdep)
{
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  unsigned count = 0, bits, i;
  for (bits = 0; bits <= 64; bits++) {
    uint64_t top = bits == 64 ? ~0ULL : (1ULL << bits) - 1;
    uint64_t low = bits == 0 ? 0 : 1ULL << (bits - 1);
    if (!same_as_reference(top, pdep) || !same_as_reference(low, pdep))
      return 0;
    count += 2;
  }
  for (i = 0; i < 100000; i++) {
    uint64_t r = next_random(&state);
    unsigned len = (unsigned)(next_random(&state) % 65);
    uint64_t v = len == 64 ? r : r & ((1ULL << len) - 1);
    if (!same_as_reference(v, pdep))
      return 0;
    count++;
  }
  return count;
}

int main(void)
{
  unsigned n;
  writer_tables_init();
  printf("fast pdep: %s\n", writer_fast_pdep ? "yes" : "no");
  if ((n = check_all(0)) == 0)
    return 1;
  printf("shifts: %u numbers match\n", n);
#if WRITER_HAS_PDEP
  __builtin_cpu_init();
  if (__builtin_cpu_supports("bmi2")) {
    if ((n = check_all(1)) == 0)
      return 1;
    printf("pdep: %u numbers match\n", n);
    return 0;
  }
#endif
  printf("pdep: not on this CPU\n");
  return 0;
}
