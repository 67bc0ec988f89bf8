/*
 * eagle_io.h - EAGLE head files: GGUF with general.architecture "eagle"
 * (EAGLE-1) or "eagle3" (EAGLE-3).
 *
 * Keys (all written, all checked on reading):
 *   general.architecture        "eagle"
 *   eagle.version               u32 1 (EAGLE-1 head)
 *   eagle.embedding_length      u32 d
 *   eagle.feed_forward_length   u32 n_ff
 *   eagle.attention.head_count, eagle.attention.head_count_kv, eagle.attention.key_length  u32
 *   eagle.attention.layer_norm_rms_epsilon   f32
 *   eagle.rope.dimension_count  u32, eagle.rope.freq_base f32, eagle.rope.scale_linear f32
 *                               (1 / freq_scale), eagle.rope.neox bool
 *   eagle.vocab_size            u32 (the target's)
 *   eagle.base.tensor_sha256    string: SHA-256 of the base GGUF's tensor data section;
 *                               generate refuses the head with any other base
 *   eagle.base.name             string: the base's general.name or file name
 *   eagle.train.steps, eagle.train.tokens   u64; eagle.train.data_sha256 string
 *   eagle.draft_vocab           optional INT32 array: the token ids the head was trained
 *                               to predict (draft-train --draft-vocab), ascending; the
 *                               drafter then scores these tokens only (EAGLE-3's reduced
 *                               draft vocabulary)
 * An EAGLE-3 head has the same keys under the prefix "eagle3." (eagle3.version
 * u32 1), and:
 *   eagle3.feature_layers       INT32 array [3]: the target layers whose inputs
 *                               are the features (0 = the embeddings)
 *   eagle3.draft_vocab_size     u32: rows of its LM head ("output.weight"); the
 *                               count of eagle3.draft_vocab, or eagle3.vocab_size
 *                               when that key is absent (the whole vocabulary)
 *   eagle3.draft_vocab          optional INT32 array: the target id of draft id i
 *                               (HF's d2t[i] = draft_vocab[i] - i; t2d is its set)
 * Tensors, F32, GGUF shapes {cols, rows}: eagle.h's eagle_tensor_name() list
 * (EAGLE-3: eagle3_tensor_name()).
 * A checkpoint is the same file plus the optimizer's state: tensors
 * "opt.m" and "opt.v" ({n_param}) and keys eagle.ckpt.step, eagle.ckpt.seed
 * (u64), eagle.ckpt.elapsed (f32 seconds), eagle.ckpt.options (string: the
 * run's options that shape the result, which a resumed run must repeat), and
 * the data it trained on, which a resumed run repeats whatever its own time:
 * eagle.ckpt.prompts (u64: the self-distillation prompts answered, the first
 * ones), eagle.ckpt.sequences (u64: the sequences with features, the first
 * ones in draft-train's order) and eagle.ckpt.train_time (f32: the seconds
 * of --max-time left for training; 0 = none), and eagle.ckpt.sha256 (string:
 * the SHA-256 of the head's parameters, then opt.m, then opt.v, as the
 * tensors hold them, then the eagle.ckpt.* keys above and the base's and
 * data's identity, steps and tokens as one line of text, then the draft
 * vocabulary's ids (eagle_io.c's ckpt_sha256; the hyperparameters are not in
 * it: they must match the run's own); a checkpoint without it, or whose
 * bytes do not give it, is refused; one recorded before the metadata was
 * hashed, of the tensors only, is accepted).
 */
#ifndef LLMKIT_EAGLE_IO_H
#define LLMKIT_EAGLE_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "eagle.h"
#include "model.h"
#include "status.h"

struct eagle_meta {
    char base_sha256[65];
    char base_name[128];
    char base_arch[32];         /* the base's general.architecture ("" in older heads:
                                 * not checked) */
    char data_sha256[65];
    uint64_t steps, tokens;
    int32_t *draft_ids;         /* NULL, or n_draft ascending token ids (read: malloc'd,
                                 * the caller frees it) */
    int64_t n_draft;
    /* checkpoints only */
    uint64_t ckpt_step, ckpt_seed;
    float ckpt_elapsed;
    char ckpt_options[256];
    uint64_t ckpt_prompts, ckpt_sequences;
    float ckpt_train_time;
};

/* eagle_meta_release() : frees meta's draft vocabulary and clears it. */
void eagle_meta_release(struct eagle_meta *meta);

/* eagle_base_sha256() : SHA-256 (hex) of m's tensor data section: the
 * identity a head is bound to.  0, -ST_NOMEM. */
int eagle_base_sha256(const struct model *m, char out[65]);

/* eagle_head_write() : writes h (+ the optimizer state m_, v_ when both
 * are non-NULL: a checkpoint) to path atomically.  0, -ST_IO, -ST_RANGE
 * (path refused: exists without force...), -ST_NOMEM. */
int eagle_head_write(const struct eagle_head *h, const struct eagle_meta *meta, const float *m_,
                     const float *v_, const char *path, bool force, struct diag *d);

/* eagle_head_read() : reads a head file into h (allocated like
 * eagle_head_init; release with eagle_head_release) and meta; with m_ and
 * v_ non-NULL a checkpoint's optimizer state too (malloc'd; -ST_FORMAT when
 * absent).  0, -ST_IO, -ST_FORMAT (message names the key or tensor),
 * -ST_NOMEM. */
int eagle_head_read(struct eagle_head *h, struct eagle_meta *meta, float **m_, float **v_,
                    const char *path, struct diag *d);

/* eagle_head_read_mem() : eagle_head_read() of a head file's bytes (no
 * optimizer state): for the fuzz harness. */
int eagle_head_read_mem(struct eagle_head *h, struct eagle_meta *meta, const void *data,
                        size_t size, struct diag *d);

/* eagle_head_check_base() : 0 when h was trained for m (architecture,
 * shape and base hash), else -ST_FORMAT with the reason. */
int eagle_head_check_base(const struct eagle_head *h, const struct eagle_meta *meta,
                          const struct model *m, struct diag *d);

#endif
