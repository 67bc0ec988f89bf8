/*
 * eagle_target.c - the target model's side of EAGLE training (eagle_target.h).
 */
#include <stdlib.h>
#include <string.h>

#include "eagle_target.h"
#include "qtypes.h"

/* all rows of w as f32 [rows][cols], through the backend's get_rows */
static float *
rows_f32(struct model *m, const struct model_weight *w)
{
    enum { CHUNK = 1024 };
    struct backend_weight bw = model_weight_view(w);
    int32_t ids[CHUNK];
    float *y = malloc((size_t)(w->rows * w->cols) * sizeof(float));

    if (!y)
        return NULL;
    for (int64_t r0 = 0; r0 < w->rows; r0 += CHUNK) {
        int64_t n = w->rows - r0 < CHUNK ? w->rows - r0 : CHUNK;
        for (int64_t i = 0; i < n; i++)
            ids[i] = (int32_t)(r0 + i);
        m->be->ops->get_rows(m->be, y + r0 * w->cols, &bw, ids, n);
    }
    return y;
}

int
eagle_target_config(const struct model *m, struct eagle_config *c, struct diag *d)
{
    const struct model_hparams *hp = &m->hp;

    memset(c, 0, sizeof *c);
    if (hp->arch != MODEL_ARCH_LLAMA && hp->arch != MODEL_ARCH_GEMMA3)
        return diag_set(d, ST_RANGE, "architecture '%s': EAGLE heads are trained for llama "
                        "and gemma3 models only", hp->arch_name);
    if (hp->head_dim != hp->head_dim_v)
        return diag_set(d, ST_RANGE, "key and value head sizes differ");
    if (hp->rope.ext_factor != 0.0f)
        return diag_set(d, ST_RANGE, "YaRN RoPE scaling: an EAGLE head's RoPE has linear "
                        "scaling only");
    /* gemma3: a softcap on the final logits (Gemma 2's; absent in Gemma 3
     * releases) would change the LM head's distribution the head learns */
    const struct gguf_kv *kv = hp->arch == MODEL_ARCH_GEMMA3
        ? gguf_get(&m->gguf, "gemma3.final_logit_softcapping") : NULL;
    double cap = 0;
    if (kv && !gguf_kv_float(kv, &cap))
        return diag_set(d, ST_RANGE, "gemma3.final_logit_softcapping: not a number");
    if (cap != 0)
        return diag_set(d, ST_RANGE, "gemma3.final_logit_softcapping %g: EAGLE heads are "
                        "trained for models without a final logit softcap", cap);
    c->d = hp->n_embd;
    c->n_head = hp->n_head;
    c->n_head_kv = hp->n_head_kv;
    c->head_dim = hp->head_dim;
    c->n_ff = hp->n_ff;
    c->n_vocab = hp->n_vocab;
    c->eps = hp->rms_eps;
    /* a gemma3 target's global layers' RoPE (base rope.freq_base, NeoX);
     * the head is a llama layer in that style whatever the target's layers */
    c->rope = hp->rope;
    c->rope.freq_factors = NULL;
    c->arch = EAGLE_ARCH_1;
    /* EAGLE-3's features enter layers 2, L/2 and L - 3 (clamped for
     * models of fewer than 4 layers; 0 = the embeddings) */
    int64_t L = hp->n_layer, fl[3] = { 2, L / 2, L - 3 };
    for (int k = 0; k < 3; k++)
        c->feat_layer[k] = fl[k] < 0 ? 0 : fl[k] > L - 1 ? L - 1 : fl[k];
    return 0;
}

int
eagle_target_init(struct eagle_target *t, struct model *m, int64_t max_n, struct diag *d)
{
    const struct model_hparams *hp = &m->hp;
    struct kv_config kc;
    int rc;

    memset(t, 0, sizeof *t);
    t->m = m;
    if ((rc = eagle_target_config(m, &t->c, d)) < 0)
        return rc;
    if (!(t->embd = rows_f32(m, &m->tok_embd)))
        goto nomem;
    t->lm = hp->tied_output ? t->embd : rows_f32(m, &m->output);
    if (!t->lm)
        goto nomem;
    t->fz.embd = t->embd;
    t->fz.lm = t->lm;
    t->fz.n_lm = hp->n_vocab;
    /* one sequence of max_n tokens plus slack, in generate's default f16:
     * the features the head sees when drafting come from such a cache */
    model_kv_config(m, model_kv_bytes_per_token(m, GGML_TYPE_F16) * (size_t)(max_n + 64),
                    GGML_TYPE_F16, &kc);
    if ((rc = kv_new(&t->kv, &kc, d)) < 0) {
        eagle_target_release(t);
        return rc;
    }
    t->max_n = max_n;
    return 0;
nomem:
    eagle_target_release(t);
    return diag_set(d, ST_NOMEM, "out of memory for the target's embedding and LM head");
}

void
eagle_target_release(struct eagle_target *t)
{
    if (t->lm != t->embd)
        free(t->lm);
    free(t->embd);
    kv_free(t->kv);
    memset(t, 0, sizeof *t);
}

int
eagle_capture_hook(void *ctx, const struct model_hook_event *ev)
{
    struct eagle_capture *cp = ctx;
    int64_t d = cp->d;
    int64_t layer_in = ev->site == MODEL_HOOK_EMBD ? 0 : ev->layer + 1;

    if (ev->tok0 < 0 || ev->tok0 + ev->n_tok > cp->rows)
        return 0;
    for (int k = 0; k < 3; k++) {
        if (cp->feat_layer[k] != layer_in)
            continue;
        for (int64_t r = 0; r < ev->n_tok; r++)
            memcpy(cp->feat3 + (ev->tok0 + r) * 3 * d + k * d, ev->x + r * ev->ld,
                   (size_t)d * sizeof(float));
    }
    return 0;
}

static int
run(struct eagle_target *t, const int32_t *tokens, int64_t n, float *feat3, float *feat,
    struct diag *d)
{
    struct eagle_capture cp = { t->c.feat_layer, t->c.d, feat3, n };
    struct model_hooks hk = { eagle_capture_hook, &cp, EAGLE_CAPTURE_SITES };
    struct batch_tok *bt;
    int32_t seq;
    int rc;

    if (n < 1 || n > t->max_n)
        return diag_set(d, ST_RANGE, "%lld tokens: a feature run takes 1 to %lld",
                        (long long)n, (long long)t->max_n);
    if (!(bt = calloc((size_t)n, sizeof *bt)))
        return diag_set(d, ST_NOMEM, "out of memory");
    if ((rc = kv_seq_new(t->kv, &seq)) < 0) {
        free(bt);
        return diag_set(d, ST_NOMEM, "no KV sequence free");
    }
    for (int64_t i = 0; i < n; i++) {
        bt[i].seq = seq;
        bt[i].pos = (int32_t)i;
        bt[i].token = tokens[i];
    }
    struct batch b = { .n = n, .tok = bt };
    struct model_out out = { .logits = NULL, .hidden = feat };
    rc = model_forward(t->m, t->kv, &b, feat3 ? &hk : NULL, &out, d);
    kv_seq_free(t->kv, seq);
    free(bt);
    return rc;
}

int
eagle_target_features(struct eagle_target *t, const int32_t *tokens, int64_t n, float *feat,
                      struct diag *d)
{
    return run(t, tokens, n, NULL, feat, d);
}

int
eagle_target_features3(struct eagle_target *t, const int32_t *tokens, int64_t n, float *feat3,
                       float *feat, struct diag *d)
{
    return run(t, tokens, n, feat3, feat, d);
}

int
eagle_deepest_feature(const struct eagle_config *c)
{
    int k = 0;
    for (int i = 1; i < 3; i++)
        if (c->feat_layer[i] >= c->feat_layer[k])
            k = i;
    return k;
}

/* (a start, not a copy: the head has no biases and a RoPE without the
 * target's frequency factors, and its layer reads other inputs) */
int
eagle_target_init_head(struct eagle_target *t, struct eagle_head *h, const float *lm)
{
    struct model *m = t->m;
    const struct model_layer *L = &m->layers[m->hp.n_layer - 1];
    int64_t d = t->c.d;
    const struct {
        const struct model_weight *w;
        int dst;
        bool half;              /* into the hidden half of a [rows][2d] matrix */
    } map[] = {
        { &L->attn_norm, EAGLE3_HID_NORM, false }, { &L->wq, EAGLE3_WQ, true },
        { &L->wk, EAGLE3_WK, true }, { &L->wv, EAGLE3_WV, true }, { &L->wo, EAGLE3_WO, false },
        { &L->ffn_norm, EAGLE3_FFN_NORM, false }, { &L->ffn_gate, EAGLE3_GATE, false },
        { &L->ffn_up, EAGLE3_UP, false }, { &L->ffn_down, EAGLE3_DOWN, false },
        { &m->output_norm, EAGLE3_OUT_NORM, false },
    };

    if (h->c.arch != EAGLE_ARCH_3 || m->hp.arch != MODEL_ARCH_LLAMA || h->c.d != d)
        return -ST_RANGE;
    /* (a norm may be [1][d] or [d][1]; an absent tensor, 0 x 0, fails) */
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        const struct model_weight *w = map[i].w;
        int64_t rows = h->rows[map[i].dst], cols = h->cols[map[i].dst];
        if (map[i].half ? w->rows != rows || 2 * w->cols != cols
                        : w->rows * w->cols != rows * cols)
            return -ST_RANGE;
    }
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        const struct model_weight *w = map[i].w;
        float *y = rows_f32(m, w), *dst = h->t[map[i].dst];
        if (!y)
            return -ST_NOMEM;
        if (map[i].half) {
            for (int64_t r = 0; r < w->rows; r++)
                memcpy(dst + r * 2 * d + d, y + r * w->cols, (size_t)w->cols * sizeof(float));
        } else {
            memcpy(dst, y, (size_t)(w->rows * w->cols) * sizeof(float));
        }
        free(y);
    }
    memcpy(h->t[EAGLE3_LM], lm, (size_t)(h->c.n_draft * d) * sizeof(float));
    float *fc = h->t[EAGLE3_FC];        /* [d][3d]: the deepest block's diagonal */
    int64_t k = eagle_deepest_feature(&h->c);
    for (int64_t r = 0; r < d; r++)
        fc[r * 3 * d + k * d + r] += 1.0f;
    return 0;
}
