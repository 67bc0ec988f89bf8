/*
 * gguf_write.c - the tensor pipeline and the streaming GGUF writer (see
 * gguf_write.h).
 */
#include "gguf_write.h"

#include <stdlib.h>
#include <string.h>

#include "qtypes.h"
#include "xio.h"


bool
tensor_is_1d(const int64_t *ne)
{
    return ne[1] == 1 && ne[2] == 1 && ne[3] == 1;
}

int64_t
permute_src_row(int64_t r, int64_t n_rows, int n_head, bool to_hf)
{
    int64_t hd, h, j, half;

    if (n_head <= 0 || n_rows % n_head)
        return r;
    hd = n_rows / n_head;
    if (hd % 2)
        return r;
    half = hd / 2;
    h = r / hd;
    j = r % hd;
    if (!to_hf)     /* GGUF row h*D + j comes from HF row h*D + (j%2)*D/2 + j/2 */
        return h * hd + (j % 2) * half + j / 2;
    /* HF row h*D + a*D/2 + i comes from GGUF row h*D + 2i + a */
    return h * hd + 2 * (j % half) + j / half;
}

int
tensor_emit(const struct tsrc *s, uint32_t out_type, tensor_sink_fn sink, void *ctx, struct diag *d)
{
    const struct qtype *st = qtype_get(s->type), *dt = qtype_get(out_type);
    int64_t ne0 = s->ne[0], nrows = s->ne[1] * s->ne[2] * s->ne[3];
    size_t srow, drow;
    int64_t chunk_rows;
    float *tmp = NULL;
    uint8_t *out = NULL;
    int rc = 0;

    if (!st || !dt)
        return diag_set(d, ST_RANGE, "unknown tensor type");
    srow = qtype_row_bytes(s->type, ne0);
    drow = qtype_row_bytes(out_type, ne0);
    if (!srow || !drow)
        return diag_set(d, ST_RANGE, "row of %lld elements does not fit type %s", (long long)ne0,
                        drow ? st->name : dt->name);
    if (s->type == out_type && !s->perm_heads && s->add == 0.0f)
        return sink(ctx, s->data, srow * (size_t)nrows, d);
    if (!st->to_float)
        return diag_set(d, ST_RANGE, "cannot convert from type %s", st->name);
    if (!dt->from_float)
        return diag_set(d, ST_RANGE, "cannot convert to type %s", dt->name);
    chunk_rows = (int64_t)((4u << 20) / (drow + 1));
    if (chunk_rows < 1)
        chunk_rows = 1;
    if (chunk_rows > nrows)
        chunk_rows = nrows;
    tmp = malloc((size_t)ne0 * sizeof(float));
    out = malloc(drow * (size_t)chunk_rows);
    if (!tmp || !out) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t r0 = 0; r0 < nrows; r0 += chunk_rows) {
        int64_t nr = nrows - r0 < chunk_rows ? nrows - r0 : chunk_rows;
        for (int64_t k = 0; k < nr; k++) {
            int64_t r = r0 + k, sr = r;
            if (s->perm_heads)
                sr = permute_src_row(r, nrows, s->perm_heads > 0 ? s->perm_heads : -s->perm_heads,
                                     s->perm_heads < 0);
            st->to_float((const uint8_t *)s->data + (size_t)sr * srow, tmp, ne0);
            if (s->add != 0.0f)
                for (int64_t j = 0; j < ne0; j++)
                    tmp[j] += s->add;
            dt->from_float(tmp, out + (size_t)k * drow, ne0);
        }
        rc = sink(ctx, out, drow * (size_t)nr, d);
        if (rc)
            goto out;
    }
out:
    free(tmp);
    free(out);
    return rc;
}

void
diag_prefix_output(struct diag *d, const char *path)
{
    if (!strcmp(path, "-"))
        diag_prefix(d, "stdout");
    else
        diag_prefix(d, "'%s'", path);
}

int
sink_file(void *ctx, const void *p, size_t n, struct diag *d)
{
    return write_all((FILE *)ctx, p, n, d);
}

uint32_t
ftype_for_type(int type)
{
    switch (type) {
    case GGML_TYPE_F32: return 0;
    case GGML_TYPE_F16: return 1;
    case GGML_TYPE_BF16: return 32;
    default: return 0;
    }
}

/* The type a tensor gets when a model is retyped to `want`: 1-D tensors and
 * norms stay F32 (as convert_hf_to_gguf.py writes them). */
uint32_t
retype_for(const char *name, const int64_t *ne, uint32_t src_type, int want)
{
    size_t n = strlen(name);

    if (want < 0)
        return src_type;
    if (tensor_is_1d(ne) || (n > 12 && !strcmp(name + n - 12, "_norm.weight")) ||
        (n < 7 || strcmp(name + n - 7, ".weight")))
        return GGML_TYPE_F32;
    return (uint32_t)want;
}

int
write_gguf_out(struct gguf *meta, const struct out_tensor *ts, size_t n, tensor_fetch_fn fetch,
               void *fetch_ctx, const struct gguf_write_opts *o, struct diag *d)
{
    return write_gguf_emit(meta, ts, n, fetch, fetch_ctx, NULL, NULL, NULL, o, d);
}

int
write_gguf_emit(struct gguf *meta, const struct out_tensor *ts, size_t n, tensor_fetch_fn fetch,
                void *fetch_ctx, tensor_emit_fn emit, void *emit_ctx, const char *label,
                const struct gguf_write_opts *o, struct diag *d)
{
    struct xout xo = {0};
    struct xout *out = o->out ? o->out : &xo;
    uint64_t total = 0, done = 0;
    int rc;

    for (size_t i = 0; i < n; i++) {
        int64_t k = gguf_add_tensor(meta, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, NULL, d);
        if (k < 0) {
            if (o->input)
                diag_prefix(d, "'%s'", o->input);
            return (int)k;
        }
        total += meta->t[k].nbytes;
    }
    if (!o->out && (rc = xout_open(&xo, o->output, o->force, d)) < 0) {
        diag_prefix_output(d, o->output);
        return rc;
    }
    rc = gguf_write_header(meta, out->fp, d);
    if (rc)
        goto fail;
    if (!label)
        label = "converting";
    runcb_progress(&o->cb, label, 0, (int64_t)total);
    for (size_t i = 0; i < n; i++) {
        struct tsrc s = ts[i].src;
        const struct gguf_tensor *t = &meta->t[meta->n_tensors - n + i];
        if (!s.data && (rc = fetch(fetch_ctx, i, &s.data, d)) < 0) {
            if (o->input)
                diag_prefix(d, "'%s'", o->input);
            goto fail_named;
        }
        rc = emit ? emit(emit_ctx, i, &s, t->type, sink_file, out->fp, d)
                  : tensor_emit(&s, t->type, sink_file, out->fp, d);
        if (!rc)
            rc = gguf_write_padding(meta, out->fp, t->nbytes, d);
        if (rc) {
            diag_prefix(d, "tensor '%s'", t->name.p);
            if (rc != -ST_IO && o->input)
                diag_prefix(d, "'%s'", o->input);
            goto fail;
        }
        done += t->nbytes;
        runcb_progress(&o->cb, label, (int64_t)done, (int64_t)total);
    }
    if (o->out)
        return 0;
    rc = xout_commit(&xo, d);
    if (rc)
        diag_prefix_output(d, o->output);
    return rc;
fail:
    if (rc == -ST_IO)
        diag_prefix_output(d, o->output);
fail_named:
    if (!o->out)
        xout_abort(&xo);
    return rc;
}
