/*
 * forward.h - the forward pass beside model_forward() (model.h): one layer
 * run on a given input, and the scratch the pass keeps in the model.
 *
 * The pass is three parts: forward.c (model_forward, layer_forward: checks,
 * KV slots, chunks, embeddings, the layers, output norm and LM head), one
 * layer recipe per architecture family (arch_llama.c: what a layer
 * computes) and the executor (exec.c: how each step runs on the kernels and
 * threads).
 */
#ifndef LLMKIT_FORWARD_H
#define LLMKIT_FORWARD_H

#include <stdint.h>

#include "kvcache.h"
#include "model.h"
#include "status.h"

/* layer_forward() : runs layer `layer` of m on x [b->n][n_embd], row i the
 * hidden state (residual stream) of batch token i entering the layer, and
 * leaves in x the stream after the layer: the arithmetic model_forward()
 * does for that layer, so that layer_forward() of every layer in turn on
 * the token embeddings, then output_norm and the LM head, gives
 * model_forward()'s logits bit for bit (same batch, same chunking by
 * m->max_batch, any thread count).
 *
 * The batch's KV slots must already be in their sequences: the caller
 * appends them (kv_seq_grow) before the first layer it runs, and the k-th
 * token of sequence s in the batch is slot kv_seq_len(s) - n_s + k, n_s
 * being the batch's tokens of s.  The layer's K/V of each token is written
 * into its slot (again, if a layer is run twice); attention sees the
 * sequence's slots before the batch's and the batch's own up to the token,
 * under the mask, as in model_forward().  The tokens' ids and logits flags
 * are not read; seq, pos, tiled, the mask and the llama.cpp ubatch mode
 * are.  hooks (may be NULL) see the layer's LINEAR_IN and LAYER_OUT events
 * as in model_forward() (tok0 = batch index); no EMBD event.
 *
 * Returns 0; -ST_RANGE (layer, n, a sequence or position out of range, kv
 * not configured for m, a sequence holding fewer slots than its tokens in
 * the batch; message in d); -ST_NOMEM; a hook's negative code (x and the
 * layer's K/V then partly updated; sequence lengths never change). */
int layer_forward(struct model *m, int64_t layer, float *x, const struct batch *b,
                  struct kvcache *kv, const struct model_hooks *hooks, struct diag *d);


#endif
