/*
 * exec.h - the executor: runs the steps of a layer recipe over one chunk of
 * a batch on the model's backend (kernels/backend.h).
 *
 * A recipe (arch_<family>.c) says what one layer computes, in order, as
 * calls of the exec_* ops below on the chunk's rows; the executor prepares
 * what the steps need: the scratch (struct forward_state, allocated once at
 * model_open in backend buffers), each token's slot, block and RoPE angles,
 * each attention row's block table, visible prefix and mask, the hook
 * events; then each op is one call of the backend's table, which decides
 * the rest (the CPU backend: the split over its threads, one activation
 * conversion per matmul group, the attention schedule of tiled runs,
 * one-row items and split-KV chunks).  None of these choices changes a bit
 * of the result: every kernel is row- and range-invariant, so a token's
 * values do not depend on the thread count, the split, or the other tokens
 * of the call (except in the llama.cpp ubatch mode, which depends on the
 * ubatch size the caller states: struct batch).
 *
 * Shapes: every activation is row-major f32, one row per chunk token
 * (e->n rows), rows contiguous (stride = the row width given or implied).
 *
 * A call (model_forward, layer_forward in forward.c) goes:
 *
 *   exec_call_begin(e, m, kv, b, hooks, appended, d)   slots, sequences, scratch room
 *   [exec_reserve(e, d)]                                model_forward: the batch's slots
 *   per chunk of at most m->max_batch tokens:
 *     exec_chunk_begin(e, c0, n, x)                     slot blocks, RoPE angles, attention plan
 *     per layer: e->layer = l; recipe(e, &m->layers[l])
 *
 * The executor is internal to the forward pass (forward.c and the recipe
 * files); nothing else includes this header.
 */
#ifndef LLMKIT_EXEC_H
#define LLMKIT_EXEC_H

#include <stdint.h>

#include "model.h"
#include "status.h"

/* One call's context, on the driver's stack.  The scratch pointers are the
 * model's, valid from exec_call_begin() for the call; rows [0, n) of each
 * belong to the current chunk. */
struct exec {
    struct model *m;
    struct kvcache *kv;
    const struct batch *b;
    const struct model_hooks *hooks;    /* may be NULL */
    int64_t c0, n;              /* the chunk: batch tokens [c0, c0 + n) */
    int64_t layer;              /* the layer running (KV cache, hook events); -1 = none */
    float *x;                   /* [n][n_embd] the residual stream, updated in place */
    /* scratch of the chunk (any recipe may use any of them) */
    float *xn;                  /* [n][n_embd] */
    float *q, *k, *v;           /* [n][n_head*hd], [n][n_head_kv*hd], [n][n_head_kv*hdv] */
    float *att;                 /* [n][n_head*hdv] */
    float *tmp;                 /* [n][n_embd] */
    float *gate, *up;           /* [n][n_ff] */
    /* MLA (hparams mla; NULL otherwise): [n][n_head*mla_k] the query before
     * absorption, [n][q_lora_rank] its low-rank form, [n][n_head*n_rot] RoPE
     * parts, [n][n_head*mla_v] the heads' values */
    float *mla_q, *mla_qa, *mla_pe, *mla_o;
};

/* A layer recipe: one layer of the model on the chunk, e->x in place.
 * Returns 0 or a hook's negative code. */
typedef int (*exec_layer_fn)(struct exec *e, const struct model_layer *L);

/* The recipes, one file each. */
int arch_llama_layer(struct exec *e, const struct model_layer *L);   /* arch_llama.c */
/* the SwiGLU feed-forward block of a llama layer, x += ffn(rmsnorm(x))
 * (arch_llama.c; deepseek2's dense layers share it) */
int arch_llama_ffn(struct exec *e, const struct model_layer *L);
int arch_gemma3_layer(struct exec *e, const struct model_layer *L);  /* arch_gemma3.c */
int arch_deepseek2_layer(struct exec *e, const struct model_layer *L);   /* arch_deepseek2.c */

/* ---- a call ---- */

/* exec_call_begin() : the per-call bookkeeping for batch b over kv: its
 * sequences, each token's slot, and room in the scratch for this batch's
 * attention.  The k-th token of sequence s in the batch has slot len0(s) + k,
 * where len0(s) = kv_seq_len(s) when !appended (the slots come after the
 * sequence: exec_reserve() appends them), and kv_seq_len(s) - (tokens of s
 * in the batch) when appended (the caller appended them already).  The
 * batch must have been checked (ids, positions, sequences).
 * Returns 0; -ST_RANGE (appended, and a sequence holds fewer slots than the
 * batch has tokens of it); -ST_NOMEM. */
int exec_call_begin(struct exec *e, struct model *m, struct kvcache *kv, const struct batch *b,
                    const struct model_hooks *hooks, int appended, struct diag *d);

/* exec_reserve() : appends the batch's slots to its sequences, all or
 * nothing.  0 or kv_seq_grow's code (nothing appended). */
int exec_reserve(struct exec *e, struct diag *d);

/* exec_rollback() : truncates every sequence of the batch back to len0. */
void exec_rollback(struct exec *e);

/* exec_chunk_begin() : makes batch tokens [c0, c0 + n) the chunk (n <=
 * m->max_batch), with x [n][n_embd] as its residual stream (NULL: the
 * scratch's own); finds each token's KV block, its RoPE angles and which
 * attention arithmetic its rows take. */
void exec_chunk_begin(struct exec *e, int64_t c0, int64_t n, float *x);

/* ---- ops on the chunk ---- */

/* exec_hook() : an event for hooks at site (see model.h) when they want it:
 * x [n_tok][ld], dim valid columns, row 0 = batch token tok0.  0 or the
 * hook's negative code. */
int exec_hook(struct exec *e, int site, int layer, const char *name, const struct model_weight *w,
              const float *x, int64_t n_tok, int64_t dim, int64_t ld, int64_t tok0);

/* exec_embed() : x[t] = row token(t) of the embedding table w. */
void exec_embed(struct exec *e, const struct model_weight *w);

/* exec_rmsnorm() : y[t] = rmsnorm(x[t]) * w, rows of w->cols (hparams' eps). */
void exec_rmsnorm(struct exec *e, float *y, const float *x, const struct model_weight *w);

/* exec_rmsnorm_heads() : in place, y[t][h] = rmsnorm(y[t][h]) * w for the
 * n_heads heads of w->cols floats of every row (QK norm). */
void exec_rmsnorm_heads(struct exec *e, float *y, int64_t n_heads, const struct model_weight *w);

/* exec_scale() : x[t] *= s, rows of dim. */
void exec_scale(struct exec *e, float *x, int64_t dim, float s);

/* exec_matmuls() : y_i[t] = x[t] W_i^T (+ bias_i) for the chunk's tokens and
 * i < nw (at most 3); x rows of the weights' cols, y_i rows of W_i's rows.
 * The LINEAR_IN hook sees x once per weight, first; the weights are then
 * run as one group (one activation conversion per weight type, one pass of
 * the pool).  bias may be NULL, as may its entries or their data.
 * 0 or a hook's negative code. */
int exec_matmuls(struct exec *e, int nw, const struct model_weight *const *w,
                 const struct model_weight *const *bias, const float *x, float *const *y);

/* exec_attn_done() : a recipe calls it after its attention output
 * projection.  llama.cpp keeps only the output rows past that point of the
 * last layer (ggml_get_rows(inp_out_ids)), one per sequence in generation,
 * and multiplies them by k-quant weights in one-token arithmetic: from there
 * on in the last layer, no row of the chunk takes the batched arithmetic
 * (batch_tok.gemm; the other rows' results are not used). */
void exec_attn_done(struct exec *e);

/* exec_matmul() : exec_matmuls() of one weight. */
int exec_matmul(struct exec *e, const struct model_weight *w, const struct model_weight *bias,
                const float *x, float *y);

/* exec_matmul_rows() : y[t] = x[t] W^T for t < n_tok rows that are not the
 * chunk's (the LM head over the tokens that want logits: its hook event has
 * layer e->layer and tok0 as given).  0 or a hook's negative code. */
int exec_matmul_rows(struct exec *e, const struct model_weight *w, const float *x, int64_t n_tok,
                     int64_t tok0, float *y);

/* exec_rope() : rotates the n_heads heads (head_dim each) of every row of
 * y [n][n_heads * head_dim] by its token's position (hparams' rope, or
 * rope_swa in a sliding-window layer). */
void exec_rope(struct exec *e, float *y, int64_t n_heads);

/* exec_rope_heads() : exec_rope() of heads head_dim wide (the rotated dims
 * are the first n_rot of each). */
void exec_rope_heads(struct exec *e, float *y, int64_t n_heads, int64_t head_dim);

/* exec_copy_rows() : y[r * ldy + i] = x[r * ldx + i], r < n_rows, i < dim
 * (rows of any count: a chunk row's heads are rows too). */
void exec_copy_rows(struct exec *e, float *y, int64_t ldy, const float *x, int64_t ldx,
                    int64_t n_rows, int64_t dim);

/* exec_matmul_heads() : a stack of n_heads matrices w (each hr = w->rows /
 * n_heads rows of w->cols; ARCH_T_HEADS), each applied to its head: for the
 * chunk's rows t and heads h, y[t * ldy + h * y_head + 0 .. hr) = (x[t * ldx
 * + h * x_head + 0 .. w->cols)) W_h^T.  The LINEAR_IN hook sees each head's
 * input (stride ldx).  0 or a hook's negative code. */
int exec_matmul_heads(struct exec *e, const struct model_weight *w, int64_t n_heads, const float *x,
                      int64_t x_head, int64_t ldx, float *y, int64_t y_head, int64_t ldy);

/* exec_kv_store() : k [n][n_head_kv*hd] and v [n][n_head_kv*hdv] into the
 * chunk tokens' slots of layer e->layer (v unused when V is a view of K:
 * kv_config v_in_k). */
void exec_kv_store(struct exec *e, const float *k, const float *v);

/* exec_attention() : out [n][n_head*hdv] = attention of q [n][n_head*hd]
 * with scores scale * q.k, over layer e->layer of each token's sequence: the
 * slots before the call, and the batch's up to the token itself (under the
 * batch mask); in a sliding-window layer only the last hparams n_swa slots
 * up to the token's own. */
void exec_attention(struct exec *e, const float *q, float *out, float scale);

/* exec_add() : x[t] += y[t], rows of dim. */
void exec_add(struct exec *e, float *x, const float *y, int64_t dim);

/* exec_silu_mul() : g[t] = silu(g[t]) * u[t], rows of dim (SwiGLU). */
void exec_silu_mul(struct exec *e, float *g, const float *u, int64_t dim);

/* exec_gelu_mul() : g[t] = gelu(g[t]) * u[t], rows of dim (GeGLU, tanh). */
void exec_gelu_mul(struct exec *e, float *g, const float *u, int64_t dim);

/* forward_state_new() : allocates m->st, the pass's scratch for m->max_batch
 * tokens (when m->max_batch <= 0 it chooses one and sets m->max_batch) and
 * the backend's room for matmuls of that many tokens; model_open() calls it
 * once the weights and the backend are set.  0, -ST_RANGE (max batch too large) or -ST_NOMEM; on failure m->st may
 * hold a partial state, which forward_state_free() releases. */
int forward_state_new(struct model *m, struct diag *d);

/* forward_state_free() : frees m->st and sets it to NULL; a no-op when NULL. */
void forward_state_free(struct model *m);

#endif
