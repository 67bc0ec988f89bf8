/*
 * qmethod.h - a whole model through a grid method (GPTQ, RTN) into a struct
 * qmodel (qgrid.h): the seven linears of every transformer block
 * (attn_q/k/v, attn_output, ffn_gate/up/down) become grids; embeddings,
 * norms and the LM head stay as they are (algorithms.md §1.6 step 4).
 *
 * GPTQ runs block by block through calib.h's pipeline: the block's inputs
 * come from the already-quantized earlier blocks, and within a block the
 * linears are quantized true-sequentially in the reference's sub-groups
 * (q/k/v on one Hessian, then o, then gate/up on one Hessian, then down),
 * each sub-group's Hessian from the block run with the earlier sub-groups
 * already quantized.  Memory: the calibration states, one block's Hessians
 * and the grids.  RTN needs no calibration.  AWQ (awq.h) runs block by
 * block on the float model's states (AWQ propagates un-quantized
 * activations) and also rewrites the norms that absorb its scales, as f32;
 * it keeps no checkpoints.
 *
 * Checkpoints (o->checkpoint_dir): after each finished block its grids are
 * written atomically to <dir>/blk.<L>.grid, with a key of everything that
 * determines them (model and text hashes, options), sealed with a SHA-256
 * of the file's bytes (a mismatch, or no seal, is -ST_FORMAT).  A run given the same
 * directory takes the blocks found there (checked against the key) and
 * recomputes the calibration states by running those blocks on their
 * grids, which is the arithmetic of an uninterrupted run, so the result is
 * the same bit for bit.
 */
#ifndef LLMKIT_QMETHOD_H
#define LLMKIT_QMETHOD_H

#include <stdbool.h>
#include <stdint.h>

#include "gptq.h"
#include "qgrid.h"
#include "runcb.h"
#include "status.h"

enum qmethod {
    QM_GPTQ = 0,
    QM_RTN,
    QM_AWQ,                     /* awq.h, on the grid's bits and group size */
};

/* qmethod_parse() : "gptq" | "rtn" | "awq"; -1 if unknown. */
int qmethod_parse(const char *s);
const char *qmethod_name(enum qmethod m);

struct qmethod_opts {
    enum qmethod method;
    struct gptq_opts g;         /* bits, group size, sym, act_order, static_groups, mse, damp */
    const char *input;          /* GGUF model */
    const char *calib;          /* calibration text (GPTQ) */
    int64_t calib_ctx;          /* tokens per chunk */
    int64_t calib_chunks;       /* < 0: every whole chunk */
    const char *checkpoint_dir; /* NULL: no checkpoints */
    int n_threads;
    const char *kernel;
    enum qformat format;        /* of the output: every linear's shape checked before any work */
    struct run_callbacks cb;    /* progress "quantizing" (blocks), notes */
};

struct qmethod_linear {
    char name[64];
    int64_t rows, cols;
    struct gptq_stats st;       /* GPTQ: damping used, dead columns, loss */
    double seconds;             /* of its solve */
};

struct qmethod_report {
    struct qmethod_linear *lin; /* in model order */
    int64_t n;
    int64_t n_params;           /* weights of the quantized linears */
    int64_t calib_tokens;       /* tokens used (chunks * ctx) */
    int64_t calib_text_tokens;  /* tokens of the whole text */
    int64_t resumed_blocks;     /* taken from checkpoints */
    int n_damp_raised;          /* linears whose damping had to be raised */
    double seconds;
    double cpu_seconds;         /* user + system time of the process meanwhile (all
                                 * threads: a figure a shared machine disturbs less) */
};

/* qmethod_run() : quantizes o->input into qm (qm->src_path = o->input,
 * qm->prov filled; the caller releases qm with qmodel_release and rep with
 * qmethod_report_release).  Returns 0; -ST_RANGE (bad options, a text too
 * short, no quantizable linears, a checkpoint of other options); -ST_IO;
 * -ST_FORMAT (bad model, corrupt checkpoint, non-finite activations);
 * -ST_NOMEM. */
int qmethod_run(const struct qmethod_opts *o, struct qmodel *qm, struct qmethod_report *rep,
                struct diag *d);

void qmethod_report_release(struct qmethod_report *rep);

/* qmethod_checkpoint_remove() : removes the checkpoint files (blk.*.grid)
 * of dir and dir itself when that leaves it empty (after the output is
 * committed). */
void qmethod_checkpoint_remove(const char *dir);

#endif
