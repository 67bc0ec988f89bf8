/* cuda_absent.c - the device interface of a build without CUDA (CUDA=0 or no
 * nvcc): no device is ever available. */
#include <errno.h>
#include <stdio.h>

#include "backend.h"
#include "device.h"

int
device_cuda_count(char *name, size_t name_len)
{
    if (name && name_len)
        name[0] = '\0';
    return 0;
}

int
device_cuda_built(void)
{
    return 0;
}

double
device_cuda_copy_gbps(size_t bytes, int reps)
{
    (void)bytes;
    (void)reps;
    return -1.0;
}

int
backend_cuda_open(struct backend **out, const struct backend_config *cfg, char *why,
                  size_t why_len)
{
    (void)cfg;
    *out = NULL;
    snprintf(why, why_len, "--device cuda: this build has no CUDA (built without nvcc)");
    return -ENODEV;
}
