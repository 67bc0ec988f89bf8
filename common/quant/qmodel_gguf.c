/*
 * qmodel_gguf.c - a quantized model (qgrid.h) written as GGUF: the source
 * GGUF (metadata, vocabulary, every tensor) copied through the streaming
 * writer (gguf_write.h) with the listed tensors replaced.
 *
 * Where a GGUF type holds a grid exactly, the grid is written into it: the
 * integers, the fp16 scales and the zeros read back bit for bit.
 *   - 4-bit, every zero 8 (symmetric)      -> Q4_0  (d = scale)
 *   - 4-bit, any zeros                     -> Q4_1  (d = scale, m = -scale*zero),
 *     exact only where fp16(-scale*zero) == -scale*zero for every group,
 *     checked per tensor; otherwise Q4_1 with m rounded to fp16 and the
 *     extra error reported
 *   - 8-bit, every zero 128 (symmetric)    -> Q8_0  (d = scale, q - 128)
 * A grid fits these 32-element blocks when the row width is a multiple of
 * 32 and every block's columns share one group (g_idx): groups of 32, 64,
 * 128, a partial last group of a multiple of 32 (576 with g128), one group
 * per row, and an act-order g_idx that happens to keep blocks whole; the
 * blocks of a larger group all carry the group's scale.
 *
 * llama.cpp dequantizes such a block to the exact product (q - zero) * scale
 * in f32; the HF loaders round it to fp16 (qgrid_dequant_row).  The two
 * differ by at most half an fp16 ulp of the weight; the largest difference
 * is measured and reported on cb->info (one line).
 *
 * Any other grid (2 or 3 bits, asymmetric 8-bit, blocks that mix groups,
 * widths not a multiple of 32) is dequantized as the loaders do and
 * quantized into the nearest good type for its bits (2/3-bit: Q4_K, 4-bit:
 * Q5_K, 8-bit: Q8_0; Q5_0 where the width is no multiple of 256, F16 where
 * it is no multiple of 32), and the extra error, relative RMS and largest
 * absolute difference against the loaders' weights, is reported on
 * cb->info for that tensor.
 *
 * Float overrides (f32) are written in the source tensor's float type (F32,
 * F16 or BF16; F32 when the source tensor is quantized).  Provenance goes
 * into llmkit.quantize.* keys; the source's own llmkit.quantize.* keys are
 * dropped.
 */
#include "qgrid.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf.h"
#include "gguf_write.h"
#include "qconv.h"
#include "qtypes.h"
#include "quant.h"

enum gkind {
    GK_COPY = 0,    /* the source tensor as it is */
    GK_F32,         /* float override */
    GK_Q4_0,
    GK_Q4_1,        /* exact unless qt->m_rounded */
    GK_Q8_0,
    GK_DEQUANT,     /* dequantized and quantized into qt->type */
};

struct qplan {
    enum gkind kind;
    uint32_t type;
    bool m_rounded;             /* Q4_1 with an m that fp16 could not hold */
    const struct qmodel_tensor *qt;
};

struct gwrite {
    const struct qmodel *qm;
    const struct run_callbacks *cb;
    struct qplan *plan;         /* per output tensor */
    float *w, *y;               /* one row: loaders' weights, GGUF dequantized */
    uint8_t *buf;               /* one tensor's output bytes */
    size_t buf_cap;
    double max_round;           /* exact grids: largest |llama.cpp - loaders| */
    int64_t n_exact;
};

static bool
fp16_exact(float x)
{
    return qconv_fp16_to_fp32(qconv_fp32_to_fp16(x)) == x;
}

/* Whether every 32-column block lies in one group and the scales are fp16. */
static bool
grid_blocks_fit(const struct qgrid *g)
{
    if (g->cols % 32)
        return false;
    for (int64_t c = 0; c < g->cols; c += 32)
        for (int j = 1; j < 32; j++)
            if (g->g_idx[c + j] != g->g_idx[c])
                return false;
    for (int64_t k = 0; k < g->n_groups * g->rows; k++)
        if (!isfinite(g->scale[k]) || !fp16_exact(g->scale[k]))
            return false;
    return true;
}

static bool
grid_zero_is(const struct qgrid *g, int32_t z)
{
    for (int64_t k = 0; k < g->n_groups * g->rows; k++)
        if (g->zero[k] != z)
            return false;
    return true;
}

/* -scale*zero is computed exactly in f32 (11 + 8 significant bits at most);
 * Q4_1 holds the grid when fp16 holds that product too. */
static bool
grid_m_exact(const struct qgrid *g)
{
    for (int64_t k = 0; k < g->n_groups * g->rows; k++)
        if (!fp16_exact(-g->scale[k] * (float)g->zero[k]))
            return false;
    return true;
}

static uint32_t
fallback_type(const struct qgrid *g)
{
    uint32_t t = g->bits <= 3 ? GGML_TYPE_Q4_K : g->bits == 4 ? GGML_TYPE_Q5_K : GGML_TYPE_Q8_0;

    if (g->cols % 32)
        return GGML_TYPE_F16;
    if ((t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) && g->cols % 256)
        t = GGML_TYPE_Q5_0;
    return t;
}

static void
plan_grid(struct qplan *p, const struct qgrid *g)
{
    bool fit = grid_blocks_fit(g);

    if (fit && g->bits == 4 && grid_zero_is(g, 8)) {
        p->kind = GK_Q4_0;
        p->type = GGML_TYPE_Q4_0;
    } else if (fit && g->bits == 4) {
        p->kind = GK_Q4_1;
        p->type = GGML_TYPE_Q4_1;
        p->m_rounded = !grid_m_exact(g);
    } else if (fit && g->bits == 8 && grid_zero_is(g, 128)) {
        p->kind = GK_Q8_0;
        p->type = GGML_TYPE_Q8_0;
    } else {
        p->kind = GK_DEQUANT;
        p->type = fallback_type(g);
    }
}

static uint32_t
float_type_of(uint32_t src)
{
    return src == GGML_TYPE_F16 || src == GGML_TYPE_BF16 ? src : GGML_TYPE_F32;
}

/* ---- grids into blocks ---- */

static void
encode_row(const struct qgrid *g, enum gkind kind, int64_t r, uint8_t *dst)
{
    const uint8_t *q = g->q + r * g->cols;

    for (int64_t c0 = 0; c0 < g->cols; c0 += 32) {
        int64_t k = (int64_t)g->g_idx[c0] * g->rows + r;
        uint16_t d = qconv_fp32_to_fp16(g->scale[k]);
        if (kind == GK_Q4_0) {
            struct block_q4_0 b;
            b.d = d;
            for (int j = 0; j < 16; j++)
                b.qs[j] = (uint8_t)(q[c0 + j] | q[c0 + j + 16] << 4);
            memcpy(dst, &b, sizeof b);
            dst += sizeof b;
        } else if (kind == GK_Q4_1) {
            struct block_q4_1 b;
            b.d = d;
            b.m = qconv_fp32_to_fp16(-g->scale[k] * (float)g->zero[k]);
            for (int j = 0; j < 16; j++)
                b.qs[j] = (uint8_t)(q[c0 + j] | q[c0 + j + 16] << 4);
            memcpy(dst, &b, sizeof b);
            dst += sizeof b;
        } else {
            struct block_q8_0 b;
            b.d = d;
            for (int j = 0; j < 32; j++)
                b.qs[j] = (int8_t)((int)q[c0 + j] - 128);
            memcpy(dst, &b, sizeof b);
            dst += sizeof b;
        }
    }
}

static int
grow_buf(struct gwrite *w, size_t n, struct diag *d)
{
    if (n <= w->buf_cap)
        return 0;
    uint8_t *p = realloc(w->buf, n);
    if (!p)
        return diag_set(d, ST_NOMEM, "out of memory");
    w->buf = p;
    w->buf_cap = n;
    return 0;
}

static int
emit_grid(struct gwrite *w, const struct qplan *p, tensor_sink_fn sink, void *sink_ctx,
          struct diag *d)
{
    const struct qgrid *g = p->qt->g;
    const struct qtype *ot = qtype_get(p->type);
    size_t drow = qtype_row_bytes(p->type, g->cols);
    double err2 = 0, ref2 = 0, maxd = 0;
    int rc;

    if (!drow || !ot || !ot->to_float)
        return diag_set(d, ST_RANGE, "rows of %lld elements do not fit type %s",
                        (long long)g->cols, ot ? ot->name : "?");
    if ((rc = grow_buf(w, drow * (size_t)g->rows, d)) < 0)
        return rc;
    for (int64_t r = 0; r < g->rows; r++) {
        uint8_t *dst = w->buf + (size_t)r * drow;
        qgrid_dequant_row(g, r, w->w);
        if (p->kind == GK_DEQUANT) {
            for (int64_t c = 0; c < g->cols; c++)
                if (!isfinite(w->w[c]))
                    return diag_set(d, ST_FORMAT, "row %lld: dequantized weight not finite in fp16",
                                    (long long)r);
            if (quant_chunk(p->type, w->w, dst, 1, g->cols, NULL) != drow)
                return diag_set(d, ST_RANGE, "quantizing to %s failed", ot->name);
        } else {
            encode_row(g, p->kind, r, dst);
        }
        ot->to_float(dst, w->y, g->cols);
        for (int64_t c = 0; c < g->cols; c++) {
            double e = (double)w->y[c] - (double)w->w[c];
            err2 += e * e;
            ref2 += (double)w->w[c] * w->w[c];
            if (fabs(e) > maxd)
                maxd = fabs(e);
        }
    }
    if (p->kind == GK_DEQUANT || p->m_rounded) {
        double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
        if (p->kind == GK_DEQUANT)
            runcb_info(w->cb, "tensor '%s': no GGUF type holds a %d-bit%s grid of group size %lld "
                       "here; written as %s from the dequantized weights: extra error %.3g "
                       "relative RMS, %.3g at most", p->qt->name, g->bits, g->sym ? " sym" : "",
                       (long long)g->group_size, ot->name, rel, maxd);
        else
            runcb_info(w->cb, "tensor '%s': Q4_1 cannot hold every zero point exactly "
                       "(-scale*zero not fp16); m rounded: extra error %.3g relative RMS, "
                       "%.3g at most", p->qt->name, rel, maxd);
    } else {
        w->n_exact++;
        if (maxd > w->max_round)
            w->max_round = maxd;
    }
    return sink(sink_ctx, w->buf, drow * (size_t)g->rows, d);
}

static int
emit_tensor(void *ctx, size_t i, const struct tsrc *s, uint32_t out_type, tensor_sink_fn sink,
            void *sink_ctx, struct diag *d)
{
    struct gwrite *w = ctx;
    const struct qplan *p = &w->plan[i];

    if (p->kind == GK_COPY)
        return tensor_emit(s, out_type, sink, sink_ctx, d);
    if (p->kind == GK_F32) {
        struct tsrc f = *s;
        f.data = p->qt->f32;
        f.type = GGML_TYPE_F32;
        f.perm_heads = 0;
        return tensor_emit(&f, out_type, sink, sink_ctx, d);
    }
    return emit_grid(w, p, sink, sink_ctx, d);
}

/* ---- metadata ---- */

/* llama_ftype of a file whose quantized tensors are all of type t. */
static uint32_t
ftype_of(uint32_t t)
{
    switch (t) {
    case GGML_TYPE_Q4_0: return 2;
    case GGML_TYPE_Q4_1: return 3;
    case GGML_TYPE_Q8_0: return 7;
    case GGML_TYPE_Q5_0: return 8;
    case GGML_TYPE_Q4_K: return 14;     /* Q4_K_S: every tensor Q4_K */
    case GGML_TYPE_Q5_K: return 16;     /* Q5_K_S */
    case GGML_TYPE_F16: return 1;
    default: return 1024;               /* LLAMA_FTYPE_GUESSED */
    }
}

static int
set_metadata(struct gguf *out, const struct gguf *in, const struct qmodel *qm, uint32_t ftype)
{
    const struct qprov *p = &qm->prov;
    int bad = 0;

    for (uint64_t i = 0; i < in->n_kv; i++) {
        const char *k = in->kv[i].key.p;
        if (!strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version") ||
            !strncmp(k, "llmkit.quantize.", 16))
            continue;
        bad |= gguf_set_kv_copy(out, &in->kv[i]);
    }
    bad |= gguf_set_u32(out, "general.quantization_version", 2);
    if (ftype != UINT32_MAX)
        bad |= gguf_set_u32(out, "general.file_type", ftype);
    else if (gguf_get(in, "general.file_type"))
        bad |= gguf_set_kv_copy(out, gguf_get(in, "general.file_type"));
    bad |= gguf_set_str(out, "llmkit.quantize.method", p->method ? p->method : "?");
    bad |= gguf_set_str(out, "llmkit.quantize.version", LLMKIT_VERSION);
    bad |= gguf_set_u32(out, "llmkit.quantize.bits", (uint32_t)p->bits);
    bad |= gguf_set_i32(out, "llmkit.quantize.group_size", (int32_t)p->group_size);
    bad |= gguf_set_bool(out, "llmkit.quantize.sym", p->sym);
    bad |= gguf_set_bool(out, "llmkit.quantize.act_order", p->act_order);
    bad |= gguf_set_bool(out, "llmkit.quantize.static_groups", p->static_groups);
    bad |= gguf_set_bool(out, "llmkit.quantize.true_sequential", p->true_sequential);
    bad |= gguf_set_bool(out, "llmkit.quantize.mse", p->mse);
    bad |= gguf_set_f32(out, "llmkit.quantize.damp", (float)p->damp);
    if (p->calib_sha256[0])
        bad |= gguf_set_str(out, "llmkit.quantize.calib_sha256", p->calib_sha256);
    if (p->calib_tokens > 0)
        bad |= gguf_set_u64(out, "llmkit.quantize.calib_tokens", (uint64_t)p->calib_tokens);
    return bad ? -ST_NOMEM : 0;
}

/* ---- the file ---- */

static int
check_tensor(const struct qmodel_tensor *qt, const struct gguf_tensor *t, struct diag *d)
{
    if (qt->g && qt->f32)
        return diag_set(d, ST_RANGE, "tensor '%s': both a grid and float data", qt->name);
    if (qt->g) {
        const struct qgrid *g = qt->g;
        if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] != g->cols || t->ne[1] != g->rows)
            return diag_set(d, ST_RANGE, "tensor '%s': grid of %lld x %lld, tensor of "
                            "%lld x %lld", qt->name, (long long)g->rows, (long long)g->cols,
                            (long long)t->ne[1], (long long)t->ne[0]);
        for (int64_t c = 0; c < g->cols; c++)
            if (g->g_idx[c] < 0 || g->g_idx[c] >= g->n_groups)
                return diag_set(d, ST_RANGE, "tensor '%s': g_idx[%lld] = %d out of range",
                                qt->name, (long long)c, (int)g->g_idx[c]);
        for (int64_t k = 0; k < g->rows * g->cols; k++)
            if (g->q[k] >> g->bits)
                return diag_set(d, ST_RANGE, "tensor '%s': integer %d above %d bits", qt->name,
                                (int)g->q[k], g->bits);
    }
    return 0;
}

int
qmodel_write_gguf(const struct qmodel *qm, const char *out, bool force,
                  const struct run_callbacks *cb, struct diag *d)
{
    struct gguf in, outg;
    struct gwrite w;
    struct out_tensor *ts = NULL;
    struct gguf_write_opts wo = { 0 };
    bool in_open = false;
    int64_t max_cols = 1;
    uint32_t qtype = UINT32_MAX;
    bool mixed = false;
    int rc;

    memset(&w, 0, sizeof w);
    gguf_init(&outg);
    if (!qm->src_path)
        return diag_set(d, ST_RANGE, "no source GGUF for the quantized model");
    if ((rc = gguf_open(&in, qm->src_path, d)) < 0 || (rc = gguf_load_stream(&in, d)) < 0) {
        if (rc < 0 && in.src)
            gguf_release(&in);
        diag_prefix(d, "'%s'", qm->src_path);
        return rc;
    }
    in_open = true;
    ts = calloc(in.n_tensors ? in.n_tensors : 1, sizeof *ts);
    w.plan = calloc(in.n_tensors ? in.n_tensors : 1, sizeof *w.plan);
    if (!ts || !w.plan) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t j = 0; j < qm->n; j++) {
        const struct qmodel_tensor *qt = &qm->t[j];
        int64_t i = gguf_find_tensor(&in, qt->name);
        if (i < 0) {
            rc = diag_set(d, ST_RANGE, "'%s': no tensor '%s'", qm->src_path, qt->name);
            goto out;
        }
        if ((rc = check_tensor(qt, &in.t[i], d)) < 0)
            goto out;
        if (w.plan[i].qt) {
            rc = diag_set(d, ST_RANGE, "tensor '%s' listed twice", qt->name);
            goto out;
        }
        w.plan[i].qt = qt;
    }
    for (uint64_t i = 0; i < in.n_tensors; i++) {
        const struct gguf_tensor *t = &in.t[i];
        struct qplan *p = &w.plan[i];
        struct out_tensor *ot = &ts[i];

        if (!t->data) {
            rc = diag_set(d, ST_FORMAT, "'%s': tensor '%s' has no data", qm->src_path, t->name.p);
            goto out;
        }
        p->type = t->type;
        if (p->qt && p->qt->g) {
            plan_grid(p, p->qt->g);
            if (p->qt->g->cols > max_cols)
                max_cols = p->qt->g->cols;
            if (qtype != UINT32_MAX && qtype != p->type)
                mixed = true;
            qtype = p->type;
        } else if (p->qt && p->qt->f32) {
            p->kind = GK_F32;
            p->type = float_type_of(t->type);
        }
        snprintf(ot->name, sizeof ot->name, "%s", t->name.p);
        ot->n_dims = t->n_dims;
        memcpy(ot->ne, t->ne, sizeof ot->ne);
        ot->type = p->type;
        ot->src.data = t->data;
        ot->src.type = t->type;
        memcpy(ot->src.ne, t->ne, sizeof ot->src.ne);
    }
    w.w = malloc((size_t)max_cols * sizeof(float));
    w.y = malloc((size_t)max_cols * sizeof(float));
    if (!w.w || !w.y) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if (set_metadata(&outg, &in, qm, qtype == UINT32_MAX ? UINT32_MAX
                                     : mixed ? 1024 : ftype_of(qtype)) < 0) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    w.qm = qm;
    w.cb = cb;
    wo.output = out;
    wo.force = force;
    if (cb)
        wo.cb = *cb;
    rc = write_gguf_emit(&outg, ts, in.n_tensors, NULL, NULL, emit_tensor, &w, "writing", &wo, d);
    if (!rc && w.n_exact)
        runcb_info(cb, "%lld grids held exactly; llama.cpp dequantizes them to (q - zero) * scale "
                   "in f32, at most %.3g from the HF loaders' fp16 rounding",
                   (long long)w.n_exact, w.max_round);
out:
    if (in_open)
        gguf_release(&in);
    gguf_release(&outg);
    free(ts);
    free(w.plan);
    free(w.w);
    free(w.y);
    free(w.buf);
    return rc;
}
