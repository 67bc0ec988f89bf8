/*
 * convert_hf.c - Hugging Face checkpoint directories <-> GGUF, and --info
 * for them.  The HF side (config, vocabulary, names, permutation) is hf.h;
 * the containers are safetensors.h and gguf.h; tensors stream through
 * tensor_emit() (gguf_write.h) one at a time.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert.h"
#include "convert_priv.h"
#include "eagle_hf.h"
#include "escape.h"
#include "gguf.h"
#include "gguf_write.h"
#include "hf.h"
#include "json.h"
#include "qgrid.h"
#include "qtypes.h"
#include "safetensors.h"
#include "xio.h"

/* ggml type of a safetensors dtype we can convert, or -1. */
static int
ggml_of_sft(enum sft_dtype t)
{
    switch (t) {
    case SFT_F32: return GGML_TYPE_F32;
    case SFT_F16: return GGML_TYPE_F16;
    case SFT_BF16: return GGML_TYPE_BF16;
    default: return -1;
    }
}

static enum sft_dtype
sft_of_ggml(uint32_t t)
{
    switch (t) {
    case GGML_TYPE_F16: return SFT_F16;
    case GGML_TYPE_BF16: return SFT_BF16;
    default: return SFT_F32;
    }
}

/* Canonical GGUF tensor order: token_embd first, then layer by layer, then
 * the rest (output_norm, output, rope_freqs); ties by name. */
static int
tensor_order_key(const struct out_tensor *t, int32_t layer)
{
    if (!strcmp(t->name, "token_embd.weight"))
        return -1;
    return layer >= 0 ? layer : 1 << 30;
}

struct ordered {
    struct out_tensor t;
    int key;
    int64_t grid;               /* index into the qmodel of a GPTQ/AWQ dir, or -1 */
};

static int
cmp_ordered(const void *a, const void *b)
{
    const struct ordered *x = a, *y = b;

    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

static char *
dir_basename(const char *dir)
{
    char *cp = strdup(dir), *b, *out;
    size_t n;

    if (!cp)
        return NULL;
    n = strlen(cp);
    while (n > 1 && cp[n - 1] == '/')
        cp[--n] = '\0';
    b = basename(cp);
    out = strdup(b);
    free(cp);
    return out;
}

int
hf_dir_check_files(const char *dir, struct diag *d)
{
    static const char *const names[] = {
        "config.json", SFT_INDEX_NAME, SFT_SINGLE_NAME, "tokenizer.json", "tokenizer_config.json",
        "tokenizer.model", "added_tokens.json", "merges.txt", "chat_template.jinja",
        "quantize_config.json", "quant_config.json",
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char *p = path_join(dir, names[i]);
        struct stat st;
        bool special = p && stat(p, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
        free(p);
        if (!p)
            return diag_set(d, ST_NOMEM, "out of memory");
        if (special)
            return diag_set(d, ST_IO, "'%s': is %s, not a regular file", names[i],
                            file_kind_name(st.st_mode));
    }
    return 0;
}

/* ---- shapes ---- */

/* "[a, b, ...]" of n dims into buf; a dimension <= 0 is the vocabulary,
 * which config.json did not give */
static const char *
shape_str(char *buf, size_t size, int n, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, size, "[");

    for (int i = 0; i < n && k < size; i++) {
        if (shape[i] > 0)
            k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
        else
            k += (size_t)snprintf(buf + k, size - k, "%svocab", i ? ", " : "");
    }
    if (k < size)
        snprintf(buf + k, size - k, "]");
    return buf;
}

/* Whether HF tensor t has the shape config.json implies for it (m, from
 * hf_name_to_gguf): a matrix [rows, cols], a vector [cols].  The
 * vocabulary, when config.json does not give it, is the first tensor's
 * that has one (*vocab, 0 until then), so that the embedding and the LM
 * head agree.  0, or -ST_FORMAT naming the tensor (the caller names its
 * file). */
static int
check_shape(const struct sft_tensor *t, const struct hf_tensor_map *m, int64_t *vocab,
            struct diag *d)
{
    const int n = t->n_dims;
    const int64_t *shape = t->shape;
    int64_t want[2] = { m->matrix ? m->rows : m->cols, m->cols };
    int want_n = m->matrix ? 2 : 1;
    bool ok = n == want_n;
    char got_s[96], want_s[64];

    if (m->matrix && m->rows <= 0)
        want[0] = *vocab;
    for (int i = 0; ok && i < want_n; i++)
        ok = want[i] <= 0 || shape[i] == want[i];
    if (ok) {
        if (m->matrix && m->rows <= 0)
            *vocab = shape[0];
        return 0;
    }
    return diag_set(d, ST_FORMAT, "tensor '%s' has shape %s, config.json implies %s", t->name,
                    shape_str(got_s, sizeof(got_s), n, shape),
                    shape_str(want_s, sizeof(want_s), want_n, want));
}

/* ---- GPTQ / AWQ directories ---- */

/* The parts of a quantized linear, which qmodel_read_hf reads as a grid. */
static bool
is_quant_part(const char *name)
{
    static const char *const sfx[] = {".qweight", ".qzeros", ".scales", ".g_idx"};
    size_t n = strlen(name);

    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        size_t k = strlen(sfx[i]);
        if (n > k && !strcmp(name + n - k, sfx[i]))
            return true;
    }
    return false;
}

/* Grid tensors come dequantized (the loaders' fp16 rounding), one at a time. */
struct grid_fetch {
    const struct qmodel *qm;
    const int64_t *grid_of;     /* output tensor -> grid */
    float *buf;
    size_t cap;                 /* floats */
};

static int
fetch_grid(void *ctx, size_t i, const void **data, struct diag *d)
{
    struct grid_fetch *f = ctx;
    const struct qgrid *g = f->qm->t[f->grid_of[i]].g;
    size_t n = (size_t)(g->rows * g->cols);

    if (n > f->cap) {
        free(f->buf);
        f->cap = 0;
        if (!(f->buf = malloc(n * sizeof(float))))
            return diag_set(d, ST_NOMEM, "tensor '%s': out of memory", f->qm->t[f->grid_of[i]].name);
        f->cap = n;
    }
    /* A NaN or Inf scale (or one whose product overflows fp16) is bad data
     * whatever the output type: f16, bf16 and f32 would hold it silently. */
    for (int64_t r = 0; r < g->rows; r++) {
        const float *w = f->buf + r * g->cols;
        qgrid_dequant_row(g, r, f->buf + r * g->cols);
        for (int64_t c = 0; c < g->cols; c++)
            if (!isfinite(w[c]))
                return diag_set(d, ST_FORMAT,
                                "tensor '%s': row %lld: dequantized weight not finite in fp16",
                                f->qm->t[f->grid_of[i]].name, (long long)r);
    }
    *data = f->buf;
    return 0;
}

/* Lossless: the GGUF is written with the grids in F16 (which holds the
 * loaders' dequantized weights exactly) to a temporary next to the output,
 * which qmodel_write_gguf then copies with every grid in the type that
 * holds it. */
static int
write_quant_gguf(struct gguf *g, const struct out_tensor *flat, size_t n, struct grid_fetch *gf,
                 struct qmodel *qm, const struct convert_opts *o, struct diag *d)
{
    struct gguf_write_opts wo = CONVERT_WRITE_OPTS(o);
    struct xout tx = {0};
    const char *tmpdir = getenv("TMPDIR");
    char *tmp;
    int rc;

    if (o->out)
        return diag_set(d, ST_RANGE, "a GPTQ/AWQ directory is written to a GGUF of its own");
    if (!strcmp(o->output, "-"))
        tmp = path_join(tmpdir && *tmpdir ? tmpdir : "/tmp", "llmkit-convert-grids.gguf");
    else if ((tmp = malloc(strlen(o->output) + 8)))
        sprintf(tmp, "%s.f16src", o->output);
    if (!tmp)
        return diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
    /* never committed: force only lets an existing file of that name be */
    if ((rc = xout_open(&tx, tmp, true, d)) < 0) {
        diag_prefix(d, "'%s'", tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    wo.out = &tx;
    wo.output = tx.tmp;         /* its write errors name the staging file */
    wo.cb.progress = NULL;
    rc = write_gguf_out(g, flat, n, fetch_grid, gf, &wo, d);
    if (!rc && fflush(tx.fp))
        rc = diag_set(d, ST_IO, "'%s': write failed: %s", tx.tmp, strerror(errno ? errno : EIO));
    if (!rc) {
        qm->src_path = tx.tmp;
        rc = qmodel_write_gguf(qm, o->output, o->force, &o->cb, d);
        qm->src_path = NULL;
        if (rc < 0 && rc != -ST_IO)     /* (an I/O error names its file: qgrid.h) */
            diag_prefix(d, "'%s'", o->input);
    }
    xout_abort(&tx);
    return rc;
}

int
convert_hf_to_gguf(const struct convert_opts *o, struct diag *d)
{
    struct hf_config cfg;
    struct hf_vocab voc;
    struct sft_model sm;
    struct gguf g;
    struct ordered *ts = NULL;
    struct out_tensor *flat = NULL;
    struct gguf_write_opts wo = CONVERT_WRITE_OPTS(o);
    float *rope_freqs = NULL;
    char *path = NULL, *name = NULL;
    size_t n = 0;
    int want = o->out_type, rc;
    int32_t *layer_count = NULL;
    bool have_embd = false, quant = false;
    struct qmodel qm = {0};
    struct grid_fetch gf = {0};
    int64_t *grid_of = NULL;
    int64_t vocab = 0;          /* rows of a vocabulary matrix (check_shape) */

    memset(&sm, 0, sizeof(sm));
    hf_vocab_init(&voc);
    gguf_init(&g);
    path = path_join(o->input, "config.json");
    if (!path) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    rc = hf_config_load(&cfg, path, d);
    if (rc) {
        diag_prefix(d, "'%s'", o->input);
        goto out;
    }
    rc = sft_model_open(&sm, o->input, d);
    if (rc) {
        diag_prefix(d, "'%s'", o->input);
        goto out;
    }
    rc = hf_vocab_load(&voc, o->input, &cfg, d);
    if (rc) {
        diag_prefix(d, "'%s'", o->input);
        goto out;
    }
    if (voc.warning[0])
        runcb_warn(&o->cb, "%s", voc.warning);
    /* a GPTQ or AWQ directory: its linears as grids */
    if ((rc = qmodel_read_hf(o->input, &qm, d)) < 0)
        goto out;
    quant = rc == 0;

    ts = calloc(sm.n_tensors + (quant ? (size_t)qm.n : 0) + 1, sizeof(*ts));
    layer_count = calloc((size_t)cfg.n_layer, sizeof(*layer_count));
    if (!ts || !layer_count) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    /* --type auto: the type of the first matrix in file order (bf16 or f16), else f16. */
    if (want < 0) {
        want = GGML_TYPE_F16;
        for (size_t f = 0; f < sm.n_files && want == GGML_TYPE_F16; f++) {
            for (size_t i = 0; i < sm.files[f].n_tensors; i++) {
                const struct sft_tensor *t = &sm.files[f].t[i];
                if (t->n_dims >= 2 && ggml_of_sft(t->dtype) >= 0) {
                    if (t->dtype == SFT_BF16)
                        want = GGML_TYPE_BF16;
                    break;
                }
            }
        }
    }
    for (size_t i = 0; i < sm.n_tensors; i++) {
        const struct sft_tensor *t = sm.tensors[i].t;
        struct hf_tensor_map m;
        struct out_tensor *ot = &ts[n].t;
        int gt = ggml_of_sft(t->dtype);

        if (quant && is_quant_part(t->name))
            continue;
        rc = hf_name_to_gguf(&cfg, t->name, &m, d);
        if (rc < 0) {
            diag_prefix(d, "'%s'", o->input);
            goto out;
        }
        if (rc == 0)
            continue;
        if (gt < 0) {
            rc = diag_set(d, ST_FORMAT, "'%s': tensor '%s' has dtype %s (F32, F16 or BF16 expected)",
                          o->input, t->name, sft_dtype_name(t->dtype));
            goto out;
        }
        if (t->n_dims < 1 || t->n_dims > 4 || strlen(m.name) > GGUF_MAX_NAME) {
            rc = diag_set(d, ST_FORMAT, "'%s': tensor '%s' has %d dimensions", o->input, t->name, t->n_dims);
            goto out;
        }
        if ((rc = check_shape(t, &m, &vocab, d)) < 0) {
            diag_prefix(d, "'%s/%s'", o->input, sm.file_names[sm.tensors[i].file]);
            goto out;
        }
        snprintf(ot->name, sizeof(ot->name), "%s", m.name);
        ot->n_dims = (uint32_t)t->n_dims;
        for (int j = 0; j < 4; j++)
            ot->ne[j] = j < t->n_dims ? t->shape[t->n_dims - 1 - j] : 1;
        ot->type = hf_tensor_force_f32(m.name, ot->n_dims) ? GGML_TYPE_F32 : (uint32_t)want;
        ot->src.data = t->data;
        ot->src.type = (uint32_t)gt;
        memcpy(ot->src.ne, ot->ne, sizeof(ot->ne));
        ot->src.perm_heads = m.perm != HF_PERM_NONE ? (int)m.perm_heads : 0;
        ot->src.add = m.shift;
        /* Gemma3Model.modify_tensors: embedding rows past the vocabulary go */
        if (cfg.arch == HF_ARCH_GEMMA3 && !strcmp(m.name, "token_embd.weight") &&
            ot->n_dims == 2 && ot->ne[1] > voc.n_tokens)
            ot->ne[1] = ot->src.ne[1] = voc.n_tokens;
        ts[n].key = tensor_order_key(ot, m.layer);
        ts[n].grid = -1;
        if (!strcmp(m.name, "token_embd.weight"))
            have_embd = true;
        if (m.layer >= 0 && m.layer < cfg.n_layer)
            layer_count[m.layer]++;
        n++;
    }
    for (int64_t j = 0; quant && j < qm.n; j++) {
        const struct qgrid *gr = qm.t[j].g;
        struct out_tensor *ot = &ts[n].t;
        int layer = -1;
        snprintf(ot->name, sizeof(ot->name), "%s", qm.t[j].name);
        ot->n_dims = 2;
        ot->ne[0] = gr->cols;
        ot->ne[1] = gr->rows;
        ot->ne[2] = ot->ne[3] = 1;
        /* lossless (no --type): F16 holds the loaders' weights exactly */
        ot->type = o->out_type < 0 ? GGML_TYPE_F16 : (uint32_t)want;
        ot->src.type = GGML_TYPE_F32;
        memcpy(ot->src.ne, ot->ne, sizeof(ot->ne));
        if (sscanf(ot->name, "blk.%d.", &layer) != 1)
            layer = -1;
        ts[n].key = tensor_order_key(ot, layer);
        ts[n].grid = j;
        if (layer >= 0 && layer < cfg.n_layer)
            layer_count[layer]++;
        n++;
    }
    if (!have_embd) {
        rc = diag_set(d, ST_FORMAT, "'%s': no model.embed_tokens.weight tensor", o->input);
        goto out;
    }
    for (int64_t l = 0; l < cfg.n_layer; l++) {
        if (layer_count[l] < hf_layer_tensors_required(&cfg)) {
            rc = diag_set(d, ST_FORMAT, "'%s': layer %lld has %d of the %d %s tensors", o->input,
                          (long long)l, layer_count[l], hf_layer_tensors_required(&cfg),
                          cfg.arch_name);
            goto out;
        }
    }
    if (cfg.rope.type == HF_ROPE_LLAMA3) {
        struct out_tensor *ot = &ts[n].t;
        int64_t nf = cfg.head_dim / 2;
        rope_freqs = malloc((size_t)nf * sizeof(float));
        if (!rope_freqs) {
            rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
            goto out;
        }
        rc = hf_rope_freqs(&cfg, rope_freqs, nf, d);
        if (rc) {
            diag_prefix(d, "'%s'", o->input);
            goto out;
        }
        snprintf(ot->name, sizeof(ot->name), "rope_freqs.weight");
        ot->n_dims = 1;
        ot->ne[0] = nf;
        ot->ne[1] = ot->ne[2] = ot->ne[3] = 1;
        ot->type = GGML_TYPE_F32;
        ot->src.data = rope_freqs;
        ot->src.type = GGML_TYPE_F32;
        memcpy(ot->src.ne, ot->ne, sizeof(ot->ne));
        ts[n].key = 1 << 30;
        ts[n].grid = -1;
        n++;
    }
    qsort(ts, n, sizeof(*ts), cmp_ordered);
    flat = calloc(n ? n : 1, sizeof(*flat));
    grid_of = calloc(n ? n : 1, sizeof(*grid_of));
    if (!flat || !grid_of) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        flat[i] = ts[i].t;
        grid_of[i] = ts[i].grid;
    }

    name = dir_basename(o->input);
    if (!name || gguf_set_str(&g, "general.architecture", cfg.arch_name) ||
        gguf_set_str(&g, "general.type", "model") || gguf_set_str(&g, "general.name", name)) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    if ((rc = hf_config_to_gguf(&g, &cfg, ftype_for_type(want), d)) ||
        (rc = hf_vocab_to_gguf(&g, &voc, d))) {
        diag_prefix(d, "'%s'", o->input);
        goto out;
    }
    gf.qm = &qm;
    gf.grid_of = grid_of;
    if (quant && o->out_type < 0)
        rc = write_quant_gguf(&g, flat, n, &gf, &qm, o, d);
    else
        rc = write_gguf_out(&g, flat, n, fetch_grid, &gf, &wo, d);
out:
    free(gf.buf);
    free(grid_of);
    qmodel_release(&qm);
    free(flat);
    free(ts);
    free(layer_count);
    free(rope_freqs);
    free(name);
    free(path);
    gguf_release(&g);
    sft_model_close(&sm);
    hf_vocab_release(&voc);
    return rc;
}

/* ---- GGUF -> HF ---- */

int
convert_gguf_to_hf(const struct convert_opts *o, struct diag *d)
{
    struct gguf g;
    struct hf_config cfg;
    struct hf_vocab voc;
    struct sft_plan plan;
    struct sft_writer w;
    struct xout xo;
    struct sft_wtensor *specs = NULL;
    struct tsrc *srcs = NULL;
    struct hf_tensor_map *maps = NULL;
    size_t n = 0, n_f16 = 0, n_bf16 = 0, n_f32 = 0;
    uint64_t done = 0;
    bool lossy = false, writer_open = false, dir_open = false;
    const char *torch_dtype;
    int rc;

    memset(&plan, 0, sizeof(plan));
    memset(&xo, 0, sizeof(xo));
    hf_vocab_init(&voc);
    if (path_is_stream(o->input))
        return diag_set(d, ST_RANGE, "'%s': GGUF to HF needs a GGUF file, not a pipe or device "
                        "(tensors are written in another order)", o->input);
    rc = gguf_open(&g, o->input, d);
    if (rc) {
        diag_prefix(d, "'%s'", o->input);
        return rc;
    }
    if ((rc = hf_config_from_gguf(&cfg, &g, d)) || (rc = hf_vocab_from_gguf(&voc, &g, d))) {
        diag_prefix(d, "'%s'", o->input);
        goto out;
    }
    if (voc.warning[0])
        runcb_warn(&o->cb, "%s", voc.warning);
    if (voc.pre[0] && !hf_pre_known(voc.pre))
        runcb_warn(&o->cb, "no HF pre-tokenizer for '%s': tokenizer.json gets GPT-2's", voc.pre);
    specs = calloc(g.n_tensors + 1, sizeof(*specs));
    srcs = calloc(g.n_tensors + 1, sizeof(*srcs));
    maps = calloc(g.n_tensors + 1, sizeof(*maps));
    if (!specs || !srcs || !maps) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const struct gguf_tensor *t = &g.t[i];
        const struct qtype *qt = qtype_get(t->type);
        uint32_t ty;
        rc = hf_name_from_gguf(&cfg, t->name.p, &maps[n], d);
        if (rc < 0) {
            diag_prefix(d, "'%s'", o->input);
            goto out;
        }
        if (rc == 0)
            continue;
        if (o->out_type >= 0)
            ty = hf_tensor_force_f32(t->name.p, t->n_dims) ? GGML_TYPE_F32 : (uint32_t)o->out_type;
        else if (t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_F16 || t->type == GGML_TYPE_BF16)
            ty = t->type;
        else
            ty = GGML_TYPE_F32;     /* dequantized exactly */
        if (ty != t->type && !qt->to_float) {
            rc = diag_set(d, ST_RANGE, "'%s': tensor '%s': cannot convert from type %s", o->input,
                          t->name.p, qt->name);
            goto out;
        }
        if (qt->blck > 1)
            lossy = true;
        specs[n].name = maps[n].name;
        specs[n].dtype = sft_of_ggml(ty);
        specs[n].n_dims = (int)t->n_dims;
        for (uint32_t j = 0; j < t->n_dims; j++)
            specs[n].shape[j] = t->ne[t->n_dims - 1 - j];
        srcs[n].data = t->data;
        srcs[n].type = t->type;
        memcpy(srcs[n].ne, t->ne, sizeof(srcs[n].ne));
        srcs[n].perm_heads = maps[n].perm != HF_PERM_NONE ? -(int)maps[n].perm_heads : 0;
        srcs[n].add = maps[n].shift;
        if (t->n_dims >= 2)
            *(ty == GGML_TYPE_F16 ? &n_f16 : ty == GGML_TYPE_BF16 ? &n_bf16 : &n_f32) += 1;
        n++;
    }
    if (lossy)
        runcb_warn(&o->cb, "%s",
                   o->out_type >= 0 ? "dequantizing quantized tensors: the output keeps the quantization error"
                                    : "dequantizing quantized tensors to f32 (exact); --type f16 or bf16 gives a smaller checkpoint");
    torch_dtype = n_bf16 >= n_f16 && n_bf16 >= n_f32 && n_bf16 ? "bfloat16"
                  : n_f16 >= n_f32 && n_f16 ? "float16" : "float32";
    rc = sft_plan_init(&plan, specs, n, o->shard_size ? o->shard_size : SFT_DEFAULT_SHARD, NULL,
                       0, d);
    if (rc) {
        diag_prefix(d, "'%s'", o->input);
        goto out;
    }
    rc = xout_open_dir(&xo, o->output, o->force, d);
    if (rc) {
        diag_prefix(d, "'%s'", o->output);
        goto out;
    }
    dir_open = true;
    /* From here on a write error names the output directory (and the file
     * in it, where the writer says which), any other error the input. */
    rc = hf_write_dir(xo.tmp, &cfg, &voc, torch_dtype, d);
    if (rc)
        goto out_dir;
    rc = sft_writer_open_dir(&w, &plan, xo.tmp, false, d);
    if (rc)
        goto out_dir;
    writer_open = true;
    runcb_progress(&o->cb, "converting", 0, (int64_t)plan.total_size);
    for (size_t k = 0; k < plan.n; k++) {
        size_t i = plan.order[k];
        struct sft_sink sk = {&w, i};
        uint32_t ty = specs[i].dtype == SFT_F16 ? GGML_TYPE_F16
                      : specs[i].dtype == SFT_BF16 ? GGML_TYPE_BF16 : GGML_TYPE_F32;
        rc = tensor_emit(&srcs[i], ty, sft_sink_put, &sk, d);
        if (rc) {
            if (rc != -ST_IO)
                diag_prefix(d, "tensor '%s'", specs[i].name);
            goto out_dir;
        }
        done += plan.nbytes[i];
        runcb_progress(&o->cb, "converting", (int64_t)done, (int64_t)plan.total_size);
    }
    writer_open = false;
    rc = sft_writer_close(&w, d);
    if (rc)
        goto out_dir;
    rc = xout_commit(&xo, d);
    dir_open = false;
    if (rc)
        diag_prefix(d, "'%s'", o->output);
    goto out;
out_dir:
    diag_prefix(d, "'%s'", rc == -ST_IO ? o->output : o->input);
out:
    if (writer_open)
        sft_writer_abort(&w);
    if (dir_open)
        xout_abort(&xo);
    sft_plan_release(&plan);
    free(specs);
    free(srcs);
    free(maps);
    hf_vocab_release(&voc);
    gguf_release(&g);
    return rc;
}

/* ---- --info for an HF directory ---- */

int
info_hf(const char *dir, bool json, FILE *out, struct diag *d)
{
    struct hf_config cfg;
    struct sft_model sm;
    char *path = path_join(dir, "config.json");
    uint64_t params = 0, bytes = 0;
    int rc;

    if (!path)
        return diag_set(d, ST_NOMEM, "out of memory");
    /* an EAGLE-3 head: its layer's configuration (anything else, even a
     * config.json that does not parse, is left to hf_config_load) */
    if ((rc = eagle_hf_layer_config(&cfg, dir, d)) <= 0)
        rc = hf_config_load(&cfg, path, d);
    free(path);
    if (rc < 0)
        return rc;
    rc = sft_model_open(&sm, dir, d);
    if (rc)
        return rc;
    if (!json) {
        fprintf(out, "%s: Hugging Face checkpoint, %s (GGUF arch %s), %zu safetensors file%s, %zu tensors\n"
                     "config: hidden_size %" PRId64 ", layers %" PRId64 ", heads %" PRId64 " (kv %" PRId64
                     "), head_dim %" PRId64 ", intermediate_size %" PRId64 ", vocab_size %" PRId64
                     ", context %" PRId64 ", rope_theta %g, rms_norm_eps %g, torch_dtype %s\n"
                     "tensors:\n  %-5s %-52s %-5s %-20s %-32s %12s\n",
                ESC(dir), ESC(cfg.hf_arch), cfg.arch_name, sm.n_files, sm.n_files == 1 ? "" : "s",
                sm.n_tensors,
                cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_ff, cfg.n_vocab,
                cfg.n_ctx, cfg.rope_theta, cfg.rms_eps, cfg.torch_dtype[0] ? ESC(cfg.torch_dtype) : "-",
                "#", "name", "dtype", "shape", "file", "bytes");
    }
    for (size_t i = 0; i < sm.n_tensors && !rc; i++) {
        const struct sft_tensor *t = sm.tensors[i].t;
        const char *file = sm.file_names[sm.tensors[i].file];
        params += t->numel;
        bytes += t->nbytes;
        if (!json) {
            char shape[64];
            int k = 0;
            shape[0] = '\0';
            for (int j = 0; j < t->n_dims && k < (int)sizeof(shape); j++)
                k += snprintf(shape + k, sizeof(shape) - (size_t)k, "%s%" PRId64, j ? " x " : "", t->shape[j]);
            fprintf(out, "  %-5zu %-52s %-5s %-20s %-32s %12" PRIu64 "\n", i,
                    ESC(t->name), sft_dtype_name(t->dtype), shape, ESC(file), t->nbytes);
        } else {
            json_t *o = json_object(), *sh = json_array();
            for (int j = 0; j < t->n_dims; j++)
                json_array_append_new(sh, json_integer(t->shape[j]));
            json_object_set_new(o, "schema", json_string("convert-info/1"));
            json_object_set_new(o, "type", json_string("tensor"));
            json_object_set_new(o, "index", json_integer((json_int_t)i));
            json_object_set_new(o, "name", json_string(t->name));
            json_object_set_new(o, "dtype", json_string(sft_dtype_name(t->dtype)));
            json_object_set_new(o, "shape", sh);
            json_object_set_new(o, "file", json_string(file));
            json_object_set_new(o, "offset", json_integer((json_int_t)t->begin));
            json_object_set_new(o, "bytes", json_integer((json_int_t)t->nbytes));
            rc = json_print_line(o, out, d);
            json_decref(o);
        }
    }
    if (!rc && !json) {
        fprintf(out, "totals: %zu tensors, %" PRIu64 " parameters, %" PRIu64 " bytes of tensor data, %.4f bits per weight\n",
                sm.n_tensors, params, bytes, params ? 8.0 * (double)bytes / (double)params : 0.0);
    } else if (!rc) {
        json_t *o = json_object();
        json_object_set_new(o, "schema", json_string("convert-info/1"));
        json_object_set_new(o, "type", json_string("summary"));
        json_object_set_new(o, "format", json_string("hf"));
        json_object_set_new(o, "architecture", json_string(cfg.hf_arch));
        json_object_set_new(o, "n_files", json_integer((json_int_t)sm.n_files));
        json_object_set_new(o, "n_tensors", json_integer((json_int_t)sm.n_tensors));
        json_object_set_new(o, "parameters", json_integer((json_int_t)params));
        json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(o, "bits_per_weight", json_real(params ? 8.0 * (double)bytes / (double)params : 0.0));
        rc = json_print_line(o, out, d);
        json_decref(o);
    }
    sft_model_close(&sm);
    return rc;
}
