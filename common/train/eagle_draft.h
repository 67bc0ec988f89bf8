/*
 * eagle_draft.h - drafting with an EAGLE-1 or EAGLE-3 head (generate --draft-head):
 * EAGLE-2 dynamic trees (algorithms.md §6.5) for the target's one-pass tree
 * verification (generate.c, spec.h).
 *
 * The head reads the target's features (final hidden states after the
 * output norm) of the tokens the target has run: generate hands them over
 * after the prompt and after each verify pass, for the accepted tokens only
 * (eagle_draft_feed).  Head position p takes (embedding of token p + 1,
 * feature p); its keys and values are kept for the accepted positions
 * ("stable"), the tree's are discarded after each draft.
 *
 * A draft after hist[0 .. n) (root hist[n-1], sampled, not yet run):
 *   1. the head runs over the positions not yet stable, up to n - 2; its
 *      output at n - 2 gives the root's children: the top_k tokens by log
 *      probability (the target's LM head on the predicted feature)
 *   2. depth - 1 times: the top_k candidates of the last level by
 *      cumulative log probability are fed (token, their parent's predicted
 *      feature) in one batch under a tree mask, each giving top_k children
 *      with cumulative scores; all are recorded
 *   (a head trained over a reduced draft vocabulary, eagle_io.h, scores
 *   those tokens only, with f32 rows of the target's LM head: one tree
 *   level then reads n_draft rows instead of the whole vocabulary)
 *   3. the budget candidates of highest score (shallower first on ties)
 *      form the tree: a child never scores above its parent, so the choice
 *      is a connected tree.
 * An EAGLE-3 head (eagle3.h) reads instead the target's hidden states
 * entering its three feature layers, which the target's forward pass hands
 * over through eagle_draft_hooks(); stable positions fuse them with the
 * head's FC, tree levels feed the parent's output (before the final norm)
 * in their place, and the head scores its own draft vocabulary with its
 * own LM head.
 * With a confidence floor p_min > 0 (--draft-p-min), a candidate whose path
 * probability (the product of its tokens' probabilities from the root,
 * EAGLE-2's confidence) is below p_min is neither recorded nor expanded:
 * a low-confidence tree is smaller, or empty.
 * Drafts are deterministic, so verification keeps generate's output that of
 * plain decoding, greedy or sampled (spec.h).
 *
 * Per-sequence state (the features fed, the head's K/V of the stable
 * positions) lives in a struct eagle_stream: one head drafts for many
 * sequences (generate --batch), a stream each.  eagle_draft_feed*() and
 * eagle_draft_tree() use the head's own stream (one prompt).
 */
#ifndef LLMKIT_EAGLE_DRAFT_H
#define LLMKIT_EAGLE_DRAFT_H

#include <stdint.h>

#include "model.h"
#include "spec.h"
#include "status.h"

#define EAGLE_TOPK_MAX 16

struct eagle_draft;
struct eagle_stream;

/* eagle_draft_open() : reads the head at path and checks that it was
 * trained for m (-ST_FORMAT otherwise: "trained for another model");
 * positions up to ctx; top_k 1 .. EAGLE_TOPK_MAX (branches per node).  0,
 * wtype: the type the head's matrices are multiplied in (GGML_TYPE_F32:
 * as trained; GGML_TYPE_Q8_0: converted at open, a quarter of the bytes;
 * f32 where the type does not fit a matrix's width).  0, -ST_IO,
 * -ST_FORMAT, -ST_RANGE, -ST_NOMEM. */
int eagle_draft_open(struct eagle_draft **out, const char *path, struct model *m, int64_t ctx,
                     int top_k, uint32_t wtype, struct diag *d);
void eagle_draft_free(struct eagle_draft *e);

/* eagle_draft_feed() : the target's feature of the token at position pos
 * (d floats); positions are fed in order, pos <= the count fed so far (a
 * position fed again replaces what came after it). */
void eagle_draft_feed(struct eagle_draft *e, int64_t pos, const float *feat);

/* eagle_draft_hidden() : *out = a buffer of rows target features (owned
 * by e, kept until the next call or eagle_draft_free) for model_out.hidden.
 * 0 or -ST_NOMEM. */
int eagle_draft_hidden(struct eagle_draft *e, int64_t rows, float **out, struct diag *d);

/* eagle_draft_hooks() : NULL (EAGLE-1), or the hooks (EAGLE-3) to pass to
 * the model_forward whose model_out.hidden is eagle_draft_hidden's buffer:
 * they capture the same rows' features (valid after eagle_draft_hidden). */
const struct model_hooks *eagle_draft_hooks(const struct eagle_draft *e);

/* eagle_draft_arch() : "eagle" or "eagle3" (the head file's architecture) */
const char *eagle_draft_arch(const struct eagle_draft *e);

/* eagle_draft_feed_rows() : eagle_draft_feed(pos0 + i, hidden row
 * (rows ? rows[i] : i)) for i < n; an EAGLE-3 head reads the rows its
 * hooks captured in the same pass instead of hidden. */
void eagle_draft_feed_rows(struct eagle_draft *e, int64_t pos0, const float *hidden,
                           const int64_t *rows, int64_t n);

/* eagle_draft_tree() : adds to t (whose root is hist[n_hist-1]) a tree of
 * at most budget nodes and depth levels, as above, with the top_k given at
 * open and the confidence floor p_min (0: none).  Nothing is drafted (0
 * returned, t unchanged) when a feature is missing.  0 or -ST_NOMEM. */
int eagle_draft_tree(struct eagle_draft *e, const int32_t *hist, int64_t n_hist, int depth,
                     int64_t budget, float p_min, struct spec_tree *t, struct diag *d);

/* eagle_stream_new() : *out = an empty stream (no feature fed) for
 * positions up to e's ctx, owned by the caller (eagle_stream_free; NULL is
 * a no-op); its memory grows with the positions fed (the head's own
 * stream holds ctx from the start).  0 or -ST_NOMEM. */
int eagle_stream_new(struct eagle_draft *e, struct eagle_stream **out, struct diag *d);
void eagle_stream_free(struct eagle_stream *st);

/* eagle_stream_feed(), eagle_stream_feed_rows() : eagle_draft_feed() and
 * eagle_draft_feed_rows() on stream st.  0, or -ST_NOMEM when st could not
 * grow (what was fed before stays). */
int eagle_stream_feed(struct eagle_draft *e, struct eagle_stream *st, int64_t pos,
                      const float *feat);
int eagle_stream_feed_rows(struct eagle_draft *e, struct eagle_stream *st, int64_t pos0,
                           const float *hidden, const int64_t *rows, int64_t n);

/* one sequence's request to eagle_streams_chains(): its stream and tokens
 * (hist[n_hist - 1] the chain's root), at most max tokens (1 ..
 * LEVELS_MAX) into out; n_out set */
struct eagle_chain_req {
    struct eagle_stream *st;
    const int32_t *hist;
    int64_t n_hist, max;
    int32_t *out;
    int64_t n_out;
};

/* eagle_streams_chains() : the head's greedy chain (eagle_stream_tree() of
 * width 1 and depth max, the confidence floor p_min) for each of the n
 * requests, the streams' rows batched: their stable positions (keys and
 * values only) in passes of at most 64 rows, the roots in one, then one pass per level
 * for all the chains still growing, so the head's weights are read once
 * per level rather than once per sequence and level.  A request whose
 * features are missing gets no tokens.  Returns 0. */
int eagle_streams_chains(struct eagle_draft *e, struct eagle_chain_req *rq, int64_t n,
                         float p_min);

/* eagle_stream_tree() : eagle_draft_tree() on stream st with width
 * branches per node (1 .. the top_k given at open; 1 = a chain of the
 * head's greedy tokens) */
int eagle_stream_tree(struct eagle_draft *e, struct eagle_stream *st, const int32_t *hist,
                      int64_t n_hist, int depth, int width, int64_t budget, float p_min,
                      struct spec_tree *t, struct diag *d);

/* eagle_draft_root_out() : the head's predicted feature at the root of the
 * last draft (d floats; for the tests: the training forward's) */
const float *eagle_draft_root_out(const struct eagle_draft *e);

/* eagle_draft_level_ms() : the time of one draft level of n rows (a
 * tree's width, or a batch's chains): the curve measured at open (top_k
 * rows) or by eagle_draft_measure, times a running mean of the drafts'
 * measured cost over the curve's (of their levels after the first: the
 * first is the catch-up on the positions since the last draft, as long
 * as a level when drafting every step, longer after a gap, though the
 * positions before the root cost only their keys and values) */
double eagle_draft_level_ms(const struct eagle_draft *e, int64_t n);

/* eagle_draft_measure() : measures the level cost curve for 1, 2, 4 ...
 * up to max_n rows (at most the 32 chains drafted together; more are
 * drafted in groups of 32), for eagle_draft_level_ms at any number of
 * streams.  Not during a draft: it uses the draft's scratch. */
void eagle_draft_measure(struct eagle_draft *e, int64_t max_n);

#endif
