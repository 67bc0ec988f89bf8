/*
 * qconv.h - scalar reference conversions between ggml tensor types and f32.
 *
 * These are the specification: plain loops, bit-exact with ggml's
 * dequantize_row_* / ggml_fp16_to_fp32_row / ggml_fp32_to_fp16_row /
 * ggml_fp32_to_bf16_row_ref when built with -ffp-contract=off (float
 * operations are written in ggml's order; see kernels/qblock.h).
 *
 * Every row function has the qtype_to_float_fn / qtype_from_float_fn shape:
 * x points at n elements' worth of source data and y at the destination.
 * For block types n must be a multiple of the block size (QK4_0, QK_K ...);
 * callers check this (qtype_row_bytes returns 0 otherwise).  Source and
 * destination need no particular alignment and must not overlap.  The host
 * must be little-endian (checked at compile time in qconv_ref.c).
 */
#ifndef LLMKIT_QCONV_H
#define LLMKIT_QCONV_H

#include <stdint.h>
#include <string.h>

#include "qblock.h"

/* ---- scalar fp16 / bf16 (inline: used in hot loops of other kernels) ---- */

static inline uint32_t
qconv_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float
qconv_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* qconv_fp16_to_fp32() : exact widening.  A NaN keeps its sign and payload and
 * comes out quiet (bit 22 set), as ggml's conversion (F16C or the portable
 * float trick) produces. */
static inline float
qconv_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;

    if (exp == 0x1f)
        return qconv_f32_from_bits(sign | 0x7f800000u | (man ? 0x400000u | man << 13 : 0));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in binary32 */
        float v = (float)man * 0x1p-24f;
        return qconv_f32_from_bits(sign | qconv_f32_bits(v));
    }
    return qconv_f32_from_bits(sign | (exp + 112) << 23 | man << 13);
}

/* qconv_fp32_to_fp16() : IEEE round-to-nearest-even, subnormals rounded
 * correctly, |x| >= 65520 -> +-Inf, NaN -> sign | 0x7e00, -0.0 kept. */
static inline uint16_t
qconv_fp32_to_fp16(float f)
{
    uint32_t u = qconv_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u)
        return sign | 0x7e00;
    if (a >= 0x477ff000u)               /* 65520: rounds to 2^16, i.e. overflow */
        return sign | 0x7c00;
    if (a >= 0x38800000u) {             /* 2^-14: normal half */
        uint32_t r = a + 0x0fffu + ((a >> 13) & 1);
        return sign | (uint16_t)((r - 0x38000000u) >> 13);
    }
    if (a <= 0x33000000u)               /* <= 2^-25: rounds to zero (tie -> even) */
        return sign;
    /* subnormal half: a = m * 2^(e - 150), result in units of 2^-24 */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;           /* 14 .. 24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return sign | (uint16_t)q;
}

/* qconv_bf16_to_fp32() : bits << 16 (NaNs unchanged). */
static inline float
qconv_bf16_to_fp32(uint16_t h)
{
    return qconv_f32_from_bits((uint32_t)h << 16);
}

/* qconv_fp32_to_bf16() : RNE; NaN -> (u >> 16) | 0x40; Inf kept; subnormals
 * not flushed (ggml_compute_fp32_to_bf16). */
static inline uint16_t
qconv_fp32_to_bf16(float f)
{
    uint32_t u = qconv_f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* ---- rows to f32 (to_float) ---- */

void dequantize_row_f32_ref(const void *x, float *y, int64_t n);
void dequantize_row_f16_ref(const void *x, float *y, int64_t n);
void dequantize_row_bf16_ref(const void *x, float *y, int64_t n);
void dequantize_row_q4_0_ref(const void *x, float *y, int64_t n);
void dequantize_row_q4_1_ref(const void *x, float *y, int64_t n);
void dequantize_row_q5_0_ref(const void *x, float *y, int64_t n);
void dequantize_row_q5_1_ref(const void *x, float *y, int64_t n);
void dequantize_row_q8_0_ref(const void *x, float *y, int64_t n);
void dequantize_row_q8_1_ref(const void *x, float *y, int64_t n);
void dequantize_row_q2_k_ref(const void *x, float *y, int64_t n);
void dequantize_row_q3_k_ref(const void *x, float *y, int64_t n);
void dequantize_row_q4_k_ref(const void *x, float *y, int64_t n);
void dequantize_row_q5_k_ref(const void *x, float *y, int64_t n);
void dequantize_row_q6_k_ref(const void *x, float *y, int64_t n);
void dequantize_row_q8_k_ref(const void *x, float *y, int64_t n);
void dequantize_row_iq4_nl_ref(const void *x, float *y, int64_t n);
void dequantize_row_iq4_xs_ref(const void *x, float *y, int64_t n);

/* ---- f32 rows to a type (from_float) ----
 * Only the plain float types here; the quantizers of the block types live
 * with the quantization code. */

void quantize_row_f32_ref(const float *x, void *y, int64_t n);
void quantize_row_f16_ref(const float *x, void *y, int64_t n);
void quantize_row_bf16_ref(const float *x, void *y, int64_t n);

#endif
