/*
 * membw - measures memory read bandwidth, the ceiling of batch-1 decoding.
 *
 *   membw [-t THREADS] [-s SIZE_MIB] [-r REPEATS]
 *
 * Each thread sums its share of a buffer (default 1 GiB, far larger than the
 * caches) with 8 independent 64-bit accumulators; the best of REPEATS passes
 * is reported, as bytes read per second.  Prints one line of JSON:
 *   {"schema":"membw/1","threads":T,"bytes":B,"seconds":S,"gbps":G}
 * where gbps is 1e9 bytes per second.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

struct job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
    pthread_barrier_t *bar;
    int repeats;
    double *best;       /* thread 0 records times */
};

static uint64_t
sum_words(const uint64_t *p, size_t n)
{
    uint64_t a[8] = {0};
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += p[i + k];
    for (; i < n; i++)
        a[0] += p[i];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static void *
worker(void *arg)
{
    struct job *j = arg;

    for (int r = 0; r < j->repeats; r++) {
        double t0;
        pthread_barrier_wait(j->bar);
        t0 = now_seconds();
        j->sum += sum_words(j->p, j->n);
        pthread_barrier_wait(j->bar);
        if (j->best) {
            double t = now_seconds() - t0;
            if (*j->best == 0 || t < *j->best)
                *j->best = t;
        }
    }
    return NULL;
}

int
main(int argc, char **argv)
{
    static const char usage[] = "usage: membw [-t threads] [-s size_mib] [-r repeats]";
    int threads = 2, repeats = 5, c;
    int64_t mib = 1024;
    uint64_t *buf, total = 0;
    size_t words, per;
    pthread_t *tid;
    struct job *jobs;
    pthread_barrier_t bar;
    double best = 0;

    cli_init(argv[0]);
    while ((c = cli_getopt(argc, argv, "t:s:r:", NULL, usage)) != -1) {
        switch (c) {
        case 't': threads = (int)cli_parse_i64(optarg, 1, 256, "-t", false); break;
        case 's': mib = cli_parse_i64(optarg, 16, 65536, "-s", false); break;
        case 'r': repeats = (int)cli_parse_i64(optarg, 1, 1000, "-r", false); break;
        default: cli_exit_usage(usage);
        }
    }
    words = (size_t)mib << 17;
    buf = aligned_alloc(64, words * 8);
    tid = calloc((size_t)threads, sizeof(*tid));
    jobs = calloc((size_t)threads, sizeof(*jobs));
    if (!buf || !tid || !jobs)
        die(RC_RESOURCE, "out of memory");
    for (size_t i = 0; i < words; i++)
        buf[i] = i * 2654435761u;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    per = words / (size_t)threads;
    for (int t = 0; t < threads; t++) {
        jobs[t].p = buf + per * (size_t)t;
        jobs[t].n = t == threads - 1 ? words - per * (size_t)t : per;
        jobs[t].bar = &bar;
        jobs[t].repeats = repeats;
        jobs[t].best = t == 0 ? &best : NULL;
        pthread_create(&tid[t], NULL, worker, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        total += jobs[t].sum;
    }
    printf("{\"schema\":\"membw/1\",\"threads\":%d,\"bytes\":%zu,\"seconds\":%.6f,\"gbps\":%.3f,\"checksum\":%llu}\n",
           threads, words * 8, best, (double)(words * 8) / best / 1e9, (unsigned long long)(total & 0xffff));
    free(buf);
    free(tid);
    free(jobs);
    cli_finish_stdout();
    return RC_OK;
}
