/*
 * test_llama2c.c - llama2.c model .bin and tokenizer.bin: write -> read,
 * header validation, truncation, shared vs separate classifier.
 *
 * With LLMKIT_FUZZ_CORPUS_OUT=DIR set it writes the seed corpus of
 * tests/fuzz/fuzz_llama2c.c into DIR instead (see tests/fuzz/README.md).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llama2c.h"
#include "t.h"
#include "xio.h"

static char tmproot[] = "/tmp/llmkit_test_l2c_XXXXXX";

/* A model whose every float is distinct: value = kind * 1000 + layer * 100 + k/1000. */
struct fixture {
    struct llama2c_model m;
    float *arrays[LLAMA2C_KIND_COUNT + 2];
    struct llama2c_layer layers[4];
};

static float *
fill(size_t n, int kind, int layer)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t k = 0; k < n; k++)
        p[k] = (float)(kind * 1000 + layer * 100) + (float)k / 1024.0f;
    return p;
}

static void
fixture_init(struct fixture *f, const struct llama2c_config *c)
{
    int32_t hs = c->dim / c->n_heads, kv = c->n_kv_heads * hs, D = c->dim, H = c->hidden_dim;

    memset(f, 0, sizeof(*f));
    f->m.c = *c;
    f->m.token_embedding = f->arrays[0] = fill((size_t)c->vocab_size * D, 1, 0);
    for (int l = 0; l < c->n_layers; l++) {
        struct llama2c_layer *y = &f->layers[l];
        y->rms_att = fill(D, 2, l);
        y->wq = fill((size_t)D * D, 3, l);
        y->wk = fill((size_t)kv * D, 4, l);
        y->wv = fill((size_t)kv * D, 5, l);
        y->wo = fill((size_t)D * D, 6, l);
        y->rms_ffn = fill(D, 7, l);
        y->w1 = fill((size_t)H * D, 8, l);
        y->w2 = fill((size_t)D * H, 9, l);
        y->w3 = fill((size_t)H * D, 10, l);
    }
    f->m.layers = f->layers;
    f->m.rms_final = f->arrays[1] = fill(D, 11, 0);
    f->m.wcls = f->arrays[2] = fill((size_t)c->vocab_size * D, 12, 0);
}

static void
fixture_free(struct fixture *f)
{
    for (int i = 0; i < 3; i++)
        free(f->arrays[i]);
    for (int l = 0; l < f->m.c.n_layers; l++) {
        struct llama2c_layer *y = &f->layers[l];
        free((void *)y->rms_att);
        free((void *)y->wq);
        free((void *)y->wk);
        free((void *)y->wv);
        free((void *)y->wo);
        free((void *)y->rms_ffn);
        free((void *)y->w1);
        free((void *)y->w2);
        free((void *)y->w3);
    }
}

static bool
same(const float *a, const float *b, size_t n)
{
    return a && b && !memcmp(a, b, n * sizeof(float));
}

static char *
tmp(const char *name)
{
    return path_join(tmproot, name);
}

static uint8_t *
slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    struct diag d;
    if (read_file_all(path, (size_t)1 << 26, &buf, len, &d))
        return NULL;
    return (uint8_t *)buf;
}

/* Parses a model from (a 4-byte aligned copy of) b[0..n). */
static int
parse_model(const uint8_t *b, size_t n, struct diag *d)
{
    void *copy = malloc(n ? n : 1);
    struct src s;
    struct llama2c_model m;
    int rc;

    memcpy(copy, b, n);
    src_open_mem(&s, copy, n, "mem");
    d->msg[0] = '\0';
    rc = llama2c_read(&m, &s, d);
    if (!rc)
        llama2c_close(&m);
    src_close(&s);
    free(copy);
    return rc;
}

static void
put_i32(uint8_t *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    for (int b = 0; b < 4; b++)
        p[b] = (uint8_t)(u >> (8 * b));
}

static const struct llama2c_config base_cfg = {
    .dim = 8, .hidden_dim = 12, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1,
    .vocab_size = 5, .seq_len = 3, .shared_classifier = true,
};

static void
check_model(const struct llama2c_model *r, const struct fixture *f, bool freq_given)
{
    const struct llama2c_config *c = &f->m.c;
    int32_t D = c->dim, H = c->hidden_dim, kv = c->n_kv_heads * (c->dim / c->n_heads);

    CHECK_EQ(r->c.dim, c->dim);
    CHECK_EQ(r->c.hidden_dim, c->hidden_dim);
    CHECK_EQ(r->c.n_layers, c->n_layers);
    CHECK_EQ(r->c.n_heads, c->n_heads);
    CHECK_EQ(r->c.n_kv_heads, c->n_kv_heads);
    CHECK_EQ(r->c.vocab_size, c->vocab_size);
    CHECK_EQ(r->c.seq_len, c->seq_len);
    CHECK_EQ(r->c.shared_classifier, c->shared_classifier);
    CHECK_EQ(r->head_size, D / c->n_heads);
    CHECK_EQ(r->kv_dim, kv);
    CHECK(same(r->token_embedding, f->m.token_embedding, (size_t)c->vocab_size * D));
    for (int l = 0; l < c->n_layers; l++) {
        const struct llama2c_layer *a = &r->layers[l], *b = &f->layers[l];
        CHECK(same(a->rms_att, b->rms_att, D));
        CHECK(same(a->wq, b->wq, (size_t)D * D));
        CHECK(same(a->wk, b->wk, (size_t)kv * D));
        CHECK(same(a->wv, b->wv, (size_t)kv * D));
        CHECK(same(a->wo, b->wo, (size_t)D * D));
        CHECK(same(a->rms_ffn, b->rms_ffn, D));
        CHECK(same(a->w1, b->w1, (size_t)H * D));
        CHECK(same(a->w2, b->w2, (size_t)D * H));
        CHECK(same(a->w3, b->w3, (size_t)H * D));
    }
    CHECK(same(r->rms_final, f->m.rms_final, D));
    if (c->shared_classifier)
        CHECK(r->wcls == r->token_embedding);
    else
        CHECK(same(r->wcls, f->m.wcls, (size_t)c->vocab_size * D));
    if (!freq_given) {
        /* as export.py: t = 0 row is cos 0 = 1, sin 0 = 0; t = 1, j = 0: cos 1, sin 1 */
        int half = r->head_size / 2;
        CHECK_NEAR(r->freq_cis_real[0], 1.0, 0);
        CHECK_NEAR(r->freq_cis_imag[0], 0.0, 0);
        CHECK_NEAR(r->freq_cis_real[half], cos(1.0), 1e-6);
        CHECK_NEAR(r->freq_cis_imag[half], sin(1.0), 1e-6);
        CHECK_NEAR(r->freq_cis_imag[half + 1], sin(1.0 / pow(10000.0, 2.0 / r->head_size)), 1e-6);
    }
}

static void
test_roundtrip(bool shared)
{
    struct llama2c_config c = base_cfg;
    struct fixture f;
    struct llama2c_model r;
    struct diag d;
    char *path = tmp(shared ? "shared.bin" : "separate.bin");
    uint64_t need;

    c.shared_classifier = shared;
    fixture_init(&f, &c);
    CHECK_EQ(llama2c_write(path, false, &f.m, &d), 0);
    CHECK_EQ(llama2c_write(path, false, &f.m, &d), -ST_RANGE); /* exists */
    CHECK_EQ(llama2c_open(&r, path, &d), 0);
    check_model(&r, &f, false);
    CHECK_EQ(llama2c_config_check(&c, &need, &d), 0);
    CHECK_EQ(r.file_size, need);
    {
        struct stat st;
        CHECK_EQ(stat(path, &st), 0);
        CHECK_EQ((uint64_t)st.st_size, need);
        /* 28 + 4 * (V*D + L*(2D + 2D*D + 2*kv*D + 3*H*D) + D + 2*S*hs/2 [+ V*D]) */
        uint64_t floats = 5 * 8 + 2 * (2 * 8 + 2 * 64 + 2 * 4 * 8 + 3 * 12 * 8) + 8 + 2 * 3 * 2 +
                          (shared ? 0 : 5 * 8);
        CHECK_EQ(need, 28 + 4 * floats);
    }
    /* the sign of vocab_size carries the flag */
    {
        size_t len;
        uint8_t *b = slurp(path, &len);
        int32_t v;
        memcpy(&v, b + 20, 4);
        CHECK_EQ(v, shared ? 5 : -5);
        free(b);
    }

    /* views: file order, shapes */
    {
        struct llama2c_view v[64];
        size_t n = llama2c_views(&r, v, 64);
        CHECK_EQ(n, 2 + 9 * 2 + (shared ? 0 : 1));
        CHECK_EQ(llama2c_views(&r, NULL, 0), n);
        CHECK_EQ(v[0].kind, LLAMA2C_TOKEN_EMBEDDING);
        CHECK_EQ(v[0].rows, 5);
        CHECK_EQ(v[0].cols, 8);
        CHECK_EQ(v[0].layer, -1);
        CHECK_EQ(v[1].kind, LLAMA2C_RMS_ATT);
        CHECK_EQ(v[1].layer, 0);
        CHECK_EQ(v[2].kind, LLAMA2C_RMS_ATT);
        CHECK_EQ(v[2].layer, 1);
        CHECK_EQ(v[5].kind, LLAMA2C_WK);
        CHECK_EQ(v[5].rows, 4);
        CHECK_EQ(v[5].cols, 8);
        CHECK(v[5].data == r.layers[0].wk);
        CHECK_EQ(v[15].kind, LLAMA2C_W2);
        CHECK_EQ(v[15].rows, 8);
        CHECK_EQ(v[15].cols, 12);
        CHECK_EQ(v[19].kind, LLAMA2C_RMS_FINAL);
        CHECK_STR(llama2c_kind_name(v[15].kind), "w2");
        if (!shared) {
            CHECK_EQ(v[20].kind, LLAMA2C_WCLS);
            CHECK(v[20].data == r.wcls);
        }
        /* views are contiguous in file order: each starts where the previous ended */
        for (size_t i = 1; i < n; i++)
            CHECK(v[i].data == v[i - 1].data + v[i - 1].rows * v[i - 1].cols ||
                  (v[i].kind == LLAMA2C_WCLS));
    }

    /* rewrite from the views read back (given freq_cis) -> identical bytes */
    {
        char *p2 = tmp("again.bin");
        size_t la, lb;
        uint8_t *a, *b;
        CHECK_EQ(llama2c_write(p2, true, &r, &d), 0);
        a = slurp(path, &la);
        b = slurp(p2, &lb);
        CHECK(a && b && la == lb && !memcmp(a, b, la));
        free(a);
        free(b);
        free(p2);
    }
    llama2c_close(&r);
    llama2c_close(&r);

    /* truncated by one byte, one byte too many */
    {
        size_t len;
        uint8_t *b = slurp(path, &len), *x = malloc(len + 1);
        memcpy(x, b, len);
        x[len] = 0;
        CHECK_EQ(parse_model(b, len, &d), 0);
        CHECK_EQ(parse_model(b, len - 1, &d), -ST_FORMAT);
        CHECK(strstr(d.msg, "implies") != NULL);
        CHECK_EQ(parse_model(x, len + 1, &d), -ST_FORMAT);
        CHECK(strstr(d.msg, "implies") != NULL);
        CHECK_EQ(parse_model(b, 27, &d), -ST_FORMAT);
        CHECK(strstr(d.msg, "too small") != NULL);
        CHECK_EQ(parse_model(b, 0, &d), -ST_FORMAT);
        /* flipping the classifier flag changes the implied size */
        put_i32(x, 0);
        memcpy(x, b, len);
        put_i32(x + 20, shared ? -5 : 5);
        CHECK_EQ(parse_model(x, len, &d), -ST_FORMAT);
        CHECK(strstr(d.msg, shared ? "separate classifier" : "shared classifier") != NULL);
        free(b);
        free(x);
    }
    fixture_free(&f);
    free(path);
}

static void
test_header_checks(void)
{
    static const struct {
        int32_t v[7];
        const char *want;
    } cases[] = {
        {{0, 12, 2, 2, 1, 5, 3}, "dim is 0, not positive"},
        {{8, -1, 2, 2, 1, 5, 3}, "hidden_dim is -1"},
        {{8, 12, 0, 2, 1, 5, 3}, "n_layers is 0"},
        {{8, 12, 2, 0, 1, 5, 3}, "n_heads is 0"},
        {{8, 12, 2, 2, 0, 5, 3}, "n_kv_heads is 0"},
        {{8, 12, 2, 2, 1, 0, 3}, "vocab_size is 0"},
        {{8, 12, 2, 2, 1, 5, 0}, "seq_len is 0"},
        {{8, 12, 2, 3, 1, 5, 3}, "dim 8 is not a multiple of n_heads 3"},
        {{8, 12, 2, 2, 3, 5, 3}, "n_heads 2 is not a multiple of n_kv_heads 3"},
        {{6, 12, 2, 2, 1, 5, 3}, "head size 3 is odd"},
        {{8, 12, 2, 2, 1, INT32_MIN, 3}, "out of range"},
        {{1 << 30, 1 << 30, 1 << 30, 2, 1, 5, 3}, "overflows"},
        {{65536, 2147483647, 2147483647, 2, 1, 2147483647, 2147483647}, "overflows"},
        {{8, 12, 2, 2, 1, 5, 3}, "implies"},            /* well-formed header, no data */
        {{1024, 4096, 1000, 8, 8, -32000, 4096}, "implies"},
    };
    uint8_t b[28];
    struct diag d;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int k = 0; k < 7; k++)
            put_i32(b + 4 * k, cases[i].v[k]);
        int rc = parse_model(b, 28, &d);
        CHECK_EQ(rc, -ST_FORMAT);
        if (!strstr(d.msg, cases[i].want)) {
            fprintf(stderr, "case %zu: want '%s', got '%s'\n", i, cases[i].want, d.msg);
            t_fail++;
        }
    }

    /* a pipe and unaligned bytes are refused */
    {
        struct src s;
        struct llama2c_model m;
        memset(&s, 0, sizeof(s));
        s.size = UINT64_MAX;
        CHECK_EQ(llama2c_read(&m, &s, &d), -ST_RANGE);
        CHECK(strstr(d.msg, "not a pipe") != NULL);
        uint8_t *buf = malloc(64);
        src_open_mem(&s, buf + 1, 40, "mem");
        CHECK_EQ(llama2c_read(&m, &s, &d), -ST_RANGE);
        CHECK(strstr(d.msg, "aligned") != NULL);
        src_close(&s);
        free(buf);
    }

    /* the writer refuses bad configs and missing arrays */
    {
        struct llama2c_config c = base_cfg;
        struct fixture f;
        char *p = tmp("bad.bin");
        fixture_init(&f, &c);
        f.m.c.n_heads = 3;
        CHECK_EQ(llama2c_write(p, true, &f.m, &d), -ST_FORMAT);
        f.m.c = c;
        f.m.c.shared_classifier = false;
        f.m.wcls = NULL;
        CHECK_EQ(llama2c_write(p, true, &f.m, &d), -ST_RANGE);
        f.m.c = c;
        const float *keep = f.layers[1].w3;
        f.layers[1].w3 = NULL;
        CHECK_EQ(llama2c_write(p, true, &f.m, &d), -ST_RANGE);
        CHECK(strstr(d.msg, "layer 1") != NULL);
        f.layers[1].w3 = keep;
        CHECK(!path_exists(p));
        fixture_free(&f);
        free(p);
    }
}

/* GQA with more layers: per-layer pointers step by the right strides. */
static void
test_gqa(void)
{
    struct llama2c_config c = {.dim = 16, .hidden_dim = 24, .n_layers = 4, .n_heads = 4,
                               .n_kv_heads = 2, .vocab_size = 7, .seq_len = 5,
                               .shared_classifier = false};
    struct fixture f;
    struct llama2c_model r;
    struct diag d;
    char *p = tmp("gqa.bin");

    fixture_init(&f, &c);
    CHECK_EQ(llama2c_write(p, false, &f.m, &d), 0);
    CHECK_EQ(llama2c_open(&r, p, &d), 0);
    check_model(&r, &f, false);
    CHECK_EQ(r.kv_dim, 8);
    CHECK(r.layers[1].wk == r.layers[0].wk + 8 * 16);
    CHECK(r.layers[3].w2 == r.layers[0].w2 + 3 * 16 * 24);
    llama2c_close(&r);
    fixture_free(&f);
    free(p);
}

/* ---- tokenizer ---- */

static int
parse_tok(const uint8_t *b, size_t n, int32_t vocab, struct llama2c_vocab *v, struct diag *d)
{
    struct src s;
    int rc;

    src_open_mem(&s, b, n, "mem");
    d->msg[0] = '\0';
    rc = llama2c_tokenizer_read(v, &s, vocab, d);
    src_close(&s);
    return rc;
}

static void
test_tokenizer(void)
{
    char *texts[] = {"<unk>", "\n<s>\n", "", "a\0b", " the", "<0x0A>"};
    int32_t lens[] = {5, 5, 0, 3, 4, 6};
    float scores[] = {0.0f, -1.5f, 2.0f, -1e9f, 3.25f, NAN};
    struct llama2c_vocab w = {.max_token_length = 2, .n = 6, .text = texts, .len = lens,
                              .score = scores};
    struct llama2c_vocab v;
    struct diag d;
    char *p = tmp("tokenizer.bin");
    uint8_t *b;
    size_t len;

    CHECK_EQ(llama2c_tokenizer_write(p, false, &w, &d), 0);
    b = slurp(p, &len);
    CHECK_EQ(len, 4 + 6 * 8 + 5 + 5 + 0 + 3 + 4 + 6);
    CHECK_EQ(b[0], 6); /* max_token_length raised to the longest */
    for (int32_t vocab = 0; vocab <= 6; vocab += 6) {
        CHECK_EQ(llama2c_tokenizer_open(&v, p, vocab, &d), 0);
        CHECK_EQ(v.n, 6);
        CHECK_EQ(v.max_token_length, 6);
        for (int i = 0; i < 6; i++) {
            CHECK_EQ(v.len[i], lens[i]);
            CHECK(!memcmp(v.text[i], texts[i], (size_t)lens[i]));
            CHECK_EQ(v.text[i][lens[i]], '\0');
            if (i != 5)
                CHECK_EQ(v.score[i], scores[i]);
        }
        CHECK(isnan(v.score[5]));
        llama2c_tokenizer_release(&v);
    }
    llama2c_tokenizer_release(&v);

    CHECK_EQ(parse_tok(b, len, 5, &v, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "14 bytes after the last of 5 tokens") != NULL);
    CHECK_EQ(parse_tok(b, len, 7, &v, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "token 6: record truncated") != NULL);
    CHECK_EQ(parse_tok(b, len - 1, 6, &v, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "token 5: length 6 runs past the end") != NULL);
    CHECK_EQ(parse_tok(b, len - 1, 0, &v, &d), -ST_FORMAT);
    CHECK_EQ(parse_tok(b, 3, 6, &v, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "no max_token_length") != NULL);
    CHECK_EQ(parse_tok(b, 4, 0, &v, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "no tokens") != NULL);
    CHECK_EQ(parse_tok(b, len, -1, &v, &d), -ST_RANGE);
    CHECK_EQ(v.n, 0);
    {
        uint8_t *x = malloc(len);
        memcpy(x, b, len);
        put_i32(x + 4 + 4, 7); /* token 0 claims 7 bytes > max 6 */
        CHECK_EQ(parse_tok(x, len, 6, &v, &d), -ST_FORMAT);
        CHECK(strstr(d.msg, "token 0: length 7 outside 0..6") != NULL);
        put_i32(x + 4 + 4, -1);
        CHECK_EQ(parse_tok(x, len, 6, &v, &d), -ST_FORMAT);
        CHECK(strstr(d.msg, "length -1") != NULL);
        memcpy(x, b, len);
        put_i32(x, (int32_t)LLAMA2C_MAX_TOKEN_LEN + 1);
        CHECK_EQ(parse_tok(x, len, 6, &v, &d), -ST_FORMAT);
        CHECK(strstr(d.msg, "max_token_length") != NULL);
        free(x);
    }

    /* through a pipe: same result, and the trailing check still works */
    for (int32_t vocab = 0; vocab <= 6; vocab += 3) {
        int fd[2];
        struct src s;
        CHECK_EQ(pipe(fd), 0);
        CHECK_EQ(write(fd[1], b, len), (ssize_t)len);
        close(fd[1]);
        memset(&s, 0, sizeof(s));
        s.name = strdup("<pipe>");
        s.size = UINT64_MAX;
        s.fp = fdopen(fd[0], "rb");
        int rc = llama2c_tokenizer_read(&v, &s, vocab, &d);
        if (vocab == 3) {
            CHECK_EQ(rc, -ST_FORMAT);
            CHECK(strstr(d.msg, "data after the last of 3 tokens") != NULL);
        } else {
            CHECK_EQ(rc, 0);
            CHECK_EQ(v.n, 6);
            CHECK(!memcmp(v.text[3], "a\0b", 4));
        }
        llama2c_tokenizer_release(&v);
        src_close(&s);
    }

    w.n = 1;
    lens[0] = -2;
    CHECK_EQ(llama2c_tokenizer_write(p, true, &w, &d), -ST_RANGE);
    free(b);
    free(p);
}

/* ---- seed corpus for the fuzzer ---- */

static void
corpus_file(const char *dir, const char *name, const uint8_t *b, size_t n)
{
    char *p = path_join(dir, name);
    FILE *fp = fopen(p, "wb");
    if (fp) {
        fwrite(b, 1, n, fp);
        fclose(fp);
    }
    free(p);
}

static void
write_corpus(const char *out)
{
    struct llama2c_config c = {.dim = 8, .hidden_dim = 8, .n_layers = 1, .n_heads = 2,
                               .n_kv_heads = 1, .vocab_size = 4, .seq_len = 2,
                               .shared_classifier = true};
    char *texts[] = {"<unk>", "\n<s>\n", "\n</s>\n", "ab"};
    int32_t lens[] = {5, 5, 6, 2};
    float scores[] = {0, 0, 0, -1};
    struct llama2c_vocab w = {.n = 4, .text = texts, .len = lens, .score = scores};
    struct fixture f;
    struct diag d;
    char *p = tmp("c.bin");
    uint8_t *b, hdr[28];
    size_t len;

    mkdir(out, 0755);
    for (int shared = 0; shared < 2; shared++) {
        c.shared_classifier = shared;
        fixture_init(&f, &c);
        llama2c_write(p, true, &f.m, &d);
        fixture_free(&f);
        b = slurp(p, &len);
        corpus_file(out, shared ? "model_shared" : "model_separate", b, len);
        if (shared) {
            corpus_file(out, "model_trunc", b, len - 3);
            corpus_file(out, "model_header_only", b, 28);
            for (int k = 0; k < 8; k++) {
                char name[32];
                uint8_t *x = malloc(len);
                memcpy(x, b, len);
                x[(size_t)k * 3 % 28] ^= (uint8_t)(1u << (k % 8)); /* header flips */
                snprintf(name, sizeof(name), "model_flip_%d", k);
                corpus_file(out, name, x, len);
                free(x);
            }
        }
        free(b);
    }
    {
        static const int32_t bad[][7] = {
            {0, 0, 0, 0, 0, 0, 0},
            {8, 8, 1, 2, 1, INT32_MIN, 2},
            {1 << 30, 1 << 30, 1 << 30, 2, 1, 5, 3},
            {65536, 2147483647, 2147483647, 2, 1, 2147483647, 2147483647},
            {8, 8, 1, 3, 1, 4, 2},
            {6, 8, 1, 2, 1, 4, 2},
            {-8, 8, 1, 2, 1, 4, 2},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char name[32];
            for (int k = 0; k < 7; k++)
                put_i32(hdr + 4 * k, bad[i][k]);
            snprintf(name, sizeof(name), "model_bad_%zu", i);
            corpus_file(out, name, hdr, 28);
        }
    }
    llama2c_tokenizer_write(p, true, &w, &d);
    b = slurp(p, &len);
    corpus_file(out, "tok_valid", b, len);
    corpus_file(out, "tok_trunc", b, len - 1);
    corpus_file(out, "tok_only_max", b, 4);
    {
        uint8_t *x = malloc(len);
        memcpy(x, b, len);
        put_i32(x + 8, 0x7fffffff);
        corpus_file(out, "tok_huge_len", x, len);
        memcpy(x, b, len);
        put_i32(x + 8, -5);
        corpus_file(out, "tok_negative_len", x, len);
        memcpy(x, b, len);
        put_i32(x, -1);
        corpus_file(out, "tok_huge_max", x, len);
        free(x);
    }
    free(b);
    free(p);
}

int
main(void)
{
    const char *corpus = getenv("LLMKIT_FUZZ_CORPUS_OUT");
    char cmd[256];

    if (!mkdtemp(tmproot)) {
        perror("mkdtemp");
        return 1;
    }
    if (corpus && *corpus) {
        write_corpus(corpus);
    } else {
        test_roundtrip(true);
        test_roundtrip(false);
        test_header_checks();
        test_gqa();
        test_tokenizer();
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmproot);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", tmproot);
    if (getenv("T_VERBOSE"))
        fprintf(stderr, "%s: %d checks\n", __FILE__, t_checks);
    T_DONE();
}
