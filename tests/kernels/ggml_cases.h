/*
 * ggml_cases.h - the inputs of the kernel cases checked bit for bit against
 * ggml's CPU backend (tests/golden/kernels/ops.json).  Included by the test
 * (tests/kernels/test_ggml_exact.c) and by the driver that asks ggml for the
 * expected outputs (scripts/llamacpp-ops.c), so both see the same inputs.
 */
#ifndef LLMKIT_GGML_CASES_H
#define LLMKIT_GGML_CASES_H

#include <math.h>
#include <stdint.h>

#include "qconv.h"
#include "rng.h"

/* A standard normal deviate (Box-Muller, one of the pair), as a float. */
static inline float
gc_normal(struct rng *r)
{
    double u = rng_unit_open(r), v = rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* SwiGLU inputs: n gate and up values; gate has scale sd with edge values
 * (the vectorised exp's overflow/underflow ranges, zeros, tiny values)
 * sprinkled in. */
#define GC_SWIGLU_N 1541
static inline void
gc_swiglu(float *gate, float *up, int64_t n, uint64_t seed)
{
    static const float edge[] = { -100.0f, -95.5f, -90.0f, -88.7f, -87.4f, -86.0f, -60.0f,
                                  -20.0f, 0.0f, -0.0f, 1e-30f, -1e-30f, 1e-42f, 20.0f,
                                  60.0f, 87.0f, 88.5f, 89.0f, 95.0f, 100.0f };
    struct rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        gate[i] = gc_normal(&r) * 4.0f;
        up[i] = gc_normal(&r);
    }
    for (int64_t i = 0; i < (int64_t)(sizeof(edge) / sizeof(edge[0])) && 37 * i < n; i++)
        gate[37 * i] = edge[i];
}

/* Attention cases: one query token, n_q heads sharing one KV head. */
struct gc_attn {
    int64_t n_q, dk, dv, n_kv;
    int f16;                    /* KV type: 1 = F16, 0 = F32 */
    uint64_t seed;
};

static const struct gc_attn gc_attn_cases[] = {
    { 3, 64, 64, 37, 1, 11 },   /* SmolLM2's head shape, short context */
    { 3, 64, 64, 300, 1, 12 },  /* longer, still one chunk in ggml */
    { 2, 80, 80, 29, 1, 13 },   /* a head size with a tail past 64 */
    { 1, 40, 40, 17, 1, 14 },   /* smaller than one 32-step (all tail) */
    { 4, 64, 64, 45, 0, 15 },   /* f32 cache */
};
#define GC_N_ATTN ((int)(sizeof(gc_attn_cases) / sizeof(gc_attn_cases[0])))

/* Fills q [n_q][dk] f32, keys/values in slot order (k [n_kv][dk], v
 * [n_kv][dv] as f16 bits or f32, per c->f16) and the visibility of each slot
 * (some masked out, never the last). */
static inline void
gc_attn_inputs(const struct gc_attn *c, float *q, void *k, void *v, uint8_t *vis)
{
    struct rng r;
    rng_seed(&r, c->seed);
    for (int64_t i = 0; i < c->n_q * c->dk; i++)
        q[i] = gc_normal(&r) * 1.5f;
    for (int64_t s = 0; s < c->n_kv; s++) {
        for (int64_t i = 0; i < c->dk; i++) {
            float x = gc_normal(&r) * 2.0f;
            if (c->f16)
                ((uint16_t *)k)[s * c->dk + i] = qconv_fp32_to_fp16(x);
            else
                ((float *)k)[s * c->dk + i] = x;
        }
        for (int64_t i = 0; i < c->dv; i++) {
            float x = gc_normal(&r);
            if (c->f16)
                ((uint16_t *)v)[s * c->dv + i] = qconv_fp32_to_fp16(x);
            else
                ((float *)v)[s * c->dv + i] = x;
        }
        vis[s] = s == c->n_kv - 1 || rng_uniform(&r) >= 0.2;
    }
}

/* Tiled attention cases (llama.cpp's path for ubatches of >= 64 query
 * rows): n_rows consecutive query rows of one sequence, n_q heads sharing
 * one KV head, causal: row r sees slots 0 .. n_kv - n_rows + r. */
struct gc_tiled {
    int64_t n_rows, n_q, dk, dv, n_kv;
    int f16;                    /* KV type: 1 = F16, 0 = F32 */
    uint64_t seed;
};

static const struct gc_tiled gc_tiled_cases[] = {
    { 64, 3, 64, 64, 100, 1, 21 },      /* SmolLM2's head shape, one Q tile */
    { 100, 3, 64, 64, 300, 1, 22 },     /* two Q tiles per head, 5 KV tiles */
    { 100, 3, 64, 64, 230, 0, 23 },     /* f32 cache */
    { 70, 2, 80, 80, 150, 1, 24 },      /* a head size past 64 */
    { 64, 1, 40, 36, 64, 0, 25 },       /* a fresh prefill; dv with a 4-column tail */
};
#define GC_N_TILED ((int)(sizeof(gc_tiled_cases) / sizeof(gc_tiled_cases[0])))

/* Fills q [n_rows][n_q][dk] f32 and keys/values in slot order (k [n_kv][dk],
 * v [n_kv][dv] as f16 bits or f32, per c->f16). */
static inline void
gc_tiled_inputs(const struct gc_tiled *c, float *q, void *k, void *v)
{
    struct rng r;
    rng_seed(&r, c->seed);
    for (int64_t i = 0; i < c->n_rows * c->n_q * c->dk; i++)
        q[i] = gc_normal(&r) * 1.5f;
    for (int64_t s = 0; s < c->n_kv; s++) {
        for (int64_t i = 0; i < c->dk; i++) {
            float x = gc_normal(&r) * 2.0f;
            if (c->f16)
                ((uint16_t *)k)[s * c->dk + i] = qconv_fp32_to_fp16(x);
            else
                ((float *)k)[s * c->dk + i] = x;
        }
        for (int64_t i = 0; i < c->dv; i++) {
            float x = gc_normal(&r);
            if (c->f16)
                ((uint16_t *)v)[s * c->dv + i] = qconv_fp32_to_fp16(x);
            else
                ((float *)v)[s * c->dv + i] = x;
        }
    }
}

#endif
