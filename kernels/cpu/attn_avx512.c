/*
 * attn_avx512.c - the one-row paged attention (ops_attn_fn: one query
 * token, the heads of one KV head) for CPUs with AVX-512 F/BW/VL/DQ,
 * bit-identical with cpu/attn_avx2.c's, and so with llama.cpp's CPU flash
 * attention for a single query row on an AVX2 build: every score, maximum,
 * exponential, sum and accumulator element goes through the same f32
 * operations in the same order as there (see that file's header).
 *
 * This file is compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq
 * -mavx512vnni -mfma -mf16c and is only entered through kernel_ops_avx512 after the
 * run-time CPU check in kernels/dispatch.c.
 *
 * What changes is the work the heads of a call share.  With an f16 cache
 * the step is bound by conversions between f16 and f32 (on the Zen 4 here
 * about one 8-lane conversion a cycle): widening each key and value row,
 * and the accumulator's round trip through f16 after every operation.  The
 * AVX2 kernel widens each key row once per head and each value row once
 * per pair of heads; here up to G_MAX heads (a GQA group: SmolLM2's 3,
 * Gemma 3's 4) take the scores of 8 slots at a time from one widening of
 * each key row, and the accumulator updates of those slots from one
 * widening of each value row, in 16-lane registers:
 *   scores: ggml_vec_dot_f32's four 8-lane accumulators s0..s3 as two
 *       16-lane ones, [s0 | s1] and [s2 | s3] (each lane the same chain of
 *       fused multiply-adds), added into [s0 + s2 | s1 + s3]; two slots'
 *       halves then added as [lo + hi of one | of the other], the 128-bit
 *       halves of four slots, and the two horizontal adds as in-lane
 *       swaps and adds (floating-point addition commutes bit for bit):
 *       avx2_reduce1's pairings throughout.
 *   values: the accumulators of the group's heads in CB-column blocks
 *       (4 registers a head), each value row's block widened once for all
 *       of them.
 * Shapes it does not take (key width not a multiple of 32, value width
 * not of 16, a Q8_0 cache) go to ops_attn_avx2.
 *
 * Scratch: the AVX2 kernel's (ops_attn_scratch_floats_avx2): acc
 * [n_q][dv] (f32: f16 accumulators are held as their exact f32 values) |
 * M [n_q] | S [n_q] | the query [n_q][dk] (rounded to f16 for an f16 cache)
 * | a split step's partials and state.
 */
#include <immintrin.h>
#include <stdint.h>

#include "ops.h"
#include "cpu/attn_avx2.h"
#include "cpu/attn_avx512.h"
#include "cpu/attn_walk.h"

#define G_MAX 4                 /* heads sharing each row's widening */
#define AC 64                   /* visible slots per chunk a group walks */
#define CB 64                   /* accumulator columns per pass over 8 slots */

/* 16 elements from i of a row of f32 or (f16 = 1) f16 values, in f32 */
static inline __attribute__((always_inline)) __m512
load16(const void *p, int64_t i, int f16)
{
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)))
               : _mm512_loadu_ps((const float *)p + i);
}

/* v rounded to f16 and back (ggml's f16 accumulator) */
static inline __attribute__((always_inline)) __m512
round16(__m512 v)
{
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* The scaled scores sc[h][j] of slots j < m (m <= 8; key rows kr[j]) for
 * heads h < g (queries q + h * dk), dk a multiple of 32, each with
 * dot_f32's bits (cpu/attn_avx2.c: four accumulators of 8 lanes over
 * 32-element steps, (a0 + a2) + (a1 + a3), low + high half, two horizontal
 * adds), times scale. */
static inline __attribute__((always_inline)) void
scores(const uint8_t *const *kr, int m, int64_t dk, const float *q, int g, float scale, int f16,
       float (*sc)[8])
{
    __m512 C[G_MAX][4];         /* [slot 2p's 8-lane vector | slot 2p + 1's] */
    const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);

    for (int p = 0; p < 4; p++) {
        __m512 W[G_MAX][2];     /* [s0 + s2 | s1 + s3] per head, of slots 2p and 2p + 1 */
#pragma GCC unroll 2
        for (int t = 0; t < 2; t++) {
            int j = 2 * p + t;
            const void *k = kr[j < m ? j : 0];
            __m512 z01[G_MAX], z23[G_MAX];
#pragma GCC unroll 4
            for (int h = 0; h < G_MAX; h++)
                z01[h] = z23[h] = _mm512_setzero_ps();
            for (int64_t i = 0; i < dk; i += 32) {
                __m512 k0 = load16(k, i, f16), k1 = load16(k, i + 16, f16);
#pragma GCC unroll 4
                for (int h = 0; h < G_MAX; h++)
                    if (h < g) {
                        z01[h] = _mm512_fmadd_ps(k0, _mm512_loadu_ps(q + h * dk + i), z01[h]);
                        z23[h] = _mm512_fmadd_ps(k1, _mm512_loadu_ps(q + h * dk + i + 16), z23[h]);
                    }
            }
#pragma GCC unroll 4
            for (int h = 0; h < G_MAX; h++)
                W[h][t] = _mm512_add_ps(z01[h], z23[h]);
        }
#pragma GCC unroll 4
        for (int h = 0; h < G_MAX; h++)
            if (h < g)
                C[h][p] = _mm512_add_ps(_mm512_shuffle_f32x4(W[h][0], W[h][1], _MM_SHUFFLE(1, 0, 1, 0)),
                                        _mm512_shuffle_f32x4(W[h][0], W[h][1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
#pragma GCC unroll 4
    for (int h = 0; h < G_MAX; h++) {
        if (h >= g)
            break;
        __m512 Z[2];
#pragma GCC unroll 2
        for (int r = 0; r < 2; r++) {
            /* [t of slot 4r | 4r + 1 | 4r + 2 | 4r + 3], t = low + high half */
            __m512 T = _mm512_add_ps(_mm512_shuffle_f32x4(C[h][2 * r], C[h][2 * r + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(C[h][2 * r], C[h][2 * r + 1], _MM_SHUFFLE(3, 1, 3, 1)));
            /* hadd(t, t) twice: lane 0 of each quarter (t0 + t1) + (t2 + t3) */
            __m512 X = _mm512_add_ps(T, _mm512_permute_ps(T, _MM_SHUFFLE(2, 3, 0, 1)));
            Z[r] = _mm512_add_ps(X, _mm512_permute_ps(X, _MM_SHUFFLE(1, 0, 3, 2)));
        }
        __m256 s = _mm512_castps512_ps256(_mm512_permutex2var_ps(Z[0], pick, Z[1]));
        _mm256_storeu_ps(sc[h], _mm256_mul_ps(s, _mm256_set1_ps(scale)));
    }
}

/* acc[h][i] and v[i] are read only for h < g, i < nb, each written first
 * (GCC cannot see it through the unrolled loops) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* The accumulator columns c0 .. c0 + 16 nb of heads h < g (accm + h * dv)
 * over slots j < m (value rows vr[j]): for each slot in order, where it
 * set a new maximum acc = acc * ms (ms = e[h][j]), then acc = fma(v, vs,
 * acc) (vs = e[h][j], or 1 after a new maximum), each rounded through f16
 * for an f16 cache. */
static inline __attribute__((always_inline)) void
values(const uint8_t *const *vr, int m, int64_t c0, int nb, int g, int64_t dv, float *accm,
       float (*e)[8], int (*newmax)[8], int f16)
{
    __m512 acc[G_MAX][CB / 16];

#pragma GCC unroll 4
    for (int h = 0; h < G_MAX; h++)
        if (h < g)
#pragma GCC unroll 4
            for (int i = 0; i < nb; i++)
                acc[h][i] = _mm512_loadu_ps(accm + h * dv + c0 + 16 * i);
    for (int j = 0; j < m; j++) {
        __m512 v[CB / 16];
#pragma GCC unroll 4
        for (int i = 0; i < nb; i++)
            v[i] = load16(vr[j], c0 + 16 * i, f16);
#pragma GCC unroll 4
        for (int h = 0; h < G_MAX; h++) {
            if (h >= g)
                break;
            float vs = e[h][j];
            if (newmax[h][j]) {
                __m512 vm = _mm512_set1_ps(e[h][j]);
#pragma GCC unroll 4
                for (int i = 0; i < nb; i++)
                    acc[h][i] = f16 ? round16(_mm512_mul_ps(acc[h][i], vm)) : _mm512_mul_ps(acc[h][i], vm);
                vs = 1.0f;
            }
            __m512 vw = _mm512_set1_ps(vs);
#pragma GCC unroll 4
            for (int i = 0; i < nb; i++) {
                __m512 t = _mm512_fmadd_ps(v[i], vw, acc[h][i]);
                acc[h][i] = f16 ? round16(t) : t;
            }
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < G_MAX; h++)
        if (h < g)
#pragma GCC unroll 4
            for (int i = 0; i < nb; i++)
                _mm512_storeu_ps(accm + h * dv + c0 + 16 * i, acc[h][i]);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* heads h0 .. h0 + g - 1 over n visible slots (rows krows[], vrows[]),
 * their state (acc, M, S) read from and left in memory */
static inline __attribute__((always_inline)) void
group_chunk(const uint8_t *const *krows, const uint8_t *const *vrows, int n, int64_t dk,
            int64_t dv, float scale, const float *q, float *accm, float *M, float *S, int g, int f16)
{
    float sc[G_MAX][8] __attribute__((aligned(64)));
    float arg[G_MAX][8] __attribute__((aligned(64))), e[G_MAX][8] __attribute__((aligned(64)));
    int newmax[G_MAX][8];

    for (int j0 = 0; j0 < n; j0 += 8) {
        int m = n - j0 < 8 ? n - j0 : 8;
        scores(krows + j0, m, dk, q, g, scale, f16, sc);
        /* the running maximum slot by slot, which fixes each slot's
         * exponent: mold - M at a new maximum, else s - M */
        for (int h = 0; h < g; h++)
            for (int j = 0; j < 8; j++) {
                if (j >= m) {
                    arg[h][j] = 0.0f;
                    newmax[h][j] = 0;
                } else if (sc[h][j] > M[h]) {
                    arg[h][j] = M[h] - sc[h][j];
                    M[h] = sc[h][j];
                    newmax[h][j] = 1;
                } else {
                    arg[h][j] = sc[h][j] - M[h];
                    newmax[h][j] = 0;
                }
            }
        ops_expf_libm_avx2(&e[0][0], &arg[0][0], 8 * (int64_t)g);
        /* one fused multiply-add per slot, as ggml's S = S*ms + vs compiles */
        for (int h = 0; h < g; h++)
            for (int j = 0; j < m; j++) {
                float ms = newmax[h][j] ? e[h][j] : 1.0f, vs = newmax[h][j] ? 1.0f : e[h][j];
                S[h] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(S[h]), _mm_set_ss(ms), _mm_set_ss(vs)));
            }
        for (int64_t c0 = 0; c0 < dv; c0 += CB) {
            if (dv - c0 >= CB)
                values(vrows + j0, m, c0, CB / 16, g, dv, accm, e, newmax, f16);
            else
                values(vrows + j0, m, c0, (int)((dv - c0) / 16), g, dv, accm, e, newmax, f16);
        }
    }
}

void
ops_attn_avx512(const struct attn_args *a, float *scratch)
{
    const int64_t nq = a->n_q, dk = a->head_dim, dv = a->head_dim_v;

    if ((a->kv_type != 0 && a->kv_type != 1) || dk % 32 != 0 || dv % 16 != 0) {
        ops_attn_avx2(a, scratch);
        return;
    }
    if (ops_attn_split(a, scratch,
                       ops_attn_scratch_floats_avx2(nq, a->block_size, dk, dv) - ATTN_SPLIT_FLOATS(nq, dv),
                       ops_attn_avx512))
        return;
    const int f16 = a->kv_type == 1;
    const size_t esz = f16 ? 2 : 4;
    float *accs, *Ms, *Ss, *qf;
    const uint8_t *krows[AC], *vrows[AC];

    attn_state_begin(a, scratch, f16, &accs, &Ms, &Ss, &qf);

    for (int64_t s0 = a->s0 > a->lo ? a->s0 : a->lo; s0 < a->n_kv;) {
        int n = attn_gather(a, &s0, esz, AC, krows, vrows);
        /* the heads in groups of at most G_MAX, as even as they go */
        int64_t n_grp = (nq + G_MAX - 1) / G_MAX;
        for (int64_t k = 0, h = 0; k < n_grp; k++) {
            int g = (int)((nq - h) / (n_grp - k));
#define GC_(G, F) group_chunk(krows, vrows, n, dk, dv, a->scale, qf + h * dk, accs + h * dv, \
                              Ms + h, Ss + h, G, F)
            if (f16)
                g == 4 ? GC_(4, 1) : g == 3 ? GC_(3, 1) : g == 2 ? GC_(2, 1) : GC_(1, 1);
            else
                g == 4 ? GC_(4, 0) : g == 3 ? GC_(3, 0) : g == 2 ? GC_(2, 0) : GC_(1, 0);
#undef GC_
            h += g;
        }
    }
    ops_attn_emit(a, accs, Ms, Ss);
}
