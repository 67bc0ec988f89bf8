/*
 * backward_avx2.h - the trainer's soft cross-entropy in AVX2
 * (backward_avx2.c): backward.h's xent_fwd and xent_bwd, for CPUs with AVX2
 * and FMA only.
 */
#ifndef LLMKIT_BACKWARD_AVX2_H
#define LLMKIT_BACKWARD_AVX2_H

#include <stdint.h>

void bw_xent_fwd_avx2(float *loss, const float *z, const float *t, int64_t n, int64_t v);
void bw_xent_bwd_avx2(float *dz, const float *z, const float *t, const float *wr, int64_t n,
                      int64_t v);

#endif
