/*
 * mkqgrid - test fixtures for the quantized-model writers: round-to-nearest
 * grids (../shared/reference/algorithms.md §1.5, scales rounded to fp16
 * first) of every block linear of a GGUF model, written through
 * qmodel_write() as GGUF or as a GPTQ / AWQ directory.  Test code: the
 * interop oracle (scripts/mkgolden-quant-hf) and tests/cli/convert-quant.bats
 * make their directories with it; quantize --method rtn is the product.
 *
 *   mkqgrid [--bits B] [--group-size G] [--sym] [--act-order] [--dequant OUT.f32]
 *           --format gguf|gptq|gptq_v2|awq SRC.gguf OUT
 *   mkqgrid --logits ID,ID,... MODEL.gguf OUT.f32
 *
 * --act-order: columns in descending order of their squared norm over the
 * rows (a stand-in for the Hessian diagonal GPTQ sorts by), groups taken in
 * that order, g_idx[c] = rank(c) / G: a permuted g_idx as desc_act writes.
 * --dequant: also writes the loaders' dequantized weights (qgrid_dequant_row)
 * of every grid, in GGUF row order, as raw little-endian f32 in the order of
 * the source's tensors (a reference for the oracle).
 * --logits: runs the token ids through the model (model_forward, one batch,
 * the scalar reference kernels) and writes the logits of the last one as
 * raw f32: what generate computes, for comparison with transformers'.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"
#include "gguf.h"
#include "kvcache.h"
#include "model.h"
#include "qconv.h"
#include "qgrid.h"
#include "qtypes.h"

static const char *const linears[] = {
    "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
};

static bool
is_linear(const char *name)
{
    int l, n = 0;
    if (sscanf(name, "blk.%d.%n", &l, &n) != 1 || !n)
        return false;
    for (size_t i = 0; i < sizeof linears / sizeof linears[0]; i++)
        if (!strcmp(name + n, linears[i]))
            return true;
    return false;
}

static const float *norm_for_sort;

static int
cmp_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (norm_for_sort[x] != norm_for_sort[y])
        return norm_for_sort[x] > norm_for_sort[y] ? -1 : 1;
    return x < y ? -1 : 1;
}

/* RTN of W [rows][cols] into g (allocated by the caller, g_idx set). */
static void
rtn(struct qgrid *g, const float *w)
{
    const int maxq = (1 << g->bits) - 1;
    for (int64_t r = 0; r < g->rows; r++) {
        const float *x = w + r * g->cols;
        for (int64_t gi = 0; gi < g->n_groups; gi++) {
            float xmin = 0, xmax = 0;
            for (int64_t c = 0; c < g->cols; c++)
                if (g->g_idx[c] == gi) {
                    xmin = fminf(xmin, x[c]);
                    xmax = fmaxf(xmax, x[c]);
                }
            if (g->sym) {
                xmax = fmaxf(fabsf(xmin), xmax);
                if (xmin < 0)
                    xmin = -xmax;
            }
            if (xmin == 0 && xmax == 0) {
                xmin = -1;
                xmax = 1;
            }
            float s = qconv_fp16_to_fp32(qconv_fp32_to_fp16((xmax - xmin) / (float)maxq));
            int32_t z = g->sym ? (maxq + 1) / 2 : (int32_t)nearbyintf(-xmin / s);
            z = z < 0 ? 0 : z > maxq ? maxq : z;
            g->scale[gi * g->rows + r] = s;
            g->zero[gi * g->rows + r] = z;
        }
        for (int64_t c = 0; c < g->cols; c++) {
            int64_t k = (int64_t)g->g_idx[c] * g->rows + r;
            float v = nearbyintf(x[c] / g->scale[k]) + (float)g->zero[k];
            g->q[r * g->cols + c] = (uint8_t)(v < 0 ? 0 : v > maxq ? maxq : v);
        }
    }
}

static int
logits(const char *ids, const char *path, const char *out)
{
    struct model *m = NULL;
    struct kvcache *kv = NULL;
    struct kv_config kc;
    struct model_opts mo = { 0 };
    struct diag d;
    int32_t tok[1024], seq;
    int64_t n = 0;
    char *e;

    for (const char *p = ids; *p && n < 1024; p = *e ? e + 1 : e) {
        tok[n++] = (int32_t)strtol(p, &e, 10);
        if (e == p)
            die(RC_USAGE, "--logits: bad token list '%s'", ids);
    }
    mo.kernel = "ref";
    if (model_open(&m, path, &mo, &d))
        die(RC_DATA, "'%s': %s", path, d.msg);
    model_kv_config(m, (size_t)16 << 20, GGML_TYPE_F32, &kc);
    if (kv_new(&kv, &kc, &d) || kv_seq_new(kv, &seq))
        die(RC_RESOURCE, "kv cache: %s", d.msg);
    struct batch_tok *bt = calloc((size_t)n, sizeof *bt);
    for (int64_t i = 0; i < n; i++)
        bt[i] = (struct batch_tok){ seq, (int32_t)i, tok[i], i == n - 1, 0, 0 };
    struct batch b = { n, bt, NULL, 0 };
    float *lg = malloc((size_t)m->hp.n_vocab * sizeof(float));
    struct model_out mout = { lg, NULL };
    if (model_forward(m, kv, &b, NULL, &mout, &d) < 0)
        die(RC_FAIL, "model_forward: %s", d.msg);
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(lg, sizeof(float), (size_t)m->hp.n_vocab, f) != (size_t)m->hp.n_vocab ||
        fclose(f))
        die(RC_IO, "'%s': write failed:", out);
    free(lg);
    free(bt);
    kv_free(kv);
    model_free(m);
    return 0;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"act-order", no_argument, NULL, 'a'},
        {"bits", required_argument, NULL, 'b'},
        {"dequant", required_argument, NULL, 'd'},
        {"format", required_argument, NULL, 'f'},
        {"group-size", required_argument, NULL, 'g'},
        {"logits", required_argument, NULL, 'l'},
        {"sym", no_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    static const char usage[] = "usage: mkqgrid [--bits B] [--group-size G] [--sym] [--act-order] "
                                "[--dequant OUT.f32] --format gguf|gptq|gptq_v2|awq SRC.gguf OUT";
    int bits = 4, fmt = -1, c;
    int64_t gs = 128;
    bool sym = false, act = false;
    const char *deq = NULL, *ids = NULL;
    struct gguf src;
    struct diag d;
    struct qmodel qm = { 0 };
    FILE *df = NULL;

    cli_init(argv[0]);
    while ((c = cli_getopt(argc, argv, "", longopts, usage)) != -1) {
        switch (c) {
        case 'a': act = true; break;
        case 'b': bits = (int)cli_parse_i64(optarg, 2, 8, "--bits", false); break;
        case 'd': deq = optarg; break;
        case 'f': fmt = qformat_parse(optarg); break;
        case 'g': gs = cli_parse_i64(optarg, -1, 1 << 20, "--group-size", false); break;
        case 'l': ids = optarg; break;
        case 's': sym = true; break;
        default: cli_exit_usage(usage);
        }
    }
    if (ids && optind == argc - 2)
        return logits(ids, argv[optind], argv[optind + 1]);
    if (optind != argc - 2 || fmt < 0)
        cli_exit_usage(usage);
    /* qmodel_write opens the source again: a file, not a pipe */
    if (!strcmp(argv[optind], "-"))
        die(RC_USAGE, "SRC.gguf must be a file, not '-'");
    if (gguf_open(&src, argv[optind], &d))
        die(RC_DATA, "'%s': %s", argv[optind], d.msg);
    qm.src_path = argv[optind];
    qm.prov.method = "rtn";
    qm.prov.bits = bits;
    qm.prov.group_size = gs;
    qm.prov.sym = sym;
    qm.prov.act_order = act;
    qm.t = calloc(src.n_tensors, sizeof *qm.t);
    if (deq && !(df = fopen(deq, "wb")))
        die(RC_IO, "cannot open '%s':", deq);
    for (uint64_t i = 0; i < src.n_tensors; i++) {
        const struct gguf_tensor *t = &src.t[i];
        if (!is_linear(t->name.p))
            continue;
        int64_t rows = t->ne[1], cols = t->ne[0];
        float *w = malloc((size_t)(rows * cols) * sizeof(float));
        struct qmodel_tensor *qt = &qm.t[qm.n++];
        const struct qtype *st = qtype_get(t->type);
        size_t rb = qtype_row_bytes(t->type, cols);
        for (int64_t r = 0; r < rows; r++)
            st->to_float((const uint8_t *)t->data + (size_t)r * rb, w + r * cols, cols);
        qt->name = strdup(t->name.p);
        qt->g = calloc(1, sizeof *qt->g);
        if (qgrid_alloc(qt->g, bits, gs, sym, rows, cols, &d))
            die(RC_USAGE, "%s", d.msg);
        if (act && gs > 0) {
            float *nrm = calloc((size_t)cols, sizeof(float));
            int32_t *perm = malloc((size_t)cols * sizeof(int32_t));
            for (int64_t r = 0; r < rows; r++)
                for (int64_t k = 0; k < cols; k++)
                    nrm[k] += w[r * cols + k] * w[r * cols + k];
            for (int64_t k = 0; k < cols; k++)
                perm[k] = (int32_t)k;
            norm_for_sort = nrm;
            qsort(perm, (size_t)cols, sizeof *perm, cmp_desc);
            for (int64_t k = 0; k < cols; k++)
                qt->g->g_idx[perm[k]] = (int32_t)(k / gs);
            free(nrm);
            free(perm);
        }
        rtn(qt->g, w);
        if (df) {
            for (int64_t r = 0; r < rows; r++) {
                qgrid_dequant_row(qt->g, r, w);
                if (fwrite(w, sizeof(float), (size_t)cols, df) != (size_t)cols)
                    die(RC_IO, "'%s': write failed:", deq);
            }
        }
        free(w);
    }
    if (df && fclose(df))
        die(RC_IO, "'%s': write failed:", deq);
    if (qmodel_write(&qm, argv[optind + 1], (enum qformat)fmt, true, NULL, &d))
        die(RC_FAIL, "'%s': %s", argv[optind + 1], d.msg);
    qmodel_release(&qm);
    gguf_release(&src);
    return 0;
}
