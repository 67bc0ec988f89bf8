/*
 * tok_pre.h - the pre-tokenizer table: every tokenizer.ggml.pre name llmkit
 * knows, with what llama.cpp does for it (its split regexes, in llama.cpp's
 * notation, and the vocabulary settings the name implies) and, where one has
 * been checked to split text the same way, the Hugging Face pre_tokenizer
 * that goes with it in a tokenizer.json.  The BPE tokenizer (tok_bpe.c) and
 * the HF converter (hf_vocab.c) both read it; a name is added here once.
 *
 * A name without an HF pre_tokenizer is still tokenized; converting its
 * vocabulary to HF writes GPT-2's and keeps the name in tokenizer_config.json
 * (hf.h), with a warning.
 */
#ifndef LLMKIT_TOK_PRE_H
#define LLMKIT_TOK_PRE_H

#include <stdbool.h>
#include <stddef.h>

#define TOK_PRE_MAX_RE 8            /* llama.cpp regexes of one pre-tokenizer */
#define TOK_PRE_HF_MAX_STEPS 8      /* steps of one flattened HF pre_tokenizer */

/* The contraction group: llama.cpp's spelling, and HF's (case-insensitive
 * flag) in tokenizer.json files; they match the same text. */
#define TOK_PRE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define TOK_PRE_HF_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"

/* What a name implies for the vocabulary (llama.cpp's llama_vocab::load). */
enum {
    TOK_PRE_ADD_BOS = 1,            /* add_bos defaults to true */
    TOK_PRE_IGNORE_MERGES = 2,      /* a piece that is a token is emitted whole */
    TOK_PRE_NO_CLEAN = 4,           /* clean_spaces = false */
    TOK_PRE_NO_BOS = 8,             /* the model has no BOS (chatglm4) */
    TOK_PRE_RAW = 16,               /* spaces -> U+2581 first, pieces stay raw UTF-8 (not
                                     * GPT-2 byte-encoded), byte fallback <0xXX> (gemma4) */
    TOK_PRE_MERGES_OPTIONAL = 32,   /* tokenizer.ggml.merges may be absent (kimi-k2) */
    TOK_PRE_NL_WHOLE = 64,          /* a piece of newlines that is a token is one (gemma4) */
};

/* Not a regex: llama.cpp's unicode_regex_split_custom_afmoe, which cuts each
 * run of \p{N} into groups of three from the right, the first group (1 or 2
 * digits when the run's length is not a multiple of 3, else 3) taking along
 * whatever preceded it since the last cut. */
#define TOK_PRE_RE_DIGITS3 "\\p{AFMoE_digits}"

/* ---- HF pre_tokenizers ---- */

enum tok_pre_hf_kind {
    TOK_PRE_HF_SPLIT,               /* Split, pattern.Regex, behavior Isolated */
    TOK_PRE_HF_BYTELEVEL,           /* ByteLevel, add_prefix_space false; flag = use_regex */
    TOK_PRE_HF_DIGITS,              /* Digits; flag = individual_digits */
    TOK_PRE_HF_PUNCT,               /* Punctuation, behavior Contiguous */
};

struct tok_pre_hf_step {
    enum tok_pre_hf_kind kind;
    const char *regex;              /* SPLIT: HF's spelling */
    int flag;
};

/* One HF pre_tokenizer, as the steps of its flattened Sequence. */
struct tok_pre_hf {
    const char *name;               /* the tokenizer.ggml.pre a tokenizer.json with these
                                     * steps is given when nothing says more */
    bool ignore_merges;             /* the tokenizer.json model's ignore_merges */
    int n_steps;
    struct tok_pre_hf_step steps[TOK_PRE_HF_MAX_STEPS];
};

/* ---- the table ---- */

struct tok_pre {
    const char *names;              /* space-separated tokenizer.ggml.pre values */
    unsigned flags;                 /* TOK_PRE_* */
    const char *re[TOK_PRE_MAX_RE]; /* llama.cpp's regexes, applied in order */
    const struct tok_pre_hf *hf;    /* the HF pre_tokenizer, or NULL */
};

/* tok_pre_find() : the entry of a tokenizer.ggml.pre name, or NULL. */
const struct tok_pre *tok_pre_find(const char *name);

/* tok_pre_hf_get() : the i-th HF pre_tokenizer, in the order a
 * tokenizer.json is matched against them (GPT-2's first: the fallback), or
 * NULL when i is past the last. */
const struct tok_pre_hf *tok_pre_hf_get(size_t i);

#endif
