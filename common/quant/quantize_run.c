/*
 * quantize_run.c - `quantize` from its options to its committed outputs
 * (see quantize_run.h): the importance matrix, the quantization, the
 * evaluation and the report, in the order the tool has always done them.
 */
#include "quantize_run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "gguf.h"
#include "imatrix.h"
#include "qeval.h"
#include "qtypes.h"
#include "xio.h"

/* The SHA-256 of n bytes as hex (malloc'd), or NULL when it cannot be
 * computed: provenance is best effort. */
static char *
sha256_dup(const void *p, size_t n)
{
    char *hex = malloc(65);

    if (hex && quantize_sha256_hex(p, n, hex) < 0) {
        free(hex);
        hex = NULL;
    }
    return hex;
}

static int run_quantize_type(const struct quantize_run_opts *o, struct diag *d);
static void eval_json(json_t *j, const struct quantize_run_opts *o, const struct qeval_result *ev);
static void eval_table(FILE *fp, const struct qeval_result *ev);

static void
json_line(FILE *fp, json_t *j)
{
    json_dumpf(j, fp, JSON_COMPACT | JSON_REAL_PRECISION(9));
    fputc('\n', fp);
    json_decref(j);
}

static void
json_tensor(FILE *fp, const struct quantize_tensor_info *t)
{
    json_t *j = json_object(), *ne = json_array();

    for (uint32_t k = 0; k < t->n_dims; k++)
        json_array_append_new(ne, json_integer(t->ne[k]));
    json_object_set_new(j, "schema", json_string("quantize/1"));
    json_object_set_new(j, "type", json_string("tensor"));
    json_object_set_new(j, "name", json_string(t->name));
    json_object_set_new(j, "ggml_type", json_string(qtype_get(t->type)->name));
    json_object_set_new(j, "src_type", json_string(qtype_get(t->src_type)->name));
    json_object_set_new(j, "ne", ne);
    json_object_set_new(j, "bytes", json_integer((json_int_t)t->bytes));
    json_object_set_new(j, "fallback", json_boolean(t->fallback));
    json_object_set_new(j, "imatrix", json_boolean(t->used_imatrix));
    json_object_set_new(j, "sha256", json_string(t->sha256));
    json_line(fp, j);
}

static void
json_summary(const struct quantize_run_opts *o, const struct quantize_report *rep, size_t n_imatrix,
             const struct qeval_result *ev, double bpw)
{
    json_t *j = json_object();

    json_object_set_new(j, "schema", json_string("quantize/1"));
    json_object_set_new(j, "type", json_string("summary"));
    json_object_set_new(j, "file_type", json_string(o->ft->name));
    json_object_set_new(j, "tensors", json_integer((json_int_t)rep->n));
    json_object_set_new(j, "params", json_integer((json_int_t)rep->n_params));
    json_object_set_new(j, "src_bytes", json_integer((json_int_t)rep->src_bytes));
    json_object_set_new(j, "tensor_bytes", json_integer((json_int_t)rep->out_bytes));
    json_object_set_new(j, "file_bytes", json_integer((json_int_t)rep->file_bytes));
    json_object_set_new(j, "bpw", json_real(bpw));
    json_object_set_new(j, "fallbacks", json_integer(rep->n_fallback));
    json_object_set_new(j, "imatrix_entries", json_integer((json_int_t)n_imatrix));
    json_object_set_new(j, "seconds", json_real(rep->seconds));
    if (o->eval)
        eval_json(j, o, ev);
    json_line(o->report, j);
}

/* The text report: the summary line on the log, and with --eval the
 * comparison table on the report stream. */
static void
text_summary(const struct quantize_run_opts *o, const struct quantize_report *rep,
             const struct qeval_result *ev, double bpw)
{
    const char *name = o->ft->name;
    FILE *fp = o->report;
    struct stat st;
    double in_mib = stat(o->q.input, &st) == 0 && S_ISREG(st.st_mode) ? (double)st.st_size / 1048576.0
                                                                      : (double)rep->src_bytes / 1048576.0;

    fprintf(o->log, "%s: %s: %zu tensors, %.2f MiB -> %.2f MiB, %.4f bits per weight, %.2f s\n",
            o->log_prefix, name, rep->n, (double)rep->src_bytes / 1048576.0,
            (double)rep->out_bytes / 1048576.0, bpw, rep->seconds);
    if (!o->eval)
        return;
    fprintf(fp, "%-22s %14s %14s\n", "", "base", name);
    fprintf(fp, "%-22s %14.2f %14.2f\n", "file size (MiB)", in_mib, (double)rep->file_bytes / 1048576.0);
    fprintf(fp, "%-22s %14.4f %14.4f\n", "bits per weight",
            rep->n_params ? 8.0 * (double)rep->src_bytes / (double)rep->n_params : 0.0, bpw);
    eval_table(fp, ev);
}

/* The importance matrix of the run into im: read (--imatrix; held to the
 * limits of q->in, INPUT's header, read first) or collected (--calib,
 * written to outs[1] with --imatrix-out), then filtered; q gets it with
 * its provenance (*shas, freed by the caller). */
static int
get_imatrix(const struct quantize_run_opts *o, struct quantize_opts *q, struct imatrix *im,
            struct xout *imatrix_out, char **shas, struct diag *d)
{
    int rc;

    /* each file is read once (a pipe or FIFO cannot be read again), and
     * its provenance hashed from the bytes read */
    if (o->imatrix_in) {
        struct imatrix_file f;
        struct imatrix_limits lim;
        imatrix_limits_of(&lim, q->in);
        if ((rc = imatrix_file_open(&f, o->imatrix_in, &lim, d)) < 0 ||
            (rc = imatrix_read_mem(im, f.p, f.n, d)) < 0 ||
            (rc = imatrix_check_limits(im, &lim, d)) < 0) {
            imatrix_file_close(&f);
            diag_prefix(d, "'%s'", o->imatrix_in);
            return rc;
        }
        shas[0] = sha256_dup(f.p, f.n);
        imatrix_file_close(&f);
        if (!im->legacy && !im->has_metadata)
            return diag_set(d, ST_FORMAT, "'%s': missing imatrix metadata (imatrix.datasets, "
                            "chunk_count, chunk_size)", o->imatrix_in);
        q->imatrix_file = o->imatrix_in;
    } else if (o->calib) {
        struct imatrix_collect_opts co = { .ctx = o->calib_ctx, .max_chunks = o->calib_chunks,
                                           .bos = -1, .cb = q->cb };
        int64_t ntok = 0;
        char *text;
        size_t len;
        if ((rc = read_file_all(o->calib, IMATRIX_TEXT_MAX, &text, &len, d)) < 0) {
            diag_prefix(d, "'%s'", o->calib);
            return rc;
        }
        shas[1] = sha256_dup(text, len);
        rc = imatrix_from_text(im, q->input, text, len, o->calib, &co, q->n_threads, o->kernel,
                               &ntok, d);
        free(text);
        if (rc < 0)
            return rc;
        runcb_info(&q->cb, "'%s': %lld tokens, %lld chunks of %lld", o->calib, (long long)ntok,
                   (long long)im->chunk_count, (long long)o->calib_ctx);
        if (o->imatrix_out) {
            if ((rc = xout_open(imatrix_out, o->imatrix_out, q->force, d)) < 0 ||
                (rc = imatrix_write_fp(im, imatrix_out->fp, o->imatrix_dat, d)) < 0) {
                diag_prefix(d, "'%s'", o->imatrix_out);
                return rc;
            }
            q->imatrix_file = o->imatrix_out;
        }
    } else {
        return 0;
    }
    imatrix_filter(im, o->inc, o->n_inc, o->exc, o->n_exc);
    q->mix.has_imatrix = im->n > 0;
    q->imatrix = im->n ? im : NULL;
    q->imatrix_sha256 = shas[0];
    q->calib_sha256 = shas[1];
    return 0;
}

/* ---- grid methods (--method) ---- */

static void
eval_json(json_t *j, const struct quantize_run_opts *o, const struct qeval_result *ev)
{
    json_object_set_new(j, "eval_ctx", json_integer(o->eval_ctx));
    json_object_set_new(j, "eval_chunks", json_integer(ev->n_chunks));
    json_object_set_new(j, "eval_scored", json_integer(ev->n_scored));
    json_object_set_new(j, "ppl_base", json_real(ev->ppl_base));
    json_object_set_new(j, "ppl_base_stderr", json_real(ev->ppl_base_err));
    json_object_set_new(j, "ppl_quant", json_real(ev->ppl_quant));
    json_object_set_new(j, "ppl_quant_stderr", json_real(ev->ppl_quant_err));
    json_object_set_new(j, "kld_mean", json_real(ev->kld_mean));
    json_object_set_new(j, "kld_median", json_real(ev->kld_median));
    json_object_set_new(j, "kld_p99", json_real(ev->kld_p99));
    json_object_set_new(j, "kld_max", json_real(ev->kld_max));
    json_object_set_new(j, "top1_agreement", json_real(ev->top1));
}

/* the evaluation's rows of the text report (after the size rows) */
static void
eval_table(FILE *fp, const struct qeval_result *ev)
{
    fprintf(fp, "%-22s %14.4f %14.4f\n", "perplexity", ev->ppl_base, ev->ppl_quant);
    fprintf(fp, "%-22s %14.4f %14.4f\n", "  +/-", ev->ppl_base_err, ev->ppl_quant_err);
    fprintf(fp, "%-22s %14s %14.6f\n", "KL divergence mean", "", ev->kld_mean);
    fprintf(fp, "%-22s %14s %14.6f\n", "KL divergence median", "", ev->kld_median);
    fprintf(fp, "%-22s %14s %14.6f\n", "KL divergence p99", "", ev->kld_p99);
    fprintf(fp, "%-22s %14s %13.2f%%\n", "top-1 agreement", "", 100.0 * ev->top1);
    fprintf(fp, "%-22s %14lld %14lld\n", "chunks, scored tokens", (long long)ev->n_chunks,
            (long long)ev->n_scored);
}

static const char *const format_names[] = { "gguf", "gptq", "gptq_v2", "awq" };

/* 8 * tensor bytes / elements of a GGUF file (quantize's bits per weight);
 * 0 when it cannot be read */
static double
gguf_bpw(const char *path)
{
    struct gguf g;
    struct diag d;
    double bytes = 0, n = 0;

    if (gguf_open(&g, path, &d) < 0)
        return 0;
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        bytes += (double)g.t[i].nbytes;
        n += (double)gguf_tensor_nelements(&g.t[i]);
    }
    gguf_release(&g);
    return n > 0 ? 8.0 * bytes / n : 0;
}

static void
method_report(const struct quantize_run_opts *o, const struct qmethod_report *rep,
              const struct qeval_result *ev, double file_bpw)
{
    const struct qmethod_opts *m = &o->m;
    const int64_t gs = m->g.group_size;
    /* the grid's own cost: the integers, an fp16 scale and a zero per group */
    double grid_bpw = m->g.bits + (gs > 0 ? (16.0 + m->g.bits) / (double)gs : 0.0);
    char label[64];

    snprintf(label, sizeof label, "%s %d-bit g%lld%s%s", qmethod_name(m->method), m->g.bits,
             (long long)gs, m->g.sym ? " sym" : " asym", m->g.act_order ? " act-order" : "");
    if (o->json) {
        for (int64_t i = 0; i < rep->n; i++) {
            const struct qmethod_linear *l = &rep->lin[i];
            json_t *j = json_object();
            json_object_set_new(j, "schema", json_string("quantize/1"));
            json_object_set_new(j, "type", json_string("linear"));
            json_object_set_new(j, "name", json_string(l->name));
            json_object_set_new(j, "rows", json_integer(l->rows));
            json_object_set_new(j, "cols", json_integer(l->cols));
            if (m->method == QM_GPTQ) {
                json_object_set_new(j, "damp", json_real(l->st.damp));
                json_object_set_new(j, "dead_columns", json_integer(l->st.dead));
                json_object_set_new(j, "loss", json_real(l->st.loss));
            }
            json_object_set_new(j, "seconds", json_real(l->seconds));
            json_line(o->report, j);
        }
        json_t *j = json_object();
        json_object_set_new(j, "schema", json_string("quantize/1"));
        json_object_set_new(j, "type", json_string("summary"));
        json_object_set_new(j, "method", json_string(qmethod_name(m->method)));
        json_object_set_new(j, "format", json_string(format_names[o->format]));
        json_object_set_new(j, "bits", json_integer(m->g.bits));
        json_object_set_new(j, "group_size", json_integer(gs));
        json_object_set_new(j, "sym", json_boolean(m->g.sym));
        json_object_set_new(j, "act_order", json_boolean(m->g.act_order));
        json_object_set_new(j, "static_groups", json_boolean(m->g.static_groups));
        json_object_set_new(j, "mse", json_boolean(m->g.mse));
        if (m->method == QM_GPTQ || m->method == QM_AWQ) {
            json_object_set_new(j, "calib_tokens", json_integer(rep->calib_tokens));
            json_object_set_new(j, "calib_text_tokens", json_integer(rep->calib_text_tokens));
        }
        if (m->method == QM_GPTQ) {
            json_object_set_new(j, "damp", json_real(m->g.damp));
            json_object_set_new(j, "damp_raised", json_integer(rep->n_damp_raised));
            json_object_set_new(j, "resumed_blocks", json_integer(rep->resumed_blocks));
        }
        json_object_set_new(j, "linears", json_integer(rep->n));
        json_object_set_new(j, "params", json_integer(rep->n_params));
        json_object_set_new(j, "grid_bpw", json_real(grid_bpw));
        if (o->format == QF_GGUF)
            json_object_set_new(j, "bpw", json_real(file_bpw));
        json_object_set_new(j, "seconds", json_real(rep->seconds));
        json_object_set_new(j, "cpu_seconds", json_real(rep->cpu_seconds));
        if (o->eval)
            eval_json(j, o, ev);
        json_line(o->report, j);
        return;
    }
    fprintf(o->log, "%s: %s: %lld linears, %.4f bits per weight in the grid", o->log_prefix, label,
            (long long)rep->n, grid_bpw);
    if (o->format == QF_GGUF)
        fprintf(o->log, ", %.4f in the file", file_bpw);
    fprintf(o->log, ", %.2f s\n", rep->seconds);
    if (!o->eval)
        return;
    FILE *fp = o->report;
    fprintf(fp, "%-22s %14s %14s\n", "", "base", qmethod_name(m->method));
    fprintf(fp, "%-22s %14s %14.4f\n", "bits per weight", "", file_bpw);
    eval_table(fp, ev);
}

static int
run_method(const struct quantize_run_opts *o, struct diag *d)
{
    struct qmethod_opts m = o->m;
    struct qmodel qm;
    struct qmethod_report rep;
    struct qeval_result ev = { 0 };
    struct xout out = { 0 };
    char *ckpt = NULL;
    double bpw = 0;
    bool written = false;
    int rc;

    xio_note_input(o->q.input);
    xio_note_input(o->calib);
    xio_note_input(o->eval);
    /* refuse an output that cannot be written before the long part */
    rc = o->format == QF_GGUF ? xout_check(o->q.output, o->q.force, d)
                              : xout_check_dir(o->q.output, o->q.force, d);
    if (rc < 0) {
        diag_prefix(d, "'%s'", o->q.output);
        return rc;
    }
    m.input = o->q.input;
    m.calib = o->calib;
    m.calib_ctx = o->calib_ctx;
    m.calib_chunks = o->calib_chunks;
    m.n_threads = o->q.n_threads;
    m.kernel = o->kernel;
    m.format = o->format;
    m.cb = o->q.cb;
    if (o->resume) {
        size_t n = strlen(o->q.output) + 6;
        if (!(ckpt = malloc(n)))
            return diag_set(d, ST_NOMEM, "out of memory");
        snprintf(ckpt, n, "%s.ckpt", o->q.output);
        m.checkpoint_dir = ckpt;
    }
    if ((rc = qmethod_run(&m, &qm, &rep, d)) < 0) {
        free(ckpt);
        return rc;
    }
    if ((rc = qmodel_write(&qm, o->q.output, o->format, o->q.force, &o->q.cb, d)) < 0) {
        if (rc != -ST_IO)       /* (an I/O error names its file: qgrid.h) */
            diag_prefix(d, "'%s'", o->q.output);
        goto out;
    }
    written = true;
    if (o->format == QF_GGUF)
        bpw = gguf_bpw(o->q.output);
    if (o->eval) {
        struct qeval_opts eo = { o->eval_ctx, o->eval_chunks, o->q.n_threads, o->kernel, o->q.cb };
        if ((rc = qeval_run(o->q.input, o->q.output, o->eval, &eo, &ev, d)) < 0)
            goto out;
    }
    method_report(o, &rep, &ev, bpw);
    xout_open(&out, "-", false, d);
    rc = xout_commit(&out, d);
out:
    if (rc < 0 && written && strcmp(o->q.output, "-"))
        unlink(o->q.output);    /* the run failed after the output was committed */
    if (rc == 0 && ckpt)
        qmethod_checkpoint_remove(ckpt);
    free(ckpt);
    qmodel_release(&qm);
    qmethod_report_release(&rep);
    return rc;
}

/* --eval-only: score an existing quantized GGUF (OUTPUT) against INPUT */
static int
run_eval_only(const struct quantize_run_opts *o, struct diag *d)
{
    struct qeval_opts eo = { o->eval_ctx, o->eval_chunks, o->q.n_threads, o->kernel, o->q.cb };
    struct qeval_result ev = { 0 };
    struct xout out = { 0 };
    double bpw;
    int rc;

    xio_note_input(o->q.input);
    xio_note_input(o->q.output);
    xio_note_input(o->eval);
    if ((rc = qeval_run(o->q.input, o->q.output, o->eval, &eo, &ev, d)) < 0)
        return rc;
    bpw = gguf_bpw(o->q.output);
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "schema", json_string("quantize/1"));
        json_object_set_new(j, "type", json_string("summary"));
        json_object_set_new(j, "eval_only", json_true());
        json_object_set_new(j, "bpw", json_real(bpw));
        eval_json(j, o, &ev);
        json_line(o->report, j);
    } else {
        fprintf(o->report, "%-22s %14s %14s\n", "", "base", "quantized");
        fprintf(o->report, "%-22s %14.4f %14.4f\n", "bits per weight", gguf_bpw(o->q.input), bpw);
        eval_table(o->report, &ev);
    }
    xout_open(&out, "-", false, d);
    return xout_commit(&out, d);
}

int
run_quantize(const struct quantize_run_opts *o, struct diag *d)
{
    if (o->eval_only)
        return run_eval_only(o, d);
    if (o->use_method)
        return run_method(o, d);
    return run_quantize_type(o, d);
}

static int
run_quantize_type(const struct quantize_run_opts *o, struct diag *d)
{
    struct quantize_opts q = o->q;
    struct gguf in;
    bool in_open = false;
    struct imatrix im;
    struct quantize_report rep = { 0 };
    struct qeval_result ev = { 0 };
    struct xout outs[3] = { { 0 } };   /* stdout, --imatrix-out, OUTPUT */
    char *shas[2] = { NULL, NULL };     /* of --imatrix, of --calib */
    double bpw;
    int rc;

    imatrix_init(&im);
    /* Every output is opened now and committed together at the end (the
     * report on stdout first): a run that fails anywhere leaves none. */
    xio_note_input(q.input);
    xio_note_input(o->calib);
    xio_note_input(o->imatrix_in);
    xio_note_input(o->eval);
    if ((rc = xout_open(&outs[2], q.output, q.force, d)) < 0) {
        diag_prefix(d, "'%s'", q.output);
        goto out;
    }
    q.out = &outs[2];
    /* INPUT's header before the imatrix, so that the imatrix is held to the
     * model's bounds when INPUT is a pipe too: on a stream the header (and
     * its tensor records) comes before any tensor data, which
     * quantize_model reads after */
    if (o->imatrix_in) {
        if ((rc = gguf_open(&in, q.input, d)) < 0) {
            diag_prefix(d, "'%s'", q.input);
            goto out;
        }
        in_open = true;
        q.in = &in;
    }
    if ((rc = get_imatrix(o, &q, &im, &outs[1], shas, d)) < 0)
        goto out;
    if ((rc = quantize_model(&q, &rep, d)) < 0)
        goto out;
    for (size_t i = 0; i < rep.n; i++) {
        const struct quantize_tensor_info *t = &rep.t[i];
        if (o->json)
            json_tensor(o->report, t);
        runcb_info(&q.cb, "[%4zu/%4zu] %-32s %-6s -> %-6s %s%s", i + 1, rep.n, t->name,
                   qtype_get(t->src_type)->name, qtype_get(t->type)->name,
                   t->fallback ? " (fallback)" : "", t->used_imatrix ? " (imatrix)" : "");
    }
    if (rep.n_fallback)
        runcb_warn(&q.cb, "%d of %zu tensors needed a fallback type (rows not a multiple of the "
                   "block size)", rep.n_fallback, rep.n);
    if (q.imatrix && rep.imatrix_missing)
        runcb_info(&q.cb, "%d quantized tensors had no imatrix entry", rep.imatrix_missing);
    if (o->eval) {
        struct qeval_opts eo = { o->eval_ctx, o->eval_chunks, q.n_threads, o->kernel, q.cb };
        /* the quantized model is read where it lies, not yet committed */
        if (outs[2].fp && fflush(outs[2].fp) != 0) {
            rc = diag_set(d, ST_IO, "'%s': write failed: %s", q.output, strerror(errno));
            goto out;
        }
        if ((rc = qeval_run(q.input, outs[2].tmp ? outs[2].tmp : q.output, o->eval, &eo, &ev, d)) < 0)
            goto out;
    }
    bpw = rep.n_params ? 8.0 * (double)rep.out_bytes / (double)rep.n_params : 0.0;
    if (o->json)
        json_summary(o, &rep, q.imatrix ? im.n : 0, &ev, bpw);
    else
        text_summary(o, &rep, &ev, bpw);
    xout_open(&outs[0], "-", false, d);
    rc = xout_commit_all(outs, 3, d);
out:
    if (rc < 0) {
        for (int i = 0; i < 3; i++)
            if (outs[i].fp || outs[i].tmp)
                xout_abort(&outs[i]);
    }
    if (in_open)
        gguf_release(&in);
    quantize_report_release(&rep);
    imatrix_release(&im);
    free(shas[0]);
    free(shas[1]);
    return rc;
}
