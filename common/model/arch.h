/*
 * arch.h - the architecture table: everything llmkit knows about a model
 * architecture, in one place, and the one reader of hyperparameters.
 *
 * For each architecture (general.architecture, which is also the prefix of
 * its GGUF keys) the table gives
 *   - the layer recipe that runs it (ARCH_RECIPE_NONE: known, not runnable);
 *   - which hyperparameter keys a GGUF must have (llama.cpp's loader refuses
 *     it without them) and which a config.json must have;
 *   - its tensors: GGUF names, the Hugging Face names they are converted
 *     from, shapes in hyperparameter terms, which are required, and which
 *     rows the converter permutes (llama-style HF checkpoints store Q and K
 *     in rotate-half order, GGUF in interleaved pairs);
 *   - the Hugging Face classes (architectures[0], model_type) it is
 *     converted from, with transformers' defaults;
 *   - defaults that are properties of the family (the sliding-window
 *     pattern of gemma2/gemma3).
 * The hyperparameter keys themselves (arch_keys[]) are shared by every
 * architecture, as llama.cpp's LLM_KV names are: "<arch>." + a suffix in
 * GGUF, and the config.json spellings of the same quantity.
 *
 * Adding an architecture is one entry in arch.c (plus its layer recipe, and
 * a key in arch_keys[] for a hyperparameter no architecture had before).
 *
 * Reading.  arch_read_hparams() (GGUF) and arch_read_config() (config.json)
 * fill one struct arch_hparams: each key's value, whether it was given, how
 * the file spells it, and (GGUF) whether it was stored in the type llama.cpp
 * reads.  They read the keys the architecture's loader reads, or, for
 * KV-cache accounting (ARCH_READ_KV), the attention geometry of any model,
 * known to the table or not; they refuse only values that are malformed (a
 * string where a count belongs, a per-layer array of the wrong length).
 * arch_check_hparams() then applies the table's rules to a model of a known
 * architecture: required keys, valid ranges, and the defaults llama.cpp
 * (GGUF) or transformers (config.json) would use; arch_check_types() adds
 * llama.cpp's exact key types.  model.c reads and checks both; hf_config.c
 * reads and checks (any integer type converts); kvstat reads only and
 * derives what it needs in kvmodel.c (kv_model_from_hparams).  What a
 * consumer cannot handle (per-layer head counts, partial rotary, MoE) it
 * refuses itself.
 *
 * Messages name the key as the file spells it: "missing key
 * 'llama.block_count'", "'hidden_size' is missing"; callers prefix the file.
 */
#ifndef LLMKIT_ARCH_H
#define LLMKIT_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gguf.h"
#include "status.h"

/* Bounds of the table's ranges (a model outside them is refused as corrupt;
 * they also keep every product of two or three dimensions far from int64
 * overflow). */
#define ARCH_MAX_LAYERS 4096
#define ARCH_MAX_DIM ((int64_t)1 << 20)       /* n_embd, n_ff, heads, head sizes */
#define ARCH_MAX_VOCAB ((int64_t)1 << 24)

/* Which layer recipe runs an architecture (the recipes live with the
 * forward pass). */
enum arch_recipe {
    ARCH_RECIPE_NONE = 0,       /* known to the table, not runnable (yet) */
    ARCH_RECIPE_LLAMA = 1,      /* RMSNorm, RoPE, GQA/MQA, SwiGLU, optional q/k/v/o biases,
                                 * optional per-head QK RMSNorm (llama, qwen2, qwen3) */
    ARCH_RECIPE_GEMMA3 = 2,     /* scaled embeddings, pre/post norms, QK norm, NeoX RoPE, local
                                 * (sliding window) and global layers, GeGLU */
    ARCH_RECIPE_DEEPSEEK2 = 3,  /* MLA in the absorbed form (latent KV cache), optional
                                 * low-rank queries, dense SwiGLU layers */
};

/* The table's architectures.  Values are stable (model.h's MODEL_ARCH_LLAMA
 * is ARCH_ID_LLAMA). */
enum arch_id {
    ARCH_ID_NONE = 0,           /* not in the table */
    ARCH_ID_LLAMA = 1,
    ARCH_ID_QWEN2,
    ARCH_ID_GEMMA2,
    ARCH_ID_GEMMA3,
    ARCH_ID_QWEN3,
    ARCH_ID_DEEPSEEK2,
};

/* ---- hyperparameters ---- */

/* One per quantity; arch_keys[id] says how it is stored. */
enum arch_hp {
    ARCH_HP_BLOCK_COUNT,        /* n_layer */
    ARCH_HP_CONTEXT_LENGTH,     /* n_ctx_train */
    ARCH_HP_EMBEDDING_LENGTH,   /* n_embd */
    ARCH_HP_FEED_FORWARD_LENGTH,/* n_ff (per layer) */
    ARCH_HP_HEAD_COUNT,         /* n_head (per layer) */
    ARCH_HP_HEAD_COUNT_KV,      /* n_head_kv (per layer) */
    ARCH_HP_KEY_LENGTH,         /* head_dim */
    ARCH_HP_VALUE_LENGTH,       /* head_dim_v */
    ARCH_HP_RMS_EPS,            /* rms_eps */
    ARCH_HP_ROPE_DIM,           /* n_rot (MLA: the decoupled RoPE key) */
    ARCH_HP_ROPE_FREQ_BASE,     /* rope_freq_base */
    ARCH_HP_ROPE_FREQ_BASE_SWA, /* rope_freq_base_swa (sliding-window layers) */
    ARCH_HP_ROPE_SCALING_TYPE,  /* rope_scaling */
    ARCH_HP_ROPE_SCALING_FACTOR,/* rope_factor */
    ARCH_HP_ROPE_SCALE_LINEAR,  /* rope_scale_linear (the older key) */
    ARCH_HP_ROPE_ORIG_CTX,      /* rope_orig_ctx */
    ARCH_HP_YARN_EXT_FACTOR,    /* yarn_ext_factor */
    ARCH_HP_YARN_ATTN_FACTOR,   /* yarn_attn_factor */
    ARCH_HP_YARN_BETA_FAST,     /* yarn_beta_fast */
    ARCH_HP_YARN_BETA_SLOW,     /* yarn_beta_slow */
    ARCH_HP_VOCAB_SIZE,         /* n_vocab */
    ARCH_HP_EXPERT_COUNT,       /* n_expert */
    ARCH_HP_KV_LORA_RANK,       /* kv_lora_rank (MLA) */
    ARCH_HP_Q_LORA_RANK,        /* q_lora_rank (MLA) */
    ARCH_HP_KEY_LENGTH_MLA,     /* head_dim_mla: per-head K size before absorption */
    ARCH_HP_VALUE_LENGTH_MLA,   /* head_dim_v_mla: per-head V size */
    ARCH_HP_QK_NOPE_DIM,        /* qk_nope_dim (config.json only) */
    ARCH_HP_SLIDING_WINDOW,     /* sliding_window (tokens; 0 = none) */
    ARCH_HP_SWA_PATTERN,        /* swa_period / per-layer mask, see n_swa_layers */
    ARCH_HP_LEADING_DENSE,      /* n_layer_dense_lead (deepseek2: the layers before the MoE ones) */
    ARCH_HP_EXPERT_SHARED,      /* n_expert_shared */
    ARCH_HP_EXPERT_FF,          /* n_ff_exp */
    ARCH_HP_YARN_LOG_MUL,       /* rope_yarn_log_mul (deepseek2: 0.1 * mscale_all_dim) */
    ARCH_HP_FINAL_SOFTCAP,      /* final_softcap (gemma3; config.json: hf_config.c) */
    ARCH_HP_COUNT
};

#define ARCH_BIT(id) ((uint64_t)1 << (id))

enum arch_ktype {
    ARCH_KT_U32,                /* GGUF UINT32; a JSON integer */
    ARCH_KT_F32,                /* GGUF FLOAT32; a JSON number */
    ARCH_KT_STR,                /* GGUF STRING */
    ARCH_KT_PATTERN,            /* UINT32 period or BOOL[n_layer] mask; read leniently */
};

enum {
    ARCH_K_PER_LAYER = 1,       /* GGUF may hold an array of n_layer values */
    ARCH_K_KV = 2,              /* part of the KV cache's geometry (read with ARCH_READ_KV) */
};

/* A config.json spelling of a hyperparameter. */
struct arch_hf_name {
    const char *name;
    unsigned char only;         /* 0, or read only with ARCH_READ_KV (ARCH_HF_KV: other
                                 * families' spellings) or without (ARCH_HF_CONVERT:
                                 * llama.cpp's converter's) */
};

enum {
    ARCH_HF_KV = 1,
    ARCH_HF_CONVERT = 2,
};

struct arch_key {
    const char *gguf;           /* after "<arch>."; NULL: no GGUF key */
    enum arch_ktype type;
    unsigned flags;             /* ARCH_K_* */
    double lo, hi;              /* valid range (arch_check_hparams) */
    const struct arch_hf_name *hf;  /* config.json spellings, the usual first, in the order
                                     * they are looked for; NULL-name-terminated, or NULL */
    size_t off;                 /* of the field in struct arch_hparams */
};

/* arch_keys[ARCH_HP_COUNT], indexed by enum arch_hp. */
extern const struct arch_key arch_keys[];

/* ---- tensors ---- */

/* A tensor dimension in hyperparameter terms (arch_dim()). */
enum arch_dim {
    ARCH_DIM_1,                 /* a vector: rows = 1 */
    ARCH_DIM_EMBD,              /* n_embd */
    ARCH_DIM_VOCAB,             /* n_vocab */
    ARCH_DIM_FF,                /* n_ff */
    ARCH_DIM_Q,                 /* n_head * head_dim */
    ARCH_DIM_K,                 /* n_head_kv * head_dim */
    ARCH_DIM_V,                 /* n_head_kv * head_dim_v */
    ARCH_DIM_O,                 /* n_head * head_dim_v */
    ARCH_DIM_ROT_HALF,          /* n_rot / 2 */
    ARCH_DIM_HEAD,              /* head_dim (per-head norms: qwen3, gemma3) */
    /* MLA (deepseek2) */
    ARCH_DIM_Q_LORA,            /* q_lora_rank */
    ARCH_DIM_KV_LORA,           /* kv_lora_rank */
    ARCH_DIM_KV_A,              /* kv_lora_rank + n_rot: the latent and the RoPE key */
    ARCH_DIM_Q_MLA,             /* n_head * head_dim_mla */
    ARCH_DIM_O_MLA,             /* n_head * head_dim_v_mla */
    ARCH_DIM_K_B,               /* n_head * kv_lora_rank (per head: kv_lora_rank rows) */
    ARCH_DIM_V_B,               /* n_head * head_dim_v_mla (per head: head_dim_v_mla rows) */
    ARCH_DIM_QK_NOPE,           /* head_dim_mla - n_rot */
};

/* What a tensor is, for the code that holds it (model.c's struct model_layer). */
enum arch_weight {
    ARCH_W_TOKEN_EMBD,
    ARCH_W_OUTPUT_NORM,
    ARCH_W_OUTPUT,
    ARCH_W_ROPE_FREQS,
    ARCH_W_ATTN_NORM,
    ARCH_W_ATTN_Q,
    ARCH_W_ATTN_K,
    ARCH_W_ATTN_V,
    ARCH_W_ATTN_OUT,
    ARCH_W_ATTN_Q_BIAS,
    ARCH_W_ATTN_K_BIAS,
    ARCH_W_ATTN_V_BIAS,
    ARCH_W_ATTN_OUT_BIAS,
    ARCH_W_FFN_NORM,
    ARCH_W_FFN_GATE,
    ARCH_W_FFN_UP,
    ARCH_W_FFN_DOWN,
    ARCH_W_FFN_GATE_BIAS,
    ARCH_W_FFN_UP_BIAS,
    ARCH_W_FFN_DOWN_BIAS,
    ARCH_W_ATTN_Q_NORM,         /* RMSNorm of each query head (qwen3, gemma3) */
    ARCH_W_ATTN_K_NORM,
    ARCH_W_ATTN_POST_NORM,      /* after attention, before the residual add (gemma) */
    ARCH_W_FFN_POST_NORM,
    ARCH_W_ATTN_Q_A,            /* MLA: low-rank query, down */
    ARCH_W_ATTN_Q_A_NORM,
    ARCH_W_ATTN_Q_B,            /* ... and up */
    ARCH_W_ATTN_KV_A_MQA,       /* the latent and the RoPE key */
    ARCH_W_ATTN_KV_A_NORM,
    ARCH_W_ATTN_K_B,            /* per head: the latent -> the non-RoPE key (absorbed into q) */
    ARCH_W_ATTN_V_B,            /* per head: the latent -> the value */
};

enum {
    ARCH_T_LAYER = 1,           /* one per layer: "blk.N." + gguf, "model.layers.N." + hf */
    ARCH_T_MATRIX = 2,          /* a matmul weight (any compute type), else an F32 vector */
    ARCH_T_REQUIRED = 4,        /* the model cannot run without it */
    ARCH_T_PERM_Q = 8,          /* HF rows permuted with n_head heads (hf_permute_qk) */
    ARCH_T_PERM_K = 16,         /* HF rows permuted with n_head_kv heads */
    ARCH_T_HEADS = 32,          /* one matrix per head, stacked: GGUF ne = {cols, rows /
                                 * n_head, n_head} (2-D {cols, rows} accepted too) */
};

struct arch_tensor {
    enum arch_weight w;
    const char *gguf;           /* "token_embd.weight"; a layer tensor's part after "blk.N." */
    const char *hf;             /* "model.embed_tokens.weight"; a layer tensor's part after
                                 * "model.layers.N."; NULL: no HF tensor (rope_freqs) */
    enum arch_dim rows, cols;   /* [rows, cols]: GGUF ne = {cols, rows} */
    unsigned flags;             /* ARCH_T_* */
};

/* ---- architectures ---- */

enum {
    ARCH_F_CONVERT = 1,         /* HF checkpoint <-> GGUF (hf_config.c) */
};

struct arch {
    enum arch_id id;
    const char *name;           /* general.architecture and key prefix */
    enum arch_recipe recipe;
    unsigned flags;             /* ARCH_F_* */
    uint64_t keys;              /* ARCH_BIT()s of the keys its loader reads */
    uint64_t gguf_required;     /* ... that a GGUF must have */
    uint64_t hf_required;       /* ... and a config.json (converting) */
    int64_t swa_period;         /* sliding window: every swa_period-th layer is global when
                                 * the file says nothing (0: every layer uses the window) */
    bool hf_permute_qk;         /* HF Q/K rows are rotate-half (ARCH_T_PERM_*) */
    bool hf_attn_bias;          /* q/k/v biases by default (config attention_bias otherwise) */
    const struct arch_tensor *tensors;  /* NULL-name-terminated; NULL: none known */
    bool rope_neox;             /* RoPE rotates the halves of a head (llama.cpp's
                                 * LLAMA_ROPE_TYPE_NEOX), else adjacent pairs */
};

/* A Hugging Face class converted to (or known as) a table architecture. */
struct arch_hf {
    const char *hf_class;       /* architectures[0] */
    const char *model_type;     /* its model_type; NULL: matched by class only */
    enum arch_id arch;
    int64_t default_ctx;        /* transformers' max_position_embeddings default (0: none) */
};

/* arch_find() : the table's entry for a GGUF architecture name, or NULL. */
const struct arch *arch_find(const char *name);

/* arch_get() : the entry of id, or NULL. */
const struct arch *arch_get(enum arch_id id);

/* arch_find_hf() : the HF class entry for architectures[0] (first, when not
 * NULL) or else model_type; NULL when the table knows neither. */
const struct arch_hf *arch_find_hf(const char *hf_class, const char *model_type);

/* arch_hf_of() : the first HF class entry of an architecture (the one
 * written to config.json), or NULL. */
const struct arch_hf *arch_hf_of(enum arch_id id);

/* ---- the hyperparameters of one model ---- */

enum arch_src {
    ARCH_SRC_GGUF,
    ARCH_SRC_CONFIG,
};

/*
 * Filled by the readers; value fields are 0 (NULL) for keys not given until
 * arch_check_hparams() applies defaults.  Strings and kv are borrowed from
 * the gguf or JSON read, and valid as long as it is.
 */
struct arch_hparams {
    const struct arch *arch;    /* the table's entry, or NULL */
    const char *name;           /* GGUF: general.architecture; config: the entry's name, else
                                 * model_type, else architectures[0]; "" if none */
    enum arch_src src;
    /* config.json only */
    const char *hf_class;       /* architectures[0], or NULL */
    const char *model_type;     /* text_config's model_type, else the top level's, or NULL */
    const struct arch_hf *hf;   /* arch_find_hf(hf_class, model_type) */
    const json_t *layer_types;  /* the layer_types array, or NULL */

    uint64_t has;               /* ARCH_BIT(id): given in the file */
    uint64_t loose;             /* GGUF: given in another type than llama.cpp reads */
    uint64_t varies;            /* GGUF: a per-layer array whose values differ */
    const char *key[ARCH_HP_COUNT];             /* as the file spells it (when given) */
    const struct gguf_kv *kv[ARCH_HP_COUNT];    /* GGUF: the record read */

    int64_t n_layer;
    int64_t n_ctx_train;
    int64_t n_embd;
    int64_t n_ff;               /* per-layer arrays: the largest value */
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;
    int64_t head_dim_v;
    int64_t n_rot;
    int64_t n_vocab;
    int64_t n_expert;
    int64_t kv_lora_rank;
    int64_t q_lora_rank;
    int64_t head_dim_mla;
    int64_t head_dim_v_mla;
    int64_t qk_nope_dim;
    int64_t n_layer_dense_lead;
    int64_t n_expert_shared;
    int64_t n_ff_exp;
    int64_t sliding_window;
    int64_t swa_period;         /* ARCH_HP_SWA_PATTERN as a period (0: a mask, or none) */
    int64_t n_swa_layers;       /* layers using the window (0 without one): the file's mask or
                                 * period, else the architecture's, else all */
    int64_t rope_orig_ctx;
    double rms_eps;
    double rope_freq_base;
    double rope_freq_base_swa;
    double final_softcap;       /* final logits = c tanh(logits / c) (0: none) */
    double rope_factor;
    double rope_scale_linear;
    double yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow, yarn_log_mul;
    const char *rope_scaling;   /* "none", "linear", "yarn", "longrope"; NULL = not given */
};

#define arch_has(hp, id) (((hp)->has & ARCH_BIT(id)) != 0)

enum {
    /* For KV-cache accounting of any model (kvstat): the keys marked
     * ARCH_K_KV are read, whatever the architecture, and no others, so a
     * model whose other keys are odd is still accounted for.  config.json:
     * counts need only be non-negative integers ("'x' is not a non-negative
     * integer"), a malformed architectures list is ignored, converter-only
     * spellings are not read.  Without it (running, converting) the keys the
     * architecture's loader reads are read, and a config.json count must be
     * an integer ("'x' is not an integer"); the ranges are
     * arch_check_hparams()'s. */
    ARCH_READ_KV = 1,
};

/* arch_read_hparams() : reads general.architecture (required, a string) and
 * the keys of arch_keys[] under its prefix that the architecture's loader
 * reads (none for an architecture the table does not know: whoever runs or
 * converts it refuses it), or with ARCH_READ_KV those of the KV geometry.
 * Integers may be stored in any integer type and floats as FLOAT32 or
 * FLOAT64 (noted in hp->loose when llama.cpp reads another); per-layer keys
 * may be arrays of block_count integers (the largest is kept, hp->varies
 * says whether they differ).  0, or -ST_FORMAT naming the key: a missing or
 * non-string architecture, a value of the wrong kind, an array of the wrong
 * length or with a negative or non-integer element, a non-finite float. */
int arch_read_hparams(const struct gguf *g, unsigned flags, struct arch_hparams *hp,
                      struct diag *d);

/* arch_read_config() : the same from a parsed config.json (borrowed):
 * architectures[0], model_type, the keys with a config.json spelling (the
 * first spelling present wins) and the sliding window (use_sliding_window,
 * layer_types, sliding_window_pattern); with ARCH_READ_KV from the language
 * model's part of a multimodal config (text_config), and falcon/starcoder's
 * multi_query as one K/V head.  Messages are not prefixed with the file
 * name.  0 or -ST_FORMAT. */
int arch_read_config(const json_t *root, unsigned flags, struct arch_hparams *hp,
                     struct diag *d);

/* arch_check_types() : llama.cpp's exact GGUF key types (UINT32, FLOAT32;
 * arrays of UINT32 or INT32), which its loader insists on: -ST_FORMAT
 * "key 'llama.block_count': wrong type u64, expected uint32" when hp->loose
 * names a key, else 0. */
int arch_check_types(const struct arch_hparams *hp, struct diag *d);

/* arch_check_hparams() : the table's rules for a model of hp->arch (which
 * must be set): the required keys, valid ranges, head counts that divide,
 * then the defaults (llama.cpp's for GGUF,
 * transformers' for config.json): n_head_kv = n_head, head_dim =
 * n_embd / n_head, head_dim_v (GGUF: n_embd / n_head; config: head_dim),
 * n_rot = head_dim, rope_freq_base = 10000, rope_factor from
 * rope.scale_linear; config.json also n_ctx_train = the class default and
 * rms_eps = 1e-6.  Refuses an unknown rope.scaling.type.  0 or -ST_FORMAT. */
int arch_check_hparams(struct arch_hparams *hp, struct diag *d);

/* arch_hp_key() : the name of key id as hp's file spells it: the GGUF key
 * ("llama.block_count") or the config.json member found (else its usual
 * spelling).  buf is used when the name must be built. */
const char *arch_hp_key(const struct arch_hparams *hp, enum arch_hp id, char *buf, size_t n);

/* arch_hp_layer() : per-layer key id's value in layer il (GGUF arrays), else
 * its single value. */
int64_t arch_hp_layer(const struct arch_hparams *hp, enum arch_hp id, int64_t il);

/* arch_swa_layer() : whether layer il uses the sliding window: the file's
 * mask (GGUF BOOL array, config layer_types), else its period, else the
 * family's (llama.cpp's set_swa_pattern: the last of each group of p layers
 * is global), else every layer; false without a window. */
bool arch_swa_layer(const struct arch_hparams *hp, int64_t il);

/* arch_dim() : the value of a tensor dimension for hp (after the check). */
int64_t arch_dim(const struct arch_hparams *hp, enum arch_dim dim);

#endif
