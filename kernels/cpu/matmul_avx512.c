/*
 * matmul_avx512.c - the batched (prefill) matmul kernels for CPUs with
 * AVX-512 F/BW/VL/DQ and VNNI, bit-identical with the AVX2 kernels
 * (cpu/matmul_avx2.c) and so with llama.cpp's AVX2 arithmetic.
 *
 * This file is compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq
 * -mavx512vnni -mfma -mf16c and is only entered through kernel_ops_avx512
 * after the run-time CPU check in kernels/dispatch.c.
 *
 * Same bits, fewer instructions:
 *   legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): ggml's int32 lane k
 *       of a block is the sum of the products of bytes 4k..4k+3, which AVX2
 *       gets from sign/maddubs/madd and VPDPBUSD gets in one instruction.
 *       VPDPBUSD multiplies unsigned by signed bytes, so the weight codes
 *       are stored offset to unsigned (u = code + off, off = 128 for the
 *       signed types, 8 for Q4_0, 0 for Q4_1/Q5_1) and each lane starts from
 *       -off * (the sum of the 4 activation codes of that lane), computed
 *       once per token and block: the same exact integer per lane.  The f32
 *       operations that follow (scale products, fused multiply-adds in block
 *       order, the horizontal sums) are the AVX2 kernels' own.  Two weight
 *       rows share each activation load.
 *   F16: ggml_vec_dot_f16's four 8-lane accumulators are independent, so a
 *       512-bit register carries two of them (elements i..i+15 of a step of
 *       32 are accumulators 0 and 1): each lane sees the same operands in
 *       the same order, and the reduction is the AVX2 one.  Tiles of 4 rows
 *       x 4 tokens.
 * Everything else (decode, k-quants, F32, BF16, small batches) is the AVX2
 * kernels' (ops_mm_rows_avx2).
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "qblock.h"
#include "cpu/matmul_avx2.h"
#include "cpu/matmul_avx512.h"
#include "cpu/mm_layout.h"
#include "cpu/simd_avx2.h"

#define TG 8                    /* tokens per group */
#define TILE_MIN 4              /* fewer tokens: the AVX2 paths */
#define TILE_BYTES (40 * 1024)  /* unpacked weight rows per tile */
#define G_MAX_NB 256            /* blocks per row a group holds (8192 columns) */

/* A group of up to TG tokens' activations, transposed per block. */
struct vgroup {
    int nt;
    const int8_t *q[TG];
    float dT[G_MAX_NB * TG] __attribute__((aligned(32)));   /* [block][token] */
    float sT[G_MAX_NB * TG] __attribute__((aligned(32)));   /* Q8_1 s */
    __m256i c[G_MAX_NB * TG];   /* [block][token]: -off * the 4-code lane sums */
};

static void
vgroup_fill(struct vgroup *g, enum act a, const uint8_t *act, size_t arb, int64_t t0, int nt,
            int64_t cols, int64_t nb, int off)
{
    struct act_row ar;
    const __m256i uoff = _mm256_set1_epi8((char)off);

    g->nt = nt;
    for (int t = 0; t < TG; t++) {
        act_row_at(&ar, a, act + (size_t)(t0 + (t < nt ? t : 0)) * arb, cols);
        g->q[t] = ar.q;
        for (int64_t b = 0; b < nb; b++) {
            g->dT[b * TG + t] = t < nt ? ar.d[b] : 0.0f;
            g->sT[b * TG + t] = t < nt && a == ACT_Q8_1 ? ar.s[b] : 0.0f;
            if (off) {
                __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(ar.q + 32 * b));
                g->c[b * TG + t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                                    _mm256_dpbusd_epi32(_mm256_setzero_si256(), uoff, y));
            }
        }
    }
}

/* The int32 lanes of ggml's block dot for (weight block x, token t, block b) */
static inline __attribute__((always_inline)) __m256i
vlanes(const struct vgroup *g, __m256i x, __m256i y, int t, int64_t b, int off)
{
    __m256i c = off ? g->c[b * TG + t] : _mm256_setzero_si256();
    return _mm256_dpbusd_epi32(c, x, y);
}

/* Two unpacked rows (nr = 1 or 2; u codes offset to unsigned) of a type
 * with ggml_vec_dot's lane arithmetic (Q8_0, Q5_0, Q4_1, Q5_1) against the
 * group's nt tokens: legacy_tile_row of cpu/matmul_avx2.c, two rows at a
 * time. */
static inline __attribute__((always_inline)) void
lanes_rows2(float *out, int64_t ldo, const uint8_t *u0, const uint8_t *u1, const float *d0,
            const float *d1, const float *m0, const float *m1, const struct vgroup *g, int nt,
            int nr, int off, int has_min, int64_t nb)
{
    __m256 a0[TG], a1[TG], mc0 = _mm256_setzero_ps(), mc1 = _mm256_setzero_ps();
    float dd0[TG] __attribute__((aligned(32))), dd1[TG] __attribute__((aligned(32)));

#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i x0 = _mm256_load_si256((const __m256i *)(const void *)(u0 + 32 * b));
        __m256i x1 = _mm256_load_si256((const __m256i *)(const void *)(u1 + 32 * b));
        __m256 dT = _mm256_load_ps(g->dT + TG * b);
        _mm256_store_ps(dd0, _mm256_mul_ps(_mm256_set1_ps(d0[b]), dT));
        _mm256_store_ps(dd1, _mm256_mul_ps(_mm256_set1_ps(d1[b]), dT));
        if (has_min) {
            __m256 sT = _mm256_load_ps(g->sT + TG * b);
            mc0 = _mm256_fmadd_ps(_mm256_set1_ps(m0[b]), sT, mc0);
            mc1 = _mm256_fmadd_ps(_mm256_set1_ps(m1[b]), sT, mc1);
        }
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(g->q[t] + 32 * b));
            a0[t] = _mm256_fmadd_ps(_mm256_set1_ps(dd0[t]),
                                    _mm256_cvtepi32_ps(vlanes(g, x0, y, t, b, off)), a0[t]);
            a1[t] = _mm256_fmadd_ps(_mm256_set1_ps(dd1[t]),
                                    _mm256_cvtepi32_ps(vlanes(g, x1, y, t, b, off)), a1[t]);
        }
    }
    float ms0[TG] __attribute__((aligned(32))), ms1[TG] __attribute__((aligned(32)));
    _mm256_store_ps(ms0, mc0);
    _mm256_store_ps(ms1, mc1);
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        out[t * ldo] = has_min ? hsum8(a0[t]) + ms0[t] : hsum8(a0[t]);
        if (nr > 1)
            out[t * ldo + 1] = has_min ? hsum8(a1[t]) + ms1[t] : hsum8(a1[t]);
    }
}

/* Two unpacked Q4_0 / IQ4_NL rows (the repacked gemv chain) against a full
 * group, the tokens in the lanes: chain_tile_row of cpu/matmul_avx2.c. */
static inline __attribute__((always_inline)) void
chain_rows2(float *out, int64_t ldo, const uint8_t *u0, const uint8_t *u1, const float *d0,
            const float *d1, const struct vgroup *g, int nr, int off, int64_t nb)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();

    for (int64_t b = 0; b < nb; b++) {
        __m256i x0 = _mm256_load_si256((const __m256i *)(const void *)(u0 + 32 * b));
        __m256i x1 = _mm256_load_si256((const __m256i *)(const void *)(u1 + 32 * b));
        __m256i v0[TG], v1[TG];
#pragma GCC unroll 8
        for (int t = 0; t < TG; t++) {
            __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(g->q[t] + 32 * b));
            v0[t] = vlanes(g, x0, y, t, b, off);
            v1[t] = vlanes(g, x1, y, t, b, off);
        }
        __m256 dT = _mm256_load_ps(g->dT + TG * b);
        s0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x8_epi32(v0)),
                             _mm256_mul_ps(_mm256_set1_ps(d0[b]), dT), s0);
        s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x8_epi32(v1)),
                             _mm256_mul_ps(_mm256_set1_ps(d1[b]), dT), s1);
    }
    float r0[TG] __attribute__((aligned(32))), r1[TG] __attribute__((aligned(32)));
    _mm256_store_ps(r0, s0);
    _mm256_store_ps(r1, s1);
    for (int t = 0; t < g->nt; t++) {
        out[t * ldo] = r0[t];
        if (nr > 1)
            out[t * ldo + 1] = r1[t];
    }
}

/* the code offset that makes a type's unpacked codes unsigned */
static int
code_offset(uint32_t type)
{
    switch (type) {
    case T_Q4_1: case T_Q5_1: return 0;
    case T_Q4_0: return 8;      /* unpacked as 0..15 already */
    default: return 128;        /* Q8_0, Q5_0, IQ4_NL: signed codes */
    }
}

/* Rows [r0, r1) of a legacy type for all n_tok tokens; 0 when a row does
 * not fit (the caller then takes the AVX2 path). */
static int
legacy_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             enum act a, const uint8_t *act, size_t arb, int64_t n_tok, int64_t cols, int64_t r0,
             int64_t r1)
{
    const int64_t nb = cols / 32;
    const int off = code_offset(type), has_min = type == T_Q4_1 || type == T_Q5_1;
    const int chain = type == T_Q4_0 || type == T_IQ4_NL;
    const size_t rowu = (size_t)cols + (size_t)nb * sizeof(float) * 2;
    static __thread uint8_t buf[TILE_BYTES] __attribute__((aligned(64)));
    static __thread struct vgroup g;

    if (2 * rowu > sizeof(buf) || nb > G_MAX_NB)
        return 0;
    int64_t R = (int64_t)(sizeof(buf) / rowu) & ~(int64_t)1;
    if (R > 16)
        R = 16;
    uint8_t *q = buf;
    float *d = (float *)(void *)(buf + (size_t)R * (size_t)cols);
    float *m = d + R * nb;

    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        for (int64_t i = 0; i < nr; i++) {
            uint8_t *qi = q + i * cols;
            ops_mm_avx2_unpack_legacy((int8_t *)qi, d + i * nb, m + i * nb,
                                      w + (size_t)(rb + i) * row_bytes, type, nb);
            if (off == 128)
                for (int64_t b = 0; b < nb; b++) {
                    __m256i *p = (__m256i *)(void *)(qi + 32 * b);
                    _mm256_store_si256(p, _mm256_xor_si256(_mm256_load_si256(p),
                                                           _mm256_set1_epi8((char)0x80)));
                }
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += TG) {
            int nt = n_tok - t0 < TG ? (int)(n_tok - t0) : TG;
            vgroup_fill(&g, a, act, arb, t0, nt, cols, nb, off);
            for (int64_t i = 0; i < nr; i += 2) {
                int two = nr - i > 1 ? 2 : 1;
                float *out = y + t0 * ldy + rb + i;
                const uint8_t *u0 = q + i * cols, *u1 = q + (i + two - 1) * cols;
                const float *d0 = d + i * nb, *d1 = d + (i + two - 1) * nb;
                const float *m0 = m + i * nb, *m1 = m + (i + two - 1) * nb;
                if (chain) {
                    if (off == 8)
                        chain_rows2(out, ldy, u0, u1, d0, d1, &g, two, 8, nb);
                    else
                        chain_rows2(out, ldy, u0, u1, d0, d1, &g, two, 128, nb);
                    continue;
                }
#define LR(o, hm, n) lanes_rows2(out, ldy, u0, u1, d0, d1, m0, m1, &g, n, two, o, hm, nb)
#define LR_NT(o, hm) switch (nt) { case 1: LR(o, hm, 1); break; case 2: LR(o, hm, 2); break; \
                                   case 3: LR(o, hm, 3); break; case 4: LR(o, hm, 4); break; \
                                   case 5: LR(o, hm, 5); break; case 6: LR(o, hm, 6); break; \
                                   case 7: LR(o, hm, 7); break; default: LR(o, hm, 8); break; }
                if (has_min) {
                    LR_NT(0, 1);
                } else {
                    LR_NT(128, 0);
                }
#undef LR_NT
#undef LR
            }
        }
    }
    return 1;
}

/* ---- F16 ---- */

/* One half of ggml_vec_dot_f16 (accumulators 0,1 at h = 0, or 2,3 at
 * h = 16) for 4 widened rows x 4 tokens: acc[r][t] lanes 0..7 accumulator
 * 2h/16, lanes 8..15 the next. */
static inline __attribute__((always_inline)) void
f16_half(__m512 acc[4][4], const float *w, int64_t cols, const float *const *xs, int64_t np,
         int h)
{
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++)
            acc[r][t] = _mm512_setzero_ps();
    for (int64_t i = h; i < np; i += 32) {
        __m512 x0 = _mm512_loadu_ps(xs[0] + i), x1 = _mm512_loadu_ps(xs[1] + i);
        __m512 x2 = _mm512_loadu_ps(xs[2] + i), x3 = _mm512_loadu_ps(xs[3] + i);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512 wv = _mm512_loadu_ps(w + r * cols + i);
            acc[r][0] = _mm512_fmadd_ps(wv, x0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(wv, x1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(wv, x2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(wv, x3, acc[r][3]);
        }
    }
}

/* 4 widened rows (w, stride cols; cols % 32 == 0) x nt <= 4 tokens */
static void
f16_block4(float *y, int64_t ldy, const float *w, int64_t cols, int nr, const float *const *xs,
           int nt)
{
    __m512 lo[4][4], hi[4][4];

    f16_half(lo, w, cols, xs, cols, 0);
    f16_half(hi, w, cols, xs, cols, 16);
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) {
            /* (a0 + a2 | a1 + a3), then (a0 + a2) + (a1 + a3) */
            __m512 s = _mm512_add_ps(lo[r][t], hi[r][t]);
            __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
            y[t * ldy + r] = avx2_reduce1(s8);
        }
}

static int
f16_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, const uint8_t *act,
          size_t arb, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    static __thread float buf[TILE_BYTES / sizeof(float)] __attribute__((aligned(64)));
    size_t rowu = (size_t)cols * sizeof(float);

    if (cols % 32 || 4 * rowu > sizeof(buf))
        return 0;
    int64_t R = (int64_t)(sizeof(buf) / rowu) & ~(int64_t)3;
    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        for (int64_t i = 0; i < nr; i++) {
            const uint16_t *row = (const uint16_t *)(const void *)(w + (size_t)(rb + i) * row_bytes);
            for (int64_t c = 0; c < cols; c += 16)
                _mm512_store_ps(buf + i * cols + c,
                                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + c))));
        }
        /* rows past nr read a valid row of the tile; their results are dropped */
        for (int64_t i = nr; i < ((nr + 3) & ~(int64_t)3); i++)
            memcpy(buf + i * cols, buf, rowu);
        for (int64_t t0 = 0; t0 < n_tok; t0 += 4) {
            int nt = n_tok - t0 < 4 ? (int)(n_tok - t0) : 4;
            const float *xs[4];
            for (int t = 0; t < 4; t++)
                xs[t] = (const float *)(const void *)(act + (size_t)(t0 + (t < nt ? t : 0)) * arb);
            for (int64_t i = 0; i < nr; i += 4)
                f16_block4(y + t0 * ldy + rb + i, ldy, buf + i * cols, cols,
                           nr - i < 4 ? (int)(nr - i) : 4, xs, nt);
        }
    }
    return 1;
}

void
ops_mm_rows_avx512(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                   const void *work, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
                   int64_t r0, int64_t r1, float *tmp)
{
    enum act a = act_type(wtype);
    size_t arb = act_row_bytes(a, cols);

    if (n_tok >= TILE_MIN) {
        if (wtype == T_F16 && f16_tiles(y, ldy, w, row_bytes, work, arb, n_tok, cols, r0, r1))
            return;
        if ((a == ACT_Q8_0 || a == ACT_Q8_1) &&
            legacy_tiles(y, ldy, w, row_bytes, wtype, a, work, arb, n_tok, cols, r0, r1))
            return;
    }
    ops_mm_rows_avx2(y, ldy, w, row_bytes, wtype, work, x, ldx, n_tok, cols, r0, r1, tmp);
}

int
ops_avx512_probe(void)
{
    volatile int seed = 1;
    __m512i a = _mm512_set1_epi32(seed);
    __m256i b = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), _mm256_set1_epi8(2));
    a = _mm512_add_epi32(a, _mm512_castsi256_si512(b));
    /* lane 0: 1 + 4 * (1 * 2) */
    return _mm_cvtsi128_si32(_mm512_castsi512_si128(a)) == 9;
}
