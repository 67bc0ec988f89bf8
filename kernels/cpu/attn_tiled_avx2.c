/*
 * attn_tiled_avx2.c - AVX2/FMA/F16C tiled attention (ops.h, struct
 * attn_tiled_args), bit-identical with ggml's AVX2 build of
 * ggml_compute_forward_flash_attn_ext_tiled and with attn_tiled_ref.c (see
 * there for the arithmetic).
 *
 * Per KV tile of 64 slots the keys are converted once, transposed to
 * [head_dim][64] (ggml's K_f32 layout: 8 slots per vector), and the values
 * to [64][head_dim_v]; every row and head of the call then takes its 64
 * scores as 8 vector fma chains over the head dimension (one per 8 slots:
 * the same per-element chain as ggml's simd_gemm), its softmax with
 * avx2_expf (ggml_v_expf) and the same lane sums, and its value update as
 * per-element fma chains in slot order, 64 output columns at a time.
 *
 * Scratch: K^T [dk][64] | V [64][dv] | acc [64 rows][n_q][dv] | M, S [64][n_q] |
 * scores [64].
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "simd_avx2.h"

#define TQ ATTN_TILE_Q
#define TK ATTN_TILE_KV

int64_t
ops_attn_tiled_scratch_floats_avx2(int64_t n_q, int64_t head_dim, int64_t head_dim_v)
{
    return head_dim * TK + TK * head_dim_v + TQ * n_q * head_dim_v + 2 * TQ * n_q + TK + 16;
}

/* the 64 scores of one row and head against the tile's keys kt [dk][64];
 * slots at or past nvis get -inf */
static inline void
scores(float *sc, const float *kt, const float *q, int64_t dk, float scale, int64_t nvis)
{
    __m256 acc[8];
    /* (the unroll pragmas keep the 8 chains in registers: at -O2 GCC
     * leaves the loops rolled and the array in memory, a store and reload
     * per fused multiply-add) */
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t d = 0; d < dk; d++) {
        __m256 qd = _mm256_set1_ps(q[d]);
        const float *k = kt + d * TK;
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            acc[c] = _mm256_fmadd_ps(_mm256_loadu_ps(k + 8 * c), qd, acc[c]);
    }
    const __m256 vs = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        /* mask: 0 for visible slots, -inf otherwise (ggml_vec_add_f32) */
        __m256 vis = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nvis - 8 * c)), lane));
        __m256 m = _mm256_andnot_ps(vis, ninf);
        _mm256_storeu_ps(sc + 8 * c, _mm256_add_ps(_mm256_mul_ps(acc[c], vs), m));
    }
}

/* The largest of the 64 scores, the value the sequential `t = t > s ? t :
 * s` of ggml_vec_max_f32 leaves: a vector max gives it unless a score is
 * NaN (then the order decides, and the loop runs).  A +-0 tie can only
 * change the sign of a zero maximum, which s - M and exp do not see. */
static inline float
max64(const float *sc)
{
    __m256 m = _mm256_loadu_ps(sc), nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
    for (int c = 1; c < 8; c++) {
        __m256 v = _mm256_loadu_ps(sc + 8 * c);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, v);
    }
    if (_mm256_movemask_ps(nan)) {
        float t = -INFINITY;
        for (int j = 0; j < TK; j++)
            t = t > sc[j] ? t : sc[j];
        return t;
    }
    return hmax8(m);
}

/* ggml_vec_soft_max_f32 over the 64 scores, in place; returns the sum */
static inline double
softmax64(float *sc, float mx)
{
    const __m256 vm = _mm256_set1_ps(mx);
    double sum = 0.0;
    for (int c = 0; c < 8; c++) {
        __m256 p = avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(sc + 8 * c), vm));
        _mm256_storeu_ps(sc + 8 * c, p);
        __m128 t = _mm_add_ps(_mm256_extractf128_ps(p, 1), _mm256_castps256_ps128(p));
        t = _mm_add_ps(t, _mm_movehl_ps(t, t));
        t = _mm_add_ss(t, _mm_movehdup_ps(t));
        sum += (double)_mm_cvtss_f32(t);
    }
    return sum;
}

/* acc[0 .. dv) = fma(p_j, v_j, acc) for the tile's slots j < n in order */
static inline void
values(float *acc, const float *sc, const float *vt, int n, int64_t dv)
{
    int64_t c0 = 0;
    for (; c0 + 64 <= dv; c0 += 64) {
        __m256 a[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            a[i] = _mm256_loadu_ps(acc + c0 + 8 * i);
        for (int j = 0; j < n; j++) {
            if (sc[j] == 0.0f)
                continue;
            __m256 w = _mm256_set1_ps(sc[j]);
            const float *v = vt + (int64_t)j * dv + c0;
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(v + 8 * i), w, a[i]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            _mm256_storeu_ps(acc + c0 + 8 * i, a[i]);
    }
    for (; c0 + 8 <= dv; c0 += 8) {
        __m256 a = _mm256_loadu_ps(acc + c0);
        for (int j = 0; j < n; j++) {
            if (sc[j] == 0.0f)
                continue;
            a = _mm256_fmadd_ps(_mm256_loadu_ps(vt + (int64_t)j * dv + c0), _mm256_set1_ps(sc[j]), a);
        }
        _mm256_storeu_ps(acc + c0, a);
    }
    for (; c0 < dv; c0++) {
        float a = acc[c0];
        for (int j = 0; j < n; j++)
            if (sc[j] != 0.0f)
                a = __builtin_fmaf(sc[j], vt[(int64_t)j * dv + c0], a);
        acc[c0] = a;
    }
}

static inline void
scale_row(float *x, int64_t n, float s)
{
    int64_t i = 0;
    __m256 vs = _mm256_set1_ps(s);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++)
        x[i] *= s;
}

void
ops_attn_tiled_avx2(const struct attn_tiled_args *a, float *scratch)
{
    const int64_t nq = a->n_q, dk = a->head_dim, dv = a->head_dim_v, bs = a->block_size;
    const int64_t nr = a->n_rows;
    const int f16 = a->kv_type == 1;
    const size_t esz = f16 ? 2 : 4;
    float *kt = scratch, *vt = kt + dk * TK, *accs = vt + TK * dv;
    float *Ms = accs + TQ * nq * dv, *Ss = Ms + TQ * nq, *sc = Ss + TQ * nq;
    int64_t hi = 0, lo_min = INT64_MAX;

    for (int64_t r = 0; r < nr; r++) {
        if (a->n_kv[r] > hi)
            hi = a->n_kv[r];
        if ((a->lo ? a->lo[r] : 0) < lo_min)
            lo_min = a->lo ? a->lo[r] : 0;
    }
    memset(accs, 0, (size_t)(nr * nq * dv) * sizeof(float));
    for (int64_t i = 0; i < nr * nq; i++) {
        Ms[i] = -INFINITY;
        Ss[i] = 0.0f;
    }

    /* tiles below every row's window hold nothing visible: skipped */
    for (int64_t s0 = lo_min / TK * TK; s0 < hi; s0 += TK) {
        int n = hi - s0 < TK ? (int)(hi - s0) : TK;
        /* keys transposed [dk][64] (unused slots 0), values [n][dv], in f32 */
        if (n < TK)
            memset(kt, 0, (size_t)(dk * TK) * sizeof(float));
        for (int j = 0; j < n; j++) {
            int64_t s = s0 + j;
            size_t off = (size_t)a->table[s / bs] * a->block_stride;
            const uint8_t *krow = a->k_base + off + (size_t)(s % bs) * (size_t)dk * esz;
            const uint8_t *vrow = a->v_base + off +
                                  (size_t)(s % bs) * ops_attn_v_stride(a->kv_type, dv, a->v_stride);
            float *vd = vt + (int64_t)j * dv;
            int64_t d = 0;
            if (f16) {
                const uint16_t *k16 = (const uint16_t *)krow, *v16 = (const uint16_t *)vrow;
                for (; d + 8 <= dk; d += 8) {
                    float tmp[8];
                    _mm256_storeu_ps(tmp, avx2_load_f16(k16 + d));
                    for (int i = 0; i < 8; i++)
                        kt[(d + i) * TK + j] = tmp[i];
                }
                for (; d < dk; d++)
                    kt[d * TK + j] = _cvtsh_ss(k16[d]);
                for (d = 0; d + 8 <= dv; d += 8)
                    _mm256_storeu_ps(vd + d, avx2_load_f16(v16 + d));
                for (; d < dv; d++)
                    vd[d] = _cvtsh_ss(v16[d]);
            } else {
                const float *k32 = (const float *)krow;
                for (; d < dk; d++)
                    kt[d * TK + j] = k32[d];
                memcpy(vd, vrow, (size_t)dv * sizeof(float));
            }
        }
        for (int64_t r = 0; r < nr; r++) {
            int64_t nvis = a->n_kv[r] - s0, nlo = a->lo ? a->lo[r] - s0 : 0;
            if (nvis <= 0 || nlo >= TK)
                continue;       /* a tile with nothing visible: skipped, as ggml */
            for (int64_t h = 0; h < nq; h++) {
                int64_t ih = r * nq + h;
                float *acc = accs + ih * dv;
                scores(sc, kt, a->q + r * a->ldq + h * dk, dk, a->scale, nvis);
                for (int64_t j = 0; j < nlo; j++)
                    sc[j] = -INFINITY;  /* below the window */
                float tmax = max64(sc);
                if (tmax == -INFINITY)
                    continue;
                float mnew = fmaxf(Ms[ih], tmax);
                if (mnew > Ms[ih]) {
                    float ms = expf(Ms[ih] - mnew);
                    scale_row(acc, dv, ms);
                    Ss[ih] *= ms;
                }
                Ms[ih] = mnew;
                Ss[ih] = (float)((double)Ss[ih] + softmax64(sc, mnew));
                values(acc, sc, vt, nvis < n ? (int)nvis : n, dv);
            }
        }
    }
    for (int64_t r = 0; r < nr; r++)
        for (int64_t h = 0; h < nq; h++) {
            int64_t ih = r * nq + h;
            float inv = Ss[ih] == 0.0f ? 0.0f : 1.0f / Ss[ih];
            float *out = a->out + r * a->ldo + h * dv;
            memcpy(out, accs + ih * dv, (size_t)dv * sizeof(float));
            scale_row(out, dv, inv);
        }
}
