/* mapguard.h - a mapped file that shrinks under a run becomes an error, not
 * a signal.
 *
 * Why: model files are mmap'd (formats/safetensors.c) and their pages are read
 * long after opening, by loaders and by compute kernels on worker threads
 * (F16/F32 weights stay in the mapping). If another process truncates the
 * file, touching a page past the new end raises SIGBUS, which kills the
 * process. A signal in a BLAS worker thread cannot be unwound with
 * siglongjmp (locks, other threads), so the guard does not try to unwind:
 *
 *   - every mapping is registered here (a fixed table the handler can read
 *     without locks);
 *   - a process-wide SIGBUS handler, installed with the first registration,
 *     looks the fault address up; inside a registered mapping it maps
 *     anonymous zero pages over the rest of that mapping (MAP_FIXED, from
 *     the faulting page to its end), marks the mapping faulted and returns,
 *     so the faulting instruction re-runs and reads zeros;
 *   - the owner then reports the file as changed at its next check
 *     (sd_st_check, sd_st_check_all in safetensors.h: when a tensor is bound,
 *     after every node, at every progress step), so the zeros never reach a
 *     result: the node fails with an error naming the file.
 *
 * A SIGBUS outside every registered mapping goes to the handler that was
 * installed before (ASan's, or the default action, which ends the process
 * as before). mmap from a signal handler is not on POSIX's async-signal-safe
 * list; on Linux it is a plain system call (glibc takes no lock for it),
 * which is what this relies on.
 */
#ifndef SD_MAPGUARD_H
#define SD_MAPGUARD_H

#include <stddef.h>

/* Registers [base, base + len) and installs the handler on first use.
 * Returns a slot (>= 0), or -1 when the table is full (the mapping is then
 * unguarded: a truncation still ends the process, the size check in
 * sd_st_check still reports changes it sees first). */
int sd_mapguard_add(const void *base, size_t len);
/* Forgets a slot (before the mapping is unmapped). -1 is ignored. */
void sd_mapguard_remove(int slot);
/* 1 once a SIGBUS inside the slot's mapping was turned into zero pages. */
int sd_mapguard_faulted(int slot);

#endif
