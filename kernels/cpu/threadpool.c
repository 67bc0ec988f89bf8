/*
 * threadpool.c - fixed worker pool with a generation-counter barrier.
 *
 * A job is published by bumping `gen` under the mutex; workers that are
 * spinning see it without a syscall, sleeping ones are woken by the
 * broadcast.  `pending` counts workers still running the job; the last one
 * signals the caller.  Both waits spin a little first because forward-pass
 * steps are short and the cost of a futex round trip per barrier shows up
 * at batch size 1.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "threadpool.h"

#define SPIN_ITERS 4000
/* A worker's stack, at least.  glibc sizes a thread's stack by RLIMIT_STACK
 * and carves the thread's static TLS out of it; the kernels' per-thread
 * tiles make that TLS about 1.5 MiB, so under `ulimit -s 1024` a worker was
 * left a few KiB and crashed in its first attention call.  The limit binds
 * the main thread; the workers take this much (TLS included), or a finite
 * limit below 4 GiB where larger; where that stack cannot be had, glibc's
 * default. */
#define WORKER_STACK ((size_t)8 << 20)
#define MAX_THREADS THREADPOOL_MAX

struct worker {
    struct threadpool *tp;
    int ith;
};

struct threadpool {
    int n;
    pthread_t *th;
    struct worker *w;
    pthread_mutex_t mu;
    pthread_cond_t cv_job;
    pthread_cond_t cv_done;
    atomic_uint gen;
    atomic_int pending;
    atomic_int stop;
    threadpool_job_fn fn;
    void *arg;
};

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int
threadpool_n_cpus(void)
{
    cpu_set_t set;
    long n;

    /* the CPUs this process may run on (taskset, cgroup cpusets), which is
     * what a thread per CPU should count; all online ones if unknown */
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        n = CPU_COUNT(&set);
    else
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

static void *
worker_main(void *p)
{
    struct worker *w = p;
    struct threadpool *tp = w->tp;
    unsigned seen = 0;

    for (;;) {
        unsigned g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN_ITERS; i++) {
            cpu_relax();
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            while ((g = atomic_load(&tp->gen)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv_job, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop))
            return NULL;
        seen = g;
        tp->fn(tp->arg, w->ith, tp->n);
        if (atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->cv_done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

static size_t
worker_stack(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur > WORKER_STACK && rl.rlim_cur < ((rlim_t)1 << 32))
        return (size_t)rl.rlim_cur;
    return WORKER_STACK;
}

int
threadpool_new(struct threadpool **out, int n_threads)
{
    struct threadpool *tp;

    *out = NULL;
    if (n_threads <= 0)
        n_threads = threadpool_n_cpus();
    if (n_threads > MAX_THREADS)
        return -ERANGE;
    tp = calloc(1, sizeof(*tp));
    if (!tp)
        return -ENOMEM;
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv_job, NULL);
    pthread_cond_init(&tp->cv_done, NULL);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->stop, 0);
    if (n_threads > 1) {
        tp->th = calloc((size_t)n_threads, sizeof(*tp->th));
        tp->w = calloc((size_t)n_threads, sizeof(*tp->w));
        if (!tp->th || !tp->w) {
            tp->n = 1;
            threadpool_free(tp);
            return -ENOMEM;
        }
        pthread_attr_t at;
        int ae = pthread_attr_init(&at);
        if (ae == 0 && pthread_attr_setstacksize(&at, worker_stack()) != 0) {
            pthread_attr_destroy(&at);
            ae = -1;
        }
        for (int i = 1; i < n_threads; i++) {
            tp->w[i].tp = tp;
            tp->w[i].ith = i;
            int e = pthread_create(&tp->th[i], ae == 0 ? &at : NULL, worker_main, &tp->w[i]);
            if (e != 0 && ae == 0)      /* no room for that stack: the default one */
                e = pthread_create(&tp->th[i], NULL, worker_main, &tp->w[i]);
            if (e != 0) {
                if (ae == 0)
                    pthread_attr_destroy(&at);
                tp->n = i;      /* join the ones started */
                threadpool_free(tp);
                return e == EAGAIN ? -EAGAIN : -ENOMEM;
            }
        }
        if (ae == 0)
            pthread_attr_destroy(&at);
    }
    *out = tp;
    return 0;
}

void
threadpool_free(struct threadpool *tp)
{
    if (!tp)
        return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    pthread_cond_broadcast(&tp->cv_job);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++)
        pthread_join(tp->th[i], NULL);
    pthread_cond_destroy(&tp->cv_done);
    pthread_cond_destroy(&tp->cv_job);
    pthread_mutex_destroy(&tp->mu);
    free(tp->w);
    free(tp->th);
    free(tp);
}

int
threadpool_size(const struct threadpool *tp)
{
    return tp ? tp->n : 1;
}

void
threadpool_run(struct threadpool *tp, threadpool_job_fn fn, void *arg)
{
    if (!tp || tp->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->pending, tp->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv_job);
    pthread_mutex_unlock(&tp->mu);

    fn(arg, 0, tp->n);

    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&tp->pending, memory_order_acquire) == 0)
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&tp->mu);
    while (atomic_load(&tp->pending) != 0)
        pthread_cond_wait(&tp->cv_done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}

struct for_job {
    threadpool_range_fn fn;
    void *arg;
    int64_t n, chunk;
};

static void
for_worker(void *p, int ith, int nth)
{
    struct for_job *j = p;
    int64_t i0 = (int64_t)ith * j->chunk;
    int64_t i1 = i0 + j->chunk;

    (void)nth;
    if (i0 >= j->n)
        return;
    if (i1 > j->n || ith == nth - 1)
        i1 = j->n;
    j->fn(j->arg, i0, i1, ith);
}

void
threadpool_for(struct threadpool *tp, int64_t n, int64_t grain, threadpool_range_fn fn, void *arg)
{
    int nth = threadpool_size(tp);
    struct for_job j;

    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    j.fn = fn;
    j.arg = arg;
    j.n = n;
    j.chunk = (n + nth - 1) / nth;
    j.chunk = (j.chunk + grain - 1) / grain * grain;
    if (nth == 1 || j.chunk >= n) {
        fn(arg, 0, n, 0);
        return;
    }
    threadpool_run(tp, for_worker, &j);
}

struct claim_job {
    threadpool_range_fn fn;
    void *arg;
    int64_t n, grain;
    atomic_llong next;
};

static void
claim_worker(void *p, int ith, int nth)
{
    struct claim_job *j = p;

    (void)nth;
    for (;;) {
        int64_t i0 = atomic_fetch_add_explicit(&j->next, j->grain, memory_order_relaxed);
        if (i0 >= j->n)
            return;
        j->fn(j->arg, i0, i0 + j->grain < j->n ? i0 + j->grain : j->n, ith);
    }
}

void
threadpool_claim(struct threadpool *tp, int64_t n, int64_t grain, threadpool_range_fn fn, void *arg)
{
    struct claim_job j;

    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (threadpool_size(tp) == 1 || n <= grain) {
        fn(arg, 0, n, 0);
        return;
    }
    j.fn = fn;
    j.arg = arg;
    j.n = n;
    j.grain = grain;
    atomic_init(&j.next, 0);
    threadpool_run(tp, claim_worker, &j);
}
