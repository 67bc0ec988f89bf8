/*
 * quant.h - row quantizers that produce exactly the bytes llama.cpp's ggml
 * produces (ggml_quantize_chunk), with and without an importance matrix.
 *
 * Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, IQ4_NL, IQ4_XS.  As in ggml:
 *   - F32/F16/BF16 are plain conversions (the imatrix is ignored);
 *   - Q8_0 ignores the imatrix (ggml's quantize_q8_0 does too);
 *   - the legacy 4/5-bit types use the *_ref quantizers without an imatrix
 *     and ggml's weighted search (quantize_row_*_impl) with one;
 *   - k-quants have separate unweighted and weighted searches;
 *   - IQ4_NL / IQ4_XS always use their own weighted search.
 * The output is byte-identical with the llama.cpp peer's for any input,
 * NaN and Inf included (kernels/cpu/quant_ref.c keeps ggml's float types and
 * operation order, is built with -ffp-contract=off, and reproduces x86's
 * float-to-int casts; tests/unit/test_quantize.c checks it against
 * tests/golden/quant/, written by scripts/mkgolden-quant).
 *
 * All functions are thread-safe, keep their scratch on the stack and never
 * allocate; rows are independent, so callers may split rows across threads
 * (each thread calling quant_chunk on its own range of rows).
 */
#ifndef LLMKIT_QUANT_H
#define LLMKIT_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* quant_row_size() : bytes of one row of n elements of ggml type `type`;
 * 0 if the type cannot be produced by quant_chunk, n <= 0, or n is not a
 * multiple of the type's block size. */
size_t quant_row_size(uint32_t type, int64_t n);

/* quant_supported() : 1 if quant_chunk can produce `type`, else 0. */
int quant_supported(uint32_t type);

/* quant_needs_imatrix() : 1 if llama.cpp refuses to produce `type` without an
 * importance matrix: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS
 * (tensor_requires_imatrix in llama-quant.cpp; it also wants one for Q2_K in a
 * Q2_K_S file, a file-type rule the caller applies).  0 for every type
 * quant_chunk supports.  Answers for any id so a tool can explain a refusal. */
int quant_needs_imatrix(uint32_t type);

/* quant_chunk() : quantize nrows rows of n_per_row floats (row-major,
 * contiguous, starting at src) into dst, exactly as
 * ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, imatrix).
 * imatrix is NULL or points at n_per_row non-negative weights shared by every
 * row.  dst receives nrows * quant_row_size(type, n_per_row) bytes, rows back
 * to back.  Returns the bytes written, or 0 (nothing written) when the type is
 * unsupported, nrows < 0, or n_per_row is not a positive multiple of the
 * block size. */
size_t quant_chunk(uint32_t type, const float *src, void *dst, int64_t nrows,
                   int64_t n_per_row, const float *imatrix);

#endif
