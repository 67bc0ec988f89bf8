/*
 * llamacpp-quant.c - golden-file driver for llmkit's quantizers: quantizes
 * deterministic inputs with the llama.cpp peer's ggml_quantize_chunk, for
 * every type llmkit produces, with and without an importance matrix.
 * llmkit's own code, compiled by scripts/mkgolden-quant against the peer's
 * headers and libggml-base (plus common/base/rng.c for the input generator in
 * tests/unit/quant_gen.h); its binary stays in the peer's cache.
 *
 * usage:
 *   llamacpp-quant synth OUTDIR SEED IMSEED N_PER_ROW KIND...
 *       one row per KIND (tests/unit/quant_gen.h names), all drawn from one
 *       rng stream seeded with SEED; imatrix from IMSEED.
 *   llamacpp-quant model OUTDIR GGUF TENSOR ROW0 NROWS IMSEED
 *       rows ROW0 .. ROW0+NROWS-1 of TENSOR, dequantized with ggml's
 *       to_float; imatrix from IMSEED.
 *
 * Writes OUTDIR/input.f32, OUTDIR/imatrix.f32 and, for each type whose block
 * size divides the row, OUTDIR/<TYPE>.plain and OUTDIR/<TYPE>.imatrix (the
 * quantized rows back to back); prints "<TYPE> <bytes>" per type on stdout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ggml.h>
#include <gguf.h>
#include "quant_gen.h"

static const enum ggml_type types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16,
    GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
    GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
    GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
};

static void
die(const char *msg, const char *arg)
{
    fprintf(stderr, "llamacpp-quant: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    exit(1);
}

static void *
xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory", NULL);
    return p;
}

static void
write_file(const char *dir, const char *name, const void *data, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
        die("cannot write", path);
}

static void
quantize_all(const char *dir, const float *x, int64_t nrows, int64_t npr, const float *imatrix)
{
    write_file(dir, "input.f32", x, (size_t)(nrows * npr) * sizeof(float));
    write_file(dir, "imatrix.f32", imatrix, (size_t)npr * sizeof(float));
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        enum ggml_type type = types[t];
        if (npr % ggml_blck_size(type) != 0)
            continue;
        size_t bytes = ggml_row_size(type, npr) * (size_t)nrows;
        void *out = xmalloc(bytes);
        char name[64];
        for (int with = 0; with < 2; with++) {
            memset(out, 0xa5, bytes);
            size_t got = ggml_quantize_chunk(type, x, out, 0, nrows, npr, with ? imatrix : NULL);
            if (got != bytes)
                die("unexpected size from ggml_quantize_chunk", ggml_type_name(type));
            snprintf(name, sizeof name, "%s.%s", ggml_type_name(type), with ? "imatrix" : "plain");
            write_file(dir, name, out, bytes);
        }
        printf("%s %zu\n", ggml_type_name(type), bytes);
        free(out);
    }
}

static void
run_synth(int argc, char **argv)
{
    if (argc < 7)
        die("synth needs OUTDIR SEED IMSEED N_PER_ROW KIND...", NULL);
    const char *dir = argv[2];
    uint64_t seed = strtoull(argv[3], NULL, 10);
    uint64_t imseed = strtoull(argv[4], NULL, 10);
    int64_t npr = strtoll(argv[5], NULL, 10);
    int64_t nrows = argc - 6;
    if (npr <= 0 || npr % 256 != 0)
        die("N_PER_ROW must be a positive multiple of 256", argv[5]);

    float *x = xmalloc((size_t)(nrows * npr) * sizeof(float));
    float *im = xmalloc((size_t)npr * sizeof(float));
    struct rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < nrows; i++) {
        int kind = qgen_kind_by_name(argv[6 + i]);
        if (kind < 0)
            die("unknown row kind", argv[6 + i]);
        qgen_row(&r, kind, npr, x + i * npr);
    }
    qgen_imatrix(imseed, npr, im);
    quantize_all(dir, x, nrows, npr, im);
    free(x);
    free(im);
}

static void
run_model(int argc, char **argv)
{
    if (argc != 8)
        die("model needs OUTDIR GGUF TENSOR ROW0 NROWS IMSEED", NULL);
    const char *dir = argv[2], *path = argv[3], *tname = argv[4];
    int64_t row0 = strtoll(argv[5], NULL, 10), nrows = strtoll(argv[6], NULL, 10);
    uint64_t imseed = strtoull(argv[7], NULL, 10);

    struct gguf_init_params params = { .no_alloc = true, .ctx = NULL };
    struct gguf_context *g = gguf_init_from_file(path, params);
    if (!g)
        die("cannot read gguf", path);
    int64_t ti = gguf_find_tensor(g, tname);
    if (ti < 0)
        die("no such tensor", tname);
    enum ggml_type type = gguf_get_tensor_type(g, ti);
    const int64_t *ne = gguf_get_tensor_ne(g, ti);
    int64_t npr = ne[0];
    if (row0 < 0 || nrows <= 0 || row0 + nrows > ne[1] * ne[2] * ne[3])
        die("row range out of the tensor", tname);
    const struct ggml_type_traits *tr = ggml_get_type_traits(type);
    if (!tr->to_float)
        die("tensor type has no to_float", ggml_type_name(type));

    size_t rs = ggml_row_size(type, npr);
    void *raw = xmalloc(rs * (size_t)nrows);
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open", path);
    long off = (long)(gguf_get_data_offset(g) + gguf_get_tensor_offset(g, ti) + rs * (size_t)row0);
    if (fseek(f, off, SEEK_SET) != 0 || fread(raw, 1, rs * (size_t)nrows, f) != rs * (size_t)nrows)
        die("cannot read tensor data", tname);
    fclose(f);

    float *x = xmalloc((size_t)(nrows * npr) * sizeof(float));
    float *im = xmalloc((size_t)npr * sizeof(float));
    tr->to_float(raw, x, nrows * npr);
    qgen_imatrix(imseed, npr, im);
    quantize_all(dir, x, nrows, npr, im);
    free(raw);
    free(x);
    free(im);
    gguf_free(g);
}

int
main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: llamacpp-quant synth|model ...", NULL);
    if (strcmp(argv[1], "synth") == 0)
        run_synth(argc, argv);
    else if (strcmp(argv[1], "model") == 0)
        run_model(argc, argv);
    else
        die("unknown mode", argv[1]);
    return 0;
}
