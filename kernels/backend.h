/*
 * backend.h - the device interface of the forward pass: buffers and
 * whole-step ops behind one table per backend.
 *
 * The executor (common/model/exec.c) runs a layer recipe as a sequence of
 * steps over a chunk of tokens: one matmul group, one attention over block
 * tables, one norm...  Each step is one call of the opened backend's table;
 * how the step is computed (threads, SIMD variant, GPU launch) is the
 * backend's business.  A step's result is a function of its inputs only:
 * never of the thread count, the split, or the other rows of the call.
 *
 *   backend_open(&be, "cpu", &cfg, why, sizeof why)     one place decides the device
 *   p = be->ops->alloc(be, bytes); be->ops->upload(be, p, src, bytes)
 *   be->ops->mm_reserve(be, type, max_tok, cols)        before the first matmul
 *   be->ops->attn_reserve(be, &limits)                  before a call's attention
 *   be->ops->matmul(be, &mm) / attention(be, &a) / rmsnorm(be, ...) ...
 *   backend_close(be)
 *
 * Backends:
 *   cpu   kernels/cpu/backend_cpu.c: the kernel_ops table chosen by name
 *         (ops.h: ref, avx2, avx512) over a thread pool it owns
 *         (threadpool.h); buffers are host memory, upload is a copy.
 *   cuda  kernels/cuda/backend_cuda.cu (built when nvcc is found, CUDA=1):
 *         buffers are device memory, weights are uploaded once by pack(),
 *         the KV pool is allocated from the backend (kvcache.c); host
 *         pointers the executor hands in (metadata, model vectors, the
 *         caller's buffers) are staged.  Without a usable GPU, or in a
 *         build without CUDA, backend_open() refuses it with the reason,
 *         which the tools report with exit 5.  Not yet run on a GPU: see
 *         scripts/gpu-check.
 *
 * Training (the EAGLE draft trainer, common/train) uses the backward table
 * beside this one, struct backend_ops.backward (backward.h): the CPU
 * backend's is OpenBLAS's (backward_ops_blas_avx2: backward_ops_blas with
 * the cross-entropy in AVX2), or with the ref kernels the scalar reference.
 *
 * Buffers handed to the ops (activations, weights, the KV pool) are the
 * backend's: for the CPU backend any host memory is one.  A device backend
 * (CUDA) also takes host pointers: it stages per-step arrays (token ids,
 * angles, slots, block tables, masks) on every call, and keeps one copy of
 * each host array passed as a weight (rmsnorm's w, matmul biases, an
 * unpacked weight, get_rows' weight): those must stay unchanged while the
 * backend is open, as a model's mapped tensors do.  Shapes follow
 * ops.h: activations row-major f32, one row per token, rows contiguous
 * unless a stride is given.
 */
#ifndef LLMKIT_BACKEND_H
#define LLMKIT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

struct backend_ops;
struct backend_backward_ops;    /* the trainer's table (backward.h) */

/* An opened backend.  Backends extend it (their own struct with this one
 * first); callers see only these fields. */
struct backend {
    const struct backend_ops *ops;
    const char *device;         /* "cpu", "cuda" */
    const char *kernel;         /* the kernel variant: "avx512", "avx2", "ref" */
    int n_threads;              /* CPU workers incl. the caller (1 elsewhere) */
    int host;                   /* 1: buffers are host memory (the caller may read and write
                                 * them directly); 0: device memory, reached through
                                 * upload/download/copy only */
};

struct backend_config {
    int n_threads;              /* CPU workers incl. the caller; <= 0 = all CPUs */
    const char *kernel;         /* CPU kernel table (ops_select); NULL = $LLMKIT_KERNEL or auto */
};

#define BACKEND_PACK_SLICE 64    /* pack(): the rows a slice starts at a multiple of */

/* A weight as the ops see it: rows of row_bytes bytes of ggml type `type`,
 * as GGUF stores them (ops.h), and optionally the backend's own layout of
 * the same values (weight_pack). */
struct backend_weight {
    const void *data;
    const void *packed;         /* NULL: use data */
    size_t row_bytes;
    uint32_t type;
    int64_t rows, cols;
};

/* One matmul step: y_i[t][0 .. w_i->rows) = x[t] W_i^T (+ bias_i) for
 * t < n_tok, i < nw.  The weights read the same activations (q/k/v,
 * gate/up) and all have x's width as cols; the backend converts x once per
 * weight type and makes one pass over all their rows. */
#define BACKEND_MM_MAX 3
struct backend_matmul {
    int nw;                                     /* 1 .. BACKEND_MM_MAX */
    const struct backend_weight *w[BACKEND_MM_MAX];
    const float *bias[BACKEND_MM_MAX];          /* NULL or rows floats */
    float *y[BACKEND_MM_MAX];
    int64_t ldy[BACKEND_MM_MAX];
    const float *x;
    int64_t ldx, n_tok;
    /* llama.cpp's batched float arithmetic (ops.h mm_rows_mirror) for F32,
     * F16 and BF16 weights when n_tok >= 2: mirroring a llama.cpp ubatch */
    int mirror;
    /* NULL, or [n_tok] BACKEND_GEMM_* bits: how llama.cpp multiplied the
     * token by k-quant weights (ops.h mm_rows_mirror); a token without the
     * bit takes the one-token arithmetic (mm_rows) */
    const uint8_t *gemm;
};

/* The token was among the first n - n % 4 of a mul_mat of n tokens: ggml's
 * repack gemm for Q4_K weights with rows % 8 == 0 (repacked at load). */
#define BACKEND_GEMM_REPACK 1
/* The token was in a mul_mat of 8 or more tokens: ggml's tiled kernels for
 * the k-quants it does not repack (mirrored: Q6_K). */
#define BACKEND_GEMM_TILED 2
/* The token was in a mul_mat of 2 or more tokens: llamafile tinyBLAS for
 * F32, F16 and BF16 weights with rows % 4 == 0 and cols % 8 == 0 (ops.h
 * mm_rows_mirror). */
#define BACKEND_GEMM_FLOAT 4

/* One attention step over the paged KV cache of one layer: for each row r
 * (a token) and query head h, out = softmax(scale * q . k_s) v over the
 * row's visible slots, as ops.h's attn (one-row arithmetic) or attn_tiled
 * (rows marked tiled) defines it.  Row r's slots are 0 .. n_kv[r]-1 of the
 * block table table[r] (logical block -> physical block); KV head g of
 * physical block b starts at k_base[g] + b * block_stride (likewise v).
 * head_dim and head_dim_v may differ; with v_stride set, V rows are that
 * many bytes apart (MLA's absorbed form: one KV head whose V is the first
 * head_dim_v elements of each K row, v_base = k_base, v_stride = the K
 * row's bytes). */
struct backend_attn {
    const float *q;             /* [n_rows][n_head * head_dim] */
    float *out;                 /* [n_rows][n_head * head_dim_v] */
    int64_t n_rows, n_head, n_head_kv, head_dim, head_dim_v;
    float scale;
    const uint8_t *const *k_base;       /* [n_head_kv] */
    const uint8_t *const *v_base;       /* [n_head_kv] */
    size_t block_stride;
    uint32_t kv_type;           /* GGML_TYPE_F32, F16 or Q8_0 */
    int64_t block_size;
    const int32_t *const *table;        /* [n_rows] */
    const int64_t *n_kv;        /* [n_rows], >= 1 */
    const int32_t *seq;         /* [n_rows] the row's sequence: consecutive tiled rows of
                                 * one sequence are computed as one tile */
    const uint8_t *tiled;       /* NULL, or [n_rows]: 1 = the tiled arithmetic (f32/f16
                                 * cache, no mask) */
    /* the mask: NULL = all slots visible; else slots s < vis0[r] are
     * visible and slot s >= vis0[r] is when vis[r * ld_vis + s - vis0[r]] */
    const int64_t *vis0;
    const uint8_t *vis;
    int64_t ld_vis;
    /* a sliding window: NULL, or [n_rows]: row r sees no slot below lo[r]
     * (with or without a mask; tiled rows too) */
    const int64_t *lo;
    size_t v_stride;            /* 0: V rows of head_dim_v elements back to back */
};

/* What the attention steps of a call may ask, for attn_reserve. */
struct backend_attn_limits {
    int64_t n_rows;             /* rows per step, at most */
    int64_t n_head, n_head_kv, head_dim, head_dim_v;
    uint32_t kv_type;
    int64_t block_size;
    int64_t max_kv;             /* the longest row's n_kv */
    int masked;                 /* steps carry a mask */
    int tiled;                  /* rows may be tiled */
};

/* One KV store step: rows t < n_tok of k [n_tok][n_head_kv * head_dim] and
 * v [n_tok][n_head_kv * head_dim_v] into their slots: KV head g of row t
 * goes to k_base[g] + blk[t] * block_stride + bidx[t] * k_row_bytes
 * (likewise v), converted to kv_type (ops_kv_row_put).  v NULL: K only (a
 * cache whose V is a view of K, MLA). */
struct backend_kv_store {
    const float *k, *v;
    int64_t n_tok, n_head_kv, head_dim, head_dim_v;
    uint8_t *const *k_base;     /* [n_head_kv] */
    uint8_t *const *v_base;
    size_t block_stride, k_row_bytes, v_row_bytes;
    uint32_t kv_type;
    const int32_t *blk;         /* [n_tok] physical block of the row's slot */
    const int64_t *bidx;        /* [n_tok] index in that block */
};

struct backend_ops {
    const char *name;

    void (*close)(struct backend *be);

    /* ---- buffers ---- */
    /* alloc(): bytes of backend memory, 64-byte aligned, or NULL */
    void *(*alloc)(struct backend *be, size_t bytes);
    void (*free)(struct backend *be, void *p);
    /* upload(): host src -> backend dst; download(): the reverse */
    void (*upload)(struct backend *be, void *dst, const void *src, size_t bytes);
    void (*download)(struct backend *be, void *dst, const void *src, size_t bytes);
    /* copy(): between backend buffers (also host <-> backend: either side
     * may be host memory), after the steps queued before it */
    void (*copy)(struct backend *be, void *dst, const void *src, size_t bytes);

    /* ---- weights ---- */
    /* supports(): 1 when type can be a matmul weight */
    int (*supports)(const struct backend *be, uint32_t type);
    /* pack_size(): bytes of the backend's own layout of a weight (0: the
     * backend uses the GGUF rows as they are; also for 0 rows); pack()
     * writes it, on the backend's workers (so not while another op runs).
     * The layout is cut by rows: rows [r, r + n) of a weight (r a multiple
     * of BACKEND_PACK_SLICE, n too unless the slice ends the weight) packed
     * on their own are the pack_size(type, n, cols) bytes at
     * pack_size(type, r, cols) of the whole weight's, so a caller may pack
     * a weight slice by slice (model.c checks the sizes add up, and packs
     * whole where they do not). */
    size_t (*pack_size)(const struct backend *be, uint32_t type, int64_t rows, int64_t cols);
    void (*pack)(const struct backend *be, void *dst, const struct backend_weight *w);

    /* ---- scratch ---- */
    /* mm_reserve(): room for matmuls of up to max_tok tokens by a weight of
     * this type and width; attn_reserve(): for attention steps within the
     * limits.  0 or -ENOMEM (the steps must then not be called). */
    int (*mm_reserve)(struct backend *be, uint32_t type, int64_t max_tok, int64_t cols);
    int (*attn_reserve)(struct backend *be, const struct backend_attn_limits *l);

    /* ---- whole-step ops ---- */
    void (*matmul)(struct backend *be, const struct backend_matmul *mm);
    void (*attention)(struct backend *be, const struct backend_attn *a);
    void (*kv_store)(struct backend *be, const struct backend_kv_store *s);
    /* y[t] = the embedding row ids[t] of w, t < n */
    void (*get_rows)(struct backend *be, float *y, const struct backend_weight *w,
                     const int32_t *ids, int64_t n);
    /* y[t] = rmsnorm(x[t]) * w (ops.h), rows of dim; y may equal x */
    void (*rmsnorm)(struct backend *be, float *y, const float *x, const float *w, int64_t n_tok,
                    int64_t dim, float eps);
    /* rotates n_heads heads of head_dim in every row of x [n_tok][n_heads *
     * head_dim] by the row's angles cs + t * p->n_rot (ops_rope_angles) */
    void (*rope)(struct backend *be, float *x, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                 const float *cs, const struct rope_params *p);
    /* x[t] += y[t], rows of dim */
    void (*add)(struct backend *be, float *x, const float *y, int64_t n_tok, int64_t dim);
    /* g[t] = silu(g[t]) * u[t], rows of dim (SwiGLU) */
    void (*silu_mul)(struct backend *be, float *g, const float *u, int64_t n_tok, int64_t dim);
    /* g[t] = gelu(g[t]) * u[t], rows of dim (GeGLU, ops.h gelu_mul) */
    void (*gelu_mul)(struct backend *be, float *g, const float *u, int64_t n_tok, int64_t dim);
    /* x[t] *= s, rows of dim (one f32 product per element, as ggml_scale) */
    void (*scale)(struct backend *be, float *x, float s, int64_t n_tok, int64_t dim);
    /* y[r * ldy + i] = x[r * ldx + i] for r < n_rows, i < dim: strided rows
     * (views; MLA assembles its query and key rows from parts with it); y
     * and x do not overlap */
    void (*copy_rows)(struct backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
                      int64_t n_rows, int64_t dim);

    /* the trainer's forward and backward ops (backward.h); NULL in a
     * backend without them */
    const struct backend_backward_ops *backward;
};

/* backend_open() : opens device ("cpu" or NULL, "cuda") with cfg (may be
 * NULL: defaults).  On failure writes one line into why and returns
 * -EINVAL (unknown device or kernel name), -ENODEV (device not usable here,
 * or its backend not built), -ERANGE (too many threads), -ENOMEM/-EAGAIN. */
int backend_open(struct backend **out, const char *device, const struct backend_config *cfg,
                 char *why, size_t why_len);

/* backend_close() : NULL is a no-op. */
void backend_close(struct backend *be);

/* backend_devices() : the device names backend_open() knows, NULL-terminated. */
const char *const *backend_devices(void);

/* the CPU backend (kernels/cpu/backend_cpu.c) */
int backend_cpu_open(struct backend **out, const struct backend_config *cfg, char *why,
                     size_t why_len);
/* the CUDA backend (kernels/cuda/backend_cuda.cu; kernels/cuda_absent.c in
 * a build without CUDA): -ENODEV and the reason when no GPU is usable */
int backend_cuda_open(struct backend **out, const struct backend_config *cfg, char *why,
                      size_t why_len);

#endif
