/*
 * qconv_ref.c - scalar reference conversions of ggml tensor rows to and from
 * f32 (see qconv.h for the contract, qblock.h for the byte layouts).
 *
 * Blocks are memcpy'd out of the source into a local struct, so the source
 * needs no alignment; the float operations follow ggml's order literally and
 * the file must be built with -ffp-contract=off (the Makefile does).
 */
#include <string.h>

#include "qconv.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "qconv_ref.c reads little-endian block fields directly: big-endian hosts are not supported"
#endif

#define fp16 qconv_fp16_to_fp32

/* ---- plain float types ---- */

void
dequantize_row_f32_ref(const void *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

void
dequantize_row_f16_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *p = x;

    for (int64_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        y[i] = qconv_fp16_to_fp32(h);
    }
}

void
dequantize_row_bf16_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *p = x;

    for (int64_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        y[i] = qconv_bf16_to_fp32(h);
    }
}

void
quantize_row_f32_ref(const float *x, void *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

void
quantize_row_f16_ref(const float *x, void *y, int64_t n)
{
    uint8_t *p = y;

    for (int64_t i = 0; i < n; i++) {
        uint16_t h = qconv_fp32_to_fp16(x[i]);
        p[2 * i] = (uint8_t)h;
        p[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

void
quantize_row_bf16_ref(const float *x, void *y, int64_t n)
{
    uint8_t *p = y;

    for (int64_t i = 0; i < n; i++) {
        uint16_t h = qconv_fp32_to_bf16(x[i]);
        p[2 * i] = (uint8_t)h;
        p[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

/* ---- legacy 32-element blocks ---- */

void
dequantize_row_q4_0_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q4_0 b;

    for (int64_t i = 0; i < n / QK4_0; i++, src += sizeof b, y += QK4_0) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int x0 = (b.qs[j] & 0x0f) - 8;
            const int x1 = (b.qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + QK4_0 / 2] = (float)x1 * d;
        }
    }
}

void
dequantize_row_q4_1_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q4_1 b;

    for (int64_t i = 0; i < n / QK4_1; i++, src += sizeof b, y += QK4_1) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        const float m = fp16(b.m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int x0 = b.qs[j] & 0x0f;
            const int x1 = b.qs[j] >> 4;
            y[j] = (float)x0 * d + m;
            y[j + QK4_1 / 2] = (float)x1 * d + m;
        }
    }
}

void
dequantize_row_q5_0_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q5_0 b;

    for (int64_t i = 0; i < n / QK5_0; i++, src += sizeof b, y += QK5_0) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        const uint32_t qh = (uint32_t)b.qh[0] | (uint32_t)b.qh[1] << 8 |
                            (uint32_t)b.qh[2] << 16 | (uint32_t)b.qh[3] << 24;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int h0 = (qh >> j) & 1;
            const int h1 = (qh >> (j + QK5_0 / 2)) & 1;
            const int x0 = ((b.qs[j] & 0x0f) | h0 << 4) - 16;
            const int x1 = ((b.qs[j] >> 4) | h1 << 4) - 16;
            y[j] = (float)x0 * d;
            y[j + QK5_0 / 2] = (float)x1 * d;
        }
    }
}

void
dequantize_row_q5_1_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q5_1 b;

    for (int64_t i = 0; i < n / QK5_1; i++, src += sizeof b, y += QK5_1) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        const float m = fp16(b.m);
        const uint32_t qh = (uint32_t)b.qh[0] | (uint32_t)b.qh[1] << 8 |
                            (uint32_t)b.qh[2] << 16 | (uint32_t)b.qh[3] << 24;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int h0 = (qh >> j) & 1;
            const int h1 = (qh >> (j + QK5_1 / 2)) & 1;
            const int x0 = (b.qs[j] & 0x0f) | h0 << 4;
            const int x1 = (b.qs[j] >> 4) | h1 << 4;
            y[j] = (float)x0 * d + m;
            y[j + QK5_1 / 2] = (float)x1 * d + m;
        }
    }
}

void
dequantize_row_q8_0_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q8_0 b;

    for (int64_t i = 0; i < n / QK8_0; i++, src += sizeof b, y += QK8_0) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        for (int j = 0; j < QK8_0; j++)
            y[j] = (float)b.qs[j] * d;
    }
}

void
dequantize_row_q8_1_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q8_1 b;

    for (int64_t i = 0; i < n / QK8_1; i++, src += sizeof b, y += QK8_1) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        for (int j = 0; j < QK8_1; j++)
            y[j] = (float)b.qs[j] * d;
    }
}

void
dequantize_row_iq4_nl_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_iq4_nl b;

    for (int64_t i = 0; i < n / QK4_NL; i++, src += sizeof b, y += QK4_NL) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * (float)kvalues_iq4nl[b.qs[j] & 0x0f];
            y[j + QK4_NL / 2] = d * (float)kvalues_iq4nl[b.qs[j] >> 4];
        }
    }
}

/* ---- k-quants ---- */

void
dequantize_row_q2_k_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q2_K b;

    for (int64_t i = 0; i < n / QK_K; i++, src += sizeof b) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        const float dmin = fp16(b.dmin);
        for (int e = 0; e < QK_K; e++) {
            const int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
            const uint8_t sc = b.scales[e >> 4];
            const float dl = d * (float)(sc & 0x0f);
            const float ml = dmin * (float)(sc >> 4);
            const int q = (b.qs[32 * h + l] >> (2 * g)) & 3;
            *y++ = dl * (float)q - ml;
        }
    }
}

/* q3_k_scale() : the signed 6-bit scale (code - 32) of 16-element sub-block k. */
static int
q3_k_scale(const uint8_t *scales, int k)
{
    const int lo = k < 8 ? scales[k] & 0x0f : scales[k - 8] >> 4;
    const int hi = (scales[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

void
dequantize_row_q3_k_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q3_K b;

    for (int64_t i = 0; i < n / QK_K; i++, src += sizeof b) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        for (int e = 0; e < QK_K; e++) {
            const int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
            const float dl = d * (float)q3_k_scale(b.scales, e >> 4);
            const int lo = (b.qs[32 * h + l] >> (2 * g)) & 3;
            const int hb = (b.hmask[l] >> (e >> 5)) & 1;
            const int q = lo - (hb ? 0 : 4);
            *y++ = dl * (float)q;
        }
    }
}

/* k4_scale_min() : the 6-bit scale and min codes of 32-element sub-block j
 * of a Q4_K/Q5_K super-block (ggml's get_scale_min_k4). */
static void
k4_scale_min(const uint8_t *scales, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 0x0f) | (scales[j - 4] >> 6) << 4;
        *m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
    }
}

void
dequantize_row_q4_k_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q4_K b;

    for (int64_t i = 0; i < n / QK_K; i++, src += sizeof b) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        const float dmin = fp16(b.dmin);
        for (int s = 0; s < QK_K / 32; s++) {
            int sc, m;
            k4_scale_min(b.scales, s, &sc, &m);
            const float d1 = d * (float)sc;
            const float m1 = dmin * (float)m;
            /* sub-block s = chunk c's low (s even) or high (s odd) nibbles */
            const uint8_t *q = b.qs + 32 * (s >> 1);
            const int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] >> shift) & 0x0f) - m1;
        }
    }
}

void
dequantize_row_q5_k_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q5_K b;

    for (int64_t i = 0; i < n / QK_K; i++, src += sizeof b) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        const float dmin = fp16(b.dmin);
        for (int s = 0; s < QK_K / 32; s++) {
            int sc, m;
            k4_scale_min(b.scales, s, &sc, &m);
            const float d1 = d * (float)sc;
            const float m1 = dmin * (float)m;
            const uint8_t *q = b.qs + 32 * (s >> 1);
            const int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0x0f) + (((b.qh[l] >> s) & 1) << 4);
                *y++ = d1 * (float)v - m1;
            }
        }
    }
}

void
dequantize_row_q6_k_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q6_K b;

    for (int64_t i = 0; i < n / QK_K; i++, src += sizeof b) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        for (int e = 0; e < QK_K; e++) {
            const int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
            const uint8_t byte = b.ql[64 * h + 32 * (g & 1) + l];
            const int lo = g < 2 ? byte & 0x0f : byte >> 4;
            const int hi = (b.qh[32 * h + l] >> (2 * g)) & 3;
            const int q = (lo | hi << 4) - 32;
            *y++ = d * (float)b.scales[e >> 4] * (float)q;
        }
    }
}

void
dequantize_row_q8_k_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_q8_K b;

    for (int64_t i = 0; i < n / QK_K; i++, src += sizeof b) {
        memcpy(&b, src, sizeof b);
        for (int j = 0; j < QK_K; j++)
            *y++ = b.d * (float)b.qs[j];
    }
}

void
dequantize_row_iq4_xs_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *src = x;
    struct block_iq4_xs b;

    for (int64_t i = 0; i < n / QK_K; i++, src += sizeof b) {
        memcpy(&b, src, sizeof b);
        const float d = fp16(b.d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int lo = (b.scales_l[ib / 2] >> (4 * (ib & 1))) & 0x0f;
            const int hi = (b.scales_h >> (2 * ib)) & 3;
            const float dl = d * (float)((lo | hi << 4) - 32);
            const uint8_t *qs = b.qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)kvalues_iq4nl[qs[j] & 0x0f];
                y[j + 16] = dl * (float)kvalues_iq4nl[qs[j] >> 4];
            }
            y += 32;
        }
    }
}
