/*
 * attn_avx2.c - AVX2/FMA/F16C paged attention for one query token and one
 * KV head group, computing exactly what llama.cpp's CPU flash attention
 * computes for a single query row (ggml_compute_forward_flash_attn_ext_f16,
 * one-chunk path) on an AVX2 build:
 *
 *   f16 cache:  the query is rounded to f16; q.k is summed in 4 x 8 f32
 *               lanes with FMA over 32-element steps, reduced in ggml's
 *               order (remaining elements added in double); the output
 *               accumulator is kept in f16: scaled by ms and then
 *               acc = f16(fma(v, w, acc)) per slot.
 *   f32 cache:  the same with f32 query, keys, values and accumulator.
 *
 * Slots are visited in order and the running maximum updated slot by slot
 * (s > M: rescale, else weight exp(s - M)), S = S * ms + w; at the end the
 * accumulator is divided by S.  Other KV types use the reference.
 *
 * Scratch per call: acc [n_q][dv] (f32, or f16 in its first half) | M [n_q] |
 * S [n_q] | the f16 query [n_q][dk].
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "simd_avx2.h"

int64_t
ops_attn_scratch_floats_avx2(int64_t n_q, int64_t block_size, int64_t head_dim,
                             int64_t head_dim_v)
{
    (void)block_size;
    /* acc [n_q][dv] | M [n_q] | S [n_q] | f16 query [n_q][dk] (half a float each) */
    return n_q * head_dim_v + 2 * n_q + (n_q * head_dim + 1) / 2 + 8;
}

/* q.k over n f16 elements, as ggml_vec_dot_f16. */
static inline float
dot_f16(const uint16_t *k, const uint16_t *q, int64_t n)
{
    int64_t np = n & ~(int64_t)31;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;

    for (int64_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(avx2_load_f16(k + i), avx2_load_f16(q + i), s0);
        s1 = _mm256_fmadd_ps(avx2_load_f16(k + i + 8), avx2_load_f16(q + i + 8), s1);
        s2 = _mm256_fmadd_ps(avx2_load_f16(k + i + 16), avx2_load_f16(q + i + 16), s2);
        s3 = _mm256_fmadd_ps(avx2_load_f16(k + i + 24), avx2_load_f16(q + i + 24), s3);
    }
    double sum = np ? (double)avx2_reduce4(s0, s1, s2, s3) : 0.0;
    for (int64_t i = np; i < n; i++) {
        float a = _cvtsh_ss(k[i]), b = _cvtsh_ss(q[i]);
        sum += (double)(a * b);
    }
    return (float)sum;
}

/* q.k over n f32 elements, as ggml_vec_dot_f32. */
static inline float
dot_f32(const float *k, const float *q, int64_t n)
{
    int64_t np = n & ~(int64_t)31;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;

    for (int64_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + i), _mm256_loadu_ps(q + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 8), _mm256_loadu_ps(q + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 16), _mm256_loadu_ps(q + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 24), _mm256_loadu_ps(q + i + 24), s3);
    }
    double sum = np ? (double)avx2_reduce4(s0, s1, s2, s3) : 0.0;
    for (int64_t i = np; i < n; i++)
        sum += (double)(k[i] * q[i]);
    return (float)sum;
}

/* acc16 = f16(acc16 * ms) (ggml_vec_scale_f16). */
static inline void
scale_f16(uint16_t *acc, int64_t n, float ms)
{
    int64_t np = n & ~(int64_t)31;
    __m256 vm = _mm256_set1_ps(ms);

    for (int64_t i = 0; i < np; i += 8)
        avx2_store_f16(acc + i, _mm256_mul_ps(avx2_load_f16(acc + i), vm));
    for (int64_t i = np; i < n; i++)
        acc[i] = _cvtss_sh(_cvtsh_ss(acc[i]) * ms, _MM_FROUND_TO_NEAREST_INT);
}

/* acc16 = f16(fma(v, w, acc16)) (ggml_vec_mad_f16). */
static inline void
mad_f16(uint16_t *acc, const uint16_t *v, int64_t n, float w)
{
    int64_t np = n & ~(int64_t)31;
    __m256 vw = _mm256_set1_ps(w);

    for (int64_t i = 0; i < np; i += 8)
        avx2_store_f16(acc + i, _mm256_fmadd_ps(avx2_load_f16(v + i), vw, avx2_load_f16(acc + i)));
    for (int64_t i = np; i < n; i++)
        acc[i] = _cvtss_sh(_cvtsh_ss(acc[i]) + _cvtsh_ss(v[i]) * w, _MM_FROUND_TO_NEAREST_INT);
}

static inline void
scale_f32(float *acc, int64_t n, float ms)
{
    int64_t np = n & ~(int64_t)31;
    __m256 vm = _mm256_set1_ps(ms);

    for (int64_t i = 0; i < np; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), vm));
    for (int64_t i = np; i < n; i++)
        acc[i] *= ms;
}

static inline void
mad_f32(float *acc, const float *v, int64_t n, float w)
{
    int64_t np = n & ~(int64_t)31;
    __m256 vw = _mm256_set1_ps(w);

    for (int64_t i = 0; i < np; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vw, _mm256_loadu_ps(acc + i)));
    for (int64_t i = np; i < n; i++)
        acc[i] += v[i] * w;
}

void
ops_attn_avx2(const struct attn_args *a, float *scratch)
{
    const int64_t nq = a->n_q, bs = a->block_size, dk = a->head_dim, dv = a->head_dim_v;

    if (a->kv_type != 0 && a->kv_type != 1) {
        ops_attn_ref(a, scratch);
        return;
    }
    const int f16 = a->kv_type == 1;
    const size_t esz = f16 ? 2 : 4;
    /* acc: nq*dv floats (f16 accumulators use half of it); M, S. */
    float *acc = scratch;
    uint16_t *acc16 = (uint16_t *)scratch;
    float *M = acc + nq * dv;
    float *S = M + nq;
    uint16_t *q16 = (uint16_t *)(S + nq);   /* f16 cache: the query in f16 */

    for (int64_t h = 0; h < nq; h++) {
        M[h] = -INFINITY;
        S[h] = 0.0f;
    }
    if (f16) {
        memset(acc16, 0, (size_t)(nq * dv) * sizeof(uint16_t));
        for (int64_t h = 0; h < nq; h++) {
            const float *qh = a->q + h * dk;
            uint16_t *dst = q16 + h * dk;
            int64_t i = 0;
            for (; i + 8 <= dk; i += 8)
                avx2_store_f16(dst + i, _mm256_loadu_ps(qh + i));
            for (; i < dk; i++)
                dst[i] = _cvtss_sh(qh[i], _MM_FROUND_TO_NEAREST_INT);
        }
    } else {
        memset(acc, 0, (size_t)(nq * dv) * sizeof(float));
    }

    for (int64_t s = 0; s < a->n_kv; s++) {
        if (a->vis && !a->vis[s])
            continue;
        size_t blk = (size_t)a->table[s / bs] * a->block_stride;
        const uint8_t *krow = a->k_base + blk + (size_t)(s % bs) * (size_t)dk * esz;
        const uint8_t *vrow = a->v_base + blk + (size_t)(s % bs) * (size_t)dv * esz;

        for (int64_t h = 0; h < nq; h++) {
            float sc = f16 ? dot_f16((const uint16_t *)krow, q16 + h * dk, dk)
                           : dot_f32((const float *)krow, a->q + h * dk, dk);
            sc = sc * a->scale;
            float mold = M[h];
            float ms = 1.0f, vs = 1.0f;
            if (sc > M[h]) {
                M[h] = sc;
                ms = expf(mold - M[h]);
                if (f16)
                    scale_f16(acc16 + h * dv, dv, ms);
                else
                    scale_f32(acc + h * dv, dv, ms);
            } else {
                vs = expf(sc - M[h]);
            }
            if (f16)
                mad_f16(acc16 + h * dv, (const uint16_t *)vrow, dv, vs);
            else
                mad_f32(acc + h * dv, (const float *)vrow, dv, vs);
            S[h] = S[h] * ms + vs;
        }
    }

    for (int64_t h = 0; h < nq; h++) {
        float inv = S[h] == 0.0f ? 0.0f : 1.0f / S[h];
        float *out = a->out + h * dv;
        for (int64_t i = 0; i < dv; i++) {
            float v = f16 ? _cvtsh_ss(acc16[h * dv + i]) : acc[h * dv + i];
            out[i] = v * inv;
        }
    }
}
