/*
 * model.h - llama-family models: hyperparameters from GGUF metadata, weight
 * views into the mapped file, and the one forward pass every tool uses.
 *
 * Loading validates the architecture, every hyperparameter key and the
 * presence, type and shape of every tensor, as the architecture table
 * (arch.h) describes them, before anything runs; a bad model is
 * -ST_FORMAT with a message naming the key or tensor.  Weights stay in the
 * read-only mapping in their stored types (F32, F16, BF16, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS) and are converted block by
 * block inside the matmul kernels: the model is never copied to f32.
 * Supported today: general.architecture "llama" (RMSNorm, RoPE in the
 * normal/adjacent-pair layout with freq base, linear scaling and llama3
 * rope_freqs factors, GQA/MQA, SwiGLU, tied or separate output, optional
 * q/k/v/o biases), "qwen2" (llama's layer with q/k/v biases and NeoX
 * RoPE), "qwen3" (NeoX RoPE, per-head QK RMSNorm before it, optional q/k/v
 * biases), "gemma3" (scaled embeddings, pre- and post-norms,
 * per-head QK norm, NeoX RoPE with its own base in the sliding-window
 * layers, GeGLU, MQA/GQA; arch_gemma3.c) and "deepseek2" with dense layers
 * (MLA in the absorbed form over a latent KV cache, optional low-rank
 * queries; arch_deepseek2.c).
 *
 * model_forward() runs n tokens of any number of sequences in one call:
 *
 *   batch  n tokens, each (seq, pos, token, logits); each seq is a sequence
 *          of the paged KV cache with its own block table; an optional n x n
 *          mask restricts which of the batch's tokens each one sees
 *   kv     the pool the K/V of every new token is written into and that
 *          attention reads from
 *   hooks  optional callbacks observing activations at named sites
 *   out    logits of the tokens that asked for them, and the final hidden
 *          state of every token when asked
 *
 * Weights are read once per call for the whole batch (each weight row is
 * combined with every token's activations); attention walks each sequence's
 * KV blocks with an online softmax.  Work is split over the model's thread
 * pool.  Scratch memory is allocated once at model_open() for max_batch
 * tokens; larger batches are processed in chunks of max_batch tokens in
 * batch order with the same result.
 *
 * A model is driven by one thread at a time (the forward pass uses the
 * model's scratch and thread pool).
 */
#ifndef LLMKIT_MODEL_H
#define LLMKIT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "gguf.h"
#include "kvcache.h"
#include "backend.h"
#include "ops.h"
#include "status.h"

struct forward_state;

/* The architecture table's ids (arch.h) of the architectures that run. */
enum model_arch {
    MODEL_ARCH_LLAMA = ARCH_ID_LLAMA,
    MODEL_ARCH_GEMMA3 = ARCH_ID_GEMMA3,
    MODEL_ARCH_QWEN2 = ARCH_ID_QWEN2,
    MODEL_ARCH_QWEN3 = ARCH_ID_QWEN3,
    MODEL_ARCH_DEEPSEEK2 = ARCH_ID_DEEPSEEK2,
};

/* A weight: a view of a tensor in the mapped file, [rows, cols] with GGUF
 * ne = {cols, rows}; 1-D tensors have rows == 1.  data == NULL for an
 * optional tensor that is absent. */
struct model_weight {
    const char *name;           /* tensor name (owned by the model's gguf) */
    const void *data;           /* into the read-only mapping */
    const void *packed;         /* NULL, or the kernels' own layout of a matmul
                                 * weight (the backend's pack, made at load) */
    uint32_t type;              /* enum ggml_type */
    int64_t rows, cols;
    size_t row_bytes;
};

/* the backend's view of w */
static inline struct backend_weight
model_weight_view(const struct model_weight *w)
{
    struct backend_weight b = { w->data, w->packed, w->row_bytes, w->type, w->rows, w->cols };
    return b;
}

struct model_layer {
    struct model_weight attn_norm;      /* [n_embd] F32 */
    struct model_weight wq;             /* [n_head * head_dim, n_embd] */
    struct model_weight wk;             /* [n_head_kv * head_dim, n_embd] */
    struct model_weight wv;             /* [n_head_kv * head_dim_v, n_embd] */
    struct model_weight wo;             /* [n_embd, n_head * head_dim_v] */
    struct model_weight bq, bk, bv, bo; /* optional F32 biases */
    struct model_weight ffn_norm;       /* [n_embd] F32 */
    struct model_weight ffn_gate;       /* [n_ff, n_embd] */
    struct model_weight ffn_up;         /* [n_ff, n_embd] */
    struct model_weight ffn_down;       /* [n_embd, n_ff] */
    /* qwen3, gemma3 */
    struct model_weight attn_q_norm;    /* [head_dim] F32: RMSNorm of each query head */
    struct model_weight attn_k_norm;    /* [head_dim] F32: of each key head */
    /* gemma3 */
    struct model_weight attn_post_norm; /* [n_embd] F32: of the attention output */
    struct model_weight ffn_post_norm;  /* [n_embd] F32: of the feed-forward output */
    /* deepseek2 (MLA); wq is [n_head * mla_k, n_embd] when q_lora_rank is 0 */
    struct model_weight wq_a;           /* [q_lora_rank, n_embd] */
    struct model_weight q_a_norm;       /* [q_lora_rank] F32 */
    struct model_weight wq_b;           /* [n_head * mla_k, q_lora_rank] */
    struct model_weight wkv_a;          /* [kv_lora_rank + n_rot, n_embd] */
    struct model_weight kv_a_norm;      /* [kv_lora_rank] F32 */
    struct model_weight wk_b;           /* n_head x [kv_lora_rank, qk_nope] */
    struct model_weight wv_b;           /* n_head x [v_mla, kv_lora_rank] */
    bool swa;                           /* attends over a sliding window (hparams n_swa) */
};

/* model_layer_weight() : where layer L keeps the table's tensor w (arch.h),
 * or NULL for a tensor the layer does not hold (a global one, FFN biases). */
struct model_weight *model_layer_weight(struct model_layer *L, enum arch_weight w);

/* The llama recipe's view of the hyperparameters; keys holds every one the
 * file gives (arch.h), checked, for recipes that need more. */
struct model_hparams {
    enum model_arch arch;
    enum arch_recipe recipe;    /* the layer recipe that runs the model */
    const char *arch_name;      /* general.architecture */
    int64_t n_vocab;            /* rows of token_embd.weight */
    int64_t n_ctx_train;        /* <arch>.context_length */
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_ff;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;           /* key_length (default n_embd / n_head) */
    int64_t head_dim_v;         /* value_length (default n_embd / n_head) */
    float rms_eps;
    struct rope_params rope;    /* n_rot, base, linear scale, llama3 factors (into the mapping) */
    struct rope_params rope_swa;/* the sliding-window layers' (gemma3: base rope.freq_base_swa,
                                 * default 10000, no scaling) */
    int64_t n_swa;              /* sliding window in tokens (0: none); layers[l].swa says which */
    float embd_scale;           /* gemma3: the embeddings are multiplied by it (0: not) */
    float attn_scale;           /* gemma3: the queries are multiplied by it before attention */
    float logit_softcap;        /* gemma3: logits = c * tanh(logits / c) when c != 0 */
    bool tied_output;           /* no output.weight: token_embd.weight is the LM head */
    /* deepseek2's MLA, run absorbed: the cache is one KV head (n_head_kv 1)
     * whose K row (head_dim = kv_lora_rank + n_rot) is the normed latent and
     * the RoPE key and whose V (head_dim_v = kv_lora_rank) is the latent, a
     * view of K (kv_config v_in_k); queries are head_dim wide: the non-RoPE
     * part times W_UK (attn_k_b) and the RoPE part */
    bool mla;
    int64_t kv_lora_rank, q_lora_rank;  /* q_lora_rank 0: attn_q, no compression */
    int64_t mla_k;              /* key_length_mla: a head's query/key before absorption */
    int64_t mla_nope;           /* mla_k - n_rot */
    int64_t mla_v;              /* value_length_mla: a head's value after attn_v_b */
    float kq_scale;             /* the attention's score scale */
    struct arch_hparams keys;   /* as read by arch_read_hparams() and checked (strings
                                 * point into the model's gguf) */
};

/* Read-only for callers after model_open(). */
struct model {
    struct gguf gguf;           /* the parsed file; tokenizers load from it */
    struct model_hparams hp;
    struct model_weight tok_embd;       /* [n_vocab, n_embd] */
    struct model_weight output_norm;    /* [n_embd] F32 */
    struct model_weight output;         /* [n_vocab, n_embd]; == tok_embd when tied */
    struct model_weight rope_freqs;     /* optional [head_dim / 2] F32 */
    struct model_layer *layers;         /* [n_layer] */
    uint8_t *swa_layers;                /* [n_layer] layers[l].swa (model_kv_config) */
    struct backend *be;                 /* the device the steps run on (kernels/backend.h) */
    int64_t max_batch;
    struct forward_state *st;           /* scratch, private to exec.c (forward.h) */
    void *pack_buf;                     /* the packed weights (model_weight.packed) */
};

struct model_opts {
    int n_threads;              /* workers incl. the caller; <= 0 = all online CPUs */
    const char *kernel;         /* "auto", "ref"; NULL = $LLMKIT_KERNEL or "auto" */
    int64_t max_batch;          /* tokens per internal chunk (scratch size); <= 0 = 512 */
    const char *device;         /* "cpu" (NULL), "cuda": kernels/backend.h backend_open() */
};

#define MODEL_OPTS_INIT { 0, NULL, 0, NULL }

/* model_open() : maps the GGUF at path, reads the hyperparameters, checks
 * every tensor and opens the backend of o->device (its kernels and thread
 * pool).  The file must be a regular (mappable) file: a FIFO, device or
 * socket is refused at once (-ST_IO "is a FIFO, not a regular file"), never
 * waited on.  The caller frees *out with model_free().  o may be NULL
 * (defaults).
 * Returns 0; -ST_IO (cannot open/map, not a regular file); -ST_FORMAT (not GGUF, unknown or
 * unsupported architecture, missing/mistyped key, missing tensor, wrong
 * shape, unsupported tensor type; the message names it); -ST_RANGE (unknown
 * kernel or device name, bad option); -ST_DEVICE (the device cannot be
 * used: no GPU, or its backend not built); -ST_NOMEM. */
int model_open(struct model **out, const char *path, const struct model_opts *o, struct diag *d);

/* model_free() : releases everything; NULL is a no-op. */
void model_free(struct model *m);

/* model_load() / model_unload() : model_open() without the forward pass's
 * scratch (forward.c adds it), and its release: the weights, hyperparameters,
 * kernels and threads.  Used by model_open()/model_free(); a model loaded
 * this way cannot run model_forward(). */
int model_load(struct model **out, const char *path, const struct model_opts *o, struct diag *d);
void model_unload(struct model *m);

/* model_kv_config() : a KV pool configuration matching m (layers, KV heads,
 * head dims, which layers attend over a sliding window: c->swa points into
 * m; MLA: V a view of K, v_in_k) with the given byte budget and dtype
 * (GGML_TYPE_F16 or GGML_TYPE_F32) and the default block size. */
void model_kv_config(const struct model *m, size_t mem, uint32_t dtype, struct kv_config *c);

/* model_kv_bytes_per_token() : KV bytes one token takes in every layer at
 * dtype (for budgets and reports; MLA: the latent and the RoPE key only,
 * kvstat's figure). */
size_t model_kv_bytes_per_token(const struct model *m, uint32_t dtype);

/* model_attn_slots() : the KV slots the attention of a token at position pos
 * reads, averaged over the layers: pos + 1, and on a sliding-window layer
 * at most n_swa (what a pass's attention costs grows with it) */
double model_attn_slots(const struct model *m, int64_t pos);

/* ---- the forward pass (one layer of it: layer_forward, forward.h) ---- */

struct batch_tok {
    int32_t seq;                /* KV cache sequence id (kv_seq_new) */
    int32_t pos;                /* position for RoPE, >= 0 */
    int32_t token;              /* token id, 0 <= token < n_vocab */
    int32_t logits;             /* nonzero: write this token's logits to out */
    int32_t tiled;              /* nonzero: attention in the tiled arithmetic
                                 * (ops->attn_tiled, when the cache is F16/F32
                                 * and there is no mask); see model_prompt_tiled */
    int32_t gemm;               /* BACKEND_GEMM_* bits: k-quant weights in
                                 * llama.cpp's batched arithmetic
                                 * (ops->mm_rows_mirror); see model_prompt_gemm */
};

/*
 * Prompt tokens and llama.cpp's ubatches.  llama.cpp decodes a prompt of n
 * tokens in ubatches of LLAMACPP_N_UBATCH and computes the attention of a
 * ubatch of ATTN_TILE_Q rows or more with its tiled arithmetic, of a smaller
 * one (and of every generated token) with the one-row arithmetic.
 * model_prompt_tiled(n, i) says which for token i < n of such a prompt:
 * callers set batch_tok.tiled with it for prompt tokens (0 for generated
 * ones), so that prompts are computed as llama.cpp computes them, and since
 * the choice depends on the request alone, never on how the tokens are
 * batched or chunked, a token's result stays independent of its batch.
 */
#define LLAMACPP_N_UBATCH 512

static inline int32_t
model_prompt_tiled(int64_t n_prompt, int64_t i)
{
    int64_t u0 = i / LLAMACPP_N_UBATCH * LLAMACPP_N_UBATCH;
    int64_t rows = n_prompt - u0 < LLAMACPP_N_UBATCH ? n_prompt - u0 : LLAMACPP_N_UBATCH;
    return i >= 0 && i < n_prompt && rows >= ATTN_TILE_Q;
}

/*
 * llama.cpp multiplies a ubatch of n tokens by k-quant and float weights in
 * batched arithmetic that rounds unlike one token's: a Q4_K weight with
 * rows % 8 == 0 (repacked at load on AVX2 CPUs) with its repack gemm for the
 * first n - n % 4 tokens (the gemv for the other n % 4: BACKEND_GEMM_REPACK),
 * the k-quants it does not repack (Q6_K) with its tiled kernels when n >= 8
 * (BACKEND_GEMM_TILED), F32/F16/BF16 weights with llamafile's tinyBLAS when
 * n >= 2 (BACKEND_GEMM_FLOAT; the last layer's FFN after the output rows are
 * picked has n = 1 in generation, so exec.c clears the bits there).  model_prompt_gemm(n, i) gives the bits for token
 * i < n of a prompt decoded as model_prompt_tiled assumes: callers set
 * batch_tok.gemm with it for prompt tokens (0 for generated ones); like
 * tiled, a function of the request alone.
 */
static inline int32_t
model_prompt_gemm(int64_t n_prompt, int64_t i)
{
    int64_t u0 = i / LLAMACPP_N_UBATCH * LLAMACPP_N_UBATCH;
    int64_t rows = n_prompt - u0 < LLAMACPP_N_UBATCH ? n_prompt - u0 : LLAMACPP_N_UBATCH;

    if (i < 0 || i >= n_prompt)
        return 0;
    return (i - u0 < rows - rows % 4 ? BACKEND_GEMM_REPACK : 0) |
           (rows >= 8 ? BACKEND_GEMM_TILED : 0) | (rows >= 2 ? BACKEND_GEMM_FLOAT : 0);
}

/*
 * Slots and visibility.  The tokens of one sequence are appended to it in
 * batch order: the k-th token of sequence s in the batch fills slot
 * len0(s) + k, where len0(s) is kv_seq_len(s) before the call (pos is used
 * for RoPE and a sliding window's start only, so it may differ from the
 * slot, as in a speculative tree).
 * A token sees every slot of its sequence stored before the call, and the
 * batch tokens of its sequence up to and including itself; with a mask, only
 * those batch tokens j <= i with mask[i * n + j] != 0 (tokens before the
 * call stay visible).  Tokens never see other sequences.
 */
struct batch {
    int64_t n;                  /* tokens, >= 1 */
    const struct batch_tok *tok;/* [n] */
    const uint8_t *mask;        /* NULL, or [n][n] */
    /* Batch-dependent arithmetic, for callers that reproduce a llama.cpp run
     * bit for bit (perplexity, importance matrix); generation leaves it 0.
     * 0: every query row takes the one-row flash-attention arithmetic
     * (ops->attn) unless its token is marked tiled, so a token's result never
     * depends on the other tokens of the call.  n > 0: the batch's tokens
     * were, in the llama.cpp run being mirrored, in a ubatch of n tokens;
     * llama.cpp's CPU backend then computes attention with its tiled
     * arithmetic when n >= ATTN_TILE_Q (64) and the cache is F32 or F16, and
     * so does the forward pass (ops->attn_tiled; not with a batch mask), and
     * it multiplies F32, F16 and BF16 weights by 2+ tokens with tinyBLAS,
     * which the forward pass mirrors (ops->mm_rows_mirror). */
    int64_t llamacpp_ubatch;
};

/* Hook sites. */
enum model_hook_site {
    MODEL_HOOK_EMBD = 1,        /* token embeddings, name "inp_embd", dim n_embd */
    MODEL_HOOK_LINEAR_IN = 2,   /* the input of a linear; name = its weight's tensor name
                                 * ("blk.3.attn_q.weight", "output.weight" or
                                 * "token_embd.weight" when tied); dim = the weight's cols */
    MODEL_HOOK_LAYER_OUT = 4,   /* hidden state after layer i (residual stream),
                                 * name "blk.<i>.out", dim n_embd */
    MODEL_HOOK_LINEAR_OUT = 8,  /* the output of a layer's linear run through
                                 * exec_matmul(s) (bias added), name = its weight's;
                                 * dim = the weight's rows; see below */
};

struct model_hook_event {
    int site;                   /* one enum model_hook_site */
    int layer;                  /* layer index, or -1 (embedding, output) */
    const char *name;
    const struct model_weight *w;   /* the linear's weight (LINEAR_IN), else NULL */
    const float *x;             /* [n_tok][ld] f32, valid during the call only */
    int64_t n_tok;              /* rows (tokens of the current chunk) */
    int64_t dim;                /* valid columns per row */
    int64_t ld;                 /* row stride in floats */
    int64_t tok0;               /* batch index of row 0 */
    const struct batch *batch;  /* the whole batch */
    float *y;                   /* LINEAR_OUT offered before the product: its
                                 * output [n_tok][ld], writable; else NULL */
};

/* A hook returns 0 to continue or a negative -ST_* code to abort the forward
 * pass, which then returns that code (after rolling back the KV cache).
 * LINEAR_OUT comes twice per linear on a host backend: after LINEAR_IN
 * with ev->y set and ev->x NULL, where the hook may write the output itself
 * (a memo of an earlier identical run) and return 1 to have the product
 * skipped; then, when it was computed, with ev->x = the output and ev->y
 * NULL.  (A device backend gives only the second.)
 * Hooks run on the calling thread between kernels, in execution order; for
 * the linears sharing an input (q/k/v, gate/up) the hook is called once per
 * weight with the same x.  Only rows of tokens whose logits are wanted reach
 * the LM head, so its LINEAR_IN event has n_tok = that count and tok0 = -1. */
typedef int (*model_hook_fn)(void *ctx, const struct model_hook_event *ev);

struct model_hooks {
    model_hook_fn fn;
    void *ctx;
    unsigned sites;             /* OR of enum model_hook_site wanted */
};

struct model_out {
    float *logits;              /* NULL, or [n_want][n_vocab]: row k = the k-th token
                                 * (in batch order) with logits != 0 */
    float *hidden;              /* NULL, or [n][n_embd]: each batch token's final hidden
                                 * state after output_norm (the LM head's input) */
};

/* model_forward() : runs the batch through the model, appending each token's
 * K/V to its sequence (kv_seq_grow) and writing the outputs asked for.
 * kv must be configured for m (model_kv_config).  hooks and out may be NULL,
 * as may the fields of out.  On failure every sequence is truncated back to
 * its length before the call.
 * Returns 0; -ST_RANGE (bad token id, sequence, position, n, or kv that does
 * not fit m; message in d); -ST_NOMEM (KV pool exhausted: the message says
 * so, nothing was appended); a hook's negative code. */
int model_forward(struct model *m, struct kvcache *kv, const struct batch *b,
                  const struct model_hooks *hooks, struct model_out *out, struct diag *d);

#endif
