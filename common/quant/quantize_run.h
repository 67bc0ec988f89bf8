/*
 * quantize_run.h - the whole `quantize` run behind the tool's options: an
 * importance matrix read from a file or collected from calibration text
 * (imatrix.h), the quantized model (quantize.h), its quality measured
 * against the base model (qeval.h), and the report.  Every output - the
 * model, --imatrix-out and the report on standard output - is opened first
 * and committed together at the end, so a run that fails anywhere leaves
 * none of them (xout_commit_all).
 */
#ifndef LLMKIT_QUANTIZE_RUN_H
#define LLMKIT_QUANTIZE_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qgrid.h"
#include "qmethod.h"
#include "quantize.h"
#include "status.h"

struct quantize_run_opts {
    struct quantize_opts q;     /* input, output, mix, n_threads, force, cb; the
                                 * imatrix fields and out are set by the run */
    const struct quant_ftype *ft;       /* the file type (q.mix.ftype is its number) */
    const char *imatrix_in;     /* --imatrix FILE, or NULL */
    const char *calib;          /* --calib FILE ("-" = stdin), or NULL */
    int64_t calib_ctx;          /* tokens per calibration chunk */
    int64_t calib_chunks;       /* < 0: all */
    const char *imatrix_out;    /* with calib: write the collected matrix here */
    bool imatrix_dat;           /* ... in the legacy .dat format (else GGUF) */
    const char *const *inc;     /* keep only imatrix entries containing one of these */
    size_t n_inc;
    const char *const *exc;     /* drop imatrix entries containing one of these */
    size_t n_exc;
    const char *eval;           /* --eval FILE: compare base and quantized, or NULL */
    int64_t eval_ctx;
    int64_t eval_chunks;        /* < 0: all */
    const char *kernel;         /* for calib and eval; NULL = auto */
    bool eval_only;             /* --eval-only: q.output is an existing GGUF to evaluate
                                 * against q.input; nothing is quantized or written */
    bool json;                  /* the report as JSON Lines (quantize/1) */
    /* --method: a grid method (GPTQ, RTN) instead of a llama.cpp type; ft,
     * the mix, the imatrix and the include/exclude lists are then unused */
    bool use_method;
    struct qmethod_opts m;      /* method and grid options (input, calib, threads, kernel
                                 * and callbacks are set by the run from the fields here) */
    enum qformat format;        /* of the output */
    bool resume;                /* checkpoints in OUTPUT.ckpt, taken up by a later run */
    FILE *report;               /* the report: JSON Lines, or the --eval table */
    FILE *log;                  /* text mode: the one-line summary, after ... */
    const char *log_prefix;     /* ... this name and ": " (the program's name) */
};

/* run_quantize() : the run described at the top of this file.  The caller
 * checked the combination of options (quantize(1)); with eval, q.output
 * must be a file that can be read back, and q.input a file too.  Progress,
 * warnings and notes (the tensor list, calibration size) go to q.cb.
 * Returns 0; or -ST_* with the message in d, naming the file concerned:
 * -ST_IO, -ST_FORMAT (bad model or imatrix data, an imatrix without its
 * metadata), -ST_RANGE, -ST_NOMEM, or an evaluation's error. */
int run_quantize(const struct quantize_run_opts *o, struct diag *d);

/* With eval_only: qeval_run(q.input, q.output, eval) and the report (the
 * summary carries "eval_only": true and the bits per weight of q.output).
 *
 * With use_method: the method's qmodel (qmethod.h) written by qmodel_write
 * in o->format (atomically), then evaluated (--eval, GGUF only) and
 * reported (per linear: damping, dead columns, loss; a summary with the bits
 * per weight of the file and of the grid).  A failed evaluation removes the
 * output.  With resume, checkpoints of finished blocks go to OUTPUT.ckpt and
 * are removed once the output is committed. */

#endif
