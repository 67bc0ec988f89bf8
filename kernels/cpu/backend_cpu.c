/*
 * backend_cpu.c - the CPU backend (backend.h): one kernel_ops table (ops.h)
 * over a thread pool it owns.
 *
 * Every step covers all the rows it is given: a matmul reads each weight
 * once per step with the rows of the weight split across the pool;
 * attention items (tokens x KV heads, or KV chunks of them) are claimed one
 * by one; per-token steps (norms, RoPE, KV stores, adds, SwiGLU) are split
 * over the pool from TOK_PAR_MIN tokens.  No split changes a bit: every
 * kernel is row- and range-invariant.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backward.h"
#include "qtypes.h"
#include "threadpool.h"

struct cpu {
    struct backend base;
    struct backend_ops table;   /* cpu_ops, its backward table by kernel */
    const struct kernel_ops *ops;
    struct threadpool *tp;
    int nth;
    /* matmul: activation work, per-thread row buffers */
    void *mm_work;
    size_t mm_work_n;
    float *mm_tmp;              /* [nth][mm_tmp_n] */
    int64_t mm_tmp_n;
    /* attention, grown by attn_reserve (never inside a step) */
    float *attn_scr;            /* [nth][attn_scr_n] */
    int64_t attn_scr_n;         /* floats per thread (a multiple of 16) */
    uint8_t *vis;               /* [nth][vis_n] */
    int64_t vis_n;
    int64_t *tnkv;              /* [nth][ATTN_TILE_Q] */
    /* a step's rows by arithmetic: runs of at most ATTN_TILE_Q consecutive
     * tiled rows of one sequence, [run0[r], run1[r]); the others (one-row
     * arithmetic) in one[] */
    int32_t *run0, *run1, *one;
    int64_t rows_cap;
    /* one-row steps over a long context (ops.h, split KV) when the step has
     * few one-row items: one pool item per (row, KV head, KV chunk) instead
     * of per (row, KV head), the partials combined by whoever finishes a
     * pair's last chunk.  pair = one-row index * n_head_kv + KV head. */
    int32_t *item_pair, *item_c;        /* [fine_pairs * fine_chunks] */
    int64_t *pair_p0;           /* [fine_pairs] first partial of the pair */
    int32_t *pair_nch;          /* [fine_pairs] its chunks */
    _Atomic int32_t *pair_done; /* [fine_pairs] chunks finished */
    float *part;                /* [fine_pairs * fine_chunks][n_q per KV head][ATTN_PART(dv)] */
    int64_t fine_pairs, fine_chunks;    /* room for; 0: no fine items */
    int64_t part_floats;        /* floats of part */
};

static struct cpu *
cpu_of(struct backend *be)
{
    return (struct cpu *)be;
}

/* ---- buffers ---- */

static void *
cpu_alloc(struct backend *be, size_t bytes)
{
    (void)be;
    return aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
}

static void
cpu_free(struct backend *be, void *p)
{
    (void)be;
    free(p);
}

static void
cpu_copy(struct backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memmove(dst, src, bytes);
}

/* ---- weights ---- */

static int
cpu_supports(const struct backend *be, uint32_t type)
{
    return ((const struct cpu *)be)->ops->mm_supported(type);
}

static size_t
cpu_pack_size(const struct backend *be, uint32_t type, int64_t rows, int64_t cols)
{
    const struct kernel_ops *ops = ((const struct cpu *)be)->ops;
    return ops->mm_pack_size && ops->mm_pack ? ops->mm_pack_size(type, rows, cols) : 0;
}

struct pack_job {
    const struct kernel_ops *ops;
    uint8_t *dst;
    const struct backend_weight *w;
};

/* slices [a, b) of BACKEND_PACK_SLICE rows (the last may be short) */
static void
pack_range(void *arg, int64_t a, int64_t b, int ith)
{
    const struct pack_job *j = arg;
    const struct backend_weight *w = j->w;
    int64_t r0 = a * BACKEND_PACK_SLICE;
    int64_t r1 = b * BACKEND_PACK_SLICE < w->rows ? b * BACKEND_PACK_SLICE : w->rows;

    (void)ith;
    j->ops->mm_pack(j->dst + j->ops->mm_pack_size(w->type, r0, w->cols),
                    (const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, w->type,
                    r1 - r0, w->cols);
}

/* over the workers, in slices of rows (the layout is cut by rows: ops.h) */
static void
cpu_pack(const struct backend *be, void *dst, const struct backend_weight *w)
{
    const struct cpu *c = (const struct cpu *)be;
    struct pack_job j = { c->ops, dst, w };

    threadpool_for(c->tp, (w->rows + BACKEND_PACK_SLICE - 1) / BACKEND_PACK_SLICE, 1, pack_range,
                   &j);
}

/* ---- matmul over the pool ---- */

/* The weights of one step that share a type are run as one job: the
 * activations are converted once, and the pool makes one pass over all
 * their rows, so a decode step pays one barrier for q/k/v instead of
 * three. */
#define MM_REGIONS 16

struct mm_job {
    const struct kernel_ops *ops;
    int nw;
    const struct backend_weight *w[BACKEND_MM_MAX];
    float *y[BACKEND_MM_MAX];
    int64_t ldy[BACKEND_MM_MAX];
    int64_t row0[BACKEND_MM_MAX + 1];   /* weight i owns rows [row0[i], row0[i+1]) of the job */
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
    int mirror;                 /* llama.cpp's batched float matmul (backend.h) */
    const uint8_t *gemm;        /* llama.cpp's batched-arithmetic tokens (backend.h) */
};

/* the BACKEND_GEMM_* bit that selects ggml's batched arithmetic for weight
 * w (backend.h), 0 when w never takes it */
static int
gemm_bit(const struct backend_weight *w)
{
    if (w->type == GGML_TYPE_F32 || w->type == GGML_TYPE_F16 || w->type == GGML_TYPE_BF16)
        return w->rows % 4 == 0 && w->cols % 8 == 0 ? BACKEND_GEMM_FLOAT : 0;
    if (w->cols % 256 != 0)
        return 0;
    if (w->type == GGML_TYPE_Q4_K && w->rows % 8 == 0)
        return BACKEND_GEMM_REPACK;
    if (w->type == GGML_TYPE_Q6_K)
        return BACKEND_GEMM_TILED;
    return 0;
}

/* Rows [a, b) of weight i of j (gemm_bit != 0) for the tokens of j: runs of
 * tokens with the bit through mm_rows_mirror, the others through mm_rows. */
static void
mm_range_gemm(const struct mm_job *j, int i, int64_t a, int64_t b, int ith, int bit)
{
    const struct backend_weight *w = j->w[i];
    size_t arb = j->prep_row;
    float *tmp = j->tmp + (int64_t)ith * j->tmp_n;

    for (int64_t t0 = 0, t1; t0 < j->n_tok; t0 = t1) {
        int g = (j->gemm[t0] & bit) != 0;
        for (t1 = t0 + 1; t1 < j->n_tok && ((j->gemm[t1] & bit) != 0) == g; t1++)
            ;
        const uint8_t *work = (const uint8_t *)j->work + (size_t)t0 * arb;
        float *y = j->y[i] + t0 * j->ldy[i];
        const float *x = j->x + t0 * j->ldx;
        if (g)
            j->ops->mm_rows_mirror(y, j->ldy[i], w->data, w->row_bytes, w->type, work, x, j->ldx,
                                   t1 - t0, w->cols, a, b, tmp);
        else if (w->packed)
            j->ops->mm_rows(y, j->ldy[i], w->packed, w->row_bytes, w->type | OPS_MM_PACKED, work,
                            x, j->ldx, t1 - t0, w->cols, a, b, tmp);
        else
            j->ops->mm_rows(y, j->ldy[i], w->data, w->row_bytes, w->type, work, x, j->ldx,
                            t1 - t0, w->cols, a, b, tmp);
    }
}

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
        const struct backend_weight *w = j->w[i];
        int bit = j->gemm ? gemm_bit(w) : 0;
        if (bit && !(j->mirror && bit == BACKEND_GEMM_FLOAT)) {
            mm_range_gemm(j, i, a - j->row0[i], b - j->row0[i], ith, bit);
            continue;
        }
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

static int
cpu_mm_reserve(struct backend *be, uint32_t type, int64_t max_tok, int64_t cols)
{
    struct cpu *c = cpu_of(be);
    size_t work = c->ops->mm_work_size(type, max_tok, cols);
    int64_t tn = c->ops->mm_tmp_floats(cols);

    if (work > c->mm_work_n) {
        void *p = aligned_alloc(64, (work + 63) / 64 * 64);
        if (!p)
            return -ENOMEM;
        free(c->mm_work);
        c->mm_work = p;
        c->mm_work_n = work;
    }
    if (!c->mm_tmp || tn > c->mm_tmp_n) {
        if (tn < c->mm_tmp_n)
            tn = c->mm_tmp_n;
        float *p = malloc((size_t)c->nth * (size_t)(tn ? tn : 1) * sizeof(float));
        if (!p)
            return -ENOMEM;
        free(c->mm_tmp);
        c->mm_tmp = p;
        c->mm_tmp_n = tn;
    }
    return 0;
}

static void
add_bias(const float *bv, float *y, int64_t ldy, int64_t n_tok, int64_t rows)
{
    if (!bv)
        return;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < rows; i++)
            y[t * ldy + i] += bv[i];
}

static void
cpu_matmul(struct backend *be, const struct backend_matmul *mm)
{
    struct cpu *c = cpu_of(be);
    const struct kernel_ops *ops = c->ops;
    const struct backend_weight *const *w = mm->w;
    const float *x = mm->x;
    int64_t ldx = mm->ldx, n_tok = mm->n_tok;
    struct mm_job j = { .ops = ops, .nw = 0, .x = x, .ldx = ldx, .n_tok = n_tok,
                        .work = c->mm_work, .tmp = c->mm_tmp, .tmp_n = c->mm_tmp_n };
    int nth = c->nth;

    /* mirroring llama.cpp: ggml multiplies F32, F16 and BF16 weights by 2+
     * tokens with llamafile's tinyBLAS (when rows % 4 == 0 and cols % 8 ==
     * 0), which rounds unlike one token */
    j.mirror = mm->mirror && n_tok >= 2 && ops->mm_rows_mirror != NULL;
    /* and k-quant weights by the tokens marked gemm with its repack gemm or
     * tiled kernels, float weights with tinyBLAS (backend.h) */
    j.gemm = NULL;
    if (mm->gemm && ops->mm_rows_mirror)
        for (int64_t t = 0; t < n_tok && !j.gemm; t++)
            if (mm->gemm[t])
                j.gemm = mm->gemm;

    for (int i = 0; i < mm->nw;) {
        /* the longest run of weights from i with i's type */
        int k = i + 1;
        while (k < mm->nw && w[k]->type == w[i]->type)
            k++;
        /* activations converted once, split over tokens for a batch */
        j.prep_type = w[i]->type;
        j.prep_cols = w[i]->cols;
        j.prep_row = n_tok > 0 ? ops->mm_work_size(w[i]->type, 1, w[i]->cols) : 0;
        /* (the kernels' work is token-major: n_tok rows of one token's size) */
        if (nth > 1 && n_tok >= 32 &&
            ops->mm_work_size(w[i]->type, n_tok, w[i]->cols) == (size_t)n_tok * j.prep_row)
            threadpool_for(c->tp, n_tok, 8, mm_prep_range, &j);
        else
            ops->mm_prepare(c->mm_work, w[i]->type, x, ldx, n_tok, w[i]->cols);
        j.nw = k - i;
        j.row0[0] = 0;
        for (int q = i; q < k; q++) {
            j.w[q - i] = w[q];
            j.y[q - i] = mm->y[q];
            j.ldy[q - i] = mm->ldy[q];
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
            threadpool_run(c->tp, mm_claim, &j);
        else
            mm_range(&j, 0, rows, 0);
        i = k;
    }
    for (int i = 0; i < mm->nw; i++)
        add_bias(mm->bias[i], mm->y[i], mm->ldy[i], n_tok, w[i]->rows);
}

/* ---- attention over the pool ---- */

struct attn_job {
    struct cpu *c;
    const struct backend_attn *a;
    int fine;                   /* this step's one-row items are split */
    int64_t n_run, n_one, n_item;
};

/* the one-row arguments for row t and KV head g, the whole step; vis: the
 * thread's visibility buffer */
static void
one_args(const struct attn_job *j, int64_t t, int64_t g, uint8_t *vis, struct attn_args *a)
{
    const struct backend_attn *s = j->a;
    int64_t grp = s->n_head / s->n_head_kv;
    int64_t hd = s->head_dim, hdv = s->head_dim_v;

    a->q = s->q + t * s->n_head * hd + g * grp * hd;
    a->out = s->out + t * s->n_head * hdv + g * grp * hdv;
    a->n_q = grp;
    a->head_dim = hd;
    a->head_dim_v = hdv;
    a->scale = s->scale;
    a->k_base = s->k_base[g];
    a->v_base = s->v_base[g];
    a->block_stride = s->block_stride;
    a->kv_type = s->kv_type;
    a->block_size = s->block_size;
    a->table = s->table[t];
    a->n_kv = s->n_kv[t];
    a->vis = s->vis0 ? vis : NULL;
    a->s0 = 0;
    a->part = NULL;
    a->lo = s->lo ? s->lo[t] : 0;
    a->v_stride = s->v_stride;
}

/* vis[s0 .. s1) for row t under the step's mask */
static void
one_vis(const struct attn_job *j, int64_t t, uint8_t *vis, int64_t s0, int64_t s1)
{
    const struct backend_attn *a = j->a;
    int64_t len0 = a->vis0[t];
    const uint8_t *row = a->vis + t * a->ld_vis - len0;
    for (int64_t s = s0; s < s1; s++)
        vis[s] = s < len0 || row[s] != 0;
}

/* the visible slots of row t */
static int64_t
row_n_vis(const struct backend_attn *a, int64_t t)
{
    if (!a->vis0)
        return a->n_kv[t];
    int64_t n = a->vis0[t];
    const uint8_t *row = a->vis + t * a->ld_vis;
    for (int64_t k = 0; k < a->n_kv[t] - a->vis0[t]; k++)
        n += row[k] != 0;
    return n;
}

/* item it = one-row row it / n_kvh, KV head it % n_kvh: the whole step */
static void
attn_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct attn_job *j = arg;
    struct cpu *c = j->c;
    int64_t n_kvh = j->a->n_head_kv;
    float *scr = c->attn_scr + (int64_t)ith * c->attn_scr_n;
    uint8_t *vis = c->vis + (int64_t)ith * c->vis_n;

    for (int64_t it = i0; it < i1; it++) {
        struct attn_args a;
        int64_t t = c->one[it / n_kvh];
        one_args(j, t, it % n_kvh, vis, &a);
        if (a.vis)
            one_vis(j, t, vis, 0, a.n_kv);
        c->ops->attn(&a, scr);
    }
}

/* fine items: one KV chunk of a pair; the pair's last chunk to finish
 * combines them all in chunk order (the kernel's own split does the same
 * operations, so the bits do not depend on who ran what) */
static void
attn_fine_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct attn_job *j = arg;
    struct cpu *c = j->c;
    int64_t n_kvh = j->a->n_head_kv, grp = j->a->n_head / n_kvh, dv = j->a->head_dim_v;
    int64_t psz = grp * ATTN_PART(dv);
    float *scr = c->attn_scr + (int64_t)ith * c->attn_scr_n;
    uint8_t *vis = c->vis + (int64_t)ith * c->vis_n;

    for (int64_t it = i0; it < i1; it++) {
        int64_t pair = c->item_pair[it], nch = c->pair_nch[pair];
        float *parts = c->part + c->pair_p0[pair] * psz;
        struct attn_args w, a;
        int64_t t = c->one[pair / n_kvh];
        one_args(j, t, pair % n_kvh, vis, &w);
        /* a pair of one chunk: the whole step */
        /* (a masked row's chunks are found from its whole visibility) */
        if (w.vis)
            one_vis(j, t, vis, 0, w.n_kv);
        if (nch == 1)
            a = w;
        else
            ops_attn_chunk(&a, &w, c->item_c[it], parts + c->item_c[it] * psz);
        c->ops->attn(&a, scr);
        if (nch == 1 ||
            atomic_fetch_add_explicit(&c->pair_done[pair], 1, memory_order_acq_rel) != nch - 1)
            continue;
        /* the last chunk: the thread's scratch is free for the maxima and sums */
        ops_attn_combine_begin(w.out, scr, grp, dv);
        for (int64_t k = 0; k < nch; k++)
            ops_attn_combine_add(w.out, scr, parts + k * psz, grp, dv);
        ops_attn_combine_end(w.out, scr, grp, dv);
    }
}

/* job it = run it / n_kvh of the step's tiled rows through the tiled
 * kernel for KV head it % n_kvh (rows are independent in it, so any
 * grouping of a sequence's rows gives llama.cpp's results) */
static void
attn_tiled_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct attn_job *j = arg;
    struct cpu *c = j->c;
    const struct backend_attn *s = j->a;
    int64_t n_kvh = s->n_head_kv, grp = s->n_head / s->n_head_kv;
    int64_t hd = s->head_dim, hdv = s->head_dim_v;
    int64_t qd = s->n_head * hd, ad = s->n_head * hdv;
    float *scr = c->attn_scr + (int64_t)ith * c->attn_scr_n;
    int64_t *nkv = c->tnkv + (int64_t)ith * ATTN_TILE_Q;

    for (int64_t it = i0; it < i1; it++) {
        int64_t r = it / n_kvh, g = it % n_kvh;
        int64_t t0 = c->run0[r], t1 = c->run1[r];
        struct attn_tiled_args a;

        for (int64_t t = t0; t < t1; t++)
            nkv[t - t0] = s->n_kv[t];
        a.q = s->q + t0 * qd + g * grp * hd;
        a.out = s->out + t0 * ad + g * grp * hdv;
        a.ldq = qd;
        a.ldo = ad;
        a.n_rows = t1 - t0;
        a.n_q = grp;
        a.head_dim = hd;
        a.head_dim_v = hdv;
        a.scale = s->scale;
        a.k_base = s->k_base[g];
        a.v_base = s->v_base[g];
        a.block_stride = s->block_stride;
        a.kv_type = s->kv_type;
        a.block_size = s->block_size;
        a.table = s->table[t0];
        a.n_kv = nkv;
        a.lo = s->lo ? s->lo + t0 : NULL;
        a.v_stride = s->v_stride;
        c->ops->attn_tiled(&a, scr);
    }
}

static void *
grow_free(void *old, size_t bytes, int aligned)
{
    free(old);
    return aligned ? aligned_alloc(64, (bytes + 63) / 64 * 64) : malloc(bytes ? bytes : 1);
}

static int
cpu_attn_reserve(struct backend *be, const struct backend_attn_limits *l)
{
    struct cpu *c = cpu_of(be);
    const struct kernel_ops *ops = c->ops;
    int64_t grp = l->n_head / l->n_head_kv;

    if (l->n_rows > c->rows_cap) {
        size_t b = (size_t)(l->n_rows + 1) * sizeof(int32_t);
        c->run0 = grow_free(c->run0, b, 0);
        c->run1 = grow_free(c->run1, b, 0);
        c->one = grow_free(c->one, b, 0);
        c->rows_cap = 0;
        if (!c->run0 || !c->run1 || !c->one)
            return -ENOMEM;
        c->rows_cap = l->n_rows;
    }
    if (!c->tnkv && !(c->tnkv = malloc((size_t)c->nth * ATTN_TILE_Q * sizeof(int64_t))))
        return -ENOMEM;

    /* per-thread attention scratch for this pool's block size */
    int64_t need = ops->attn_scratch_floats(grp, l->block_size, l->head_dim, l->head_dim_v);
    if (l->tiled && ops->attn_tiled) {
        int64_t nt = ops->attn_tiled_scratch_floats(grp, l->head_dim, l->head_dim_v);
        if (nt > need)
            need = nt;
    }
    /* each thread's part 64-byte aligned: the kernels' 512-bit loads of the
     * key and value tiles would otherwise straddle cache lines (10% of the
     * tiled attention's time) */
    need = (need + 15) / 16 * 16;
    if (need > c->attn_scr_n) {
        float *scr = aligned_alloc(64, (size_t)(need * c->nth) * sizeof(float));
        if (!scr)
            return -ENOMEM;
        free(c->attn_scr);
        c->attn_scr = scr;
        c->attn_scr_n = need;
    }
    /* room for the fine split's items, pairs and partials: at most 4 items
     * per thread's worth of (row, KV head) pairs, as many as the step has;
     * chunks grown by doubling.  Without the room (out of memory) the steps
     * are computed whole per item, with the same bits. */
    int64_t nchmax = ops_attn_chunks(l->kv_type, l->max_kv);
    int64_t want_pairs = (int64_t)4 * c->nth < l->n_rows * l->n_head_kv ? (int64_t)4 * c->nth
                                                                         : l->n_rows * l->n_head_kv;
    int64_t pfl = grp * ATTN_PART(l->head_dim_v);
    if (nchmax > 1 && (want_pairs > c->fine_pairs || nchmax > c->fine_chunks ||
                       c->fine_pairs * c->fine_chunks * pfl > c->part_floats)) {
        int64_t pairs = want_pairs > c->fine_pairs ? want_pairs : c->fine_pairs;
        int64_t chunks = nchmax <= c->fine_chunks     ? c->fine_chunks
                         : nchmax > 2 * c->fine_chunks ? nchmax
                                                       : 2 * c->fine_chunks;
        int64_t cap = pairs * chunks;
        free(c->item_pair), free(c->item_c), free(c->pair_p0), free(c->pair_nch);
        free((void *)c->pair_done), free(c->part);
        c->item_pair = malloc((size_t)cap * sizeof(int32_t));
        c->item_c = malloc((size_t)cap * sizeof(int32_t));
        c->pair_p0 = malloc((size_t)pairs * sizeof(int64_t));
        c->pair_nch = malloc((size_t)pairs * sizeof(int32_t));
        c->pair_done = malloc((size_t)pairs * sizeof(*c->pair_done));
        c->part = malloc((size_t)(cap * pfl) * sizeof(float));
        c->fine_pairs = c->fine_chunks = c->part_floats = 0;
        if (c->item_pair && c->item_c && c->pair_p0 && c->pair_nch && c->pair_done && c->part) {
            c->fine_pairs = pairs;
            c->fine_chunks = chunks;
            c->part_floats = cap * pfl;
        }
    }
    if (l->masked && l->max_kv > c->vis_n) {
        uint8_t *p = realloc(c->vis, (size_t)(l->max_kv * c->nth));
        if (!p)
            return -ENOMEM;
        c->vis = p;
        c->vis_n = l->max_kv;
    }
    return 0;
}

static void
cpu_attention(struct backend *be, const struct backend_attn *a)
{
    struct cpu *c = cpu_of(be);
    struct attn_job j = { .c = c, .a = a };
    int64_t n_kvh = a->n_head_kv, nr = a->n_rows;
    const int tiled_ok = c->ops->attn_tiled && !a->vis0 &&
                         (a->kv_type == GGML_TYPE_F32 || a->kv_type == GGML_TYPE_F16);

    /* rows by attention arithmetic: runs of tiled rows, one-row rows */
    for (int64_t t = 0; t < nr; t++) {
        if (!(tiled_ok && a->tiled && a->tiled[t])) {
            c->one[j.n_one++] = (int32_t)t;
            continue;
        }
        int64_t r = j.n_run - 1;
        if (r < 0 || c->run1[r] != t || a->seq[t - 1] != a->seq[t] ||
            t - c->run0[r] == ATTN_TILE_Q) {
            c->run0[++r] = (int32_t)t;
            j.n_run = r + 1;
        }
        c->run1[r] = (int32_t)(t + 1);
    }
    /* one-row steps over a long context, when there are few: one item per
     * KV chunk (a decode step of a model with 3 KV heads would otherwise
     * give 2 workers 3 items) */
    if (j.n_one * n_kvh <= c->fine_pairs) {
        int64_t np = 0, n_item = 0;
        for (int64_t u = 0; u < j.n_one; u++) {
            int64_t nch = ops_attn_chunks(a->kv_type, row_n_vis(a, c->one[u]));
            if (nch > 1)
                j.fine = 1;
            for (int64_t g = 0; g < n_kvh; g++) {
                int64_t pair = u * n_kvh + g;
                c->pair_nch[pair] = (int32_t)nch;
                c->pair_p0[pair] = np;
                np += nch;
                for (int64_t k = 0; k < nch; k++) {
                    c->item_pair[n_item] = (int32_t)pair;
                    c->item_c[n_item++] = (int32_t)k;
                }
            }
        }
        j.n_item = n_item;
    }

    /* (token, kv head) items claimed one by one: their costs grow with
     * the position */
    if (j.n_run)
        threadpool_claim(c->tp, j.n_run * n_kvh, 1, attn_tiled_range, &j);
    if (j.fine) {
        for (int64_t p = 0; p < j.n_one * n_kvh; p++)
            atomic_store_explicit(&c->pair_done[p], 0, memory_order_relaxed);
        threadpool_claim(c->tp, j.n_item, 1, attn_fine_range, &j);
    } else if (j.n_one) {
        threadpool_claim(c->tp, j.n_one * n_kvh, 1, attn_range, &j);
    }
}

/* ---- per-token steps ----
 *
 * Norms, RoPE, KV stores, residual adds, scales, SwiGLU and GeGLU are
 * independent per token: a prefill chunk splits them over the pool (each
 * token's arithmetic is the same however the chunk is split). */
#define TOK_PAR_MIN 16          /* tokens from which a step is split */

enum tok_op { TOK_NORM, TOK_ROPE, TOK_KV, TOK_ADD, TOK_SILU_MUL, TOK_GELU_MUL, TOK_SCALE };

struct tok_job {
    const struct kernel_ops *ops;
    enum tok_op op;
    float *y;                   /* NORM: out; ROPE: rotated in place; ADD, SILU_MUL: x, g */
    const float *x;             /* NORM: in; ADD, SILU_MUL: y, u; ROPE: the angles */
    const float *w;             /* NORM: the weight */
    int64_t dim;                /* row width; ROPE: heads */
    int64_t hd;                 /* ROPE: head_dim */
    float eps;                  /* NORM; SCALE: the factor */
    const struct rope_params *rope;
    const struct backend_kv_store *kv;
};

/* rows [t0, t1) of a KV store */
static void
kv_rows(const struct backend_kv_store *s, int64_t t0, int64_t t1)
{
    int64_t hd = s->head_dim, hdv = s->head_dim_v;

    for (int64_t h = 0; h < s->n_head_kv; h++) {
        for (int64_t t = t0; t < t1; t++) {
            size_t off = (size_t)s->blk[t] * s->block_stride;
            uint8_t *kd = s->k_base[h] + off + (size_t)s->bidx[t] * s->k_row_bytes;
            ops_kv_row_put(s->kv_type, kd, s->k + t * s->n_head_kv * hd + h * hd, hd);
            if (!s->v)
                continue;       /* V is a view of K (MLA) */
            uint8_t *vd = s->v_base[h] + off + (size_t)s->bidx[t] * s->v_row_bytes;
            ops_kv_row_put(s->kv_type, vd, s->v + t * s->n_head_kv * hdv + h * hdv, hdv);
        }
    }
}

static void
tok_range(void *arg, int64_t t0, int64_t t1, int ith)
{
    struct tok_job *j = arg;
    const struct kernel_ops *ops = j->ops;
    int64_t D = j->dim;

    (void)ith;
    switch (j->op) {
    case TOK_NORM:
        for (int64_t t = t0; t < t1; t++)
            ops->rmsnorm(j->y + t * D, j->x + t * D, j->w, D, j->eps);
        break;
    case TOK_ROPE:
        for (int64_t t = t0; t < t1; t++)
            ops->rope(j->y + t * D * j->hd, D, j->hd, j->x + t * j->rope->n_rot, j->rope);
        break;
    case TOK_KV:
        kv_rows(j->kv, t0, t1);
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
    case TOK_GELU_MUL:
        for (int64_t t = t0; t < t1; t++)
            ops->gelu_mul(j->y + t * D, j->y + t * D, j->x + t * D, D);
        break;
    case TOK_SCALE:
        for (int64_t i = t0 * D; i < t1 * D; i++)
            j->y[i] *= j->eps;
        break;
    }
}

static void
tok_step(struct cpu *c, struct tok_job *j, int64_t n_tok)
{
    j->ops = c->ops;
    if (n_tok >= TOK_PAR_MIN)
        threadpool_for(c->tp, n_tok, 1, tok_range, j);
    else
        tok_range(j, 0, n_tok, 0);
}

static void
cpu_kv_store(struct backend *be, const struct backend_kv_store *s)
{
    struct tok_job j = { .op = TOK_KV, .kv = s };
    tok_step(cpu_of(be), &j, s->n_tok);
}

static void
cpu_get_rows(struct backend *be, float *y, const struct backend_weight *w, const int32_t *ids,
             int64_t n)
{
    const struct kernel_ops *ops = cpu_of(be)->ops;

    for (int64_t t = 0; t < n; t++)
        ops->get_row(y + t * w->cols, w->data, w->row_bytes, w->type, ids[t], w->cols);
}

static void
cpu_rmsnorm(struct backend *be, float *y, const float *x, const float *w, int64_t n_tok,
            int64_t dim, float eps)
{
    struct tok_job j = { .op = TOK_NORM, .y = y, .x = x, .w = w, .dim = dim, .eps = eps };
    tok_step(cpu_of(be), &j, n_tok);
}

static void
cpu_rope(struct backend *be, float *x, int64_t n_tok, int64_t n_heads, int64_t head_dim,
         const float *cs, const struct rope_params *p)
{
    struct tok_job j = { .op = TOK_ROPE, .y = x, .x = cs, .dim = n_heads, .hd = head_dim,
                         .rope = p };
    tok_step(cpu_of(be), &j, n_tok);
}

static void
cpu_add(struct backend *be, float *x, const float *y, int64_t n_tok, int64_t dim)
{
    struct tok_job j = { .op = TOK_ADD, .y = x, .x = y, .dim = dim };
    tok_step(cpu_of(be), &j, n_tok);
}

static void
cpu_silu_mul(struct backend *be, float *g, const float *u, int64_t n_tok, int64_t dim)
{
    struct tok_job j = { .op = TOK_SILU_MUL, .y = g, .x = u, .dim = dim };
    tok_step(cpu_of(be), &j, n_tok);
}

static void
cpu_gelu_mul(struct backend *be, float *g, const float *u, int64_t n_tok, int64_t dim)
{
    struct tok_job j = { .op = TOK_GELU_MUL, .y = g, .x = u, .dim = dim };
    tok_step(cpu_of(be), &j, n_tok);
}

static void
cpu_scale(struct backend *be, float *x, float s, int64_t n_tok, int64_t dim)
{
    struct tok_job j = { .op = TOK_SCALE, .y = x, .dim = dim, .eps = s };
    tok_step(cpu_of(be), &j, n_tok);
}

/* ---- open, close ---- */

static void
cpu_copy_rows(struct backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
              int64_t n_rows, int64_t dim)
{
    (void)be;
    for (int64_t r = 0; r < n_rows; r++)
        memcpy(y + r * ldy, x + r * ldx, (size_t)dim * sizeof(float));
}

static void
cpu_close(struct backend *be)
{
    struct cpu *c = cpu_of(be);

    threadpool_free(c->tp);
    free(c->mm_work);
    free(c->mm_tmp);
    free(c->attn_scr);
    free(c->vis);
    free(c->tnkv);
    free(c->run0);
    free(c->run1);
    free(c->one);
    free(c->item_pair);
    free(c->item_c);
    free(c->pair_p0);
    free(c->pair_nch);
    free((void *)c->pair_done);
    free(c->part);
    free(c);
}

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .supports = cpu_supports,
    .pack_size = cpu_pack_size,
    .pack = cpu_pack,
    .mm_reserve = cpu_mm_reserve,
    .attn_reserve = cpu_attn_reserve,
    .matmul = cpu_matmul,
    .attention = cpu_attention,
    .kv_store = cpu_kv_store,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .add = cpu_add,
    .silu_mul = cpu_silu_mul,
    .gelu_mul = cpu_gelu_mul,
    .scale = cpu_scale,
    .copy_rows = cpu_copy_rows,
    .backward = &backward_ops_blas,
};


int
backend_cpu_open(struct backend **out, const struct backend_config *cfg, char *why,
                 size_t why_len)
{
    const struct kernel_ops *ops = ops_select(cfg ? cfg->kernel : NULL);
    int n_threads = cfg ? cfg->n_threads : 0;
    struct cpu *c;
    int rc;

    *out = NULL;
    if (!ops) {
        const char *k = cfg && cfg->kernel ? cfg->kernel : getenv("LLMKIT_KERNEL");
        snprintf(why, why_len, "unknown or unavailable kernel '%s' (known: auto, avx512, avx2, ref)",
                 k ? k : "");
        return -EINVAL;
    }
    if (!(c = calloc(1, sizeof(*c)))) {
        snprintf(why, why_len, "out of memory");
        return -ENOMEM;
    }
    if ((rc = threadpool_new(&c->tp, n_threads)) < 0) {
        if (rc == -ERANGE)
            snprintf(why, why_len, "%d threads: at most %d", n_threads, THREADPOOL_MAX);
        else
            snprintf(why, why_len, "thread pool: %s",
                     rc == -EAGAIN ? "cannot start a thread (resource limit)" : "out of memory");
        free(c);
        return rc;
    }
    c->ops = ops;
    c->nth = threadpool_size(c->tp);
    /* the trainer's table follows the kernel choice: --kernel ref trains
     * with the scalar reference */
    c->table = cpu_ops;
    if (ops == &kernel_ops_ref)
        c->table.backward = &backward_ops_ref;
    else    /* the avx2 and avx512 kernels: AVX2 and FMA are there */
        c->table.backward = &backward_ops_blas_avx2;
    c->base.ops = &c->table;
    c->base.device = "cpu";
    c->base.kernel = ops->name;
    c->base.n_threads = c->nth;
    c->base.host = 1;
    *out = &c->base;
    return 0;
}
