/*
 * test_tokenizer.c - tokenizers (common/text/tokenizer.h).
 *
 *  1. small vocabularies built here (SPM with byte fallback, byte-level BPE
 *     with merges): algorithms, special-token partition, decoding, loading
 *     errors - always run;
 *  2. llama.cpp's test vectors: every ggml-vocab-*.gguf with .inp/.out in
 *     $SHARED/vocab and in the llama.cpp sources scripts/build-llamacpp
 *     unpacks ($LLMKIT_LLAMACPP_MODELS, else the newest
 *     $LLMKIT_CACHE/llama.cpp-VERSION/src/PKG/vendor/llama.cpp/models; skipped
 *     with a note when absent, a failure when CI=true), encoded with
 *     add_special = parse_special = false, must give exactly the expected ids
 *     (a count per vocabulary is printed); and tests/golden/tokenizer/pre.json:
 *     llama.cpp's ids for ~35 texts under every BPE pre-tokenizer name, on
 *     the vocabulary of that directory's llama-bpe (gemma-4) file with
 *     tokenizer.ggml.pre set to the name;
 *  3. round trips on $SHARED/data/wikitext-2-test.raw: decode(encode(x)) == x
 *     for the byte-level BPE vocabularies (pieces concatenated; tok_decode
 *     itself when the vocabulary does not clean spaces) and for the SPM ones
 *     with byte fallback; the encode time is printed;
 *  4. the real models in $LLMKIT_CACHE (default ~/.cache/llmkit): a few
 *     texts with known ids, and the files in tests/golden/tokenizer (llama.cpp's
 *     own tokenizations) when present.
 *
 * $SHARED is $LLMKIT_SHARED, else ../shared (tests run from the repo root).
 * Parts 2-4 are skipped with a note when their files are absent.
 */
#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "json.h"
#include "tok_priv.h"
#include "tokenizer.h"
#include "xio.h"

#include "t.h"

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *
cache_dir(void)
{
    static char buf[4096];
    const char *s = getenv("LLMKIT_CACHE"), *h = getenv("HOME");

    if (s && *s)
        return s;
    snprintf(buf, sizeof(buf), "%s/.cache/llmkit", h ? h : ".");
    return buf;
}

static const char *
shared_dir(void)
{
    const char *s = getenv("LLMKIT_SHARED");

    return s && *s ? s : "../shared";
}

static char *
slurp(const char *path, size_t *len)
{
    char *buf = NULL;

    if (read_file_all(path, (size_t)1 << 30, &buf, len, NULL) < 0)
        return NULL;
    return buf;
}

/* encodes text and compares with want[0..nw) */
static int
ids_equal(const struct tok_ids *got, const int32_t *want, size_t nw)
{
    return got->n == nw && (nw == 0 || !memcmp(got->v, want, nw * sizeof(*want)));
}

static void
print_ids(const char *tag, const int32_t *v, size_t n)
{
    size_t i;

    fprintf(stderr, "  %s:", tag);
    for (i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", v[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}


/* ---- part 1: small vocabularies built here ---- */

#define W "\xe2\x96\x81"       /* U+2581 */
#define G "\xc4\xa0"           /* GPT-2's byte 0x20 */

struct vspec {
    const char *model, *pre, *name;
    const char *const *toks;
    const float *scores;      /* may be NULL */
    const int32_t *types;     /* may be NULL */
    int n;
    const char *const *merges;
    int n_merges;
};

static void
build(struct gguf *g, const struct vspec *v)
{
    gguf_init(g);
    if (v->model)
        gguf_set_str(g, "tokenizer.ggml.model", v->model);
    if (v->pre)
        gguf_set_str(g, "tokenizer.ggml.pre", v->pre);
    if (v->name)
        gguf_set_str(g, "general.name", v->name);
    gguf_set_arr_str(g, "tokenizer.ggml.tokens", v->toks, NULL, (uint64_t)v->n);
    if (v->scores)
        gguf_set_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, (uint64_t)v->n);
    if (v->types)
        gguf_set_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, (uint64_t)v->n);
    if (v->merges)
        gguf_set_arr_str(g, "tokenizer.ggml.merges", v->merges, NULL, (uint64_t)v->n_merges);
}

static int
load_spec(struct tokenizer *t, struct gguf *g, struct diag *d)
{
    int rc = tok_load(t, g, d);

    gguf_release(g);
    return rc;
}

/* encodes and compares with the ids given as a -1 terminated list */
static void
expect_ids(const struct tokenizer *t, const char *text, bool add, bool parse, const int32_t *want,
           int line)
{
    struct tok_ids got = {0};
    struct diag d = {{0}};
    size_t nw = 0;

    while (want[nw] >= 0)
        nw++;
    if (tok_encode(t, text, strlen(text), add, parse, &got, &d) < 0) {
        fprintf(stderr, "line %d: %s\n", line, d.msg);
        CHECK(0);
        return;
    }
    if (!ids_equal(&got, want, nw)) {
        fprintf(stderr, "line %d: \"%s\" tokenized differently\n", line, text);
        print_ids("want", want, nw);
        print_ids("got ", got.v, got.n);
    }
    CHECK(ids_equal(&got, want, nw));
    tok_ids_release(&got);
}
#define EXPECT(t, text, add, parse, ...) \
    expect_ids(t, text, add, parse, (const int32_t[]){__VA_ARGS__, -1}, __LINE__)
#define EXPECT_NONE(t, text, add, parse) \
    expect_ids(t, text, add, parse, (const int32_t[]){-1}, __LINE__)

static void
expect_decode(const struct tokenizer *t, const int32_t *ids, size_t n, bool rm, bool unparse,
              const char *want, int line)
{
    char *out = NULL;
    size_t len = 0;
    struct diag d = {{0}};

    if (tok_decode(t, ids, n, rm, unparse, &out, &len, &d) < 0) {
        fprintf(stderr, "line %d: %s\n", line, d.msg);
        CHECK(0);
        return;
    }
    if (strcmp(out, want) || len != strlen(want))
        fprintf(stderr, "line %d: decoded \"%s\", want \"%s\"\n", line, out, want);
    CHECK(len == strlen(want) && !strcmp(out, want));
    free(out);
}
#define DECODE(t, rm, unparse, want, ...) do { \
    const int32_t _ids[] = {__VA_ARGS__}; \
    expect_decode(t, _ids, sizeof(_ids) / sizeof(_ids[0]), rm, unparse, want, __LINE__); \
} while (0)

/* SPM: 0 <unk> 1 <s> 2 </s> 3..258 <0x00>..<0xFF>, then words */
enum { S_W = 259, S_A, S_B, S_C, S_AB, S_BC, S_WA, S_WAB, S_CTL, S_USR, S_IMEND, S_WX };
static const char *const spm_extra[] = {W, "a", "b", "c", "ab", "bc", W "a", W "ab", "<ctl>",
                                        "<usr>", "<|im_end|>", W "x"};

static void
spm_vocab(struct tokenizer *t, float s_ab, float s_bc, bool prefix, const char *name)
{
    static char bytes[256][7];
    const char *toks[300];
    float sc[300];
    int32_t ty[300];
    struct gguf g;
    struct diag d = {{0}};
    int n = 0, i;

    toks[n] = "<unk>", ty[n] = 2, sc[n++] = 0;
    toks[n] = "<s>", ty[n] = 3, sc[n++] = 0;
    toks[n] = "</s>", ty[n] = 3, sc[n++] = 0;
    for (i = 0; i < 256; i++) {
        snprintf(bytes[i], sizeof(bytes[i]), "<0x%02X>", i);
        toks[n] = bytes[i], ty[n] = 6, sc[n++] = 0;
    }
    for (i = 0; i < (int)(sizeof(spm_extra) / sizeof(spm_extra[0])); i++) {
        toks[n] = spm_extra[i];
        ty[n] = 1;
        sc[n] = -10.0f - (float)i;
        if (n == S_AB)
            sc[n] = s_ab;
        if (n == S_BC)
            sc[n] = s_bc;
        if (n == S_CTL)
            ty[n] = 3;
        if (n == S_USR)
            ty[n] = 4;
        n++;
    }
    build(&g, &(struct vspec){"llama", NULL, name, toks, sc, ty, n, NULL, 0});
    if (!prefix)
        gguf_set_bool(&g, "tokenizer.ggml.add_space_prefix", false);
    CHECK(load_spec(t, &g, &d) == 0);
    if (d.msg[0] && t->n_vocab == 0)
        fprintf(stderr, "spm_vocab: %s\n", d.msg);
}

static void
test_spm(void)
{
    struct tokenizer t;

    /* the higher score merges first; ties go to the leftmost pair */
    spm_vocab(&t, -1, -5, false, NULL);
    CHECK_EQ(t.model, TOK_MODEL_SPM);
    CHECK(t.add_bos && !t.add_eos && !t.add_space_prefix);
    CHECK_EQ(t.bos, 1);
    CHECK_EQ(t.eos, 2);
    CHECK_EQ(t.unk, 0);
    CHECK_EQ(t.nl, 3 + 10);
    EXPECT(&t, "abc", false, false, S_AB, S_C);
    EXPECT(&t, "abc", true, false, 1, S_AB, S_C);
    tok_release(&t);
    spm_vocab(&t, -5, -1, false, NULL);
    EXPECT(&t, "abc", false, false, S_A, S_BC);
    tok_release(&t);
    spm_vocab(&t, -3, -3, false, NULL);
    EXPECT(&t, "abc", false, false, S_AB, S_C);
    /* byte fallback: unknown characters become their UTF-8 bytes */
    EXPECT(&t, "x\xc3\xa9", false, false, 3 + 'x', 3 + 0xC3, 3 + 0xA9);
    /* spaces are U+2581; no prefix here */
    EXPECT(&t, "a ab", false, false, S_A, S_WAB);
    EXPECT_NONE(&t, "", false, false);
    EXPECT(&t, "", true, false, 1);           /* as sentencepiece: [BOS] */
    tok_release(&t);

    /* add_space_prefix: " " before the first fragment and after specials */
    spm_vocab(&t, -1, -5, true, NULL);
    CHECK(t.add_space_prefix);
    EXPECT(&t, "ab", false, false, S_WAB);
    EXPECT(&t, "ab", true, false, 1, S_WAB);
    EXPECT(&t, " ab", false, false, S_W, S_WAB);
    /* user-defined tokens are always cut out; control ones only with
     * parse_special; the fragment after either gets the space again */
    EXPECT(&t, "a<usr>a", false, false, S_WA, S_USR, S_WA);
    EXPECT(&t, "a<ctl>a", false, true, S_WA, S_CTL, S_WA);
    EXPECT(&t, "<ctl>", false, false, S_W, 3 + '<', S_C, 3 + 't', 3 + 'l', 3 + '>');
    EXPECT(&t, "<s>", false, true, 1);
    EXPECT(&t, "<unk>", false, true, 0);
    /* decoding: U+2581 -> space, bytes, one leading space removed, specials
     * only when asked */
    DECODE(&t, false, false, "ab", S_WAB);
    DECODE(&t, false, false, "a ab", S_WA, S_WAB);
    DECODE(&t, false, false, "\xc3\xa9", 3 + 0xC3, 3 + 0xA9);
    DECODE(&t, false, false, " ab", 1, S_WAB);
    /* removing the BOS also keeps the space, as llama_detokenize does */
    DECODE(&t, true, false, " ab", 1, S_WAB);
    DECODE(&t, false, true, "<s> ab", 1, S_WAB);
    DECODE(&t, true, true, " ab", 1, S_WAB);
    DECODE(&t, false, false, "a<usr>", S_WA, S_USR);
    DECODE(&t, false, false, "a", S_WA, S_CTL);
    DECODE(&t, false, true, "a<ctl>", S_WA, S_CTL);
    /* end of generation: eos, and <|im_end|> by its text (now CONTROL) */
    CHECK(tok_is_eog(&t, 2));
    CHECK(tok_is_eog(&t, S_IMEND));
    CHECK(tok_attr(&t, S_IMEND) & TOK_ATTR_CONTROL);
    CHECK_EQ(t.eot, S_IMEND);
    CHECK(!tok_is_eog(&t, S_A));
    CHECK(!tok_is_eog(&t, -1));
    CHECK(!tok_is_eog(&t, t.n_vocab));
    CHECK_EQ(tok_find(&t, W "ab", strlen(W "ab")), S_WAB);
    CHECK_EQ(tok_find(&t, "zz", 2), TOK_NULL);
    {
        size_t len;
        const char *p = tok_piece(&t, S_WAB, false, &len);

        CHECK(p && len == 3 && !memcmp(p, " ab", 3));
        p = tok_piece(&t, 1, false, &len);
        CHECK(p && len == 0);
        p = tok_piece(&t, 1, true, &len);
        CHECK(p && len == 3 && !memcmp(p, "<s>", 3));
        CHECK(tok_piece(&t, t.n_vocab, true, &len) == NULL);
        p = tok_text(&t, 3 + 0x0A, &len);
        CHECK(p && len == 6 && !strcmp(p, "<0x0A>"));
    }
    {
        const int32_t bad[] = {1, 99999};
        char *out = (char *)1;
        size_t len = 1;
        struct diag d = {{0}};

        CHECK(tok_decode(&t, bad, 2, false, false, &out, &len, &d) == -ST_RANGE);
        CHECK(out == NULL && len == 0 && strstr(d.msg, "99999"));
    }
    tok_release(&t);
    tok_release(&t);                          /* twice is harmless */

    /* phi-3 (by general.name): special tokens swallow the whitespace after them */
    spm_vocab(&t, -1, -5, true, "Phi3 mini");
    CHECK(tok_attr(&t, S_USR) & TOK_ATTR_RSTRIP);
    CHECK(!(tok_attr(&t, 1) & TOK_ATTR_RSTRIP));
    CHECK(tok_attr(&t, 2) & TOK_ATTR_RSTRIP);
    EXPECT(&t, "a<usr>  \n a", false, false, S_WA, S_USR, S_WA);
    tok_release(&t);
}

/* tok_encode_spans: CONTROL texts inside a literal span stay text */
static void
test_spans(void)
{
    struct tokenizer t;
    struct tok_ids got = {0}, lit = {0}, all = {0};
    struct diag d = {{0}};
    /* <ctl>ab<ctl>a<ctl> with "ab<ctl>a" (bytes 5..13) literal */
    static const char text[] = "<ctl>ab<ctl>a<ctl>";
    const struct tok_span mid = {5, 8}, part = {8, 1}, none = {0, 0};

    spm_vocab(&t, -1, -5, true, NULL);
    CHECK(tok_encode_spans(&t, text, strlen(text), false, &mid, 1, &got, &d) == 0);
    /* the literal middle is one raw fragment, as with parse_special off */
    CHECK(tok_encode(&t, "ab<ctl>a", 8, false, false, &lit, &d) == 0);
    CHECK(got.n == lit.n + 2 && got.v[0] == S_CTL && got.v[got.n - 1] == S_CTL);
    CHECK(got.n == lit.n + 2 && !memcmp(got.v + 1, lit.v, lit.n * sizeof(int32_t)));
    tok_ids_release(&got);
    /* a span that only touches a marker's text is enough to keep it text */
    CHECK(tok_encode_spans(&t, text, strlen(text), false, &part, 1, &got, &d) == 0);
    CHECK(got.n > 3 && got.v[0] == S_CTL && got.v[got.n - 1] == S_CTL);
    for (size_t i = 1; i + 1 < got.n; i++)
        CHECK(got.v[i] != S_CTL);
    tok_ids_release(&got);
    /* no span (or an empty one): tok_encode with parse_special */
    CHECK(tok_encode(&t, text, strlen(text), true, true, &all, &d) == 0);
    CHECK(tok_encode_spans(&t, text, strlen(text), true, &none, 1, &got, &d) == 0);
    CHECK(ids_equal(&got, all.v, all.n));
    tok_ids_release(&got);
    CHECK(tok_encode_spans(&t, text, strlen(text), true, NULL, 0, &got, &d) == 0);
    CHECK(ids_equal(&got, all.v, all.n));
    tok_ids_release(&got);
    /* user-defined tokens are cut inside spans too (as without parse_special) */
    {
        const struct tok_span whole = {0, 7};

        CHECK(tok_encode_spans(&t, "a<usr>a", 7, false, &whole, 1, &got, &d) == 0);
        CHECK(got.n == 3 && got.v[0] == S_WA && got.v[1] == S_USR && got.v[2] == S_WA);
        tok_ids_release(&got);
    }
    /* a span boundary does not split the raw text around it */
    {
        const struct tok_span b = {1, 1};

        CHECK(tok_encode_spans(&t, "ab", 2, false, &b, 1, &got, &d) == 0);
        CHECK(got.n == 1 && got.v[0] == S_WAB);
        tok_ids_release(&got);
    }
    tok_ids_release(&lit);
    tok_ids_release(&all);
    tok_release(&t);
}

/* BPE: the 256 byte characters, then merge results and specials */
static void
bpe_vocab(struct tokenizer *t, const char *pre, const char *const *extra, int n_extra,
          const char *const *merges, int n_merges, const int32_t *extra_types)
{
    const char *toks[300];
    int32_t ty[300];
    struct gguf g;
    struct diag d = {{0}};
    int n = 0, i;

    for (i = 0; i < 256; i++)
        toks[n] = tok_byte_utf8[i], ty[n++] = 1;
    for (i = 0; i < n_extra; i++)
        toks[n] = extra[i], ty[n++] = extra_types ? extra_types[i] : 1;
    build(&g, &(struct vspec){"gpt2", pre, NULL, toks, NULL, ty, n, merges, n_merges});
    if (load_spec(t, &g, &d) < 0) {
        fprintf(stderr, "bpe_vocab(%s): %s\n", pre ? pre : "(none)", d.msg);
        CHECK(0);
    }
}

static void
test_bpe(void)
{
    static const char *const extra[] = {"ab", "bc", G "a", G "ab", "<|endoftext|>", "<user>",
                                        "a.", "ll", "<|im_end|>"};
    static const int32_t types[] = {1, 1, 1, 1, 3, 4, 1, 1, 1};
    static const char *const m1[] = {G " a", "a b", "b c", G "a b"};
    static const char *const m2[] = {G " a", "b c", "a b", G "a b"};
    enum { AB = 256, BC, GA, GAB, EOT, USR, ADOT, LL, IMEND };
    struct tokenizer t;

    /* the lower merge rank wins */
    bpe_vocab(&t, "gpt-2", extra, 9, m1, 4, types);
    CHECK_EQ(t.model, TOK_MODEL_BPE);
    CHECK(!strcmp(t.pre, "gpt-2"));
    CHECK(!t.add_bos && !t.add_space_prefix && t.clean_spaces && !t.ignore_merges);
    CHECK(t.warning[0] == '\0');
    EXPECT(&t, "abc", false, false, AB, 'c');
    /* a space is byte-encoded as U+0120 and starts the next word */
    EXPECT(&t, "abc ab", false, false, AB, 'c', GAB);
    /* a byte without a token of its own is still a byte character */
    EXPECT(&t, "\n", false, false, '\n');
    EXPECT(&t, "<user>ab", false, false, USR, AB);
    EXPECT(&t, "<|endoftext|>", false, true, EOT);
    EXPECT(&t, "<|im_end|>", false, true, IMEND);
    CHECK(tok_is_eog(&t, EOT) && tok_is_eog(&t, IMEND));
    /* decoding maps the characters back to bytes; gpt-2 cleans " ." */
    DECODE(&t, false, false, "abc ab", AB, 'c', GAB);
    DECODE(&t, false, false, "ab.", AB, ' ', '.');
    DECODE(&t, false, false, "a's", 'a', ' ', '\'', 's');
    tok_release(&t);
    bpe_vocab(&t, "gpt-2", extra, 9, m2, 4, types);
    EXPECT(&t, "abc", false, false, 'a', BC);
    tok_release(&t);

    /* smollm: digits one by one, no space cleaning */
    bpe_vocab(&t, "smollm", extra, 9, m1, 4, types);
    CHECK(!t.clean_spaces);
    EXPECT(&t, "123", false, false, '1', '2', '3');
    DECODE(&t, false, false, "ab .", AB, ' ', '.');
    tok_release(&t);

    /* llama-bpe: a piece that is a token is taken whole (ignore_merges), and
     * BOS is added by default */
    {
        static const char *const ex3[] = {"ab", "abc", "<|begin_of_text|>"};
        static const char *const m3[] = {"a b"};
        static const int32_t ty3[] = {1, 1, 3};

        bpe_vocab(&t, "llama-bpe", ex3, 3, m3, 1, ty3);
        CHECK(t.ignore_merges && t.add_bos);
        CHECK_EQ(t.bos, 11);                  /* the BPE default */
        EXPECT(&t, "abc", false, false, 257);
        EXPECT(&t, "abc", true, false, 11, 257);
        tok_release(&t);
    }

    /* U+180E is not whitespace for llama.cpp (PCRE2's own \s says it is):
     * "\u180e!" is one piece, so its last byte character (U+0130 for 0x8E)
     * merges with "!" */
    {
        static const char *const ex4[] = {"\xc4\xb0!"};
        static const char *const m4[] = {"\xc4\xb0 !"};
        static const int32_t ty4[] = {1};

        bpe_vocab(&t, "gpt-2", ex4, 1, m4, 1, ty4);
        EXPECT(&t, "\xe1\xa0\x8e!", false, false, 0xE1, 0xA0, 256);
        EXPECT(&t, " \xe1\xa0\x8e!", false, false, ' ', 0xE1, 0xA0, 256);
        tok_release(&t);
        bpe_vocab(&t, "llama-bpe", ex4, 1, m4, 1, ty4);
        EXPECT(&t, "\xe1\xa0\x8e!", false, false, 0xE1, 0xA0, 256);
        tok_release(&t);
    }

    /* no pre-tokenizer name: the default one, with a warning */
    bpe_vocab(&t, NULL, extra, 9, m1, 4, types);
    CHECK(!strcmp(t.pre, "default"));
    CHECK(strstr(t.warning, "tokenizer.ggml.pre") != NULL);
    tok_release(&t);
}

/* which special token wins: the longest text first, each one's occurrences
 * left to right (llama.cpp's tokenizer_st_partition) */
static void
test_partition(void)
{
    static const char *const extra[] = {"<a>", "<a><b>", "<b>", "xy", "yz", "<x>"};
    static const int32_t types[] = {4, 3, 4, 4, 4, 3};
    enum { A = 256, AB, B, XY, YZ, X };
    struct tokenizer t;

    bpe_vocab(&t, "gpt-2", extra, 6, (const char *const[]){"x y"}, 1, types);
    /* <a><b> is CONTROL: ignored without parse_special */
    EXPECT(&t, "<a><b>", false, false, A, B);
    EXPECT(&t, "<a><b>", false, true, AB);
    EXPECT(&t, "<a><a><b>", false, true, A, AB);
    /* equal lengths: the lower id is cut first, everywhere */
    EXPECT(&t, "xyz", false, false, XY, 'z');
    EXPECT(&t, "<x>", false, false, '<', 'x', '>');
    EXPECT(&t, "<x>", false, true, X);
    tok_release(&t);

    /* special texts longer than the trie's limit are found too */
    {
        static char longtok[400], text[500];
        const char *ex[] = {longtok, "<a>"};
        const int32_t ty[] = {4, 4};

        memset(longtok, 'q', 300);
        memcpy(longtok, "<a>", 3);
        snprintf(text, sizeof(text), "z%sz<a>", longtok);
        bpe_vocab(&t, "gpt-2", ex, 2, (const char *const[]){"x y"}, 1, ty);
        EXPECT(&t, text, false, false, 'z', 256, 'z', 257);
        tok_release(&t);
    }
}

static void
expect_load_error(const struct vspec *v, const char *needle, int line)
{
    struct gguf g;
    struct tokenizer t;
    struct diag d = {{0}};
    int rc;

    build(&g, v);
    rc = load_spec(&t, &g, &d);
    if (rc != -ST_FORMAT || !strstr(d.msg, needle))
        fprintf(stderr, "line %d: rc %d, message \"%s\", want \"%s\"\n", line, rc, d.msg, needle);
    CHECK(rc == -ST_FORMAT && strstr(d.msg, needle));
    CHECK(t.p == NULL);
}
#define LOAD_ERROR(needle, ...) expect_load_error(&(struct vspec){__VA_ARGS__}, needle, __LINE__)

static void
test_load_errors(void)
{
    static const char *const two[] = {"a", "b"};
    static const char *const dup[] = {"a", "b", "a"};
    static const float sc1[] = {0};
    static const char *const m[] = {"a b"};
    struct gguf g;
    struct tokenizer t;
    struct diag d = {{0}};

    LOAD_ERROR("tokenizer.ggml.model", NULL, NULL, NULL, two, NULL, NULL, 2, NULL, 0);
    LOAD_ERROR("unsupported tokenizer 'plamo2'", "plamo2", NULL, NULL, two, NULL, NULL, 2, NULL, 0);
    LOAD_ERROR("unsupported pre-tokenizer 'nonesuch'", "gpt2", "nonesuch", NULL, two, NULL, NULL,
               2, m, 1);
    LOAD_ERROR("tokenizer.ggml.merges", "gpt2", "gpt-2", NULL, two, NULL, NULL, 2, NULL, 0);
    LOAD_ERROR("duplicate token 'a' has ids 0 and 2", "llama", NULL, NULL, dup, NULL, NULL, 3,
               NULL, 0);
    LOAD_ERROR("tokenizer.ggml.tokens", "llama", NULL, NULL, two, NULL, NULL, 0, NULL, 0);
    /* a short score array */
    gguf_init(&g);
    gguf_set_str(&g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(&g, "tokenizer.ggml.tokens", two, NULL, 2);
    gguf_set_arr(&g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc1, 1);
    CHECK(load_spec(&t, &g, &d) == -ST_FORMAT && strstr(d.msg, "tokenizer.ggml.scores"));
    /* token types of the wrong type */
    gguf_init(&g);
    gguf_set_str(&g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(&g, "tokenizer.ggml.tokens", two, NULL, 2);
    gguf_set_arr(&g, "tokenizer.ggml.token_type", GGUF_TYPE_FLOAT32, (const float[]){1, 1}, 2);
    CHECK(load_spec(&t, &g, &d) == -ST_FORMAT && strstr(d.msg, "tokenizer.ggml.token_type"));
    /* tokens that are not strings */
    gguf_init(&g);
    gguf_set_str(&g, "tokenizer.ggml.model", "llama");
    gguf_set_arr(&g, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, (const int32_t[]){1, 2}, 2);
    CHECK(load_spec(&t, &g, &d) == -ST_FORMAT && strstr(d.msg, "tokenizer.ggml.tokens"));
    /* the model name of the wrong type */
    gguf_init(&g);
    gguf_set_u32(&g, "tokenizer.ggml.model", 1);
    gguf_set_arr_str(&g, "tokenizer.ggml.tokens", two, NULL, 2);
    CHECK(load_spec(&t, &g, &d) == -ST_FORMAT && strstr(d.msg, "tokenizer.ggml.model"));
    /* add_bos without a BOS: the default id 1 is in range here, 5 is not */
    gguf_init(&g);
    gguf_set_str(&g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(&g, "tokenizer.ggml.tokens", two, NULL, 2);
    gguf_set_u32(&g, "tokenizer.ggml.eos_token_id", 5);
    CHECK(load_spec(&t, &g, &d) == 0);
    CHECK_EQ(t.bos, 1);
    CHECK_EQ(t.eos, TOK_NULL);                /* default 2 out of range, 5 too */
    CHECK(strstr(t.warning, "eos_token_id") != NULL);
    tok_release(&t);
    gguf_init(&g);
    gguf_set_str(&g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(&g, "tokenizer.ggml.tokens", (const char *const[]){"a"}, NULL, 1);
    CHECK(load_spec(&t, &g, &d) == -ST_FORMAT && strstr(d.msg, "add_bos_token"));
    /* an empty token becomes [EMPTY_i] as in llama.cpp */
    gguf_init(&g);
    gguf_set_str(&g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(&g, "tokenizer.ggml.tokens", (const char *const[]){"a", "", "b"}, NULL, 3);
    CHECK(load_spec(&t, &g, &d) == 0);
    CHECK_STR(tok_text(&t, 1, NULL), "[EMPTY_1]");
    tok_release(&t);
}

/* whether the JSON array want holds exactly the ids of got */
static bool
json_ids_equal(const json_t *want, const struct tok_ids *got)
{
    size_t k;

    if (!json_is_array(want) || json_array_size(want) != got->n)
        return false;
    for (k = 0; k < got->n; k++)
        if (json_integer_value(json_array_get(want, k)) != got->v[k])
            return false;
    return true;
}

/* ---- part 2: llama.cpp's test vectors ---- */

static void
vocab_vectors(const char *gguf_path, int *n_vocabs)
{
    char inp_path[4096], out_path[4096];
    char *inp = NULL, *outf = NULL;
    size_t inp_len, out_len;
    struct gguf g;
    struct tokenizer t;
    struct diag d = {{0}};
    size_t pos = 0, line = 0, n_cases = 0, n_pass = 0;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof(sep) - 1;

    snprintf(inp_path, sizeof(inp_path), "%s.inp", gguf_path);
    snprintf(out_path, sizeof(out_path), "%s.out", gguf_path);
    inp = slurp(inp_path, &inp_len);
    outf = slurp(out_path, &out_len);
    if (!inp || !outf) {
        free(inp);
        free(outf);
        return;
    }
    if (gguf_open(&g, gguf_path, &d) < 0) {
        fprintf(stderr, "%s: %s\n", gguf_path, d.msg);
        CHECK(0);
        goto done;
    }
    if (tok_load(&t, &g, &d) < 0) {
        fprintf(stderr, "%s: %s\n", gguf_path, d.msg);
        CHECK(0);
        gguf_release(&g);
        goto done;
    }
    gguf_release(&g);
    (*n_vocabs)++;
    while (pos < inp_len || (pos == inp_len && 0)) {
        const char *m = memmem(inp + pos, inp_len - pos, sep, sep_len);
        size_t tlen = m ? (size_t)(m - (inp + pos)) : inp_len - pos;
        const char *text = inp + pos;
        /* expected: line `line` of the .out file */
        size_t ls = 0, k, le;
        int32_t want[4096];
        size_t nw = 0;
        struct tok_ids got = {0};
        const char *q;

        if (!m && tlen == 0)
            break;
        for (k = 0; k < line && ls < out_len; ls++)
            if (outf[ls] == '\n')
                k++;
        le = ls;
        while (le < out_len && outf[le] != '\n')
            le++;
        for (q = outf + ls; q < outf + le;) {
            char *endp;
            long v;

            while (q < outf + le && (*q == ' ' || *q == '\r'))
                q++;
            if (q >= outf + le)
                break;
            v = strtol(q, &endp, 10);
            if (endp == q || nw == 4096)
                break;
            want[nw++] = (int32_t)v;
            q = endp;
        }
        CHECK(ls < out_len || (tlen == 0 && 0) || ls <= out_len);
        n_cases++;
        if (tok_encode(&t, text, tlen, false, false, &got, &d) < 0) {
            fprintf(stderr, "%s: case %zu: %s\n", gguf_path, line, d.msg);
            CHECK(0);
        } else if (ids_equal(&got, want, nw)) {
            n_pass++;
        } else {
            fprintf(stderr, "%s: case %zu (%.*s) differs\n", gguf_path, line,
                    (int)(tlen > 60 ? 60 : tlen), text);
            print_ids("want", want, nw);
            print_ids("got ", got.v, got.n);
            CHECK(0);
        }
        /* decoding the expected ids and encoding again gives them back for
         * these lossless-looking inputs only when the tokenizer is stable; we
         * only check that decoding works */
        {
            char *dec = NULL;
            size_t dl;

            CHECK(tok_decode(&t, want, nw, false, false, &dec, &dl, &d) == 0);
            free(dec);
        }
        tok_ids_release(&got);
        line++;
        if (!m)
            break;
        pos += tlen + sep_len;
    }
    /* the .out file has exactly one line per input */
    {
        size_t k, nl = 0;

        for (k = 0; k < out_len; k++)
            nl += outf[k] == '\n';
        CHECK_EQ(nl, n_cases);
    }
    fprintf(stderr, "vocab %-40s %zu/%zu cases pass (model %s, pre %s)\n",
            strrchr(gguf_path, '/') ? strrchr(gguf_path, '/') + 1 : gguf_path, n_pass, n_cases,
            t.model == TOK_MODEL_SPM ? "llama" : t.model == TOK_MODEL_WPM ? "bert" : "gpt2", t.pre);
    CHECK_EQ(n_pass, n_cases);
    tok_release(&t);
done:
    free(inp);
    free(outf);
}

/* the llama.cpp models directory, or NULL (after a note; a failure in CI) */
static const char *
llamacpp_models(void)
{
    static char buf[4096];
    const char *s = getenv("LLMKIT_LLAMACPP_MODELS");
    char pat[4200];
    glob_t gl;

    if (s && *s)
        return s;
    snprintf(pat, sizeof(pat), "%s/llama.cpp-*/src/*/vendor/llama.cpp/models", cache_dir());
    if (glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc > 0) {
        snprintf(buf, sizeof(buf), "%s", gl.gl_pathv[gl.gl_pathc - 1]);
        globfree(&gl);
        return buf;
    }
    fprintf(stderr, "note: no llama.cpp sources under %s (scripts/build-llamacpp unpacks them): "
            "their vocabulary tests skipped\n", cache_dir());
    if (getenv("CI") && !strcmp(getenv("CI"), "true"))
        CHECK(0);
    return NULL;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* every ggml-vocab-*.gguf of dir that has .inp/.out */
static int
vectors_in(const char *dir)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    int n = 0;
    char **names = NULL;
    size_t nn = 0, i;

    if (!dp)
        return -1;
    while ((de = readdir(dp))) {
        size_t l = strlen(de->d_name);

        if (l > 5 && !strcmp(de->d_name + l - 5, ".gguf") && !strncmp(de->d_name, "ggml-vocab-", 11)) {
            names = realloc(names, (nn + 1) * sizeof(*names));
            names[nn] = malloc(strlen(dir) + l + 2);
            sprintf(names[nn++], "%s/%s", dir, de->d_name);
        }
    }
    closedir(dp);
    if (nn)
        qsort(names, nn, sizeof(*names), cmp_str);
    for (i = 0; i < nn; i++) {
        vocab_vectors(names[i], &n);
        free(names[i]);
    }
    free(names);
    return n;
}

static int load_tok_path(const char *path, struct tokenizer *t);

/* tests/golden/tokenizer/pre.json against the vocabularies of models/ */
static void
pre_golden(const char *models)
{
    static const char path[] = "tests/golden/tokenizer/pre.json";
    json_t *root = NULL, *texts, *names, *bases, *e;
    const char *bname;
    struct diag d = {{0}};
    size_t n_names = 0, n_ok = 0;

    if (json_load_path(path, JSON_MAX_FILE, &root, &d) < 0) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        CHECK(0);
        return;
    }
    texts = json_object_get(root, "texts");
    names = json_object_get(root, "names");
    bases = json_object_get(root, "bases");
    CHECK(json_is_array(texts) && json_is_object(names) && json_is_object(bases));
    json_object_foreach(bases, bname, e) {
        const char *file = json_string_value(json_object_get(e, "file"));
        char gpath[4600];
        struct gguf g;
        const char *nm;
        json_t *ne;

        snprintf(gpath, sizeof(gpath), "%s/%s", models, file ? file : "?");
        if (gguf_open(&g, gpath, &d) < 0) {
            fprintf(stderr, "%s: %s\n", gpath, d.msg);
            CHECK(0);
            continue;
        }
        json_object_foreach(names, nm, ne) {
            json_t *ids = json_object_get(ne, "ids"), *want;
            const char *same = json_string_value(json_object_get(ne, "same_as"));
            struct tokenizer t;
            size_t i, bad = 0;

            if (strcmp(json_string_value(json_object_get(ne, "base")), bname))
                continue;
            if (!ids && same)
                ids = json_object_get(json_object_get(names, same), "ids");
            n_names++;
            if (gguf_set_str(&g, "tokenizer.ggml.model", "gpt2") < 0 ||
                gguf_set_str(&g, "tokenizer.ggml.pre", nm) < 0 || tok_load(&t, &g, &d) < 0) {
                fprintf(stderr, "pre %s: %s\n", nm, d.msg);
                CHECK(0);
                continue;
            }
            CHECK(json_array_size(ids) == json_array_size(texts));
            json_array_foreach(texts, i, e) {
                struct tok_ids got = {0};
                bool ok;

                want = json_array_get(ids, i);
                if (tok_encode(&t, json_string_value(e), json_string_length(e), true, false, &got,
                               &d) < 0) {
                    fprintf(stderr, "pre %s: %s\n", nm, d.msg);
                    CHECK(0);
                    continue;
                }
                ok = json_ids_equal(want, &got);
                if (!ok) {
                    if (!bad++)
                        fprintf(stderr, "pre %s: text %zu (%.40s) differs\n", nm, i,
                                json_string_value(e));
                    CHECK(0);
                }
                tok_ids_release(&got);
            }
            n_ok += bad == 0;
            tok_release(&t);
        }
        gguf_release(&g);
    }
    fprintf(stderr, "golden pre.json: %zu/%zu pre-tokenizer names match llama.cpp on %zu texts\n",
            n_ok, n_names, json_array_size(texts));
    CHECK(n_names > 0 && n_ok == n_names);
    /* the vocabulary files without .inp/.out of their own */
    json_object_foreach(json_object_get(root, "files"), bname, e) {
        char gpath[4600];
        struct tokenizer t;
        json_t *ids = json_object_get(e, "ids"), *tx;
        size_t i, bad = 0;

        snprintf(gpath, sizeof(gpath), "%s/%s", models, bname);
        if (load_tok_path(gpath, &t) < 0) {
            CHECK(0);
            continue;
        }
        json_array_foreach(texts, i, tx) {
            struct tok_ids got = {0};
            json_t *want = json_array_get(ids, i);
            bool ok;

            CHECK(tok_encode(&t, json_string_value(tx), json_string_length(tx), true, false, &got,
                             &d) == 0);
            ok = json_ids_equal(want, &got);
            if (!ok && !bad++) {
                fprintf(stderr, "%s: text %zu (%.40s) differs\n", bname, i, json_string_value(tx));
                print_ids("got ", got.v, got.n);
            }
            CHECK(ok);
            tok_ids_release(&got);
        }
        fprintf(stderr, "golden pre.json: %-32s %zu/%zu texts match llama.cpp (model %d)\n", bname,
                json_array_size(texts) - bad, json_array_size(texts), (int)t.model);
        tok_release(&t);
    }
    /* RWKV: gpt-2's token strings read as escaped byte strings */
    e = json_object_get(root, "rwkv");
    if (e) {
        const char *file = json_string_value(json_object_get(e, "base"));
        json_t *rt = json_object_get(e, "texts"), *ids = json_object_get(e, "ids"), *tx;
        char gpath[4600];
        struct gguf g;
        struct tokenizer t;
        size_t i, bad = 0;

        snprintf(gpath, sizeof(gpath), "%s/%s", models, file ? file : "?");
        CHECK(gguf_open(&g, gpath, &d) == 0);
        CHECK(gguf_set_str(&g, "tokenizer.ggml.model", "rwkv") == 0 &&
              gguf_set_u32(&g, "tokenizer.ggml.unknown_token_id", 0) == 0);
        if (tok_load(&t, &g, &d) < 0) {
            fprintf(stderr, "rwkv: %s\n", d.msg);
            CHECK(0);
        } else {
            json_array_foreach(rt, i, tx) {
                struct tok_ids got = {0};
                json_t *want = json_array_get(ids, i);
                bool ok;

                CHECK(tok_encode(&t, json_string_value(tx), json_string_length(tx), true, false,
                                 &got, &d) == 0);
                ok = json_ids_equal(want, &got);
                if (!ok && !bad++)
                    fprintf(stderr, "rwkv: text %zu (%.40s) differs\n", i, json_string_value(tx));
                CHECK(ok);
                tok_ids_release(&got);
            }
            fprintf(stderr, "golden pre.json: rwkv %zu/%zu texts match llama.cpp\n",
                    json_array_size(rt) - bad, json_array_size(rt));
            tok_release(&t);
        }
        gguf_release(&g);
    }
    json_decref(root);
}

static void
test_vectors(void)
{
    char dir[4096];
    const char *models;
    int n;

    /* the six copied into the shared directory: always there in this project */
    snprintf(dir, sizeof(dir), "%s/vocab", shared_dir());
    n = vectors_in(dir);
    if (n < 0)
        fprintf(stderr, "note: %s absent, its llama.cpp test vectors skipped\n", dir);
    else
        fprintf(stderr, "test vectors: %d vocabularies of %s checked\n", n, dir);
    models = llamacpp_models();
    if (!models)
        return;
    n = vectors_in(models);
    CHECK(n > 0);
    fprintf(stderr, "test vectors: %d vocabularies of %s checked\n", n, models);
    pre_golden(models);
}

/* ---- part 3: round trips on wikitext ---- */

static int
load_tok_path(const char *path, struct tokenizer *t)
{
    struct gguf g;
    struct diag d = {{0}};

    if (gguf_open(&g, path, &d) < 0) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        return -1;
    }
    if (tok_load(t, &g, &d) < 0) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        gguf_release(&g);
        return -1;
    }
    gguf_release(&g);
    return 0;
}

/* decode(encode(text)) == text; returns the encode time in seconds */
static void
round_trip(const char *name, struct tokenizer *t, const char *text, size_t len)
{
    struct tok_ids ids = {0};
    struct diag d = {{0}};
    double t0, t1;
    char *dec = NULL;
    size_t dl = 0, i;

    t0 = now_s();
    if (tok_encode(t, text, len, false, false, &ids, &d) < 0) {
        fprintf(stderr, "%s: %s\n", name, d.msg);
        CHECK(0);
        return;
    }
    t1 = now_s();
    if (t->clean_spaces) {
        /* tok_decode would clean " ," etc.; the pieces themselves are lossless */
        size_t cap = len + 1;

        dec = malloc(cap);
        for (i = 0; i < ids.n; i++) {
            size_t pl;
            const char *pc = tok_piece(t, ids.v[i], false, &pl);

            if (dl + pl > cap) {
                cap = 2 * (dl + pl);
                dec = realloc(dec, cap);
            }
            memcpy(dec + dl, pc, pl);
            dl += pl;
        }
    } else {
        CHECK(tok_decode(t, ids.v, ids.n, false, false, &dec, &dl, &d) == 0);
    }
    CHECK(dec != NULL && dl == len && !memcmp(dec, text, len));
    if (dec && (dl != len || memcmp(dec, text, len))) {
        for (i = 0; i < dl && i < len && dec[i] == text[i]; i++)
            ;
        fprintf(stderr, "%s: round trip differs at byte %zu of %zu (decoded %zu)\n", name, i,
                len, dl);
    }
    fprintf(stderr, "wikitext %-32s %zu bytes -> %zu tokens in %.3f s, round trip %s\n", name,
            len, ids.n, t1 - t0, dec && dl == len && !memcmp(dec, text, len) ? "exact" : "DIFFERS");
    /* well under a second or two on this 1.3 MB text; generous bound for
     * loaded machines */
    CHECK(t1 - t0 < 5.0);
    /* the shortcuts (word cache, SPM barriers and word starts, pair cache)
     * give exactly the ids of the plain algorithm */
    {
        struct tok_ids ref = {0};
        double t2 = now_s();

        t->p->reference = true;
        CHECK(tok_encode(t, text, len, false, false, &ref, &d) == 0);
        t->p->reference = false;
        CHECK(ids_equal(&ref, ids.v, ids.n));
        fprintf(stderr, "wikitext %-32s reference path %.3f s, same ids: %s\n", name,
                now_s() - t2, ids_equal(&ref, ids.v, ids.n) ? "yes" : "NO");
        tok_ids_release(&ref);
    }
    free(dec);
    tok_ids_release(&ids);
}

static void
test_wikitext(void)
{
    static const char *const vocabs[] = {"gpt-2", "starcoder", "falcon", "deepseek-coder",
                                         "llama-spm", "phi-3"};
    char path[8400];
    char *text;
    size_t len, i;

    snprintf(path, sizeof(path), "%s/data/wikitext-2-test.raw", shared_dir());
    text = slurp(path, &len);
    if (!text) {
        fprintf(stderr, "note: %s absent, round trips skipped\n", path);
        return;
    }
    for (i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        struct tokenizer t;

        snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", shared_dir(), vocabs[i]);
        if (access(path, R_OK) != 0)
            continue;
        if (load_tok_path(path, &t) < 0) {
            CHECK(0);
            continue;
        }
        round_trip(vocabs[i], &t, text, len);
        tok_release(&t);
    }
    for (i = 0; i < 2; i++) {
        static const char *const models[] = {"SmolLM2-135M-Instruct.Q4_1.gguf",
                                             "gemma-3-270m.Q4_K_M.gguf"};
        struct tokenizer t;

        snprintf(path, sizeof(path), "%s/%s", cache_dir(), models[i]);
        if (access(path, R_OK) != 0)
            continue;
        if (load_tok_path(path, &t) < 0) {
            CHECK(0);
            continue;
        }
        round_trip(models[i], &t, text, len);
        tok_release(&t);
    }
    free(text);
}

/* ---- part 4: the real models ---- */

static void
expect_texts(const struct tokenizer *t, const char *text, bool add, bool parse,
             const char *const *want, int line)
{
    struct tok_ids got = {0};
    struct diag d = {{0}};
    size_t i, nw = 0;
    bool ok;

    while (want[nw])
        nw++;
    CHECK(tok_encode(t, text, strlen(text), add, parse, &got, &d) == 0);
    ok = got.n == nw;
    for (i = 0; ok && i < nw; i++)
        ok = !strcmp(tok_text(t, got.v[i], NULL), want[i]);
    if (!ok) {
        fprintf(stderr, "line %d: \"%s\":", line, text);
        for (i = 0; i < got.n; i++)
            fprintf(stderr, " [%s]", tok_text(t, got.v[i], NULL));
        fprintf(stderr, "\n");
    }
    CHECK(ok);
    tok_ids_release(&got);
}
#define TEXTS(t, text, add, parse, ...) \
    expect_texts(t, text, add, parse, (const char *const[]){__VA_ARGS__, NULL}, __LINE__)

/* tests/golden/tokenizer/NAME.json: llama.cpp's ids for add_special with
 * parse_special off ("ids") and on ("ids_special") */
static void
golden_file(const char *path)
{
    json_t *root = NULL, *cases, *model, *c;
    const char *file = NULL;
    struct diag d = {{0}};
    struct tokenizer t;
    char mpath[8400];
    size_t i, n_ok = 0, n = 0;

    if (json_load_path(path, JSON_MAX_FILE, &root, &d) < 0) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        CHECK(0);
        return;
    }
    model = json_object_get(root, "model");
    cases = json_object_get(root, "cases");
    if (json_obj_str(model, "file", &file, &d) != 0 || !json_is_array(cases)) {
        fprintf(stderr, "%s: no model.file or cases\n", path);
        CHECK(0);
        json_decref(root);
        return;
    }
    snprintf(mpath, sizeof(mpath), "%s/%s", cache_dir(), file);
    if (access(mpath, R_OK) != 0) {
        fprintf(stderr, "note: %s absent, %s skipped\n", mpath, path);
        json_decref(root);
        return;
    }
    if (load_tok_path(mpath, &t) < 0) {
        CHECK(0);
        json_decref(root);
        return;
    }
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t tl = json_string_length(json_object_get(c, "text"));
        int pass;

        for (pass = 0; pass < 2 && text; pass++) {
            json_t *want = json_object_get(c, pass ? "ids_special" : "ids");
            struct tok_ids got = {0};
            bool ok;

            if (!json_is_array(want))
                continue;
            n++;
            CHECK(tok_encode(&t, text, tl, true, pass == 1, &got, &d) == 0);
            ok = json_ids_equal(want, &got);
            if (ok) {
                n_ok++;
            } else {
                fprintf(stderr, "%s: \"%s\" (parse_special %d) differs from llama.cpp\n", path,
                        text, pass);
                print_ids("got ", got.v, got.n);
            }
            CHECK(ok);
            tok_ids_release(&got);
        }
    }
    fprintf(stderr, "golden %-40s %zu/%zu tokenizations match llama.cpp\n",
            strrchr(path, '/') ? strrchr(path, '/') + 1 : path, n_ok, n);
    tok_release(&t);
    json_decref(root);
}

static void
test_real_models(void)
{
    char path[8400];
    struct tokenizer t;
    DIR *dp;
    struct dirent *de;

    snprintf(path, sizeof(path), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", cache_dir());
    if (access(path, R_OK) == 0 && load_tok_path(path, &t) == 0) {
        CHECK_EQ(t.model, TOK_MODEL_BPE);
        CHECK(!strcmp(t.pre, "smollm"));
        CHECK_EQ(t.n_vocab, 49152);
        CHECK_EQ(t.bos, 1);
        CHECK_EQ(t.eos, 2);
        CHECK(!t.add_bos && !t.clean_spaces);
        CHECK(tok_is_eog(&t, 2));                       /* <|im_end|> */
        CHECK(tok_is_eog(&t, 0));                       /* <|endoftext|> */
        CHECK(!tok_is_eog(&t, 1));                      /* <|im_start|> */
        TEXTS(&t, "Hello world", true, false, "Hello", G "world");
        TEXTS(&t, "<|im_start|>user\nHi<|im_end|>\n", false, true, "<|im_start|>", "user",
              "\xc4\x8a", "Hi", "<|im_end|>", "\xc4\x8a");
        /* a text dense with special tokens (many small fragments) is as fast
         * and gives the same ids on both paths */
        {
            static const char *const bits[] = {"<|im_start|>", "<|im_end|>", "\n\n", "  ",
                                               "x", "<repo_name>", " word"};
            size_t cap = 1 << 20, n = 0;
            char *text = malloc(cap);
            struct tok_ids fast = {0}, ref = {0};
            struct diag d = {{0}};
            uint32_t r = 1;
            double t0;

            while (n + 16 < cap) {
                const char *b;

                r = r * 1103515245u + 12345u;
                b = bits[(r >> 16) % 7];
                memcpy(text + n, b, strlen(b));
                n += strlen(b);
            }
            t0 = now_s();
            CHECK(tok_encode(&t, text, n, true, true, &fast, &d) == 0);
            fprintf(stderr, "special-dense text: %zu bytes -> %zu tokens in %.3f s\n", n,
                    fast.n, now_s() - t0);
            CHECK(now_s() - t0 < 5.0);
            t.p->reference = true;
            CHECK(tok_encode(&t, text, n, true, true, &ref, &d) == 0);
            t.p->reference = false;
            CHECK(ids_equal(&ref, fast.v, fast.n));
            tok_ids_release(&fast);
            tok_ids_release(&ref);
            free(text);
        }
        /* parse_special off: the markers are plain text */
        {
            struct tok_ids ids = {0};
            struct diag d = {{0}};

            CHECK(tok_encode(&t, "<|im_end|>", 10, false, false, &ids, &d) == 0);
            CHECK(ids.n > 1 && ids.v[0] != 2 && ids.v[ids.n - 1] != 2);
            tok_ids_release(&ids);
        }
        tok_release(&t);
    } else {
        fprintf(stderr, "note: %s absent\n", path);
    }
    snprintf(path, sizeof(path), "%s/gemma-3-270m.Q4_K_M.gguf", cache_dir());
    if (access(path, R_OK) == 0 && load_tok_path(path, &t) == 0) {
        int32_t eot = tok_find(&t, "<end_of_turn>", 13);

        CHECK_EQ(t.model, TOK_MODEL_SPM);
        CHECK_EQ(t.n_vocab, 262144);
        CHECK_EQ(t.bos, 2);
        CHECK_EQ(t.eos, 1);
        CHECK(t.add_bos && !t.add_space_prefix);
        CHECK(eot >= 0 && tok_is_eog(&t, eot) && tok_is_eog(&t, 1));
        CHECK_EQ(t.eot, eot);
        TEXTS(&t, "Hello world", true, false, "<bos>", "Hello", W "world");
        TEXTS(&t, "<start_of_turn>user\nHi<end_of_turn>\n", false, true, "<start_of_turn>",
              "user", "\n", "Hi", "<end_of_turn>", "\n");
        tok_release(&t);
    } else {
        fprintf(stderr, "note: %s absent\n", path);
    }
    dp = opendir("tests/golden/tokenizer");
    if (!dp) {
        fprintf(stderr, "note: tests/golden/tokenizer absent\n");
        return;
    }
    while ((de = readdir(dp))) {
        size_t l = strlen(de->d_name);

        /* pre.json is part 2's */
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json") && strcmp(de->d_name, "pre.json")) {
            snprintf(path, sizeof(path), "tests/golden/tokenizer/%s", de->d_name);
            golden_file(path);
        }
    }
    closedir(dp);
}

int
main(void)
{
    test_spm();
    test_spans();
    test_bpe();
    test_partition();
    test_load_errors();
    test_vectors();
    test_wikitext();
    test_real_models();
    T_DONE();
}
