/*
 * hf_config.c - config.json <-> GGUF hyperparameters, tensor names and the
 * Q/K row permutation (formats.md §2.2, §8.1-8.5).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int
parse_arch(struct hf_config *c, const json_t *root, struct diag *d)
{
    static const struct {
        const char *hf;
        enum hf_arch arch;
    } archs[] = {
        {"LlamaForCausalLM", HF_ARCH_LLAMA},
        {"LLaMAForCausalLM", HF_ARCH_LLAMA},
        {"MistralForCausalLM", HF_ARCH_LLAMA},
        {"Qwen2ForCausalLM", HF_ARCH_QWEN2},
    };
    const json_t *a = member(root, "architectures");
    const char *name = NULL, *mt = NULL;
    size_t i;

    if (a) {
        if (!json_is_array(a) || json_array_size(a) == 0)
            return diag_set(d, ST_FORMAT, CFG ": 'architectures' is not a non-empty array");
        if (!json_is_string(json_array_get(a, 0)))
            return diag_set(d, ST_FORMAT, CFG ": 'architectures[0]' is not a string");
        name = json_string_value(json_array_get(a, 0));
        for (i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
            if (!strcmp(name, archs[i].hf))
                break;
        if (i == sizeof(archs) / sizeof(archs[0]))
            return diag_set(d, ST_FORMAT, CFG ": unsupported architecture '%.64s'", name);
        c->arch = archs[i].arch;
        snprintf(c->hf_arch, sizeof(c->hf_arch), "%s", name);
        return 0;
    }
    if (json_obj_str(root, "model_type", &mt, d) < 0)
        return diag_set(d, ST_FORMAT, CFG ": 'model_type' is not a string");
    if (!mt)
        return diag_set(d, ST_FORMAT, CFG ": neither 'architectures' nor 'model_type' is given");
    if (!strcmp(mt, "llama") || !strcmp(mt, "mistral")) {
        c->arch = HF_ARCH_LLAMA;
        snprintf(c->hf_arch, sizeof(c->hf_arch), "%s",
                 mt[0] == 'l' ? "LlamaForCausalLM" : "MistralForCausalLM");
    } else if (!strcmp(mt, "qwen2")) {
        c->arch = HF_ARCH_QWEN2;
        snprintf(c->hf_arch, sizeof(c->hf_arch), "Qwen2ForCausalLM");
    } else {
        return diag_set(d, ST_FORMAT, CFG ": unsupported architecture (model_type '%.64s')", mt);
    }
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

int
hf_config_from_json(struct hf_config *c, const json_t *root, struct diag *d)
{
    static const char *const k_ctx[] = {"max_position_embeddings", "n_ctx", "n_positions",
                                        "max_length", "max_sequence_length", "model_max_length",
                                        NULL};
    static const char *const k_embd[] = {"hidden_size", "n_embd", "dim", NULL};
    static const char *const k_layer[] = {"num_hidden_layers", "n_layers", "n_layer",
                                          "num_layers", NULL};
    static const char *const k_ff[] = {"intermediate_size", "n_inner", "hidden_dim", NULL};
    static const char *const k_head[] = {"num_attention_heads", "n_head", "n_heads", NULL};
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_hd[] = {"head_dim", NULL};
    static const char *const k_vocab[] = {"vocab_size", NULL};
    const char *dt = NULL;
    int rc, i;

    memset(c, 0, sizeof(*c));
    for (i = 0; i < HF_SPECIAL_COUNT; i++)
        c->special[i] = -1;
    if (!json_is_object(root))
        return diag_set(d, ST_FORMAT, CFG ": not a JSON object");
    if ((rc = parse_arch(c, root, d)) < 0)
        return rc;
    c->arch_name = c->arch == HF_ARCH_QWEN2 ? "qwen2" : "llama";
    c->permute_qk = c->arch == HF_ARCH_LLAMA;
    c->attn_bias = c->arch == HF_ARCH_QWEN2;

#define REQ(keys, lo, hi, dst) do { \
        rc = cfg_int(root, keys, lo, hi, &dst, d); \
        if (rc < 0) return rc; \
        if (rc == 1) return diag_set(d, ST_FORMAT, CFG ": '%s' is missing", keys[0]); \
    } while (0)

    REQ(k_embd, 1, HF_MAX_DIM, c->n_embd);
    REQ(k_layer, 1, HF_MAX_LAYERS, c->n_layer);
    REQ(k_ff, 1, HF_MAX_DIM, c->n_ff);
    REQ(k_head, 1, HF_MAX_DIM, c->n_head);
#undef REQ
    rc = cfg_int(root, k_kv, 1, HF_MAX_DIM, &c->n_head_kv, d);
    if (rc < 0)
        return rc;
    c->has_n_head_kv = rc == 0;
    if (rc == 1)
        c->n_head_kv = c->n_head;
    if (c->n_head_kv > c->n_head || c->n_head % c->n_head_kv)
        return diag_set(d, ST_FORMAT,
                        CFG ": 'num_key_value_heads' (%lld) does not divide "
                        "'num_attention_heads' (%lld)",
                        (long long)c->n_head_kv, (long long)c->n_head);
    rc = cfg_int(root, k_hd, 2, HF_MAX_DIM, &c->head_dim, d);
    if (rc < 0)
        return rc;
    c->has_head_dim = rc == 0;
    if (rc == 1) {
        if (c->n_embd % c->n_head)
            return diag_set(d, ST_FORMAT,
                            CFG ": 'hidden_size' (%lld) is not a multiple of "
                            "'num_attention_heads' (%lld)",
                            (long long)c->n_embd, (long long)c->n_head);
        c->head_dim = c->n_embd / c->n_head;
    }
    if (c->head_dim % 2)
        return diag_set(d, ST_FORMAT, CFG ": head dimension %lld is odd",
                        (long long)c->head_dim);
    if (c->n_head * c->head_dim > HF_MAX_DIM * 4)
        return diag_set(d, ST_FORMAT, CFG ": attention width %lld is too large",
                        (long long)(c->n_head * c->head_dim));

    rc = cfg_int(root, k_ctx, 1, UINT32_MAX, &c->n_ctx, d);
    if (rc < 0)
        return rc;
    if (rc == 1)   /* the transformers defaults the converter would see */
        c->n_ctx = c->arch == HF_ARCH_QWEN2 ? 32768
                 : !strcmp(c->hf_arch, "MistralForCausalLM") ? 131072 : 2048;
    rc = cfg_int(root, k_vocab, 1, HF_MAX_VOCAB, &c->n_vocab, d);
    if (rc < 0)
        return rc;
    if (rc == 1)
        c->n_vocab = 0;

    c->rope_theta = 10000.0;
    rc = cfg_num(root, "rope_theta", "rope_theta", 1e-3, 1e12, &c->rope_theta, d);
    if (rc < 0)
        return rc;
    c->has_rope_theta = rc == 0;
    c->rms_eps = 1e-6;
    rc = cfg_num(root, "rms_norm_eps", "rms_norm_eps", 1e-30, 1.0, &c->rms_eps, d);
    if (rc < 0)
        return rc;
    if ((rc = cfg_bool(root, "tie_word_embeddings", &c->tie_word_embeddings, d)) < 0)
        return rc;
    if (c->arch == HF_ARCH_LLAMA &&
        (rc = cfg_bool(root, "attention_bias", &c->attn_bias, d)) < 0)
        return rc;
    if ((rc = parse_rope(c, root, d)) < 0)
        return rc;

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

static int
set_u32(struct gguf *g, const char *arch, const char *key, int64_t v)
{
    char k[128];

    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return gguf_set_u32(g, k, (uint32_t)v);
}

static int
set_f32(struct gguf *g, const char *arch, const char *key, double v)
{
    char k[128];

    snprintf(k, sizeof(k), "%s.%s", arch, key);
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
    rc |= set_u32(g, a, "block_count", c->n_layer);
    if (c->n_ctx > 0)
        rc |= set_u32(g, a, "context_length", c->n_ctx);
    rc |= set_u32(g, a, "embedding_length", c->n_embd);
    rc |= set_u32(g, a, "feed_forward_length", c->n_ff);
    rc |= set_u32(g, a, "attention.head_count", c->n_head);
    rc |= set_u32(g, a, "attention.head_count_kv", c->n_head_kv);
    if (c->rope.type == HF_ROPE_LINEAR || c->rope.type == HF_ROPE_YARN) {
        snprintf(k, sizeof(k), "%s.rope.scaling.type", a);
        rc |= gguf_set_str(g, k, c->rope.type == HF_ROPE_LINEAR ? "linear" : "yarn");
        rc |= set_f32(g, a, "rope.scaling.factor", c->rope.factor);
    }
    if (c->rope.type == HF_ROPE_YARN) {
        rc |= set_u32(g, a, "rope.scaling.original_context_length", c->rope.orig_ctx);
        if (!isnan(c->rope.yarn_ext_factor))
            rc |= set_f32(g, a, "rope.scaling.yarn_ext_factor", c->rope.yarn_ext_factor);
        if (!isnan(c->rope.yarn_attn_factor))
            rc |= set_f32(g, a, "rope.scaling.yarn_attn_factor", c->rope.yarn_attn_factor);
        if (!isnan(c->rope.yarn_beta_fast))
            rc |= set_f32(g, a, "rope.scaling.yarn_beta_fast", c->rope.yarn_beta_fast);
        if (!isnan(c->rope.yarn_beta_slow))
            rc |= set_f32(g, a, "rope.scaling.yarn_beta_slow", c->rope.yarn_beta_slow);
    }
    if (c->has_rope_theta)
        rc |= set_f32(g, a, "rope.freq_base", c->rope_theta);
    rc |= set_f32(g, a, "attention.layer_norm_rms_epsilon", c->rms_eps);
    if (c->has_head_dim) {
        rc |= set_u32(g, a, "attention.key_length", c->head_dim);
        rc |= set_u32(g, a, "attention.value_length", c->head_dim);
    }
    rc |= gguf_set_u32(g, "general.file_type", file_type);
    if (c->arch == HF_ARCH_LLAMA) {
        if (c->n_vocab > 0)
            rc |= set_u32(g, a, "vocab_size", c->n_vocab);
        rc |= set_u32(g, a, "rope.dimension_count", c->head_dim);
    }
    rc |= gguf_set_u32(g, "general.quantization_version", 2);
    if (rc)
        return diag_set(d, ST_NOMEM, "out of memory writing GGUF metadata");
    return 0;
}

/* ---- GGUF -> struct hf_config ---- */

/* A u32 key that may also be an array of identical per-layer values.
 * 1 absent, 0 found, -ST_FORMAT. */
static int
gg_uint(const struct gguf *g, const char *arch, const char *key, int64_t lo, int64_t hi,
        int64_t *out, struct diag *d)
{
    char k[128];
    const struct gguf_kv *kv;
    uint64_t u;
    int64_t v, first = 0;
    uint64_t i;

    snprintf(k, sizeof(k), "%s.%s", arch, key);
    kv = gguf_get(g, k);
    if (!kv)
        return 1;
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->n == 0)
            return diag_set(d, ST_FORMAT, "'%s' is an empty array", k);
        for (i = 0; i < kv->n; i++) {
            if (!gguf_arr_int(kv, i, &v))
                return diag_set(d, ST_FORMAT, "'%s' is not an integer array", k);
            if (i == 0)
                first = v;
            else if (v != first)
                return diag_set(d, ST_FORMAT,
                                "'%s' differs between layers, which HF llama cannot express", k);
        }
        v = first;
    } else {
        int rc = gguf_get_uint(g, k, &u, d);
        if (rc < 0)
            return rc;
        if (u > INT64_MAX)
            return diag_set(d, ST_FORMAT, "'%s' is out of range", k);
        v = (int64_t)u;
    }
    if (v < lo || v > hi)
        return diag_set(d, ST_FORMAT, "'%s' = %lld is out of range", k, (long long)v);
    *out = v;
    return 0;
}

static int
gg_float(const struct gguf *g, const char *arch, const char *key, double *out, struct diag *d)
{
    char k[128];

    snprintf(k, sizeof(k), "%s.%s", arch, key);
    int rc = gguf_get_float(g, k, out, d);
    if (rc == 0 && !isfinite(*out))
        return diag_set(d, ST_FORMAT, "'%s' is not finite", k);
    return rc;
}

int
hf_config_from_gguf(struct hf_config *c, struct gguf *g, struct diag *d)
{
    const char *arch = NULL, *rt = NULL;
    const struct gguf_kv *kv;
    int64_t v, ti;
    char k[128];
    int rc, i;

    memset(c, 0, sizeof(*c));
    for (i = 0; i < HF_SPECIAL_COUNT; i++)
        c->special[i] = -1;
    c->rope.yarn_ext_factor = c->rope.yarn_attn_factor = NAN;
    c->rope.yarn_beta_fast = c->rope.yarn_beta_slow = NAN;
    rc = gguf_get_str(g, "general.architecture", &arch, d);
    if (rc < 0)
        return rc;
    if (rc == 1)
        return diag_set(d, ST_FORMAT, "'general.architecture' is missing");
    if (!strcmp(arch, "llama")) {
        c->arch = HF_ARCH_LLAMA;
        c->arch_name = "llama";
        snprintf(c->hf_arch, sizeof(c->hf_arch), "LlamaForCausalLM");
    } else if (!strcmp(arch, "qwen2")) {
        c->arch = HF_ARCH_QWEN2;
        c->arch_name = "qwen2";
        snprintf(c->hf_arch, sizeof(c->hf_arch), "Qwen2ForCausalLM");
    } else {
        return diag_set(d, ST_FORMAT, "architecture '%.64s' cannot be written as a HF llama model",
                        arch);
    }
    arch = c->arch_name;
    c->permute_qk = c->arch == HF_ARCH_LLAMA;

#define REQ(key, lo, hi, dst) do { \
        rc = gg_uint(g, arch, key, lo, hi, &dst, d); \
        if (rc < 0) return rc; \
        if (rc == 1) return diag_set(d, ST_FORMAT, "'%s.%s' is missing", arch, key); \
    } while (0)

    REQ("block_count", 1, HF_MAX_LAYERS, c->n_layer);
    REQ("context_length", 1, UINT32_MAX, c->n_ctx);
    REQ("embedding_length", 1, HF_MAX_DIM, c->n_embd);
    REQ("feed_forward_length", 1, HF_MAX_DIM, c->n_ff);
    REQ("attention.head_count", 1, HF_MAX_DIM, c->n_head);
#undef REQ
    rc = gg_uint(g, arch, "attention.head_count_kv", 1, HF_MAX_DIM, &c->n_head_kv, d);
    if (rc < 0)
        return rc;
    c->has_n_head_kv = rc == 0;
    if (rc == 1)
        c->n_head_kv = c->n_head;
    if (c->n_head_kv > c->n_head || c->n_head % c->n_head_kv)
        return diag_set(d, ST_FORMAT, "head_count_kv %lld does not divide head_count %lld",
                        (long long)c->n_head_kv, (long long)c->n_head);
    rc = gg_uint(g, arch, "expert_count", 0, UINT32_MAX, &v, d);
    if (rc < 0)
        return rc;
    if (rc == 0 && v > 0)
        return diag_set(d, ST_FORMAT, "mixture-of-experts models are not supported");

    rc = gg_uint(g, arch, "attention.key_length", 2, HF_MAX_DIM, &c->head_dim, d);
    if (rc < 0)
        return rc;
    c->has_head_dim = rc == 0;
    if (rc == 1) {
        if (c->n_embd % c->n_head)
            return diag_set(d, ST_FORMAT, "embedding_length is not a multiple of head_count");
        c->head_dim = c->n_embd / c->n_head;
    }
    if (c->head_dim % 2)
        return diag_set(d, ST_FORMAT, "head dimension %lld is odd", (long long)c->head_dim);
    rc = gg_uint(g, arch, "attention.value_length", 1, HF_MAX_DIM, &v, d);
    if (rc < 0)
        return rc;
    if (rc == 0 && v != c->head_dim)
        return diag_set(d, ST_FORMAT, "value_length %lld != key_length %lld is not supported",
                        (long long)v, (long long)c->head_dim);
    rc = gg_uint(g, arch, "rope.dimension_count", 1, HF_MAX_DIM, &v, d);
    if (rc < 0)
        return rc;
    if (rc == 0 && v != c->head_dim)
        return diag_set(d, ST_FORMAT, "partial rotary (rope.dimension_count %lld, head dim %lld) "
                        "is not supported", (long long)v, (long long)c->head_dim);

    rc = gg_float(g, arch, "attention.layer_norm_rms_epsilon", &c->rms_eps, d);
    if (rc < 0)
        return rc;
    if (rc == 1)
        return diag_set(d, ST_FORMAT, "'%s.attention.layer_norm_rms_epsilon' is missing", arch);
    c->rope_theta = 10000.0;
    rc = gg_float(g, arch, "rope.freq_base", &c->rope_theta, d);
    if (rc < 0)
        return rc;
    c->has_rope_theta = rc == 0;

    snprintf(k, sizeof(k), "%s.rope.scaling.type", arch);
    rc = gguf_get_str(g, k, &rt, d);
    if (rc < 0)
        return rc;
    if (rc == 0 && strcmp(rt, "none")) {
        double f = 0;
        if (!strcmp(rt, "linear"))
            c->rope.type = HF_ROPE_LINEAR;
        else if (!strcmp(rt, "yarn"))
            c->rope.type = HF_ROPE_YARN;
        else
            return diag_set(d, ST_FORMAT, "rope scaling type '%.32s' is not supported", rt);
        rc = gg_float(g, arch, "rope.scaling.factor", &f, d);
        if (rc == 1)
            rc = gg_float(g, arch, "rope.scale_linear", &f, d);
        if (rc < 0)
            return rc;
        if (rc == 1 || f <= 0)
            return diag_set(d, ST_FORMAT, "rope scaling '%s' without a positive factor", rt);
        c->rope.factor = f;
        if (c->rope.type == HF_ROPE_YARN) {
            rc = gg_uint(g, arch, "rope.scaling.original_context_length", 1, UINT32_MAX,
                         &c->rope.orig_ctx, d);
            if (rc < 0)
                return rc;
            if (rc == 1)
                c->rope.orig_ctx = c->n_ctx;
            if ((rc = gg_float(g, arch, "rope.scaling.yarn_ext_factor",
                               &c->rope.yarn_ext_factor, d)) < 0 ||
                (rc = gg_float(g, arch, "rope.scaling.yarn_attn_factor",
                               &c->rope.yarn_attn_factor, d)) < 0 ||
                (rc = gg_float(g, arch, "rope.scaling.yarn_beta_fast",
                               &c->rope.yarn_beta_fast, d)) < 0 ||
                (rc = gg_float(g, arch, "rope.scaling.yarn_beta_slow",
                               &c->rope.yarn_beta_slow, d)) < 0)
                return rc;
        }
    }

    /* vocabulary size: the token list, else the embedding rows */
    kv = gguf_get(g, "tokenizer.ggml.tokens");
    ti = gguf_find_tensor(g, "token_embd.weight");
    if (kv && kv->type == GGUF_TYPE_ARRAY)
        c->n_vocab = (int64_t)kv->n;
    else if (ti >= 0)
        c->n_vocab = g->t[ti].ne[1];
    else if ((rc = gg_uint(g, arch, "vocab_size", 1, HF_MAX_VOCAB, &c->n_vocab, d)) < 0)
        return rc;
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

static int
jset(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

int
hf_config_to_json(const struct hf_config *c, const char *torch_dtype, json_t **out,
                  struct diag *d)
{
    json_t *o = json_object(), *rs = NULL;
    bool llama = c->arch != HF_ARCH_QWEN2;
    int rc = 0, i;

    *out = NULL;
    if (!o)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (!torch_dtype)
        torch_dtype = c->torch_dtype[0] ? c->torch_dtype : "float32";
    rc |= jset(o, "architectures", json_pack("[s]", llama ? "LlamaForCausalLM"
                                                          : "Qwen2ForCausalLM"));
    rc |= jset(o, "attention_bias", json_boolean(c->attn_bias));
    rc |= jset(o, "attention_dropout", json_real(0.0));
    for (i = 0; i < HF_SPECIAL_COUNT; i++) {
        char key[32];
        if (c->special[i] < 0)
            continue;
        snprintf(key, sizeof(key), "%s_token_id", special_names[i]);
        rc |= jset(o, key, json_integer(c->special[i]));
    }
    if (c->has_head_dim)
        rc |= jset(o, "head_dim", json_integer(c->head_dim));
    rc |= jset(o, "hidden_act", json_string("silu"));
    rc |= jset(o, "hidden_size", json_integer(c->n_embd));
    rc |= jset(o, "initializer_range", json_real(0.02));
    rc |= jset(o, "intermediate_size", json_integer(c->n_ff));
    rc |= jset(o, "max_position_embeddings", json_integer(c->n_ctx));
    if (llama)
        rc |= jset(o, "mlp_bias", json_false());
    rc |= jset(o, "model_type", json_string(llama ? "llama" : "qwen2"));
    rc |= jset(o, "num_attention_heads", json_integer(c->n_head));
    rc |= jset(o, "num_hidden_layers", json_integer(c->n_layer));
    rc |= jset(o, "num_key_value_heads", json_integer(c->n_head_kv));
    if (llama)
        rc |= jset(o, "pretraining_tp", json_integer(1));
    rc |= jset(o, "rms_norm_eps", json_f32(c->rms_eps));
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
        rc |= jset(o, "rope_theta", json_f32(c->rope_theta));
    rc |= jset(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    rc |= jset(o, "torch_dtype", json_string(torch_dtype));
    rc |= jset(o, "use_cache", json_true());
    if (!llama)
        rc |= jset(o, "use_sliding_window", json_false());
    if (c->n_vocab > 0)
        rc |= jset(o, "vocab_size", json_integer(c->n_vocab));
    if (rc) {
        json_decref(o);
        return diag_set(d, ST_NOMEM, "cannot build config.json");
    }
    *out = o;
    return 0;
}

/* ---- tensor names ---- */

static const struct {
    const char *hf, *gguf;
    enum hf_perm perm;
} layer_map[] = {
    {"input_layernorm.weight", "attn_norm.weight", HF_PERM_NONE},
    {"self_attn.q_proj.weight", "attn_q.weight", HF_PERM_Q},
    {"self_attn.q_proj.bias", "attn_q.bias", HF_PERM_Q},
    {"self_attn.k_proj.weight", "attn_k.weight", HF_PERM_K},
    {"self_attn.k_proj.bias", "attn_k.bias", HF_PERM_K},
    {"self_attn.v_proj.weight", "attn_v.weight", HF_PERM_NONE},
    {"self_attn.v_proj.bias", "attn_v.bias", HF_PERM_NONE},
    {"self_attn.o_proj.weight", "attn_output.weight", HF_PERM_NONE},
    {"self_attn.o_proj.bias", "attn_output.bias", HF_PERM_NONE},
    {"post_attention_layernorm.weight", "ffn_norm.weight", HF_PERM_NONE},
    {"mlp.gate_proj.weight", "ffn_gate.weight", HF_PERM_NONE},
    {"mlp.gate_proj.bias", "ffn_gate.bias", HF_PERM_NONE},
    {"mlp.up_proj.weight", "ffn_up.weight", HF_PERM_NONE},
    {"mlp.up_proj.bias", "ffn_up.bias", HF_PERM_NONE},
    {"mlp.down_proj.weight", "ffn_down.weight", HF_PERM_NONE},
    {"mlp.down_proj.bias", "ffn_down.bias", HF_PERM_NONE},
};

static const struct {
    const char *hf, *gguf;
} global_map[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

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

static void
fill_perm(const struct hf_config *c, enum hf_perm perm, struct hf_tensor_map *m)
{
    m->perm = c->permute_qk ? perm : HF_PERM_NONE;
    m->perm_heads = m->perm == HF_PERM_Q ? c->n_head : m->perm == HF_PERM_K ? c->n_head_kv : 0;
}

int
hf_name_to_gguf(const struct hf_config *c, const char *hf_name, struct hf_tensor_map *m,
                struct diag *d)
{
    static const char prefix[] = "model.layers.";
    const char *p;
    size_t i;
    int32_t layer;

    memset(m, 0, sizeof(*m));
    m->layer = -1;
    if (ends_with(hf_name, ".rotary_emb.inv_freq") || ends_with(hf_name, ".attention.masked_bias") ||
        ends_with(hf_name, ".attention.bias"))
        return 0;
    for (i = 0; i < sizeof(global_map) / sizeof(global_map[0]); i++)
        if (!strcmp(hf_name, global_map[i].hf)) {
            snprintf(m->name, sizeof(m->name), "%s", global_map[i].gguf);
            return 1;
        }
    if (strncmp(hf_name, prefix, sizeof(prefix) - 1))
        return diag_set(d, ST_FORMAT, "unknown tensor '%.128s'", hf_name);
    p = hf_name + sizeof(prefix) - 1;
    layer = parse_layer(&p);
    if (layer < 0 || layer >= c->n_layer)
        return diag_set(d, ST_FORMAT, "tensor '%.128s': bad layer index", hf_name);
    for (i = 0; i < sizeof(layer_map) / sizeof(layer_map[0]); i++)
        if (!strcmp(p, layer_map[i].hf)) {
            snprintf(m->name, sizeof(m->name), "blk.%d.%s", (int)layer, layer_map[i].gguf);
            m->layer = layer;
            fill_perm(c, layer_map[i].perm, m);
            return 1;
        }
    return diag_set(d, ST_FORMAT, "unknown tensor '%.128s'", hf_name);
}

int
hf_name_from_gguf(const struct hf_config *c, const char *gguf_name, struct hf_tensor_map *m,
                  struct diag *d)
{
    static const char prefix[] = "blk.";
    const char *p;
    size_t i;
    int32_t layer;

    memset(m, 0, sizeof(*m));
    m->layer = -1;
    if (!strcmp(gguf_name, "rope_freqs.weight"))
        return 0;
    for (i = 0; i < sizeof(global_map) / sizeof(global_map[0]); i++)
        if (!strcmp(gguf_name, global_map[i].gguf)) {
            snprintf(m->name, sizeof(m->name), "%s", global_map[i].hf);
            return 1;
        }
    if (strncmp(gguf_name, prefix, sizeof(prefix) - 1))
        return diag_set(d, ST_FORMAT, "tensor '%.128s' has no HF llama name", gguf_name);
    p = gguf_name + sizeof(prefix) - 1;
    layer = parse_layer(&p);
    if (layer < 0 || layer >= c->n_layer)
        return diag_set(d, ST_FORMAT, "tensor '%.128s': bad layer index", gguf_name);
    for (i = 0; i < sizeof(layer_map) / sizeof(layer_map[0]); i++)
        if (!strcmp(p, layer_map[i].gguf)) {
            snprintf(m->name, sizeof(m->name), "model.layers.%d.%s", (int)layer,
                     layer_map[i].hf);
            m->layer = layer;
            fill_perm(c, layer_map[i].perm, m);
            return 1;
        }
    return diag_set(d, ST_FORMAT, "tensor '%.128s' has no HF llama name", gguf_name);
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
