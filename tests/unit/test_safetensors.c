/*
 * test_safetensors.c - safetensors reader, sharded checkpoints and writer.
 *
 * With LLMKIT_FUZZ_CORPUS_OUT=DIR set it also writes the seed corpus of
 * tests/fuzz/fuzz_safetensors.c into DIR (see tests/fuzz/README.md).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "t.h"
#include "xio.h"

static char tmproot[] = "/tmp/llmkit_test_st_XXXXXX";

/* ---- helpers ---- */

static uint8_t
pat(size_t i, uint64_t j)
{
    return (uint8_t)(i * 31 + j * 7 + 1);
}

/* A safetensors file from a header text and a data section of data_len
 * pattern bytes; *len gets the total size.  Caller frees. */
static uint8_t *
mk(const char *json, size_t data_len, size_t *len)
{
    size_t n = strlen(json);
    uint8_t *b = malloc(8 + n + data_len + 1);

    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    for (size_t j = 0; j < data_len; j++)
        b[8 + n + j] = pat(0, j);
    *len = 8 + n + data_len;
    return b;
}

/* Parses buf; returns rc and leaves the message in d. */
static int
parse(const uint8_t *buf, size_t len, struct diag *d)
{
    struct src s;
    struct sft_file f;
    int rc;

    src_open_mem(&s, buf, len, "mem");
    d->msg[0] = '\0';
    rc = sft_read(&f, &s, d);
    if (rc == 0)
        sft_close(&f);
    src_close(&s);
    return rc;
}

/* Expects header `json` with data_len bytes to fail with -ST_FORMAT and a
 * message containing `want`. */
static void
expect_bad(const char *json, size_t data_len, const char *want, int line)
{
    struct diag d;
    size_t len;
    uint8_t *b = mk(json, data_len, &len);
    int rc = parse(b, len, &d);

    if (rc != -ST_FORMAT || !strstr(d.msg, want)) {
        fprintf(stderr, "line %d: expected -ST_FORMAT with '%s', got %d '%s'\n", line, want, rc,
                d.msg);
        t_fail++;
    }
    t_checks++;
    free(b);
}
#define BAD(json, n, want) expect_bad((json), (n), (want), __LINE__)

static void
expect_ok(const char *json, size_t data_len, int line)
{
    struct diag d;
    size_t len;
    uint8_t *b = mk(json, data_len, &len);
    int rc = parse(b, len, &d);

    if (rc != 0) {
        fprintf(stderr, "line %d: expected success, got %d '%s'\n", line, rc, d.msg);
        t_fail++;
    }
    t_checks++;
    free(b);
}
#define OK(json, n) expect_ok((json), (n), __LINE__)

static char *
subdir(const char *name)
{
    char *p = path_join(tmproot, name);
    mkdir(p, 0755);
    return p;
}

/* Writes plan p into dir with pattern data (tensor i, byte j -> pat(i, j)),
 * in chunks of at most `chunk` bytes.  Returns the writer's rc. */
static int
write_plan_dir(const struct sft_plan *p, const char *dir, uint64_t chunk, struct diag *d)
{
    struct sft_writer w;
    uint8_t buf[4096];
    int rc;

    rc = sft_writer_open_dir(&w, p, dir, true, d);
    if (rc)
        return rc;
    for (size_t k = 0; k < p->n; k++) {
        size_t i = p->order[k];
        uint64_t done = 0;
        if (sft_writer_next(&w) != i) {
            sft_writer_abort(&w);
            return diag_set(d, ST_FAIL, "sft_writer_next disagrees with order");
        }
        do {
            uint64_t n = p->nbytes[i] - done;
            if (n > chunk)
                n = chunk;
            if (n > sizeof(buf))
                n = sizeof(buf);
            for (uint64_t j = 0; j < n; j++)
                buf[j] = pat(i, done + j);
            rc = sft_writer_put(&w, i, buf, n, d);
            if (rc) {
                sft_writer_abort(&w);
                return rc;
            }
            done += n;
        } while (done < p->nbytes[i]);
    }
    CHECK_EQ(sft_writer_next(&w), (size_t)-1);
    return sft_writer_close(&w, d);
}

static bool
data_matches(const struct sft_tensor *t, size_t i)
{
    for (uint64_t j = 0; j < t->nbytes; j++)
        if (t->data[j] != pat(i, j))
            return false;
    return true;
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

/* ---- tests ---- */

static void
test_dtypes(void)
{
    static const char *names[] = {"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2",
                                  "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",
                                  "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64",
                                  "I64", "U64"};
    static const unsigned bits[] = {8, 4, 6, 6, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16, 16, 32, 32, 32,
                                    64, 64, 64, 64};
    uint64_t nb;
    struct diag d;

    CHECK_EQ(SFT_DTYPE_COUNT, 22);
    for (int i = 0; i < SFT_DTYPE_COUNT; i++) {
        CHECK_STR(sft_dtype_name((enum sft_dtype)i), names[i]);
        CHECK_EQ(sft_dtype_bits((enum sft_dtype)i), bits[i]);
        CHECK_EQ(sft_dtype_by_name(names[i]), i);
    }
    CHECK(sft_dtype_name(SFT_DTYPE_COUNT) == NULL);
    CHECK_EQ(sft_dtype_bits(SFT_DTYPE_COUNT), 0);
    CHECK_EQ(sft_dtype_by_name("f32"), -1);
    CHECK_EQ(sft_dtype_by_name("F8_E4M3FN"), -1);

    int64_t s1[] = {3, 2};
    CHECK_EQ(sft_tensor_nbytes(SFT_F4, 2, s1, &nb, &d), 0);
    CHECK_EQ(nb, 3);
    int64_t s2[] = {3};
    CHECK_EQ(sft_tensor_nbytes(SFT_F4, 1, s2, &nb, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "whole bytes") != NULL);
    int64_t s3[] = {4};
    CHECK_EQ(sft_tensor_nbytes(SFT_F6_E3M2, 1, s3, &nb, &d), 0);
    CHECK_EQ(nb, 3);
    CHECK_EQ(sft_tensor_nbytes(SFT_F64, 0, NULL, &nb, &d), 0);
    CHECK_EQ(nb, 8);
    int64_t s4[] = {(int64_t)1 << 62, (int64_t)1 << 62};
    CHECK_EQ(sft_tensor_nbytes(SFT_U8, 2, s4, &nb, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "overflows") != NULL);
    int64_t s5[] = {(int64_t)1 << 61};
    CHECK_EQ(sft_tensor_nbytes(SFT_F64, 1, s5, &nb, &d), -ST_FORMAT);
    int64_t s6[] = {0, (int64_t)1 << 62, (int64_t)1 << 62}; /* 0 first: folds to 0 */
    CHECK_EQ(sft_tensor_nbytes(SFT_U8, 3, s6, &nb, &d), 0);
    CHECK_EQ(nb, 0);
    int64_t s7[] = {(int64_t)1 << 62, (int64_t)1 << 62, 0}; /* overflows before the 0 */
    CHECK_EQ(sft_tensor_nbytes(SFT_U8, 3, s7, &nb, &d), -ST_FORMAT);
}

/* The exact header the reference writer produces. */
static void
test_header_layout(void)
{
    struct sft_wtensor t[] = {
        {.name = "b", .dtype = SFT_F32, .n_dims = 1, .shape = {2}},
        {.name = "a", .dtype = SFT_F16, .n_dims = 1, .shape = {2}},
        {.name = "c", .dtype = SFT_F32, .n_dims = 2, .shape = {1, 1}},
        {.name = "s", .dtype = SFT_I64, .n_dims = 0},
    };
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                       "\"c\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[16,20]},"
                       "\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[20,24]}}";
    struct sft_plan p;
    struct diag d;
    char *h;
    size_t len, wl = strlen(want);

    CHECK_EQ(sft_plan_init(&p, t, 4, 0, NULL, 0, &d), 0);
    CHECK_EQ(p.n_shards, 1);
    CHECK_STR(p.shards[0].name, "model.safetensors");
    CHECK_EQ(p.order[0], 3);
    CHECK_EQ(p.order[1], 0);
    CHECK_EQ(p.order[2], 2);
    CHECK_EQ(p.order[3], 1);
    CHECK_EQ(p.total_size, 24);
    CHECK_EQ(sft_plan_header(&p, 0, &h, &len, &d), 0);
    CHECK_EQ(len % 8, 0);
    CHECK(len >= wl && len < wl + 8);
    CHECK(!strncmp(h, want, wl));
    for (size_t i = wl; i < len; i++)
        CHECK_EQ(h[i], ' ');
    free(h);
    sft_plan_release(&p);

    /* Explicit metadata in the given order; none at all; escaping as serde. */
    struct sft_kv meta[] = {{"z", "1"}, {"a", "q\"\\\n\x01/\xc3\xa9"}};
    struct sft_wtensor e[] = {{.name = "x\ty", .dtype = SFT_U8, .n_dims = 1, .shape = {0}}};
    CHECK_EQ(sft_plan_init(&p, e, 1, 0, meta, 2, &d), 0);
    CHECK_EQ(sft_plan_header(&p, 0, &h, &len, &d), 0);
    const char *w2 = "{\"__metadata__\":{\"z\":\"1\",\"a\":\"q\\\"\\\\\\n\\u0001/\xc3\xa9\"},"
                     "\"x\\ty\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    CHECK(!strncmp(h, w2, strlen(w2)));
    free(h);
    sft_plan_release(&p);
    CHECK_EQ(sft_plan_init(&p, e, 1, 0, meta, 0, &d), 0);
    CHECK_EQ(sft_plan_header(&p, 0, &h, &len, &d), 0);
    CHECK(!strncmp(h, "{\"x\\ty\":{", 9));
    free(h);
    sft_plan_release(&p);
}

static void
test_plan_errors(void)
{
    struct sft_plan p;
    struct diag d;
    struct sft_wtensor dup[] = {{.name = "a", .dtype = SFT_U8, .n_dims = 1, .shape = {1}},
                                {.name = "a", .dtype = SFT_F32, .n_dims = 1, .shape = {1}}};
    struct sft_wtensor utf[] = {{.name = "bad\xff", .dtype = SFT_U8, .n_dims = 0}};
    struct sft_wtensor res[] = {{.name = "__metadata__", .dtype = SFT_U8, .n_dims = 0}};
    struct sft_wtensor f4[] = {{.name = "q", .dtype = SFT_F4, .n_dims = 1, .shape = {5}}};
    struct sft_wtensor neg[] = {{.name = "q", .dtype = SFT_F32, .n_dims = 1, .shape = {-1}}};
    struct sft_wtensor bad[] = {{.name = "q", .dtype = (enum sft_dtype)99, .n_dims = 0}};
    struct sft_wtensor dims[] = {{.name = "q", .dtype = SFT_U8, .n_dims = 9}};
    struct sft_kv badmeta[] = {{"k", "\xc0\x80"}};

    CHECK_EQ(sft_plan_init(&p, dup, 2, 0, NULL, 0, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "'a' given twice") != NULL);
    CHECK_EQ(sft_plan_init(&p, utf, 1, 0, NULL, 0, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "UTF-8") != NULL);
    CHECK_EQ(sft_plan_init(&p, res, 1, 0, NULL, 0, &d), -ST_RANGE);
    CHECK_EQ(sft_plan_init(&p, f4, 1, 0, NULL, 0, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "tensor 'q'") != NULL);
    CHECK_EQ(sft_plan_init(&p, neg, 1, 0, NULL, 0, &d), -ST_RANGE);
    CHECK_EQ(sft_plan_init(&p, bad, 1, 0, NULL, 0, &d), -ST_RANGE);
    CHECK_EQ(sft_plan_init(&p, dims, 1, 0, NULL, 0, &d), -ST_RANGE);
    CHECK_EQ(sft_plan_init(&p, f4, 0, 0, badmeta, 1, &d), -ST_RANGE);
    CHECK_EQ(p.nbytes, NULL); /* released on failure */
}

/* write -> read: same tensors, bytes, metadata; every dtype kind. */
static void
test_roundtrip(void)
{
    struct sft_wtensor t[] = {
        {.name = "model.embed_tokens.weight", .dtype = SFT_BF16, .n_dims = 2, .shape = {7, 5}},
        {.name = "w.f32", .dtype = SFT_F32, .n_dims = 3, .shape = {2, 3, 4}},
        {.name = "scalar", .dtype = SFT_I64, .n_dims = 0},
        {.name = "empty", .dtype = SFT_U8, .n_dims = 2, .shape = {0, 5}},
        {.name = "fp4", .dtype = SFT_F4, .n_dims = 2, .shape = {3, 2}},
        {.name = "fp6", .dtype = SFT_F6_E2M3, .n_dims = 1, .shape = {4}},
        {.name = "mask", .dtype = SFT_BOOL, .n_dims = 1, .shape = {3}},
        {.name = "c", .dtype = SFT_C64, .n_dims = 1, .shape = {2}},
        {.name = "\xc3\xa9t\xc3\xa9", .dtype = SFT_F8_E4M3, .n_dims = 8, .shape = {1, 1, 1, 1, 1, 1, 2, 3}},
    };
    size_t n = sizeof(t) / sizeof(t[0]);
    struct sft_kv meta[] = {{"format", "pt"}, {"note", "hello"}};
    struct sft_plan p;
    struct sft_file f;
    struct diag d;
    char *dir = subdir("rt"), *path = path_join(dir, "model.safetensors");

    CHECK_EQ(sft_plan_init(&p, t, n, 0, meta, 2, &d), 0);
    CHECK_EQ(write_plan_dir(&p, dir, 5, &d), 0);
    {
        char *ip = path_join(dir, SFT_INDEX_NAME);
        CHECK(!path_exists(ip));
        free(ip);
    }
    CHECK_EQ(sft_open(&f, path, &d), 0);
    CHECK_EQ(f.n_tensors, n);
    CHECK_EQ(f.header_len % 8, 0);
    CHECK_EQ(f.n_meta, 2);
    CHECK(f.has_meta);
    CHECK_STR(f.meta[0].key, "format");
    CHECK_STR(f.meta[1].key, "note");
    CHECK_STR(sft_meta_get(&f, "note"), "hello");
    CHECK(sft_meta_get(&f, "nope") == NULL);
    for (size_t i = 0; i < n; i++) {
        const struct sft_tensor *x = sft_find(&f, t[i].name);
        CHECK(x != NULL);
        if (!x)
            continue;
        CHECK_EQ(x->dtype, t[i].dtype);
        CHECK_EQ(x->n_dims, t[i].n_dims);
        for (int k = 0; k < t[i].n_dims; k++)
            CHECK_EQ(x->shape[k], t[i].shape[k]);
        CHECK_EQ(x->nbytes, p.nbytes[i]);
        CHECK_EQ(x->begin, p.offset[i]);
        CHECK(data_matches(x, i));
    }
    /* file order == write order */
    for (size_t k = 0; k < n; k++)
        CHECK_STR(f.t[k].name, t[p.order[k]].name);
    CHECK_EQ(sft_find(&f, "fp4")->nbytes, 3);
    CHECK_EQ(sft_find(&f, "fp6")->nbytes, 3);
    CHECK_EQ(sft_find(&f, "scalar")->numel, 1);
    CHECK_EQ(sft_find(&f, "empty")->numel, 0);
    CHECK(sft_find(&f, "missing") == NULL);
    sft_close(&f);
    sft_close(&f); /* twice is fine */

    /* The same plan to a single file, in one put per tensor. */
    {
        struct sft_writer w;
        char *p2 = path_join(tmproot, "single.safetensors");
        uint8_t *a, *b;
        size_t la, lb;
        CHECK_EQ(sft_writer_open_file(&w, &p, p2, false, &d), 0);
        for (size_t k = 0; k < n; k++) {
            size_t i = p.order[k];
            uint8_t *buf = malloc(p.nbytes[i] + 1);
            for (uint64_t j = 0; j < p.nbytes[i]; j++)
                buf[j] = pat(i, j);
            CHECK_EQ(sft_writer_put(&w, i, buf, p.nbytes[i], &d), 0);
            free(buf);
        }
        CHECK_EQ(sft_writer_close(&w, &d), 0);
        a = slurp(path, &la);
        b = slurp(p2, &lb);
        CHECK(a && b && la == lb && !memcmp(a, b, la));
        free(a);
        free(b);
        /* refuses to replace without force */
        CHECK_EQ(sft_writer_open_file(&w, &p, p2, false, &d), 0);
        {
            uint8_t zero[8] = {0};
            CHECK_EQ(p.nbytes[p.order[0]], 8);
            CHECK_EQ(sft_writer_put(&w, p.order[0], zero, 8, &d), -ST_RANGE);
            CHECK(strstr(d.msg, "already exists") != NULL);
        }
        sft_writer_abort(&w);
        free(p2);
    }

    /* Model API over the directory (single file form). */
    {
        struct sft_model m;
        CHECK_EQ(sft_model_open(&m, dir, &d), 0);
        CHECK(!m.sharded);
        CHECK_EQ(m.n_files, 1);
        CHECK_EQ(m.n_tensors, n);
        for (size_t i = 0; i + 1 < m.n_tensors; i++)
            CHECK(strcmp(m.tensors[i].t->name, m.tensors[i + 1].t->name) < 0);
        size_t file = 99;
        const struct sft_tensor *x = sft_model_find(&m, "w.f32", &file);
        CHECK(x && data_matches(x, 1));
        CHECK_EQ(file, 0);
        CHECK(sft_model_find(&m, "zzz", NULL) == NULL);
        sft_model_close(&m);
        CHECK_EQ(sft_model_open(&m, path, &d), 0); /* a path to the file */
        CHECK_EQ(m.n_tensors, n);
        sft_model_close(&m);
    }
    sft_plan_release(&p);
    free(path);
    free(dir);
}

static void
test_writer_misuse(void)
{
    struct sft_wtensor t[] = {
        {.name = "a", .dtype = SFT_F32, .n_dims = 1, .shape = {2}},
        {.name = "b", .dtype = SFT_F32, .n_dims = 1, .shape = {2}},
    };
    struct sft_plan p;
    struct sft_writer w;
    struct diag d;
    uint8_t buf[16] = {0};
    char *dir = subdir("misuse"), *path = path_join(dir, "model.safetensors");

    CHECK_EQ(sft_plan_init(&p, t, 2, 0, NULL, 0, &d), 0);
    CHECK_EQ(sft_writer_open_dir(&w, &p, dir, false, &d), 0);
    CHECK_EQ(sft_writer_put(&w, 1, buf, 8, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "out of order") && strstr(d.msg, "'a' comes next"));
    CHECK_EQ(sft_writer_put(&w, 0, buf, 9, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "9 bytes given, 8 expected") != NULL);
    CHECK_EQ(sft_writer_put(&w, 0, buf, 4, &d), 0);
    CHECK_EQ(sft_writer_put(&w, 1, buf, 4, &d), -ST_RANGE); /* a is half done */
    CHECK_EQ(sft_writer_put(&w, 0, buf, 4, &d), 0);
    CHECK_EQ(sft_writer_close(&w, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "'b' was not written") != NULL);
    CHECK(!path_exists(path)); /* nothing partial left */
    {
        /* no stray temporaries either */
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", dir);
        CHECK_EQ(system(cmd), 0);
    }
    CHECK_EQ(sft_writer_open_file(&w, &p, path, false, &d), 0);
    sft_writer_abort(&w);
    sft_writer_abort(&w);
    CHECK_EQ(sft_writer_open_dir(&w, &p, "/nonexistent/dir", false, &d), -ST_IO);
    sft_writer_abort(&w);

    /* Empty plan: one file with only the metadata. */
    {
        struct sft_plan e;
        struct sft_file f;
        CHECK_EQ(sft_plan_init(&e, NULL, 0, 100, NULL, 0, &d), 0);
        CHECK_EQ(e.n_shards, 1);
        CHECK_EQ(sft_writer_open_dir(&w, &e, dir, false, &d), 0);
        CHECK_EQ(sft_writer_put(&w, 0, NULL, 0, &d), -ST_RANGE);
        CHECK_EQ(sft_writer_close(&w, &d), 0);
        CHECK_EQ(sft_open(&f, path, &d), 0);
        CHECK_EQ(f.n_tensors, 0);
        CHECK_STR(sft_meta_get(&f, "format"), "pt");
        sft_close(&f);
        sft_plan_release(&e);
    }
    sft_plan_release(&p);
    free(path);
    free(dir);
}

static void
test_validation(void)
{
    struct diag d;
    uint8_t b[64];
    size_t len;
    uint8_t *x;

    /* size and header length */
    memset(b, 0, sizeof(b));
    CHECK_EQ(parse(b, 7, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "too small") != NULL);
    CHECK_EQ(parse(b, 0, &d), -ST_FORMAT);
    b[0] = 0x01; b[1] = 0xe1; b[2] = 0xf5; b[3] = 0x05; /* 100000001 */
    CHECK_EQ(parse(b, 64, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "exceeds the limit") != NULL);
    memset(b, 0xff, 8);
    CHECK_EQ(parse(b, 64, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "exceeds the limit") != NULL);
    memset(b, 0, 8);
    b[0] = 57;
    CHECK_EQ(parse(b, 64, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "past the end") != NULL);
    b[0] = 0;
    CHECK_EQ(parse(b, 8, &d), -ST_FORMAT); /* N = 0 */
    CHECK(strstr(d.msg, "start with '{'") != NULL);

    /* JSON shape */
    BAD(" {}", 0, "start with '{'");
    BAD("[1]", 0, "start with '{'");
    BAD("{", 0, "header: invalid JSON");
    BAD("{}x", 0, "invalid JSON");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, "duplicate");
    BAD("{\"\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "invalid JSON");
    BAD("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "invalid JSON");
    BAD("{\"a\":1}", 0, "tensor 'a': entry is not an object");
    BAD("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "missing 'dtype'");
    BAD("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "missing 'shape'");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "missing 'data_offsets'");
    BAD("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown dtype 'Q4'");
    BAD("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'dtype' is not a string");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "not a non-negative integer");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1, "not a non-negative integer");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1, "'shape' is not an array");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
        "9 entries");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, "[begin, end]");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, "'data_offsets' has 3");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,1]}}", 1,
        "invalid JSON");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,4611686018427387904],"
        "\"data_offsets\":[0,1]}}", 1, "tensor 'a': element count overflows");
    BAD("{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,1]}}", 1,
        "byte size overflows");
    BAD("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", 1, "whole bytes");

    /* layout */
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3,
        "tensor 'b': data begins at 1, but 'a' ends at 2 (overlap)");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", 5, "(hole)");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3, "begins at 1, not 0");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[3,1]}}", 3, "end before");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
        "hold 4 bytes, but F32 shape needs 8");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 3,
        "tensors cover 2 bytes but the data section has 3");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 1, "cover 2 bytes");
    BAD("{}", 1, "cover 0 bytes");

    /* metadata */
    BAD("{\"__metadata__\":{\"a\":1}}", 0, "'__metadata__' value of 'a' is not a string");
    BAD("{\"__metadata__\":{\"a\":{}}}", 0, "not a string");
    BAD("{\"__metadata__\":[]}", 0, "'__metadata__' is not an object");
    OK("{\"__metadata__\":null}", 0);
    OK("{\"__metadata__\":{}}", 0);
    OK("{}", 0);
    OK("{}      ", 0);
    OK("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],\"extra\":true}}", 2);
    /* order in the JSON does not matter; zero-size tensors may sit anywhere */
    OK("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
       "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]},"
       "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 4);

    /* NUL padding after the JSON is not allowed (only spaces) */
    x = mk("{}      ", 0, &len);
    x[8 + 3] = '\0';
    CHECK_EQ(parse(x, len, &d), -ST_FORMAT);
    free(x);

    /* metadata values keep embedded NULs */
    {
        struct src s;
        struct sft_file f;
        x = mk("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, &len);
        src_open_mem(&s, x, len, "mem");
        CHECK_EQ(sft_read(&f, &s, &d), 0);
        CHECK_EQ(f.n_meta, 1);
        CHECK_EQ(f.meta[0].value_len, 3);
        CHECK(!memcmp(f.meta[0].value, "a\0b", 4));
        sft_close(&f);
        src_close(&s);
        free(x);
    }

    /* a pipe is refused with a clear message */
    {
        struct src s;
        struct sft_file f;
        memset(&s, 0, sizeof(s));
        s.size = UINT64_MAX;
        CHECK_EQ(sft_read(&f, &s, &d), -ST_RANGE);
        CHECK(strstr(d.msg, "not a pipe") != NULL);
    }

    /* a long name with control bytes is cleaned in messages */
    {
        char json[400];
        snprintf(json, sizeof(json), "{\"%s\\n%s\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}",
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                 "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
        x = mk(json, 0, &len);
        CHECK_EQ(parse(x, len, &d), -ST_FORMAT);
        CHECK(strchr(d.msg, '\n') == NULL);
        CHECK(strstr(d.msg, "a?b") != NULL);
        CHECK(strstr(d.msg, "...") != NULL);
        free(x);
    }
}

/* Split rules of huggingface_hub, file names, index text, reading back. */
static void
test_sharding(void)
{
    struct sft_wtensor t[] = {
        {.name = "A", .dtype = SFT_U8, .n_dims = 1, .shape = {40}},
        {.name = "B", .dtype = SFT_U8, .n_dims = 1, .shape = {40}},
        {.name = "C", .dtype = SFT_F32, .n_dims = 1, .shape = {25}}, /* 100 > 64 */
        {.name = "D", .dtype = SFT_U8, .n_dims = 1, .shape = {30}},
        {.name = "E", .dtype = SFT_F16, .n_dims = 1, .shape = {5}},
    };
    const char *want_index =
        "{\n"
        "  \"metadata\": {\n"
        "    \"total_size\": 220\n"
        "  },\n"
        "  \"weight_map\": {\n"
        "    \"A\": \"model-00001-of-00004.safetensors\",\n"
        "    \"B\": \"model-00003-of-00004.safetensors\",\n"
        "    \"C\": \"model-00002-of-00004.safetensors\",\n"
        "    \"D\": \"model-00004-of-00004.safetensors\",\n"
        "    \"E\": \"model-00004-of-00004.safetensors\"\n"
        "  }\n"
        "}\n";
    struct sft_plan p;
    struct sft_model m;
    struct diag d;
    char *dir = subdir("sharded"), *idx;
    uint8_t *text;
    size_t len;

    CHECK_EQ(sft_plan_init(&p, t, 5, 64, NULL, 0, &d), 0);
    CHECK_EQ(p.n_shards, 4);
    CHECK_EQ(p.shard_of[0], 0);
    CHECK_EQ(p.shard_of[1], 2);
    CHECK_EQ(p.shard_of[2], 1);
    CHECK_EQ(p.shard_of[3], 3);
    CHECK_EQ(p.shard_of[4], 3);
    CHECK_STR(p.shards[0].name, "model-00001-of-00004.safetensors");
    CHECK_STR(p.shards[3].name, "model-00004-of-00004.safetensors");
    CHECK_EQ(p.shards[3].data_size, 40);
    /* order: shard by shard; in shard 3, F16 'E' before U8 'D' */
    CHECK_EQ(p.order[0], 0);
    CHECK_EQ(p.order[1], 2);
    CHECK_EQ(p.order[2], 1);
    CHECK_EQ(p.order[3], 4);
    CHECK_EQ(p.order[4], 3);
    CHECK_EQ(p.total_size, 220);
    CHECK_EQ(write_plan_dir(&p, dir, 1000, &d), 0);
    idx = path_join(dir, SFT_INDEX_NAME);
    text = slurp(idx, &len);
    CHECK(text != NULL);
    if (text) {
        CHECK_EQ(len, strlen(want_index));
        CHECK_STR((char *)text, want_index);
    }
    free(text);

    CHECK_EQ(sft_model_open(&m, dir, &d), 0);
    CHECK(m.sharded);
    CHECK_EQ(m.n_files, 4);
    CHECK_EQ(m.n_tensors, 5);
    CHECK(m.has_total_size);
    CHECK_EQ(m.total_size, 220);
    for (size_t i = 0; i < 5; i++) {
        size_t file = 99;
        const struct sft_tensor *x = sft_model_find(&m, t[i].name, &file);
        CHECK(x && data_matches(x, i));
        CHECK(file < 4 && !strcmp(m.file_names[file], p.shards[p.shard_of[i]].name));
    }
    sft_model_close(&m);
    /* opening through the index path works as well */
    CHECK_EQ(sft_model_open(&m, idx, &d), 0);
    CHECK_EQ(m.n_tensors, 5);
    sft_model_close(&m);
    sft_plan_release(&p);

    /* Without a limit, or with a large one: a single model.safetensors. */
    CHECK_EQ(sft_plan_init(&p, t, 5, 1000, NULL, 0, &d), 0);
    CHECK_EQ(p.n_shards, 1);
    CHECK_STR(p.shards[0].name, "model.safetensors");
    sft_plan_release(&p);
    /* Exactly at the limit stays together. */
    CHECK_EQ(sft_plan_init(&p, t, 2, 80, NULL, 0, &d), 0);
    CHECK_EQ(p.n_shards, 1);
    sft_plan_release(&p);
    CHECK_EQ(sft_plan_init(&p, t, 2, 79, NULL, 0, &d), 0);
    CHECK_EQ(p.n_shards, 2);
    sft_plan_release(&p);
    /* Everything oversized: one shard each, in order. */
    CHECK_EQ(sft_plan_init(&p, t, 3, 1, NULL, 0, &d), 0);
    CHECK_EQ(p.n_shards, 3);
    CHECK_EQ(p.shard_of[0], 0);
    CHECK_EQ(p.shard_of[1], 1);
    CHECK_EQ(p.shard_of[2], 2);
    sft_plan_release(&p);

    /* Non-ASCII names in the index are escaped as Python does. */
    {
        struct sft_wtensor u[] = {
            {.name = "\xc3\xa9", .dtype = SFT_U8, .n_dims = 1, .shape = {2}},
            {.name = "\xf0\x9f\x98\x80\x7f\"", .dtype = SFT_U8, .n_dims = 1, .shape = {2}},
        };
        char *js;
        CHECK_EQ(sft_plan_init(&p, u, 2, 2, NULL, 0, &d), 0);
        CHECK_EQ(sft_plan_index_json(&p, &js, &len, &d), 0);
        CHECK(strstr(js, "\"\\u00e9\": \"model-00001-of-00002.safetensors\"") != NULL);
        CHECK(strstr(js, "\"\\ud83d\\ude00\\u007f\\\"\": \"model-00002-of-00002.safetensors\"") != NULL);
        free(js);
        sft_plan_release(&p);
    }
    free(idx);
    free(dir);
}

static void
write_text(const char *dir, const char *name, const char *text)
{
    char *p = path_join(dir, name);
    struct diag d;
    CHECK_EQ(write_file_atomic(p, text, strlen(text), true, &d), 0);
    free(p);
}

static void
write_bytes(const char *dir, const char *name, const uint8_t *b, size_t n)
{
    char *p = path_join(dir, name);
    struct diag d;
    CHECK_EQ(write_file_atomic(p, b, n, true, &d), 0);
    free(p);
}

static void
test_model_errors(void)
{
    struct sft_model m;
    struct diag d;
    char *dir = subdir("bad_sharded");
    uint8_t *x;
    size_t len;

    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_IO);
    CHECK(strstr(d.msg, "no model.safetensors") != NULL);

    x = mk("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
           "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}", 3, &len);
    write_bytes(dir, "s1.safetensors", x, len);
    free(x);
    x = mk("{\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, &len);
    write_bytes(dir, "s2.safetensors", x, len);
    free(x);
    x = mk("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, &len);
    write_bytes(dir, "dup.safetensors", x, len);
    free(x);

    /* extra metadata keys and top-level keys are fine; b is not listed: ignored */
    write_text(dir, SFT_INDEX_NAME,
               "{\"metadata\":{\"total_size\":\"x\",\"who\":[1]},\"extra\":1,"
               "\"weight_map\":{\"c\":\"s2.safetensors\",\"a\":\"s1.safetensors\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), 0);
    CHECK_EQ(m.n_tensors, 2);
    CHECK(!m.has_total_size);
    CHECK(sft_model_find(&m, "b", NULL) == NULL);
    CHECK(sft_model_find(&m, "c", NULL) != NULL);
    CHECK_STR(m.file_names[0], "s1.safetensors"); /* shards sorted by name */
    sft_model_close(&m);

    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{\"c\":\"s1.safetensors\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "tensor 'c' listed in the index is missing from 's1.safetensors'") != NULL);

    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{\"c\":\"nope.safetensors\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_IO);
    CHECK(strstr(d.msg, "'nope.safetensors'") != NULL);

    write_text(dir, SFT_INDEX_NAME,
               "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"dup.safetensors\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "tensor 'a' is in both 'dup.safetensors' and 's1.safetensors'") != NULL);

    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "bad shard file name") != NULL);
    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{\"a\":\"\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{\"a\":3}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "not a string") != NULL);
    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "empty") != NULL);
    write_text(dir, SFT_INDEX_NAME, "{\"metadata\":{}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "no 'weight_map'") != NULL);
    write_text(dir, SFT_INDEX_NAME, "[]");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "duplicate") != NULL);
    CHECK(strstr(d.msg, SFT_INDEX_NAME) != NULL);

    /* a broken shard is named in the message */
    x = mk("{\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 3, &len);
    write_bytes(dir, "s2.safetensors", x, len);
    free(x);
    write_text(dir, SFT_INDEX_NAME, "{\"weight_map\":{\"c\":\"s2.safetensors\"}}");
    CHECK_EQ(sft_model_open(&m, dir, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "'s2.safetensors': tensors cover 2 bytes") != NULL);
    sft_model_close(&m);
    free(dir);
}

#define IXP(s) sft_index_parse(&ix, (s), strlen(s), &d)

static void
test_index_parse(void)
{
    struct sft_index ix;
    struct diag d;
    const char *js = "{\"weight_map\":{\"z\":\"b.st\",\"y\":\"a.st\",\"x\":\"b.st\",\"w\":\"sub/c.st\"},"
                     "\"metadata\":{\"total_size\":12}}";

    CHECK_EQ(sft_index_parse(&ix, js, strlen(js), &d), 0);
    CHECK_EQ(ix.n, 4);
    CHECK_EQ(ix.n_shards, 3);
    CHECK_STR(ix.shards[0], "a.st");
    CHECK_STR(ix.shards[1], "b.st");
    CHECK_STR(ix.shards[2], "sub/c.st");
    CHECK_STR(ix.e[0].name, "w");
    CHECK_EQ(ix.e[0].shard, 2);
    CHECK_STR(ix.e[3].name, "z");
    CHECK_EQ(ix.e[3].shard, 1);
    CHECK(ix.has_total_size);
    CHECK_EQ(ix.total_size, 12);
    sft_index_release(&ix);
    sft_index_release(&ix);
    CHECK_EQ(IXP("{\"weight_map\":{\"a\":\"x/./y\"}}"), -ST_FORMAT);
    CHECK_EQ(IXP("{\"weight_map\":{\"a\":\"x//y\"}}"), -ST_FORMAT);
    CHECK_EQ(IXP("{\"weight_map\":{\"a\":\"x/\"}}"), -ST_FORMAT);
    CHECK_EQ(IXP("{\"weight_map\":{\"a\":\"x\\u0000y\"}}"), -ST_FORMAT);
    CHECK_EQ(IXP("nope"), -ST_FORMAT);
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
corpus_text(const char *dir, const char *name, const char *text)
{
    corpus_file(dir, name, (const uint8_t *)text, strlen(text));
}

static void
corpus_json(const char *dir, const char *name, const char *json, size_t data_len)
{
    size_t len;
    uint8_t *b = mk(json, data_len, &len);
    corpus_file(dir, name, b, len);
    free(b);
}

static void
write_corpus(const char *out)
{
    struct sft_wtensor t[] = {
        {.name = "model.embed_tokens.weight", .dtype = SFT_BF16, .n_dims = 2, .shape = {4, 3}},
        {.name = "w", .dtype = SFT_F32, .n_dims = 2, .shape = {2, 2}},
        {.name = "s", .dtype = SFT_I64, .n_dims = 0},
        {.name = "e", .dtype = SFT_U8, .n_dims = 2, .shape = {0, 5}},
        {.name = "f4", .dtype = SFT_F4, .n_dims = 1, .shape = {6}},
        {.name = "f6", .dtype = SFT_F6_E3M2, .n_dims = 1, .shape = {4}},
        {.name = "b", .dtype = SFT_BOOL, .n_dims = 1, .shape = {3}},
    };
    struct sft_plan p;
    struct diag d;
    char *tmp = subdir("corpus");
    char *path = path_join(tmp, "model.safetensors");
    uint8_t *v;
    size_t len;

    mkdir(out, 0755);
    if (sft_plan_init(&p, t, 7, 0, NULL, 0, &d) || write_plan_dir(&p, tmp, 4096, &d)) {
        fprintf(stderr, "corpus: %s\n", d.msg);
        return;
    }
    sft_plan_release(&p);
    v = slurp(path, &len);
    corpus_file(out, "valid_small", v, len);
    /* truncations */
    corpus_file(out, "trunc_8", v, 8);
    corpus_file(out, "trunc_header", v, 40);
    corpus_file(out, "trunc_data", v, len - 1);
    /* deterministic bit flips across the header and the data */
    for (int k = 0; k < 12; k++) {
        uint8_t *c = malloc(len);
        char name[32];
        size_t pos = (size_t)k * 977 % len;
        memcpy(c, v, len);
        c[pos] ^= (uint8_t)(1u << (k % 8));
        snprintf(name, sizeof(name), "flip_%02d", k);
        corpus_file(out, name, c, len);
        free(c);
    }
    free(v);

    /* no metadata, several metadata keys */
    {
        struct sft_kv meta[] = {{"format", "pt"}, {"k", "v\n"}};
        sft_plan_init(&p, t, 3, 0, meta, 0, &d);
        write_plan_dir(&p, tmp, 4096, &d);
        sft_plan_release(&p);
        v = slurp(path, &len);
        corpus_file(out, "valid_nometa", v, len);
        free(v);
        sft_plan_init(&p, t + 1, 2, 0, meta, 2, &d);
        write_plan_dir(&p, tmp, 4096, &d);
        sft_plan_release(&p);
        v = slurp(path, &len);
        corpus_file(out, "valid_meta2", v, len);
        free(v);
    }

    /* nasty headers */
    {
        uint8_t b[16] = {0};
        memset(b, 0xff, 8);
        memcpy(b + 8, "{}", 2);
        corpus_file(out, "huge_header_len", b, 10);
        memset(b, 0, 16);
        b[0] = 0x01; b[1] = 0xe1; b[2] = 0xf5; b[3] = 0x05;
        b[8] = '{';
        corpus_file(out, "header_len_limit_plus_1", b, 16);
    }
    corpus_json(out, "overlap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                                "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3);
    corpus_json(out, "hole", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                             "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", 5);
    corpus_json(out, "end_before_begin", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,0]}}", 2);
    corpus_json(out, "bad_dtype", "{\"a\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    corpus_json(out, "shape_overflow", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,"
                                       "4611686018427387904],\"data_offsets\":[0,2]}}", 2);
    corpus_json(out, "shape_bits_overflow", "{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
                                            "\"data_offsets\":[0,8]}}", 8);
    corpus_json(out, "shape_9_dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                                     "\"data_offsets\":[0,1]}}", 1);
    corpus_json(out, "huge_offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
                                     "\"data_offsets\":[9223372036854775806,9223372036854775807]}}", 1);
    corpus_json(out, "subbyte_partial", "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2);
    corpus_json(out, "non_object", "[{\"a\":1}]", 0);
    corpus_json(out, "entry_not_object", "{\"a\":[1,2]}", 0);
    corpus_json(out, "dup_keys", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                 "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2);
    corpus_json(out, "bad_utf8", "{\"\xc3\x28\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    corpus_json(out, "nul_key", "{\"a\\u0000\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    corpus_json(out, "meta_nested", "{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0);
    corpus_json(out, "meta_null", "{\"__metadata__\":null}", 0);
    corpus_json(out, "floats", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e3],\"data_offsets\":[0.0,1]}}", 1);
    corpus_json(out, "negative", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,-1]}}", 1);
    corpus_json(out, "big_int", "{\"a\":{\"dtype\":\"U8\",\"shape\":[123456789012345678901234567890],"
                                "\"data_offsets\":[0,1]}}", 1);
    corpus_json(out, "zero_sized_many", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                                        "\"b\":{\"dtype\":\"U64\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                                        "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    {
        /* deep nesting: jansson's depth limit must hold */
        size_t depth = 3000;
        char *js = malloc(2 * depth + 16);
        size_t k = 0;
        js[k++] = '{';
        memcpy(js + k, "\"a\":", 4);
        k += 4;
        for (size_t i = 0; i < depth; i++)
            js[k++] = '[';
        for (size_t i = 0; i < depth; i++)
            js[k++] = ']';
        js[k++] = '}';
        js[k] = '\0';
        corpus_json(out, "deep_nesting", js, 0);
        free(js);
    }
    /* index files (the harness also parses every input as an index) */
    corpus_text(out, "index_valid",
                "{\n  \"metadata\": {\n    \"total_size\": 220\n  },\n  \"weight_map\": {\n"
                "    \"A\": \"model-00001-of-00002.safetensors\",\n"
                "    \"B\": \"model-00002-of-00002.safetensors\"\n  }\n}\n");
    corpus_text(out, "index_bad_shard","{\"weight_map\":{\"a\":\"../x\"}}");
    corpus_text(out, "index_empty","{\"weight_map\":{}}");
    corpus_text(out, "index_extra",
                "{\"metadata\":{\"total_size\":-5,\"x\":[]},\"weight_map\":{\"a\":\"s\",\"b\":\"s\",\"c\":\"t/u\"}}");
    free(path);
    free(tmp);
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
        test_dtypes();
        test_header_layout();
        test_plan_errors();
        test_roundtrip();
        test_writer_misuse();
        test_validation();
        test_sharding();
        test_model_errors();
        test_index_parse();
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmproot);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", tmproot);
    if (getenv("T_VERBOSE"))
        fprintf(stderr, "%s: %d checks\n", __FILE__, t_checks);
    T_DONE();
}
