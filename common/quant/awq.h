/*
 * awq.h - AWQ, activation-aware weight quantization (arXiv:2306.00978), as
 * AutoAWQ runs it (../shared/reference/algorithms.md §3): per decoder layer,
 *
 *   1. the layer runs on its calibration input (the float model's hidden
 *      states: AWQ propagates un-quantized activations) and the inputs of
 *      its linears are kept;
 *   2. for each scale group - a previous op that can absorb 1/s and the
 *      linears that read its output - the per-channel scale s is searched
 *      over 20 points, s = x_mean^a / (w_mean^(1-a) + 1e-4) (duo scaling)
 *      or x_mean^a, a = 0, 0.05 .. 0.95, normalised by sqrt(max s * min s);
 *      the loss is the mean squared error of the inspected module's output
 *      (the whole attention for q/k/v, the whole feed-forward for gate/up,
 *      the linear alone for o and down) with every linear of the group
 *      replaced by Q(W diag(s)) / s;
 *   3. every group's best s is applied: the previous op's weight (a norm's
 *      channels, a linear's output rows and bias) divided by s, the
 *      linears' input columns multiplied by it (the function is unchanged);
 *   4. clipping search for every linear but q and k: per output row and
 *      group the max |w| shrunk by 1, 0.95 .. 0.55, the one whose
 *      fake-quantized group-local partial dot products with (at most about)
 *      512 calibration tokens err least is kept and the weight clamped;
 *   5. group-wise zero-point quantization: scale = fp16(max(max - min,
 *      1e-5) / (2^bits - 1)), zero = clamp(-round(min / scale), 0,
 *      2^bits - 1), q = clamp(round(w / scale) + zero, 0, 2^bits - 1).
 *
 * Scale groups per architecture (the table's tensors, arch.h):
 *   attn_norm -> attn_q, attn_k, attn_v     (inspect the attention)
 *   attn_v -> attn_output                   only when the two weights have
 *                                           the same shape (no GQA/MQA), as
 *                                           AutoAWQ decides
 *   ffn_norm -> ffn_gate, ffn_up            (inspect the feed-forward)
 *   ffn_up -> ffn_down
 * llama: as AutoAWQ's llama.py.  gemma3: the same four (AutoAWQ's
 * gemma2.py): its GGUF norms hold 1 + w, a plain multiplier, so a norm
 * absorbs 1/s by division; the post-norms (post_attention_norm after
 * attn_output, post_ffw_norm after ffn_down) normalise over the whole row,
 * so nothing before them can absorb a per-channel scale, and no group ends
 * at them.  A group whose previous op cannot absorb s is skipped and said
 * on cb->info.
 *
 * Group size.  AutoAWQ refuses a width the group size does not divide; we
 * quantize the last, partial group of each row like the others (qgrid.h's
 * convention, as GPTQModel writes GPTQ), so that SmolLM2's 576-wide rows
 * take g128.  The AWQ GEMM writer refuses such grids (its format cannot
 * hold them).
 */
#ifndef LLMKIT_AWQ_H
#define LLMKIT_AWQ_H

#include <stdbool.h>
#include <stdint.h>

#include "qgrid.h"
#include "runcb.h"
#include "status.h"

struct calib;

#define AWQ_N_GRID 20           /* scale search points */
#define AWQ_CLIP_GRID 20        /* clipping: shrink steps of 1/20 ... */
#define AWQ_CLIP_STEPS 10       /* ... int(0.5 * 20) of them */
#define AWQ_CLIP_TOKENS 512     /* tokens sampled for clipping */

/* The layer's linears, in this order everywhere (reports, tensors). */
enum awq_lin {
    AWQ_Q, AWQ_K, AWQ_V, AWQ_O, AWQ_GATE, AWQ_UP, AWQ_DOWN, AWQ_N_LIN
};

/* The scale groups (header comment), in the order they are searched. */
enum awq_group {
    AWQ_G_QKV, AWQ_G_VO, AWQ_G_GATEUP, AWQ_G_DOWN, AWQ_N_GROUP
};

struct awq_opts {
    int bits;                   /* 4 or 3 */
    int64_t group_size;         /* > 0 (32, 64, 128), or -1: one group per row */
    bool duo_scaling;           /* AutoAWQ's default: s from x_mean and w_mean */
    bool clip;                  /* clipping search (AutoAWQ apply_clip) */
    bool scale_only;            /* no grids: every rescaled (and clipped) tensor as f32
                                 * (AutoAWQ's export_compatible) */
    int n_threads;              /* workers of the searches' row loops; <= 0: every CPU
                                 * (the result is the same for any count) */
};

#define AWQ_OPTS_INIT { 4, 128, true, true, false, 0 }

/* What was chosen in one layer (for reports and tests). */
struct awq_layer_report {
    int best[AWQ_N_GROUP];      /* the chosen grid point 0..19; -1: group skipped */
    double loss[AWQ_N_GROUP];   /* its loss (mean squared error) */
    double loss0[AWQ_N_GROUP];  /* the loss of the grid point 0 (for comparison) */
    float *scale[AWQ_N_GROUP];  /* [cols of the group's linears]; NULL when skipped */
    int64_t n_scale[AWQ_N_GROUP];
    float *clip[AWQ_N_LIN];     /* [rows][n_groups] the kept max |w|; NULL: not clipped */
};

struct awq_report {
    int64_t n_layer;
    struct awq_layer_report *layers;    /* [n_layer] */
};

/* awq_report_release() : frees what r holds (r itself is caller-owned). */
void awq_report_release(struct awq_report *r);

/* awq_quantize() : runs AWQ on every layer of c's model over c's
 * calibration tokens (calib.h; c must be at layer 0 and is left past the
 * last layer, its model's weights as the file has them) and fills out
 * (qmodel_release frees it): per layer the seven linears as qgrids (or,
 * with scale_only, as f32) and the rescaled norm weights (and attn_v's bias)
 * as f32, and out->prov (method, bits, group size, calibration hash and
 * tokens); out->src_path is the caller's.  The model's weights may be of any
 * type the table dequantizes.  report may be NULL.  Progress ("quantizing": layers)
 * and notes (groups skipped) go to cb (may be NULL).
 * Returns 0; -ST_RANGE (bits, group size, a calibration not at layer 0, an
 * architecture without scale groups; message in d); -ST_FORMAT (a weight
 * type without dequantization, non-finite activations); -ST_NOMEM; the
 * calibration runs' errors. */
int awq_quantize(struct calib *c, const struct awq_opts *o, struct qmodel *out,
                 const struct run_callbacks *cb, struct awq_report *report, struct diag *d);

/* awq_fake_quant() : the quantizer of step 5 on one row of n weights in
 * groups of group_size (-1: one group; the last group may be partial):
 * w is replaced by its dequantized value (q - zero) * scale.  With q, scale
 * and zero not NULL, also q[n], scale[groups] and zero[groups]. */
void awq_fake_quant(float *w, int64_t n, int bits, int64_t group_size, uint8_t *q, float *scale,
                    int32_t *zero);

#endif
