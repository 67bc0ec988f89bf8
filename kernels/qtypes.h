/*
 * qtypes.h - the ggml tensor type table, the one place ggml type ids are
 * defined: ids as stored in GGUF, names, block size, bytes per block,
 * conversion to and from f32, and the activation type a weight of each
 * type is dotted with (vec_dot).  The block byte layouts themselves live in
 * kernels/qblock.h (static_assert'ed), the reference conversions in
 * kernels/cpu/qconv_ref.c and the reference quantizers in kernels/quant.h.
 * It belongs to kernels/ (the lowest layer: kernels and library both use
 * it); common/ includes it from here.
 *
 * Every id that current llama.cpp accepts is listed, so that files holding
 * types we cannot compute with can still be read, inspected and copied;
 * to_float is NULL for those.
 */
#ifndef LLMKIT_QTYPES_H
#define LLMKIT_QTYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_NVFP4 = 40,
    GGML_TYPE_Q1_0 = 41,
    GGML_TYPE_Q2_0 = 42,
    GGML_TYPE_COUNT = 43,
};

/* to_float: n elements (a multiple of blck) from x into y.
 * from_float: n floats from x into blocks at y (reference quantizer). */
typedef void (*qtype_to_float_fn)(const void *x, float *y, int64_t n);
typedef void (*qtype_from_float_fn)(const float *x, void *y, int64_t n);

struct qtype {
    const char *name;        /* "Q4_K", as llama.cpp prints it */
    int blck;                /* elements per block; 0 = not a type */
    size_t bytes;            /* bytes per block */
    qtype_to_float_fn to_float;     /* NULL where not supported */
    qtype_from_float_fn from_float; /* NULL where not supported */
    /* vec_dot: the type the matmul kernels convert activations to before
     * dotting them with a weight of this type (ggml-cpu's vec_dot_type):
     * F32 -> F32, F16 -> F16, BF16 -> BF16, Q4_0/Q5_0/Q8_0/IQ4_NL -> Q8_0,
     * Q4_1/Q5_1 -> Q8_1, k-quants and IQ4_XS -> Q8_K; -1 for a type no
     * kernel takes as a weight (kernels/cpu/mm_layout.h reads it). */
    int vec_dot;
};

/* qtype_get() : the entry for a ggml type id, or NULL when the id is out of
 * range or names a removed type (block size 0). */
const struct qtype *qtype_get(uint32_t type);

/* qtype_by_name() : case-insensitive lookup ("q4_k", "F16"); -1 if unknown. */
int qtype_by_name(const char *name);

/* qtype_row_bytes() : bytes of a row of ne0 elements; 0 if ne0 is not a
 * multiple of the block size or the type is unknown. */
size_t qtype_row_bytes(uint32_t type, int64_t ne0);

/* ---- scalar conversions (bit-exact with ggml) ---- */
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);   /* IEEE round-to-nearest-even, NaN -> sign|0x7e00 */
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);   /* RNE, NaN -> (u>>16)|0x40 */

#endif
