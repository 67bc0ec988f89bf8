/*
 * eagle3.c - the EAGLE-3 head's unrolled forward, loss and backward
 * (eagle3.h).
 *
 * Per step s of n rows: e hin h1 xn out on [n][d], x [n][2d], q a [n][qd],
 * p [n_head][n][n + s], g u m [n][ff]; the keys and values of all steps
 * [steps][n][kd] back to back, as attn_ttt reads them.  The backward walks
 * the steps in reverse: step s's keys and values collect the gradients of
 * every later step's attention before they go back through their
 * projections, and step s's output collects those of step s + 1's input.
 * The LM head's logits are formed ce_rows rows at a time in the backward:
 * as many as CE_ELEMS floats per buffer hold (at least CE_ROWS_MIN, at most
 * a step's rows), so that a small draft vocabulary's sgemm calls are not
 * 32 rows each, every one packing the LM heads again.  The target's
 * distribution over the draft vocabulary, which every step reads (step s
 * row r that of row r + s), is formed once per call for all rows where
 * they take at most T_ELEMS floats (a 256-row sequence over up to 16384
 * draft tokens), and per step's chunk otherwise: the same values.
 */
#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "eagle3.h"
#include "status.h"

#define CE_ROWS_MIN 32
#define CE_ELEMS ((int64_t)1 << 20)
#define T_ELEMS ((int64_t)1 << 22)
#define S_MAX EAGLE3_MAX_STEPS

struct eagle3_ws {
    int64_t max_n, n;
    int steps;
    const float *feat;
    float *e[S_MAX], *x[S_MAX], *hin[S_MAX], *q[S_MAX], *p[S_MAX], *a[S_MAX], *h1[S_MAX],
        *xn[S_MAX], *g[S_MAX], *u[S_MAX], *m[S_MAX], *out[S_MAX], *on[S_MAX];
    float *k, *v, *dk, *dv;     /* [steps][n][kd] */
    float *tmp, *d_on, *d_out, *d_h1, *d_m, *d_g, *d_u, *d_xn, *d_a, *d_q, *d_x, *d_hin, *d_next;
    int64_t ce_rows, ce_cap;    /* rows of the logits formed at a time; the buffers' */
    float *z, *t, *dz, *row;    /* [ce_rows][n_draft] x3, [ce_rows] */
    float *tall;                /* NULL, or [max_n][n_draft]: the target's distribution */
    bool once;                  /* tall used (eagle3_ws_target_once) */
    int32_t *targ;              /* [max_n]: the target's argmax (tall's, or a chunk's) */
    float *cs;                  /* [max_n + steps][n_rot] RoPE angles */
    float *scratch;             /* [max_n][max_n + steps] */
    float *block;
};

/* the next len floats of base (64-byte rows), NULL while counting */
static float *
take(float *base, int64_t *off, int64_t len)
{
    float *p = base ? base + *off : NULL;
    *off += (len + 15) / 16 * 16;
    return p;
}

/* carves the work buffers out of base (NULL: counts them); returns floats */
static int64_t
layout(struct eagle3_ws *ws, float *base, const struct eagle_config *c, int64_t n, int S)
{
    int64_t d = c->d, qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim;
    int64_t ff = c->n_ff, V = c->n_draft, off = 0;
#define TAKE(ptr, len) ((ptr) = take(base, &off, (len)))
    for (int s = 0; s < S; s++) {
        TAKE(ws->e[s], n * d), TAKE(ws->x[s], n * 2 * d), TAKE(ws->hin[s], n * d);
        TAKE(ws->q[s], n * qd), TAKE(ws->p[s], c->n_head * n * (n + s)), TAKE(ws->a[s], n * qd);
        TAKE(ws->h1[s], n * d), TAKE(ws->xn[s], n * d), TAKE(ws->g[s], n * ff);
        TAKE(ws->u[s], n * ff), TAKE(ws->m[s], n * ff), TAKE(ws->out[s], n * d);
        TAKE(ws->on[s], n * d);
    }
    TAKE(ws->k, S * n * kd), TAKE(ws->v, S * n * kd), TAKE(ws->dk, S * n * kd);
    TAKE(ws->dv, S * n * kd), TAKE(ws->tmp, n * d), TAKE(ws->d_on, n * d);
    TAKE(ws->d_out, n * d), TAKE(ws->d_h1, n * d), TAKE(ws->d_m, n * ff), TAKE(ws->d_g, n * ff);
    TAKE(ws->d_u, n * ff), TAKE(ws->d_xn, n * d), TAKE(ws->d_a, n * qd), TAKE(ws->d_q, n * qd);
    TAKE(ws->d_x, n * 2 * d), TAKE(ws->d_hin, n * d), TAKE(ws->d_next, n * d);
    int64_t cr = CE_ELEMS / V < CE_ROWS_MIN ? CE_ROWS_MIN : CE_ELEMS / V;
    ws->ce_rows = ws->ce_cap = cr < n ? cr : n;
    TAKE(ws->z, ws->ce_rows * V), TAKE(ws->t, ws->ce_rows * V), TAKE(ws->dz, ws->ce_rows * V);
    TAKE(ws->row, ws->ce_rows), TAKE(ws->cs, (n + S) * c->rope.n_rot);
    ws->targ = (int32_t *)take(base, &off, n);    /* (as many bytes as n floats) */
    if (n * V <= T_ELEMS)
        TAKE(ws->tall, n * V);
    else
        ws->tall = NULL;
    TAKE(ws->scratch, n * (n + S));
#undef TAKE
    return off;
}

size_t
eagle3_ws_bytes(const struct eagle_config *c, int64_t max_n, int steps)
{
    struct eagle3_ws ws;
    return sizeof ws + (size_t)layout(&ws, NULL, c, max_n, steps) * sizeof(float);
}

int
eagle3_ws_new(struct eagle3_ws **out, const struct eagle_config *c, int64_t max_n, int steps)
{
    struct eagle3_ws *ws;

    *out = NULL;
    if (c->arch != EAGLE_ARCH_3 || max_n < 1 || max_n > (1 << 16) || steps < 1 ||
        steps > S_MAX || c->n_draft < 1)
        return -ST_RANGE;
    if (!(ws = calloc(1, sizeof *ws)))
        return -ST_NOMEM;
    int64_t total = layout(ws, NULL, c, max_n, steps);
    if (!(ws->block = aligned_alloc(64, (size_t)total * sizeof(float)))) {
        free(ws);
        return -ST_NOMEM;
    }
    layout(ws, ws->block, c, max_n, steps);
    ws->once = ws->tall != NULL;
    ws->max_n = max_n;
    ws->steps = steps;
    struct rope_params rp = c->rope;
    rp.freq_factors = NULL;
    for (int64_t i = 0; i < max_n + steps; i++)
        ops_rope_angles(ws->cs + i * c->rope.n_rot, (int32_t)i, &rp);
    *out = ws;
    return 0;
}

int64_t
eagle3_ws_ce_rows(struct eagle3_ws *ws, int64_t rows)
{
    ws->ce_rows = rows < 1 ? 1 : rows > ws->ce_cap ? ws->ce_cap : rows;
    return ws->ce_rows;
}

bool
eagle3_ws_target_once(struct eagle3_ws *ws, bool on)
{
    ws->once = on && ws->tall;
    return ws->once;
}

void
eagle3_ws_free(struct eagle3_ws *ws)
{
    if (!ws)
        return;
    free(ws->block);
    free(ws);
}

/* dst [n][2d] half (0 or 1) = src [n][d] */
static void
put_half(float *dst, const float *src, int64_t n, int64_t d, int half)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * 2 * d + half * d, src + i * d, (size_t)d * sizeof(float));
}

static void
get_half(float *dst, const float *src, int64_t n, int64_t d, int half)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * d, src + i * 2 * d + half * d, (size_t)d * sizeof(float));
}

void
eagle3_forward(const struct backend_backward_ops *bw, const struct eagle_head *h,
               const struct eagle_frozen *fz, struct eagle3_ws *ws, const int32_t *next,
               const float *feat, int64_t n)
{
    const struct eagle_config *c = &h->c;
    int64_t d = c->d, qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim, ff = c->n_ff;
    int64_t nr = c->rope.n_rot;
    float scale = 1.0f / sqrtf((float)c->head_dim);

    assert(n >= 1 && n <= ws->max_n);
    ws->n = n;
    ws->feat = feat;
    /* the keys of all steps back to back for this n */
    for (int s = 0; s < ws->steps; s++) {
        float *ks = ws->k + s * n * kd, *vs = ws->v + s * n * kd;
        for (int64_t i = 0; i < n; i++) {
            int64_t j = i + s < n ? i + s : n - 1;      /* past the end: no loss */
            memcpy(ws->e[s] + i * d, fz->embd + (int64_t)next[j] * d, (size_t)d * sizeof(float));
        }
        bw->rmsnorm_fwd(ws->tmp, ws->e[s], h->t[EAGLE3_IN_NORM], n, d, c->eps);
        put_half(ws->x[s], ws->tmp, n, d, 0);
        if (s == 0)
            bw->matmul_fwd(ws->hin[0], feat, h->t[EAGLE3_FC], NULL, n, d, 3 * d);
        else
            memcpy(ws->hin[s], ws->out[s - 1], (size_t)(n * d) * sizeof(float));
        bw->rmsnorm_fwd(ws->tmp, ws->hin[s], h->t[EAGLE3_HID_NORM], n, d, c->eps);
        put_half(ws->x[s], ws->tmp, n, d, 1);
        bw->matmul_fwd(ws->q[s], ws->x[s], h->t[EAGLE3_WQ], NULL, n, qd, 2 * d);
        bw->matmul_fwd(ks, ws->x[s], h->t[EAGLE3_WK], NULL, n, kd, 2 * d);
        bw->matmul_fwd(vs, ws->x[s], h->t[EAGLE3_WV], NULL, n, kd, 2 * d);
        bw->rope_fwd(ws->q[s], n, c->n_head, c->head_dim, ws->cs + s * nr, nr, c->rope.style);
        bw->rope_fwd(ks, n, c->n_head_kv, c->head_dim, ws->cs + s * nr, nr, c->rope.style);
        bw->attn_ttt_fwd(ws->a[s], ws->p[s], ws->q[s], ws->k, ws->v, n, s, c->n_head,
                         c->n_head_kv, c->head_dim, scale);
        bw->matmul_fwd(ws->h1[s], ws->a[s], h->t[EAGLE3_WO], NULL, n, d, qd);
        for (int64_t i = 0; i < n * d; i++)
            ws->h1[s][i] += ws->hin[s][i];
        bw->rmsnorm_fwd(ws->xn[s], ws->h1[s], h->t[EAGLE3_FFN_NORM], n, d, c->eps);
        bw->matmul_fwd(ws->g[s], ws->xn[s], h->t[EAGLE3_GATE], NULL, n, ff, d);
        bw->matmul_fwd(ws->u[s], ws->xn[s], h->t[EAGLE3_UP], NULL, n, ff, d);
        bw->silu_mul_fwd(ws->m[s], ws->g[s], ws->u[s], n * ff);
        bw->matmul_fwd(ws->out[s], ws->m[s], h->t[EAGLE3_DOWN], NULL, n, d, ff);
        for (int64_t i = 0; i < n * d; i++)
            ws->out[s][i] += ws->h1[s][i];
        bw->rmsnorm_fwd(ws->on[s], ws->out[s], h->t[EAGLE3_OUT_NORM], n, d, c->eps);
    }
}

const float *
eagle3_ws_out(const struct eagle3_ws *ws)
{
    return ws->out[0];
}

const float *
eagle3_ws_normed(const struct eagle3_ws *ws, int s)
{
    assert(s >= 0 && s < ws->steps);
    return ws->on[s];
}

static float *
grad_of(const struct eagle_head *h, float *grad, int i)
{
    return grad + (h->t[i] - h->param);
}

/* the target's distribution over the draft vocabulary of rows x[0 ..
 * rows) (the final features) into t [rows][V], and its argmax into arg */
static void
target_rows(const struct backend_backward_ops *bw, const struct eagle_frozen *fz, float *t,
            int32_t *arg, const float *x, int64_t rows, int64_t V, int64_t d)
{
    bw->matmul_fwd(t, x, fz->lm, NULL, rows, V, d);
    for (int64_t r = 0; r < rows; r++) {
        arg[r] = (int32_t)eagle_argmax(t + r * V, V);
        ops_softmax_ref(t + r * V, V);
    }
}

/* the CE of step s's rows (added to *cls, weighted w / n) and, with
 * grad, its gradient (weighted gw / n) into d_on and the LM head's; the
 * target's distribution from tall (row r0 + r + s) when formed, else
 * formed here per chunk */
static void
step_ce(const struct backend_backward_ops *bw, const struct eagle_head *h,
        const struct eagle_frozen *fz, struct eagle3_ws *ws, const float *tgt, bool tall,
        const uint8_t *keep, const uint8_t *mask, int s, float w, float gw, float *grad,
        double *cls, int64_t *correct)
{
    int64_t n = ws->n, d = h->c.d, V = h->c.n_draft, valid = n - s;
    const float *lm = h->t[EAGLE3_LM];

    for (int64_t r0 = 0; r0 < valid; r0 += ws->ce_rows) {
        int64_t rows = valid - r0 < ws->ce_rows ? valid - r0 : ws->ce_rows;
        const float *o = ws->on[s] + r0 * d;
        /* rows none of which counts (a prompt's): nothing to add, and at
         * s == 0 the same rows are the ones the agreement counts */
        if (!eagle_any_counted(keep ? keep + r0 + s : NULL, mask ? mask + r0 + s : NULL, rows))
            continue;
        bw->matmul_fwd(ws->z, o, lm, NULL, rows, V, d);
        const float *t = tall ? ws->tall + (r0 + s) * V : ws->t;
        const int32_t *arg = tall ? ws->targ + r0 + s : ws->targ;
        if (!tall)
            target_rows(bw, fz, ws->t, ws->targ, tgt + (r0 + s) * d, rows, V, d);
        if (s == 0)
            for (int64_t r = 0; r < rows; r++)
                if ((!mask || mask[r0 + r]) && (!keep || keep[r0 + r]))
                    *correct += eagle_argmax(ws->z + r * V, V) == (int64_t)arg[r];
        bw->xent_fwd(ws->row, ws->z, t, rows, V);
        for (int64_t r = 0; r < rows; r++)
            if ((!keep || keep[r0 + r + s]) && (!mask || mask[r0 + r + s]))
                *cls += (double)w * ws->row[r] / (double)n;
        if (!grad)
            continue;
        for (int64_t r = 0; r < rows; r++)
            ws->row[r] = (!keep || keep[r0 + r + s]) && (!mask || mask[r0 + r + s])
                             ? gw / (float)n : 0.0f;
        memset(ws->dz, 0, (size_t)(rows * V) * sizeof(float));
        bw->xent_bwd(ws->dz, ws->z, t, ws->row, rows, V);
        bw->matmul_bwd(ws->d_on + r0 * d, grad_of(h, grad, EAGLE3_LM), NULL, ws->dz, o, lm, rows,
                       V, d);
    }
}

void
eagle3_loss_backward(const struct backend_backward_ops *bw, const struct eagle_head *h,
                     const struct eagle_frozen *fz, struct eagle3_ws *ws, const float *tgt,
                     const uint8_t *keep, const uint8_t *mask, float scale, float *grad,
                     struct eagle_loss *loss)
{
    const struct eagle_config *c = &h->c;
    int64_t n = ws->n, d = c->d, ff = c->n_ff, nr = c->rope.n_rot;
    int64_t qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim;
    size_t nd = (size_t)(n * d) * sizeof(float);
    float sc = 1.0f / sqrtf((float)c->head_dim);
    double cls = 0;
    int64_t correct = 0;

    assert(fz->n_lm == c->n_draft);
    /* the target's distribution of every row at once, which each step
     * reads shifted by one more row */
    bool tall = ws->once && eagle_any_counted(keep, mask, n);
    if (tall)
        target_rows(bw, fz, ws->tall, ws->targ, tgt, n, c->n_draft, d);
    if (grad) {
        memset(ws->dk, 0, (size_t)(ws->steps * n * kd) * sizeof(float));
        memset(ws->dv, 0, (size_t)(ws->steps * n * kd) * sizeof(float));
        memset(ws->d_next, 0, nd);
    }
    for (int s = ws->steps - 1; s >= 0; s--) {
        float w = (float)pow(EAGLE3_STEP_W, s);
        float *dks = ws->dk + s * n * kd, *dvs = ws->dv + s * n * kd;
        if (grad)
            memset(ws->d_on, 0, nd);
        step_ce(bw, h, fz, ws, tgt, tall, keep, mask, s, w, w * scale, grad, &cls, &correct);
        if (!grad)
            continue;
        /* on = rmsnorm(out): out also feeds step s + 1 (d_next) */
        memcpy(ws->d_out, ws->d_next, nd);
        bw->rmsnorm_bwd(ws->d_out, grad_of(h, grad, EAGLE3_OUT_NORM), ws->d_on, ws->out[s],
                        h->t[EAGLE3_OUT_NORM], n, d, c->eps);
        /* out = h1 + down(m) */
        memcpy(ws->d_h1, ws->d_out, nd);
        memset(ws->d_m, 0, (size_t)(n * ff) * sizeof(float));
        bw->matmul_bwd(ws->d_m, grad_of(h, grad, EAGLE3_DOWN), NULL, ws->d_out, ws->m[s],
                       h->t[EAGLE3_DOWN], n, d, ff);
        memset(ws->d_g, 0, (size_t)(n * ff) * sizeof(float));
        memset(ws->d_u, 0, (size_t)(n * ff) * sizeof(float));
        bw->silu_mul_bwd(ws->d_g, ws->d_u, ws->d_m, ws->g[s], ws->u[s], n * ff);
        memset(ws->d_xn, 0, nd);
        bw->matmul_bwd(ws->d_xn, grad_of(h, grad, EAGLE3_GATE), NULL, ws->d_g, ws->xn[s],
                       h->t[EAGLE3_GATE], n, ff, d);
        bw->matmul_bwd(ws->d_xn, grad_of(h, grad, EAGLE3_UP), NULL, ws->d_u, ws->xn[s],
                       h->t[EAGLE3_UP], n, ff, d);
        bw->rmsnorm_bwd(ws->d_h1, grad_of(h, grad, EAGLE3_FFN_NORM), ws->d_xn, ws->h1[s],
                        h->t[EAGLE3_FFN_NORM], n, d, c->eps);
        /* h1 = hin + a Wo^T */
        memcpy(ws->d_hin, ws->d_h1, nd);
        memset(ws->d_a, 0, (size_t)(n * qd) * sizeof(float));
        bw->matmul_bwd(ws->d_a, grad_of(h, grad, EAGLE3_WO), NULL, ws->d_h1, ws->a[s],
                       h->t[EAGLE3_WO], n, d, qd);
        memset(ws->d_q, 0, (size_t)(n * qd) * sizeof(float));
        bw->attn_ttt_bwd(ws->d_q, ws->dk, ws->dv, ws->d_a, ws->p[s], ws->q[s], ws->k, ws->v, n,
                         s, c->n_head, c->n_head_kv, c->head_dim, sc, ws->scratch);
        /* every later step has added its part to step s's keys by now */
        bw->rope_bwd(ws->d_q, n, c->n_head, c->head_dim, ws->cs + s * nr, nr, c->rope.style);
        bw->rope_bwd(dks, n, c->n_head_kv, c->head_dim, ws->cs + s * nr, nr, c->rope.style);
        memset(ws->d_x, 0, 2 * nd);
        bw->matmul_bwd(ws->d_x, grad_of(h, grad, EAGLE3_WQ), NULL, ws->d_q, ws->x[s],
                       h->t[EAGLE3_WQ], n, qd, 2 * d);
        bw->matmul_bwd(ws->d_x, grad_of(h, grad, EAGLE3_WK), NULL, dks, ws->x[s],
                       h->t[EAGLE3_WK], n, kd, 2 * d);
        bw->matmul_bwd(ws->d_x, grad_of(h, grad, EAGLE3_WV), NULL, dvs, ws->x[s],
                       h->t[EAGLE3_WV], n, kd, 2 * d);
        /* x = [rmsnorm(e) w_in ; rmsnorm(hin) w_hid]; e is frozen */
        get_half(ws->tmp, ws->d_x, n, d, 0);
        bw->rmsnorm_bwd(NULL, grad_of(h, grad, EAGLE3_IN_NORM), ws->tmp, ws->e[s],
                        h->t[EAGLE3_IN_NORM], n, d, c->eps);
        get_half(ws->tmp, ws->d_x, n, d, 1);
        bw->rmsnorm_bwd(ws->d_hin, grad_of(h, grad, EAGLE3_HID_NORM), ws->tmp, ws->hin[s],
                        h->t[EAGLE3_HID_NORM], n, d, c->eps);
        if (s > 0)
            memcpy(ws->d_next, ws->d_hin, nd);
        else
            bw->matmul_bwd(NULL, grad_of(h, grad, EAGLE3_FC), NULL, ws->d_hin, ws->feat,
                           h->t[EAGLE3_FC], n, d, 3 * d);
    }
    if (loss) {
        loss->reg = 0;
        loss->cls = loss->total = cls;
        loss->n = 0;
        for (int64_t i = 0; i < n; i++)
            loss->n += !mask || mask[i];
        loss->correct = correct;
    }
}
