// attn.cu - the CUDA backend's attention and KV store steps (backend.h
// struct backend_attn, struct backend_kv_store) over the paged KV pool in
// device memory.
//
// Attention, one kernel for decode and prefill (FlashAttention-2 style):
// the step's rows are cut into runs of consecutive rows of one sequence
// (at most 16 / group rows: a decode row is a run of its own); a CTA takes
// one run, one KV head and up to 16 of its query heads (the (row, head)
// pairs, at most 4 a warp), and one KV chunk.  The pairs' queries stay in
// shared memory; the run's slots are walked in tiles of 32 whose K and V
// rows are converted to f32 into shared memory once for all the pairs;
// lane j scores slot j of the tile (q.k as the reference: products added in
// order, unfused), then each pair's warp takes the tile's visible slots in
// order with the reference's online softmax (ops_attn_ref, ggml's one-chunk
// walk: a new maximum rescales accumulator and sum, other slots weigh
// exp(s - M); with an f16 cache the query is rounded to f16 and the
// accumulator after every update), its running max, sum and accumulator in
// the warp's registers.  Each row applies its own visibility: slots below
// n_kv, at or above the window's lower bound lo, and under a tree mask the
// flagged ones (backend.h).
//
// Split KV where the CPU splits (ops.h ATTN_SPLIT_MIN: f32/f16 cache, no
// mask, n_kv >= 512; here when every row of the step is that long, as a
// decode step's are): each CTA takes a chunk of ATTN_SPLIT_KV slots aligned
// at slot 0 and writes its (M, S, acc) partial; a second kernel combines
// them in chunk order as ops_attn_combine_* do.  So for decode rows the
// arithmetic is the reference's but for expf's last bit (CUDA's expf
// against libm's), q8_0 caches included (the query quantized to q8_0, q.k
// as q8_0 x q8_0 blocks, V dequantized: as the reference); prefill rows
// (the CPU's tiled arithmetic, attn_tiled) agree to rounding only.

// NOT YET RUN ON A GPU (see cuda_int.cuh).
#include <string.h>

#include "cuda_int.cuh"

#define AT_WARPS 4
#define AT_PAIRS 16             // (row, head) pairs per CTA
#define AT_TS 32                // slots per tile
#define AT_MAXD 256             // largest head dim

// per-step rows, uploaded with the step (int64 unless noted)
struct at_meta {
    const int64_t *nkv, *lo, *vis0, *tab;       // [n_rows]; tab: offset into tabs
    const int64_t *run0;        // [n_runs + 1]
    const int32_t *tabs;        // the rows' block tables, back to back
    const uint8_t *vis;         // [n_rows][ld_vis] or NULL
    const uint8_t *const *kb, *const *vb;       // [n_head_kv]
};

struct at_args {
    struct at_meta m;
    const float *q;
    float *out;
    float *part;                // [n_rows][n_head][n_chunks][2 + dv] when split
    int64_t n_head, n_head_kv, hd, hdv, grp, hs, n_hsub;
    float scale;
    uint32_t kv_type;
    int64_t block_size;
    size_t block_stride, k_row, v_row;
    int64_t ld_vis;
    int64_t n_chunks, chunk;    // chunk: slots per chunk (n_chunks == 1: all)
};

static __device__ __forceinline__ float
kv_elem(const uint8_t *row, uint32_t type, int64_t d)
{
    if (type == GGML_TYPE_F32)
        return ((const float *)(const void *)row)[d];
    if (type == GGML_TYPE_F16)
        return h2f(((const uint16_t *)(const void *)row)[d]);
    const uint8_t *b = row + (d / 32) * 34;     // Q8_0
    return (float)(int8_t)b[2 + d % 32] * h2f(ld16(b));
}

static __device__ __forceinline__ int
at_visible(const struct at_args &p, int64_t r, int64_t s)
{
    if (s >= p.m.nkv[r] || s < p.m.lo[r])
        return 0;
    int64_t v0 = p.m.vis0[r];
    if (v0 < 0 || s < v0)
        return 1;
    return p.m.vis[r * p.ld_vis + (s - v0)] != 0;
}

__global__ void __launch_bounds__(AT_WARPS * 32)
k_attn(struct at_args p)
{
    extern __shared__ float sm[];
    const int64_t run = blockIdx.x;
    const int64_t g = blockIdx.y / p.n_hsub, hsub = blockIdx.y % p.n_hsub;
    const int64_t ch = blockIdx.z;
    const int64_t r0 = p.m.run0[run], nr = p.m.run0[run + 1] - r0;
    const int64_t h0 = hsub * p.hs;
    const int64_t nh = p.grp - h0 < p.hs ? p.grp - h0 : p.hs;
    const int64_t npairs = nr * nh;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t hd = p.hd, hdv = p.hdv;
    float *qs = sm;                                  // [AT_PAIRS][hd]
    float *ks = qs + AT_PAIRS * hd;                  // [AT_TS][hd + 1]
    float *vs = ks + AT_TS * (hd + 1);               // [AT_TS][hdv + 1]
    // a q8_0 cache: qs and ks hold codes, these their blocks' scales
    float *qds = vs + AT_TS * (hdv + 1);             // [AT_PAIRS][hd / 32]
    float *kds = qds + AT_PAIRS * (hd / 32);         // [AT_TS][hd / 32]
    const int q8 = p.kv_type == GGML_TYPE_Q8_0;

    // the pairs' queries (rounded to f16 with an f16 cache, as the CPU)
    for (int64_t i = threadIdx.x; i < npairs * hd; i += blockDim.x) {
        int64_t pr = i / hd, d = i % hd;
        int64_t r = r0 + pr / nh, h = g * p.grp + h0 + pr % nh;
        float v = p.q[r * p.n_head * hd + h * hd + d];
        qs[pr * hd + d] = p.kv_type == GGML_TYPE_F16 ? h2f(f2h(v)) : v;
    }
    if (q8) {
        // the query as q8_0 blocks, as the reference quantizes it
        __syncthreads();
        for (int64_t bq = warp; bq < npairs * (hd / 32); bq += AT_WARPS) {
            float d;
            float *qb = qs + bq * 32;    // (pair pr's block b = pr * hd / 32 + b)
            int code = warp_q8(qb[lane], &d);
            qb[lane] = (float)code;
            if (lane == 0)
                qds[bq] = h2f(f2h(d));
        }
    }
    // the run's slot range in this chunk
    int64_t smax = 0;
    for (int64_t k = 0; k < nr; k++)
        smax = p.m.nkv[r0 + k] > smax ? p.m.nkv[r0 + k] : smax;
    int64_t s0 = ch * p.chunk, s1 = s0 + p.chunk < smax ? s0 + p.chunk : smax;
    if (p.n_chunks == 1)
        s0 = 0, s1 = smax;
    // (a window's lower bound: tiles below every row's lo are skipped)
    int64_t lomin = INT64_MAX;
    for (int64_t k = 0; k < nr; k++)
        lomin = p.m.lo[r0 + k] < lomin ? p.m.lo[r0 + k] : lomin;
    if (lomin > s0)
        s0 = lomin / AT_TS * AT_TS > s0 ? lomin / AT_TS * AT_TS : s0;

    float M[4], S[4], acc[4][AT_MAXD / 32];
    for (int k = 0; k < 4; k++) {
        M[k] = -INFINITY;
        S[k] = 0.0f;
        for (int i = 0; i < AT_MAXD / 32; i++)
            acc[k][i] = 0.0f;
    }
    const int f16acc = p.kv_type == GGML_TYPE_F16;
    const int32_t *tab = p.m.tabs + p.m.tab[r0];        // a run shares one table
    const uint8_t *kb = p.m.kb[g], *vb = p.m.vb[g];
    __syncthreads();

    for (int64_t t0 = s0; t0 < s1; t0 += AT_TS) {
        int64_t nts = s1 - t0 < AT_TS ? s1 - t0 : AT_TS;
        for (int64_t i = threadIdx.x; i < nts * hd; i += blockDim.x) {
            int64_t j = i / hd, d = i % hd, s = t0 + j;
            size_t off = (size_t)tab[s / p.block_size] * p.block_stride;
            const uint8_t *krow = kb + off + (size_t)(s % p.block_size) * p.k_row;
            if (q8) {
                const uint8_t *b = krow + (d / 32) * 34;
                ks[j * (hd + 1) + d] = (float)(int8_t)b[2 + d % 32];
                if (d % 32 == 0)
                    kds[j * (hd / 32) + d / 32] = h2f(ld16(b));
            } else {
                ks[j * (hd + 1) + d] = kv_elem(krow, p.kv_type, d);
            }
        }
        for (int64_t i = threadIdx.x; i < nts * hdv; i += blockDim.x) {
            int64_t j = i / hdv, d = i % hdv, s = t0 + j;
            size_t off = (size_t)tab[s / p.block_size] * p.block_stride;
            vs[j * (hdv + 1) + d] = kv_elem(vb + off + (size_t)(s % p.block_size) * p.v_row,
                                            p.kv_type, d);
        }
        __syncthreads();
        for (int k = 0; k < 4; k++) {
            int64_t pr = (int64_t)k * AT_WARPS + warp;
            if (pr >= npairs)
                break;
            int64_t r = r0 + pr / nh;
            int64_t s = t0 + lane;
            int vis = lane < nts && at_visible(p, r, s);
            float sc = -INFINITY;
            if (vis) {
                // q.k as the reference: products added in order, unfused
                const float *qq = qs + pr * hd, *kk = ks + lane * (hd + 1);
                float dot = 0.0f;
                if (q8) {
                    // q8_0 x q8_0 blocks: exact integer sums (in f32: below
                    // 2^24), scaled per block, added in order
                    for (int64_t b = 0; b < hd / 32; b++) {
                        float si = 0.0f;
                        for (int e = 0; e < 32; e++)
                            si = __fadd_rn(si, __fmul_rn(qq[32 * b + e], kk[32 * b + e]));
                        dot = __fadd_rn(dot, __fmul_rn(si, __fmul_rn(qds[pr * (hd / 32) + b],
                                                                     kds[lane * (hd / 32) + b])));
                    }
                } else {
                    for (int64_t d = 0; d < hd; d++)
                        dot = __fadd_rn(dot, __fmul_rn(qq[d], kk[d]));
                }
                sc = __fmul_rn(dot, p.scale);
            }
            if (!__any_sync(0xffffffffu, vis))
                continue;                // nothing visible in this tile for the pair
            // the slots in order, as ggml's one-chunk walk (ops_attn_ref):
            // a new maximum rescales the accumulator and the sum, any other
            // slot is weighted by exp(s - M); with an f16 cache the
            // accumulator is rounded to f16 after every update
            for (int j = 0; j < nts; j++) {
                float sj = __shfl_sync(0xffffffffu, sc, j);
                if (!__shfl_sync(0xffffffffu, vis, j))
                    continue;
                float ms = 1.0f, vsc = 1.0f;
                if (sj > M[k]) {
                    ms = expf(M[k] - sj);
                    M[k] = sj;
                    for (int i = 0; i < AT_MAXD / 32; i++) {
                        float a = __fmul_rn(acc[k][i], ms);
                        acc[k][i] = f16acc ? h2f(f2h(a)) : a;
                    }
                } else {
                    vsc = expf(sj - M[k]);
                }
                const float *vv = vs + j * (hdv + 1);
                for (int i = 0; i < AT_MAXD / 32; i++) {
                    int64_t d = lane + 32 * i;
                    if (d < hdv) {
                        float a = __fadd_rn(acc[k][i], __fmul_rn(vv[d], vsc));
                        acc[k][i] = f16acc ? h2f(f2h(a)) : a;
                    }
                }
                S[k] = __fadd_rn(__fmul_rn(S[k], ms), vsc);
            }
        }
        __syncthreads();
    }
    for (int k = 0; k < 4; k++) {
        int64_t pr = (int64_t)k * AT_WARPS + warp;
        if (pr >= npairs)
            break;
        int64_t r = r0 + pr / nh, h = g * p.grp + h0 + pr % nh;
        if (p.n_chunks == 1) {
            float inv = S[k] != 0.0f ? 1.0f / S[k] : 0.0f;
            float *o = p.out + r * p.n_head * hdv + h * hdv;
            for (int i = 0; i < AT_MAXD / 32; i++) {
                int64_t d = lane + 32 * i;
                if (d < hdv)
                    o[d] = __fmul_rn(acc[k][i], inv);
            }
        } else {
            float *o = p.part + ((r * p.n_head + h) * p.n_chunks + ch) * (2 + hdv);
            if (lane == 0) {
                o[0] = M[k];
                o[1] = S[k];
            }
            for (int i = 0; i < AT_MAXD / 32; i++) {
                int64_t d = lane + 32 * i;
                if (d < hdv)
                    o[2 + d] = acc[k][i];
            }
        }
    }
}

// the chunks' partials of (row, head) blockIdx.x into out, in chunk order
// as ops_attn_combine_begin/add/end (unfused, chunks with S = 0 skipped);
// thread d keeps element d (the M and S updates are the same in every
// thread)
__global__ void
k_attn_combine(float *out, const float *part, int64_t n_head, int64_t n_chunks, int64_t hdv)
{
    int64_t rh = blockIdx.x;
    const float *pp = part + rh * n_chunks * (2 + hdv);
    float *o = out + rh * hdv;          // [n_rows][n_head][hdv] = (row * n_head + h) * hdv
    for (int64_t d = threadIdx.x; d < hdv; d += blockDim.x) {
        float M = -INFINITY, S = 0.0f, a = 0.0f;
        for (int64_t c = 0; c < n_chunks; c++) {
            const float *q = pp + c * (2 + hdv);
            if (q[1] == 0.0f)
                continue;
            float mn = fmaxf(M, q[0]);
            float so = expf(M - mn), sn = expf(q[0] - mn);
            a = __fadd_rn(__fmul_rn(a, so), __fmul_rn(q[2 + d], sn));
            S = __fadd_rn(__fmul_rn(S, so), __fmul_rn(q[1], sn));
            M = mn;
        }
        o[d] = __fmul_rn(a, S != 0.0f ? 1.0f / S : 0.0f);
    }
    (void)n_head;
}

static size_t
at_smem(int64_t hd, int64_t hdv)
{
    return (size_t)(AT_PAIRS * hd + AT_TS * (hd + 1) + AT_TS * (hdv + 1) +
                    (AT_PAIRS + AT_TS) * (hd / 32)) * sizeof(float);
}

int
cu_attn_reserve(struct cu *c, const struct backend_attn_limits *l)
{
    if (l->head_dim > AT_MAXD || l->head_dim_v > AT_MAXD || l->n_head_kv < 1 ||
        l->n_head % l->n_head_kv != 0 || at_smem(l->head_dim, l->head_dim_v) > c->smem_optin)
        return -ENOMEM;     // (the only failure the interface has: the steps must not run)
    int64_t nch = ops_attn_chunks(l->kv_type, l->max_kv);
    size_t part = (size_t)l->n_rows * (size_t)l->n_head * (size_t)nch *
                  (size_t)(2 + l->head_dim_v) * sizeof(float);
    if (nch > 1 && !cu_scratch_get(c, &c->attn_part, part))
        return -ENOMEM;
    if (at_smem(l->head_dim, l->head_dim_v) > 48 * 1024)
        CU_CHECK(cudaFuncSetAttribute(k_attn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)at_smem(l->head_dim, l->head_dim_v)));
    return 0;
}

// host staging of one step's metadata: grows c->pinned
static void *
pinned_get(struct cu *c, size_t n)
{
    // the previous step's copy out of it must be done before it is rewritten
    if (c->pinned_busy) {
        CU_CHECK(cudaEventSynchronize(c->pinned_ev));
        c->pinned_busy = 0;
    }
    if (n <= c->pinned_n)
        return c->pinned;
    if (c->pinned)
        CU_CHECK(cudaFreeHost(c->pinned));
    c->pinned = NULL;
    c->pinned_n = 0;
    size_t want = n < 65536 ? 65536 : n * 2;
    CU_CHECK(cudaMallocHost(&c->pinned, want));
    c->pinned_n = want;
    return c->pinned;
}

static size_t
al8(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

void
cu_attention(struct cu *c, const struct backend_attn *a)
{
    const int64_t nr = a->n_rows, nkvh = a->n_head_kv, grp = a->n_head / a->n_head_kv;
    if (nr < 1)
        return;
    const int64_t hs = grp < AT_PAIRS ? grp : AT_PAIRS;
    const int64_t rt = AT_PAIRS / hs;       // rows per run
    const int64_t n_hsub = (grp + hs - 1) / hs;
    const size_t k_row = a->kv_type == GGML_TYPE_F32 ? (size_t)a->head_dim * 4
                         : a->kv_type == GGML_TYPE_F16 ? (size_t)a->head_dim * 2
                                                       : (size_t)(a->head_dim / 32) * 34;
    const size_t v_row = a->kv_type == GGML_TYPE_F32 ? (size_t)a->head_dim_v * 4
                         : a->kv_type == GGML_TYPE_F16 ? (size_t)a->head_dim_v * 2
                                                       : (size_t)(a->head_dim_v / 32) * 34;

    // runs, and the block tables each run needs (a run's rows share one)
    int64_t n_runs = 0, n_tab = 0, maxkv = 0;
    for (int64_t r = 0; r < nr; r++)
        maxkv = a->n_kv[r] > maxkv ? a->n_kv[r] : maxkv;
    // sizes first: worst case every row its own run and table
    size_t sz_rows = al8((size_t)nr * sizeof(int64_t));
    size_t sz_run = al8((size_t)(nr + 1) * sizeof(int64_t));
    size_t nb_max = (size_t)((maxkv + a->block_size - 1) / a->block_size);
    size_t sz_tabs = al8((size_t)nr * nb_max * sizeof(int32_t));
    size_t sz_vis = a->vis0 ? al8((size_t)(nr * a->ld_vis)) : 0;
    size_t sz_ptr = al8((size_t)nkvh * sizeof(void *));
    size_t total = 4 * sz_rows + sz_run + sz_tabs + sz_vis + 2 * sz_ptr;
    uint8_t *h = (uint8_t *)pinned_get(c, total);
    int64_t *nkv = (int64_t *)h, *lo = (int64_t *)(h + sz_rows), *vis0 = (int64_t *)(h + 2 * sz_rows);
    int64_t *tab = (int64_t *)(h + 3 * sz_rows), *run0 = (int64_t *)(h + 4 * sz_rows);
    int32_t *tabs = (int32_t *)(h + 4 * sz_rows + sz_run);
    uint8_t *vis = h + 4 * sz_rows + sz_run + sz_tabs;
    const void **kb = (const void **)(vis + sz_vis), **vb = (const void **)(vis + sz_vis + sz_ptr);

    for (int64_t r = 0; r < nr; r++) {
        int64_t k = n_runs - 1;
        int join = r > 0 && a->seq[r] == a->seq[r - 1] && a->table[r] == a->table[r - 1] &&
                   r - run0[k] < rt;
        nkv[r] = a->n_kv[r];
        lo[r] = a->lo ? a->lo[r] : 0;
        vis0[r] = a->vis0 ? a->vis0[r] : -1;
        if (!join) {
            run0[n_runs++] = r;
            // the table of the run: enough blocks for its longest row, known
            // only after the run closes: take the blocks of maxkv bounded by
            // what this row's sequence has (n_kv of its last row, below)
            int64_t last = r;
            while (last + 1 < nr && last + 1 - r < rt && a->seq[last + 1] == a->seq[r] &&
                   a->table[last + 1] == a->table[r])
                last++;
            int64_t m = 0;
            for (int64_t q = r; q <= last; q++)
                m = a->n_kv[q] > m ? a->n_kv[q] : m;
            int64_t nb = (m + a->block_size - 1) / a->block_size;
            memcpy(tabs + n_tab, a->table[r], (size_t)nb * sizeof(int32_t));
            tab[r] = n_tab;
            n_tab += nb;
        } else {
            tab[r] = tab[r - 1];
        }
        if (a->vis0)
            memcpy(vis + r * a->ld_vis, a->vis + r * a->ld_vis, (size_t)a->ld_vis);
    }
    run0[n_runs] = nr;
    for (int64_t g = 0; g < nkvh; g++) {
        kb[g] = a->k_base[g];
        vb[g] = a->v_base[g];
    }
    uint8_t *d = (uint8_t *)cu_scratch_get(c, &c->attn_meta, total);
    if (!d)
        cu_fail("attention: metadata", cudaErrorMemoryAllocation, __FILE__, __LINE__);
    CU_CHECK(cudaMemcpyAsync(d, h, total, cudaMemcpyHostToDevice, c->stream));
    CU_CHECK(cudaEventRecord(c->pinned_ev, c->stream));
    c->pinned_busy = 1;

    struct at_args p;
    memset(&p, 0, sizeof(p));
    p.m.nkv = (const int64_t *)d;
    p.m.lo = (const int64_t *)(d + sz_rows);
    p.m.vis0 = (const int64_t *)(d + 2 * sz_rows);
    p.m.tab = (const int64_t *)(d + 3 * sz_rows);
    p.m.run0 = (const int64_t *)(d + 4 * sz_rows);
    p.m.tabs = (const int32_t *)(d + 4 * sz_rows + sz_run);
    p.m.vis = a->vis0 ? d + 4 * sz_rows + sz_run + sz_tabs : NULL;
    p.m.kb = (const uint8_t *const *)(d + 4 * sz_rows + sz_run + sz_tabs + sz_vis);
    p.m.vb = (const uint8_t *const *)(d + 4 * sz_rows + sz_run + sz_tabs + sz_vis + sz_ptr);
    const size_t qbytes = (size_t)(nr * a->n_head * a->head_dim) * sizeof(float);
    const size_t obytes = (size_t)(nr * a->n_head * a->head_dim_v) * sizeof(float);
    p.q = (const float *)cu_in(c, a->q, qbytes, ST_IN0);
    p.out = (float *)cu_out(c, a->out, obytes, ST_OUT0, 0);
    p.n_head = a->n_head;
    p.n_head_kv = nkvh;
    p.hd = a->head_dim;
    p.hdv = a->head_dim_v;
    p.grp = grp;
    p.hs = hs;
    p.n_hsub = n_hsub;
    p.scale = a->scale;
    p.kv_type = a->kv_type;
    p.block_size = a->block_size;
    p.block_stride = a->block_stride;
    p.k_row = k_row;
    p.v_row = v_row;
    p.ld_vis = a->ld_vis;
    p.n_chunks = 1;
    p.chunk = maxkv;
    // split KV where the CPU splits (ops.h): f32/f16 cache, no mask, and
    // here every row long enough (decode rows are runs of their own), in
    // chunks of ATTN_SPLIT_KV slots aligned at slot 0: the same partials
    // combined the same way
    int64_t minkv = maxkv;
    for (int64_t r = 0; r < nr; r++)
        minkv = a->n_kv[r] < minkv ? a->n_kv[r] : minkv;
    if (minkv >= ATTN_SPLIT_MIN && !a->vis0 && ops_attn_chunks(a->kv_type, minkv) > 1 &&
        c->attn_part.p) {
        int64_t nch = (maxkv + ATTN_SPLIT_KV - 1) / ATTN_SPLIT_KV;
        size_t need = (size_t)nr * (size_t)a->n_head * (size_t)nch * (size_t)(2 + a->head_dim_v) *
                      sizeof(float);
        if (need <= c->attn_part.n) {
            p.n_chunks = nch;
            p.chunk = ATTN_SPLIT_KV;
            p.part = (float *)c->attn_part.p;
        }
    }
    dim3 grid((unsigned)n_runs, (unsigned)(nkvh * n_hsub), (unsigned)p.n_chunks);
    k_attn<<<grid, AT_WARPS * 32, at_smem(p.hd, p.hdv), c->stream>>>(p);
    CU_LAUNCHED("attention");
    if (p.n_chunks > 1) {
        k_attn_combine<<<(unsigned)(nr * a->n_head), 128, 0, c->stream>>>(p.out, p.part, a->n_head,
                                                                         p.n_chunks, p.hdv);
        CU_LAUNCHED("attention combine");
    }
    cu_out_done(c, a->out, p.out, obytes);
}

// ---- KV store ----

struct kv_args {
    const float *k, *v;
    int64_t n_tok, n_head_kv, hd, hdv;
    uint8_t *const *kb, *const *vb;
    size_t block_stride, k_row, v_row;
    uint32_t kv_type;
    const int32_t *blk;
    const int64_t *bidx;
};

// CTA (t, g, k or v): the row converted as ops_kv_row_put
__global__ void
k_kv_store(struct kv_args p)
{
    int64_t t = blockIdx.x, g = blockIdx.y;
    int isv = blockIdx.z;
    int64_t n = isv ? p.hdv : p.hd;
    const float *src = isv ? p.v + t * p.n_head_kv * p.hdv + g * p.hdv
                           : p.k + t * p.n_head_kv * p.hd + g * p.hd;
    uint8_t *dst = (isv ? p.vb[g] : p.kb[g]) + (size_t)p.blk[t] * p.block_stride +
                   (size_t)p.bidx[t] * (isv ? p.v_row : p.k_row);
    if (p.kv_type == GGML_TYPE_F32) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            ((float *)(void *)dst)[i] = src[i];
    } else if (p.kv_type == GGML_TYPE_F16) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            ((uint16_t *)(void *)dst)[i] = f2h(src[i]);
    } else {
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
        for (int64_t b = warp; b < n / 32; b += nw) {
            float d;
            int q = warp_q8(src[b * 32 + lane], &d);
            // the block as 17 aligned 16-bit words (rows and blocks start at
            // even offsets): lane 0 the fp16 scale, even lanes a code pair
            uint16_t *o = (uint16_t *)(void *)(dst + b * 34);
            int qn = __shfl_down_sync(0xffffffffu, q, 1);
            if (!(lane & 1))
                o[1 + lane / 2] = (uint16_t)((uint8_t)(int8_t)q | (uint16_t)(uint8_t)(int8_t)qn << 8);
            if (lane == 0)
                o[0] = f2h(d);
        }
    }
}

void
cu_kv_store(struct cu *c, const struct backend_kv_store *s)
{
    if (s->n_tok < 1)
        return;
    struct kv_args p;
    p.k = (const float *)cu_in(c, s->k, (size_t)(s->n_tok * s->n_head_kv * s->head_dim) * 4, ST_IN0);
    p.v = (const float *)cu_in(c, s->v, (size_t)(s->n_tok * s->n_head_kv * s->head_dim_v) * 4,
                               ST_IN1);
    p.n_tok = s->n_tok;
    p.n_head_kv = s->n_head_kv;
    p.hd = s->head_dim;
    p.hdv = s->head_dim_v;
    p.kb = (uint8_t *const *)cu_in(c, s->k_base, (size_t)s->n_head_kv * sizeof(void *), ST_META0);
    p.vb = (uint8_t *const *)cu_in(c, s->v_base, (size_t)s->n_head_kv * sizeof(void *), ST_META1);
    p.block_stride = s->block_stride;
    p.k_row = s->k_row_bytes;
    p.v_row = s->v_row_bytes;
    p.kv_type = s->kv_type;
    p.blk = (const int32_t *)cu_in(c, s->blk, (size_t)s->n_tok * sizeof(int32_t), ST_META2);
    p.bidx = (const int64_t *)cu_in(c, s->bidx, (size_t)s->n_tok * sizeof(int64_t), ST_META3);
    if (s->n_head_kv > 65535 || s->n_tok > 2147483647)
        cu_fail("kv_store: too many heads", cudaErrorInvalidValue, __FILE__, __LINE__);
    /* the rows are written in 16-bit words (F16 halves, Q8_0 blocks of 34
     * bytes): every row and block must start on an even byte */
    if ((s->block_stride | s->k_row_bytes | s->v_row_bytes) & 1)
        cu_fail("kv_store: odd row or block stride", cudaErrorInvalidValue, __FILE__, __LINE__);
    dim3 grid((unsigned)s->n_tok, (unsigned)s->n_head_kv, 2);
    k_kv_store<<<grid, 128, 0, c->stream>>>(p);
    CU_LAUNCHED("kv_store");
}
