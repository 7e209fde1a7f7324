/*
** Offsets of known LuaJIT builds.
**
** Nothing here is needed to start: every offset is discovered and verified
** at run time (vm_discover.c, vm_layout.c). The two mode tables hold the
** object offsets shared by every known build of a mode on this
** architecture; hook.c compiles one hook per mode with them as constants,
** used when the discovered object offsets equal them. The known builds
** add what moves between builds (global_State and jit_State offsets,
** strings, the stack's extra slots), so that memprof.info() can name a
** build whose layout matches one seen before (docs/builds.md).
*/
#ifndef MEMPROF_VM_CANDIDATES_H
#define MEMPROF_VM_CANDIDATES_H

#include "vm_layout.h"

struct vm_candidate {
  struct vm_layout layout;
};

/* The saved PC in the interpreter's C frame: 24 on x86_64 (GC64), 8 on
** arm64 since 2021 (upstream 421c4c79). */
#if defined(__aarch64__)
#define CF_PC_GC64 8
#else
#define CF_PC_GC64 24
#endif

/* The object offsets of the two modes, a field a line: its name, its
** value on GC64 builds, then on the others. */
#define VM_MODE_OFFSETS(X)                                                     \
  X(gc64, 1, 0)                                                                \
  X(fr2, 1, 0)                                                                 \
  X(ref_size, 8, 4)                                                            \
  X(L_glref, 16, 8)                                                            \
  X(L_base, 32, 16)                                                            \
  X(L_top, 40, 24)                                                             \
  X(L_maxstack, 48, 32)                                                        \
  X(L_stack, 56, 36)                                                           \
  X(L_cframe, 80, 48)                                                          \
  X(L_stacksize, 88, 56)                                                       \
  X(g_allocf, 0, 48)                                                           \
  X(g_allocd, 8, 56)                                                           \
  X(g_vmstate, 184, 120)                                                       \
  X(g_cur_L, 368, 280)                                                         \
  X(gct, 9, 5)                                                                 \
  X(fn_ffid, 10, 6)                                                            \
  X(fn_pc, 32, 16)                                                             \
  X(fn_cfunc, 40, 24)                                                          \
  X(pt_size, 104, 64)                                                          \
  X(pt_sizebc, 12, 8)                                                          \
  X(pt_chunkname, 64, 40)                                                      \
  X(pt_firstline, 72, 44)                                                      \
  X(pt_numline, 76, 48)                                                        \
  X(pt_lineinfo, 80, 52)                                                       \
  X(str_size, 24, 16)                                                          \
  X(str_len, 20, 12)                                                           \
  X(cf_pc, CF_PC_GC64, 28)                                                     \
  X(cf_L, 16, 24)                                                              \
  X(tr_startpt, 64, 48)                                                        \
  X(tr_startpc, 72, 52)                                                        \
  X(tr_traceno, 104, 80)                                                       \
  X(tl.tr_spadjust, 102, 78)

#define VM_GC64_VALUE(field, gc64, other) .field = gc64,
#define VM_NONGC64_VALUE(field, gc64, other) .field = other,

static const struct vm_candidate vm_candidates[] = {
    /* Upstream LuaJIT 2.1 (2020 and later) and OpenResty's luajit2, GC64
    ** on x86_64. OpenResty appends fields at the end of lua_State and
    ** global_State, which moves only J. */
    {.layout = {.family = "LuaJIT 2.1 GC64", VM_MODE_OFFSETS(VM_GC64_VALUE)}},
    /* Tarantool 2.6.0's LuaJIT fork: non-GC64, 32-bit references. */
    {.layout = {.family = "LuaJIT 2.1 non-GC64",
                VM_MODE_OFFSETS(VM_NONGC64_VALUE)}},
};

#define VM_CANDIDATE_GC64 0
#define VM_CANDIDATE_NONGC64 1
#define VM_CANDIDATES (sizeof(vm_candidates) / sizeof(vm_candidates[0]))

/* A known build: its mode table, and what moves between builds. allocd
** follows allocf, and J->sizetrace lies 12 bytes after J->trace, in all. */
struct vm_known_build {
  const char *name;
  int candidate;
  int arm64;
  uint16_t g_allocf, g_vmstate, g_cur_L, g_trace, g_parent;
  uint8_t str_size, str_len, stack_extra;
};

static const struct vm_known_build vm_known_builds[] = {
    {"Debian bookworm luajit 2.1.0~beta3+git20220320", VM_CANDIDATE_GC64, 0, 0,
     184, 368, 1112, 3744, 24, 20, 7},
    {"OpenResty luajit2 2.1-20230119", VM_CANDIDATE_GC64, 0, 0, 184, 368, 1120,
     3752, 24, 20, 7},
    {"Tarantool 2.6.0", VM_CANDIDATE_NONGC64, 0, 48, 120, 280, 816, 2928, 16,
     12, 5},
    {"upstream LuaJIT v2.1.0-beta3 (2017)", VM_CANDIDATE_GC64, 0, 16, 128, 344,
     1064, 3704, 24, 16, 7},
    {"upstream LuaJIT v2.1.0-beta3 (2017)", VM_CANDIDATE_NONGC64, 0, 16, 88,
     248, 784, 2896, 16, 12, 5},
    {"upstream LuaJIT v2.1 (2026-08)", VM_CANDIDATE_GC64, 0, 0, 184, 376, 1128,
     3760, 24, 20, 8},
    {"upstream LuaJIT v2.1 (2026-08)", VM_CANDIDATE_NONGC64, 0, 0, 136, 296,
     864, 2968, 20, 16, 5},
    {"Tarantool's LuaJIT 2.11 / master (2024-10)", VM_CANDIDATE_GC64, 0, 64,
     440, 480, 1232, 3864, 24, 16, 7},
    {"Tarantool's LuaJIT 2.11 / master (2024-10)", VM_CANDIDATE_NONGC64, 0, 64,
     352, 392, 952, 3056, 16, 12, 5},
    {"OpenResty luajit2 2.1-20250117 / 2.1-20251030", VM_CANDIDATE_GC64, 0, 0,
     184, 368, 1128, 3760, 24, 20, 8},
    {"upstream LuaJIT v2.1 (2026-08)", VM_CANDIDATE_GC64, 1, 0, 184, 376, 1120,
     3752, 24, 20, 8},
};

#define VM_KNOWN_BUILDS (sizeof(vm_known_builds) / sizeof(vm_known_builds[0]))

#endif
