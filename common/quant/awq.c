/*
 * awq.c - AWQ (awq.h; ../shared/reference/algorithms.md §3), layer by layer
 * through the calibration pipeline (calib.h: layer_forward and its hooks).
 *
 * Per layer, with N calibration tokens (calib's chunks):
 *   X [N][E]            the float model's hidden states entering the layer
 *                       (calib's x; the layer's float output becomes the
 *                       next layer's, calib_set_state)
 *   W[i] [rows][cols]   f32 copies of its seven linears; the layer runs them
 *                       (calib_set_weight), or a candidate's, until the
 *                       calibration moves on and puts the file's back
 *   in[k] [N][cols]     the inputs of attn_q (= k, v), attn_output,
 *                       ffn_gate (= up) and ffn_down, kept by a hook
 *   ref_attn, ref_mlp   [N][E] the attention's and feed-forward's outputs:
 *                       in[1] Wo^T and in[3] Wdown^T (also the outputs of
 *                       attn_output and ffn_down alone)
 * A candidate for q/k/v runs the layer again on X with the candidate
 * weights, up to the input of attn_output, where a hook takes it and the
 * pass stops; the module output is that times Wo^T.  A candidate for
 * gate/up runs the feed-forward alone on in[2] (the attention before it is
 * unchanged).  The products outside the pass are OpenBLAS's sgemm (else the
 * backend's f32 matmul).
 */
#include "awq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "model.h"
#include "qconv.h"
#include "qtypes.h"
#include "quantize.h"
#include "threadpool.h"

#ifdef LLMKIT_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define MM_ROWS 512             /* tokens per matmul call outside the pass */

/* ---- the layer's linears and scale groups, by the table's tensor ids ---- */

static const enum arch_weight lin_id[AWQ_N_LIN] = {
    ARCH_W_ATTN_Q, ARCH_W_ATTN_K, ARCH_W_ATTN_V, ARCH_W_ATTN_OUT,
    ARCH_W_FFN_GATE, ARCH_W_FFN_UP, ARCH_W_FFN_DOWN,
};

/* which captured input each linear reads: 0 attn_q's, 1 attn_output's,
 * 2 ffn_gate's, 3 ffn_down's */
static const int lin_in[AWQ_N_LIN] = { 0, 0, 0, 1, 2, 2, 3 };
#define N_IN 4
/* the linear whose input hook fills in[k] */
static const int in_lin[N_IN] = { AWQ_Q, AWQ_O, AWQ_GATE, AWQ_DOWN };

enum inspect { INSPECT_ATTN, INSPECT_MLP, INSPECT_LINEAR };

struct scale_group {
    const char *name;           /* for messages */
    int norm;                   /* enum arch_weight of the norm absorbing 1/s, or -1 */
    int prev;                   /* enum awq_lin whose output rows absorb it, or -1 */
    int lin[3], n_lin;          /* the linears scaled by s */
    int in;                     /* their input (in[k]) */
    enum inspect inspect;
};

/* llama (AutoAWQ llama.py) and gemma3 (gemma2.py): the same groups, awq.h */
static const struct scale_group groups[AWQ_N_GROUP] = {
    [AWQ_G_QKV] = { "attn_norm -> attn_q, attn_k, attn_v", ARCH_W_ATTN_NORM, -1,
                    { AWQ_Q, AWQ_K, AWQ_V }, 3, 0, INSPECT_ATTN },
    [AWQ_G_VO] = { "attn_v -> attn_output", -1, AWQ_V, { AWQ_O }, 1, 1, INSPECT_LINEAR },
    [AWQ_G_GATEUP] = { "ffn_norm -> ffn_gate, ffn_up", ARCH_W_FFN_NORM, -1,
                       { AWQ_GATE, AWQ_UP }, 2, 2, INSPECT_MLP },
    [AWQ_G_DOWN] = { "ffn_up -> ffn_down", -1, AWQ_UP, { AWQ_DOWN }, 1, 3, INSPECT_LINEAR },
};

/* ---- the quantizer (awq.h step 5) ---- */

static float
fp16_round(float x)
{
    return qconv_fp16_to_fp32(qconv_fp32_to_fp16(x));
}

void
awq_fake_quant(float *w, int64_t n, int bits, int64_t group_size, uint8_t *q, float *scale,
               int32_t *zero)
{
    const float max_int = (float)((1 << bits) - 1);
    int64_t gs = group_size > 0 ? group_size : n;

    for (int64_t c0 = 0, g = 0; c0 < n; c0 += gs, g++) {
        int64_t c1 = c0 + gs < n ? c0 + gs : n;
        float lo = w[c0], hi = w[c0];
        for (int64_t c = c0 + 1; c < c1; c++) {
            lo = w[c] < lo ? w[c] : lo;
            hi = w[c] > hi ? w[c] : hi;
        }
        float range = hi - lo > 1e-5f ? hi - lo : 1e-5f;
        float s = fp16_round(range / max_int);
        float z = -rintf(lo / s);
        z = z < 0.0f ? 0.0f : z > max_int ? max_int : z;
        for (int64_t c = c0; c < c1; c++) {
            float v = rintf(w[c] / s) + z;
            v = v < 0.0f ? 0.0f : v > max_int ? max_int : v;
            if (q)
                q[c] = (uint8_t)v;
            w[c] = (v - z) * s;
        }
        if (scale)
            scale[g] = s;
        if (zero)
            zero[g] = (int32_t)z;
    }
}

/* ---- the run ---- */

struct awq_state;

/* the hook: keeps linears' inputs, or accumulates a module's loss */
struct cap {
    const struct model_weight *want[N_IN];  /* the linears whose inputs are kept */
    float *dst[N_IN];           /* [N][dim] */
    int64_t dim[N_IN], row[N_IN];
    struct awq_state *st;       /* loss: at the input of loss_w, y = x W^T vs ref */
    const struct model_weight *loss_w;
    const float *W, *ref;       /* W [E][cols], ref [N][E] */
    int64_t ref_row;
    double err;
};

struct awq_state {
    struct calib *c;
    struct model *m;
    const struct awq_opts *o;
    int64_t N, E, F, Eo;
    float *Xn;                  /* [N][E] the float layer's output */
    float *in[N_IN];            /* [N][cols] */
    int64_t in_cols[N_IN];
    float *ref_attn, *ref_mlp;  /* [N][E] */
    float *out;                 /* [max(ctx, MM_ROWS)][E] */
    float *mlp_g, *mlp_u;       /* [MM_ROWS][F] */
    float *W[AWQ_N_LIN];        /* f32 copies */
    float *Wt[3];               /* candidates of a group */
    float *norm[2];             /* attn_norm, ffn_norm (f32 copies) */
    float *bv;                  /* attn_v's bias (copy) or NULL */
    float *xmean, *wmean, *s, *best_s;      /* [max(rows, cols)] */
    double *wacc;               /* [max cols] */
    float *gscale;              /* [max cols] a row's group scales ... */
    int32_t *gzero;             /* ... and zeros */
    float *clip_x;              /* [n_s][max cols] sampled clip inputs */
    float *clip_w, *clip_q;     /* [max rows][max cols] */
    float *clip_org, *clip_cur; /* [n_s][max rows] */
    struct cap cap;
    struct threadpool *tp;      /* the row loops' workers */
    struct diag *d;
};

static void mm_f32(struct awq_state *st, const float *W, int64_t rows, int64_t cols,
                   const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy);
static double sq_err(const float *y, const float *ref, int64_t n);

static int
cap_hook(void *ctx, const struct model_hook_event *ev)
{
    struct cap *c = ctx;

    if (ev->site != MODEL_HOOK_LINEAR_IN)
        return 0;
    for (int k = 0; k < N_IN; k++)
        if (ev->w == c->want[k] && c->dst[k]) {
            for (int64_t t = 0; t < ev->n_tok; t++)
                memcpy(c->dst[k] + (c->row[k] + t) * c->dim[k], ev->x + t * ev->ld,
                       (size_t)c->dim[k] * sizeof(float));
            c->row[k] += ev->n_tok;
        }
    /* the pass stops after this event (calib_run_layer's stop_after): the
     * backend is free for the module's last matmul */
    if (c->loss_w && ev->w == c->loss_w) {
        struct awq_state *st = c->st;
        mm_f32(st, c->W, st->E, ev->dim, ev->x, ev->ld, ev->n_tok, st->out, st->E);
        c->err += sq_err(st->out, c->ref + c->ref_row * st->E, ev->n_tok * st->E);
        c->ref_row += ev->n_tok;
    }
    return 0;
}

/* y [n][ldy] = x [n][ldx] W^T for the f32 weight W [rows][cols]: OpenBLAS's
 * sgemm where the build has it (several times the backend's f32 kernel
 * here, and these products are most of AWQ's work), else the backend in
 * calls of MM_ROWS tokens */
static void
mm_f32(struct awq_state *st, const float *W, int64_t rows, int64_t cols, const float *x,
       int64_t ldx, int64_t n, float *y, int64_t ldy)
{
#ifdef LLMKIT_HAVE_OPENBLAS
    (void)st;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)rows,
                (blasint)cols, 1.0f, x, (blasint)ldx, W, (blasint)cols, 0.0f, y, (blasint)ldy);
#else
    struct backend *be = st->m->be;
    struct backend_weight bw = { W, NULL, (size_t)cols * sizeof(float), GGML_TYPE_F32, rows,
                                 cols };

    for (int64_t t0 = 0; t0 < n; t0 += MM_ROWS) {
        struct backend_matmul mm = { .nw = 1, .x = x + t0 * ldx, .ldx = ldx,
                                     .n_tok = n - t0 < MM_ROWS ? n - t0 : MM_ROWS };
        mm.w[0] = &bw;
        mm.y[0] = y + t0 * ldy;
        mm.ldy[0] = ldy;
        be->ops->matmul(be, &mm);
    }
#endif
}

static const char *
lin_name(struct awq_state *st, int64_t l, int i)
{
    return model_layer_weight(&st->m->layers[l], lin_id[i])->name;
}

/* step 1: the inputs of the linears, the references, the next layer's input */
static int
capture(struct awq_state *st, int64_t l)
{
    struct model_layer *L = &st->m->layers[l];
    struct model_hooks h = { cap_hook, &st->cap, MODEL_HOOK_LINEAR_IN };
    int rc;

    memset(&st->cap, 0, sizeof st->cap);
    for (int k = 0; k < N_IN; k++) {
        st->cap.want[k] = model_layer_weight(L, lin_id[in_lin[k]]);
        st->cap.dst[k] = st->in[k];
        st->cap.dim[k] = st->in_cols[k];
    }
    if ((rc = calib_run_layer(st->c, &h, NULL, st->Xn, st->d)) < 0)
        return rc;
    memset(&st->cap, 0, sizeof st->cap);
    mm_f32(st, st->W[AWQ_O], st->E, st->Eo, st->in[1], st->Eo, st->N, st->ref_attn, st->E);
    mm_f32(st, st->W[AWQ_DOWN], st->E, st->F, st->in[3], st->F, st->N, st->ref_mlp, st->E);
    for (int k = 0; k < N_IN; k++)
        for (int64_t i = 0; i < st->N * st->in_cols[k]; i++)
            if (!isfinite(st->in[k][i]))
                return diag_set(st->d, ST_FORMAT, "non-finite activations at the input of '%s'",
                                lin_name(st, l, in_lin[k]));
    return 0;
}

/* sum of squared differences of y [n][E] and ref [n][E] */
static double
sq_err(const float *y, const float *ref, int64_t n)
{
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double t = (double)y[i] - (double)ref[i];
        e += t * t;
    }
    return e;
}

/* the loss of group g's candidates (st->Wt) on the inspected module */
static int
group_loss(struct awq_state *st, int64_t l, int g, double *loss)
{
    const struct scale_group *G = &groups[g];
    struct model_layer *L = &st->m->layers[l];
    const int64_t E = st->E;
    double e = 0.0;
    int rc = 0;

    if (G->inspect == INSPECT_LINEAR) {
        int i = G->lin[0];
        const struct model_weight *w = model_layer_weight(L, lin_id[i]);
        const float *ref = i == AWQ_O ? st->ref_attn : st->ref_mlp;
        for (int64_t t0 = 0; t0 < st->N; t0 += MM_ROWS) {
            int64_t n = st->N - t0 < MM_ROWS ? st->N - t0 : MM_ROWS;
            mm_f32(st, st->Wt[0], w->rows, w->cols, st->in[G->in] + t0 * w->cols, w->cols, n,
                   st->out, E);
            e += sq_err(st->out, ref + t0 * E, n * E);
        }
        *loss = e / (double)(st->N * E);
        return 0;
    }

    if (G->inspect == INSPECT_MLP) {
        /* the feed-forward on its kept input: down(act(x Wgate^T) * x Wup^T)
         * with the recipe's activation, the backend's ops the layer runs */
        const int64_t F = st->F;
        struct backend *be = st->m->be;
        for (int64_t t0 = 0; t0 < st->N; t0 += MM_ROWS) {
            int64_t n = st->N - t0 < MM_ROWS ? st->N - t0 : MM_ROWS;
            const float *x = st->in[G->in] + t0 * E;
            mm_f32(st, st->Wt[0], F, E, x, E, n, st->mlp_g, F);
            mm_f32(st, st->Wt[1], F, E, x, E, n, st->mlp_u, F);
            if (st->m->hp.recipe == ARCH_RECIPE_GEMMA3)
                be->ops->gelu_mul(be, st->mlp_g, st->mlp_u, n, F);
            else
                be->ops->silu_mul(be, st->mlp_g, st->mlp_u, n, F);
            mm_f32(st, st->W[AWQ_DOWN], E, F, st->mlp_g, F, n, st->out, E);
            e += sq_err(st->out, st->ref_mlp + t0 * E, n * E);
        }
        *loss = e / (double)(st->N * E);
        return 0;
    }

    /* the whole attention: the layer again, with the candidates, up to the
     * input of attn_output, times it */
    int last = AWQ_O;
    struct model_hooks h = { cap_hook, &st->cap, MODEL_HOOK_LINEAR_IN };
    for (int j = 0; j < G->n_lin && rc == 0; j++)
        rc = calib_set_weight(st->c, lin_name(st, l, G->lin[j]), st->Wt[j], st->d);
    memset(&st->cap, 0, sizeof st->cap);
    st->cap.st = st;
    st->cap.loss_w = model_layer_weight(L, lin_id[last]);
    st->cap.W = st->W[last];
    st->cap.ref = st->ref_attn;
    if (rc == 0)
        rc = calib_run_layer(st->c, &h, lin_name(st, l, last), NULL, st->d);
    e = st->cap.err;
    memset(&st->cap, 0, sizeof st->cap);
    for (int j = 0; j < G->n_lin && rc == 0; j++)
        rc = calib_set_weight(st->c, lin_name(st, l, G->lin[j]), st->W[G->lin[j]], st->d);
    *loss = e / (double)(st->N * E);
    return rc;
}

/* Whether group g can be scaled in layer L; if not, why (for the note). */
static bool
group_applies(struct model_layer *L, int g, char *why, size_t n)
{
    const struct scale_group *G = &groups[g];

    if (G->norm >= 0) {
        const struct model_weight *nw = model_layer_weight(L, (enum arch_weight)G->norm);
        if (!nw || !nw->data || nw->type != GGML_TYPE_F32) {
            snprintf(why, n, "the norm is not an f32 vector");
            return false;
        }
        return true;
    }
    const struct model_weight *p = model_layer_weight(L, lin_id[G->prev]);
    const struct model_weight *w = model_layer_weight(L, lin_id[G->lin[0]]);
    /* AutoAWQ scales v -> o only when the two weights have one shape */
    if (G->prev == AWQ_V && (p->rows != w->rows || p->cols != w->cols)) {
        snprintf(why, n, "attn_v is %lldx%lld, attn_output %lldx%lld (grouped-query attention)",
                 (long long)p->rows, (long long)p->cols, (long long)w->rows,
                 (long long)w->cols);
        return false;
    }
    if (p->rows != w->cols) {
        snprintf(why, n, "shapes do not chain");
        return false;
    }
    return true;
}

/* w_mean of the group's linears (awq.h step 2; AutoAWQ duo scaling) */
static void
weight_mean(struct awq_state *st, struct model_layer *L, const struct scale_group *G,
            int64_t cols)
{
    int64_t gs = st->o->group_size > 0 ? st->o->group_size : cols;
    double *acc = st->wacc;
    int64_t rows_all = 0;

    memset(acc, 0, (size_t)cols * sizeof(double));
    for (int j = 0; j < G->n_lin; j++) {
        const struct model_weight *w = model_layer_weight(L, lin_id[G->lin[j]]);
        const float *W = st->W[G->lin[j]];
        for (int64_t r = 0; r < w->rows; r++)
            for (int64_t c0 = 0; c0 < cols; c0 += gs) {
                int64_t c1 = c0 + gs < cols ? c0 + gs : cols;
                float mx = 0.0f;
                for (int64_t c = c0; c < c1; c++)
                    mx = fabsf(W[r * cols + c]) > mx ? fabsf(W[r * cols + c]) : mx;
                for (int64_t c = c0; c < c1; c++)
                    acc[c] += fabsf(W[r * cols + c]) / (mx + 1e-6f);
            }
        rows_all += w->rows;
    }
    for (int64_t c = 0; c < cols; c++)
        st->wmean[c] = (float)(acc[c] / (double)rows_all);
}

/* step 2: the best scale of group g (st->best_s), its grid point and loss */
/* candidate rows [r0, r1): T = Q(W diag(s)) / s */
struct cand_job {
    const struct awq_state *st;
    const float *W;
    float *T;
    int64_t cols;
};

static void
cand_rows(void *arg, int64_t r0, int64_t r1, int ith)
{
    const struct cand_job *j = arg;
    const struct awq_state *st = j->st;
    const int64_t cols = j->cols;

    (void)ith;
    for (int64_t r = r0; r < r1; r++) {
        float *row = j->T + r * cols;
        for (int64_t c = 0; c < cols; c++)
            row[c] = j->W[r * cols + c] * st->s[c];
        awq_fake_quant(row, cols, st->o->bits, st->o->group_size, NULL, NULL, NULL);
        for (int64_t c = 0; c < cols; c++)
            row[c] = row[c] / st->s[c];
    }
}

static int
search_scale(struct awq_state *st, int64_t l, int g, struct awq_layer_report *rep)
{
    const struct scale_group *G = &groups[g];
    struct model_layer *L = &st->m->layers[l];
    const int64_t cols = st->in_cols[G->in];
    const float *x = st->in[G->in];
    double best = INFINITY;
    int rc;

    /* x_mean: the mean |x| per channel over every calibration token */
    for (int64_t c = 0; c < cols; c++) {
        double a = 0.0;
        for (int64_t t = 0; t < st->N; t++)
            a += fabsf(x[t * cols + c]);
        st->xmean[c] = (float)(a / (double)st->N);
    }
    if (st->o->duo_scaling)
        weight_mean(st, L, G, cols);

    rep->best[g] = -1;
    for (int i = 0; i < AWQ_N_GRID; i++) {
        float ratio = (float)i / (float)AWQ_N_GRID;
        float smax = -INFINITY, smin = INFINITY;
        for (int64_t c = 0; c < cols; c++) {
            float s = st->o->duo_scaling
                          ? powf(st->xmean[c], ratio) / (powf(st->wmean[c], 1.0f - ratio) + 1e-4f)
                          : powf(st->xmean[c], ratio);
            s = s < 1e-4f ? 1e-4f : s;
            st->s[c] = s;
            smax = s > smax ? s : smax;
            smin = s < smin ? s : smin;
        }
        float norm = sqrtf(smax * smin);
        for (int64_t c = 0; c < cols; c++) {
            float s = st->s[c] / norm;
            st->s[c] = isfinite(s) ? s : 1.0f;
        }
        /* Q(W diag(s)) / s for every linear of the group, rows over the pool */
        for (int j = 0; j < G->n_lin; j++) {
            const struct model_weight *w = model_layer_weight(L, lin_id[G->lin[j]]);
            struct cand_job cj = { st, st->W[G->lin[j]], st->Wt[j], cols };
            threadpool_for(st->tp, w->rows, 1, cand_rows, &cj);
        }
        double loss;
        if ((rc = group_loss(st, l, g, &loss)) < 0)
            return rc;
        if (i == 0)
            rep->loss0[g] = loss;
        if (loss < best) {
            best = loss;
            rep->best[g] = i;
            memcpy(st->best_s, st->s, (size_t)cols * sizeof(float));
        }
    }
    if (rep->best[g] < 0)
        return diag_set(st->d, ST_FORMAT, "layer %lld: no finite loss in the scale search of %s",
                        (long long)l, G->name);
    rep->loss[g] = best;
    return 0;
}

/* step 3: group g's scale s applied to the weights and the kept inputs */
static void
apply_scale(struct awq_state *st, struct model_layer *L, int g, const float *s)
{
    const struct scale_group *G = &groups[g];
    const int64_t cols = st->in_cols[G->in];

    if (G->norm >= 0) {
        float *nw = st->norm[G->norm == ARCH_W_ATTN_NORM ? 0 : 1];
        for (int64_t c = 0; c < cols; c++)
            nw[c] /= s[c];
    } else {
        const struct model_weight *p = model_layer_weight(L, lin_id[G->prev]);
        float *P = st->W[G->prev];
        /* the last cols rows of the previous linear (AutoAWQ scale_fc_fc) */
        for (int64_t r = p->rows - cols, c = 0; r < p->rows; r++, c++) {
            for (int64_t k = 0; k < p->cols; k++)
                P[r * p->cols + k] /= s[c];
            if (G->prev == AWQ_V && st->bv)
                st->bv[r] /= s[c];
        }
    }
    for (int j = 0; j < G->n_lin; j++) {
        const struct model_weight *w = model_layer_weight(L, lin_id[G->lin[j]]);
        float *W = st->W[G->lin[j]];
        for (int64_t r = 0; r < w->rows; r++)
            for (int64_t c = 0; c < cols; c++)
                W[r * cols + c] *= s[c];
    }
    float *x = st->in[G->in];
    for (int64_t t = 0; t < st->N; t++)
        for (int64_t c = 0; c < cols; c++)
            x[t * cols + c] /= s[c];
}

/* clip candidate rows [r0, r1) of a group gw wide: clip_w clamped to
 * +-org_max * f, fake-quantized, into clip_q */
struct clip_job {
    const struct awq_state *st;
    const float *org_max;
    float f;
    int64_t gw;
};

static void
clip_rows(void *arg, int64_t r0, int64_t r1, int ith)
{
    const struct clip_job *j = arg;
    const struct awq_state *st = j->st;
    const int64_t gw = j->gw;

    (void)ith;
    for (int64_t r = r0; r < r1; r++) {
        float mv = j->org_max[r] * j->f;
        float *row = st->clip_q + r * gw;
        for (int64_t c = 0; c < gw; c++) {
            float v = st->clip_w[r * gw + c];
            row[c] = v < -mv ? -mv : v > mv ? mv : v;
        }
        awq_fake_quant(row, gw, st->o->bits, -1, NULL, NULL, NULL);
    }
}

/* step 4: the clipping search for linear i; the weight is clamped, the kept
 * max |w| per (row, group) go to clip[rows][n_groups] when not NULL */
static void
search_clip(struct awq_state *st, struct model_layer *L, int i, float *clip)
{
    const struct model_weight *w = model_layer_weight(L, lin_id[i]);
    const int64_t rows = w->rows, cols = w->cols;
    const int64_t gs = st->o->group_size > 0 ? st->o->group_size : cols;
    const int64_t ng = (cols + gs - 1) / gs;
    const float *x = st->in[lin_in[i]];
    float *W = st->W[i];
    int64_t step = st->N / AWQ_CLIP_TOKENS > 1 ? st->N / AWQ_CLIP_TOKENS : 1;
    int64_t ns = (st->N + step - 1) / step;

    for (int64_t t = 0; t < ns; t++)
        memcpy(st->clip_x + t * cols, x + t * step * cols, (size_t)cols * sizeof(float));
    for (int64_t g = 0; g < ng; g++) {
        int64_t c0 = g * gs, gw = c0 + gs < cols ? gs : cols - c0;
        float *best_max = st->xmean;    /* [rows] (free here) */
        float *org_max = st->wmean;
        float *min_err = st->s;
        for (int64_t r = 0; r < rows; r++) {
            float mx = 0.0f;
            for (int64_t c = 0; c < gw; c++) {
                float a = fabsf(W[r * cols + c0 + c]);
                st->clip_w[r * gw + c] = W[r * cols + c0 + c];
                mx = a > mx ? a : mx;
            }
            org_max[r] = best_max[r] = mx;
            min_err[r] = 1e9f;
        }
        /* the group-local partial dot products, [ns][rows] */
        mm_f32(st, st->clip_w, rows, gw, st->clip_x + c0, cols, ns, st->clip_org, rows);
        for (int k = 0; k < AWQ_CLIP_STEPS; k++) {
            struct clip_job cj = { st, org_max, (float)(1.0 - (double)k / AWQ_CLIP_GRID), gw };
            threadpool_for(st->tp, rows, 1, clip_rows, &cj);
            mm_f32(st, st->clip_q, rows, gw, st->clip_x + c0, cols, ns, st->clip_cur, rows);
            for (int64_t r = 0; r < rows; r++) {
                double e = 0.0;
                for (int64_t t = 0; t < ns; t++) {
                    double dlt = (double)st->clip_cur[t * rows + r] - st->clip_org[t * rows + r];
                    e += dlt * dlt;
                }
                float err = (float)(e / (double)ns);
                if (err < min_err[r]) {
                    min_err[r] = err;
                    best_max[r] = org_max[r] * cj.f;
                }
            }
        }
        for (int64_t r = 0; r < rows; r++) {
            float mv = best_max[r];
            for (int64_t c = c0; c < c0 + gw; c++) {
                float v = W[r * cols + c];
                W[r * cols + c] = v < -mv ? -mv : v > mv ? mv : v;
            }
            if (clip)
                clip[r * ng + g] = mv;
        }
    }
}

/* qmodel tensor for name: a grid or f32 data (ownership passes) */
static int
add_tensor(struct qmodel *out, int64_t *cap, const char *name, struct qgrid *g, float *f32,
           struct diag *d)
{
    if (out->n == *cap) {
        int64_t nc = *cap ? 2 * *cap : 64;
        struct qmodel_tensor *t = realloc(out->t, (size_t)nc * sizeof *t);
        if (!t)
            goto nomem;
        out->t = t;
        *cap = nc;
    }
    char *nm = strdup(name);
    if (!nm)
        goto nomem;
    out->t[out->n++] = (struct qmodel_tensor){ nm, g, f32 };
    return 0;
nomem:
    if (g) {
        qgrid_free(g);
        free(g);
    }
    free(f32);
    return diag_set(d, ST_NOMEM, "out of memory");
}

/* step 5 and the layer's outputs */
static int
emit_layer(struct awq_state *st, struct model_layer *L, struct qmodel *out, int64_t *cap,
           const bool *scaled)
{
    int rc;

    for (int i = 0; i < AWQ_N_LIN; i++) {
        const struct model_weight *w = model_layer_weight(L, lin_id[i]);
        if (st->o->scale_only) {
            if ((rc = add_tensor(out, cap, w->name, NULL, st->W[i], st->d)) < 0) {
                st->W[i] = NULL;
                return rc;
            }
            st->W[i] = NULL;
            continue;
        }
        struct qgrid *g = calloc(1, sizeof *g);
        if (!g)
            return diag_set(st->d, ST_NOMEM, "out of memory");
        if ((rc = qgrid_alloc(g, st->o->bits, st->o->group_size, false, w->rows, w->cols,
                              st->d)) < 0) {
            free(g);
            return rc;
        }
        float *sc = st->gscale;
        int32_t *zr = st->gzero;
        for (int64_t r = 0; r < w->rows; r++) {
            awq_fake_quant(st->W[i] + r * w->cols, w->cols, st->o->bits, st->o->group_size,
                           g->q + r * w->cols, sc, zr);
            for (int64_t k = 0; k < g->n_groups; k++) {
                g->scale[k * w->rows + r] = sc[k];
                g->zero[k * w->rows + r] = zr[k];
            }
        }
        if ((rc = add_tensor(out, cap, w->name, g, NULL, st->d)) < 0)
            return rc;
    }
    /* the norms that absorbed 1/s, attn_v's bias */
    const enum arch_weight nid[2] = { ARCH_W_ATTN_NORM, ARCH_W_FFN_NORM };
    const bool nsc[2] = { scaled[AWQ_G_QKV], scaled[AWQ_G_GATEUP] };
    for (int k = 0; k < 2; k++)
        if (nsc[k]) {
            if ((rc = add_tensor(out, cap, model_layer_weight(L, nid[k])->name, NULL, st->norm[k],
                                 st->d)) < 0) {
                st->norm[k] = NULL;
                return rc;
            }
            st->norm[k] = NULL;
        }
    if (scaled[AWQ_G_VO] && st->bv) {
        rc = add_tensor(out, cap, L->bv.name, NULL, st->bv, st->d);
        st->bv = NULL;
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void
layer_free(struct awq_state *st)
{
    for (int i = 0; i < AWQ_N_LIN; i++) {
        free(st->W[i]);
        st->W[i] = NULL;
    }
    for (int k = 0; k < 2; k++) {
        free(st->norm[k]);
        st->norm[k] = NULL;
    }
    free(st->bv);
    st->bv = NULL;
}

/* f32 copy of weight w ([rows][cols]) */
static int
copy_f32(struct awq_state *st, const struct model_weight *w, float **out)
{
    *out = malloc((size_t)(w->rows * w->cols) * sizeof(float));
    if (!*out)
        return diag_set(st->d, ST_NOMEM, "out of memory for '%s'", w->name);
    return calib_weight_f32(st->c, w->name, *out, st->d);
}

static int
do_layer(struct awq_state *st, int64_t l, struct qmodel *out, int64_t *cap,
         struct awq_layer_report *rep, int64_t *skipped, char (*why)[160])
{
    struct model_layer *L = &st->m->layers[l];
    bool scaled[AWQ_N_GROUP] = { false };
    float *gs_s[AWQ_N_GROUP] = { NULL };
    int rc = 0;

    /* the layer runs its linears as f32 copies from here on, so that the
     * references and the candidates take the same arithmetic */
    for (int i = 0; i < AWQ_N_LIN; i++)
        if ((rc = copy_f32(st, model_layer_weight(L, lin_id[i]), &st->W[i])) < 0 ||
            (rc = calib_set_weight(st->c, lin_name(st, l, i), st->W[i], st->d)) < 0)
            goto out;
    if ((rc = copy_f32(st, &L->attn_norm, &st->norm[0])) < 0 ||
        (rc = copy_f32(st, &L->ffn_norm, &st->norm[1])) < 0)
        goto out;
    if (L->bv.data) {
        /* (biases are F32 vectors: model.c) */
        if (!(st->bv = malloc((size_t)L->bv.cols * sizeof(float)))) {
            rc = diag_set(st->d, ST_NOMEM, "out of memory");
            goto out;
        }
        memcpy(st->bv, L->bv.data, (size_t)L->bv.cols * sizeof(float));
    }

    if ((rc = capture(st, l)) < 0)
        goto out;

    /* every group searched on the unscaled layer, then all applied (AutoAWQ) */
    for (int g = 0; g < AWQ_N_GROUP; g++) {
        rep->best[g] = -1;
        if (!group_applies(L, g, why[g], sizeof why[g])) {
            skipped[g]++;
            continue;
        }
        int64_t cols = st->in_cols[groups[g].in];
        if ((rc = search_scale(st, l, g, rep)) < 0)
            goto out;
        gs_s[g] = malloc((size_t)cols * sizeof(float));
        if (!gs_s[g]) {
            rc = diag_set(st->d, ST_NOMEM, "out of memory");
            goto out;
        }
        memcpy(gs_s[g], st->best_s, (size_t)cols * sizeof(float));
        scaled[g] = true;
    }
    for (int g = 0; g < AWQ_N_GROUP; g++)
        if (scaled[g]) {
            apply_scale(st, L, g, gs_s[g]);
            rep->scale[g] = gs_s[g];
            rep->n_scale[g] = st->in_cols[groups[g].in];
            gs_s[g] = NULL;
        }
    if (st->o->clip)
        for (int i = 0; i < AWQ_N_LIN; i++) {
            if (i == AWQ_Q || i == AWQ_K)
                continue;   /* "due to qk bmm, it is hard to clip precisely" */
            const struct model_weight *w = model_layer_weight(L, lin_id[i]);
            int64_t gsz = st->o->group_size > 0 ? st->o->group_size : w->cols;
            int64_t ng = (w->cols + gsz - 1) / gsz;
            rep->clip[i] = malloc((size_t)(w->rows * ng) * sizeof(float));
            if (!rep->clip[i]) {
                rc = diag_set(st->d, ST_NOMEM, "out of memory");
                goto out;
            }
            search_clip(st, L, i, rep->clip[i]);
        }
    if ((rc = emit_layer(st, L, out, cap, scaled)) < 0)
        goto out;
    /* the next layer's input: this layer's float output (AWQ propagates
     * un-quantized activations); the layer's weights go back to the file's */
    rc = calib_set_state(st->c, l + 1, st->Xn, st->d);
out:
    for (int g = 0; g < AWQ_N_GROUP; g++)
        free(gs_s[g]);
    layer_free(st);
    return rc;
}

void
awq_report_release(struct awq_report *r)
{
    if (!r)
        return;
    for (int64_t l = 0; l < r->n_layer && r->layers; l++) {
        for (int g = 0; g < AWQ_N_GROUP; g++)
            free(r->layers[l].scale[g]);
        for (int i = 0; i < AWQ_N_LIN; i++)
            free(r->layers[l].clip[i]);
    }
    free(r->layers);
    memset(r, 0, sizeof *r);
}

static float *
falloc(int64_t n, bool *ok)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    *ok = *ok && p;
    return p;
}

int
awq_quantize(struct calib *c, const struct awq_opts *o, struct qmodel *out,
             const struct run_callbacks *cb, struct awq_report *report, struct diag *d)
{
    struct awq_state st;
    struct awq_report rep0 = { 0, NULL };
    struct awq_report *rep = report ? report : &rep0;
    struct model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    int64_t skipped[AWQ_N_GROUP] = { 0 };
    char why[AWQ_N_GROUP][160] = { { 0 } };
    int64_t cap = 0;
    int rc;

    memset(&st, 0, sizeof st);
    memset(rep, 0, sizeof *rep);
    if (o->bits != 2 && o->bits != 3 && o->bits != 4 && o->bits != 8)
        return diag_set(d, ST_RANGE, "AWQ: %d-bit weights not supported (2, 3, 4 or 8)",
                        o->bits);
    if (o->group_size == 0 || o->group_size < -1)
        return diag_set(d, ST_RANGE, "AWQ: group size %lld: need -1 or a positive size",
                        (long long)o->group_size);
    if (calib_tokens(c) < 1)
        return diag_set(d, ST_RANGE, "AWQ: no calibration tokens");
    if (c->layer != 0)
        return diag_set(d, ST_RANGE, "AWQ: the calibration must start at layer 0");
    if (hp->recipe != ARCH_RECIPE_LLAMA && hp->recipe != ARCH_RECIPE_GEMMA3)
        return diag_set(d, ST_RANGE, "AWQ: no scale groups for architecture '%s'",
                        hp->arch_name);
    st.c = c;
    st.m = m;
    st.o = o;
    st.d = d;
    st.N = calib_tokens(c);
    st.E = hp->n_embd;
    st.Eo = hp->n_head * hp->head_dim_v;
    st.F = 0;
    for (int64_t l = 0; l < hp->n_layer; l++)
        st.F = m->layers[l].ffn_down.cols > st.F ? m->layers[l].ffn_down.cols : st.F;
    st.in_cols[0] = st.E;
    st.in_cols[1] = st.Eo;
    st.in_cols[2] = st.E;
    st.in_cols[3] = st.F;

    int64_t maxc = st.E > st.Eo ? st.E : st.Eo;
    maxc = st.F > maxc ? st.F : maxc;
    int64_t maxr = maxc;        /* the linears' rows: q (n_head*hd), gate/up (F), ... */
    for (int64_t l = 0; l < hp->n_layer; l++)
        for (int i = 0; i < AWQ_N_LIN; i++) {
            const struct model_weight *w = model_layer_weight(&m->layers[l], lin_id[i]);
            const struct model_weight *w0 = model_layer_weight(&m->layers[0], lin_id[i]);
            if (w->rows != w0->rows || w->cols != w0->cols)
                return diag_set(d, ST_RANGE, "AWQ: layers of different widths ('%s' is "
                                "%lldx%lld, '%s' %lldx%lld) not supported", w->name,
                                (long long)w->rows, (long long)w->cols, w0->name,
                                (long long)w0->rows, (long long)w0->cols);
            maxr = w->rows > maxr ? w->rows : maxr;
        }
    int64_t step = st.N / AWQ_CLIP_TOKENS > 1 ? st.N / AWQ_CLIP_TOKENS : 1;
    int64_t ns = (st.N + step - 1) / step;
    int64_t orows = c->ctx > MM_ROWS ? c->ctx : MM_ROWS;
    bool ok = true;
    st.Xn = falloc(st.N * st.E, &ok);
    for (int k = 0; k < N_IN; k++)
        st.in[k] = falloc(st.N * st.in_cols[k], &ok);
    st.ref_attn = falloc(st.N * st.E, &ok);
    st.ref_mlp = falloc(st.N * st.E, &ok);
    st.out = falloc(orows * st.E, &ok);
    st.mlp_g = falloc(MM_ROWS * st.F, &ok);
    st.mlp_u = falloc(MM_ROWS * st.F, &ok);
    for (int j = 0; j < 3; j++)
        st.Wt[j] = falloc(maxr * maxc, &ok);
    st.xmean = falloc(maxr > maxc ? maxr : maxc, &ok);
    st.wmean = falloc(maxr > maxc ? maxr : maxc, &ok);
    st.s = falloc(maxr > maxc ? maxr : maxc, &ok);
    st.best_s = falloc(maxc, &ok);
    st.gscale = falloc(maxc, &ok);
    st.gzero = malloc((size_t)maxc * sizeof(int32_t));
    st.wacc = malloc((size_t)maxc * sizeof(double));
    ok = ok && st.gzero && st.wacc;
    st.clip_x = falloc(ns * maxc, &ok);
    st.clip_w = falloc(maxr * maxc, &ok);
    st.clip_q = falloc(maxr * maxc, &ok);
    st.clip_org = falloc(ns * maxr, &ok);
    st.clip_cur = falloc(ns * maxr, &ok);
    rep->layers = calloc((size_t)hp->n_layer, sizeof *rep->layers);
    if (!ok || !rep->layers) {
        rc = diag_set(d, ST_NOMEM, "AWQ: out of memory for %lld calibration tokens",
                      (long long)st.N);
        goto out;
    }
    rep->n_layer = hp->n_layer;
    /* the backend's matmul room for the f32 weights (the layer's and ours) */
    if (m->be->ops->mm_reserve(m->be, GGML_TYPE_F32, orows, maxc) < 0) {
        rc = diag_set(d, ST_NOMEM, "AWQ: out of memory");
        goto out;
    }

    if ((rc = quantize_threadpool(&st.tp, o->n_threads, d)) < 0)
        goto out;

    runcb_progress(cb, "quantizing", 0, hp->n_layer);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        if ((rc = do_layer(&st, l, out, &cap, &rep->layers[l], skipped, why)) < 0) {
            diag_prefix(d, "AWQ layer %lld", (long long)l);
            goto out;
        }
        runcb_progress(cb, "quantizing", l + 1, hp->n_layer);
    }
    for (int g = 0; g < AWQ_N_GROUP; g++)
        if (skipped[g])
            runcb_info(cb, "awq: %s not scaled in %lld of %lld layers: %s", groups[g].name,
                       (long long)skipped[g], (long long)hp->n_layer, why[g]);
    out->prov.method = "awq";
    out->prov.bits = o->bits;
    out->prov.group_size = o->group_size;
    out->prov.sym = false;
    memcpy(out->prov.calib_sha256, c->sha256, sizeof out->prov.calib_sha256);
    out->prov.calib_tokens = st.N;
    rc = 0;
out:
    free(st.Xn);
    for (int k = 0; k < N_IN; k++)
        free(st.in[k]);
    free(st.ref_attn);
    free(st.ref_mlp);
    free(st.out);
    free(st.mlp_g);
    free(st.mlp_u);
    for (int j = 0; j < 3; j++)
        free(st.Wt[j]);
    free(st.xmean);
    free(st.wmean);
    free(st.s);
    free(st.best_s);
    free(st.gscale);
    free(st.gzero);
    free(st.wacc);
    free(st.clip_x);
    free(st.clip_w);
    free(st.clip_q);
    free(st.clip_org);
    free(st.clip_cur);
    threadpool_free(st.tp);
    awq_report_release(&rep0);
    if (rc < 0 && report)
        awq_report_release(report);
    return rc;
}
