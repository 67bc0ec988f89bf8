/*
 * compute.h - which compute kernels and devices a run uses, as the tools
 * name them: the library's one answer to "can this machine run --kernel
 * NAME" and "how many CPUs may -t use", so that tools check their options
 * without reaching into kernels/ (the layering:
 * tools talk to common/, common/ to kernels/).  The model picks the same
 * implementation by the same name when it loads (model_opts.kernel).
 */
#ifndef LLMKIT_COMPUTE_H
#define LLMKIT_COMPUTE_H

#include <stdbool.h>

/* compute_kernel_available() : true when name ("auto", "ref", "avx2",
 * "avx512", ...) names a kernel implementation this machine can run; false
 * for an unknown name or one whose CPU features are missing.  "auto" is
 * always available (the scalar reference runs everywhere). */
bool compute_kernel_available(const char *name);

/* compute_device_known() : true for a device name the backends know ("cpu",
 * "cuda"), whether or not it is usable here (model_open() says why not). */
bool compute_device_known(const char *name);

/* compute_n_cpus() : the CPUs this process may run on (its affinity mask). */
int compute_n_cpus(void);

#endif
