/*
 * eagle_hf.c - EAGLE-1 heads as Hugging Face directories (eagle_hf.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle_hf.h"
#include "eagle_target.h"
#include "gguf.h"
#include "hf.h"
#include "json.h"
#include "model.h"
#include "qtypes.h"
#include "xio.h"

#define META "llmkit.eagle."
#define SPEC_VERSION "0.9.0"    /* the speculators release whose layout is written */

/* EAGLE-1's HF names in the order of enum eagle_tensor (cnets.py Model's
 * module tree) */
static const char *const hf1_names[EAGLE_N_TENSORS] = {
    "fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight", "layers.0.post_attention_layernorm.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
};

/* EAGLE-3's in the order of enum eagle3_tensor, per layout: the EAGLE
 * authors' (cnets.py Model: midlayer.*) and speculators' (Eagle3DraftModel:
 * layers.0.*) */
#define L3(pre) { "fc.weight", pre "input_layernorm.weight", pre "hidden_norm.weight",        \
                  pre "self_attn.q_proj.weight", pre "self_attn.k_proj.weight",                \
                  pre "self_attn.v_proj.weight", pre "self_attn.o_proj.weight",                \
                  pre "post_attention_layernorm.weight", pre "mlp.gate_proj.weight",           \
                  pre "mlp.up_proj.weight", pre "mlp.down_proj.weight", "norm.weight",         \
                  "lm_head.weight" }
static const char *const hf3_names[2][EAGLE3_N_TENSORS] = { L3("midlayer."), L3("layers.0.") };
#undef L3

static const char *const layout_names[2] = { "eagle", "speculators" };

static const char *const *
names_of(int arch, int layout)
{
    return arch == EAGLE_ARCH_3 ? hf3_names[layout] : hf1_names;
}

int
eagle_hf_layout_parse(const char *name)
{
    for (int i = 0; i < 2; i++)
        if (!strcmp(name, layout_names[i]))
            return i;
    return -1;
}

static bool
is_eagle3_tensor(const char *name)
{
    return !strncmp(name, "midlayer.", 9) || !strcmp(name, "d2t") || !strcmp(name, "t2d") ||
           !strcmp(name, "norm.weight") || !strcmp(name, "lm_head.weight") ||
           !strcmp(name, "layers.0.hidden_norm.weight");
}

/* the q (n_head heads) and k (n_head_kv) rows of an interleaved-RoPE head
 * are permuted between the GGUF and the HF order: the number of heads of
 * tensor i, or 0 when it is not permuted */
static int64_t
perm_heads(const struct eagle_config *c, int i)
{
    bool e3 = c->arch == EAGLE_ARCH_3;

    if (c->rope.style != ROPE_NORM)
        return 0;
    return i == (e3 ? EAGLE3_WQ : EAGLE_WQ) ? c->n_head
           : i == (e3 ? EAGLE3_WK : EAGLE_WK) ? c->n_head_kv : 0;
}

int
eagle_hf_detect(const char *dir, struct diag *d)
{
    char *st = path_join(dir, SFT_SINGLE_NAME), *ix = path_join(dir, SFT_INDEX_NAME);
    char *bin = path_join(dir, "pytorch_model.bin");
    int rc = 0;

    if (!st || !ix || !bin) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
    } else if (path_exists(st)) {
        struct sft_file f;
        if ((rc = sft_open(&f, st, d)) < 0) {
            diag_prefix(d, "'%s'", SFT_SINGLE_NAME);
        } else {
            rc = sft_find(&f, "fc.weight") != NULL;
            sft_close(&f);
        }
    } else if (path_exists(ix)) {
        char *buf;
        size_t len;
        struct sft_index sx;
        if ((rc = read_file_all(ix, SFT_MAX_INDEX, &buf, &len, d)) == 0) {
            if ((rc = sft_index_parse(&sx, buf, len, d)) == 0) {
                for (size_t i = 0; i < sx.n && !rc; i++)
                    rc = !strcmp(sx.e[i].name, "fc.weight");
                sft_index_release(&sx);
            }
            free(buf);
        }
        if (rc < 0)
            diag_prefix(d, "'%s'", SFT_INDEX_NAME);
    } else if (path_exists(bin)) {
        rc = diag_set(d, ST_FORMAT, "'pytorch_model.bin': pickled PyTorch checkpoints are not "
                      "read (save the weights as model.safetensors)");
    }
    free(st);
    free(ix);
    free(bin);
    return rc;
}

/* ---- reading ---- */

static int
meta_u64(const struct sft_file *f, const char *key, uint64_t *out, struct diag *d)
{
    const char *v = sft_meta_get(f, key);
    char *end;

    *out = 0;
    if (!v)
        return 0;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || *v == '-')
        return diag_set(d, ST_FORMAT, "__metadata__ '%s': '%.32s' is not a count", key, v);
    *out = x;
    return 0;
}

static int
meta_str(const struct sft_file *f, const char *key, char *out, size_t cap, struct diag *d)
{
    const char *v = sft_meta_get(f, key);

    out[0] = 0;
    if (v && strlen(v) >= cap)
        return diag_set(d, ST_FORMAT, "__metadata__ '%s': longer than %zu bytes", key, cap - 1);
    if (v)
        memcpy(out, v, strlen(v) + 1);
    return 0;
}

/* "3,17,200" -> ascending ids below n_vocab */
static int
meta_ids(const struct sft_file *f, int64_t n_vocab, struct eagle_meta *meta, struct diag *d)
{
    const char *v = sft_meta_get(f, META "draft_vocab"), *p;
    int64_t n = 1;

    if (!v)
        return 0;
    for (p = v; *p; p++)
        n += *p == ',';
    if (n > n_vocab || !(meta->draft_ids = malloc((size_t)n * sizeof(int32_t))))
        return n > n_vocab ? diag_set(d, ST_FORMAT, "__metadata__ '" META "draft_vocab': more "
                                      "ids than the vocabulary") :
                             diag_set(d, ST_NOMEM, "out of memory");
    for (p = v, meta->n_draft = 0; meta->n_draft < n; meta->n_draft++) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (errno || end == p || *p < '0' || *p > '9' || x >= n_vocab ||
            (meta->n_draft > 0 && x <= meta->draft_ids[meta->n_draft - 1]) ||
            (*end != ',' && *end != 0) || (*end == 0) != (meta->n_draft == n - 1))
            return diag_set(d, ST_FORMAT, "__metadata__ '" META "draft_vocab': not ascending "
                            "ids in 0 to %lld", (long long)n_vocab - 1);
        meta->draft_ids[meta->n_draft] = (int32_t)x;
        p = end + 1;
    }
    return 0;
}

static bool
near(double a, double b)
{
    return fabs(a - b) <= 1e-5 * fabs(b);
}

/* what config.json says of the head beyond the base's shapes */
struct head_cfg {
    int arch, layout;
    bool bias;                  /* EAGLE-1: an FC bias */
    int64_t n_draft;            /* EAGLE-3 */
    int64_t feat_layer[3];
    bool has_feat;
};

/* EAGLE-3's keys: draft_vocab_size, target_hidden_size (the head's width
 * when given), eagle_aux_hidden_state_layer_ids */
static int
eagle3_keys(const json_t *root, int64_t hidden, int64_t n_vocab, struct head_cfg *hc,
            struct diag *d)
{
    const json_t *ids = json_object_get(root, "eagle_aux_hidden_state_layer_ids");
    int64_t th = hidden;
    int rc;

    if ((rc = json_obj_int(root, "draft_vocab_size", &hc->n_draft, d)) < 0 ||
        (rc = json_obj_int(root, "target_hidden_size", &th, d)) < 0) {
        diag_prefix(d, "config.json");
        return rc;
    }
    if (hc->n_draft < 1 || hc->n_draft > n_vocab)
        return diag_set(d, ST_FORMAT, "config.json: 'draft_vocab_size' is not 1 to the "
                        "vocabulary's %" PRId64, n_vocab);
    if (th != hidden)
        return diag_set(d, ST_FORMAT, "config.json: target_hidden_size %" PRId64 " is not "
                        "hidden_size %" PRId64 " (heads narrower than the target are not "
                        "supported)", th, hidden);
    if (!ids || json_is_null(ids))
        return 0;
    if (!json_is_array(ids) || json_array_size(ids) != 3)
        return diag_set(d, ST_FORMAT, "config.json: 'eagle_aux_hidden_state_layer_ids' is not "
                        "an array of 3 layers");
    for (size_t k = 0; k < 3; k++) {
        const json_t *v = json_array_get(ids, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 4096)
            return diag_set(d, ST_FORMAT, "config.json: 'eagle_aux_hidden_state_layer_ids': "
                            "not layer numbers");
        hc->feat_layer[k] = (int64_t)json_integer_value(v);
    }
    hc->has_feat = true;
    return 0;
}

/* which head and layout config.json root describes; *lc = the object
 * holding the llama layer's keys (a new reference) */
static int
head_kind(const json_t *root, struct head_cfg *hc, json_t **lc, struct diag *d)
{
    static const char *const flags[] = { "norm_before_residual", "norm_before_fc", "fc_norm",
                                         "norm_output" };
    const json_t *smt = json_object_get(root, "speculators_model_type"), *src = root;

    if (smt) {
        if (!json_is_string(smt) || strcmp(json_string_value(smt), "eagle3"))
            return diag_set(d, ST_FORMAT, "config.json: 'speculators_model_type' is not "
                            "\"eagle3\" (only EAGLE-3 speculators are read)");
        hc->arch = EAGLE_ARCH_3;
        hc->layout = EAGLE_HF_SPECULATORS;
        src = json_object_get(root, "transformer_layer_config");
        if (!json_is_object(src))
            return diag_set(d, ST_FORMAT, "config.json: 'transformer_layer_config' is not an "
                            "object");
        for (size_t k = 0; k < sizeof flags / sizeof *flags; k++) {
            const json_t *v = json_object_get(root, flags[k]);
            if (v && !json_is_false(v) && !json_is_null(v))
                return diag_set(d, ST_FORMAT, "config.json: '%s' is set: only the EAGLE "
                                "authors' layer is supported", flags[k]);
        }
    } else {
        hc->arch = json_object_get(root, "draft_vocab_size") ? EAGLE_ARCH_3 : EAGLE_ARCH_1;
        hc->layout = EAGLE_HF_EAGLE;
    }
    if (!(*lc = json_deep_copy(src)))
        return diag_set(d, ST_NOMEM, "out of memory");
    /* EAGLE-3 classes (LlamaForCausalLMEagle3) name no model we convert:
     * the layer is model_type's */
    if (hc->arch == EAGLE_ARCH_3)
        json_object_del(*lc, "architectures");
    return 0;
}

int
eagle_hf_layer_config(struct hf_config *c, const char *dir, struct diag *d)
{
    char *path = path_join(dir, "config.json");
    json_t *root = NULL, *lc = NULL;
    struct head_cfg hc;
    int rc;

    if (!path)
        return diag_set(d, ST_NOMEM, "out of memory");
    rc = json_load_path(path, (size_t)1 << 20, &root, d);
    free(path);
    if (rc < 0) {
        diag_prefix(d, "config.json");
        return rc;
    }
    memset(&hc, 0, sizeof hc);
    if ((rc = head_kind(root, &hc, &lc, d)) == 0 && hc.arch == EAGLE_ARCH_3 &&
        (rc = hf_config_from_json(c, lc, d)) == 0) {
        snprintf(c->hf_arch, sizeof c->hf_arch, "EAGLE-3 head (%s layout)",
                 layout_names[hc.layout]);
        rc = 1;
    }
    json_decref(lc);
    json_decref(root);
    return rc;
}

/* config.json against the base's configuration */
static int
check_config(const json_t *root, const struct eagle_config *b, struct head_cfg *hc,
             struct diag *d)
{
    struct hf_config c;
    json_t *lc = NULL;
    const json_t *jb = json_object_get(root, "bias");
    int rc;

    memset(hc, 0, sizeof *hc);
    if ((rc = head_kind(root, hc, &lc, d)) < 0)
        return rc;
    rc = hf_config_from_json(&c, lc, d);
    json_decref(lc);
    if (rc < 0)
        return rc;
    if (c.arch != HF_ARCH_LLAMA || c.n_layer != 1 || c.attn_bias)
        return diag_set(d, ST_FORMAT, "config.json: not an EAGLE-%d head (a llama layer, "
                        "num_hidden_layers 1, no attention bias)", hc->arch);
    if (hc->arch == EAGLE_ARCH_3 && (rc = eagle3_keys(root, c.n_embd, c.n_vocab, hc, d)) < 0)
        return rc;
    if (hc->arch == EAGLE_ARCH_1 && jb && !json_is_boolean(jb))
        return diag_set(d, ST_FORMAT, "config.json: 'bias' is not a boolean");
    hc->bias = hc->arch == EAGLE_ARCH_1 && (!jb || json_is_true(jb));
    double scale = c.rope.type == HF_ROPE_LINEAR ? c.rope.factor : 1.0;
    if (c.rope.type != HF_ROPE_NONE && c.rope.type != HF_ROPE_LINEAR)
        return diag_set(d, ST_FORMAT, "config.json: only linear rope_scaling is supported");
    if (c.n_embd != b->d || c.n_head != b->n_head || c.n_head_kv != b->n_head_kv ||
        c.head_dim != b->head_dim || c.n_ff != b->n_ff || c.n_vocab != b->n_vocab)
        return diag_set(d, ST_FORMAT, "config.json: the head (hidden %" PRId64 ", heads %" PRId64
                        "/%" PRId64 ", ff %" PRId64 ", vocab %" PRId64 ") does not fit the base "
                        "(hidden %" PRId64 ", heads %" PRId64 "/%" PRId64 ", ff %" PRId64
                        ", vocab %" PRId64 ")", c.n_embd, c.n_head, c.n_head_kv, c.n_ff,
                        c.n_vocab, b->d, b->n_head, b->n_head_kv, b->n_ff, b->n_vocab);
    if (!near(c.rms_eps, b->eps) || !near(c.rope_theta, b->rope.freq_base) ||
        !near(scale, 1.0 / b->rope.freq_scale) || b->rope.n_rot != b->head_dim)
        return diag_set(d, ST_FORMAT, "config.json: rms_norm_eps, rope_theta or rope_scaling "
                        "differ from the base's");
    return 0;
}

/* tensor i of the head from t (F32, F16 or BF16; shape checked), through
 * tmp (h->rows[i] * h->cols[i] floats) */
static int
get_tensor(struct eagle_head *h, int i, const struct sft_tensor *t, float *tmp, struct diag *d)
{
    int64_t n = h->rows[i] * h->cols[i], np = perm_heads(&h->c, i);
    bool vec = h->rows[i] == 1;
    enum ggml_type ty = t->dtype == SFT_F32 ? GGML_TYPE_F32 : t->dtype == SFT_F16 ? GGML_TYPE_F16
                        : t->dtype == SFT_BF16 ? GGML_TYPE_BF16 : GGML_TYPE_COUNT;

    if (ty == GGML_TYPE_COUNT || t->n_dims != (vec ? 1 : 2) ||
        t->shape[0] != (vec ? h->cols[i] : h->rows[i]) || (!vec && t->shape[1] != h->cols[i]))
        return diag_set(d, ST_FORMAT, "tensor '%s': not F32/F16/BF16 of shape [%" PRId64
                        "%s%" PRId64 "]", t->name, vec ? h->cols[i] : h->rows[i],
                        vec ? "" : ", ", vec ? (int64_t)0 : h->cols[i]);
    float *dst = np ? tmp : h->t[i];
    if (ty == GGML_TYPE_F32) {
        memcpy(dst, t->data, (size_t)n * sizeof(float));
    } else {
        /* the mapping need not be 2-aligned: widen from a copy */
        uint16_t *half = (uint16_t *)(tmp + (np ? n : 0));
        memcpy(half, t->data, (size_t)n * 2);
        qtype_get(ty)->to_float(half, dst, n);
    }
    if (np && hf_permute_rows(h->t[i], tmp, h->rows[i], (size_t)h->cols[i] * sizeof(float), np))
        return diag_set(d, ST_FORMAT, "tensor '%s': rows do not split into %" PRId64 " heads",
                        t->name, np);
    return 0;
}

/* EAGLE-3's draft vocabulary from d2t (I64 [n_draft]: target id = i +
 * d2t[i], ascending) and t2d (BOOL [n_vocab]: its set); both absent: the
 * whole vocabulary */
static int
vocab_maps(const struct sft_file *f, const struct eagle_config *c, struct eagle_meta *meta,
           struct diag *d)
{
    const struct sft_tensor *a = sft_find(f, "d2t"), *b = sft_find(f, "t2d");

    if (!a && !b) {
        if (c->n_draft != c->n_vocab)
            return diag_set(d, ST_FORMAT, "tensors 'd2t' and 't2d' missing (draft_vocab_size "
                            "%" PRId64 " of %" PRId64 " tokens)", c->n_draft, c->n_vocab);
        return 0;
    }
    if (!a || !b)
        return diag_set(d, ST_FORMAT, "tensor '%s' missing ('d2t' and 't2d' go together)",
                        a ? "t2d" : "d2t");
    if (a->dtype != SFT_I64 || a->n_dims != 1 || a->shape[0] != c->n_draft)
        return diag_set(d, ST_FORMAT, "tensor 'd2t': not I64 of shape [%" PRId64 "]",
                        c->n_draft);
    if (b->dtype != SFT_BOOL || b->n_dims != 1 || b->shape[0] != c->n_vocab)
        return diag_set(d, ST_FORMAT, "tensor 't2d': not BOOL of shape [%" PRId64 "]",
                        c->n_vocab);
    if (!(meta->draft_ids = malloc((size_t)c->n_draft * sizeof(int32_t))))
        return diag_set(d, ST_NOMEM, "out of memory");
    meta->n_draft = c->n_draft;
    for (int64_t i = 0; i < c->n_draft; i++) {
        int64_t off;
        memcpy(&off, (const char *)a->data + i * 8, 8);
        if (off < -i || off >= c->n_vocab - i)
            return diag_set(d, ST_FORMAT, "tensor 'd2t': draft id %" PRId64 " maps outside the "
                            "vocabulary (0 to %" PRId64 ")", i, c->n_vocab - 1);
        meta->draft_ids[i] = (int32_t)(i + off);
        if (i > 0 && meta->draft_ids[i] <= meta->draft_ids[i - 1])
            return diag_set(d, ST_FORMAT, "tensor 'd2t': target ids not ascending at draft id "
                            "%" PRId64, i);
    }
    const uint8_t *set = b->data;
    for (int64_t j = 0, k = 0; j < c->n_vocab; j++) {
        bool in = k < c->n_draft && meta->draft_ids[k] == j;
        k += in;
        if (set[j] != in)
            return diag_set(d, ST_FORMAT, "tensor 't2d': token %" PRId64 " is %s but d2t says "
                            "otherwise", j, set[j] ? "marked" : "not marked");
    }
    return 0;
}

/* the tensor names of f against the head's: each known, the embedding the
 * base's */
static int
check_names(const struct sft_file *f, const struct eagle_head *h, const struct head_cfg *hc,
            const struct eagle_config *base, struct diag *d)
{
    const char *const *names = names_of(hc->arch, hc->layout);
    bool e3 = hc->arch == EAGLE_ARCH_3;

    for (size_t j = 0; j < f->n_tensors; j++) {
        const char *name = f->t[j].name;
        int i = 0;
        while (i < h->n_tensors && strcmp(name, names[i]))
            i++;
        if (!strcmp(name, "embed_tokens.weight")) {
            if (f->t[j].n_dims != 2 || f->t[j].shape[0] != base->n_vocab ||
                f->t[j].shape[1] != base->d)
                return diag_set(d, ST_FORMAT, "tensor 'embed_tokens.weight': not the base's "
                                "embedding [%" PRId64 ", %" PRId64 "]", base->n_vocab, base->d);
        } else if (i == h->n_tensors && e3 && (!strcmp(name, "d2t") || !strcmp(name, "t2d"))) {
            continue;
        } else if (i == h->n_tensors && !e3 && is_eagle3_tensor(name)) {
            return diag_set(d, ST_FORMAT, "tensor '%s': an EAGLE-3 tensor, but config.json has "
                            "no draft_vocab_size", name);
        } else if (i == h->n_tensors) {
            return diag_set(d, ST_FORMAT, "tensor '%s': not part of an EAGLE-%d head (%s "
                            "layout)", name, hc->arch, layout_names[hc->layout]);
        } else if (!e3 && i == EAGLE_FC_B && !hc->bias) {
            return diag_set(d, ST_FORMAT, "tensor 'fc.bias' present but config.json has "
                            "\"bias\": false");
        }
    }
    return 0;
}

int
eagle_hf_head_read(struct eagle_head *h, struct eagle_meta *meta, const char *cfg, size_t len,
                   const struct sft_file *f, const struct eagle_config *base, struct diag *d)
{
    struct head_cfg hc;
    struct eagle_config c = *base;
    json_t *root = NULL;
    float *tmp = NULL;
    int rc;

    memset(h, 0, sizeof *h);
    memset(meta, 0, sizeof *meta);
    if ((rc = json_load_mem(cfg, len, &root, d)) < 0) {
        diag_prefix(d, "config.json");
        return rc;
    }
    if ((rc = check_config(root, base, &hc, d)) < 0)
        goto out;
    c.arch = hc.arch;
    if (hc.arch == EAGLE_ARCH_3) {
        c.n_draft = hc.n_draft;
        for (int k = 0; k < 3 && hc.has_feat; k++)
            c.feat_layer[k] = hc.feat_layer[k];
    }
    if ((rc = eagle_head_init(h, &c, 0)) < 0) {
        rc = rc == -ST_NOMEM ? diag_set(d, ST_NOMEM, "out of memory")
                             : diag_set(d, ST_FORMAT, "EAGLE head shape out of range");
        goto out;
    }
    if ((rc = check_names(f, h, &hc, base, d)) < 0)
        goto out;
    int64_t most = 0;
    for (int i = 0; i < h->n_tensors; i++)
        most = h->rows[i] * h->cols[i] > most ? h->rows[i] * h->cols[i] : most;
    if (!(tmp = malloc((size_t)(2 * most) * sizeof(float)))) {   /* floats + a half copy */
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    const char *const *names = names_of(hc.arch, hc.layout);
    for (int i = 0; i < h->n_tensors; i++) {
        const struct sft_tensor *t = sft_find(f, names[i]);
        if (!t && hc.arch == EAGLE_ARCH_1 && i == EAGLE_FC_B && !hc.bias) {
            memset(h->t[i], 0, (size_t)h->c.d * sizeof(float));
            continue;
        }
        if (!t) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s' missing", names[i]);
            goto out;
        }
        if ((rc = get_tensor(h, i, t, tmp, d)) < 0)
            goto out;
    }
    for (int64_t j = 0; j < h->n_param; j++)
        if (!isfinite(h->param[j])) {
            rc = diag_set(d, ST_FORMAT, "non-finite weight in the head");
            goto out;
        }
    if ((rc = meta_str(f, META "base.tensor_sha256", meta->base_sha256,
                       sizeof meta->base_sha256, d)) < 0 ||
        (rc = meta_str(f, META "base.name", meta->base_name, sizeof meta->base_name, d)) < 0 ||
        (rc = meta_str(f, META "train.data_sha256", meta->data_sha256,
                       sizeof meta->data_sha256, d)) < 0 ||
        (rc = meta_u64(f, META "train.steps", &meta->steps, d)) < 0 ||
        (rc = meta_u64(f, META "train.tokens", &meta->tokens, d)) < 0 ||
        (rc = hc.arch == EAGLE_ARCH_3 ? vocab_maps(f, &h->c, meta, d)
                                      : meta_ids(f, base->n_vocab, meta, d)) < 0)
        goto out;
    rc = 0;
out:
    if (rc < 0) {
        eagle_head_release(h);
        eagle_meta_release(meta);
    }
    free(tmp);
    json_decref(root);
    return rc;
}

/* ---- writing ---- */

/* o[key] = v (stolen); nonzero when out of memory */
static int
jput(json_t *o, const char *key, json_t *v)
{
    return !v || json_object_set_new(o, key, v);
}

/* the three feature layers as a JSON array */
static json_t *
feat_layers(const struct eagle_config *c)
{
    return json_pack("[I, I, I]", (json_int_t)c->feat_layer[0], (json_int_t)c->feat_layer[1],
                     (json_int_t)c->feat_layer[2]);
}

/* speculators' config.json (Eagle3SpeculatorConfig) around the layer's
 * LlamaConfig lc (stolen) */
static json_t *
speculators_json(const struct eagle_config *c, json_t *lc, const char *dtype,
                 const char *verifier)
{
    json_t *o = json_object();
    int rc = 0;

    if (!o) {
        json_decref(lc);
        return NULL;
    }
    json_object_del(lc, "architectures");
    rc |= jput(o, "architectures", json_pack("[s]", "Eagle3Speculator"));
    rc |= jput(o, "draft_vocab_size", json_integer(c->n_draft));
    rc |= jput(o, "eagle_aux_hidden_state_layer_ids", feat_layers(c));
    rc |= jput(o, "embed_requires_grad", json_false());
    rc |= jput(o, "fc_norm", json_false());
    rc |= jput(o, "norm_before_fc", json_false());
    rc |= jput(o, "norm_before_residual", json_false());
    rc |= jput(o, "norm_output", json_false());
    /* one greedy proposal method; the verifier is a GGUF here: its HF name
     * only when given */
    rc |= jput(o, "speculators_config", json_pack(
        "{s:s, s:[{s:s, s:i, s:i, s:f}], s:s, s:{s:o, s:[s]}}", "algorithm", "eagle3",
        "proposal_methods", "proposal_type", "greedy", "speculative_tokens", 3,
        "verifier_accept_k", 1, "accept_tolerance", 0.0, "default_proposal_method", "greedy",
        "verifier", "name_or_path", verifier ? json_string(verifier) : json_null(),
        "architectures", "LlamaForCausalLM"));
    rc |= jput(o, "speculators_model_type", json_string("eagle3"));
    rc |= jput(o, "speculators_version", json_string(SPEC_VERSION));
    rc |= jput(o, "target_hidden_size", json_null());
    rc |= jput(o, "torch_dtype", json_string(dtype));
    rc |= jput(o, "transformer_layer_config", lc);
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* config.json of head c in layout (eagle_hf.h) */
static int
config_json(const struct eagle_config *c, int layout, const char *verifier, bool bias,
            const char *dtype, json_t **out, struct diag *d)
{
    struct hf_config hc;
    int rc = 0;

    memset(&hc, 0, sizeof hc);
    hc.arch = HF_ARCH_LLAMA;
    hc.arch_name = "llama";
    hc.n_vocab = c->n_vocab;
    hc.n_ctx = 2048;
    hc.n_embd = c->d;
    hc.n_layer = 1;
    hc.n_ff = c->n_ff;
    hc.n_head = c->n_head;
    hc.n_head_kv = c->n_head_kv;
    hc.has_n_head_kv = true;
    hc.head_dim = c->head_dim;
    hc.has_head_dim = c->head_dim * c->n_head != c->d;
    hc.rope_theta = c->rope.freq_base;
    hc.has_rope_theta = true;
    hc.rms_eps = c->eps;
    if (c->rope.freq_scale != 1.0f) {
        hc.rope.type = HF_ROPE_LINEAR;
        hc.rope.factor = 1.0 / c->rope.freq_scale;
    }
    for (int i = 0; i < HF_SPECIAL_COUNT; i++)
        hc.special[i] = -1;
    if ((rc = hf_config_to_json(&hc, dtype, out, d)) < 0)
        return rc;
    json_t *rs = json_object_get(*out, "rope_scaling");
    rc = 0;
    /* cnets.py reads rope_scaling["type"] (the older spelling) */
    if (json_is_object(rs))
        rc |= jput(rs, "type", json_string("linear"));
    if (c->arch == EAGLE_ARCH_1) {
        rc |= jput(*out, "bias", json_boolean(bias));
    } else if (layout == EAGLE_HF_EAGLE) {
        /* the class vLLM maps to its Eagle3LlamaForCausalLM */
        rc |= jput(*out, "architectures", json_pack("[s]", "LlamaForCausalLMEagle3"));
        rc |= jput(*out, "draft_vocab_size", json_integer(c->n_draft));
        rc |= jput(*out, "eagle_aux_hidden_state_layer_ids", feat_layers(c));
    } else {
        *out = speculators_json(c, *out, dtype, verifier);
        rc |= !*out;
    }
    if (rc) {
        json_decref(*out);
        *out = NULL;
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    return 0;
}

/* the d2t (int64 offsets) and t2d (bools) of a draft vocabulary */
static int
vocab_tensors(const struct eagle_config *c, const struct eagle_meta *meta, int64_t **d2t,
              uint8_t **t2d)
{
    if (!(*d2t = malloc((size_t)meta->n_draft * sizeof(int64_t))) ||
        !(*t2d = calloc((size_t)c->n_vocab, 1)))
        return -1;
    for (int64_t i = 0; i < meta->n_draft; i++) {
        (*d2t)[i] = meta->draft_ids[i] - i;
        (*t2d)[meta->draft_ids[i]] = 1;
    }
    return 0;
}

int
eagle_hf_export(const char *in, const char *out, int type, int layout, const char *verifier,
                bool force, struct diag *d)
{
    struct eagle_head h;
    struct eagle_meta meta;
    struct sft_wtensor ts[EAGLE_MAX_TENSORS + 2];
    int which[EAGLE_MAX_TENSORS + 2];   /* ts[j] is tensor which[j]; -1 d2t, -2 t2d */
    struct sft_plan plan;
    struct sft_writer w;
    struct xout xo;
    struct sft_kv kv[7];
    char steps[24], tokens[24], *ids = NULL;
    float *perm[EAGLE_MAX_TENSORS] = {0};
    int64_t *d2t = NULL;
    uint8_t *t2d = NULL;
    void *half = NULL;
    enum sft_dtype st = type == GGML_TYPE_F16 ? SFT_F16 : type == GGML_TYPE_BF16 ? SFT_BF16 : SFT_F32;
    json_t *cfg = NULL;
    bool dir_open = false, writer_open = false;
    size_t nkv = 0, nt = 0;
    bool bias = false;
    int rc;

    memset(&plan, 0, sizeof plan);
    if (verifier) {             /* config.json is UTF-8: jansson refuses other strings */
        json_t *v = json_string(verifier);
        if (!v)
            return diag_set(d, ST_RANGE, "--verifier: the name is not UTF-8 text");
        json_decref(v);
    }
    if ((rc = eagle_head_read(&h, &meta, NULL, NULL, in, d)) < 0) {
        diag_prefix(d, "'%s'", in);
        return rc;
    }
    bool e3 = h.c.arch == EAGLE_ARCH_3;
    const char *const *names = names_of(h.c.arch, layout);
    if (!e3 && layout == EAGLE_HF_SPECULATORS) {
        rc = diag_set(d, ST_RANGE, "--layout speculators: '%s' is an EAGLE-1 head (speculators "
                      "has EAGLE-3 heads only)", in);
        goto out;
    }
    snprintf(steps, sizeof steps, "%" PRIu64, meta.steps);
    snprintf(tokens, sizeof tokens, "%" PRIu64, meta.tokens);
    kv[nkv++] = (struct sft_kv){ "format", "pt" };
    kv[nkv++] = (struct sft_kv){ META "base.tensor_sha256", meta.base_sha256 };
    kv[nkv++] = (struct sft_kv){ META "base.name", meta.base_name };
    kv[nkv++] = (struct sft_kv){ META "train.steps", steps };
    kv[nkv++] = (struct sft_kv){ META "train.tokens", tokens };
    kv[nkv++] = (struct sft_kv){ META "train.data_sha256", meta.data_sha256 };
    if (!e3 && meta.n_draft > 0) {
        size_t cap = (size_t)meta.n_draft * 12 + 1, at = 0;
        if (!(ids = malloc(cap))) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        for (int64_t j = 0; j < meta.n_draft; j++)
            at += (size_t)snprintf(ids + at, cap - at, j ? ",%d" : "%d", meta.draft_ids[j]);
        kv[nkv++] = (struct sft_kv){ META "draft_vocab", ids };
    }
    /* a zero FC bias is written as "bias": false, as bias-free heads are
     * published (vLLM's EAGLE-1 model has no FC bias) */
    for (int64_t j = 0; !e3 && j < h.c.d; j++)
        bias |= h.t[EAGLE_FC_B][j] != 0;
    for (int i = 0; i < h.n_tensors; i++) {
        int64_t np = perm_heads(&h.c, i);
        if (!e3 && i == EAGLE_FC_B && !bias)
            continue;
        which[nt] = i;
        ts[nt] = (struct sft_wtensor){ names[i], st, h.rows[i] == 1 ? 1 : 2, {0} };
        ts[nt].shape[0] = h.rows[i] == 1 ? h.cols[i] : h.rows[i];
        ts[nt++].shape[1] = h.rows[i] == 1 ? 0 : h.cols[i];
        if (!np)
            continue;
        if (!(perm[i] = malloc((size_t)(h.rows[i] * h.cols[i]) * sizeof(float)))) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        if (hf_unpermute_rows(perm[i], h.t[i], h.rows[i], (size_t)h.cols[i] * sizeof(float),
                              np)) {
            rc = diag_set(d, ST_FORMAT, "'%s': tensor '%s': rows do not split into %" PRId64
                          " heads", in, eagle_head_tensor_name(&h, i), np);
            goto out;
        }
    }
    /* EAGLE-3's draft vocabulary (none: the whole vocabulary, no maps) */
    if (e3 && meta.n_draft > 0) {
        if (vocab_tensors(&h.c, &meta, &d2t, &t2d) < 0) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        which[nt] = -1;
        ts[nt++] = (struct sft_wtensor){ "d2t", SFT_I64, 1, { meta.n_draft } };
        which[nt] = -2;
        ts[nt++] = (struct sft_wtensor){ "t2d", SFT_BOOL, 1, { h.c.n_vocab } };
    }
    if (h.c.rope.n_rot != h.c.head_dim) {
        rc = diag_set(d, ST_FORMAT, "'%s': partial RoPE (%" PRId64 " of %" PRId64 " dims) has "
                      "no HF EAGLE layout", in, h.c.rope.n_rot, h.c.head_dim);
        goto out;
    }
    int64_t most = 0;
    for (int i = 0; i < h.n_tensors; i++)
        most = h.rows[i] * h.cols[i] > most ? h.rows[i] * h.cols[i] : most;
    if (st != SFT_F32 && !(half = malloc((size_t)most * 2))) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = config_json(&h.c, layout, verifier, bias, hf_torch_dtype((uint32_t)(st == SFT_F32 ?
                          GGML_TYPE_F32 : (enum ggml_type)type)), &cfg, d)) < 0 ||
        (rc = sft_plan_init(&plan, ts, nt, 0, kv, nkv, d)) < 0)
        goto out;
    if ((rc = xout_open_dir(&xo, out, force, d)) < 0) {
        diag_prefix(d, "'%s'", out);
        goto out;
    }
    dir_open = true;
    if ((rc = hf_json_write(xo.tmp, "config.json", cfg, d)) < 0 ||
        (rc = sft_writer_open_dir(&w, &plan, xo.tmp, false, d)) < 0)
        goto out_dir;
    writer_open = true;
    for (size_t k = 0; k < plan.n; k++) {
        size_t j = plan.order[k];
        int i = which[j];
        const void *x = i == -1 ? (const void *)d2t : i == -2 ? (const void *)t2d
                        : perm[i] ? perm[i] : h.t[i];
        if (half && i >= 0) {
            qtype_get((enum ggml_type)type)->from_float(x, half, h.rows[i] * h.cols[i]);
            x = half;
        }
        if ((rc = sft_writer_put(&w, j, x, plan.nbytes[j], d)) < 0)
            goto out_dir;
    }
    writer_open = false;
    if ((rc = sft_writer_close(&w, d)) < 0)
        goto out_dir;
    dir_open = false;
    if ((rc = xout_commit(&xo, d)) < 0)
        diag_prefix(d, "'%s'", out);
    goto out;
out_dir:
    diag_prefix(d, "'%s'", out);
out:
    if (writer_open)
        sft_writer_abort(&w);
    if (dir_open)
        xout_abort(&xo);
    sft_plan_release(&plan);
    json_decref(cfg);
    for (int i = 0; i < EAGLE_MAX_TENSORS; i++)
        free(perm[i]);
    free(d2t);
    free(t2d);
    free(ids);
    free(half);
    eagle_meta_release(&meta);
    eagle_head_release(&h);
    return rc;
}

/* ---- importing ---- */

int
eagle_hf_import(const char *dir, const char *base, const char *out, bool force, struct diag *d)
{
    struct model *m = NULL;
    struct eagle_config bc;
    struct eagle_head h;
    struct eagle_meta meta;
    struct sft_file f;
    char *cfg_path = path_join(dir, "config.json"), *st = path_join(dir, SFT_SINGLE_NAME);
    char *cfg = NULL, sha[65];
    const char *name = NULL;
    size_t len;
    bool f_open = false;
    int rc;

    memset(&h, 0, sizeof h);
    memset(&meta, 0, sizeof meta);
    if (!cfg_path || !st) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = model_load(&m, base, NULL, d)) < 0 || (rc = eagle_target_config(m, &bc, d)) < 0) {
        diag_prefix(d, "'%s'", base);
        rc = rc == -ST_RANGE ? -ST_FORMAT : rc;
        goto out;
    }
    if (!path_exists(st)) {
        rc = diag_set(d, ST_FORMAT, "'%s': no %s (sharded heads are not read)", dir,
                      SFT_SINGLE_NAME);
        goto out;
    }
    if ((rc = read_file_all(cfg_path, (size_t)1 << 20, &cfg, &len, d)) < 0) {
        diag_prefix(d, "'%s'", cfg_path);
        goto out;
    }
    if ((rc = sft_open(&f, st, d)) < 0) {
        diag_prefix(d, "'%s'", st);
        goto out;
    }
    f_open = true;
    if ((rc = eagle_hf_head_read(&h, &meta, cfg, len, &f, &bc, d)) < 0) {
        diag_prefix(d, "'%s'", dir);
        goto out;
    }
    for (int k = 0; k < 3 && h.c.arch == EAGLE_ARCH_3; k++)
        if (h.c.feat_layer[k] >= m->hp.n_layer) {
            rc = diag_set(d, ST_FORMAT, "'%s': feature layer %" PRId64 " (config.json "
                          "eagle_aux_hidden_state_layer_ids) is not below the base's %" PRId64
                          " layers", dir, h.c.feat_layer[k], (int64_t)m->hp.n_layer);
            goto out;
        }
    if ((rc = eagle_base_sha256(m, sha)) < 0) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if (meta.base_sha256[0] && strcmp(meta.base_sha256, sha)) {
        rc = diag_set(d, ST_FORMAT, "'%s': the head was exported for another model ('%s', tensor "
                      "data sha256 %.12s...), not '%s' (%.12s...)", dir, meta.base_name,
                      meta.base_sha256, base, sha);
        goto out;
    }
    memcpy(meta.base_sha256, sha, sizeof sha);
    snprintf(meta.base_arch, sizeof meta.base_arch, "%s", m->hp.arch_name);
    if (!meta.base_name[0]) {
        if (gguf_get_str(&m->gguf, "general.name", &name, NULL) < 0 || !name)
            name = base;
        snprintf(meta.base_name, sizeof meta.base_name, "%s", name);
    }
    /* (its failures to open, write or commit name out) */
    rc = eagle_head_write(&h, &meta, NULL, NULL, out, force, d);
out:
    if (f_open)
        sft_close(&f);
    eagle_meta_release(&meta);
    eagle_head_release(&h);
    model_unload(m);
    free(cfg);
    free(st);
    free(cfg_path);
    return rc;
}
