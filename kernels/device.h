/*
 * device.h - accelerator probe shared by every tool's --device option.
 *
 * device_cuda_count() returns the number of usable CUDA devices (0 when the
 * build has no CUDA, when no driver is loaded or no GPU is present) and, when
 * there is one, fills name with the first device's name.  It never fails
 * hard: a missing driver is "no device".
 */
#ifndef LLMKIT_DEVICE_H
#define LLMKIT_DEVICE_H

#include <stddef.h>

int device_cuda_count(char *name, size_t name_len);

/* device_cuda_built() : 1 when this binary was built with CUDA kernels. */
int device_cuda_built(void);

/* device_cuda_copy_gbps() : device-to-device copy bandwidth of GPU 0 in 1e9
 * bytes per second, each copy of `bytes` counted as 2 * bytes moved (read
 * and write), the best of `reps` copies; -1 when there is no usable GPU
 * (or no CUDA in the build) or the buffers cannot be had.  The ceiling a
 * decode kernel that streams weights (reads only) is compared against
 * (scripts/gpu-check). */
double device_cuda_copy_gbps(size_t bytes, int reps);

#endif
