/*
 * test_qmodel.c - the quantized-model writers (qgrid.h) on the tiny
 * synthetic model (tests/mkfixtures): grids made here from a seeded stream.
 *
 * GGUF: each grid a GGUF type holds is read back from the blocks bit for bit
 * (integers, fp16 scales, zeros); the other grids and the Q4_1 grid whose
 * zeros fp16 cannot hold are reported on cb->info; every tensor not listed
 * is copied byte for byte; the float override is written in the source's
 * type; provenance keys are set; bad requests leave no output.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "qconv.h"
#include "qgrid.h"
#include "qtypes.h"
#include "runcb.h"
#include "safetensors.h"
#include "status.h"
#include "t.h"

#define SRC "tests/fixtures/tiny-llama-f32.gguf"

static uint64_t rng = 88172645463325252ull;

static uint32_t
rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* A grid of the tensor's shape: random integers; scales fp16 values in
 * [2^-8, 2^-6) (pow2: powers of two only, so that -scale*zero is fp16);
 * zeros 8/128 when sym, else random. */
static struct qgrid *
mkgrid(int bits, int64_t gs, bool sym, int64_t rows, int64_t cols, bool pow2)
{
    struct qgrid *g = calloc(1, sizeof *g);
    struct diag d;
    int maxq = (1 << bits) - 1;

    if (!g || qgrid_alloc(g, bits, gs, sym, rows, cols, &d)) {
        fprintf(stderr, "qgrid_alloc: %s\n", d.msg);
        exit(1);
    }
    for (int64_t k = 0; k < rows * cols; k++)
        g->q[k] = (uint8_t)(rnd32() % (uint32_t)(maxq + 1));
    for (int64_t k = 0; k < g->n_groups * rows; k++) {
        float s = pow2 ? ldexpf(1.0f, -6 - (int)(rnd32() % 3))
                       : ldexpf(1.0f + (float)(rnd32() % 1024) / 1024.0f, -8);
        g->scale[k] = qconv_fp16_to_fp32(qconv_fp32_to_fp16(s));
        g->zero[k] = sym ? (maxq + 1) / 2 : (int32_t)(rnd32() % (uint32_t)(maxq + 1));
    }
    return g;
}

struct infos {
    int n;
    char last[512];
    char all[8192];
};

static void
on_info(void *ctx, const char *msg)
{
    struct infos *in = ctx;
    in->n++;
    snprintf(in->last, sizeof in->last, "%s", msg);
    strncat(in->all, msg, sizeof in->all - strlen(in->all) - 2);
    strcat(in->all, "\n");
}

/* The grid read back from a Q4_0 / Q4_1 / Q8_0 tensor equals g. */
static bool
grid_reads_back(const struct qgrid *g, uint32_t type, const uint8_t *p)
{
    size_t rb = qtype_row_bytes(type, g->cols);
    for (int64_t r = 0; r < g->rows; r++) {
        const uint8_t *row = p + (size_t)r * rb;
        for (int64_t c0 = 0; c0 < g->cols; c0 += 32) {
            int64_t k = (int64_t)g->g_idx[c0] * g->rows + r;
            const uint8_t *b = row + (size_t)(c0 / 32) * qtype_get(type)->bytes;
            uint16_t dh = (uint16_t)(b[0] | b[1] << 8);
            if (qconv_fp16_to_fp32(dh) != g->scale[k])
                return false;
            if (type == GGML_TYPE_Q8_0) {
                for (int j = 0; j < 32; j++)
                    if ((int)(int8_t)b[2 + j] + 128 != g->q[r * g->cols + c0 + j] || g->zero[k] != 128)
                        return false;
                continue;
            }
            const uint8_t *qs = b + (type == GGML_TYPE_Q4_1 ? 4 : 2);
            float z = 8;
            if (type == GGML_TYPE_Q4_1) {
                uint16_t mh = (uint16_t)(b[2] | b[3] << 8);
                z = -qconv_fp16_to_fp32(mh) / g->scale[k];
            }
            if (z != (float)g->zero[k])
                return false;
            for (int j = 0; j < 16; j++)
                if ((qs[j] & 15) != g->q[r * g->cols + c0 + j] ||
                    (qs[j] >> 4) != g->q[r * g->cols + c0 + j + 16])
                    return false;
        }
    }
    return true;
}

static const struct gguf_tensor *
tensor(const struct gguf *g, const char *name)
{
    int64_t i = gguf_find_tensor(g, name);
    return i < 0 ? NULL : &g->t[i];
}

static void
test_gguf(void)
{
    char dir[] = "/tmp/llmkit_test_qmodel_XXXXXX", out[256];
    struct qmodel qm = { 0 };
    struct gguf src, g;
    struct diag d;
    struct infos inf = { 0 };
    struct run_callbacks cb = { .info = on_info, .ctx = &inf };
    float *norm;

    if (!mkdtemp(dir) || gguf_open(&src, SRC, &d)) {
        t_fail++;
        fprintf(stderr, "%s: cannot set up (make fixtures)\n", SRC);
        return;
    }
    snprintf(out, sizeof out, "%s/q.gguf", dir);
    qm.src_path = SRC;
    qm.prov.method = "gptq";
    qm.prov.bits = 4;
    qm.prov.group_size = 32;
    qm.prov.act_order = true;
    qm.prov.damp = 0.01;
    strcpy(qm.prov.calib_sha256, "ab12");
    qm.prov.calib_tokens = 4096;
    qm.n = 8;
    qm.t = calloc((size_t)qm.n, sizeof *qm.t);
    /* exact: Q4_0 (sym g32), Q4_1 (asym g64, pow2 scales), Q8_0 (sym g-1) */
    qm.t[0].name = strdup("blk.0.attn_q.weight");
    qm.t[0].g = mkgrid(4, 32, true, 64, 64, false);
    qm.t[1].name = strdup("blk.0.attn_k.weight");
    qm.t[1].g = mkgrid(4, 64, false, 32, 64, true);
    qm.t[2].name = strdup("blk.0.ffn_up.weight");
    qm.t[2].g = mkgrid(8, -1, true, 128, 64, false);
    /* Q4_1 whose zeros fp16 cannot hold: reported */
    qm.t[3].name = strdup("blk.1.attn_v.weight");
    qm.t[3].g = mkgrid(4, 32, false, 32, 64, false);
    /* no type: 3-bit -> Q5_0 (128 wide); act-order g_idx mixing blocks -> Q5_0 */
    qm.t[4].name = strdup("blk.0.ffn_down.weight");
    qm.t[4].g = mkgrid(3, 32, true, 64, 128, false);
    qm.t[5].name = strdup("blk.1.attn_output.weight");
    qm.t[5].g = mkgrid(4, 32, true, 64, 64, false);
    for (int c = 0; c < 64; c++)
        qm.t[5].g->g_idx[c] = (int32_t)((c * 7) % 64 / 32);
    /* act-order that keeps blocks whole (groups of 32 swapped): Q4_0 exact */
    qm.t[6].name = strdup("blk.1.ffn_gate.weight");
    qm.t[6].g = mkgrid(4, 32, true, 128, 64, false);
    for (int c = 0; c < 64; c++)
        qm.t[6].g->g_idx[c] = 1 - c / 32;
    /* a float override of a norm */
    qm.t[7].name = strdup("blk.0.attn_norm.weight");
    norm = qm.t[7].f32 = malloc(64 * sizeof(float));
    for (int i = 0; i < 64; i++)
        norm[i] = 1.0f + (float)i / 64;

    int rc = qmodel_write(&qm, out, QF_GGUF, false, &cb, &d);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "qmodel_write: %s\n", d.msg);
        goto done;
    }
    /* 3 reports (attn_v, ffn_down, attn_output) + the summary of 4 exact grids */
    CHECK_EQ(inf.n, 4);
    CHECK(strstr(inf.all, "'blk.1.attn_v.weight': Q4_1 cannot hold") != NULL);
    CHECK(strstr(inf.all, "'blk.0.ffn_down.weight': no GGUF type holds a 3-bit") != NULL);
    CHECK(strstr(inf.all, "'blk.1.attn_output.weight': no GGUF type") != NULL);
    CHECK(strstr(inf.last, "4 grids held exactly") != NULL);
    if (gguf_open(&g, out, &d)) {
        t_fail++;
        fprintf(stderr, "%s: %s\n", out, d.msg);
        goto done;
    }
    static const struct { int i; uint32_t type; bool exact; } want[] = {
        {0, GGML_TYPE_Q4_0, true}, {1, GGML_TYPE_Q4_1, true}, {2, GGML_TYPE_Q8_0, true},
        {3, GGML_TYPE_Q4_1, false}, {4, GGML_TYPE_Q5_0, false}, {5, GGML_TYPE_Q5_0, false},
        {6, GGML_TYPE_Q4_0, true},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const struct qmodel_tensor *qt = &qm.t[want[k].i];
        const struct gguf_tensor *t = tensor(&g, qt->name);
        CHECK(t != NULL);
        if (!t)
            continue;
        CHECK_EQ(t->type, want[k].type);
        if (t->type != want[k].type)
            continue;
        if (want[k].exact)
            CHECK(grid_reads_back(qt->g, t->type, t->data));
        else if (t->type == GGML_TYPE_Q4_1)
            CHECK(!grid_reads_back(qt->g, t->type, t->data));
        /* the dequantized tensor is near the loaders' weights in every case */
        float *w = malloc((size_t)qt->g->cols * sizeof(float)),
              *y = malloc((size_t)qt->g->cols * sizeof(float));
        double md = 0, mw = 0;
        size_t rb = qtype_row_bytes(t->type, t->ne[0]);
        for (int64_t r = 0; r < qt->g->rows; r++) {
            qgrid_dequant_row(qt->g, r, w);
            qtype_get(t->type)->to_float((const uint8_t *)t->data + (size_t)r * rb, y, t->ne[0]);
            for (int64_t c = 0; c < qt->g->cols; c++) {
                double e = fabs((double)y[c] - w[c]);
                md = e > md ? e : md;
                mw = fabs(w[c]) > mw ? fabs(w[c]) : mw;
            }
        }
        /* exact grids: the loaders' fp16 rounding only (half an ulp, 2^-11 relative) */
        CHECK(md <= (want[k].exact ? mw * 0x1p-11 : mw * 0.1));
        free(w);
        free(y);
    }
    /* every other tensor byte for byte; the override as the source's F32 */
    for (uint64_t i = 0; i < src.n_tensors; i++) {
        const struct gguf_tensor *s = &src.t[i], *t = tensor(&g, s->name.p);
        bool listed = false;
        for (int64_t j = 0; j < qm.n; j++)
            listed |= !strcmp(qm.t[j].name, s->name.p);
        CHECK(t != NULL);
        if (!t || listed)
            continue;
        CHECK(t->type == s->type && t->nbytes == s->nbytes && !memcmp(t->data, s->data, s->nbytes));
    }
    const struct gguf_tensor *tn = tensor(&g, "blk.0.attn_norm.weight");
    CHECK(tn && tn->type == GGML_TYPE_F32 && !memcmp(tn->data, norm, 64 * sizeof(float)));
    CHECK_EQ(g.n_tensors, src.n_tensors);
    /* metadata: the source's, plus provenance */
    const char *s = NULL;
    uint64_t u = 0;
    bool b = false;
    CHECK(gguf_get_str(&g, "llmkit.quantize.method", &s, &d) == 0 && s && !strcmp(s, "gptq"));
    CHECK(gguf_get_str(&g, "llmkit.quantize.calib_sha256", &s, &d) == 0 && !strcmp(s, "ab12"));
    CHECK(gguf_get_uint(&g, "llmkit.quantize.calib_tokens", &u, &d) == 0 && u == 4096);
    CHECK(gguf_get_bool(&g, "llmkit.quantize.act_order", &b, &d) == 0 && b);
    CHECK(gguf_get_uint(&g, "general.file_type", &u, &d) == 0 && u == 1024);
    CHECK(gguf_get_str(&g, "tokenizer.ggml.model", &s, &d) == 0 && !strcmp(s, "gpt2"));
    gguf_release(&g);

    /* bad requests: nothing written, an existing output kept without force */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    free(qm.t[7].name);
    qm.t[7].name = strdup("blk.9.attn_norm.weight");
    CHECK_EQ(qmodel_write(&qm, bad, QF_GGUF, false, NULL, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "no tensor 'blk.9.attn_norm.weight'") != NULL);
    CHECK(access(bad, F_OK) != 0);
    free(qm.t[7].name);
    qm.t[7].name = strdup("blk.0.attn_norm.weight");
    qm.t[0].g->rows = 32;
    CHECK_EQ(qmodel_write(&qm, bad, QF_GGUF, false, NULL, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "'blk.0.attn_q.weight': grid of 32 x 64") != NULL);
    qm.t[0].g->rows = 64;
    qm.t[1].g->q[5] = 16;
    CHECK_EQ(qmodel_write(&qm, bad, QF_GGUF, false, NULL, &d), -ST_RANGE);
    CHECK(access(bad, F_OK) != 0);
    qm.t[1].g->q[5] = 3;
    CHECK(qmodel_write(&qm, out, QF_GGUF, false, NULL, &d) < 0);
    CHECK_EQ(qmodel_write(&qm, out, QF_GGUF, true, NULL, &d), 0);
    unlink(out);
done:
    rmdir(dir);
    gguf_release(&src);
    qmodel_release(&qm);
}

/* ---- HF directories ---- */

static const char *const linears[] = {
    "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
};

/* Grids for every block linear of the tiny model (2 layers). */
static void
mkmodel(struct qmodel *qm, const struct gguf *src, int bits, int64_t gs, bool sym, bool act_order)
{
    memset(qm, 0, sizeof *qm);
    qm->src_path = SRC;
    qm->prov.method = "gptq";
    qm->prov.bits = bits;
    qm->prov.group_size = gs;
    qm->prov.sym = sym;
    qm->prov.damp = 0.01;
    strcpy(qm->prov.calib_sha256, "cafe");
    qm->prov.calib_tokens = 1234;
    qm->n = 14;
    qm->t = calloc(14, sizeof *qm->t);
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 7; k++) {
            struct qmodel_tensor *qt = &qm->t[l * 7 + k];
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, linears[k]);
            const struct gguf_tensor *t = tensor(src, name);
            qt->name = strdup(name);
            qt->g = mkgrid(bits, gs, sym, t->ne[1], t->ne[0], false);
            if (act_order) {
                /* a permuted g_idx: column c in group ((c * 5) % cols) / gs */
                int64_t g_s = gs < 0 ? t->ne[0] : gs;
                for (int64_t c = 0; c < t->ne[0]; c++)
                    qt->g->g_idx[c] = (int32_t)(((c * 5) % t->ne[0]) / g_s);
            }
        }
}

static bool
grids_equal(const struct qgrid *a, const struct qgrid *b)
{
    return a->bits == b->bits && a->group_size == b->group_size && a->rows == b->rows &&
           a->cols == b->cols && a->n_groups == b->n_groups &&
           !memcmp(a->q, b->q, (size_t)(a->rows * a->cols)) &&
           !memcmp(a->scale, b->scale, (size_t)(a->n_groups * a->rows) * sizeof(float)) &&
           !memcmp(a->zero, b->zero, (size_t)(a->n_groups * a->rows) * sizeof(int32_t)) &&
           !memcmp(a->g_idx, b->g_idx, (size_t)a->cols * sizeof(int32_t));
}

static void
test_hf_round_trip(void)
{
    static const struct { enum qformat f; int bits; int64_t gs; bool sym, act; } cases[] = {
        {QF_GPTQ, 4, 32, true, false}, {QF_GPTQ, 4, 32, false, false},
        {QF_GPTQ_V2, 4, 32, false, false}, {QF_GPTQ, 4, 48, false, true},
        {QF_GPTQ, 3, 32, false, false}, {QF_GPTQ_V2, 3, -1, true, true},
        {QF_GPTQ, 2, 64, false, false}, {QF_GPTQ_V2, 8, 32, false, false},
        {QF_AWQ, 4, 32, false, false}, {QF_AWQ, 4, 64, true, false},
    };
    struct gguf src;
    struct diag d;

    if (gguf_open(&src, SRC, &d)) {
        t_fail++;
        return;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dir[] = "/tmp/llmkit_test_qhf_XXXXXX", out[300];
        struct qmodel qm, rd;
        if (!mkdtemp(dir))
            continue;
        snprintf(out, sizeof out, "%s/q", dir);
        mkmodel(&qm, &src, cases[c].bits, cases[c].gs, cases[c].sym, cases[c].act);
        int rc = qmodel_write(&qm, out, cases[c].f, false, NULL, &d);
        CHECK_EQ(rc, 0);
        if (rc)
            fprintf(stderr, "case %zu: %s\n", c, d.msg);
        rc = rc ? rc : qmodel_read_hf(out, &rd, &d);
        CHECK_EQ(rc, 0);
        if (rc) {
            fprintf(stderr, "case %zu: %s\n", c, d.msg);
        } else {
            CHECK_EQ(rd.n, qm.n);
            int same = 0;
            for (int64_t i = 0; i < qm.n; i++)
                for (int64_t j = 0; j < rd.n; j++)
                    if (!strcmp(qm.t[i].name, rd.t[j].name) && grids_equal(qm.t[i].g, rd.t[j].g))
                        same++;
            CHECK_EQ(same, qm.n);
            /* GPTQ carries our provenance in meta; AWQ's config has no room */
            CHECK_STR(rd.prov.method, cases[c].f == QF_AWQ ? "awq" : "gptq");
            if (cases[c].f != QF_AWQ) {
                CHECK_STR(rd.prov.calib_sha256, "cafe");
                CHECK_EQ(rd.prov.calib_tokens, 1234);
            }
            CHECK_EQ(rd.prov.bits, cases[c].bits);
            CHECK_EQ(rd.prov.act_order, cases[c].act && cases[c].gs > 0);
            qmodel_release(&rd);
        }
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
        qmodel_release(&qm);
    }
    gguf_release(&src);
}

/* Facts of the layouts (algorithms.md §2.4, §4.1), read from the file: v1
 * symmetric 4-bit zeros are all 0x77777777; with q[n][k] = n % 8 every AWQ
 * qweight word holds columns 0 2 4 6 1 3 5 7 in nibbles 0..7 (0x75316420),
 * and every GPTQ qweight word of column n holds eight n % 8. */
static void
test_hf_layout(void)
{
    struct gguf src;
    struct diag d;

    if (gguf_open(&src, SRC, &d)) {
        t_fail++;
        return;
    }
    for (int f = QF_GPTQ; f <= QF_AWQ; f += QF_AWQ - QF_GPTQ) {
        char dir[] = "/tmp/llmkit_test_qlay_XXXXXX", out[300], cmd[400];
        struct qmodel qm;
        struct sft_file sf;
        if (!mkdtemp(dir))
            continue;
        snprintf(out, sizeof out, "%s/q", dir);
        mkmodel(&qm, &src, 4, 32, true, false);
        for (int64_t i = 0; i < qm.n; i++)
            for (int64_t r = 0; r < qm.t[i].g->rows; r++)
                for (int64_t c = 0; c < qm.t[i].g->cols; c++)
                    qm.t[i].g->q[r * qm.t[i].g->cols + c] = (uint8_t)(r % 8);
        /* attn_v has no q/k row permutation: HF row n = GGUF row n */
        CHECK_EQ(qmodel_write(&qm, out, (enum qformat)f, false, NULL, &d), 0);
        snprintf(cmd, sizeof cmd, "%s/model.safetensors", out);
        if (sft_open(&sf, cmd, &d) == 0) {
            const struct sft_tensor *w = sft_find(&sf, "model.layers.0.self_attn.v_proj.qweight");
            const struct sft_tensor *z = sft_find(&sf, "model.layers.0.self_attn.v_proj.qzeros");
            CHECK(w && z);
            if (w && z) {
                uint32_t u;
                bool ok = true;
                for (uint64_t k = 0; k < w->numel; k++) {
                    memcpy(&u, w->data + 4 * k, 4);
                    uint32_t n = (uint32_t)(k % (uint64_t)w->shape[1]) % 8;
                    ok &= f == QF_AWQ ? u == 0x75316420u : u == n * 0x11111111u;
                }
                CHECK(ok);
                ok = true;
                for (uint64_t k = 0; f == QF_GPTQ && k < z->numel; k++) {
                    memcpy(&u, z->data + 4 * k, 4);
                    ok &= u == 0x77777777u;
                }
                CHECK(ok);
            }
            sft_close(&sf);
        } else {
            CHECK(0);
        }
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
        qmodel_release(&qm);
    }
    gguf_release(&src);
}

/* What a directory cannot hold is refused, and nothing is left. */
static void
test_hf_errors(void)
{
    struct gguf src;
    struct diag d;
    char dir[] = "/tmp/llmkit_test_qerr_XXXXXX", out[300];
    struct qmodel qm;

    if (gguf_open(&src, SRC, &d) || !mkdtemp(dir)) {
        t_fail++;
        return;
    }
    snprintf(out, sizeof out, "%s/q", dir);
    mkmodel(&qm, &src, 3, 32, false, false);
    CHECK_EQ(qmodel_write(&qm, out, QF_AWQ, false, NULL, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "AWQ GEMM holds 4-bit grids") != NULL);
    qmodel_release(&qm);
    mkmodel(&qm, &src, 4, 32, false, true);
    CHECK_EQ(qmodel_write(&qm, out, QF_AWQ, false, NULL, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "AWQ has no g_idx") != NULL);
    qmodel_release(&qm);
    mkmodel(&qm, &src, 4, 32, false, false);
    qm.t[3].g->bits = 8;
    CHECK_EQ(qmodel_write(&qm, out, QF_GPTQ, false, NULL, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "a directory has one setting") != NULL);
    qm.t[3].g->bits = 4;
    free(qm.t[13].name);
    qm.t[13].name = strdup("blk.1.attn_norm.weight");
    qgrid_free(qm.t[13].g);
    free(qm.t[13].g);
    qm.t[13].g = NULL;
    CHECK_EQ(qmodel_write(&qm, out, QF_GPTQ, false, NULL, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "linear 'blk.1.ffn_down.weight' has no grid") != NULL);
    CHECK(access(out, F_OK) != 0);
    qmodel_release(&qm);
    /* an existing directory is replaced only with force */
    mkmodel(&qm, &src, 4, 32, true, false);
    CHECK_EQ(qmodel_write(&qm, out, QF_GPTQ_V2, false, NULL, &d), 0);
    CHECK(qmodel_write(&qm, out, QF_AWQ, false, NULL, &d) < 0);
    char cfg[400], cmd[400];
    snprintf(cfg, sizeof cfg, "%s/quantize_config.json", out);
    CHECK(access(cfg, F_OK) == 0);      /* still the GPTQ one */
    CHECK_EQ(qmodel_write(&qm, out, QF_AWQ, true, NULL, &d), 0);
    CHECK(access(cfg, F_OK) != 0);      /* AWQ has none */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    CHECK(system(cmd) == 0);
    qmodel_release(&qm);
    rmdir(dir);
    gguf_release(&src);
}

int
main(void)
{
    test_gguf();
    test_hf_round_trip();
    test_hf_layout();
    test_hf_errors();
    T_DONE();
}
