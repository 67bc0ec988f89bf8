/*
 * llamacpp-ops.c - asks ggml's CPU backend (the llama.cpp peer built by
 * scripts/build-llamacpp) for the exact outputs of the element-wise and
 * attention ops on the inputs of tests/kernels/ggml_cases.h, through ggml's
 * public graph API: ggml_swiglu_split and ggml_flash_attn_ext (the op
 * llama.cpp runs for attention with flash attention on), for one query row
 * (ggml's one-chunk path) and for >= 64 rows (its tiled path).  One JSON object per
 * line on stdout; every float as its 8-hex-digit IEEE bit pattern.
 *
 * Built and run by scripts/mkgolden-ops (which writes
 * tests/golden/kernels/ops.json); links llmkit's own library only for the
 * random inputs (common/base/rng.c) and fp16 conversion of them.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

#include "../tests/kernels/ggml_cases.h"

static void
put_hex(const char *key, const float *x, int64_t n)
{
    printf("\"%s\":\"", key);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        printf("%08x", u);
    }
    printf("\"");
}

static struct ggml_context *
ctx_new(size_t mb)
{
    struct ggml_init_params ip = { mb << 20, NULL, false };
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) {
        fprintf(stderr, "llamacpp-ops: ggml_init failed\n");
        exit(1);
    }
    return ctx;
}

static void
run_n(struct ggml_context *ctx, struct ggml_tensor *t, int nth)
{
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, t);
    if (ggml_graph_compute_with_ctx(ctx, gf, nth) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "llamacpp-ops: graph compute failed\n");
        exit(1);
    }
}

static void
run(struct ggml_context *ctx, struct ggml_tensor *t)
{
    run_n(ctx, t, 1);
}

static void
do_swiglu(void)
{
    struct ggml_context *ctx = ctx_new(16);
    struct ggml_tensor *g = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, GC_SWIGLU_N);
    struct ggml_tensor *u = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, GC_SWIGLU_N);
    gc_swiglu(g->data, u->data, GC_SWIGLU_N, 7);
    struct ggml_tensor *y = ggml_swiglu_split(ctx, g, u);
    run(ctx, y);
    printf("{\"op\":\"swiglu\",\"n\":%d,\"seed\":7,", GC_SWIGLU_N);
    put_hex("y", y->data, GC_SWIGLU_N);
    printf("}\n");
    ggml_free(ctx);
}

static void
do_attn(int ci)
{
    const struct gc_attn *c = &gc_attn_cases[ci];
    struct ggml_context *ctx = ctx_new(64);
    enum ggml_type kt = c->f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c->dk, 1, c->n_q);
    struct ggml_tensor *k = ggml_new_tensor_3d(ctx, kt, c->dk, c->n_kv, 1);
    struct ggml_tensor *v = ggml_new_tensor_3d(ctx, kt, c->dv, c->n_kv, 1);
    struct ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, c->n_kv, 1);
    uint8_t *vis = malloc((size_t)c->n_kv);
    ggml_fp16_t *mp = mask->data;

    gc_attn_inputs(c, q->data, k->data, v->data, vis);
    for (int64_t s = 0; s < c->n_kv; s++)
        mp[s] = ggml_fp32_to_fp16(vis[s] ? 0.0f : -INFINITY);
    float scale = 1.0f / sqrtf((float)c->dk);
    struct ggml_tensor *o = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
    run(ctx, o);
    /* o: [dv, n_q, 1] */
    printf("{\"op\":\"attn\",\"case\":%d,\"n_q\":%lld,\"dk\":%lld,\"dv\":%lld,\"n_kv\":%lld,"
           "\"f16\":%d,\"seed\":%llu,", ci, (long long)c->n_q, (long long)c->dk,
           (long long)c->dv, (long long)c->n_kv, c->f16, (unsigned long long)c->seed);
    put_hex("out", o->data, c->n_q * c->dv);
    printf("}\n");
    free(vis);
    ggml_free(ctx);
}

/* A tiled case: n_rows query rows (>= 64, so ggml takes its tiled path)
 * against a KV view padded to a multiple of 256 cells as llama.cpp pads it
 * for flash attention, the padding cells holding values and masked out.
 * Computed with 1 and with 3 threads (different row chunks, so different
 * Q tiles): the two must agree, since each row's result depends on its own
 * inputs and the KV tiling only. */
static void
do_tiled(int ci)
{
    const struct gc_tiled *c = &gc_tiled_cases[ci];
    const int64_t pad = (c->n_kv + 255) / 256 * 256, nr = c->n_rows, nq = c->n_q;
    struct ggml_context *ctx = ctx_new(256);
    enum ggml_type kt = c->f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    size_t esz = c->f16 ? 2 : 4;
    /* q: [dk, rows, heads] as llama.cpp's permuted query */
    struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c->dk, nr, nq);
    struct ggml_tensor *k = ggml_new_tensor_3d(ctx, kt, c->dk, pad, 1);
    struct ggml_tensor *v = ggml_new_tensor_3d(ctx, kt, c->dv, pad, 1);
    struct ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, pad, nr);
    float *qin = malloc((size_t)(nr * nq * c->dk) * sizeof(float));
    ggml_fp16_t *mp = mask->data;

    gc_tiled_inputs(c, qin, k->data, v->data);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t h = 0; h < nq; h++)
            memcpy((float *)q->data + (h * nr + r) * c->dk, qin + (r * nq + h) * c->dk,
                   (size_t)c->dk * sizeof(float));
    /* the padding cells: copies of real ones (finite), masked */
    for (int64_t s = c->n_kv; s < pad; s++) {
        memcpy((char *)k->data + s * c->dk * esz, (char *)k->data + (s % c->n_kv) * c->dk * esz,
               (size_t)c->dk * esz);
        memcpy((char *)v->data + s * c->dv * esz, (char *)v->data + (s % c->n_kv) * c->dv * esz,
               (size_t)c->dv * esz);
    }
    for (int64_t r = 0; r < nr; r++)
        for (int64_t s = 0; s < pad; s++)
            mp[r * pad + s] = ggml_fp32_to_fp16(s <= c->n_kv - nr + r ? 0.0f : -INFINITY);
    float scale = 1.0f / sqrtf((float)c->dk);
    struct ggml_tensor *o = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
    run_n(ctx, o, 3);
    float *o3 = malloc((size_t)(nr * nq * c->dv) * sizeof(float));
    memcpy(o3, o->data, (size_t)(nr * nq * c->dv) * sizeof(float));
    run_n(ctx, o, 1);
    if (memcmp(o3, o->data, (size_t)(nr * nq * c->dv) * sizeof(float)) != 0) {
        fprintf(stderr, "llamacpp-ops: tiled case %d: 1 and 3 threads disagree\n", ci);
        exit(1);
    }
    /* o: [dv, heads, rows] */
    printf("{\"op\":\"attn_tiled\",\"case\":%d,\"n_rows\":%lld,\"n_q\":%lld,\"dk\":%lld,"
           "\"dv\":%lld,\"n_kv\":%lld,\"n_kv_padded\":%lld,\"f16\":%d,\"seed\":%llu,", ci,
           (long long)nr, (long long)nq, (long long)c->dk, (long long)c->dv, (long long)c->n_kv,
           (long long)pad, c->f16, (unsigned long long)c->seed);
    put_hex("out", o->data, nr * nq * c->dv);
    printf("}\n");
    free(qin);
    free(o3);
    ggml_free(ctx);
}

int
main(void)
{
    ggml_cpu_init();
    do_swiglu();
    for (int i = 0; i < GC_N_ATTN; i++)
        do_attn(i);
    for (int i = 0; i < GC_N_TILED; i++)
        do_tiled(i);
    return 0;
}
