/*
 * compute.c - kernel and device names and the CPU count (see compute.h),
 * answered by kernels/ (ops.h, backend.h, threadpool.h).
 */
#include "compute.h"

#include <string.h>

#include "backend.h"
#include "ops.h"
#include "threadpool.h"

bool
compute_kernel_available(const char *name)
{
    return name && ops_select(name) != NULL;
}

bool
compute_device_known(const char *name)
{
    for (const char *const *d = backend_devices(); name && *d; d++)
        if (strcmp(*d, name) == 0)
            return true;
    return false;
}

int
compute_n_cpus(void)
{
    return threadpool_n_cpus();
}
