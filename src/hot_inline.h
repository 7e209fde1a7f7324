/*
** Inlining of the hot path.
**
** An optimised build forces it: the hook's variants fold their constant
** offsets and flags only through inlined helpers. An unoptimised build
** (-O0: a debug build, or an install that checks only the install) asks
** for nothing, and compiles hook.c in a fraction of the time; the code is
** the same, only slower.
*/
#ifndef MEMPROF_HOT_INLINE_H
#define MEMPROF_HOT_INLINE_H

#ifdef __OPTIMIZE__
#define HOT_INLINE static inline __attribute__((always_inline))
#else
#define HOT_INLINE static inline
#endif

#endif
