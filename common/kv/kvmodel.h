/*
 * kvmodel.h - KV-cache memory arithmetic for kvstat: bytes per token for
 * MHA/GQA/MQA/MLA attention in each KV dtype, what a memory budget holds, and
 * how much of a reservation a length workload wastes under contiguous and
 * paged allocation.  Pure functions over plain structs: no I/O.
 *
 * Per token, all layers (DeepSeek-V2 paper, arXiv:2405.04434 §2.1, Table 1):
 *   MHA  2 * n_layers * n_heads    * head_dim   elements (K and V)
 *   GQA  2 * n_layers * n_kv_heads * head_dim
 *   MQA  2 * n_layers * 1          * head_dim
 *   MLA      n_layers * (kv_lora_rank + rope_dim)   (latent c_KV and the
 *            decoupled RoPE key, shared by all heads)
 * Bytes: each layer's K row (n_kv_heads * head_dim_k elements), V row
 * (n_kv_heads * head_dim_v) or MLA row (kv_lora_rank + rope_dim) is stored in
 * the KV dtype as llama.cpp stores its cache rows; block-quantized dtypes
 * round a row up to whole blocks and pay the per-block scale:
 *   f32 4 B, f16 2 B, bf16 2 B, fp8 1 B (per-tensor scale, not counted),
 *   q8_0 34 B per 32 values (f16 scale + 32 x i8),
 *   q4_0 18 B per 32 values (f16 scale + 16 B of nibbles).
 */
#ifndef LLMKIT_KVMODEL_H
#define LLMKIT_KVMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "rng.h"
#include "status.h"

/* Limits a model description must respect (bigger values are refused as
 * corrupt input; they also keep every product below 2^63). */
#define KV_MAX_LAYERS   4096
#define KV_MAX_HEADS    4096
#define KV_MAX_HEAD_DIM 65536
#define KV_MAX_RANK     (1 << 20)
#define KV_MAX_LEN      ((int64_t)1 << 30)   /* tokens of one request / context */

/* ---- KV dtypes ---- */

enum kv_dtype {
    KV_DTYPE_F32,
    KV_DTYPE_F16,
    KV_DTYPE_BF16,
    KV_DTYPE_FP8,
    KV_DTYPE_Q8_0,
    KV_DTYPE_Q4_0,
    KV_DTYPE_COUNT
};

struct kv_dtype_info {
    const char *name;   /* "q8_0", as --kv-type spells it */
    int64_t blck;       /* values per block (1 for plain floats) */
    int64_t bytes;      /* bytes per block, scales included */
};

/* kv_dtype_get() : the entry for t (NULL when t is out of range). */
const struct kv_dtype_info *kv_dtype_get(enum kv_dtype t);

/* kv_dtype_parse() : the dtype named s (case-insensitive; "fp16"/"half" and
 * "fp32"/"float" accepted as aliases), or -1. */
int kv_dtype_parse(const char *s);

/* kv_dtype_bits() : average bits per value including scales (4.5 for q4_0). */
double kv_dtype_bits(enum kv_dtype t);

/* kv_row_bytes() : bytes of a row of n values of dtype t, partial blocks
 * rounded up to a whole block; -1 when n < 0 or t is invalid. */
int64_t kv_row_bytes(enum kv_dtype t, int64_t n);

/* ---- models ---- */

enum kv_attn {
    KV_ATTN_MHA,   /* one K/V head per query head */
    KV_ATTN_GQA,   /* 1 < K/V heads < query heads */
    KV_ATTN_MQA,   /* one K/V head */
    KV_ATTN_MLA,   /* DeepSeek-V2 latent cache */
    KV_ATTN_COUNT
};

/* kv_attn_name() : "MHA", "GQA", "MQA", "MLA". */
const char *kv_attn_name(enum kv_attn a);

/* The attention geometry that decides KV size.  Caller-owned storage:
 * kv_model_init() / kv_model_release(). */
struct kv_model {
    char name[128];          /* for reports: general.name, _name_or_path, file name */
    char arch[64];           /* "llama", "deepseek2", "falcon", ... ("" unknown) */
    int64_t n_layers;
    int64_t n_heads;         /* query heads (MLA: 0 = unknown, the cache does not need it) */
    int64_t n_kv_heads;      /* K/V heads per layer (the largest, with layer_kv_heads) */
    int64_t head_dim_k;      /* K head size (MLA: 0 = unknown) */
    int64_t head_dim_v;      /* V head size (MLA: 0 = unknown) */
    int64_t kv_lora_rank;    /* MLA latent size d_c; 0 = not MLA */
    int64_t rope_dim;        /* MLA decoupled RoPE key size d_h^R */
    int64_t n_ctx_train;     /* trained context, 0 = unknown (at most KV_MAX_LEN) */
    int64_t n_ctx_stated;    /* the model's own figure where it passed KV_MAX_LEN, else 0 */
    int64_t sliding_window;  /* tokens, 0 = none */
    int64_t n_swa_layers;    /* layers that use the window */
    int64_t *layer_kv_heads; /* per-layer K/V heads (n_layers), or NULL = uniform; owned */
    int64_t *layer_window;   /* per-layer window in tokens, 0 = the whole context (n_layers),
                              * or NULL = every layer keeps the whole context; owned */
};

/* kv_model_init() : zeroes m. */
void kv_model_init(struct kv_model *m);

/* kv_model_release() : frees layer_kv_heads and layer_window; m may be
 * reused after init. */
void kv_model_release(struct kv_model *m);

/* kv_model_check() : validates every dimension against the limits above and
 * against each other (n_heads a multiple of n_kv_heads unless per-layer,
 * per-layer K/V heads within [0, n_kv_heads], MLA rank and rope dim
 * together).  An MLA model may leave n_heads and the head sizes 0: its cache
 * holds the latent and the RoPE key only.  0 or -ST_FORMAT with the
 * offending field in d. */
int kv_model_check(const struct kv_model *m, struct diag *d);

/* kv_model_from_hparams() : the attention geometry of hp (arch_read_hparams
 * or arch_read_config with ARCH_READ_KV; any architecture): layers and query
 * heads are required; K/V heads default to the query heads, the K head size
 * to embedding / heads and the V head size to the K head size; a per-layer
 * K/V head array whose values differ goes to layer_kv_heads.  MLA
 * (kv_lora_rank > 0) needs the RoPE key size (rope.dimension_count,
 * qk_rope_head_dim); its MHA equivalent uses the V head size
 * (value_length_mla, v_head_dim, else qk_nope_head_dim) for K and V and one
 * K/V head per query head.  The context is capped at KV_MAX_LEN.  A sliding
 * window (attention.sliding_window and its layer pattern, or config.json's
 * sliding_window with layer_types, sliding_window_pattern or the family's
 * period: arch_swa_layer) goes into layer_window, one entry per layer.
 * m must be initialised (name and arch are left alone); it
 * is checked with kv_model_check().  0, -ST_FORMAT naming the key as the
 * file spells it, -ST_NOMEM. */
int kv_model_from_hparams(const struct arch_hparams *hp, struct kv_model *m, struct diag *d);

/* kv_seq_tokens() : the tokens layer il of m keeps for a sequence of len
 * tokens: len, or in a sliding-window layer of window w the last min(len, w);
 * with block_size > 0 counted in whole blocks of generate's paged pool:
 * blocks(len) * block_size for a full layer, and for a window layer what
 * the pool holds at most (kv_swa_slots in kvcache.h: the window, 128 slots
 * of slack for speculative rollbacks and a chunk of KV_CHUNK_DEFAULT
 * tokens appended at once, whole blocks), so that generate --json's
 * kv_bytes equals kvstat's figure. */
int64_t kv_seq_tokens(const struct kv_model *m, int64_t il, int64_t len, int64_t block_size);

/* kv_seq_bytes() : bytes one sequence of len tokens holds in dtype t over all
 * layers (kv_seq_tokens of each times its row bytes); -1 on overflow or a
 * bad dtype.  Without sliding windows: len (rounded up to whole blocks when
 * block_size > 0) * kv_bytes_per_token. */
int64_t kv_seq_bytes(const struct kv_model *m, enum kv_dtype t, int64_t len, int64_t block_size);

/* kv_model_attn() : the attention kind m describes. */
enum kv_attn kv_model_attn(const struct kv_model *m);

/* kv_elems_per_token() : cached values per token over all layers. */
int64_t kv_elems_per_token(const struct kv_model *m);

/* kv_bytes_per_token() : bytes per token over all layers in dtype t. */
int64_t kv_bytes_per_token(const struct kv_model *m, enum kv_dtype t);

/* kv_mul() : a * b for non-negative operands, or -1 when it would overflow
 * int64 or an operand is negative. */
int64_t kv_mul(int64_t a, int64_t b);

/* ---- MHA / GQA / MQA / MLA comparison ---- */

struct kv_variant {
    enum kv_attn attn;
    char label[48];          /* "MHA", "GQA-8", "MQA", "MLA-512+64" */
    int64_t n_kv_heads;      /* 0 for MLA */
    int64_t kv_lora_rank;    /* MLA only */
    int64_t rope_dim;        /* MLA only */
    int64_t elems_per_token;
    int64_t bytes_per_token;
    double reduction;        /* MHA bytes / these bytes */
    int is_own;              /* the model's own attention */
};

/* kv_compare() : the model re-cast as MHA (n_kv_heads = n_heads), GQA with
 * `groups` K/V heads (0: the model's own when it is GQA, else 8 when 8 divides
 * n_heads, else the largest divisor of n_heads below it that is > 1), MQA
 * (one K/V head) and MLA with latent `rank` and RoPE key `rope` (0: the
 * model's own, else 4 * head_dim and head_dim / 2 as DeepSeek-V2 chose).
 * Head sizes are the model's; an MLA model's MHA equivalent uses head_dim_v
 * for K and V, as the DeepSeek-V2 paper does.  Writes up to KV_ATTN_COUNT
 * rows to out in MHA, GQA, MQA, MLA order (GQA is left out when n_heads has
 * no divisor between 1 and n_heads) and returns how many, or -ST_RANGE when
 * groups does not divide n_heads or the model has no head count or head size
 * to re-cast (an MLA model given without them; message in d). */
int kv_compare(const struct kv_model *m, enum kv_dtype t, int64_t groups, int64_t rank,
               int64_t rope, struct kv_variant out[KV_ATTN_COUNT], struct diag *d);

/* ---- memory budgets ---- */

/* kv_blocks_for() : ceil(tokens / block_size). */
int64_t kv_blocks_for(int64_t tokens, int64_t block_size);

/* kv_fit_seqs() : how many sequences of ctx tokens fit in budget bytes when
 * the pool is cut into blocks of block_size tokens (each sequence rounded up
 * to whole blocks); 0 when none or on bad arguments. */
int64_t kv_fit_seqs(int64_t budget, int64_t bytes_per_token, int64_t ctx, int64_t block_size);

/* kv_fit_ctx() : the longest context (a multiple of block_size) that batch
 * sequences can each hold in budget bytes; 0 when none. */
int64_t kv_fit_ctx(int64_t budget, int64_t bytes_per_token, int64_t batch, int64_t block_size);

/* kv_fit_seqs_model() / kv_fit_ctx_model() : the same for model m in dtype
 * t, its sliding-window layers keeping only their window's blocks
 * (kv_seq_bytes with block_size): sequences of ctx tokens that fit, and the
 * longest context (a multiple of block_size, at most KV_MAX_LEN) that batch
 * sequences can each hold. */
int64_t kv_fit_seqs_model(const struct kv_model *m, enum kv_dtype t, int64_t budget, int64_t ctx,
                          int64_t block_size);
int64_t kv_fit_ctx_model(const struct kv_model *m, enum kv_dtype t, int64_t budget, int64_t batch,
                         int64_t block_size);

/* ---- workloads: contiguous vs paged reservation ---- */

struct kv_req {
    int64_t prompt;          /* tokens */
    int64_t output;          /* tokens generated */
};

enum kv_policy {
    KV_POLICY_MAX,      /* contiguous, reserves the maximum length (Orca Max) */
    KV_POLICY_POW2,     /* contiguous, next power of two of the final length (Orca Pow2) */
    KV_POLICY_ORACLE,   /* contiguous, exactly the final length (Orca Oracle) */
    KV_POLICY_PAGED,    /* blocks of block_size allocated on demand (vLLM) */
    KV_POLICY_COUNT
};

/* kv_policy_name() : "contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged". */
const char *kv_policy_name(enum kv_policy p);

/*
 * Time-averaged accounting.  Each request lives for max(output, 1) steps; at
 * step s (1..output) it stores prompt + s tokens (a request with no output
 * stores its prompt for one step).  Every slot it holds at a step is one of:
 *   stored        a token's K/V is in it
 *   reservation   empty now, this request will fill it later
 *   fragmentation empty now and never filled (internal fragmentation)
 * Summing over all steps of all requests weighs each request by how long it
 * holds its memory, which is what a server running them concurrently sees.
 */
struct kv_waste {
    enum kv_policy policy;
    double slot_steps;        /* sum over steps of slots held */
    double stored_steps;      /* sum over steps of tokens stored */
    double reserved_steps;    /* ... of reservation slots */
    double frag_steps;        /* ... of fragmentation slots */
    double waste;             /* 1 - stored / slots */
    double reservation;       /* reserved / slots */
    double fragmentation;     /* frag / slots */
    double mean_slots;        /* slots one running request holds on average */
    double final_slots;       /* sum of allocations at completion */
    double final_waste;       /* 1 - sum of lengths / final_slots */
};

struct kv_workload {
    int64_t n;               /* requests */
    int64_t max_len;         /* contiguous-max reservation (tokens) */
    int64_t block_size;      /* paged block (tokens) */
    double steps;            /* sum of request lifetimes in steps */
    double mean_prompt, mean_output, mean_len;
    int64_t longest;         /* longest prompt + output */
    int64_t p50, p90, p99;   /* length percentiles (nearest rank) */
    struct kv_waste pol[KV_POLICY_COUNT];
};

/* kv_simulate() : accounts the n requests under every policy.  Each request
 * needs 1 <= prompt + output <= max_len; block_size in [1, 65536].  Closed
 * forms, O(n log n) for the percentiles.  0, -ST_RANGE (bad request or
 * argument, message names the request index), -ST_NOMEM. */
int kv_simulate(const struct kv_req *r, size_t n, int64_t max_len, int64_t block_size,
                struct kv_workload *w, struct diag *d);

/* kv_concurrency() : requests the budget sustains on average under the
 * policy: the token slots in budget (whole blocks for paged) divided by the
 * slots one running request holds on average; 0 when none fit. */
int64_t kv_concurrency(const struct kv_workload *w, enum kv_policy p, int64_t budget,
                       int64_t bytes_per_token);

/* ---- seeded length distributions ---- */

enum kv_dist {
    KV_DIST_FIXED,       /* every length = mean */
    KV_DIST_UNIFORM,     /* integers in [1, 2 * mean - 1] */
    KV_DIST_GEOMETRIC,   /* geometric on 1, 2, ... ("exponential") */
    KV_DIST_LOGNORMAL,   /* exp(N(mu, shape^2)) with mu set for the mean */
    KV_DIST_ZIPF,        /* discrete Pareto, tail exponent shape (> 1) */
    KV_DIST_COUNT
};

/* kv_dist_parse() : "fixed", "uniform", "geometric" or "exponential",
 * "lognormal", "zipf" or "pareto"; -1 if unknown. */
int kv_dist_parse(const char *s);
const char *kv_dist_name(enum kv_dist k);


/* kv_dist_sample() : one length >= 1 (not yet clipped) with the given mean
 * (>= 1) and shape (lognormal sigma, zipf tail exponent; ignored by the
 * others); capped at KV_MAX_LEN. */
int64_t kv_dist_sample(enum kv_dist k, double mean, double shape, struct rng *r);

/* kv_workload_generate() : n requests, prompt and output lengths drawn
 * independently (prompt first) with means mean_prompt and mean_output, then
 * clipped so that prompt <= max_len - 1 and prompt + output <= max_len.
 * *clipped (may be NULL) counts the requests clipping changed.  max_len >= 2. */
void kv_workload_generate(enum kv_dist k, double mean_prompt, double mean_output, double shape,
                          int64_t max_len, uint64_t seed, struct kv_req *out, size_t n,
                          size_t *clipped);

#endif
