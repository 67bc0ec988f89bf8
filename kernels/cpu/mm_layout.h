/*
 * mm_layout.h - what the matmul kernels share: short names for the ggml
 * type ids they use, the activation form each weight type is dotted with
 * (from the type table's vec_dot), and the layout of
 * the converted activations in the work buffer (mm_prepare writes it,
 * mm_rows reads it; every implementation uses this one layout, so a
 * reference prepare and an AVX2 prepare are interchangeable and tested so).
 * Only kernels/cpu/ includes it.
 */
#ifndef LLMKIT_MM_LAYOUT_H
#define LLMKIT_MM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "qblock.h"
#include "qtypes.h"

/* Short names of the ggml type ids (enum ggml_type, kernels/qtypes.h) that
 * the matmul kernels switch on; aliases, not a second set of ids. */
#define T_F32 GGML_TYPE_F32
#define T_F16 GGML_TYPE_F16
#define T_Q4_0 GGML_TYPE_Q4_0
#define T_Q4_1 GGML_TYPE_Q4_1
#define T_Q5_0 GGML_TYPE_Q5_0
#define T_Q5_1 GGML_TYPE_Q5_1
#define T_Q8_0 GGML_TYPE_Q8_0
#define T_Q2_K GGML_TYPE_Q2_K
#define T_Q3_K GGML_TYPE_Q3_K
#define T_Q4_K GGML_TYPE_Q4_K
#define T_Q5_K GGML_TYPE_Q5_K
#define T_Q6_K GGML_TYPE_Q6_K
#define T_IQ4_NL GGML_TYPE_IQ4_NL
#define T_IQ4_XS GGML_TYPE_IQ4_XS
#define T_BF16 GGML_TYPE_BF16

enum act { ACT_NONE, ACT_F32, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_1, ACT_Q8_K };

/* act_type() : the activation form a weight of type wtype is dotted with:
 * its vec_dot type in the type table; ACT_NONE when no kernel takes wtype
 * as a weight. */
static inline enum act
act_type(uint32_t wtype)
{
    const struct qtype *t = qtype_get(wtype);

    switch (t ? t->vec_dot : -1) {
    case GGML_TYPE_F32: return ACT_F32;
    case GGML_TYPE_F16: return ACT_F16;
    case GGML_TYPE_BF16: return ACT_BF16;
    case GGML_TYPE_Q8_0: return ACT_Q8_0;
    case GGML_TYPE_Q8_1: return ACT_Q8_1;
    case GGML_TYPE_Q8_K: return ACT_Q8_K;
    default: return ACT_NONE;
    }
}

/*
 * Converted activations, per token (the work buffer holds n_tok of these):
 *   F16/BF16: cols floats, each rounded through f16 / bf16;
 *   Q8_0/Q8_1: int8 codes [cols] | float d [cols/32] | float s [cols/32]
 *              (s = fp16(d * sum of codes), Q8_1 only);
 *   Q8_K:      int8 codes [cols] | float d [cols/256] | int16 bsums [cols/16].
 * The block scales are kept as f32 (exact widenings of the fp16 values the
 * block formats store) so the dot loops do no conversions.
 */
struct act_row {
    const int8_t *q;
    const float *d, *s;
    const int16_t *bsums;
};

static inline size_t
act_row_bytes(enum act a, int64_t cols)
{
    size_t n = (size_t)cols;
    switch (a) {
    case ACT_F16: case ACT_BF16: return n * sizeof(float);
    case ACT_Q8_0: case ACT_Q8_1: return n + 2 * (n / 32) * sizeof(float);
    case ACT_Q8_K: return n + (n / QK_K) * sizeof(float) + (n / 16) * sizeof(int16_t);
    default: return 0;
    }
}

/* scales first so they stay aligned (cols is a multiple of 32) */
static inline void
act_row_at(struct act_row *r, enum act a, const void *base, int64_t cols)
{
    const uint8_t *p = base;
    if (a == ACT_Q8_K) {
        r->d = (const float *)(const void *)p;
        r->s = NULL;
        r->bsums = (const int16_t *)(const void *)(r->d + cols / QK_K);
        r->q = (const int8_t *)(r->bsums + cols / 16);
    } else {
        r->d = (const float *)(const void *)p;
        r->s = r->d + cols / 32;
        r->bsums = NULL;
        r->q = (const int8_t *)(r->s + cols / 32);
    }
}

/* ggml's horizontal sum of 8 f32 lanes (hsum_float_8, tinyBLAS's hsum):
 * s_k = v[k + 4] + v[k], then (s0 + s2) + (s1 + s3) */
static inline float
mm_hsum8_ref(const float *v)
{
    float s[4];
    for (int k = 0; k < 4; k++)
        s[k] = v[k + 4] + v[k];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

#endif
