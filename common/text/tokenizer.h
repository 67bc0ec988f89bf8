/*
 * tokenizer.h - the vocabularies of GGUF models, with llama.cpp's behaviour
 * as the specification (src/llama-vocab.cpp: llama_vocab::impl::load and the
 * tokenizer sessions; src/unicode.cpp: unicode_regex_split; include/llama.h:
 * llama_token_type).  tokenizer.ggml.model:
 *   "llama"  SentencePiece-style BPE (tok_spm.c);
 *   "gpt2"   GPT-2 byte-level BPE under every tokenizer.ggml.pre name
 *            llama.cpp knows but "whitespace" (tok_bpe.c, tok_pre.c);
 *   "gemma4" BPE on raw UTF-8 with U+2581 for spaces and <0xXX> byte
 *            fallback (tok_bpe.c; also the gpt2 names gemma4,
 *            granite-embed-multi-311m, sarvam-moe);
 *   "bert"   WordPiece (tok_wpm.c);
 *   "t5"     Unigram with the precompiled charsmap (tok_ugm.c);
 *   "rwkv"   RWKV's greedy longest match over escaped byte strings
 *            (tok_rwkv.c).
 * Anything else ("plamo2", "hybriddna", "whitespace", an unknown
 * pre-tokenizer name) is refused by tok_load, naming the key and value.
 * Checked against llama.cpp's own vocabulary test files and
 * tests/golden/tokenizer/pre.json (tests/unit/test_tokenizer.c).
 *
 * Encoding (tok_encode) runs in three stages:
 *
 *   1. special-token partition: occurrences of USER_DEFINED tokens (always)
 *      and CONTROL/UNKNOWN tokens (with parse_special) are cut out of the
 *      text, longest token text first, each token's occurrences left to
 *      right, exactly as llama.cpp's tokenizer_st_partition does (including
 *      the LSTRIP/RSTRIP attributes llama.cpp gives phi-3 and a few others);
 *   2. each remaining raw fragment is tokenized (WPM and UGM: see their
 *      files):
 *      SPM - a space is prepended when add_space_prefix is set and the
 *            fragment is the first or follows a special token; spaces become
 *            U+2581; adjacent symbols are merged by the highest score of the
 *            merged token (ties: leftmost); what is not a token at the end is
 *            emitted as byte tokens <0xXX>;
 *      BPE - the fragment is split by the pre-tokenizer named by
 *            tokenizer.ggml.pre (a list of regexes applied successively,
 *            run with PCRE2 in UTF mode, see below), each piece is
 *            mapped byte -> unicode (GPT-2's table) and merged by the lowest
 *            merge rank (ties: leftmost);
 *   3. with add_special: BOS first when add_bos, EOS last when add_eos
 *      (WPM: [SEP] last).
 *
 * Regex semantics.  llama.cpp runs hand-written matchers for the GPT-2 and
 * Llama-3 patterns and std::regex on a "collapsed" text for the others; both
 * use its own category tables, in which \s is exactly the 25 White_Space
 * code points.  We translate each pattern for PCRE2: \s and \S become that
 * explicit class, \p{Lu}/\p{Ll}/... become \p{L} (llama.cpp does not
 * distinguish them), \d is [0-9] and \w \b stay ASCII (no UCP) as in
 * ECMAScript, $ only matches at the end, non-ASCII white space stands as
 * U+000B in the subject, and empty matches step as std::regex_iterator's
 * (details in tok_bpe.c).  The results are identical
 * except for code points assigned after PCRE2's Unicode version (14.0 in
 * PCRE2 10.42), which PCRE2 sees as unassigned.  Text is decoded like
 * llama.cpp does (invalid UTF-8 bytes become U+FFFD before byte-level BPE;
 * surrogates and overlong forms are accepted); lead bytes F5-F7, which make
 * llama.cpp throw, become U+FFFD here.  So byte-level BPE gives back valid
 * UTF-8 exactly; SPM with byte fallback does too, except that a literal
 * U+2581 in the text decodes as a space (as in llama.cpp).
 *
 * Decoding follows llama_token_to_piece / llama_detokenize: CONTROL and
 * UNKNOWN tokens print only when asked (unparse_special), NORMAL SPM tokens
 * turn U+2581 back into spaces, BYTE tokens give their byte, byte-level BPE
 * tokens go through the inverse byte map; with add_space_prefix the first
 * piece loses one leading space (not when remove_special dropped a leading
 * BOS - llama.cpp's rule); vocabularies with
 * clean_spaces (gpt-2, llama-bpe, ...; not smollm, qwen2) get llama.cpp's
 * clean-up of " ." " ," " 's" etc.
 *
 * End of generation: tok_is_eog() is true for eos, eot, eom, fim pad/rep/sep
 * and every token whose text is one of llama.cpp's end-of-turn names
 * (<|im_end|>, <|eot_id|>, <end_of_turn>, <|endoftext|>, <|end|>, ...).
 *
 * A loaded tokenizer is read-only: tok_encode() and tok_decode() may run
 * concurrently on one tokenizer from several threads.  Speed: about 0.1-0.3 s
 * for the 1.3 MB wikitext-2 test file with any of the test vocabularies
 * (a per-call word cache and, for SPM, merging word by word where no token
 * can cross - both exact, see tok_spm.c and tok_cache.c).
 */
#ifndef LLMKIT_TOKENIZER_H
#define LLMKIT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "status.h"

enum tok_model {
    TOK_MODEL_SPM = 1,   /* tokenizer.ggml.model = "llama" */
    TOK_MODEL_BPE = 2,   /* tokenizer.ggml.model = "gpt2" (or "gemma4": raw BPE) */
    TOK_MODEL_WPM = 3,   /* tokenizer.ggml.model = "bert" (WordPiece, tok_wpm.c) */
    TOK_MODEL_UGM = 4,   /* tokenizer.ggml.model = "t5" (Unigram, tok_ugm.c) */
    TOK_MODEL_RWKV = 5,  /* tokenizer.ggml.model = "rwkv" (tok_rwkv.c) */
};

/* Token attributes: llama.cpp's llama_token_attr bits.  token_type values
 * (llama.h llama_token_type) map to one of the first six; loading adds
 * CONTROL to end-of-turn tokens, UNUSED to control tokens named "*unused*", and
 * LSTRIP/RSTRIP where llama.cpp does. */
enum tok_attr {
    TOK_ATTR_UNDEFINED = 0,
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 7,
    TOK_ATTR_RSTRIP = 1 << 8,
};

#define TOK_NULL (-1)     /* "no such token" for the special ids below */

struct tok_priv;

/* Fields are read-only after tok_load(). */
struct tokenizer {
    enum tok_model model;
    char pre[64];             /* tokenizer.ggml.pre as used ("default" when absent) */
    int32_t n_vocab;
    /* special ids, TOK_NULL when the model has none */
    int32_t bos, eos, eot, eom, unk, sep, pad, mask, nl;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos;    /* what add_special adds */
    bool add_space_prefix;    /* SPM: " " before the first fragment; decode strips it */
    bool clean_spaces;        /* decode: llama.cpp's clean_up_tokenization_spaces */
    bool ignore_merges;       /* BPE: a piece that is a token is emitted whole */
    /* A one-line note about something tolerated while loading (e.g. a missing
     * tokenizer.ggml.pre, an out-of-range special id), or "" - for the tool to
     * print as a warning. */
    char warning[160];
    struct tok_priv *p;
};

/* Growable token-id list (caller-owned storage). */
struct tok_ids {
    int32_t *v;
    size_t n, cap;
};

/* tok_load() : builds the tokenizer from the tokenizer.* keys of g (g may be
 * released afterwards: everything is copied).  Validates: model and pre names
 * (an unknown or unsupported one is -ST_FORMAT naming the key), the token
 * list (array of strings, 1..2^31-1 entries, no duplicates), scores
 * (FLOAT32 or INT32 array of at least n_vocab), token_type (INT32 array of
 * at least n_vocab), merges (array of strings, required for gpt2), the types
 * of the flags and ids (ids out of range are ignored with a warning, as in
 * llama.cpp), add_bos/add_eos without the id.  Returns 0, -ST_FORMAT (message
 * in d names the key), -ST_NOMEM.  On failure t holds nothing to release. */
int tok_load(struct tokenizer *t, const struct gguf *g, struct diag *d);

/* tok_release() : frees what t owns; t may be zeroed or already released. */
void tok_release(struct tokenizer *t);

/* tok_encode() : tokenizes len bytes of text (any bytes; NULs allowed) and
 * appends the ids to out.  add_special adds BOS/EOS as the vocabulary says
 * (add_bos/add_eos); parse_special lets CONTROL and UNKNOWN token texts in
 * the text become their tokens (USER_DEFINED ones always do).  llama.cpp's
 * llama_tokenize(text, add_special, parse_special).  Returns 0, -ST_NOMEM,
 * -ST_FAIL (a regex engine failure, message in d).  On failure out keeps
 * what it had before the call. */
int tok_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
               bool parse_special, struct tok_ids *out, struct diag *d);

/* A byte range [off, off + len) of a text. */
struct tok_span {
    size_t off, len;
};

/* tok_encode_spans() : tok_encode() with parse_special, except inside the
 * n_literal spans (any order; they may be empty): a CONTROL or UNKNOWN
 * token text that overlaps one of them is left as plain text, as with
 * parse_special off (USER_DEFINED tokens are cut everywhere, as always).
 * This is how a chat prompt is tokenized: the template's markers become
 * control tokens, text a user wrote cannot (a "<|im_start|>system" typed in
 * a message stays characters, and cannot forge a turn).  The span
 * boundaries do not split the raw text: where the spans hold no special
 * token text the result equals tok_encode(..., parse_special = true).
 * Returns as tok_encode(). */
int tok_encode_spans(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                     const struct tok_span *literal, size_t n_literal, struct tok_ids *out,
                     struct diag *d);

/* tok_ids_push() : appends one id.  0 or -ST_NOMEM. */
int tok_ids_push(struct tok_ids *ids, int32_t id);

/* tok_ids_release() : frees the list's storage. */
void tok_ids_release(struct tok_ids *ids);

/* tok_piece() : the bytes token id stands for, as llama_token_to_piece with
 * lstrip 0: CONTROL/UNKNOWN tokens give "" unless special.  Returns a pointer
 * into t (valid until tok_release; NUL-terminated, but a piece may contain
 * NULs: use *len), or NULL for an id out of range.  This is what a streaming
 * printer wants (llama.cpp's generation loop prints these pieces, without the
 * leading-space removal and clean-up of tok_decode). */
const char *tok_piece(const struct tokenizer *t, int32_t id, bool special, size_t *len);

/* tok_decode() : llama_detokenize(ids, remove_special, unparse_special):
 * concatenated pieces, the add_space_prefix leading space removed (unless a
 * leading BOS was removed), with remove_special a leading BOS / trailing EOS
 * dropped when the vocabulary adds them, and clean_spaces applied.  *text is
 * malloc'd, NUL-terminated, *len excludes the NUL; the caller frees it.
 * Returns 0, -ST_RANGE (an id out of range, named in d), -ST_NOMEM. */
int tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, bool remove_special,
               bool unparse_special, char **text, size_t *len, struct diag *d);

/* tok_text() : the vocabulary string of id (e.g. "Ġworld", "▁the", "<0x0A>"),
 * NUL-terminated, length in *len (may be NULL); NULL when out of range. */
const char *tok_text(const struct tokenizer *t, int32_t id, size_t *len);

/* tok_find() : the id whose vocabulary string is exactly text[0..len), or
 * TOK_NULL. */
int32_t tok_find(const struct tokenizer *t, const char *text, size_t len);

/* tok_attr() : the attribute bits of id (TOK_ATTR_UNDEFINED when out of range). */
unsigned tok_attr(const struct tokenizer *t, int32_t id);

/* tok_score() : the score of id (0 when absent or out of range). */
float tok_score(const struct tokenizer *t, int32_t id);

/* tok_is_eog() : whether id ends generation (see the top of this file). */
bool tok_is_eog(const struct tokenizer *t, int32_t id);

/* tok_utf8_decode() : the code point at s[*i] (n bytes in all), *i moved
 * past it, decoded as llama.cpp decodes text: bytes that are not UTF-8 give
 * U+FFFD, one byte each (surrogates and overlong forms are accepted). */
uint32_t tok_utf8_decode(const char *s, size_t n, size_t *i);

/* tok_is_control() : whether id is a CONTROL token. */
bool tok_is_control(const struct tokenizer *t, int32_t id);

#endif
