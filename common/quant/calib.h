/*
 * calib.h - calibration for the calibrated quantization methods (GPTQ, AWQ):
 * the calibration tokens and the block-by-block pipeline of
 * ../shared/reference/algorithms.md §1.6.
 *
 * Tokens: the text is tokenized with the model's tokenizer (special tokens
 * added as the vocabulary says, special texts not parsed, as llama-imatrix
 * does) and cut into n_chunks consecutive chunks of ctx tokens, the first
 * token of each replaced by BOS when the vocabulary adds one.  Each chunk is
 * one calibration sequence (the reference code's "sample").
 *
 * Pipeline: a struct calib holds the hidden states entering one layer for
 * every calibration token, x [n_chunks * ctx][n_embd] (starting with the
 * token embeddings).  A method works on layer L = c->layer:
 *
 *   calib_run_layer()     runs layer L on every chunk from x with hooks
 *                         (LINEAR_IN events give each linear's input, chunk
 *                         by chunk), optionally stopping each chunk once a
 *                         named linear's input has been seen, and optionally
 *                         keeping the layer's output; x itself is unchanged
 *   calib_set_weight()    replaces a weight of layer L (a linear, by its
 *                         quantized-then-dequantized values, or a norm) for
 *                         every later run: true-sequential quantization
 *                         within a block runs the later linears' inputs
 *                         through the earlier ones already quantized
 *   calib_advance()       runs layer L (with its replaced weights) on x and
 *                         makes the result the inputs of layer L + 1
 *
 * so each layer's inputs come from the already-quantized previous layers.
 *
 * Memo: the runs of a layer record the outputs of its linears chunk by
 * chunk (MODEL_HOOK_LINEAR_OUT) and later runs take them instead of
 * multiplying again while they still hold: calib_set_weight of a linear
 * drops that linear's and those of every later sub-group (their inputs
 * follow from it), of anything else (a norm) all of them; a new layer
 * starts empty.  The outputs are the bits the product would give (the same
 * weights times the same inputs), so the memo changes no result, only the
 * time: the true-sequential runs of a block compute each linear once per
 * weight it has instead of once per later sub-group.
 *
 * Memory: the model (mapped), x and one scratch copy, one chunk's KV for one
 * layer, the replaced weights of the current layer (those of earlier
 * layers are released by calib_advance: they are never run again) and the
 * memo (at most CALIB_MEMO_MAX bytes; outputs past it are not kept).
 */
#ifndef LLMKIT_CALIB_H
#define LLMKIT_CALIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runcb.h"
#include "status.h"

#define CALIB_MEMO_MAX ((size_t)512 << 20)

struct model;
struct model_hooks;
struct calib_memo;
struct model_weight;
struct kvcache;

struct calib_opts {
    int64_t ctx;                /* tokens per chunk (>= 2) */
    int64_t n_chunks;           /* chunks wanted; < 0: every whole chunk of the text */
    int n_threads;              /* model_open's; <= 0: all CPUs */
    const char *kernel;         /* NULL: auto */
};

struct calib {
    struct model *m;            /* owned; its layer weights may be redirected */
    struct kvcache *kv;         /* one chunk's slots */
    int64_t ctx, n_chunks, n_embd;
    int64_t n_text_tokens;      /* tokens in the whole text */
    char sha256[65];            /* of the text's bytes, hex */
    int32_t *tok;               /* [n_chunks][ctx] */
    int64_t layer;              /* the layer x enters; n_layer when done */
    float *x;                   /* [n_chunks * ctx][n_embd] */
    float *scratch;             /* [ctx][n_embd]: one chunk run */
    struct calib_repl *repl;    /* replaced weights of the current layer */
    int n_repl;
    struct calib_memo *memo;    /* the current layer's linears' outputs */
    int n_memo;                 /* linears in memo (0: none set up yet) */
    size_t memo_bytes;          /* allocated for outputs */
};

/* calib_open() : opens the GGUF model at model_path (model_open with
 * o->n_threads and o->kernel), tokenizes the text at text_path ("-" =
 * stdin) and computes the token embeddings of every chunk: *out is at
 * layer 0.  The text's length is checked before the forward pass's scratch
 * (ctx tokens) or any state is allocated.  Freed with calib_free().
 * Returns 0; model_open's errors; -ST_IO (text unreadable); -ST_RANGE
 * (ctx < 2, or a text too short for one chunk or for the chunks asked: the
 * message gives the token counts); -ST_NOMEM. */
int calib_open(struct calib **out, const char *model_path, const char *text_path,
               const struct calib_opts *o, struct diag *d);

void calib_free(struct calib *c);

/* calib_linears() : the names of layer L's linears in true-sequential order
 * and their sub-groups (algorithms.md §1.6: q/k/v, o, gate/up, down):
 * names[i] (e.g. "blk.3.attn_q.weight", pointing into the model) for i <
 * *n, group[i] the sub-group index 0..3.  Absent weights are skipped.
 * names and group have room for 8. */
void calib_linears(const struct calib *c, int64_t layer, const char **names, int *group, int *n);

/* calib_model_linears() : the same for a model without a calibration run
 * (RTN). */
void calib_model_linears(const struct model *m, int64_t layer, const char **names, int *group,
                         int *n);

/* calib_model_weight() : weight name of layer layer of m (a linear or a
 * norm), or NULL. */
const struct model_weight *calib_model_weight(const struct model *m, int64_t layer,
                                              const char *name);

/* calib_weight() : the weight of the current layer named name (a linear or
 * a norm of model_layer), as the model runs it now (the source tensor, or
 * what calib_set_weight put there); NULL if the layer has no such weight. */
const struct model_weight *calib_weight(const struct calib *c, const char *name);

/* calib_weight_f32() : the source values of weight name of any layer (the
 * GGUF tensor dequantized to f32) into out [rows][cols]; -ST_RANGE if there
 * is no such weight, -ST_FORMAT if its type cannot be dequantized. */
int calib_weight_f32(const struct calib *c, const char *name, float *out, struct diag *d);

/* calib_dequant_weight() : the values of w (rows x cols, any type with a
 * to_float) into out [rows][cols]; -ST_FORMAT if the type has none. */
int calib_dequant_weight(const struct model_weight *w, float *out, struct diag *d);

/* calib_set_weight() : from now on the current layer's weight name runs as
 * the f32 values w [rows][cols] (copied; rows and cols those of the source
 * tensor).  -ST_RANGE (no such weight in the current layer), -ST_NOMEM. */
int calib_set_weight(struct calib *c, const char *name, const float *w, struct diag *d);

/* calib_run_layer() : runs the current layer on every chunk, in order, from
 * x, with hooks (may be NULL; LINEAR_IN/LAYER_OUT events of one chunk of
 * ctx tokens at a time, ev->tok0 = 0).  When stop_after is not NULL the
 * run of each chunk stops right after the LINEAR_IN event of the weight of
 * that name (the rest of the layer is not computed; out must then be NULL).
 * When out is not NULL it receives the layer's output [n_chunks * ctx]
 * [n_embd] (out == c->x is how calib_advance moves on).  Returns 0, a
 * hook's negative code, -ST_RANGE (no current layer, stop_after with out),
 * -ST_NOMEM, or layer_forward's errors. */
int calib_run_layer(struct calib *c, const struct model_hooks *hooks, const char *stop_after,
                    float *out, struct diag *d);

/* calib_advance() : x becomes the output of the current layer (as its
 * weights run now) and the layer number goes up by one; the layer's
 * replaced weights are released.  Returns what calib_run_layer returns. */
int calib_advance(struct calib *c, struct diag *d);

/* calib_set_state() : for resuming: sets the current layer to layer (0 ..
 * n_layer) and x to the given states [n_chunks * ctx][n_embd]; releases the
 * replaced weights.  -ST_RANGE for a bad layer. */
int calib_set_state(struct calib *c, int64_t layer, const float *x, struct diag *d);

/* calib_tokens() : n_chunks * ctx, the rows of x */
static inline int64_t
calib_tokens(const struct calib *c)
{
    return c->n_chunks * c->ctx;
}

#endif
