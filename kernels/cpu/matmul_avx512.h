/*
 * matmul_avx512.h - the AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels
 * (cpu/matmul_avx512.c).  Only callable when kernel_ops_avx512.available()
 * is 1; kernels/dispatch.c puts them in the "avx512" table, whose other
 * entries are the AVX2 ones.
 */
#ifndef LLMKIT_MATMUL_AVX512_H
#define LLMKIT_MATMUL_AVX512_H

#include "ops.h"

/* The mm_rows contract of ops.h, with the bits of ops_mm_rows_avx2 for every
 * type, batch and row range (the work buffer is the AVX2/reference one):
 * batches of 4+ tokens of the legacy types, Q4_K and F16, the decode of
 * Q8_0 and Q5_0, and packed Q4_0 (wtype | OPS_MM_PACKED) at every
 * batch size run the AVX-512 kernels, the rest the AVX2 ones. */
void ops_mm_rows_avx512(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                        const void *work, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
                        int64_t r0, int64_t r1, float *tmp);

/* kernel_ops.mm_pack_size / mm_pack (ops.h): Q4_0 matrices (cols / 32 <=
 * 128) packed in groups of 8 rows for the rows-in-lanes kernel; 0 bytes
 * (not packed) for anything else. */
size_t ops_mm_pack_size_avx512(uint32_t wtype, int64_t rows, int64_t cols);
void ops_mm_pack_avx512(void *dst, const void *w, size_t row_bytes, uint32_t wtype, int64_t rows,
                        int64_t cols);

/* The mm_rows_mirror contract (ops.h) with the bits of
 * ops_mm_rows_mirror_avx2 for every input: F32/F16/BF16 in tinyBLAS's order,
 * two rows per 512-bit register; other types through the avx2 kernel. */
void ops_mm_rows_mirror_avx512(float *y, int64_t ldy, const void *w, size_t row_bytes,
                               uint32_t wtype, const void *work, const float *x, int64_t ldx,
                               int64_t n_tok, int64_t cols, int64_t r0, int64_t r1, float *tmp);

/* Executes one 512-bit operation and one VPDPBUSD; returns 1.  The CPU
 * check calls it under a SIGILL guard, so that a CPU or hypervisor that
 * lists the features but faults on them falls back instead of crashing. */
int ops_avx512_probe(void);

#endif
