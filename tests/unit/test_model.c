/*
 * test_model.c - the model loader and the batched, paged forward pass
 * against a naive, self-contained f64 transformer written here (unpaged,
 * unbatched, full causal attention), on the synthetic fixtures made by
 * `make fixtures`.  Also: batch == token by token == interleaved sequences,
 * masks, chunking, hooks, KV exhaustion and rollback, and bad model files.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "kvcache.h"
#include "model.h"
#include "ops.h"
#include "qtypes.h"
#include "t.h"

#define F32_PATH "tests/fixtures/tiny-llama-f32.gguf"
#define F16_PATH "tests/fixtures/tiny-llama-f16.gguf"

/* ---- the naive f64 reference ---- */

struct ref_layer {
    double *an, *wq, *wk, *wv, *wo, *fn, *wg, *wu, *wd;
};

struct ref {
    int64_t E, L, H, HKV, hd, F, V;
    double eps, base;
    double *emb, *out, *onorm;
    struct ref_layer *lay;
};

static double *
ref_tensor(struct gguf *g, const char *name, int64_t want)
{
    int64_t i = gguf_find_tensor(g, name);
    if (i < 0)
        return NULL;
    struct gguf_tensor *t = &g->t[i];
    int64_t n = gguf_tensor_nelements(t);
    if (n != want)
        return NULL;
    float *f = malloc((size_t)n * sizeof(float));
    double *dd = malloc((size_t)n * sizeof(double));
    qtype_get(t->type)->to_float(t->data, f, n);
    for (int64_t k = 0; k < n; k++)
        dd[k] = f[k];
    free(f);
    return dd;
}

static uint64_t
ref_u(struct gguf *g, const char *key)
{
    uint64_t v = 0;
    gguf_get_uint(g, key, &v, NULL);
    return v;
}

static int
ref_load(struct ref *r, struct gguf *g)
{
    double v;
    char name[64];

    r->E = (int64_t)ref_u(g, "llama.embedding_length");
    r->L = (int64_t)ref_u(g, "llama.block_count");
    r->H = (int64_t)ref_u(g, "llama.attention.head_count");
    r->HKV = (int64_t)ref_u(g, "llama.attention.head_count_kv");
    r->F = (int64_t)ref_u(g, "llama.feed_forward_length");
    r->hd = r->E / r->H;
    gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &v, NULL);
    r->eps = v;
    r->base = 10000.0;
    if (gguf_get_float(g, "llama.rope.freq_base", &v, NULL) == 0)
        r->base = v;
    r->V = g->t[gguf_find_tensor(g, "token_embd.weight")].ne[1];
    r->emb = ref_tensor(g, "token_embd.weight", r->V * r->E);
    r->out = ref_tensor(g, "output.weight", r->V * r->E);
    if (!r->out)
        r->out = r->emb;
    r->onorm = ref_tensor(g, "output_norm.weight", r->E);
    r->lay = calloc((size_t)r->L, sizeof(*r->lay));
    int64_t kvd = r->HKV * r->hd;
    for (int64_t l = 0; l < r->L; l++) {
        struct ref_layer *y = &r->lay[l];
#define LT(field, suffix, n) \
    snprintf(name, sizeof(name), "blk.%lld." suffix, (long long)l); \
    if (!(y->field = ref_tensor(g, name, n))) return -1;
        LT(an, "attn_norm.weight", r->E);
        LT(wq, "attn_q.weight", r->E * r->E);
        LT(wk, "attn_k.weight", r->E * kvd);
        LT(wv, "attn_v.weight", r->E * kvd);
        LT(wo, "attn_output.weight", r->E * r->E);
        LT(fn, "ffn_norm.weight", r->E);
        LT(wg, "ffn_gate.weight", r->E * r->F);
        LT(wu, "ffn_up.weight", r->E * r->F);
        LT(wd, "ffn_down.weight", r->F * r->E);
#undef LT
    }
    return r->emb && r->onorm ? 0 : -1;
}

static void
ref_free(struct ref *r)
{
    for (int64_t l = 0; l < r->L; l++) {
        struct ref_layer *y = &r->lay[l];
        free(y->an), free(y->wq), free(y->wk), free(y->wv), free(y->wo);
        free(y->fn), free(y->wg), free(y->wu), free(y->wd);
    }
    free(r->lay);
    if (r->out != r->emb)
        free(r->out);
    free(r->emb);
    free(r->onorm);
}

static void
rms(double *y, const double *x, const double *w, int64_t n, double eps)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * x[i];
    double sc = 1.0 / sqrt(s / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * sc * w[i];
}

/* y[rows] = W[rows][cols] x */
static void
mv(double *y, const double *w, const double *x, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++)
            s += w[r * cols + c] * x[c];
        y[r] = s;
    }
}

static void
rope(double *x, int64_t heads, int64_t hd, int64_t pos, double base)
{
    for (int64_t h = 0; h < heads; h++) {
        for (int64_t i = 0; i < hd / 2; i++) {
            double th = (double)pos * pow(base, -2.0 * (double)i / (double)hd);
            double a = x[h * hd + 2 * i], b = x[h * hd + 2 * i + 1];
            x[h * hd + 2 * i] = a * cos(th) - b * sin(th);
            x[h * hd + 2 * i + 1] = a * sin(th) + b * cos(th);
        }
    }
}

/* logits[n][V] of tokens tok[0..n) at positions 0..n-1, full causal attention */
static void
ref_forward(const struct ref *r, const int32_t *tok, int64_t n, double *logits)
{
    int64_t E = r->E, hd = r->hd, kvd = r->HKV * hd, grp = r->H / r->HKV;
    double *x = calloc((size_t)(n * E), sizeof(double));
    double *xn = malloc((size_t)E * sizeof(double));
    double *q = malloc((size_t)E * sizeof(double));
    double *att = malloc((size_t)E * sizeof(double));
    double *o = malloc((size_t)E * sizeof(double));
    double *g = malloc((size_t)r->F * sizeof(double));
    double *u = malloc((size_t)r->F * sizeof(double));
    double *K = malloc((size_t)(n * kvd) * sizeof(double));
    double *Vv = malloc((size_t)(n * kvd) * sizeof(double));
    double *sc = malloc((size_t)n * sizeof(double));

    for (int64_t t = 0; t < n; t++)
        memcpy(x + t * E, r->emb + tok[t] * E, (size_t)E * sizeof(double));
    for (int64_t l = 0; l < r->L; l++) {
        const struct ref_layer *y = &r->lay[l];
        for (int64_t t = 0; t < n; t++) {
            rms(xn, x + t * E, y->an, E, r->eps);
            mv(K + t * kvd, y->wk, xn, kvd, E);
            mv(Vv + t * kvd, y->wv, xn, kvd, E);
            rope(K + t * kvd, r->HKV, hd, t, r->base);
        }
        for (int64_t t = 0; t < n; t++) {
            double *xt = x + t * E;
            rms(xn, xt, y->an, E, r->eps);
            mv(q, y->wq, xn, E, E);
            rope(q, r->H, hd, t, r->base);
            for (int64_t h = 0; h < r->H; h++) {
                int64_t kh = h / grp;
                double mx = -INFINITY, sum = 0;
                for (int64_t s = 0; s <= t; s++) {
                    double d = 0;
                    for (int64_t i = 0; i < hd; i++)
                        d += q[h * hd + i] * K[s * kvd + kh * hd + i];
                    sc[s] = d / sqrt((double)hd);
                    if (sc[s] > mx)
                        mx = sc[s];
                }
                for (int64_t s = 0; s <= t; s++)
                    sum += (sc[s] = exp(sc[s] - mx));
                for (int64_t i = 0; i < hd; i++) {
                    double a = 0;
                    for (int64_t s = 0; s <= t; s++)
                        a += sc[s] * Vv[s * kvd + kh * hd + i];
                    att[h * hd + i] = a / sum;
                }
            }
            mv(o, y->wo, att, E, E);
            for (int64_t i = 0; i < E; i++)
                xt[i] += o[i];
            rms(xn, xt, y->fn, E, r->eps);
            mv(g, y->wg, xn, r->F, E);
            mv(u, y->wu, xn, r->F, E);
            for (int64_t i = 0; i < r->F; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            mv(o, y->wd, g, E, r->F);
            for (int64_t i = 0; i < E; i++)
                xt[i] += o[i];
        }
    }
    for (int64_t t = 0; t < n; t++) {
        rms(xn, x + t * E, r->onorm, E, r->eps);
        mv(logits + t * r->V, r->out, xn, r->V, E);
    }
    free(x), free(xn), free(q), free(att), free(o), free(g), free(u), free(K), free(Vv), free(sc);
}

/* ---- helpers ---- */

static const int32_t prompt[12] = { 5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 1, 280 };

static double
max_abs(const float *a, const double *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > m || isnan(a[i]))
            m = isnan(a[i]) ? INFINITY : fabs((double)a[i] - b[i]);
    return m;
}

static double
max_abs_ff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= m))
            m = fabs((double)a[i] - b[i]);
    return m;
}

static double
max_mag(const double *a, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(a[i]) > m)
            m = fabs(a[i]);
    return m;
}

static struct kvcache *
new_kv(const struct model *m, uint32_t dtype, size_t mem, int64_t block_size)
{
    struct kv_config c;
    struct kvcache *kv = NULL;
    struct diag d;

    model_kv_config(m, mem, dtype, &c);
    if (block_size)
        c.block_size = block_size;
    if (kv_new(&kv, &c, &d) < 0)
        fprintf(stderr, "kv_new: %s\n", d.msg);
    return kv;
}

/* Runs the prompt as one batch on a fresh sequence; logits of every token. */
static int
run_batch(struct model *m, struct kvcache *kv, int32_t seq, const int32_t *tok, int64_t n,
          float *logits)
{
    struct batch_tok bt[128];
    struct batch b = { n, bt, NULL, 0 };
    struct model_out out = { logits, NULL };
    struct diag d;
    int64_t len0 = kv_seq_len(kv, seq);

    if (n > 128)
        return -1;
    for (int64_t i = 0; i < n; i++)
        bt[i] = (struct batch_tok){ seq, (int32_t)(len0 + i), tok[i], 1, 0, 0 };
    int rc = model_forward(m, kv, &b, NULL, &out, &d);
    if (rc < 0 && rc != -ST_NOMEM)
        fprintf(stderr, "model_forward: %s\n", d.msg);
    return rc;
}

/* ---- tests ---- */

static void
test_against_reference(const char *path, uint32_t kv_dtype, double rel_tol, int threads)
{
    struct model_opts o = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct diag d;
    struct ref r;
    int64_t n = 12;

    o.n_threads = threads;
    o.kernel = "ref";
    CHECK_EQ(model_open(&m, path, &o, &d), 0);
    if (!m) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        return;
    }
    memset(&r, 0, sizeof(r));
    CHECK_EQ(ref_load(&r, &m->gguf), 0);
    CHECK_EQ(r.V, m->hp.n_vocab);
    double *want = malloc((size_t)(n * r.V) * sizeof(double));
    float *got = malloc((size_t)(n * r.V) * sizeof(float));
    ref_forward(&r, prompt, n, want);
    double mag = max_mag(want, n * r.V);
    CHECK(mag > 0.1);

    struct kvcache *kv = new_kv(m, kv_dtype, 1 << 20, 0);
    int32_t seq;
    CHECK_EQ(kv_seq_new(kv, &seq), 0);
    CHECK_EQ(run_batch(m, kv, seq, prompt, n, got), 0);
    double err = max_abs(got, want, n * r.V);
    if (getenv("T_VERBOSE") || !(err <= rel_tol * mag))
        fprintf(stderr, "%s kv %u: max error %.3g of magnitude %.3g\n", path, kv_dtype, err, mag);
    CHECK(err <= rel_tol * mag);
    CHECK_EQ(kv_seq_len(kv, seq), n);
    kv_free(kv);
    free(want);
    free(got);
    ref_free(&r);
    model_free(m);
}

/* batch == token by token == two sequences interleaved == chunked */
static void
test_batch_equivalence(void)
{
    struct model_opts o = MODEL_OPTS_INIT;
    struct model *m = NULL, *mc = NULL;
    struct diag d;
    int64_t n = 12, V;

    o.n_threads = 2;
    o.kernel = "ref";
    CHECK_EQ(model_open(&m, F32_PATH, &o, &d), 0);
    o.max_batch = 5;
    CHECK_EQ(model_open(&mc, F32_PATH, &o, &d), 0);
    if (!m || !mc)
        return;
    V = m->hp.n_vocab;
    float *whole = malloc((size_t)(n * V) * sizeof(float));
    float *step = malloc((size_t)(n * V) * sizeof(float));
    float *inter = malloc((size_t)(2 * n * V) * sizeof(float));
    float *chunk = malloc((size_t)(n * V) * sizeof(float));
    struct kvcache *kv = new_kv(m, GGML_TYPE_F16, 1 << 20, 4);
    int32_t s0, s1, s2, s3;

    kv_seq_new(kv, &s0);
    CHECK_EQ(run_batch(m, kv, s0, prompt, n, whole), 0);

    kv_seq_new(kv, &s1);
    for (int64_t i = 0; i < n; i++)
        CHECK_EQ(run_batch(m, kv, s1, prompt + i, 1, step + i * V), 0);
    CHECK(max_abs_ff(whole, step, n * V) <= 1e-4);

    /* two sequences in one batch: the prompt and its reverse, interleaved */
    int32_t rev[12];
    for (int64_t i = 0; i < n; i++)
        rev[i] = prompt[n - 1 - i];
    kv_seq_new(kv, &s2);
    kv_seq_new(kv, &s3);
    struct batch_tok bt[24];
    for (int64_t i = 0; i < n; i++) {
        bt[2 * i] = (struct batch_tok){ s2, (int32_t)i, prompt[i], 1, 0, 0 };
        bt[2 * i + 1] = (struct batch_tok){ s3, (int32_t)i, rev[i], 1, 0, 0 };
    }
    struct batch b = { 2 * n, bt, NULL, 0 };
    struct model_out out = { inter, NULL };
    CHECK_EQ(model_forward(m, kv, &b, NULL, &out, &d), 0);
    double e0 = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = max_abs_ff(inter + 2 * i * V, whole + i * V, V);
        if (e > e0)
            e0 = e;
    }
    CHECK(e0 <= 1e-4);
    /* the reverse sequence against its own single run */
    int32_t s4;
    kv_seq_new(kv, &s4);
    CHECK_EQ(run_batch(m, kv, s4, rev, n, step), 0);
    e0 = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = max_abs_ff(inter + (2 * i + 1) * V, step + i * V, V);
        if (e > e0)
            e0 = e;
    }
    CHECK(e0 <= 1e-4);

    /* chunked (max_batch 5): same logits, including the middle chunk */
    struct kvcache *kv2 = new_kv(mc, GGML_TYPE_F16, 1 << 20, 4);
    int32_t c;
    kv_seq_new(kv2, &c);
    CHECK_EQ(run_batch(mc, kv2, c, prompt, n, chunk), 0);
    CHECK(max_abs_ff(whole, chunk, n * V) <= 1e-4);

    /* only some tokens want logits: rows are packed in batch order */
    struct batch_tok bt2[12];
    int32_t s5;
    kv_seq_new(kv, &s5);
    for (int64_t i = 0; i < n; i++)
        bt2[i] = (struct batch_tok){ s5, (int32_t)i, prompt[i], i == 3 || i == n - 1, 0, 0 };
    struct batch b2 = { n, bt2, NULL, 0 };
    out.logits = chunk;
    CHECK_EQ(model_forward(m, kv, &b2, NULL, &out, &d), 0);
    CHECK(max_abs_ff(chunk, whole + 3 * V, V) <= 1e-4);
    CHECK(max_abs_ff(chunk + V, whole + (n - 1) * V, V) <= 1e-4);

    kv_free(kv2);
    kv_free(kv);
    free(whole), free(step), free(inter), free(chunk);
    model_free(mc);
    model_free(m);
}

/* A tree-shaped batch: tokens a b c d at positions 0 1 2 2 where d may not
 * see c.  d must then get the logits of the sequence a b d. */
static void
test_mask(void)
{
    struct model_opts o = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct diag d;

    o.n_threads = 2;
    CHECK_EQ(model_open(&m, F32_PATH, &o, &d), 0);
    if (!m)
        return;
    int64_t V = m->hp.n_vocab;
    float *got = malloc((size_t)(6 * V) * sizeof(float));
    float *want = malloc((size_t)(4 * V) * sizeof(float));
    struct kvcache *kv = new_kv(m, GGML_TYPE_F32, 1 << 20, 2);
    int32_t s, s2;
    kv_seq_new(kv, &s);
    kv_seq_new(kv, &s2);

    /* one committed token first, so the mask applies past a stored prefix */
    int32_t pre = 9;
    CHECK_EQ(run_batch(m, kv, s, &pre, 1, got), 0);
    int32_t a = 11, bb = 22, c = 33, dd = 44;
    struct batch_tok bt[4] = {
        { s, 1, a, 1, 0, 0 }, { s, 2, bb, 1, 0, 0 }, { s, 3, c, 1, 0, 0 }, { s, 3, dd, 1, 0, 0 },
    };
    uint8_t mask[16] = {
        1, 0, 0, 0,
        1, 1, 0, 0,
        1, 1, 1, 0,
        1, 1, 0, 1,
    };
    struct batch b = { 4, bt, mask, 0 };
    struct model_out out = { got, NULL };
    CHECK_EQ(model_forward(m, kv, &b, NULL, &out, &d), 0);
    CHECK_EQ(kv_seq_len(kv, s), 5);

    int32_t p1[4] = { 9, a, bb, dd };
    CHECK_EQ(run_batch(m, kv, s2, p1, 4, want), 0);
    CHECK(max_abs_ff(got + 3 * V, want + 3 * V, V) <= 1e-4);   /* d as in 9 a b d */
    CHECK(max_abs_ff(got + 1 * V, want + 2 * V, V) <= 1e-4);   /* b unchanged */
    /* and c, which sees everything before it, is unaffected by d */
    int32_t p2[4] = { 9, a, bb, c };
    kv_seq_truncate(kv, s2, 0);
    CHECK_EQ(run_batch(m, kv, s2, p2, 4, want), 0);
    CHECK(max_abs_ff(got + 2 * V, want + 3 * V, V) <= 1e-4);
    /* the mask really matters: d without it differs */
    CHECK(max_abs_ff(got + 3 * V, want + 3 * V, V) > 1e-3);

    kv_free(kv);
    free(got);
    free(want);
    model_free(m);
}

struct hook_log {
    int n_embd_calls, n_linear, n_layer_out, n_lm;
    int bad;
    int abort_at;               /* abort on this call number (1-based), 0 = never */
    int calls;
    int64_t E, F, V;
};

static int
hook_fn(void *ctx, const struct model_hook_event *ev)
{
    struct hook_log *h = ctx;
    char want[64];

    h->calls++;
    if (h->abort_at && h->calls == h->abort_at)
        return -ST_CHECK;
    if (!ev->x || ev->ld < ev->dim || ev->n_tok < 1)
        h->bad++;
    for (int64_t i = 0; i < ev->n_tok * ev->ld; i += ev->ld)
        if (!isfinite(ev->x[i]))
            h->bad++;
    switch (ev->site) {
    case MODEL_HOOK_EMBD:
        h->n_embd_calls++;
        if (strcmp(ev->name, "inp_embd") || ev->dim != h->E || ev->tok0 != 0)
            h->bad++;
        break;
    case MODEL_HOOK_LINEAR_IN:
        if (!ev->w || strcmp(ev->w->name, ev->name) || ev->w->cols != ev->dim)
            h->bad++;
        if (ev->layer < 0) {
            h->n_lm++;
            if (strcmp(ev->name, "token_embd.weight") || ev->n_tok != 2 || ev->tok0 != -1)
                h->bad++;
        } else {
            static const char *const order[] = { "attn_q", "attn_k", "attn_v", "attn_output",
                                                 "ffn_gate", "ffn_up", "ffn_down" };
            snprintf(want, sizeof(want), "blk.%d.%s.weight", ev->layer, order[h->n_linear % 7]);
            if (strcmp(ev->name, want))
                h->bad++;
            if (ev->dim != (strstr(ev->name, "ffn_down") ? h->F : h->E) || ev->n_tok != 5)
                h->bad++;
            h->n_linear++;
        }
        break;
    case MODEL_HOOK_LAYER_OUT:
        snprintf(want, sizeof(want), "blk.%d.out", ev->layer);
        if (strcmp(ev->name, want) || ev->dim != h->E || ev->layer != h->n_layer_out)
            h->bad++;
        h->n_layer_out++;
        break;
    default:
        h->bad++;
    }
    return 0;
}

static void
test_hooks(void)
{
    struct model_opts o = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct diag d;

    o.n_threads = 1;
    CHECK_EQ(model_open(&m, F32_PATH, &o, &d), 0);
    if (!m)
        return;
    int64_t V = m->hp.n_vocab, E = m->hp.n_embd;
    float *lg = malloc((size_t)(2 * V) * sizeof(float));
    float *hid = malloc((size_t)(5 * E) * sizeof(float));
    float *lg2 = malloc((size_t)(5 * V) * sizeof(float));
    struct kvcache *kv = new_kv(m, GGML_TYPE_F16, 1 << 20, 0);
    int32_t s;
    kv_seq_new(kv, &s);
    struct batch_tok bt[5];
    for (int i = 0; i < 5; i++)
        bt[i] = (struct batch_tok){ s, i, prompt[i], i >= 3, 0, 0 };
    struct batch b = { 5, bt, NULL, 0 };
    struct hook_log h = { 0 };
    h.E = E, h.F = m->hp.n_ff, h.V = V;
    struct model_hooks hk = { hook_fn, &h,
                              MODEL_HOOK_EMBD | MODEL_HOOK_LINEAR_IN | MODEL_HOOK_LAYER_OUT };
    struct model_out out = { lg, hid };
    CHECK_EQ(model_forward(m, kv, &b, &hk, &out, &d), 0);
    CHECK_EQ(h.bad, 0);
    CHECK_EQ(h.n_embd_calls, 1);
    CHECK_EQ(h.n_linear, 7 * m->hp.n_layer);
    CHECK_EQ(h.n_layer_out, m->hp.n_layer);
    CHECK_EQ(h.n_lm, 1);

    /* hidden = the LM head's input: logits follow from it */
    for (int t = 3; t < 5; t++) {
        double err = 0;
        float *row = malloc((size_t)E * sizeof(float));
        for (int64_t v = 0; v < V; v += 37) {
            ops_get_row_ref(row, m->output.data, m->output.row_bytes, m->output.type, v, E);
            double s2 = 0;
            for (int64_t i = 0; i < E; i++)
                s2 += (double)row[i] * hid[t * E + i];
            if (fabs(s2 - lg[(t - 3) * V + v]) > err)
                err = fabs(s2 - lg[(t - 3) * V + v]);
        }
        free(row);
        CHECK(err < 1e-4);
    }

    /* a hook that aborts: the code comes back and the cache is rolled back */
    int32_t s2;
    kv_seq_new(kv, &s2);
    for (int i = 0; i < 5; i++)
        bt[i].seq = s2;
    struct hook_log h2 = { 0 };
    h2.E = E, h2.F = m->hp.n_ff, h2.V = V;
    h2.abort_at = 9;
    hk.ctx = &h2;
    int64_t free_before;
    struct kv_stats ks;
    kv_stats(kv, &ks);
    free_before = ks.blocks_free;
    CHECK_EQ(model_forward(m, kv, &b, &hk, &out, &d), -ST_CHECK);
    CHECK_EQ(kv_seq_len(kv, s2), 0);
    kv_stats(kv, &ks);
    CHECK_EQ(ks.blocks_free, free_before);

    /* no hooks, no outputs: still appends */
    CHECK_EQ(model_forward(m, kv, &b, NULL, NULL, &d), 0);
    CHECK_EQ(kv_seq_len(kv, s2), 5);

    /* bad batches */
    bt[0].token = (int32_t)V;
    CHECK_EQ(model_forward(m, kv, &b, NULL, NULL, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "out of range") != NULL);
    bt[0].token = 1;
    bt[0].seq = 999;
    CHECK_EQ(model_forward(m, kv, &b, NULL, NULL, &d), -ST_RANGE);
    bt[0].seq = s2;
    bt[0].pos = -1;
    CHECK_EQ(model_forward(m, kv, &b, NULL, NULL, &d), -ST_RANGE);
    bt[0].pos = 0;
    struct batch empty = { 0, bt, NULL, 0 };
    CHECK_EQ(model_forward(m, kv, &empty, NULL, NULL, &d), -ST_RANGE);
    CHECK_EQ(kv_seq_len(kv, s2), 5);

    /* a KV pool of the wrong shape */
    struct kv_config c;
    struct kvcache *kvbad = NULL;
    model_kv_config(m, 1 << 20, GGML_TYPE_F16, &c);
    c.n_head_kv++;
    CHECK_EQ(kv_new(&kvbad, &c, &d), 0);
    int32_t sb;
    kv_seq_new(kvbad, &sb);
    bt[0].seq = sb;
    struct batch one = { 1, bt, NULL, 0 };
    CHECK_EQ(model_forward(m, kvbad, &one, NULL, NULL, &d), -ST_RANGE);
    kv_free(kvbad);

    /* pool exhaustion: 2 blocks of 4 hold 8 tokens; 5 + 5 do not fit */
    struct kvcache *small = new_kv(m, GGML_TYPE_F16, 2 * model_kv_bytes_per_token(m, GGML_TYPE_F16) * 4, 4);
    int32_t a1, a2;
    kv_seq_new(small, &a1);
    kv_seq_new(small, &a2);
    CHECK_EQ(run_batch(m, small, a1, prompt, 5, lg2), 0);
    int rc = run_batch(m, small, a2, prompt, 5, lg2);
    CHECK_EQ(rc, -ST_NOMEM);
    CHECK_EQ(kv_seq_len(small, a2), 0);
    CHECK_EQ(kv_seq_len(small, a1), 5);
    /* two sequences in one batch where the second does not fit: neither grows */
    struct batch_tok two[6];
    for (int i = 0; i < 3; i++) {
        two[2 * i] = (struct batch_tok){ a1, 5 + i, prompt[i], 0, 0, 0 };
        two[2 * i + 1] = (struct batch_tok){ a2, i, prompt[i], 0, 0, 0 };
    }
    struct batch b3 = { 6, two, NULL, 0 };
    CHECK_EQ(model_forward(m, small, &b3, NULL, NULL, &d), -ST_NOMEM);
    CHECK(strstr(d.msg, "kv cache full") != NULL);
    CHECK_EQ(kv_seq_len(small, a1), 5);
    CHECK_EQ(kv_seq_len(small, a2), 0);
    kv_free(small);

    kv_free(kv);
    free(lg), free(hid), free(lg2);
    model_free(m);
}

/* ---- bad model files ---- */

enum mutation { MUT_DROP, MUT_SHAPE, MUT_TYPE, MUT_KEY_DROP, MUT_KEY_TYPE, MUT_ARCH };

/* Copies F32_PATH with one change into path. */
static int
write_mutant(const char *path, enum mutation mut, const char *what, const char *arg)
{
    struct gguf src, g;
    struct diag d;
    int rc;

    if (gguf_open(&src, F32_PATH, &d) < 0)
        return -1;
    gguf_init(&g);
    for (uint64_t i = 0; i < src.n_kv; i++) {
        const struct gguf_kv *kv = &src.kv[i];
        if (strcmp(kv->key.p, what) == 0) {
            if (mut == MUT_KEY_DROP)
                continue;
            if (mut == MUT_KEY_TYPE) {
                gguf_set_u64(&g, what, 64);
                continue;
            }
            if (mut == MUT_ARCH) {
                gguf_set_str(&g, what, arg);
                continue;
            }
        }
        gguf_set_kv_copy(&g, kv);
    }
    const void *datas[64];
    int nt = 0;
    for (uint64_t i = 0; i < src.n_tensors; i++) {
        struct gguf_tensor *t = &src.t[i];
        int64_t ne[4] = { t->ne[0], t->ne[1], t->ne[2], t->ne[3] };
        uint32_t nd = t->n_dims, type = t->type;
        if (strcmp(t->name.p, what) == 0) {
            if (mut == MUT_DROP)
                continue;
            if (mut == MUT_SHAPE) {
                int64_t x = ne[0];      /* transpose: same bytes, wrong shape */
                ne[0] = ne[1];
                ne[1] = x;
            }
            if (mut == MUT_TYPE)
                type = GGML_TYPE_I32;   /* same size as F32, not computable */
        }
        gguf_add_tensor(&g, t->name.p, type, nd, ne, t->data, &d);
        datas[nt++] = t->data;
    }
    FILE *fp = fopen(path, "wb");
    rc = fp ? gguf_write_header(&g, fp, &d) : -1;
    for (int i = 0; rc == 0 && i < nt; i++)
        rc = gguf_write_tensor(&g, fp, (uint64_t)i, datas[i], &d);
    if (fp && fclose(fp) != 0)
        rc = -1;
    gguf_release(&g);
    gguf_release(&src);
    return rc;
}

static void
expect_bad(enum mutation mut, const char *what, const char *arg, const char *msg_part)
{
    char path[] = "/tmp/test_model_XXXXXX";
    int fd = mkstemp(path);
    struct model *m = NULL;
    struct diag d = { "" };

    if (fd < 0) {
        CHECK(0);
        return;
    }
    close(fd);
    CHECK_EQ(write_mutant(path, mut, what, arg), 0);
    int rc = model_open(&m, path, NULL, &d);
    CHECK_EQ(rc, -ST_FORMAT);
    CHECK(m == NULL);
    if (!strstr(d.msg, msg_part)) {
        fprintf(stderr, "expected '%s' in: %s\n", msg_part, d.msg);
        CHECK(0);
    }
    model_free(m);
    unlink(path);
}

static void
test_bad_files(void)
{
    struct model *m = NULL;
    struct diag d;

    expect_bad(MUT_DROP, "blk.1.ffn_up.weight", NULL, "missing tensor 'blk.1.ffn_up.weight'");
    expect_bad(MUT_DROP, "output_norm.weight", NULL, "missing tensor 'output_norm.weight'");
    expect_bad(MUT_SHAPE, "blk.0.attn_k.weight", NULL, "tensor 'blk.0.attn_k.weight': shape");
    expect_bad(MUT_TYPE, "blk.0.attn_q.weight", NULL, "blk.0.attn_q.weight");
    expect_bad(MUT_KEY_DROP, "llama.embedding_length", NULL, "llama.embedding_length");
    expect_bad(MUT_KEY_DROP, "llama.attention.layer_norm_rms_epsilon", NULL,
               "llama.attention.layer_norm_rms_epsilon");
    expect_bad(MUT_KEY_TYPE, "llama.block_count", NULL, "llama.block_count");
    expect_bad(MUT_ARCH, "general.architecture", "mamba", "unknown architecture 'mamba'");
    expect_bad(MUT_ARCH, "general.architecture", "gemma3", "gemma3");
    expect_bad(MUT_KEY_DROP, "general.architecture", NULL, "general.architecture");
    /* a tensor that is not there is fine when optional */
    CHECK_EQ(model_open(&m, "/nonexistent/model.gguf", NULL, &d), -ST_IO);
    struct model_opts o = MODEL_OPTS_INIT;
    o.kernel = "no-such-kernel";
    CHECK_EQ(model_open(&m, F32_PATH, &o, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "no-such-kernel") != NULL);
}

/* Copies F32_PATH adding rope scaling keys and/or a rope_freqs.weight of
 * n_freqs values v (n_freqs 0 = none). */
static int
write_rope_variant(const char *path, const char *scaling, float factor, int64_t n_freqs, float v)
{
    struct gguf src, g;
    struct diag d;
    float freqs[64];
    int rc;

    if (gguf_open(&src, F32_PATH, &d) < 0)
        return -1;
    gguf_init(&g);
    for (uint64_t i = 0; i < src.n_kv; i++)
        gguf_set_kv_copy(&g, &src.kv[i]);
    if (scaling) {
        gguf_set_str(&g, "llama.rope.scaling.type", scaling);
        gguf_set_f32(&g, "llama.rope.scaling.factor", factor);
    }
    const void *datas[64];
    int nt = 0;
    for (uint64_t i = 0; i < src.n_tensors; i++) {
        struct gguf_tensor *t = &src.t[i];
        gguf_add_tensor(&g, t->name.p, t->type, t->n_dims, t->ne, t->data, &d);
        datas[nt++] = t->data;
    }
    if (n_freqs > 0) {
        for (int64_t i = 0; i < n_freqs; i++)
            freqs[i] = v;
        int64_t ne[4] = { n_freqs, 1, 1, 1 };
        gguf_add_tensor(&g, "rope_freqs.weight", GGML_TYPE_F32, 1, ne, freqs, &d);
        datas[nt++] = freqs;
    }
    FILE *fp = fopen(path, "wb");
    rc = fp ? gguf_write_header(&g, fp, &d) : -1;
    for (int i = 0; rc == 0 && i < nt; i++)
        rc = gguf_write_tensor(&g, fp, (uint64_t)i, datas[i], &d);
    if (fp && fclose(fp) != 0)
        rc = -1;
    gguf_release(&g);
    gguf_release(&src);
    return rc;
}

/* logits of the prompt for a rope variant of the fixture (NULL on failure) */
static float *
rope_variant_logits(const char *scaling, float factor, int64_t n_freqs, float v, int *rc_out,
                    struct diag *d)
{
    char path[] = "/tmp/test_model_rope_XXXXXX";
    int fd = mkstemp(path);
    struct model *m = NULL;
    float *lg = NULL;

    *rc_out = -1;
    if (fd < 0)
        return NULL;
    close(fd);
    if (write_rope_variant(path, scaling, factor, n_freqs, v) == 0 &&
        (*rc_out = model_open(&m, path, NULL, d)) == 0) {
        struct kvcache *kv = new_kv(m, GGML_TYPE_F32, 1 << 20, 0);
        int32_t s;
        kv_seq_new(kv, &s);
        lg = malloc((size_t)(12 * m->hp.n_vocab) * sizeof(float));
        if (run_batch(m, kv, s, prompt, 12, lg) < 0) {
            free(lg);
            lg = NULL;
        }
        kv_free(kv);
        model_free(m);
    }
    unlink(path);
    return lg;
}

/* rope_freqs (llama3) and linear scaling reach the kernels: factors of 2
 * and a linear factor of 2 both halve every angle, factors of 1 change
 * nothing; bad rope metadata is refused. */
static void
test_rope_scaling(void)
{
    struct diag d;
    int rc;
    int64_t n = 12 * 281;
    float *base = rope_variant_logits(NULL, 0, 0, 0, &rc, &d);
    float *ones = rope_variant_logits(NULL, 0, 8, 1.0f, &rc, &d);
    float *twos = rope_variant_logits(NULL, 0, 8, 2.0f, &rc, &d);
    float *lin = rope_variant_logits("linear", 2.0f, 0, 0, &rc, &d);
    float *none = rope_variant_logits("none", 2.0f, 0, 0, &rc, &d);

    CHECK(base && ones && twos && lin && none);
    if (base && ones && twos && lin && none) {
        CHECK(memcmp(base, ones, (size_t)n * sizeof(float)) == 0);
        CHECK(memcmp(base, none, (size_t)n * sizeof(float)) == 0);
        CHECK(max_abs_ff(twos, lin, n) <= 1e-6);
        CHECK(max_abs_ff(base, lin, n) > 1e-3);
    }
    free(base), free(ones), free(twos), free(lin), free(none);

    float *p = rope_variant_logits(NULL, 0, 7, 1.0f, &rc, &d);
    CHECK(p == NULL);
    CHECK_EQ(rc, -ST_FORMAT);
    CHECK(strstr(d.msg, "rope_freqs.weight") != NULL);
    p = rope_variant_logits("yarn", 4.0f, 0, 0, &rc, &d);
    CHECK(p == NULL);
    CHECK_EQ(rc, -ST_FORMAT);
    CHECK(strstr(d.msg, "yarn") != NULL);
    p = rope_variant_logits("weird", 4.0f, 0, 0, &rc, &d);
    CHECK(p == NULL);
    CHECK_EQ(rc, -ST_FORMAT);
}

static void
test_hparams(void)
{
    struct model *m = NULL;
    struct diag d;

    CHECK_EQ(model_open(&m, F32_PATH, NULL, &d), 0);
    if (!m)
        return;
    CHECK_EQ(m->hp.arch, MODEL_ARCH_LLAMA);
    CHECK_EQ(m->hp.n_embd, 64);
    CHECK_EQ(m->hp.n_layer, 2);
    CHECK_EQ(m->hp.n_head, 4);
    CHECK_EQ(m->hp.n_head_kv, 2);
    CHECK_EQ(m->hp.n_ff, 128);
    CHECK_EQ(m->hp.n_vocab, 281);
    CHECK_EQ(m->hp.head_dim, 16);
    CHECK_EQ(m->hp.rope.n_rot, 16);
    CHECK(m->hp.tied_output);
    CHECK(m->output.data == m->tok_embd.data);
    CHECK(m->hp.rope.freq_factors == NULL);
    CHECK_NEAR(m->hp.rope.freq_scale, 1.0, 0);
    CHECK_NEAR(m->hp.rms_eps, 1e-5, 1e-12);
    CHECK_EQ(model_kv_bytes_per_token(m, GGML_TYPE_F16), 2 * 2 * (16 + 16) * 2);
    CHECK(m->max_batch >= 16);
    CHECK(strcmp(m->be->kernel, ops_select(NULL)->name) == 0);     /* auto, or LLMKIT_KERNEL */
    CHECK(strcmp(m->be->device, "cpu") == 0);
    model_free(m);
}

/* the model at path on nth threads (NULL, and a failed check, if it fails) */
static struct model *
open_threads(const char *path, int nth)
{
    struct model_opts o = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct diag d;
    o.n_threads = nth;
    CHECK_EQ(model_open(&m, path, &o, &d), 0);
    return m;
}

/* Rows split over 1, 3, 7 or 20 workers (more than the matmul regions, and
 * regions left empty by the tiny model's short matrices): the same bits,
 * for a 12-token and a 70-token prompt (few and large claims) as a batch
 * and for one decode step. */
static void
test_threads_invariant(void)
{
    static const int nths[] = { 1, 3, 7, 20 };
    int32_t toks[70];
    int64_t n = 82;
    float *want = NULL;
    int64_t V = 0;

    for (int i = 0; i < 70; i++)
        toks[i] = prompt[i % 12];

    for (size_t i = 0; i < sizeof(nths) / sizeof(nths[0]); i++) {
        struct model *m = open_threads(F16_PATH, nths[i]);
        if (!m)
            break;
        V = m->hp.n_vocab;
        float *got = malloc((size_t)((n + 1) * V) * sizeof(float));
        struct kvcache *kv = new_kv(m, GGML_TYPE_F16, 1 << 20, 0);
        int32_t seq;
        CHECK_EQ(kv_seq_new(kv, &seq), 0);
        CHECK_EQ(run_batch(m, kv, seq, prompt, 12, got), 0);
        CHECK_EQ(run_batch(m, kv, seq, toks, 70, got + 12 * V), 0);
        CHECK_EQ(run_batch(m, kv, seq, prompt, 1, got + n * V), 0);
        if (!want)
            want = got;
        else {
            CHECK(memcmp(got, want, (size_t)((n + 1) * V) * sizeof(float)) == 0);
            free(got);
        }
        kv_free(kv);
        model_free(m);
    }
    free(want);
}

/* Decode steps over more than ATTN_SPLIT_MIN slots (split KV, ops.h): the
 * last 20 of 600 tokens give the same bits when decoded one by one (a step's
 * KV chunks spread over the pool as separate items) as inside batches of
 * 100 one-row tokens (each row's chunks walked by the kernel itself), on 1
 * and 3 threads (test_ops checks each kernel's split against its own
 * chunk calls and that the split is in effect). */
static void
test_long_context(void)
{
    enum { N = 600, TAIL = 20 };
    static const int nths[] = { 1, 3 };
    int32_t *toks = malloc(N * sizeof(int32_t));
    float *first = NULL;
    int64_t V = 0;

    for (int i = 0; i < N; i++)
        toks[i] = (prompt[(i * 7) % 12] + 3 * i) % 250;
    for (size_t ti = 0; ti < sizeof(nths) / sizeof(nths[0]); ti++) {
        struct model *m = open_threads(F16_PATH, nths[ti]);
        if (!m)
            break;
        V = m->hp.n_vocab;
        float *a = malloc((size_t)(N * V) * sizeof(float));
        float *b = malloc((size_t)(N * V) * sizeof(float));
        struct kvcache *kv = new_kv(m, GGML_TYPE_F16, 1 << 20, 0);
        int32_t sa, sb;
        CHECK_EQ(kv_seq_new(kv, &sa), 0);
        CHECK_EQ(kv_seq_new(kv, &sb), 0);
        for (int i = 0; i < N; i += 100)
            CHECK_EQ(run_batch(m, kv, sa, toks + i, 100, a + (int64_t)i * V), 0);
        for (int i = 0; i < N - TAIL; i += 100) {
            int n = N - TAIL - i < 100 ? N - TAIL - i : 100;
            CHECK_EQ(run_batch(m, kv, sb, toks + i, n, b + (int64_t)i * V), 0);
        }
        for (int i = N - TAIL; i < N; i++)
            CHECK_EQ(run_batch(m, kv, sb, toks + i, 1, b + (int64_t)i * V), 0);
        CHECK(memcmp(a, b, (size_t)(N * V) * sizeof(float)) == 0);
        if (!first)
            first = a;
        else {
            CHECK(memcmp(a, first, (size_t)(N * V) * sizeof(float)) == 0);
            free(a);
        }
        free(b);
        kv_free(kv);
        model_free(m);
    }
    free(first);
    free(toks);
}

/* Decode rows of sequences at 700, 300 and 520 slots (3, 1 and 3 KV chunks)
 * give the bits each gets alone when batched together (as pool items per
 * chunk on 2 and 5 threads, per row on 1) and when batched with a masked
 * twin (a mask fills each chunk item's visibility), for f16 and f32
 * caches, the same on every thread count. */
static void
test_long_batches(void)
{
    static const int nths[] = { 1, 2, 5 };
    static const int64_t lens[3] = { 700, 300, 520 };
    static const uint32_t dts[2] = { GGML_TYPE_F16, GGML_TYPE_F32 };
    /* rows 0-2 one per sequence; row 3 sequence 0's token again, not seeing row 0 */
    static const uint8_t mask[16] = { 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1 };

    for (int di = 0; di < 2; di++) {
        float *first = NULL;
        for (size_t ti = 0; ti < sizeof(nths) / sizeof(nths[0]); ti++) {
            struct model *m = open_threads(F16_PATH, nths[ti]);
            if (!m)
                return;
            int64_t V = m->hp.n_vocab;
            float *scr = malloc((size_t)(100 * V) * sizeof(float));
            float *res = malloc((size_t)(10 * V) * sizeof(float));
            struct kvcache *kv = new_kv(m, dts[di], 8 << 20, 16);
            struct batch_tok bt[100];
            struct model_out out = { NULL, NULL };
            struct diag d;
            int32_t sq[3];
            for (int k = 0; k < 3; k++) {
                CHECK_EQ(kv_seq_new(kv, &sq[k]), 0);
                for (int64_t i = 0; i < lens[k]; i += 100) {
                    int64_t n = lens[k] - i < 100 ? lens[k] - i : 100;
                    for (int64_t r = 0; r < n; r++)
                        bt[r] = (struct batch_tok){ sq[k], (int32_t)(i + r),
                                                    (int32_t)((7 * (i + r) + 13 * k) % 250), 1, 0, 0 };
                    struct batch b = { n, bt, NULL, 0 };
                    out.logits = scr;
                    CHECK_EQ(model_forward(m, kv, &b, NULL, &out, &d), 0);
                }
            }
            /* alone (res 0-2), together (3-5), with the masked twin (6-9) */
            for (int pass = 0; pass < 3; pass++) {
                int64_t n = pass == 0 ? 1 : pass == 1 ? 3 : 4;
                for (int k = 0; k < (pass == 0 ? 3 : 1); k++) {
                    for (int64_t r = 0; r < n; r++) {
                        int q = pass == 0 ? k : (int)(r % 3);
                        bt[r] = (struct batch_tok){ sq[q], (int32_t)lens[q], 11 + q, 1, 0, 0 };
                    }
                    struct batch b = { n, bt, pass == 2 ? mask : NULL, 0 };
                    out.logits = res + (pass == 0 ? k : pass == 1 ? 3 : 6) * V;
                    CHECK_EQ(model_forward(m, kv, &b, NULL, &out, &d), 0);
                    for (int q = 0; q < 3; q++)
                        CHECK_EQ(kv_seq_truncate(kv, sq[q], lens[q]), 0);
                }
            }
            CHECK(memcmp(res, res + 3 * V, (size_t)(3 * V) * sizeof(float)) == 0);
            CHECK(memcmp(res, res + 6 * V, (size_t)(3 * V) * sizeof(float)) == 0);
            CHECK(memcmp(res, res + 9 * V, (size_t)V * sizeof(float)) == 0);
            if (!first)
                first = res;
            else {
                CHECK(memcmp(res, first, (size_t)(10 * V) * sizeof(float)) == 0);
                free(res);
            }
            free(scr);
            kv_free(kv);
            model_free(m);
        }
        free(first);
    }
}

int
main(void)
{
    if (access(F32_PATH, R_OK) != 0 || access(F16_PATH, R_OK) != 0) {
        fprintf(stderr, "test_model: %s missing: run `make fixtures`\n", F32_PATH);
        return 1;
    }
    test_hparams();
    test_against_reference(F32_PATH, GGML_TYPE_F32, 1e-5, 2);
    test_against_reference(F32_PATH, GGML_TYPE_F16, 5e-3, 1);
    test_against_reference(F16_PATH, GGML_TYPE_F32, 2e-3, 2);
    test_batch_equivalence();
    test_threads_invariant();
    test_long_context();
    test_long_batches();
    test_mask();
    test_hooks();
    test_bad_files();
    test_rope_scaling();
    T_DONE();
}
