/*
 * simd_avx2.h - small AVX2 helpers shared by kernels/cpu/ *_avx2.c: only
 * files compiled with -mavx2 -mfma -mf16c may include it.
 */
#ifndef LLMKIT_SIMD_AVX2_H
#define LLMKIT_SIMD_AVX2_H

#include <immintrin.h>

/* exp of 8 lanes, bit-identical to ggml's AVX2 ggml_v_expf (misc_avx2.c). */
__m256 avx2_expf(__m256 x);

/* Sum of 4 accumulators of 8 lanes in ggml's GGML_F32x8_REDUCE order:
 * (a0 + a2) + (a1 + a3) (avx2_reduce4), then the two 128-bit halves, then
 * two horizontal adds (avx2_reduce1, from the combined vector). */
static inline float
avx2_reduce1(__m256 s)
{
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    t = _mm_hadd_ps(t, t);
    t = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(t);
}

static inline float
avx2_reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    return avx2_reduce1(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
}

/* f16 <-> f32 for 8 lanes (F16C, round to nearest even). */
static inline __m256
avx2_load_f16(const void *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline void
avx2_store_f16(void *p, __m256 v)
{
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

#endif
