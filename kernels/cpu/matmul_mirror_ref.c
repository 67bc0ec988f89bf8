/*
 * matmul_mirror_ref.c - the spec of llama.cpp's batched arithmetic (AVX2
 * build) for prompts and tools mirroring a llama.cpp run bit for bit: the
 * ref table's mm_rows_mirror.
 *
 * F32, F16 and BF16 weights (cols % 8 == 0): llamafile's tinyBLAS<8,
 * __m256>, which ggml's mul_mat runs for 2+ tokens when the weight's rows %
 * 4 == 0 (F16/BF16 against activations rounded to the weight type, as
 * mm_prepare leaves them): per output one 8-lane accumulator, element i
 * fused into lane i % 8 in order, then ggml's hsum (mm_hsum8_ref).
 *
 * Q4_K: ggml-cpu's repack gemm (ggml_gemm_q4_K_8x8_q8_K).
 *
 * ggml repacks a Q4_K weight with rows % 8 == 0 at load (8 rows
 * interleaved; CPU_REPACK, on AVX2 CPUs).  A mul_mat of n tokens then
 * quantizes the activations to Q8_K (ggml_quantize_mat_q8_K_4x8: the codes
 * and scales of quantize_row_q8_K, or both negated when +amax and -amax both
 * occur, which gives the same products) and computes the first n - n % 4
 * tokens with the gemm, the other n % 4 with the gemv (ops->mm_rows).  The
 * gemm's arithmetic per output, per super-block b of 256 and pair p of its
 * 32-element sub-blocks (2p, 2p + 1):
 *
 *   isum = sc[2p] * dot(q[2p], y[2p]) + sc[2p+1] * dot(q[2p+1], y[2p+1])
 *   msum = mn[2p] * ysum[2p] + mn[2p+1] * ysum[2p+1]      (exact int32)
 *   sacc = fma((float)isum, d_w * d_y, sacc)
 *   macc = fma((float)msum, dmin_w * d_y, macc)
 *
 * in order b = 0.., p = 0..3, and out = sacc - macc: four steps per
 * super-block where the gemv takes one over the super-block's integer sums,
 * so the two round differently.
 *
 * Q6_K (and the other k-quants ggml does not repack) go, for a mul_mat of 8
 * or more tokens, to ggml-cpu's tiled kernels (ggml-cpu/tiled,
 * GGML_CPU_TILED_MM, on by default).  Their Q6_K arithmetic per output, per
 * super-block b in order, from acc = 0:
 *
 *   isum = sum over the 16 sub-blocks s of sc[s] * dot(q[s] - 32, y[s])
 *   acc  = fma(d_w * (float)isum, d_y, acc)         (d_w * isum rounded first)
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ops.h"
#include "qconv.h"

#include "cpu/mm_layout.h"

/* 6-bit scale and min codes of sub-block j (0..7) of Q4_K */
static void
q4k_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* sum over the 32 codes of sub-block j (0..7) of a Q4_K block times y */
static int32_t
q4k_sub_dot(const struct block_q4_K *x, int j, const int8_t *y)
{
    const uint8_t *qs = x->qs + 32 * (j / 2);
    int32_t s = 0;

    for (int l = 0; l < 32; l++)
        s += (j & 1 ? qs[l] >> 4 : qs[l] & 15) * y[32 * j + l];
    return s;
}

static float
q4k_gemm_dot(const void *row, const int8_t *yq, const float *yd, const int16_t *ybsums,
                        int64_t nb)
{
    float sacc = 0.0f, macc = 0.0f;

    for (int64_t b = 0; b < nb; b++) {
        const struct block_q4_K *x = (const struct block_q4_K *)row + b;
        const int8_t *y = yq + QK_K * b;
        const int16_t *bs = ybsums + 16 * b;
        float dd = qconv_fp16_to_fp32(x->d) * yd[b];
        float dm = qconv_fp16_to_fp32(x->dmin) * yd[b];
        for (int p = 0; p < 4; p++) {
            int32_t isum = 0, msum = 0;
            for (int j = 2 * p; j < 2 * p + 2; j++) {
                int sc, m;
                q4k_scale_min(x->scales, j, &sc, &m);
                isum += sc * q4k_sub_dot(x, j, y);
                msum += m * (bs[2 * j] + bs[2 * j + 1]);
            }
            sacc = fmaf((float)isum, dd, sacc);
            macc = fmaf((float)msum, dm, macc);
        }
    }
    return sacc - macc;
}

/* Q6_K codes minus 32 of block x in element order */
static void
q6k_codes(const struct block_q6_K *x, int8_t *q)
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        int8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32);
            o[32 + l] = (int8_t)(((ql[32 + l] & 15) | ((qh[l] >> 2) & 3) << 4) - 32);
            o[64 + l] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
            o[96 + l] = (int8_t)(((ql[32 + l] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
        }
    }
}

static float
q6k_tiled_dot(const void *row, const int8_t *yq, const float *yd, int64_t nb)
{
    float acc = 0.0f;
    int8_t q[QK_K];

    for (int64_t b = 0; b < nb; b++) {
        const struct block_q6_K *x = (const struct block_q6_K *)row + b;
        const int8_t *y = yq + QK_K * b;
        int32_t isum = 0;
        q6k_codes(x, q);
        for (int s = 0; s < 16; s++) {
            int32_t si = 0;
            for (int l = 0; l < 16; l++)
                si += q[16 * s + l] * y[16 * s + l];
            isum += x->scales[s] * si;
        }
        acc = fmaf(qconv_fp16_to_fp32(x->d) * (float)isum, yd[b], acc);
    }
    return acc;
}

/* llamafile tinyBLAS (tinyBLAS<8, __m256>, ggml's AVX2 build), one output:
 * one 8-lane accumulator, element i fused into lane i % 8 in order, then
 * mm_hsum8_ref; n % 8 == 0 */
static float
dot_tinyblas(const float *restrict w, const float *restrict x, int64_t n)
{
    float a[8] = { 0 };

    for (int64_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] = fmaf(w[i + k], x[i + k], a[k]);
    return mm_hsum8_ref(a);
}

void
ops_mm_rows_mirror_ref(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                       const void *work, const float *x, int64_t ldx, int64_t n_tok,
                       int64_t cols, int64_t r0, int64_t r1, float *tmp)
{
    size_t arb = act_row_bytes(ACT_Q8_K, cols);

    if (wtype == T_F32 || wtype == T_F16 || wtype == T_BF16) {
        if (cols % 8 != 0)
            return;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
            const float *wr = tmp;
            if (wtype == T_F32)
                wr = (const float *)(const void *)row;
            else if (wtype == T_F16)
                dequantize_row_f16_ref(row, tmp, cols);
            else
                dequantize_row_bf16_ref(row, tmp, cols);
            for (int64_t t = 0; t < n_tok; t++)
                y[t * ldy + r] = dot_tinyblas(wr, wtype == T_F32 ? x + t * ldx
                                                                 : (const float *)work + t * cols,
                                              cols);
        }
        return;
    }
    if ((wtype != T_Q4_K && wtype != T_Q6_K) || cols % QK_K != 0)
        return;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        for (int64_t t = 0; t < n_tok; t++) {
            struct act_row ar;
            act_row_at(&ar, ACT_Q8_K, (const uint8_t *)work + (size_t)t * arb, cols);
            y[t * ldy + r] = wtype == T_Q4_K
                                 ? q4k_gemm_dot(row, ar.q, ar.d, ar.bsums, cols / QK_K)
                                 : q6k_tiled_dot(row, ar.q, ar.d, cols / QK_K);
        }
    }
}
