/*
 * eagle_draft.c - EAGLE-2 dynamic draft trees from an EAGLE-1 or EAGLE-3
 * head (eagle_draft.h).
 *
 * The head's matrices (and the draft vocabulary's rows of the LM head) are
 * multiplied through the target's backend, in f32 or converted at open to
 * the type asked for (Q8_0: a quarter of the bytes a level reads); the
 * element-wise ops run through the trainer's table (backward.h); the
 * target's embedding rows and its full LM head are read in their stored
 * types, as the target reads them.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "blas.h"
#include "cli.h"
#include "eagle.h"
#include "eagle3.h"
#include "eagle_draft.h"
#include "eagle_io.h"
#include "eagle_target.h"
#include "qtypes.h"
#include "quant.h"

#define STABLE_ROWS 64          /* rows per batch when catching up on positions */
#define CHAIN_GROUP 32          /* chains drafted together (their roots <= STABLE_ROWS) */
#define LEVELS_MAX 64

struct cand {
    int32_t tok, parent, depth, fed;    /* parent: candidate index or -1 (root); fed: slot or -1 */
    float score;                /* cumulative log probability */
};

/* One sequence's head state (eagle_draft.h): the target's features by
 * position and the head's keys and values of its stable positions. */
struct eagle_stream {
    float *feat;                /* [cap][fd] the target's features by position */
    int64_t n_feat;
    float *K, *Vs;              /* [cap][kd] the head's keys and values of stable positions */
    int32_t *stab_tok;          /* [cap] the token each stable position was run with */
    int64_t P;                  /* stable positions */
    int64_t cap;                /* positions the arrays hold (grown as fed, up to ctx) */
};

struct eagle_draft {
    struct model *m;
    struct eagle_head h;
    const struct backend_backward_ops *bw;
    struct backend_weight emb, lm;
    int64_t ctx, d, qd, kd, ff, V, top_k, B;
    int64_t fd;                 /* floats of a target feature: d (EAGLE-1), 3d (EAGLE-3) */
    struct eagle_stream *st0;   /* the stream of eagle_draft_feed and _tree */
    struct eagle_stream *cur;   /* the stream being drafted (attend) */
    /* one batch of up to B rows */
    float *x2, *h0, *q, *k, *v, *a, *h1, *xn, *g, *u, *out, *cs, *logits, *sc;
    int32_t *ids;
    /* a draft's candidates; fed ones keep their output and K/V */
    struct cand *c;
    int64_t n_c, cap_c;
    float *ch, *ck, *cv;        /* [cap_fed][d], [cap_fed][kd] x2 */
    float *hroot;               /* [d] the head's output at the root's position */
    float *hid;                 /* eagle_draft_hidden's buffer */
    float *x3;                  /* EAGLE-3: [B][3d] the FC's input rows */
    struct eagle_capture cap;   /* EAGLE-3: the hooks' buffer, [hid_rows][3d] */
    struct model_hooks hooks;
    /* the tokens the head scores: all (lm_ids NULL: the target's LM head in
     * its own type), or the head's draft vocabulary (f32 rows of the LM
     * head, lm_red) */
    int64_t n_lm;
    int32_t *lm_ids;
    float *lm_red;
    /* the matrices as the backend multiplies them: the head's by tensor
     * index (bias and norms unused) and, for EAGLE-1, the draft
     * vocabulary's rows at EAGLE_N_TENSORS */
    struct backend_weight wt[EAGLE_MAX_TENSORS + 1];
    void *wbuf[EAGLE_MAX_TENSORS + 1];  /* converted copies, owned */
    int64_t hid_rows;
    int64_t n_fed, cap_fed;
    int64_t *sel;
    /* a level's cost for n rows (spec_cost_at): measured at open for top_k
     * rows, by eagle_draft_measure for 1 .. n; lvl_scale, a running mean of
     * the drafts' measured cost over the curve's */
    struct spec_cost lvl;
    double lvl_scale;
};

static int stream_reserve(struct eagle_draft *e, struct eagle_stream *st, int64_t n);
static void level_point(struct eagle_draft *e, int64_t n);

/* rows r < n of the batch: token tok[r], input feature fin[r] (EAGLE-3:
 * the target's 3d features when fc, else the parent's d-wide output),
 * position pos[r]; row r's K/V go to kdst[r]/vdst[r] and it attends to the stable
 * positions below lim[r], then to the fed slots anc[r][0 .. n_anc[r]) (its
 * ancestors, then itself).  Leaves the outputs in e->out and, for rows >=
 * lg0, their logits in e->logits (row r - lg0). */
struct rows {
    int64_t n, lg0;
    const int32_t *tok;
    const float *const *fin;
    const int64_t *pos, *lim;
    float *const *kdst, *const *vdst;
    const int32_t *const *anc;
    const int64_t *n_anc;
    int fc;
    struct eagle_stream *const *st;     /* row r's stream (NULL: all e->cur's) */
    int kv_only;                /* the rows' K/V stored, nothing else computed */
};

static void
attend(struct eagle_draft *e, const struct rows *rw)
{
    int64_t hd = e->h.c.head_dim, nh = e->h.c.n_head, grp = nh / e->h.c.n_head_kv;
    float scale = 1.0f / sqrtf((float)hd);

    for (int64_t r = 0; r < rw->n; r++) {
        int64_t ns = rw->lim[r], na = rw->n_anc[r];
        const struct eagle_stream *sr = rw->st ? rw->st[r] : e->cur;
        for (int64_t hh = 0; hh < nh; hh++) {
            const float *qh = e->q + r * e->qd + hh * hd;
            int64_t off = (hh / grp) * hd;
            float max = -INFINITY, *s = e->sc;
            for (int64_t j = 0; j < ns + na; j++) {
                const float *kj = j < ns ? sr->K + j * e->kd + off : e->ck + rw->anc[r][j - ns] * e->kd + off;
                float dot = 0;
                for (int64_t t = 0; t < hd; t++)
                    dot += qh[t] * kj[t];
                s[j] = dot * scale;
                if (s[j] > max)
                    max = s[j];
            }
            double sum = 0;
            for (int64_t j = 0; j < ns + na; j++)
                sum += s[j] = expf(s[j] - max);
            float inv = (float)(1.0 / sum), *o = e->a + r * e->qd + hh * hd;
            memset(o, 0, (size_t)hd * sizeof(float));
            for (int64_t j = 0; j < ns + na; j++) {
                const float *vj = j < ns ? sr->Vs + j * e->kd + off : e->cv + rw->anc[r][j - ns] * e->kd + off;
                float p = s[j] * inv;
                for (int64_t t = 0; t < hd; t++)
                    o[t] += p * vj[t];
            }
        }
    }
}

/* y_i = x W_i^T over n rows for the matrices i, j, k (j, k < 0: none),
 * which share x; bias on the first */
static void
mm(struct eagle_draft *e, float *y, const float *x, int64_t n, int i, const float *bias, int j,
   float *yj, int k, float *yk)
{
    struct backend_matmul m = { 0 };
    int w[3] = { i, j, k };
    float *ys[3] = { y, yj, yk };

    for (int q = 0; q < 3; q++) {
        if (w[q] < 0)
            continue;
        m.w[m.nw] = &e->wt[w[q]];
        m.y[m.nw] = ys[q];
        m.ldy[m.nw] = e->wt[w[q]].rows;
        m.nw++;
    }
    m.bias[0] = bias;
    m.x = x;
    m.ldx = e->wt[i].cols;
    m.n_tok = n;
    e->m->be->ops->matmul(e->m->be, &m);
}

/* e->wt[i] = rows x cols f32 matrix src as the backend multiplies it: in
 * wtype when the type takes that width, else f32 */
static int
weight(struct eagle_draft *e, int i, const float *src, int64_t rows, int64_t cols, uint32_t wtype)
{
    struct backend *be = e->m->be;
    size_t rb = qtype_row_bytes(wtype, cols);
    struct backend_weight *w = &e->wt[i];
    bool conv = wtype != GGML_TYPE_F32 && rb && quant_supported(wtype) &&
                !quant_needs_imatrix(wtype) && be->ops->supports(be, wtype);

    if (!conv) {
        wtype = GGML_TYPE_F32;
        rb = (size_t)cols * sizeof(float);
    }
    w->type = wtype;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = rb;
    w->packed = NULL;
    if (!conv) {
        w->data = src;
    } else {
        if (!(e->wbuf[i] = malloc((size_t)rows * rb)))
            return -ST_NOMEM;
        quant_chunk(wtype, src, e->wbuf[i], rows, cols, NULL);
        w->data = e->wbuf[i];
    }
    return be->ops->mm_reserve(be, wtype, e->B, cols) < 0 ? -ST_NOMEM : 0;
}

/* the decoder layer from its attention input x, the residual stream e->h0
 * beside it: q/k/v (matrices wt[0..2]), RoPE, the rows' K/V stored,
 * attention, wt[3], the norm ffn_norm and the MLP (wt[4..6]); the output
 * in e->out.  With rw->kv_only the K/V only: a position's keys and values
 * depend on its inputs alone, and a stable position's output is never read
 * (the root's is, which runs in full). */
static void
layer(struct eagle_draft *e, const struct rows *rw, const float *x, const int wt[7],
      const float *ffn_norm)
{
    const struct backend_backward_ops *bw = e->bw;
    const struct eagle_config *c = &e->h.c;
    int64_t n = rw->n, d = e->d;

    if (rw->kv_only)
        mm(e, e->k, x, n, wt[1], NULL, wt[2], e->v, -1, NULL);
    else
        mm(e, e->q, x, n, wt[0], NULL, wt[1], e->k, wt[2], e->v);
    bw->rope_fwd(e->k, n, c->n_head_kv, c->head_dim, e->cs, c->rope.n_rot, c->rope.style);
    for (int64_t r = 0; r < n; r++) {
        memcpy(rw->kdst[r], e->k + r * e->kd, (size_t)e->kd * sizeof(float));
        memcpy(rw->vdst[r], e->v + r * e->kd, (size_t)e->kd * sizeof(float));
    }
    if (rw->kv_only)
        return;
    bw->rope_fwd(e->q, n, c->n_head, c->head_dim, e->cs, c->rope.n_rot, c->rope.style);
    attend(e, rw);
    mm(e, e->h1, e->a, n, wt[3], NULL, -1, NULL, -1, NULL);
    for (int64_t i = 0; i < n * d; i++)
        e->h1[i] += e->h0[i];
    bw->rmsnorm_fwd(e->xn, e->h1, ffn_norm, n, d, c->eps);
    mm(e, e->g, e->xn, n, wt[4], NULL, wt[5], e->u, -1, NULL);
    bw->silu_mul_fwd(e->g, e->g, e->u, n * e->ff);
    mm(e, e->out, e->g, n, wt[6], NULL, -1, NULL, -1, NULL);
    for (int64_t i = 0; i < n * d; i++)
        e->out[i] += e->h1[i];
}

/* EAGLE-3's layer (eagle3.h, one step of the forward) on the rows */
static void
run_rows3(struct eagle_draft *e, const struct rows *rw)
{
    const struct backend_backward_ops *bw = e->bw;
    const struct eagle_head *h = &e->h;
    struct backend *be = e->m->be;
    int64_t n = rw->n, d = e->d;

    for (int64_t r = 0; r < n; r++)
        e->ids[r] = rw->tok[r];
    be->ops->get_rows(be, e->h1, &e->emb, e->ids, n);       /* h1, xn: scratch */
    bw->rmsnorm_fwd(e->xn, e->h1, h->t[EAGLE3_IN_NORM], n, d, h->c.eps);
    for (int64_t r = 0; r < n; r++) {
        memcpy(e->x2 + r * 2 * d, e->xn + r * d, (size_t)d * sizeof(float));
        if (rw->fc)
            memcpy(e->x3 + r * 3 * d, rw->fin[r], (size_t)(3 * d) * sizeof(float));
        else
            memcpy(e->h0 + r * d, rw->fin[r], (size_t)d * sizeof(float));
        ops_rope_angles(e->cs + r * h->c.rope.n_rot, (int32_t)rw->pos[r], &h->c.rope);
    }
    if (rw->fc)
        mm(e, e->h0, e->x3, n, EAGLE3_FC, NULL, -1, NULL, -1, NULL);
    bw->rmsnorm_fwd(e->xn, e->h0, h->t[EAGLE3_HID_NORM], n, d, h->c.eps);
    for (int64_t r = 0; r < n; r++)
        memcpy(e->x2 + r * 2 * d + d, e->xn + r * d, (size_t)d * sizeof(float));
    static const int wt[7] = { EAGLE3_WQ, EAGLE3_WK, EAGLE3_WV, EAGLE3_WO, EAGLE3_GATE,
                               EAGLE3_UP, EAGLE3_DOWN };
    layer(e, rw, e->x2, wt, h->t[EAGLE3_FFN_NORM]);
    if (rw->lg0 < n) {
        bw->rmsnorm_fwd(e->xn, e->out + rw->lg0 * d, h->t[EAGLE3_OUT_NORM], n - rw->lg0, d,
                        h->c.eps);
        mm(e, e->logits, e->xn, n - rw->lg0, EAGLE3_LM, NULL, -1, NULL, -1, NULL);
    }
}

static void
run_rows(struct eagle_draft *e, const struct rows *rw)
{
    const struct eagle_head *h = &e->h;
    struct backend *be = e->m->be;
    int64_t n = rw->n, d = e->d;

    assert(!rw->kv_only || rw->lg0 == n);       /* no logits from rows not run */
    if (h->c.arch == EAGLE_ARCH_3) {
        run_rows3(e, rw);
        return;
    }
    for (int64_t r = 0; r < n; r++)
        e->ids[r] = rw->tok[r];
    be->ops->get_rows(be, e->h1, &e->emb, e->ids, n);       /* h1: scratch for the rows */
    for (int64_t r = 0; r < n; r++) {
        memcpy(e->x2 + r * 2 * d, e->h1 + r * d, (size_t)d * sizeof(float));
        memcpy(e->x2 + r * 2 * d + d, rw->fin[r], (size_t)d * sizeof(float));
        ops_rope_angles(e->cs + r * h->c.rope.n_rot, (int32_t)rw->pos[r], &h->c.rope);
    }
    mm(e, e->h0, e->x2, n, EAGLE_FC_W, h->t[EAGLE_FC_B], -1, NULL, -1, NULL);
    static const int wt[7] = { EAGLE_WQ, EAGLE_WK, EAGLE_WV, EAGLE_WO, EAGLE_GATE, EAGLE_UP,
                               EAGLE_DOWN };
    layer(e, rw, e->h0, wt, h->t[EAGLE_NORM]);
    if (rw->lg0 < n && e->lm_red) {
        mm(e, e->logits, e->out + rw->lg0 * d, n - rw->lg0, EAGLE_N_TENSORS, NULL, -1, NULL, -1,
           NULL);
    } else if (rw->lg0 < n) {
        struct backend_matmul mm = { 0 };
        mm.nw = 1;
        mm.w[0] = &e->lm;
        mm.y[0] = e->logits;
        mm.ldy[0] = e->V;
        mm.x = e->out + rw->lg0 * d;
        mm.ldx = d;
        mm.n_tok = n - rw->lg0;
        be->ops->matmul(be, &mm);
    }
}

/* the top k of row z [V] by log probability: ids and log probs, best first */
static int64_t
top_k(const float *z, int64_t V, int64_t k, int32_t *id, float *lp)
{
    float max = -INFINITY;
    double s = 0;
    int64_t n = 0;
    for (int64_t j = 0; j < V; j++)
        if (z[j] > max)
            max = z[j];
    for (int64_t j = 0; j < V; j++)
        s += exp((double)(z[j] - max));
    float lse = max + (float)log(s);
    for (int64_t j = 0; j < V; j++) {
        if (n == k && z[j] <= z[id[n - 1]])
            continue;
        int64_t i = n < k ? n++ : n - 1;
        while (i > 0 && z[id[i - 1]] < z[j]) {
            id[i] = id[i - 1];
            i--;
        }
        id[i] = (int32_t)j;
    }
    for (int64_t i = 0; i < n; i++)
        lp[i] = z[id[i]] - lse;
    return n;
}

static void *
xcalloc(size_t n, size_t sz, int *bad)
{
    void *p = calloc(n ? n : 1, sz);
    *bad |= !p;
    return p;
}

void
eagle_draft_free(struct eagle_draft *e)
{
    if (!e)
        return;
    eagle_head_release(&e->h);
    eagle_stream_free(e->st0);
    free(e->x2), free(e->h0), free(e->q), free(e->k), free(e->v), free(e->a), free(e->h1);
    free(e->xn), free(e->g), free(e->u), free(e->out), free(e->cs), free(e->logits), free(e->sc);
    free(e->ids), free(e->c), free(e->ch), free(e->ck), free(e->cv), free(e->sel);
    free(e->hroot), free(e->hid), free(e->lm_ids), free(e->lm_red), free(e->x3);
    free(e->cap.feat3);
    for (int i = 0; i <= EAGLE_MAX_TENSORS; i++)
        free(e->wbuf[i]);
    free(e);
}

int
eagle_draft_open(struct eagle_draft **out, const char *path, struct model *m, int64_t ctx,
                 int k, uint32_t wtype, struct diag *d)
{
    struct eagle_draft *e;
    struct eagle_meta meta;
    int rc, bad = 0;

    *out = NULL;
    if (k < 1 || k > EAGLE_TOPK_MAX || ctx < 2)
        return diag_set(d, ST_RANGE, "top-k %d: 1 to %d", k, EAGLE_TOPK_MAX);
    if (!m->be->ops->backward)
        return diag_set(d, ST_DEVICE, "the %s backend cannot run an EAGLE head", m->be->device);
    if (blas_prime(0) < 0)     /* the head's products (blas.h) */
        return diag_set(d, ST_NOMEM, "out of memory for OpenBLAS's work buffer");
    if (!(e = calloc(1, sizeof *e)))
        return diag_set(d, ST_NOMEM, "out of memory");
    if ((rc = eagle_head_read(&e->h, &meta, NULL, NULL, path, d)) < 0 ||
        (rc = eagle_head_check_base(&e->h, &meta, m, d)) < 0) {
        diag_prefix(d, "'%s'", path);
        free(meta.draft_ids);
        eagle_draft_free(e);
        return rc;
    }
    bool e3 = e->h.c.arch == EAGLE_ARCH_3;
    for (int i = 0; e3 && i < 3; i++)
        if (e->h.c.feat_layer[i] >= m->hp.n_layer) {
            free(meta.draft_ids);
            eagle_draft_free(e);
            return diag_set(d, ST_FORMAT, "'%s': feature layer %lld of a %lld-layer model", path,
                            (long long)e->h.c.feat_layer[i], (long long)m->hp.n_layer);
        }
    e->lm_ids = meta.draft_ids;     /* NULL: the whole vocabulary */
    e->n_lm = meta.draft_ids ? meta.n_draft : m->hp.n_vocab;
    if (e->h.c.head_dim != m->hp.head_dim || e->h.c.rope.n_rot > e->h.c.head_dim) {
        eagle_draft_free(e);
        return diag_set(d, ST_FORMAT, "'%s': head shape does not fit the model", path);
    }
    e->m = m;
    e->bw = m->be->ops->backward;
    e->emb = model_weight_view(&m->tok_embd);
    e->lm = model_weight_view(&m->output);
    e->ctx = ctx;
    e->d = e->h.c.d;
    e->fd = e3 ? 3 * e->d : e->d;
    e->qd = e->h.c.n_head * e->h.c.head_dim;
    e->kd = e->h.c.n_head_kv * e->h.c.head_dim;
    e->ff = e->h.c.n_ff;
    e->V = m->hp.n_vocab;
    e->top_k = k;
    e->B = STABLE_ROWS > k ? STABLE_ROWS : k;
    /* fed slots: a tree's levels of k, or a chain group's roots and chains */
    e->cap_fed = (int64_t)LEVELS_MAX * (k > CHAIN_GROUP ? k : CHAIN_GROUP);
    e->cap_c = e->cap_fed * k + k;
    int64_t B = e->B, d2 = e->d;
    bad |= eagle_stream_new(e, &e->st0, NULL) < 0 || stream_reserve(e, e->st0, ctx) < 0;
    e->cur = e->st0;
    if (e3)
        e->x3 = xcalloc((size_t)(B * 3 * d2), sizeof(float), &bad);
    e->x2 = xcalloc((size_t)(B * 2 * d2), sizeof(float), &bad);
    e->h0 = xcalloc((size_t)(B * d2), sizeof(float), &bad);
    e->h1 = xcalloc((size_t)(B * d2), sizeof(float), &bad);
    e->xn = xcalloc((size_t)(B * d2), sizeof(float), &bad);
    e->out = xcalloc((size_t)(B * d2), sizeof(float), &bad);
    e->q = xcalloc((size_t)(B * e->qd), sizeof(float), &bad);
    e->a = xcalloc((size_t)(B * e->qd), sizeof(float), &bad);
    e->k = xcalloc((size_t)(B * e->kd), sizeof(float), &bad);
    e->v = xcalloc((size_t)(B * e->kd), sizeof(float), &bad);
    e->g = xcalloc((size_t)(B * e->ff), sizeof(float), &bad);
    e->u = xcalloc((size_t)(B * e->ff), sizeof(float), &bad);
    e->cs = xcalloc((size_t)(B * e->h.c.rope.n_rot), sizeof(float), &bad);
    /* logits rows: a tree level's k, or a chain group's */
    e->logits = xcalloc((size_t)((k > CHAIN_GROUP ? k : CHAIN_GROUP) * e->n_lm), sizeof(float),
                        &bad);
    if (e->lm_ids && !e3) {
        e->lm_red = xcalloc((size_t)(e->n_lm * d2), sizeof(float), &bad);
        if (!bad)
            m->be->ops->get_rows(m->be, e->lm_red, &e->lm, e->lm_ids, e->n_lm);
    }
    e->sc = xcalloc((size_t)(ctx + LEVELS_MAX + 1), sizeof(float), &bad);
    e->ids = xcalloc((size_t)B, sizeof(int32_t), &bad);
    e->c = xcalloc((size_t)e->cap_c, sizeof(struct cand), &bad);
    e->sel = xcalloc((size_t)e->cap_c, sizeof(int64_t), &bad);
    e->ch = xcalloc((size_t)(e->cap_fed * d2), sizeof(float), &bad);
    e->ck = xcalloc((size_t)(e->cap_fed * e->kd), sizeof(float), &bad);
    e->cv = xcalloc((size_t)(e->cap_fed * e->kd), sizeof(float), &bad);
    e->hroot = xcalloc((size_t)d2, sizeof(float), &bad);
    for (int i = 0; !bad && i < e->h.n_tensors; i++)
        if (e->h.rows[i] > 1)   /* not the bias or a norm */
            bad |= weight(e, i, e->h.t[i], e->h.rows[i], e->h.cols[i], wtype) < 0;
    if (!bad && e->lm_red)
        bad |= weight(e, EAGLE_N_TENSORS, e->lm_red, e->n_lm, d2, wtype) < 0;
    if (bad || m->be->ops->mm_reserve(m->be, e->lm.type, k > CHAIN_GROUP ? k : CHAIN_GROUP,
                                      e->lm.cols) < 0) {
        eagle_draft_free(e);
        return diag_set(d, ST_NOMEM, "out of memory for the EAGLE head");
    }
    /* the cost of one tree level */
    e->lvl_scale = 1;
    level_point(e, k);
    *out = e;
    return 0;
}

/* the cost of one level of n rows (<= CHAIN_GROUP) over one stable
 * position of the scratch stream st0, with the LM head: the faster of two
 * passes on zero features, added to e->lvl (the fed slots and logits are
 * overwritten: never during a draft) */
static void
level_point(struct eagle_draft *e, int64_t n)
{
    int32_t tok[CHAIN_GROUP] = { 0 };
    const float *fin[CHAIN_GROUP];
    int64_t pos[CHAIN_GROUP], lim[CHAIN_GROUP], na[CHAIN_GROUP];
    float *kd_[CHAIN_GROUP], *vd_[CHAIN_GROUP];
    int32_t slot[CHAIN_GROUP];
    const int32_t *anc[CHAIN_GROUP];
    struct eagle_stream *sts[CHAIN_GROUP];
    double best = INFINITY;

    for (int64_t i = 0; i < n; i++) {
        fin[i] = e->st0->feat;
        pos[i] = 1, lim[i] = 1, na[i] = 1;
        slot[i] = (int32_t)i;
        anc[i] = &slot[i];
        kd_[i] = e->ck + i * e->kd, vd_[i] = e->cv + i * e->kd;
        sts[i] = e->st0;        /* not e->cur: a stream that may be gone */
    }
    struct rows rw = { n, 0, tok, fin, pos, lim, kd_, vd_, anc, na, 0, sts, 0 };
    for (int t = 0; t < 2; t++) {
        double t0 = now_seconds();
        run_rows(e, &rw);
        double ms = (now_seconds() - t0) * 1000.0;
        best = ms < best ? ms : best;
    }
    e->lvl.n[e->lvl.n_meas] = n;
    e->lvl.ms[e->lvl.n_meas++] = best;
}

void
eagle_draft_measure(struct eagle_draft *e, int64_t max_n)
{
    if (max_n > CHAIN_GROUP)
        max_n = CHAIN_GROUP;
    e->lvl.n_meas = 0;
    for (int64_t n = 1; n < max_n && e->lvl.n_meas < SPEC_COST_N - 1; n *= 2)
        level_point(e, n);
    level_point(e, max_n < 1 ? 1 : max_n);
    for (int i = 1; i < e->lvl.n_meas; i++)     /* more rows never cost less */
        if (e->lvl.ms[i] < e->lvl.ms[i - 1])
            e->lvl.ms[i] = e->lvl.ms[i - 1];
}

/* the running correction after a draft's expansions: `sec` seconds where
 * the curve predicted pred_ms (the sum over the levels run of their rows'
 * cost: a tree's frontier or the chains still growing, often fewer than
 * the width or the chains drafted).  The stable pass
 * before them (level 1: the positions since the stream's last draft and
 * the root) is left out: after a gap (the whole prompt at a stream's first
 * draft) it runs hundreds of rows, and one such catch-up counted as a level
 * made a head look dear for the rest of the run, so that --spec-tokens auto
 * never drafted with it again. */
static void
level_observed(struct eagle_draft *e, double sec, double pred_ms)
{
    if (pred_ms > 0)
        e->lvl_scale = 0.8 * e->lvl_scale + 0.2 * sec * 1000.0 / pred_ms;
}

const float *
eagle_draft_root_out(const struct eagle_draft *e)
{
    return e->hroot;
}

double
eagle_draft_level_ms(const struct eagle_draft *e, int64_t n)
{
    /* past CHAIN_GROUP rows, groups of it one after another */
    double full = (double)(n / CHAIN_GROUP) * spec_cost_at(&e->lvl, CHAIN_GROUP);
    return e->lvl_scale * (full + (n % CHAIN_GROUP ? spec_cost_at(&e->lvl, n % CHAIN_GROUP) : 0));
}

/* room in st for n positions (at most ctx; a batch run's streams start
 * small and grow with their sequences).  0 or -ST_NOMEM (st unchanged). */
static int
stream_reserve(struct eagle_draft *e, struct eagle_stream *st, int64_t n)
{
    if (n <= st->cap)
        return 0;
    int64_t c = n > 2 * st->cap ? n : 2 * st->cap;
    if (c > e->ctx)
        c = e->ctx;
    void *p;
    if (!(p = realloc(st->feat, (size_t)(c * e->fd) * sizeof(float))))
        return -ST_NOMEM;
    st->feat = p;
    if (!(p = realloc(st->K, (size_t)(c * e->kd) * sizeof(float))))
        return -ST_NOMEM;
    st->K = p;
    if (!(p = realloc(st->Vs, (size_t)(c * e->kd) * sizeof(float))))
        return -ST_NOMEM;
    st->Vs = p;
    if (!(p = realloc(st->stab_tok, (size_t)c * sizeof(int32_t))))
        return -ST_NOMEM;
    st->stab_tok = p;
    /* zeros past what was there: the cost probe at open reads them */
    memset(st->feat + st->cap * e->fd, 0, (size_t)((c - st->cap) * e->fd) * sizeof(float));
    memset(st->K + st->cap * e->kd, 0, (size_t)((c - st->cap) * e->kd) * sizeof(float));
    memset(st->Vs + st->cap * e->kd, 0, (size_t)((c - st->cap) * e->kd) * sizeof(float));
    memset(st->stab_tok + st->cap, 0, (size_t)(c - st->cap) * sizeof(int32_t));
    st->cap = c;
    return 0;
}

int
eagle_stream_new(struct eagle_draft *e, struct eagle_stream **out, struct diag *d)
{
    struct eagle_stream *st = calloc(1, sizeof(*st));

    *out = NULL;
    if (!st || stream_reserve(e, st, e->ctx < STABLE_ROWS ? e->ctx : STABLE_ROWS) < 0) {
        eagle_stream_free(st);
        return diag_set(d, ST_NOMEM, "out of memory for an EAGLE stream");
    }
    *out = st;
    return 0;
}

void
eagle_stream_free(struct eagle_stream *st)
{
    if (!st)
        return;
    free(st->feat), free(st->K), free(st->Vs), free(st->stab_tok);
    free(st);
}

int
eagle_stream_feed(struct eagle_draft *e, struct eagle_stream *st, int64_t pos, const float *feat)
{
    if (pos < 0 || pos >= e->ctx || pos > st->n_feat)
        return 0;
    if (stream_reserve(e, st, pos + 1) < 0)
        return -ST_NOMEM;
    memcpy(st->feat + pos * e->fd, feat, (size_t)e->fd * sizeof(float));
    st->n_feat = pos + 1;
    if (st->P > pos)            /* a stable position built on a replaced feature */
        st->P = pos;
    return 0;
}

void
eagle_draft_feed(struct eagle_draft *e, int64_t pos, const float *feat)
{
    eagle_stream_feed(e, e->st0, pos, feat);     /* st0 holds ctx positions: no growth */
}

int
eagle_draft_hidden(struct eagle_draft *e, int64_t rows, float **out, struct diag *d)
{
    if (rows > e->hid_rows) {
        float *p = realloc(e->hid, (size_t)(rows * e->d) * sizeof(float));
        if (!p)
            return diag_set(d, ST_NOMEM, "out of memory");
        e->hid = p;
        if (e->h.c.arch == EAGLE_ARCH_3) {
            if (!(p = realloc(e->cap.feat3, (size_t)(rows * e->fd) * sizeof(float))))
                return diag_set(d, ST_NOMEM, "out of memory");
            e->cap = (struct eagle_capture){ e->h.c.feat_layer, e->d, p, rows };
            e->hooks = (struct model_hooks){ eagle_capture_hook, &e->cap, EAGLE_CAPTURE_SITES };
        }
        e->hid_rows = rows;
    }
    *out = e->hid;
    return 0;
}

const struct model_hooks *
eagle_draft_hooks(const struct eagle_draft *e)
{
    return e->h.c.arch == EAGLE_ARCH_3 && e->cap.feat3 ? &e->hooks : NULL;
}

int
eagle_stream_feed_rows(struct eagle_draft *e, struct eagle_stream *st, int64_t pos0,
                       const float *hidden, const int64_t *rows, int64_t n)
{
    const float *src = e->h.c.arch == EAGLE_ARCH_3 ? e->cap.feat3 : hidden;
    for (int64_t i = 0; i < n; i++)
        if (eagle_stream_feed(e, st, pos0 + i, src + (rows ? rows[i] : i) * e->fd) < 0)
            return -ST_NOMEM;
    return 0;
}

void
eagle_draft_feed_rows(struct eagle_draft *e, int64_t pos0, const float *hidden,
                      const int64_t *rows, int64_t n)
{
    eagle_stream_feed_rows(e, e->st0, pos0, hidden, rows, n);
}

const char *
eagle_draft_arch(const struct eagle_draft *e)
{
    return e->h.c.arch == EAGLE_ARCH_3 ? "eagle3" : "eagle";
}

struct chain_rows {             /* a batch of rows being built */
    int64_t n;
    int32_t tok[STABLE_ROWS];
    const float *fin[STABLE_ROWS];
    int64_t pos[STABLE_ROWS], lim[STABLE_ROWS], na[STABLE_ROWS];
    float *kd[STABLE_ROWS], *vd[STABLE_ROWS];
    const int32_t *anc[STABLE_ROWS];
    struct eagle_stream *st[STABLE_ROWS];
};

/* stable position p of st (token hist[p + 1]) as the next row of b */
static void
stable_row(struct eagle_draft *e, struct chain_rows *b, struct eagle_stream *st,
           const int32_t *hist, int64_t p)
{
    int64_t r = b->n++;
    b->tok[r] = st->stab_tok[p] = hist[p + 1];
    b->fin[r] = st->feat + p * e->fd;
    b->pos[r] = p;
    b->lim[r] = p + 1;          /* itself included: its K/V are stored before attention */
    b->na[r] = 0;
    b->anc[r] = NULL;
    b->kd[r] = st->K + p * e->kd, b->vd[r] = st->Vs + p * e->kd;
    b->st[r] = st;
}

/* b's rows, their logits from row lg0 on; kv_only: their K/V only
 * (struct rows) */
static void
run_chain_rows(struct eagle_draft *e, struct chain_rows *b, int64_t lg0, int fc, int kv_only)
{
    struct rows rw = { b->n, lg0, b->tok, b->fin, b->pos, b->lim, b->kd, b->vd, b->anc, b->na,
                       fc, b->st, kv_only };
    if (b->n > 0)
        run_rows(e, &rw);
}

/* the stable positions of the n streams st[i] up to their roots (head
 * position p: token hist[i][p + 1], feature p; root n_hist[i] - 2, whose
 * output is always recomputed), in head passes of at most STABLE_ROWS
 * rows: the positions before the roots their K/V only, then the n <=
 * STABLE_ROWS roots in full.  The callers checked 2 <= n_hist <= n_feat +
 * 1.  The roots' outputs are e->out's rows 0 .. n-1, their logits
 * e->logits'. */
static void
stable_pass(struct eagle_draft *e, struct eagle_stream *const *st, const int32_t *const *hist,
            const int64_t *n_hist, int64_t n)
{
    struct chain_rows b;

    assert(n <= CHAIN_GROUP);   /* the roots' logits rows (e->logits holds B >= 32) */
    b.n = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t last = n_hist[i] - 2;
        assert(last >= 0 && last < st[i]->n_feat && st[i]->n_feat <= st[i]->cap);
        /* a position whose next token changed is not stable any more */
        for (int64_t p = 0; p < st[i]->P && p <= last; p++)
            if (st[i]->stab_tok[p] != hist[i][p + 1]) {
                st[i]->P = p;
                break;
            }
        if (st[i]->P > last)
            st[i]->P = last;
        for (int64_t p = st[i]->P; p < last; p++) {
            if (b.n == STABLE_ROWS) {
                run_chain_rows(e, &b, b.n, 1, 1);
                b.n = 0;
            }
            stable_row(e, &b, st[i], hist[i], p);
        }
    }
    run_chain_rows(e, &b, b.n, 1, 1);
    b.n = 0;
    for (int64_t i = 0; i < n; i++) {
        stable_row(e, &b, st[i], hist[i], n_hist[i] - 2);
        st[i]->P = n_hist[i] - 1;
    }
    run_chain_rows(e, &b, 0, 1, 0);
}

/* e->cur's stable positions up to n - 2; e->hroot its root's output, the
 * root's logits row 0 of e->logits */
static void
catch_up(struct eagle_draft *e, const int32_t *hist, int64_t n)
{
    stable_pass(e, &e->cur, &hist, &n, 1);
    memcpy(e->hroot, e->out, (size_t)e->d * sizeof(float));
}

static int
better(const struct cand *x, int64_t ix, const struct cand *y, int64_t iy)
{
    if (x->score != y->score)
        return x->score > y->score;
    if (x->depth != y->depth)
        return x->depth < y->depth;
    return ix < iy;
}

int
eagle_draft_tree(struct eagle_draft *e, const int32_t *hist, int64_t n_hist, int depth,
                 int64_t budget, float p_min, struct spec_tree *t, struct diag *d)
{
    return eagle_stream_tree(e, e->st0, hist, n_hist, depth, (int)e->top_k, budget, p_min, t, d);
}

int
eagle_stream_tree(struct eagle_draft *e, struct eagle_stream *st, const int32_t *hist,
                  int64_t n_hist, int depth, int width, int64_t budget, float p_min,
                  struct spec_tree *t, struct diag *d)
{
    int64_t k = width < 1 ? 1 : width > e->top_k ? e->top_k : width, root_pos = n_hist - 2;
    int32_t id[EAGLE_TOPK_MAX];
    float lp[EAGLE_TOPK_MAX];
    /* the confidence floor: a candidate whose path probability is below
     * p_min is neither recorded nor expanded */
    float floor_lp = p_min > 0 ? logf(p_min) : -INFINITY;
    (void)d;

    if (n_hist < 2 || n_hist - 1 > st->n_feat || n_hist > e->ctx || budget < 1 || depth < 1)
        return 0;
    if (depth > LEVELS_MAX)
        depth = LEVELS_MAX;
    double pred = 0;            /* the curve's ms for the levels after level 1 */
    e->cur = st;
    catch_up(e, hist, n_hist);
    double t0 = now_seconds();  /* after the catch-up: level_observed() leaves it out */
    e->n_c = e->n_fed = 0;
    /* level 1: the root's children, from its logits (row 0) */
    int64_t nk = top_k(e->logits, e->n_lm, k, id, lp);
    for (int64_t i = 0; i < nk && lp[i] >= floor_lp; i++)
        e->c[e->n_c++] = (struct cand){ e->lm_ids ? e->lm_ids[id[i]] : id[i], -1, 1, -1, lp[i] };
    int64_t f0 = 0, f1 = e->n_c;      /* the last level's candidates */
    for (int lev = 2; lev <= depth; lev++) {
        /* the frontier: the top k of the last level, best first */
        int64_t fr[EAGLE_TOPK_MAX], nf = 0;
        for (int64_t i = f0; i < f1; i++) {
            if (nf == k && !better(&e->c[i], i, &e->c[fr[k - 1]], fr[k - 1]))
                continue;
            int64_t j = nf < k ? nf++ : k - 1;
            while (j > 0 && better(&e->c[i], i, &e->c[fr[j - 1]], fr[j - 1])) {
                fr[j] = fr[j - 1];
                j--;
            }
            fr[j] = i;
        }
        if (nf == 0 || e->n_fed + nf > e->cap_fed || e->n_c + nf * k > e->cap_c)
            break;
        int32_t tok[EAGLE_TOPK_MAX], slots[EAGLE_TOPK_MAX][LEVELS_MAX];
        const float *fin[EAGLE_TOPK_MAX];
        int64_t pos[EAGLE_TOPK_MAX], lim[EAGLE_TOPK_MAX], na[EAGLE_TOPK_MAX];
        float *kd_[EAGLE_TOPK_MAX], *vd_[EAGLE_TOPK_MAX];
        const int32_t *anc[EAGLE_TOPK_MAX];
        for (int64_t r = 0; r < nf; r++) {
            struct cand *c = &e->c[fr[r]];
            c->fed = (int32_t)(e->n_fed + r);
            tok[r] = c->tok;
            fin[r] = c->parent < 0 ? e->hroot : e->ch + (int64_t)e->c[c->parent].fed * e->d;
            pos[r] = root_pos + c->depth;
            lim[r] = root_pos + 1;
            /* ancestors (fed) from the top, then itself */
            int64_t m = c->depth, p = fr[r];
            na[r] = m;
            for (int64_t j = m - 1; j >= 0; j--) {
                slots[r][j] = e->c[p].fed;
                p = e->c[p].parent;
            }
            anc[r] = slots[r];
            kd_[r] = e->ck + (int64_t)c->fed * e->kd, vd_[r] = e->cv + (int64_t)c->fed * e->kd;
        }
        struct rows rw = { nf, 0, tok, fin, pos, lim, kd_, vd_, anc, na, 0, NULL, 0 };
        run_rows(e, &rw);
        pred += spec_cost_at(&e->lvl, nf);
        e->n_fed += nf;
        f0 = e->n_c;
        for (int64_t r = 0; r < nf; r++) {
            memcpy(e->ch + (int64_t)e->c[fr[r]].fed * e->d, e->out + r * e->d,
                   (size_t)e->d * sizeof(float));
            int64_t nc = top_k(e->logits + r * e->n_lm, e->n_lm, k, id, lp);
            for (int64_t i = 0; i < nc && e->c[fr[r]].score + lp[i] >= floor_lp; i++)
                e->c[e->n_c++] = (struct cand){ e->lm_ids ? e->lm_ids[id[i]] : id[i],
                                                (int32_t)fr[r], lev, -1,
                                                e->c[fr[r]].score + lp[i] };
        }
        f1 = e->n_c;
    }
    /* the cost per level, for the draft size (spec_choose) */
    level_observed(e, now_seconds() - t0, pred);
    /* the best budget candidates, in (depth, index) order so that parents come first */
    int64_t ns = 0;
    for (int64_t i = 0; i < e->n_c; i++)
        e->sel[i] = i;
    for (int64_t i = 1; i < e->n_c; i++) {     /* insertion sort by score: n_c is small */
        int64_t x = e->sel[i], j = i;
        while (j > 0 && better(&e->c[x], x, &e->c[e->sel[j - 1]], e->sel[j - 1])) {
            e->sel[j] = e->sel[j - 1];
            j--;
        }
        e->sel[j] = x;
    }
    ns = e->n_c < budget ? e->n_c : budget;
    if (ns > t->cap - t->n)
        ns = t->cap - t->n;
    for (int64_t i = 1; i < ns; i++) {
        int64_t x = e->sel[i], j = i;
        while (j > 0 && (e->c[e->sel[j - 1]].depth > e->c[x].depth ||
                         (e->c[e->sel[j - 1]].depth == e->c[x].depth && e->sel[j - 1] > x))) {
            e->sel[j] = e->sel[j - 1];
            j--;
        }
        e->sel[j] = x;
    }
    /* candidate -> tree node: fed slots are reused as the map (fed = node) */
    for (int64_t i = 0; i < e->n_c; i++)
        e->c[i].fed = -1;
    for (int64_t i = 0; i < ns; i++) {
        struct cand *c = &e->c[e->sel[i]];
        int64_t parent = c->parent < 0 ? 0 : e->c[c->parent].fed;
        if (parent < 0)
            continue;           /* its parent was not chosen: not connected */
        int64_t node = spec_tree_add(t, c->tok, parent);
        if (node < 0)
            break;
        c->fed = (int32_t)node;
    }
    return 0;
}

/* ---- chains for many streams, one head pass per level ---- */

/* the top token of logits row z and its log probability */
static int32_t
top1(const struct eagle_draft *e, const float *z, float *lp)
{
    int32_t id;
    top_k(z, e->n_lm, 1, &id, lp);
    return e->lm_ids ? e->lm_ids[id] : id;
}

static void
chains_group(struct eagle_draft *e, struct eagle_chain_req *rq, int64_t n, float floor_lp)
{
    struct chain_rows b;
    int64_t root[CHAIN_GROUP], n_root = 0, live[CHAIN_GROUP], n_live = 0;
    int32_t slots[CHAIN_GROUP][LEVELS_MAX];
    float score[CHAIN_GROUP];
    double pred = 0;            /* the curve's ms for the levels run after level 1 */

    /* level 0: every stream's stable positions and its root, together */
    struct eagle_stream *sts[CHAIN_GROUP];
    const int32_t *hs[CHAIN_GROUP];
    int64_t nhs[CHAIN_GROUP];
    for (int64_t i = 0; i < n; i++) {
        struct eagle_stream *st = rq[i].st;
        int64_t nh = rq[i].n_hist;
        rq[i].n_out = 0;
        if (nh < 2 || nh - 1 > st->n_feat || nh > e->ctx || rq[i].max < 1)
            continue;
        sts[n_root] = st, hs[n_root] = rq[i].hist, nhs[n_root] = nh;
        root[n_root++] = i;
    }
    if (n_root == 0)
        return;
    stable_pass(e, sts, hs, nhs, n_root);
    double t0 = now_seconds();  /* after the stable pass: level_observed() leaves it out */
    /* the roots' outputs in fed slots 0 .. n_root-1 (never attended to:
     * a root's K/V are its stream's); their children */
    for (int64_t j = 0; j < n_root; j++) {
        struct eagle_chain_req *q = &rq[root[j]];
        memcpy(e->ch + j * e->d, e->out + j * e->d, (size_t)e->d * sizeof(float));
        int32_t t = top1(e, e->logits + j * e->n_lm, &score[j]);
        if (score[j] < floor_lp)
            continue;
        q->out[q->n_out++] = t;
        if (q->n_out < q->max)
            live[n_live++] = j;
    }
    /* level m + 1: each live chain's token at depth m fed (ancestors: the
     * chain's fed slots, itself last), its child the next token */
    int64_t fed = n_root;
    for (int64_t m = 1; n_live > 0 && m < LEVELS_MAX && fed + n_live <= e->cap_fed; m++) {
        b.n = 0;
        for (int64_t k = 0; k < n_live; k++) {
            int64_t j = live[k], r = b.n++;
            struct eagle_chain_req *q = &rq[root[j]];
            int64_t f = fed++;
            slots[j][m - 1] = (int32_t)f;
            b.tok[r] = q->out[m - 1];
            b.fin[r] = e->ch + (m == 1 ? j : slots[j][m - 2]) * e->d;
            b.pos[r] = q->n_hist - 2 + m;
            b.lim[r] = q->n_hist - 1;
            b.na[r] = m;
            b.anc[r] = slots[j];
            b.kd[r] = e->ck + f * e->kd, b.vd[r] = e->cv + f * e->kd;
            b.st[r] = q->st;
        }
        run_chain_rows(e, &b, 0, 0, 0);
        pred += spec_cost_at(&e->lvl, b.n);
        int64_t n_next = 0;
        for (int64_t k = 0; k < n_live; k++) {
            int64_t j = live[k];
            struct eagle_chain_req *q = &rq[root[j]];
            float lp;
            memcpy(e->ch + (int64_t)slots[j][m - 1] * e->d, e->out + k * e->d,
                   (size_t)e->d * sizeof(float));
            int32_t t = top1(e, e->logits + k * e->n_lm, &lp);
            if ((score[j] += lp) < floor_lp)
                continue;
            q->out[q->n_out++] = t;
            if (q->n_out < q->max)
                live[n_next++] = j;
        }
        n_live = n_next;
    }
    level_observed(e, now_seconds() - t0, pred);
}

int
eagle_streams_chains(struct eagle_draft *e, struct eagle_chain_req *rq, int64_t n, float p_min)
{
    float floor_lp = p_min > 0 ? logf(p_min) : -INFINITY;

    for (int64_t g = 0; g < n; g += CHAIN_GROUP)
        chains_group(e, rq + g, n - g < CHAIN_GROUP ? n - g : CHAIN_GROUP, floor_lp);
    return 0;
}
