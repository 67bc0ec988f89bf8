// device.cu - CUDA implementation of kernels/device.h: counts usable devices
// through the runtime API; a missing driver or GPU reads as zero devices.
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "device.h"
}

extern "C" int
device_cuda_count(char *name, size_t name_len)
{
    int n = 0;

    if (name && name_len)
        name[0] = '\0';
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (n > 0 && name && name_len) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
            snprintf(name, name_len, "%s", p.name);
    }
    return n;
}

extern "C" int
device_cuda_built(void)
{
    return 1;
}
