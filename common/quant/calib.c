/*
 * calib.c - calibration tokens and the block-by-block pipeline (calib.h).
 *
 * A replaced weight is a private f32 copy that the layer's struct
 * model_weight points at (type F32, no packed form) while the layer is the
 * current one; the original view is kept in orig[] and put back when the
 * layer is done, so the model never runs a freed buffer.
 */
#include "calib.h"

#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "forward.h"
#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "quantize.h"
#include "tokenizer.h"
#include "xio.h"

#define CALIB_TEXT_MAX ((size_t)1 << 30)

struct calib_repl {
    struct model_weight *w;     /* the layer's view, redirected */
    struct model_weight orig;   /* what it was */
    float *data;
};

/* one linear of the current layer: its output [ctx][rows] per chunk */
struct calib_memo {
    const char *name;
    int group;                  /* calib_linears' sub-group */
    int64_t rows;
    float **out;                /* [n_chunks], NULL until recorded */
    bool *valid;                /* [n_chunks] */
};

static void
memo_release(struct calib *c)
{
    for (int i = 0; i < c->n_memo; i++) {
        for (int64_t k = 0; k < c->n_chunks; k++)
            free(c->memo[i].out[k]);
        free(c->memo[i].out);
        free(c->memo[i].valid);
    }
    free(c->memo);
    c->memo = NULL;
    c->n_memo = 0;
    c->memo_bytes = 0;
}

/* the memo of the current layer's linears, empty; -ST_NOMEM */
static int
memo_setup(struct calib *c, struct diag *d)
{
    const char *names[8];
    int grp[8], n;

    if (c->n_memo)
        return 0;
    calib_linears(c, c->layer, names, grp, &n);
    if (n == 0)
        return 0;
    if (!(c->memo = calloc((size_t)n, sizeof *c->memo)))
        return diag_set(d, ST_NOMEM, "out of memory");
    c->n_memo = n;
    for (int i = 0; i < n; i++) {
        struct calib_memo *e = &c->memo[i];
        e->name = names[i];
        e->group = grp[i];
        e->rows = calib_weight(c, names[i])->rows;
        e->out = calloc((size_t)c->n_chunks, sizeof *e->out);
        e->valid = calloc((size_t)c->n_chunks, sizeof *e->valid);
        if (!e->out || !e->valid) {
            memo_release(c);
            return diag_set(d, ST_NOMEM, "out of memory");
        }
    }
    return 0;
}

static struct calib_memo *
memo_find(struct calib *c, const char *name)
{
    for (int i = 0; i < c->n_memo; i++)
        if (!strcmp(c->memo[i].name, name))
            return &c->memo[i];
    return NULL;
}

/* weight name of the current layer changes: what no longer holds */
static void
memo_drop(struct calib *c, const char *name)
{
    const struct calib_memo *m = memo_find(c, name);

    for (int i = 0; i < c->n_memo; i++)
        if (!m || &c->memo[i] == m || c->memo[i].group > m->group)
            memset(c->memo[i].valid, 0, (size_t)c->n_chunks * sizeof *c->memo[i].valid);
}

/* LINEAR_OUT of chunk k: the output from the memo (1), or recorded (0) */
static int
memo_event(struct calib *c, int64_t k, const struct model_hook_event *ev)
{
    struct calib_memo *m = memo_find(c, ev->name);
    size_t sz;

    if (!m || ev->n_tok != c->ctx || ev->tok0 != 0 || ev->dim != m->rows || ev->ld != m->rows)
        return 0;
    sz = (size_t)(c->ctx * m->rows) * sizeof(float);
    if (ev->y) {
        if (!m->valid[k])
            return 0;
        memcpy(ev->y, m->out[k], sz);
        return 1;
    }
    if (!m->out[k]) {
        if (c->memo_bytes + sz > CALIB_MEMO_MAX || !(m->out[k] = malloc(sz)))
            return 0;
        c->memo_bytes += sz;
    }
    memcpy(m->out[k], ev->x, sz);
    m->valid[k] = true;
    return 0;
}

/* the weights of a layer a method may read or replace */
static int
layer_weights(struct model_layer *L, struct model_weight **w)
{
    struct model_weight *all[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up,
                                   &L->ffn_down, &L->attn_norm, &L->ffn_norm, &L->attn_q_norm,
                                   &L->attn_k_norm, &L->attn_post_norm, &L->ffn_post_norm };
    int n = 0;

    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data && all[i]->name)
            w[n++] = all[i];
    return n;
}

static struct model_weight *
find_weight(struct model *m, int64_t layer, const char *name)
{
    struct model_weight *w[16];
    int n;

    if (layer < 0 || layer >= m->hp.n_layer)
        return NULL;
    n = layer_weights(&m->layers[layer], w);
    for (int i = 0; i < n; i++)
        if (!strcmp(w[i]->name, name))
            return w[i];
    return NULL;
}

static void
restore_weights(struct calib *c)
{
    memo_release(c);
    for (int i = c->n_repl - 1; i >= 0; i--) {
        *c->repl[i].w = c->repl[i].orig;
        free(c->repl[i].data);
    }
    free(c->repl);
    c->repl = NULL;
    c->n_repl = 0;
}

/* the embeddings of every chunk's tokens into c->x */
static void
embed(struct calib *c)
{
    const struct model *m = c->m;
    const struct kernel_ops *ops = ops_select(m->be->kernel);
    const int64_t E = c->n_embd;

    for (int64_t t = 0; t < calib_tokens(c); t++) {
        float *x = c->x + t * E;
        ops->get_row(x, m->tok_embd.data, m->tok_embd.row_bytes, m->tok_embd.type, c->tok[t], E);
        if (m->hp.embd_scale != 0.0f)
            for (int64_t j = 0; j < E; j++)
                x[j] *= m->hp.embd_scale;
    }
}

int
calib_open(struct calib **out, const char *model_path, const char *text_path,
           const struct calib_opts *o, struct diag *d)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct calib *c;
    struct tokenizer tok;
    struct tok_ids ids = { NULL, 0, 0 };
    struct kv_config kc;
    bool tok_ok = false;
    char *text = NULL;
    size_t len, bb;
    int64_t avail;
    int rc;

    *out = NULL;
    if (o->ctx < 2)
        return diag_set(d, ST_RANGE, "calibration context must be at least 2 tokens");
    if (!(c = calloc(1, sizeof *c)))
        return diag_set(d, ST_NOMEM, "out of memory");
    mo.n_threads = o->n_threads;
    mo.kernel = o->kernel;
    /* one chunk per layer_forward call, in one internal chunk; the scratch
     * for it comes after the text's length is checked (forward_state_new),
     * so a text too short is exit 2 whatever memory a chunk would need */
    mo.max_batch = o->ctx > 512 ? o->ctx : 512;
    if ((rc = model_load(&c->m, model_path, &mo, d)) < 0) {
        diag_prefix(d, "'%s'", model_path);
        goto err;
    }
    if ((rc = tok_load(&tok, &c->m->gguf, d)) < 0) {
        diag_prefix(d, "'%s'", model_path);
        goto err;
    }
    tok_ok = true;
    if ((rc = read_file_all(text_path, CALIB_TEXT_MAX, &text, &len, d)) < 0) {
        diag_prefix(d, "'%s'", text_path);
        goto err;
    }
    if ((rc = quantize_sha256_hex(text, len, c->sha256)) < 0 ||
        (rc = tok_encode(&tok, text, len, true, false, &ids, d)) < 0) {
        if (rc == -ST_NOMEM)
            diag_set(d, ST_NOMEM, "out of memory");
        diag_prefix(d, "'%s'", text_path);
        goto err;
    }
    c->n_text_tokens = (int64_t)ids.n;
    avail = c->n_text_tokens / o->ctx;
    if (avail < 1 || (o->n_chunks > avail)) {
        int64_t want = o->n_chunks > 0 ? o->n_chunks : 1;
        rc = diag_set(d, ST_RANGE, "'%s': text too short: %lld tokens, %lld chunks of %lld need %lld",
                      text_path, (long long)c->n_text_tokens, (long long)want, (long long)o->ctx,
                      (long long)(want * o->ctx));
        goto err;
    }
    if ((rc = forward_state_new(c->m, d)) < 0) {
        diag_prefix(d, "'%s'", model_path);
        goto err;
    }
    c->ctx = o->ctx;
    c->n_chunks = o->n_chunks > 0 ? o->n_chunks : avail;
    c->n_embd = c->m->hp.n_embd;
    c->tok = malloc((size_t)calib_tokens(c) * sizeof *c->tok);
    c->x = malloc((size_t)(calib_tokens(c) * c->n_embd) * sizeof *c->x);
    c->scratch = malloc((size_t)(c->ctx * c->n_embd) * sizeof *c->scratch);
    if (!c->tok || !c->x || !c->scratch) {
        rc = diag_set(d, ST_NOMEM, "out of memory for %lld calibration tokens",
                      (long long)calib_tokens(c));
        goto err;
    }
    memcpy(c->tok, ids.v, (size_t)calib_tokens(c) * sizeof *c->tok);
    if (tok.add_bos)
        for (int64_t k = 0; k < c->n_chunks; k++)
            c->tok[k * c->ctx] = tok.bos;
    for (int64_t t = 0; t < calib_tokens(c); t++)
        if (c->tok[t] < 0 || c->tok[t] >= c->m->hp.n_vocab) {
            rc = diag_set(d, ST_FORMAT, "'%s': token id %d outside the model's vocabulary",
                          model_path, (int)c->tok[t]);
            goto err;
        }
    model_kv_config(c->m, 0, GGML_TYPE_F32, &kc);
    if (!(bb = kv_block_bytes(&kc))) {
        rc = diag_set(d, ST_FORMAT, "'%s': model has invalid KV dimensions", model_path);
        goto err;
    }
    kc.mem = (size_t)((c->ctx + kc.block_size - 1) / kc.block_size) * bb;
    if ((rc = kv_new(&c->kv, &kc, d)) < 0)
        goto err;
    embed(c);
    free(text);
    tok_ids_release(&ids);
    tok_release(&tok);
    *out = c;
    return 0;
err:
    free(text);
    tok_ids_release(&ids);
    if (tok_ok)
        tok_release(&tok);
    calib_free(c);
    return rc;
}

void
calib_free(struct calib *c)
{
    if (!c)
        return;
    restore_weights(c);
    kv_free(c->kv);
    model_free(c->m);
    free(c->tok);
    free(c->x);
    free(c->scratch);
    free(c);
}

void
calib_linears(const struct calib *c, int64_t layer, const char **names, int *group, int *n)
{
    calib_model_linears(c->m, layer, names, group, n);
}

void
calib_model_linears(const struct model *m, int64_t layer, const char **names, int *group, int *n)
{
    const struct model_layer *L = &m->layers[layer];
    const struct model_weight *w[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up,
                                        &L->ffn_down };
    static const int grp[7] = { 0, 0, 0, 1, 2, 2, 3 };

    *n = 0;
    for (int i = 0; i < 7; i++)
        if (w[i]->data && w[i]->name) {
            names[*n] = w[i]->name;
            group[(*n)++] = grp[i];
        }
}

const struct model_weight *
calib_model_weight(const struct model *m, int64_t layer, const char *name)
{
    return find_weight((struct model *)m, layer, name);
}

const struct model_weight *
calib_weight(const struct calib *c, const char *name)
{
    return find_weight(c->m, c->layer, name);
}

int
calib_weight_f32(const struct calib *c, const char *name, float *out, struct diag *d)
{
    const struct model_weight *w = NULL;

    for (int64_t l = 0; l < c->m->hp.n_layer && !w; l++)
        w = find_weight(c->m, l, name);
    if (!w)
        return diag_set(d, ST_RANGE, "no weight '%s' in the model's layers", name);
    /* a weight of the current layer may be redirected: read the original */
    for (int i = 0; i < c->n_repl; i++)
        if (c->repl[i].w == w)
            w = &c->repl[i].orig;
    return calib_dequant_weight(w, out, d);
}

int
calib_dequant_weight(const struct model_weight *w, float *out, struct diag *d)
{
    const struct qtype *qt = qtype_get(w->type);

    if (!qt || !qt->to_float)
        return diag_set(d, ST_FORMAT, "weight '%s': type %u cannot be dequantized", w->name,
                        w->type);
    for (int64_t r = 0; r < w->rows; r++)
        qt->to_float((const uint8_t *)w->data + (size_t)r * w->row_bytes, out + r * w->cols, w->cols);
    return 0;
}

int
calib_set_weight(struct calib *c, const char *name, const float *w, struct diag *d)
{
    struct model_weight *mw = find_weight(c->m, c->layer, name);
    struct calib_repl *r = NULL;
    size_t n;

    if (!mw)
        return diag_set(d, ST_RANGE, "no weight '%s' in layer %lld", name, (long long)c->layer);
    for (int i = 0; i < c->n_repl; i++)
        if (c->repl[i].w == mw)
            r = &c->repl[i];
    n = (size_t)(mw->rows * mw->cols);
    if (!r) {
        struct calib_repl *nr = realloc(c->repl, (size_t)(c->n_repl + 1) * sizeof *nr);
        float *data = malloc(n * sizeof *data);
        if (!nr || !data) {
            if (nr)
                c->repl = nr;
            free(data);
            return diag_set(d, ST_NOMEM, "out of memory");
        }
        c->repl = nr;
        r = &c->repl[c->n_repl++];
        r->w = mw;
        r->orig = *mw;
        r->data = data;
    }
    memo_drop(c, name);
    memcpy(r->data, w, n * sizeof *w);
    mw->data = r->data;
    mw->packed = NULL;
    mw->type = GGML_TYPE_F32;
    mw->row_bytes = (size_t)mw->cols * sizeof(float);
    return 0;
}

struct stop_ctx {
    const struct model_hooks *inner;
    const char *stop_after;
    bool stopped;
    struct calib *c;
    int64_t chunk;
};

static int
stop_hook(void *ctx, const struct model_hook_event *ev)
{
    struct stop_ctx *s = ctx;
    int rc = 0;

    if (ev->site == MODEL_HOOK_LINEAR_OUT) {
        if ((rc = memo_event(s->c, s->chunk, ev)) != 0 || ev->y)
            return rc;
    }
    if (s->inner && s->inner->fn && (s->inner->sites & (unsigned)ev->site))
        rc = s->inner->fn(s->inner->ctx, ev);
    if (rc < 0)
        return rc;
    if (ev->site == MODEL_HOOK_LINEAR_IN && s->stop_after && !strcmp(ev->name, s->stop_after)) {
        s->stopped = true;
        return -ST_FAIL;
    }
    return 0;
}

int
calib_run_layer(struct calib *c, const struct model_hooks *hooks, const char *stop_after,
                float *out, struct diag *d)
{
    const int64_t E = c->n_embd, T = c->ctx;
    struct batch_tok *bt;
    int32_t seq = -1;
    int rc = 0;

    if (c->layer < 0 || c->layer >= c->m->hp.n_layer)
        return diag_set(d, ST_RANGE, "calibration: no layer %lld to run", (long long)c->layer);
    if (stop_after && out)
        return diag_set(d, ST_RANGE, "calibration: a stopped run has no output");
    if ((rc = memo_setup(c, d)) < 0)
        return rc;
    if (!(bt = calloc((size_t)T, sizeof *bt)))
        return diag_set(d, ST_NOMEM, "out of memory");
    for (int64_t k = 0; k < c->n_chunks; k++) {
        struct stop_ctx s = { hooks, stop_after, false, c, k };
        struct model_hooks h = { stop_hook, &s,
                                 (hooks ? hooks->sites : 0) | MODEL_HOOK_LINEAR_OUT |
                                     (stop_after ? MODEL_HOOK_LINEAR_IN : 0) };
        struct batch b = { T, bt, NULL, 0 };
        float *x = out ? out + k * T * E : c->scratch;

        if ((rc = kv_seq_new(c->kv, &seq)) < 0) {
            diag_set(d, -rc, "calibration: no KV sequence available");
            goto out;
        }
        if ((rc = kv_seq_grow(c->kv, seq, T, d)) < 0)
            goto out;
        for (int64_t i = 0; i < T; i++) {
            bt[i].seq = seq;
            bt[i].pos = (int32_t)i;
            bt[i].token = c->tok[k * T + i];
        }
        memmove(x, c->x + k * T * E, (size_t)(T * E) * sizeof *x);
        rc = layer_forward(c->m, c->layer, x, &b, c->kv, h.sites ? &h : NULL, d);
        if (rc < 0 && !(s.stopped && rc == -ST_FAIL))
            goto out;
        rc = 0;
        kv_seq_free(c->kv, seq);
        seq = -1;
    }
out:
    if (seq >= 0)
        kv_seq_free(c->kv, seq);
    free(bt);
    return rc;
}

int
calib_advance(struct calib *c, struct diag *d)
{
    int rc;

    /* layer by layer over x in place: chunk k's output overwrites its own
     * input only after that chunk ran (calib_run_layer copies first) */
    if ((rc = calib_run_layer(c, NULL, NULL, c->x, d)) < 0)
        return rc;
    restore_weights(c);
    c->layer++;
    return 0;
}

int
calib_set_state(struct calib *c, int64_t layer, const float *x, struct diag *d)
{
    if (layer < 0 || layer > c->m->hp.n_layer)
        return diag_set(d, ST_RANGE, "calibration: layer %lld out of range", (long long)layer);
    restore_weights(c);
    c->layer = layer;
    memcpy(c->x, x, (size_t)(calib_tokens(c) * c->n_embd) * sizeof *x);
    return 0;
}
