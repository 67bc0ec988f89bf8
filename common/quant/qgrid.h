/*
 * qgrid.h - linears quantized on an integer grid (GPTQ, AWQ, RTN) and the
 * model that holds them: the one interface between the calibrated methods
 * (gptq.c, awq.c, rtn in quantize's method runs) and the writers and readers
 * of their outputs (GGUF, Hugging Face "gptq" v1, "gptq_v2" and AWQ GEMM
 * directories; convert reads those directories back into a qmodel).
 *
 * Conventions (../shared/reference/algorithms.md §1.5, §2, §4):
 *   - a qgrid is one linear W [rows = out_features][cols = in_features]
 *     (GGUF ne1 = rows, ne0 = cols);
 *   - column c of row r belongs to group g_idx[c] (g_idx[c] = c / group_size
 *     without act-order; a permuted map with act-order and no static
 *     groups); n_groups = ceil(cols / group_size), the last group partial
 *     when group_size does not divide cols; group_size -1 = one group per row;
 *   - q[r * cols + c] in 0 .. 2^bits - 1;
 *   - scale[g * rows + r] and zero[g * rows + r]: the HF layout [groups][out];
 *     zero is the real zero point (the "gptq_v2" and AWQ convention: v1 files
 *     store zero - 1); scales are fp16-representable (the methods round them
 *     to fp16 before they compute q, so the grid written is the grid used);
 *   - the dequantized weight is the loaders' rounding:
 *       W[r][c] = fp16((q - zero[g][r]) * scale[g][r]),  g = g_idx[c]
 *     (qgrid_dequant; transformers' CPU kernels compute exactly this).
 *   - sym: zero = 2^(bits-1) for every group.
 */
#ifndef LLMKIT_QGRID_H
#define LLMKIT_QGRID_H

#include <stdbool.h>
#include <stdint.h>

#include "runcb.h"
#include "status.h"

struct qgrid {
    int bits;               /* 2, 3, 4 or 8 */
    int64_t group_size;     /* -1: one group per row */
    bool sym;
    int64_t rows, cols;
    int64_t n_groups;
    uint8_t *q;             /* [rows][cols] */
    float *scale;           /* [n_groups][rows], fp16-representable */
    int32_t *zero;          /* [n_groups][rows], real zero */
    int32_t *g_idx;         /* [cols] */
};

/* qgrid_alloc() : allocates q, scale, zero and g_idx for the shape and sets
 * the scalar fields and g_idx[c] = c / group_size.  -ST_RANGE (bad bits,
 * group size or shape), -ST_NOMEM. */
int qgrid_alloc(struct qgrid *g, int bits, int64_t group_size, bool sym, int64_t rows,
                int64_t cols, struct diag *d);
void qgrid_free(struct qgrid *g);

/* qgrid_dequant() : row r of the dequantized weight (loaders' rounding,
 * above) into out[cols]. */
void qgrid_dequant_row(const struct qgrid *g, int64_t r, float *out);

/* What produced a quantized model: written into GGUF metadata and into
 * config.json's quantization_config. */
struct qprov {
    const char *method;     /* "gptq" | "awq" | "rtn" */
    int bits;
    int64_t group_size;
    bool sym, act_order, static_groups, true_sequential, mse;
    double damp;            /* GPTQ's requested damping (fraction of mean diag) */
    char calib_sha256[65];  /* hex of the calibration text's bytes; "" if none */
    int64_t calib_tokens;
};

/* One tensor of the output: a quantized linear (g), or float data replacing
 * the source tensor's (f32: e.g. an AWQ-rescaled norm weight, shape as the
 * source), or neither (the source tensor is copied as it is). */
struct qmodel_tensor {
    char *name;             /* GGUF tensor name, e.g. "blk.0.attn_q.weight" */
    struct qgrid *g;
    float *f32;
};

/* A quantized model: the source GGUF (metadata, vocabulary, every tensor not
 * listed or listed with neither g nor f32) plus the tensors above. */
struct qmodel {
    const char *src_path;   /* the source GGUF model */
    int64_t n;
    struct qmodel_tensor *t;
    struct qprov prov;
};

enum qformat {
    QF_GGUF = 0,            /* the GGUF type holding each grid (exactly where one exists) */
    QF_GPTQ,                /* HF dir, checkpoint_format "gptq" (v1) */
    QF_GPTQ_V2,             /* HF dir, checkpoint_format "gptq_v2" */
    QF_AWQ,                 /* HF dir, AWQ GEMM */
};

/* qformat_parse() : "gguf" | "gptq" | "gptq_v2" | "awq"; -1 if unknown. */
int qformat_parse(const char *s);

/* qmodel_write() : writes qm to out (a GGUF path or an HF directory) in
 * format f, atomically (nothing left behind on failure); force replaces an
 * existing output (never a device or a symlink).  cb->info receives one line
 * per tensor whose GGUF type does not hold its grid exactly, with the extra
 * error measured.  Returns 0 or -ST_* with the reason in d: an -ST_IO
 * message names the file it is about (out, and the file in an HF
 * directory, or qm->src_path); other messages do not name out, which the
 * caller adds. */
int qmodel_write(const struct qmodel *qm, const char *out, enum qformat f, bool force,
                 const struct run_callbacks *cb, struct diag *d);

/* qmodel_read_hf() : reads a GPTQ (v1 or v2) or AWQ GEMM directory (ours or
 * GPTQModel's/AutoAWQ's) into qm: every quantized linear as a qgrid under its
 * GGUF name; qm->src_path is NULL and the caller (convert) takes the float
 * tensors, metadata and vocabulary from the directory.  Shapes are checked
 * against each other (qweight/qzeros/scales/g_idx): -ST_FORMAT naming the
 * file and tensor.  Returns 0, 1 (qm empty) when the directory has no
 * quantization config (config.json quantization_config, quantize_config.json
 * or quant_config.json), or -ST_*. */
int qmodel_read_hf(const char *dir, struct qmodel *qm, struct diag *d);

void qmodel_release(struct qmodel *qm);

/* qmodel_hf_fits() : whether an N x K linear quantized at bits / group_size
 * can be written in format f (AWQ GEMM: 4 bits, N % 8 == 0, groups dividing
 * K; GPTQ: rows and columns packing into int32 words; GGUF: always), so a
 * method refuses a model before calibrating rather than at write time.
 * Returns 0 or -ST_RANGE naming the tensor. */
int qmodel_hf_fits(enum qformat f, int bits, int64_t group_size, const char *name, int64_t N,
                   int64_t K, struct diag *d);

/* The writers behind qmodel_write(), one per kind of output, each with its
 * contract for its format.  qmodel_gguf.c: every grid in the GGUF type that
 * holds it exactly where one exists, else the nearest type, the extra error
 * reported on cb->info.  qmodel_hf.c: a GPTQ v1 / v2 or AWQ GEMM directory. */
int qmodel_write_gguf(const struct qmodel *qm, const char *out, bool force,
                      const struct run_callbacks *cb, struct diag *d);
int qmodel_write_hf(const struct qmodel *qm, const char *dir, enum qformat f, bool force,
                    const struct run_callbacks *cb, struct diag *d);

#endif
