/*
 * eagle.c - the EAGLE-1 head's forward, losses and backward (eagle.h).
 *
 * Shapes per sequence of n positions: x [n][2d], h0 h1 xn out [n][d], q
 * [n][qd], k v [n][kd], p [n_head][n][n], a [n][qd], g u m [n][ff], with qd
 * = n_head * head_dim and kd = n_head_kv * head_dim.  The LM head's logits
 * ([n][n_vocab], the largest tensor by far) are never held for the whole
 * sequence: the CE term is computed and differentiated CE_ROWS rows at a
 * time.
 */
#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "rng.h"
#include "status.h"

#define CE_ROWS 32

struct eagle_ws {
    int64_t max_n, n;
    float *x, *h0, *q, *k, *v, *p, *a, *h1, *xn, *g, *u, *m, *out;
    float *d_out, *d_m, *d_g, *d_u, *d_xn, *d_h1, *d_a, *d_q, *d_k, *d_v, *d_h0;
    float *z, *t, *dz, *row;    /* [CE_ROWS][n_vocab] x3, [CE_ROWS] */
    float *cs;                  /* [max_n][n_rot] RoPE angles of positions 0.. */
    float *scratch;             /* [max_n][max_n] */
    float *block;               /* the one allocation all of the above point into */
};

static const char *const names[EAGLE_N_TENSORS] = {
    "fc.weight", "fc.bias", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
    "blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight",
    "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
};

const char *
eagle_tensor_name(int i)
{
    return i >= 0 && i < EAGLE_N_TENSORS ? names[i] : NULL;
}

static const char *const names3[EAGLE3_N_TENSORS] = {
    "fc.weight", "blk.0.attn_norm.weight", "blk.0.hidden_norm.weight", "blk.0.attn_q.weight",
    "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight",
    "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
    "blk.0.ffn_down.weight", "output_norm.weight", "output.weight",
};

const char *
eagle3_tensor_name(int i)
{
    return i >= 0 && i < EAGLE3_N_TENSORS ? names3[i] : NULL;
}

void
eagle3_shapes(const struct eagle_config *c, int64_t rows[], int64_t cols[])
{
    int64_t d = c->d, qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim;
    int64_t r[EAGLE3_N_TENSORS] = { d, 1, 1, qd, kd, kd, d, 1, c->n_ff, c->n_ff, d, 1,
                                    c->n_draft };
    int64_t k[EAGLE3_N_TENSORS] = { 3 * d, d, d, 2 * d, 2 * d, 2 * d, qd, d, d, d, c->n_ff, d,
                                    d };
    memcpy(rows, r, sizeof r);
    memcpy(cols, k, sizeof k);
}

const char *
eagle_head_tensor_name(const struct eagle_head *h, int i)
{
    return h->c.arch == EAGLE_ARCH_3 ? eagle3_tensor_name(i) : eagle_tensor_name(i);
}

static void
shapes(const struct eagle_config *c, int64_t rows[], int64_t cols[])
{
    int64_t d = c->d, qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim;
    int64_t r[EAGLE_N_TENSORS] = { d, 1, qd, kd, kd, d, 1, c->n_ff, c->n_ff, d };
    int64_t k[EAGLE_N_TENSORS] = { 2 * d, d, d, d, d, qd, d, d, d, c->n_ff };
    memcpy(rows, r, sizeof r);
    memcpy(cols, k, sizeof k);
}

static int
config_ok(const struct eagle_config *c)
{
    if (c->arch != 0 && c->arch != EAGLE_ARCH_1 && c->arch != EAGLE_ARCH_3)
        return 0;
    if (c->arch == EAGLE_ARCH_3 && (c->n_draft < 1 || c->n_draft > c->n_vocab))
        return 0;
    return c->d > 0 && c->n_head > 0 && c->n_head_kv > 0 && c->n_head % c->n_head_kv == 0 &&
           c->head_dim > 0 && c->n_ff > 0 && c->n_vocab > 0 && c->rope.n_rot > 0 &&
           c->rope.n_rot % 2 == 0 && c->rope.n_rot <= c->head_dim && c->d <= (1 << 16) &&
           c->n_ff <= (1 << 18) && c->n_head * c->head_dim <= (1 << 16);
}

int
eagle_head_init(struct eagle_head *h, const struct eagle_config *c, uint64_t seed)
{
    struct rng r;

    memset(h, 0, sizeof *h);
    if (!config_ok(c))
        return -ST_RANGE;
    h->c = *c;
    h->c.rope.freq_factors = NULL;
    if (h->c.arch == 0)
        h->c.arch = EAGLE_ARCH_1;
    h->n_tensors = c->arch == EAGLE_ARCH_3 ? EAGLE3_N_TENSORS : EAGLE_N_TENSORS;
    if (c->arch == EAGLE_ARCH_3)
        eagle3_shapes(c, h->rows, h->cols);
    else
        shapes(c, h->rows, h->cols);
    for (int i = 0; i < h->n_tensors; i++)
        h->n_param += h->rows[i] * h->cols[i];
    if (!(h->param = malloc((size_t)h->n_param * sizeof(float))))
        return -ST_NOMEM;
    rng_seed(&r, seed);
    float *p = h->param;
    for (int i = 0; i < h->n_tensors; i++) {
        int64_t len = h->rows[i] * h->cols[i];
        /* fan_in: the weight's cols; a bias takes its weight's; row vectors
         * other than EAGLE-1's bias are norm weights */
        bool bias = c->arch != EAGLE_ARCH_3 && i == EAGLE_FC_B;
        bool norm = h->rows[i] == 1 && !bias;
        double bound = 1.0 / sqrt((double)(bias ? 2 * c->d : h->cols[i]));
        h->t[i] = p;
        for (int64_t j = 0; j < len; j++)
            p[j] = norm ? 1.0f : (float)((2.0 * rng_uniform(&r) - 1.0) * bound);
        p += len;
    }
    return 0;
}

void
eagle_head_release(struct eagle_head *h)
{
    free(h->param);
    memset(h, 0, sizeof *h);
}

/* the float counts of the work buffers, in struct order */
static int64_t
ws_floats(const struct eagle_config *c, int64_t n, int64_t len[27])
{
    int64_t d = c->d, qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim;
    int64_t ff = c->n_ff, pn = c->n_head * n * n;
    int64_t l[27] = { n * 2 * d, n * d, n * qd, n * kd, n * kd, pn, n * qd, n * d, n * d,
                      n * ff, n * ff, n * ff, n * d,
                      n * d, n * ff, n * ff, n * ff, n * d, n * d, n * qd, n * qd, n * kd, n * kd,
                      n * d, CE_ROWS * c->n_vocab, CE_ROWS * c->n_vocab, CE_ROWS * c->n_vocab };
    int64_t s = 0;
    for (int i = 0; i < 27; i++)
        s += len[i] = (l[i] + 15) / 16 * 16;    /* 64-byte rows for every buffer */
    return s + CE_ROWS + n * c->rope.n_rot + n * n + 48;
}

size_t
eagle_ws_bytes(const struct eagle_config *c, int64_t max_n)
{
    int64_t len[27];
    return sizeof(struct eagle_ws) + (size_t)ws_floats(c, max_n, len) * sizeof(float);
}

int
eagle_ws_new(struct eagle_ws **out, const struct eagle_config *c, int64_t max_n)
{
    struct eagle_ws *ws;
    int64_t len[27];

    *out = NULL;
    if (!config_ok(c) || max_n < 1 || max_n > (1 << 16))
        return -ST_RANGE;
    int64_t total = ws_floats(c, max_n, len);
    if (!(ws = calloc(1, sizeof *ws)))
        return -ST_NOMEM;
    if (!(ws->block = aligned_alloc(64, (size_t)total * sizeof(float)))) {
        free(ws);
        return -ST_NOMEM;
    }
    float **bufs[27] = { &ws->x, &ws->h0, &ws->q, &ws->k, &ws->v, &ws->p, &ws->a, &ws->h1,
                         &ws->xn, &ws->g, &ws->u, &ws->m, &ws->out, &ws->d_out, &ws->d_m,
                         &ws->d_g, &ws->d_u, &ws->d_xn, &ws->d_h1, &ws->d_a, &ws->d_q, &ws->d_k,
                         &ws->d_v, &ws->d_h0, &ws->z, &ws->t, &ws->dz };
    float *p = ws->block;
    for (int i = 0; i < 27; i++) {
        *bufs[i] = p;
        p += len[i];
    }
    ws->row = p;
    p += CE_ROWS;
    ws->cs = p;
    p += max_n * c->rope.n_rot;
    ws->scratch = p;
    ws->max_n = max_n;
    struct rope_params rp = c->rope;
    rp.freq_factors = NULL;
    for (int64_t i = 0; i < max_n; i++)
        ops_rope_angles(ws->cs + i * c->rope.n_rot, (int32_t)i, &rp);
    *out = ws;
    return 0;
}

void
eagle_ws_free(struct eagle_ws *ws)
{
    if (!ws)
        return;
    free(ws->block);
    free(ws);
}

void
eagle_forward(const struct backend_backward_ops *bw, const struct eagle_head *h,
              const struct eagle_frozen *fz, struct eagle_ws *ws, const int32_t *next,
              const float *feat, int64_t n, float *out)
{
    const struct eagle_config *c = &h->c;
    int64_t d = c->d, qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim, ff = c->n_ff;

    ws->n = n;
    for (int64_t i = 0; i < n; i++) {
        memcpy(ws->x + i * 2 * d, fz->embd + (int64_t)next[i] * d, (size_t)d * sizeof(float));
        memcpy(ws->x + i * 2 * d + d, feat + i * d, (size_t)d * sizeof(float));
    }
    bw->matmul_fwd(ws->h0, ws->x, h->t[EAGLE_FC_W], h->t[EAGLE_FC_B], n, d, 2 * d);
    bw->matmul_fwd(ws->q, ws->h0, h->t[EAGLE_WQ], NULL, n, qd, d);
    bw->matmul_fwd(ws->k, ws->h0, h->t[EAGLE_WK], NULL, n, kd, d);
    bw->matmul_fwd(ws->v, ws->h0, h->t[EAGLE_WV], NULL, n, kd, d);
    bw->rope_fwd(ws->q, n, c->n_head, c->head_dim, ws->cs, c->rope.n_rot, c->rope.style);
    bw->rope_fwd(ws->k, n, c->n_head_kv, c->head_dim, ws->cs, c->rope.n_rot, c->rope.style);
    bw->attn_fwd(ws->a, ws->p, ws->q, ws->k, ws->v, n, c->n_head, c->n_head_kv, c->head_dim,
                 1.0f / sqrtf((float)c->head_dim));
    bw->matmul_fwd(ws->h1, ws->a, h->t[EAGLE_WO], NULL, n, d, qd);
    for (int64_t i = 0; i < n * d; i++)
        ws->h1[i] += ws->h0[i];
    bw->rmsnorm_fwd(ws->xn, ws->h1, h->t[EAGLE_NORM], n, d, c->eps);
    bw->matmul_fwd(ws->g, ws->xn, h->t[EAGLE_GATE], NULL, n, ff, d);
    bw->matmul_fwd(ws->u, ws->xn, h->t[EAGLE_UP], NULL, n, ff, d);
    bw->silu_mul_fwd(ws->m, ws->g, ws->u, n * ff);
    bw->matmul_fwd(ws->out, ws->m, h->t[EAGLE_DOWN], NULL, n, d, ff);
    for (int64_t i = 0; i < n * d; i++)
        ws->out[i] += ws->h1[i];
    if (out)
        memcpy(out, ws->out, (size_t)(n * d) * sizeof(float));
}

const float *
eagle_ws_out(const struct eagle_ws *ws)
{
    return ws->out;
}

int64_t
eagle_argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

int
eagle_any_counted(const uint8_t *a, const uint8_t *b, int64_t n)
{
    for (int64_t r = 0; r < n; r++)
        if ((!a || a[r]) && (!b || b[r]))
            return 1;
    return 0;
}

static float *
grad_of(const struct eagle_head *h, float *grad, int i)
{
    return grad ? grad + (h->t[i] - h->param) : NULL;
}

void
eagle_loss_backward(const struct backend_backward_ops *bw, const struct eagle_head *h,
                    const struct eagle_frozen *fz, struct eagle_ws *ws, const float *target,
                    const uint8_t *mask, float w_cls, float scale, float *grad,
                    struct eagle_loss *loss)
{
    const struct eagle_config *c = &h->c;
    int64_t n = ws->n, d = c->d, V = fz->n_lm, ff = c->n_ff, cnt = 0;
    int64_t qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim;
    double reg = 0, cls = 0;
    int64_t correct = 0;

    assert(V >= 1 && V <= c->n_vocab);

    for (int64_t i = 0; i < n; i++)
        cnt += !mask || mask[i];
    float inv_n = cnt ? 1.0f / (float)cnt : 0.0f;
    if (grad)
        memset(ws->d_out, 0, (size_t)(n * d) * sizeof(float));
    /* SmoothL1, per row, mean over the rows counted */
    for (int64_t r0 = 0; r0 < n && cnt; r0 += CE_ROWS) {
        int64_t rows = n - r0 < CE_ROWS ? n - r0 : CE_ROWS;
        const float *o = ws->out + r0 * d, *tg = target + r0 * d;
        const uint8_t *mk = mask ? mask + r0 : NULL;
        if (!eagle_any_counted(mk, NULL, rows))
            continue;           /* a prompt's rows: nothing to add */
        bw->smoothl1_fwd(ws->row, o, tg, rows, d);
        for (int64_t r = 0; r < rows; r++)
            reg += !mk || mk[r] ? ws->row[r] : 0;
        /* soft CE against softmax(LM(target)) */
        bw->matmul_fwd(ws->t, tg, fz->lm, NULL, rows, V, d);
        bw->matmul_fwd(ws->z, o, fz->lm, NULL, rows, V, d);
        for (int64_t r = 0; r < rows; r++)
            correct += (!mk || mk[r]) &&
                       eagle_argmax(ws->z + r * V, V) == eagle_argmax(ws->t + r * V, V);
        for (int64_t r = 0; r < rows; r++)
            ops_softmax_ref(ws->t + r * V, V);
        bw->xent_fwd(ws->row, ws->z, ws->t, rows, V);
        for (int64_t r = 0; r < rows; r++)
            cls += !mk || mk[r] ? ws->row[r] : 0;
        if (!grad)
            continue;
        for (int64_t r = 0; r < rows; r++)
            ws->row[r] = !mk || mk[r] ? scale * inv_n : 0.0f;
        bw->smoothl1_bwd(ws->d_out + r0 * d, o, tg, ws->row, rows, d);
        for (int64_t r = 0; r < rows; r++)
            ws->row[r] = !mk || mk[r] ? scale * w_cls * inv_n : 0.0f;
        memset(ws->dz, 0, (size_t)(rows * V) * sizeof(float));
        bw->xent_bwd(ws->dz, ws->z, ws->t, ws->row, rows, V);
        bw->matmul_bwd(ws->d_out + r0 * d, NULL, NULL, ws->dz, o, fz->lm, rows, V, d);
    }
    if (loss) {
        loss->reg = cnt ? reg / (double)cnt : 0;
        loss->cls = cnt ? cls / (double)cnt : 0;
        loss->total = loss->reg + w_cls * loss->cls;
        loss->n = cnt;
        loss->correct = correct;
    }
    if (!grad || !cnt)
        return;

    /* out = h1 + down(m): d_h1 = d_out + through the MLP */
    memcpy(ws->d_h1, ws->d_out, (size_t)(n * d) * sizeof(float));
    memset(ws->d_m, 0, (size_t)(n * ff) * sizeof(float));
    bw->matmul_bwd(ws->d_m, grad_of(h, grad, EAGLE_DOWN), NULL, ws->d_out, ws->m, h->t[EAGLE_DOWN],
                   n, d, ff);
    memset(ws->d_g, 0, (size_t)(n * ff) * sizeof(float));
    memset(ws->d_u, 0, (size_t)(n * ff) * sizeof(float));
    bw->silu_mul_bwd(ws->d_g, ws->d_u, ws->d_m, ws->g, ws->u, n * ff);
    memset(ws->d_xn, 0, (size_t)(n * d) * sizeof(float));
    bw->matmul_bwd(ws->d_xn, grad_of(h, grad, EAGLE_GATE), NULL, ws->d_g, ws->xn,
                   h->t[EAGLE_GATE], n, ff, d);
    bw->matmul_bwd(ws->d_xn, grad_of(h, grad, EAGLE_UP), NULL, ws->d_u, ws->xn, h->t[EAGLE_UP], n,
                   ff, d);
    bw->rmsnorm_bwd(ws->d_h1, grad_of(h, grad, EAGLE_NORM), ws->d_xn, ws->h1, h->t[EAGLE_NORM], n,
                    d, c->eps);
    /* h1 = h0 + a Wo^T */
    memcpy(ws->d_h0, ws->d_h1, (size_t)(n * d) * sizeof(float));
    memset(ws->d_a, 0, (size_t)(n * qd) * sizeof(float));
    bw->matmul_bwd(ws->d_a, grad_of(h, grad, EAGLE_WO), NULL, ws->d_h1, ws->a, h->t[EAGLE_WO], n,
                   d, qd);
    memset(ws->d_q, 0, (size_t)(n * qd) * sizeof(float));
    memset(ws->d_k, 0, (size_t)(n * kd) * sizeof(float));
    memset(ws->d_v, 0, (size_t)(n * kd) * sizeof(float));
    bw->attn_bwd(ws->d_q, ws->d_k, ws->d_v, ws->d_a, ws->p, ws->q, ws->k, ws->v, n, c->n_head,
                 c->n_head_kv, c->head_dim, 1.0f / sqrtf((float)c->head_dim), ws->scratch);
    bw->rope_bwd(ws->d_q, n, c->n_head, c->head_dim, ws->cs, c->rope.n_rot, c->rope.style);
    bw->rope_bwd(ws->d_k, n, c->n_head_kv, c->head_dim, ws->cs, c->rope.n_rot, c->rope.style);
    bw->matmul_bwd(ws->d_h0, grad_of(h, grad, EAGLE_WQ), NULL, ws->d_q, ws->h0, h->t[EAGLE_WQ], n,
                   qd, d);
    bw->matmul_bwd(ws->d_h0, grad_of(h, grad, EAGLE_WK), NULL, ws->d_k, ws->h0, h->t[EAGLE_WK], n,
                   kd, d);
    bw->matmul_bwd(ws->d_h0, grad_of(h, grad, EAGLE_WV), NULL, ws->d_v, ws->h0, h->t[EAGLE_WV], n,
                   kd, d);
    /* h0 = x FC^T + b; x is frozen input */
    bw->matmul_bwd(NULL, grad_of(h, grad, EAGLE_FC_W), grad_of(h, grad, EAGLE_FC_B), ws->d_h0,
                   ws->x, h->t[EAGLE_FC_W], n, d, 2 * d);
}
