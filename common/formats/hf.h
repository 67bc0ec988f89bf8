/*
 * hf.h - the Hugging Face side of conversion for the llama family:
 * config.json <-> GGUF hyperparameters, tokenizer.json / tokenizer_config.json
 * / tokenizer.model (SentencePiece) <-> tokenizer.* metadata, tensor names
 * and the Q/K row permutation.  Follows llama.cpp's convert_hf_to_gguf.py
 * (TextModel, LlamaModel, Qwen2Model and their vocabulary code, with gguf-py's
 * tensor_mapping.py and SpecialVocab) and what llama.cpp's loader reads; the
 * deliberate differences are listed below.
 *
 * Supported architectures: those of the architecture table (arch.h) marked
 * ARCH_F_CONVERT, whose hyperparameter keys, config.json spellings, tensor
 * names and Q/K permutation come from the table: LlamaForCausalLM,
 * MistralForCausalLM (GGUF arch "llama", Q/K permuted), Qwen2ForCausalLM
 * (arch "qwen2": q/k/v biases, NeoX rope, no permutation), Qwen3ForCausalLM
 * and Gemma3ForCausalLM (arch "gemma3", Gemma3Model in llama.cpp's
 * conversion/gemma.py: every "*norm.weight" stored as 1 + w, through
 * hf_tensor_map.shift; embedding rows past the vocabulary dropped;
 * sliding_window, rope_local_base_freq -> rope.freq_base_swa, final logit
 * softcap; transformers' Gemma3TextConfig defaults; only a SentencePiece
 * tokenizer.model, add_space_prefix false).  Multimodal
 * Gemma3ForConditionalGeneration configs are refused, and everything else
 * with -ST_FORMAT "config.json: unsupported architecture '...'".
 *
 * SentencePiece types follow _create_vocab_sentencepiece: a USER_DEFINED
 * piece of tokenizer.model reads as NORMAL (user tokens come from
 * added_tokens.json / added_tokens_decoder) unless the llmkit marker says
 * the file is our own export, whose types are the GGUF's.  The exported
 * tokenizer.model always has one UNKNOWN piece (SentencePiece will not load
 * one without): the unk id's, even where the GGUF types it CONTROL as
 * llama.cpp's converter does for Gemma (the marker keeps CONTROL).
 *
 * HF -> GGUF, in the converter's key order (TextModel.set_gguf_parameters):
 *     hf_config_load(&cfg, "dir/config.json", &d);
 *     gguf_init(&g);
 *     gguf_set_str(&g, "general.architecture", cfg.arch_name);  // optional:
 *     gguf_set_str(&g, "general.name", ...);   // other general.* keys first
 *     hf_config_to_gguf(&g, &cfg, file_type, &d);
 *     hf_vocab_load(&v, "dir", &cfg, &d);
 *     hf_vocab_to_gguf(&g, &v, &d);
 *     per tensor: hf_name_to_gguf(), hf_tensor_force_f32(), hf_permute_rows()
 *     llama3 rope: if (cfg.rope.type == HF_ROPE_LLAMA3) hf_rope_freqs() gives
 *     the data of the extra F32 tensor "rope_freqs.weight" [head_dim/2].
 *
 * GGUF -> HF:
 *     hf_config_from_gguf(&cfg, &g, &d);   hf_vocab_from_gguf(&v, &g, &d);
 *     hf_write_dir(tmpdir, &cfg, &v, "float16", &d);  (+ safetensors, by the caller)
 *     per tensor: hf_name_from_gguf(), hf_unpermute_rows().
 *
 * Round trip.  GGUF -> HF dir -> GGUF gives the same tokenizer.* keys and
 * values and the same {arch}.* hyperparameters.  What standard HF files cannot
 * carry is put in tokenizer_config.json under "llmkit_gguf" (ignored by HF
 * libraries): the exact tokenizer.ggml.pre name when several llama.cpp names
 * share one HF pre-tokenizer (smollm/starcoder, gpt-2/mpt, ...), token types
 * that the HF layout cannot express (e.g. UNUSED or BYTE tokens in a gpt2
 * vocabulary), gpt2 scores, and scalar tokenizer.* keys with no HF home
 * (eot/fim ids, add_sep_token, ...).  When that object is present the import
 * also skips the converter's heuristics that would re-type added tokens
 * (does_token_look_special, U+2581 -> space in user-defined tokens).  SPM
 * vocabularies are written both as tokenizer.model (exact pieces, scores and
 * types) and as a BPE tokenizer.json with byte fallback (LlamaHfVocab
 * layout, merges derived from the pieces like transformers'
 * SentencePieceExtractor), so HF loads them either way.
 *
 * tokenizer.ggml.pre: llama.cpp's converter hashes a tokenization, which we
 * cannot run.  We compare the tokenizer.json pre_tokenizer (after flattening
 * Sequences; ByteLevel trim_offsets ignored; "(?i:'s|'t|...)" and its
 * "(?:'[sS]|...)" spelling treated as equal) with the HF pre_tokenizers of
 * the pre-tokenizer table (tok_pre.h): gpt-2, llama-bpe, qwen2, smollm (=
 * starcoder, refact, command-r ...), deepseek-coder, falcon and default.
 * No match: pre = "default", v->pre_guessed = true and v->warning says so
 * (the tool should print it: llama.cpp will tokenize with its generic
 * regexes).
 *
 * Other differences from convert_hf_to_gguf.py: no encode/decode round trip of
 * normalized added tokens (no HF tokenizer at hand); the CodeLlama (vocab
 * 32016) FIM ids are not added; eos_token_id given as a list is ignored like
 * the converter does; {arch}.rope.freq_base is written only when config.json
 * gives rope_theta (the converter sees transformers' default 10000 and always
 * writes it; llama.cpp's default is the same value).
 *
 * Checked outside the unit tests: tokenizer.json files exported from the
 * llama.cpp vocab GGUFs (gpt-2, llama-spm, deepseek-coder, falcon, starcoder,
 * phi-3) reproduce all 46 llama.cpp test vectors each with HF tokenizers, and
 * the exported tokenizer.model files do with sentencepiece.
 *
 * Every count read from a file is bounded (HF_MAX_VOCAB tokens/merges,
 * HF_MAX_TOKEN_BYTES per token); malformed or ill-typed input gives
 * -ST_FORMAT with a message naming the file and key, e.g.
 * "config.json: 'num_attention_heads' is not an integer".
 */
#ifndef LLMKIT_HF_H
#define LLMKIT_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "arch.h"
#include "gguf.h"
#include "status.h"

#define HF_MAX_VOCAB ARCH_MAX_VOCAB           /* tokens, merges, pieces */
#define HF_MAX_TOKEN_BYTES ((uint32_t)1 << 16) /* one token or merge string */
#define HF_MAX_LAYERS ARCH_MAX_LAYERS
#define HF_MAX_DIM ARCH_MAX_DIM               /* n_embd, n_ff, head_dim, heads */

/* GGUF token types (tokenizer.ggml.token_type; llama.h llama_token_type,
 * gguf-py TokenType). */
enum hf_token_type {
    HF_TOK_UNDEFINED = 0,
    HF_TOK_NORMAL = 1,
    HF_TOK_UNKNOWN = 2,
    HF_TOK_CONTROL = 3,
    HF_TOK_USER_DEFINED = 4,
    HF_TOK_UNUSED = 5,
    HF_TOK_BYTE = 6,
};

/* Special tokens, in the order the converter writes their ids. */
enum hf_special {
    HF_SPECIAL_BOS,   /* tokenizer.ggml.bos_token_id       <- bos_token / bos_token_id */
    HF_SPECIAL_EOS,   /* tokenizer.ggml.eos_token_id */
    HF_SPECIAL_UNK,   /* tokenizer.ggml.unknown_token_id */
    HF_SPECIAL_SEP,   /* tokenizer.ggml.seperator_token_id (sic) */
    HF_SPECIAL_PAD,   /* tokenizer.ggml.padding_token_id */
    HF_SPECIAL_CLS,   /* tokenizer.ggml.cls_token_id */
    HF_SPECIAL_MASK,  /* tokenizer.ggml.mask_token_id */
    HF_SPECIAL_COUNT,
};

/* hf_special_name() : "bos", "eos", "unk", "sep", "pad", "cls", "mask". */
const char *hf_special_name(enum hf_special s);
/* hf_special_key() : the GGUF key of a special token id. */
const char *hf_special_key(enum hf_special s);

/* ==== config.json <-> hyperparameters (hf_config.c) ==== */

enum hf_arch {
    HF_ARCH_LLAMA = 0,   /* LlamaForCausalLM, MistralForCausalLM */
    HF_ARCH_QWEN2 = 1,   /* Qwen2ForCausalLM */
    HF_ARCH_QWEN3 = 2,   /* Qwen3ForCausalLM */
    HF_ARCH_GEMMA3 = 3,  /* Gemma3ForCausalLM (text only) */
};

enum hf_rope_type {
    HF_ROPE_NONE = 0,    /* no rope_scaling (or rope_type "default") */
    HF_ROPE_LINEAR,      /* {arch}.rope.scaling.type "linear" + factor */
    HF_ROPE_YARN,        /* "yarn" + factor + original context (+ extras) */
    HF_ROPE_LLAMA3,      /* no KV: the rope_freqs.weight tensor (hf_rope_freqs) */
};

struct hf_rope {
    enum hf_rope_type type;
    double factor;              /* linear, yarn, llama3 (llama3 default 8) */
    int64_t orig_ctx;           /* yarn, llama3 original_max_position_embeddings (0 = absent) */
    double low_freq_factor;     /* llama3 (default 1) */
    double high_freq_factor;    /* llama3 (default 4) */
    /* yarn extras; NAN when absent (not written) */
    double yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
};

/* The hyperparameters the converter needs, in HF terms.  Counts are checked
 * (> 0, fit in u32, within the HF_MAX_* bounds, heads divide evenly). */
struct hf_config {
    enum hf_arch arch;
    const char *arch_name;      /* GGUF architecture: "llama", "qwen2" or "qwen3" (static string) */
    char hf_arch[64];           /* architectures[0] ("LlamaForCausalLM" ...) */
    int64_t n_vocab;            /* vocab_size; 0 when absent */
    int64_t n_ctx;              /* max_position_embeddings (or an alias); 0 when absent */
    int64_t n_embd;             /* hidden_size */
    int64_t n_layer;            /* num_hidden_layers */
    int64_t n_ff;               /* intermediate_size */
    int64_t n_head;             /* num_attention_heads */
    int64_t n_head_kv;          /* num_key_value_heads (default n_head) */
    int64_t head_dim;           /* head_dim if given, else n_embd / n_head; even */
    bool has_head_dim;          /* head_dim was given: key_length/value_length written */
    bool has_n_head_kv;         /* num_key_value_heads was given */
    double rope_theta;          /* rope_theta (10000 when absent) */
    bool has_rope_theta;        /* rope_theta given: {arch}.rope.freq_base written */
    double rms_eps;             /* rms_norm_eps (1e-6 when absent, as LlamaConfig) */
    bool tie_word_embeddings;   /* informational; output.weight presence decides */
    bool attn_bias;             /* q/k/v have biases (qwen2, or llama attention_bias) */
    bool permute_qk;            /* HF q/k rows need hf_permute_rows (arch llama) */
    struct hf_rope rope;
    int64_t special[HF_SPECIAL_COUNT];  /* <typ>_token_id; -1 when absent/not an int */
    char torch_dtype[16];       /* as read; "" when absent */
    /* gemma3 (Gemma3Model.set_gguf_parameters) */
    int64_t sliding_window;     /* attention.sliding_window; 0 = not written (pattern 1) */
    double rope_theta_swa;      /* rope_local_base_freq -> rope.freq_base_swa */
    bool has_rope_theta_swa;
    double final_logit_softcap; /* final_logit_softcapping; 0 = none */
    uint64_t swa_mask[HF_MAX_LAYERS / 64];  /* layers that use the window (config.json
                                             * layer_types; GGUF: every 6th global) */
    bool rope_freqs_pending;    /* from_gguf: rope_freqs.weight exists but its data was
                                   not mapped: call hf_config_match_rope_freqs() */
};

/* hf_config_parse() : parses config.json bytes into c.  Returns 0 or
 * -ST_FORMAT ("config.json: ..." in d). */
int hf_config_parse(struct hf_config *c, const char *buf, size_t len, struct diag *d);

/* hf_config_from_json() : the same from a parsed object (borrowed). */
int hf_config_from_json(struct hf_config *c, const json_t *root, struct diag *d);

/* hf_config_load() : reads and parses a config.json file.  -ST_IO when it
 * cannot be read. */
int hf_config_load(struct hf_config *c, const char *path, struct diag *d);

/* hf_config_to_gguf() : appends, in convert_hf_to_gguf.py's order
 * (TextModel.set_gguf_parameters, then LlamaModel.set_gguf_parameters):
 * general.architecture and general.type = "model" (kept in place when the
 * caller set them earlier, so general.name etc. can be set first), then
 * {arch}.block_count, context_length, embedding_length, feed_forward_length,
 * attention.head_count, attention.head_count_kv, rope.scaling.* (linear,
 * yarn), rope.freq_base, attention.layer_norm_rms_epsilon,
 * attention.key_length/value_length (when head_dim was given),
 * general.file_type (a llama_ftype), then for llama {arch}.vocab_size and
 * rope.dimension_count, then general.quantization_version = 2.  Counts are
 * UINT32, eps/theta/factors FLOAT32 (the exact types llama.cpp's
 * llama_model::load_hparams requires).  0 or -ST_NOMEM. */
int hf_config_to_gguf(struct gguf *g, const struct hf_config *c, uint32_t file_type,
                      struct diag *d);

/* hf_config_from_gguf() : the inverse: reads general.architecture ("llama"
 * "qwen2" or "qwen3") and the {arch}.* keys; n_vocab = number of tokens (else
 * token_embd.weight ne[1]); tie_word_embeddings = no output.weight tensor;
 * special ids from tokenizer.ggml.*_token_id.  A rope_freqs.weight tensor
 * (F32, readable through gguf_tensor_bytes) is matched against llama3
 * rope_scaling parameters.  -ST_FORMAT for a missing/ill-typed key or an
 * unsupported model (MoE, per-layer arrays that differ, rope dimension !=
 * head dim, value_length != key_length, unmatched rope_freqs). */
int hf_config_from_gguf(struct hf_config *c, struct gguf *g, struct diag *d);

/* hf_config_match_rope_freqs() : finds llama3 rope_scaling parameters
 * (factor = the last value; original context, low/high frequency factors
 * from the usual set) that reproduce the n = head_dim/2 values of a
 * rope_freqs.weight tensor to 1e-6 relative, and sets c->rope.  -ST_FORMAT
 * when none does. */
int hf_config_match_rope_freqs(struct hf_config *c, const float *freqs, int64_t n,
                               struct diag *d);

/* hf_config_to_json() : a config.json object (caller owns it): architectures
 * [LlamaForCausalLM|Qwen2ForCausalLM], model_type, the hyperparameters,
 * bos/eos/pad (and other) token ids, rope_scaling when set, rope_theta when
 * has_rope_theta, head_dim when has_head_dim, tie_word_embeddings,
 * torch_dtype (NULL = c->torch_dtype or "float32").  Floats are written with
 * the shortest decimal that reads back as the same float32. */
int hf_config_to_json(const struct hf_config *c, const char *torch_dtype, json_t **out,
                      struct diag *d);

/* hf_rope_freqs() : the llama3 rope factors (the rope_freqs.weight tensor):
 * for k < n = head_dim/2, freq = 1/theta^(2k/head_dim), wavelen = 2pi/freq,
 * factor 1 if wavelen < orig/high, rope.factor if wavelen > orig/low, else
 * the smooth blend (LlamaModel.generate_extra_tensors), in float32 like the
 * converter.
 * -ST_RANGE unless c->rope.type == HF_ROPE_LLAMA3 and n == head_dim/2. */
int hf_rope_freqs(const struct hf_config *c, float *out, int64_t n, struct diag *d);

/* hf_torch_dtype() : "float32", "float16", "bfloat16" for ggml types F32 (0),
 * F16 (1), BF16 (30); NULL otherwise. */
const char *hf_torch_dtype(uint32_t ggml_type);

/* ==== tensor names and the Q/K permutation (hf_config.c) ==== */

enum hf_perm {
    HF_PERM_NONE = 0,
    HF_PERM_Q,       /* permute rows with n_head heads */
    HF_PERM_K,       /* permute rows with n_head_kv heads */
};

struct hf_tensor_map {
    char name[96];          /* the name on the other side */
    int32_t layer;          /* block index, or -1 */
    enum hf_perm perm;      /* rows to (un)permute; NONE for arch qwen2 */
    int64_t perm_heads;     /* n_head or n_head_kv when perm != NONE, else 0 */
    float shift;            /* added to every value on the way (gemma3 RMSNorm weights:
                             * +1 HF -> GGUF, -1 GGUF -> HF), else 0 */
    bool matrix;            /* the shape the hyperparameters imply (arch.h's table): */
    int64_t rows, cols;     /* HF [rows, cols] (GGUF ne {cols, rows}) for a matrix, [cols]
                             * for a vector; <= 0 where they do not say (the
                             * vocabulary, when config.json has no vocab_size) */
};

/* hf_name_to_gguf() : maps an HF tensor name to its GGUF name (gguf-py
 * tensor_mapping.py), with the shape c implies for it.
 * Layer indices must be plain decimal (no sign, no leading zeros, < n_layer).
 * Returns 1 (mapped, m filled), 0 (a tensor the converter drops:
 * *.rotary_emb.inv_freq, *.attention.masked_bias, *.attention.bias), or
 * -ST_FORMAT "unknown tensor '...'" / "tensor '...': bad layer index". */
int hf_name_to_gguf(const struct hf_config *c, const char *hf_name, struct hf_tensor_map *m,
                    struct diag *d);

/* hf_name_from_gguf() : the inverse.  Returns 1 (mapped), 0 (no HF tensor:
 * rope_freqs.weight, carried by rope_scaling), or -ST_FORMAT. */
int hf_name_from_gguf(const struct hf_config *c, const char *gguf_name,
                      struct hf_tensor_map *m, struct diag *d);

/* hf_layer_tensors_required() : how many tensors every layer of an HF
 * checkpoint of c's architecture has (the table's required ones). */
int hf_layer_tensors_required(const struct hf_config *c);

/* hf_tensor_force_f32() : the converter keeps this GGUF tensor in F32
 * (ModelBase.prepare_tensors):
 * 1-D tensors, names ending in "_norm.weight", names not ending in ".weight"
 * (biases), rope_freqs.weight, ffn_gate_inp.weight. */
bool hf_tensor_force_f32(const char *gguf_name, uint32_t n_dims);

/* hf_permute_rows() : HF (rotate-half) -> GGUF (interleaved) order of the
 * n_rows rows of a q/k weight or bias: with D = n_rows / n_head,
 * dst row h*D + 2i + a = src row h*D + a*D/2 + i (LlamaModel.permute).
 * Rows are opaque (row_bytes each, any type).  dst and src must not overlap.
 * -ST_RANGE when n_head <= 0, n_rows % n_head != 0 or D is odd. */
int hf_permute_rows(void *dst, const void *src, int64_t n_rows, size_t row_bytes,
                    int64_t n_head);

/* hf_unpermute_rows() : the inverse (GGUF -> HF). */
int hf_unpermute_rows(void *dst, const void *src, int64_t n_rows, size_t row_bytes,
                      int64_t n_head);

/* ==== vocabulary (hf_vocab.c) ==== */

/* A scalar tokenizer.* key without an HF counterpart, kept for the round trip. */
struct hf_kv {
    char *key;
    enum gguf_type type;    /* UINT32, INT32, UINT64, FLOAT32, BOOL or STRING */
    union {
        uint64_t u;
        int64_t i;
        float f;
        bool b;
        char *s;
    } v;
};

/* The tokenizer.* metadata of a GGUF, in GGUF terms.  All arrays are owned. */
struct hf_vocab {
    char model[16];             /* tokenizer.ggml.model: "gpt2" or "llama" */
    char pre[64];               /* tokenizer.ggml.pre; "" = absent */
    bool pre_guessed;           /* no pre-tokenizer rule matched: pre = "default" */
    int64_t n_tokens;
    char **tokens;              /* n_tokens strings, NUL-terminated ... */
    uint32_t *token_len;        /* ... with these byte lengths (may hold NULs) */
    float *scores;              /* n_tokens, or NULL (no scores key) */
    int32_t *types;             /* n_tokens, or NULL (no token_type key) */
    int64_t n_merges;
    char **merges;              /* "left right" strings, or NULL when none */
    bool has_merges;            /* write tokenizer.ggml.merges (even if empty) */
    int64_t special[HF_SPECIAL_COUNT];  /* token ids; -1 = absent */
    int8_t add_bos, add_eos;    /* add_bos_token / add_eos_token: -1 absent, 0, 1 */
    int8_t add_space_prefix;    /* tokenizer.ggml.add_space_prefix: -1, 0, 1 */
    char *chat_template;        /* tokenizer.chat_template, or NULL */
    struct hf_kv *extra;        /* other scalar tokenizer.* keys, in order */
    int64_t n_extra;
    char warning[256];          /* a non-fatal note for the user, or "" */
};

/* hf_vocab_init() / hf_vocab_release() : caller-owned storage; release frees
 * what the vocab owns and re-initialises it. */
void hf_vocab_init(struct hf_vocab *v);
void hf_vocab_release(struct hf_vocab *v);

/* The files of an HF directory that carry the vocabulary, as buffers
 * (NULL/0 = absent).  Buffers are borrowed. */
struct hf_vocab_src {
    const char *tokenizer_json;       size_t tokenizer_json_len;
    const char *tokenizer_config;     size_t tokenizer_config_len;   /* tokenizer_config.json */
    const void *spm_model;            size_t spm_model_len;          /* tokenizer.model */
    const char *added_tokens_json;    size_t added_tokens_json_len;  /* added_tokens.json */
    const char *merges_txt;           size_t merges_txt_len;         /* merges.txt */
    const char *chat_template_jinja;  size_t chat_template_jinja_len;/* chat_template.jinja */
    int64_t n_vocab;                  /* config vocab_size, 0 = unknown */
    const int64_t *cfg_special;       /* config.json <typ>_token_id [HF_SPECIAL_COUNT], or NULL */
    enum hf_arch arch;                /* the model's; llama-only converter rules */
};

/* hf_vocab_from_mem() : builds the GGUF vocabulary from the files, trying in
 * order (LlamaModel.set_vocab): SentencePiece tokenizer.model -> model
 * "llama"; tokenizer.json BPE with byte_fallback -> model "llama" (scores
 * -1000); tokenizer.json BPE -> model "gpt2" with merges and a pre name.
 * Then special ids, add_bos/eos (post_processor, then tokenizer_config.json),
 * add_space_prefix (tokenizer_config add_prefix_space), vocab 49152 ->
 * add_bos false (arch llama), chat template (tokenizer_config, else
 * chat_template.jinja).  With the llmkit
 * marker the converter's heuristics are skipped (see above).  v must be
 * initialised; on failure it is released.  0, -ST_FORMAT, -ST_NOMEM. */
int hf_vocab_from_mem(struct hf_vocab *v, const struct hf_vocab_src *s, struct diag *d);

/* hf_vocab_load() : reads the files of dir and calls hf_vocab_from_mem
 * (c gives n_vocab and the config token ids; may be NULL).  -ST_FORMAT when
 * neither tokenizer.model nor tokenizer.json exists. */
int hf_vocab_load(struct hf_vocab *v, const char *dir, const struct hf_config *c,
                  struct diag *d);

/* hf_vocab_to_gguf() : appends the tokenizer keys in the converter's order:
 * model, pre, tokens, scores, token_type, merges, the special ids (bos, eos,
 * unk, sep, pad, cls, mask), add_bos_token, add_eos_token, add_space_prefix,
 * chat_template, then the extra keys.  0 or -ST_NOMEM. */
int hf_vocab_to_gguf(struct gguf *g, const struct hf_vocab *v, struct diag *d);

/* hf_vocab_from_gguf() : reads the tokenizer.* keys of g (model must be
 * "gpt2" or "llama"; tokens ARRAY[STRING], scores ARRAY[FLOAT32], token_type
 * ARRAY[INT32] of n_tokens; ids UINT32).  Other scalar tokenizer.* keys go
 * to v->extra; a tokenizer.* key of another type (array, u8, f64 ...) is not
 * carried and v->warning names the first one.  0, -ST_FORMAT, -ST_NOMEM. */
int hf_vocab_from_gguf(struct hf_vocab *v, const struct gguf *g, struct diag *d);

/* hf_vocab_to_json() : tokenizer.json and tokenizer_config.json objects
 * (caller owns both).  model_max_length <= 0 leaves it out.  -ST_RANGE when
 * a token cannot be written to JSON (invalid UTF-8, NUL, duplicate text). */
int hf_vocab_to_json(const struct hf_vocab *v, int64_t model_max_length, json_t **tokenizer,
                     json_t **tokenizer_config, struct diag *d);

/* hf_spm_write() : a SentencePiece ModelProto (tokenizer.model) with the
 * pieces, scores and types of an SPM ("llama") vocabulary; *out is malloc'd.
 * -ST_RANGE for a gpt2 vocabulary. */
int hf_spm_write(const struct hf_vocab *v, uint8_t **out, size_t *len, struct diag *d);

/* hf_pre_match() : the llama.cpp pre-tokenizer name for a tokenizer.json
 * "pre_tokenizer" value, or NULL when no rule matches.  When hint names a
 * pre-tokenizer with the same behaviour (or one this table does not know),
 * hint is returned instead of the family's default name. */
const char *hf_pre_match(const json_t *pre_tokenizer, const char *hint);

/* hf_pre_known() : whether hf_vocab_to_json() can write a pre_tokenizer
 * with the behaviour of this tokenizer.ggml.pre name (else it writes the
 * GPT-2 one and records the name in the llmkit marker; the tool should warn). */
bool hf_pre_known(const char *name);

/* hf_write_dir() : writes config.json, tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, generation_config.json and, for an SPM vocabulary,
 * tokenizer.model into the existing directory dir (each atomically, replacing
 * files of those names).  Tensors are the caller's. */
int hf_write_dir(const char *dir, const struct hf_config *c, const struct hf_vocab *v,
                 const char *torch_dtype, struct diag *d);

/* hf_json_dump() : serialises o as HF writes it (2-space indent, UTF-8, reals
 * with up to 15 significant digits) into a malloc'd string with a final
 * newline.  NULL on allocation failure. */
char *hf_json_dump(const json_t *o, size_t *len);

/* hf_json_write() : writes o (hf_json_dump) to dir/name atomically,
 * replacing a file of that name.  0, -ST_NOMEM, -ST_IO ("'name': ..."). */
int hf_json_write(const char *dir, const char *name, const json_t *o, struct diag *d);

#endif
