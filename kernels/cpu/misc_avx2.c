/*
 * misc_avx2.c - AVX2/FMA variants of the element-wise kernels.
 *
 * SwiGLU is the one whose result differs from the reference: ggml's AVX2
 * build evaluates silu with a vectorised exp (a degree-5 polynomial after
 * range reduction by ln 2, with special handling of large |x|), which
 * differs from libm's expf in the last bit for some inputs; SmolLM2's large
 * residual stream amplifies that into different greedy tokens.  This file
 * computes the same sequence of IEEE operations (the algorithm is the one
 * of Arm's optimized-routines expf, as adapted in ggml), so silu(x) * up
 * is bit-identical to llama.cpp's on x86 with AVX2 and FMA.  Elements past
 * the last multiple of 8 use libm's expf, as ggml's scalar tail does.
 *
 * RMSNorm and RoPE already reproduce ggml exactly in the reference (the
 * sum of squares in double, in order; the rotation with explicit fmaf);
 * they are vectorised here only where that keeps every rounding the same
 * (RoPE: the same fused multiply-adds, element for element).
 *
 * Compiled with -mavx2 -mfma -mf16c; called only after dispatch.c has
 * checked the CPU supports them.
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "ops.h"
#include "simd_avx2.h"

/* exp(x) for 8 lanes:
 *   n = round(x / ln2) by the 1.5*2^23 shifter trick,
 *   b = x - n*ln2 in two steps (ln2 split in a high and a low part),
 *   exp(b) - 1 ~ C0 b + C1 b^2 + C2 b^3 + C3 b^4 + C4 b^5 (Estrin form),
 *   result = 2^n * (1 + p), with 2^n built in the exponent bits;
 * lanes with |n| > 126 are scaled in two factors to reach the subnormal and
 * overflow ranges, lanes with |n| > 192 saturate to 0 or infinity. */
__m256
avx2_expf(__m256 x)
{
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    const __m256 inv_ln2 = _mm256_set1_ps(0x1.715476p+0f);
    const __m256 ln2_hi = _mm256_set1_ps(0x1.62e4p-1f);
    const __m256 ln2_lo = _mm256_set1_ps(0x1.7f7d1cp-20f);
    const __m256 c0 = _mm256_set1_ps(0x1.ffffecp-1f);
    const __m256 c1 = _mm256_set1_ps(0x1.fffdb6p-2f);
    const __m256 c2 = _mm256_set1_ps(0x1.555e66p-3f);
    const __m256 c3 = _mm256_set1_ps(0x1.573e2ep-5f);
    const __m256 c4 = _mm256_set1_ps(0x1.0e4020p-7f);
    const __m256 sign = _mm256_set1_ps(-0.0f);

    __m256 z = _mm256_fmadd_ps(x, inv_ln2, shift);
    __m256 n = _mm256_sub_ps(z, shift);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
    __m256 b = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    __m256 absn = _mm256_andnot_ps(sign, n);
    __m256 big = _mm256_cmp_ps(absn, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    __m256 u = _mm256_mul_ps(b, b);
    __m256 hi = _mm256_fmadd_ps(c4, b, c3);
    __m256 lo = _mm256_fmadd_ps(c2, b, c1);
    __m256 p = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, lo), u, _mm256_mul_ps(c0, b));

    if (!_mm256_movemask_ps(big))
        return _mm256_fmadd_ps(p, k, k);

    /* Some lane is outside the normal range of 2^n: split the power in
     * s1 * s2 (s1 = 2^(+-127) or so), each representable. */
    __m256i neg = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                   _mm256_set1_epi32((int)0x82000000u));
    __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(neg, _mm256_set1_epi32(0x7f000000)));
    __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, neg));
    __m256 huge = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, p, s2), s1);
    __m256 normal = _mm256_fmadd_ps(k, p, k);
    __m256 mid = _mm256_or_ps(_mm256_and_ps(big, scaled), _mm256_andnot_ps(big, normal));
    return _mm256_or_ps(_mm256_and_ps(huge, _mm256_mul_ps(s1, s1)), _mm256_andnot_ps(huge, mid));
}

void
ops_silu_mul_avx2(float *y, const float *gate, const float *up, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = avx2_expf(_mm256_sub_ps(_mm256_setzero_ps(), g));
        __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* GeGLU through ggml's lookup table (ggml_vec_geglu_f32 with
 * GGML_GELU_FP16): the table holds the reference's entry for every f16
 * value, filled once (128 KiB); the lookups are scalar, the rounding to f16
 * and the products vectorised, with the same bits as ops_gelu_mul_ref. */
static uint16_t gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void
gelu_table_fill(void)
{
    for (uint32_t h = 0; h < (1u << 16); h++)
        gelu_table[h] = ops_gelu_f16_ref((uint16_t)h);
}

void
ops_gelu_mul_avx2(float *y, const float *gate, const float *up, int64_t n)
{
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    uint16_t h[8], t[8];
    int64_t i = 0;

    pthread_once(&gelu_once, gelu_table_fill);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
        _mm_storeu_si128((__m128i *)h, _mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
        for (int k = 0; k < 8; k++)
            t[k] = gelu_table[h[k]];
        __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t)), u);
        __m256 big = _mm256_cmp_ps(g, hi, _CMP_GE_OQ), neg = _mm256_cmp_ps(g, lo, _CMP_LE_OQ);
        v = _mm256_blendv_ps(v, _mm256_mul_ps(g, u), big);
        v = _mm256_andnot_ps(neg, v);
        _mm256_storeu_ps(y + i, v);
    }
    ops_gelu_mul_ref(y + i, gate + i, up + i, n - i);     /* the tail: the same table entries */
}

/* RMSNorm: the sum of squares stays a sequential double sum (vectorising it
 * would reorder the additions); the scaling is element-wise and is. */
void
ops_rmsnorm_avx2(float *y, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0.0;

    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    float mean = (float)(sum / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;

    if (w) {
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
            _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
        }
        for (; i < n; i++) {
            float v = x[i] * scale;
            y[i] = v * w[i];
        }
    } else {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
        for (; i < n; i++)
            y[i] = x[i] * scale;
    }
}

/* ops_rope_ref's rotation, 8 elements at a time: the same fused
 * multiply-adds on the same operands (the sine product rounded, negated and
 * added inside the fma for the first element of a pair, the cosine product
 * for the second), the angles from the caller's table. */
void
ops_rope_avx2(float *x, int64_t n_heads, int64_t head_dim, const float *cs,
              const struct rope_params *p)
{
    const int64_t half = p->n_rot / 2;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;

    if (p->style == ROPE_NEOX) {
        /* (x[i], x[i + half]) with 8 consecutive i */
        for (; i + 8 <= half; i += 8) {
            __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(cs + half + i);
            for (int64_t h = 0; h < n_heads; h++) {
                float *xh = x + h * head_dim;
                __m256 x0 = _mm256_loadu_ps(xh + i), x1 = _mm256_loadu_ps(xh + half + i);
                _mm256_storeu_ps(xh + i, _mm256_fmadd_ps(x0, c, _mm256_xor_ps(_mm256_mul_ps(x1, s), sign)));
                _mm256_storeu_ps(xh + half + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
            }
        }
    } else {
        /* 4 adjacent pairs: lanes 2k (x0) and 2k + 1 (x1) with pair k's
         * angle in both */
        const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        for (; i + 4 <= half; i += 4) {
            __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + i)), dup);
            __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + half + i)), dup);
            for (int64_t h = 0; h < n_heads; h++) {
                float *xh = x + h * head_dim + 2 * i;
                __m256 v = _mm256_loadu_ps(xh), w = _mm256_permute_ps(v, 0xb1);   /* pairs swapped */
                /* even lanes: fma(x0, c, -(x1 s)); odd lanes: fma(x0, s, x1 c) */
                __m256 e = _mm256_fmadd_ps(v, c, _mm256_xor_ps(_mm256_mul_ps(w, s), sign));
                __m256 o = _mm256_fmadd_ps(w, s, _mm256_mul_ps(v, c));
                _mm256_storeu_ps(xh, _mm256_blend_ps(e, o, 0xaa));
            }
        }
    }
    ops_rope_pairs_ref(x, n_heads, head_dim, cs, p, i);   /* the pairs past the last vector */
}
