/*
 * spec.h - speculative decoding: drafters that propose the next tokens
 * cheaply, for the target model to verify in one forward pass.
 *
 * Verification (generate.c) is lossless by construction: the drafts here
 * are deterministic, so the target's token at each drafted position is
 * sampled exactly as plain decoding would sample it (same logits: the
 * forward pass is batch invariant; same sampler state and random draws),
 * and a draft is kept only while it equals that token.  For a one-hot
 * draft distribution this is speculative sampling's rule (accept d with
 * probability min(1, p(d)/q(d)) = p(d)), and it reproduces plain decoding
 * token for token, greedy or sampled, for a given seed.
 */
#ifndef LLMKIT_SPEC_H
#define LLMKIT_SPEC_H

#include <stdint.h>

#include "kvcache.h"
#include "model.h"
#include "status.h"
#include "tokenizer.h"

/* spec_lookup_draft() : prompt lookup (n-gram) drafting, as llama.cpp's
 * lookup and vLLM's ngram drafter do.  For n from ngram_max down to 1,
 * looks for the most recent earlier occurrence of the last n tokens of
 * hist[0 .. n_hist) (an occurrence that ends before the last token); at the
 * first n that has one, copies the tokens that followed it, at most
 * max_draft, into draft.  Returns the number of tokens drafted (0: no
 * match, or nothing follows it). */
int64_t spec_lookup_draft(const int32_t *hist, int64_t n_hist, int ngram_max, int32_t *draft,
                          int64_t max_draft);

/* A draft token tree.  Node 0 is the root: the last token of the
 * sequence, sampled but not yet fed to the target.  Node i > 0 holds a
 * draft token, the child of parent[i] < i, at depth depth[i] (the root's
 * children are depth 1).  The target verifies all nodes in one forward
 * pass: node i at position (root's position) + depth[i], seeing the cached
 * context and its ancestors (a chain needs no mask). */
struct spec_tree {
    int64_t n, cap;
    int32_t *tok, *parent, *depth;
    int chain;                  /* every node's parent is the node before it */
};

/* spec_tree_init() : room for cap nodes (root included).  0 or -ST_NOMEM. */
int spec_tree_init(struct spec_tree *t, int64_t cap, struct diag *d);
void spec_tree_release(struct spec_tree *t);
/* spec_tree_reset() : the root alone, token root */
void spec_tree_reset(struct spec_tree *t, int32_t root);
/* spec_tree_add() : appends a node (tok, child of parent); its index, or -1
 * when the tree is full */
int64_t spec_tree_add(struct spec_tree *t, int32_t tok, int64_t parent);
/* spec_tree_child() : the first child of node p holding token tok, or -1 */
int64_t spec_tree_child(const struct spec_tree *t, int64_t p, int32_t tok);
/* spec_tree_attn_slots() : the slots the nodes of t read in all when its
 * root is at position root_pos of model m: each node what a token at its
 * position reads (model_attn_slots; under the mask, the root's context and
 * its ancestors) */
double spec_tree_attn_slots(const struct spec_tree *t, const struct model *m, int64_t root_pos);
/* spec_tree_mask() : mask[i * n + j] = 1 when node j is node i or one of
 * its ancestors (struct batch's mask) */
void spec_tree_mask(const struct spec_tree *t, uint8_t *mask);

#define SPEC_WIDTH_MAX 16     /* branches per level at most */

/* A draft model: any GGUF with the target's vocabulary, the target itself
 * at fewer bits included (self-speculation).  It keeps its own KV cache of
 * the tokens it was fed, and drafts greedily: each level's children are its
 * `width` most likely tokens, the most likely one continues the chain
 * (a caterpillar tree: one forward pass of the draft per level). */
struct spec_dm;

/* spec_dm_open() : opens the draft model at path with mo (threads, kernel,
 * device), checks that its vocabulary is the target's token for token (the
 * message names the first token that differs), and gives it a KV pool of
 * pool_tokens tokens (at least ctx) for n_streams streams of up to ctx
 * tokens each.  Stream 0 is spec_dm_draft()'s; streams 1 .. n_streams - 1
 * are handed out by spec_dm_stream_new() for spec_dm_chains().  0, or the
 * model's, tokenizer's or cache's error; -ST_FORMAT for a different
 * vocabulary. */
int spec_dm_open(struct spec_dm **out, const char *path, const struct model_opts *mo,
                 const struct tokenizer *target_tok, int64_t ctx, int64_t n_streams,
                 int64_t pool_tokens, struct diag *d);
void spec_dm_free(struct spec_dm *dm);

/* spec_dm_draft() : a tree after hist[0 .. n_hist) (its root
 * hist[n_hist-1]), on stream 0: up to depth levels of up to width tokens
 * each, at most budget nodes besides the root; the chain stops early where
 * the draft's most likely token has probability < p_min.  The stream is
 * first brought to hist (its cache rolled back to the longest prefix it
 * shares with hist, the rest fed).  0 or a forward-pass error. */
int spec_dm_draft(struct spec_dm *dm, const int32_t *hist, int64_t n_hist, int depth, int width,
                  int64_t budget, float p_min, struct spec_tree *t, struct diag *d);

/* spec_dm_stream_new() : a free stream (its cache empty), or -1 when all
 * are taken; spec_dm_stream_free() : gives stream i back, its KV freed. */
int32_t spec_dm_stream_new(struct spec_dm *dm);
void spec_dm_stream_free(struct spec_dm *dm, int32_t i);

/* One sequence's chain draft for spec_dm_chains(). */
struct spec_dm_req {
    int32_t stream;             /* from spec_dm_stream_new() */
    const int32_t *hist;        /* the sequence's tokens so far */
    int64_t n_hist;
    int64_t max;                /* draft tokens wanted at most */
    int32_t *out;               /* [max] the draft */
    int64_t n_out;              /* set: draft tokens in out */
};

/* spec_dm_chains() : greedy chain drafts for n_req sequences at once (at
 * most one per stream), one draft forward pass per level for all of them:
 * each stream is brought to its hist as spec_dm_draft() does, then extended
 * by its most likely token while that has probability >= p_min, up to max.
 * A stream whose tokens would not fit in the free blocks of the pool drafts
 * nothing this time (n_out = 0).  0 or a forward-pass error. */
int spec_dm_chains(struct spec_dm *dm, struct spec_dm_req *r, int64_t n_req, float p_min,
                   struct diag *d);

/* ---- choosing the draft size (--spec-tokens auto) ----
 *
 * A verify pass of n tokens costs t(n), measured once at the start; a
 * draft level costs t_draft (0 for lookup).  With a per-level acceptance
 * rate a (the drafts kept at each level, from the run's own statistics), a
 * draft of k levels yields on average E(k) = 1 + a + ... + a^k tokens per
 * pass.  For n_seq sequences decoding in the same step (--batch), each
 * drafting k levels, spec_choose() picks the k that maximises
 * n_seq * E(k) / (t(n_seq * (k * width + 1)) + k * t_draft), 0 when
 * drafting does not pay: with n_seq > 1 the pass already holds n_seq
 * tokens, so on a compute-bound machine (t(n) close to linear) a draft
 * costs nearly a decode per token.
 * t(n) is measured on a new sequence (positions 0 .. n-1), where attention
 * costs next to nothing; each token's attention costs about the same time
 * per slot it reads, the tokens of a pass sharing none of it (kernels/ops.h
 * ops_attn_fn: one query row at a time), so a pass of n tokens reading ctx
 * slots each (model_attn_slots: the mean over the layers, a sliding window
 * counted as what it keeps) costs t(n) + n * ctx * slot_ms.  slot_ms is
 * fitted from the run's own passes (spec_cost_observe): with SmolLM2-135M
 * on 2 cores about 0.002 ms, so at 1024 slots 8 tokens cost 2.6 t(8).
 * The timed passes carry what the measured ones do not (an EAGLE-3 head's
 * feature hooks, the hidden states it reads): that per-token cost goes into
 * slot_ms too, small beside the attention of 256 slots and more. */
#define SPEC_AUTO_LEVELS 16     /* lookup: levels (tokens) auto may choose */
#define SPEC_COST_N 6           /* t(n) for n = 1, 2, 4, 8, 16, 32 */
#define SPEC_OBS_SLOTS 1024     /* passes over fewer token-slots fit nothing (noise), */
#define SPEC_OBS_CTX 256        /* nor those over fewer slots a token */
struct spec_cost {
    int n_meas;                 /* points measured */
    int64_t n[SPEC_COST_N];
    double ms[SPEC_COST_N];     /* the fastest of the tries */
    double slot_ms;             /* a pass's cost per token and slot of context (0 until fitted) */
    int64_t n_obs;              /* passes that slot_ms was fitted from */
};

/* spec_cost_measure() : t(n) of model m for n = 1, 2, 4 ... up to max_n
 * tokens (at most 32), on a scratch sequence of kv (freed after; sizes
 * that do not fit in the pool are left out).  0 or a forward-pass error. */
int spec_cost_measure(struct model *m, struct kvcache *kv, int64_t max_n, struct spec_cost *c,
                      struct diag *d);

/* spec_cost_at() : t(n) interpolated (linearly between the points measured,
 * and beyond the last one along the last segment); 0 when nothing was
 * measured */
double spec_cost_at(const struct spec_cost *c, int64_t n);

/* spec_cost_pass() : a pass of n tokens reading `slots` slots of context in
 * all (the sum over its tokens): spec_cost_at(c, n) + slots * c->slot_ms */
double spec_cost_pass(const struct spec_cost *c, int64_t n, double slots);

/* spec_cost_observe() : a pass of n tokens over `slots` slots of context in
 * all took ms: where slots >= SPEC_OBS_SLOTS and slots >= n * SPEC_OBS_CTX
 * (below, the attention is lost in the noise), (ms - t(n)) / slots, at
 * least 0 and, once slot_ms is above 0, at most 4 times it (one pass slowed
 * by the machine moves it little), goes into slot_ms, a running mean
 * weighting the newest pass 0.2 (the first sets it).  Nothing when no curve
 * was measured. */
void spec_cost_observe(struct spec_cost *c, int64_t n, double slots, double ms);

/* spec_choose() : the best number of draft levels in 0 .. max_levels (see
 * above) for acceptance rate a, n_seq >= 1 sequences in the pass, tokens
 * per level width, t_draft ms per level (all sequences' drafts of that
 * level together), and ctx slots of context per token (the sequences'
 * mean length) */
int spec_choose(const struct spec_cost *c, double a, int64_t n_seq, int width, double t_draft,
                int max_levels, double ctx);

/* spec_acceptance() : the per-level acceptance rate from the draft levels
 * kept and the verifies that rejected one (a level), with a prior of one
 * each: (kept + 1) / (kept + rejected + 2) */
double spec_acceptance(int64_t kept, int64_t rejected);

/* spec_auto_levels() : spec_choose() at spec_acceptance(kept, rejected),
 * but where it chooses none, one level now and then (a probe) to keep
 * measuring the acceptance, on the SPEC_PROBE_MIN-th call in a row where
 * none pays, unless drafting would not pay even if every draft were kept
 * (a draft model costing about a decode a level never probes).
 * A drafter whose levels cost time (t_draft > 0: a draft model or head)
 * pays more for a probe than its 2-token verify: it first catches up on
 * the tokens since its last draft (the whole prompt at the first one).
 * So its probes back off, each doubling the wait for the next up to
 * SPEC_PROBE_MAX calls (probes on calls 15, 47, 111, 239, 495, then every
 * 256th: about log2(n / 16 + 1) in n calls up to 496, then one each 256),
 * a call where drafting pays restarting the wait, not the doubling; and
 * once a draft was rejected they stop when even the probe's level kept
 * (every sequence's: kept + n_seq) would not make drafting pay, since the
 * probe could not change the choice.  Lookup (t_draft 0) drafts for
 * nothing: every SPEC_PROBE_MIN-th call while every draft kept would pay.
 * p: the caller's probing state, zeroed before its first call. */
#define SPEC_PROBE_MIN 16
#define SPEC_PROBE_MAX 256
struct spec_probe {
    int64_t wait;               /* calls since the last probe, or the last call that drafted */
    int64_t period;             /* calls from one probe to the next (0: SPEC_PROBE_MIN) */
};
int spec_auto_levels(const struct spec_cost *c, int64_t kept, int64_t rejected, int64_t n_seq,
                     int width, double t_draft, int max_levels, double ctx, struct spec_probe *p);

/* spec_dm_level_ms() : the draft model's time for one forward pass of n
 * tokens (one level of n streams' chains) at position pos each: its curve,
 * measured at spec_dm_open() for up to n_streams - 1 tokens (at least 1, at
 * most 32) and extrapolated beyond, plus n * model_attn_slots(its model,
 * pos) * its slot_ms, fitted from its level passes within the measured
 * curve (not the catch-ups on the tokens since its last draft: a draft
 * model's attention grows with the context as the target's does); until
 * one of them was fitted, the target's (tc, of model tm; both may be NULL)
 * scaled by the multiply-adds per slot (layers x query heads x key and
 * value width) of each */
double spec_dm_level_ms(const struct spec_dm *dm, int64_t n, int64_t pos, const struct spec_cost *tc,
                        const struct model *tm);

#endif
