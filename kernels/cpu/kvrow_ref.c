/*
 * kvrow_ref.c - the KV cache's row codec (ops.h ops_kv_row_put/get): f32,
 * f16 and q8_0 rows as ggml's x86 CPU backend stores and reads them.
 */
#include <math.h>
#include <string.h>

#include "ops.h"
#include "qblock.h"
#include "qconv.h"
#include "qtypes.h"

void
ops_kv_row_put(uint32_t dtype, void *dst, const float *src, int64_t n)
{
    uint8_t *o = dst;

    if (dtype == GGML_TYPE_F32) {
        memcpy(o, src, (size_t)n * sizeof(float));
    } else if (dtype == GGML_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t u = qconv_fp32_to_fp16(src[i]);
            memcpy(o + 2 * i, &u, 2);
        }
    } else if (dtype == GGML_TYPE_Q8_0) {
        for (int64_t b = 0; b < n / QK8_0; b++) {
            struct block_q8_0 blk;
            const float *x = src + b * QK8_0;
            float amax = 0.0f;
            for (int j = 0; j < QK8_0; j++)
                if (fabsf(x[j]) > amax)
                    amax = fabsf(x[j]);
            float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            blk.d = qconv_fp32_to_fp16(amax / 127.0f);
            for (int j = 0; j < QK8_0; j++)
                blk.qs[j] = (int8_t)nearbyintf(x[j] * id);
            memcpy(o + (size_t)b * sizeof(blk), &blk, sizeof(blk));
        }
    }
}

void
ops_kv_row_get(uint32_t dtype, float *dst, const void *src, int64_t n)
{
    const uint8_t *p = src;

    if (dtype == GGML_TYPE_F32) {
        memcpy(dst, p, (size_t)n * sizeof(float));
    } else if (dtype == GGML_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t u;
            memcpy(&u, p + 2 * i, 2);
            dst[i] = qconv_fp16_to_fp32(u);
        }
    } else if (dtype == GGML_TYPE_Q8_0) {
        dequantize_row_q8_0_ref(src, dst, n);
    }
}
