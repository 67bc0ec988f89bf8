/*
 * fuzz_kvtrace.c - libFuzzer harness for kvstat's parsers.
 *
 * The input is read as a KV trace (one JSON object per line, as kvtrace_read
 * feeds kvtrace_add_line) and, when it parses, plotted to /dev/null; the same
 * bytes go through the lengths-file parser, through the HF config reader
 * when they are a JSON object, and through the GGUF model reader when they
 * start with the GGUF magic.  Whatever parses is run through the KV
 * arithmetic, and the summary's invariants are checked (abort on violation).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "json.h"
#include "kvmodel.h"
#include "kvstat.h"
#include "xio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *sink;

static void
use_model(struct kv_model *m)
{
    struct kv_variant v[KV_ATTN_COUNT];
    int t, n, i;

    for (t = 0; t < KV_DTYPE_COUNT; t++) {
        int64_t b = kv_bytes_per_token(m, (enum kv_dtype)t);
        if (b <= 0 && kv_elems_per_token(m) > 0)
            abort();
        (void)kv_fit_seqs(1LL << 40, b, 1 << 20, 16);
        (void)kv_fit_ctx(1LL << 40, b, 7, 16);
        n = kv_compare(m, (enum kv_dtype)t, 0, 0, 0, v, NULL);
        if (n < 3 || n > KV_ATTN_COUNT)
            abort();
        for (i = 0; i < n; i++)
            if (v[i].bytes_per_token <= 0 || v[i].reduction <= 0)
                abort();
    }
}

static void
check_trace(const struct kvtrace *t)
{
    size_t i;

    if (t->n_pts > KVTRACE_POINTS || t->peak_used > t->max_total || t->stored > t->slots ||
        t->peak_util > 1.0 || (t->n_steps && t->n_pts == 0))
        abort();
    for (i = 0; i < t->n_pts; i++)
        if (t->pts[i].used > t->pts[i].total || t->pts[i].n < 1)
            abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kvtrace *t = malloc(sizeof(*t));
    const char *p = (const char *)data, *end = p + size;
    struct kv_req *req = NULL;
    struct diag d;
    size_t n = 0;
    int rc = 0;

    if (!sink)
        sink = fopen("/dev/null", "w");
    if (!t)
        return 0;

    /* trace, line by line, stopping at the first bad line like kvtrace_read */
    kvtrace_init(t);
    while (p < end && rc == 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        rc = kvtrace_add_line(t, p, len, &d);
        if (rc && !d.msg[0])
            abort();
        p += len + (nl != NULL);
    }
    check_trace(t);
    if (rc == 0 && t->n_steps && sink) {
        if (kvtrace_svg(t, sink, "fuzz <&>", &d))
            abort();
    }
    free(t);

    /* lengths file */
    if (kvstat_parse_lengths((const char *)data, size, &req, &n, &d) == 0) {
        struct kv_workload w;
        int64_t longest = 1;
        size_t i;
        for (i = 0; i < n; i++)
            if (req[i].prompt + req[i].output > longest)
                longest = req[i].prompt + req[i].output;
        if (kv_simulate(req, n, longest, 16, &w, &d) != 0)
            abort();
        for (i = 0; i < KV_POLICY_COUNT; i++)
            if (!(w.pol[i].waste >= -1e-9 && w.pol[i].waste < 1.0))
                abort();
        free(req);
    }

    /* HF config.json */
    if (size && data[0] == '{') {
        json_t *cfg;
        if (json_load_mem((const char *)data, size, &cfg, &d) == 0) {
            struct kv_model m;
            kv_model_init(&m);
            if (kv_model_from_config(cfg, &m, &d) == 0)
                use_model(&m);
            kv_model_release(&m);
            json_decref(cfg);
        }
    }

    /* GGUF header */
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        struct src s;
        struct gguf g;
        src_open_mem(&s, data, size, "fuzz");
        if (gguf_read(&g, &s, &d) == 0) {
            struct kv_model m;
            kv_model_init(&m);
            if (kv_model_from_gguf(&g, &m, &d) == 0)
                use_model(&m);
            kv_model_release(&m);
        }
        gguf_release(&g);
        src_close(&s);
    }
    return 0;
}
