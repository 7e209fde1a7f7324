/*
** A plugin's allocator for a LuaJIT VM, for two_vm_host's closed VM: blocks
** cut from one arena of its own, which a free leaves as it was (as a
** per-level arena of a game is dropped whole). Once the VM is closed and
** the plugin unloaded, the VM's state is still whole in the arena, and its
** allocator names code that is no longer mapped.
*/
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define ARENA (8u << 20)

static char *arena;
static size_t used;

__attribute__((visibility("default"))) void *
arena_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  char *n;
  (void)ud;
  if (nsize == 0)
    return NULL;
  if (arena == NULL && (arena = malloc(ARENA)) == NULL)
    return NULL;
  nsize = (nsize + 15) & ~(size_t)15;
  if (nsize > ARENA - used)
    return NULL;
  n = arena + used;
  used += nsize;
  if (ptr != NULL)
    memcpy(n, ptr, osize < nsize ? osize : nsize);
  return n;
}
