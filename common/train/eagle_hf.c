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
#define EAGLE3_MSG "EAGLE-3 heads are not supported in the HF layout yet (EAGLE-1/2 heads only)"

/* HF names in the order of enum eagle_tensor (cnets.py Model's module tree) */
static const char *const hf_names[EAGLE_N_TENSORS] = {
    "fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight", "layers.0.post_attention_layernorm.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
};

const char *
eagle_hf_name(int i)
{
    return i >= 0 && i < EAGLE_N_TENSORS ? hf_names[i] : NULL;
}

static bool
is_eagle3_tensor(const char *name)
{
    return !strncmp(name, "midlayer.", 9) || !strcmp(name, "d2t") || !strcmp(name, "t2d") ||
           !strcmp(name, "norm.weight") || !strcmp(name, "lm_head.weight");
}

/* the q (n_head heads) and k (n_head_kv) rows of an interleaved-RoPE head
 * are permuted between the GGUF and the HF order: the number of heads of
 * tensor i, or 0 when it is not permuted */
static int64_t
perm_heads(const struct eagle_config *c, int i)
{
    if (c->rope.style != ROPE_NORM)
        return 0;
    return i == EAGLE_WQ ? c->n_head : i == EAGLE_WK ? c->n_head_kv : 0;
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

/* config.json against the base's configuration */
static int
check_config(const json_t *root, const struct eagle_config *b, bool *bias, struct diag *d)
{
    struct hf_config c;
    const json_t *jb = json_object_get(root, "bias");
    int rc;

    if (json_object_get(root, "draft_vocab_size"))
        return diag_set(d, ST_FORMAT, "config.json: 'draft_vocab_size': " EAGLE3_MSG);
    if ((rc = hf_config_from_json(&c, root, d)) < 0)
        return rc;
    if (c.arch != HF_ARCH_LLAMA || c.n_layer != 1 || c.attn_bias)
        return diag_set(d, ST_FORMAT, "config.json: not an EAGLE-1 head (a llama layer, "
                        "num_hidden_layers 1, no attention bias)");
    if (jb && !json_is_boolean(jb))
        return diag_set(d, ST_FORMAT, "config.json: 'bias' is not a boolean");
    *bias = !jb || json_is_true(jb);
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

int
eagle_hf_head_read(struct eagle_head *h, struct eagle_meta *meta, const char *cfg, size_t len,
                   const struct sft_file *f, const struct eagle_config *base, struct diag *d)
{
    json_t *root = NULL;
    float *tmp = NULL;
    bool bias = true;
    int rc;

    memset(h, 0, sizeof *h);
    memset(meta, 0, sizeof *meta);
    if ((rc = json_load_mem(cfg, len, &root, d)) < 0) {
        diag_prefix(d, "config.json");
        return rc;
    }
    if ((rc = check_config(root, base, &bias, d)) < 0)
        goto out;
    if ((rc = eagle_head_init(h, base, 0)) < 0) {
        rc = rc == -ST_NOMEM ? diag_set(d, ST_NOMEM, "out of memory")
                             : diag_set(d, ST_FORMAT, "EAGLE head shape out of range");
        goto out;
    }
    for (size_t j = 0; j < f->n_tensors; j++) {
        const struct sft_tensor *t = &f->t[j];
        int i = 0;
        while (i < EAGLE_N_TENSORS && strcmp(t->name, hf_names[i]))
            i++;
        if (is_eagle3_tensor(t->name))
            rc = diag_set(d, ST_FORMAT, "tensor '%s': " EAGLE3_MSG, t->name);
        else if (!strcmp(t->name, "embed_tokens.weight") &&
                 (t->n_dims != 2 || t->shape[0] != base->n_vocab || t->shape[1] != base->d))
            rc = diag_set(d, ST_FORMAT, "tensor 'embed_tokens.weight': not the base's "
                          "embedding [%" PRId64 ", %" PRId64 "]", base->n_vocab, base->d);
        else if (i == EAGLE_N_TENSORS && strcmp(t->name, "embed_tokens.weight"))
            rc = diag_set(d, ST_FORMAT, "tensor '%s': not part of an EAGLE-1 head", t->name);
        else if (i == EAGLE_FC_B && !bias)
            rc = diag_set(d, ST_FORMAT, "tensor 'fc.bias' present but config.json has "
                          "\"bias\": false");
        if (rc < 0)
            goto out;
    }
    int64_t most = 0;
    for (int i = 0; i < EAGLE_N_TENSORS; i++)
        most = h->rows[i] * h->cols[i] > most ? h->rows[i] * h->cols[i] : most;
    if (!(tmp = malloc((size_t)(2 * most) * sizeof(float)))) {   /* floats + a half copy */
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < EAGLE_N_TENSORS; i++) {
        const struct sft_tensor *t = sft_find(f, hf_names[i]);
        if (!t && i == EAGLE_FC_B && !bias) {
            memset(h->t[i], 0, (size_t)h->c.d * sizeof(float));
            continue;
        }
        if (!t) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s' missing", hf_names[i]);
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
        (rc = meta_ids(f, base->n_vocab, meta, d)) < 0)
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

/* config.json of head c (eagle_hf.h) */
static int
config_json(const struct eagle_config *c, bool bias, const char *dtype, json_t **out,
            struct diag *d)
{
    struct hf_config hc;
    int rc;

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
    /* cnets.py reads rope_scaling["type"] (the older spelling) */
    if (json_object_set_new(*out, "bias", json_boolean(bias)) ||
        (json_is_object(rs) && json_object_set_new(rs, "type", json_string("linear")))) {
        json_decref(*out);
        *out = NULL;
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    return 0;
}

int
eagle_hf_export(const char *in, const char *out, int type, bool force, struct diag *d)
{
    struct eagle_head h;
    struct eagle_meta meta;
    struct gguf g;
    struct sft_wtensor ts[EAGLE_N_TENSORS];
    int which[EAGLE_N_TENSORS];     /* ts[j] is tensor which[j] */
    struct sft_plan plan;
    struct sft_writer w;
    struct xout xo;
    struct sft_kv kv[7];
    char steps[24], tokens[24], *ids = NULL;
    float *perm[EAGLE_N_TENSORS] = {0};
    void *half = NULL;
    enum sft_dtype st = type == GGML_TYPE_F16 ? SFT_F16 : type == GGML_TYPE_BF16 ? SFT_BF16 : SFT_F32;
    json_t *cfg = NULL;
    bool dir_open = false, writer_open = false;
    uint64_t ver = 1;
    size_t nkv = 0, nt = 0;
    bool bias = false;
    int rc;

    memset(&plan, 0, sizeof plan);
    if ((rc = gguf_open(&g, in, d)) < 0) {
        diag_prefix(d, "'%s'", in);
        return rc;
    }
    rc = gguf_get_uint(&g, "eagle.version", &ver, NULL);
    gguf_release(&g);
    if (rc == 0 && ver == 3)
        return diag_set(d, ST_FORMAT, "'%s': " EAGLE3_MSG, in);
    if ((rc = eagle_head_read(&h, &meta, NULL, NULL, in, d)) < 0) {
        diag_prefix(d, "'%s'", in);
        return rc;
    }
    if (h.c.arch != EAGLE_ARCH_1) {
        eagle_head_release(&h);
        eagle_meta_release(&meta);
        return diag_set(d, ST_FORMAT, "'%s': " EAGLE3_MSG, in);
    }
    snprintf(steps, sizeof steps, "%" PRIu64, meta.steps);
    snprintf(tokens, sizeof tokens, "%" PRIu64, meta.tokens);
    kv[nkv++] = (struct sft_kv){ "format", "pt" };
    kv[nkv++] = (struct sft_kv){ META "base.tensor_sha256", meta.base_sha256 };
    kv[nkv++] = (struct sft_kv){ META "base.name", meta.base_name };
    kv[nkv++] = (struct sft_kv){ META "train.steps", steps };
    kv[nkv++] = (struct sft_kv){ META "train.tokens", tokens };
    kv[nkv++] = (struct sft_kv){ META "train.data_sha256", meta.data_sha256 };
    if (meta.n_draft > 0) {
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
    for (int64_t j = 0; j < h.c.d; j++)
        bias |= h.t[EAGLE_FC_B][j] != 0;
    for (int i = 0; i < EAGLE_N_TENSORS; i++) {
        int64_t np = perm_heads(&h.c, i);
        if (i == EAGLE_FC_B && !bias)
            continue;
        which[nt] = i;
        ts[nt] = (struct sft_wtensor){ hf_names[i], st, h.rows[i] == 1 ? 1 : 2, {0} };
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
                          " heads", in, eagle_tensor_name(i), np);
            goto out;
        }
    }
    if (h.c.rope.n_rot != h.c.head_dim) {
        rc = diag_set(d, ST_FORMAT, "'%s': partial RoPE (%" PRId64 " of %" PRId64 " dims) has "
                      "no HF EAGLE layout", in, h.c.rope.n_rot, h.c.head_dim);
        goto out;
    }
    int64_t most = 0;
    for (int i = 0; i < EAGLE_N_TENSORS; i++)
        most = h.rows[i] * h.cols[i] > most ? h.rows[i] * h.cols[i] : most;
    if (st != SFT_F32 && !(half = malloc((size_t)most * 2))) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = config_json(&h.c, bias, hf_torch_dtype((uint32_t)(st == SFT_F32 ? GGML_TYPE_F32 :
                                                     (enum ggml_type)type)), &cfg, d)) < 0 ||
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
        const float *x = perm[i] ? perm[i] : h.t[i];
        if (half)
            qtype_get((enum ggml_type)type)->from_float(x, half, h.rows[i] * h.cols[i]);
        if ((rc = sft_writer_put(&w, j, half ? half : (const void *)x, plan.nbytes[j], d)) < 0)
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
    for (int i = 0; i < EAGLE_N_TENSORS; i++)
        free(perm[i]);
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
    if (!meta.base_name[0]) {
        if (gguf_get_str(&m->gguf, "general.name", &name, NULL) < 0 || !name)
            name = base;
        snprintf(meta.base_name, sizeof meta.base_name, "%s", name);
    }
    if ((rc = eagle_head_write(&h, &meta, NULL, NULL, out, force, d)) < 0)
        diag_prefix(d, "'%s'", out);
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
