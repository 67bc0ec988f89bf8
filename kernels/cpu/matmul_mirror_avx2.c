/*
 * matmul_mirror_avx2.c - llamafile tinyBLAS's float matmul order (see
 * matmul_mirror_avx2.h).  Register tiles of 4 weight rows x 3 tokens as
 * tinyBLAS's AVX2 gemm (RM 4, RN 3); the tiling changes only which outputs
 * are computed together, never an output's operations.
 */
#include <immintrin.h>
#include <stdint.h>

#include "matmul_mirror_avx2.h"

/* ggml type ids (the values of kernels/qtypes.h) */
enum { T_F32 = 0, T_F16 = 1, T_BF16 = 30 };

#define RM 4                    /* weight rows per register tile */
#define RN 3                    /* tokens per register tile */

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

/* outputs of rows rows [r, r + nr) x tokens xt[0 .. nt), nr <= RM, nt <= RN;
 * constant nr, nt and type at every call site, so each instance unrolls */
static inline __attribute__((always_inline)) void
tile(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
     const float *const *xt, int nt, int64_t r, int nr, int64_t cols)
{
    __m256 acc[RN][RM];
    const uint8_t *row[RM];

    for (int i = 0; i < nr; i++)
        row[i] = w + (size_t)(r + i) * row_bytes;
    for (int j = 0; j < nt; j++)
        for (int i = 0; i < nr; i++)
            acc[j][i] = _mm256_setzero_ps();
    for (int64_t l = 0; l < cols; l += 8) {
        __m256 a[RM];
        for (int i = 0; i < nr; i++)
            a[i] = load_w8(row[i], type, l);
        for (int j = 0; j < nt; j++) {
            __m256 b = _mm256_loadu_ps(xt[j] + l);
            for (int i = 0; i < nr; i++)
                acc[j][i] = _mm256_fmadd_ps(a[i], b, acc[j][i]);
        }
    }
    for (int j = 0; j < nt; j++)
        for (int i = 0; i < nr; i++)
            y[j * ldy + r + i] = hsum8(acc[j][i]);
}

static inline __attribute__((always_inline)) void
rows_type(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
          const float *const *xt, int nt, int64_t r0, int64_t r1, int64_t cols)
{
    int64_t r = r0;

#define TILE(n, m) tile(y, ldy, w, row_bytes, type, xt, n, r, m, cols)
    for (; r + RM <= r1; r += RM) {
        switch (nt) {
        case 1: TILE(1, RM); break;
        case 2: TILE(2, RM); break;
        default: TILE(3, RM); break;
        }
    }
    for (; r < r1; r++) {
        switch (nt) {
        case 1: TILE(1, 1); break;
        case 2: TILE(2, 1); break;
        default: TILE(3, 1); break;
        }
    }
#undef TILE
}

void
ops_mm_rows_mirror_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                        const void *work, const float *x, int64_t ldx, int64_t n_tok,
                        int64_t cols, int64_t r0, int64_t r1, float *tmp)
{
    (void)tmp;
    if (cols % 8 != 0 || r0 >= r1 ||
        (wtype != T_F32 && wtype != T_F16 && wtype != T_BF16))
        return;
    for (int64_t t0 = 0; t0 < n_tok; t0 += RN) {
        int nt = n_tok - t0 < RN ? (int)(n_tok - t0) : RN;
        const float *xt[RN];
        for (int j = 0; j < nt; j++)
            xt[j] = wtype == T_F32 ? x + (t0 + j) * ldx
                                           : (const float *)work + (t0 + j) * cols;
        float *yt = y + t0 * ldy;
        if (wtype == T_F32)
            rows_type(yt, ldy, w, row_bytes, T_F32, xt, nt, r0, r1, cols);
        else if (wtype == T_F16)
            rows_type(yt, ldy, w, row_bytes, T_F16, xt, nt, r0, r1, cols);
        else
            rows_type(yt, ldy, w, row_bytes, T_BF16, xt, nt, r0, r1, cols);
    }
}
