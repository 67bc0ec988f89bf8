/*
 * hf_config.c - config.json <-> GGUF hyperparameters, tensor names and the
 * Q/K row permutation, as convert_hf_to_gguf.py does them (see hf.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "hf.h"
#include "json.h"
#include "xio.h"

static const char *const special_names[HF_SPECIAL_COUNT] = {
    "bos", "eos", "unk", "sep", "pad", "cls", "mask",
};

static const char *const special_keys[HF_SPECIAL_COUNT] = {
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.cls_token_id",
    "tokenizer.ggml.mask_token_id",
};

const char *
hf_special_name(enum hf_special s)
{
    return (unsigned)s < HF_SPECIAL_COUNT ? special_names[s] : "?";
}

const char *
hf_special_key(enum hf_special s)
{
    return (unsigned)s < HF_SPECIAL_COUNT ? special_keys[s] : "?";
}

const char *
hf_torch_dtype(uint32_t ggml_type)
{
    switch (ggml_type) {
    case 0: return "float32";
    case 1: return "float16";
    case 30: return "bfloat16";
    default: return NULL;
    }
}

/* ---- config.json -> struct hf_config ---- */

#define CFG "config.json"

static const json_t *
member(const json_t *o, const char *key)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;

    return (v && !json_is_null(v)) ? v : NULL;
}

/* An integer under the first of keys present.  1 when none is, 0 when found,
 * -ST_FORMAT when ill-typed or outside [lo, hi]. */
static int
cfg_int(const json_t *o, const char *const *keys, int64_t lo, int64_t hi, int64_t *out,
        struct diag *d)
{
    for (; *keys; keys++) {
        int rc = json_obj_int(o, *keys, out, d);
        if (rc == 1)
            continue;
        if (rc < 0)
            return diag_set(d, ST_FORMAT, CFG ": '%s' is not an integer", *keys);
        if (*out < lo || *out > hi)
            return diag_set(d, ST_FORMAT, CFG ": '%s' = %lld is out of range [%lld, %lld]",
                            *keys, (long long)*out, (long long)lo, (long long)hi);
        return 0;
    }
    return 1;
}

static int
cfg_num(const json_t *o, const char *key, const char *label, double lo, double hi, double *out,
        struct diag *d)
{
    int rc = json_obj_num(o, key, out, d);

    if (rc == 1)
        return 1;
    if (rc < 0)
        return diag_set(d, ST_FORMAT, CFG ": '%s' is not a number", label);
    if (!isfinite(*out) || *out < lo || *out > hi)
        return diag_set(d, ST_FORMAT, CFG ": '%s' = %g is out of range", label, *out);
    return 0;
}

static int
cfg_bool(const json_t *o, const char *key, bool *out, struct diag *d)
{
    int rc = json_obj_bool(o, key, out, d);

    if (rc < 0)
        return diag_set(d, ST_FORMAT, CFG ": '%s' is not a boolean", key);
    return rc;
}

/* The converter's view of a table architecture. */
static enum hf_arch
hf_arch_of(enum arch_id id)
{
    return id == ARCH_ID_QWEN2 ? HF_ARCH_QWEN2 : id == ARCH_ID_QWEN3 ? HF_ARCH_QWEN3
                                  : id == ARCH_ID_GEMMA3 ? HF_ARCH_GEMMA3 : HF_ARCH_LLAMA;
}

/* The table's architecture of a config.json (architectures[0], else
 * model_type), which must be one the converter handles.  Unprefixed
 * messages. */
static int
config_arch(struct hf_config *c, const struct arch_hparams *hp, struct diag *d)
{
    if (hp->hf_class && hp->arch && hp->hf && hp->hf->model_type &&
        !strcmp(hp->hf->model_type, "gemma3"))
        return diag_set(d, ST_FORMAT, "multimodal checkpoint '%.64s' is not supported "
                        "(its text model, Gemma3ForCausalLM, is)", hp->hf_class);
    if (hp->hf_class) {
        if (!hp->arch || !(hp->arch->flags & ARCH_F_CONVERT))
            return diag_set(d, ST_FORMAT, "unsupported architecture '%.64s'", hp->hf_class);
        snprintf(c->hf_arch, sizeof(c->hf_arch), "%s", hp->hf_class);
    } else {
        if (!hp->model_type)
            return diag_set(d, ST_FORMAT, "neither 'architectures' nor 'model_type' is given");
        if (!hp->arch || !(hp->arch->flags & ARCH_F_CONVERT))
            return diag_set(d, ST_FORMAT, "unsupported architecture (model_type '%.64s')",
                            hp->model_type);
        snprintf(c->hf_arch, sizeof(c->hf_arch), "%s", hp->hf->hf_class);
    }
    c->arch = hf_arch_of(hp->arch->id);
    c->arch_name = hp->arch->name;
    c->permute_qk = hp->arch->hf_permute_qk;
    c->attn_bias = hp->arch->hf_attn_bias;
    return 0;
}

static int
parse_rope(struct hf_config *c, const json_t *root, struct diag *d)
{
    const json_t *rs = member(root, "rope_scaling");
    const char *kind = NULL;
    const char *which = "rope_scaling";
    char label[64];
    int64_t orig;
    double x;
    int rc;

    c->rope.type = HF_ROPE_NONE;
    c->rope.yarn_ext_factor = c->rope.yarn_attn_factor = NAN;
    c->rope.yarn_beta_fast = c->rope.yarn_beta_slow = NAN;
    if (!rs) {
        rs = member(root, "rope_parameters");
        which = "rope_parameters";
    }
    if (!rs)
        return 0;
    if (!json_is_object(rs))
        return diag_set(d, ST_FORMAT, CFG ": '%s' is not an object", which);
    /* transformers >= 5 gemma3: {"full_attention": {...}, "sliding_attention": {...}};
     * the converter scales the global layers' rope and takes the local theta */
    if (member(rs, "full_attention") || member(rs, "sliding_attention")) {
        const json_t *sw = member(rs, "sliding_attention");
        if (sw && !c->has_rope_theta_swa) {
            rc = cfg_num(sw, "rope_theta", "rope_parameters.sliding_attention.rope_theta", 1e-3,
                         1e12, &c->rope_theta_swa, d);
            if (rc < 0)
                return rc;
            c->has_rope_theta_swa = rc == 0;
        }
        rs = member(rs, "full_attention");
        which = "rope_parameters.full_attention";
        if (!rs)
            return 0;
        if (!json_is_object(rs))
            return diag_set(d, ST_FORMAT, CFG ": '%s' is not an object", which);
    }
    /* transformers >= 5 keeps rope_theta here */
    if (!c->has_rope_theta) {
        rc = cfg_num(rs, "rope_theta", "rope_parameters.rope_theta", 1e-3, 1e12, &c->rope_theta, d);
        if (rc < 0)
            return rc;
        c->has_rope_theta = rc == 0;
    }
    if ((rc = json_obj_str(rs, "rope_type", &kind, d)) == 1)
        rc = json_obj_str(rs, "type", &kind, d);
    if (rc < 0)
        return diag_set(d, ST_FORMAT, CFG ": '%s.rope_type' is not a string", which);
    if (!kind || !strcmp(kind, "default"))
        return 0;

#define NUM(key, lo, hi, dst, req) do { \
        snprintf(label, sizeof(label), "%s.%s", which, key); \
        rc = cfg_num(rs, key, label, lo, hi, &x, d); \
        if (rc < 0) return rc; \
        if (rc == 0) dst = x; \
        else if (req) return diag_set(d, ST_FORMAT, CFG ": '%s.%s' is missing", which, key); \
    } while (0)

    if (!strcmp(kind, "linear")) {
        c->rope.type = HF_ROPE_LINEAR;
        NUM("factor", 1e-6, 1e6, c->rope.factor, 1);
    } else if (!strcmp(kind, "yarn")) {
        c->rope.type = HF_ROPE_YARN;
        NUM("factor", 1e-6, 1e6, c->rope.factor, 1);
        rc = cfg_int(rs, (const char *const[]){"original_max_position_embeddings", NULL}, 1,
                     UINT32_MAX, &orig, d);
        if (rc < 0)
            return rc;
        if (rc == 1)
            return diag_set(d, ST_FORMAT,
                            CFG ": '%s.original_max_position_embeddings' is missing", which);
        c->rope.orig_ctx = orig;
        NUM("extrapolation_factor", -1e6, 1e6, c->rope.yarn_ext_factor, 0);
        NUM("attention_factor", -1e6, 1e6, c->rope.yarn_attn_factor, 0);
        NUM("beta_fast", -1e6, 1e6, c->rope.yarn_beta_fast, 0);
        NUM("beta_slow", -1e6, 1e6, c->rope.yarn_beta_slow, 0);
    } else if (!strcmp(kind, "llama3")) {
        c->rope.type = HF_ROPE_LLAMA3;
        c->rope.factor = 8.0;
        c->rope.low_freq_factor = 1.0;
        c->rope.high_freq_factor = 4.0;
        NUM("factor", 1e-6, 1e6, c->rope.factor, 0);
        NUM("low_freq_factor", 1e-6, 1e6, c->rope.low_freq_factor, 0);
        NUM("high_freq_factor", 1e-6, 1e6, c->rope.high_freq_factor, 0);
        if (c->rope.high_freq_factor <= c->rope.low_freq_factor)
            return diag_set(d, ST_FORMAT,
                            CFG ": '%s': high_freq_factor must exceed low_freq_factor", which);
        rc = cfg_int(rs, (const char *const[]){"original_max_position_embeddings", NULL}, 1,
                     UINT32_MAX, &orig, d);
        if (rc == 1)
            rc = cfg_int(root, (const char *const[]){"original_max_position_embeddings", NULL},
                         1, UINT32_MAX, &orig, d);
        if (rc < 0)
            return rc;
        c->rope.orig_ctx = rc == 0 ? orig : 8192;
    } else {
        return diag_set(d, ST_FORMAT, CFG ": rope_scaling type '%.32s' is not supported", kind);
    }
#undef NUM
    return 0;
}

/* c->swa_mask: the layers that use the sliding window (arch_swa_layer: the
 * file's mask or layer_types, else every 6th layer global); none without a
 * window. */
static void
swa_mask_fill(struct hf_config *c, const struct arch_hparams *hp)
{
    memset(c->swa_mask, 0, sizeof(c->swa_mask));
    for (int64_t l = 0; c->sliding_window > 0 && l < c->n_layer; l++)
        if (arch_swa_layer(hp, l))
            c->swa_mask[l / 64] |= (uint64_t)1 << (l % 64);
}

/* Gemma3Model.set_gguf_parameters over transformers' Gemma3TextConfig
 * defaults: head_dim 256, rope_theta 1e6, rope_local_base_freq 10000,
 * sliding_window 4096 (not written when sliding_window_pattern is 1), the
 * final logit softcap when set; attn_logit_softcapping (Gemma 2) refused.
 * query_pre_attn_scalar is not carried: llama.cpp scales by 1/sqrt(head_dim). */
static int
gemma3_from_json(struct hf_config *c, const json_t *root, struct diag *d)
{
    int64_t pattern = 0, sw = 4096;
    double cap = 0;
    int rc;

    if (member(root, "attn_logit_softcapping"))
        return diag_set(d, ST_FORMAT, CFG ": 'attn_logit_softcapping' is not supported by gemma3");
    if (!c->has_head_dim) {
        c->head_dim = 256;
        c->has_head_dim = true;
    }
    if (!c->has_rope_theta) {
        c->rope_theta = 1e6;
        c->has_rope_theta = true;
    }
    if (!c->has_rope_theta_swa) {
        c->rope_theta_swa = 10000.0;
        c->has_rope_theta_swa = true;
    }
    if ((rc = cfg_int(root, (const char *const[]){"sliding_window_pattern", NULL}, 0, HF_MAX_LAYERS,
                      &pattern, d)) < 0 ||
        (rc = cfg_int(root, (const char *const[]){"sliding_window", NULL}, 1, UINT32_MAX, &sw,
                      d)) < 0)
        return rc;
    c->sliding_window = pattern == 1 ? 0 : sw;
    if ((rc = cfg_num(root, "final_logit_softcapping", "final_logit_softcapping", 0, 1e9, &cap,
                      d)) < 0)
        return rc;
    c->final_logit_softcap = rc == 0 ? cap : 0;
    return 0;
}

int
hf_config_from_json(struct hf_config *c, const json_t *root, struct diag *d)
{
    struct arch_hparams hp;
    const char *dt = NULL;
    int rc, i;

    memset(c, 0, sizeof(*c));
    for (i = 0; i < HF_SPECIAL_COUNT; i++)
        c->special[i] = -1;
    if (!json_is_object(root))
        return diag_set(d, ST_FORMAT, CFG ": not a JSON object");
    /* the hyperparameters: the table's reader and rules (arch.h) */
    if ((rc = arch_read_config(root, 0, &hp, d)) < 0 || (rc = config_arch(c, &hp, d)) < 0 ||
        (rc = arch_check_hparams(&hp, d)) < 0) {
        diag_prefix(d, CFG);
        return rc;
    }
    c->n_embd = hp.n_embd;
    c->n_layer = hp.n_layer;
    c->n_ff = hp.n_ff;
    c->n_head = hp.n_head;
    c->n_head_kv = hp.n_head_kv;
    c->has_n_head_kv = arch_has(&hp, ARCH_HP_HEAD_COUNT_KV);
    c->head_dim = hp.head_dim;
    c->has_head_dim = arch_has(&hp, ARCH_HP_KEY_LENGTH);
    if (c->head_dim % 2)
        return diag_set(d, ST_FORMAT, CFG ": head dimension %lld is odd",
                        (long long)c->head_dim);
    if (c->n_head * c->head_dim > HF_MAX_DIM * 4)
        return diag_set(d, ST_FORMAT, CFG ": attention width %lld is too large",
                        (long long)(c->n_head * c->head_dim));
    c->n_ctx = hp.n_ctx_train;
    c->n_vocab = arch_has(&hp, ARCH_HP_VOCAB_SIZE) ? hp.n_vocab : 0;
    c->rope_theta = hp.rope_freq_base;
    c->has_rope_theta = arch_has(&hp, ARCH_HP_ROPE_FREQ_BASE);
    c->rms_eps = hp.rms_eps;

    if ((rc = cfg_bool(root, "tie_word_embeddings", &c->tie_word_embeddings, d)) < 0)
        return rc;
    /* qwen2 always has q/k/v biases; llama and qwen3 say so */
    if (c->arch != HF_ARCH_QWEN2 &&
        (rc = cfg_bool(root, "attention_bias", &c->attn_bias, d)) < 0)
        return rc;
    c->rope_theta_swa = hp.rope_freq_base_swa;
    c->has_rope_theta_swa = arch_has(&hp, ARCH_HP_ROPE_FREQ_BASE_SWA);
    if ((rc = parse_rope(c, root, d)) < 0)
        return rc;
    if (c->arch == HF_ARCH_GEMMA3 && (rc = gemma3_from_json(c, root, d)) < 0)
        return rc;
    swa_mask_fill(c, &hp);

    for (i = 0; i < HF_SPECIAL_COUNT; i++) {
        char key[32];
        const json_t *v;

        snprintf(key, sizeof(key), "%s_token_id", special_names[i]);
        v = member(root, key);
        /* A list (Llama 3.1 eos) is ignored, as by gguf-py SpecialVocab. */
        if (!v || json_is_array(v))
            continue;
        if (!json_is_integer(v))
            return diag_set(d, ST_FORMAT, CFG ": '%s' is not an integer", key);
        if (json_integer_value(v) >= 0 && json_integer_value(v) <= UINT32_MAX)
            c->special[i] = json_integer_value(v);
    }
    if ((rc = json_obj_str(root, "torch_dtype", &dt, d)) == 1)
        rc = json_obj_str(root, "dtype", &dt, d);
    if (rc < 0)
        return diag_set(d, ST_FORMAT, CFG ": 'torch_dtype' is not a string");
    if (dt)
        snprintf(c->torch_dtype, sizeof(c->torch_dtype), "%s", dt);
    return 0;
}

int
hf_config_parse(struct hf_config *c, const char *buf, size_t len, struct diag *d)
{
    json_t *root;
    int rc;

    memset(c, 0, sizeof(*c));
    if ((rc = json_load_mem(buf, len, &root, d)) < 0) {
        diag_prefix(d, CFG);
        return rc;
    }
    rc = hf_config_from_json(c, root, d);
    json_decref(root);
    return rc;
}

int
hf_config_load(struct hf_config *c, const char *path, struct diag *d)
{
    char *buf;
    size_t len;
    int rc;

    memset(c, 0, sizeof(*c));
    if ((rc = read_file_all(path, (size_t)64 << 20, &buf, &len, d)) < 0)
        return rc;
    rc = hf_config_parse(c, buf, len, d);
    free(buf);
    return rc;
}

/* ---- struct hf_config -> GGUF ---- */

/* A hyperparameter under the key the table gives it. */
static int
set_u32(struct gguf *g, const char *arch, enum arch_hp id, int64_t v)
{
    char k[128];

    snprintf(k, sizeof(k), "%s.%s", arch, arch_keys[id].gguf);
    return gguf_set_u32(g, k, (uint32_t)v);
}

static int
set_f32(struct gguf *g, const char *arch, enum arch_hp id, double v)
{
    char k[128];

    snprintf(k, sizeof(k), "%s.%s", arch, arch_keys[id].gguf);
    return gguf_set_f32(g, k, (float)v);
}

int
hf_config_to_gguf(struct gguf *g, const struct hf_config *c, uint32_t file_type,
                  struct diag *d)
{
    const char *a = c->arch_name ? c->arch_name : "llama";
    char k[128];
    int rc = 0;

    rc |= gguf_set_str(g, "general.architecture", a);
    rc |= gguf_set_str(g, "general.type", "model");
    rc |= set_u32(g, a, ARCH_HP_BLOCK_COUNT, c->n_layer);
    if (c->n_ctx > 0)
        rc |= set_u32(g, a, ARCH_HP_CONTEXT_LENGTH, c->n_ctx);
    rc |= set_u32(g, a, ARCH_HP_EMBEDDING_LENGTH, c->n_embd);
    rc |= set_u32(g, a, ARCH_HP_FEED_FORWARD_LENGTH, c->n_ff);
    rc |= set_u32(g, a, ARCH_HP_HEAD_COUNT, c->n_head);
    rc |= set_u32(g, a, ARCH_HP_HEAD_COUNT_KV, c->n_head_kv);
    if (c->rope.type == HF_ROPE_LINEAR || c->rope.type == HF_ROPE_YARN) {
        snprintf(k, sizeof(k), "%s.%s", a, arch_keys[ARCH_HP_ROPE_SCALING_TYPE].gguf);
        rc |= gguf_set_str(g, k, c->rope.type == HF_ROPE_LINEAR ? "linear" : "yarn");
        rc |= set_f32(g, a, ARCH_HP_ROPE_SCALING_FACTOR, c->rope.factor);
    }
    if (c->rope.type == HF_ROPE_YARN) {
        rc |= set_u32(g, a, ARCH_HP_ROPE_ORIG_CTX, c->rope.orig_ctx);
        if (!isnan(c->rope.yarn_ext_factor))
            rc |= set_f32(g, a, ARCH_HP_YARN_EXT_FACTOR, c->rope.yarn_ext_factor);
        if (!isnan(c->rope.yarn_attn_factor))
            rc |= set_f32(g, a, ARCH_HP_YARN_ATTN_FACTOR, c->rope.yarn_attn_factor);
        if (!isnan(c->rope.yarn_beta_fast))
            rc |= set_f32(g, a, ARCH_HP_YARN_BETA_FAST, c->rope.yarn_beta_fast);
        if (!isnan(c->rope.yarn_beta_slow))
            rc |= set_f32(g, a, ARCH_HP_YARN_BETA_SLOW, c->rope.yarn_beta_slow);
    }
    if (c->has_rope_theta)
        rc |= set_f32(g, a, ARCH_HP_ROPE_FREQ_BASE, c->rope_theta);
    if (c->has_rope_theta_swa && c->arch == HF_ARCH_GEMMA3)
        rc |= set_f32(g, a, ARCH_HP_ROPE_FREQ_BASE_SWA, c->rope_theta_swa);
    rc |= set_f32(g, a, ARCH_HP_RMS_EPS, c->rms_eps);
    if (c->has_head_dim) {
        rc |= set_u32(g, a, ARCH_HP_KEY_LENGTH, c->head_dim);
        rc |= set_u32(g, a, ARCH_HP_VALUE_LENGTH, c->head_dim);
    }
    if (c->arch == HF_ARCH_GEMMA3 && c->final_logit_softcap > 0) {
        snprintf(k, sizeof(k), "%s.final_logit_softcapping", a);
        rc |= gguf_set_f32(g, k, (float)c->final_logit_softcap);
    }
    if (c->arch == HF_ARCH_GEMMA3 && c->sliding_window > 0)
        rc |= set_u32(g, a, ARCH_HP_SLIDING_WINDOW, c->sliding_window);
    rc |= gguf_set_u32(g, "general.file_type", file_type);
    if (c->arch == HF_ARCH_LLAMA) {
        if (c->n_vocab > 0)
            rc |= set_u32(g, a, ARCH_HP_VOCAB_SIZE, c->n_vocab);
        rc |= set_u32(g, a, ARCH_HP_ROPE_DIM, c->head_dim);
    }
    rc |= gguf_set_u32(g, "general.quantization_version", 2);
    if (rc)
        return diag_set(d, ST_NOMEM, "out of memory writing GGUF metadata");
    return 0;
}

/* ---- GGUF -> struct hf_config ---- */

/* gemma3: llama.cpp's defaults (local rope base 10000, no window when the
 * key is absent), the final logit softcap, and which layers use the window
 * (arch_swa_layer: the file's mask, else every 6th layer global). */
static int
gemma3_from_gguf(struct hf_config *c, const struct gguf *g, const struct arch_hparams *hp,
                 struct diag *d)
{
    double cap = 0;
    int rc = gguf_get_float(g, "gemma3.final_logit_softcapping", &cap, d);

    if (rc < 0)
        return rc;
    c->has_head_dim = true;
    c->has_rope_theta = true;
    c->rope_theta_swa = arch_has(hp, ARCH_HP_ROPE_FREQ_BASE_SWA) ? hp->rope_freq_base_swa : 10000.0;
    c->has_rope_theta_swa = true;
    c->sliding_window = arch_has(hp, ARCH_HP_SLIDING_WINDOW) ? hp->sliding_window : 0;
    if (rc == 0 && (!isfinite(cap) || cap < 0))
        return diag_set(d, ST_FORMAT, "key 'gemma3.final_logit_softcapping' is not a "
                        "non-negative number");
    c->final_logit_softcap = rc == 0 ? cap : 0;
    swa_mask_fill(c, hp);
    return 0;
}

int
hf_config_from_gguf(struct hf_config *c, struct gguf *g, struct diag *d)
{
    static const enum arch_hp per_layer[] = { ARCH_HP_FEED_FORWARD_LENGTH, ARCH_HP_HEAD_COUNT,
                                              ARCH_HP_HEAD_COUNT_KV };
    struct arch_hparams hp;
    const struct arch_hf *cls;
    const struct gguf_kv *kv;
    int64_t ti;
    char k[256];
    size_t j;
    int rc, i;

    memset(c, 0, sizeof(*c));
    for (i = 0; i < HF_SPECIAL_COUNT; i++)
        c->special[i] = -1;
    c->rope.yarn_ext_factor = c->rope.yarn_attn_factor = NAN;
    c->rope.yarn_beta_fast = c->rope.yarn_beta_slow = NAN;
    /* the hyperparameters: the table's reader and rules (arch.h) */
    if ((rc = arch_read_hparams(g, 0, &hp, d)) < 0)
        return rc;
    if (!hp.arch || !(hp.arch->flags & ARCH_F_CONVERT) || !(cls = arch_hf_of(hp.arch->id)))
        return diag_set(d, ST_FORMAT, "architecture '%.64s' cannot be written as a HF llama model",
                        hp.name);
    c->arch = hf_arch_of(hp.arch->id);
    c->arch_name = hp.arch->name;
    snprintf(c->hf_arch, sizeof(c->hf_arch), "%s", cls->hf_class);
    c->permute_qk = hp.arch->hf_permute_qk;
    if ((rc = arch_check_hparams(&hp, d)) < 0)
        return rc;
    for (j = 0; j < sizeof(per_layer) / sizeof(per_layer[0]); j++)
        if (hp.varies & ARCH_BIT(per_layer[j]))
            return diag_set(d, ST_FORMAT,
                            "'%s' differs between layers, which HF llama cannot express",
                            arch_hp_key(&hp, per_layer[j], k, sizeof(k)));
    if (hp.n_expert > 0)
        return diag_set(d, ST_FORMAT, "mixture-of-experts models are not supported");

    c->n_layer = hp.n_layer;
    c->n_ctx = hp.n_ctx_train;
    c->n_embd = hp.n_embd;
    c->n_ff = hp.n_ff;
    c->n_head = hp.n_head;
    c->n_head_kv = hp.n_head_kv;
    c->has_n_head_kv = arch_has(&hp, ARCH_HP_HEAD_COUNT_KV);
    c->head_dim = hp.head_dim;
    c->has_head_dim = arch_has(&hp, ARCH_HP_KEY_LENGTH);
    if (c->head_dim % 2)
        return diag_set(d, ST_FORMAT, "head dimension %lld is odd", (long long)c->head_dim);
    if (arch_has(&hp, ARCH_HP_VALUE_LENGTH) && hp.head_dim_v != c->head_dim)
        return diag_set(d, ST_FORMAT, "value_length %lld != key_length %lld is not supported",
                        (long long)hp.head_dim_v, (long long)c->head_dim);
    if (arch_has(&hp, ARCH_HP_ROPE_DIM) && hp.n_rot != c->head_dim)
        return diag_set(d, ST_FORMAT, "partial rotary (rope.dimension_count %lld, head dim %lld) "
                        "is not supported", (long long)hp.n_rot, (long long)c->head_dim);
    c->rms_eps = hp.rms_eps;
    c->rope_theta = hp.rope_freq_base;
    c->has_rope_theta = arch_has(&hp, ARCH_HP_ROPE_FREQ_BASE);
    if (c->arch == HF_ARCH_GEMMA3 && (rc = gemma3_from_gguf(c, g, &hp, d)) < 0)
        return rc;

    if (hp.rope_scaling && strcmp(hp.rope_scaling, "none")) {
        const char *rt = hp.rope_scaling;
        if (!strcmp(rt, "linear"))
            c->rope.type = HF_ROPE_LINEAR;
        else if (!strcmp(rt, "yarn"))
            c->rope.type = HF_ROPE_YARN;
        else
            return diag_set(d, ST_FORMAT, "rope scaling type '%.32s' is not supported", rt);
        /* rope.scaling.factor, else the older rope.scale_linear */
        if ((!arch_has(&hp, ARCH_HP_ROPE_SCALING_FACTOR) &&
             !arch_has(&hp, ARCH_HP_ROPE_SCALE_LINEAR)) || hp.rope_factor <= 0)
            return diag_set(d, ST_FORMAT, "rope scaling '%s' without a positive factor", rt);
        c->rope.factor = hp.rope_factor;
        if (c->rope.type == HF_ROPE_YARN) {
            c->rope.orig_ctx = arch_has(&hp, ARCH_HP_ROPE_ORIG_CTX) ? hp.rope_orig_ctx : c->n_ctx;
            if (arch_has(&hp, ARCH_HP_YARN_EXT_FACTOR))
                c->rope.yarn_ext_factor = hp.yarn_ext_factor;
            if (arch_has(&hp, ARCH_HP_YARN_ATTN_FACTOR))
                c->rope.yarn_attn_factor = hp.yarn_attn_factor;
            if (arch_has(&hp, ARCH_HP_YARN_BETA_FAST))
                c->rope.yarn_beta_fast = hp.yarn_beta_fast;
            if (arch_has(&hp, ARCH_HP_YARN_BETA_SLOW))
                c->rope.yarn_beta_slow = hp.yarn_beta_slow;
        }
    }

    /* vocabulary size: the token list, else the embedding rows, else vocab_size */
    kv = gguf_get(g, "tokenizer.ggml.tokens");
    ti = gguf_find_tensor(g, "token_embd.weight");
    if (kv && kv->type == GGUF_TYPE_ARRAY)
        c->n_vocab = (int64_t)kv->n;
    else if (ti >= 0)
        c->n_vocab = g->t[ti].ne[1];
    else if (arch_has(&hp, ARCH_HP_VOCAB_SIZE))
        c->n_vocab = hp.n_vocab;
    if (c->n_vocab <= 0 || c->n_vocab > HF_MAX_VOCAB)
        return diag_set(d, ST_FORMAT, "vocabulary size %lld is out of range",
                        (long long)c->n_vocab);
    c->tie_word_embeddings = gguf_find_tensor(g, "output.weight") < 0;
    c->attn_bias = gguf_find_tensor(g, "blk.0.attn_q.bias") >= 0;

    for (i = 0; i < HF_SPECIAL_COUNT; i++) {
        uint64_t u;
        rc = gguf_get_uint(g, special_keys[i], &u, d);
        if (rc < 0)
            return rc;
        if (rc == 0 && u <= UINT32_MAX)
            c->special[i] = (int64_t)u;
    }

    ti = gguf_find_tensor(g, "rope_freqs.weight");
    if (ti >= 0) {
        const struct gguf_tensor *t = &g->t[ti];
        if (t->type != 0 || t->ne[0] != c->head_dim / 2 ||
            gguf_tensor_nelements(t) != c->head_dim / 2)
            return diag_set(d, ST_FORMAT, "rope_freqs.weight is not F32 [%lld]",
                            (long long)(c->head_dim / 2));
        if (t->data)
            return hf_config_match_rope_freqs(c, t->data, c->head_dim / 2, d);
        c->rope_freqs_pending = true;
    }
    return 0;
}

/* ---- llama3 rope factors ---- */

/* Computed in float32 step by step, as torch does in the converter. */
static void
llama3_factors(float *out, int64_t n, int64_t head_dim, double theta, double factor,
               double low, double high, int64_t orig)
{
    const float two_pi = (float)(2.0 * M_PI);
    const float lo_wl = (float)((double)orig / low);
    const float hi_wl = (float)((double)orig / high);
    int64_t k;

    /* torch evaluates "scalar / tensor" as reciprocal(tensor) * scalar */
    for (k = 0; k < n; k++) {
        float e = (float)(2 * k) / (float)head_dim;
        float freq = 1.0f / powf((float)theta, e);
        float wavelen = (1.0f / freq) * two_pi;
        if (wavelen < hi_wl) {
            out[k] = 1.0f;
        } else if (wavelen > lo_wl) {
            out[k] = (float)factor;
        } else {
            float smooth = ((1.0f / wavelen) * (float)orig - (float)low) / (float)(high - low);
            out[k] = 1.0f / ((1.0f - smooth) / (float)factor + smooth);
        }
    }
}

int
hf_rope_freqs(const struct hf_config *c, float *out, int64_t n, struct diag *d)
{
    if (c->rope.type != HF_ROPE_LLAMA3)
        return diag_set(d, ST_RANGE, "rope scaling is not llama3");
    if (n != c->head_dim / 2 || n <= 0)
        return diag_set(d, ST_RANGE, "rope_freqs length %lld != head_dim/2 = %lld",
                        (long long)n, (long long)(c->head_dim / 2));
    llama3_factors(out, n, c->head_dim, c->rope_theta, c->rope.factor, c->rope.low_freq_factor,
                   c->rope.high_freq_factor, c->rope.orig_ctx > 0 ? c->rope.orig_ctx : 8192);
    return 0;
}

int
hf_config_match_rope_freqs(struct hf_config *c, const float *freqs, int64_t n, struct diag *d)
{
    static const int64_t origs[] = {8192, 4096, 2048, 16384, 32768, 65536, 131072, 1024};
    static const double lows[] = {1, 2, 0.5};
    static const double highs[] = {4, 2, 8, 1, 16};
    float *tmp;
    double factor;
    size_t a, b, e;
    int64_t k;

    if (n != c->head_dim / 2 || n <= 0)
        return diag_set(d, ST_FORMAT, "rope_freqs.weight has %lld values, expected %lld",
                        (long long)n, (long long)(c->head_dim / 2));
    factor = freqs[n - 1];
    if (!isfinite(factor) || factor <= 0)
        return diag_set(d, ST_FORMAT, "rope_freqs.weight holds a non-positive factor");
    tmp = malloc((size_t)n * sizeof(*tmp));
    if (!tmp)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (a = 0; a < sizeof(origs) / sizeof(origs[0]); a++)
        for (b = 0; b < sizeof(lows) / sizeof(lows[0]); b++)
            for (e = 0; e < sizeof(highs) / sizeof(highs[0]); e++) {
                if (highs[e] <= lows[b])
                    continue;
                llama3_factors(tmp, n, c->head_dim, c->rope_theta, factor, lows[b], highs[e],
                               origs[a]);
                for (k = 0; k < n; k++)
                    if (!(fabs((double)tmp[k] - freqs[k]) <= 1e-6 * fabs((double)freqs[k])))
                        break;
                if (k == n) {
                    free(tmp);
                    c->rope.type = HF_ROPE_LLAMA3;
                    c->rope.factor = factor;
                    c->rope.low_freq_factor = lows[b];
                    c->rope.high_freq_factor = highs[e];
                    c->rope.orig_ctx = origs[a];
                    c->rope_freqs_pending = false;
                    return 0;
                }
            }
    free(tmp);
    return diag_set(d, ST_FORMAT, "rope_freqs.weight matches no llama3 rope_scaling");
}

/* ---- struct hf_config -> config.json ---- */

/* The shortest decimal that reads back as the same float32. */
static json_t *
json_f32(double x)
{
    float f = (float)x;
    char buf[48];
    int p;

    for (p = 1; p <= 9; p++) {
        snprintf(buf, sizeof(buf), "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    return json_real(strtod(buf, NULL));
}

/* A hyperparameter's usual config.json name (the table's first spelling). */
#define HFK(id) (arch_keys[id].hf[0].name)

static int
jset(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

/* The Gemma3TextConfig members llama.cpp's model needs: layer_types from
 * the window mask, query_pre_attn_scalar = head_dim (llama.cpp scales by
 * 1/sqrt(head_dim)), GELU (tanh) MLP, the local rope base. */
static int
gemma3_to_json(json_t *o, const struct hf_config *c)
{
    json_t *lt = json_array();
    int rc = 0;

    for (int64_t l = 0; lt && l < c->n_layer; l++)
        rc |= json_array_append_new(lt, json_string(c->swa_mask[l / 64] >> (l % 64) & 1
                                                    ? "sliding_attention" : "full_attention"));
    rc |= jset(o, "layer_types", lt);
    rc |= jset(o, "attn_logit_softcapping", json_null());
    rc |= jset(o, "final_logit_softcapping", c->final_logit_softcap > 0
                                                ? json_f32(c->final_logit_softcap) : json_null());
    rc |= jset(o, "query_pre_attn_scalar", json_integer(c->head_dim));
    rc |= jset(o, HFK(ARCH_HP_ROPE_FREQ_BASE_SWA), json_f32(c->rope_theta_swa));
    rc |= jset(o, HFK(ARCH_HP_SLIDING_WINDOW), json_integer(c->sliding_window > 0 ? c->sliding_window
                                                                             : 1 << 30));
    if (c->sliding_window <= 0)
        rc |= jset(o, "sliding_window_pattern", json_integer(1));
    return rc;
}

int
hf_config_to_json(const struct hf_config *c, const char *torch_dtype, json_t **out,
                  struct diag *d)
{
    json_t *o = json_object(), *rs = NULL;
    bool llama = c->arch == HF_ARCH_LLAMA, gemma3 = c->arch == HF_ARCH_GEMMA3;
    const struct arch_hf *cls = arch_hf_of(c->arch == HF_ARCH_QWEN3 ? ARCH_ID_QWEN3
                                           : gemma3 ? ARCH_ID_GEMMA3
                                           : llama ? ARCH_ID_LLAMA : ARCH_ID_QWEN2);
    int rc = 0, i;

    *out = NULL;
    if (!o)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (!torch_dtype)
        torch_dtype = c->torch_dtype[0] ? c->torch_dtype : "float32";
    rc |= jset(o, "architectures", json_pack("[s]", cls->hf_class));
    rc |= jset(o, "attention_bias", json_boolean(c->attn_bias));
    rc |= jset(o, "attention_dropout", json_real(0.0));
    for (i = 0; i < HF_SPECIAL_COUNT; i++) {
        char key[32];
        if (c->special[i] < 0)
            continue;
        snprintf(key, sizeof(key), "%s_token_id", special_names[i]);
        rc |= jset(o, key, json_integer(c->special[i]));
    }
    /* Qwen3Config's head_dim defaults to 128, not hidden_size / heads */
    if (c->has_head_dim || c->arch == HF_ARCH_QWEN3)
        rc |= jset(o, HFK(ARCH_HP_KEY_LENGTH), json_integer(c->head_dim));
    if (gemma3)
        rc |= jset(o, "hidden_activation", json_string("gelu_pytorch_tanh"));
    else
        rc |= jset(o, "hidden_act", json_string("silu"));
    rc |= jset(o, HFK(ARCH_HP_EMBEDDING_LENGTH), json_integer(c->n_embd));
    rc |= jset(o, "initializer_range", json_real(0.02));
    rc |= jset(o, HFK(ARCH_HP_FEED_FORWARD_LENGTH), json_integer(c->n_ff));
    rc |= jset(o, HFK(ARCH_HP_CONTEXT_LENGTH), json_integer(c->n_ctx));
    if (llama)
        rc |= jset(o, "mlp_bias", json_false());
    rc |= jset(o, "model_type", json_string(cls->model_type));
    rc |= jset(o, HFK(ARCH_HP_HEAD_COUNT), json_integer(c->n_head));
    rc |= jset(o, HFK(ARCH_HP_BLOCK_COUNT), json_integer(c->n_layer));
    rc |= jset(o, HFK(ARCH_HP_HEAD_COUNT_KV), json_integer(c->n_head_kv));
    if (llama)
        rc |= jset(o, "pretraining_tp", json_integer(1));
    rc |= jset(o, HFK(ARCH_HP_RMS_EPS), json_f32(c->rms_eps));
    switch (c->rope.type) {
    case HF_ROPE_NONE:
        rs = json_null();
        break;
    case HF_ROPE_LINEAR:
        rs = json_pack("{s:s, s:o}", "rope_type", "linear", "factor", json_f32(c->rope.factor));
        break;
    case HF_ROPE_YARN:
        rs = json_pack("{s:s, s:o, s:I}", "rope_type", "yarn", "factor",
                       json_f32(c->rope.factor), "original_max_position_embeddings",
                       (json_int_t)c->rope.orig_ctx);
        if (rs && !isnan(c->rope.yarn_ext_factor))
            rc |= jset(rs, "extrapolation_factor", json_f32(c->rope.yarn_ext_factor));
        if (rs && !isnan(c->rope.yarn_attn_factor))
            rc |= jset(rs, "attention_factor", json_f32(c->rope.yarn_attn_factor));
        if (rs && !isnan(c->rope.yarn_beta_fast))
            rc |= jset(rs, "beta_fast", json_f32(c->rope.yarn_beta_fast));
        if (rs && !isnan(c->rope.yarn_beta_slow))
            rc |= jset(rs, "beta_slow", json_f32(c->rope.yarn_beta_slow));
        break;
    case HF_ROPE_LLAMA3:
        rs = json_pack("{s:o, s:o, s:o, s:I, s:s}", "factor", json_f32(c->rope.factor),
                       "high_freq_factor", json_f32(c->rope.high_freq_factor),
                       "low_freq_factor", json_f32(c->rope.low_freq_factor),
                       "original_max_position_embeddings",
                       (json_int_t)(c->rope.orig_ctx > 0 ? c->rope.orig_ctx : 8192),
                       "rope_type", "llama3");
        break;
    }
    rc |= jset(o, "rope_scaling", rs);
    if (c->has_rope_theta)
        rc |= jset(o, HFK(ARCH_HP_ROPE_FREQ_BASE), json_f32(c->rope_theta));
    rc |= jset(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    rc |= jset(o, "torch_dtype", json_string(torch_dtype));
    rc |= jset(o, "use_cache", json_true());
    if (gemma3)
        rc |= gemma3_to_json(o, c);
    else if (!llama)
        rc |= jset(o, "use_sliding_window", json_false());
    if (c->n_vocab > 0)
        rc |= jset(o, HFK(ARCH_HP_VOCAB_SIZE), json_integer(c->n_vocab));
    if (rc) {
        json_decref(o);
        return diag_set(d, ST_NOMEM, "cannot build config.json");
    }
    *out = o;
    return 0;
}

/* ---- tensor names: the architecture table's (arch.c) ---- */

/* The tensor table for c (llama's when c names none). */
static const struct arch_tensor *
tensors_of(const struct hf_config *c)
{
    const struct arch *a = arch_find(c->arch_name);

    if (!a || !a->tensors)
        a = arch_get(ARCH_ID_LLAMA);
    return a->tensors;
}

static bool
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && !memcmp(s + n - m, suffix, m);
}

/* Parses "<decimal>." at *p: no sign, no leading zeros, at most 9 digits.
 * Returns the index and advances *p past the dot, or -1. */
static int32_t
parse_layer(const char **p)
{
    const char *s = *p;
    int32_t v = 0;
    int n = 0;

    while (s[n] >= '0' && s[n] <= '9') {
        if (n == 9)
            return -1;
        v = v * 10 + (s[n] - '0');
        n++;
    }
    if (n == 0 || s[n] != '.' || (n > 1 && s[0] == '0'))
        return -1;
    *p = s + n + 1;
    return v;
}

/* Gemma3Model.norm_shift: GGUF holds 1 + w of every HF RMSNorm weight
 * (names ending in "norm.weight" on both sides). */
static float
norm_shift(const struct hf_config *c, const char *name)
{
    return c->arch == HF_ARCH_GEMMA3 && ends_with(name, "norm.weight") ? 1.0f : 0.0f;
}

static void
fill_perm(const struct hf_config *c, unsigned flags, struct hf_tensor_map *m)
{
    m->perm = !c->permute_qk ? HF_PERM_NONE
            : (flags & ARCH_T_PERM_Q) ? HF_PERM_Q
            : (flags & ARCH_T_PERM_K) ? HF_PERM_K : HF_PERM_NONE;
    m->perm_heads = m->perm == HF_PERM_Q ? c->n_head : m->perm == HF_PERM_K ? c->n_head_kv : 0;
}

/* The shape the table gives tensor t (arch_dim) with c's hyperparameters:
 * the converted architectures have V and O heads of head_dim and rotate
 * whole heads; a dimension c does not give (the vocabulary without
 * vocab_size; MLA's, of no architecture that converts) comes out <= 0. */
static void
fill_shape(const struct hf_config *c, const struct arch_tensor *t, struct hf_tensor_map *m)
{
    const struct arch_hparams hp = {
        .n_embd = c->n_embd, .n_vocab = c->n_vocab, .n_ff = c->n_ff, .n_head = c->n_head,
        .n_head_kv = c->n_head_kv, .head_dim = c->head_dim, .head_dim_v = c->head_dim,
        .n_rot = c->head_dim,
    };

    m->matrix = (t->flags & ARCH_T_MATRIX) != 0;
    m->rows = m->matrix ? arch_dim(&hp, t->rows) : 1;
    m->cols = arch_dim(&hp, t->cols);
}

int
hf_name_to_gguf(const struct hf_config *c, const char *hf_name, struct hf_tensor_map *m,
                struct diag *d)
{
    static const char prefix[] = "model.layers.";
    const struct arch_tensor *t;
    const char *p;
    int32_t layer;

    memset(m, 0, sizeof(*m));
    m->layer = -1;
    if (ends_with(hf_name, ".rotary_emb.inv_freq") || ends_with(hf_name, ".attention.masked_bias") ||
        ends_with(hf_name, ".attention.bias"))
        return 0;
    for (t = tensors_of(c); t->gguf; t++)
        if (!(t->flags & ARCH_T_LAYER) && t->hf && !strcmp(hf_name, t->hf)) {
            snprintf(m->name, sizeof(m->name), "%s", t->gguf);
            m->shift = norm_shift(c, hf_name);
            fill_shape(c, t, m);
            return 1;
        }
    if (strncmp(hf_name, prefix, sizeof(prefix) - 1))
        return diag_set(d, ST_FORMAT, "unknown tensor '%.128s'", hf_name);
    p = hf_name + sizeof(prefix) - 1;
    layer = parse_layer(&p);
    if (layer < 0 || layer >= c->n_layer)
        return diag_set(d, ST_FORMAT, "tensor '%.128s': bad layer index", hf_name);
    for (t = tensors_of(c); t->gguf; t++)
        if ((t->flags & ARCH_T_LAYER) && t->hf && !strcmp(p, t->hf)) {
            snprintf(m->name, sizeof(m->name), "blk.%d.%s", (int)layer, t->gguf);
            m->layer = layer;
            fill_perm(c, t->flags, m);
            m->shift = norm_shift(c, hf_name);
            fill_shape(c, t, m);
            return 1;
        }
    return diag_set(d, ST_FORMAT, "unknown tensor '%.128s'", hf_name);
}

int
hf_name_from_gguf(const struct hf_config *c, const char *gguf_name, struct hf_tensor_map *m,
                  struct diag *d)
{
    static const char prefix[] = "blk.";
    const struct arch_tensor *t;
    const char *p;
    int32_t layer;

    memset(m, 0, sizeof(*m));
    m->layer = -1;
    for (t = tensors_of(c); t->gguf; t++)
        if (!(t->flags & ARCH_T_LAYER) && !strcmp(gguf_name, t->gguf)) {
            if (!t->hf)
                return 0;       /* rope_freqs.weight: carried by rope_scaling */
            snprintf(m->name, sizeof(m->name), "%s", t->hf);
            m->shift = -norm_shift(c, gguf_name);
            fill_shape(c, t, m);
            return 1;
        }
    if (strncmp(gguf_name, prefix, sizeof(prefix) - 1))
        return diag_set(d, ST_FORMAT, "tensor '%.128s' has no HF llama name", gguf_name);
    p = gguf_name + sizeof(prefix) - 1;
    layer = parse_layer(&p);
    if (layer < 0 || layer >= c->n_layer)
        return diag_set(d, ST_FORMAT, "tensor '%.128s': bad layer index", gguf_name);
    for (t = tensors_of(c); t->gguf; t++)
        if ((t->flags & ARCH_T_LAYER) && t->hf && !strcmp(p, t->gguf)) {
            snprintf(m->name, sizeof(m->name), "model.layers.%d.%s", (int)layer, t->hf);
            m->layer = layer;
            fill_perm(c, t->flags, m);
            m->shift = -norm_shift(c, gguf_name);
            fill_shape(c, t, m);
            return 1;
        }
    return diag_set(d, ST_FORMAT, "tensor '%.128s' has no HF llama name", gguf_name);
}

int
hf_layer_tensors_required(const struct hf_config *c)
{
    const struct arch_tensor *t;
    int n = 0;

    for (t = tensors_of(c); t->gguf; t++)
        n += (t->flags & ARCH_T_LAYER) && (t->flags & ARCH_T_REQUIRED) && t->hf;
    return n;
}

bool
hf_tensor_force_f32(const char *gguf_name, uint32_t n_dims)
{
    return n_dims <= 1 || ends_with(gguf_name, "_norm.weight") ||
           !ends_with(gguf_name, ".weight") || !strcmp(gguf_name, "rope_freqs.weight") ||
           ends_with(gguf_name, "ffn_gate_inp.weight");
}

/* ---- Q/K permutation ---- */

static int
permute(void *dst, const void *src, int64_t n_rows, size_t row_bytes, int64_t n_head,
        bool inverse)
{
    const uint8_t *s = src;
    uint8_t *o = dst;
    int64_t D, h, j;

    if (n_head <= 0 || n_rows <= 0 || n_rows % n_head)
        return -ST_RANGE;
    D = n_rows / n_head;
    if (D % 2)
        return -ST_RANGE;
    for (h = 0; h < n_head; h++)
        for (j = 0; j < D; j++) {
            /* interleaved row j of a head = rotate-half row (j%2)*D/2 + j/2 */
            int64_t gg = h * D + j;
            int64_t hf = h * D + (j % 2) * (D / 2) + j / 2;
            if (inverse)
                memcpy(o + (size_t)hf * row_bytes, s + (size_t)gg * row_bytes, row_bytes);
            else
                memcpy(o + (size_t)gg * row_bytes, s + (size_t)hf * row_bytes, row_bytes);
        }
    return 0;
}

int
hf_permute_rows(void *dst, const void *src, int64_t n_rows, size_t row_bytes, int64_t n_head)
{
    return permute(dst, src, n_rows, row_bytes, n_head, false);
}

int
hf_unpermute_rows(void *dst, const void *src, int64_t n_rows, size_t row_bytes, int64_t n_head)
{
    return permute(dst, src, n_rows, row_bytes, n_head, true);
}
