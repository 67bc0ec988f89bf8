/*
 * fuzz_tokenizer.c - libFuzzer harness for the tokenizers (common/text/tokenizer.h).
 *
 * The vocabularies are built once: a small SentencePiece vocabulary (byte
 * fallback, user-defined and control tokens), a small byte-level BPE
 * vocabulary with merges under twenty pre-tokenizer names (so every kind of
 * translated regex runs: non-ASCII classes, \p{S}, empty matches, the digit
 * grouping, kimi-k2's pattern) and as gemma4's raw BPE, a small WordPiece
 * vocabulary, a small Unigram one (with a charsmap mapping "A" to "a") and a
 * small RWKV one (escaped byte strings); plus ggml-vocab-gpt-2 and ggml-vocab-llama-spm from
 * $LLMKIT_SHARED/vocab (default ../shared/vocab) when present.
 *
 * Input: byte 0 picks the vocabulary (bits 0-3, and bit 6 when bit 7 is
 * clear) and the flags (bit 4 add_special, bit 5 parse_special); the rest is
 * the text.  When the top two
 * bits of byte 0 are both set, the rest is instead a GGUF file whose
 * vocabulary is loaded (tok_load must accept or reject it cleanly) and, when
 * it loads, used on a fixed text.  For each text input:
 *   - every id is in range, BOS/EOS appear as the flags say;
 *   - the shortcut path and the reference path (tok_priv.h) give the same ids;
 *   - decoding works with every flag combination;
 *   - the pieces reproduce valid UTF-8 text exactly when no special token
 *     was produced (and, for SPM, the text has no U+2581, which decodes as a
 *     space).  Invalid UTF-8 is not lossless in llama.cpp either: byte-level
 *     BPE sees U+FFFD, and in SPM a broken lead byte can swallow part of an
 *     escaped space, which then decodes as raw bytes.
 * A violation aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tok_priv.h"
#include "tokenizer.h"
#include "xio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_VOCABS 32

static struct tokenizer vocabs[MAX_VOCABS];
static int n_vocabs;
static bool lossless[MAX_VOCABS];

static const char *const spm_words[] = {
    "\xe2\x96\x81", "\xe2\x96\x81t", "\xe2\x96\x81th", "\xe2\x96\x81the", "th", "he", "the",
    "e", "t", "h", "a", "n", "d", "i", "g", "s", "o", "\xe2\x96\x81" "a", "an", "\xe2\x96\x81" "an",
    "nd", "and", "\xe2\x96\x81" "and", "in", "ing", "\xe2\x96\x81in", "\xe2\x96\x81\xe2\x96\x81",
    "\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81", "is", "\xe2\x96\x81is", "on", "\xe2\x96\x81on", ".",
    ",", "\xc3\xa9", "\xe2\x96\x81\xc3\xa9t\xc3\xa9", NULL};

static void
die(const char *what, const struct diag *d)
{
    fprintf(stderr, "fuzz_tokenizer: %s: %s\n", what, d ? d->msg : "");
    abort();
}

static void
build_spm(void)
{
    const char *strs[400];
    float scores[400];
    int32_t types[400];
    char bytes[256][7];
    struct gguf g;
    struct diag d;
    int n = 0, i;

    gguf_init(&g);
    strs[n] = "<unk>", types[n] = 2, scores[n++] = 0;
    strs[n] = "<s>", types[n] = 3, scores[n++] = 0;
    strs[n] = "</s>", types[n] = 3, scores[n++] = 0;
    for (i = 0; i < 256; i++) {
        snprintf(bytes[i], sizeof(bytes[i]), "<0x%02X>", i);
        strs[n] = bytes[i], types[n] = 6, scores[n++] = 0;
    }
    for (i = 0; spm_words[i]; i++)
        strs[n] = spm_words[i], types[n] = 1, scores[n++] = -(float)((i * 7) % 23);
    strs[n] = "<|user|>", types[n] = 4, scores[n++] = 0;
    strs[n] = "  ", types[n] = 4, scores[n++] = 0;
    strs[n] = "<|im_start|>", types[n] = 3, scores[n++] = 0;
    strs[n] = "<|im_end|>", types[n] = 3, scores[n++] = 0;
    strs[n] = "<|im_end|>x", types[n] = 3, scores[n++] = 0;
    if (gguf_set_str(&g, "tokenizer.ggml.model", "llama") < 0 ||
        gguf_set_arr_str(&g, "tokenizer.ggml.tokens", strs, NULL, (uint64_t)n) < 0 ||
        gguf_set_arr(&g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n) < 0 ||
        gguf_set_arr(&g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n) < 0)
        die("building the SPM vocabulary", NULL);
    if (tok_load(&vocabs[n_vocabs], &g, &d) < 0)
        die("loading the SPM vocabulary", &d);
    lossless[n_vocabs++] = true;
    gguf_release(&g);
}

static void
build_bpe(const char *pre, bool raw)
{
    static const char *const merges[] = {
        "\xc4\xa0 t", "\xc4\xa0t h", "h e", "\xc4\xa0th e", "i n", "in g", "a n", "\xc4\xa0 a",
        "\xc4\xa0" "a n", "n d", "\xc4\xa0" "an d", "\xc4\xa0 \xc4\xa0", "\xc4\x8a \xc4\x8a", "1 2",
        "12 3", "' s", "o n", "\xc4\xa0 o", "\xc4\xa0o n", "\xc3\x83 \xc2\xa9", NULL};
    const char *strs[400];
    char results[32][16];
    int32_t types[400];
    struct gguf g;
    struct diag d;
    int n = 0, i, m = 0;

    gguf_init(&g);
    for (i = 0; i < 256; i++)
        strs[n] = tok_byte_utf8[i], types[n++] = 1;
    for (i = 0; merges[i]; i++, m++) {
        const char *sp = strchr(merges[i], ' ');

        snprintf(results[i], sizeof(results[i]), "%.*s%s", (int)(sp - merges[i]), merges[i],
                 sp + 1);
        strs[n] = results[i], types[n++] = 1;
    }
    strs[n] = "<|endoftext|>", types[n++] = 3;
    strs[n] = "<|im_start|>", types[n++] = 3;
    strs[n] = "<|im_end|>", types[n++] = 3;
    strs[n] = "<user>", types[n++] = 4;
    strs[n] = "<unused7>", types[n++] = 3;
    if (gguf_set_str(&g, "tokenizer.ggml.model", raw ? "gemma4" : "gpt2") < 0 ||
        gguf_set_str(&g, "tokenizer.ggml.pre", pre) < 0 ||
        gguf_set_arr_str(&g, "tokenizer.ggml.tokens", strs, NULL, (uint64_t)n) < 0 ||
        gguf_set_arr(&g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n) < 0 ||
        gguf_set_arr_str(&g, "tokenizer.ggml.merges", (const char *const *)merges, NULL,
                         (uint64_t)m) < 0 ||
        gguf_set_u32(&g, "tokenizer.ggml.bos_token_id", 256 + (uint32_t)m) < 0 ||
        gguf_set_u32(&g, "tokenizer.ggml.eos_token_id", 256 + (uint32_t)m + 2) < 0 ||
        gguf_set_bool(&g, "tokenizer.ggml.add_eos_token", true) < 0)
        die("building a BPE vocabulary", NULL);
    if (tok_load(&vocabs[n_vocabs], &g, &d) < 0)
        die(pre, &d);
    /* raw BPE: the byte characters are not its byte tokens */
    lossless[n_vocabs++] = !raw;
    gguf_release(&g);
}

/* WordPiece: lowercased, accents stripped, punctuation split: not lossless */
static void
build_wpm(void)
{
    static const char *const words[] = {
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\xe2\x96\x81the", "\xe2\x96\x81hello",
        "\xe2\x96\x81world", "ing", "s", "\xe2\x96\x81" "a", "\xe2\x96\x81", ",", "\xe2\x96\x81,",
        "\xe2\x96\x81" "e", "t", "e", "\xe2\x96\x81\xe4\xb8\xad", "\xe2\x96\x81" "cafe", "x", NULL};
    int32_t types[32];
    struct gguf g;
    struct diag d;
    int n;

    for (n = 0; words[n]; n++)
        types[n] = n < 5 ? 3 : 1;
    gguf_init(&g);
    if (gguf_set_str(&g, "tokenizer.ggml.model", "bert") < 0 ||
        gguf_set_arr_str(&g, "tokenizer.ggml.tokens", words, NULL, (uint64_t)n) < 0 ||
        gguf_set_arr(&g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n) < 0 ||
        gguf_set_u32(&g, "tokenizer.ggml.bos_token_id", 2) < 0 ||
        gguf_set_u32(&g, "tokenizer.ggml.unknown_token_id", 1) < 0 ||
        gguf_set_u32(&g, "tokenizer.ggml.seperator_token_id", 3) < 0 ||
        gguf_set_u32(&g, "tokenizer.ggml.padding_token_id", 0) < 0 ||
        gguf_set_u32(&g, "tokenizer.ggml.mask_token_id", 4) < 0)
        die("building the WPM vocabulary", NULL);
    if (tok_load(&vocabs[n_vocabs], &g, &d) < 0)
        die("loading the WPM vocabulary", &d);
    lossless[n_vocabs++] = false;
    gguf_release(&g);
}

static void
load_shared(const char *name)
{
    const char *s = getenv("LLMKIT_SHARED");
    char path[4096];
    struct gguf g;
    struct diag d;

    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", s && *s ? s : "../shared", name);
    if (gguf_open(&g, path, &d) < 0)
        return;
    if (tok_load(&vocabs[n_vocabs], &g, &d) < 0)
        die(path, &d);
    /* gpt-2's vocabulary has all 256 byte characters; llama-spm has byte
     * fallback */
    lossless[n_vocabs++] = true;
    gguf_release(&g);
}

/* Unigram, with a precompiled charsmap built here: 256 XCDA nodes, the
 * root's children at their byte value; only 'A' (node 0x41: LCHECK 'A',
 * LEAF, BASE 1) is a prefix, whose value node (0x41 ^ 1) gives offset 0,
 * the replacement "a".  Normalized: not lossless. */
static void
build_ugm(void)
{
    static const char *const words[] = {
        "<pad>", "</s>", "<unk>", "\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "a", "ab",
        "\xe2\x96\x81" "ab", "<u>", "\xe4\xb8\xad", "c", NULL};
    uint8_t map[4 + 256 * 4 + 2] = {0};
    float scores[16];
    int32_t types[16];
    struct gguf g;
    struct diag d;
    uint32_t node = 1u << 10 | 1u << 8 | 0x41;
    int n;

    map[1] = 4;                                   /* blob size 1024 */
    memcpy(map + 4 + 4 * 0x41, &node, 4);         /* little-endian hosts */
    map[4 + 1024] = 'a';
    for (n = 0; words[n]; n++) {
        types[n] = n < 3 ? (n == 2 ? 2 : 3) : n == 9 ? 4 : 1;
        scores[n] = -(float)((n * 5) % 7) - 1.0f;
    }
    gguf_init(&g);
    if (gguf_set_str(&g, "tokenizer.ggml.model", "t5") < 0 ||
        gguf_set_arr_str(&g, "tokenizer.ggml.tokens", words, NULL, (uint64_t)n) < 0 ||
        gguf_set_arr(&g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n) < 0 ||
        gguf_set_arr(&g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n) < 0 ||
        gguf_set_arr(&g, "tokenizer.ggml.precompiled_charsmap", GGUF_TYPE_UINT8, map,
                     sizeof(map)) < 0 ||
        gguf_set_bool(&g, "tokenizer.ggml.add_space_prefix", true) < 0 ||
        gguf_set_bool(&g, "tokenizer.ggml.remove_extra_whitespaces", true) < 0)
        die("building the UGM vocabulary", NULL);
    if (tok_load(&vocabs[n_vocabs], &g, &d) < 0)
        die("loading the UGM vocabulary", &d);
    lossless[n_vocabs++] = false;
    gguf_release(&g);
}

/* RWKV: escaped byte strings, a control token; bytes without a token are UNK */
static void
build_rwkv(void)
{
    static const char *const words[] = {
        "<unk>", "a", "b", "ab", "\\n", "\\x00", "\\xff\\xfe", "\\t\\r", " ", " the",
        "\\\\", "\\x4", "x\\", "<|end|>", NULL};
    int32_t types[16];
    struct gguf g;
    struct diag d;
    int n;

    for (n = 0; words[n]; n++)
        types[n] = n == 0 ? 2 : n == 13 ? 3 : 1;
    gguf_init(&g);
    if (gguf_set_str(&g, "tokenizer.ggml.model", "rwkv") < 0 ||
        gguf_set_arr_str(&g, "tokenizer.ggml.tokens", words, NULL, (uint64_t)n) < 0 ||
        gguf_set_arr(&g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n) < 0 ||
        gguf_set_u32(&g, "tokenizer.ggml.unknown_token_id", 0) < 0)
        die("building the RWKV vocabulary", NULL);
    if (tok_load(&vocabs[n_vocabs], &g, &d) < 0)
        die("loading the RWKV vocabulary", &d);
    lossless[n_vocabs++] = false;
    gguf_release(&g);
}

static void
init(void)
{
    static const char *const pres[] = {"gpt-2", "llama-bpe", "qwen2", "deepseek-coder",
                                       "falcon", "default", "smollm", "tekken", "gpt-4o",
                                       "poro-chat"};
    /* slots 13..: the pre-tokenizers with llama.cpp's newer regexes */
    static const char *const pres2[] = {"deepseek-llm", "deepseek-v3", "superbpe", "afmoe",
                                        "tiny_aya", "kimi-k2", "chameleon", "jais-2",
                                        "exaone-moe", "youtu", "granite-embed-multi-97m",
                                        "qwen35", "spark2_5", "minicpm5", "laguna"};
    size_t i;

    build_spm();
    for (i = 0; i < sizeof(pres) / sizeof(pres[0]); i++)
        build_bpe(pres[i], false);
    load_shared("gpt-2");
    load_shared("llama-spm");
    while (n_vocabs < 13)        /* keep the slots of the later ones fixed */
        build_bpe("gpt-2", false);
    for (i = 0; i < sizeof(pres2) / sizeof(pres2[0]); i++)
        build_bpe(pres2[i], false);
    build_bpe("gemma4", true);
    build_wpm();
    build_ugm();
    build_rwkv();
}

/* strictly valid UTF-8 (no overlong forms, no surrogates, <= U+10FFFF) */
static bool
valid_utf8(const uint8_t *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        uint8_t c = s[i];
        size_t k, len;
        uint32_t cp;

        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            len = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            len = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            len = 4, cp = c & 0x07;
        else
            return false;
        if (n - i < len)
            return false;
        for (k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    struct tokenizer *t;
    struct tok_ids ids = {0}, ref = {0};
    struct diag d;
    bool add_special, parse_special, any_special = false;
    const char *text;
    size_t len, i, pl, total = 0;
    char *dec = NULL, *cat;
    int v, k;

    if (!ready) {
        init();
        ready = true;
    }
    if (size < 1 || size > 65536)
        return 0;
    if ((data[0] & 0xC0) == 0xC0) {
        static const char sample[] = "Hello <|im_start|> w\xc3\xb6rld\n\n  12345 \xf0\x9f\xa6\x99";
        struct src s;
        struct gguf g;
        struct tokenizer lt;

        src_open_mem(&s, data + 1, size - 1, "fuzz");
        if (gguf_read(&g, &s, &d) == 0) {
            if (tok_load(&lt, &g, &d) == 0) {
                for (k = 0; k < 4; k++) {
                    if (tok_encode(&lt, sample, sizeof(sample) - 1, k & 1, k & 2, &ids, &d) < 0)
                        die("tok_encode (loaded vocabulary)", &d);
                    for (i = 0; i < ids.n; i++)
                        if (ids.v[i] < 0 || ids.v[i] >= lt.n_vocab)
                            die("id out of range (loaded vocabulary)", NULL);
                    if (tok_decode(&lt, ids.v, ids.n, k & 1, k & 2, &dec, &pl, &d) < 0)
                        die("tok_decode (loaded vocabulary)", &d);
                    free(dec);
                    ids.n = 0;
                }
                tok_ids_release(&ids);
                tok_release(&lt);
            } else if (lt.p) {
                die("tok_load failed but left memory", NULL);
            }
            gguf_release(&g);
        }
        src_close(&s);
        return 0;
    }
    v = ((data[0] & 15) | (data[0] & 0x40) >> 2) % n_vocabs;
    t = &vocabs[v];
    add_special = data[0] & 16;
    parse_special = data[0] & 32;
    text = (const char *)data + 1;
    len = size - 1;

    if (tok_encode(t, text, len, add_special, parse_special, &ids, &d) < 0)
        die("tok_encode", &d);
    for (i = 0; i < ids.n; i++) {
        if (ids.v[i] < 0 || ids.v[i] >= t->n_vocab)
            die("id out of range", NULL);
        if (tok_attr(t, ids.v[i]) & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            any_special = true;
    }
    if (add_special && t->add_bos && (ids.n == 0 || ids.v[0] != t->bos))
        die("BOS missing", NULL);
    if (add_special && t->add_eos && (ids.n == 0 || ids.v[ids.n - 1] != t->eos))
        die("EOS missing", NULL);

    t->p->reference = true;
    k = tok_encode(t, text, len, add_special, parse_special, &ref, &d);
    t->p->reference = false;
    if (k < 0)
        die("tok_encode (reference)", &d);
    if (ref.n != ids.n || (ids.n && memcmp(ref.v, ids.v, ids.n * sizeof(*ids.v))))
        die("shortcut and reference paths differ", NULL);

    for (k = 0; k < 4; k++) {
        size_t dl;

        if (tok_decode(t, ids.v, ids.n, k & 1, k & 2, &dec, &dl, &d) < 0)
            die("tok_decode", &d);
        if (strlen(dec) > dl)
            die("tok_decode length", NULL);
        free(dec);
    }

    /* lossless: the pieces give back the text */
    if (!add_special && !any_special && lossless[v] && valid_utf8(data + 1, len) &&
        (t->model == TOK_MODEL_BPE || !memmem(text, len, "\xe2\x96\x81", 3))) {
        for (i = 0; i < ids.n; i++) {
            tok_piece(t, ids.v[i], true, &pl);
            total += pl;
        }
        cat = malloc(total + 1);
        if (!cat)
            die("malloc", NULL);
        total = 0;
        for (i = 0; i < ids.n; i++) {
            const char *pc = tok_piece(t, ids.v[i], true, &pl);

            memcpy(cat + total, pc, pl);
            total += pl;
        }
        if (t->model == TOK_MODEL_SPM && t->add_space_prefix && total > 0 && cat[0] == ' ') {
            memmove(cat, cat + 1, total - 1);
            total--;
        }
        if (total != len || memcmp(cat, text, len))
            die("pieces do not give back the text", NULL);
        free(cat);
    }
    tok_ids_release(&ids);
    tok_ids_release(&ref);
    return 0;
}
