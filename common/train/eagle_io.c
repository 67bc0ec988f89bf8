/*
 * eagle_io.c - EAGLE head files (eagle_io.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle_io.h"
#include "gguf.h"
#include "gguf_write.h"
#include "qtypes.h"
#include "quantize.h"

void
eagle_meta_release(struct eagle_meta *meta)
{
    free(meta->draft_ids);
    meta->draft_ids = NULL;
    meta->n_draft = 0;
}

int
eagle_base_sha256(const struct model *m, char out[65])
{
    const struct src *s = m->gguf.src;
    return quantize_sha256_hex(s->map + m->gguf.data_offset, (size_t)m->gguf.data_size, out);
}

/* a checkpoint's SHA-256: the head's parameters, then Adam's two moments,
 * in memory (f32 in host order: the tensors' bytes as written), then its
 * metadata as one line of text (the floats as C99 hex, exact) and the draft
 * vocabulary's ids; what --resume reads must match it.  meta NULL: the
 * tensors' only, what draft-train recorded before the metadata was hashed
 * (2026-12-05), whose checkpoints still resume. */
static int
ckpt_sha256(const struct eagle_head *h, const float *m_, const float *v_,
            const struct eagle_meta *meta, char out[65])
{
    char *line = NULL;
    int len = 0;

    if (meta &&
        (len = asprintf(&line, "eagle-ckpt/2 base=%s arch=%s name=%s data=%s steps=%llu "
                        "tokens=%llu step=%llu seed=%llu elapsed=%a prompts=%llu "
                        "sequences=%llu train_time=%a options=%s", meta->base_sha256,
                        meta->base_arch, meta->base_name, meta->data_sha256,
                        (unsigned long long)meta->steps, (unsigned long long)meta->tokens,
                        (unsigned long long)meta->ckpt_step,
                        (unsigned long long)meta->ckpt_seed, (double)meta->ckpt_elapsed,
                        (unsigned long long)meta->ckpt_prompts,
                        (unsigned long long)meta->ckpt_sequences,
                        (double)meta->ckpt_train_time, meta->ckpt_options)) < 0)
        return -ST_NOMEM;
    const void *p[5] = { h->param, m_, v_, line, meta ? meta->draft_ids : NULL };
    size_t n = (size_t)h->n_param * sizeof(float);
    size_t ns[5] = { n, n, n, (size_t)len,
                     meta && meta->draft_ids ? (size_t)meta->n_draft * sizeof(int32_t) : 0 };
    int rc = quantize_sha256_hexv(p, ns, !meta ? 3 : meta->draft_ids ? 5 : 4, out);
    free(line);
    return rc;
}

/* "<pre>.<suffix>" in buf: the keys of architecture pre ("eagle", "eagle3") */
static const char *
key(char buf[96], const char *pre, const char *suffix)
{
    snprintf(buf, 96, "%s.%s", pre, suffix);
    return buf;
}

#define K(suffix) key(kb, pre, suffix)

int
eagle_head_write(const struct eagle_head *h, const struct eagle_meta *meta, const float *m_,
                 const float *v_, const char *path, bool force, struct diag *d)
{
    const struct eagle_config *c = &h->c;
    struct out_tensor ts[EAGLE_MAX_TENSORS + 2];
    struct gguf g;
    size_t n = 0;
    int rc = 0;

    bool e3 = c->arch == EAGLE_ARCH_3;
    const char *pre = e3 ? "eagle3" : "eagle";
    char kb[96];

    gguf_init(&g);
    rc |= gguf_set_str(&g, "general.architecture", pre);
    rc |= gguf_set_u32(&g, K("version"), 1);
    if (e3) {
        int32_t fl[3] = { (int32_t)c->feat_layer[0], (int32_t)c->feat_layer[1],
                          (int32_t)c->feat_layer[2] };
        rc |= gguf_set_arr(&g, K("feature_layers"), GGUF_TYPE_INT32, fl, 3);
        rc |= gguf_set_u32(&g, K("draft_vocab_size"), (uint32_t)c->n_draft);
    }
    rc |= gguf_set_u32(&g, K("embedding_length"), (uint32_t)c->d);
    rc |= gguf_set_u32(&g, K("feed_forward_length"), (uint32_t)c->n_ff);
    rc |= gguf_set_u32(&g, K("attention.head_count"), (uint32_t)c->n_head);
    rc |= gguf_set_u32(&g, K("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    rc |= gguf_set_u32(&g, K("attention.key_length"), (uint32_t)c->head_dim);
    rc |= gguf_set_f32(&g, K("attention.layer_norm_rms_epsilon"), c->eps);
    rc |= gguf_set_u32(&g, K("rope.dimension_count"), (uint32_t)c->rope.n_rot);
    rc |= gguf_set_f32(&g, K("rope.freq_base"), c->rope.freq_base);
    rc |= gguf_set_f32(&g, K("rope.scale_linear"), 1.0f / c->rope.freq_scale);
    rc |= gguf_set_bool(&g, K("rope.neox"), c->rope.style == ROPE_NEOX);
    rc |= gguf_set_u32(&g, K("vocab_size"), (uint32_t)c->n_vocab);
    rc |= gguf_set_str(&g, K("base.tensor_sha256"), meta->base_sha256);
    rc |= gguf_set_str(&g, K("base.name"), meta->base_name);
    if (meta->base_arch[0])
        rc |= gguf_set_str(&g, K("base.architecture"), meta->base_arch);
    rc |= gguf_set_u64(&g, K("train.steps"), meta->steps);
    rc |= gguf_set_u64(&g, K("train.tokens"), meta->tokens);
    rc |= gguf_set_str(&g, K("train.data_sha256"), meta->data_sha256);
    if (meta->draft_ids && meta->n_draft > 0)
        rc |= gguf_set_arr(&g, K("draft_vocab"), GGUF_TYPE_INT32, meta->draft_ids,
                           (uint64_t)meta->n_draft);
    if (m_ && v_) {
        rc |= gguf_set_u64(&g, K("ckpt.step"), meta->ckpt_step);
        rc |= gguf_set_u64(&g, K("ckpt.seed"), meta->ckpt_seed);
        rc |= gguf_set_f32(&g, K("ckpt.elapsed"), meta->ckpt_elapsed);
        rc |= gguf_set_str(&g, K("ckpt.options"), meta->ckpt_options);
        rc |= gguf_set_u64(&g, K("ckpt.prompts"), meta->ckpt_prompts);
        rc |= gguf_set_u64(&g, K("ckpt.sequences"), meta->ckpt_sequences);
        rc |= gguf_set_f32(&g, K("ckpt.train_time"), meta->ckpt_train_time);
        char sha[65];
        if (ckpt_sha256(h, m_, v_, meta, sha) < 0)
            rc = -1;
        else
            rc |= gguf_set_str(&g, K("ckpt.sha256"), sha);
    }
    if (rc) {
        gguf_release(&g);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    memset(ts, 0, sizeof ts);
    for (int i = 0; i < h->n_tensors; i++, n++) {
        snprintf(ts[n].name, sizeof ts[n].name, "%s", eagle_head_tensor_name(h, i));
        ts[n].n_dims = h->rows[i] == 1 ? 1 : 2;
        int64_t ne[4] = { h->cols[i], h->rows[i], 1, 1 };
        memcpy(ts[n].ne, ne, sizeof ne);
        memcpy(ts[n].src.ne, ne, sizeof ne);
        ts[n].type = ts[n].src.type = GGML_TYPE_F32;
        ts[n].src.data = h->t[i];
    }
    for (int i = 0; m_ && v_ && i < 2; i++, n++) {
        snprintf(ts[n].name, sizeof ts[n].name, "%s", i ? "opt.v" : "opt.m");
        ts[n].n_dims = 1;
        int64_t ne[4] = { h->n_param, 1, 1, 1 };
        memcpy(ts[n].ne, ne, sizeof ne);
        memcpy(ts[n].src.ne, ne, sizeof ne);
        ts[n].type = ts[n].src.type = GGML_TYPE_F32;
        ts[n].src.data = i ? v_ : m_;
    }
    struct gguf_write_opts wo = { .output = path, .force = force };
    rc = write_gguf_out(&g, ts, n, NULL, NULL, &wo, d);
    gguf_release(&g);
    return rc;
}

/* a typed getter's result: absent keys are errors in a head file */
static int
need(int rc, const char *key, struct diag *d)
{
    return rc == 1 ? diag_set(d, ST_FORMAT, "key '%s' missing", key) : rc;
}

static int
get_u64(const struct gguf *g, const char *key, uint64_t *out, struct diag *d)
{
    return need(gguf_get_uint(g, key, out, d), key, d);
}

static int
get_u(const struct gguf *g, const char *key, int64_t *out, struct diag *d)
{
    uint64_t v;
    int rc = get_u64(g, key, &v, d);
    if (rc < 0)
        return rc;
    if (v > (1u << 30))
        return diag_set(d, ST_FORMAT, "key '%s': %llu out of range", key, (unsigned long long)v);
    *out = (int64_t)v;
    return 0;
}

static int
get_f(const struct gguf *g, const char *key, float *out, struct diag *d)
{
    double v;
    int rc = need(gguf_get_float(g, key, &v, d), key, d);
    if (rc < 0)
        return rc;
    if (!isfinite(v))
        return diag_set(d, ST_FORMAT, "key '%s': not a finite number", key);
    *out = (float)v;
    return 0;
}

static int
get_s(const struct gguf *g, const char *key, char *out, size_t cap, struct diag *d)
{
    const char *s;
    int rc = need(gguf_get_str(g, key, &s, d), key, d);
    if (rc < 0)
        return rc;
    snprintf(out, cap, "%s", s);
    return 0;
}

/* a 1-D F32 tensor of n floats, copied into a new array */
static int
read_vec(const struct gguf *g, const char *name, int64_t n, float **out, struct diag *d)
{
    int64_t ti = gguf_find_tensor(g, name);
    if (ti < 0)
        return diag_set(d, ST_FORMAT, "tensor '%s' missing", name);
    const struct gguf_tensor *t = &g->t[ti];
    if (t->type != GGML_TYPE_F32 || gguf_tensor_nelements(t) != n)
        return diag_set(d, ST_FORMAT, "tensor '%s': not F32 of %lld elements", name,
                        (long long)n);
    if (!(*out = malloc((size_t)n * sizeof(float))))
        return diag_set(d, ST_NOMEM, "out of memory");
    memcpy(*out, t->data, (size_t)n * sizeof(float));
    return 0;
}

/* EAGLE-3's keys: the feature layers, the draft vocabulary's size (the
 * whole vocabulary when eagle3.draft_vocab is absent) */
static int
eagle3_meta(const struct gguf *g, struct eagle_config *c, const struct eagle_meta *meta,
            struct diag *d)
{
    const struct gguf_kv *fl = gguf_get(g, "eagle3.feature_layers");
    int rc;

    if (!fl || fl->type != GGUF_TYPE_ARRAY || fl->arr_type != GGUF_TYPE_INT32 || fl->n != 3)
        return diag_set(d, ST_FORMAT, "key 'eagle3.feature_layers': not an INT32 array of 3");
    for (int k = 0; k < 3; k++) {
        int32_t l = ((const int32_t *)fl->v.arr)[k];
        if (l < 0 || l > 4096)
            return diag_set(d, ST_FORMAT, "key 'eagle3.feature_layers': layer %d", (int)l);
        c->feat_layer[k] = l;
    }
    if ((rc = get_u(g, "eagle3.draft_vocab_size", &c->n_draft, d)) < 0)
        return rc;
    if (c->n_draft != (meta->draft_ids ? meta->n_draft : c->n_vocab))
        return diag_set(d, ST_FORMAT, "key 'eagle3.draft_vocab_size': %lld, not the draft "
                        "vocabulary's %lld ids", (long long)c->n_draft,
                        (long long)(meta->draft_ids ? meta->n_draft : c->n_vocab));
    return 0;
}

/* the head in g (parsed, its tensors' data in memory) */
static int
head_from_gguf(struct eagle_head *h, struct eagle_meta *meta, float **m_, float **v_,
               const struct gguf *g, struct diag *d)
{
    struct eagle_config c;
    const char *arch;
    bool neox = false;
    float scale_lin = 1;
    uint64_t u;
    int rc;

    memset(h, 0, sizeof *h);
    memset(meta, 0, sizeof *meta);
    memset(&c, 0, sizeof c);
    if ((rc = need(gguf_get_str(g, "general.architecture", &arch, d), "general.architecture",
                   d)) < 0)
        goto out;
    if (strcmp(arch, "eagle") != 0 && strcmp(arch, "eagle3") != 0) {
        rc = diag_set(d, ST_FORMAT, "general.architecture is '%s', not an EAGLE head ('eagle' "
                      "or 'eagle3')", arch);
        goto out;
    }
    const char *pre = arch;
    char kb[96];
    c.arch = strcmp(arch, "eagle3") == 0 ? EAGLE_ARCH_3 : EAGLE_ARCH_1;
    if ((rc = get_u64(g, K("version"), &u, d)) < 0)
        goto out;
    if (u != 1) {
        rc = diag_set(d, ST_FORMAT, "%s.version %llu: only version 1 is supported", pre,
                      (unsigned long long)u);
        goto out;
    }
    if ((rc = get_u(g, K("embedding_length"), &c.d, d)) < 0 ||
        (rc = get_u(g, K("feed_forward_length"), &c.n_ff, d)) < 0 ||
        (rc = get_u(g, K("attention.head_count"), &c.n_head, d)) < 0 ||
        (rc = get_u(g, K("attention.head_count_kv"), &c.n_head_kv, d)) < 0 ||
        (rc = get_u(g, K("attention.key_length"), &c.head_dim, d)) < 0 ||
        (rc = get_f(g, K("attention.layer_norm_rms_epsilon"), &c.eps, d)) < 0 ||
        (rc = get_u(g, K("rope.dimension_count"), &c.rope.n_rot, d)) < 0 ||
        (rc = get_f(g, K("rope.freq_base"), &c.rope.freq_base, d)) < 0 ||
        (rc = get_f(g, K("rope.scale_linear"), &scale_lin, d)) < 0 ||
        (rc = need(gguf_get_bool(g, K("rope.neox"), &neox, d), K("rope.neox"), d)) < 0 ||
        (rc = get_u(g, K("vocab_size"), &c.n_vocab, d)) < 0 ||
        (rc = get_s(g, K("base.tensor_sha256"), meta->base_sha256, sizeof meta->base_sha256,
                    d)) < 0 ||
        (rc = get_s(g, K("base.name"), meta->base_name, sizeof meta->base_name, d)) < 0 ||
        (rc = get_s(g, K("train.data_sha256"), meta->data_sha256, sizeof meta->data_sha256,
                    d)) < 0 ||
        (rc = get_u64(g, K("train.steps"), &meta->steps, d)) < 0 ||
        (rc = get_u64(g, K("train.tokens"), &meta->tokens, d)) < 0)
        goto out;
    const char *ba;
    if ((rc = gguf_get_str(g, K("base.architecture"), &ba, d)) < 0)
        goto out;
    if (rc == 0)
        snprintf(meta->base_arch, sizeof meta->base_arch, "%s", ba);
    const struct gguf_kv *dv = gguf_get(g, K("draft_vocab"));
    if (dv) {
        if (dv->type != GGUF_TYPE_ARRAY || dv->arr_type != GGUF_TYPE_INT32 || dv->n < 1 ||
            dv->n > (uint64_t)c.n_vocab) {
            rc = diag_set(d, ST_FORMAT, "key '%s.draft_vocab': not an INT32 array of 1 to "
                          "%lld ids", pre, (long long)c.n_vocab);
            goto out;
        }
        if (!(meta->draft_ids = malloc((size_t)dv->n * sizeof(int32_t)))) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        memcpy(meta->draft_ids, dv->v.arr, (size_t)dv->n * sizeof(int32_t));
        meta->n_draft = (int64_t)dv->n;
        for (int64_t i = 0; i < meta->n_draft; i++)
            if (meta->draft_ids[i] < 0 || meta->draft_ids[i] >= c.n_vocab ||
                (i > 0 && meta->draft_ids[i] <= meta->draft_ids[i - 1])) {
                rc = diag_set(d, ST_FORMAT, "key '%s.draft_vocab': ids not ascending in 0 "
                              "to %lld", pre, (long long)c.n_vocab - 1);
                goto out;
            }
    }
    if (c.arch == EAGLE_ARCH_3 && (rc = eagle3_meta(g, &c, meta, d)) < 0)
        goto out;
    if (scale_lin <= 0 || c.eps <= 0 || c.rope.freq_base <= 0) {
        rc = diag_set(d, ST_FORMAT, "%s.rope / epsilon values out of range", pre);
        goto out;
    }
    c.rope.freq_scale = 1.0f / scale_lin;
    c.rope.style = neox ? ROPE_NEOX : ROPE_NORM;
    if ((rc = eagle_head_init(h, &c, 0)) < 0) {
        if (rc == -ST_RANGE)
            rc = diag_set(d, ST_FORMAT, "%s hyperparameters out of range", pre);
        else
            diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < h->n_tensors; i++) {
        const char *name = eagle_head_tensor_name(h, i);
        int64_t ti = gguf_find_tensor(g, name);
        if (ti < 0) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s' missing", name);
            goto out;
        }
        const struct gguf_tensor *t = &g->t[ti];
        if (t->type != GGML_TYPE_F32 || t->ne[0] != h->cols[i] || t->ne[1] != h->rows[i] ||
            t->ne[2] != 1 || t->ne[3] != 1) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s': not F32 [%lld, %lld]", name,
                          (long long)h->cols[i], (long long)h->rows[i]);
            goto out;
        }
        memcpy(h->t[i], t->data, (size_t)(h->rows[i] * h->cols[i]) * sizeof(float));
    }
    for (int64_t j = 0; j < h->n_param; j++)
        if (!isfinite(h->param[j])) {
            rc = diag_set(d, ST_FORMAT, "non-finite weight in the head");
            goto out;
        }
    if (m_ && v_) {
        if ((rc = get_u64(g, K("ckpt.step"), &meta->ckpt_step, d)) < 0 ||
            (rc = get_u64(g, K("ckpt.seed"), &meta->ckpt_seed, d)) < 0 ||
            (rc = get_f(g, K("ckpt.elapsed"), &meta->ckpt_elapsed, d)) < 0 ||
            (rc = get_s(g, K("ckpt.options"), meta->ckpt_options, sizeof meta->ckpt_options,
                        d)) < 0 ||
            (rc = get_u64(g, K("ckpt.prompts"), &meta->ckpt_prompts, d)) < 0 ||
            (rc = get_u64(g, K("ckpt.sequences"), &meta->ckpt_sequences, d)) < 0 ||
            (rc = get_f(g, K("ckpt.train_time"), &meta->ckpt_train_time, d)) < 0)
            goto out;
        if ((rc = read_vec(g, "opt.m", h->n_param, m_, d)) < 0)
            goto out;
        if ((rc = read_vec(g, "opt.v", h->n_param, v_, d)) < 0) {
            free(*m_);
            *m_ = NULL;
            goto out;
        }
        char want[72], got[65];
        if ((rc = get_s(g, K("ckpt.sha256"), want, sizeof want, d)) < 0 ||
            (rc = ckpt_sha256(h, *m_, *v_, meta, got)) < 0 ||
            (strcmp(want, got) != 0 &&
             ((rc = ckpt_sha256(h, *m_, *v_, NULL, got)) < 0 || strcmp(want, got) != 0))) {
            free(*m_), free(*v_);
            *m_ = *v_ = NULL;
            if (rc == -ST_NOMEM)
                diag_set(d, ST_NOMEM, "out of memory");
            else if (rc == 0 && (strlen(want) != 64 || strspn(want, "0123456789abcdef") != 64))
                rc = diag_set(d, ST_FORMAT, "corrupt checkpoint: its recorded SHA-256 '%.72s' "
                              "is not 64 lowercase hex digits", want);
            else if (rc == 0)
                rc = diag_set(d, ST_FORMAT, "corrupt checkpoint: the SHA-256 of its "
                              "weights, optimizer state and metadata is not the one it "
                              "records");
            goto out;
        }
        /* Adam's moments: finite, the second one >= 0 (else a resumed run
         * would fail later, blaming the learning rate) */
        for (int64_t j = 0; j < h->n_param; j++)
            if (!isfinite((*m_)[j]) || !isfinite((*v_)[j]) || (*v_)[j] < 0) {
                free(*m_), free(*v_);
                *m_ = *v_ = NULL;
                rc = diag_set(d, ST_FORMAT, "the optimizer state is corrupt (parameter %lld)",
                              (long long)j);
                goto out;
            }
    }
    rc = 0;
out:
    if (rc < 0) {
        eagle_head_release(h);
        eagle_meta_release(meta);
    }
    return rc;
}

int
eagle_head_read(struct eagle_head *h, struct eagle_meta *meta, float **m_, float **v_,
                const char *path, struct diag *d)
{
    struct gguf g;
    int rc;

    memset(h, 0, sizeof *h);
    memset(meta, 0, sizeof *meta);
    if ((rc = gguf_open(&g, path, d)) < 0)
        return rc;
    if ((rc = gguf_load_stream(&g, d)) == 0)
        rc = head_from_gguf(h, meta, m_, v_, &g, d);
    gguf_release(&g);
    return rc;
}

int
eagle_head_read_mem(struct eagle_head *h, struct eagle_meta *meta, const void *data, size_t size,
                    struct diag *d)
{
    struct src s;
    struct gguf g;
    int rc;

    memset(h, 0, sizeof *h);
    memset(meta, 0, sizeof *meta);
    src_open_mem(&s, data, size, "head");
    if ((rc = gguf_read(&g, &s, d)) == 0) {
        rc = head_from_gguf(h, meta, NULL, NULL, &g, d);
        gguf_release(&g);
    }
    src_close(&s);
    return rc;
}

int
eagle_head_check_base(const struct eagle_head *h, const struct eagle_meta *meta,
                      const struct model *m, struct diag *d)
{
    const struct model_hparams *hp = &m->hp;
    char sha[65];

    if (meta->base_arch[0] && strcmp(meta->base_arch, hp->arch_name) != 0)
        return diag_set(d, ST_FORMAT, "the head was trained for a %s model ('%s'), not %s",
                        meta->base_arch, meta->base_name, hp->arch_name);
    if (h->c.d != hp->n_embd || h->c.n_vocab != hp->n_vocab)
        return diag_set(d, ST_FORMAT, "the head is for a model of width %lld and %lld tokens, "
                        "not %lld and %lld", (long long)h->c.d, (long long)h->c.n_vocab,
                        (long long)hp->n_embd, (long long)hp->n_vocab);
    if (eagle_base_sha256(m, sha) < 0)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (strcmp(sha, meta->base_sha256) != 0)
        return diag_set(d, ST_FORMAT, "the head was trained for another model ('%s', tensor "
                        "data sha256 %.12s..., this one %.12s...)", meta->base_name,
                        meta->base_sha256, sha);
    return 0;
}
