/*
 * forward.c - the one forward pass: a batch of tokens of many sequences
 * through a model over the paged KV cache (model_forward), or one layer of
 * it on a given input (layer_forward).
 *
 * Per chunk of at most max_batch tokens (shapes per token row):
 *   x   = token_embd[token] (gemma3: times sqrt(n_embd))     [n_embd]
 *   per layer: x = layer(x), the architecture's recipe (arch_<name>.c)
 *   xn = rmsnorm(x) * output_norm; logits = xn Wout^T for the tokens asking
 *
 * Each step covers all the chunk's tokens and is run by the executor
 * (exec.c: threads, matmul groups, attention scheduling, KV stores).  The KV
 * slots of the whole batch are reserved before the first chunk runs, so a
 * full pool fails the call before any work, and any later failure truncates
 * the sequences back.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec.h"
#include "forward.h"

/* the layer recipe of m's architecture, or NULL */
static exec_layer_fn
recipe(const struct model *m)
{
    switch (m->hp.recipe) {
    case ARCH_RECIPE_LLAMA: return arch_llama_layer;
    case ARCH_RECIPE_GEMMA3: return arch_gemma3_layer;
    case ARCH_RECIPE_DEEPSEEK2: return arch_deepseek2_layer;
    default: return NULL;
    }
}

/* the checks both entry points make; token ids only when tokens */
static int
check_call(const struct model *m, const struct kvcache *kv, const struct batch *b, int tokens,
           struct diag *d)
{
    const struct model_hparams *hp = &m->hp;
    const struct kv_config *kc = kv_config_get(kv);
    int64_t n = b ? b->n : 0;

    if (kc->n_layer != hp->n_layer || kc->n_head_kv != hp->n_head_kv ||
        kc->head_dim_k != hp->head_dim || kc->head_dim_v != hp->head_dim_v ||
        !kc->v_in_k != !hp->mla)
        return diag_set(d, ST_RANGE, "kv cache does not fit the model (%lld layers, %lld kv heads, "
                        "head dim %lld/%lld)", (long long)hp->n_layer, (long long)hp->n_head_kv,
                        (long long)hp->head_dim, (long long)hp->head_dim_v);
    if (n < 1 || !b->tok)
        return diag_set(d, ST_RANGE, "empty batch");
    for (int64_t i = 0; i < n; i++) {
        const struct batch_tok *t = &b->tok[i];
        if (tokens && (t->token < 0 || t->token >= hp->n_vocab))
            return diag_set(d, ST_RANGE, "batch token %lld: id %d out of range 0..%lld",
                            (long long)i, t->token, (long long)hp->n_vocab - 1);
        if (t->pos < 0)
            return diag_set(d, ST_RANGE, "batch token %lld: negative position %d", (long long)i,
                            t->pos);
        if (!kv_seq_valid(kv, t->seq))
            return diag_set(d, ST_RANGE, "batch token %lld: no sequence %d", (long long)i, t->seq);
    }
    if (!recipe(m))
        return diag_set(d, ST_RANGE, "no layer recipe for architecture '%s'", hp->arch_name);
    return 0;
}

/* layer l on the chunk, then its LAYER_OUT event */
static int
run_layer(struct exec *e, exec_layer_fn fn, int64_t l)
{
    const struct model_hooks *h = e->hooks;
    int64_t E = e->m->hp.n_embd;
    int rc;

    e->layer = l;
    if ((rc = fn(e, &e->m->layers[l])) < 0)
        return rc;
    if (h && (h->sites & MODEL_HOOK_LAYER_OUT)) {
        char name[32];
        snprintf(name, sizeof(name), "blk.%d.out", (int)l);
        if ((rc = exec_hook(e, MODEL_HOOK_LAYER_OUT, (int)l, name, NULL, e->x, e->n, E, E,
                            e->c0)) < 0)
            return rc;
    }
    return 0;
}

/* ---- model_forward ---- */

static int
forward_chunk(struct exec *e, int64_t c0, int64_t nc, struct model_out *out, int64_t *logit_row)
{
    struct model *m = e->m;
    const struct batch *b = e->b;
    exec_layer_fn layer = recipe(m);
    int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    int rc;

    exec_chunk_begin(e, c0, nc, NULL);
    exec_embed(e, &m->tok_embd);
    if (m->hp.embd_scale != 0.0f)
        exec_scale(e, e->x, E, m->hp.embd_scale);
    if ((rc = exec_hook(e, MODEL_HOOK_EMBD, -1, "inp_embd", NULL, e->x, nc, E, E, c0)) < 0)
        return rc;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        if ((rc = run_layer(e, layer, l)) < 0)
            return rc;
    e->layer = -1;

    exec_rmsnorm(e, e->xn, e->x, &m->output_norm);
    /* (the activations are backend buffers: device memory under CUDA) */
    struct backend *be = m->be;
    if (out && out->hidden)
        be->ops->download(be, out->hidden + c0 * E, e->xn, (size_t)(nc * E) * sizeof(float));
    if (out && out->logits) {
        int64_t w = 0;
        for (int64_t t = 0; t < nc; t++)
            if (b->tok[c0 + t].logits)
                be->ops->copy(be, e->tmp + (w++) * E, e->xn + t * E, (size_t)E * sizeof(float));
        if (w > 0) {
            if ((rc = exec_matmul_rows(e, &m->output, e->tmp, w, -1,
                                       out->logits + *logit_row * V)) < 0)
                return rc;
            if (m->hp.logit_softcap != 0.0f) {
                /* llama.cpp: scale by 1/c, tanh, scale by c */
                float c = m->hp.logit_softcap, ic = 1.0f / c, *z = out->logits + *logit_row * V;
                for (int64_t i = 0; i < w * V; i++)
                    z[i] = tanhf(z[i] * ic) * c;
            }
            *logit_row += w;
        }
    }
    return 0;
}

int
model_forward(struct model *m, struct kvcache *kv, const struct batch *b,
              const struct model_hooks *hooks, struct model_out *out, struct diag *d)
{
    struct exec e;
    int rc;

    if ((rc = check_call(m, kv, b, 1, d)) < 0 ||
        (rc = exec_call_begin(&e, m, kv, b, hooks, 0, d)) < 0)
        return rc;
    /* reserve every slot of the batch up front: all or nothing */
    if ((rc = exec_reserve(&e, d)) < 0)
        return rc;

    int64_t logit_row = 0;
    for (int64_t c0 = 0; c0 < b->n; c0 += m->max_batch) {
        int64_t nc = b->n - c0 < m->max_batch ? b->n - c0 : m->max_batch;
        if ((rc = forward_chunk(&e, c0, nc, out, &logit_row)) < 0) {
            exec_rollback(&e);
            if (d)
                diag_set(d, -rc, "forward pass stopped by a hook (%s)", st_str(-rc));
            return rc;
        }
    }
    return 0;
}

/* ---- layer_forward ---- */

int
layer_forward(struct model *m, int64_t layer, float *x, const struct batch *b,
              struct kvcache *kv, const struct model_hooks *hooks, struct diag *d)
{
    struct exec e;
    int64_t E = m->hp.n_embd;
    int rc;

    if (layer < 0 || layer >= m->hp.n_layer)
        return diag_set(d, ST_RANGE, "layer %lld out of range 0..%lld", (long long)layer,
                        (long long)m->hp.n_layer - 1);
    if (!x)
        return diag_set(d, ST_RANGE, "no hidden states");
    if ((rc = check_call(m, kv, b, 0, d)) < 0 ||
        (rc = exec_call_begin(&e, m, kv, b, hooks, 1, d)) < 0)
        return rc;
    for (int64_t c0 = 0; c0 < b->n; c0 += m->max_batch) {
        int64_t nc = b->n - c0 < m->max_batch ? b->n - c0 : m->max_batch;
        exec_chunk_begin(&e, c0, nc, x + c0 * E);
        if ((rc = run_layer(&e, recipe(m), layer)) < 0) {
            if (d)
                diag_set(d, -rc, "layer %lld stopped by a hook (%s)", (long long)layer,
                         st_str(-rc));
            return rc;
        }
    }
    return 0;
}

/* ---- the model with its pass: model.c loads, the executor adds scratch ---- */

int
model_open(struct model **out, const char *path, const struct model_opts *o, struct diag *d)
{
    int rc = model_load(out, path, o, d);

    if (rc < 0)
        return rc;
    if ((rc = forward_state_new(*out, d)) < 0) {
        model_free(*out);
        *out = NULL;
    }
    return rc;
}

void
model_free(struct model *m)
{
    if (!m)
        return;
    forward_state_free(m);
    model_unload(m);
}
