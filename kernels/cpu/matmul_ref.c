/*
 * matmul_ref.c - reference matmul of a weight [rows, cols] stored in any
 * supported ggml type by f32 activations, and the embedding row lookup.
 *
 * The specification, not the fast path: each weight row is dequantized once
 * into f32 (the bit-exact qconv rows) and dotted with every token's
 * activation row, so a call reads the weights once whatever the batch size.
 */
#include <stddef.h>
#include <stdint.h>

#include "ops.h"
#include "qconv.h"

typedef void (*row_fn)(const void *x, float *y, int64_t n);

/* Weight types the kernels compute with (ids as in enum ggml_type). */
static row_fn
row_converter(uint32_t wtype)
{
    switch (wtype) {
    case 0: return dequantize_row_f32_ref;      /* F32 */
    case 1: return dequantize_row_f16_ref;      /* F16 */
    case 2: return dequantize_row_q4_0_ref;
    case 3: return dequantize_row_q4_1_ref;
    case 6: return dequantize_row_q5_0_ref;
    case 7: return dequantize_row_q5_1_ref;
    case 8: return dequantize_row_q8_0_ref;
    case 10: return dequantize_row_q2_k_ref;
    case 11: return dequantize_row_q3_k_ref;
    case 12: return dequantize_row_q4_k_ref;
    case 13: return dequantize_row_q5_k_ref;
    case 14: return dequantize_row_q6_k_ref;
    case 20: return dequantize_row_iq4_nl_ref;
    case 23: return dequantize_row_iq4_xs_ref;
    case 30: return dequantize_row_bf16_ref;    /* BF16 */
    default: return NULL;
    }
}

int
ops_mm_supported_ref(uint32_t wtype)
{
    return row_converter(wtype) != NULL;
}

size_t
ops_mm_work_size_ref(uint32_t wtype, int64_t n_tok, int64_t cols)
{
    (void)wtype;
    (void)n_tok;
    (void)cols;
    return 0;
}

void
ops_mm_prepare_ref(void *work, uint32_t wtype, const float *x, int64_t ldx, int64_t n_tok,
                   int64_t cols)
{
    /* The reference consumes f32 activations as they are. */
    (void)work;
    (void)wtype;
    (void)x;
    (void)ldx;
    (void)n_tok;
    (void)cols;
}

int64_t
ops_mm_tmp_floats_ref(int64_t cols)
{
    return cols;
}

static float
dot_f32(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void
ops_mm_rows_ref(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                const void *work, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
                int64_t r0, int64_t r1, float *tmp)
{
    row_fn conv = row_converter(wtype);
    const uint8_t *wb = w;

    (void)work;
    for (int64_t r = r0; r < r1; r++) {
        const float *wr;
        if (wtype == 0) {
            wr = (const float *)(const void *)(wb + (size_t)r * row_bytes);
        } else {
            conv(wb + (size_t)r * row_bytes, tmp, cols);
            wr = tmp;
        }
        for (int64_t t = 0; t < n_tok; t++)
            y[t * ldy + r] = dot_f32(wr, x + t * ldx, cols);
    }
}

void
ops_get_row_ref(float *y, const void *w, size_t row_bytes, uint32_t wtype, int64_t row,
                int64_t cols)
{
    row_fn conv = row_converter(wtype);

    conv((const uint8_t *)w + (size_t)row * row_bytes, y, cols);
}
