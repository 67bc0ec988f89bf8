/*
 * test_cuda.c - every op of the CUDA backend (kernels/cuda) against the CPU
 * reference backend (kernel "ref") on random inputs, through the backend
 * interface as the executor calls it: the largest relative error per op and
 * type (max |dev - ref| / max |ref| over the op's outputs), checked against
 * a tolerance per op.
 *
 * Without a usable GPU (or in a build without CUDA) it says so in one line
 * and exits 77 (skipped), after running the same cases with the CPU backend
 * (auto kernel, 2 threads) in the GPU's place: that proves the harness
 * (buffers through alloc/upload/download, host and backend pointers, the
 * cases and their reference) on every machine, so that the first run on a
 * GPU tests the kernels, not the test.
 *
 *   test_cuda [--device NAME] [--json FILE] [--bench FILE]
 *
 * --device: the backend under test (default cuda); --json: the table also
 * as JSON (scripts/gpu-check); --bench: after the checks, the decode
 * kernels' achieved bandwidth (weight or KV bytes read per second, wall
 * clock over repeated steps, a download to synchronize) as JSON into FILE:
 * GEMV of a 16384 x 8192 weight in Q4_0, Q4_K and Q8_0 for one token, and
 * paged attention of 16 sequences of 4096 f16 slots (32 heads, 8 KV heads
 * of 128).  Numbers are reported, never asserted.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "ops.h"
#include "qtypes.h"
#include "quant.h"
#include "../unit/t.h"

static uint32_t seed = 20261203;

static float
rnd(void)
{
    seed = seed * 1664525u + 1013904223u;
    return (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void
fill(float *x, int64_t n, float amp)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = amp * rnd();
}

/* ---- results ---- */

/* 1: the device run (cuda), where some ops must match the reference bit for
 * bit; 0: the harness run with the CPU backend (its SIMD kernels sum in
 * another order) */
static int strict;

#define MAX_ROWS 128
static struct res {
    char op[32], type[16];
    double err, tol;
} res[MAX_ROWS];
static int n_res;

/* the error of one case into the table (the worst per op and type) */
static void
record(const char *op, const char *type, double err, double tol)
{
    int i;
    for (i = 0; i < n_res; i++)
        if (!strcmp(res[i].op, op) && !strcmp(res[i].type, type))
            break;
    if (i == n_res) {
        if (n_res == MAX_ROWS)
            return;
        snprintf(res[i].op, sizeof(res[i].op), "%s", op);
        snprintf(res[i].type, sizeof(res[i].type), "%s", type);
        res[i].err = 0.0;
        res[i].tol = tol;
        n_res++;
    }
    /* NaN counts as failing */
    if (err != err || err > res[i].err)
        res[i].err = err;
}

/* max |a - b| / max |b| (b the reference); 1e30 when a holds a NaN where
 * b does not */
static double
rel_err(const float *a, const float *b, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i]))
            return 1e30;
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num)
            num = d;
        if (fabs((double)b[i]) > den)
            den = fabs((double)b[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* ---- buffers: a device backend's are reached through upload/download ---- */

/* Host arrays a device backend may keep a copy of (weights, norm weights,
 * biases: backend.h) stay allocated, unchanged, until the end, so that no
 * later case gets their address for other values. */
static void *kept[512];
static int n_kept;

static void *
keep(void *p)
{
    if (n_kept < (int)(sizeof(kept) / sizeof(kept[0])))
        kept[n_kept++] = p;
    else
        abort();
    return p;
}

static void
free_kept(void)
{
    while (n_kept > 0)
        free(kept[--n_kept]);
}

static void *
put(struct backend *be, const void *src, size_t n)
{
    void *p = be->ops->alloc(be, n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_cuda: %s: cannot allocate %zu bytes\n", be->device, n);
        exit(1);
    }
    if (src && n)
        be->ops->upload(be, p, src, n);
    return p;
}

static void
get(struct backend *be, void *dst, const void *p, size_t n)
{
    be->ops->download(be, dst, p, n);
}

/* ---- matmul ---- */

static const uint32_t mm_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
};

/* weights of rows[i] x cols of type t quantized by the reference
 * quantizer; y = x W^T through both backends for n_tok tokens; the second
 * weight has a bias; host_io: x and y are host memory (layer_forward's
 * input, the logits) */
static void
case_matmul(struct backend *dev, struct backend *ref, uint32_t t, int64_t n_tok, int host_io)
{
    const struct qtype *qt = qtype_get(t);
    const int64_t cols = 512, rows[2] = { 96, 40 };
    size_t rb = qtype_row_bytes(t, cols);
    float *x = malloc((size_t)(n_tok * cols) * sizeof(float));
    float *bias = keep(malloc((size_t)rows[1] * sizeof(float)));
    float *wf = malloc((size_t)(rows[0] * cols) * sizeof(float));
    uint8_t *wq[2];
    float *yr[2], *yd[2];
    fill(x, n_tok * cols, 2.0f);
    fill(bias, rows[1], 1.0f);
    for (int i = 0; i < 2; i++) {
        wq[i] = keep(malloc(rb * (size_t)rows[i]));
        fill(wf, rows[i] * cols, 0.5f);
        CHECK(quant_chunk(t, wf, wq[i], rows[i], cols, NULL) == rb * (size_t)rows[i]);
        yr[i] = malloc((size_t)(n_tok * rows[i]) * sizeof(float));
        yd[i] = malloc((size_t)(n_tok * rows[i]) * sizeof(float));
    }

    /* the device side: weights through pack when the backend packs (as
     * model.c does), else as they are */
    struct backend_weight bw[2];
    void *wdev[2];
    for (int i = 0; i < 2; i++) {
        bw[i] = (struct backend_weight){ wq[i], NULL, rb, t, rows[i], cols };
        size_t ps = dev->ops->pack_size(dev, t, rows[i], cols);
        wdev[i] = ps ? dev->ops->alloc(dev, ps) : NULL;
        if (wdev[i]) {
            dev->ops->pack(dev, wdev[i], &bw[i]);
            bw[i].packed = wdev[i];
        }
    }
    float *xd = host_io ? x : put(dev, x, (size_t)(n_tok * cols) * sizeof(float));
    float *ydd[2];
    for (int i = 0; i < 2; i++)
        ydd[i] = host_io ? yd[i] : put(dev, NULL, (size_t)(n_tok * rows[i]) * sizeof(float));
    CHECK_EQ(dev->ops->mm_reserve(dev, t, n_tok, cols), 0);
    struct backend_matmul mm = { 2, { &bw[0], &bw[1] }, { NULL, bias }, { ydd[0], ydd[1] },
                                 { rows[0], rows[1] }, xd, cols, n_tok, 0, NULL };
    dev->ops->matmul(dev, &mm);
    if (!host_io)
        for (int i = 0; i < 2; i++)
            get(dev, yd[i], ydd[i], (size_t)(n_tok * rows[i]) * sizeof(float));

    struct backend_weight br[2] = { { wq[0], NULL, rb, t, rows[0], cols },
                                    { wq[1], NULL, rb, t, rows[1], cols } };
    CHECK_EQ(ref->ops->mm_reserve(ref, t, n_tok, cols), 0);
    struct backend_matmul mr = { 2, { &br[0], &br[1] }, { NULL, bias }, { yr[0], yr[1] },
                                 { rows[0], rows[1] }, x, cols, n_tok, 0, NULL };
    ref->ops->matmul(ref, &mr);

    double e = 0.0;
    for (int i = 0; i < 2; i++) {
        double ei = rel_err(yd[i], yr[i], n_tok * rows[i]);
        e = ei > e || ei != ei ? ei : e;
    }
    char op[32];
    snprintf(op, sizeof(op), "matmul n=%lld%s", (long long)n_tok, host_io ? " host" : "");
    /* the CUDA GEMV (under 16 tokens; Q4_1 always) is the reference's bit
     * for bit; the tiled GEMM sums in another order (integer code sums are
     * exact on both sides: what remains is f32 rounding), as does the CPU
     * backend of the harness run (its SIMD order) */
    int exact = strict && (n_tok < 16 || t == GGML_TYPE_Q4_1);
    record(op, qt->name, e, exact ? 0.0 : 1e-4);

    for (int i = 0; i < 2; i++) {
        if (wdev[i])
            dev->ops->free(dev, wdev[i]);
        if (!host_io)
            dev->ops->free(dev, ydd[i]);
        free(yr[i]), free(yd[i]);
    }
    if (!host_io)
        dev->ops->free(dev, xd);
    free(x), free(wf);
}

/* ---- get_rows ---- */

static void
case_get_rows(struct backend *dev, struct backend *ref, uint32_t t)
{
    const struct qtype *qt = qtype_get(t);
    const int64_t cols = 512, rows = 50, n = 7;
    size_t rb = qtype_row_bytes(t, cols);
    float *wf = malloc((size_t)(rows * cols) * sizeof(float));
    uint8_t *wq = keep(malloc(rb * (size_t)rows));
    float *yd = malloc((size_t)(n * cols) * sizeof(float)), *yr = malloc((size_t)(n * cols) * 4);
    int32_t ids[7] = { 3, 0, 49, 17, 17, 8, 31 };
    fill(wf, rows * cols, 1.0f);
    CHECK(quant_chunk(t, wf, wq, rows, cols, NULL) == rb * (size_t)rows);
    /* the token embedding stays in the mapped file: a host pointer */
    struct backend_weight w = { wq, NULL, rb, t, rows, cols };
    float *y = put(dev, NULL, (size_t)(n * cols) * sizeof(float));
    dev->ops->get_rows(dev, y, &w, ids, n);
    get(dev, yd, y, (size_t)(n * cols) * sizeof(float));
    ref->ops->get_rows(ref, yr, &w, ids, n);
    record("get_rows", qt->name, rel_err(yd, yr, n * cols), 1e-6);
    dev->ops->free(dev, y);
    free(wf), free(yd), free(yr);
}

/* ---- per-token ops ---- */

enum tok { T_NORM, T_ROPE, T_ROPE_NEOX, T_ADD, T_SILU, T_GELU, T_SCALE, T_NORM_HOST };

static void
case_token(struct backend *dev, struct backend *ref, enum tok op)
{
    const int64_t n_tok = 21, heads = 9, hd = 64, dim = heads * hd;
    const size_t b = (size_t)(n_tok * dim) * sizeof(float);
    float *x = malloc(b), *u = malloc(b), *w = keep(malloc((size_t)dim * sizeof(float)));
    float *yd = malloc(b), *yr = malloc(b);
    struct rope_params rp = { op == T_ROPE_NEOX ? ROPE_NEOX : ROPE_NORM, 48, 10000.0f, 1.0f, NULL,
                              0.0f, 1.0f, { 0.0f, 0.0f } };
    float *cs = malloc((size_t)(n_tok * rp.n_rot) * sizeof(float));
    fill(x, n_tok * dim, op == T_GELU ? 12.0f : 3.0f);
    fill(u, n_tok * dim, 2.0f);
    fill(w, dim, 1.0f);
    for (int64_t t = 0; t < n_tok; t++)
        ops_rope_angles(cs + t * rp.n_rot, (int32_t)(t * 37 + 5), &rp);
    memcpy(yr, x, b);

    float *xd = put(dev, x, b), *ud = put(dev, u, b);
    const char *name = "?";
    double tol = 1e-6;
    switch (op) {
    case T_NORM:
        dev->ops->rmsnorm(dev, xd, xd, w, n_tok, dim, 1e-5f);
        ref->ops->rmsnorm(ref, yr, yr, w, n_tok, dim, 1e-5f);
        name = "rmsnorm";
        break;
    case T_NORM_HOST:           /* layer_forward's input: a host pointer in place */
        memcpy(yd, x, b);
        dev->ops->rmsnorm(dev, yd, yd, w, n_tok, dim, 1e-5f);
        ref->ops->rmsnorm(ref, yr, yr, w, n_tok, dim, 1e-5f);
        name = "rmsnorm host";
        break;
    case T_ROPE:
    case T_ROPE_NEOX:
        dev->ops->rope(dev, xd, n_tok, heads, hd, cs, &rp);
        ref->ops->rope(ref, yr, n_tok, heads, hd, cs, &rp);
        name = op == T_ROPE ? "rope" : "rope neox";
        tol = 0.0;              /* the same fma and product: bit for bit */
        break;
    case T_ADD:
        dev->ops->add(dev, xd, ud, n_tok, dim);
        ref->ops->add(ref, yr, u, n_tok, dim);
        name = "add";
        tol = 0.0;
        break;
    case T_SILU:
        dev->ops->silu_mul(dev, xd, ud, n_tok, dim);
        ref->ops->silu_mul(ref, yr, u, n_tok, dim);
        name = "silu_mul";
        break;
    case T_GELU:
        /* an f16 rounding of gelu may flip where tanhf differs by an ulp */
        dev->ops->gelu_mul(dev, xd, ud, n_tok, dim);
        ref->ops->gelu_mul(ref, yr, u, n_tok, dim);
        name = "gelu_mul";
        tol = 2e-3;
        break;
    case T_SCALE:
        dev->ops->scale(dev, xd, 0.37f, n_tok, dim);
        ref->ops->scale(ref, yr, 0.37f, n_tok, dim);
        name = "scale";
        tol = 0.0;
        break;
    }
    if (op != T_NORM_HOST)
        get(dev, yd, xd, b);
    record(name, "f32", rel_err(yd, yr, n_tok * dim), tol);
    dev->ops->free(dev, xd);
    dev->ops->free(dev, ud);
    free(x), free(u), free(yd), free(yr), free(cs);
}

/* ---- KV store and attention ---- */

#define NH 8
#define NKVH 2
#define HD 64
#define BS 16
#define NSEQ 3

static size_t
kv_row(uint32_t kt, int64_t n)
{
    return kt == GGML_TYPE_F32 ? (size_t)n * 4 : kt == GGML_TYPE_F16 ? (size_t)n * 2
                                                                     : (size_t)(n / 32) * 34;
}

/* A pool of blocks holding NSEQ sequences (lengths len[]) in shuffled
 * blocks, written by kv_store on both backends (the bytes must agree), then
 * attention steps over it: decode rows (one per sequence, one past the split
 * threshold), a prefill run of one sequence, a sliding window, a tree mask,
 * and a step whose rows are all past the split threshold. */
static void
case_attention(struct backend *dev, struct backend *ref, uint32_t kt)
{
    const char *tn = qtype_get(kt)->name;
    const int64_t len[NSEQ] = { 37, 1500, 200 };
    int64_t nblk[NSEQ], total_blk = 0, total_tok = 0;
    for (int s = 0; s < NSEQ; s++) {
        nblk[s] = (len[s] + BS - 1) / BS;
        total_blk += nblk[s];
        total_tok += len[s];
    }
    const size_t krow = kv_row(kt, HD), stride = (size_t)NKVH * BS * 2 * krow;
    const size_t pool_b = (size_t)total_blk * stride;
    /* physical blocks: a permutation */
    int32_t *perm = malloc((size_t)total_blk * sizeof(int32_t));
    for (int64_t i = 0; i < total_blk; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = total_blk - 1; i > 0; i--) {
        int64_t j = (int64_t)((rnd() + 1.0f) * 0.5f * (float)i);
        int32_t tmp = perm[i];
        perm[i] = perm[j < 0 ? 0 : j > i ? i : j];
        perm[j < 0 ? 0 : j > i ? i : j] = tmp;
    }
    int32_t *table[NSEQ];
    for (int s = 0, at = 0; s < NSEQ; s++) {
        table[s] = perm + at;
        at += (int)nblk[s];
    }
    uint8_t *pool_r = calloc(1, pool_b), *pool_back = malloc(pool_b);
    uint8_t *pool_d = put(dev, pool_r, pool_b);
    uint8_t *kb_r[NKVH], *vb_r[NKVH], *kb_d[NKVH], *vb_d[NKVH];
    for (int g = 0; g < NKVH; g++) {
        kb_r[g] = pool_r + (size_t)g * BS * krow;
        vb_r[g] = pool_r + (size_t)(NKVH + g) * BS * krow;
        kb_d[g] = pool_d + (size_t)g * BS * krow;
        vb_d[g] = pool_d + (size_t)(NKVH + g) * BS * krow;
    }
    /* every slot of every sequence through kv_store, 64 tokens a step */
    float *k = malloc((size_t)(64 * NKVH * HD) * sizeof(float));
    float *v = malloc((size_t)(64 * NKVH * HD) * sizeof(float));
    int32_t blk[64];
    int64_t bidx[64];
    float *kd = put(dev, NULL, (size_t)(64 * NKVH * HD) * sizeof(float));
    float *vd = put(dev, NULL, (size_t)(64 * NKVH * HD) * sizeof(float));
    for (int s = 0; s < NSEQ; s++) {
        for (int64_t p0 = 0; p0 < len[s]; p0 += 64) {
            int64_t n = len[s] - p0 < 64 ? len[s] - p0 : 64;
            fill(k, n * NKVH * HD, 1.0f);
            fill(v, n * NKVH * HD, 1.0f);
            for (int64_t t = 0; t < n; t++) {
                blk[t] = table[s][(p0 + t) / BS];
                bidx[t] = (p0 + t) % BS;
            }
            dev->ops->upload(dev, kd, k, (size_t)(n * NKVH * HD) * sizeof(float));
            dev->ops->upload(dev, vd, v, (size_t)(n * NKVH * HD) * sizeof(float));
            struct backend_kv_store sd = { kd, vd, n, NKVH, HD, HD, kb_d, vb_d, stride, krow, krow,
                                           kt, blk, bidx };
            dev->ops->kv_store(dev, &sd);
            struct backend_kv_store sr = { k, v, n, NKVH, HD, HD, kb_r, vb_r, stride, krow, krow,
                                           kt, blk, bidx };
            ref->ops->kv_store(ref, &sr);
        }
    }
    get(dev, pool_back, pool_d, pool_b);
    record("kv_store", tn, memcmp(pool_back, pool_r, pool_b) == 0 ? 0.0 : 1.0, 0.0);
    for (size_t i = 0, shown = 0; i < pool_b && shown < 8; i++)
        if (pool_back[i] != pool_r[i]) {     /* where the bytes part, to tell what differs */
            fprintf(stderr, "kv_store %s: byte %zu (row byte %zu): device %u, reference %u\n", tn,
                    i, i % krow, pool_back[i], pool_r[i]);
            shown++;
        }

    /* the steps: rows of (sequence, n_kv, lo, mask) */
    enum { R_MAX = 24 };
    struct { const char *name; int n; } steps[] = {
        { "attn decode", 3 }, { "attn prefill", 20 }, { "attn window", 3 }, { "attn tree", 4 },
        { "attn split", 2 },    /* every row past ATTN_SPLIT_MIN: split as the CPU splits */
    };
    /* the GPU walks the slots as the reference does (its f16 accumulator and
     * q8_0 query included): what remains is expf's last bit (CUDA's expf is
     * not glibc's), which with an f16 accumulator may flip a rounding to f16
     * and carry on through the slots after it: on an H200, over these 1500
     * slots, 2.7e-3 (decode) and 1.04e-2 (tree) of the largest output; f32
     * and q8_0 caches (f32 accumulators) stay within 2e-6 */
    const double tol = kt == GGML_TYPE_F16 ? 2e-2 : 1e-4;
    for (size_t si = 0; si < sizeof(steps) / sizeof(steps[0]); si++) {
        int nr = steps[si].n;
        const int32_t *rt[R_MAX];
        int64_t nkv[R_MAX], lo[R_MAX], vis0[R_MAX];
        int32_t seq[R_MAX];
        uint8_t tiled[R_MAX], vis[R_MAX * 4];
        for (int r = 0; r < nr; r++) {
            int s = si == 1 ? 2 : si == 3 || si == 4 ? 1 : r;
            seq[r] = s;
            rt[r] = table[s];
            tiled[r] = 0;
            lo[r] = 0;
            nkv[r] = len[s];
            if (si == 1)                /* the last 20 tokens of sequence 2, causal */
                nkv[r] = len[s] - 20 + r + 1;
            if (si == 2)                /* a window of 100 slots */
                lo[r] = nkv[r] > 100 ? nkv[r] - 100 : 0;
            if (si == 4)                /* two decode rows of the long sequence */
                nkv[r] = r ? 700 : len[s];
            if (si == 3) {              /* 4 tree nodes in the last 4 slots */
                nkv[r] = len[s] - 4 + r + 1;
                vis0[r] = len[s] - 4;
                for (int j = 0; j < 4; j++)
                    vis[r * 4 + j] = (uint8_t)(j == r || j == 0 || (r == 3 && j == 1));
            }
        }
        size_t qb = (size_t)(nr * NH * HD) * sizeof(float);
        float *q = malloc(qb), *od = malloc(qb), *orf = malloc(qb);
        fill(q, nr * NH * HD, 1.0f);
        float *qd = put(dev, q, qb), *odd = put(dev, NULL, qb);
        struct backend_attn a = {
            qd, odd, nr, NH, NKVH, HD, HD, 0.125f, (const uint8_t *const *)kb_d,
            (const uint8_t *const *)vb_d, stride, kt, BS, rt, nkv, seq, tiled,
            si == 3 ? vis0 : NULL, vis, 4, si == 2 ? lo : NULL, 0,
        };
        struct backend_attn_limits l = { nr, NH, NKVH, HD, HD, kt, BS, len[1], si == 3, 0 };
        CHECK_EQ(dev->ops->attn_reserve(dev, &l), 0);
        dev->ops->attention(dev, &a);
        get(dev, od, odd, qb);
        CHECK_EQ(ref->ops->attn_reserve(ref, &l), 0);
        a.q = q;
        a.out = orf;
        a.k_base = (const uint8_t *const *)kb_r;
        a.v_base = (const uint8_t *const *)vb_r;
        ref->ops->attention(ref, &a);
        record(steps[si].name, tn, rel_err(od, orf, nr * NH * HD), tol);
        dev->ops->free(dev, qd);
        dev->ops->free(dev, odd);
        free(q), free(od), free(orf);
    }
    dev->ops->free(dev, pool_d);
    dev->ops->free(dev, kd);
    dev->ops->free(dev, vd);
    free(pool_r), free(pool_back), free(perm), free(k), free(v);
}

/* ---- --bench ---- */

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GB/s of reading `bytes` per step over reps steps of fn */
static double
gbps(struct backend *be, void (*fn)(struct backend *, void *), void *arg, double bytes,
     float *sync)
{
    float tmp;
    fn(be, arg);                        /* warm-up */
    be->ops->download(be, &tmp, sync, sizeof(tmp));
    const int reps = 50;
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        fn(be, arg);
    be->ops->download(be, &tmp, sync, sizeof(tmp));
    return bytes * reps / (now_s() - t0) / 1e9;
}

static void
step_mm(struct backend *be, void *arg)
{
    be->ops->matmul(be, arg);
}

static void
step_attn(struct backend *be, void *arg)
{
    be->ops->attention(be, arg);
}

static void
bench(struct backend *be, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "test_cuda: %s: cannot write\n", path);
        t_fail++;
        return;
    }
    fprintf(f, "{\"device\": \"%s\", \"kernels\": [", be->device);
    static const uint32_t bt[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q8_0 };
    const int64_t rows = 16384, cols = 8192;
    float *x = malloc((size_t)cols * sizeof(float));
    fill(x, cols, 1.0f);
    float *xd = put(be, x, (size_t)cols * sizeof(float));
    float *yd = put(be, NULL, (size_t)rows * sizeof(float));
    for (size_t i = 0; i < sizeof(bt) / sizeof(bt[0]); i++) {
        size_t rb = qtype_row_bytes(bt[i], cols);
        /* random codes are enough for timing: the weight bytes as they are */
        uint8_t *w = keep(malloc(rb * (size_t)rows));
        for (size_t k = 0; k < rb * (size_t)rows; k++)
            w[k] = (uint8_t)(rnd() * 50.0f);
        /* keep the scales finite: no NaN/Inf fp16 scales */
        for (size_t k = 1; k < rb * (size_t)rows; k += 2)
            w[k] &= 0x3b;
        struct backend_weight bw = { w, NULL, rb, bt[i], rows, cols };
        size_t ps = be->ops->pack_size(be, bt[i], rows, cols);
        void *pk = ps ? be->ops->alloc(be, ps) : NULL;
        if (pk) {
            be->ops->pack(be, pk, &bw);
            bw.packed = pk;
        }
        CHECK_EQ(be->ops->mm_reserve(be, bt[i], 1, cols), 0);
        struct backend_matmul mm = { 1, { &bw }, { NULL }, { yd }, { rows }, xd, cols, 1, 0, NULL };
        double g = gbps(be, step_mm, &mm, (double)(rb * (size_t)rows), yd);
        printf("bench gemv %-5s %lld x %lld, 1 token: %.1f GB/s\n", qtype_get(bt[i])->name,
               (long long)rows, (long long)cols, g);
        fprintf(f, "%s\n  {\"kernel\": \"gemv\", \"type\": \"%s\", \"bytes\": %zu, \"gbps\": %.2f}",
                i ? "," : "", qtype_get(bt[i])->name, rb * (size_t)rows, g);
        if (pk)
            be->ops->free(be, pk);
    }
    /* paged attention decode: 16 sequences x 4096 slots, f16 */
    enum { S = 16, L = 4096, H = 32, KH = 8, D = 128, B = 16 };
    const size_t row = (size_t)D * 2, stride = (size_t)KH * B * 2 * row;
    const int64_t nb = L / B;
    uint8_t *pool = put(be, NULL, stride * (size_t)(S * nb));
    uint8_t *kb[KH], *vb[KH];
    for (int g = 0; g < KH; g++) {
        kb[g] = pool + (size_t)g * B * row;
        vb[g] = pool + (size_t)(KH + g) * B * row;
    }
    /* zeroed KV through a store of zeros would take long: upload zeros */
    uint8_t *zero = calloc(1, stride);
    for (int64_t b = 0; b < S * nb; b++)
        be->ops->upload(be, pool + (size_t)b * stride, zero, stride);
    free(zero);
    int32_t *tabs = malloc((size_t)(S * nb) * sizeof(int32_t));
    const int32_t *rt[S];
    int64_t nkv[S];
    int32_t seq[S];
    uint8_t tiled[S] = { 0 };
    for (int s = 0; s < S; s++) {
        for (int64_t b = 0; b < nb; b++)
            tabs[s * nb + b] = (int32_t)(s * nb + b);
        rt[s] = tabs + s * nb;
        nkv[s] = L;
        seq[s] = s;
    }
    float *q = malloc((size_t)(S * H * D) * sizeof(float));
    fill(q, S * H * D, 1.0f);
    float *qd = put(be, q, (size_t)(S * H * D) * sizeof(float));
    float *od = put(be, NULL, (size_t)(S * H * D) * sizeof(float));
    struct backend_attn a = { qd, od, S, H, KH, D, D, 0.088f, (const uint8_t *const *)kb,
                              (const uint8_t *const *)vb, stride, GGML_TYPE_F16, B, rt, nkv, seq,
                              tiled, NULL, NULL, 0, NULL, 0 };
    struct backend_attn_limits l = { S, H, KH, D, D, GGML_TYPE_F16, B, L, 0, 0 };
    CHECK_EQ(be->ops->attn_reserve(be, &l), 0);
    double kvbytes = (double)S * L * KH * 2.0 * (double)row;
    double g = gbps(be, step_attn, &a, kvbytes, od);
    printf("bench attention decode f16, %d seqs x %d slots: %.1f GB/s\n", S, L, g);
    fprintf(f, ",\n  {\"kernel\": \"attention\", \"type\": \"F16\", \"bytes\": %.0f, \"gbps\": %.2f}",
            kvbytes, g);
    fprintf(f, "\n]}\n");
    fclose(f);
    be->ops->free(be, pool);
    be->ops->free(be, qd);
    be->ops->free(be, od);
    be->ops->free(be, xd);
    be->ops->free(be, yd);
    free(x), free(q), free(tabs);
}

/* ---- all cases ---- */

static void
run_all(struct backend *dev, struct backend *ref)
{
    static const int64_t ntoks[] = { 1, 3, 8, 20, 70 };
    for (size_t i = 0; i < sizeof(mm_types) / sizeof(mm_types[0]); i++) {
        for (size_t k = 0; k < sizeof(ntoks) / sizeof(ntoks[0]); k++)
            case_matmul(dev, ref, mm_types[i], ntoks[k], 0);
        case_matmul(dev, ref, mm_types[i], 2, 1);
        case_get_rows(dev, ref, mm_types[i]);
    }
    for (int op = T_NORM; op <= T_NORM_HOST; op++)
        case_token(dev, ref, (enum tok)op);
    case_attention(dev, ref, GGML_TYPE_F32);
    case_attention(dev, ref, GGML_TYPE_F16);
    case_attention(dev, ref, GGML_TYPE_Q8_0);
}

/* checks the table; prints it (and writes JSON) when asked */
static int
report(const char *device, int print, const char *json)
{
    int bad = 0;
    FILE *f = json ? fopen(json, "w") : NULL;
    if (json && !f)
        fprintf(stderr, "test_cuda: %s: cannot write\n", json);
    if (f)
        fprintf(f, "{\"device\": \"%s\", \"ops\": [", device);
    if (print)
        printf("%-22s %-6s %12s %10s\n", "op", "type", "max rel err", "tolerance");
    for (int i = 0; i < n_res; i++) {
        int ok = res[i].err <= res[i].tol;
        bad += !ok;
        if (print || !ok)
            fprintf(ok ? stdout : stderr, "%-22s %-6s %12.3g %10.3g%s\n", res[i].op, res[i].type,
                    res[i].err, res[i].tol, ok ? "" : "  FAIL");
        if (f)
            fprintf(f, "%s\n  {\"op\": \"%s\", \"type\": \"%s\", \"max_rel_err\": %.6g, "
                    "\"tolerance\": %.6g, \"ok\": %s}", i ? "," : "", res[i].op, res[i].type,
                    res[i].err, res[i].tol, ok ? "true" : "false");
        CHECK(ok);
    }
    if (f) {
        fprintf(f, "\n]}\n");
        fclose(f);
    }
    return bad;
}

int
main(int argc, char **argv)
{
    const char *device = "cuda", *json = NULL, *bench_json = NULL;
    char why[256];
    struct backend *ref, *dev, *harness;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--bench") && i + 1 < argc)
            bench_json = argv[++i];
        else {
            fprintf(stderr, "usage: test_cuda [--device NAME] [--json FILE] [--bench FILE]\n");
            return 2;
        }
    }
    struct backend_config rc = { 1, "ref" }, hc = { 2, NULL };
    if (backend_open(&ref, "cpu", &rc, why, sizeof(why)) < 0) {
        fprintf(stderr, "test_cuda: %s\n", why);
        return 1;
    }
    /* the harness itself, with the CPU backend in the device's place */
    if (backend_open(&harness, "cpu", &hc, why, sizeof(why)) < 0) {
        fprintf(stderr, "test_cuda: %s\n", why);
        return 1;
    }
    run_all(harness, ref);
    if (report("cpu", 0, NULL))
        fprintf(stderr, "test_cuda: the harness fails with the CPU backend in the device's place\n");
    backend_close(harness);
    free_kept();
    n_res = 0;

    int rc_open = backend_open(&dev, device, NULL, why, sizeof(why));
    if (rc_open < 0) {
        backend_close(ref);
        if (t_fail)
            T_DONE();
        printf("test_cuda: skipped: %s\n", why);
        return 77;
    }
    printf("test_cuda: %s backend against the CPU reference\n", dev->device);
    strict = strcmp(dev->device, "cuda") == 0;
    run_all(dev, ref);
    report(dev->device, 1, json);
    if (bench_json)
        bench(dev, bench_json);
    backend_close(dev);
    backend_close(ref);
    free_kept();
    T_DONE();
}
