/*
 * benchtime.h - the timing loop of the kernel benchmarks (mmbench,
 * attnbench): the best seconds per call over `rounds` rounds, the first
 * one call, the others enough calls for about 50 ms.
 */
#ifndef LLMKIT_BENCHTIME_H
#define LLMKIT_BENCHTIME_H

#include <time.h>

static inline double
bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double
bench_best(void (*call)(void *), void *arg, int rounds)
{
    double best = 1e30;
    int reps = 1;
    for (int round = 0; round < rounds; round++) {
        double t0 = bench_now();
        for (int i = 0; i < reps; i++)
            call(arg);
        double dt = (bench_now() - t0) / reps;
        if (dt < best)
            best = dt;
        if (round == 0)
            reps = (int)(0.05 / dt) + 1;
    }
    return best;
}

#endif
