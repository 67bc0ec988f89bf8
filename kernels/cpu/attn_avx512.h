/*
 * attn_avx512.h - the AVX-512 one-row attention (cpu/attn_avx512.c).  Only
 * callable when kernel_ops_avx512.available() is 1; kernels/dispatch.c
 * puts it in the "avx512" table, whose scratch size is the AVX2 kernel's
 * (ops_attn_scratch_floats_avx2).
 */
#ifndef LLMKIT_ATTN_AVX512_H
#define LLMKIT_ATTN_AVX512_H

#include "ops.h"

/* ops_attn_avx512() : ops_attn_fn, the bits of ops_attn_avx2 */
void ops_attn_avx512(const struct attn_args *a, float *scratch);

#endif
