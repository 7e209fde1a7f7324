/*
** What the module knows about LuaJIT's internal layouts.
**
** The module includes no private LuaJIT header. At the first start in a VM
** it finds the offsets of the few fields the allocator hook reads by
** searching the VM's structures for values the public API reveals
** (vm_discover.c), then verifies every one of them against the public API
** (vm_layout.c). A layout that is not verified is never used. Tables of
** known builds (vm_candidates.h) only name a build that matches and let
** the hook use constant offsets.
*/
#ifndef MEMPROF_VM_LAYOUT_H
#define MEMPROF_VM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "lua.h"

/* How the hook treats an allocation, by the VM state it happened in. */
enum vm_state_class {
  STATE_INTERNAL = 0, /* Unknown or VM-internal work: report INTERNAL. */
  STATE_WALK,         /* Interpreter or C code, or the interpreter running
                         the iteration being recorded (the recorder's own
                         allocations have no saved PC and stay internal):
                         the frames are consistent. */
  STATE_GC,           /* Garbage collector. */
  STATE_EXIT,         /* Trace exit handler (restores sunk objects). */
  STATE_JIT,          /* Trace recorder, optimizer or assembler. */
};

/* What the VM was doing during an internal event: the kinds of the
** extended format (docs/format.md). 0: unknown, no kind is written. */
enum vm_internal_kind {
  INTERNAL_UNKNOWN = 0,
  INTERNAL_GC,          /* Garbage collector. */
  INTERNAL_JIT,         /* Trace recorder, optimizer or assembler. */
  INTERNAL_EXIT,        /* Trace exit. */
  INTERNAL_INTERPRETER, /* The VM itself: stack resizes, host C code. */
};

/* What compiled-code attribution reads (trace_lines.h), found and verified
** by vm_trace_calib.c. Offsets of GCtrace fields are from the trace
** object, of SnapShot fields from a snapshot. */
/* lj_strfmt_putfnum_int, _uint, putfnum, putfstr, putfchar, putquoted. */
#define TL_FORMAT_IDS 6
/* Built-ins that make a string (vm_trace_layout.string_ffids). */
#define TL_STRING_BUILTINS 7

struct vm_trace_layout {
  int ok;        /* Every check passed, the known-answer run too. */
  char why[160]; /* Why not, when !ok (for memprof.info()). */
  int no_mcofs;  /* !ok because SnapShot has no mcofs (before 2021-03). */
  int prof_ok;   /* J->prof_mode was found (the 'exact' mode). */
  char prof_why[96];
  uint16_t g_prof_mode; /* J->prof_mode (int), from g. */
  int exit_ok;          /* J->exitno is verified: exits are resolved. */
  int base_ok;          /* g->jit_base is verified: the frames below a
                           trace are walked. */
  uint16_t g_jit_base;  /* g->jit_base (MRef), from g. */
  uint16_t g_exitno;    /* J->exitno (u32), from g. */
  /* A word whose bit 0 says the JIT compiler is on (J->flags' JIT_F_ON or
  ** g->dispatchmode's DISPMODE_JIT), from g: seen to follow
  ** luaJIT_setmode's off and on in a throw-away VM. */
  int jit_on_ok;
  uint16_t g_jit_on;
  uint8_t tr_mcode, tr_szmcode, tr_spadjust, tr_nsnap, tr_snap, tr_snapmap;
  uint8_t tr_nsnapmap, tr_ir, tr_nk;
  uint8_t snap_size, snap_mapofs, snap_mcofs, snap_nent;
  uint8_t bc_funcf; /* The first function header op (FUNCF). */
  /* A table store right after an inlined call returns (trace_lines.c):
  ** lj_tab_newkey's address, and the ops of stores, returns and MOV. */
  int newkey_ok;
  uintptr_t newkey;
  uint8_t bc_tsetv, bc_tsets, bc_tsetb, bc_mov, bc_ret0, bc_ret1, bc_ret;
  /* table.concat's frame on an event of its string (trace_lines.c):
  ** the helpers' addresses, lj_buf_puttab's IR call id, the IR ops of a
  ** buffer's chain, BUFHDR's reset mode, SnapShot.ref and the built-in's
  ** id. */
  int concat_ok;
  uintptr_t buf_tostr, buf_puttab;
  uint16_t puttab_id, bufhdr_reset;
  uint8_t ir_bufhdr, ir_bufstr, ir_calll, ir_carg, snap_ref, concat_ffid;
  /* string.format's frame on an event of its string (trace_lines.c): the
  ** IR call ids of the helpers only its recorder emits, IR BUFPUT and the
  ** built-in's id. */
  int format_ok;
  uint16_t format_ids[TL_FORMAT_IDS];
  uint8_t ir_bufput, format_ffid;
  /* string.format's string of puts alone (trace_lines.c): the IR ops EQ
  ** and KGC of the guard on its callee (KGC also a new key's constant key,
  ** for the walk: 0xff where jit.vmdef does not name it). */
  int format_put_ok;
  uint8_t ir_eq, ir_kgc;
  /* An event after an inlined callee returned, in a snapshot region that
  ** runs on into the caller (trace_lines.c): each bytecode op's kind
  ** (TL_BC_*, from jit.vmdef's names checked against jit.util.funcbc)
  ** and the IR op PROF. */
  int after_ok;
  uint8_t ir_prof;
  uint8_t bc_kind[256];
  /* A new key stored in a loop's copied body (trace_lines.c): the IR ops
  ** LOOP and NEWREF, 0xff where jit.vmdef does not name them. */
  uint8_t ir_loop, ir_newref;
  /* trace_lines 'walk' (trace_lines.c): the helpers that make tables
  ** (TNEW's, TDUP's), found by jit.util.ircalladdr, and the ops the walk
  ** from a snapshot's PC to its allocating bytecode knows, from jit.vmdef
  ** (checked by find_after_return). */
  int walk_ok;
  uintptr_t tab_new1, tab_new_ah, tab_dup;
  uint8_t bc_tnew, bc_tdup, bc_cat, bc_gset, bc_jmp, bc_loop, bc_uget, bc_knil;
  uint8_t bc_islt, bc_isf; /* The conditional branches: ISLT .. ISF. */
  uint8_t bc_jforl;        /* JFORL, for the loop's body (0: none). */
  /* A callee the walk reads from an immutable upvalue: a Lua closure's
  ** upvalue refs, an upvalue's pointer to its value and its immutable
  ** flag, verified against lua_upvalueid and lua_getupvalue. */
  int upval_ok;
  uint8_t fn_uv, uv_v, uv_immutable;
  /* The built-ins that make a string, by id (0: not found): tostring,
  ** string.sub, .rep, .char, .lower, .upper, .reverse. */
  uint8_t string_ffids[TL_STRING_BUILTINS];
};

/* Number of negative vmstate values the hook can classify (~vmstate). */
#define VM_STATE_SLOTS 16

struct vm_layout {
  const char *family; /* The mode: "LuaJIT 2.1 GC64 x86_64", ... */
  const char *build;  /* The known build whose offsets all match, or NULL. */
  int candidate;      /* The mode's table in vm_candidates. */
  int exact;          /* Every object offset equals the mode table's, so
                         the hook can use them as constants. */
  int gc64;           /* GCRef/MRef are 8 bytes (1) or 4 bytes (0). */
  int fr2;            /* Two-slot frames (always with GC64). */
  int trace_ok;       /* J->trace was found and verified. */
  int exit_ok;        /* J->parent (the exiting trace) was verified. */
  int record_ok;      /* Code run while a trace records is located. */
  uint8_t ref_size;   /* 8 or 4. */

  /* lua_State */
  uint16_t L_glref, L_base, L_top, L_maxstack, L_stack, L_cframe;
  uint16_t L_stacksize;

  /* global_State */
  uint16_t g_allocf, g_allocd, g_vmstate, g_cur_L;
  uint16_t g_trace;     /* J->trace (a native pointer), from g. */
  uint16_t g_sizetrace; /* J->sizetrace (u32), from g. */
  uint16_t g_parent;    /* J->parent (u32): the trace being exited. */
  uint16_t g_gctotal;   /* g->gc.total: the heap's size in bytes (GCSize:
                           8 bytes with GC64, 4 without). */

  /* Any GC object: the type byte. */
  uint8_t gct;
  /* GCfunc */
  uint8_t fn_ffid, fn_pc, fn_cfunc;
  /* GCproto: its size (bytecode follows it) and fields. */
  uint8_t pt_size, pt_sizebc, pt_chunkname, pt_firstline, pt_numline;
  uint8_t pt_lineinfo;
  /* GCstr: its size (characters follow it) and length. */
  uint8_t str_size, str_len;
  /* C frame (L->cframe): saved interpreter PC and lua_State. */
  uint8_t cf_pc, cf_L;
  /* GCtrace */
  uint8_t tr_startpt, tr_startpc, tr_traceno;
  /* Build constant: stack slots above maxstack (LJ_STACK_EXTRA). */
  uint8_t stack_extra;

  /* Classes of the stored vmstate values -1 .. -VM_STATE_SLOTS. */
  uint8_t state_class[VM_STATE_SLOTS];
  /* What an internal event in each state is doing (INTERNAL_*). A
  ** profile in Tarantool's format zeroes its copy: it writes no kinds. */
  uint8_t internal_kind[VM_STATE_SLOTS];
  /* Learned stored values (for memprof.info()). */
  int32_t st_lua, st_c, st_gc;
  const char *state_numbering; /* Which numbering the values matched. */
  struct vm_trace_layout tl;   /* Compiled code by line. */
};

/*
** The address under which the stream describes a built-in reported as a
** C function. Neither its object (string.gmatch makes a new iterator each
** call) nor its pc (every built-in written in C shares bc_cfunc_int) nor
** its handler (assembler built-ins share fallbacks) tells built-ins apart;
** their id does. 0x800 + id lies in the first page, where no function can
** be, and is small enough for every reader's numbers.
*/
#define BUILTIN_ADDR(ffid) ((uintptr_t)0x800 + (uintptr_t)(ffid))

/* The offset fields of struct vm_layout, by name: what an override may
** set, what is compared with a candidate, and what memprof.info() lists.
** Ends with a NULL name. */
enum vm_field_role {
  FIELD_OBJECT,  /* In an object; constant in a family's hook. */
  FIELD_RUNTIME, /* Always read from the verified layout: global_State
                    and jit_State offsets, strings and traces, which move
                    between builds of one mode (none is on the hook's
                    fast path). */
  FIELD_CONST,   /* A build constant, not an offset. */
};
struct vm_layout_field {
  const char *name;
  size_t offset; /* Of the field in struct vm_layout. */
  int wide;      /* uint16_t (1) or uint8_t (0). */
  int role;
};
extern const struct vm_layout_field vm_layout_fields[];

/* The value of a field of lay. */
unsigned vm_layout_get(const struct vm_layout *lay,
                       const struct vm_layout_field *f);

/* What a VM whose g->vmstate is `state` is doing, in words (compiled
** code, the interpreter, the collector, ...), for messages. */
const char *vm_state_what(const struct vm_layout *lay, int32_t state);

/*
** Learns and verifies the layout of the VM that L belongs to. Runs Lua code
** and installs a temporary allocator, so it must be called from a C function
** (never from the hook). Returns 1 on success; on failure returns 0 and
** writes a message naming the failed check into err. `apart`: L's VM is a
** throw-away one (only there is LuaJIT's profiler started, to find
** J->prof_mode).
*/
int vm_layout_calibrate(lua_State *L, struct vm_layout *out, char *err,
                        size_t errlen, int apart);

/*
** Learns lay->tl, the attribution of compiled code by line, for a layout
** verified by vm_layout_calibrate, in L's VM (a VM of the same build; the
** same conditions). Until then lay->tl says it is not calibrated. Whatever
** fails leaves lay->tl.ok = 0 with the reason in lay->tl.why.
*/
void vm_layout_calibrate_trace_lines(lua_State *L, struct vm_layout *lay,
                                     int apart);

/* A layout's tl before vm_layout_calibrate_trace_lines. */
void vm_layout_trace_lines_unknown(struct vm_layout *lay);

/*
** Checks a layout verified in another VM of the same build against L's VM:
** global state and allocator, stack, current thread and C frame, and the
** VM state of C code. Reads only, allocating nothing in L's VM; called from
** a C function. Returns 1, or 0 with a message naming the failed check.
*/
int vm_layout_check_vm(lua_State *L, const struct vm_layout *lay, char *err,
                       size_t errlen);

#endif
