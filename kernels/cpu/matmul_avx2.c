/*
 * matmul_avx2.c - AVX2/FMA/F16C matmul kernels, bit-identical with the
 * arithmetic of llama.cpp's AVX2 CPU backend (see cpu/matmul_avx2.h for which
 * ggml path each weight type mirrors).
 *
 * This file is compiled with -mavx2 -mfma -mf16c and is only entered through
 * kernel_ops_avx2 after the run-time CPU check in kernels/dispatch.c.
 *
 * What makes two implementations agree bit for bit is the order of the f32
 * operations, not how the integers are obtained: integer sums are exact, so
 * any instruction sequence that yields the same int32 value per f32 lane
 * gives the same result.  The kernels below therefore only reproduce ggml's
 * partition of the integer products into lanes, its scale products, its
 * fused multiply-adds and its horizontal-sum trees, for every token the
 * single-token ones (batch invariance: a token's result never depends on the
 * batch or the row range).  Paths:
 *   decode (1 token): legacy types 4 rows per pass with a spread prefetch of
 *       the rows after next (Q4_1 in 128-bit halves on cores that split
 *       256-bit operations), Q4_0/IQ4_NL and Q4_K 8 rows in the lanes of
 *       their gemv chains, the other k-quants row by row;
 *   2..7 tokens of a quantized type (a verify pass, a batch of a few
 *       sequences): the small batch kernels, a few rows (one for the
 *       Q8_K-activation types but Q4_K) by up to 4 tokens in registers, each
 *       weight block unpacked once per token group; 2..3 tokens of
 *       F16/BF16/F32: each token's row dot products;
 *   8+ tokens (4+ for F16/BF16/F32): row tiles unpacked once into an L1-sized buffer (int8 codes,
 *       f32 scales; struct ksb per k-quant super-block; f32 rows for
 *       F16/BF16) and dotted with groups of 8 tokens; Q4_0/IQ4_NL put the 8
 *       tokens in the lanes of their gemv chain.
 *
 * Activations are converted by mm_prepare into the reference's work layout
 * (cpu/matmul_ref.c): per token, f32 block scales followed by int8 codes
 * (Q8_0 / Q8_1 / Q8_K), or f32 values rounded through f16 / bf16.
 */
#include <assert.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "qblock.h"
#include "qconv.h"
#include "cpu/matmul_avx2.h"

#include "cpu/mm_layout.h"
#include "cpu/simd_avx2.h"

/* lane i of v set to the 16-bit h.  GCC unrolls the loops this is used in,
 * making i a constant for _mm_insert_epi16; clang (the fuzz build) wants a
 * constant in the source, so it goes through memory: the same bits. */
#if defined(__clang__)
static inline __m128i
insert16(__m128i v, uint16_t h, int i)
{
    uint16_t t[8];
    _mm_storeu_si128((__m128i *)(void *)t, v);
    t[i] = h;
    return _mm_loadu_si128((const __m128i *)(const void *)t);
}
#define INSERT16(v, h, i) insert16((v), (h), (i))
#else
#define INSERT16(v, h, i) _mm_insert_epi16((v), (h), (i))
#endif

/* 1 on cores that execute 256-bit operations as two 128-bit halves (AMD
 * family 17h before Zen 2: models below 0x30), where 128-bit code is
 * cheaper for some unpacking; set with the f16 table. */
static int split_256;

static inline int
cpu_splits_256(void)
{
    return split_256;
}

/* The same conversion by table (one load instead of an insert and a
 * conversion, which matters in the decode loops on cores where F16C is
 * slow); filled once by mm_prepare (pthread_once), which every matmul calls
 * before its row kernels. */
static float f16_tab[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

static void
f16_tab_fill(void)
{
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
    if (b == 0x68747541u) {                 /* "AuthenticAMD" */
        __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
        unsigned fam = ((a >> 8) & 15) + ((a >> 20) & 255), model = ((a >> 4) & 15) | ((a >> 12) & 0xf0);
        split_256 = fam == 0x17 && model < 0x30;
    }
    for (uint32_t i = 0; i < 65536; i += 8) {
        __m128i h = _mm_add_epi16(_mm_set1_epi16((short)i), _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_storeu_ps(f16_tab + i, _mm256_cvtph_ps(h));
    }
}

int
ops_mm_avx2_split256(int on)
{
    pthread_once(&f16_once, f16_tab_fill);
    int was = split_256;
    split_256 = on != 0;
    return was;
}

/* tokens dotted per unpacked weight block, and rows per cache tile */
#define NT 4
#define ROW_TILE 16

size_t
ops_mm_work_size_avx2(uint32_t wtype, int64_t n_tok, int64_t cols)
{
    return (size_t)n_tok * act_row_bytes(act_type(wtype), cols);
}

/* ---- activation conversion ---- */

static inline float
fp16_round(float v)
{
    return _cvtsh_ss(_cvtss_sh(v, 0));
}

/* 8 * the sum of a Q8_0 activation block's 32 codes: the correction that
 * turns Q4_0's unsigned codes (0..15) into q - 8 in an exact integer sum */
static inline int
q4_0_ysum8(const int8_t *q)
{
    __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)(const void *)q));
    return 8 * hsum_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
}

/* Q8_0 / Q8_1 blocks as ggml's x86 quantize_row_q8_0/_1: amax over the
 * block, d = amax / 127 (kept as its fp16 value), codes =
 * round-half-even(x * (127 / amax)), s = fp16(d * sum of codes). */
static void
quantize_q8_01_avx2(const float *x, int8_t *q, float *dd, float *ss, int64_t n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++, x += 32, q += 32) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        float amax = hmax8(m);
        float d = amax / 127.0f;
        __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        int sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)q, p);
        dd[b] = fp16_round(d);
        ss[b] = fp16_round(d * (float)sum);
    }
}

/* Q8_K blocks as ggml's quantize_row_q8_K_ref (which x86 builds use):
 * max = the first value of largest magnitude (NaN ignored), iscale =
 * -127 / max, codes = nearest_int(iscale * x) by the 1.5 * 2^23 addition
 * (the product rounded first: no fused multiply-add), clamped above at 127
 * and truncated to int8, 16-element sums, d = 1 / iscale. */
static void
quantize_q8_k_avx2(const float *x, int8_t *q, float *dd, int16_t *bsums, int64_t n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    /* byte 0 of each 32-bit lane to the low 4 bytes of each 128-bit half */
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, -1, -1, -1);

    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K, q += QK_K, bsums += 16) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8)
            m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);
        float amax = hmax8(m);
        if (amax == 0.0f) {
            memset(q, 0, QK_K);
            memset(bsums, 0, 16 * sizeof(int16_t));
            dd[b] = 0.0f;
            continue;
        }
        float max = 0.0f;
        __m256 va = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)),
                                                       va, _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        float iscale = -127.0f / max;
        __m256 vs = _mm256_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i c[4];
            for (int k = 0; k < 4; k++) {
                __m256 p = _mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * k));
                __asm__("" : "+x"(p));  /* keep the product rounded on its own */
                __m256i i = _mm256_castps_si256(_mm256_add_ps(p, magic));
                i = _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)),
                                     _mm256_set1_epi32(0x00400000));
                c[k] = _mm256_min_epi32(i, _mm256_set1_epi32(127));
            }
            /* truncate to bytes: lane order 0..7 of c[0], then c[1], ... */
            for (int k = 0; k < 4; k++) {
                __m256i t = _mm256_shuffle_epi8(c[k], pick);
                uint32_t lo = (uint32_t)_mm256_extract_epi32(t, 0), hi = (uint32_t)_mm256_extract_epi32(t, 4);
                memcpy(q + j + 8 * k, &lo, 4);
                memcpy(q + j + 8 * k + 4, &hi, 4);
            }
        }
        for (int s16 = 0; s16 < 16; s16++) {
            __m128i v = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)(q + 16 * s16)));
            __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)(q + 16 * s16 + 8)));
            __m128i t = _mm_madd_epi16(_mm_add_epi16(v, w), _mm_set1_epi16(1));
            t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
            bsums[s16] = (int16_t)_mm_cvtsi128_si32(t);
        }
        dd[b] = 1.0f / iscale;
    }
}

void
ops_mm_prepare_avx2(void *work, uint32_t wtype, const float *x, int64_t ldx, int64_t n_tok,
                    int64_t cols)
{
    enum act a = act_type(wtype);
    size_t rb = act_row_bytes(a, cols);

    pthread_once(&f16_once, f16_tab_fill);
    if (a == ACT_Q8_0 || a == ACT_Q8_1) {
        for (int64_t t = 0; t < n_tok; t++) {
            struct act_row r;
            act_row_at(&r, a, (uint8_t *)work + (size_t)t * rb, cols);
            quantize_q8_01_avx2(x + t * ldx, (int8_t *)r.q, (float *)r.d, (float *)r.s, cols);
        }
    } else if (a == ACT_F16) {
        for (int64_t t = 0; t < n_tok; t++) {
            const float *xt = x + t * ldx;
            float *yt = (float *)(void *)((uint8_t *)work + (size_t)t * rb);
            int64_t i = 0;
            for (; i + 8 <= cols; i += 8)
                _mm256_storeu_ps(yt + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(xt + i), 0)));
            for (; i < cols; i++)
                yt[i] = fp16_round(xt[i]);
        }
    } else if (a == ACT_Q8_K) {
        for (int64_t t = 0; t < n_tok; t++) {
            struct act_row r;
            act_row_at(&r, a, (uint8_t *)work + (size_t)t * rb, cols);
            quantize_q8_k_avx2(x + t * ldx, (int8_t *)r.q, (float *)r.d, (int16_t *)r.bsums, cols);
        }
    } else {
        /* BF16 */
        ops_mm_prepare_ref(work, wtype, x, ldx, n_tok, cols);
    }
}

/* ---- shared pieces ---- */

/* int32 lane k = sum of products of bytes 4k..4k+3: signed x signed */
static inline __m256i
lanes_ss(__m256i qx, __m256i qy)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* unsigned x signed */
static inline __m256i
lanes_us(__m256i qx, __m256i qy)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(qx, qy), _mm256_set1_epi16(1));
}

static inline float
h2f_tab(uint16_t h)
{
    return f16_tab[h];
}


/* ---- legacy 32-element blocks ---- */

/* Unpacked block: 32 codes in element order, scale d and (Q4_1/Q5_1) min m. */
static inline __attribute__((always_inline)) __m256i
legacy_block(const uint8_t *row, uint32_t type, int64_t b, float *d, float *m)
{
    switch (type) {
    case T_Q4_0: {
        const struct block_q4_0 *x = (const struct block_q4_0 *)(const void *)row + b;
        *d = h2f_tab(x->d);
        return _mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8));
    }
    case T_Q4_1: {
        const struct block_q4_1 *x = (const struct block_q4_1 *)(const void *)row + b;
        *d = h2f_tab(x->d);
        *m = h2f_tab(x->m);
        return nibbles32(x->qs);
    }
    case T_Q5_0: {
        const struct block_q5_0 *x = (const struct block_q5_0 *)(const void *)row + b;
        *d = h2f_tab(x->d);
        __m256i hi = _mm256_andnot_si256(bits32(x->qh), _mm256_set1_epi8((char)0xf0));
        return _mm256_or_si256(nibbles32(x->qs), hi);
    }
    case T_Q5_1: {
        const struct block_q5_1 *x = (const struct block_q5_1 *)(const void *)row + b;
        *d = h2f_tab(x->d);
        *m = h2f_tab(x->m);
        __m256i hi = _mm256_and_si256(bits32(x->qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(nibbles32(x->qs), hi);
    }
    case T_Q8_0: {
        const struct block_q8_0 *x = (const struct block_q8_0 *)(const void *)row + b;
        *d = h2f_tab(x->d);
        return _mm256_loadu_si256((const __m256i *)(const void *)x->qs);
    }
    default: {  /* T_IQ4_NL */
        const struct block_iq4_nl *x = (const struct block_iq4_nl *)(const void *)row + b;
        *d = h2f_tab(x->d);
        return _mm256_shuffle_epi8(iq4nl_lut(), nibbles32(x->qs));
    }
    }
}

/*
 * One row against nt (<= NT) tokens.
 *   mode LANES (Q8_0, Q5_0 / Q4_1, Q5_1): acc = fma(dw * da, lanes, acc) per
 *       block, hsum8(acc) (+ the f32 sum of m * s for the types with a min);
 *   mode CHAIN (Q4_0, IQ4_NL repacked): acc = fma(float(block sum), dw * da, acc)
 *       on one scalar per output.
 */
static inline __attribute__((always_inline)) void
legacy_row(float *out, int64_t ldo, const uint8_t *row, uint32_t type,
           const struct act_row *ar, int nt, int64_t nb)
{
    const int has_min = type == T_Q4_1 || type == T_Q5_1;
    const int chain = type == T_Q4_0 || type == T_IQ4_NL;
    __m256 acc[NT];
    float sacc[NT];

    for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        sacc[t] = 0.0f;
    }
    for (int64_t b = 0; b < nb; b++) {
        float d, m = 0.0f;
        __m256i qx = legacy_block(row, type, b, &d, &m);
        for (int t = 0; t < nt; t++) {
            __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(ar[t].q + 32 * b));
            float da = ar[t].d[b];
            if (chain) {
                int isum = hsum_epi32(lanes_ss(qx, qy));
                sacc[t] = fmadd_ss((float)isum, d * da, sacc[t]);
            } else if (has_min) {
                __m256 q = _mm256_cvtepi32_ps(lanes_us(qx, qy));
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), q, acc[t]);
                sacc[t] = fmadd_ss(m, ar[t].s[b], sacc[t]);
            } else {
                __m256 q = _mm256_cvtepi32_ps(lanes_ss(qx, qy));
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), q, acc[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        if (chain)
            out[t * ldo] = sacc[t];
        else if (has_min)
            out[t * ldo] = hsum8(acc[t]) + sacc[t];
        else
            out[t * ldo] = hsum8(acc[t]);
    }
}

/* Decode (one token): DR rows at once, so that their block chains overlap
 * and the token's block is loaded once for them; each row's arithmetic is
 * legacy_row's with nt = 1. */
#define DR 4

static inline __attribute__((always_inline)) void
legacy_rows1(float *out, const uint8_t *row0, size_t row_bytes, uint32_t type,
             const struct act_row *ar, int nr, int64_t nb, const char *pf, int64_t pf_lines)
{
    const int has_min = type == T_Q4_1 || type == T_Q5_1;
    const int chain = type == T_Q4_0 || type == T_IQ4_NL;
    __m256 acc[DR];
    float sacc[DR];

#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        acc[i] = _mm256_setzero_ps();
        sacc[i] = 0.0f;
    }
    int64_t pfl = 0, pfa = 0;
    for (int64_t b = 0; b < nb; b++) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(ar->q + 32 * b));
        float da = ar->d[b];
        /* the prefetch of a later group, spread over the blocks */
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            float d, m = 0.0f;
            __m256i qx = legacy_block(row0 + (size_t)i * row_bytes, type, b, &d, &m);
            if (chain) {
                int isum = hsum_epi32(lanes_ss(qx, qy));
                sacc[i] = fmadd_ss((float)isum, d * da, sacc[i]);
            } else if (has_min) {
                __m256 q = _mm256_cvtepi32_ps(lanes_us(qx, qy));
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), q, acc[i]);
                sacc[i] = fmadd_ss(m, ar->s[b], sacc[i]);
            } else {
                __m256 q = _mm256_cvtepi32_ps(lanes_ss(qx, qy));
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), q, acc[i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        if (chain)
            out[i] = sacc[i];
        else if (has_min)
            out[i] = hsum8(acc[i]) + sacc[i];
        else
            out[i] = hsum8(acc[i]);
    }
}

/* Q4_1 decode with 128-bit halves: lanes 0..3 (elements 0..15, the low
 * nibbles) and 4..7 (16..31, the high nibbles) in separate registers, the
 * same int32 lanes and per-lane fused multiply-adds as the 256-bit form,
 * and hsum8's (hi + lo) first step; on cores that split 256-bit operations
 * this saves the lane insertion of the nibble unpack. */
static inline __attribute__((always_inline)) void
q4_1_rows1_x(float *out, const uint8_t *row0, size_t row_bytes, const struct act_row *ar, int nr,
             int64_t nb, const char *pf, int64_t pf_lines)
{
    __m128 lo[DR], hi[DR];
    float sacc[DR];
    const __m128i m15 = _mm_set1_epi8(15), ones = _mm_set1_epi16(1);

#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        lo[i] = hi[i] = _mm_setzero_ps();
        sacc[i] = 0.0f;
    }
    int64_t pfl = 0, pfa = 0;
    for (int64_t b = 0; b < nb; b++) {
        __m128i ylo = _mm_loadu_si128((const __m128i *)(const void *)(ar->q + 32 * b));
        __m128i yhi = _mm_loadu_si128((const __m128i *)(const void *)(ar->q + 32 * b + 16));
        float da = ar->d[b], sa = ar->s[b];
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            const struct block_q4_1 *x = (const struct block_q4_1 *)(const void *)(row0 + (size_t)i * row_bytes) + b;
            __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)x->qs);
            __m128i ql = _mm_and_si128(qs, m15), qh = _mm_and_si128(_mm_srli_epi16(qs, 4), m15);
            __m128 dd = _mm_set1_ps(h2f_tab(x->d) * da);
            __m128 pl = _mm_cvtepi32_ps(_mm_madd_epi16(_mm_maddubs_epi16(ql, ylo), ones));
            __m128 ph = _mm_cvtepi32_ps(_mm_madd_epi16(_mm_maddubs_epi16(qh, yhi), ones));
            lo[i] = _mm_fmadd_ps(dd, pl, lo[i]);
            hi[i] = _mm_fmadd_ps(dd, ph, hi[i]);
            sacc[i] = fmadd_ss(h2f_tab(x->m), sa, sacc[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        out[i] = hsum8_halves(lo[i], hi[i]) + sacc[i];
}

/* Q4_0 / IQ4_NL decode, 8 rows at once: the chain of the repacked gemv
 * (per row and block the exact integer sum, then sacc = fma(float(sum),
 * d * da, sacc)) with the 8 rows in the lanes, so that one vector fused
 * multiply-add serves 8 rows and the horizontal sums become one hadd tree.
 * 128-bit halves (low nibbles = elements 0..15, high = 16..31).  Q4_0 codes
 * are taken unsigned (0..15) and the sum corrected by 8 * sum(y) (ys8[b]):
 * the same integer as sum((q - 8) * y), without the sign operations. */
#define CHAIN_MAX_NB 1024       /* blocks per row of the 8-row decode */

static inline __attribute__((always_inline)) void
chain_rows8(float *out, const uint8_t *row0, size_t row_bytes, uint32_t type,
            const struct act_row *ar, const int32_t *ys8, int64_t nb, const char *pf,
            int64_t pf_lines)
{
    const __m128i m15 = _mm_set1_epi8(15), ones = _mm_set1_epi16(1);
    const __m128i lut = _mm_loadu_si128((const __m128i *)(const void *)kvalues_iq4nl);
    __m256 sacc = _mm256_setzero_ps();
    /* Q4_0 and IQ4_NL blocks are both { fp16 d; 16 bytes of nibbles } */
    const size_t bs = sizeof(struct block_q4_0);

    int64_t pfl = 0, pfa = 0;
    for (int64_t b = 0; b < nb; b++) {
        __m128i ylo = _mm_loadu_si128((const __m128i *)(const void *)(ar->q + 32 * b));
        __m128i yhi = _mm_loadu_si128((const __m128i *)(const void *)(ar->q + 32 * b + 16));
        __m128i v[8], dh = _mm_setzero_si128();
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const uint8_t *blk = row0 + (size_t)i * row_bytes + (size_t)b * bs;
            __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
            __m128i lo = _mm_and_si128(qs, m15), hi = _mm_and_si128(_mm_srli_epi16(qs, 4), m15);
            uint16_t h;
            memcpy(&h, blk, 2);
            dh = INSERT16(dh, h, i);
            if (type == T_Q4_0) {
                /* |pair| <= 2 * 15 * 127: the two halves add in int16 */
                __m128i p = _mm_add_epi16(_mm_maddubs_epi16(lo, ylo), _mm_maddubs_epi16(hi, yhi));
                v[i] = _mm_madd_epi16(p, ones);
            } else {
                lo = _mm_shuffle_epi8(lut, lo);
                hi = _mm_shuffle_epi8(lut, hi);
                __m128i pl = _mm_maddubs_epi16(_mm_sign_epi8(lo, lo), _mm_sign_epi8(ylo, lo));
                __m128i ph = _mm_maddubs_epi16(_mm_sign_epi8(hi, hi), _mm_sign_epi8(yhi, hi));
                v[i] = _mm_add_epi32(_mm_madd_epi16(pl, ones), _mm_madd_epi16(ph, ones));
            }
        }
        __m256i isum = hsum8x4_epi32(v);
        if (type == T_Q4_0)
            isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(ys8[b]));
        __m256 d = _mm256_cvtph_ps(dh);
        __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(ar->d[b]));
        sacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, sacc);
    }
    _mm256_storeu_ps(out, sacc);
}

/* Q5_0 decode with 128-bit halves (elements 0..15 in lanes 0..3, 16..31 in
 * lanes 4..7, as the 256-bit form), for cores that split 256-bit
 * operations: the same int32 lanes, per-lane fused multiply-adds and
 * hsum8's first step (hi + lo); the unpack needs no lane crossing. */
static inline __attribute__((always_inline)) __m128i
bits16(uint32_t w)
{
    /* byte j = 0xff when bit j of the 16-bit w is set */
    __m128i v = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)w),
                                 _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    __m128i m = _mm_set1_epi64x((long long)0x8040201008040201ull);
    return _mm_cmpeq_epi8(_mm_and_si128(v, m), m);
}

static inline __attribute__((always_inline)) void
q5_0_rows1_x(float *out, const uint8_t *row0, size_t row_bytes, const struct act_row *ar, int nr,
             int64_t nb, const char *pf, int64_t pf_lines)
{
    __m128 lo[DR], hi[DR];
    const __m128i m15 = _mm_set1_epi8(15), ones = _mm_set1_epi16(1), f0 = _mm_set1_epi8((char)0xf0);
    int64_t pfl = 0, pfa = 0;

#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        lo[i] = hi[i] = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m128i ylo = _mm_loadu_si128((const __m128i *)(const void *)(ar->q + 32 * b));
        __m128i yhi = _mm_loadu_si128((const __m128i *)(const void *)(ar->q + 32 * b + 16));
        float da = ar->d[b];
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            const struct block_q5_0 *x = (const struct block_q5_0 *)(const void *)(row0 + (size_t)i * row_bytes) + b;
            uint32_t qh;
            memcpy(&qh, x->qh, 4);
            __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)x->qs);
            __m128i xl = _mm_or_si128(_mm_and_si128(qs, m15), _mm_andnot_si128(bits16(qh & 0xffff), f0));
            __m128i xh = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(qs, 4), m15),
                                      _mm_andnot_si128(bits16(qh >> 16), f0));
            __m128 dd = _mm_set1_ps(h2f_tab(x->d) * da);
            __m128 pl = _mm_cvtepi32_ps(_mm_madd_epi16(
                _mm_maddubs_epi16(_mm_sign_epi8(xl, xl), _mm_sign_epi8(ylo, xl)), ones));
            __m128 ph = _mm_cvtepi32_ps(_mm_madd_epi16(
                _mm_maddubs_epi16(_mm_sign_epi8(xh, xh), _mm_sign_epi8(yhi, xh)), ones));
            lo[i] = _mm_fmadd_ps(dd, pl, lo[i]);
            hi[i] = _mm_fmadd_ps(dd, ph, hi[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        out[i] = hsum8_halves(lo[i], hi[i]);
}

static void
legacy_decode(float *y, const uint8_t *w, size_t row_bytes, uint32_t type, const uint8_t *act,
              int64_t cols, int64_t r0, int64_t r1)
{
    struct act_row ar;
    const int64_t nb = cols / 32;

    act_row_at(&ar, type == T_Q4_1 || type == T_Q5_1 ? ACT_Q8_1 : ACT_Q8_0, act, cols);
    const int split256 = cpu_splits_256();
    if ((type == T_Q4_0 || type == T_IQ4_NL) && nb <= CHAIN_MAX_NB) {
        int32_t ys8[CHAIN_MAX_NB];
        if (type == T_Q4_0)
            for (int64_t b = 0; b < nb; b++) {
                ys8[b] = q4_0_ysum8(ar.q + 32 * b);
            }
        const int64_t pf_lines = (int64_t)((8 * row_bytes + 63) / 64);
        for (; r0 + 8 <= r1; r0 += 8) {
            const uint8_t *row0 = w + (size_t)r0 * row_bytes;
            const char *pf = (const char *)row0 + 16 * row_bytes;
            if (type == T_Q4_0)
                chain_rows8(y + r0, row0, row_bytes, T_Q4_0, &ar, ys8, nb, pf, pf_lines);
            else
                chain_rows8(y + r0, row0, row_bytes, T_IQ4_NL, &ar, ys8, nb, pf, pf_lines);
        }
    }
    for (int64_t r = r0; r < r1; r += DR) {
        int nr = r1 - r < DR ? (int)(r1 - r) : DR;
        const uint8_t *row0 = w + (size_t)r * row_bytes;
        /* the weights stream from memory once: ask for the group after next */
        const char *pf = (const char *)row0 + 2 * DR * row_bytes;
        int64_t pf_lines = (int64_t)((DR * row_bytes + 63) / 64);
        /* each kernel instantiated for a literal row count (and type) */
#define BY_NR(F, ...) switch (nr) { case 1: F(__VA_ARGS__, 1); break; case 2: F(__VA_ARGS__, 2); break; \
                                    case 3: F(__VA_ARGS__, 3); break; default: F(__VA_ARGS__, 4); break; }
#define LD(ty, n) legacy_rows1(y + r, row0, row_bytes, ty, &ar, n, nb, pf, pf_lines)
#define X41(unused, n) q4_1_rows1_x(y + r, row0, row_bytes, &ar, n, nb, pf, pf_lines)
#define X50(unused, n) q5_0_rows1_x(y + r, row0, row_bytes, &ar, n, nb, pf, pf_lines)
        switch (type) {
        case T_Q4_0: BY_NR(LD, T_Q4_0); break;
        case T_Q4_1:
            if (split256) {
                BY_NR(X41, 0);
            } else {
                BY_NR(LD, T_Q4_1);
            }
            break;
        case T_Q5_0:
            if (split256) {
                BY_NR(X50, 0);
            } else {
                BY_NR(LD, T_Q5_0);
            }
            break;
        case T_Q5_1: BY_NR(LD, T_Q5_1); break;
        case T_Q8_0: BY_NR(LD, T_Q8_0); break;
        default: BY_NR(LD, T_IQ4_NL); break;
        }
#undef X50
#undef X41
#undef LD
#undef BY_NR
    }
}

/* ---- small batches: 2..SB_TOK_MAX tokens (a verify pass), below the tiles ----
 *
 * A few rows x nt (2..4) tokens at once, each weight block unpacked once for the nt
 * tokens and the rows' chains interleaved (one row at a time, as
 * legacy_row, leaves the fused multiply-adds waiting on each other).  Each
 * (row, token) is legacy_row's arithmetic: acc = fma(d * da, lanes, acc) in
 * block order, hsum8(acc), plus for Q4_1/Q5_1 the chain of m * s, here with
 * the tokens in the lanes of one vector per row (lane t: fma(m, s_t, acc),
 * the same single rounding as fmadd_ss); for Q4_0 and IQ4_NL (chain mode)
 * the exact block sums of the tokens in one vector, fma(float(sum), d * da)
 * lane by lane. */
#define SB_MAX 4

/* the sums of 4 vectors of 8 int32 lanes, as [sum v0 .. sum v3] (exact) */
static inline __m128i
hsum4x8_epi32(const __m256i *v)
{
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

static inline __attribute__((always_inline)) void
legacy_rows_small(float *out, int64_t ldo, const uint8_t *row0, size_t row_bytes, uint32_t type,
                  const struct act_row *ar, int nr, int nt, int64_t nb, const char *pf,
                  int64_t pf_lines)
{
    const int has_min = type == T_Q4_1 || type == T_Q5_1;
    const int chain = type == T_Q4_0 || type == T_IQ4_NL;
    __m256 acc[DR][SB_MAX];
    __m128 sv[DR];

#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            acc[i][t] = _mm256_setzero_ps();
        sv[i] = _mm_setzero_ps();
    }
    int64_t pfl = 0, pfa = 0;
    for (int64_t b = 0; b < nb; b++) {
        /* the tokens' Q8_1 sums (has_min) or scales (chain) in lanes */
        __m128 st = _mm_setzero_ps();
        if (has_min)
            st = _mm_setr_ps(ar[0].s[b], ar[1].s[b], nt > 2 ? ar[2].s[b] : 0.0f, nt > 3 ? ar[3].s[b] : 0.0f);
        else if (chain)
            st = _mm_setr_ps(ar[0].d[b], ar[1].d[b], nt > 2 ? ar[2].d[b] : 0.0f, nt > 3 ? ar[3].d[b] : 0.0f);
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            float d, m = 0.0f;
            __m256i qx = legacy_block(row0 + (size_t)i * row_bytes, type, b, &d, &m);
            if (chain) {
                /* legacy_row's sacc = fma(float(block sum), d * da, sacc), lane t */
                __m256i v[4];
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++)
                    v[t] = t < nt ? lanes_ss(qx, _mm256_loadu_si256((const __m256i *)(const void *)(ar[t].q + 32 * b)))
                                  : _mm256_setzero_si256();
                sv[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4x8_epi32(v)), _mm_mul_ps(_mm_set1_ps(d), st), sv[i]);
                continue;
            }
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(ar[t].q + 32 * b));
                __m256 q = _mm256_cvtepi32_ps(has_min ? lanes_us(qx, qy) : lanes_ss(qx, qy));
                acc[i][t] = _mm256_fmadd_ps(_mm256_set1_ps(d * ar[t].d[b]), q, acc[i][t]);
            }
            if (has_min)
                sv[i] = _mm_fmadd_ps(_mm_set1_ps(m), st, sv[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        float s[4];
        _mm_storeu_ps(s, sv[i]);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            out[t * ldo + i] = chain ? s[t] : has_min ? hsum8(acc[i][t]) + s[t] : hsum8(acc[i][t]);
    }
}

/* Q4_1 with 128-bit halves (as q4_1_rows1_x, for cores that split 256-bit
 * operations): lanes 0..3 and 4..7 of legacy_row's accumulator apart. */
static inline __attribute__((always_inline)) void
q4_1_rows_small_x(float *out, int64_t ldo, const uint8_t *row0, size_t row_bytes,
                  const struct act_row *ar, int nr, int nt, int64_t nb, const char *pf,
                  int64_t pf_lines)
{
    __m128 lo[DR][SB_MAX], hi[DR][SB_MAX], sv[DR];
    const __m128i m15 = _mm_set1_epi8(15), ones = _mm_set1_epi16(1);

#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            lo[i][t] = hi[i][t] = _mm_setzero_ps();
        sv[i] = _mm_setzero_ps();
    }
    int64_t pfl = 0, pfa = 0;
    for (int64_t b = 0; b < nb; b++) {
        __m128 st = _mm_setr_ps(ar[0].s[b], ar[1].s[b], nt > 2 ? ar[2].s[b] : 0.0f, nt > 3 ? ar[3].s[b] : 0.0f);
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            const struct block_q4_1 *x = (const struct block_q4_1 *)(const void *)(row0 + (size_t)i * row_bytes) + b;
            __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)x->qs);
            __m128i ql = _mm_and_si128(qs, m15), qh = _mm_and_si128(_mm_srli_epi16(qs, 4), m15);
            float d = h2f_tab(x->d);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const __m128i *y = (const __m128i *)(const void *)(ar[t].q + 32 * b);
                __m128 dd = _mm_set1_ps(d * ar[t].d[b]);
                __m128 pl = _mm_cvtepi32_ps(_mm_madd_epi16(_mm_maddubs_epi16(ql, _mm_loadu_si128(y)), ones));
                __m128 ph = _mm_cvtepi32_ps(_mm_madd_epi16(_mm_maddubs_epi16(qh, _mm_loadu_si128(y + 1)), ones));
                lo[i][t] = _mm_fmadd_ps(dd, pl, lo[i][t]);
                hi[i][t] = _mm_fmadd_ps(dd, ph, hi[i][t]);
            }
            sv[i] = _mm_fmadd_ps(_mm_set1_ps(h2f_tab(x->m)), st, sv[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        float s[4];
        _mm_storeu_ps(s, sv[i]);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            out[t * ldo + i] = hsum8_halves(lo[i][t], hi[i][t]) + s[t];
    }
}

/* SB_TOK_MAX or fewer tokens of a legacy type: the tokens in groups of 4 (the cheapest per token here), then
 * the 1..4 left over (5 as 3 + 2, never a group of one); the rows in chunks of
 * SB_CHUNK, each streamed from memory once and read from the cache by the
 * later token groups, and within a chunk in groups of 3 rows (2 tokens) or
 * 2 (3 or 4 tokens). */
#define SB_TOK_MAX 7
_Static_assert(SB_TOK_MAX <= OPS_MM_KSMALL_MAX, "kquant_small's token rows");
#define SB_CHUNK 24

static inline int
small_group(int left)
{
    /* never 1: the kernels are instantiated for 2, 3 and 4 tokens only
     * (the dispatch sends 2..SB_TOK_MAX, ops_mm_kquant_small_avx2 up to
     * OPS_MM_KSMALL_MAX) */
    assert(left >= 2);
    return left == 5 ? 3 : left > 4 ? 4 : left;
}

static void
legacy_small(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             const uint8_t *act, size_t arb, int n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    struct act_row ar[SB_TOK_MAX];
    const int64_t nb = cols / 32;
    const enum act a = type == T_Q4_1 || type == T_Q5_1 ? ACT_Q8_1 : ACT_Q8_0;
    const int x41 = type == T_Q4_1 && cpu_splits_256();

    for (int t = 0; t < n_tok; t++)
        act_row_at(&ar[t], a, act + (size_t)t * arb, cols);
    for (int64_t c0 = r0; c0 < r1; c0 += SB_CHUNK) {
        const int64_t c1 = c0 + SB_CHUNK < r1 ? c0 + SB_CHUNK : r1;
        for (int t0 = 0, nt; t0 < n_tok; t0 += nt) {
            nt = small_group(n_tok - t0);
            for (int64_t r = c0; r < c1;) {
                const int sr = nt == 2 ? 3 : 2;
                int nr = c1 - r < sr ? (int)(c1 - r) : sr;
                const uint8_t *row0 = w + (size_t)r * row_bytes;
                /* the first token group streams the chunk: ask for the group after next */
                const char *pf = (const char *)row0 + 2 * (size_t)nr * row_bytes;
                int64_t pf_lines = t0 == 0 ? (int64_t)(((size_t)nr * row_bytes + 63) / 64) : 0;
                float *o = y + t0 * ldy + r;
                const struct act_row *at = ar + t0;
                /* instantiated for literal row and token counts (and type) */
#define SM(ty, n, k) legacy_rows_small(o, ldy, row0, row_bytes, ty, at, n, k, nb, pf, pf_lines)
#define SX(unused, n, k) q4_1_rows_small_x(o, ldy, row0, row_bytes, at, n, k, nb, pf, pf_lines)
#define BY_NR_NT(F, ty) \
                if (nt == 2) { switch (nr) { case 1: F(ty, 1, 2); break; case 2: F(ty, 2, 2); break; \
                                             default: F(ty, 3, 2); break; } } \
                else if (nt == 3) { switch (nr) { case 1: F(ty, 1, 3); break; default: F(ty, 2, 3); break; } } \
                else { switch (nr) { case 1: F(ty, 1, 4); break; default: F(ty, 2, 4); break; } }
                switch (type) {
                case T_Q4_1:
                    if (x41) {
                        BY_NR_NT(SX, 0);
                    } else {
                        BY_NR_NT(SM, T_Q4_1);
                    }
                    break;
                case T_Q4_0: BY_NR_NT(SM, T_Q4_0); break;
                case T_Q5_0: BY_NR_NT(SM, T_Q5_0); break;
                case T_Q5_1: BY_NR_NT(SM, T_Q5_1); break;
                case T_Q8_0: BY_NR_NT(SM, T_Q8_0); break;
                default: BY_NR_NT(SM, T_IQ4_NL); break;
                }
#undef BY_NR_NT
#undef SX
#undef SM
                r += nr;
            }
        }
    }
}

/* ---- prefill: unpacked row tiles ----
 *
 * For batches of TILE_MIN tokens or more (more than SB_TOK_MAX for the types
 * of the small batch kernels), a tile of weight rows is unpacked
 * once into an L1-resident buffer (int8 codes in element order, f32 scales
 * and mins), then every group of TG tokens is dotted with each row of the
 * tile, reading the unpacked codes.  The per-(row, token) arithmetic is the
 * single-token one: the same int32 lanes, the same scale products, fused
 * multiply-adds in block order and the same final sums; only the number of
 * unpack operations changes.  Token-group scales are transposed once per
 * (tile, group) so that one vector multiply gives a block's scale products
 * for the TG tokens. */
#define TG 8
#define TILE_MIN 4
#define TILE_BYTES (40 * 1024)
#define TG_MAX_NB 1024          /* blocks per row the transposed scales hold */

struct tgroup {
    int nt;
    const int8_t *q[TG];
    float dT[TG_MAX_NB * TG] __attribute__((aligned(32)));   /* [block][token] */
    float sT[TG_MAX_NB * TG] __attribute__((aligned(32)));   /* Q8_1 s, or unused */
    int32_t yT[TG_MAX_NB * TG] __attribute__((aligned(32))); /* 8 * sum of codes (Q4_0) */
};

static void
tgroup_fill(struct tgroup *g, enum act a, const uint8_t *act, size_t arb, int64_t t0, int nt,
            int64_t cols, int64_t nb, int ysum8)
{
    struct act_row ar;
    g->nt = nt;
    for (int t = 0; t < TG; t++) {
        act_row_at(&ar, a, act + (size_t)(t0 + (t < nt ? t : 0)) * arb, cols);
        g->q[t] = ar.q;
        for (int64_t b = 0; b < nb; b++) {
            g->dT[b * TG + t] = t < nt ? ar.d[b] : 0.0f;
            if (a == ACT_Q8_1)
                g->sT[b * TG + t] = t < nt ? ar.s[b] : 0.0f;
            if (ysum8) {
                g->yT[b * TG + t] = q4_0_ysum8(ar.q + 32 * b);
            }
        }
    }
}

/* One unpacked legacy row against the group's tokens (nt constant when
 * inlined with a literal). */
static inline __attribute__((always_inline)) void
legacy_tile_row(float *out, int64_t ldo, const int8_t *qx, const float *dx, const float *mx,
                uint32_t type, const struct tgroup *g, int nt, int64_t nb)
{
    const int has_min = type == T_Q4_1 || type == T_Q5_1;
    const int sgn = !has_min;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TG], macc = _mm256_setzero_ps();
    float dd[TG] __attribute__((aligned(32)));

#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i x = _mm256_load_si256((const __m256i *)(const void *)(qx + 32 * b));
        __m256i ax = sgn ? _mm256_sign_epi8(x, x) : x;
        _mm256_store_ps(dd, _mm256_mul_ps(_mm256_set1_ps(dx[b]), _mm256_load_ps(g->dT + TG * b)));
        if (has_min)
            macc = _mm256_fmadd_ps(_mm256_set1_ps(mx[b]), _mm256_load_ps(g->sT + TG * b), macc);
    #pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
            __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(g->q[t] + 32 * b));
            __m256i p = sgn ? _mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x))
                            : _mm256_maddubs_epi16(x, y);
            acc[t] = _mm256_fmadd_ps(_mm256_broadcast_ss(dd + t),
                                     _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), acc[t]);
        }
    }
    float ms[TG] __attribute__((aligned(32)));
    _mm256_store_ps(ms, macc);
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        out[t * ldo] = has_min ? hsum8(acc[t]) + ms[t] : hsum8(acc[t]);
}

/* One unpacked Q4_0 / IQ4_NL row (the repacked gemv chain) against a group
 * of TG tokens, the tokens in the lanes: per block the 8 exact integer sums,
 * then sacc = fma(float(sum), d * da, sacc) lane by lane, as the
 * single-token chain does.  uns (Q4_0): the row holds the unsigned codes
 * 0..15 and the sums are corrected by 8 * sum(y) (g->yT), as chain_rows8. */
static inline __attribute__((always_inline)) void
chain_tile_row(float *out, int64_t ldo, const int8_t *qx, const float *dx,
               const struct tgroup *g, int64_t nb, int uns)
{
    __m256 sacc = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);

    for (int64_t b = 0; b < nb; b++) {
        __m256i x = _mm256_load_si256((const __m256i *)(const void *)(qx + 32 * b));
        __m256i ax = uns ? x : _mm256_sign_epi8(x, x);
        __m256i v[TG], isum;
        if (uns) {
            /* |pair| <= 2 * 15 * 127, so the 8 int16 of a token's half
             * block add up in int16 (<= 30480): three hadd levels give
             * [t0 .. t7] per half, then the halves widen and add */
#pragma GCC unroll 8
            for (int t = 0; t < TG; t++)
                v[t] = _mm256_maddubs_epi16(ax, _mm256_loadu_si256(
                    (const __m256i *)(const void *)(g->q[t] + 32 * b)));
            __m256i h = _mm256_hadd_epi16(
                _mm256_hadd_epi16(_mm256_hadd_epi16(v[0], v[1]), _mm256_hadd_epi16(v[2], v[3])),
                _mm256_hadd_epi16(_mm256_hadd_epi16(v[4], v[5]), _mm256_hadd_epi16(v[6], v[7])));
            isum = _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(h)),
                                    _mm256_cvtepi16_epi32(_mm256_extracti128_si256(h, 1)));
            isum = _mm256_sub_epi32(isum, _mm256_load_si256((const __m256i *)(const void *)(g->yT + TG * b)));
        } else {
#pragma GCC unroll 8
            for (int t = 0; t < TG; t++) {
                __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(g->q[t] + 32 * b));
                v[t] = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x)), ones);
            }
            isum = hsum8x8_epi32(v);
        }
        __m256 dd = _mm256_mul_ps(_mm256_set1_ps(dx[b]), _mm256_load_ps(g->dT + TG * b));
        sacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, sacc);
    }
    float r[TG] __attribute__((aligned(32)));
    _mm256_store_ps(r, sacc);
    for (int t = 0; t < g->nt; t++)
        out[t * ldo] = r[t];
}

void
ops_mm_avx2_unpack_legacy(int8_t *q, float *d, float *m, const uint8_t *row, uint32_t type,
                          int64_t nb)
{
    for (int64_t b = 0; b < nb; b++) {
        float db, mb = 0.0f;
        __m256i x = legacy_block(row, type, b, &db, &mb);
        if (type == T_Q4_0)     /* the unsigned codes */
            x = _mm256_add_epi8(x, _mm256_set1_epi8(8));
        _mm256_storeu_si256((__m256i *)(void *)(q + 32 * b), x);
        d[b] = db;
        if (m)
            m[b] = mb;
    }
}

/* Rows [r0, r1) of a legacy type (Q4_1, Q5_1, Q8_0, Q5_0; Q4_0, IQ4_NL) for all
 * n_tok tokens; 0 when the row does not fit the tile buffer (the caller
 * then takes the direct path). */
static int
legacy_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             enum act a, const uint8_t *act, size_t arb, int64_t n_tok, int64_t cols, int64_t r0,
             int64_t r1)
{
    const int64_t nb = cols / 32;
    const int has_min = type == T_Q4_1 || type == T_Q5_1;
    size_t rowu = (size_t)cols + (size_t)nb * sizeof(float) * (has_min ? 2 : 1);
    uint8_t buf[TILE_BYTES] __attribute__((aligned(32)));
    static __thread struct tgroup g;

    if (rowu > sizeof(buf) || nb > TG_MAX_NB)
        return 0;
    int64_t R = (int64_t)(sizeof(buf) / rowu);
    if (R > 16)
        R = 16;
    int8_t *q = (int8_t *)buf;
    float *d = (float *)(void *)(buf + (size_t)R * (size_t)cols);
    float *m = d + R * nb;

    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        for (int64_t i = 0; i < nr; i++) {
            /* the tile holds mins only for the types that have them */
            ops_mm_avx2_unpack_legacy(q + i * cols, d + i * nb, has_min ? m + i * nb : NULL,
                                      w + (size_t)(rb + i) * row_bytes, type, nb);
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += TG) {
            int nt = n_tok - t0 < TG ? (int)(n_tok - t0) : TG;
            tgroup_fill(&g, a, act, arb, t0, nt, cols, nb, type == T_Q4_0);
            for (int64_t i = 0; i < nr; i++) {
                float *out = y + t0 * ldy + rb + i;
                const int8_t *qx = q + i * cols;
                const float *dx = d + i * nb, *mx = m + i * nb;
                if (type == T_Q4_0 || type == T_IQ4_NL) {
                    if (type == T_Q4_0)
                        chain_tile_row(out, ldy, qx, dx, &g, nb, 1);
                    else
                        chain_tile_row(out, ldy, qx, dx, &g, nb, 0);
                    continue;
                }
#define LT(ty, n) legacy_tile_row(out, ldy, qx, dx, mx, ty, &g, n, nb)
#define LT_NT(ty) switch (nt) { case 1: LT(ty, 1); break; case 2: LT(ty, 2); break; \
                                case 3: LT(ty, 3); break; case 4: LT(ty, 4); break; \
                                case 5: LT(ty, 5); break; case 6: LT(ty, 6); break; \
                                case 7: LT(ty, 7); break; default: LT(ty, 8); break; }
                switch (type) {
                case T_Q4_1: LT_NT(T_Q4_1); break;
                case T_Q5_1: LT_NT(T_Q5_1); break;
                case T_Q5_0: LT_NT(T_Q5_0); break;
                default: LT_NT(T_Q8_0); break;
                }
#undef LT_NT
#undef LT
            }
        }
    }
    return 1;
}

#include "cpu/kquant_tiles.h"

/* ---- llama.cpp's prompt arithmetic for Q6_K and Q4_K (mm_rows_mirror) ----
 *
 * The unpacked super-blocks of kquant_tiles.h, 8 rows against one token at
 * a time: the rows' exact integer sums (in any order: exact) reduced
 * together (hsum8x8_epi32), then per super-block, in order, the float steps
 * of cpu/matmul_mirror_ref.c, one row per lane (the same single roundings
 * as the reference's scalar chain). */

/* What the tokens share of a group of 8 unpacked rows' super-block b: the
 * rows' d and dmin in lanes and (Q4_K) for each sub-block pair p the
 * rows' two mins as int16 pairs, so that one VPMADDWD against the token's
 * two 32-element sums gives the 8 rows' exact min sums. */
struct kgrp {
    __m256i mn[4];
    __m256 d, dmin;
};

static void
kgrp_fill(struct kgrp *g, const struct ksb *pre, int64_t nb, int64_t b, int nr)
{
    float d[8] __attribute__((aligned(32))) = { 0 }, dm[8] __attribute__((aligned(32))) = { 0 };
    int16_t mn[4][16] __attribute__((aligned(32))) = { { 0 } };

    for (int i = 0; i < nr; i++) {
        const struct ksb *k = pre + i * nb + b;
        d[i] = k->d;
        dm[i] = k->dmin;
        /* k->mn holds each sub-block's min twice, one per 16 elements */
        for (int p = 0; p < 4; p++) {
            mn[p][2 * i] = k->mn[4 * p];
            mn[p][2 * i + 1] = k->mn[4 * p + 2];
        }
    }
    g->d = _mm256_load_ps(d);
    g->dmin = _mm256_load_ps(dm);
    for (int p = 0; p < 4; p++)
        g->mn[p] = _mm256_load_si256((const __m256i *)(const void *)mn[p]);
}

/* Q6_K (ggml's tiled kernels): acc = fma(d_w * (float)isum, d_y, acc) */
static void
q6k_mirror_rows(float *out, const struct ksb *pre, const struct kgrp *g, int64_t nb,
                const struct act_row *ar, int nr)
{
    __m256 acc = _mm256_setzero_ps();
    float r[8] __attribute__((aligned(32)));

    for (int64_t b = 0; b < nb; b++) {
        const int8_t *yq = ar->q + QK_K * b;
        __m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)(ar->bsums + 16 * b));
        __m256i v[8];
        for (int i = 0; i < 8; i++) {
            if (i >= nr) {
                v[i] = _mm256_setzero_si256();
                continue;
            }
            const struct ksb *k = pre + i * nb + b;
            /* the codes are unsigned (0..63): 32 * sum(sc * ysum) off */
            __m256i cl = _mm256_slli_epi32(_mm256_madd_epi16(
                bs, _mm256_loadu_si256((const __m256i *)(const void *)k->sc16)), 5);
            v[i] = _mm256_sub_epi32(k_lanes(k, yq, 0), cl);
        }
        __m256 isum = _mm256_cvtepi32_ps(hsum8x8_epi32(v));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(g[b].d, isum), _mm256_set1_ps(ar->d[b]), acc);
    }
    _mm256_store_ps(r, acc);
    memcpy(out, r, (size_t)nr * sizeof(float));
}

/* Q4_K (ggml's repack gemm): per pair p of 32-element sub-blocks, sacc =
 * fma((float)isum_p, d_w * d_y, sacc) and macc = fma((float)msum_p,
 * dmin_w * d_y, macc); out = sacc - macc */
static void
q4k_mirror_rows(float *out, const struct ksb *pre, const struct kgrp *g, int64_t nb,
                const struct act_row *ar, int nr)
{
    __m256 sacc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
    float r[8] __attribute__((aligned(32)));

    for (int64_t b = 0; b < nb; b++) {
        const int8_t *yq = ar->q + QK_K * b;
        const int16_t *bs = ar->bsums + 16 * b;
        __m256 yd = _mm256_set1_ps(ar->d[b]);
        __m256 dd = _mm256_mul_ps(g[b].d, yd), dmn = _mm256_mul_ps(g[b].dmin, yd);
        for (int p = 0; p < 4; p++) {
            __m256i v[8];
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(const void *)(yq + 64 * p));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(const void *)(yq + 64 * p + 32));
            for (int i = 0; i < 8; i++) {
                const struct ksb *k = pre + (i < nr ? i : 0) * nb + b;
                v[i] = _mm256_add_epi32(
                    _mm256_madd_epi16(k->sv[2 * p], _mm256_maddubs_epi16(k->q[2 * p], y0)),
                    _mm256_madd_epi16(k->sv[2 * p + 1], _mm256_maddubs_epi16(k->q[2 * p + 1], y1)));
            }
            /* the token's two 32-element sums (|sum| <= 32 * 128: int16) */
            int16_t s0 = (int16_t)(bs[4 * p] + bs[4 * p + 1]);
            int16_t s1 = (int16_t)(bs[4 * p + 2] + bs[4 * p + 3]);
            __m256i ys = _mm256_set1_epi32((int32_t)((uint32_t)(uint16_t)s1 << 16 | (uint16_t)s0));
            sacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x8_epi32(v)), dd, sacc);
            macc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(g[b].mn[p], ys)), dmn,
                                   macc);
        }
    }
    _mm256_store_ps(r, _mm256_sub_ps(sacc, macc));
    memcpy(out, r, (size_t)nr * sizeof(float));
}

int
ops_mm_kmirror_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                    const void *work, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    const int64_t nb = cols / QK_K;
    size_t rowu = (size_t)nb * sizeof(struct ksb), arb = act_row_bytes(ACT_Q8_K, cols);
    static __thread struct ksb buf[KQ_TILE_BYTES / sizeof(struct ksb)];
    static __thread struct kgrp grp[KQ_TILE_BYTES / sizeof(struct ksb)];

    if ((wtype != T_Q6_K && wtype != T_Q4_K) || cols % QK_K != 0 || rowu > sizeof(buf))
        return 0;
    /* rows per tile: a multiple of 8 where 8 fit (wide rows: fewer lanes) */
    int64_t R = (int64_t)(sizeof(buf) / rowu);
    if (R > 8)
        R = R / 8 * 8;
    if (R > KQ_TILE_ROWS)
        R = KQ_TILE_ROWS;
    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        k_unpack_rows(buf, w, row_bytes, wtype, rb, nr, nb);
        /* group i / 8's super-block b at grp[(i / 8) * nb + b] (fewer
         * groups than rows: grp has buf's entries) */
        for (int64_t i = 0; i < nr; i += 8)
            for (int64_t b = 0; b < nb; b++)
                kgrp_fill(&grp[(i / 8) * nb + b], buf + i * nb, nb, b,
                          nr - i < 8 ? (int)(nr - i) : 8);
        for (int64_t t = 0; t < n_tok; t++) {
            struct act_row ar;
            act_row_at(&ar, ACT_Q8_K, (const uint8_t *)work + (size_t)t * arb, cols);
            for (int64_t i = 0; i < nr; i += 8) {
                int n = nr - i < 8 ? (int)(nr - i) : 8;
                const struct kgrp *g = grp + (i / 8) * nb;
                if (wtype == T_Q6_K)
                    q6k_mirror_rows(y + t * ldy + rb + i, buf + i * nb, g, nb, &ar, n);
                else
                    q4k_mirror_rows(y + t * ldy + rb + i, buf + i * nb, g, nb, &ar, n);
            }
        }
    }
    return 1;
}

/* ---- k-quant decode without the unpacked super-block ---- */

/* Q4_K scales and mins of one super-block as bytes: sc8 = the 8 scales,
 * mn8 = the 8 mins (k4_scales for j = 0..7, four bytes at a time). */
static inline void
k4_scales8(const uint8_t *s, uint64_t *sc8, uint64_t *mn8)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    uint32_t sc_lo = u0 & m6, mn_lo = u1 & m6;
    uint32_t sc_hi = (u2 & m4) | ((u0 >> 6) & m2) << 4;
    uint32_t mn_hi = ((u2 >> 4) & m4) | ((u1 >> 6) & m2) << 4;
    *sc8 = (uint64_t)sc_hi << 32 | sc_lo;
    *mn8 = (uint64_t)mn_hi << 32 | mn_lo;
}

/* the 8 sums of a super-block's 16 bsums in pairs, as int16 (|pair| <= 32 *
 * 127 fits) */
static inline __m128i
bsum_pairs(const int16_t *bs)
{
    __m256i p = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)bs),
                                  _mm256_set1_epi16(1));
    return _mm_packs_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
}

/* Chunk c (64 codes) of a Q4_K/Q5_K super-block: its low 32 codes lo
 * against y [0, 32) times scale 2c, its high 32 hi against y [32, 64) times
 * scale 2c + 1 (s16: the 8 scales as int16 in both lanes), as int32 pair
 * sums */
static inline __attribute__((always_inline)) __m256i
k4_pair_sums(__m256i lo, __m256i hi, const int8_t *y, __m256i s16, int c)
{
    __m256i yl = _mm256_loadu_si256((const __m256i *)(const void *)y);
    __m256i yh = _mm256_loadu_si256((const __m256i *)(const void *)(y + 32));
    __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, yl), _mm256_shuffle_epi8(
        s16, _mm256_set1_epi16((short)((4 * c + 1) << 8 | 4 * c))));
    __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yh), _mm256_shuffle_epi8(
        s16, _mm256_set1_epi16((short)((4 * c + 3) << 8 | (4 * c + 2)))));
    return _mm256_add_epi32(pl, ph);
}

/* Q4_K, 8 rows by nt (1..SB_MAX) tokens: the repacked gemv's two chains
 * per row and token (sacc = fma(float(isum), d * yd, sacc), macc =
 * fma(float(msum), dmin * yd, macc), out = sacc - macc) with the 8 rows in
 * the lanes; the integer sums straight from the packed block (the same
 * values as k_unpack + k_lanes), each block unpacked once for the nt
 * tokens.  The decode (nt = 1) and the small batches of a verify pass. */
static inline __attribute__((always_inline)) void
q4k_rows8(float *out, int64_t ldo, const uint8_t *row0, size_t row_bytes, const struct act_row *ar,
          int nt, int64_t nb, const char *pf, int64_t pf_lines)
{
    const __m256i m15 = _mm256_set1_epi8(15);
    __m256 sacc[SB_MAX], macc[SB_MAX];
    int64_t pfl = 0, pfa = 0;

#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        sacc[t] = macc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m128i bp[SB_MAX], v[SB_MAX][8], mv[SB_MAX][8];
        __m128i dh = _mm_setzero_si128(), mh = _mm_setzero_si128();
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            bp[t] = bsum_pairs(ar[t].bsums + 16 * b);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const struct block_q4_K *x = (const struct block_q4_K *)(const void *)(row0 + (size_t)i * row_bytes) + b;
            uint64_t sc8, mn8;
            k4_scales8(x->scales, &sc8, &mn8);
            dh = INSERT16(dh, x->d, i);
            mh = INSERT16(mh, x->dmin, i);
            __m256i acc[SB_MAX];
            /* the 8 scales as int16 in both lanes; chunk c takes 2c and 2c + 1 */
            __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
            __m128i mn16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn8));
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++)
                acc[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32 * c));
                __m256i lo = _mm256_and_si256(bits, m15);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m15);
#pragma GCC unroll 4
                for (int t = 0; t < nt; t++)
                    acc[t] = _mm256_add_epi32(acc[t], k4_pair_sums(lo, hi, ar[t].q + QK_K * b + 64 * c, s16, c));
            }
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                v[t][i] = _mm_add_epi32(_mm256_castsi256_si128(acc[t]), _mm256_extracti128_si256(acc[t], 1));
                mv[t][i] = _mm_madd_epi16(mn16, bp[t]);
            }
        }
        __m256 d = _mm256_cvtph_ps(dh), dmin = _mm256_cvtph_ps(mh);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            __m256 yd = _mm256_set1_ps(ar[t].d[b]);
            sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x4_epi32(v[t])), _mm256_mul_ps(d, yd), sacc[t]);
            macc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x4_epi32(mv[t])), _mm256_mul_ps(dmin, yd), macc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        _mm256_storeu_ps(out + t * ldo, _mm256_sub_ps(sacc[t], macc[t]));
}

/* the one-row kernels' accumulation of a super-block's int32 lane sums for
 * nt tokens, acc[t] = fma(d * yd_t, float(sumi[t]), acc[t]), and their end,
 * hsum8 of each token's accumulator to out[t * ldo] */
static inline __attribute__((always_inline)) void
acc_sumi(__m256 *acc, const __m256i *sumi, float d, const struct act_row *ar, int nt, int64_t b)
{
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * ar[t].d[b]), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
}

static inline __attribute__((always_inline)) void
rows_out(float *out, int64_t ldo, const __m256 *acc, int nt)
{
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        out[t * ldo] = hsum8(acc[t]);
}

/* Q6_K, one row by nt (1..SB_MAX) tokens: kquant_row's lanes (chunk c =
 * 32 codes with the scale pair of its two halves; bsums correction 32 *
 * sum(bs * sc)) read straight from the packed block, unpacked once for the
 * nt tokens. */
static inline __attribute__((always_inline)) void
q6k_rows(float *out, int64_t ldo, const uint8_t *row, const struct act_row *ar, int nt, int64_t nb)
{
    const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m256 acc[SB_MAX];

#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q6_K *x = (const struct block_q6_K *)(const void *)row + b;
        __m256i sumi[SB_MAX];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            sumi[t] = _mm256_setzero_si256();
        /* the 16 scales as int16, the even ones in the low lane and the odd
         * ones in the high lane: chunk c's scale pair is int16 c of each */
        __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)x->scales);
        __m256i seo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
            sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(x->ql + 64 * h + 32));
            __m256i hh = _mm256_loadu_si256((const __m256i *)(const void *)(x->qh + 32 * h));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                int c = 4 * h + g;
                __m256i lo = g == 0 ? _mm256_and_si256(l0, m15)
                           : g == 1 ? _mm256_and_si256(l1, m15)
                           : g == 2 ? _mm256_and_si256(_mm256_srli_epi16(l0, 4), m15)
                                    : _mm256_and_si256(_mm256_srli_epi16(l1, 4), m15);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hh, 2 * g), m3);
                __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                __m256i sv = _mm256_shuffle_epi8(seo, _mm256_set1_epi16((short)((2 * c + 1) << 8 | 2 * c)));
#pragma GCC unroll 4
                for (int t = 0; t < nt; t++) {
                    __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(ar[t].q + QK_K * b + 32 * c));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(sv, _mm256_maddubs_epi16(q, qy)));
                }
            }
        }
        __m256i sc16 = _mm256_cvtepi8_epi16(sc);
        float d = h2f(x->d);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            __m256i cl = _mm256_slli_epi32(_mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(const void *)(ar[t].bsums + 16 * b)), sc16), 5);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(ar[t].d[b] * d),
                                     _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], cl)), acc[t]);
        }
    }
    rows_out(out, ldo, acc, nt);
}

/* Q5_K, one row by nt (1..SB_MAX) tokens: kquant_row's arithmetic (the
 * lanes sum over the 8 chunks of scale * the 4-element sums, msum = the
 * exact sum of min * the chunk's activation sum; acc = fma(yd * d, lanes,
 * acc), sacc = fma(-yd * dmin, msum, sacc); hsum8(acc) + sacc) with the
 * codes, scales and mins read straight from the block instead of through
 * k_unpack, and unpacked once for the nt tokens.  The decode (nt = 1) and
 * the small batches of a verify pass. */
static inline __attribute__((always_inline)) void
q5k_rows(float *out, int64_t ldo, const uint8_t *row, const struct act_row *ar, int nt, int64_t nb)
{
    const __m256i m15 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    __m256 acc[SB_MAX];
    float sacc[SB_MAX];

#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        sacc[t] = 0.0f;
    }
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q5_K *x = (const struct block_q5_K *)(const void *)row + b;
        uint64_t sc8, mn8;
        k4_scales8(x->scales, &sc8, &mn8);
        /* the 8 scales as int16 in both lanes; chunk j takes pair j */
        __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
        __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)x->qh);
        __m256i sumi[SB_MAX];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32 * c));
            /* bit j of each qh byte (chunk j = 2c, 2c + 1) moved to bit 4 */
            __m256i h0 = _mm256_and_si256(2 * c <= 4 ? _mm256_slli_epi16(hb, 4 - 2 * c)
                                                     : _mm256_srli_epi16(hb, 2 * c - 4), b4);
            __m256i h1 = _mm256_and_si256(2 * c + 1 <= 4 ? _mm256_slli_epi16(hb, 3 - 2 * c)
                                                         : _mm256_srli_epi16(hb, 2 * c - 3), b4);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m15), h0);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m15), h1);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++)
                sumi[t] = _mm256_add_epi32(sumi[t], k4_pair_sums(lo, hi, ar[t].q + QK_K * b + 64 * c, s16, c));
        }
        /* msum: the 8 mins times the pair sums of the 16 bsums */
        __m128i mn16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn8));
        float d = h2f(x->d), dmin = h2f(x->dmin);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            float yd = ar[t].d[b];
            __m128i mv = _mm_madd_epi16(mn16, bsum_pairs(ar[t].bsums + 16 * b));
            mv = _mm_add_epi32(mv, _mm_unpackhi_epi64(mv, mv));
            mv = _mm_add_epi32(mv, _mm_shuffle_epi32(mv, 0xb1));
            int32_t msum = _mm_cvtsi128_si32(mv);
            sacc[t] = fmadd_ss(-yd * dmin, (float)msum, sacc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(yd * d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        out[t * ldo] = hsum8(acc[t]) + sacc[t];
}

/* chunk c's int16 scale vector (lanes 0..7: byte 2c of s, 8..15: byte
 * 2c + 1), from 16 signed or unsigned bytes */
static inline __m256i
k_scale_pair16(__m128i s, int c, int is_signed)
{
    __m128i b = _mm_shuffle_epi8(s, _mm_setr_epi8((char)(2 * c), (char)(2 * c), (char)(2 * c), (char)(2 * c),
                                                  (char)(2 * c), (char)(2 * c), (char)(2 * c), (char)(2 * c),
                                                  (char)(2 * c + 1), (char)(2 * c + 1), (char)(2 * c + 1), (char)(2 * c + 1),
                                                  (char)(2 * c + 1), (char)(2 * c + 1), (char)(2 * c + 1), (char)(2 * c + 1)));
    return is_signed ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
}

/* The scaled lane sums of super-block b of a Q2_K or Q3_K row (its 8
 * chunks of 32 2-bit codes qs) against each of nt tokens' codes, in
 * sumi[t]: chunk c's int16 pair sums times its scale pair (k_scale_pair16
 * of sc: unsigned for Q2_K, signed for Q3_K), the codes unpacked once for
 * the nt tokens.  With hmask (Q3_K) the code is u = q + 4, bit c of each
 * hmask byte adding the 4, and maddubs(4, y) is subtracted: the same int16
 * pair sums as the sign form. */
static inline __attribute__((always_inline)) void
k2bit_sumi(__m256i *sumi, const uint8_t *qs, const struct act_row *ar, int nt, int64_t b, __m128i sc,
           const uint8_t *hmask)
{
    const __m256i m3 = _mm256_set1_epi8(3), f4 = _mm256_set1_epi8(4);
    __m256i hm = hmask ? _mm256_loadu_si256((const __m256i *)(const void *)hmask) : f4;
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * h));
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            int c = 4 * h + g;
            __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3);
            if (hmask) {
                /* bit c of each hmask byte moved to bit 2 */
                __m256i hb = _mm256_and_si256(c <= 2 ? _mm256_slli_epi16(hm, 2 - c) : _mm256_srli_epi16(hm, c - 2), f4);
                q = _mm256_or_si256(q, hb);
            }
            __m256i sp = k_scale_pair16(sc, c, hmask != NULL);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(ar[t].q + QK_K * b + 32 * c));
                __m256i pr = hmask ? _mm256_sub_epi16(_mm256_maddubs_epi16(q, qy), _mm256_maddubs_epi16(f4, qy))
                                   : _mm256_maddubs_epi16(q, qy);
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(sp, pr));
            }
        }
    }
}

/* Q2_K, one row by nt (1..SB_MAX) tokens: kquant_row's arithmetic (acc =
 * fma(-yd * dmin, the lanes of the mins times the bsums, acc), then acc =
 * fma(yd * d, the scaled lane sums, acc); hsum8(acc)) straight from the
 * block, unpacked once for the nt tokens. */
static inline __attribute__((always_inline)) void
q2k_rows(float *out, int64_t ldo, const uint8_t *row, const struct act_row *ar, int nt, int64_t nb)
{
    const __m128i m15 = _mm_set1_epi8(15);
    __m256 acc[SB_MAX];

#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q2_K *x = (const struct block_q2_K *)(const void *)row + b;
        __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)x->scales);
        __m128i sl = _mm_and_si128(sc, m15);
        __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m15));
        __m256i sumi[SB_MAX];
        k2bit_sumi(sumi, x->qs, ar, nt, b, sl, NULL);
        float d = h2f(x->d), dmin = h2f(x->dmin);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            float yd = ar[t].d[b];
            __m256 mv = _mm256_cvtepi32_ps(_mm256_madd_epi16(
                mn, _mm256_loadu_si256((const __m256i *)(const void *)(ar[t].bsums + 16 * b))));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-yd * dmin), mv, acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(yd * d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    rows_out(out, ldo, acc, nt);
}

/* Q3_K, one row by nt (1..SB_MAX) tokens: kquant_row's lanes (the signed
 * codes q in -4..3, per-16 scales sc - 32) from the unsigned u = q + 4 (the
 * low bits, 4 where the hmask bit is set): maddubs(u, y) - maddubs(4, y) is
 * the same int16 pair sums as the sign form; acc = fma(d * yd, lanes, acc);
 * hsum8(acc); the block unpacked once for the nt tokens. */
static inline __attribute__((always_inline)) void
q3k_rows(float *out, int64_t ldo, const uint8_t *row, const struct act_row *ar, int nt, int64_t nb)
{
    __m256 acc[SB_MAX];

#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q3_K *x = (const struct block_q3_K *)(const void *)row + b;
        /* the 16 6-bit scales in order (as ggml's aux words), minus 32 */
        uint32_t a0, a1, t3;
        memcpy(&a0, x->scales, 4);
        memcpy(&a1, x->scales + 4, 4);
        memcpy(&t3, x->scales + 8, 4);
        const uint32_t k1 = 0x03030303u, k2 = 0x0f0f0f0fu;
        __m128i sc = _mm_setr_epi32((int)((a0 & k2) | ((t3 >> 0) & k1) << 4), (int)((a1 & k2) | ((t3 >> 2) & k1) << 4),
                                    (int)(((a0 >> 4) & k2) | ((t3 >> 4) & k1) << 4),
                                    (int)(((a1 >> 4) & k2) | ((t3 >> 6) & k1) << 4));
        sc = _mm_sub_epi8(sc, _mm_set1_epi8(32));
        __m256i sumi[SB_MAX];
        k2bit_sumi(sumi, x->qs, ar, nt, b, sc, x->hmask);
        acc_sumi(acc, sumi, h2f(x->d), ar, nt, b);
    }
    rows_out(out, ldo, acc, nt);
}

/* IQ4_XS, one row by nt (1..SB_MAX) tokens: kquant_row's lanes (the codes'
 * table values, the sign form of maddubs, per-32 scales ls - 32); acc =
 * fma(d * yd, lanes, acc); hsum8(acc); each sub-block's codes looked up
 * once for the nt tokens. */
static inline __attribute__((always_inline)) void
iq4xs_rows(float *out, int64_t ldo, const uint8_t *row, const struct act_row *ar, int nt, int64_t nb)
{
    const __m256i lut = iq4nl_lut();
    __m256 acc[SB_MAX];

#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct block_iq4_xs *x = (const struct block_iq4_xs *)(const void *)row + b;
        __m256i sumi[SB_MAX];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int ib = 0; ib < 8; ib++) {
            int lo4 = (x->scales_l[ib / 2] >> (4 * (ib & 1))) & 15;
            int hi2 = (x->scales_h >> (2 * ib)) & 3;
            __m256i q = _mm256_shuffle_epi8(lut, nibbles32(x->qs + 16 * ib));
            __m256i qa = _mm256_sign_epi8(q, q);
            __m256i ls = _mm256_set1_epi16((short)((lo4 | hi2 << 4) - 32));
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(ar[t].q + QK_K * b + 32 * ib));
                __m256i pr = _mm256_maddubs_epi16(qa, _mm256_sign_epi8(qy, q));
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(ls, pr));
            }
        }
        acc_sumi(acc, sumi, h2f(x->d), ar, nt, b);
    }
    rows_out(out, ldo, acc, nt);
}

/* the decode's one-row functions (nt = 1) */
#define ROW1(name, rows)                                                        \
    static float name(const uint8_t *row, const struct act_row *ar, int64_t nb) \
    {                                                                           \
        float r;                                                                \
        rows(&r, 1, row, ar, 1, nb);                                            \
        return r;                                                               \
    }
ROW1(q2k_row1, q2k_rows)
ROW1(q3k_row1, q3k_rows)
ROW1(q5k_row1, q5k_rows)
ROW1(q6k_row1, q6k_rows)
ROW1(iq4xs_row1, iq4xs_rows)
#undef ROW1

/* decode (one token) of a Q8_K-activation type (the k-quants, IQ4_XS); 0
 * for a type without a direct path */
static int
kquant_decode(float *y, const uint8_t *w, size_t row_bytes, uint32_t type, const uint8_t *act,
              int64_t cols, int64_t r0, int64_t r1)
{
    struct act_row ar;
    const int64_t nb = cols / QK_K;

    act_row_at(&ar, ACT_Q8_K, act, cols);
    float (*row1)(const uint8_t *, const struct act_row *, int64_t) =
        type == T_Q2_K ? q2k_row1 : type == T_Q3_K ? q3k_row1 : type == T_Q5_K ? q5k_row1
      : type == T_Q6_K ? q6k_row1 : type == T_IQ4_XS ? iq4xs_row1 : NULL;
    if (type != T_Q4_K) {
        if (!row1)
            return 0;
        for (int64_t r = r0; r < r1; r++)
            y[r] = row1(w + (size_t)r * row_bytes, &ar, nb);
        return 1;
    }
    const int64_t pf_lines = (int64_t)((8 * row_bytes + 63) / 64);
    for (; r0 + 8 <= r1; r0 += 8) {
        const uint8_t *row0 = w + (size_t)r0 * row_bytes;
        q4k_rows8(y + r0, 1, row0, row_bytes, &ar, 1, nb, (const char *)row0 + 16 * row_bytes, pf_lines);
    }
    for (; r0 < r1; r0++)
        kquant_row(y + r0, 1, w + (size_t)r0 * row_bytes, NULL, T_Q4_K, &ar, 1, nb);
    return 1;
}

/* A k-quant or IQ4_XS, 2..SB_TOK_MAX tokens (a verify pass, a batch of a
 * few sequences; the avx512 table sends up to OPS_MM_KSMALL_MAX through
 * ops_mm_kquant_small_avx2): q4k_rows8 for groups of 8 Q4_K rows (the rest
 * one row at a time by kquant_row), the other types' one-row kernels
 * (q2k_rows .. iq4xs_rows); each row group against every token group (small_group) while
 * it is in L1, every (row, token) with the decode's arithmetic, so that a
 * token's outputs are its outputs alone.  The batch kernel (kquant_row, one
 * row at a time from an unpacked struct) had cost 3-3.6 decodes for 2
 * tokens of Q4_K. */
static int
kquant_small(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             const uint8_t *act, size_t arb, int n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    struct act_row ar[OPS_MM_KSMALL_MAX];
    const int64_t nb = cols / QK_K;

    if (type != T_Q2_K && type != T_Q3_K && type != T_Q4_K && type != T_Q5_K && type != T_Q6_K &&
        type != T_IQ4_XS)
        return 0;
    for (int t = 0; t < n_tok; t++)
        act_row_at(&ar[t], ACT_Q8_K, act + (size_t)t * arb, cols);
    for (int64_t r = r0; r < r1;) {
        int nr = type == T_Q4_K && r + 8 <= r1 ? 8 : 1;
        const uint8_t *row = w + (size_t)r * row_bytes;
        /* Q4_K: the first token group asks for the 8-row group after next, as
         * the decode (the other types' kernels do not prefetch, nor their decode) */
        const char *pf = (const char *)row + 16 * row_bytes;
        for (int t0 = 0, nt; t0 < n_tok; t0 += nt) {
            nt = small_group(n_tok - t0);
            float *o = y + t0 * ldy + r;
            const struct act_row *at = ar + t0;
            /* instantiated for a literal token count */
#define BY_NT(F, ...) switch (nt) { case 2: F(__VA_ARGS__, 2, nb); break; \
                                    case 3: F(__VA_ARGS__, 3, nb); break; \
                                    default: F(__VA_ARGS__, 4, nb); break; }
            if (type == T_Q6_K) {
                BY_NT(q6k_rows, o, ldy, row, at);
            } else if (type == T_Q5_K) {
                BY_NT(q5k_rows, o, ldy, row, at);
            } else if (type == T_Q3_K) {
                BY_NT(q3k_rows, o, ldy, row, at);
            } else if (type == T_Q2_K) {
                BY_NT(q2k_rows, o, ldy, row, at);
            } else if (type == T_IQ4_XS) {
                BY_NT(iq4xs_rows, o, ldy, row, at);
            } else if (nr == 8) {
#define Q4R(...) q4k_rows8(__VA_ARGS__, pf, t0 == 0 ? (int64_t)((8 * row_bytes + 63) / 64) : 0)
                BY_NT(Q4R, o, ldy, row, row_bytes, at);
#undef Q4R
            } else {
#define KR(o, ldy, row, at, n, nb) kquant_row(o, ldy, row, NULL, T_Q4_K, at, n, nb)
                BY_NT(KR, o, ldy, row, at);
#undef KR
            }
#undef BY_NT
        }
        r += nr;
    }
    return 1;
}

int
ops_mm_kquant_small_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                         const void *work, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    if (n_tok < 2 || n_tok > OPS_MM_KSMALL_MAX)
        return 0;
    return kquant_small(y, ldy, w, row_bytes, wtype, work, act_row_bytes(ACT_Q8_K, cols),
                        (int)n_tok, cols, r0, r1);
}

/* Rows [r0, r1) of a k-quant for all n_tok tokens from unpacked row tiles
 * (struct ksb per super-block); 0 when one row does not fit the buffer. */
/* ---- float weights ---- */

static inline __attribute__((always_inline)) __m256
load_w8(const void *row, uint32_t type, int64_t i)
{
    if (type == T_F32)
        return _mm256_loadu_ps((const float *)row + i);
    if (type == T_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + i)));
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

static inline float
load_w1(const void *row, uint32_t type, int64_t i)
{
    if (type == T_F32)
        return ((const float *)row)[i];
    if (type == T_F16)
        return qconv_fp16_to_fp32(((const uint16_t *)row)[i]);
    return qconv_bf16_to_fp32(((const uint16_t *)row)[i]);
}

/* vecdot_f32_f16_as's end: the accumulators' reduction and the leftovers */
static inline __attribute__((always_inline)) float
vecdot_f32_f16_end(__m256 *a, const void *row, uint32_t type, uint32_t ttype, const float *x,
                   int64_t np, int64_t n)
{
    int64_t i;
    a[0] = _mm256_add_ps(a[0], a[2]);
    a[1] = _mm256_add_ps(a[1], a[3]);
    a[0] = _mm256_add_ps(a[0], a[1]);
    __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(a[0]), _mm256_extractf128_ps(a[0], 1));
    __m128 t1 = _mm_hadd_ps(t0, t0);
    float s = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    if (ttype == T_F32) {
        for (i = np; i < n; i++)
            s = fmadd_ss(load_w1(row, type, i), x[i], s);
        return s;
    }
    double sd = s;
    for (i = np; i < n; i++)
        sd += (double)(load_w1(row, type, i) * x[i]);
    return (float)sd;
}

/* ggml_vec_dot_f32 / _f16 (batch of one): 4 accumulators over steps of 32
 * (element i in accumulator (i / 8) % 4, lane i % 8), reduced as
 * (a0 + a2) + (a1 + a3), then (lo + hi) and two hadds; leftovers added
 * one by one (f32 for F32, double for F16). */
static inline __attribute__((always_inline)) float
vecdot_f32_f16_as(const void *row, uint32_t type, uint32_t ttype, const float *x, int64_t n)
{
    __m256 a[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    int64_t np = n & ~(int64_t)31, i;

    for (i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            a[j] = _mm256_fmadd_ps(load_w8(row, type, i + 8 * j), _mm256_loadu_ps(x + i + 8 * j), a[j]);
    return vecdot_f32_f16_end(a, row, type, ttype, x, np, n);
}

/* F16 decode: vecdot_f32_f16_as for two rows at once (their chains are
 * independent; each activation vector is loaded once for both), with the
 * prefetch of the rows after next spread over the steps. */
static void
f16_decode(float *y, const uint8_t *w, size_t row_bytes, const float *x, int64_t n, int64_t r0,
           int64_t r1)
{
    const int64_t np = n & ~(int64_t)31;
    const int64_t pf_lines = (int64_t)((2 * row_bytes + 63) / 64), steps = np / 32;
    int64_t r = r0;

    for (; steps > 0 && r + 2 <= r1; r += 2) {
        const uint8_t *w0 = w + (size_t)r * row_bytes, *w1 = w0 + row_bytes;
        const char *pf = (const char *)w0 + 4 * row_bytes;
        __m256 a[4], b[4];
        for (int j = 0; j < 4; j++)
            a[j] = b[j] = _mm256_setzero_ps();
        int64_t pfl = 0, pfa = 0;
        for (int64_t i = 0; i < np; i += 32) {
            pf_spread(pf, &pfl, &pfa, pf_lines, steps);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m256 xv = _mm256_loadu_ps(x + i + 8 * j);
                a[j] = _mm256_fmadd_ps(load_w8(w0, T_F16, i + 8 * j), xv, a[j]);
                b[j] = _mm256_fmadd_ps(load_w8(w1, T_F16, i + 8 * j), xv, b[j]);
            }
        }
        y[r] = vecdot_f32_f16_end(a, w0, T_F16, T_F16, x, np, n);
        y[r + 1] = vecdot_f32_f16_end(b, w1, T_F16, T_F16, x, np, n);
    }
    for (; r < r1; r++)
        y[r] = vecdot_f32_f16_as(w + (size_t)r * row_bytes, T_F16, T_F16, x, n);
}

/* type: how the row is stored and loaded; the arithmetic (the leftovers'
 * accumulation) is that of ggml's kernel for that type */
static float
vecdot_f32_f16(const void *row, uint32_t type, const float *x, int64_t n)
{
    /* literal types: each instance compiled without run-time type tests */
    if (type == T_F16)
        return vecdot_f32_f16_as(row, T_F16, T_F16, x, n);
    return vecdot_f32_f16_as(row, T_F32, T_F32, x, n);
}

/* ggml_vec_dot_bf16 (AVX2): 4 accumulators of separate multiply and add,
 * (c1 + c3) + (c2 + c4), hsum8, then double leftovers. */
static inline __attribute__((always_inline)) float
vecdot_bf16_as(const void *row, uint32_t type, const float *x, int64_t n)
{
    __m256 c[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    int64_t i = 0;

    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++)
            c[j] = _mm256_add_ps(_mm256_mul_ps(load_w8(row, type, i + 8 * j),
                                               _mm256_loadu_ps(x + i + 8 * j)), c[j]);
    __m256 s = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
    double sd = (double)hsum8(s);
    for (; i < n; i++)
        sd += (double)(load_w1(row, type, i) * x[i]);
    return (float)sd;
}

static float
vecdot_bf16(const void *row, const float *x, int64_t n)
{
    return vecdot_bf16_as(row, T_BF16, x, n);
}

/* ggml_vec_dot_f16 for FRB widened rows x FTB tokens at once.  The four
 * accumulators of one (row, token) are independent chains, so each is run
 * for the whole block before the next (j outer): 8 chains in registers,
 * every loaded vector used 2 or 4 times, instead of two loads per fused
 * multiply-add.  Each chain sees the same operands in the same order as in
 * vecdot_f32_f16_as, and the reduction is its own: the same bits. */
#define FRB 2
#define FTB 4

static inline __attribute__((always_inline)) void
f16_block(float *y, int64_t ldy, const float *w, int64_t ldw, uint32_t ttype, int64_t cols, int nr,
          const float *const *xs, int nt)
{
    const int64_t np = cols & ~(int64_t)31;
    const float *w0 = w, *w1 = w + (nr > 1 ? ldw : 0);
    const float *x0 = xs[0], *x1 = xs[nt > 1 ? 1 : 0], *x2 = xs[nt > 2 ? 2 : 0], *x3 = xs[nt > 3 ? 3 : 0];
    __m256 part[4][FRB * FTB];

    for (int j = 0; j < 4; j++) {
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
        __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
        for (int64_t i = 8 * j; i < np; i += 32) {
            __m256 v0 = _mm256_loadu_ps(x0 + i), v1 = _mm256_loadu_ps(x1 + i);
            __m256 v2 = _mm256_loadu_ps(x2 + i), v3 = _mm256_loadu_ps(x3 + i);
            __m256 wv = _mm256_loadu_ps(w0 + i);
            a00 = _mm256_fmadd_ps(wv, v0, a00);
            a01 = _mm256_fmadd_ps(wv, v1, a01);
            a02 = _mm256_fmadd_ps(wv, v2, a02);
            a03 = _mm256_fmadd_ps(wv, v3, a03);
            wv = _mm256_loadu_ps(w1 + i);
            a10 = _mm256_fmadd_ps(wv, v0, a10);
            a11 = _mm256_fmadd_ps(wv, v1, a11);
            a12 = _mm256_fmadd_ps(wv, v2, a12);
            a13 = _mm256_fmadd_ps(wv, v3, a13);
        }
        part[j][0] = a00, part[j][1] = a01, part[j][2] = a02, part[j][3] = a03;
        part[j][4] = a10, part[j][5] = a11, part[j][6] = a12, part[j][7] = a13;
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) {
            __m256 a[4] = { part[0][r * FTB + t], part[1][r * FTB + t], part[2][r * FTB + t],
                            part[3][r * FTB + t] };
            y[t * ldy + r] = vecdot_f32_f16_end(a, r ? w1 : w0, T_F32, ttype, xs[t], np, cols);
        }
}

/* F32 rows [r0, r1) for a batch of F32 activations: f16_block on the rows
 * where they lie (ldw floats apart), with ggml_vec_dot_f32's leftovers
 * (ttype T_F32); a tile of rows stays in cache while every group of FTB
 * tokens passes over it.  Each (row, token) is vecdot_f32_f16_as's chain
 * for a batch of one: the same bits as the token-by-token loop. */
static void
f32_tiles(float *y, int64_t ldy, const float *w, int64_t ldw, const float *x, int64_t ldx,
          int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    int64_t R = (int64_t)(TILE_BYTES / ((size_t)cols * sizeof(float)));

    if (R < FRB)
        R = FRB;
    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        for (int64_t t0 = 0; t0 < n_tok; t0 += FTB) {
            int nt = n_tok - t0 < FTB ? (int)(n_tok - t0) : FTB;
            const float *xs[FTB];
            for (int t = 0; t < nt; t++)
                xs[t] = x + (t0 + t) * ldx;
            for (int64_t i = 0; i < nr; i += FRB)
                f16_block(y + t0 * ldy + rb + i, ldy, w + (rb + i) * ldw, ldw, T_F32, cols,
                          nr - i < FRB ? (int)(nr - i) : FRB, xs, nt);
        }
    }
}

/* F16 / BF16 rows [r0, r1) for a batch: tiles of rows widened to f32 once
 * (exact), then each token's ggml_vec_dot_f16 / _bf16 reads the tile; 0 when
 * one row does not fit. */
static int
float_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
            const uint8_t *act, size_t arb, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    static __thread float buf[TILE_BYTES / sizeof(float)] __attribute__((aligned(32)));
    size_t rowu = (size_t)cols * sizeof(float);

    if (rowu > sizeof(buf))
        return 0;
    int64_t R = (int64_t)(sizeof(buf) / rowu);
    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        for (int64_t i = 0; i < nr; i++) {
            const uint8_t *row = w + (size_t)(rb + i) * row_bytes;
            float *d = buf + i * cols;
            int64_t c = 0;
            for (; c + 8 <= cols; c += 8)
                _mm256_storeu_ps(d + c, load_w8(row, type, c));
            for (; c < cols; c++)
                d[c] = load_w1(row, type, c);
        }
        if (type == T_F16) {
            for (int64_t t0 = 0; t0 < n_tok; t0 += FTB) {
                int nt = n_tok - t0 < FTB ? (int)(n_tok - t0) : FTB;
                const float *xs[FTB];
                for (int t = 0; t < nt; t++)
                    xs[t] = (const float *)(const void *)(act + (size_t)(t0 + t) * arb);
                for (int64_t i = 0; i < nr; i += FRB)
                    f16_block(y + t0 * ldy + rb + i, ldy, buf + i * cols, cols, T_F16, cols,
                              nr - i < FRB ? (int)(nr - i) : FRB, xs, nt);
            }
            continue;
        }
        for (int64_t t = 0; t < n_tok; t++) {
            const float *xt = (const float *)(const void *)(act + (size_t)t * arb);
            for (int64_t i = 0; i < nr; i++)
                y[t * ldy + rb + i] = type == T_BF16
                                          ? vecdot_bf16_as(buf + i * cols, T_F32, xt, cols)
                                          : vecdot_f32_f16_as(buf + i * cols, T_F32, T_F16, xt, cols);
        }
    }
    return 1;
}

/* ---- the row kernel ---- */

static void
rows_tile(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t wtype, enum act a,
          const uint8_t *act, size_t arb, int64_t t0, int nt, int64_t cols, int64_t r0, int64_t r1)
{
    struct act_row ar[NT];

    for (int t = 0; t < nt; t++)
        act_row_at(&ar[t], a, act + (size_t)(t0 + t) * arb, cols);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w + (size_t)r * row_bytes;
        float *out = y + t0 * ldy + r;
        switch (a) {
        case ACT_Q8_0:
        case ACT_Q8_1:
            /* constant type and token count: each instance is specialized */
#define LEG(ty, n) legacy_row(out, ldy, row, ty, ar, n, cols / 32)
#define LEG_NT(ty) switch (nt) { case 1: LEG(ty, 1); break; case 2: LEG(ty, 2); break; \
                                 case 3: LEG(ty, 3); break; default: LEG(ty, 4); break; }
            switch (wtype) {
            case T_Q4_0: LEG_NT(T_Q4_0); break;
            case T_Q4_1: LEG_NT(T_Q4_1); break;
            case T_Q5_0: LEG_NT(T_Q5_0); break;
            case T_Q5_1: LEG_NT(T_Q5_1); break;
            case T_Q8_0: LEG_NT(T_Q8_0); break;
            default: LEG_NT(T_IQ4_NL); break;
            }
#undef LEG_NT
#undef LEG
            continue;
        default:
#define KQ(ty, n) kquant_row(out, ldy, row, NULL, ty, ar, n, cols / QK_K)
#define KQ_NT(ty) switch (nt) { case 1: KQ(ty, 1); break; case 2: KQ(ty, 2); break; \
                                case 3: KQ(ty, 3); break; default: KQ(ty, 4); break; }
            switch (wtype) {
            case T_Q2_K: KQ_NT(T_Q2_K); break;
            case T_Q3_K: KQ_NT(T_Q3_K); break;
            case T_Q4_K: KQ_NT(T_Q4_K); break;
            case T_Q5_K: KQ_NT(T_Q5_K); break;
            case T_Q6_K: KQ_NT(T_Q6_K); break;
            default: KQ_NT(T_IQ4_XS); break;
            }
#undef KQ_NT
#undef KQ
            break;
        }
    }
}

void
ops_mm_rows_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                 const void *work, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
                 int64_t r0, int64_t r1, float *tmp)
{
    enum act a = act_type(wtype);
    size_t arb = act_row_bytes(a, cols);
    const uint8_t *wb = w, *act = work;

    (void)tmp;
    if (a == ACT_NONE)
        return;
    if (a == ACT_F32 || a == ACT_F16 || a == ACT_BF16) {
        /* ggml_vec_dot_* per token, whatever the batch */
        if ((wtype == T_F16 || wtype == T_BF16) && n_tok >= TILE_MIN &&
            float_tiles(y, ldy, wb, row_bytes, wtype, act, arb, n_tok, cols, r0, r1))
            return;
        if (wtype == T_F32 && n_tok >= TILE_MIN && row_bytes % sizeof(float) == 0) {
            f32_tiles(y, ldy, (const float *)w, (int64_t)(row_bytes / sizeof(float)), x, ldx, n_tok,
                      cols, r0, r1);
            return;
        }
        if (wtype == T_F16 && n_tok == 1) {
            f16_decode(y, wb, row_bytes, (const float *)(const void *)act, cols, r0, r1);
            return;
        }
        {
            for (int64_t t = 0; t < n_tok; t++) {
                const float *xt = a == ACT_F32 ? x + t * ldx
                                               : (const float *)(const void *)(act + (size_t)t * arb);
                for (int64_t r = r0; r < r1; r++) {
                    const uint8_t *row = wb + (size_t)r * row_bytes;
                    y[t * ldy + r] = a == ACT_BF16 ? vecdot_bf16(row, xt, cols)
                                                   : vecdot_f32_f16(row, wtype, xt, cols);
                }
            }
            return;
        }
    }
    if (n_tok == 1 && (a == ACT_Q8_0 || a == ACT_Q8_1)) {
        legacy_decode(y, wb, row_bytes, wtype, act, cols, r0, r1);
        return;
    }
    if (n_tok >= 2 && n_tok <= SB_TOK_MAX && (a == ACT_Q8_0 || a == ACT_Q8_1)) {
        legacy_small(y, ldy, wb, row_bytes, wtype, act, arb, (int)n_tok, cols, r0, r1);
        return;
    }
    if (n_tok >= TILE_MIN && (a == ACT_Q8_0 || a == ACT_Q8_1) &&
        legacy_tiles(y, ldy, wb, row_bytes, wtype, a, act, arb, n_tok, cols, r0, r1))
        return;
    if (n_tok == 1 && a == ACT_Q8_K && kquant_decode(y, wb, row_bytes, wtype, act, cols, r0, r1))
        return;
    if (n_tok >= 2 && n_tok <= SB_TOK_MAX && a == ACT_Q8_K &&
        kquant_small(y, ldy, wb, row_bytes, wtype, act, arb, (int)n_tok, cols, r0, r1))
        return;
    if (n_tok >= TILE_MIN && a == ACT_Q8_K &&
        kquant_tiles(y, ldy, wb, row_bytes, wtype, act, arb, n_tok, cols, r0, r1))
        return;
    for (int64_t rb = r0; rb < r1; rb += ROW_TILE) {
        int64_t re = rb + ROW_TILE < r1 ? rb + ROW_TILE : r1;
        for (int64_t t0 = 0; t0 < n_tok; t0 += NT) {
            int nt = n_tok - t0 < NT ? (int)(n_tok - t0) : NT;
            rows_tile(y, ldy, wb, row_bytes, wtype, a, act, arb, t0, nt, cols, rb, re);
        }
    }
}
