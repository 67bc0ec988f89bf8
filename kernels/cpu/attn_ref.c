/*
 * attn_ref.c - reference paged attention for one query token and one KV
 * head group: FlashAttention-style online softmax over the sequence's KV
 * blocks, one block (tile) at a time.
 *
 * Per query head h the invariant after each tile is
 *   m_h = max score seen, l_h = sum exp(score - m_h), acc_h = sum exp(score - m_h) v,
 * so the output is acc_h / l_h and no score row longer than a block exists.
 * Each K and V row of the group's KV head is read once per tile for all the
 * group's query heads.
 */
#include <math.h>
#include <stdint.h>

#include "ops.h"
#include "qconv.h"

int64_t
ops_attn_scratch_floats_ref(int64_t n_q, int64_t block_size, int64_t head_dim_v)
{
    /* scores [n_q][block_size] | acc [n_q][head_dim_v] | m [n_q] | l [n_q] */
    return n_q * block_size + n_q * head_dim_v + 2 * n_q;
}

static inline float
kv_elem(const uint8_t *row, int64_t i, uint32_t kv_type)
{
    if (kv_type == 1) {     /* F16 */
        uint16_t h;
        memcpy(&h, row + 2 * i, 2);
        return qconv_fp16_to_fp32(h);
    }
    float f;
    memcpy(&f, row + 4 * i, 4);
    return f;
}

void
ops_attn_ref(const struct attn_args *a, float *scratch)
{
    const int64_t nq = a->n_q, bs = a->block_size, dk = a->head_dim, dv = a->head_dim_v;
    const size_t esz = a->kv_type == 1 ? 2 : 4;
    float *score = scratch;             /* [nq][bs] */
    float *acc = score + nq * bs;       /* [nq][dv] */
    float *m = acc + nq * dv;           /* [nq] */
    float *l = m + nq;                  /* [nq] */

    for (int64_t h = 0; h < nq; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
        for (int64_t i = 0; i < dv; i++)
            acc[h * dv + i] = 0.0f;
    }

    int64_t n_blocks = (a->n_kv + bs - 1) / bs;
    for (int64_t lb = 0; lb < n_blocks; lb++) {
        int64_t s0 = lb * bs;
        int64_t ns = a->n_kv - s0 < bs ? a->n_kv - s0 : bs;
        const uint8_t *kb = a->k_base + (size_t)a->table[lb] * a->block_stride;
        const uint8_t *vb = a->v_base + (size_t)a->table[lb] * a->block_stride;
        int any = 0;

        /* scores of this tile */
        for (int64_t j = 0; j < ns; j++) {
            int visible = !a->vis || a->vis[s0 + j];
            const uint8_t *krow = kb + (size_t)j * (size_t)dk * esz;
            for (int64_t h = 0; h < nq; h++)
                score[h * bs + j] = -INFINITY;
            if (!visible)
                continue;
            any = 1;
            for (int64_t h = 0; h < nq; h++) {
                const float *qh = a->q + h * dk;
                float s = 0.0f;
                for (int64_t i = 0; i < dk; i++)
                    s += qh[i] * kv_elem(krow, i, a->kv_type);
                score[h * bs + j] = s * a->scale;
            }
        }
        if (!any)
            continue;

        /* rescale the running state to the new maximum, then add the tile */
        for (int64_t h = 0; h < nq; h++) {
            float mb = -INFINITY;
            for (int64_t j = 0; j < ns; j++)
                if (score[h * bs + j] > mb)
                    mb = score[h * bs + j];
            float mnew = mb > m[h] ? mb : m[h];
            float c = m[h] == -INFINITY ? 0.0f : expf(m[h] - mnew);
            l[h] *= c;
            for (int64_t i = 0; i < dv; i++)
                acc[h * dv + i] *= c;
            m[h] = mnew;
            for (int64_t j = 0; j < ns; j++) {
                float s = score[h * bs + j];
                score[h * bs + j] = s == -INFINITY ? 0.0f : expf(s - mnew);
                l[h] += score[h * bs + j];
            }
        }
        for (int64_t j = 0; j < ns; j++) {
            const uint8_t *vrow = vb + (size_t)j * (size_t)dv * esz;
            for (int64_t i = 0; i < dv; i++) {
                float v = kv_elem(vrow, i, a->kv_type);
                for (int64_t h = 0; h < nq; h++)
                    acc[h * dv + i] += score[h * bs + j] * v;
            }
        }
    }

    for (int64_t h = 0; h < nq; h++) {
        float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
        for (int64_t i = 0; i < dv; i++)
            a->out[h * dv + i] = acc[h * dv + i] * inv;
    }
}
