/*
 * attn_avx2.h - helpers of cpu/attn_avx2.c exposed for tests (compiled with
 * -mavx2 -mfma -mf16c; callable only when kernel_ops_avx2.available() is 1).
 */
#ifndef LLMKIT_ATTN_AVX2_H
#define LLMKIT_ATTN_AVX2_H

#include <stdint.h>

#include "ops.h"

/* ops_expf_libm_avx2() : y[i] = expf(x[i]) for i < n, bit-identical with the
 * C library's expf (glibc's algorithm, as its x86-64 FMA variant computes
 * it), 4 lanes at a time; lanes outside the fast range call expf.  y and x
 * may be equal. */
void ops_expf_libm_avx2(float *y, const float *x, int64_t n);

/* ops_attn_slotwise_avx2() : ops_attn_avx2 computed slot-major (all heads per
 * slot, accumulators in scratch), the path taken for head sizes the
 * head-major fast path does not handle; same contract and same results. */
void ops_attn_slotwise_avx2(const struct attn_args *a, float *scratch);

#endif
