/*
 * mm_layout.h - what the matmul kernels share: the ggml type ids they use,
 * the activation form each weight type is dotted with, and the layout of
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

/* ggml type ids used here (enum ggml_type lives in common/qtypes.h, which
 * the kernels do not include). */
enum {
    T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8,
    T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_IQ4_NL = 20,
    T_IQ4_XS = 23, T_BF16 = 30,
};

enum act { ACT_NONE, ACT_F32, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_1, ACT_Q8_K };

static inline enum act
act_type(uint32_t wtype)
{
    switch (wtype) {
    case T_F32: return ACT_F32;
    case T_F16: return ACT_F16;
    case T_BF16: return ACT_BF16;
    case T_Q4_0: case T_Q5_0: case T_Q8_0: case T_IQ4_NL: return ACT_Q8_0;
    case T_Q4_1: case T_Q5_1: return ACT_Q8_1;
    case T_Q2_K: case T_Q3_K: case T_Q4_K: case T_Q5_K: case T_Q6_K: case T_IQ4_XS:
        return ACT_Q8_K;
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

#endif
