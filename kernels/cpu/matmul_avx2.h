/*
 * matmul_avx2.h - the AVX2/FMA/F16C matmul kernels (cpu/matmul_avx2.c,
 * compiled with -mavx2 -mfma -mf16c).  Only callable when
 * kernel_ops_avx2.available() is 1; kernels/dispatch.c puts them in the
 * "avx2" table.
 */
#ifndef LLMKIT_MATMUL_AVX2_H
#define LLMKIT_MATMUL_AVX2_H

#include "ops.h"

/* Same contracts as the ops.h table entries; the work buffer has the
 * reference's layout (ops_mm_prepare_avx2 writes the same bytes as
 * ops_mm_prepare_ref).
 *
 * Batch invariant: every token of every batch gets the arithmetic llama.cpp's
 * AVX2 CPU backend applies to a batch of one token, so a token's outputs are
 * bit-identical with ggml's single-token results whatever the batch size,
 * the token's position in it and the row range [r0, r1):
 *   Q4_0, IQ4_NL, Q4_K : the repacked (8-row interleaved) gemv kernels
 *       llama.cpp uses for weights with rows % 8 == 0: one f32 multiply-add
 *       chain per output over the exact integer block sums;
 *   Q8_0, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q5_K, Q6_K, IQ4_XS : ggml_vec_dot_*
 *       (8 f32 lanes of 4-element integer sums, fused multiply-add per block,
 *       horizontal sum at the end);
 *   F32, F16, BF16 : ggml_vec_dot_f32 / _f16 / _bf16.
 * llama.cpp's batched kernels (repack gemm, llamafile tinyBLAS, the tiled
 * k-quant kernels) round differently: mm_rows_mirror (cpu/matmul_mirror_*.c)
 * reproduces those a mirrored run asks for. */
size_t ops_mm_work_size_avx2(uint32_t wtype, int64_t n_tok, int64_t cols);
void ops_mm_prepare_avx2(void *work, uint32_t wtype, const float *x, int64_t ldx, int64_t n_tok,
                         int64_t cols);
void ops_mm_rows_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                      const void *work, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
                      int64_t r0, int64_t r1, float *tmp);

/* One row of a legacy type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL; nb blocks
 * of 32) unpacked: q[32 * nb] the codes in element order (Q4_1 and Q5_1 as
 * their unsigned codes, Q4_0 as its unsigned codes 0..15 (value + 8), the
 * others signed), d[nb] the block scales, m[nb] (if m is not NULL) the
 * mins (0 for the types without one).  The legacy prefill tiles read this
 * form (also those of cpu/matmul_avx512.c). */
void ops_mm_avx2_unpack_legacy(int8_t *q, float *d, float *m, const uint8_t *row, uint32_t type,
                               int64_t nb);

/* ops_mm_kmirror_avx2() : rows [r0, r1) of a Q6_K or Q4_K weight for n_tok
 * tokens (work: their Q8_K activations from mm_prepare) with the arithmetic
 * of ops_mm_rows_mirror_ref (ggml's tiled Q6_K and repack Q4_K prompt
 * kernels), bit for bit, from unpacked super-blocks 8 rows at a time
 * (fewer for rows over 2560 columns); 0 (nothing written) for other types,
 * cols % 256 != 0 or a row too wide for its tile buffer (about 20000
 * columns). */
int ops_mm_kmirror_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                        const void *work, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1);

/* ops_mm_kquant_small_avx2() : rows [r0, r1) of a k-quant or IQ4_XS weight
 * for 2..OPS_MM_KSMALL_MAX tokens (work: their Q8_K activations) through
 * the small-batch kernel the avx2 table takes for 2-7 tokens (each row
 * group against the tokens in groups of up to 4; the decode's arithmetic,
 * so the tables' bits); 0 (nothing written) for other types or counts.
 * The avx512 table takes it for batches below its k-quant tiles. */
#define OPS_MM_KSMALL_MAX 8
int ops_mm_kquant_small_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes,
                             uint32_t wtype, const void *work, int64_t n_tok, int64_t cols,
                             int64_t r0, int64_t r1);

/* Which decode forms run: 1 takes the 128-bit-half forms chosen on cores
 * that split 256-bit operations (Q4_1, Q5_0), 0 the 256-bit ones; both give
 * the same bits.  The CPU check sets it; tests call this to run both.
 * Returns the previous choice. */
int ops_mm_avx2_split256(int on);

#endif
