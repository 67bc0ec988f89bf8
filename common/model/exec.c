/*
 * exec.c - the executor of the forward pass (exec.h): scratch, thread
 * split, matmul grouping, attention scheduling, KV stores and the per-token
 * steps, for the layer recipes.
 *
 * Every op covers all the chunk's tokens: a matmul reads each weight once
 * per chunk with the rows of the weight split across the thread pool;
 * attention items (tokens x KV heads, or KV chunks of them) are claimed one
 * by one; per-token steps (norms, RoPE, KV stores, adds, SwiGLU) are split
 * over the pool from TOK_PAR_MIN tokens.  The KV slots of the whole batch
 * are known before the first chunk runs (exec_call_begin).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "exec.h"
#include "qtypes.h"
#include "threadpool.h"

#define DEFAULT_MAX_BATCH 512
#define SCRATCH_TARGET ((size_t)32 << 20)   /* bytes of activations when max_batch is not given */

struct forward_state {
    int64_t B;                  /* tokens per chunk */
    int nth;
    float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up;
    void *mm_work;
    float *mm_tmp;              /* [nth][mm_tmp_n] */
    int64_t mm_tmp_n;
    float *rope_cs;             /* [B][n_rot] each chunk token's RoPE cosines and sines */
    int32_t *blk;               /* [B] physical block of each chunk token's slot */
    int64_t *bidx;              /* [B] index inside that block */
    /* grown on demand, per call (never inside the token loops) */
    float *attn_scr;            /* [nth][attn_scr_n] */
    int64_t attn_scr_n;         /* floats per thread (a multiple of 16) */
    uint8_t *vis;               /* [nth][vis_n] */
    int64_t vis_n, vis_cap;
    /* tiled attention (llama.cpp ubatch mode, or tokens marked tiled): the
     * chunk's runs of at most ATTN_TILE_Q consecutive rows of one sequence,
     * [run0[r], run1[r]); the other rows (one-row arithmetic) in one[];
     * per-thread visible lengths */
    int32_t *run0, *run1;       /* [B] */
    int64_t n_run;
    int32_t *one;               /* [B] */
    int64_t n_one;
    int64_t *tnkv;              /* [nth][ATTN_TILE_Q] */
    /* one-row steps over a long context (ops.h, split KV) when the chunk has
     * few one-row items: one pool item per (row, KV head, KV chunk) instead
     * of per (row, KV head), the partials combined by whoever finishes a
     * pair's last chunk.  pair = one-row index * n_head_kv + KV head. */
    int fine;                   /* this chunk's one-row items are split */
    int64_t n_item;
    int32_t *item_pair, *item_c;        /* [fine_pairs * fine_chunks] */
    int64_t *pair_p0;           /* [fine_pairs] first partial of the pair */
    int32_t *pair_nch;          /* [fine_pairs] its chunks */
    _Atomic int32_t *pair_done; /* [fine_pairs] chunks finished */
    float *part;                /* [fine_pairs * fine_chunks][n_q per KV head][ATTN_PART(dv)] */
    int64_t fine_pairs, fine_chunks;    /* room for; 0: no fine items */
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

int
forward_state_new(struct model *m, struct diag *d)
{
    const struct model_hparams *hp = &m->hp;
    struct forward_state *st = calloc(1, sizeof(*st));
    int64_t E = hp->n_embd;
    int64_t qd = hp->n_head * hp->head_dim, kd = hp->n_head_kv * hp->head_dim;
    int64_t vd = hp->n_head_kv * hp->head_dim_v, ad = hp->n_head * hp->head_dim_v;
    int64_t per_tok = 3 * E + qd + kd + vd + ad + 2 * hp->n_ff;

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
    st->nth = threadpool_size(m->tp);

    size_t B = (size_t)st->B;
    st->x = malloc(B * (size_t)E * sizeof(float));
    st->xn = malloc(B * (size_t)E * sizeof(float));
    st->tmp = malloc(B * (size_t)E * sizeof(float));
    st->q = malloc(B * (size_t)qd * sizeof(float));
    st->k = malloc(B * (size_t)kd * sizeof(float));
    st->v = malloc(B * (size_t)vd * sizeof(float));
    st->att = malloc(B * (size_t)ad * sizeof(float));
    st->gate = malloc(B * (size_t)hp->n_ff * sizeof(float));
    st->up = malloc(B * (size_t)hp->n_ff * sizeof(float));
    st->rope_cs = malloc(B * (size_t)(hp->rope.n_rot > 0 ? hp->rope.n_rot : 1) * sizeof(float));
    st->blk = malloc(B * sizeof(int32_t));
    st->bidx = malloc(B * sizeof(int64_t));
    st->run0 = malloc((B + 1) * sizeof(int32_t));
    st->run1 = malloc((B + 1) * sizeof(int32_t));
    st->one = malloc((B + 1) * sizeof(int32_t));
    st->tnkv = malloc((size_t)st->nth * ATTN_TILE_Q * sizeof(int64_t));

    /* matmul work and per-thread row buffers: the largest any weight needs */
    const struct model_weight *ws[9] = { &m->output, NULL };
    size_t work = 0;
    int64_t maxcols = 0;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        ws[1] = &L->wq, ws[2] = &L->wk, ws[3] = &L->wv, ws[4] = &L->wo;
        ws[5] = &L->ffn_gate, ws[6] = &L->ffn_up, ws[7] = &L->ffn_down, ws[8] = &m->tok_embd;
        for (int i = 0; i < 9; i++) {
            size_t s = m->ops->mm_work_size(ws[i]->type, st->B, ws[i]->cols);
            if (s > work)
                work = s;
            if (ws[i]->cols > maxcols)
                maxcols = ws[i]->cols;
        }
    }
    st->mm_tmp_n = m->ops->mm_tmp_floats(maxcols);
    st->mm_work = work ? aligned_alloc(64, (work + 63) / 64 * 64) : NULL;
    st->mm_tmp = malloc((size_t)st->nth * (size_t)(st->mm_tmp_n ? st->mm_tmp_n : 1) * sizeof(float));
    if (!st->x || !st->xn || !st->tmp || !st->q || !st->k || !st->v || !st->att || !st->gate ||
        !st->up || !st->rope_cs || !st->blk || !st->bidx || !st->run0 || !st->run1 || !st->one || !st->tnkv || (work && !st->mm_work) ||
        !st->mm_tmp)
        return diag_set(d, ST_NOMEM, "out of memory for forward scratch (%lld tokens)",
                        (long long)st->B);
    return 0;
}

void
forward_state_free(struct model *m)
{
    struct forward_state *st = m->st;

    if (!st)
        return;
    free(st->x);
    free(st->xn);
    free(st->tmp);
    free(st->q);
    free(st->k);
    free(st->v);
    free(st->att);
    free(st->gate);
    free(st->up);
    free(st->rope_cs);
    free(st->blk);
    free(st->bidx);
    free(st->run0);
    free(st->run1);
    free(st->one);
    free(st->tnkv);
    free(st->item_pair);
    free(st->item_c);
    free(st->pair_p0);
    free(st->pair_nch);
    free((void *)st->pair_done);
    free(st->part);
    free(st->mm_work);
    free(st->mm_tmp);
    free(st->attn_scr);
    free(st->vis);
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

/* ---- matmul over the pool ---- */

/* Up to three weights that read the same activations (q/k/v, gate/up) are
 * run as one job: the activations are converted once when the weights share
 * a type, and the pool makes one pass over all their rows, so a decode step
 * pays one barrier for the group instead of three. */
#define MM_MAX 3

#define MM_REGIONS 16

struct mm_job {
    const struct kernel_ops *ops;
    int nw;
    const struct model_weight *w[MM_MAX];
    float *y[MM_MAX];
    int64_t ldy[MM_MAX];
    int64_t row0[MM_MAX + 1];   /* weight i owns rows [row0[i], row0[i+1]) of the job */
    const float *x;
    int64_t ldx, n_tok;
    void *work;
    float *tmp;
    int64_t tmp_n;
    uint32_t prep_type;         /* mm_prepare split over tokens: the weights' type */
    int64_t prep_cols;
    size_t prep_row;            /* work bytes per token */
    int64_t chunk;              /* rows per claim */
    int n_reg;                  /* regions (mm_claim) */
    struct mm_region {
        _Alignas(64) atomic_llong next;         /* first row not yet claimed */
        int64_t end;
    } reg[MM_REGIONS];
    int mirror;                 /* llama.cpp's batched float matmul (see matmul_n) */
};

/* Rows [r0, r1) of the job (spanning weights as row0 says) on worker ith. */
static void
mm_range(void *arg, int64_t r0, int64_t r1, int ith)
{
    struct mm_job *j = arg;

    for (int i = 0; i < j->nw; i++) {
        int64_t a = r0 > j->row0[i] ? r0 : j->row0[i];
        int64_t b = r1 < j->row0[i + 1] ? r1 : j->row0[i + 1];
        if (a >= b)
            continue;
        const struct model_weight *w = j->w[i];
        ops_mm_rows_fn rows = j->mirror && w->rows % 4 == 0 && w->cols % 8 == 0 &&
                                      (w->type == GGML_TYPE_F32 || w->type == GGML_TYPE_F16 ||
                                       w->type == GGML_TYPE_BF16)
                                  ? j->ops->mm_rows_mirror : j->ops->mm_rows;
        if (w->packed && rows == j->ops->mm_rows) {
            rows(j->y[i], j->ldy[i], w->packed, w->row_bytes, w->type | OPS_MM_PACKED, j->work,
                 j->x, j->ldx, j->n_tok, w->cols, a - j->row0[i], b - j->row0[i],
                 j->tmp + (int64_t)ith * j->tmp_n);
            continue;
        }
        rows(j->y[i], j->ldy[i], w->data, w->row_bytes, w->type, j->work, j->x, j->ldx,
             j->n_tok, w->cols, a - j->row0[i], b - j->row0[i], j->tmp + (int64_t)ith * j->tmp_n);
    }
}

/* the first row of region g of n (a multiple of 16; rows for g == n) */
static int64_t
region_start(int64_t rows, int g, int n)
{
    int64_t r = (rows * g / n + 15) / 16 * 16;
    return r < rows ? r : rows;
}

/* The rows are cut into one region per worker (at most MM_REGIONS); each
 * worker claims chunks of rows from the front of its own region, then from
 * the others', so that a worker the OS preempts (the machine is shared) or a
 * slower range does not hold the others at the barrier, while each worker
 * still reads one contiguous stretch of the weights: interleaved claims
 * defeat the hardware prefetchers, and with them the second thread of a
 * decode step.  Results do not depend on the split: the kernels are batch
 * and range invariant. */
static void
mm_claim(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;

    (void)nth;
    for (int k = 0; k < j->n_reg; k++) {
        struct mm_region *g = &j->reg[(ith + k) % j->n_reg];
        for (;;) {
            int64_t r0 = atomic_fetch_add_explicit(&g->next, j->chunk, memory_order_relaxed);
            if (r0 >= g->end)
                break;
            mm_range(j, r0, r0 + j->chunk < g->end ? r0 + j->chunk : g->end, ith);
        }
    }
}

/* mm_prepare for tokens [t0, t1) (each token's work row is independent). */
static void
mm_prep_range(void *arg, int64_t t0, int64_t t1, int ith)
{
    struct mm_job *j = arg;

    (void)ith;
    j->ops->mm_prepare((uint8_t *)j->work + (size_t)t0 * j->prep_row, j->prep_type,
                       j->x + t0 * j->ldx, j->ldx, t1 - t0, j->prep_cols);
}

static void
add_bias(const struct model_weight *bias, float *y, int64_t ldy, int64_t n_tok, int64_t rows)
{
    if (!bias || !bias->data)
        return;
    const float *bv = bias->data;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < rows; i++)
            y[t * ldy + i] += bv[i];
}

/* y_i[t][0 .. w_i->rows) = x[t] W_i^T (+ bias_i) for t < n_tok, i < nw; all
 * the weights have x's width as cols. */
static void
matmul_n(const struct exec *e, int nw, const struct model_weight *const *w,
         const struct model_weight *const *bias, const float *x, int64_t ldx, int64_t n_tok,
         float *const *y, const int64_t *ldy)
{
    struct model *m = e->m;
    struct forward_state *st = m->st;
    struct mm_job j = { .ops = m->ops, .nw = 0, .x = x, .ldx = ldx, .n_tok = n_tok,
                        .work = st->mm_work, .tmp = st->mm_tmp, .tmp_n = st->mm_tmp_n };
    int nth = threadpool_size(m->tp);

    /* mirroring llama.cpp (model.h, batch.llamacpp_ubatch): ggml multiplies
     * F32, F16 and BF16 weights by 2+ tokens with llamafile's tinyBLAS (when
     * rows % 4 == 0 and cols % 8 == 0), which rounds unlike one token */
    j.mirror = call_ubatch(e) >= 2 && n_tok >= 2 && m->ops->mm_rows_mirror != NULL;

    for (int i = 0; i < nw;) {
        /* the longest run of weights from i with i's type */
        int k = i + 1;
        while (k < nw && w[k]->type == w[i]->type)
            k++;
        /* activations converted once, split over tokens for a batch */
        j.prep_type = w[i]->type;
        j.prep_cols = w[i]->cols;
        j.prep_row = n_tok > 0 ? m->ops->mm_work_size(w[i]->type, 1, w[i]->cols) : 0;
        /* (the kernels' work is token-major: n_tok rows of one token's size) */
        if (nth > 1 && n_tok >= 32 &&
            m->ops->mm_work_size(w[i]->type, n_tok, w[i]->cols) == (size_t)n_tok * j.prep_row)
            threadpool_for(m->tp, n_tok, 8, mm_prep_range, &j);
        else
            m->ops->mm_prepare(st->mm_work, w[i]->type, x, ldx, n_tok, w[i]->cols);
        j.nw = k - i;
        j.row0[0] = 0;
        for (int q = i; q < k; q++) {
            j.w[q - i] = w[q];
            j.y[q - i] = y[q];
            j.ldy[q - i] = ldy[q];
            j.row0[q - i + 1] = j.row0[q - i] + w[q]->rows;
        }
        /* claims in multiples of 16 rows: about 8 per worker for a few
         * tokens, 2 for a prompt chunk (a batch kernel fills its activation
         * tiles once per claim; fewer, larger claims: Q8_0 prefill +8%,
         * F16 +4%, Q4_0 unchanged) */
        int64_t rows = j.row0[j.nw];
        j.chunk = (rows / ((n_tok >= 64 ? 2 : 8) * (int64_t)nth) + 15) / 16 * 16;
        if (j.chunk < 16)
            j.chunk = 16;
        j.n_reg = nth < MM_REGIONS ? nth : MM_REGIONS;
        for (int g = 0; g < j.n_reg; g++) {
            atomic_init(&j.reg[g].next, region_start(rows, g, j.n_reg));
            j.reg[g].end = region_start(rows, g + 1, j.n_reg);
        }
        if (nth > 1)
            threadpool_run(m->tp, mm_claim, &j);
        else
            mm_range(&j, 0, rows, 0);
        i = k;
    }
    for (int i = 0; i < nw; i++)
        add_bias(bias ? bias[i] : NULL, y[i], ldy[i], n_tok, w[i]->rows);
}

/* ---- hooks ---- */

int
exec_hook(struct exec *e, int site, int layer, const char *name, const struct model_weight *w,
          const float *x, int64_t n_tok, int64_t dim, int64_t ld, int64_t tok0)
{
    const struct model_hooks *h = e->hooks;

    if (!h || !h->fn || !(h->sites & (unsigned)site))
        return 0;
    struct model_hook_event ev = { site, layer, name, w, x, n_tok, dim, ld, tok0, e->b };
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

/* ---- attention over the pool ---- */

struct attn_job {
    struct model *m;
    struct kvcache *kv;
    const struct batch *b;
    int64_t c0, layer;
    const float *q;             /* [n][n_head*hd] */
    float *out;                 /* [n][n_head*hdv] */
};

/* the one-row arguments for chunk row t (batch index c0 + t) and KV head g,
 * the whole step; vis: the thread's visibility buffer */
static void
one_args(const struct attn_job *j, int64_t t, int64_t g, uint8_t *vis, struct attn_args *a)
{
    struct model *m = j->m;
    struct forward_state *st = m->st;
    const struct model_hparams *hp = &m->hp;
    const struct kv_config *kc = kv_config_get(j->kv);
    int64_t grp = hp->n_head / hp->n_head_kv;
    int64_t hd = hp->head_dim, hdv = hp->head_dim_v;
    int64_t i = j->c0 + t;                  /* batch index */
    const struct batch_tok *bt = &j->b->tok[i];
    struct kv_head_view view;
    int64_t nb;

    kv_head_view(j->kv, j->layer, g, &view);
    a->q = j->q + t * hp->n_head * hd + g * grp * hd;
    a->out = j->out + t * hp->n_head * hdv + g * grp * hdv;
    a->n_q = grp;
    a->head_dim = hd;
    a->head_dim_v = hdv;
    a->scale = 1.0f / sqrtf((float)hd);
    a->k_base = view.k;
    a->v_base = view.v;
    a->block_stride = view.block_stride;
    a->kv_type = kc->dtype;
    a->block_size = kc->block_size;
    a->table = kv_seq_table(j->kv, bt->seq, &nb);
    a->n_kv = st->slot[i] + 1;
    a->vis = j->b->mask ? vis : NULL;
    a->s0 = 0;
    a->part = NULL;
}

/* vis[s0 .. s1) for chunk row t under the batch's mask (the slots before the
 * batch all visible, the batch's own by the mask row) */
static void
one_vis(const struct attn_job *j, int64_t t, uint8_t *vis, int64_t s0, int64_t s1)
{
    const struct forward_state *st = j->m->st;
    int64_t i = j->c0 + t;
    int32_t seq = j->b->tok[i].seq;
    int64_t len0 = st->seq_len0[seq];
    const int32_t *order = st->perm + st->seq_start[seq];
    const uint8_t *row = j->b->mask + i * j->b->n;
    for (int64_t s = s0; s < s1; s++)
        vis[s] = s < len0 || row[order[s - len0]] != 0;
}

/* item it = one-row row it / n_kvh, KV head it % n_kvh: the whole step */
static void
attn_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct attn_job *j = arg;
    struct model *m = j->m;
    struct forward_state *st = m->st;
    int64_t n_kvh = m->hp.n_head_kv;
    float *scr = st->attn_scr + (int64_t)ith * st->attn_scr_n;
    uint8_t *vis = st->vis + (int64_t)ith * st->vis_n;

    for (int64_t it = i0; it < i1; it++) {
        struct attn_args a;
        int64_t t = st->one[it / n_kvh];
        one_args(j, t, it % n_kvh, vis, &a);
        if (a.vis)
            one_vis(j, t, vis, 0, a.n_kv);
        m->ops->attn(&a, scr);
    }
}

/* fine items (st->fine): one KV chunk of a pair; the pair's last chunk to
 * finish combines them all in chunk order (the kernel's own split does the
 * same operations, so the bits do not depend on who ran what) */
static void
attn_fine_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct attn_job *j = arg;
    struct model *m = j->m;
    struct forward_state *st = m->st;
    int64_t n_kvh = m->hp.n_head_kv, grp = m->hp.n_head / n_kvh, dv = m->hp.head_dim_v;
    int64_t psz = grp * ATTN_PART(dv);
    float *scr = st->attn_scr + (int64_t)ith * st->attn_scr_n;
    uint8_t *vis = st->vis + (int64_t)ith * st->vis_n;

    for (int64_t it = i0; it < i1; it++) {
        int64_t pair = st->item_pair[it], nch = st->pair_nch[pair];
        float *parts = st->part + st->pair_p0[pair] * psz;
        struct attn_args w, a;
        int64_t t = st->one[pair / n_kvh];
        one_args(j, t, pair % n_kvh, vis, &w);
        /* a pair of one chunk: the whole step */
        if (nch == 1)
            a = w;
        else
            ops_attn_chunk(&a, &w, st->item_c[it], parts + st->item_c[it] * psz);
        if (a.vis)
            one_vis(j, t, vis, a.s0, a.n_kv);
        m->ops->attn(&a, scr);
        if (nch == 1 ||
            atomic_fetch_add_explicit(&st->pair_done[pair], 1, memory_order_acq_rel) != nch - 1)
            continue;
        /* the last chunk: the thread's scratch is free for the maxima and sums */
        ops_attn_combine_begin(w.out, scr, grp, dv);
        for (int64_t k = 0; k < nch; k++)
            ops_attn_combine_add(w.out, scr, parts + k * psz, grp, dv);
        ops_attn_combine_end(w.out, scr, grp, dv);
    }
}

/* job it = run it / n_kvh of the chunk's tiled rows through the tiled kernel
 * for KV head it % n_kvh (rows are independent in it, so any grouping of a
 * sequence's rows gives llama.cpp's results) */
static void
attn_tiled_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct attn_job *j = arg;
    struct model *m = j->m;
    struct forward_state *st = m->st;
    const struct model_hparams *hp = &m->hp;
    const struct kv_config *kc = kv_config_get(j->kv);
    int64_t n_kvh = hp->n_head_kv, grp = hp->n_head / hp->n_head_kv;
    int64_t hd = hp->head_dim, hdv = hp->head_dim_v;
    int64_t qd = hp->n_head * hd, ad = hp->n_head * hdv;
    float *scr = st->attn_scr + (int64_t)ith * st->attn_scr_n;
    int64_t *nkv = st->tnkv + (int64_t)ith * ATTN_TILE_Q;

    for (int64_t it = i0; it < i1; it++) {
        int64_t r = it / n_kvh, g = it % n_kvh;
        int64_t t0 = st->run0[r], t1 = st->run1[r];
        const struct batch_tok *bt = &j->b->tok[j->c0 + t0];
        struct kv_head_view view;
        struct attn_tiled_args a;
        int64_t nb;

        for (int64_t t = t0; t < t1; t++)
            nkv[t - t0] = st->slot[j->c0 + t] + 1;
        kv_head_view(j->kv, j->layer, g, &view);
        a.q = j->q + t0 * qd + g * grp * hd;
        a.out = j->out + t0 * ad + g * grp * hdv;
        a.ldq = qd;
        a.ldo = ad;
        a.n_rows = t1 - t0;
        a.n_q = grp;
        a.head_dim = hd;
        a.head_dim_v = hdv;
        a.scale = 1.0f / sqrtf((float)hd);
        a.k_base = view.k;
        a.v_base = view.v;
        a.block_stride = view.block_stride;
        a.kv_type = kc->dtype;
        a.block_size = kc->block_size;
        a.table = kv_seq_table(j->kv, bt->seq, &nb);
        a.n_kv = nkv;
        m->ops->attn_tiled(&a, scr);
    }
}

/* whether this call's attention may take the tiled arithmetic: 2 for all
 * rows (batch.llamacpp_ubatch mode, see model.h), 1 for the tokens marked
 * tiled, 0 for none */
static int
use_tiled(const struct exec *e)
{
    uint32_t t = kv_config_get(e->kv)->dtype;
    if (!e->m->ops->attn_tiled || e->b->mask || (t != GGML_TYPE_F32 && t != GGML_TYPE_F16))
        return 0;
    return call_ubatch(e) >= ATTN_TILE_Q ? 2 : 1;
}

/* writes chunk rows [t0, t1) of k and v into their slots of the layer */
static void
kv_store(struct model *m, struct kvcache *kv, int64_t layer, const float *k, const float *v,
         int64_t t0, int64_t t1)
{
    struct forward_state *st = m->st;
    const struct model_hparams *hp = &m->hp;
    const struct kv_config *kc = kv_config_get(kv);
    int64_t hd = hp->head_dim, hdv = hp->head_dim_v;

    for (int64_t h = 0; h < hp->n_head_kv; h++) {
        struct kv_head_view view;
        kv_head_view(kv, layer, h, &view);
        for (int64_t t = t0; t < t1; t++) {
            size_t off = (size_t)st->blk[t] * view.block_stride;
            uint8_t *kd = view.k + off + (size_t)st->bidx[t] * view.k_row_bytes;
            uint8_t *vd = view.v + off + (size_t)st->bidx[t] * view.v_row_bytes;
            const float *ks = k + t * hp->n_head_kv * hd + h * hd;
            const float *vs = v + t * hp->n_head_kv * hdv + h * hdv;
            kv_row_put(kc->dtype, kd, ks, hd);
            kv_row_put(kc->dtype, vd, vs, hdv);
        }
    }
}
/* ---- per-token steps of a chunk ----
 *
 * Norms, RoPE, KV stores, residual adds and SwiGLU are independent per
 * token: a prefill chunk splits them over the pool (each token's arithmetic
 * is the same however the chunk is split). */
#define TOK_PAR_MIN 16          /* tokens from which a step is split */

enum tok_op { TOK_NORM, TOK_ROPE, TOK_KV, TOK_ADD, TOK_SILU_MUL };

struct tok_job {
    struct exec *e;
    enum tok_op op;
    float *y;                   /* NORM: out; ROPE: rotated in place; ADD, SILU_MUL: x, g */
    const float *x;             /* NORM: in; ADD, SILU_MUL: y, u; KV: k */
    const float *v;             /* KV: v */
    const float *w;             /* NORM: the weight */
    int64_t dim;                /* row width; ROPE: heads */
};

static void
tok_range(void *arg, int64_t t0, int64_t t1, int ith)
{
    struct tok_job *j = arg;
    struct model *m = j->e->m;
    struct forward_state *st = m->st;
    const struct kernel_ops *ops = m->ops;
    const struct model_hparams *hp = &m->hp;
    int64_t D = j->dim, hd = hp->head_dim;

    (void)ith;
    switch (j->op) {
    case TOK_NORM:
        for (int64_t t = t0; t < t1; t++)
            ops->rmsnorm(j->y + t * D, j->x + t * D, j->w, D, hp->rms_eps);
        break;
    case TOK_ROPE:
        for (int64_t t = t0; t < t1; t++)
            ops->rope(j->y + t * D * hd, D, hd, st->rope_cs + t * hp->rope.n_rot, &hp->rope);
        break;
    case TOK_KV:
        kv_store(m, j->e->kv, j->e->layer, j->x, j->v, t0, t1);
        break;
    case TOK_ADD:
        for (int64_t i = t0 * D; i < t1 * D; i++)
            j->y[i] += j->x[i];
        break;
    case TOK_SILU_MUL:
        /* one row at a time, as ggml_swiglu */
        for (int64_t t = t0; t < t1; t++)
            ops->silu_mul(j->y + t * D, j->y + t * D, j->x + t * D, D);
        break;
    }
}

static void
tok_step(struct tok_job *j)
{
    int64_t nc = j->e->n;

    if (nc >= TOK_PAR_MIN)
        threadpool_for(j->e->m->tp, nc, 1, tok_range, j);
    else
        tok_range(j, 0, nc, 0);
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

    /* per-thread attention scratch for this pool's block size */
    int64_t grp = hp->n_head / hp->n_head_kv;
    int64_t need = m->ops->attn_scratch_floats(grp, kc->block_size, hp->head_dim, hp->head_dim_v);
    if (use_tiled(e)) {
        int64_t nt = m->ops->attn_tiled_scratch_floats(grp, hp->head_dim, hp->head_dim_v);
        if (nt > need)
            need = nt;
    }
    /* each thread's part 64-byte aligned: the kernels' 512-bit loads of the
     * key and value tiles would otherwise straddle cache lines (10% of the
     * tiled attention's time) */
    need = (need + 15) / 16 * 16;
    if (need > st->attn_scr_n) {
        float *scr = aligned_alloc(64, (size_t)(need * st->nth) * sizeof(float));
        if (!scr)
            goto nomem;
        free(st->attn_scr);
        st->attn_scr = scr;
        st->attn_scr_n = need;
    }
    /* room for the fine split's items, pairs and partials (see struct
     * forward_state): at most 4 items per thread's worth of (row, KV head)
     * pairs, as many as the batch has; chunks grown by doubling.  Without
     * the room (out of memory) the steps are computed whole per item, with
     * the same bits. */
    int64_t nchmax = ops_attn_chunks(kc->dtype, max_kv);
    int64_t want_pairs = (int64_t)4 * st->nth < n * hp->n_head_kv ? (int64_t)4 * st->nth
                                                                   : n * hp->n_head_kv;
    if (nchmax > 1 && (want_pairs > st->fine_pairs || nchmax > st->fine_chunks)) {
        int64_t pairs = want_pairs > st->fine_pairs ? want_pairs : st->fine_pairs;
        int64_t chunks = nchmax <= st->fine_chunks     ? st->fine_chunks
                         : nchmax > 2 * st->fine_chunks ? nchmax
                                                        : 2 * st->fine_chunks;
        int64_t cap = pairs * chunks;
        free(st->item_pair), free(st->item_c), free(st->pair_p0), free(st->pair_nch);
        free((void *)st->pair_done), free(st->part);
        st->item_pair = malloc((size_t)cap * sizeof(int32_t));
        st->item_c = malloc((size_t)cap * sizeof(int32_t));
        st->pair_p0 = malloc((size_t)pairs * sizeof(int64_t));
        st->pair_nch = malloc((size_t)pairs * sizeof(int32_t));
        st->pair_done = malloc((size_t)pairs * sizeof(*st->pair_done));
        st->part = malloc((size_t)(cap * grp * ATTN_PART(hp->head_dim_v)) * sizeof(float));
        st->fine_pairs = st->fine_chunks = 0;
        if (st->item_pair && st->item_c && st->pair_p0 && st->pair_nch && st->pair_done &&
            st->part) {
            st->fine_pairs = pairs;
            st->fine_chunks = chunks;
        }
    }
    if (b->mask && max_kv > st->vis_n) {
        int64_t cap = st->vis_cap;
        if (!(p = grow(st->vis, &cap, max_kv * st->nth, 1)))
            goto nomem;
        st->vis = p;
        st->vis_cap = cap;
        st->vis_n = max_kv;
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
    }
    /* rows by attention arithmetic: runs of tiled rows, one-row rows */
    const int tiled = use_tiled(e);
    st->n_run = st->n_one = 0;
    for (int64_t t = 0; t < nc; t++) {
        const struct batch_tok *bt = &b->tok[c0 + t];
        if (!(tiled == 2 || (tiled == 1 && bt->tiled))) {
            st->one[st->n_one++] = (int32_t)t;
            continue;
        }
        int64_t r = st->n_run - 1;
        if (r < 0 || st->run1[r] != t || b->tok[c0 + t - 1].seq != bt->seq ||
            t - st->run0[r] == ATTN_TILE_Q) {
            st->run0[++r] = (int32_t)t;
            st->n_run = r + 1;
        }
        st->run1[r] = (int32_t)(t + 1);
    }
    /* one-row steps over a long context, when there are few: one item per
     * KV chunk (a decode step of a model with 3 KV heads would otherwise
     * give 2 workers 3 items) */
    st->fine = 0;
    if (st->n_one * hp->n_head_kv <= st->fine_pairs) {     /* (room made in exec_call_begin) */
        uint32_t dt = kv_config_get(e->kv)->dtype;
        int64_t np = 0, n_item = 0;
        for (int64_t u = 0; u < st->n_one; u++) {
            int64_t nch = ops_attn_chunks(dt, st->slot[c0 + st->one[u]] + 1);
            if (nch > 1)
                st->fine = 1;
            for (int64_t g = 0; g < hp->n_head_kv; g++) {
                int64_t pair = u * hp->n_head_kv + g;
                st->pair_nch[pair] = (int32_t)nch;
                st->pair_p0[pair] = np;
                np += nch;
                for (int64_t c = 0; c < nch; c++) {
                    st->item_pair[n_item] = (int32_t)pair;
                    st->item_c[n_item++] = (int32_t)c;
                }
            }
        }
        st->n_item = n_item;
    }
}

/* ---- ops ---- */

void
exec_embed(struct exec *e, const struct model_weight *w)
{
    const struct kernel_ops *ops = e->m->ops;
    int64_t E = w->cols;

    for (int64_t t = 0; t < e->n; t++)
        ops->get_row(e->x + t * E, w->data, w->row_bytes, w->type, e->b->tok[e->c0 + t].token, E);
}

void
exec_rmsnorm(struct exec *e, float *y, const float *x, const struct model_weight *w)
{
    struct tok_job j = { e, TOK_NORM, y, x, NULL, w->data, w->cols };
    tok_step(&j);
}

int
exec_matmuls(struct exec *e, int nw, const struct model_weight *const *w,
             const struct model_weight *const *bias, const float *x, float *const *y)
{
    int64_t ldy[MM_MAX];
    int rc;

    for (int i = 0; i < nw; i++) {
        if ((rc = hook_linear(e, w[i], x, e->n, e->c0)) < 0)
            return rc;
        ldy[i] = w[i]->rows;
    }
    matmul_n(e, nw, w, bias, x, w[0]->cols, e->n, y, ldy);
    return 0;
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
    matmul_n(e, 1, &w, NULL, x, w->cols, n_tok, &y, &ldy);
    return 0;
}

void
exec_rope(struct exec *e, float *y, int64_t n_heads)
{
    struct tok_job j = { e, TOK_ROPE, y, NULL, NULL, NULL, n_heads };
    tok_step(&j);
}

void
exec_kv_store(struct exec *e, const float *k, const float *v)
{
    struct tok_job j = { e, TOK_KV, NULL, k, v, NULL, 0 };
    tok_step(&j);
}

void
exec_attention(struct exec *e, const float *q, float *out)
{
    struct model *m = e->m;
    struct forward_state *st = m->st;
    int64_t n_kvh = m->hp.n_head_kv;
    struct attn_job aj = { m, e->kv, e->b, e->c0, e->layer, q, out };

    /* (token, kv head) items claimed one by one: their costs grow with
     * the position */
    if (st->n_run)
        threadpool_claim(m->tp, st->n_run * n_kvh, 1, attn_tiled_range, &aj);
    if (st->fine) {
        for (int64_t p = 0; p < st->n_one * n_kvh; p++)
            atomic_store_explicit(&st->pair_done[p], 0, memory_order_relaxed);
        threadpool_claim(m->tp, st->n_item, 1, attn_fine_range, &aj);
    } else if (st->n_one) {
        threadpool_claim(m->tp, st->n_one * n_kvh, 1, attn_range, &aj);
    }
}

void
exec_add(struct exec *e, float *x, const float *y, int64_t dim)
{
    struct tok_job j = { e, TOK_ADD, x, y, NULL, NULL, dim };
    tok_step(&j);
}

void
exec_silu_mul(struct exec *e, float *g, const float *u, int64_t dim)
{
    struct tok_job j = { e, TOK_SILU_MUL, g, u, NULL, NULL, dim };
    tok_step(&j);
}
