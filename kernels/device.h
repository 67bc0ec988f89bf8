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

#endif
