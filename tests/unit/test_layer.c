/*
 * test_layer.c - layer_forward (forward.h): run layer by layer on the token
 * embeddings, then output_norm and the LM head, it gives model_forward's
 * logits bit for bit, and after each layer the hidden states model_forward
 * shows its LAYER_OUT hook; on the fixtures made by `make fixtures`, with
 * the reference and the best kernels, 1 and 2 threads, whole and chunked
 * batches, earlier context, a long context (split-KV decode steps), two
 * interleaved sequences, a mask, tiled prompt tokens and the llama.cpp
 * ubatch mode.  Also its errors.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward.h"
#include "kvcache.h"
#include "model.h"
#include "ops.h"
#include "qtypes.h"
#include "t.h"

static const char *const fixtures[] = {
    "tests/fixtures/tiny-llama-f32.gguf",
    "tests/fixtures/tiny-llama-f16.gguf",
    "tests/fixtures/tiny-llama256-f32.gguf",
    "tests/fixtures/tiny-spm-f32.gguf",
};

#define CAP 320                 /* tokens of one batch at most */

/* model_forward on ka, layer_forward on kb: the same sequences, the same
 * batches, compared */
struct rig {
    struct model *m;
    struct kvcache *ka, *kb;
    int64_t E, V, L;
    float *want, *got;          /* [CAP][V] */
    float *states;              /* [L][CAP][E] model_forward's LAYER_OUT rows */
    float *x, *xn;              /* [CAP][E] */
    void *work;
    float *tmp;
    const char *what;           /* the case, for messages */
};

static int
cap_hook(void *ctx, const struct model_hook_event *ev)
{
    struct rig *r = ctx;

    if (ev->site != MODEL_HOOK_LAYER_OUT)
        return 0;
    for (int64_t t = 0; t < ev->n_tok; t++)
        memcpy(r->states + (ev->layer * CAP + ev->tok0 + t) * r->E, ev->x + t * ev->ld,
               (size_t)r->E * sizeof(float));
    return 0;
}

/* the LM head over n rows of xn as model_forward's executor runs it for a
 * chunk of n tokens (range- and batch-invariant kernels: one thread, one
 * range gives the same bits) */
static void
head(struct rig *r, const struct batch *b, const float *xn, int64_t n, float *y)
{
    const struct model *m = r->m;
    const struct kernel_ops *ops = ops_select(m->be->kernel);
    const struct model_weight *w = &m->output;
    int mirror = b->llamacpp_ubatch >= 2 && n >= 2 && ops->mm_rows_mirror && w->rows % 4 == 0 &&
                 w->cols % 8 == 0 && (w->type == GGML_TYPE_F32 || w->type == GGML_TYPE_F16 ||
                                      w->type == GGML_TYPE_BF16);

    ops->mm_prepare(r->work, w->type, xn, w->cols, n, w->cols);
    if (mirror)
        ops->mm_rows_mirror(y, w->rows, w->data, w->row_bytes, w->type, r->work, xn, w->cols, n,
                            w->cols, 0, w->rows, r->tmp);
    else if (w->packed)
        ops->mm_rows(y, w->rows, w->packed, w->row_bytes, w->type | OPS_MM_PACKED, r->work, xn,
                     w->cols, n, w->cols, 0, w->rows, r->tmp);
    else
        ops->mm_rows(y, w->rows, w->data, w->row_bytes, w->type, r->work, xn, w->cols, n,
                     w->cols, 0, w->rows, r->tmp);
}

static int
same(const float *a, const float *b, int64_t n, const char *what, const char *which, int64_t k)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            fprintf(stderr, "%s: %s %lld differs at %lld: %.9g vs %.9g\n", what, which,
                    (long long)k, (long long)i, a[i], b[i]);
            return 0;
        }
    return 1;
}

/* one batch (every token wants logits) through both paths; 1 when equal */
static int
step(struct rig *r, const struct batch *b)
{
    struct model *m = r->m;
    const struct kernel_ops *ops = ops_select(m->be->kernel);
    int64_t n = b->n, E = r->E, V = r->V, B = m->max_batch;
    struct model_hooks h = { cap_hook, r, MODEL_HOOK_LAYER_OUT };
    struct model_out out = { r->want, NULL };
    struct diag d;
    int ok = 1;

    if (n > CAP)
        return 0;
    if (model_forward(m, r->ka, b, &h, &out, &d) != 0) {
        fprintf(stderr, "%s: model_forward: %s\n", r->what, d.msg);
        return 0;
    }
    /* the batch's slots, appended before the first layer */
    for (int64_t i = 0; i < n; i++) {
        int first = 1;
        for (int64_t j = 0; j < i; j++)
            first &= b->tok[j].seq != b->tok[i].seq;
        if (!first)
            continue;
        int64_t cnt = 0;
        for (int64_t j = i; j < n; j++)
            cnt += b->tok[j].seq == b->tok[i].seq;
        if (kv_seq_grow(r->kb, b->tok[i].seq, cnt, &d) != 0) {
            fprintf(stderr, "%s: kv_seq_grow: %s\n", r->what, d.msg);
            return 0;
        }
    }
    for (int64_t t = 0; t < n; t++)
        ops->get_row(r->x + t * E, m->tok_embd.data, m->tok_embd.row_bytes, m->tok_embd.type,
                     b->tok[t].token, E);
    for (int64_t l = 0; l < r->L && ok; l++) {
        if (layer_forward(m, l, r->x, b, r->kb, NULL, &d) != 0) {
            fprintf(stderr, "%s: layer_forward: %s\n", r->what, d.msg);
            return 0;
        }
        ok &= same(r->x, r->states + l * CAP * E, n * E, r->what, "layer", l);
    }
    for (int64_t t = 0; t < n; t++)
        ops->rmsnorm(r->xn + t * E, r->x + t * E, m->output_norm.data, E, m->hp.rms_eps);
    for (int64_t c0 = 0; c0 < n; c0 += B)
        head(r, b, r->xn + c0 * E, n - c0 < B ? n - c0 : B, r->got + c0 * V);
    for (int64_t t = 0; t < n && ok; t++)
        ok &= same(r->got + t * V, r->want + t * V, V, r->what, "logits of token", t);
    return ok;
}

static int
rig_open(struct rig *r, const char *path, const char *kernel, int threads, int64_t max_batch,
         uint32_t kv_dtype)
{
    struct model_opts o = MODEL_OPTS_INIT;
    struct kv_config c;
    struct diag d;

    memset(r, 0, sizeof(*r));
    o.kernel = kernel;
    o.n_threads = threads;
    o.max_batch = max_batch;
    if (model_open(&r->m, path, &o, &d) != 0) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        return -1;
    }
    r->E = r->m->hp.n_embd;
    r->V = r->m->hp.n_vocab;
    r->L = r->m->hp.n_layer;
    model_kv_config(r->m, (size_t)8 << 20, kv_dtype, &c);
    c.block_size = 16;
    if (kv_new(&r->ka, &c, &d) != 0 || kv_new(&r->kb, &c, &d) != 0) {
        fprintf(stderr, "kv_new: %s\n", d.msg);
        return -1;
    }
    const struct model_weight *w = &r->m->output;
    size_t ws = ops_select(r->m->be->kernel)->mm_work_size(w->type, CAP, w->cols);
    int64_t tn = ops_select(r->m->be->kernel)->mm_tmp_floats(w->cols);
    r->want = malloc((size_t)(CAP * r->V) * sizeof(float));
    r->got = malloc((size_t)(CAP * r->V) * sizeof(float));
    r->states = malloc((size_t)(r->L * CAP * r->E) * sizeof(float));
    r->x = malloc((size_t)(CAP * r->E) * sizeof(float));
    r->xn = malloc((size_t)(CAP * r->E) * sizeof(float));
    r->work = aligned_alloc(64, (ws + 64) / 64 * 64);
    r->tmp = malloc((size_t)(tn > 0 ? tn : 1) * sizeof(float));
    if (!r->want || !r->got || !r->states || !r->x || !r->xn || !r->work || !r->tmp)
        return -1;
    return 0;
}

static void
rig_close(struct rig *r)
{
    kv_free(r->ka);
    kv_free(r->kb);
    model_free(r->m);
    free(r->want);
    free(r->got);
    free(r->states);
    free(r->x);
    free(r->xn);
    free(r->work);
    free(r->tmp);
}

/* a new sequence in both caches, with the same id */
static int32_t
seq_new(struct rig *r)
{
    int32_t a = -1, b = -2;
    kv_seq_new(r->ka, &a);
    kv_seq_new(r->kb, &b);
    CHECK_EQ(a, b);
    return a;
}

static int32_t
tok_at(const struct rig *r, int64_t i)
{
    return (int32_t)((i * 7919 + 13) % r->V);
}

/* n tokens of seq from position p0, all wanting logits */
static void
fill(const struct rig *r, struct batch_tok *bt, int64_t n, int32_t seq, int64_t p0, int tiled)
{
    for (int64_t i = 0; i < n; i++)
        bt[i] = (struct batch_tok){ seq, (int32_t)(p0 + i), tok_at(r, p0 + i), 1,
                                    tiled ? model_prompt_tiled(n, i) : 0, 0 };
}

static void
test_config(const char *path, const char *kernel, int threads, int64_t max_batch,
            uint32_t kv_dtype)
{
    static struct batch_tok bt[CAP];
    char what[256];
    struct rig r;

    if (rig_open(&r, path, kernel, threads, max_batch, kv_dtype) != 0) {
        /* a SIMD kernel this CPU lacks is no failure */
        CHECK(strcmp(kernel, "ref") == 0 || strcmp(kernel, "auto") == 0 ? 0 : 1);
        rig_close(&r);
        return;
    }
    snprintf(what, sizeof(what), "%s kernel %s, %d threads, max batch %lld, kv %s", path,
             kernel, threads, (long long)max_batch, qtype_get(kv_dtype)->name);
    r.what = what;

    /* a prompt, then two decode steps over it */
    int32_t s = seq_new(&r);
    fill(&r, bt, 40, s, 0, 0);
    CHECK(step(&r, &(struct batch){ 40, bt, NULL, 0 }));
    for (int k = 0; k < 2; k++) {
        fill(&r, bt, 1, s, 40 + k, 0);
        CHECK(step(&r, &(struct batch){ 1, bt, NULL, 0 }));
    }

    /* a long context: decode steps whose attention is split over KV chunks */
    int32_t s2 = seq_new(&r);
    fill(&r, bt, 300, s2, 0, 0);
    CHECK(step(&r, &(struct batch){ 300, bt, NULL, 0 }));
    fill(&r, bt, 1, s2, 300, 0);
    CHECK(step(&r, &(struct batch){ 1, bt, NULL, 0 }));

    /* two sequences interleaved, one of them with context, under a mask */
    int32_t s3 = seq_new(&r);
    uint8_t mask[16 * 16];
    for (int64_t i = 0; i < 16; i++) {
        bt[i] = (struct batch_tok){ i % 2 ? s3 : s, (int32_t)(i % 2 ? i / 2 : 42 + i / 2),
                                    tok_at(&r, 100 + i), 1, 0, 0 };
        for (int64_t j = 0; j < 16; j++)
            mask[i * 16 + j] = j <= i && (j == i || (i + j) % 3 != 0);
    }
    CHECK(step(&r, &(struct batch){ 16, bt, NULL, 0 }));
    for (int64_t i = 0; i < 16; i++)
        bt[i].pos += 8;
    CHECK(step(&r, &(struct batch){ 16, bt, mask, 0 }));

    /* tiled prompt tokens, and the llama.cpp ubatch mode */
    int32_t s4 = seq_new(&r);
    fill(&r, bt, 100, s4, 0, 1);
    CHECK(step(&r, &(struct batch){ 100, bt, NULL, 0 }));
    int32_t s5 = seq_new(&r);
    fill(&r, bt, 80, s5, 0, 0);
    CHECK(step(&r, &(struct batch){ 80, bt, NULL, 80 }));
    fill(&r, bt, 8, s5, 80, 0);
    CHECK(step(&r, &(struct batch){ 8, bt, NULL, 88 }));

    rig_close(&r);
}

static void
test_errors(void)
{
    struct model_opts o = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct kvcache *kv = NULL;
    struct kv_config c;
    struct diag d;
    int32_t s;

    CHECK_EQ(model_open(&m, fixtures[0], &o, &d), 0);
    if (!m)
        return;
    model_kv_config(m, (size_t)1 << 20, GGML_TYPE_F16, &c);
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    CHECK_EQ(kv_seq_new(kv, &s), 0);
    float *x = calloc((size_t)(4 * m->hp.n_embd), sizeof(float));
    struct batch_tok bt[4];
    for (int i = 0; i < 4; i++)
        bt[i] = (struct batch_tok){ s, i, 1, 0, 0, 0 };
    struct batch b = { 4, bt, NULL, 0 };

    /* the slots are not in the sequence yet */
    CHECK_EQ(layer_forward(m, 0, x, &b, kv, NULL, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "fewer than") != NULL);
    CHECK_EQ(kv_seq_grow(kv, s, 4, &d), 0);
    CHECK_EQ(layer_forward(m, m->hp.n_layer, x, &b, kv, NULL, &d), -ST_RANGE);
    CHECK_EQ(layer_forward(m, -1, x, &b, kv, NULL, &d), -ST_RANGE);
    bt[2].seq = 77;
    CHECK_EQ(layer_forward(m, 0, x, &b, kv, NULL, &d), -ST_RANGE);
    bt[2].seq = s;
    CHECK_EQ(layer_forward(m, 0, x, &b, kv, NULL, &d), 0);
    CHECK_EQ(kv_seq_len(kv, s), 4);
    free(x);
    kv_free(kv);
    model_free(m);
}

int
main(void)
{
    /* avx2: its float matmuls mirror tinyBLAS in the ubatch mode */
    static const char *const kernels[] = { "ref", "auto", "avx2" };

    for (size_t f = 0; f < sizeof(fixtures) / sizeof(fixtures[0]); f++)
        if (access(fixtures[f], R_OK) != 0) {
            fprintf(stderr, "test_layer: %s missing: run `make fixtures`\n", fixtures[f]);
            return 1;
        }
    for (size_t f = 0; f < sizeof(fixtures) / sizeof(fixtures[0]); f++)
        for (int k = 0; k < 3; k++) {
            test_config(fixtures[f], kernels[k], 2, 0, GGML_TYPE_F16);
            test_config(fixtures[f], kernels[k], 1, 24, GGML_TYPE_F32);
        }
    test_config(fixtures[2], "auto", 2, 7, GGML_TYPE_Q8_0);
    test_errors();
    T_DONE();
}
