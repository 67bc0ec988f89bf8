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
#include <string.h>

#include "ops.h"
#include "qconv.h"

/* the floats the reference's walk uses (the split's partials go after) */
static int64_t
attn_ref_base(int64_t n_q, int64_t head_dim, int64_t head_dim_v)
{
    return n_q * head_dim_v + 2 * n_q + head_dim_v + (n_q * (head_dim / 32) * 34 + 3) / 4;
}

int64_t
ops_attn_scratch_floats_ref(int64_t n_q, int64_t block_size, int64_t head_dim,
                            int64_t head_dim_v)
{
    /* acc [n_q][head_dim_v] | M [n_q] | S [n_q]; block_size is not needed;
     * for a q8_0 cache also a dequantized V row [head_dim_v] and the query
     * heads as q8_0 blocks [n_q][head_dim / 32] */
    (void)block_size;
    return attn_ref_base(n_q, head_dim, head_dim_v) + ATTN_SPLIT_FLOATS(n_q, head_dim_v);
}

void
ops_attn_combine_begin(float *out, float *ms, int64_t n_q, int64_t dv)
{
    for (int64_t i = 0; i < n_q * dv; i++)
        out[i] = 0.0f;
    for (int64_t h = 0; h < n_q; h++) {
        ms[2 * h] = -INFINITY;
        ms[2 * h + 1] = 0.0f;
    }
}

void
ops_attn_combine_add(float *out, float *ms, const float *part, int64_t n_q, int64_t dv)
{
    for (int64_t h = 0; h < n_q; h++) {
        const float *p = part + h * ATTN_PART(dv);
        float *acc = out + h * dv;
        if (p[1] == 0.0f)
            continue;           /* nothing visible in the chunk */
        float M = ms[2 * h], mn = fmaxf(M, p[0]);
        float so = expf(M - mn), sn = expf(p[0] - mn);
        for (int64_t i = 0; i < dv; i++)
            acc[i] = acc[i] * so + p[2 + i] * sn;
        ms[2 * h + 1] = ms[2 * h + 1] * so + p[1] * sn;
        ms[2 * h] = mn;
    }
}

void
ops_attn_combine_end(float *out, const float *ms, int64_t n_q, int64_t dv)
{
    for (int64_t h = 0; h < n_q; h++) {
        float S = ms[2 * h + 1], inv = S != 0.0f ? 1.0f / S : 0.0f;
        for (int64_t i = 0; i < dv; i++)
            out[h * dv + i] *= inv;
    }
}

void
ops_attn_emit(const struct attn_args *a, const float *acc, const float *M, const float *S)
{
    const int64_t dv = a->head_dim_v;
    for (int64_t h = 0; h < a->n_q; h++) {
        if (a->part) {
            float *p = a->part + h * ATTN_PART(dv);
            p[0] = M[h];
            p[1] = S[h];
            memcpy(p + 2, acc + h * dv, (size_t)dv * sizeof(float));
        } else {
            float inv = S[h] != 0.0f ? 1.0f / S[h] : 0.0f;
            for (int64_t i = 0; i < dv; i++)
                a->out[h * dv + i] = acc[h * dv + i] * inv;
        }
    }
}

int
ops_attn_split(const struct attn_args *a, float *scratch, int64_t base,
               void (*fn)(const struct attn_args *, float *))
{
    int64_t nch = ops_attn_chunks(a->kv_type, ops_attn_n_vis(a));
    if (a->part || nch == 1)
        return 0;
    float *part = scratch + base, *ms = part + a->n_q * ATTN_PART(a->head_dim_v);
    struct attn_args c;

    ops_attn_combine_begin(a->out, ms, a->n_q, a->head_dim_v);
    for (int64_t k = 0; k < nch; k++) {
        ops_attn_chunk(&c, a, k, part);
        fn(&c, scratch);
        ops_attn_combine_add(a->out, ms, part, a->n_q, a->head_dim_v);
    }
    ops_attn_combine_end(a->out, ms, a->n_q, a->head_dim_v);
    return 1;
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

/* ---- q8_0 cache (GGML_TYPE_Q8_0 = 8): as ggml's CPU flash attention with
 * a q8_0 K/V: the query is quantized to q8_0 (x86 quantize_row_q8_0: d =
 * amax / 127 as fp16, codes round-half-even(x * 127 / amax)), q.k is the
 * q8_0 x q8_0 block dot product (exact integer sums, scaled per block,
 * summed in f32), and V rows are dequantized and accumulated in f32. */

static void
q8_0_quantize(const float *x, uint8_t *out, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++, x += 32, out += 34) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax)
                amax = fabsf(x[j]);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        uint16_t d = qconv_fp32_to_fp16(amax / 127.0f);
        memcpy(out, &d, 2);
        for (int j = 0; j < 32; j++)
            out[2 + j] = (uint8_t)(int8_t)nearbyintf(x[j] * id);
    }
}

static float
q8_0_dot(const uint8_t *a, const uint8_t *b, int64_t n)
{
    float sum = 0.0f;
    for (int64_t k = 0; k < n / 32; k++, a += 34, b += 34) {
        uint16_t da, db;
        int32_t si = 0;
        memcpy(&da, a, 2);
        memcpy(&db, b, 2);
        for (int j = 0; j < 32; j++)
            si += (int32_t)(int8_t)a[2 + j] * (int32_t)(int8_t)b[2 + j];
        sum += (float)si * (qconv_fp16_to_fp32(da) * qconv_fp16_to_fp32(db));
    }
    return sum;
}

static void
attn_q8_0(const struct attn_args *a, float *scratch)
{
    const int64_t nq = a->n_q, bs = a->block_size, dk = a->head_dim, dv = a->head_dim_v;
    const size_t krow_b = (size_t)(dk / 32) * 34;
    const size_t vrow_b = ops_attn_v_stride(a->kv_type, dv, a->v_stride);
    float *acc = scratch;               /* [nq][dv] */
    float *M = acc + nq * dv;           /* [nq] */
    float *S = M + nq;                  /* [nq] */
    float *v32 = S + nq;                /* [dv] */
    uint8_t *qq = (uint8_t *)(v32 + dv);    /* [nq][krow_b] */

    for (int64_t h = 0; h < nq; h++) {
        M[h] = -INFINITY;
        S[h] = 0.0f;
        for (int64_t i = 0; i < dv; i++)
            acc[h * dv + i] = 0.0f;
        q8_0_quantize(a->q + h * dk, qq + (size_t)h * krow_b, dk);
    }
    for (int64_t s = a->s0 > a->lo ? a->s0 : a->lo; s < a->n_kv; s++) {
        if (a->vis && !a->vis[s])
            continue;
        size_t blk = (size_t)a->table[s / bs] * a->block_stride;
        const uint8_t *krow = a->k_base + blk + (size_t)(s % bs) * krow_b;
        const uint8_t *vrow = a->v_base + blk + (size_t)(s % bs) * vrow_b;
        dequantize_row_q8_0_ref(vrow, v32, dv);
        for (int64_t h = 0; h < nq; h++) {
            float *ah = acc + h * dv;
            float sc = q8_0_dot(qq + (size_t)h * krow_b, krow, dk) * a->scale;
            float ms = 1.0f, vs = 1.0f;
            if (sc > M[h]) {
                float mold = M[h];
                M[h] = sc;
                ms = expf(mold - sc);
                for (int64_t i = 0; i < dv; i++)
                    ah[i] *= ms;
            } else {
                vs = expf(sc - M[h]);
            }
            for (int64_t i = 0; i < dv; i++)
                ah[i] += v32[i] * vs;
            S[h] = S[h] * ms + vs;
        }
    }
    ops_attn_emit(a, acc, M, S);
}

void
ops_attn_ref(const struct attn_args *a, float *scratch)
{
    const int64_t nq = a->n_q, bs = a->block_size, dk = a->head_dim, dv = a->head_dim_v;
    const int f16 = a->kv_type == 1;
    const size_t esz = f16 ? 2 : 4;
    const size_t vrow_b = ops_attn_v_stride(a->kv_type, dv, a->v_stride);
    float *acc = scratch;               /* [nq][dv] */
    float *M = acc + nq * dv;           /* [nq] */
    float *S = M + nq;                  /* [nq] */

    if (a->kv_type == 8) {
        attn_q8_0(a, scratch);
        return;
    }
    if (ops_attn_split(a, scratch, attn_ref_base(nq, dk, dv), ops_attn_ref))
        return;

    for (int64_t h = 0; h < nq; h++) {
        M[h] = -INFINITY;
        S[h] = 0.0f;
        for (int64_t i = 0; i < dv; i++)
            acc[h * dv + i] = 0.0f;
    }

    for (int64_t s = a->s0 > a->lo ? a->s0 : a->lo; s < a->n_kv; s++) {
        if (a->vis && !a->vis[s])
            continue;
        size_t blk = (size_t)a->table[s / bs] * a->block_stride;
        const uint8_t *krow = a->k_base + blk + (size_t)(s % bs) * (size_t)dk * esz;
        const uint8_t *vrow = a->v_base + blk + (size_t)(s % bs) * vrow_b;

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

    ops_attn_emit(a, acc, M, S);
}
