/*
** Offsets of the known LuaJIT build families on x86_64.
**
** Included by vm_layout.c, which verifies a candidate against the running
** VM before it is used, and by hook.c, which compiles one hook per family
** with these offsets as constants (used only when the verified layout
** equals the family's table exactly).
*/
#ifndef MEMPROF_VM_CANDIDATES_H
#define MEMPROF_VM_CANDIDATES_H

#include "vm_layout.h"

/* A build family's offsets, where J->trace may sit relative to g, and how
** far J->parent (the trace a trace exit leaves) lies after J->trace. */
struct vm_candidate {
  struct vm_layout layout;
  uint16_t trace[4];
  uint16_t parent_after_trace;
};

static const struct vm_candidate vm_candidates[] = {
    {
        /* Upstream LuaJIT 2.1 (2020 and later) and OpenResty's luajit2,
        ** GC64 on x86_64. OpenResty appends fields at the end of lua_State
        ** and global_State, which moves only J. */
        .layout =
            {
                .family = "LuaJIT 2.1 GC64 (upstream / OpenResty) x86_64",
                .gc64 = 1,
                .fr2 = 1,
                .ref_size = 8,
                .L_glref = 16,
                .L_base = 32,
                .L_top = 40,
                .L_maxstack = 48,
                .L_stack = 56,
                .L_cframe = 80,
                .L_stacksize = 88,
                .g_allocf = 0,
                .g_allocd = 8,
                .g_vmstate = 184,
                .g_cur_L = 368,
                .gct = 9,
                .fn_ffid = 10,
                .fn_pc = 32,
                .fn_cfunc = 40,
                .pt_size = 104,
                .pt_sizebc = 12,
                .pt_chunkname = 64,
                .pt_firstline = 72,
                .pt_numline = 76,
                .pt_lineinfo = 80,
                .str_size = 24,
                .str_len = 20,
                .cf_pc = 24,
                .cf_L = 16,
                .tr_startpt = 64,
                .tr_startpc = 72,
                .tr_traceno = 104,
            },
        .trace = {1112, 1120, 0, 0},
        .parent_after_trace = 3016 - 384,
    },
    {
        /* Tarantool 2.6.0's LuaJIT fork: non-GC64, 32-bit references. */
        .layout =
            {
                .family = "LuaJIT 2.1 non-GC64 (Tarantool 2.6.0) x86_64",
                .gc64 = 0,
                .fr2 = 0,
                .ref_size = 4,
                .L_glref = 8,
                .L_base = 16,
                .L_top = 24,
                .L_maxstack = 32,
                .L_stack = 36,
                .L_cframe = 48,
                .L_stacksize = 56,
                .g_allocf = 48,
                .g_allocd = 56,
                .g_vmstate = 120,
                .g_cur_L = 280,
                .gct = 5,
                .fn_ffid = 6,
                .fn_pc = 16,
                .fn_cfunc = 24,
                .pt_size = 64,
                .pt_sizebc = 8,
                .pt_chunkname = 40,
                .pt_firstline = 44,
                .pt_numline = 48,
                .pt_lineinfo = 52,
                .str_size = 16,
                .str_len = 12,
                .cf_pc = 28,
                .cf_L = 24,
                .tr_startpt = 48,
                .tr_startpc = 52,
                .tr_traceno = 80,
            },
        .trace = {816, 0, 0, 0},
        .parent_after_trace = 2480 - 368,
    },
};

#define VM_CANDIDATE_GC64 0
#define VM_CANDIDATE_NONGC64 1
#define VM_CANDIDATES (sizeof(vm_candidates) / sizeof(vm_candidates[0]))

#endif
