/*
** Fault injection for the specs (see fault.h): compiled in only with
** -DMEMPROF_FAULTS, each fault asked for by an environment variable.
*/
#include "fault.h"

#ifdef MEMPROF_FAULTS
#include <stdlib.h>
#include <string.h>

int fault_in_source(const char *name, size_t len)
{
  const char *chunk = getenv("MEMPROF_FAULT_SOURCE");
  return chunk != NULL && strlen(chunk) == len && memcmp(chunk, name, len) == 0;
}

int fault_traces(void)
{
  return getenv("MEMPROF_FAULT_TRACES") != NULL;
}

int fault_remote_exit(void)
{
  return getenv("MEMPROF_FAULT_REMOTE_EXIT") != NULL;
}

int fault_remote_crash(void)
{
  return getenv("MEMPROF_FAULT_REMOTE_CRASH") != NULL;
}

int fault_attach_crash(void)
{
  return getenv("MEMPROF_FAULT_ATTACH_CRASH") != NULL;
}

int fault_trace_decoy(void)
{
  return getenv("MEMPROF_FAULT_TRACE_DECOY") != NULL;
}

int fault_chunkname(void)
{
  return getenv("MEMPROF_FAULT_CHUNKNAME") != NULL;
}

int fault_vmdef_text(void)
{
  return getenv("MEMPROF_FAULT_VMDEF_TEXT") != NULL;
}

int fault_pipe_eintr(void)
{
  const char *n = getenv("MEMPROF_FAULT_PIPE_EINTR");
  return n != NULL ? atoi(n) : 0;
}
#endif
