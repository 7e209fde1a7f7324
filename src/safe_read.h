/*
** Fault-safe reads of this process's memory (safe_read.c).
*/
#ifndef MEMPROF_SAFE_READ_H
#define MEMPROF_SAFE_READ_H

#include <stddef.h>
#include <stdint.h>

/* Reads n bytes at addr without faulting. Returns 1 on success. */
int safe_read(uintptr_t addr, void *dst, size_t n);

/* Whether the n bytes at addr all read, without keeping them: for a range
** too large to copy (each part is read into the same small buffer). */
int safe_readable(uintptr_t addr, size_t n);

/*
** A batch of reads: between begin and end, this thread's reads are served
** from copies of the aligned blocks that hold them, each read from the
** kernel once. Only for reads of memory that does not change between
** begin and end (a VM stopped in its allocator, say): a copy is not read
** again. Returns 1 if the batch began (0: another thread holds it, and
** reads go to the kernel one by one); end takes what begin returned.
*/
int safe_read_batch_begin(void);
void safe_read_batch_end(int began);

/*
** Within the batch begun (began: what begin returned), reads of at most 8
** bytes inside [from, to) are plain loads: only for memory known to be
** readable and to stay so until the batch ends (this thread's own stack, a
** live object of a VM stopped in its allocator, found through verified
** offsets). At most a few ranges; more are read as before.
*/
void safe_read_batch_trust(int began, uintptr_t from, uintptr_t to);

/* Gives the pages of the batches' copies back to the system (they are read
** as zeros, refilled by the next batch): for a process memprof was attached
** to and no longer runs in (attach_entry.c). Skipped while a batch runs. */
void safe_read_release(void);

/* The system calls made by reads in this process so far. */
unsigned long safe_read_calls(void);

/* After fork(), in the child: safe_read's process id is the child's. */
void safe_read_forget_pid(void);

/* A number at byte o of a copy that safe_read made (any alignment). */
uint64_t copy_u64(const uint8_t *b, size_t o);
uint32_t copy_u32(const uint8_t *b, size_t o);
uint16_t copy_u16(const uint8_t *b, size_t o);

#endif
