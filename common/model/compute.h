/*
 * compute.h - which compute kernels a run uses, as the tools name them: the
 * library's one answer to "can this machine run --kernel NAME", so that
 * tools check the option without reaching into kernels/ (the layering:
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

#endif
