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

extern "C" double
device_cuda_copy_gbps(size_t bytes, int reps)
{
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = -1.0f;
    int n = 0;

    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1 || bytes == 0 || reps < 1) {
        cudaGetLastError();
        return -1.0;
    }
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        goto out;
    if (cudaMemset(a, 1, bytes) != cudaSuccess || cudaMemcpy(b, a, bytes,
                                                             cudaMemcpyDeviceToDevice) != cudaSuccess)
        goto out;                               /* (the first copy warms up) */
    for (int i = 0; i < reps; i++) {
        float ms = 0.0f;
        if (cudaEventRecord(e0) != cudaSuccess ||
            cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess ||
            cudaEventRecord(e1) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
            best = -1.0f;
            goto out;
        }
        if (ms > 0.0f && (best < 0.0f || ms < best))
            best = ms;
    }
out:
    cudaGetLastError();
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return best > 0.0f ? 2.0 * (double)bytes / ((double)best * 1e-3) / 1e9 : -1.0;
}
