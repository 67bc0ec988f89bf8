/*
 * qtypes.c - the ggml tensor type table (ids, names, block geometry, codecs,
 * dot type) and the public fp16/bf16 scalar conversions.  The conversions
 * themselves are the inline ones of kernels/qconv.h, so that kernels and
 * library agree bit for bit; the row routines come from
 * kernels/cpu/qconv_ref.c.
 *
 * Ids, names and sizes follow ggml's type_traits[] (ggml.c), the dot types
 * ggml-cpu's type_traits_cpu[].vec_dot_type for the weight types our matmul
 * kernels take.  Ids of removed types (4, 5, 31-33, 36-38) have blck 0 and
 * are not types.
 */
#include <strings.h>

#include "qconv.h"
#include "qtypes.h"

/* T(name, elements per block, bytes per block, to_float, from_float, vec_dot) */
#define T(nm, bl, by, to, from, vd) [GGML_TYPE_##nm] = { #nm, bl, by, to, from, vd }

static const struct qtype qtype_table[GGML_TYPE_COUNT] = {
    T(F32, 1, 4, dequantize_row_f32_ref, quantize_row_f32_ref, GGML_TYPE_F32),
    T(F16, 1, 2, dequantize_row_f16_ref, quantize_row_f16_ref, GGML_TYPE_F16),
    T(Q4_0, QK4_0, sizeof(struct block_q4_0), dequantize_row_q4_0_ref, NULL, GGML_TYPE_Q8_0),
    T(Q4_1, QK4_1, sizeof(struct block_q4_1), dequantize_row_q4_1_ref, NULL, GGML_TYPE_Q8_1),
    T(Q5_0, QK5_0, sizeof(struct block_q5_0), dequantize_row_q5_0_ref, NULL, GGML_TYPE_Q8_0),
    T(Q5_1, QK5_1, sizeof(struct block_q5_1), dequantize_row_q5_1_ref, NULL, GGML_TYPE_Q8_1),
    T(Q8_0, QK8_0, sizeof(struct block_q8_0), dequantize_row_q8_0_ref, NULL, GGML_TYPE_Q8_0),
    T(Q8_1, QK8_1, sizeof(struct block_q8_1), dequantize_row_q8_1_ref, NULL, -1),
    T(Q2_K, QK_K, sizeof(struct block_q2_K), dequantize_row_q2_k_ref, NULL, GGML_TYPE_Q8_K),
    T(Q3_K, QK_K, sizeof(struct block_q3_K), dequantize_row_q3_k_ref, NULL, GGML_TYPE_Q8_K),
    T(Q4_K, QK_K, sizeof(struct block_q4_K), dequantize_row_q4_k_ref, NULL, GGML_TYPE_Q8_K),
    T(Q5_K, QK_K, sizeof(struct block_q5_K), dequantize_row_q5_k_ref, NULL, GGML_TYPE_Q8_K),
    T(Q6_K, QK_K, sizeof(struct block_q6_K), dequantize_row_q6_k_ref, NULL, GGML_TYPE_Q8_K),
    T(Q8_K, QK_K, sizeof(struct block_q8_K), dequantize_row_q8_k_ref, NULL, -1),
    T(IQ2_XXS, 256, 66, NULL, NULL, -1),
    T(IQ2_XS, 256, 74, NULL, NULL, -1),
    T(IQ3_XXS, 256, 98, NULL, NULL, -1),
    T(IQ1_S, 256, 50, NULL, NULL, -1),
    T(IQ4_NL, QK4_NL, sizeof(struct block_iq4_nl), dequantize_row_iq4_nl_ref, NULL, GGML_TYPE_Q8_0),
    T(IQ3_S, 256, 110, NULL, NULL, -1),
    T(IQ2_S, 256, 82, NULL, NULL, -1),
    T(IQ4_XS, QK_K, sizeof(struct block_iq4_xs), dequantize_row_iq4_xs_ref, NULL, GGML_TYPE_Q8_K),
    T(I8, 1, 1, NULL, NULL, -1),
    T(I16, 1, 2, NULL, NULL, -1),
    T(I32, 1, 4, NULL, NULL, -1),
    T(I64, 1, 8, NULL, NULL, -1),
    T(F64, 1, 8, NULL, NULL, -1),
    T(IQ1_M, 256, 56, NULL, NULL, -1),
    T(BF16, 1, 2, dequantize_row_bf16_ref, quantize_row_bf16_ref, GGML_TYPE_BF16),
    T(TQ1_0, 256, 54, NULL, NULL, -1),
    T(TQ2_0, 256, 66, NULL, NULL, -1),
    T(MXFP4, 32, 17, NULL, NULL, -1),
    T(NVFP4, 64, 36, NULL, NULL, -1),
    T(Q1_0, 128, 18, NULL, NULL, -1),
    T(Q2_0, 64, 18, NULL, NULL, -1),
};

#undef T

const struct qtype *
qtype_get(uint32_t type)
{
    if (type >= GGML_TYPE_COUNT || qtype_table[type].blck == 0)
        return NULL;
    return &qtype_table[type];
}

int
qtype_by_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < GGML_TYPE_COUNT; i++)
        if (qtype_table[i].blck && strcasecmp(qtype_table[i].name, name) == 0)
            return i;
    return -1;
}

size_t
qtype_row_bytes(uint32_t type, int64_t ne0)
{
    const struct qtype *t = qtype_get(type);

    if (!t || ne0 < 0 || ne0 % t->blck)
        return 0;
    uint64_t nb = (uint64_t)(ne0 / t->blck);
    if (nb > SIZE_MAX / t->bytes)
        return 0;
    return (size_t)nb * t->bytes;
}

float
fp16_to_fp32(uint16_t h)
{
    return qconv_fp16_to_fp32(h);
}

uint16_t
fp32_to_fp16(float f)
{
    return qconv_fp32_to_fp16(f);
}

float
bf16_to_fp32(uint16_t h)
{
    return qconv_bf16_to_fp32(h);
}

uint16_t
fp32_to_bf16(float f)
{
    return qconv_fp32_to_bf16(f);
}
