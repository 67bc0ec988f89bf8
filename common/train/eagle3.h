/*
 * eagle3.h - the EAGLE-3 draft head: forward, training-time-test loss and
 * backward (algorithms.md §6.8, §6.9).  The head is a struct eagle_head
 * (eagle.h) with c.arch EAGLE_ARCH_3 and the tensors of enum eagle3_tensor.
 *
 * Features F [n][3d]: the target's hidden states entering layers
 * c.feat_layer[0..2] (2, L/2 and L-3, eagle_target.h), concatenated.  One
 * step s = 0 .. steps-1 of the unrolled "training-time test" on n rows:
 *
 *   hin  = s = 0 ? F FC^T : out of step s-1   [n][d]   (the head's own output)
 *   x    = concat(rmsnorm(embd(tok)) * w_in, rmsnorm(hin) * w_hid)   [n][2d]
 *   q,k,v = x Wq^T, x Wk^T, x Wv^T; RoPE at positions i + s
 *   h1   = hin + attn_ttt(q; k, v of steps 0..s) Wo^T
 *   out  = h1 + down(silu(gate(xn)) * up(xn)), xn = rmsnorm(h1) * w_ffn
 *   z    = (rmsnorm(out) * w_out) LM^T         [n][n_draft]  (the head's own LM head)
 *
 * Row i of step s reads token next[i + s] (token i + s + 1 of the
 * sequence) and is scored against the target's distribution at position i
 * + s + 1 (the softmax of the target's LM head rows of the draft
 * vocabulary on final feature tgt[i + s]), by soft cross-entropy; rows
 * with i + s >= n fall off the sequence and carry no loss.  The loss is
 * sum_s 0.8^s * (sum over rows of CE) / n; no feature regression.  The
 * target's embedding is frozen (struct eagle_frozen, whose lm rows are
 * the draft vocabulary's rows of the target's LM head: n_lm = n_draft).
 */
#ifndef LLMKIT_EAGLE3_H
#define LLMKIT_EAGLE3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eagle.h"

#define EAGLE3_MAX_STEPS 16
#define EAGLE3_STEP_W 0.8       /* the loss weight of step s is 0.8^s */

struct eagle3_ws;

/* work buffers for up to max_n rows and steps unrolled steps (1 ..
 * EAGLE3_MAX_STEPS); 0, -ST_RANGE, -ST_NOMEM */
int eagle3_ws_new(struct eagle3_ws **out, const struct eagle_config *c, int64_t max_n,
                  int steps);
void eagle3_ws_free(struct eagle3_ws *ws);
size_t eagle3_ws_bytes(const struct eagle_config *c, int64_t max_n, int steps);
/* eagle3_ws_ce_rows() : form the LM head's logits at most rows rows at a
 * time (clamped to 1 .. the rows the buffers hold: ws_new's choice, from
 * the draft vocabulary); returns the rows now used.  For tests: chunks of
 * any size give the same loss and gradient. */
int64_t eagle3_ws_ce_rows(struct eagle3_ws *ws, int64_t rows);
/* eagle3_ws_target_once() : whether the target's distribution over the
 * draft vocabulary is formed once for all rows of a loss (where ws_new
 * found room: n_draft x max_n <= 2^22 floats; the default there) or for
 * each step's chunk of rows again; returns the choice now in force.  For
 * tests: both give the same loss and gradient. */
bool eagle3_ws_target_once(struct eagle3_ws *ws, bool on);

/* eagle3_forward() : the unrolled steps on next[n] (token i + 1 at row i)
 * and features feat [n][3d] (n <= max_n), keeping the activations. */
void eagle3_forward(const struct backend_backward_ops *bw, const struct eagle_head *h,
                    const struct eagle_frozen *fz, struct eagle3_ws *ws, const int32_t *next,
                    const float *feat, int64_t n);

/* the last forward's step-0 output [n][d] (before the final norm) */
const float *eagle3_ws_out(const struct eagle3_ws *ws);
/* the last forward's step-s output after the final norm [n][d] (the LM
 * head's input; rows i >= n - s read past the sequence) */
const float *eagle3_ws_normed(const struct eagle3_ws *ws, int s);

/* eagle3_loss_backward() : the loss of the last forward against the target's
 * final features tgt [n][d] (row i: position i + 1), and when grad !=
 * NULL its gradient ADDED to grad (scaled by scale).  keep [n] (NULL: all)
 * marks the target rows that carry loss: EAGLE-3 drops a position whose
 * target argmax over the whole vocabulary is not in the draft vocabulary
 * (its loss and gradient are 0 at every step that scores it; the mean is
 * still over n).  mask [n] (NULL: all) marks the target rows counted:
 * EAGLE's loss mask, the positions of the responses; a row outside carries
 * no loss either, and is not counted in loss->n and loss->correct (a row
 * kept out by keep is: drafting misses it).  loss->cls = the weighted sum,
 * loss->reg = 0, loss->total = cls; loss->n = the rows counted,
 * loss->correct those of step 0 kept whose argmax agrees with the target's
 * (a row kept out cannot: its target token is not a draft token). */
void eagle3_loss_backward(const struct backend_backward_ops *bw, const struct eagle_head *h,
                          const struct eagle_frozen *fz, struct eagle3_ws *ws, const float *tgt,
                          const uint8_t *keep, const uint8_t *mask, float scale, float *grad,
                          struct eagle_loss *loss);

#endif
