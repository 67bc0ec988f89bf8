/*
 * matmul_mirror_avx2.h - llama.cpp's batched float matmul (llamafile
 * tinyBLAS, AVX2 build) for tools that reproduce a llama.cpp run bit for bit
 * (perplexity, importance matrix).  cpu/matmul_mirror_avx2.c, compiled with
 * -mavx2 -mfma -mf16c; only callable when kernel_ops_avx2.available() is 1.
 * kernels/dispatch.c puts it in the "avx2" table as mm_rows_mirror.
 */
#ifndef LLMKIT_MATMUL_MIRROR_AVX2_H
#define LLMKIT_MATMUL_MIRROR_AVX2_H

#include "ops.h"

/* ops_mm_rows_mirror_avx2() : the ops_mm_rows_fn contract (ops.h) for
 * wtype F32, F16 or BF16 and cols % 8 == 0 (other types or widths: nothing
 * is written), with llamafile tinyBLAS's arithmetic (tinyBLAS<8, __m256>),
 * which ggml's CPU backend applies to those weights when a mul_mat has n >= 2
 * tokens, k % 8 == 0 and m (the weight's rows) % 4 == 0: per output one
 * 8-lane accumulator, fused multiply-add of weight and activation lanes over
 * the columns in steps of 8, then ggml's horizontal sum (high half + low
 * half, lanes 0+2 and 1+3, their sum).  Each output is a function of its
 * weight row and token alone, so any row range and token count give the same
 * bits (the tiling over threads only changes the order of the outputs).
 * Activations: F32 reads x (row stride ldx) as is; F16 and BF16 read work as
 * filled by the avx2 (or ref) mm_prepare: n_tok rows of cols floats, the
 * activations rounded to f16 / bf16 (ggml converts src1 to the weight's
 * vec_dot_type first).  tmp is unused.
 *
 * Q4_K (cols % 256 == 0): ggml's repack gemm (ggml_gemm_q4_K_8x8_q8_K), and
 * Q6_K: its tiled kernels, as ops_mm_rows_mirror_ref specifies, bit for bit
 * (ops_mm_kmirror_avx2); work is the Q8_K activations of
 * mm_prepare.  The backend takes them for the tokens batch_tok.gemm marks. */
void ops_mm_rows_mirror_avx2(float *y, int64_t ldy, const void *w, size_t row_bytes,
                             uint32_t wtype, const void *work, const float *x, int64_t ldx,
                             int64_t n_tok, int64_t cols, int64_t r0, int64_t r1, float *tmp);

#endif
