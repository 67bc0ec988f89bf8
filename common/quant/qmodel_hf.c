/*
 * qmodel_hf.c - GPTQ (v1 "gptq", "gptq_v2") and AWQ GEMM directories:
 * qmodel_write_hf and qmodel_read_hf (qgrid.h).
 *
 * Layouts (../shared/reference/algorithms.md §2, §4), K = in_features =
 * grid cols, N = out_features = grid rows, G = number of groups, b = bits:
 *   GPTQ  qweight int32 [K*b/32, N]  along K: value k of column n at bit b*k
 *                                    of the column's little-endian bit
 *                                    stream (so 3-bit values straddle words)
 *         qzeros  int32 [G, N*b/32]  along N, the same stream; v1 stores
 *                                    zero - 1 (masked to b bits), v2 zero
 *         scales  fp16  [G, N]
 *         g_idx   int32 [K]
 *   AWQ   qweight int32 [K, N/8]     along N, nibble i of word j = column
 *                                    8j + ORDER[i], ORDER = 0 2 4 6 1 3 5 7
 *         qzeros  int32 [G, N/8]     the same, the real zero
 *         scales  fp16  [G, N]       (4-bit only, groups in order, K % gs == 0)
 * Rows are in HF order: llama.cpp's q/k row permutation (GGUF order, the
 * grid's) is undone on the integers, the scales and the zeros alike.
 * Names, config.json, the tokenizer files and the unquantized tensors are
 * convert's GGUF -> HF code (hf.h); the unquantized tensors keep the
 * source's float type (quantized ones become F32, exactly).
 */
#include "qgrid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "gguf.h"
#include "gguf_write.h"
#include "hf.h"
#include "json.h"
#include "qconv.h"
#include "qtypes.h"
#include "safetensors.h"
#include "xio.h"

static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
static const int awq_rev[8] = {0, 4, 1, 5, 2, 6, 3, 7};     /* column -> nibble */

/* The linears of a llama block: a GPTQ/AWQ loader replaces all of them. */
static const char *const block_linears[] = {
    "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
};

static bool
is_block_linear(const char *gguf_name)
{
    int l, n = 0;

    if (sscanf(gguf_name, "blk.%d.%n", &l, &n) != 1 || n == 0)
        return false;
    for (size_t i = 0; i < sizeof block_linears / sizeof block_linears[0]; i++)
        if (!strcmp(gguf_name + n, block_linears[i]))
            return true;
    return false;
}

static bool
gidx_identity(const struct qgrid *g)
{
    int64_t gs = g->group_size < 0 ? g->cols : g->group_size;
    for (int64_t c = 0; c < g->cols; c++)
        if (g->g_idx[c] != (int32_t)(c / gs))
            return false;
    return true;
}

/* Puts value v (b bits) at bit position p of a little-endian stream of
 * 32-bit words with a stride of `stride` words between consecutive words of
 * the stream. */
static void
put_bits(uint32_t *w, int64_t stride, int64_t p, uint32_t v, int b)
{
    int64_t word = p / 32;
    int sh = (int)(p % 32);

    w[word * stride] |= v << sh;
    if (sh + b > 32)
        w[(word + 1) * stride] |= v >> (32 - sh);
}

static uint32_t
get_bits(const uint32_t *w, int64_t stride, int64_t p, int b)
{
    int64_t word = p / 32;
    int sh = (int)(p % 32);
    uint64_t v = w[word * stride] >> sh;

    if (sh + b > 32)
        v |= (uint64_t)w[(word + 1) * stride] << (32 - sh);
    return (uint32_t)v & ((1u << b) - 1);
}

/* ==== writing ==== */

enum hpart { HP_FLOAT, HP_QWEIGHT, HP_QZEROS, HP_SCALES, HP_GIDX };

struct hitem {
    char name[128];             /* HF tensor name */
    enum hpart part;
    const struct qgrid *g;      /* grid parts */
    int64_t perm_heads;         /* grid parts: HF row n = GGUF row permute_src_row(n) */
    struct tsrc src;            /* HP_FLOAT */
    uint32_t type;              /* HP_FLOAT: output ggml type */
};

static int64_t
grid_row(const struct hitem *it, int64_t n)
{
    return it->perm_heads ? permute_src_row(n, it->g->rows, (int)it->perm_heads, true) : n;
}

/* Bytes of one grid part into buf (sized by the plan). */
static void
make_part(const struct hitem *it, enum qformat f, void *buf)
{
    const struct qgrid *g = it->g;
    const int64_t K = g->cols, N = g->rows, G = g->n_groups, b = g->bits;
    const uint32_t mask = (1u << b) - 1;

    if (it->part == HP_SCALES) {
        uint16_t *s = buf;
        for (int64_t gi = 0; gi < G; gi++)
            for (int64_t n = 0; n < N; n++)
                s[gi * N + n] = qconv_fp32_to_fp16(g->scale[gi * N + grid_row(it, n)]);
        return;
    }
    if (it->part == HP_GIDX) {
        memcpy(buf, g->g_idx, (size_t)K * sizeof(int32_t));
        return;
    }
    uint32_t *w = buf;
    if (f == QF_AWQ) {
        int64_t rows = it->part == HP_QWEIGHT ? K : G;
        memset(w, 0, (size_t)(rows * N / 8) * sizeof *w);
        for (int64_t k = 0; k < rows; k++)
            for (int64_t j = 0; j < N / 8; j++) {
                uint32_t word = 0;
                for (int i = 0; i < 8; i++) {
                    int64_t r = grid_row(it, 8 * j + awq_order[i]);
                    uint32_t v = it->part == HP_QWEIGHT ? g->q[r * K + k]
                                                        : (uint32_t)g->zero[k * N + r];
                    word |= (v & 15) << (4 * i);
                }
                w[k * (N / 8) + j] = word;
            }
        return;
    }
    if (it->part == HP_QWEIGHT) {
        memset(w, 0, (size_t)(K * b / 32 * N) * sizeof *w);
        for (int64_t n = 0; n < N; n++) {
            const uint8_t *q = g->q + grid_row(it, n) * K;
            for (int64_t k = 0; k < K; k++)
                put_bits(w + n, N, k * b, q[k], (int)b);
        }
        return;
    }
    /* qzeros: v1 stores zero - 1 in b bits (the loaders add 1 back and mask) */
    int64_t words = N * b / 32;
    memset(w, 0, (size_t)(G * words) * sizeof *w);
    for (int64_t gi = 0; gi < G; gi++)
        for (int64_t n = 0; n < N; n++) {
            int32_t z = g->zero[gi * N + grid_row(it, n)];
            uint32_t v = (uint32_t)(f == QF_GPTQ ? z - 1 : z) & mask;
            put_bits(w + gi * words, 1, n * b, v, (int)b);
        }
}

/* Checks a grid against the format; fills the shape of its parts. */
static int
check_grid(const struct qmodel_tensor *qt, const struct qgrid *ref, enum qformat f,
           struct diag *d)
{
    const struct qgrid *g = qt->g;
    const int64_t K = g->cols, N = g->rows;

    if (g->bits != ref->bits || g->group_size != ref->group_size || g->sym != ref->sym)
        return diag_set(d, ST_RANGE, "tensor '%s': %d-bit group %lld%s grid, '%s' is %d-bit "
                        "group %lld%s: a directory has one setting", qt->name, g->bits,
                        (long long)g->group_size, g->sym ? " sym" : "", "the first", ref->bits,
                        (long long)ref->group_size, ref->sym ? " sym" : "");
    for (int64_t k = 0; k < g->n_groups * N; k++) {
        if (qconv_fp16_to_fp32(qconv_fp32_to_fp16(g->scale[k])) != g->scale[k])
            return diag_set(d, ST_RANGE, "tensor '%s': scale %g is not an fp16 value", qt->name,
                            (double)g->scale[k]);
        if (g->zero[k] < 0 || g->zero[k] >> g->bits)
            return diag_set(d, ST_RANGE, "tensor '%s': zero point %d does not fit %d bits",
                            qt->name, (int)g->zero[k], g->bits);
    }
    for (int64_t k = 0; k < N * K; k++)
        if (g->q[k] >> g->bits)
            return diag_set(d, ST_RANGE, "tensor '%s': integer %d above %d bits", qt->name,
                            (int)g->q[k], g->bits);
    for (int64_t c = 0; c < K; c++)
        if (g->g_idx[c] < 0 || g->g_idx[c] >= g->n_groups)
            return diag_set(d, ST_RANGE, "tensor '%s': g_idx[%lld] = %d out of range", qt->name,
                            (long long)c, (int)g->g_idx[c]);
    if (f == QF_AWQ && !gidx_identity(g))
        return diag_set(d, ST_RANGE, "tensor '%s': AWQ has no g_idx: groups must be in "
                        "column order (no act-order)", qt->name);
    return qmodel_hf_fits(f, g->bits, g->group_size, qt->name, N, K, d);
}

int
qmodel_hf_fits(enum qformat f, int bits, int64_t group_size, const char *name, int64_t N,
               int64_t K, struct diag *d)
{
    if (f == QF_AWQ) {
        int64_t gs = group_size < 0 ? K : group_size;
        if (bits != 4)
            return diag_set(d, ST_RANGE, "AWQ GEMM holds 4-bit grids, not %d-bit", bits);
        if (N % 8 || K % gs)
            return diag_set(d, ST_RANGE, "tensor '%s': AWQ GEMM needs out_features %% 8 == 0 "
                            "and in_features %% group size == 0 (%lld x %lld, group %lld)",
                            name, (long long)N, (long long)K, (long long)gs);
    } else if (f != QF_GGUF && ((K * bits) % 32 || (N * bits) % 32)) {
        return diag_set(d, ST_RANGE, "tensor '%s': %lld x %lld does not pack into int32 at %d "
                        "bits", name, (long long)N, (long long)K, bits);
    }
    return 0;
}

static json_t *
quant_config(const struct qmodel *qm, const struct qgrid *g, enum qformat f, bool desc_act,
             bool lm_head)
{
    const struct qprov *p = &qm->prov;
    json_t *o = json_object(), *meta;
    char quantizer[64];

    if (f == QF_AWQ) {
        json_object_set_new(o, "quant_method", json_string("awq"));
        json_object_set_new(o, "zero_point", json_true());
        json_object_set_new(o, "group_size", json_integer(g->group_size));
        json_object_set_new(o, "bits", json_integer(g->bits));
        json_object_set_new(o, "version", json_string("gemm"));
        json_object_set_new(o, "modules_to_not_convert",
                            lm_head ? json_null() : json_pack("[s]", "lm_head"));
        return o;
    }
    json_object_set_new(o, "bits", json_integer(g->bits));
    json_object_set_new(o, "group_size", json_integer(g->group_size));
    json_object_set_new(o, "desc_act", json_boolean(desc_act));
    json_object_set_new(o, "sym", json_boolean(g->sym));
    json_object_set_new(o, "lm_head", json_boolean(lm_head));
    if (p->damp > 0 && p->damp < 1)     /* loaders refuse 0 (RTN has no damping) */
        json_object_set_new(o, "damp_percent", json_real(p->damp));
    json_object_set_new(o, "static_groups", json_boolean(p->static_groups));
    json_object_set_new(o, "true_sequential", json_boolean(p->true_sequential));
    json_object_set_new(o, "quant_method", json_string("gptq"));
    json_object_set_new(o, "checkpoint_format", json_string(f == QF_GPTQ ? "gptq" : "gptq_v2"));
    json_object_set_new(o, "format", json_string(f == QF_GPTQ ? "gptq" : "gptq_v2"));
    json_object_set_new(o, "pack_dtype", json_string("int32"));
    meta = json_object();
    snprintf(quantizer, sizeof quantizer, "llmkit:%s", LLMKIT_VERSION);
    json_object_set_new(meta, "quantizer", json_pack("[s]", quantizer));
    json_object_set_new(meta, "method", json_string(p->method ? p->method : "?"));
    if (p->damp > 0 && p->damp < 1)
        json_object_set_new(meta, "damp_percent", json_real(p->damp));
    json_object_set_new(meta, "static_groups", json_boolean(p->static_groups));
    json_object_set_new(meta, "true_sequential", json_boolean(p->true_sequential));
    json_object_set_new(meta, "mse", json_real(p->mse ? 2.4 : 0.0));
    if (p->calib_sha256[0])
        json_object_set_new(meta, "calib_sha256", json_string(p->calib_sha256));
    if (p->calib_tokens > 0)
        json_object_set_new(meta, "calib_tokens", json_integer(p->calib_tokens));
    json_object_set_new(o, "meta", meta);
    return o;
}

/* config.json as convert writes it, plus quantization_config; GPTQ also
 * gets quantize_config.json (AutoGPTQ's loaders look there first). */
static int
write_quant_config(const char *dir, json_t *qc, enum qformat f, struct diag *d)
{
    char *path = path_join(dir, "config.json");
    json_t *cfg = NULL;
    int rc;

    if (!path || !qc)
        rc = diag_set(d, ST_NOMEM, "out of memory");
    else if ((rc = json_load_path(path, JSON_MAX_FILE, &cfg, d)) < 0)
        diag_prefix(d, "config.json");
    else if (json_object_set(cfg, "quantization_config", qc) < 0)
        rc = diag_set(d, ST_NOMEM, "out of memory");
    else if ((rc = hf_json_write(dir, "config.json", cfg, d)) == 0 && f != QF_AWQ)
        rc = hf_json_write(dir, "quantize_config.json", qc, d);
    json_decref(cfg);
    free(path);
    return rc;
}

static enum sft_dtype
sft_of_float(uint32_t t)
{
    return t == GGML_TYPE_F16 ? SFT_F16 : t == GGML_TYPE_BF16 ? SFT_BF16 : SFT_F32;
}

int
qmodel_write_hf(const struct qmodel *qm, const char *dir, enum qformat f, bool force,
                const struct run_callbacks *cb, struct diag *d)
{
    struct gguf g;
    struct hf_config cfg;
    struct hf_vocab voc;
    struct sft_plan plan;
    struct sft_writer w;
    struct xout xo;
    struct hitem *items = NULL;
    struct sft_wtensor *specs = NULL;
    const struct qmodel_tensor **byt = NULL;
    const struct qgrid *ref = NULL;
    struct sft_kv meta[8];
    char mbuf[4][80];
    size_t n = 0, n_meta = 0, n_f16 = 0, n_bf16 = 0, n_f32 = 0;
    uint64_t done = 0;
    void *buf = NULL;
    size_t buf_cap = 0;
    bool desc_act = false, lm_head = false, writer_open = false, dir_open = false;
    json_t *qc = NULL;
    int rc;

    memset(&plan, 0, sizeof plan);
    memset(&xo, 0, sizeof xo);
    hf_vocab_init(&voc);
    if (f != QF_GPTQ && f != QF_GPTQ_V2 && f != QF_AWQ)
        return diag_set(d, ST_RANGE, "format %d is not an HF directory format", (int)f);
    if (!qm->src_path)
        return diag_set(d, ST_RANGE, "no source GGUF for the quantized model");
    if ((rc = gguf_open(&g, qm->src_path, d)) < 0 || (rc = gguf_load_stream(&g, d)) < 0) {
        if (rc < 0 && g.src)
            gguf_release(&g);
        diag_prefix(d, "'%s'", qm->src_path);
        return rc;
    }
    if ((rc = hf_config_from_gguf(&cfg, &g, d)) || (rc = hf_vocab_from_gguf(&voc, &g, d))) {
        diag_prefix(d, "'%s'", qm->src_path);
        goto out;
    }
    if (voc.warning[0])
        runcb_warn(cb, "%s", voc.warning);
    byt = calloc(g.n_tensors + 1, sizeof *byt);
    items = calloc(4 * g.n_tensors + 1, sizeof *items);
    specs = calloc(4 * g.n_tensors + 1, sizeof *specs);
    if (!byt || !items || !specs) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t j = 0; j < qm->n; j++) {
        const struct qmodel_tensor *qt = &qm->t[j];
        int64_t i = gguf_find_tensor(&g, qt->name);
        if (i < 0) {
            rc = diag_set(d, ST_RANGE, "'%s': no tensor '%s'", qm->src_path, qt->name);
            goto out;
        }
        if (byt[i] || (qt->g && qt->f32)) {
            rc = diag_set(d, ST_RANGE, "tensor '%s' listed twice or with both grid and floats",
                          qt->name);
            goto out;
        }
        byt[i] = qt;
        if (!qt->g)
            continue;
        if (g.t[i].ne[0] != qt->g->cols || g.t[i].ne[1] != qt->g->rows || g.t[i].ne[2] != 1) {
            rc = diag_set(d, ST_RANGE, "tensor '%s': grid of %lld x %lld, tensor of %lld x %lld",
                          qt->name, (long long)qt->g->rows, (long long)qt->g->cols,
                          (long long)g.t[i].ne[1], (long long)g.t[i].ne[0]);
            goto out;
        }
        if (!ref)
            ref = qt->g;
        if ((rc = check_grid(qt, ref, f, d)) < 0)
            goto out;
        desc_act |= !gidx_identity(qt->g);
        lm_head |= !strcmp(qt->name, "output.weight");
    }
    if (!ref) {
        rc = diag_set(d, ST_RANGE, "no quantized linear to write");
        goto out;
    }
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const struct gguf_tensor *t = &g.t[i];
        const struct qmodel_tensor *qt = byt[i];
        struct hf_tensor_map m;

        if (is_block_linear(t->name.p) && !(qt && qt->g)) {
            rc = diag_set(d, ST_RANGE, "linear '%s' has no grid: the loaders of GPTQ and AWQ "
                          "directories expect every block linear quantized", t->name.p);
            goto out;
        }
        if ((rc = hf_name_from_gguf(&cfg, t->name.p, &m, d)) < 0) {
            diag_prefix(d, "'%s'", qm->src_path);
            goto out;
        }
        if (rc == 0)
            continue;
        if (qt && qt->g) {
            static const char *const sfx[] = {"qweight", "qzeros", "scales", "g_idx"};
            static const enum hpart parts[] = {HP_QWEIGHT, HP_QZEROS, HP_SCALES, HP_GIDX};
            const struct qgrid *gr = qt->g;
            size_t plen = strlen(m.name) - strlen(".weight");
            for (int k = 0; k < (f == QF_AWQ ? 3 : 4); k++) {
                struct hitem *it = &items[n];
                struct sft_wtensor *s = &specs[n];
                snprintf(it->name, sizeof it->name, "%.*s.%s", (int)plen, m.name, sfx[k]);
                it->part = parts[k];
                it->g = gr;
                it->perm_heads = m.perm != HF_PERM_NONE ? m.perm_heads : 0;
                s->name = it->name;
                s->n_dims = parts[k] == HP_GIDX ? 1 : 2;
                s->dtype = parts[k] == HP_SCALES ? SFT_F16 : SFT_I32;
                switch (parts[k]) {
                case HP_QWEIGHT:
                    s->shape[0] = f == QF_AWQ ? gr->cols : gr->cols * gr->bits / 32;
                    s->shape[1] = f == QF_AWQ ? gr->rows / 8 : gr->rows;
                    break;
                case HP_QZEROS:
                    s->shape[0] = gr->n_groups;
                    s->shape[1] = f == QF_AWQ ? gr->rows / 8 : gr->rows * gr->bits / 32;
                    break;
                case HP_SCALES:
                    s->shape[0] = gr->n_groups;
                    s->shape[1] = gr->rows;
                    break;
                default:
                    s->shape[0] = gr->cols;
                    break;
                }
                n++;
            }
            continue;
        }
        struct hitem *it = &items[n];
        struct sft_wtensor *s = &specs[n];
        const struct qtype *st = qtype_get(t->type);
        snprintf(it->name, sizeof it->name, "%s", m.name);
        it->part = HP_FLOAT;
        it->src.data = t->data;
        it->src.type = t->type;
        memcpy(it->src.ne, t->ne, sizeof it->src.ne);
        it->src.perm_heads = m.perm != HF_PERM_NONE ? -(int)m.perm_heads : 0;
        it->src.add = m.shift;      /* gemma3 norms: GGUF 1 + w -> HF w */
        it->type = t->type == GGML_TYPE_F16 || t->type == GGML_TYPE_BF16 ? t->type
                                                                         : GGML_TYPE_F32;
        if (qt && qt->f32) {
            it->src.data = qt->f32;
            it->src.type = GGML_TYPE_F32;
        } else if (!t->data || (it->type != t->type && (!st || !st->to_float))) {
            rc = diag_set(d, ST_RANGE, "'%s': tensor '%s': cannot convert from type %s",
                          qm->src_path, t->name.p, st ? st->name : "?");
            goto out;
        }
        s->name = it->name;
        s->dtype = sft_of_float(it->type);
        s->n_dims = (int)t->n_dims;
        for (uint32_t j = 0; j < t->n_dims; j++)
            s->shape[j] = t->ne[t->n_dims - 1 - j];
        if (t->n_dims >= 2)
            *(it->type == GGML_TYPE_F16 ? &n_f16 : it->type == GGML_TYPE_BF16 ? &n_bf16 : &n_f32) += 1;
        n++;
    }
    /* provenance as safetensors metadata (strings), beside "format": "pt" */
    meta[n_meta++] = (struct sft_kv){"format", "pt"};
    meta[n_meta++] = (struct sft_kv){"llmkit.quantize.method", qm->prov.method ? qm->prov.method : "?"};
    meta[n_meta++] = (struct sft_kv){"llmkit.quantize.version", LLMKIT_VERSION};
    snprintf(mbuf[0], sizeof mbuf[0], "%d", ref->bits);
    meta[n_meta++] = (struct sft_kv){"llmkit.quantize.bits", mbuf[0]};
    snprintf(mbuf[1], sizeof mbuf[1], "%lld", (long long)ref->group_size);
    meta[n_meta++] = (struct sft_kv){"llmkit.quantize.group_size", mbuf[1]};
    snprintf(mbuf[2], sizeof mbuf[2], "%.9g", qm->prov.damp);
    meta[n_meta++] = (struct sft_kv){"llmkit.quantize.damp", mbuf[2]};
    if (qm->prov.calib_sha256[0])
        meta[n_meta++] = (struct sft_kv){"llmkit.quantize.calib_sha256", qm->prov.calib_sha256};
    if (qm->prov.calib_tokens > 0) {
        snprintf(mbuf[3], sizeof mbuf[3], "%lld", (long long)qm->prov.calib_tokens);
        meta[n_meta++] = (struct sft_kv){"llmkit.quantize.calib_tokens", mbuf[3]};
    }
    if ((rc = sft_plan_init(&plan, specs, n, SFT_DEFAULT_SHARD, meta, n_meta, d)) < 0)
        goto out;
    qc = quant_config(qm, ref, f, desc_act, lm_head);
    if ((rc = xout_open_dir(&xo, dir, force, d)) < 0) {
        diag_prefix(d, "'%s'", dir);
        goto out;
    }
    dir_open = true;
    rc = hf_write_dir(xo.tmp, &cfg, &voc,
                      n_bf16 > n_f16 && n_bf16 > n_f32 ? "bfloat16"
                      : n_f32 > n_f16 ? "float32" : "float16", d);
    if (!rc)
        rc = write_quant_config(xo.tmp, qc, f, d);
    if (!rc)
        rc = sft_writer_open_dir(&w, &plan, xo.tmp, false, d);
    if (rc)
        goto out_dir;
    writer_open = true;
    runcb_progress(cb, "writing", 0, (int64_t)plan.total_size);
    for (size_t k = 0; k < plan.n; k++) {
        size_t i = plan.order[k];
        struct sft_sink sk = {&w, i};
        if (items[i].part == HP_FLOAT) {
            rc = tensor_emit(&items[i].src, items[i].type, sft_sink_put, &sk, d);
        } else {
            if (plan.nbytes[i] > buf_cap) {
                free(buf);
                buf_cap = 0;
                if (!(buf = malloc(plan.nbytes[i]))) {
                    rc = diag_set(d, ST_NOMEM, "out of memory");
                    goto out_dir;
                }
                buf_cap = plan.nbytes[i];
            }
            make_part(&items[i], f, buf);
            rc = sft_writer_put(&w, i, buf, plan.nbytes[i], d);
        }
        if (rc) {
            if (rc != -ST_IO)
                diag_prefix(d, "tensor '%s'", items[i].name);
            goto out_dir;
        }
        done += plan.nbytes[i];
        runcb_progress(cb, "writing", (int64_t)done, (int64_t)plan.total_size);
    }
    writer_open = false;
    if ((rc = sft_writer_close(&w, d)) < 0)
        goto out_dir;
    rc = xout_commit(&xo, d);
    dir_open = false;
    if (rc)
        diag_prefix(d, "'%s'", dir);
    goto out;
out_dir:
    if (rc == -ST_IO)
        diag_prefix(d, "'%s'", dir);
out:
    if (writer_open)
        sft_writer_abort(&w);
    if (dir_open)
        xout_abort(&xo);
    json_decref(qc);
    sft_plan_release(&plan);
    free(buf);
    free(items);
    free(specs);
    free(byt);
    hf_vocab_release(&voc);
    gguf_release(&g);
    return rc;
}

/* ==== reading ==== */

struct qcfg {
    enum qformat f;
    int bits;
    int64_t group_size;
    bool sym, desc_act, static_groups, true_sequential;
    double damp;
    const char *method;         /* static: "gptq", "awq", or "rtn" from our own meta */
    char calib_sha256[65];
    int64_t calib_tokens;
};

/* Provenance that quant_config() put under "meta" of a directory we wrote. */
static void
read_meta(const json_t *o, struct qcfg *q)
{
    const json_t *meta = json_object_get(o, "meta");
    const json_t *qz = json_object_get(meta, "quantizer");
    const char *who = json_string_value(json_array_get(qz, 0));
    const char *s;

    if (!who || strncmp(who, "llmkit:", 7))
        return;
    s = json_string_value(json_object_get(meta, "method"));
    if (s && !strcmp(s, "rtn"))
        q->method = "rtn";
    s = json_string_value(json_object_get(meta, "calib_sha256"));
    if (s && strlen(s) < sizeof q->calib_sha256)
        strcpy(q->calib_sha256, s);
    if (json_is_integer(json_object_get(meta, "calib_tokens")))
        q->calib_tokens = json_integer_value(json_object_get(meta, "calib_tokens"));
}

/* The quantization config: config.json's quantization_config, else
 * quantize_config.json / quant_config.json (AutoGPTQ's search order is the
 * other way round; a directory holding both holds the same dict).  1 when
 * the directory has none. */
static int
load_qcfg(const char *dir, struct qcfg *q, struct diag *d)
{
    static const char *const files[] = {"config.json", "quantize_config.json", "quant_config.json"};
    json_t *root = NULL;
    const json_t *o = NULL;
    const char *file = NULL, *s = NULL;
    int64_t v;
    int rc = 1;

    for (size_t i = 0; i < 3 && !o; i++) {
        char *path = path_join(dir, files[i]);
        if (!path)
            return diag_set(d, ST_NOMEM, "out of memory");
        if (path_exists(path)) {
            json_decref(root);
            root = NULL;
            rc = json_load_path(path, JSON_MAX_FILE, &root, d);
            if (rc < 0) {
                diag_prefix(d, "'%s'", path);
                free(path);
                return rc;
            }
            file = files[i];
            o = i == 0 ? json_object_get(root, "quantization_config") : root;
            if (o && !json_is_object(o)) {
                rc = diag_set(d, ST_FORMAT, "'%s': quantization_config is not an object", path);
                free(path);
                goto out;
            }
        }
        free(path);
    }
    rc = 1;
    if (!o)
        goto out;
    memset(q, 0, sizeof *q);
    q->sym = true;
#define QC_ERR(...) do { rc = diag_set(d, ST_FORMAT, __VA_ARGS__); goto out; } while (0)
    if ((rc = json_obj_str(o, "quant_method", &s, d)) < 0)
        goto bad;
    if (rc == 1 || !strcmp(s, "gptq")) {
        const char *cf = NULL;
        if ((rc = json_obj_str(o, "checkpoint_format", &cf, d)) < 0)
            goto bad;
        if (rc == 1 && (rc = json_obj_str(o, "format", &cf, d)) < 0)
            goto bad;
        if (rc == 1 || !strcmp(cf, "gptq"))
            q->f = QF_GPTQ;
        else if (!strcmp(cf, "gptq_v2"))
            q->f = QF_GPTQ_V2;
        else
            QC_ERR("'%s/%s': checkpoint format '%s' not supported (gptq, gptq_v2)", dir, file, cf);
    } else if (!strcmp(s, "awq")) {
        const char *ver = NULL;
        bool zp = true;
        q->f = QF_AWQ;
        if ((rc = json_obj_str(o, "version", &ver, d)) < 0 || (rc == 0 && strcasecmp(ver, "gemm")))
            QC_ERR("'%s/%s': AWQ version '%s' not supported (gemm)", dir, file, rc < 0 ? "?" : ver);
        if ((rc = json_obj_bool(o, "zero_point", &zp, d)) < 0)
            goto bad;
        if (!zp)
            QC_ERR("'%s/%s': AWQ without zero points not supported", dir, file);
    } else {
        QC_ERR("'%s/%s': quant_method '%s' not supported (gptq, awq)", dir, file, s);
    }
    if ((rc = json_obj_int(o, "bits", &v, d)) < 0)
        goto bad;
    if (rc == 1 && (rc = json_obj_int(o, "w_bit", &v, d)) != 0)
        QC_ERR("'%s/%s': no 'bits'", dir, file);
    if (v != 2 && v != 3 && v != 4 && v != 8)
        QC_ERR("'%s/%s': %lld bits not supported (2, 3, 4, 8)", dir, file, (long long)v);
    q->bits = (int)v;
    if ((rc = json_obj_int(o, "group_size", &v, d)) < 0)
        goto bad;
    if (rc == 1 && (rc = json_obj_int(o, "q_group_size", &v, d)) != 0)
        QC_ERR("'%s/%s': no 'group_size'", dir, file);
    if (v != -1 && (v <= 0 || v > (1 << 20)))
        QC_ERR("'%s/%s': group size %lld", dir, file, (long long)v);
    q->group_size = v;
    if ((rc = json_obj_bool(o, "sym", &q->sym, d)) < 0 ||
        (rc = json_obj_bool(o, "desc_act", &q->desc_act, d)) < 0 ||
        (rc = json_obj_bool(o, "static_groups", &q->static_groups, d)) < 0 ||
        (rc = json_obj_bool(o, "true_sequential", &q->true_sequential, d)) < 0 ||
        (rc = json_obj_num(o, "damp_percent", &q->damp, d)) < 0)
        goto bad;
    if (q->f == QF_AWQ)
        q->sym = false;
    q->method = q->f == QF_AWQ ? "awq" : "gptq";
    read_meta(o, q);
    const json_t *dyn = json_object_get(o, "dynamic");
    if (dyn && !json_is_null(dyn) && !(json_is_object(dyn) && json_object_size(dyn) == 0))
        QC_ERR("'%s/%s': per-module 'dynamic' overrides not supported", dir, file);
    if (q->f == QF_AWQ && q->bits != 4)
        QC_ERR("'%s/%s': AWQ GEMM with %d bits (4 expected)", dir, file, q->bits);
    rc = 0;
    goto out;
bad:
    diag_prefix(d, "'%s/%s'", dir, file);
out:
#undef QC_ERR
    json_decref(root);
    return rc;
}

static int
shape_err(const struct sft_model *m, const char *name, const struct sft_tensor *t,
          const char *want, int64_t a, int64_t b, struct diag *d)
{
    size_t file = 0;
    char got[64] = "";
    int k = 0;

    sft_model_find(m, name, &file);
    for (int j = 0; j < t->n_dims && k < (int)sizeof got; j++)
        k += snprintf(got + k, sizeof got - (size_t)k, "%s%lld", j ? ", " : "", (long long)t->shape[j]);
    if (b >= 0)
        return diag_set(d, ST_FORMAT, "'%s/%s': tensor '%s': %s [%s], expected [%lld, %lld]",
                        m->dir ? m->dir : ".", m->file_names[file], name, sft_dtype_name(t->dtype),
                        got, (long long)a, (long long)b);
    return diag_set(d, ST_FORMAT, "'%s/%s': tensor '%s': %s [%s], expected %s [%lld]",
                    m->dir ? m->dir : ".", m->file_names[file], name, sft_dtype_name(t->dtype),
                    got, want, (long long)a);
}

/* A tensor of the module, checked for dtype and a 2-D (or 1-D) shape. */
static int
get_part(const struct sft_model *m, const char *prefix, const char *part, bool opt,
         const struct sft_tensor **out, struct diag *d)
{
    char name[288];
    snprintf(name, sizeof name, "%s.%s", prefix, part);
    *out = sft_model_find(m, name, NULL);
    if (!*out && !opt)
        return diag_set(d, ST_FORMAT, "'%s': no tensor '%s' beside '%s.qweight'",
                        m->dir ? m->dir : ".", name, prefix);
    return 0;
}

static bool
dims_are(const struct sft_tensor *t, enum sft_dtype dt, int nd, int64_t a, int64_t b)
{
    return t->dtype == dt && t->n_dims == nd && t->shape[0] == a && (nd < 2 || t->shape[1] == b);
}

static float
scale_at(const struct sft_tensor *t, int64_t k)
{
    uint16_t h;
    float f;
    if (t->dtype == SFT_F32) {
        memcpy(&f, t->data + 4 * k, 4);
        return f;
    }
    memcpy(&h, t->data + 2 * k, 2);
    return t->dtype == SFT_F16 ? qconv_fp16_to_fp32(h) : bf16_to_fp32(h);
}

/* The shape [rows = out, cols = in] config.json gives a linear of the
 * block (GGUF name), or false for another tensor. */
static bool
linear_shape(const struct hf_config *c, const char *gguf_name, int64_t *rows, int64_t *cols)
{
    static const struct { const char *sfx; int out, in; } t[] = {
        /* 0 n_embd, 1 n_head*head_dim, 2 n_head_kv*head_dim, 3 n_ff */
        {"attn_q.weight", 1, 0}, {"attn_k.weight", 2, 0}, {"attn_v.weight", 2, 0},
        {"attn_output.weight", 0, 1}, {"ffn_gate.weight", 3, 0}, {"ffn_up.weight", 3, 0},
        {"ffn_down.weight", 0, 3},
    };
    const int64_t dim[4] = {c->n_embd, c->n_head * c->head_dim, c->n_head_kv * c->head_dim, c->n_ff};
    int l, n = 0;

    if (sscanf(gguf_name, "blk.%d.%n", &l, &n) != 1 || !n)
        return false;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(gguf_name + n, t[i].sfx)) {
            *rows = dim[t[i].out];
            *cols = dim[t[i].in];
            return true;
        }
    return false;
}

/* One quantized module (prefix) into a qgrid in GGUF row order. */
static int
read_module(const struct sft_model *m, const struct hf_config *cfg, const struct qcfg *q,
            const char *prefix, struct qmodel_tensor *qt, struct diag *d)
{
    const struct sft_tensor *tw, *tz, *ts, *tg = NULL;
    struct hf_tensor_map map;
    char name[288];
    int64_t K, N, G, gs, b = q->bits;
    struct qgrid *g;
    int rc;

    snprintf(name, sizeof name, "%s.weight", prefix);
    if ((rc = hf_name_to_gguf(cfg, name, &map, d)) <= 0) {
        if (rc == 0)
            rc = diag_set(d, ST_FORMAT, "tensor '%s.qweight': not a linear of the model", prefix);
        diag_prefix(d, "'%s'", m->dir ? m->dir : ".");
        return rc;
    }
    if ((rc = get_part(m, prefix, "qweight", false, &tw, d)) < 0 ||
        (rc = get_part(m, prefix, "qzeros", false, &tz, d)) < 0 ||
        (rc = get_part(m, prefix, "scales", false, &ts, d)) < 0 ||
        (q->f != QF_AWQ && (rc = get_part(m, prefix, "g_idx", true, &tg, d)) < 0))
        return rc;
    snprintf(name, sizeof name, "%s.qweight", prefix);
    if (tw->dtype != SFT_I32 || tw->n_dims != 2 || tw->shape[0] <= 0 || tw->shape[1] <= 0) {
        size_t file = 0;
        sft_model_find(m, name, &file);
        return diag_set(d, ST_FORMAT, "'%s/%s': tensor '%s': %s of %d dimensions, I32 %s expected",
                        m->dir ? m->dir : ".", m->file_names[file], name,
                        sft_dtype_name(tw->dtype), tw->n_dims,
                        q->f == QF_AWQ ? "[K, N/8]" : "[K*bits/32, N]");
    }
    if (q->f == QF_AWQ) {
        K = tw->shape[0];
        N = tw->shape[1] * 8;
    } else {
        if ((tw->shape[0] * 32) % b)
            return shape_err(m, name, tw, "I32", tw->shape[0] / b * b, tw->shape[1], d);
        K = tw->shape[0] * 32 / b;
        N = tw->shape[1];
    }
    int64_t want_n, want_k;
    if (linear_shape(cfg, map.name, &want_n, &want_k) && (N != want_n || K != want_k)) {
        size_t file = 0;
        sft_model_find(m, name, &file);
        return diag_set(d, ST_FORMAT, "'%s/%s': tensor '%s': holds a %lld x %lld linear (in x "
                        "out), config.json says %lld x %lld", m->dir ? m->dir : ".",
                        m->file_names[file], name, (long long)K, (long long)N,
                        (long long)want_k, (long long)want_n);
    }
    gs = q->group_size < 0 ? K : q->group_size;
    G = (K + gs - 1) / gs;
    if (q->f == QF_AWQ && K % gs) {
        return diag_set(d, ST_FORMAT, "'%s': tensor '%s': in_features %lld not a multiple of "
                        "the group size %lld", m->dir ? m->dir : ".", name, (long long)K,
                        (long long)gs);
    }
    snprintf(name, sizeof name, "%s.qzeros", prefix);
    if (!dims_are(tz, SFT_I32, 2, G, q->f == QF_AWQ ? N / 8 : N * b / 32) ||
        (q->f != QF_AWQ && (N * b) % 32))
        return shape_err(m, name, tz, "I32", G, q->f == QF_AWQ ? N / 8 : N * b / 32, d);
    snprintf(name, sizeof name, "%s.scales", prefix);
    if (!(ts->dtype == SFT_F16 || ts->dtype == SFT_BF16 || ts->dtype == SFT_F32) ||
        !dims_are(ts, ts->dtype, 2, G, N))
        return shape_err(m, name, ts, "F16", G, N, d);
    snprintf(name, sizeof name, "%s.g_idx", prefix);
    if (tg && !dims_are(tg, SFT_I32, 1, K, 0))
        return shape_err(m, name, tg, "I32", K, -1, d);
    if (map.name[0] && strlen(map.name) > GGUF_MAX_NAME)
        return diag_set(d, ST_FORMAT, "tensor name '%s' too long", map.name);

    if (!(g = calloc(1, sizeof *g)))
        return diag_set(d, ST_NOMEM, "out of memory");
    qt->g = g;
    if (!(qt->name = strdup(map.name)))
        return diag_set(d, ST_NOMEM, "out of memory");
    if ((rc = qgrid_alloc(g, q->bits, q->group_size, q->sym, N, K, d)) < 0) {
        diag_prefix(d, "'%s': module '%s'", m->dir ? m->dir : ".", prefix);
        return rc == -ST_RANGE ? -ST_FORMAT : rc;
    }
    const uint32_t *wq = (const uint32_t *)tw->data, *wz = (const uint32_t *)tz->data;
    uint32_t *aw = NULL, *az = NULL;
    /* the mapping need not be aligned: copy the words */
    aw = malloc(tw->nbytes);
    az = malloc(tz->nbytes);
    if (!aw || !az) {
        free(aw);
        free(az);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    memcpy(aw, wq, tw->nbytes);
    memcpy(az, wz, tz->nbytes);
    if (tg) {
        memcpy(g->g_idx, tg->data, (size_t)K * sizeof(int32_t));
        for (int64_t c = 0; c < K; c++)
            if (g->g_idx[c] < 0 || g->g_idx[c] >= G) {
                free(aw);
                free(az);
                size_t file = 0;
                sft_model_find(m, name, &file);
                return diag_set(d, ST_FORMAT, "'%s/%s': tensor '%s': g_idx[%lld] = %d, %lld groups",
                                m->dir ? m->dir : ".", m->file_names[file], name, (long long)c,
                                (int)g->g_idx[c], (long long)G);
            }
    }
    int heads = map.perm != HF_PERM_NONE ? (int)map.perm_heads : 0;
    for (int64_t r = 0; r < N; r++) {
        /* GGUF row r holds HF row n */
        int64_t n = heads ? permute_src_row(r, N, heads, false) : r;
        for (int64_t k = 0; k < K; k++) {
            uint32_t v;
            if (q->f == QF_AWQ)
                v = (aw[k * (N / 8) + n / 8] >> (4 * awq_rev[n % 8])) & 15;
            else
                v = get_bits(aw + n, N, k * b, (int)b);
            g->q[r * K + k] = (uint8_t)v;
        }
        for (int64_t gi = 0; gi < G; gi++) {
            uint32_t z;
            if (q->f == QF_AWQ)
                z = (az[gi * (N / 8) + n / 8] >> (4 * awq_rev[n % 8])) & 15;
            else
                z = get_bits(az + gi * (N * b / 32), 1, n * b, (int)b);
            if (q->f == QF_GPTQ)
                z = (z + 1) & ((1u << b) - 1);
            g->zero[gi * N + r] = (int32_t)z;
            g->scale[gi * N + r] = scale_at(ts, gi * N + n);
        }
    }
    free(aw);
    free(az);
    return 0;
}

int
qmodel_read_hf(const char *dir, struct qmodel *qm, struct diag *d)
{
    struct qcfg q;
    struct hf_config cfg;
    struct sft_model m;
    char *path = NULL;
    int rc;

    memset(qm, 0, sizeof *qm);
    memset(&m, 0, sizeof m);
    if ((rc = load_qcfg(dir, &q, d)) != 0)
        return rc;
    if (!(path = path_join(dir, "config.json")))
        return diag_set(d, ST_NOMEM, "out of memory");
    rc = hf_config_load(&cfg, path, d);
    free(path);
    if (rc) {
        diag_prefix(d, "'%s'", dir);
        return rc;
    }
    if ((rc = sft_model_open(&m, dir, d)) < 0) {
        diag_prefix(d, "'%s'", dir);
        return rc;
    }
    qm->t = calloc(m.n_tensors + 1, sizeof *qm->t);
    if (!qm->t) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m.n_tensors; i++) {
        const char *name = m.tensors[i].t->name;
        size_t len = strlen(name);
        char prefix[256];
        if (len < 9 || strcmp(name + len - 8, ".qweight") || len - 8 >= sizeof prefix)
            continue;
        memcpy(prefix, name, len - 8);
        prefix[len - 8] = 0;
        rc = read_module(&m, &cfg, &q, prefix, &qm->t[qm->n], d);
        qm->n++;
        if (rc < 0)
            goto out;
    }
    if (qm->n == 0) {
        rc = diag_set(d, ST_FORMAT, "'%s': quantization_config but no '*.qweight' tensor", dir);
        goto out;
    }
    qm->prov.method = q.method;
    memcpy(qm->prov.calib_sha256, q.calib_sha256, sizeof q.calib_sha256);
    qm->prov.calib_tokens = q.calib_tokens;
    qm->prov.bits = q.bits;
    qm->prov.group_size = q.group_size;
    qm->prov.sym = q.sym;
    qm->prov.act_order = q.desc_act;
    qm->prov.static_groups = q.static_groups;
    qm->prov.true_sequential = q.true_sequential;
    qm->prov.damp = q.damp;
out:
    sft_model_close(&m);
    if (rc < 0)
        qmodel_release(qm);
    return rc;
}
