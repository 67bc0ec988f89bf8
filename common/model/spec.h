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

/* spec_lookup_draft() : prompt lookup (n-gram) drafting, as llama.cpp's
 * lookup and vLLM's ngram drafter do.  For n from ngram_max down to 1,
 * looks for the most recent earlier occurrence of the last n tokens of
 * hist[0 .. n_hist) (an occurrence that ends before the last token); at the
 * first n that has one, copies the tokens that followed it, at most
 * max_draft, into draft.  Returns the number of tokens drafted (0: no
 * match, or nothing follows it). */
int64_t spec_lookup_draft(const int32_t *hist, int64_t n_hist, int ngram_max, int32_t *draft,
                          int64_t max_draft);

#endif
