/*
 * model.c - llama-family model loading: hyperparameters from GGUF metadata
 * (formats.md §2.2, with llama.cpp's exact key types), tensor views into the
 * mapping with their types and shapes checked (§2.5), kernels and threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "forward.h"
#include "model.h"
#include "qtypes.h"
#include "threadpool.h"

/* Largest dimension we accept from a header: keeps every product of two or
 * three of them far from overflow before the tensor shapes are checked
 * against the bytes in the file. */
#define MAX_DIM ((int64_t)1 << 24)

/* ---- metadata ---- */

struct hp_reader {
    const struct gguf *g;
    const char *arch;
    int64_t n_layer;            /* for per-layer arrays; 0 before block_count is read */
    struct diag *d;
};

static void
arch_key(char *buf, size_t n, const char *arch, const char *suffix)
{
    snprintf(buf, n, "%s.%s", arch, suffix);
}

/* A UINT32 key (llama.cpp requires exactly that type); arr_ok also accepts
 * an array of n_layer UINT32/INT32 values, which must all be equal because
 * per-layer head counts are not supported.  Returns 0 (set *out), 1 (absent)
 * or -ST_FORMAT. */
static int
hp_u32(struct hp_reader *r, const char *suffix, int arr_ok, int64_t *out)
{
    char key[128];
    const struct gguf_kv *kv;

    arch_key(key, sizeof(key), r->arch, suffix);
    kv = gguf_get(r->g, key);
    if (!kv)
        return 1;
    if (kv->type == GGUF_TYPE_UINT32) {
        uint64_t v;
        gguf_kv_uint(kv, &v);
        *out = (int64_t)v;
        return 0;
    }
    if (arr_ok && kv->type == GGUF_TYPE_ARRAY &&
        (kv->arr_type == GGUF_TYPE_UINT32 || kv->arr_type == GGUF_TYPE_INT32)) {
        int64_t first = 0, v;
        if (r->n_layer <= 0 || kv->n != (uint64_t)r->n_layer)
            return diag_set(r->d, ST_FORMAT, "key '%s': array of %llu values, expected %lld",
                            key, (unsigned long long)kv->n, (long long)r->n_layer);
        for (uint64_t i = 0; i < kv->n; i++) {
            gguf_arr_int(kv, i, &v);
            if (i == 0)
                first = v;
            else if (v != first)
                return diag_set(r->d, ST_FORMAT,
                                "key '%s': per-layer values differ (not supported)", key);
        }
        if (first < 0)
            return diag_set(r->d, ST_FORMAT, "key '%s': negative value", key);
        *out = first;
        return 0;
    }
    return diag_set(r->d, ST_FORMAT, "key '%s': wrong type %s, expected uint32", key,
                    kv->type == GGUF_TYPE_ARRAY ? "array" : gguf_type_name(kv->type));
}

/* A FLOAT32 key: 0, 1 (absent) or -ST_FORMAT. */
static int
hp_f32(struct hp_reader *r, const char *suffix, float *out)
{
    char key[128];
    const struct gguf_kv *kv;

    arch_key(key, sizeof(key), r->arch, suffix);
    kv = gguf_get(r->g, key);
    if (!kv)
        return 1;
    if (kv->type != GGUF_TYPE_FLOAT32)
        return diag_set(r->d, ST_FORMAT, "key '%s': wrong type %s, expected float32", key,
                        kv->type == GGUF_TYPE_ARRAY ? "array" : gguf_type_name(kv->type));
    double v;
    gguf_kv_float(kv, &v);
    if (!isfinite(v))
        return diag_set(r->d, ST_FORMAT, "key '%s': not a finite number", key);
    *out = (float)v;
    return 0;
}

/* A STRING key: 0, 1 (absent) or -ST_FORMAT. */
static int
hp_str(struct hp_reader *r, const char *suffix, const char **out)
{
    char key[128];
    const struct gguf_kv *kv;

    arch_key(key, sizeof(key), r->arch, suffix);
    kv = gguf_get(r->g, key);
    if (!kv)
        return 1;
    if (kv->type != GGUF_TYPE_STRING)
        return diag_set(r->d, ST_FORMAT, "key '%s': wrong type %s, expected string", key,
                        kv->type == GGUF_TYPE_ARRAY ? "array" : gguf_type_name(kv->type));
    *out = kv->v.str.p;
    return 0;
}

static int
hp_required(struct hp_reader *r, int rc, const char *suffix)
{
    if (rc == 1)
        return diag_set(r->d, ST_FORMAT, "missing key '%s.%s'", r->arch, suffix);
    return rc;
}

static int
hp_dim(struct hp_reader *r, const char *suffix, int64_t v, int64_t min)
{
    if (v < min || v > MAX_DIM)
        return diag_set(r->d, ST_FORMAT, "key '%s.%s': value %lld out of range", r->arch, suffix,
                        (long long)v);
    return 0;
}

static int
load_hparams(struct model *m, struct diag *d)
{
    struct model_hparams *hp = &m->hp;
    struct hp_reader r = { &m->gguf, NULL, 0, d };
    const char *arch = NULL;
    int rc;

    rc = gguf_get_str(&m->gguf, "general.architecture", &arch, d);
    if (rc == 1)
        return diag_set(d, ST_FORMAT, "missing key 'general.architecture'");
    if (rc < 0)
        return rc;
    if (strcmp(arch, "llama") == 0) {
        hp->arch = MODEL_ARCH_LLAMA;
    } else if (strcmp(arch, "gemma3") == 0) {
        return diag_set(d, ST_FORMAT, "architecture 'gemma3' is not supported yet");
    } else {
        return diag_set(d, ST_FORMAT, "unknown architecture '%.64s'", arch);
    }
    hp->arch_name = arch;
    r.arch = arch;

    int64_t v;
    if ((rc = hp_required(&r, hp_u32(&r, "block_count", 0, &v), "block_count")) < 0)
        return rc;
    if ((rc = hp_dim(&r, "block_count", v, 1)) < 0)
        return rc;
    hp->n_layer = r.n_layer = v;
    if ((rc = hp_required(&r, hp_u32(&r, "context_length", 0, &v), "context_length")) < 0)
        return rc;
    hp->n_ctx_train = v;
    if ((rc = hp_required(&r, hp_u32(&r, "embedding_length", 0, &v), "embedding_length")) < 0)
        return rc;
    if ((rc = hp_dim(&r, "embedding_length", v, 1)) < 0)
        return rc;
    hp->n_embd = v;

    /* feed_forward_length and head_count default to 0 in llama.cpp, which
     * no dense llama model can have; say so by key. */
    if ((rc = hp_required(&r, hp_u32(&r, "feed_forward_length", 1, &v), "feed_forward_length")) < 0)
        return rc;
    if ((rc = hp_dim(&r, "feed_forward_length", v, 1)) < 0)
        return rc;
    hp->n_ff = v;
    if ((rc = hp_required(&r, hp_u32(&r, "attention.head_count", 1, &v), "attention.head_count")) < 0)
        return rc;
    if ((rc = hp_dim(&r, "attention.head_count", v, 1)) < 0)
        return rc;
    hp->n_head = v;
    rc = hp_u32(&r, "attention.head_count_kv", 1, &v);
    if (rc < 0)
        return rc;
    hp->n_head_kv = rc == 1 ? hp->n_head : v;
    if ((rc = hp_dim(&r, "attention.head_count_kv", hp->n_head_kv, 1)) < 0)
        return rc;
    if (hp->n_head % hp->n_head_kv != 0)
        return diag_set(d, ST_FORMAT, "head_count %lld is not a multiple of head_count_kv %lld",
                        (long long)hp->n_head, (long long)hp->n_head_kv);

    float f;
    if ((rc = hp_required(&r, hp_f32(&r, "attention.layer_norm_rms_epsilon", &f),
                          "attention.layer_norm_rms_epsilon")) < 0)
        return rc;
    if (!(f >= 0.0f))
        return diag_set(d, ST_FORMAT, "key '%s.attention.layer_norm_rms_epsilon': negative",
                        arch);
    hp->rms_eps = f;

    int64_t def_hd = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    rc = hp_u32(&r, "attention.key_length", 0, &v);
    if (rc < 0)
        return rc;
    hp->head_dim = rc == 1 ? def_hd : v;
    if (hp->head_dim == 0)
        return diag_set(d, ST_FORMAT, "embedding_length %lld is not a multiple of head_count %lld",
                        (long long)hp->n_embd, (long long)hp->n_head);
    if ((rc = hp_dim(&r, "attention.key_length", hp->head_dim, 1)) < 0)
        return rc;
    rc = hp_u32(&r, "attention.value_length", 0, &v);
    if (rc < 0)
        return rc;
    hp->head_dim_v = rc == 1 ? def_hd : v;
    if (hp->head_dim_v == 0)
        return diag_set(d, ST_FORMAT, "embedding_length %lld is not a multiple of head_count %lld",
                        (long long)hp->n_embd, (long long)hp->n_head);
    if ((rc = hp_dim(&r, "attention.value_length", hp->head_dim_v, 1)) < 0)
        return rc;

    /* rope */
    struct rope_params *rp = &hp->rope;
    rp->style = ROPE_NORM;
    rc = hp_u32(&r, "rope.dimension_count", 0, &v);
    if (rc < 0)
        return rc;
    rp->n_rot = rc == 1 ? hp->head_dim : v;
    if (rp->n_rot != hp->head_dim)
        return diag_set(d, ST_FORMAT, "key '%s.rope.dimension_count': %lld, expected key_length %lld",
                        arch, (long long)rp->n_rot, (long long)hp->head_dim);
    if (rp->n_rot % 2 != 0)
        return diag_set(d, ST_FORMAT, "key '%s.rope.dimension_count': odd value %lld", arch,
                        (long long)rp->n_rot);
    rp->freq_base = 10000.0f;
    if ((rc = hp_f32(&r, "rope.freq_base", &f)) < 0)
        return rc;
    if (rc == 0)
        rp->freq_base = f;
    if (!(rp->freq_base > 0.0f))
        return diag_set(d, ST_FORMAT, "key '%s.rope.freq_base': must be positive", arch);

    const char *stype = "linear";
    if ((rc = hp_str(&r, "rope.scaling.type", &stype)) < 0)
        return rc;
    float factor = 0.0f;
    if ((rc = hp_f32(&r, "rope.scaling.factor", &factor)) < 0)
        return rc;
    if (rc == 1 && (rc = hp_f32(&r, "rope.scale_linear", &factor)) < 0)
        return rc;
    rp->freq_scale = 1.0f;
    if (strcmp(stype, "none") == 0) {
        /* no scaling */
    } else if (strcmp(stype, "linear") == 0) {
        if (factor < 0.0f)
            return diag_set(d, ST_FORMAT, "key '%s.rope.scaling.factor': negative", arch);
        if (factor > 0.0f)
            rp->freq_scale = 1.0f / factor;
    } else if (strcmp(stype, "yarn") == 0 || strcmp(stype, "longrope") == 0) {
        return diag_set(d, ST_FORMAT, "rope scaling '%s' is not supported", stype);
    } else {
        return diag_set(d, ST_FORMAT, "key '%s.rope.scaling.type': unknown value '%.32s'", arch,
                        stype);
    }

    rc = hp_u32(&r, "expert_count", 0, &v);
    if (rc < 0)
        return rc;
    if (rc == 0 && v > 0)
        return diag_set(d, ST_FORMAT, "mixture-of-experts models are not supported");
    return 0;
}

/* ---- tensors ---- */

static int
find_tensor(struct model *m, struct model_weight *w, const char *name, int64_t rows,
            int64_t cols, int is_matrix, int required, struct diag *d)
{
    int64_t i = gguf_find_tensor(&m->gguf, name);
    const struct gguf_tensor *t;

    memset(w, 0, sizeof(*w));
    if (i < 0) {
        if (required)
            return diag_set(d, ST_FORMAT, "missing tensor '%s'", name);
        return 0;
    }
    t = &m->gguf.t[i];
    int64_t want[GGUF_MAX_DIMS] = { cols, is_matrix ? rows : 1, 1, 1 };
    if (t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != 1 || t->ne[3] != 1) {
        if (is_matrix)
            return diag_set(d, ST_FORMAT,
                            "tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                            name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                            (long long)t->ne[3], (long long)cols, (long long)rows);
        return diag_set(d, ST_FORMAT, "tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld]",
                        name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)t->ne[3], (long long)cols);
    }
    const struct qtype *qt = qtype_get(t->type);
    if (is_matrix) {
        if (!qt || !m->ops->mm_supported(t->type))
            return diag_set(d, ST_FORMAT, "tensor '%s': type %s is not supported for compute",
                            name, qt ? qt->name : "unknown");
    } else if (t->type != GGML_TYPE_F32) {
        return diag_set(d, ST_FORMAT, "tensor '%s': type %s, expected F32", name,
                        qt ? qt->name : "unknown");
    }
    size_t rb = qtype_row_bytes(t->type, cols);
    if (rb == 0)
        return diag_set(d, ST_FORMAT, "tensor '%s': row of %lld is not a multiple of the %s block",
                        name, (long long)cols, qt->name);
    if (!t->data || t->nbytes / rb < (uint64_t)want[1])
        return diag_set(d, ST_FORMAT, "tensor '%s': data missing or short", name);
    w->name = t->name.p;
    w->data = t->data;
    w->type = t->type;
    w->rows = want[1];
    w->cols = cols;
    w->row_bytes = rb;
    return 0;
}

static int
load_tensors(struct model *m, struct diag *d)
{
    struct model_hparams *hp = &m->hp;
    int64_t n_embd = hp->n_embd, hd = hp->head_dim, hdv = hp->head_dim_v;
    int64_t q_dim = hp->n_head * hd, k_dim = hp->n_head_kv * hd, v_dim = hp->n_head_kv * hdv;
    int64_t o_in = hp->n_head * hdv;
    char name[96];
    int rc;

    /* vocabulary size: the embedding's rows, checked against the token list */
    int64_t ti = gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (ti < 0)
        return diag_set(d, ST_FORMAT, "missing tensor 'token_embd.weight'");
    hp->n_vocab = m->gguf.t[ti].ne[1];
    const struct gguf_kv *tok = gguf_get(&m->gguf, "tokenizer.ggml.tokens");
    if (tok && tok->type == GGUF_TYPE_ARRAY && tok->n != (uint64_t)hp->n_vocab)
        return diag_set(d, ST_FORMAT, "tensor 'token_embd.weight': %lld rows, but %llu tokens",
                        (long long)hp->n_vocab, (unsigned long long)tok->n);
    if (hp->n_vocab < 1 || hp->n_vocab > INT32_MAX)
        return diag_set(d, ST_FORMAT, "tensor 'token_embd.weight': bad vocabulary size %lld",
                        (long long)hp->n_vocab);
    if ((rc = find_tensor(m, &m->tok_embd, "token_embd.weight", hp->n_vocab, n_embd, 1, 1, d)) < 0)
        return rc;
    if ((rc = find_tensor(m, &m->output_norm, "output_norm.weight", 1, n_embd, 0, 1, d)) < 0)
        return rc;
    if ((rc = find_tensor(m, &m->output, "output.weight", hp->n_vocab, n_embd, 1, 0, d)) < 0)
        return rc;
    hp->tied_output = m->output.data == NULL;
    if (hp->tied_output)
        m->output = m->tok_embd;
    if ((rc = find_tensor(m, &m->rope_freqs, "rope_freqs.weight", 1, hp->rope.n_rot / 2, 0, 0,
                          d)) < 0)
        return rc;
    hp->rope.freq_factors = m->rope_freqs.data;

    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (int64_t l = 0; l < hp->n_layer; l++) {
        struct model_layer *L = &m->layers[l];
        struct {
            struct model_weight *w;
            const char *suffix;
            int64_t rows, cols;
            int matrix, required;
        } spec[] = {
            { &L->attn_norm, "attn_norm.weight", 1, n_embd, 0, 1 },
            { &L->wq, "attn_q.weight", q_dim, n_embd, 1, 1 },
            { &L->wk, "attn_k.weight", k_dim, n_embd, 1, 1 },
            { &L->wv, "attn_v.weight", v_dim, n_embd, 1, 1 },
            { &L->wo, "attn_output.weight", n_embd, o_in, 1, 1 },
            { &L->bq, "attn_q.bias", 1, q_dim, 0, 0 },
            { &L->bk, "attn_k.bias", 1, k_dim, 0, 0 },
            { &L->bv, "attn_v.bias", 1, v_dim, 0, 0 },
            { &L->bo, "attn_output.bias", 1, n_embd, 0, 0 },
            { &L->ffn_norm, "ffn_norm.weight", 1, n_embd, 0, 1 },
            { &L->ffn_gate, "ffn_gate.weight", hp->n_ff, n_embd, 1, 1 },
            { &L->ffn_up, "ffn_up.weight", hp->n_ff, n_embd, 1, 1 },
            { &L->ffn_down, "ffn_down.weight", n_embd, hp->n_ff, 1, 1 },
        };
        for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
            snprintf(name, sizeof(name), "blk.%lld.%s", (long long)l, spec[i].suffix);
            if ((rc = find_tensor(m, spec[i].w, name, spec[i].rows, spec[i].cols, spec[i].matrix,
                                  spec[i].required, d)) < 0)
                return rc;
        }
        if (gguf_find_tensor(&m->gguf, (snprintf(name, sizeof(name), "blk.%lld.attn_qkv.weight",
                                                 (long long)l), name)) >= 0)
            return diag_set(d, ST_FORMAT, "tensor '%s': fused qkv is not supported", name);
    }
    return 0;
}

/* matmul weight i of the model: 7 per layer, then the output */
static struct model_weight *
mm_weight(struct model *m, int64_t i)
{
    if (i == 7 * m->hp.n_layer)
        return &m->output;
    struct model_layer *L = &m->layers[i / 7];
    struct model_weight *lw[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up,
                                   &L->ffn_down };
    return lw[i % 7];
}

/* bytes of weight w's packed form, 0 when the table keeps it as it is */
static size_t
pack_bytes(const struct model *m, const struct model_weight *w)
{
    return w->data ? m->ops->mm_pack_size(w->type, w->rows, w->cols) : 0;
}

/* The matmul weights the kernel table keeps in its own layout
 * (ops->mm_pack), packed once into one buffer; the GGUF pages of a packed
 * tensor are then dropped from memory (the mapping stays valid: a later
 * read faults them back in from the file), so the model costs about its
 * file size, not twice it. */
static int
pack_weights(struct model *m, struct diag *d)
{
    const int64_t n = 7 * m->hp.n_layer + 1;
    const long pg = sysconf(_SC_PAGESIZE);
    size_t total = 0, at = 0;

    if (!m->ops->mm_pack_size || !m->ops->mm_pack)
        return 0;
    for (int64_t i = 0; i < n; i++)
        total += (pack_bytes(m, mm_weight(m, i)) + 63) & ~(size_t)63;
    if (!total)
        return 0;
    m->pack_buf = aligned_alloc(64, total);
    if (!m->pack_buf)
        return diag_set(d, ST_NOMEM, "out of memory packing the weights (%zu bytes)", total);
    for (int64_t i = 0; i < n; i++) {
        struct model_weight *w = mm_weight(m, i);
        size_t b = pack_bytes(m, w);
        if (!b)
            continue;
        void *dst = (uint8_t *)m->pack_buf + at;
        at += (b + 63) & ~(size_t)63;
        m->ops->mm_pack(dst, w->data, w->row_bytes, w->type, w->rows, w->cols);
        w->packed = dst;
        /* (pages of a large page-cache folio that the tensor covers only in
         * part stay mapped: with 2 MiB folios, about a quarter of the
         * dropped bytes for SmolLM2's small tensors) */
        uintptr_t a = ((uintptr_t)w->data + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
        uintptr_t e = ((uintptr_t)w->data + w->row_bytes * (size_t)w->rows) & ~((uintptr_t)pg - 1);
        if (pg > 0 && e > a)
            (void)madvise((void *)a, e - a, MADV_DONTNEED);
    }
    return 0;
}

int
model_open(struct model **out, const char *path, const struct model_opts *o, struct diag *d)
{
    struct model_opts def = MODEL_OPTS_INIT;
    struct model *m;
    int rc;

    *out = NULL;
    if (!o)
        o = &def;
    m = calloc(1, sizeof(*m));
    if (!m)
        return diag_set(d, ST_NOMEM, "out of memory");
    m->ops = ops_select(o->kernel);
    if (!m->ops) {
        rc = diag_set(d, ST_RANGE, "unknown or unavailable kernel '%s' (known: auto, avx512, avx2, ref)",
                      o->kernel ? o->kernel : getenv("LLMKIT_KERNEL"));
        free(m);
        return rc;
    }
    rc = gguf_open(&m->gguf, path, d);
    if (rc < 0) {
        free(m);
        return rc;
    }
    if (!m->gguf.src || !m->gguf.src->map) {
        rc = diag_set(d, ST_IO, "a model must be a regular file (it is mapped, not streamed)");
        goto err;
    }
    if ((rc = load_hparams(m, d)) < 0 || (rc = load_tensors(m, d)) < 0 ||
        (rc = pack_weights(m, d)) < 0)
        goto err;
    if ((rc = threadpool_new(&m->tp, o->n_threads, d)) < 0)
        goto err;
    m->max_batch = o->max_batch;
    if ((rc = forward_state_new(m, d)) < 0)
        goto err;
    *out = m;
    return 0;
err:
    model_free(m);
    return rc;
}

void
model_free(struct model *m)
{
    if (!m)
        return;
    forward_state_free(m);
    threadpool_free(m->tp);
    free(m->layers);
    free(m->pack_buf);
    gguf_release(&m->gguf);
    free(m);
}

void
model_kv_config(const struct model *m, size_t mem, uint32_t dtype, struct kv_config *c)
{
    struct kv_config def = KV_CONFIG_INIT;

    *c = def;
    c->n_layer = m->hp.n_layer;
    c->n_head_kv = m->hp.n_head_kv;
    c->head_dim_k = m->hp.head_dim;
    c->head_dim_v = m->hp.head_dim_v;
    c->dtype = dtype;
    c->mem = mem;
}

size_t
model_kv_bytes_per_token(const struct model *m, uint32_t dtype)
{
    return (size_t)m->hp.n_layer * (size_t)m->hp.n_head_kv *
           (kv_dtype_row_bytes(dtype, m->hp.head_dim) + kv_dtype_row_bytes(dtype, m->hp.head_dim_v));
}
