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
 * Fast path (dv a multiple of 32, up to 256; F16 or F32 cache): one head at
 * a time with its accumulator in registers, 8 visible slots at a time with
 * one vector evaluation of libm's expf (ops_expf_libm_avx2, bit-identical);
 * the sum S is updated with one fused multiply-add, as ggml's compiled
 * S = S*ms + vs.  Keys and values are read where they lie (no f32 copy: the
 * keys are widened per head, the values per head pair), a run of one
 * block's consecutive visible slots at a time, the rows KV_PF slots ahead
 * prefetched into L2.  Other shapes take the slot-major loop
 * (attn_slotwise).
 *
 * A long step (ops.h: n_kv >= ATTN_SPLIT_MIN) is walked in chunks of
 * ATTN_SPLIT_KV slots whose states ops_attn_split combines; a call for one
 * chunk (part set) walks slots s0 .. n_kv-1 and leaves its state in part.
 *
 * Scratch per call: acc [n_q][dv] (f32, or f16 in its first half) | M [n_q] |
 * S [n_q] | the f16 query [n_q][dk] (the fast path uses only the query of
 * one head) | a split step's partials and state (ATTN_SPLIT_FLOATS).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "simd_avx2.h"
#include "cpu/attn_avx2.h"
#include "cpu/attn_walk.h"

#define AC 64                   /* visible slots per chunk the heads walk in turn */

/* the floats the walks use (a split step's partials go after them) */
static int64_t
attn_base(int64_t n_q, int64_t block_size, int64_t head_dim, int64_t head_dim_v)
{
    /* acc [n_q][dv] | M [n_q] | S [n_q] | f16 query [n_q][dk] (half a float each);
     * other KV types go to the reference, which must find its own room */
    int64_t own = n_q * head_dim_v + 2 * n_q + (n_q * head_dim + 1) / 2 + 8;
    /* the fast path: acc [n_q][dv] | M | S | f32 query [n_q][dk] */
    int64_t fast = n_q * head_dim_v + 2 * n_q + n_q * head_dim + 16;
    if (fast > own)
        own = fast;
    int64_t ref = ops_attn_scratch_floats_ref(n_q, block_size, head_dim, head_dim_v);
    return own > ref ? own : ref;
}

int64_t
ops_attn_scratch_floats_avx2(int64_t n_q, int64_t block_size, int64_t head_dim,
                             int64_t head_dim_v)
{
    return attn_base(n_q, block_size, head_dim, head_dim_v) + ATTN_SPLIT_FLOATS(n_q, head_dim_v);
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

/* 8 elements from i of a row of f32 or (f16 = 1) f16 values, in f32 */
static inline __attribute__((always_inline)) __m256
load_row8(const void *p, int64_t i, int f16)
{
    return f16 ? avx2_load_f16((const uint16_t *)p + i) : _mm256_loadu_ps((const float *)p + i);
}

/* ggml_vec_dot_f32's four accumulators over the first np (a multiple of
 * 32) elements, combined as its reduction begins: (a0 + a2) + (a1 + a3);
 * keys in f32 or (f16 = 1) f16, widened exactly */
static inline __attribute__((always_inline)) __m256
dot_f32_lanes(const void *k, const float *q, int64_t np, int f16)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;

    for (int64_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(load_row8(k, i, f16), _mm256_loadu_ps(q + i), s0);
        s1 = _mm256_fmadd_ps(load_row8(k, i + 8, f16), _mm256_loadu_ps(q + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_row8(k, i + 16, f16), _mm256_loadu_ps(q + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_row8(k, i + 24, f16), _mm256_loadu_ps(q + i + 24), s3);
    }
    return _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
}

/* q.k over n elements as ggml_vec_dot_f32, the keys f32 or (f16 = 1) f16
 * widened exactly (an f16 cache's q.k: ggml_vec_dot_f16 on exact f32
 * copies of its f16 operands is this sequence of operations) */
static inline float
dot_f32(const void *k, const float *q, int64_t n, int f16)
{
    int64_t np = n & ~(int64_t)31;
    double sum = np ? (double)avx2_reduce1(dot_f32_lanes(k, q, np, f16)) : 0.0;
    for (int64_t i = np; i < n; i++) {
        float ki = f16 ? _cvtsh_ss(((const uint16_t *)k)[i]) : ((const float *)k)[i];
        sum += (double)(ki * q[i]);
    }
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

/* Slot-major fallback for head sizes the fast path does not take. */
void
ops_attn_slotwise_avx2(const struct attn_args *a, float *scratch)
{
    const int64_t nq = a->n_q, dk = a->head_dim, dv = a->head_dim_v;

    if (a->kv_type != 0 && a->kv_type != 1) {
        ops_attn_ref(a, scratch);
        return;
    }
    if (ops_attn_split(a, scratch, attn_base(nq, a->block_size, dk, dv), ops_attn_slotwise_avx2))
        return;
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

    for (int64_t s = a->s0 > a->lo ? a->s0 : a->lo; s < a->n_kv; s++) {
        if (a->vis && !a->vis[s])
            continue;
        const uint8_t *krow, *vrow;
        slot_rows(a, s, esz, &krow, &vrow);

        for (int64_t h = 0; h < nq; h++) {
            float sc = f16 ? dot_f16((const uint16_t *)krow, q16 + h * dk, dk)
                           : dot_f32(krow, a->q + h * dk, dk, 0);
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
            S[h] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(S[h]), _mm_set_ss(ms), _mm_set_ss(vs)));
        }
    }

    /* the f16 accumulators widened in place, from the last (each float
     * overwrites only halves already read; through memcpy, as the bytes
     * change type) */
    if (f16)
        for (int64_t i = nq * dv - 1; i >= 0; i--) {
            uint16_t h;
            memcpy(&h, (const char *)scratch + 2 * i, 2);
            float f = _cvtsh_ss(h);
            memcpy((char *)scratch + 4 * i, &f, 4);
        }
    ops_attn_emit(a, acc, M, S);
}

/* ---- libm's expf, 4 and 8 lanes at a time ----
 *
 * ggml's flash attention calls the C library's expf once per slot; to stay
 * bit-identical the vector version below performs exactly the double
 * precision operations of glibc's expf (the x86-64 FMA variant the dynamic
 * loader selects on this CPU): with N = 32,
 *   kd = fma(N/ln2, x, 0x1.8p52); ki = bits(kd); kd -= 0x1.8p52;
 *   r = fma(N/ln2, x, -kd); s = 2^(ki/N) from the table below;
 *   y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) * s, rounded to float.
 * Lanes outside its fast range (|x| >= 2^7 in exponent terms, infinities,
 * NaN) are recomputed with libm's expf itself. */
static const uint64_t exp2_32[32] = {
    /* bits(2^(i/32)) - (i << 47): the nearest double to 2^(i/32), with
     * the exponent of the index folded out (so that adding ki << 47 puts
     * it back) */
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

static inline __m256d
dbits(uint64_t u)
{
    return _mm256_castsi256_pd(_mm256_set1_epi64x((long long)u));
}

static inline __m128
expf4_fast(__m128 x)
{
    const __m256d invln2n = dbits(0x40471547652b82feull), shift = dbits(0x4338000000000000ull);
    const __m256d c0 = dbits(0x3ebc6af84b912394ull), c1 = dbits(0x3f2ebfce50fac4f3ull);
    const __m256d c2 = dbits(0x3f962e42ff0c52d6ull), one = _mm256_set1_pd(1.0);
    __m256d xd = _mm256_cvtps_pd(x);
    __m256d kd = _mm256_fmadd_pd(invln2n, xd, shift);
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    __m256d r = _mm256_fmsub_pd(invln2n, xd, kd);
    __m256i t = _mm256_i64gather_epi64((const long long *)(const void *)exp2_32,
                                       _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    __m256d z = _mm256_fmadd_pd(c0, r, c1);
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(c2, r, one);
    y = _mm256_fmadd_pd(z, r2, y);
    y = _mm256_mul_pd(y, _mm256_castsi256_pd(t));
    return _mm256_cvtpd_ps(y);
}

void
ops_expf_libm_avx2(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m128 v = _mm_loadu_ps(x + i);
        __m128i top = _mm_and_si128(_mm_srli_epi32(_mm_castps_si128(v), 20), _mm_set1_epi32(0x7ff));
        int slow = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(top, _mm_set1_epi32(0x42a))));
        _mm_storeu_ps(y + i, expf4_fast(v));
        if (slow)
            for (int j = 0; j < 4; j++)
                if (slow >> j & 1)
                    y[i + j] = expf(x[i + j]);
    }
    for (; i < n; i++)
        y[i] = expf(x[i]);
}

/* ---- the head-major fast path ----
 *
 * Each query head is processed on its own (heads are independent, so the
 * order between them does not matter), its output accumulator held in
 * registers as f32 values (rounded through f16 after every operation for an
 * f16 cache, exactly as ggml's f16 accumulator).  Visible slots are taken 8
 * at a time: their scores first, then the running maximum slot by slot,
 * which fixes each slot's exp argument (mold - M for a new maximum, s - M
 * otherwise), then one vector exp for the 8 arguments, then the
 * accumulator and sum updates in slot order. */
#define AV_MAX 32               /* dv / 8 at most (dv <= 256) */

static inline __attribute__((always_inline)) __m256
round_f16(__m256 v)
{
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* The scaled scores of 8 slots (key rows kr[0..7] of dk f16 or f32
 * elements, the first m real), dk a multiple of 32: dot_f32's accumulators
 * per slot, then its reduction ((a0 + a2) + (a1 + a3), low + high half,
 * two pairwise adds) done for the 8 slots together with the same pairings,
 * so each score has dot_f32's bits. */
static inline __attribute__((always_inline)) void
scores8(const uint8_t *const *kr, int f16, int m, int64_t dk, const float *qh, float scale, float *sc)
{
    __m256 S[8];

#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const void *k = kr[j < m ? j : 0];
        S[j] = dot_f32_lanes(k, qh, dk, f16);
    }
    /* U[j/2] = [lo + hi of slot j | lo + hi of slot j + 1] */
    __m256 U[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        U[j] = _mm256_add_ps(_mm256_permute2f128_ps(S[2 * j], S[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(S[2 * j], S[2 * j + 1], 0x31));
    /* pairs, then pairs of pairs: slots in the order 0 2 4 6 | 1 3 5 7 */
    __m256 g = _mm256_hadd_ps(_mm256_hadd_ps(U[0], U[1]), _mm256_hadd_ps(U[2], U[3]));
    g = _mm256_permutevar8x32_ps(g, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_store_ps(sc, _mm256_mul_ps(g, _mm256_set1_ps(scale)));
}

/* nh (1 or 2) heads over a chunk of n visible slots whose key and value
 * rows (f16 or f32, as the cache) are at krows[j], vrows[j]; each head's
 * state (accumulator, M, S) is loaded from and stored back to memory around
 * the chunk.  Two heads run side by side so that their accumulator chains
 * (a fused multiply-add and, for f16, a round trip through f16 per slot)
 * overlap; each head's operations are those it would do alone. */
/* acc[h][i] is read only for i < nv, each written first (GCC cannot see it
 * through the unrolled loops) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
static inline __attribute__((always_inline)) void
attn_chunk(const uint8_t *const *krows, const uint8_t *const *vrows, int n, int64_t dk, float scale,
           const float *const *qh, float *const *accm, float *Mp, float *Sp, int f16, int nv, int nh)
{
    __m256 acc[2][AV_MAX];
    float M[2], S[2];
    float sc[2][8] __attribute__((aligned(32))), arg[16] __attribute__((aligned(32)));
    float e[16] __attribute__((aligned(32)));
    int newmax[2][8];

#pragma GCC unroll 2
    for (int h = 0; h < nh; h++) {
        M[h] = Mp[h];
        S[h] = Sp[h];
#pragma GCC unroll 32
        for (int i = 0; i < nv; i++)
            acc[h][i] = _mm256_loadu_ps(accm[h] + 8 * i);
    }
    for (int j0 = 0; j0 < n; j0 += 8) {
        int m = n - j0 < 8 ? n - j0 : 8;
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++) {
            if (dk % 32 == 0)
                scores8(krows + j0, f16, m, dk, qh[h], scale, sc[h]);
            else
                for (int j = 0; j < m; j++)
                    sc[h][j] = dot_f32(krows[j0 + j], qh[h], dk, f16) * scale;
            for (int j = 0; j < m; j++) {
                if (sc[h][j] > M[h]) {
                    arg[8 * h + j] = M[h] - sc[h][j];
                    M[h] = sc[h][j];
                    newmax[h][j] = 1;
                } else {
                    arg[8 * h + j] = sc[h][j] - M[h];
                    newmax[h][j] = 0;
                }
            }
        }
        if (nh == 2 && m == 8)
            ops_expf_libm_avx2(e, arg, 16);
        else
            for (int h = 0; h < nh; h++)
                ops_expf_libm_avx2(e + 8 * h, arg + 8 * h, m);
        for (int j = 0; j < m; j++) {
            const uint8_t *v = vrows[j0 + j];
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++) {
                float ms = 1.0f, vs = 1.0f;
                if (newmax[h][j]) {
                    ms = e[8 * h + j];
                    __m256 vm = _mm256_set1_ps(ms);
#pragma GCC unroll 32
                    for (int i = 0; i < nv; i++)
                        acc[h][i] = f16 ? round_f16(_mm256_mul_ps(acc[h][i], vm)) : _mm256_mul_ps(acc[h][i], vm);
                } else {
                    vs = e[8 * h + j];
                }
                __m256 vw = _mm256_set1_ps(vs);
#pragma GCC unroll 32
                for (int i = 0; i < nv; i++) {
                    __m256 t = _mm256_fmadd_ps(load_row8(v, 8 * i, f16), vw, acc[h][i]);
                    acc[h][i] = f16 ? round_f16(t) : t;
                }
                /* one fused multiply-add, as ggml's S = S*ms + vs compiles */
                S[h] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(S[h]), _mm_set_ss(ms), _mm_set_ss(vs)));
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < nh; h++) {
#pragma GCC unroll 32
        for (int i = 0; i < nv; i++)
            _mm256_storeu_ps(accm[h] + 8 * i, acc[h][i]);
        Mp[h] = M[h];
        Sp[h] = S[h];
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void
ops_attn_avx2(const struct attn_args *a, float *scratch)
{
    const int64_t nq = a->n_q, dk = a->head_dim, dv = a->head_dim_v;

    if ((a->kv_type != 0 && a->kv_type != 1) || dv % 32 != 0 || dv / 8 > AV_MAX) {
        ops_attn_slotwise_avx2(a, scratch);
        return;
    }
    if (ops_attn_split(a, scratch, attn_base(nq, a->block_size, dk, dv), ops_attn_avx2))
        return;
    const int f16 = a->kv_type == 1;
    const size_t esz = f16 ? 2 : 4;
    const int nv = (int)(dv / 8);
    float *accs, *Ms, *Ss, *qf;
    const uint8_t *krows[AC], *vrows[AC];

    attn_state_begin(a, scratch, f16, &accs, &Ms, &Ss, &qf);

    for (int64_t s0 = a->s0 > a->lo ? a->s0 : a->lo; s0 < a->n_kv;) {
        /* the rows of the next AC visible slots (attn_walk.h) */
        int n = attn_gather(a, &s0, esz, AC, krows, vrows);
        for (int64_t h = 0; h < nq;) {
            int nh = nq - h >= 2 ? 2 : 1;
            float *accm[2] = { accs + h * dv, accs + (h + nh - 1) * dv };
            const float *qh[2] = { qf + h * dk, qf + (h + nh - 1) * dk };
#define AC_(f, v, k) attn_chunk(krows, vrows, n, dk, a->scale, qh, accm, &Ms[h], &Ss[h], f, v, k)
            if (f16 && nv == 8)
                nh == 2 ? AC_(1, 8, 2) : AC_(1, 8, 1);
            else if (f16)
                nh == 2 ? AC_(1, nv, 2) : AC_(1, nv, 1);
            else if (nv == 8)
                nh == 2 ? AC_(0, 8, 2) : AC_(0, 8, 1);
            else
                nh == 2 ? AC_(0, nv, 2) : AC_(0, nv, 1);
#undef AC_
            h += nh;
        }
    }
    ops_attn_emit(a, accs, Ms, Ss);
}
