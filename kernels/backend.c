/*
 * backend.c - backend_open(): the one place that turns a device name into
 * an opened backend (backend.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "device.h"

static const char *const devices[] = { "cpu", "cuda", NULL };

const char *const *
backend_devices(void)
{
    return devices;
}

int
backend_open(struct backend **out, const char *device, const struct backend_config *cfg,
             char *why, size_t why_len)
{
    *out = NULL;
    if (!device || strcmp(device, "cpu") == 0)
        return backend_cpu_open(out, cfg, why, why_len);
    if (strcmp(device, "cuda") == 0) {
        char name[128];
        if (!device_cuda_built()) {
            snprintf(why, why_len, "--device cuda: this build has no CUDA (built without nvcc)");
            return -ENODEV;
        }
        if (device_cuda_count(name, sizeof(name)) <= 0) {
            snprintf(why, why_len, "--device cuda: no usable CUDA device (no driver or no GPU)");
            return -ENODEV;
        }
        return backend_cuda_open(out, cfg, why, why_len);
    }
    snprintf(why, why_len, "unknown device '%.64s' (known: cpu, cuda)", device);
    return -EINVAL;
}

void
backend_close(struct backend *be)
{
    if (be)
        be->ops->close(be);
}
