/*
 * eagle.h - the EAGLE-1 draft head: forward, losses and backward for
 * training (algorithms.md §6.2, §6.3).
 *
 * The head predicts the target's next feature (the final hidden state after
 * the output norm, the LM head's input) from the current one and the next
 * token:
 *
 *   x   = concat(embd(t[i+1]), f[i])          [n][2d]   (embedding first)
 *   h0  = x FC^T + b                          [n][d]
 *   q,k,v = h0 Wq^T, h0 Wk^T, h0 Wv^T; RoPE(q, k) at positions 0..n-1
 *   h1  = h0 + attn_causal(q, k, v) Wo^T      (no input norm: layer 0 of EAGLE)
 *   out = h1 + down(silu(gate(xn)) * up(xn)), xn = rmsnorm(h1) * w_norm
 *
 * and is trained on L = SmoothL1(out[i], f[i+1]) + 0.1 soft-CE(LM(f[i+1]),
 * LM(out[i])), both averaged over the positions; the embedding and the LM
 * head are the target's, frozen (struct eagle_frozen: f32 copies).
 *
 * Every op runs through the backend's trainer table (backward.h); the
 * parameters are one f32 array (struct eagle_head.param) so that the
 * optimizer and the checkpoint see a flat vector, described tensor by tensor
 * by eagle_tensors[] (GGUF names).
 */
#ifndef LLMKIT_EAGLE_H
#define LLMKIT_EAGLE_H

#include <stddef.h>
#include <stdint.h>

#include "backward.h"
#include "ops.h"

enum { EAGLE_ARCH_1 = 1, EAGLE_ARCH_3 = 3 };

struct eagle_config {
    int64_t d;                  /* the target's hidden size */
    int64_t n_head, n_head_kv, head_dim;
    int64_t n_ff;
    int64_t n_vocab;
    float eps;                  /* RMSNorm epsilon */
    struct rope_params rope;    /* the target's (freq_factors not used: NULL) */
    int arch;                   /* EAGLE_ARCH_1 (this file; 0 means it too) or EAGLE_ARCH_3
                                 * (eagle3.h); eagle_head_init sets 0 to EAGLE_ARCH_1 */
    /* EAGLE-3 only */
    int64_t n_draft;            /* rows of the head's own LM head (the draft vocabulary) */
    int64_t feat_layer[3];      /* the target layers whose inputs are the features */
};

/* the head's tensors, in the order of the parameter array */
enum eagle_tensor {
    EAGLE_FC_W, EAGLE_FC_B, EAGLE_WQ, EAGLE_WK, EAGLE_WV, EAGLE_WO, EAGLE_NORM,
    EAGLE_GATE, EAGLE_UP, EAGLE_DOWN, EAGLE_N_TENSORS
};
/* EAGLE-3's (eagle3.h) */
enum eagle3_tensor {
    EAGLE3_FC, EAGLE3_IN_NORM, EAGLE3_HID_NORM, EAGLE3_WQ, EAGLE3_WK, EAGLE3_WV, EAGLE3_WO,
    EAGLE3_FFN_NORM, EAGLE3_GATE, EAGLE3_UP, EAGLE3_DOWN, EAGLE3_OUT_NORM, EAGLE3_LM,
    EAGLE3_N_TENSORS
};

#define EAGLE_MAX_TENSORS EAGLE3_N_TENSORS

struct eagle_head {
    struct eagle_config c;
    float *param;               /* owned: every tensor back to back */
    int64_t n_param;
    int n_tensors;              /* EAGLE_N_TENSORS, or EAGLE3_N_TENSORS */
    float *t[EAGLE_MAX_TENSORS];    /* into param */
    int64_t rows[EAGLE_MAX_TENSORS], cols[EAGLE_MAX_TENSORS];   /* row vectors: rows 1 */
};

/* the GGUF tensor name of tensor i ("fc.weight", "blk.0.attn_q.weight", ...) */
const char *eagle_tensor_name(int i);
/* the GGUF name of tensor i ("fc.weight", "blk.0.hidden_norm.weight", ...) */
const char *eagle3_tensor_name(int i);
/* rows and cols of each tensor for c (row vectors: rows 1) */
void eagle3_shapes(const struct eagle_config *c, int64_t rows[], int64_t cols[]);

/* the name of h's tensor i, for either architecture */
const char *eagle_head_tensor_name(const struct eagle_head *h, int i);

/* The target's frozen parts as f32 rows (borrowed): the embedding
 * [n_vocab][d] and n_lm rows of the LM head [n_lm][d].  Training may give
 * a subset of the LM head's rows (the training text's most frequent
 * tokens, as EAGLE-3's reduced draft vocabulary): the CE term is then over
 * those tokens, the target's distribution renormalised over them. */
struct eagle_frozen {
    const float *embd;
    const float *lm;
    int64_t n_lm;               /* 1 .. n_vocab */
};

/* eagle_head_init() : allocates h for c (either architecture) with PyTorch Linear's default
 * initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) from seed, norm weight
 * 1.  Returns 0, -ST_RANGE (bad shape), -ST_NOMEM. */
int eagle_head_init(struct eagle_head *h, const struct eagle_config *c, uint64_t seed);
void eagle_head_release(struct eagle_head *h);

/* Per-sequence work buffers for sequences of up to max_n positions (the
 * activations the backward reads, their gradients, CE row chunks). */
struct eagle_ws;

int eagle_ws_new(struct eagle_ws **out, const struct eagle_config *c, int64_t max_n);
void eagle_ws_free(struct eagle_ws *ws);
/* bytes eagle_ws_new allocates (for reporting the memory bound) */
size_t eagle_ws_bytes(const struct eagle_config *c, int64_t max_n);

/* eagle_forward() : out [n][d] (the predicted next features) of the head on
 * tokens next[n] (token i + 1 of the sequence) and features feat [n][d]
 * (feature i), n <= max_n; keeps the activations in ws for
 * eagle_loss_backward.  out may be NULL (ws keeps it). */
void eagle_forward(const struct backend_backward_ops *bw, const struct eagle_head *h,
                   const struct eagle_frozen *fz, struct eagle_ws *ws, const int32_t *next,
                   const float *feat, int64_t n, float *out);

/* the last eagle_forward's out [n][d] (valid until the next call) */
const float *eagle_ws_out(const struct eagle_ws *ws);

/* the index of the largest of x[0 .. n-1] (the first of equals) */
int64_t eagle_argmax(const float *x, int64_t n);

/* whether any of rows [0, n) counts in a loss: row r counts where a (or
 * NULL) and b (or NULL) are both nonzero.  The CE loops skip a chunk of
 * rows none of which counts: its terms and gradients would all be 0. */
int eagle_any_counted(const uint8_t *a, const uint8_t *b, int64_t n);

struct eagle_loss {
    double reg, cls;            /* mean SmoothL1 and mean soft CE over the positions counted */
    double total;               /* reg + w_cls * cls */
    int64_t n, correct;         /* positions counted; those where argmax LM(out) = argmax
                                 * LM(target) */
};

/* eagle_loss_backward() : the loss of the last eagle_forward against
 * target [n][d] (feature i + 1 at row i), weighted w_cls for the CE term,
 * and, when grad != NULL, its gradient with respect to the parameters
 * ADDED to grad (h->n_param floats; the whole loss is scaled by scale,
 * e.g. this sequence's share of the rows counted in the batch).  mask [n]
 * (NULL: all) marks the rows counted: EAGLE's loss mask, the positions of
 * the responses; the others carry no loss, no gradient and no count, and
 * the loss is the mean over the rows counted (0, with no gradient, when
 * there are none). */
void eagle_loss_backward(const struct backend_backward_ops *bw, const struct eagle_head *h,
                         const struct eagle_frozen *fz, struct eagle_ws *ws, const float *target,
                         const uint8_t *mask, float w_cls, float scale, float *grad,
                         struct eagle_loss *loss);

#endif
