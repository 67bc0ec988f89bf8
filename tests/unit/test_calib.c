/*
 * test_calib.c - the calibration pipeline (calib.h) on the tiny fixture:
 * advancing through every layer gives model_forward's LAYER_OUT states of
 * each chunk bit for bit; a run stopped after a linear sees the linears
 * before it and no later one; a replaced weight changes what the later
 * linears see (and the original values give the original output); the
 * memo of linear outputs recomputes only what a replaced weight changed and
 * gives the same states; a text too short for the chunks asked is refused.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib.h"
#include "kvcache.h"
#include "model.h"
#include "t.h"

#define FIXTURE "tests/fixtures/tiny-llama-f32.gguf"

static const char text[] =
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "All that glitters is not gold. Where there is smoke there is fire. The early bird "
    "catches the worm. Actions speak louder than words. Better late than never. "
    "Rome was not built in a day. Practice makes perfect. Knowledge is power.";

struct seen {
    char names[64][48];
    int n;
    int64_t rows;
};

static int
seen_hook(void *ctx, const struct model_hook_event *ev)
{
    struct seen *s = ctx;
    if (ev->site != MODEL_HOOK_LINEAR_IN)
        return 0;
    if (s->n < 64)
        snprintf(s->names[s->n++], sizeof s->names[0], "%s", ev->name);
    s->rows += ev->n_tok;
    return 0;
}

struct states {
    float *x;           /* [L][n_tok][E] */
    int64_t n_tok, E;
};

static int
state_hook(void *ctx, const struct model_hook_event *ev)
{
    struct states *s = ctx;
    if (ev->site == MODEL_HOOK_LAYER_OUT)
        for (int64_t t = 0; t < ev->n_tok; t++)
            memcpy(s->x + ((int64_t)ev->layer * s->n_tok + ev->tok0 + t) * s->E, ev->x + t * ev->ld,
                   (size_t)s->E * sizeof(float));
    return 0;
}

/* counts the rows of the products computed (LINEAR_OUT reaches a
 * method's hook only for those) */
static int
out_hook(void *ctx, const struct model_hook_event *ev)
{
    struct seen *s = ctx;
    if (ev->site == MODEL_HOOK_LINEAR_OUT && ev->x && !ev->y)
        s->rows += ev->n_tok;
    return 0;
}

static int
has(const struct seen *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name))
            return 1;
    return 0;
}

int
main(void)
{
    char path[] = "/tmp/test_calib.XXXXXX";
    struct calib_opts o = { 16, 3, 1, "ref" };
    struct calib *c = NULL;
    struct diag d;
    int fd = mkstemp(path);
    FILE *fp;

    if (fd < 0 || !(fp = fdopen(fd, "w"))) {
        fprintf(stderr, "cannot create a temporary file\n");
        return 1;
    }
    fputs(text, fp);
    fclose(fp);

    /* too short: 100 chunks of 16 */
    o.n_chunks = 100;
    CHECK_EQ(calib_open(&c, FIXTURE, path, &o, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "too short") != NULL);
    CHECK(c == NULL);
    o.n_chunks = 3;
    CHECK_EQ(calib_open(&c, FIXTURE, path, &o, &d), 0);
    if (!c) {
        fprintf(stderr, "calib_open: %s\n", d.msg);
        T_DONE();
    }
    CHECK_EQ(c->n_chunks, 3);
    CHECK_EQ(c->ctx, 16);
    CHECK(c->n_text_tokens >= 48);
    CHECK_EQ(strlen(c->sha256), 64);

    const int64_t E = c->n_embd, T = c->ctx, L = c->m->hp.n_layer;
    struct states st = { calloc((size_t)(L * T * E), sizeof(float)), T, E };
    float *x0 = malloc((size_t)(calib_tokens(c) * E) * sizeof(float));
    memcpy(x0, c->x, (size_t)(calib_tokens(c) * E) * sizeof(float));

    /* the reference: model_forward on each chunk, layer outputs captured */
    float **want = calloc((size_t)c->n_chunks, sizeof *want);
    for (int64_t k = 0; k < c->n_chunks; k++) {
        struct model_hooks h = { state_hook, &st, MODEL_HOOK_LAYER_OUT };
        struct batch_tok bt[16];
        struct batch b = { T, bt, NULL, 0 };
        int32_t seq;
        memset(bt, 0, sizeof bt);
        CHECK_EQ(kv_seq_new(c->kv, &seq), 0);
        for (int64_t i = 0; i < T; i++) {
            bt[i].seq = seq;
            bt[i].pos = (int32_t)i;
            bt[i].token = c->tok[k * T + i];
        }
        CHECK_EQ(model_forward(c->m, c->kv, &b, &h, NULL, &d), 0);
        kv_seq_free(c->kv, seq);
        want[k] = malloc((size_t)(L * T * E) * sizeof(float));
        memcpy(want[k], st.x, (size_t)(L * T * E) * sizeof(float));
    }

    /* the linears of a layer in true-sequential order */
    {
        const char *names[8];
        int grp[8], n;
        calib_linears(c, 0, names, grp, &n);
        CHECK_EQ(n, 7);
        CHECK_STR(names[0], "blk.0.attn_q.weight");
        CHECK_STR(names[3], "blk.0.attn_output.weight");
        CHECK_STR(names[6], "blk.0.ffn_down.weight");
        CHECK_EQ(grp[2], 0);
        CHECK_EQ(grp[3], 1);
        CHECK_EQ(grp[5], 2);
        CHECK_EQ(grp[6], 3);
    }

    /* a stopped run: q/k/v and o seen, the feed-forward not; x unchanged */
    {
        struct seen s = { .n = 0 };
        struct model_hooks h = { seen_hook, &s, MODEL_HOOK_LINEAR_IN };
        CHECK_EQ(calib_run_layer(c, &h, "blk.0.attn_output.weight", NULL, &d), 0);
        CHECK(has(&s, "blk.0.attn_q.weight") && has(&s, "blk.0.attn_v.weight"));
        CHECK(has(&s, "blk.0.attn_output.weight"));
        CHECK(!has(&s, "blk.0.ffn_gate.weight") && !has(&s, "blk.0.ffn_down.weight"));
        CHECK_EQ(s.rows, 4 * calib_tokens(c));
        CHECK(!memcmp(x0, c->x, (size_t)(calib_tokens(c) * E) * sizeof(float)));
        CHECK_EQ(calib_run_layer(c, &h, "blk.0.attn_output.weight", c->scratch, &d), -ST_RANGE);
    }

    /* a replaced weight: zeros in wo change the output; the source values
     * put back give it again */
    {
        const struct model_weight *w = calib_weight(c, "blk.0.attn_output.weight");
        size_t n = (size_t)(w->rows * w->cols);
        float *orig = malloc(n * sizeof(float)), *zero = calloc(n, sizeof(float));
        float *y = malloc((size_t)(calib_tokens(c) * E) * sizeof(float));
        CHECK_EQ(calib_weight_f32(c, "blk.0.attn_output.weight", orig, &d), 0);
        CHECK_EQ(calib_set_weight(c, "blk.0.attn_output.weight", zero, &d), 0);
        CHECK_EQ(calib_run_layer(c, NULL, NULL, y, &d), 0);
        CHECK(memcmp(y, want[0], (size_t)(T * E) * sizeof(float)) != 0);
        /* the source values are still what calib_weight_f32 reads */
        float *again = malloc(n * sizeof(float));
        CHECK_EQ(calib_weight_f32(c, "blk.0.attn_output.weight", again, &d), 0);
        CHECK(!memcmp(orig, again, n * sizeof(float)));
        CHECK_EQ(calib_set_weight(c, "blk.0.attn_output.weight", orig, &d), 0);
        CHECK_EQ(calib_run_layer(c, NULL, NULL, y, &d), 0);
        for (int64_t k = 0; k < c->n_chunks; k++)
            CHECK(!memcmp(y + k * T * E, want[k], (size_t)(T * E) * sizeof(float)));
        CHECK_EQ(calib_set_weight(c, "blk.1.attn_output.weight", orig, &d), -ST_RANGE);
        free(orig);
        free(zero);
        free(again);
        free(y);
    }

    /* the memo: a run computes only the products a set weight changed
     * (that linear and every later sub-group; a norm: all), and gives the
     * same states */
    {
        static const struct { const char *name; int64_t computed; } steps[] = {
            { "blk.0.attn_norm.weight", 7 }, { NULL, 0 }, { "blk.0.ffn_gate.weight", 2 },
            { "blk.0.attn_k.weight", 5 }, { "blk.0.ffn_down.weight", 1 },
        };
        struct seen s = { .n = 0 };
        struct model_hooks h = { out_hook, &s, MODEL_HOOK_LINEAR_OUT };
        float *y = malloc((size_t)(calib_tokens(c) * E) * sizeof(float));
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            if (steps[i].name) {
                const struct model_weight *w = calib_weight(c, steps[i].name);
                float *v = malloc((size_t)(w->rows * w->cols) * sizeof(float));
                CHECK_EQ(calib_weight_f32(c, steps[i].name, v, &d), 0);
                CHECK_EQ(calib_set_weight(c, steps[i].name, v, &d), 0);
                free(v);
            }
            s.n = 0;
            s.rows = 0;
            CHECK_EQ(calib_run_layer(c, &h, NULL, y, &d), 0);
            CHECK_EQ(s.rows, steps[i].computed * calib_tokens(c));
            for (int64_t k = 0; k < c->n_chunks; k++)
                CHECK(!memcmp(y + k * T * E, want[k], (size_t)(T * E) * sizeof(float)));
        }
        /* a stopped run records what it computed: after q is set, a run
         * stopped at gate's input computes q and o, the next full run
         * gate, up and down */
        {
            const struct model_weight *w = calib_weight(c, "blk.0.attn_q.weight");
            float *v = malloc((size_t)(w->rows * w->cols) * sizeof(float));
            CHECK_EQ(calib_weight_f32(c, "blk.0.attn_q.weight", v, &d), 0);
            CHECK_EQ(calib_set_weight(c, "blk.0.attn_q.weight", v, &d), 0);
            free(v);
        }
        s.rows = 0;
        CHECK_EQ(calib_run_layer(c, &h, "blk.0.ffn_gate.weight", NULL, &d), 0);
        CHECK_EQ(s.rows, 2 * calib_tokens(c));
        s.rows = 0;
        CHECK_EQ(calib_run_layer(c, &h, NULL, y, &d), 0);
        CHECK_EQ(s.rows, 3 * calib_tokens(c));
        for (int64_t k = 0; k < c->n_chunks; k++)
            CHECK(!memcmp(y + k * T * E, want[k], (size_t)(T * E) * sizeof(float)));
        free(y);
    }

    /* advancing layer by layer gives model_forward's states */
    for (int64_t l = 0; l < L; l++) {
        CHECK_EQ(c->layer, l);
        CHECK_EQ(calib_advance(c, &d), 0);
        for (int64_t k = 0; k < c->n_chunks; k++)
            CHECK(!memcmp(c->x + k * T * E, want[k] + l * T * E, (size_t)(T * E) * sizeof(float)));
    }
    CHECK_EQ(calib_run_layer(c, NULL, NULL, NULL, &d), -ST_RANGE);
    CHECK_EQ(calib_set_state(c, 0, x0, &d), 0);
    CHECK_EQ(c->layer, 0);
    CHECK_EQ(calib_set_state(c, L + 1, x0, &d), -ST_RANGE);

    for (int64_t k = 0; k < c->n_chunks; k++)
        free(want[k]);
    free(want);
    free(st.x);
    free(x0);
    calib_free(c);
    unlink(path);
    T_DONE();
}
