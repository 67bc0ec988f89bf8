/*
 * quantize.c - a GGUF file in, a quantized GGUF file out, the way
 * llama-quantize's llama_model_quantize_impl writes it (see quantize.h),
 * through the GGUF writer (gguf_write.h: write_gguf_emit) with our own
 * emitter: dequantize or widen the source rows to f32, then quantize the
 * rows across the thread pool with kernels/quant.h.  Rows are independent,
 * so the bytes do not depend on the number of threads.
 */
#include "quantize.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "cli.h"
#include "gguf.h"
#include "gguf_write.h"
#include "imatrix.h"
#include "qtypes.h"
#include "quant.h"
#include "threadpool.h"
#include "xio.h"

#define QUANTIZE_STDIN_MAX ((size_t)1 << 40)

int
quantize_threadpool(struct threadpool **tp, int n_threads, struct diag *d)
{
    int rc = threadpool_new(tp, n_threads);

    if (rc == -ERANGE)
        return diag_set(d, ST_RANGE, "%d threads: at most %d", n_threads, THREADPOOL_MAX);
    if (rc < 0)
        return diag_errno(d, rc, "thread pool: cannot start the threads");
    return 0;
}

int
quantize_sha256_hex(const void *p, size_t n, char out[65])
{
    return quantize_sha256_hexv(&p, &n, 1, out);
}

int
quantize_sha256_hexv(const void *const *p, const size_t *n, int k, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    static const char hex[] = "0123456789abcdef";
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);

    for (int i = 0; ok && i < k; i++)
        ok = EVP_DigestUpdate(ctx, p[i], n[i]);
    ok = ok && EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    if (!ok || len != 32)
        return -ST_NOMEM;
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = 0;
    return 0;
}

void
quantize_report_release(struct quantize_report *r)
{
    free(r->t);
    memset(r, 0, sizeof(*r));
}

/* ---- the emitter ---- */

struct qrun {
    const struct quantize_opts *o;
    struct quantize_report *r;
    struct threadpool *tp;
    float *f32;
    size_t f32_cap;             /* floats */
    uint8_t *buf;
    size_t buf_cap;
    float *imx;
    size_t imx_cap;
    bool warned_requant;
    /* the job being run */
    const uint8_t *src;
    const struct qtype *st;
    uint32_t type;
    int64_t ne0, ne1;
    size_t srow, drow;
    const float *x;             /* f32 rows being quantized */
    const float *job_imx;
    atomic_int bad_value;
    atomic_int bad_quant;
};

static int
grow(void **p, size_t *cap, size_t want, size_t elem)
{
    void *np;

    if (want <= *cap)
        return 0;
    if (want > SIZE_MAX / elem)
        return -ST_NOMEM;
    np = realloc(*p, want * elem);
    if (!np)
        return -ST_NOMEM;
    *p = np;
    *cap = want;
    return 0;
}

static void
job_dequant(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct qrun *q = arg;

    (void)ith;
    for (int64_t r = i0; r < i1; r++)
        q->st->to_float(q->src + (size_t)r * q->srow, q->f32 + r * q->ne0, q->ne0);
}

static void
job_quant(void *arg, int64_t i0, int64_t i1, int ith)
{
    struct qrun *q = arg;
    const int64_t ne0 = q->ne0;

    (void)ith;
    for (int64_t k = i0 * ne0; k < i1 * ne0; k++)
        if (!isfinite(q->x[k])) {
            atomic_store(&q->bad_value, 1);
            return;
        }
    /* a run of rows never crosses an expert slice: each has its own imatrix part */
    for (int64_t r = i0; r < i1;) {
        int64_t e = r / q->ne1, end = (e + 1) * q->ne1 < i1 ? (e + 1) * q->ne1 : i1;
        size_t n = quant_chunk(q->type, q->x + r * ne0, q->buf + (size_t)r * q->drow, end - r, ne0,
                               q->job_imx ? q->job_imx + e * ne0 : NULL);
        if (n != (size_t)(end - r) * q->drow) {
            atomic_store(&q->bad_quant, 1);
            return;
        }
        r = end;
    }
}

static int
emit_tensor(void *ctx, size_t i, const struct tsrc *s, uint32_t out_type, tensor_sink_fn sink,
            void *sink_ctx, struct diag *d)
{
    struct qrun *q = ctx;
    struct quantize_tensor_info *ti = &q->r->t[i];
    const int64_t ne0 = s->ne[0], ne1 = s->ne[1], nrows = s->ne[1] * s->ne[2] * s->ne[3];
    const float *src32;
    int rc;

    q->st = qtype_get(s->type);
    q->srow = qtype_row_bytes(s->type, ne0);
    if (s->type == out_type) {
        size_t n = q->srow * (size_t)nrows;
        if ((rc = quantize_sha256_hex(s->data, n, ti->sha256)) < 0)
            return diag_set(d, ST_NOMEM, "out of memory");
        return sink(sink_ctx, s->data, n, d);
    }
    q->drow = quant_row_size(out_type, ne0);
    if (!q->drow || !quant_supported(out_type))
        return diag_set(d, ST_RANGE, "cannot quantize rows of %lld elements to %s", (long long)ne0,
                        qtype_get(out_type)->name);
    if (!q->st || !q->st->to_float)
        return diag_set(d, ST_RANGE, "cannot convert from type %s",
                        q->st ? q->st->name : "unknown");
    if (grow((void **)&q->buf, &q->buf_cap, q->drow * (size_t)nrows, 1) < 0)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (s->type == GGML_TYPE_F32) {
        src32 = s->data;
    } else {
        if (q->st->blck > 1 && !q->warned_requant) {
            runcb_warn(&q->o->cb, "the input is already quantized: its tensors are dequantized and "
                       "quantized again, so quality is lost twice");
            q->warned_requant = true;
            q->r->requantized = true;
        }
        if (grow((void **)&q->f32, &q->f32_cap, (size_t)(ne0 * nrows), sizeof(float)) < 0)
            return diag_set(d, ST_NOMEM, "out of memory");
        q->src = s->data;
        q->ne0 = ne0;
        threadpool_for(q->tp, nrows, 1, job_dequant, q);
        src32 = q->f32;
    }
    /* importance matrix: llama-quantize looks the tensor up by name; an
     * entry of another size is token_embd.weight's, which it ignores
     * (quantize_model refused any other) */
    q->job_imx = NULL;
    if (q->o->imatrix) {
        const struct imatrix_entry *e = imatrix_find(q->o->imatrix, ti->name);
        if (!e) {
            q->r->imatrix_missing++;
        } else if (e->ne0 * e->n_mat == ne0 * s->ne[2]) {
            if (grow((void **)&q->imx, &q->imx_cap, (size_t)(e->ne0 * e->n_mat), sizeof(float)) < 0)
                return diag_set(d, ST_NOMEM, "out of memory");
            if ((rc = imatrix_values(q->o->imatrix, e, q->imx, d)) < 0)
                return rc;
            q->job_imx = q->imx;
            ti->used_imatrix = true;
        }
    }
    q->x = src32;
    q->type = out_type;
    q->ne0 = ne0;
    q->ne1 = ne1 > 0 ? ne1 : 1;
    atomic_store(&q->bad_value, 0);
    atomic_store(&q->bad_quant, 0);
    threadpool_for(q->tp, nrows, 1, job_quant, q);
    if (atomic_load(&q->bad_value))
        return diag_set(d, ST_FORMAT, "non-finite weights (NaN or infinity)");
    if (atomic_load(&q->bad_quant))
        return diag_set(d, ST_RANGE, "quantizing to %s failed", qtype_get(out_type)->name);
    if ((rc = quantize_sha256_hex(q->buf, q->drow * (size_t)nrows, ti->sha256)) < 0)
        return diag_set(d, ST_NOMEM, "out of memory");
    return sink(sink_ctx, q->buf, q->drow * (size_t)nrows, d);
}

/* ---- the file ---- */

struct order_ent {
    const char *name;
    size_t idx;
};

static int
cmp_order(const void *a, const void *b)
{
    return quant_layer_cmp(((const struct order_ent *)a)->name, ((const struct order_ent *)b)->name);
}

static bool
skip_key(const char *k)
{
    return !strcmp(k, "general.quantization_version") || !strcmp(k, "general.file_type") ||
           !strcmp(k, "split.no") || !strcmp(k, "split.count") || !strcmp(k, "split.tensors.count");
}

/* gguf_set_val_* in llama.cpp removes the key and appends it: keep that order. */
static int
append_u32(struct gguf *g, const char *k, uint32_t v)
{
    gguf_remove(g, k);
    return gguf_set_u32(g, k, v);
}

static int
append_str(struct gguf *g, const char *k, const char *v, size_t max)
{
    size_t n = strlen(v);
    gguf_remove(g, k);
    return gguf_set_strn(g, k, v, n > max ? max : n);
}

static int
set_metadata(struct gguf *out, const struct gguf *in, const struct quantize_opts *o,
             const char *ftype_name)
{
    const struct imatrix *im = o->imatrix;
    int bad = 0;

    for (uint64_t i = 0; i < in->n_kv; i++)
        if (!skip_key(in->kv[i].key.p))
            bad |= gguf_set_kv_copy(out, &in->kv[i]);
    bad |= append_u32(out, "general.quantization_version", 2);
    bad |= append_u32(out, "general.file_type", o->mix.ftype);
    if (im) {
        /* llama-quantize's own keys, 127 characters at most */
        if (o->imatrix_file)
            bad |= append_str(out, "quantize.imatrix.file", o->imatrix_file, 127);
        if (im->n_datasets)
            bad |= append_str(out, "quantize.imatrix.dataset", im->datasets[0], 127);
        bad |= append_u32(out, "quantize.imatrix.entries_count", (uint32_t)im->n);
        if (im->chunk_count > 0)
            bad |= append_u32(out, "quantize.imatrix.chunks_count", (uint32_t)im->chunk_count);
    }
    bad |= append_str(out, "llmkit.quantize.method", "ggml", 64);
    bad |= append_str(out, "llmkit.quantize.type", ftype_name, 64);
    bad |= append_str(out, "llmkit.quantize.version", LLMKIT_VERSION, 64);
    if (o->imatrix_sha256)
        bad |= append_str(out, "llmkit.quantize.imatrix_sha256", o->imatrix_sha256, 64);
    if (o->calib_sha256)
        bad |= append_str(out, "llmkit.quantize.calib_sha256", o->calib_sha256, 64);
    return bad ? -ST_NOMEM : 0;
}

/* ggml_n_dims: dimensions up to the last one above 1 (llama.cpp decides and
 * writes with it, whatever the input file stored). */
static uint32_t
n_dims_of(const int64_t *ne)
{
    uint32_t n = GGUF_MAX_DIMS;

    while (n > 1 && ne[n - 1] == 1)
        n--;
    return n;
}

/* Names the importance matrix in the message in d: its file, else the
 * model it was collected from. */
static void
prefix_imatrix(const struct quantize_opts *o, struct diag *d)
{
    if (o->imatrix_file)
        diag_prefix(d, "'%s'", o->imatrix_file);
    else
        diag_prefix(d, "'%s': importance matrix", o->input);
}

/* An entry for t, which is quantized, must match its rows (as
 * llama-quantize checks), but for token_embd.weight, whose entry it
 * ignores: -ST_FORMAT naming both files. */
static int
check_imatrix_entry(const struct quantize_opts *o, const struct gguf_tensor *t, struct diag *d)
{
    const struct imatrix_entry *e = imatrix_find(o->imatrix, t->name.p);

    if (!e || e->ne0 * e->n_mat == t->ne[0] * t->ne[2] || !strcmp(t->name.p, "token_embd.weight"))
        return 0;
    diag_set(d, ST_FORMAT, "entry '%s' has %lld values, the tensor's rows in '%s' have %lld",
             t->name.p, (long long)(e->ne0 * e->n_mat), o->input, (long long)(t->ne[0] * t->ne[2]));
    prefix_imatrix(o, d);
    return -ST_FORMAT;
}

int
quantize_model(const struct quantize_opts *o, struct quantize_report *r, struct diag *d)
{
    struct gguf own, *in = o->in ? o->in : &own, outg;
    struct quant_mix mix;
    struct order_ent *ord = NULL;
    struct out_tensor *ts = NULL;
    struct qrun q;
    struct gguf_write_opts wo = { 0 };
    const char *ftype_name = "?";
    size_t n_ft;
    const struct quant_ftype *ftl = quant_ftype_list(&n_ft);
    bool in_open = false, mix_open = false;
    double t0 = now_seconds();
    int rc;

    memset(r, 0, sizeof(*r));
    memset(&q, 0, sizeof(q));
    gguf_init(&outg);
    for (size_t i = 0; i < n_ft; i++)
        if (ftl[i].ftype == o->mix.ftype)
            ftype_name = ftl[i].name;
    /* Tensors are written in another order than they are stored: a stream's
     * data section is read whole, but only after its header has been read and
     * checked as it streams (an endless or foreign stream fails at once), here
     * or by the caller (o->in). */
    if ((!o->in && (rc = gguf_open(&own, o->input, d)) < 0) || (rc = gguf_load_stream(in, d)) < 0) {
        if (rc < 0 && !o->in && own.src)
            gguf_release(&own);
        diag_prefix(d, "'%s'", o->input);
        goto out;
    }
    in_open = !o->in;
    if (o->imatrix) {
        /* llama-quantize refuses a matrix with any non-finite value, used or not */
        const struct imatrix *im = o->imatrix;
        for (size_t i = 0; i < im->n; i++) {
            const struct imatrix_entry *e = &im->e[i];
            if (grow((void **)&q.imx, &q.imx_cap, (size_t)(e->ne0 * e->n_mat), sizeof(float)) < 0) {
                rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
                goto out;
            }
            if ((rc = imatrix_values(im, e, q.imx, d)) < 0) {
                prefix_imatrix(o, d);
                goto out;
            }
        }
    }
    if ((rc = quant_mix_init(&mix, in, &o->mix, d)) < 0) {
        diag_prefix(d, "'%s'", o->input);
        goto out;
    }
    mix_open = true;

    ord = calloc(in->n_tensors ? in->n_tensors : 1, sizeof(*ord));
    ts = calloc(in->n_tensors ? in->n_tensors : 1, sizeof(*ts));
    r->t = calloc(in->n_tensors ? in->n_tensors : 1, sizeof(*r->t));
    if (!ord || !ts || !r->t) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        ord[i].name = in->t[i].name.p;
        ord[i].idx = i;
    }
    qsort(ord, in->n_tensors, sizeof(*ord), cmp_order);

    if ((rc = set_metadata(&outg, in, o, ftype_name)) < 0) {
        diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    for (uint64_t k = 0; k < in->n_tensors; k++) {
        const struct gguf_tensor *t = &in->t[ord[k].idx];
        struct quantize_tensor_info *ti = &r->t[k];
        struct out_tensor *ot = &ts[k];
        bool fb = false;
        uint32_t nd = n_dims_of(t->ne);
        int ty = quant_mix_type(&mix, t->name.p, t->type, nd, t->ne, &fb, d);

        if (ty < 0) {
            rc = ty;
            diag_prefix(d, "'%s'", o->input);
            goto out;
        }
        if (!t->data) {
            rc = diag_set(d, ST_FORMAT, "'%s': tensor '%s' has no data", o->input, t->name.p);
            goto out;
        }
        snprintf(ti->name, sizeof(ti->name), "%s", t->name.p);
        ti->src_type = t->type;
        ti->type = (uint32_t)ty;
        ti->n_dims = nd;
        memcpy(ti->ne, t->ne, sizeof(ti->ne));
        ti->src_bytes = t->nbytes;
        ti->quantized = (uint32_t)ty != t->type;
        ti->fallback = fb;
        if (ti->quantized && o->imatrix && (rc = check_imatrix_entry(o, t, d)) < 0)
            goto out;
        if (ti->quantized) {
            const struct qtype *sq = qtype_get(t->type);
            if (!quant_supported((uint32_t)ty)) {
                rc = diag_set(d, ST_RANGE, "tensor '%s': cannot produce type %s", t->name.p,
                              qtype_get((uint32_t)ty)->name);
                goto out;
            }
            if (!sq || !sq->to_float) {
                rc = diag_set(d, ST_RANGE, "'%s': tensor '%s': cannot convert from type %s",
                              o->input, t->name.p, sq ? sq->name : "unknown");
                goto out;
            }
        }
        snprintf(ot->name, sizeof(ot->name), "%s", t->name.p);
        ot->n_dims = nd;
        memcpy(ot->ne, t->ne, sizeof(ot->ne));
        ot->type = (uint32_t)ty;
        ot->src.data = t->data;
        ot->src.type = t->type;
        memcpy(ot->src.ne, t->ne, sizeof(ot->src.ne));
        r->src_bytes += t->nbytes;
        r->n_params += (uint64_t)gguf_tensor_nelements(t);
    }
    r->n = in->n_tensors;
    r->n_fallback = mix.n_fallback;

    if ((rc = quantize_threadpool(&q.tp, o->n_threads, d)) < 0)
        goto out;
    q.o = o;
    q.r = r;
    wo.output = o->output;
    wo.input = o->input;        /* named in a tensor's errors: non-finite weights ... */
    wo.force = o->force;
    wo.cb = o->cb;
    wo.out = o->out;
    rc = write_gguf_emit(&outg, ts, in->n_tensors, NULL, NULL, emit_tensor, &q, "quantizing", &wo, d);
    if (rc)
        goto out;
    for (size_t k = 0; k < r->n; k++) {
        r->t[k].bytes = outg.t[k].nbytes;
        r->out_bytes += outg.t[k].nbytes;
    }
    r->file_bytes = gguf_header_size(&outg) + outg.data_size;
    r->seconds = now_seconds() - t0;
out:
    threadpool_free(q.tp);
    free(q.f32);
    free(q.buf);
    free(q.imx);
    if (mix_open)
        quant_mix_release(&mix);
    if (in_open)
        gguf_release(&own);
    gguf_release(&outg);
    free(ord);
    free(ts);
    if (rc)
        quantize_report_release(r);
    return rc;
}
