/*
 * llamacpp-vecdot.c - llmkit's driver over the llama.cpp peer's libggml that
 * prints, as JSON on stdout, what ggml's CPU backend computes for
 * y = W x (GGML_OP_MUL_MAT) for every weight type llmkit's matmul supports:
 * the raw weight bytes (hex), the f32 activations of NTOK tokens (hex) and,
 * for each token computed alone (a batch of one, single-threaded), the
 * outputs as f32 bit patterns.  llmkit's kernels are batch invariant: a
 * token's result must equal ggml's single-token result whatever batch it
 * shares and wherever it sits in it, so the single-token arithmetic of ggml
 * (ggml_vec_dot_*, the repacked gemv) is the reference for every batch.
 *
 * Weights are quantized by ggml_quantize_chunk from deterministic f32 values
 * (splitmix64 below).  Q4_0, Q4_K and IQ4_NL weights are placed in the CPU
 * backend's repack ("extra") buffer type, as llama.cpp does with model
 * weights on an AVX2 CPU, so their results are those of the repacked
 * gemv; the other types use the plain CPU buffer (ggml_vec_dot_*).
 *
 * With --tinyblas it prints instead the multi-token results of F32, F16 and
 * BF16 weights (batches of 2..NTOK tokens, plain CPU buffer), which ggml
 * computes with llamafile's tinyBLAS (sgemm.cpp; when n >= 2, k % 8 == 0 and
 * m % 4 == 0), each batch with 1 and with 2 threads (they must agree), and
 * how many outputs differ from the same token computed alone (vec_dot).
 *
 * Built and run by scripts/mkgolden-vecdot; not part of llmkit.
 *   usage: llamacpp-vecdot > vecdot.json
 *          llamacpp-vecdot --tinyblas > vecdot-tinyblas.json
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#define ROWS 8
#define COLS 512
#define NTOK 9

static uint64_t seed = 0x6c6c6d6b69742d76ull;

static uint64_t
splitmix64(void)
{
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float
unif(void)
{
    return (float)((double)(splitmix64() >> 11) * 0x1p-52 - 1.0);
}

static void
put_hex(const void *p, size_t n)
{
    const uint8_t *b = p;
    putchar('"');
    for (size_t i = 0; i < n; i++)
        printf("%02x", b[i]);
    putchar('"');
}

static ggml_backend_buffer_type_t
repack_buft(ggml_backend_t be)
{
    ggml_backend_dev_t dev = ggml_backend_get_device(be);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    ggml_backend_dev_get_extra_bufts_t get =
        (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
            reg, "ggml_backend_dev_get_extra_bufts");
    if (!get)
        return NULL;
    for (ggml_backend_buffer_type_t *b = get(dev); b && *b; b++)
        if (strstr(ggml_backend_buft_name(*b), "REPACK"))
            return *b;
    return NULL;
}

/* y[nt][ROWS] = W x for the first nt tokens; returns 1 when W was repacked */
static int
mul_mat(ggml_backend_t be, ggml_backend_buffer_type_t wbuft, enum ggml_type type,
        const void *wdata, size_t wbytes, const float *x, int nt, float *y)
{
    struct ggml_init_params ip = { ggml_tensor_overhead() * 8 + ggml_graph_overhead() + 4096,
                                   NULL, true };
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *w = ggml_new_tensor_2d(ctx, type, COLS, ROWS);
    struct ggml_tensor *xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, COLS, nt);
    struct ggml_tensor *yt = ggml_mul_mat(ctx, w, xt);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, yt);

    ggml_backend_buffer_t wbuf = ggml_backend_buft_alloc_buffer(wbuft,
                                                                ggml_backend_buft_get_alloc_size(wbuft, w));
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    if (ggml_backend_tensor_alloc(wbuf, w, ggml_backend_buffer_get_base(wbuf)) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "llamacpp-vecdot: tensor_alloc failed\n");
        exit(1);
    }
    ggml_backend_buffer_t rest = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
    ggml_backend_tensor_set(w, wdata, 0, wbytes);
    ggml_backend_tensor_set(xt, x, 0, (size_t)nt * COLS * sizeof(float));
    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "llamacpp-vecdot: compute failed\n");
        exit(1);
    }
    ggml_backend_tensor_get(yt, y, 0, (size_t)nt * ROWS * sizeof(float));
    int repacked = w->extra != NULL;
    ggml_backend_buffer_free(rest);
    ggml_backend_buffer_free(wbuf);
    ggml_free(ctx);
    return repacked;
}

/* y[nt][rows] = W x for a float weight W [rows, cols] in the plain CPU
 * buffer, computed with n_threads threads */
static void
mul_mat_float(ggml_backend_t be, enum ggml_type type, int rows, int cols, const void *wdata,
              size_t wbytes, const float *x, int nt, int n_threads, float *y)
{
    struct ggml_init_params ip = { ggml_tensor_overhead() * 8 + ggml_graph_overhead() + 4096,
                                   NULL, true };
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *w = ggml_new_tensor_2d(ctx, type, cols, rows);
    struct ggml_tensor *xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, nt);
    struct ggml_tensor *yt = ggml_mul_mat(ctx, w, xt);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, yt);

    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
    ggml_backend_tensor_set(w, wdata, 0, wbytes);
    ggml_backend_tensor_set(xt, x, 0, (size_t)nt * cols * sizeof(float));
    ggml_backend_cpu_set_n_threads(be, n_threads);
    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "llamacpp-vecdot: compute failed\n");
        exit(1);
    }
    ggml_backend_tensor_get(yt, y, 0, (size_t)nt * rows * sizeof(float));
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

/* --tinyblas: per case (rows x cols) and float type, the outputs of every
 * batch of the first n tokens, n = 2..NTOK, token-major, concatenated */
static int
tinyblas_main(ggml_backend_t be)
{
    static const enum ggml_type types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
    static const int cases[][2] = { { 16, 512 }, { 12, 136 }, { 20, 64 } };
    const int ncase = (int)(sizeof(cases) / sizeof(cases[0]));
    static float x[NTOK * COLS], wf[20 * COLS], y1[NTOK * 20], y2[NTOK * 20], ya[20];
    static uint8_t wq[20 * COLS * 4];

    printf("{\n  \"generator\": \"scripts/llamacpp-vecdot.c --tinyblas over libggml (llama.cpp "
           "peer), 1 and 2 threads\",\n  \"n_tok\": %d,\n  \"cases\": [\n", NTOK);
    for (int ci = 0; ci < ncase; ci++) {
        int rows = cases[ci][0], cols = cases[ci][1];
        for (int i = 0; i < NTOK * cols; i++)
            x[i] = unif() * ((i % cols) % 97 == 3 ? 8.0f : 1.0f);
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
            enum ggml_type t = types[ti];
            for (int r = 0; r < rows; r++) {
                float sc = 0.02f + 0.05f * (float)(splitmix64() % 100) / 100.0f;
                for (int c = 0; c < cols; c++)
                    wf[r * cols + c] = unif() * sc;
            }
            size_t wbytes = ggml_quantize_chunk(t, wf, wq, 0, rows, cols, NULL);
            printf("    {\"type\": \"%s\", \"id\": %d, \"rows\": %d, \"cols\": %d, \"x\": ",
                   ggml_type_name(t), (int)t, rows, cols);
            put_hex(x, (size_t)NTOK * cols * sizeof(float));
            printf(", \"w\": ");
            put_hex(wq, wbytes);
            printf(", \"batches\": [");
            long differ = 0;
            for (int n = 2; n <= NTOK; n++) {
                mul_mat_float(be, t, rows, cols, wq, wbytes, x, n, 1, y1);
                mul_mat_float(be, t, rows, cols, wq, wbytes, x, n, 2, y2);
                if (memcmp(y1, y2, (size_t)n * rows * sizeof(float)) != 0) {
                    fprintf(stderr, "llamacpp-vecdot: %s %dx%d n %d: 1 and 2 threads differ\n",
                            ggml_type_name(t), rows, cols, n);
                    return 1;
                }
                for (int k = 0; k < n; k++) {
                    mul_mat_float(be, t, rows, cols, wq, wbytes, x + (size_t)k * cols, 1, 1, ya);
                    for (int i = 0; i < rows; i++)
                        differ += memcmp(&ya[i], &y1[k * rows + i], 4) != 0;
                }
                printf("%s[", n > 2 ? ", " : "");
                for (int i = 0; i < n * rows; i++) {
                    uint32_t u;
                    memcpy(&u, &y1[i], 4);
                    printf("%s%u", i ? ", " : "", u);
                }
                printf("]");
            }
            printf("], \"differ_from_alone\": %ld}%s\n", differ,
                   ci + 1 < ncase || ti + 1 < sizeof(types) / sizeof(types[0]) ? "," : "");
        }
    }
    printf("  ]\n}\n");
    return 0;
}

int
main(int argc, char **argv)
{
    static const enum ggml_type types[] = {
        GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
        GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    };
    static float x[NTOK * COLS], wf[ROWS * COLS], y[NTOK * ROWS];
    static uint8_t wq[ROWS * COLS * 4];

    ggml_backend_t be = ggml_backend_cpu_init();
    if (!be) {
        fprintf(stderr, "llamacpp-vecdot: no CPU backend\n");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "--tinyblas") == 0) {
        int rc = tinyblas_main(be);
        ggml_backend_free(be);
        return rc;
    }
    ggml_backend_cpu_set_n_threads(be, 1);
    ggml_backend_buffer_type_t rp = repack_buft(be);

    /* activations: a smooth spread with a few large channels, like a residual stream */
    for (int i = 0; i < NTOK * COLS; i++)
        x[i] = unif() * ((i % COLS) % 97 == 3 ? 8.0f : 1.0f);

    printf("{\n  \"generator\": \"scripts/llamacpp-vecdot.c over libggml (llama.cpp peer), 1 thread\",\n");
    printf("  \"rows\": %d,\n  \"cols\": %d,\n  \"n_tok\": %d,\n  \"x\": ", ROWS, COLS, NTOK);
    put_hex(x, sizeof(x));
    printf(",\n  \"types\": [\n");
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        enum ggml_type t = types[ti];
        for (int r = 0; r < ROWS; r++) {
            float sc = 0.02f + 0.05f * (float)(splitmix64() % 100) / 100.0f;
            for (int c = 0; c < COLS; c++)
                wf[r * COLS + c] = unif() * sc;
        }
        size_t wbytes = ggml_quantize_chunk(t, wf, wq, 0, ROWS, COLS, NULL);
        int want_repack = rp && (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_IQ4_NL);
        ggml_backend_buffer_type_t buft = want_repack ? rp : ggml_backend_cpu_buffer_type();
        const char *path = want_repack ? "repack gemv" : "vec_dot";
        printf("    {\"type\": \"%s\", \"id\": %d, \"path\": \"%s\", \"w\": ", ggml_type_name(t),
               (int)t, path);
        put_hex(wq, wbytes);
        printf(", \"alone\": [");
        for (int k = 0; k < NTOK; k++) {
            int repacked = mul_mat(be, buft, t, wq, wbytes, x + (size_t)k * COLS, 1, y);
            if (repacked != want_repack) {
                fprintf(stderr, "llamacpp-vecdot: %s: repacked %d, expected %d\n",
                        ggml_type_name(t), repacked, want_repack);
                return 1;
            }
            for (int i = 0; i < ROWS; i++) {
                uint32_t u;
                memcpy(&u, &y[i], 4);
                printf("%s%u", k || i ? ", " : "", u);
            }
        }
        printf("]");
        printf("}%s\n", ti + 1 < sizeof(types) / sizeof(types[0]) ? "," : "");
    }
    printf("  ]\n}\n");
    ggml_backend_free(be);
    return 0;
}
