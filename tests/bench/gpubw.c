/*
 * gpubw - device-to-device copy bandwidth of GPU 0 (kernels/device.h), the
 * ceiling scripts/gpu-check compares the decode kernels' bandwidth with.
 *
 *   gpubw [-s SIZE_MIB] [-r REPEATS]
 *
 * Copies a buffer (default 2 GiB, far larger than the L2) REPEATS times
 * (default 10) and prints the best as one line of JSON, a copy counted as
 * read plus write:
 *   {"schema":"gpubw/1","bytes":B,"gbps":G}
 * Exit 5 with one line when no GPU is usable (or the build has no CUDA).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "device.h"

int
main(int argc, char **argv)
{
    long mib = 2048, reps = 10;
    int c;

    while ((c = getopt(argc, argv, "s:r:")) != -1) {
        char *end;
        long *v = c == 's' ? &mib : c == 'r' ? &reps : NULL;
        if (!v) {
            fprintf(stderr, "usage: gpubw [-s SIZE_MIB] [-r REPEATS]\n");
            return 2;
        }
        *v = strtol(optarg, &end, 10);
        if (*end || *v < 1 || *v > 1 << 20) {
            fprintf(stderr, "gpubw: -%c: a positive integer, at most %d\n", c, 1 << 20);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "usage: gpubw [-s SIZE_MIB] [-r REPEATS]\n");
        return 2;
    }
    if (!device_cuda_built()) {
        fprintf(stderr, "gpubw: this build has no CUDA (built without nvcc)\n");
        return 5;
    }
    size_t bytes = (size_t)mib << 20;
    double g = device_cuda_copy_gbps(bytes, (int)reps);
    if (g < 0) {
        fprintf(stderr, "gpubw: no usable CUDA device, or %ld MiB twice not free on it\n", mib);
        return 5;
    }
    printf("{\"schema\":\"gpubw/1\",\"bytes\":%zu,\"gbps\":%.1f}\n", bytes, g);
    return 0;
}
