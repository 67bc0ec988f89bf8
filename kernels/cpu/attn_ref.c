/*
 * attn_ref.c - reference paged attention for one query token and one KV
 * head group: online softmax over the sequence's KV blocks, walked block
 * by block, so no score row longer than a block ever exists.
 *
 * The update order and precision are those of llama.cpp's CPU flash
 * attention (ggml_compute_forward_flash_attn_ext_f16_one_chunk), because
 * greedy decoding of small models is sensitive to them: for each visible
 * slot in order, s = scale * q.k; when s exceeds the running maximum M the
 * accumulator and the sum are scaled by exp(M_old - s), otherwise the slot
 * is weighted by exp(s - M); acc += w * v, S = S * ms + w.  With an f16
 * cache the query is rounded to f16 before the dot products and the
 * accumulator is kept in f16 precision (rounded after every update), as
 * ggml's VKQ16 is; with an f32 cache everything stays f32.
 *
 * Each K and V row of the group's KV head is read once for all the group's
 * query heads.
 */
#include <math.h>
#include <stdint.h>

#include "ops.h"
#include "qconv.h"

int64_t
ops_attn_scratch_floats_ref(int64_t n_q, int64_t block_size, int64_t head_dim,
                            int64_t head_dim_v)
{
    (void)head_dim;
    /* acc [n_q][head_dim_v] | M [n_q] | S [n_q]; block_size is not needed */
    (void)block_size;
    return n_q * head_dim_v + 2 * n_q;
}

static inline float
kv_elem(const uint8_t *row, int64_t i, int f16)
{
    if (f16) {
        uint16_t h;
        memcpy(&h, row + 2 * i, 2);
        return qconv_fp16_to_fp32(h);
    }
    float f;
    memcpy(&f, row + 4 * i, 4);
    return f;
}

static inline float
round16(float x)
{
    return qconv_fp16_to_fp32(qconv_fp32_to_fp16(x));
}

void
ops_attn_ref(const struct attn_args *a, float *scratch)
{
    const int64_t nq = a->n_q, bs = a->block_size, dk = a->head_dim, dv = a->head_dim_v;
    const int f16 = a->kv_type == 1;
    const size_t esz = f16 ? 2 : 4;
    float *acc = scratch;               /* [nq][dv] */
    float *M = acc + nq * dv;           /* [nq] */
    float *S = M + nq;                  /* [nq] */

    for (int64_t h = 0; h < nq; h++) {
        M[h] = -INFINITY;
        S[h] = 0.0f;
        for (int64_t i = 0; i < dv; i++)
            acc[h * dv + i] = 0.0f;
    }

    for (int64_t s = 0; s < a->n_kv; s++) {
        if (a->vis && !a->vis[s])
            continue;
        size_t blk = (size_t)a->table[s / bs] * a->block_stride;
        const uint8_t *krow = a->k_base + blk + (size_t)(s % bs) * (size_t)dk * esz;
        const uint8_t *vrow = a->v_base + blk + (size_t)(s % bs) * (size_t)dv * esz;

        for (int64_t h = 0; h < nq; h++) {
            const float *qh = a->q + h * dk;
            float *ah = acc + h * dv;
            float dot = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                dot += (f16 ? round16(qh[i]) : qh[i]) * kv_elem(krow, i, f16);
            float sc = dot * a->scale;
            float ms = 1.0f, vs = 1.0f;
            if (sc > M[h]) {
                float mold = M[h];
                M[h] = sc;
                ms = expf(mold - sc);
                for (int64_t i = 0; i < dv; i++)
                    ah[i] = f16 ? round16(ah[i] * ms) : ah[i] * ms;
            } else {
                vs = expf(sc - M[h]);
            }
            for (int64_t i = 0; i < dv; i++) {
                float v = ah[i] + kv_elem(vrow, i, f16) * vs;
                ah[i] = f16 ? round16(v) : v;
            }
            S[h] = S[h] * ms + vs;
        }
    }

    for (int64_t h = 0; h < nq; h++) {
        float inv = S[h] > 0.0f ? 1.0f / S[h] : 0.0f;
        for (int64_t i = 0; i < dv; i++)
            a->out[h * dv + i] = acc[h * dv + i] * inv;
    }
}
