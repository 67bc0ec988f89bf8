/*
 * ops.h - the compute kernels of the forward pass behind one run-time
 * dispatch table.
 *
 * Each op family has one function-pointer type below; struct kernel_ops
 * gathers one implementation of every family.  kernels/cpu/<op>_ref.c hold
 * the scalar reference ("ref": plain C11 loops, no intrinsics) which is the
 * specification every other variant (SIMD, CUDA; later issues) is tested
 * against in tests/kernels.  ops_select() picks an implementation by name at
 * run time; the tools pass --kernel NAME, or the LLMKIT_KERNEL environment
 * variable names it.
 *
 * Kernels see buffers only: no models, files, options or threads.  Work is
 * split across threads by the caller (the CPU backend, cpu/backend_cpu.c, over
 * threadpool.h) through the
 * row/range arguments; every kernel may be called concurrently on disjoint
 * output ranges.  No kernel allocates memory; scratch is passed in.
 *
 * Layout conventions: activations are row-major f32, one row per token, with
 * an explicit row stride (ld*, in elements).  A weight matrix [rows, cols] is
 * stored as in GGUF: ne = {cols, rows}, row r at w + r * row_bytes, each row
 * cols / blck blocks of its ggml type (kernels/qtypes.h, kernels/qblock.h).
 */
#ifndef LLMKIT_OPS_H
#define LLMKIT_OPS_H

#include <stddef.h>
#include <stdint.h>

/* ---- matmul: y = x * W^T for a quantized/float weight W [rows, cols] ----
 *
 * One weight read serves a whole batch: for each weight row the kernel
 * combines it with all n_tok activation rows.  Matmul runs in two steps so
 * that activations are converted once per call while rows are split across
 * threads:
 *
 *   size = ops->mm_work_size(wtype, n_tok, cols);      // bytes of work
 *   ops->mm_prepare(work, wtype, x, ldx, n_tok, cols); // once, any thread
 *   ops->mm_rows(y, ldy, w, row_bytes, wtype, work, x, ldx, n_tok, cols,
 *                r0, r1, tmp);                         // per thread, disjoint [r0, r1)
 *
 * mm_supported(wtype) : 1 when wtype can be used as a weight (every type
 *     whose qtype to_float is not NULL: F32, F16, BF16, Q4_0, Q4_1, Q5_0,
 *     Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS), else 0.
 * mm_work_size() : bytes of the work buffer mm_prepare fills (may be 0, in
 *     which case work may be NULL).  cols must be a multiple of the type's
 *     block size (the model loader checks it).
 * mm_prepare() : converts the n_tok activation rows x (row stride ldx) into
 *     the form the row kernel consumes (e.g. quantized activation blocks);
 *     the reference keeps them in f32 and writes nothing.
 * mm_rows() : y[t * ldy + r] = sum_c W[r][c] * x[t][c] for t < n_tok and
 *     r0 <= r < r1, where x is the activations as converted by mm_prepare.
 *     tmp is per-thread scratch of mm_tmp_floats(cols) floats (the
 *     reference decodes one weight row into it).
 *
 * Numerics are ggml's CPU backend's, so that greedy decoding agrees with
 * llama.cpp: activations are converted to the weight type's dot type first
 * (F32: as is; F16/BF16: rounded to f16/bf16; Q4_0, Q5_0, Q8_0, IQ4_NL:
 * Q8_0 blocks; Q4_1, Q5_1: Q8_1 blocks; k-quants and IQ4_XS: Q8_K blocks),
 * integer code products are summed exactly per block, and block sums are
 * scaled and accumulated in f32.  Compared with an exact product of the
 * dequantized weight and the f32 activations, the error is therefore
 * bounded by sum_c |W[r][c]| * step_c / 2 (step_c = the activation block's
 * quantization step) plus f32 rounding.
 */
typedef int (*ops_mm_supported_fn)(uint32_t wtype);
typedef size_t (*ops_mm_work_size_fn)(uint32_t wtype, int64_t n_tok, int64_t cols);
typedef void (*ops_mm_prepare_fn)(void *work, uint32_t wtype, const float *x, int64_t ldx,
                                  int64_t n_tok, int64_t cols);
typedef void (*ops_mm_rows_fn)(float *y, int64_t ldy, const void *w, size_t row_bytes,
                               uint32_t wtype, const void *work, const float *x, int64_t ldx,
                               int64_t n_tok, int64_t cols, int64_t r0, int64_t r1, float *tmp);
typedef int64_t (*ops_mm_tmp_floats_fn)(int64_t cols);

/* ---- get_rows: embedding lookup ----
 * Converts row `row` of a weight of type wtype (row_bytes per row, cols
 * elements) to f32 into y[0 .. cols).  Same type support as mm_supported. */
typedef void (*ops_get_row_fn)(float *y, const void *w, size_t row_bytes, uint32_t wtype,
                               int64_t row, int64_t cols);

/* ---- rmsnorm ----
 * y[i] = x[i] * (1 / sqrt(mean(x^2) + eps)) * w[i] for i < n; w may be NULL
 * (no weight).  The mean of squares is accumulated in double, as ggml does.
 * y may equal x. */
typedef void (*ops_rmsnorm_fn)(float *y, const float *x, const float *w, int64_t n, float eps);

/* ---- rope: rotary position embedding, in place ----
 * x holds n_heads heads of head_dim floats back to back (one token).  The
 * first n_rot dims of each head (n_rot even, <= head_dim) are rotated, the
 * rest left alone.  For pair i (0 <= i < n_rot/2):
 *   theta_i = pos * freq_scale * base^(-2i/n_rot) / (freq_factors ? freq_factors[i] : 1)
 * computed as ggml does (base^(-2/n_rot) raised by repeated f32 multiply),
 * once per position by ops_rope_angles into cs (cos theta_i at cs[i], sin
 * theta_i at cs[n_rot/2 + i]; a token's q and k and every layer share
 * them), then x0' = fma(x0, cos, -(x1 sin)), x1' = fma(x0, sin, x1 cos).
 * ROPE_NORM rotates adjacent pairs (x[2i], x[2i+1]) (arch llama);
 * ROPE_NEOX rotates (x[i], x[i + n_rot/2]) (gemma, qwen, neox). */
enum rope_style {
    ROPE_NORM = 0,
    ROPE_NEOX = 2,              /* the llama.cpp rope-type value */
};

struct rope_params {
    int style;                  /* enum rope_style */
    int64_t n_rot;              /* rotated dims per head */
    float freq_base;            /* llama.rope.freq_base, default 10000 */
    float freq_scale;           /* 1 / llama.rope.scaling.factor for linear scaling, else 1 */
    const float *freq_factors;  /* NULL, or n_rot/2 divisors (llama3 rope_freqs.weight) */
    /* YaRN (ggml's rope_yarn): ext_factor 0 = none; else pair i's angle is
     * theta_i * (1 - r_i) + (theta_i / freq_scale) * r_i with the ramp r_i =
     * ext_factor * (1 - clamp((i - corr_dims[0]) / max(0.001, corr_dims[1]
     * - corr_dims[0]), 0, 1)), and cos and sin are multiplied by
     * attn_factor * (1 + 0.1 ln(1 / freq_scale)) */
    float ext_factor;
    float attn_factor;
    float corr_dims[2];
};

typedef void (*ops_rope_fn)(float *x, int64_t n_heads, int64_t head_dim, const float *cs,
                            const struct rope_params *p);

/* cs[0 .. n_rot) = the cosines and sines of position pos (see above) */
void ops_rope_angles(float *cs, int32_t pos, const struct rope_params *p);

/* ---- softmax, in place ----
 * x[i] = exp(x[i] - max) / sum over i < n.  -INFINITY entries get 0; if all
 * are -INFINITY the row becomes 0. */
typedef void (*ops_softmax_fn)(float *x, int64_t n);

/* ---- silu_mul: SwiGLU gate ----
 * y[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i].  y may
 * equal gate or up. */
typedef void (*ops_silu_mul_fn)(float *y, const float *gate, const float *up, int64_t n);

/* ---- gelu_mul: GeGLU gate (gemma) ----
 * y[i] = gelu(gate[i]) * up[i], as ggml's CPU geglu with GGML_GELU_FP16
 * (ggml-cpu/vec.h, defined in every build): gate <= -10 gives 0, gate >= 10
 * gives gate * up, otherwise gate is rounded to f16 h and gelu is looked up
 * as fp16(0.5 f (1 + tanhf(sqrt(2/pi) f fma(0.044715 f, f, 1)))) with f =
 * fp32(h) (libm tanhf; ggml's table, ops_gelu_f16_ref), converted back to
 * f32 and multiplied by up.  y may equal gate or up. */
typedef void (*ops_gelu_mul_fn)(float *y, const float *gate, const float *up, int64_t n);

/* ---- attention over a paged KV cache for one query token and one KV head ----
 *
 * The n_q query heads that share one KV head (GQA group; 1 for MHA, all heads
 * for MQA) are processed together, so each K/V block is read once for the
 * group.  The sequence's KV slots 0 .. n_kv-1 live in blocks of block_size
 * slots: slot s is in physical block table[s / block_size] at index
 * s % block_size.  For physical block b the keys of this layer and KV head
 * start at k_base + b * block_stride (bytes) and are block_size rows of
 * head_dim elements of kv_type (GGML_TYPE_F32, GGML_TYPE_F16 or
 * GGML_TYPE_Q8_0: rows of kv_dtype_row_bytes(kv_type, head_dim) bytes, back
 * to back); values likewise at v_base with head_dim_v elements per row, rows
 * v_stride bytes apart when it is set (MLA: V a view of each K row's first
 * head_dim_v elements).  head_dim and head_dim_v may differ.
 *
 * For each query head h (q + h * head_dim, out + h * head_dim_v):
 *   out = sum_s softmax_s(scale * q . k_s) v_s over visible slots s < n_kv,
 * where slot s is visible when s >= lo and (vis == NULL or vis[s] != 0).  Computed
 * FlashAttention-style: blocks are walked in order with a running max and
 * sum (online softmax), never a full score row.  When no slot is visible
 * out is 0.  scratch holds at least attn_scratch_floats(n_q, block_size, head_dim,
 * head_dim_v) floats (per thread).
 *
 * Precision follows llama.cpp's CPU flash attention (greedy decoding of
 * small models is sensitive to it): with an f16 cache the query is rounded
 * to f16 before the dot products and the output accumulator is kept in f16
 * precision; with an f32 cache everything is f32.  The reference updates the
 * running max slot by slot in slot order, as llama.cpp does.
 *
 * Long contexts (split KV): with an f32 or f16 cache and n_kv >=
 * ATTN_SPLIT_MIN (under a mask: that many visible slots), the slots are
 * taken in chunks of ATTN_SPLIT_KV aligned at slot 0 (under a mask:
 * ATTN_SPLIT_KV visible slots each, ops_attn_chunk), each chunk walked as above from a fresh state (M = -inf, S = 0,
 * acc = 0), and the chunks' states combined in chunk order by
 * ops_attn_combine_*, as llama.cpp's split-KV decode combines its per-thread
 * chunks (ggml_flash_attn_ext_reduce_partials; its chunks are one per
 * thread, so its bits depend on the thread count: these do not).  A kernel
 * called with part == NULL does that itself; a caller spreading the chunks
 * over threads calls it per chunk with s0 and part set and combines the
 * partials the same way, with the same bits.  q8_0 caches are never split
 * (nor are they in llama.cpp).
 */
/* llama.cpp pads its KV view to a multiple of 256 slots (llama_kv_cache::
 * get_n_kv) and splits a one-row step when the padded view has 512 or more
 * (ggml_compute_forward_flash_attn_ext_f16): from 257 used slots on, with a
 * context of 512 or more; its 2 threads then take chunks of 256. */
#define ATTN_SPLIT_MIN 257      /* n_kv from which a step's KV is split */
#define ATTN_SPLIT_KV 256       /* slots per chunk */
struct attn_args {
    const float *q;             /* [n_q][head_dim] */
    float *out;                 /* [n_q][head_dim_v] */
    int64_t n_q, head_dim, head_dim_v;
    float scale;                /* usually 1 / sqrt(head_dim) */
    const uint8_t *k_base;      /* this layer/KV head in physical block 0 */
    const uint8_t *v_base;
    size_t block_stride;        /* bytes between consecutive physical blocks */
    uint32_t kv_type;           /* GGML_TYPE_F32, GGML_TYPE_F16 or GGML_TYPE_Q8_0 */
    int64_t block_size;
    const int32_t *table;       /* logical block -> physical block */
    int64_t n_kv;               /* slots considered: 0 .. n_kv-1 */
    const uint8_t *vis;         /* NULL (all visible) or n_kv flags */
    /* one chunk of a split step: slots s0 .. n_kv-1 only, and instead of
     * out, part [n_q][ATTN_PART(head_dim_v)] gets each head's state after
     * them: M, S and the accumulator in f32 (not scaled by 1/S).  part =
     * NULL (then s0 must be 0): the whole step (split or not, see above)
     * into out. */
    int64_t s0;
    float *part;
    /* a sliding window: slots below lo are not visible either (0: none) */
    int64_t lo;
    /* bytes from one V row of a block to the next: 0 = rows of head_dim_v
     * elements back to back; MLA's cache, whose V is the first head_dim_v
     * elements of each K row (v_base = k_base), gives the K row's size */
    size_t v_stride;
};
#define ATTN_PART(dv) (2 + (dv))

/* the bytes between V rows of a block (struct attn_args v_stride) */
static inline size_t
ops_attn_v_stride(uint32_t kv_type, int64_t head_dim_v, size_t v_stride)
{
    if (v_stride)
        return v_stride;
    return kv_type == 0 ? (size_t)head_dim_v * 4 : kv_type == 1 ? (size_t)head_dim_v * 2
                                                                : (size_t)(head_dim_v / 32) * 34;
}  /* floats of one head's partial state */

/* the chunks a step over n visible slots of a kv_type cache is computed in
 * (n = n_kv without a mask: ops_attn_n_vis) */
static inline int64_t
ops_attn_chunks(uint32_t kv_type, int64_t n)
{
    if ((kv_type != 0 && kv_type != 1) || n < ATTN_SPLIT_MIN)
        return 1;
    return (n + ATTN_SPLIT_KV - 1) / ATTN_SPLIT_KV;
}

/* the visible slots of a step: n_kv, or under a mask those flagged */
static inline int64_t
ops_attn_n_vis(const struct attn_args *a)
{
    int64_t n = 0;
    if (!a->vis)
        return a->n_kv;
    for (int64_t s = 0; s < a->n_kv; s++)
        n += a->vis[s] != 0;
    return n;
}

/* *c = chunk k of the whole step *a (a split one: ops_attn_chunks() > 1),
 * its state into part: the slots of its
 * visible slots k * ATTN_SPLIT_KV .. that + ATTN_SPLIT_KV - 1 (counted in
 * slot order; without a mask, slots [k * ATTN_SPLIT_KV, that +
 * ATTN_SPLIT_KV) below n_kv).  Chunking by visible slots makes a masked
 * row (a node of a speculative token tree) compute what the same token
 * computes unmasked at its place in the sequence, whatever slots the other
 * nodes of the tree hold in between. */
static inline void
ops_attn_chunk(struct attn_args *c, const struct attn_args *a, int64_t k, float *part)
{
    *c = *a;
    c->part = part;
    if (!a->vis) {
        c->s0 = k * ATTN_SPLIT_KV;
        c->n_kv = a->n_kv - c->s0 < ATTN_SPLIT_KV ? a->n_kv : c->s0 + ATTN_SPLIT_KV;
        return;
    }
    int64_t want0 = k * ATTN_SPLIT_KV, cnt = 0;
    c->s0 = c->n_kv = a->n_kv;
    for (int64_t s = 0; s < a->n_kv; s++) {
        if (!a->vis[s])
            continue;
        if (cnt == want0)
            c->s0 = s;
        if (cnt == want0 + ATTN_SPLIT_KV) {
            c->n_kv = s;
            break;
        }
        cnt++;
    }
}

/* Combining chunk partials (in chunk order): begin sets the state (out
 * [n_q][dv] is the accumulator, ms [2 * n_q] the maxima and sums), add folds
 * in one chunk's part [n_q][ATTN_PART(dv)] as llama.cpp's reduction does
 * (chunks with S = 0 skipped; M = max, both sides scaled by expf(M_side -
 * M), acc = acc * s_old + part * s_new in f32 without fusing), end
 * multiplies by 1 / S (0 where nothing was visible). */
void ops_attn_combine_begin(float *out, float *ms, int64_t n_q, int64_t dv);
void ops_attn_combine_add(float *out, float *ms, const float *part, int64_t n_q, int64_t dv);
void ops_attn_combine_end(float *out, const float *ms, int64_t n_q, int64_t dv);
/* For the kernels: the end of a walk over a's slots, acc [n_q][dv] (f32),
 * M and S [n_q]: out = acc * (1 / S) (0 where S = 0), or into part when
 * set. */
void ops_attn_emit(const struct attn_args *a, const float *acc, const float *M, const float *S);
/* For the kernels: when a is a whole step that is split, computes it by
 * calling fn per chunk (with the kernel's own scratch, whose first `base`
 * floats fn uses; the partials and state go after them: ATTN_SPLIT_FLOATS)
 * and combining; returns 1 then, 0 when a is not split. */
int ops_attn_split(const struct attn_args *a, float *scratch, int64_t base,
                   void (*fn)(const struct attn_args *, float *));
#define ATTN_SPLIT_FLOATS(n_q, dv) ((n_q) * ATTN_PART(dv) + 2 * (n_q))
typedef void (*ops_attn_fn)(const struct attn_args *a, float *scratch);
typedef int64_t (*ops_attn_scratch_floats_fn)(int64_t n_q, int64_t block_size, int64_t head_dim,
                                              int64_t head_dim_v);

/* ---- the KV cache's row codec ----
 * ops_kv_row_put() stores n floats as one cache row of dtype (GGML_TYPE_F32,
 * F16, or Q8_0 with n % 32 == 0) at dst: f16 rounds to nearest even; q8_0
 * takes d = fp16(max|x| / 127) per 32 values and codes round-half-even(x *
 * 127 / max|x|) (what ggml's x86 build stores).  ops_kv_row_get() converts
 * a row back to floats. */
void ops_kv_row_put(uint32_t dtype, void *dst, const float *src, int64_t n);
void ops_kv_row_get(uint32_t dtype, float *dst, const void *src, int64_t n);

/* ---- tiled attention: a tile of query rows of one sequence ----
 *
 * The arithmetic of llama.cpp's CPU flash attention for a ubatch of at
 * least ATTN_TILE_Q query rows (ggml_compute_forward_flash_attn_ext_tiled):
 * llama-perplexity and llama-imatrix run it, so tools reproducing their
 * results bit for bit call this kernel instead of ops_attn_fn.  Unlike the
 * one-row arithmetic its rounding depends on the KV tiling, not on the other
 * rows: each row's result is a function of its query, its visible slots and
 * the tiles of ATTN_TILE_KV slots aligned at slot 0 (a llama.cpp KV cell
 * index = the slot), so rows may be grouped in any tiles.
 *
 * Rows r < n_rows (at most ATTN_TILE_Q) and heads h < n_q share one KV
 * head (paged as in struct attn_args; kv_type GGML_TYPE_F32 or F16 only).
 * Row r sees slots 0 .. n_kv[r]-1 (n_kv[r] >= 1: causal prefix).  For each
 * (r, h), with q = q + r * ldq + h * head_dim, out = out + r * ldo + h *
 * head_dim_v, all in f32 (the query is not rounded, keys and values are
 * converted exactly), per KV tile t of slots [64t, 64t+64) holding a visible
 * slot, in tile order:
 *   s_j   = fma chain over d of q[d] * k_j[d] from 0, times scale; -inf for
 *           slots not visible
 *   Mnew  = max(M, max_j s_j); when Mnew > M: acc *= expf(M - Mnew) and
 *           S *= the same; M = Mnew
 *   p_j   = ggml's vectorised exp (avx2_expf) of s_j - M, summed per 8 lanes
 *           in ggml_vec_soft_max_f32's order, the 8-lane sums in double;
 *           S = (float)(S + sum)
 *   acc   = fma chain over j of p_j * v_j, per element, in slot order
 * out = acc * (1 / S).  scratch holds attn_tiled_scratch_floats(n_q,
 * head_dim, head_dim_v) floats (per thread). */
#define ATTN_TILE_Q 64          /* ggml's GGML_FA_TILE_Q: query rows per tile, and the
                                 * ubatch size from which llama.cpp tiles */
#define ATTN_TILE_KV 64         /* GGML_FA_TILE_KV: slots per KV tile */

struct attn_tiled_args {
    const float *q;             /* row r, head h at q + r * ldq + h * head_dim */
    float *out;                 /* row r, head h at out + r * ldo + h * head_dim_v */
    int64_t ldq, ldo;
    int64_t n_rows;             /* 1 .. ATTN_TILE_Q */
    int64_t n_q, head_dim, head_dim_v;
    float scale;
    const uint8_t *k_base;      /* as struct attn_args */
    const uint8_t *v_base;
    size_t block_stride;
    uint32_t kv_type;           /* GGML_TYPE_F32 or GGML_TYPE_F16 */
    int64_t block_size;
    const int32_t *table;
    const int64_t *n_kv;        /* [n_rows]: row r sees slots 0 .. n_kv[r]-1 */
    const int64_t *lo;          /* NULL, or [n_rows]: row r sees no slot below lo[r] (a
                                 * sliding window: -inf like a masked slot, so tiles
                                 * with nothing visible are skipped, as in ggml) */
    size_t v_stride;            /* as struct attn_args (0: V rows back to back) */
};

typedef void (*ops_attn_tiled_fn)(const struct attn_tiled_args *a, float *scratch);
typedef int64_t (*ops_attn_tiled_scratch_floats_fn)(int64_t n_q, int64_t head_dim,
                                                    int64_t head_dim_v);

/* Weights in a table's own layout (optional; both NULL in tables that keep
 * the GGUF layout).  mm_pack_size(wtype, rows, cols): the bytes of the
 * packed form of such a matrix, 0 when the table does not pack that type or
 * shape; mm_pack writes it (dst 64-byte aligned).  The model packs its
 * matmul weights once at load and passes mm_rows the packed buffer as w
 * with wtype | OPS_MM_PACKED (row_bytes still the GGUF row size;
 * mm_work_size and mm_prepare get the plain type).  A packed matrix gives
 * the same bits as its GGUF form, for any batch and row range.  Its layout
 * is cut by rows: rows [r, r + n) packed on their own (r a multiple of 64,
 * n too unless they end the matrix) are the bytes at mm_pack_size(wtype, r,
 * cols) of the whole matrix's packed form (backend.h BACKEND_PACK_SLICE). */
#define OPS_MM_PACKED 0x10000u
typedef size_t (*ops_mm_pack_size_fn)(uint32_t wtype, int64_t rows, int64_t cols);
typedef void (*ops_mm_pack_fn)(void *dst, const void *w, size_t row_bytes, uint32_t wtype,
                               int64_t rows, int64_t cols);

/* ---- the dispatch table ---- */
struct kernel_ops {
    const char *name;           /* "ref", later "avx2", "avx512", "cuda" */
    int (*available)(void);     /* CPU feature / device probe: 1 if usable here */
    ops_mm_supported_fn mm_supported;
    ops_mm_work_size_fn mm_work_size;
    ops_mm_prepare_fn mm_prepare;
    ops_mm_rows_fn mm_rows;
    ops_mm_tmp_floats_fn mm_tmp_floats;
    ops_get_row_fn get_row;
    ops_rmsnorm_fn rmsnorm;
    ops_rope_fn rope;
    ops_softmax_fn softmax;
    ops_silu_mul_fn silu_mul;
    ops_gelu_mul_fn gelu_mul;
    ops_attn_fn attn;
    ops_attn_scratch_floats_fn attn_scratch_floats;
    ops_attn_tiled_fn attn_tiled;                       /* may be NULL */
    ops_attn_tiled_scratch_floats_fn attn_tiled_scratch_floats;
    /* may be NULL (every table here has one): llama.cpp's batched float
     * matmul (llamafile tinyBLAS) for prompts (backend.h gemm) and tools
     * mirroring a llama.cpp run bit for bit (model->llamacpp_ubatch):
     * the mm_rows contract for F32/F16/BF16 weights with cols % 8 == 0 (work
     * from this table's mm_prepare), which ggml runs when a mul_mat has >= 2
     * tokens and rows % 4 == 0; unlike mm_rows its rounding is not that of
     * a batch of one (cpu/matmul_mirror_avx2.h); and for Q4_K weights with
     * cols % 256 == 0, the arithmetic of ggml's repack gemm, which llama.cpp
     * applies to a ubatch's first n - n % 4 tokens when rows % 8 == 0
     * (backend.h gemm; ops_mm_rows_mirror_ref is its spec) */
    ops_mm_rows_fn mm_rows_mirror;
    ops_mm_pack_size_fn mm_pack_size;                   /* may be NULL */
    ops_mm_pack_fn mm_pack;
};

/* The reference implementation (kernels/cpu/ *_ref.c); always available. */
extern const struct kernel_ops kernel_ops_ref;
/* AVX2/FMA/F16C (kernels/cpu/ *_avx2.c); available() checks the CPU.  Its
 * results are bit-identical to ggml's AVX2 CPU backend where ggml's
 * arithmetic is known (see each file), so greedy decoding matches
 * llama.cpp token for token. */
extern const struct kernel_ops kernel_ops_avx2;
/* The AVX2 set with AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels (batch
 * tiles, some decode paths, Q4_0 and IQ4_NL packed at load); the same bits as
 * kernel_ops_avx2 for every input.  available() checks the
 * CPU, then executes the instructions once under a SIGILL guard;
 * LLMKIT_NO_AVX512=1 makes it unavailable (auto then picks "avx2"). */
extern const struct kernel_ops kernel_ops_avx512;

/* ops_select() : the implementation named want: "ref", or "auto" (the best
 * available on this machine; "avx512" where it is available, else "avx2" on a CPU with AVX2, FMA and F16C, else "ref").  want == NULL means the
 * LLMKIT_KERNEL environment variable, or "auto" when it is unset or empty.
 * Returns NULL for an unknown or unavailable name. */
const struct kernel_ops *ops_select(const char *want);

/* ops_names() : the names ops_select() knows, NULL-terminated (for --help and
 * error messages); whether each is available here is ops->available(). */
const char *const *ops_names(void);

/* Individual reference kernels, for tests and for other variants' scalar
 * tails; same contracts as the table entries above. */
int ops_mm_supported_ref(uint32_t wtype);
size_t ops_mm_work_size_ref(uint32_t wtype, int64_t n_tok, int64_t cols);
void ops_mm_prepare_ref(void *work, uint32_t wtype, const float *x, int64_t ldx, int64_t n_tok,
                        int64_t cols);
void ops_mm_rows_ref(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                     const void *work, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
                     int64_t r0, int64_t r1, float *tmp);
int64_t ops_mm_tmp_floats_ref(int64_t cols);
/* mm_rows_mirror's arithmetic, the ref table's entry and the spec the avx2
 * table's follows bit for bit (cpu/matmul_mirror_ref.c): F32/F16/BF16 with
 * cols % 8 == 0, llamafile tinyBLAS's order (tmp: mm_tmp_floats(cols)
 * floats); Q4_K, ggml's repack gemm; Q6_K, its tiled kernels (cols % 256 ==
 * 0); other types: nothing is written */
void ops_mm_rows_mirror_ref(float *y, int64_t ldy, const void *w, size_t row_bytes,
                            uint32_t wtype, const void *work, const float *x, int64_t ldx,
                            int64_t n_tok, int64_t cols, int64_t r0, int64_t r1, float *tmp);
void ops_get_row_ref(float *y, const void *w, size_t row_bytes, uint32_t wtype, int64_t row,
                     int64_t cols);
void ops_rmsnorm_ref(float *y, const float *x, const float *w, int64_t n, float eps);
void ops_rope_ref(float *x, int64_t n_heads, int64_t head_dim, const float *cs,
                  const struct rope_params *p);
/* ops_rope_ref for the pairs i0 .. n_rot/2 - 1 only */
void ops_rope_pairs_ref(float *x, int64_t n_heads, int64_t head_dim, const float *cs,
                        const struct rope_params *p, int64_t i0);
void ops_softmax_ref(float *x, int64_t n);
void ops_silu_mul_ref(float *y, const float *gate, const float *up, int64_t n);
void ops_gelu_mul_ref(float *y, const float *gate, const float *up, int64_t n);
/* ggml's GELU lookup-table entry for f16 value h (an f16 value) */
uint16_t ops_gelu_f16_ref(uint16_t h);
void ops_attn_ref(const struct attn_args *a, float *scratch);
int64_t ops_attn_scratch_floats_ref(int64_t n_q, int64_t block_size, int64_t head_dim,
                                    int64_t head_dim_v);
void ops_attn_tiled_ref(const struct attn_tiled_args *a, float *scratch);
int64_t ops_attn_tiled_scratch_floats_ref(int64_t n_q, int64_t head_dim, int64_t head_dim_v);

/* AVX2 kernels (only callable when kernel_ops_avx2.available() is 1). */
void ops_rmsnorm_avx2(float *y, const float *x, const float *w, int64_t n, float eps);
void ops_silu_mul_avx2(float *y, const float *gate, const float *up, int64_t n);
void ops_gelu_mul_avx2(float *y, const float *gate, const float *up, int64_t n);
void ops_rope_avx2(float *x, int64_t n_heads, int64_t head_dim, const float *cs,
                   const struct rope_params *p);
void ops_attn_avx2(const struct attn_args *a, float *scratch);
int64_t ops_attn_scratch_floats_avx2(int64_t n_q, int64_t block_size, int64_t head_dim,
                                     int64_t head_dim_v);
void ops_attn_tiled_avx2(const struct attn_tiled_args *a, float *scratch);
int64_t ops_attn_tiled_scratch_floats_avx2(int64_t n_q, int64_t head_dim, int64_t head_dim_v);

#endif
