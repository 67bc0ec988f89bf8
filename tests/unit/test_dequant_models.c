/*
 * test_dequant_models.c - dequantizes every tensor of the real models with
 * the type table's to_float and compares the sha256 of the float32
 * little-endian result with the digest gguf-py computed
 * (tests/golden/dequant/<model>.sha256, scripts/mkgolden-dequant --models).
 *
 * Models come from ${LLMKIT_CACHE:-$HOME/.cache/llmkit} (scripts/fetch-models).
 * A missing model makes the test skip (77), or fail when CI=true.
 * Tensors are read from the mapping a chunk of rows at a time, so at most
 * CHUNK_FLOATS floats are held.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "gguf.h"
#include "qtypes.h"
#include "t.h"

#define CHUNK_FLOATS (1 << 20)   /* 4 MiB of output per step */

static const char *const models[] = {
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma-3-270m.Q4_K_M.gguf",
};

struct golden_line {
    char name[128];
    char type[16];
    char hex[65];
};

/* load_golden() : the lines of tests/golden/dequant/<model>.sha256; count in *n. */
static struct golden_line *
load_golden(const char *model, size_t *n)
{
    char path[4200];
    const char *top = getenv("LLMKIT_TOP");
    snprintf(path, sizeof path, "%s%stests/golden/dequant/%s.sha256",
             top ? top : "", top ? "/" : "", model);
    FILE *fp = fopen(path, "r");
    *n = 0;
    if (!fp) {
        fprintf(stderr, "test_dequant_models: cannot open '%s'\n", path);
        return NULL;
    }
    size_t cap = 0;
    struct golden_line *v = NULL, g;
    char line[512];
    while (fgets(line, sizeof line, fp)) {
        if (sscanf(line, "%127s %15s %64s", g.name, g.type, g.hex) != 3 || strlen(g.hex) != 64) {
            fprintf(stderr, "test_dequant_models: '%s': bad line '%s'\n", path, line);
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 256;
            struct golden_line *nv = realloc(v, cap * sizeof *v);
            if (!nv)
                break;
            v = nv;
        }
        v[(*n)++] = g;
    }
    fclose(fp);
    return v;
}

static void
hex_digest(const unsigned char *md, char *hex)
{
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", md[i]);
    hex[64] = 0;
}

/* tensor_sha256() : sha256 of tensor t's float32 LE dequantization, in hex.
 * 0, or -1 with a message on stderr. */
static int
tensor_sha256(const struct gguf_tensor *t, float *buf, char *hex)
{
    const struct qtype *qt = qtype_get(t->type);
    int64_t n = gguf_tensor_nelements(t);
    int64_t ne0 = t->ne[0];

    if (!qt || !qt->to_float) {
        fprintf(stderr, "tensor '%s': type %u has no to_float\n", t->name.p, t->type);
        return -1;
    }
    if (!t->data) {
        fprintf(stderr, "tensor '%s': not mapped\n", t->name.p);
        return -1;
    }
    size_t row_bytes = qtype_row_bytes(t->type, ne0);
    if (ne0 <= 0 || row_bytes == 0 || n % ne0 ||
        (uint64_t)(n / ne0) * row_bytes != t->nbytes) {
        fprintf(stderr, "tensor '%s': %llu bytes do not hold its shape\n", t->name.p,
                (unsigned long long)t->nbytes);
        return -1;
    }
    /* whole rows per step when a row fits, else whole blocks */
    int64_t step = ne0 <= CHUNK_FLOATS ? CHUNK_FLOATS / ne0 * ne0 : CHUNK_FLOATS / qt->blck * qt->blck;

    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[32];
    unsigned int mdlen = 0;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    const uint8_t *src = t->data;
    for (int64_t done = 0; ok && done < n; ) {
        int64_t k = n - done < step ? n - done : step;
        qt->to_float(src, buf, k);
        ok = EVP_DigestUpdate(ctx, buf, (size_t)k * sizeof(float));
        src += (size_t)(k / qt->blck) * qt->bytes;
        done += k;
    }
    ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
    EVP_MD_CTX_free(ctx);
    if (!ok) {
        fprintf(stderr, "tensor '%s': sha256 failed\n", t->name.p);
        return -1;
    }
    hex_digest(md, hex);
    return 0;
}

/* check_model() : every tensor of the model at path against its golden. */
static void
check_model(const char *path, const char *model, float *buf)
{
    struct gguf g;
    struct diag d = {{0}};
    size_t ngold = 0;
    struct golden_line *gold = load_golden(model, &ngold);

    CHECK(gold != NULL && ngold > 0);
    int rc = gguf_open(&g, path, &d);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "'%s': %s\n", path, d.msg);
        free(gold);
        return;
    }
    CHECK_EQ(g.n_tensors, ngold);
    int bad = 0;
    uint64_t n = g.n_tensors < ngold ? g.n_tensors : ngold;
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = &g.t[i];
        const struct qtype *qt = qtype_get(t->type);
        char hex[65];
        if (strcmp(t->name.p, gold[i].name) != 0) {
            fprintf(stderr, "%s: tensor %llu is '%s', golden has '%s'\n", model,
                    (unsigned long long)i, t->name.p, gold[i].name);
            bad++;
            continue;
        }
        if (!qt || strcmp(qt->name, gold[i].type) != 0) {
            fprintf(stderr, "%s: '%s': type %s, golden %s\n", model, t->name.p,
                    qt ? qt->name : "?", gold[i].type);
            bad++;
            continue;
        }
        if (tensor_sha256(t, buf, hex) != 0) {
            bad++;
            continue;
        }
        if (strcmp(hex, gold[i].hex) != 0) {
            fprintf(stderr, "%s: '%s' (%s): sha256 %s, gguf-py %s\n", model, t->name.p,
                    qt->name, hex, gold[i].hex);
            bad++;
        }
    }
    CHECK_EQ(bad, 0);
    fprintf(stderr, "test_dequant_models: %s: %llu tensors, %d mismatched\n", model,
            (unsigned long long)n, bad);
    gguf_release(&g);
    free(gold);
}

int
main(void)
{
    const char *cache = getenv("LLMKIT_CACHE");
    const char *home = getenv("HOME");
    const char *ci = getenv("CI");
    int in_ci = ci && strcmp(ci, "true") == 0;
    char base[4096];
    int absent = 0;

    if (cache && *cache)
        snprintf(base, sizeof base, "%s", cache);
    else
        snprintf(base, sizeof base, "%s/.cache/llmkit", home ? home : ".");

    float *buf = malloc(CHUNK_FLOATS * sizeof(float));
    CHECK(buf != NULL);
    if (!buf)
        T_DONE();
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[8300];
        snprintf(path, sizeof path, "%s/%s", base, models[i]);
        if (access(path, R_OK) != 0) {
            fprintf(stderr, "test_dequant_models: '%s' absent (scripts/fetch-models)%s\n",
                    path, in_ci ? "" : ", skipped");
            absent++;
            continue;
        }
        check_model(path, models[i], buf);
    }
    free(buf);
    if (absent && in_ci)
        CHECK(absent == 0);
    if (absent && !t_fail && !in_ci)
        return 77;
    T_DONE();
}
