/*
 * backward_avx2.c - the trainer's soft cross-entropy (backward.h xent_fwd,
 * xent_bwd) in 8-lane AVX2: the log-sum-exp of each row of logits with
 * avx2_expf (ggml's vectorised exp, misc_avx2.c) and lane sums, where the
 * reference (backward_ref.inc) calls libm's expf once per logit and sums
 * one at a time.  Over EAGLE-3's draft vocabulary (4096 logits a row, rows
 * for every position and unrolled step, in the loss and again in its
 * gradient) those loops were the largest of the trainer's element-wise
 * costs.  The results differ from the reference's by rounding only
 * (tests/kernels/test_backward.c); the table backward_ops_blas_avx2
 * (backward_blas.c) takes them.
 */
#include <math.h>
#include <stdint.h>

#include "backward_avx2.h"
#include "simd_avx2.h"

/* log sum exp of a row; the last v % 8 logits through libm */
static float
lse(const float *z, int64_t v)
{
    int64_t v8 = v & ~(int64_t)7, j;
    __m256 m = _mm256_set1_ps(-INFINITY);
    float max = -INFINITY;

    for (j = 0; j < v8; j += 8)
        m = _mm256_max_ps(m, _mm256_loadu_ps(z + j));
    if (v8)
        max = hmax8(m);
    for (; j < v; j++)
        if (z[j] > max)
            max = z[j];
    __m256 vm = _mm256_set1_ps(max), s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (j = 0; j + 16 <= v8; j += 16) {
        s0 = _mm256_add_ps(s0, avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(z + j), vm)));
        s1 = _mm256_add_ps(s1, avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(z + j + 8), vm)));
    }
    for (; j < v8; j += 8)
        s0 = _mm256_add_ps(s0, avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(z + j), vm)));
    float s = hsum8(_mm256_add_ps(s0, s1));
    for (; j < v; j++)
        s += expf(z[j] - max);
    return max + logf(s);
}

void
bw_xent_fwd_avx2(float *loss, const float *z, const float *t, int64_t n, int64_t v)
{
    int64_t v8 = v & ~(int64_t)7;

    for (int64_t r = 0; r < n; r++) {
        const float *zr = z + r * v, *tr = t + r * v;
        __m256 vl = _mm256_set1_ps(lse(zr, v)), acc = _mm256_setzero_ps();
        int64_t j;
        for (j = 0; j < v8; j += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(tr + j),
                                  _mm256_sub_ps(vl, _mm256_loadu_ps(zr + j)), acc);
        float s = hsum8(acc), l = _mm256_cvtss_f32(vl);
        for (; j < v; j++)
            s += tr[j] * (l - zr[j]);
        loss[r] = s;
    }
}

void
bw_xent_bwd_avx2(float *dz, const float *z, const float *t, const float *wr, int64_t n,
                 int64_t v)
{
    int64_t v8 = v & ~(int64_t)7;

    for (int64_t r = 0; r < n; r++) {
        const float *zr = z + r * v, *tr = t + r * v;
        float *dr = dz + r * v, l = lse(zr, v), w = wr ? wr[r] : 1.0f;
        __m256 acc = _mm256_setzero_ps();
        int64_t j;
        for (j = 0; j < v8; j += 8)
            acc = _mm256_add_ps(acc, _mm256_loadu_ps(tr + j));
        float ts = hsum8(acc);
        for (; j < v; j++)
            ts += tr[j];
        __m256 vl = _mm256_set1_ps(l), vts = _mm256_set1_ps(ts), vw = _mm256_set1_ps(w);
        for (j = 0; j < v8; j += 8) {
            __m256 p = avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(zr + j), vl));
            __m256 g = _mm256_fmsub_ps(p, vts, _mm256_loadu_ps(tr + j));
            _mm256_storeu_ps(dr + j, _mm256_fmadd_ps(vw, g, _mm256_loadu_ps(dr + j)));
        }
        for (; j < v; j++)
            dr[j] += w * (expf(zr[j] - l) * ts - tr[j]);
    }
}
