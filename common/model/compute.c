/*
 * compute.c - kernel implementation names (see compute.h), answered by the
 * kernels' dispatch table (kernels/ops.h).
 */
#include "compute.h"

#include "ops.h"

bool
compute_kernel_available(const char *name)
{
    return name && ops_select(name) != NULL;
}
