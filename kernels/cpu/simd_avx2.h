/*
 * simd_avx2.h - small AVX2 helpers shared by kernels/cpu/ *_avx2.c and
 * *_avx512.c: only files compiled with -mavx2 -mfma -mf16c (or a superset)
 * may include it.
 */
#ifndef LLMKIT_SIMD_AVX2_H
#define LLMKIT_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "qblock.h"

/* a * b + c rounded once: one vfmadd (-mfma) */
static inline float
fmadd_ss(float a, float b, float c)
{
    return __builtin_fmaf(a, b, c);
}

/* f16 -> f32 by F16C (exact, as qconv_fp16_to_fp32) */
static inline float
h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* the IQ4_NL/IQ4_XS code values in both 128-bit halves (for VPSHUFB) */
static inline __m256i
iq4nl_lut(void)
{
    __m128i l = _mm_loadu_si128((const __m128i *)(const void *)kvalues_iq4nl);
    return _mm256_broadcastsi128_si256(l);
}

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

/* ggml's hsum_float_8 of a vector held as its two 128-bit halves: (hi +
 * lo), then lanes (0+2, 1+3), then their sum */
static inline float
hsum8_halves(__m128 lo, __m128 hi)
{
    __m128 r = _mm_add_ps(hi, lo);
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline float
hsum8(__m256 x)
{
    return hsum8_halves(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
}

/* the largest of 8 lanes, by the same pairings (as ggml's quantize_row_q8
 * and softmax take it) */
static inline float
hmax8(__m256 x)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The 8 horizontal sums of v[0..7] in one vector (lane t = sum of v[t]'s
 * lanes); exact integer sums. */
static inline __m256i
hsum8x8_epi32(const __m256i *v)
{
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    /* a = [t0..t3 low halves | t0..t3 high halves], b likewise for t4..t7 */
    __m256i lo = _mm256_inserti128_si256(a, _mm256_castsi256_si128(b), 1);
    __m256i hi = _mm256_blend_epi32(_mm256_castsi128_si256(_mm256_extracti128_si256(a, 1)), b, 0xf0);
    return _mm256_add_epi32(lo, hi);
}

/* 32 nibbles: low nibbles in bytes 0..15, high nibbles in bytes 16..31 */
static inline __m256i
nibbles32(const uint8_t *p)
{
    __m128i t = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(15));
}

/* byte j = 0xff when bit j of the little-endian 32-bit word at p is set */
static inline __m256i
bits32(const uint8_t *p)
{
    uint32_t w;
    memcpy(&w, p, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w),
                                    _mm256_setr_epi64x(0, 0x0101010101010101ll,
                                                       0x0202020202020202ll,
                                                       0x0303030303030303ll));
    __m256i m = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m);
}

/* The prefetch of a later group of rows, spread over the n steps of a
 * pass: step k asks for the lines below (k + 1) * lines / n, counted without
 * a division (*l: next line, *acc: (k + 1) * lines). */
static inline __attribute__((always_inline)) void
pf_spread(const char *pf, int64_t *l, int64_t *acc, int64_t lines, int64_t n)
{
    *acc += lines;
    for (; *l * n < *acc; (*l)++)
        _mm_prefetch(pf + 64 * *l, _MM_HINT_T0);
}

/* the sum of 8 int32 lanes */
static inline int
hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* The sums of 8 vectors of 4 int32 lanes, as one vector [sum v0 .. sum v7]
 * (exact integers: the order of the additions does not matter) */
static inline __m256i
hsum8x4_epi32(const __m128i *v)
{
    __m128i s03 = _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]));
    __m128i s47 = _mm_hadd_epi32(_mm_hadd_epi32(v[4], v[5]), _mm_hadd_epi32(v[6], v[7]));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(s03), s47, 1);
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
