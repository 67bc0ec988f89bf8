/*
 * threadpool.h - a fixed pool of worker threads for data-parallel loops.
 *
 * The calling thread is worker 0 and takes part in every job, so a pool of
 * n threads starts n - 1 pthreads.  A job is one function run by every
 * worker (threadpool_run) or a range split into contiguous chunks
 * (threadpool_for); the call returns when all workers have finished, which
 * is the barrier between the steps of the forward pass.  Idle workers spin
 * briefly, then sleep on a condition variable, so a pool costs nothing
 * between jobs and little at each barrier.
 *
 * The CPU backend (kernels/cpu/backend_cpu.c) owns the pool of the forward
 * pass; quantize owns one for its row jobs.
 *
 * OpenBLAS keeps its own threads.  When a product is handed to OpenBLAS, it
 * is called from worker 0 alone, while the other workers sleep; OpenBLAS is
 * not called from inside a threadpool job, or the machine is oversubscribed.
 * The one exception is GPTQ's block update (common/quant/gptq.c), each row
 * range's GEMM from its own worker with OpenBLAS set to one thread (and one
 * at a time under an address-space limit: blas.h).
 *
 * One job at a time: the pool is not reentrant and must be driven by one
 * thread.
 */
#ifndef LLMKIT_THREADPOOL_H
#define LLMKIT_THREADPOOL_H

#include <stdint.h>


struct threadpool;

/* A job: worker ith of nth (0 <= ith < nth). */
typedef void (*threadpool_job_fn)(void *arg, int ith, int nth);

/* A range job: handle [i0, i1) on worker ith. */
typedef void (*threadpool_range_fn)(void *arg, int64_t i0, int64_t i1, int ith);

/* threadpool_n_cpus() : the CPUs this process may run on (its affinity
 * mask, as nproc(1) counts them; the online CPUs when that fails), 1 to
 * 1024.  More threads than this only compete for the same cores. */
int threadpool_n_cpus(void);

/* threadpool_new() : a pool of n_threads workers including the caller;
 * n_threads <= 0 means threadpool_n_cpus().  At most 1024.
 * 0, -ERANGE (n_threads > THREADPOOL_MAX), -ENOMEM (out of memory), -EAGAIN
 * (a thread could not be started: a resource limit). */
#define THREADPOOL_MAX 1024
int threadpool_new(struct threadpool **out, int n_threads);

/* threadpool_free() : stops and joins the workers; NULL is a no-op. */
void threadpool_free(struct threadpool *tp);

/* threadpool_size() : number of workers (>= 1); 1 for a NULL pool. */
int threadpool_size(const struct threadpool *tp);

/* threadpool_run() : fn(arg, ith, nth) on every worker; returns after all
 * have returned.  A NULL pool runs fn(arg, 0, 1) on the caller. */
void threadpool_run(struct threadpool *tp, threadpool_job_fn fn, void *arg);

/* threadpool_for() : splits [0, n) into at most nth contiguous chunks whose
 * boundaries are multiples of grain (>= 1; the last chunk takes the rest)
 * and runs fn on each, one chunk per worker; workers with no chunk idle.
 * Returns after all chunks are done.  n <= 0 does nothing. */
void threadpool_for(struct threadpool *tp, int64_t n, int64_t grain, threadpool_range_fn fn,
                    void *arg);

/* threadpool_claim() : like threadpool_for, for items of unequal cost:
 * workers claim chunks of grain items (the last may be shorter) in order
 * from a shared counter until [0, n) is done. */
void threadpool_claim(struct threadpool *tp, int64_t n, int64_t grain, threadpool_range_fn fn,
                      void *arg);

#endif
