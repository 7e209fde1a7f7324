/*
** The C frames between the hook and the code that called into the VM.
**
** Where no fixed place on the stack holds the return address into a
** trace's machine code (arm64: the helper's frame sizes differ, and stale
** return addresses from earlier, larger frames stay above the hook), the
** frames are unwound by their CFI with libgcc's unwinder, the one LuaJIT
** itself raises errors through on arm64. Each unwind also teaches, for a
** return address into C code, its frame's size and where that frame keeps
** its own return address; the hook then replays those steps with a few
** loads, and unwinds again only where a step is not known.
*/
#ifndef MEMPROF_UNWIND_H
#define MEMPROF_UNWIND_H

#include <stdint.h>

/* Frames followed by one unwind or replay. */
#define UNWIND_FRAMES 48
/* Largest frame learned (bytes). */
#define UNWIND_MAX_FRAME 65536
#define UNWIND_STEP_SLOTS 256
/* Slots a step may be kept in, from its own: once they are all taken, a
** new return address is not learned (its events unwind each time). */
#define UNWIND_PROBES 8

/* A C frame, by the return address into its function. A frame's size
** (from its stack pointer at the call to its CFA) is the same at every
** call from one address unless the function allocates on its stack; a
** second, different answer marks the step as never replayed. */
struct unwind_step {
  uintptr_t ip;  /* The return address; 0: empty slot. */
  uint32_t size; /* 0: seen with two sizes, not replayed. */
  /* The words of the frame that held its return address at every unwind
  ** (from its CFA, the caller's stack pointer at the call): the one its
  ** CFI names is always among them; another is a stale copy, such as one
  ** a frame that tail-called this function left (ra2 == ra: one word). */
  int32_t ra, ra2;
};

struct unwind_steps {
  struct unwind_step slot[UNWIND_STEP_SLOTS];
};

/* Whether a return address is in the code sought (> 0), or where no frame
** is to be followed (< 0: the unwind gives up; that code's CFI, if any, is
** not to be trusted), or neither (0). */
typedef int (*unwind_stop_fn)(void *ud, uintptr_t ip);

/*
** Unwinds from the caller's frame outwards to the first return address
** `stop` accepts: sets *ret to it and *cfa to the stack pointer of the code
** it returns into, at its call. Frames are followed while their CFA stays
** below `limit`. With `learn`, the frames from the one returning to `ip0`
** with CFA `cfa0` up to the one found are learned. Returns 1 if found.
** Allocates nothing; reads only what the frames' CFI describes.
*/
int unwind_find(unwind_stop_fn stop, void *ud, uintptr_t limit,
                struct unwind_steps *learn, uintptr_t ip0, uintptr_t cfa0,
                uintptr_t *ret, uintptr_t *cfa);

/*
** Replays learned steps from return address `ip` with CFA `cfa`: sets
** *ret and *ret_cfa to the first return address that no step describes
** and its CFA. Reads only 8-byte words within [cfa, limit). Returns 0 if a
** step leaves that range or after UNWIND_FRAMES steps.
*/
int unwind_replay(const struct unwind_steps *s, uintptr_t ip, uintptr_t cfa,
                  uintptr_t limit, uintptr_t *ret, uintptr_t *ret_cfa);

#endif
