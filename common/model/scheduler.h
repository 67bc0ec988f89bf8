/*
 * scheduler.h - the continuous-batching engine behind `generate --batch`:
 * iteration-level scheduling (Orca) over the paged KV cache (vLLM).
 *
 * Requests are added with sched_add() (tokens, output budget, sampling,
 * stop strings) and wait in arrival order.  Each sched_step() makes ONE
 * model_forward() call whose batch holds
 *
 *   1. one token of every running sequence that is decoding (oldest first),
 *   2. prefill chunks of running sequences whose prompt is not yet fully
 *      computed, as far as the token budget (max_batch_tokens) allows,
 *   3. the first chunk of waiting requests admitted in arrival order while
 *      fewer than max_seqs run, tokens are left in the budget and the pool
 *      has the blocks the chunk needs (a request resumed from swap also
 *      needs the blocks of its image).
 *
 * A token's logits never depend on the other sequences of the batch (the
 * forward pass computes every token row independently), so a request gives
 * the same tokens as it would alone.  When a running sequence needs a block
 * and none is free, the most recently admitted running sequence is
 * preempted: by recompute (its blocks are freed and it goes back to the
 * front of the queue; on resumption its prompt and generated tokens are
 * computed again, usually partly from the prefix cache) or by swap (its
 * blocks are compressed into host memory and restored on resumption).
 * Sampling state (RNG, penalty history) survives preemption.
 *
 * With prefix caching, every block that fills up is published under the
 * chained key of the tokens it holds; an admitted request attaches the
 * published blocks that match the start of its tokens and computes only the
 * rest (at least its last token, whose logits are needed).
 *
 * With spec_tokens, a decoding sequence's one token is followed in the
 * batch by a draft (prompt lookup, a draft model's greedy chain, or an
 * EAGLE head's greedy chain); the
 * draft's rows are sampled in turn while they agree (as generate's --lookup
 * does), the rejected slots truncated.
 *
 * A sequence finishes on an end-of-generation token (not part of the
 * output; unless ignore_eos), when its text contains a stop string (the
 * text is cut before it; the tokens are all kept), or when it has produced
 * max_tokens tokens or reached the per-sequence context; its result is
 * handed to the result callback at once and its blocks are released.
 *
 * --schedule static (policy SCHED_STATIC) admits a new group of up to
 * max_seqs requests only when no sequence runs, and the group runs until
 * all of its members finish: the baseline continuous batching is measured
 * against.
 */
#ifndef LLMKIT_SCHEDULER_H
#define LLMKIT_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"
#include "sample.h"
#include "status.h"

struct model;
struct tokenizer;
struct sched;
struct spec_dm;
struct spec_cost;
struct eagle_draft;

enum sched_policy {
    SCHED_CONTINUOUS = 0,
    SCHED_STATIC = 1,
};

enum sched_preempt {
    SCHED_PREEMPT_RECOMPUTE = 0,
    SCHED_PREEMPT_SWAP = 1,
};

/* sched_policy_parse(), sched_preempt_parse() : "continuous" | "static",
 * "recompute" | "swap" -> the enum value, or -1. */
int sched_policy_parse(const char *s);
int sched_preempt_parse(const char *s);

struct sched_opts {
    int64_t max_seqs;           /* running sequences at most, >= 1 */
    int64_t max_batch_tokens;   /* tokens per step, >= 1 */
    int policy;                 /* enum sched_policy */
    int preempt;                /* enum sched_preempt */
    bool prefix_cache;          /* publish and reuse full blocks */
    bool ignore_eos;            /* do not stop at end-of-generation tokens */
    int64_t ctx;                /* tokens per sequence (prompt + output) at most;
                                 * 0 = the pool's capacity; never more than it */
    /* speculative decoding with prompt lookup (spec.h): each decoding
     * sequence drafts up to spec_tokens tokens from the longest earlier
     * match of its last lookup_ngram tokens or fewer, verified in the same
     * step (from the budget and blocks left once every decode has its token:
     * a draft never preempts);
     * 0 = off.  Every request's tokens stay what they are without. */
    int64_t spec_tokens;
    int lookup_ngram;
    /* with a draft model (spec.h; opened with a stream per sequence, max_seqs
     * + 1), the drafts are its greedy chains instead of prompt lookup, each
     * stopping where its token's probability is < draft_p_min; all running
     * sequences' chains are drafted together, one draft pass per level */
    struct spec_dm *draft;
    float draft_p_min;
    /* with an EAGLE head (eagle_draft.h; not with draft), the drafts are
     * its greedy chains (eagle_stream_tree, width 1), stopping where the
     * chain's probability is < draft_p_min.  Each sequence has its own
     * stream of the head (the target's features of its computed tokens,
     * taken from every step's forward pass; the head's K/V of its
     * accepted positions), kept across preemption and freed with the
     * sequence.  The head needs the feature of every token, so it does not
     * go with prefix_cache (-ST_RANGE). */
    struct eagle_draft *head;
    /* --spec-tokens auto: with spec_cost (the target's verify cost curve,
     * spec.h; the caller's), each step's draft size is spec_choose()'s for the
     * sequences decoding in it and the acceptance so far, at most
     * spec_tokens (spec_auto_levels: one level now and then where none
     * pays, to keep measuring, less and less often, unless none would pay
     * even were those levels kept), at the decoding sequences' mean slots
     * read (model_attn_slots); the scheduler updates its slot_ms from the
     * steps that only decode (spec_cost_observe); NULL = every decode
     * drafts up to spec_tokens */
    struct spec_cost *spec_cost;
    /* a sink for the target's features of every token computed (draft-train's
     * self-distillation, distill.h; with no drafter (a head, a draft model,
     * prompt lookup: spec_tokens > 0), whose accepted tokens go by another
     * path, and not with the prefix cache, whose blocks are not computed:
     * -ST_RANGE): each
     * step's forward pass runs with feat_hooks (may be NULL) and its final
     * hidden states into a buffer of max_batch_tokens rows of n_embd, and
     * feat_rows(feat_ctx, tag, pos0, hidden, row0, n) is called for each
     * request's n tokens computed in it, positions pos0 .. pos0 + n - 1 of
     * its prompt and output, batch rows row0 .. row0 + n - 1 of hidden (the
     * rows of feat_hooks' buffers too).  A token recomputed after a
     * preemption is given again.  The last output token is never computed
     * (the request ends when it is sampled).  < 0 from it ends the step
     * with -ST_NOMEM. */
    const struct model_hooks *feat_hooks;
    int (*feat_rows)(void *ctx, int64_t tag, int64_t pos0, const float *hidden, int64_t row0,
                     int64_t n);
    void *feat_ctx;
};

#define SCHED_OPTS_INIT { 16, 512, SCHED_CONTINUOUS, SCHED_PREEMPT_RECOMPUTE, true, false, 0, 0, 3, \
                          NULL, 0.0f, NULL, NULL, NULL, NULL, NULL }

/* One request.  Everything is copied by sched_add(). */
struct sched_req {
    int64_t tag;                /* the caller's handle, given back in the result */
    const int32_t *prompt;      /* [n_prompt] token ids */
    int64_t n_prompt;           /* >= 1 */
    int64_t max_tokens;         /* tokens to generate at most; < 0 = until the end or ctx */
    struct sample_params sp;    /* sampling (sample.h), seed included */
    const char *const *stop;    /* [n_stop] stop strings (non-empty), or NULL */
    size_t n_stop;
};

struct sched_result {
    int64_t tag;
    const int32_t *tokens;      /* generated tokens (no end-of-generation token) */
    int64_t n_tokens;
    const char *text;           /* their text (tok_piece bytes, not NUL-terminated, maybe not
                                 * valid UTF-8), cut before a stop string; "" without tokenizer */
    size_t text_len;
    const char *finish_reason;  /* "stop" (end of generation or a stop string), "length",
                                 * or "cancelled" (sched_cancel) */
    int64_t n_prompt;
    int64_t cached_tokens;      /* tokens taken from the prefix cache at the last admission */
    int64_t preemptions;        /* times this request was preempted */
    double queue_ms;            /* sched_add -> first admission */
    double ttft_ms;             /* sched_add -> first token */
    double total_ms;            /* sched_add -> finished */
};

/* What one step did and the pool after it (for the KV trace). */
struct sched_step_info {
    int64_t step;               /* 0, 1, ... */
    double time_ms;             /* since sched_new, at the end of the step */
    int64_t running, waiting;   /* after the step; waiting includes preempted ones */
    struct kv_stats kv;         /* pool after the step */
    int64_t preemptions;        /* during this step */
    int64_t prefix_hits;        /* blocks attached from the prefix cache during this step */
    int64_t prompt_tokens;      /* tokens computed this step that were not decodes
                                 * (prompt chunks, recomputation) */
    int64_t decode_tokens;      /* one per decoding sequence */
    const char *phase;          /* "prefill", "decode" or "mixed" */
    int64_t contig_slots;       /* slots a contiguous reservation of n_prompt + max output
                                 * per running sequence would hold (for comparison) */
    size_t swap_bytes;          /* host memory held by swapped-out sequences */
};

struct sched_totals {
    int64_t steps;
    int64_t finished;
    int64_t prompt_tokens, decode_tokens;   /* computed */
    int64_t generated;          /* tokens produced */
    int64_t preemptions, swaps_out;
    int64_t prefix_hits;        /* blocks */
    size_t swap_bytes_peak;
    int64_t spec_passes;        /* decodes that verified a draft */
    int64_t spec_drafted, spec_accepted;    /* draft tokens verified, kept */
    int64_t spec_rejections;    /* verifies that rejected a draft token */
    int64_t spec_auto_steps, spec_auto_levels;  /* with spec_cost: steps that chose a
                                                 * draft size, the sizes chosen summed */
    /* sums over steps, for run averages */
    double sum_slots;           /* blocks_used * block_size */
    double sum_stored;          /* slots_filled */
    double sum_logical;         /* sequence lengths (shared slots counted per sequence) */
    double sum_contig;          /* contig_slots */
};

/* Callbacks run on the calling thread inside sched_step() / sched_add();
 * a negative return stops the step and is returned by it. */
struct sched_callbacks {
    int (*result)(void *ctx, const struct sched_result *r);
    int (*step)(void *ctx, const struct sched_step_info *s);   /* may be NULL */
    void *ctx;
};

/* sched_new() : an engine over model m and pool kv (made for m); tok (may
 * be NULL: no text, no stop strings, no end-of-generation detection) turns
 * tokens into text and tells end-of-generation tokens.  m, kv and tok are
 * borrowed and must outlive the engine, which must be the pool's only
 * user.  Returns 0, -ST_RANGE (bad option), -ST_NOMEM. */
int sched_new(struct sched **out, struct model *m, struct kvcache *kv, const struct tokenizer *tok,
              const struct sched_opts *o, const struct sched_callbacks *cb, struct diag *d);

/* sched_free() : releases the engine and every request it still holds;
 * NULL is a no-op. */
void sched_free(struct sched *s);

/* sched_ctx() : the per-sequence context in tokens (opts ctx capped by the
 * pool's capacity). */
int64_t sched_ctx(const struct sched *s);

/* sched_add() : queues a request.  A request with max_tokens 0 finishes at
 * once (its result is delivered from inside this call).  Returns 0;
 * -ST_RANGE (empty prompt, a token out of the vocabulary, a prompt longer
 * than sched_ctx(), bad sampling parameters, an empty stop string; message
 * in d); -ST_NOMEM; or a callback's code. */
int sched_add(struct sched *s, const struct sched_req *r, struct diag *d);

/* sched_step() : one iteration as described at the top.  Returns 1 when a
 * step ran, 0 when there was nothing to do (no request running or waiting,
 * or held with only never-admitted requests waiting); a negative -ST_*
 * code on failure (forward pass, memory; -ST_NOMEM "kv cache too small"
 * when the pool cannot hold the head of the queue even alone) or a
 * callback's code. */
int sched_step(struct sched *s, struct diag *d);

/* sched_hold() : with hold set, no request that was never admitted is
 * admitted any more (preempted ones still resume), so that the running
 * sequences drain (a batch run that was asked to stop). */
void sched_hold(struct sched *s, bool hold);

/* sched_cancel() : ends every request that has started (running, or
 * preempted and waiting to resume) with finish_reason "cancelled": its
 * result, with the tokens and text generated so far, goes to the result
 * callback and its blocks are released.  Requests never admitted stay
 * queued.  For a batch run whose drain after a stop request is cut short.
 * Returns 0 or the first negative code of the callback (every started
 * request is ended all the same). */
int sched_cancel(struct sched *s);

/* sched_running() / sched_waiting() : sequences running / queued now. */
int64_t sched_running(const struct sched *s);
int64_t sched_waiting(const struct sched *s);

/* sched_get_totals() : counters since sched_new. */
void sched_get_totals(const struct sched *s, struct sched_totals *t);

#endif
