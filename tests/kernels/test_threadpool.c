/*
 * test_threadpool.c - the worker pool: every index of a range is handled
 * exactly once (threadpool_for's fixed split and threadpool_claim's claimed
 * chunks), chunks respect the grain, jobs see all workers, and many
 * back-to-back jobs (the barrier) neither lose nor repeat work.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "threadpool.h"
#include "../unit/t.h"

struct cover {
    atomic_int *hits;
    int64_t grain;
    atomic_int bad;
};

static void
cover_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct cover *c = arg;
    (void)ith;
    if (i0 % c->grain != 0 || i1 <= i0)
        atomic_fetch_add(&c->bad, 1);
    for (int64_t i = i0; i < i1; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

struct all {
    atomic_int seen[64];
    atomic_int nth_bad;
    int want_nth;
};

static void
all_job(void *arg, int ith, int nth)
{
    struct all *a = arg;
    if (nth != a->want_nth)
        atomic_fetch_add(&a->nth_bad, 1);
    atomic_fetch_add(&a->seen[ith], 1);
}

static void
sum_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    atomic_llong *s = arg;
    long long v = 0;
    (void)ith;
    for (int64_t i = i0; i < i1; i++)
        v += i;
    atomic_fetch_add(s, v);
}

static void
test_pool(int n)
{
    struct threadpool *tp = NULL;

    CHECK_EQ(threadpool_new(&tp, n), 0);
    if (!tp)
        return;
    int nth = threadpool_size(tp);
    CHECK(nth >= 1);
    if (n > 0)
        CHECK_EQ(nth, n);

    static const int64_t sizes[] = { 1, 2, 3, 7, 16, 100, 1000, 4097 };
    static const int64_t grains[] = { 1, 4, 16 };
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        for (size_t gi = 0; gi < 3; gi++) {
            int64_t len = sizes[si];
            struct cover c;
            c.hits = calloc((size_t)len, sizeof(atomic_int));
            c.grain = grains[gi];
            atomic_init(&c.bad, 0);
            for (int claim = 0; claim < 2; claim++) {
                for (int64_t i = 0; i < len; i++)
                    atomic_init(&c.hits[i], 0);
                if (claim)
                    threadpool_claim(tp, len, c.grain, cover_range, &c);
                else
                    threadpool_for(tp, len, c.grain, cover_range, &c);
                int wrong = 0;
                for (int64_t i = 0; i < len; i++)
                    wrong += atomic_load(&c.hits[i]) != 1;
                CHECK_EQ(wrong, 0);
                CHECK_EQ(atomic_load(&c.bad), 0);
            }
            free(c.hits);
        }
    }
    threadpool_for(tp, 0, 1, cover_range, NULL);   /* nothing to do, fn not called */
    threadpool_claim(tp, 0, 1, cover_range, NULL);

    struct all a;
    memset(&a, 0, sizeof(a));
    a.want_nth = nth;
    for (int rep = 0; rep < 200; rep++)
        threadpool_run(tp, all_job, &a);
    CHECK_EQ(atomic_load(&a.nth_bad), 0);
    for (int i = 0; i < nth && i < 64; i++)
        CHECK_EQ(atomic_load(&a.seen[i]), 200);

    /* many short jobs back to back: the barrier */
    for (int rep = 0; rep < 2000; rep++) {
        atomic_llong s;
        atomic_init(&s, 0);
        threadpool_for(tp, 333, 1, sum_range, &s);
        if (atomic_load(&s) != 333LL * 332 / 2) {
            CHECK(0);
            break;
        }
    }
    threadpool_free(tp);
}

int
main(void)
{
    struct threadpool *tp = NULL;

    CHECK(threadpool_n_cpus() >= 1);
    test_pool(1);
    test_pool(2);
    test_pool(5);
    test_pool(0);
    CHECK_EQ(threadpool_new(&tp, 5000), -ERANGE);
    CHECK(tp == NULL);
    threadpool_free(NULL);
    CHECK_EQ(threadpool_size(NULL), 1);
    T_DONE();
}
