/*
 * eagle_target.h - what the EAGLE trainer takes from the target model: the
 * head's shape, f32 copies of the frozen embedding and LM head, and the
 * features of token sequences through the shared forward pass.
 */
#ifndef LLMKIT_EAGLE_TARGET_H
#define LLMKIT_EAGLE_TARGET_H

#include <stdint.h>

#include "eagle.h"
#include "kvcache.h"
#include "model.h"
#include "status.h"

struct eagle_target {
    struct model *m;            /* borrowed */
    struct eagle_config c;
    struct eagle_frozen fz;     /* into embd / lm below */
    float *embd;                /* owned [n_vocab][d] */
    float *lm;                  /* owned, or == embd (tied output) */
    struct kvcache *kv;         /* owned: one sequence of up to max_n tokens */
    int64_t max_n;
};

/* eagle_target_config() : the head's configuration for m (a llama or
 * gemma3 model): its width, heads, feed-forward size, vocabulary, epsilon
 * and RoPE (gemma3: the global layers', NeoX).  The head is a llama layer
 * for either and takes the embedding's raw rows (not gemma3's sqrt(d)
 * scaled ones).  Returns 0 or -ST_RANGE (another architecture, a final
 * logit softcap, YaRN RoPE: what a head cannot honour; message in d). */
int eagle_target_config(const struct model *m, struct eagle_config *c, struct diag *d);

/* eagle_target_init() : the head's configuration for m (a llama or gemma3
 * model), the frozen parts converted to f32 through the backend, and a KV
 * cache for feature runs of up to max_n tokens.  Returns 0, -ST_RANGE (an
 * architecture the EAGLE-1 head does not support; message in d),
 * -ST_NOMEM. */
int eagle_target_init(struct eagle_target *t, struct model *m, int64_t max_n, struct diag *d);
void eagle_target_release(struct eagle_target *t);

/* eagle_target_init_head() : an EAGLE-3 head h (its random initialisation
 * made) started from a llama target's last layer: the hidden half of the
 * q/k/v matrices (the embedding half keeps its random values), the output
 * projection, the MLP and the norms (attn_norm as the hidden norm), the
 * target's output_norm as the final norm, lm (the draft vocabulary's rows
 * of the target's LM head, [n_draft][d]) as its LM head, and the FC passing
 * the deepest feature through (1 added to the diagonal of its block,
 * eagle_deepest_feature(): the input of layer L - 3 of L): at the start the
 * head's layer reads the residual stream a few layers before the target's
 * last, through that layer's weights.  A start, not a copy: the layer's
 * biases and RoPE frequency factors, if any, are not taken.  Returns 0,
 * -ST_RANGE (an EAGLE-1 head, a target that is no llama model, shapes that
 * differ), -ST_NOMEM. */
int eagle_target_init_head(struct eagle_target *t, struct eagle_head *h, const float *lm);

/* eagle_deepest_feature() : which of an EAGLE-3 config's three feature
 * blocks (0-2) enters the deepest layer (the last of equals) */
int eagle_deepest_feature(const struct eagle_config *c);

/* eagle_target_features() : feat [n][d] = the final hidden state after the
 * output norm (the LM head's input) of each of the n tokens of one sequence
 * starting at position 0, through model_forward (n <= max_n).  Returns 0 or
 * model_forward's code. */
int eagle_target_features(struct eagle_target *t, const int32_t *tokens, int64_t n, float *feat,
                          struct diag *d);

/* EAGLE-3's features through model hooks (struct model_hooks { eagle_capture_hook,
 * &capture, EAGLE_CAPTURE_SITES }): batch row i's hidden states entering
 * layers feat_layer[0..2] go to feat3 [i][3d] for i < rows (layer 0's
 * input: the embeddings) */
struct eagle_capture {
    const int64_t *feat_layer;  /* [3] */
    int64_t d;
    float *feat3;               /* [rows][3d] */
    int64_t rows;
};

#define EAGLE_CAPTURE_SITES (MODEL_HOOK_EMBD | MODEL_HOOK_LAYER_OUT)

int eagle_capture_hook(void *ctx, const struct model_hook_event *ev);

/* eagle_target_features3() : eagle_target_features() into feat, and
 * feat3 [n][3d]: the hidden states entering layers c.feat_layer[0..2],
 * concatenated in that order (EAGLE-3's features). */
int eagle_target_features3(struct eagle_target *t, const int32_t *tokens, int64_t n, float *feat3,
                           float *feat, struct diag *d);

#endif
