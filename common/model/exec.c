/*
 * exec.c - the executor of the forward pass (exec.h): scratch, the call's
 * slots and sequences, each chunk's RoPE angles, KV slots and attention
 * rows, hooks, and the steps of the layer recipes as calls of the model's
 * backend (kernels/backend.h), which owns the threads and the kernels.
 *
 * Every op covers all the chunk's tokens in one backend call.  The KV slots
 * of the whole batch are known before the first chunk runs
 * (exec_call_begin).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "qtypes.h"

#define DEFAULT_MAX_BATCH 512
#define SCRATCH_TARGET ((size_t)32 << 20)   /* bytes of activations when max_batch is not given */

struct forward_state {
    int64_t B;                  /* tokens per chunk */
    /* activations, in backend buffers */
    float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up;
    float *mla_q, *mla_qa, *mla_pe, *mla_o;  /* MLA's (exec.h); NULL without */
    float *rope_cs;             /* [B][n_rot] each chunk token's RoPE cosines and sines */
    float *rope_cs_swa;         /* [B][n_rot] the same for sliding-window layers (NULL: none) */
    int64_t *row_lo;            /* [B] the first slot a sliding-window layer's row sees */
    int32_t *blk;               /* [B] physical block of each chunk token's slot */
    int64_t *bidx;              /* [B] index inside that block */
    int32_t *ids;               /* [B] the chunk's token ids */
    /* the chunk's attention rows (struct backend_attn) */
    const int32_t **row_table;  /* [B] */
    int64_t *row_nkv;           /* [B] */
    int32_t *row_seq;           /* [B] */
    uint8_t *row_tiled;         /* [B] */
    uint8_t *row_gemm;          /* [B]: batch_tok.gemm of the chunk's rows */
    int64_t *row_vis0;          /* [B] */
    uint8_t *row_vis;           /* [B][ld_vis] under a mask: the batch's slots each row sees */
    int64_t ld_vis, vis_cap;
    float *hook_buf;            /* a device backend's activations copied out for a hook */
    int64_t hook_cap;
    uint8_t **kbase, **vbase;   /* [n_head_kv] the layer's KV heads */
    /* the call */
    int64_t *slot;              /* [n] slot of each batch token */
    int32_t *perm;              /* [n] batch indices grouped by sequence, in batch order */
    int64_t cap_n;
    int64_t *seq_len0, *seq_cnt, *seq_start;  /* indexed by sequence id */
    int32_t *seq_list;          /* distinct sequences of the batch */
    int64_t n_seq;              /* in seq_list */
    int64_t cap_seq;
};

static void *
grow(void *p, int64_t *cap, int64_t want, size_t elem)
{
    if (want <= *cap)
        return p;
    int64_t c = *cap ? *cap : 64;
    while (c < want)
        c *= 2;
    void *q = realloc(p, (size_t)c * elem);
    if (!q)
        return NULL;
    *cap = c;
    return q;
}

/* a backend buffer of n floats (at least one) */
static float *
act_alloc(struct backend *be, int64_t n)
{
    return be->ops->alloc(be, (size_t)(n > 0 ? n : 1) * sizeof(float));
}

int
forward_state_new(struct model *m, struct diag *d)
{
    const struct model_hparams *hp = &m->hp;
    struct backend *be = m->be;
    struct forward_state *st = calloc(1, sizeof(*st));
    int64_t E = hp->n_embd;
    int64_t qd = hp->n_head * hp->head_dim, kd = hp->n_head_kv * hp->head_dim;
    int64_t vd = hp->n_head_kv * hp->head_dim_v, ad = hp->n_head * hp->head_dim_v;
    int64_t per_tok = 3 * E + qd + kd + vd + ad + 2 * hp->n_ff;
    /* MLA: the query before absorption, its low-rank form, the RoPE parts,
     * the heads' values after attn_v_b */
    int64_t mq = hp->n_head * hp->mla_k, mqa = hp->q_lora_rank;
    int64_t mpe = hp->n_head * hp->rope.n_rot, mo = hp->n_head * hp->mla_v;
    if (hp->mla)
        per_tok += mq + mqa + mpe + mo;

    if (!st)
        return diag_set(d, ST_NOMEM, "out of memory");
    m->st = st;
    if (m->max_batch > 0) {
        st->B = m->max_batch;
    } else {
        st->B = (int64_t)(SCRATCH_TARGET / ((size_t)per_tok * sizeof(float)));
        if (st->B > DEFAULT_MAX_BATCH)
            st->B = DEFAULT_MAX_BATCH;
        if (st->B < 16)
            st->B = 16;
        m->max_batch = st->B;
    }
    if (st->B > ((int64_t)1 << 20))
        return diag_set(d, ST_RANGE, "max batch %lld too large", (long long)st->B);

    int64_t B = st->B;
    st->x = act_alloc(be, B * E);
    st->xn = act_alloc(be, B * E);
    st->tmp = act_alloc(be, B * E);
    st->q = act_alloc(be, B * qd);
    st->k = act_alloc(be, B * kd);
    st->v = act_alloc(be, B * vd);
    st->att = act_alloc(be, B * ad);
    st->gate = act_alloc(be, B * hp->n_ff);
    st->up = act_alloc(be, B * hp->n_ff);
    if (hp->mla && (!(st->mla_q = act_alloc(be, B * mq)) || !(st->mla_qa = act_alloc(be, B * mqa)) ||
                    !(st->mla_pe = act_alloc(be, B * mpe)) || !(st->mla_o = act_alloc(be, B * mo))))
        goto nomem;
    st->rope_cs = malloc((size_t)B * (size_t)(hp->rope.n_rot > 0 ? hp->rope.n_rot : 1) * sizeof(float));
    if (hp->n_swa > 0 && !(st->rope_cs_swa = malloc((size_t)B * (size_t)(hp->rope_swa.n_rot > 0
                                                                          ? hp->rope_swa.n_rot : 1) *
                                                    sizeof(float))))
        goto nomem;
    st->row_lo = malloc((size_t)B * sizeof(int64_t));
    st->blk = malloc((size_t)B * sizeof(int32_t));
    st->bidx = malloc((size_t)B * sizeof(int64_t));
    st->ids = malloc((size_t)B * sizeof(int32_t));
    st->row_table = malloc((size_t)B * sizeof(*st->row_table));
    st->row_nkv = malloc((size_t)B * sizeof(int64_t));
    st->row_seq = malloc((size_t)B * sizeof(int32_t));
    st->row_tiled = malloc((size_t)B);
    st->row_gemm = malloc((size_t)B);
    st->row_vis0 = malloc((size_t)B * sizeof(int64_t));
    st->kbase = malloc((size_t)hp->n_head_kv * sizeof(uint8_t *));
    st->vbase = malloc((size_t)hp->n_head_kv * sizeof(uint8_t *));
    if (!st->x || !st->xn || !st->tmp || !st->q || !st->k || !st->v || !st->att || !st->gate ||
        !st->up || !st->rope_cs || !st->blk || !st->bidx || !st->ids || !st->row_table ||
        !st->row_nkv || !st->row_seq || !st->row_tiled || !st->row_gemm || !st->row_vis0 || !st->kbase ||
        !st->vbase || !st->row_lo)
        goto nomem;

    /* the backend's matmul room: the largest any weight needs */
    const struct model_weight *ws[9] = { &m->output, NULL };
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        ws[1] = &L->wq, ws[2] = &L->wk, ws[3] = &L->wv, ws[4] = &L->wo;
        ws[5] = &L->ffn_gate, ws[6] = &L->ffn_up, ws[7] = &L->ffn_down, ws[8] = &m->tok_embd;
        for (int i = 0; i < 9; i++)
            if (be->ops->mm_reserve(be, ws[i]->type, B, ws[i]->cols) < 0)
                goto nomem;
        const struct model_weight *mw[5] = { &L->wq_a, &L->wq_b, &L->wkv_a, &L->wk_b, &L->wv_b };
        for (int i = 0; i < 5 && hp->mla; i++)
            if (mw[i]->data && be->ops->mm_reserve(be, mw[i]->type, B, mw[i]->cols) < 0)
                goto nomem;
    }
    return 0;
nomem:
    return diag_set(d, ST_NOMEM, "out of memory for forward scratch (%lld tokens)",
                    (long long)st->B);
}

void
forward_state_free(struct model *m)
{
    struct forward_state *st = m->st;
    struct backend *be = m->be;

    if (!st)
        return;
    float *act[] = { st->x, st->xn, st->tmp, st->q, st->k, st->v, st->att, st->gate, st->up,
                     st->mla_q, st->mla_qa, st->mla_pe, st->mla_o };
    for (size_t i = 0; i < sizeof(act) / sizeof(act[0]); i++)
        if (act[i])
            be->ops->free(be, act[i]);
    free(st->rope_cs);
    free(st->rope_cs_swa);
    free(st->row_lo);
    free(st->blk);
    free(st->bidx);
    free(st->ids);
    free(st->row_table);
    free(st->row_nkv);
    free(st->row_seq);
    free(st->row_tiled);
    free(st->row_gemm);
    free(st->row_vis0);
    free(st->row_vis);
    free(st->hook_buf);
    free(st->kbase);
    free(st->vbase);
    free(st->slot);
    free(st->perm);
    free(st->seq_len0);
    free(st->seq_cnt);
    free(st->seq_start);
    free(st->seq_list);
    free(st);
    m->st = NULL;
}

/* the llama.cpp ubatch size the batch states (model.h), 0 = none */
static inline int64_t
call_ubatch(const struct exec *e)
{
    return e->b->llamacpp_ubatch;
}

/* y_i[t][0 .. w_i->rows) = x[t] W_i^T (+ bias_i) for t < n_tok, i < nw: one
 * backend step; gemm: NULL or the tokens' batch_tok.gemm */
static void
matmul_n(const struct exec *e, int nw, const struct model_weight *const *w,
         const struct model_weight *const *bias, const float *x, int64_t ldx, int64_t n_tok,
         float *const *y, const int64_t *ldy, const uint8_t *gemm)
{
    struct backend_weight bw[BACKEND_MM_MAX];
    struct backend_matmul mm = { .nw = nw, .x = x, .ldx = ldx, .n_tok = n_tok,
                                 .mirror = call_ubatch(e) >= 2, .gemm = gemm };

    for (int i = 0; i < nw; i++) {
        bw[i] = model_weight_view(w[i]);
        mm.w[i] = &bw[i];
        mm.bias[i] = bias && bias[i] ? bias[i]->data : NULL;
        mm.y[i] = y[i];
        mm.ldy[i] = ldy[i];
    }
    e->m->be->ops->matmul(e->m->be, &mm);
}

/* ---- hooks ---- */

int
exec_hook(struct exec *e, int site, int layer, const char *name, const struct model_weight *w,
          const float *x, int64_t n_tok, int64_t dim, int64_t ld, int64_t tok0)
{
    const struct model_hooks *h = e->hooks;

    if (!h || !h->fn || !(h->sites & (unsigned)site))
        return 0;
    /* hooks read host memory: a device backend's activations are copied
     * out first (n_tok rows of dim floats, ld apart) */
    struct backend *be = e->m->be;
    if (!be->host && n_tok > 0) {
        struct forward_state *st = e->m->st;
        int64_t n = (n_tok - 1) * ld + dim;
        void *p = grow(st->hook_buf, &st->hook_cap, n, sizeof(float));
        if (!p)
            return -ST_NOMEM;
        st->hook_buf = p;
        be->ops->download(be, st->hook_buf, x, (size_t)n * sizeof(float));
        x = st->hook_buf;
    }
    struct model_hook_event ev = { site, layer, name, w, x, n_tok, dim, ld, tok0, e->b, NULL };
    int rc = h->fn(h->ctx, &ev);
    return rc < 0 ? rc : 0;
}

static int
hook_linear(struct exec *e, const struct model_weight *w, const float *x, int64_t n_tok,
            int64_t tok0)
{
    return exec_hook(e, MODEL_HOOK_LINEAR_IN, (int)e->layer, w->name, w, x, n_tok, w->cols,
                     w->cols, tok0);
}

/* ---- a call ---- */

int
exec_call_begin(struct exec *e, struct model *m, struct kvcache *kv, const struct batch *b,
                const struct model_hooks *hooks, int appended, struct diag *d)
{
    struct forward_state *st = m->st;
    const struct model_hparams *hp = &m->hp;
    const struct kv_config *kc = kv_config_get(kv);
    int64_t n = b->n;
    int32_t max_seq = -1;
    int64_t n_seq = 0, max_kv = 0;

    e->m = m;
    e->kv = kv;
    e->b = b;
    e->hooks = hooks;
    e->c0 = e->n = 0;
    e->layer = -1;
    e->x = st->x;
    e->xn = st->xn;
    e->q = st->q;
    e->k = st->k;
    e->v = st->v;
    e->att = st->att;
    e->tmp = st->tmp;
    e->gate = st->gate;
    e->up = st->up;
    e->mla_q = st->mla_q;
    e->mla_qa = st->mla_qa;
    e->mla_pe = st->mla_pe;
    e->mla_o = st->mla_o;
    st->n_seq = 0;

    for (int64_t i = 0; i < n; i++)
        if (b->tok[i].seq > max_seq)
            max_seq = b->tok[i].seq;

    /* slots, sequence order */
    int64_t cs = st->cap_seq, cn = st->cap_n;
    void *p;
    if (!(p = grow(st->seq_len0, &cs, max_seq + 1, sizeof(int64_t))))
        goto nomem;
    st->seq_len0 = p;
    cs = st->cap_seq;
    if (!(p = grow(st->seq_cnt, &cs, max_seq + 1, sizeof(int64_t))))
        goto nomem;
    st->seq_cnt = p;
    cs = st->cap_seq;
    if (!(p = grow(st->seq_start, &cs, max_seq + 1, sizeof(int64_t))))
        goto nomem;
    st->seq_start = p;
    cs = st->cap_seq;
    if (!(p = grow(st->seq_list, &cs, max_seq + 1, sizeof(int32_t))))
        goto nomem;
    st->seq_list = p;
    st->cap_seq = cs;
    if (!(p = grow(st->slot, &cn, n, sizeof(int64_t))))
        goto nomem;
    st->slot = p;
    cn = st->cap_n;
    if (!(p = grow(st->perm, &cn, n, sizeof(int32_t))))
        goto nomem;
    st->perm = p;
    st->cap_n = cn;

    for (int64_t i = 0; i < n; i++)
        st->seq_cnt[b->tok[i].seq] = -1;
    for (int64_t i = 0; i < n; i++) {
        int32_t s = b->tok[i].seq;
        if (st->seq_cnt[s] < 0) {
            st->seq_cnt[s] = 0;
            st->seq_list[n_seq++] = s;
        }
        st->seq_cnt[s]++;
    }
    for (int64_t k = 0; k < n_seq; k++) {
        int32_t s = st->seq_list[k];
        int64_t len = kv_seq_len(kv, s);
        st->seq_len0[s] = appended ? len - st->seq_cnt[s] : len;
        if (st->seq_len0[s] < 0)
            return diag_set(d, ST_RANGE, "sequence %d holds %lld slots, fewer than its %lld "
                            "tokens in the batch", s, (long long)len, (long long)st->seq_cnt[s]);
        st->seq_cnt[s] = 0;
    }
    for (int64_t i = 0; i < n; i++) {
        int32_t s = b->tok[i].seq;
        st->slot[i] = st->seq_len0[s] + st->seq_cnt[s]++;
        if (st->slot[i] + 1 > max_kv)
            max_kv = st->slot[i] + 1;
    }
    int64_t off = 0;
    for (int64_t k = 0; k < n_seq; k++) {
        int32_t s = st->seq_list[k];
        st->seq_start[s] = off;
        off += st->seq_cnt[s];
        st->seq_cnt[s] = 0;
    }
    for (int64_t i = 0; i < n; i++) {
        int32_t s = b->tok[i].seq;
        st->perm[st->seq_start[s] + st->seq_cnt[s]++] = (int32_t)i;
    }
    st->n_seq = n_seq;

    /* the backend's room for this call's attention steps */
    int64_t ld_vis = 0;
    for (int64_t k = 0; k < n_seq; k++)
        if (st->seq_cnt[st->seq_list[k]] > ld_vis)
            ld_vis = st->seq_cnt[st->seq_list[k]];
    struct backend_attn_limits lim = {
        .n_rows = n < st->B ? n : st->B, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim, .head_dim_v = hp->head_dim_v, .kv_type = kc->dtype,
        .block_size = kc->block_size, .max_kv = max_kv, .masked = b->mask != NULL,
        .tiled = !b->mask && (kc->dtype == GGML_TYPE_F32 || kc->dtype == GGML_TYPE_F16),
    };
    if (m->be->ops->attn_reserve(m->be, &lim) < 0)
        goto nomem;
    /* under a mask, each chunk row's view of its sequence's batch slots */
    if (b->mask) {
        int64_t cap = st->vis_cap;
        if (!(p = grow(st->row_vis, &cap, st->B * (ld_vis > 0 ? ld_vis : 1), 1)))
            goto nomem;
        st->row_vis = p;
        st->vis_cap = cap;
        st->ld_vis = ld_vis;
    }
    return 0;

nomem:
    return diag_set(d, ST_NOMEM, "forward pass: out of memory");
}

int
exec_reserve(struct exec *e, struct diag *d)
{
    struct forward_state *st = e->m->st;
    int rc;

    for (int64_t k = 0; k < st->n_seq; k++) {
        int32_t s = st->seq_list[k];
        if ((rc = kv_seq_grow(e->kv, s, st->seq_cnt[s], d)) < 0) {
            for (int64_t i = 0; i < k; i++)
                kv_seq_truncate(e->kv, st->seq_list[i], st->seq_len0[st->seq_list[i]]);
            return rc;
        }
    }
    return 0;
}

void
exec_rollback(struct exec *e)
{
    struct forward_state *st = e->m->st;

    for (int64_t i = 0; i < st->n_seq; i++) {
        int32_t s = st->seq_list[i];
        kv_seq_truncate(e->kv, s, st->seq_len0[s]);
    }
}

void
exec_chunk_begin(struct exec *e, int64_t c0, int64_t nc, float *x)
{
    struct model *m = e->m;
    struct forward_state *st = m->st;
    const struct model_hparams *hp = &m->hp;
    const struct batch *b = e->b;

    e->c0 = c0;
    e->n = nc;
    e->x = x ? x : st->x;
    for (int64_t t = 0; t < nc; t++) {
        const struct batch_tok *bt = &b->tok[c0 + t];
        /* the slots exist: reserved or appended (exec_call_begin) */
        kv_slot_block(e->kv, bt->seq, st->slot[c0 + t], &st->blk[t], &st->bidx[t]);
        /* the token's RoPE angles, for its q and k in every layer */
        ops_rope_angles(st->rope_cs + t * hp->rope.n_rot, bt->pos, &hp->rope);
        if (st->rope_cs_swa)
            ops_rope_angles(st->rope_cs_swa + t * hp->rope_swa.n_rot, bt->pos, &hp->rope_swa);
    }
    /* the chunk's attention rows: block table, visible prefix, sequence,
     * arithmetic (the tiled one for every row in llama.cpp ubatch mode, or
     * for the tokens marked tiled: the backend takes it where it applies),
     * and under a mask the batch slots each row sees */
    const int all_tiled = call_ubatch(e) >= ATTN_TILE_Q;
    for (int64_t t = 0; t < nc; t++) {
        int64_t i = c0 + t;
        const struct batch_tok *bt = &b->tok[i];
        int64_t nb;
        st->ids[t] = bt->token;
        st->row_table[t] = kv_seq_table(e->kv, bt->seq, &nb);
        st->row_nkv[t] = st->slot[i] + 1;
        st->row_seq[t] = bt->seq;
        st->row_tiled[t] = (uint8_t)(all_tiled || bt->tiled);
        st->row_gemm[t] = (uint8_t)bt->gemm;
        /* a sliding-window layer's row sees the last n_swa positions, itself
         * included (llama.cpp's LLAMA_SWA_TYPE_STANDARD), counted from its
         * position: in a speculative tree a node's slot is past its position
         * (the cached context's slots are its positions) */
        st->row_lo[t] = bt->pos + 1 > hp->n_swa ? bt->pos + 1 - hp->n_swa : 0;
        if (!b->mask)
            continue;
        int64_t len0 = st->seq_len0[bt->seq];
        const int32_t *order = st->perm + st->seq_start[bt->seq];
        const uint8_t *row = b->mask + i * b->n;
        uint8_t *vis = st->row_vis + t * st->ld_vis;
        st->row_vis0[t] = len0;
        for (int64_t k = 0; k < st->slot[i] + 1 - len0; k++)
            vis[k] = row[order[k]] != 0;
    }
}

/* ---- ops ---- */

void
exec_embed(struct exec *e, const struct model_weight *w)
{
    struct backend_weight bw = model_weight_view(w);
    e->m->be->ops->get_rows(e->m->be, e->x, &bw, e->m->st->ids, e->n);
}

void
exec_rmsnorm(struct exec *e, float *y, const float *x, const struct model_weight *w)
{
    e->m->be->ops->rmsnorm(e->m->be, y, x, w->data, e->n, w->cols, e->m->hp.rms_eps);
}

void
exec_rmsnorm_heads(struct exec *e, float *y, int64_t n_heads, const struct model_weight *w)
{
    /* the chunk's heads are rows of w->cols, back to back */
    e->m->be->ops->rmsnorm(e->m->be, y, y, w->data, e->n * n_heads, w->cols, e->m->hp.rms_eps);
}

void
exec_scale(struct exec *e, float *x, int64_t dim, float s)
{
    e->m->be->ops->scale(e->m->be, x, s, e->n, dim);
}

/* LINEAR_OUT before w's product into y: 1 when a hook wrote y */
static int
hook_linear_fill(struct exec *e, const struct model_weight *w, float *y)
{
    const struct model_hooks *h = e->hooks;

    if (!h || !h->fn || !(h->sites & MODEL_HOOK_LINEAR_OUT) || !e->m->be->host)
        return 0;
    struct model_hook_event ev = { MODEL_HOOK_LINEAR_OUT, (int)e->layer, w->name, w, NULL, e->n,
                                   w->rows, w->rows, e->c0, e->b, y };
    int rc = h->fn(h->ctx, &ev);
    return rc < 0 ? rc : rc > 0;
}

int
exec_matmuls(struct exec *e, int nw, const struct model_weight *const *w,
             const struct model_weight *const *bias, const float *x, float *const *y)
{
    const struct model_weight *cw[BACKEND_MM_MAX], *cb[BACKEND_MM_MAX];
    float *cy[BACKEND_MM_MAX];
    int64_t ldy[BACKEND_MM_MAX];
    int rc, n = 0;

    for (int i = 0; i < nw; i++)
        if ((rc = hook_linear(e, w[i], x, e->n, e->c0)) < 0)
            return rc;
    /* the products no hook supplied */
    for (int i = 0; i < nw; i++) {
        if ((rc = hook_linear_fill(e, w[i], y[i])) < 0)
            return rc;
        if (rc)
            continue;
        cw[n] = w[i];
        cb[n] = bias ? bias[i] : NULL;
        cy[n] = y[i];
        ldy[n++] = w[i]->rows;
    }
    if (n == 0)
        return 0;
    matmul_n(e, n, cw, cb, x, w[0]->cols, e->n, cy, ldy, e->m->st->row_gemm);
    for (int i = 0; i < n; i++)
        if ((rc = exec_hook(e, MODEL_HOOK_LINEAR_OUT, (int)e->layer, cw[i]->name, cw[i], cy[i],
                            e->n, cw[i]->rows, cw[i]->rows, e->c0)) < 0)
            return rc;
    return 0;
}

void
exec_attn_done(struct exec *e)
{
    if (e->layer == e->m->hp.n_layer - 1)
        memset(e->m->st->row_gemm, 0, (size_t)e->n);
}

int
exec_matmul(struct exec *e, const struct model_weight *w, const struct model_weight *bias,
            const float *x, float *y)
{
    return exec_matmuls(e, 1, &w, &bias, x, &y);
}

int
exec_matmul_rows(struct exec *e, const struct model_weight *w, const float *x, int64_t n_tok,
                 int64_t tok0, float *y)
{
    int64_t ldy = w->rows;
    int rc;

    if ((rc = hook_linear(e, w, x, n_tok, tok0)) < 0)
        return rc;
    matmul_n(e, 1, &w, NULL, x, w->cols, n_tok, &y, &ldy, NULL);
    return 0;
}

/* whether layer e->layer uses the sliding window */
static int
layer_swa(const struct exec *e)
{
    return e->layer >= 0 && e->m->layers[e->layer].swa;
}

void
exec_rope(struct exec *e, float *y, int64_t n_heads)
{
    exec_rope_heads(e, y, n_heads, e->m->hp.head_dim);
}

void
exec_rope_heads(struct exec *e, float *y, int64_t n_heads, int64_t head_dim)
{
    const struct model_hparams *hp = &e->m->hp;
    const int swa = layer_swa(e);
    e->m->be->ops->rope(e->m->be, y, e->n, n_heads, head_dim,
                        swa ? e->m->st->rope_cs_swa : e->m->st->rope_cs,
                        swa ? &hp->rope_swa : &hp->rope);
}

void
exec_copy_rows(struct exec *e, float *y, int64_t ldy, const float *x, int64_t ldx,
               int64_t n_rows, int64_t dim)
{
    e->m->be->ops->copy_rows(e->m->be, y, ldy, x, ldx, n_rows, dim);
}

int
exec_matmul_heads(struct exec *e, const struct model_weight *w, int64_t n_heads, const float *x,
                  int64_t x_head, int64_t ldx, float *y, int64_t y_head, int64_t ldy)
{
    const int64_t hr = w->rows / n_heads, hc = w->cols;
    int rc;

    for (int64_t h = 0; h < n_heads; h++) {
        /* head h's matrix: rows [h * hr, (h + 1) * hr) of the stack */
        struct model_weight wh = *w;
        const float *xh = x + h * x_head;
        float *yh = y + h * y_head;
        wh.data = (const uint8_t *)w->data + (size_t)(h * hr) * w->row_bytes;
        wh.packed = NULL;
        wh.rows = hr;
        if ((rc = exec_hook(e, MODEL_HOOK_LINEAR_IN, (int)e->layer, w->name, w, xh, e->n, hc, ldx,
                            e->c0)) < 0)
            return rc;
        const struct model_weight *wp = &wh;
        matmul_n(e, 1, &wp, NULL, xh, ldx, e->n, &yh, &ldy, NULL);
    }
    return 0;
}

/* the KV heads of layer e->layer into st->kbase/vbase; *v of the last */
static void
layer_heads(struct exec *e, struct kv_head_view *v)
{
    struct forward_state *st = e->m->st;

    for (int64_t g = 0; g < e->m->hp.n_head_kv; g++) {
        kv_head_view(e->kv, e->layer, g, v);
        st->kbase[g] = v->k;
        st->vbase[g] = v->v;
    }
}

void
exec_kv_store(struct exec *e, const float *k, const float *v)
{
    struct forward_state *st = e->m->st;
    const struct model_hparams *hp = &e->m->hp;
    struct kv_head_view view;

    layer_heads(e, &view);
    struct backend_kv_store s = {
        .k = k, .v = kv_config_get(e->kv)->v_in_k ? NULL : v, .n_tok = e->n, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
        .head_dim_v = hp->head_dim_v, .k_base = st->kbase, .v_base = st->vbase,
        .block_stride = view.block_stride, .k_row_bytes = view.k_row_bytes,
        .v_row_bytes = view.v_row_bytes, .kv_type = kv_config_get(e->kv)->dtype,
        .blk = st->blk, .bidx = st->bidx,
    };
    e->m->be->ops->kv_store(e->m->be, &s);
}

void
exec_attention(struct exec *e, const float *q, float *out, float scale)
{
    struct forward_state *st = e->m->st;
    const struct model_hparams *hp = &e->m->hp;
    const struct kv_config *kc = kv_config_get(e->kv);
    struct kv_head_view view;

    layer_heads(e, &view);
    struct backend_attn a = {
        .q = q, .out = out, .n_rows = e->n, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim, .head_dim_v = hp->head_dim_v,
        .scale = scale,
        .k_base = (const uint8_t *const *)st->kbase, .v_base = (const uint8_t *const *)st->vbase,
        .block_stride = view.block_stride, .kv_type = kc->dtype, .block_size = kc->block_size,
        .table = st->row_table, .n_kv = st->row_nkv, .seq = st->row_seq, .tiled = st->row_tiled,
        .vis0 = e->b->mask ? st->row_vis0 : NULL, .vis = st->row_vis, .ld_vis = st->ld_vis,
        .lo = layer_swa(e) ? st->row_lo : NULL,
        .v_stride = kc->v_in_k ? view.v_row_bytes : 0,
    };
    e->m->be->ops->attention(e->m->be, &a);
}

void
exec_add(struct exec *e, float *x, const float *y, int64_t dim)
{
    e->m->be->ops->add(e->m->be, x, y, e->n, dim);
}

void
exec_silu_mul(struct exec *e, float *g, const float *u, int64_t dim)
{
    e->m->be->ops->silu_mul(e->m->be, g, u, e->n, dim);
}

void
exec_gelu_mul(struct exec *e, float *g, const float *u, int64_t dim)
{
    e->m->be->ops->gelu_mul(e->m->be, g, u, e->n, dim);
}
