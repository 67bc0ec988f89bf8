/* cuda_absent.c - the device interface of a build without CUDA (CUDA=0 or no
 * nvcc): no device is ever available. */
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
