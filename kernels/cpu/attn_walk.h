/*
 * attn_walk.h - the walk over a one-row attention step's visible slots that
 * the AVX2 and AVX-512 kernels share (cpu/attn_avx2.c, cpu/attn_avx512.c):
 * where a slot's key and value rows lie in the paged pool, and the rows of
 * the next visible slots gathered a block's run at a time, the rows
 * KV_PF slots ahead prefetched into L2; and the state the head-major walks
 * start from (F16C).
 * Static inline, compiled into each kernel with its own flags.
 */
#ifndef LLMKIT_ATTN_WALK_H
#define LLMKIT_ATTN_WALK_H

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"

#define KV_PF 16                /* slots ahead whose rows are prefetched */

/* slot s's key and value rows (elements of esz bytes) */
static inline void
slot_rows(const struct attn_args *a, int64_t s, size_t esz, const uint8_t **k, const uint8_t **v)
{
    size_t blk = (size_t)a->table[s / a->block_size] * a->block_stride;
    size_t i = (size_t)(s % a->block_size);
    *k = a->k_base + blk + i * (size_t)a->head_dim * esz;
    *v = a->v_base + blk + i * ops_attn_v_stride(a->kv_type, a->head_dim_v, a->v_stride);
}

static inline void
prefetch_span(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + o, _MM_HINT_T1);
}

/* slots from s that lie in s's block, at most e - s (their rows are
 * contiguous) */
static inline int64_t
block_run(const struct attn_args *a, int64_t s, int64_t e)
{
    int64_t r = a->block_size - s % a->block_size;
    return r < e - s ? r : e - s;
}

/* into L2: the key and value rows of slots s .. e-1 (below n_kv) */
static inline void
prefetch_slots(const struct attn_args *a, int64_t s, int64_t e, size_t esz)
{
    if (e > a->n_kv)
        e = a->n_kv;
    while (s < e) {
        int64_t r = block_run(a, s, e);
        const uint8_t *k, *v;
        slot_rows(a, s, esz, &k, &v);
        prefetch_span(k, (size_t)(r * a->head_dim) * esz);
        prefetch_span(v, (size_t)(r - 1) * ops_attn_v_stride(a->kv_type, a->head_dim_v, a->v_stride) +
                             (size_t)a->head_dim_v * esz);
        s += r;
    }
}

/* the key and value rows of the next visible slots from *s0 (at most max),
 * into krows[] and vrows[], a run of one block's consecutive visible slots
 * (contiguous rows) at a time, the rows KV_PF slots ahead prefetched from
 * memory into L2 (a decode step's cache is out of the caches; into L1,
 * attnbench's TABLE/step at 1024 slots was about 15% slower); *s0 moves
 * past them.  Returns how many. */
static inline int
attn_gather(const struct attn_args *a, int64_t *s0p, size_t esz, int max,
            const uint8_t **krows, const uint8_t **vrows)
{
    const int64_t dk = a->head_dim;
    const size_t vst = ops_attn_v_stride(a->kv_type, a->head_dim_v, a->v_stride);
    int64_t s0 = *s0p;
    int n = 0;

    while (s0 < a->n_kv && n < max) {
        if (a->vis && !a->vis[s0]) {
            s0++;
            continue;
        }
        int64_t e = a->n_kv - s0 < max - n ? a->n_kv : s0 + max - n;
        int64_t run = block_run(a, s0, e);
        if (a->vis)
            for (int64_t r = 1; r < run; r++)
                if (!a->vis[s0 + r]) {
                    run = r;
                    break;
                }
        const uint8_t *k, *v;
        slot_rows(a, s0, esz, &k, &v);
        prefetch_slots(a, s0 + KV_PF, s0 + KV_PF + run, esz);
        for (int64_t r = 0; r < run; r++) {
            krows[n + r] = k + (size_t)(r * dk) * esz;
            vrows[n + r] = v + (size_t)r * vst;
        }
        n += (int)run;
        s0 += run;
    }
    *s0p = s0;
    return n;
}

/* The head-major walks' state in scratch: acc [n_q][dv] (f32) zeroed, M
 * [n_q] = -inf, S [n_q] = 0, and the query [n_q][dk], rounded to f16 for an
 * f16 cache (f16 = 1; exact in f32); the pointers into *acc .. *qf. */
static inline void
attn_state_begin(const struct attn_args *a, float *scratch, int f16, float **acc, float **M,
                 float **S, float **qf)
{
    const int64_t nq = a->n_q, dk = a->head_dim, dv = a->head_dim_v;

    *acc = scratch;
    *M = scratch + nq * dv;
    *S = *M + nq;
    *qf = *S + nq;
    memset(*acc, 0, (size_t)(nq * dv) * sizeof(float));
    for (int64_t h = 0; h < nq; h++) {
        (*M)[h] = -INFINITY;
        (*S)[h] = 0.0f;
    }
    for (int64_t i = 0; i < nq * dk; i++)
        (*qf)[i] = f16 ? _cvtsh_ss(_cvtss_sh(a->q[i], _MM_FROUND_TO_NEAREST_INT)) : a->q[i];
}

#endif
