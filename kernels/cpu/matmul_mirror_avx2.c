/*
 * matmul_mirror_avx2.c - llamafile tinyBLAS's float matmul order (see
 * matmul_mirror_avx2.h).  Register tiles of 4 weight rows x 3 tokens as
 * tinyBLAS's AVX2 gemm (RM 4, RN 3) over blocks of rows that stay in cache;
 * the tiling changes only which outputs are computed together, never an
 * output's operations.  Q4_K: ggml's repack
 * gemm and Q6_K: its tiled kernels (cpu/matmul_mirror_ref.c), from
 * unpacked super-blocks (ops_mm_kmirror_avx2 in cpu/matmul_avx2.c).
 */
#include <immintrin.h>
#include <stdint.h>

#include "matmul_avx2.h"
#include "matmul_mirror_avx2.h"
#include "qconv.h"

#include "cpu/mm_layout.h"


#define RM 4                    /* weight rows per register tile */
#define RN 3                    /* tokens per register tile */
#define MIRROR_BLOCK_BYTES (96 * 1024)  /* weight rows per pass over the tokens */

/* 8 weights of a row as f32 lanes, as tinyBLAS's load<__m256> */
static inline __attribute__((always_inline)) __m256
load_w8(const uint8_t *row, uint32_t type, int64_t i)
{
    if (type == T_F32)
        return _mm256_loadu_ps((const float *)(const void *)row + i);
    if (type == T_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(row + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(row + 2 * i))), 16));
}

/* tinyBLAS's hsum(__m256) */
static inline float
hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* outputs of the 4 rows [r, r + 4) x the 3 tokens xt[0..2]: the 12
 * accumulators, 3 token vectors and one weight vector fill the 16 ymm
 * registers (named, so that none lives in memory) */
static inline __attribute__((always_inline)) void
tile43(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
       const float *const *xt, int64_t r, int64_t cols)
{
    const uint8_t *w0 = w + (size_t)r * row_bytes, *w1 = w0 + row_bytes, *w2 = w1 + row_bytes,
                  *w3 = w2 + row_bytes;
    const float *x0 = xt[0], *x1 = xt[1], *x2 = xt[2];
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
    __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
    __m256 c20 = c00, c21 = c00, c22 = c00, c23 = c00;

    for (int64_t l = 0; l < cols; l += 8) {
        __m256 b0 = _mm256_loadu_ps(x0 + l), b1 = _mm256_loadu_ps(x1 + l);
        __m256 b2 = _mm256_loadu_ps(x2 + l), a;
        /* row wr's 8 weights into its accumulators k0..k2 of the 3 tokens */
#define ROW3(wr, k0, k1, k2)                                                          \
        a = load_w8(wr, type, l);                                                     \
        k0 = _mm256_fmadd_ps(a, b0, k0), k1 = _mm256_fmadd_ps(a, b1, k1),             \
        k2 = _mm256_fmadd_ps(a, b2, k2)
        ROW3(w0, c00, c10, c20);
        ROW3(w1, c01, c11, c21);
        ROW3(w2, c02, c12, c22);
        ROW3(w3, c03, c13, c23);
#undef ROW3
    }
    float *o = y + r;
    o[0] = hsum8(c00), o[1] = hsum8(c01), o[2] = hsum8(c02), o[3] = hsum8(c03);
    o += ldy;
    o[0] = hsum8(c10), o[1] = hsum8(c11), o[2] = hsum8(c12), o[3] = hsum8(c13);
    o += ldy;
    o[0] = hsum8(c20), o[1] = hsum8(c21), o[2] = hsum8(c22), o[3] = hsum8(c23);
}

/* the outputs of row r x tokens xt[0 .. nt), nt <= RN (the tiles' edges) */
static inline __attribute__((always_inline)) void
tile1(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
      const float *const *xt, int nt, int64_t r, int64_t cols)
{
    const uint8_t *w0 = w + (size_t)r * row_bytes;
    const float *x0 = xt[0], *x1 = xt[nt > 1 ? 1 : 0], *x2 = xt[nt > 2 ? 2 : 0];
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0;

    for (int64_t l = 0; l < cols; l += 8) {
        __m256 a = load_w8(w0, type, l);
        c0 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x0 + l), c0);
        if (nt > 1)
            c1 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x1 + l), c1);
        if (nt > 2)
            c2 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x2 + l), c2);
    }
    y[r] = hsum8(c0);
    if (nt > 1)
        y[ldy + r] = hsum8(c1);
    if (nt > 2)
        y[2 * ldy + r] = hsum8(c2);
}

static inline __attribute__((always_inline)) void
rows_type(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
          const float *const *xt, int nt, int64_t r0, int64_t r1, int64_t cols)
{
    int64_t r = r0;

    if (nt == RN)
        for (; r + RM <= r1; r += RM)
            tile43(y, ldy, w, row_bytes, type, xt, r, cols);
    for (; r < r1; r++) {
        switch (nt) {
        case 1: tile1(y, ldy, w, row_bytes, type, xt, 1, r, cols); break;
        case 2: tile1(y, ldy, w, row_bytes, type, xt, 2, r, cols); break;
        default: tile1(y, ldy, w, row_bytes, type, xt, 3, r, cols); break;
        }
    }
}

/* 6-bit scale and min codes of the 8 sub-blocks of a Q4_K block */
static inline void
q4k_scales(const uint8_t *s, int *sc, int *mn)
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 15) | (s[j] >> 6) << 4;
        mn[j + 4] = (s[j + 8] >> 4) | (s[j + 4] >> 6) << 4;
    }
}

/* the bits of cpu/matmul_mirror_ref.c's q4k_gemm_dot: the same exact
 * integer sums per sub-block pair, the same fma chains */
static float
q4k_gemm_dot(const struct block_q4_K *x, const struct act_row *ar, int64_t nb)
{
    const __m256i m15 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    float sacc = 0.0f, macc = 0.0f;

    for (int64_t b = 0; b < nb; b++, x++) {
        const int8_t *y = ar->q + QK_K * b;
        const int16_t *bs = ar->bsums + 16 * b;
        int sc[8], mn[8];
        q4k_scales(x->scales, sc, mn);
        float dd = qconv_fp16_to_fp32(x->d) * ar->d[b];
        float dm = qconv_fp16_to_fp32(x->dmin) * ar->d[b];
        for (int p = 0; p < 4; p++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32 * p));
            __m256i lo = _mm256_and_si256(bits, m15);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m15);
            __m256i yl = _mm256_loadu_si256((const __m256i *)(const void *)(y + 64 * p));
            __m256i yh = _mm256_loadu_si256((const __m256i *)(const void *)(y + 64 * p + 32));
            __m256i sl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, yl), ones);
            __m256i sh = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yh), ones);
            __m256i v = _mm256_add_epi32(_mm256_mullo_epi32(sl, _mm256_set1_epi32(sc[2 * p])),
                                         _mm256_mullo_epi32(sh, _mm256_set1_epi32(sc[2 * p + 1])));
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
            int32_t isum = _mm_cvtsi128_si32(h);
            int32_t msum = mn[2 * p] * (bs[4 * p] + bs[4 * p + 1]) +
                           mn[2 * p + 1] * (bs[4 * p + 2] + bs[4 * p + 3]);
            sacc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)isum), _mm_set_ss(dd),
                                              _mm_set_ss(sacc)));
            macc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)msum), _mm_set_ss(dm),
                                              _mm_set_ss(macc)));
        }
    }
    return sacc - macc;
}

static void
rows_q4k(float *y, int64_t ldy, const void *w, size_t row_bytes, const void *work,
         int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    size_t arb = act_row_bytes(ACT_Q8_K, cols);

    for (int64_t r = r0; r < r1; r++) {
        const struct block_q4_K *row =
            (const struct block_q4_K *)(const void *)((const uint8_t *)w + (size_t)r * row_bytes);
        for (int64_t t = 0; t < n_tok; t++) {
            struct act_row ar;
            act_row_at(&ar, ACT_Q8_K, (const uint8_t *)work + (size_t)t * arb, cols);
            y[t * ldy + r] = q4k_gemm_dot(row, &ar, cols / QK_K);
        }
    }
}

void
ops_mm_rows_mirror_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                        const void *work, const float *x, int64_t ldx, int64_t n_tok,
                        int64_t cols, int64_t r0, int64_t r1, float *tmp)
{
    (void)tmp;
    if ((wtype == T_Q4_K || wtype == T_Q6_K) &&
        ops_mm_kmirror_avx2(y, ldy, w, row_bytes, wtype, work, n_tok, cols, r0, r1))
        return;
    if (wtype == T_Q4_K) {
        if (cols % QK_K == 0)
            rows_q4k(y, ldy, w, row_bytes, work, n_tok, cols, r0, r1);
        return;
    }
    if (wtype == T_Q6_K) {      /* rows too wide for the tiles: the reference */
        ops_mm_rows_mirror_ref(y, ldy, w, row_bytes, wtype, work, x, ldx, n_tok, cols, r0, r1,
                               tmp);
        return;
    }
    if (cols % 8 != 0 || r0 >= r1 ||
        (wtype != T_F32 && wtype != T_F16 && wtype != T_BF16))
        return;
    /* blocks of rows that stay in L2 while every token tile reads them: a
     * prompt reads the weights from memory once, not once per RN tokens */
    int64_t rb = MIRROR_BLOCK_BYTES / (int64_t)row_bytes / RM * RM;
    if (rb < RM)
        rb = RM;
    for (int64_t b0 = r0; b0 < r1; b0 += rb) {
        int64_t b1 = b0 + rb < r1 ? b0 + rb : r1;
        for (int64_t t0 = 0; t0 < n_tok; t0 += RN) {
            int nt = n_tok - t0 < RN ? (int)(n_tok - t0) : RN;
            const float *xt[RN];
            for (int j = 0; j < nt; j++)
                xt[j] = wtype == T_F32 ? x + (t0 + j) * ldx
                                       : (const float *)work + (t0 + j) * cols;
            float *yt = y + t0 * ldy;
            if (wtype == T_F32)
                rows_type(yt, ldy, w, row_bytes, T_F32, xt, nt, b0, b1, cols);
            else if (wtype == T_F16)
                rows_type(yt, ldy, w, row_bytes, T_F16, xt, nt, b0, b1, cols);
            else
                rows_type(yt, ldy, w, row_bytes, T_BF16, xt, nt, b0, b1, cols);
        }
    }
}
