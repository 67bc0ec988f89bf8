/*
 * tok_priv.h - internals shared by the files of the tokenizer: tokenizer.c
 * (loading, the special-token partition, the encode driver, decoding) on
 * top, tok_spm.c and tok_bpe.c (the two algorithms) below it, and the
 * pieces both use: tok_vocab.c (the string -> id map, id lists),
 * tok_cache.c (word cache) and tok_utf8.c.  Calls go down only: nothing
 * below tokenizer.c calls into it.  Not part of the library's interface:
 * use tokenizer.h.
 *
 * Public types appear here by pointer only, so this header includes no
 * header of ours; the .c files include tokenizer.h for their fields.
 */
#ifndef LLMKIT_TOK_PRIV_H
#define LLMKIT_TOK_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct diag;
struct gguf;
struct tok_ids;
struct tok_span;
struct tokenizer;

#define TOK_MAX_RE 8          /* regexes in one pre-tokenizer */

struct tok_entry {
    uint32_t off, len;        /* text: p->text + off, NUL-terminated */
    uint32_t piece_off, piece_len;   /* tok_piece(special = true): p->piece + piece_off */
    float score;
    uint32_t attr;
};

/* Trie over the texts of the special (CONTROL / USER_DEFINED / UNKNOWN)
 * tokens, used to find which of them occur in a text before the partition
 * runs.  Children of a node form a sibling list; the root's are indexed by
 * the first byte. */
struct tok_trie {
    uint32_t child, sibling;  /* node index, 0 = none (node 0 is the root) */
    int32_t id;               /* token ending here, or -1 */
    uint8_t byte;
};

/* special tokens longer than this are found with memmem instead of the trie,
 * so that the trie walk at each text position stays short */
#define TOK_TRIE_MAX_LEN 256

struct tok_priv {
    char *text;               /* all token strings, each followed by a NUL */
    size_t text_len;
    struct tok_entry *tok;    /* n_vocab */
    uint64_t *map;            /* open addressing: hash << 32 | (id + 1); 0 = empty */
    uint32_t map_mask;
    char *piece;              /* all pieces, each followed by a NUL */
    uint32_t max_len;         /* the longest token text, bytes */
    bool wpm_lower, wpm_strip;   /* WPM: BertNormalizer's lowercase, strip_accents */
    /* UGM: tokenizer.ggml.precompiled_charsmap (a copy: its XCDA, then the
     * NUL-terminated replacements), flags, the unknown token's score */
    uint8_t *ugm_map;
    size_t ugm_map_n;
    bool ugm_merge_spaces, ugm_has_user;
    double ugm_unk_score;
    /* RWKV: the unescaped bytes of every token (rw_text + rw[id].off), and
     * an open-addressing map over them (hash << 32 | (id + 1)) */
    char *rw_text;
    struct tok_span *rw;
    uint64_t *rw_map;
    uint32_t rw_mask, rw_max;
    uint8_t *eog;             /* bitmap over ids */
    /* special tokens in partition order: longest text first, then lower id */
    int32_t *special;
    uint32_t n_special;
    uint32_t *special_rank;   /* id -> index in special, or UINT32_MAX */
    struct tok_trie *trie;
    uint32_t n_trie, cap_trie;
    uint32_t trie_root[256];
    uint32_t *long_special;   /* indices into special of the longer texts */
    uint32_t n_long;
    /* SPM byte fallback: token of <0xXX> (else of the one-byte string);
     * BPE: token of the one-byte string.  -1 = none. */
    int32_t byte_tok[256];
    /* SPM: ASCII bytes that no token of two or more bytes contains; a symbol
     * made of one of them never merges, so the merge loop runs separately on
     * the runs between them (same result, smaller queues) */
    uint8_t spm_barrier[128];
    /* SPM: no token contains "X\u2581" for an ASCII X with glue[X] == 0 (and
     * for any non-ASCII X when !glue_nonascii), so a U+2581 after such an X
     * starts a word no merge crosses (see tok_spm.c) */
    uint8_t spm_glue[128];
    bool spm_glue_nonascii;
    /* BPE merges: for rank r, left = mtext + merge[r].l (ll bytes), right
     * likewise; mmap is open addressing over (left, right) -> rank + 1. */
    char *mtext;
    struct { uint32_t l, ll, r, rl; } *merge;
    uint32_t n_merges;
    uint64_t *mmap;           /* hash << 32 | (rank + 1); 0 = empty */
    uint32_t mmap_mask;
    /* Reference mode (tests and the fuzzer set it): the exact shortcuts of
     * tok_spm.c and the word cache are off, so both paths can be compared. */
    bool reference;
    /* BPE pre-tokenizer: compiled PCRE2 patterns (pcre2_code_8 *); NULL for
     * TOK_PRE_RE_DIGITS3, which tok_bpe.c runs itself (re_num then finds the
     * runs of \p{N}) */
    void *re[TOK_MAX_RE];
    int n_re;
    void *re_num;
    /* BPE without GPT-2's byte encoding (tokenizer.ggml.model "gemma4"):
     * spaces become U+2581 before splitting, pieces are raw UTF-8, bytes fall
     * back to <0xXX>; nl_whole: a piece of newlines that is a token is one */
    bool bpe_raw, nl_whole;
};

/* FNV-1a over bytes, continuing from h (start with TOK_HASH_INIT). */
#define TOK_HASH_INIT 2166136261u
static inline uint32_t
tok_hash(uint32_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    return h;
}

/* ---- tok_cache.c: words tokenized in this call -> ids ---- */

#define TOK_WCACHE_MAX_WORD 64

struct tok_wcache {
    void *slot;
    size_t n;
    char *text;
    size_t text_n, text_cap;
    int32_t *ids;
    size_t ids_n, ids_cap;
};

/* tok_wcache_get() : appends the cached ids of word (hash h) and sets *hit.
 * 0 or -ST_NOMEM. */
int tok_wcache_get(const struct tok_wcache *c, const char *word, size_t n, uint32_t h,
                   struct tok_ids *out, bool *hit);
/* tok_wcache_put() : remembers word -> ids (best effort). */
void tok_wcache_put(struct tok_wcache *c, const char *word, size_t n, uint32_t h,
                    const int32_t *ids, size_t n_ids);
void tok_wcache_release(struct tok_wcache *c);

/* ---- tok_utf8.c ---- */

/* tok_utf8_len() : length of the UTF-8 sequence a lead byte announces, as
 * llama.cpp's unicode_len_utf8 (by the top 4 bits: 1, 2, 3 or 4). */
static inline size_t
tok_utf8_len(uint8_t c)
{
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[c >> 4];
}

/* tok_utf8_next() : decodes one code point at s[*i] (n bytes total) the way
 * llama.cpp's unicode_cpts_from_utf8 does: continuation bytes are checked,
 * overlong forms and surrogates are accepted; an invalid sequence consumes
 * one byte and gives U+FFFD (so do 4-byte forms above U+10FFFF). */
uint32_t tok_utf8_next(const char *s, size_t n, size_t *i);

/* tok_utf8_put() : writes cp (<= 0x10FFFF, surrogates included) as UTF-8 into
 * out (4 bytes of room); returns the byte count. */
size_t tok_utf8_put(uint32_t cp, char *out);

/* GPT-2 byte <-> unicode table: the UTF-8 of the code point byte b stands
 * for (1 or 2 bytes), and the inverse: the byte for a code point, or -1. */
extern const char tok_byte_utf8[256][3];
int tok_unicode_byte(uint32_t cp);

/* ---- tok_vocab.c ---- */

/* tok_lookup() : id of the exact string, or -1. */
int32_t tok_lookup(const struct tok_priv *p, const char *s, size_t n);

/* tok_lookup_hashed() : tok_lookup() given h = tok_hash(TOK_HASH_INIT, s, n)
 * (so that a caller growing a prefix byte by byte hashes it once). */
int32_t tok_lookup_hashed(const struct tok_priv *p, const char *s, size_t n, uint32_t h);

/* tok_map_insert() : enters token id (whose text is set) into the map;
 * returns the id already holding the same text, or -1. */
int32_t tok_map_insert(struct tok_priv *p, int32_t id);


/* ---- tok_spm.c ---- */

/* tok_spm_encode() : one raw fragment; space_prefix prepends " " first.
 * *state holds buffers and caches reused across the fragments of one
 * tok_encode call (NULL at first; freed with tok_spm_state_free). */
struct tok_spm_state;
int tok_spm_encode(const struct tokenizer *t, struct tok_spm_state **state, const char *text,
                   size_t len, bool space_prefix, struct tok_ids *out);
void tok_spm_state_free(struct tok_spm_state *st);

/* ---- tok_wpm.c ---- */

/* tok_wpm_encode() : one raw fragment through WordPiece.  0 or -ST_NOMEM. */
int tok_wpm_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out);

/* ---- tok_ugm.c ---- */

/* tok_ugm_setup() : reads tokenizer.ggml.precompiled_charsmap and
 * remove_extra_whitespaces, computes the unknown score.  -ST_FORMAT /
 * -ST_NOMEM. */
int tok_ugm_setup(struct tokenizer *t, const struct gguf *g, struct diag *d);

/* tok_ugm_encode() : one raw fragment through Unigram.  0, -ST_NOMEM, or
 * -ST_FORMAT (the charsmap leads out of itself; message in d). */
int tok_ugm_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out,
                   struct diag *d);

/* ---- tok_rwkv.c ---- */

/* tok_rwkv_setup() : unescapes the token texts.  0 or -ST_NOMEM. */
int tok_rwkv_setup(struct tokenizer *t, struct diag *d);

/* tok_rwkv_bytes() : the bytes token id stands for. */
const char *tok_rwkv_bytes(const struct tok_priv *p, int32_t id, size_t *len);

/* tok_rwkv_encode() : one raw fragment, longest match.  0 or -ST_NOMEM. */
int tok_rwkv_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out);

/* ---- tok_bpe.c ---- */

/* tok_bpe_setup() : reads the merges, picks and compiles the pre-tokenizer
 * named by pre (NULL = absent) and sets the flags it implies (add_bos,
 * clean_spaces, ignore_merges; bos for chatglm4).  -ST_FORMAT / -ST_NOMEM. */
int tok_bpe_setup(struct tokenizer *t, const struct gguf *g, const char *pre, struct diag *d);

/* tok_bpe_encode() : one raw fragment; *state as for tok_spm_encode. */
struct tok_bpe_state;
int tok_bpe_encode(const struct tokenizer *t, struct tok_bpe_state **state, const char *text,
                   size_t len, struct tok_ids *out, struct diag *d);
void tok_bpe_state_free(struct tok_bpe_state *st);

/* tok_bpe_release() : frees merges and regexes. */
void tok_bpe_release(struct tok_priv *p);

/* tok_bpe_decode_text() : llama_decode_text: each code point of s back to its
 * byte through the inverse table; one that is not in the table is written as
 * "[UNK_BYTE_0x<hex>" + s + "]" like llama.cpp.  Appends to *buf (grown
 * with realloc).  0 or -ST_NOMEM. */
int tok_bpe_decode_text(const char *s, size_t n, char **buf, size_t *len, size_t *cap);

#endif
