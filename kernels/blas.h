/*
 * blas.h - OpenBLAS under an address-space limit.
 *
 * OpenBLAS (Debian's 0.3.21, pthread build) takes a work buffer of
 * BUFFER_SIZE + a page (128 MiB on x86-64) from a global table for every
 * level-3 call that is not small, and keeps it for the next call once
 * released; each of its worker threads maps one as it starts, and its
 * constructor starts them when the program loads.  A buffer that cannot be
 * mapped (ulimit -v, RLIMIT_DATA) is retried forever
 * (OpenMathLib/OpenBLAS#5289, fixed after 0.3.29): the thread spins at 100%
 * CPU, and whoever waits for it (a BLAS call, exit()'s join of the workers)
 * hangs.  So, under such a limit:
 *   - OpenBLAS runs on the calling thread alone: blas_preinit() starts the
 *     program again with OPENBLAS_NUM_THREADS=1 before OpenBLAS's
 *     constructor starts any worker, unless the user set a count (then the
 *     workers are the user's to size);
 *   - a caller primes its buffer while there is room (blas_prime()), and one
 *     that calls BLAS from several threads of its own runs those calls one at
 *     a time (blas_one_at_a_time()), so that the primed buffer serves each.
 * Built without OpenBLAS, all three are no-ops.
 */
#ifndef LLMKIT_BLAS_H
#define LLMKIT_BLAS_H

#include <stdbool.h>

/* blas_preinit(): an entry of every tool's .preinit_array (tools/tool_start.c),
 * which runs before any shared library's constructor: under an
 * address-space or data limit, with no usable thread count in the
 * environment (a positive OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or
 * OMP_NUM_THREADS), it execs /proc/self/exe with the same arguments and
 * OPENBLAS_NUM_THREADS=1 (replacing an unusable one).  Started through the
 * dynamic loader, or without /proc, it returns and OpenBLAS starts its
 * workers as it would have. */
void blas_preinit(int argc, char **argv, char **envp);

/* blas_prime(): sets OpenBLAS to n_threads threads (n_threads <= 0, or under
 * an address-space limit: leaves its count), then makes sure the work buffer
 * of calls from the caller's thread exists: checks that the address space
 * has room for it, then runs one product that maps it (once per process).
 * Returns 0, or -1 when there is no room: the caller's out-of-memory error,
 * where a BLAS call would hang.  Call it from one thread (the callers run it
 * before they start any of their own). */
int blas_prime(int n_threads);

/* blas_one_at_a_time(): true when an address-space limit is set
 * (RLIMIT_AS or RLIMIT_DATA): callers that call BLAS from several threads
 * of their own then serialize those calls, so the primed buffer serves
 * each one. */
bool blas_one_at_a_time(void);

#endif
