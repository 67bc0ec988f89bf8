/*
 * test_gptq.c - GPTQ and RTN (gptq.h) against the grids of an independent
 * numpy implementation of algorithms.md §1.2-§1.5 (scripts/mkgolden-gptq,
 * tests/golden/gptq): the same q, scales, zeros, g_idx, damping and dead
 * columns bit for bit on small random layers (sym, asym, act-order, static
 * groups, a partial last group, row-wise, dead columns, a damping raise,
 * several lazy batches, 2/3/4/8 bits, the MSE search, RTN); the Hessian
 * accumulated from the calibration rows within f32 rounding of the
 * oracle's; the option checks; and GPTQ beating RTN on its own objective.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptq.h"
#include "t.h"
#include "threadpool.h"

#define DIR "tests/golden/gptq/"

struct gcase {
    char method[8];
    struct gptq_opts o;
    int64_t rows, cols, n_seq, seq_len;
    float *x, *h, *w, *scale;
    int64_t *q, *zero, *g_idx;
    int64_t nx, nh, nw, nq, ns, nz, ng;
    double damp;
    int64_t dead, h_from_x;
};

static char *
slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    char *buf;
    long n;

    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = 0;
    fclose(fp);
    return buf;
}

/* the numbers of the rest of a line */
static int64_t
count_line(const char *p)
{
    int64_t n = 0;
    while (*p && *p != '\n') {
        while (*p == ' ')
            p++;
        if (!*p || *p == '\n')
            break;
        n++;
        while (*p && *p != ' ' && *p != '\n')
            p++;
    }
    return n;
}

static float *
floats(const char *p, int64_t *n)
{
    char *e;
    float *v;
    *n = count_line(p);
    v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    for (int64_t i = 0; i < *n; i++, p = e)
        v[i] = strtof(p, &e);
    return v;
}

static int64_t *
ints(const char *p, int64_t *n)
{
    char *e;
    int64_t *v;
    *n = count_line(p);
    v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    for (int64_t i = 0; i < *n; i++, p = e)
        v[i] = strtoll(p, &e, 10);
    return v;
}

static int
load(struct gcase *c, const char *name)
{
    char path[256];
    char *buf, *p;

    snprintf(path, sizeof path, DIR "%s.txt", name);
    if (!(buf = slurp(path)))
        return -1;
    memset(c, 0, sizeof *c);
    for (p = buf; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
        char key[16];
        int k = 0;
        while (p[k] && p[k] != ' ' && p[k] != '\n' && k < 15) {
            key[k] = p[k];
            k++;
        }
        key[k] = 0;
        const char *v = p + k;
        if (!strcmp(key, "opts")) {
            int sym, act, st, mse, g;
            sscanf(v, "%7s %d %d %d %d %d %d %lf", c->method, &c->o.bits, &g, &sym, &act, &st, &mse,
                   &c->o.damp);
            c->o.group_size = g;
            c->o.sym = sym;
            c->o.act_order = act;
            c->o.static_groups = st;
            c->o.mse = mse;
        } else if (!strcmp(key, "shape")) {
            long long r, cc, ns, sl;
            sscanf(v, "%lld %lld %lld %lld", &r, &cc, &ns, &sl);
            c->rows = r;
            c->cols = cc;
            c->n_seq = ns;
            c->seq_len = sl;
        } else if (!strcmp(key, "x")) {
            c->x = floats(v, &c->nx);
        } else if (!strcmp(key, "h")) {
            c->h = floats(v, &c->nh);
        } else if (!strcmp(key, "h_from_x")) {
            c->h_from_x = strtoll(v, NULL, 10);
        } else if (!strcmp(key, "w")) {
            c->w = floats(v, &c->nw);
        } else if (!strcmp(key, "q")) {
            c->q = ints(v, &c->nq);
        } else if (!strcmp(key, "scale")) {
            c->scale = floats(v, &c->ns);
        } else if (!strcmp(key, "zero")) {
            c->zero = ints(v, &c->nz);
        } else if (!strcmp(key, "g_idx")) {
            c->g_idx = ints(v, &c->ng);
        } else if (!strcmp(key, "damp")) {
            c->damp = strtod(v, NULL);
        } else if (!strcmp(key, "dead")) {
            c->dead = strtoll(v, NULL, 10);
        }
    }
    free(buf);
    return 0;
}

static void
release(struct gcase *c)
{
    free(c->x);
    free(c->h);
    free(c->w);
    free(c->scale);
    free(c->q);
    free(c->zero);
    free(c->g_idx);
}

/* the grid g equals the case's; reports the first difference */
static int
same_grid(const char *name, const struct gcase *c, const struct qgrid *g)
{
    int64_t n_sz = g->n_groups * g->rows;
    if (c->nq != g->rows * g->cols || c->ns != n_sz || c->nz != n_sz || c->ng != g->cols) {
        fprintf(stderr, "%s: shapes differ\n", name);
        return 0;
    }
    for (int64_t i = 0; i < c->nq; i++)
        if (g->q[i] != c->q[i]) {
            fprintf(stderr, "%s: q[%lld][%lld] %d, oracle %lld\n", name, (long long)(i / g->cols),
                    (long long)(i % g->cols), g->q[i], (long long)c->q[i]);
            return 0;
        }
    for (int64_t i = 0; i < n_sz; i++)
        if (g->scale[i] != c->scale[i] || g->zero[i] != c->zero[i]) {
            fprintf(stderr, "%s: group %lld row %lld: scale %.9g zero %d, oracle %.9g %lld\n", name,
                    (long long)(i / g->rows), (long long)(i % g->rows), g->scale[i], g->zero[i],
                    c->scale[i], (long long)c->zero[i]);
            return 0;
        }
    for (int64_t i = 0; i < c->ng; i++)
        if (g->g_idx[i] != c->g_idx[i]) {
            fprintf(stderr, "%s: g_idx[%lld] %d, oracle %lld\n", name, (long long)i, g->g_idx[i],
                    (long long)c->g_idx[i]);
            return 0;
        }
    return 1;
}

/* sum over the calibration rows of |(W - deq(g)) x|^2 */
static double
output_error(const struct gcase *c, const struct qgrid *g)
{
    float *dq = malloc((size_t)(c->rows * c->cols) * sizeof *dq);
    double e = 0;
    gptq_dequant(g, dq);
    for (int64_t t = 0; t < c->n_seq * c->seq_len; t++)
        for (int64_t r = 0; r < c->rows; r++) {
            double s = 0;
            for (int64_t j = 0; j < c->cols; j++)
                s += ((double)c->w[r * c->cols + j] - dq[r * c->cols + j]) * c->x[t * c->cols + j];
            e += s * s;
        }
    free(dq);
    return e;
}

static void
run_case(const char *name)
{
    struct gcase c;
    struct qgrid g;
    struct gptq_stats st;
    struct diag d;

    if (load(&c, name) < 0) {
        fprintf(stderr, "%s: cannot read " DIR "%s.txt\n", name, name);
        CHECK(0);
        return;
    }
    if (!strcmp(c.method, "rtn")) {
        CHECK_EQ(rtn_quantize(c.w, c.rows, c.cols, &c.o, &g, &d), 0);
        CHECK(same_grid(name, &c, &g));
        qgrid_free(&g);
        release(&c);
        return;
    }
    CHECK_EQ(c.nh, c.cols * c.cols);
    CHECK_EQ(gptq_quantize(c.w, c.rows, c.cols, c.h, &c.o, NULL, &g, &st, &d), 0);
    CHECK(same_grid(name, &c, &g));
    CHECK_NEAR(st.damp, c.damp, 1e-9);
    CHECK_EQ(st.dead, c.dead);
    /* one factor solved for twice (as the linears sharing an input do):
     * gptq_quantize's grid and stats each time */
    {
        struct gptq_factor f;
        CHECK_EQ(gptq_factor_init(&f, c.h, c.cols, &c.o, &d), 0);
        for (int k = 0; k < 2; k++) {
            struct qgrid g2;
            struct gptq_stats st2;
            CHECK_EQ(gptq_solve(c.w, c.rows, &f, &c.o, NULL, &g2, &st2, &d), 0);
            CHECK(!memcmp(g.q, g2.q, (size_t)(c.rows * c.cols)));
            CHECK(!memcmp(g.scale, g2.scale, (size_t)(g.n_groups * c.rows) * sizeof *g.scale));
            CHECK(st2.loss == st.loss && st2.damp == st.damp && st2.dead == st.dead);
            qgrid_free(&g2);
        }
        gptq_factor_release(&f);
    }
    /* rows over pools of 2 and 3 workers: the same grid and loss, bit for bit */
    for (int nt = 2; nt <= 3; nt++) {
        struct threadpool *tp = NULL;
        struct qgrid g2;
        struct gptq_stats st2;
        CHECK_EQ(threadpool_new(&tp, nt), 0);
        CHECK_EQ(gptq_quantize(c.w, c.rows, c.cols, c.h, &c.o, tp, &g2, &st2, &d), 0);
        CHECK(!memcmp(g.q, g2.q, (size_t)(c.rows * c.cols)));
        CHECK(!memcmp(g.scale, g2.scale, (size_t)(g.n_groups * c.rows) * sizeof *g.scale));
        CHECK(!memcmp(g.zero, g2.zero, (size_t)(g.n_groups * c.rows) * sizeof *g.zero));
        CHECK(!memcmp(g.g_idx, g2.g_idx, (size_t)c.cols * sizeof *g.g_idx));
        CHECK(st2.loss == st.loss && st2.damp == st.damp);
        qgrid_free(&g2);
        threadpool_free(tp);
    }
    if (c.x) {
        /* the accumulation: H within f32 rounding of the oracle's */
        struct gptq_hessian h;
        double maxd = 0, maxh = 0;
        CHECK_EQ(gptq_hessian_init(&h, c.cols, &d), 0);
        for (int64_t k = 0; k < c.n_seq; k++)
            CHECK_EQ(gptq_hessian_add(&h, c.x + k * c.seq_len * c.cols, c.seq_len, c.cols, &d), 0);
        CHECK_EQ(h.n, c.n_seq);
        for (int64_t i = 0; i < c.nh; i++) {
            double df = fabs((double)h.h[i] - c.h[i]);
            maxd = df > maxd ? df : maxd;
            maxh = fabs(c.h[i]) > maxh ? fabs(c.h[i]) : maxh;
        }
        CHECK(maxd <= 1e-5 * maxh);
        for (int64_t i = 0; i < c.cols; i++)    /* dead columns stay exactly 0 */
            if (c.h[i * c.cols + i] == 0)
                CHECK(h.h[i * c.cols + i] == 0);
        /* GPTQ beats RTN on the layer's output error */
        struct qgrid r;
        CHECK_EQ(rtn_quantize(c.w, c.rows, c.cols, &c.o, &r, &d), 0);
        CHECK(output_error(&c, &g) < output_error(&c, &r));
        qgrid_free(&r);
        gptq_hessian_release(&h);
    }
    qgrid_free(&g);
    release(&c);
}

int
main(void)
{
    char *list = slurp(DIR "LIST"), *save = NULL;
    int n = 0;

    CHECK(list != NULL);
    for (char *name = list ? strtok_r(list, "\n", &save) : NULL; name;
         name = strtok_r(NULL, "\n", &save), n++)
        run_case(name);
    CHECK(n >= 20);
    free(list);

    /* option checks */
    {
        struct gptq_opts o = { 4, 128, true, false, false, false, 0.01 };
        struct diag d;
        CHECK_EQ(gptq_check_opts(&o, &d), 0);
        o.bits = 5;
        CHECK_EQ(gptq_check_opts(&o, &d), -ST_RANGE);
        o.bits = 4;
        o.group_size = 100;
        CHECK_EQ(gptq_check_opts(&o, &d), -ST_RANGE);
        o.group_size = 0;
        CHECK_EQ(gptq_check_opts(&o, &d), -ST_RANGE);
        o.group_size = -1;
        o.damp = 1.5;
        CHECK_EQ(gptq_check_opts(&o, &d), -ST_RANGE);
        /* an H no damping below 1 repairs */
        float w[4] = { 1, 2, 3, 4 }, h[4] = { -5, 0, 0, -5 };
        struct qgrid g;
        o.damp = 0.01;
        CHECK_EQ(gptq_quantize(w, 2, 2, h, &o, NULL, &g, NULL, &d), -ST_RANGE);
        CHECK(strstr(d.msg, "positive definite") != NULL);
        CHECK(g.q == NULL);
        /* non-finite activations are refused */
        struct gptq_hessian hs;
        float x[2] = { 1, NAN };
        CHECK_EQ(gptq_hessian_init(&hs, 2, &d), 0);
        CHECK_EQ(gptq_hessian_add(&hs, x, 1, 2, &d), -ST_FORMAT);
        gptq_hessian_release(&hs);
    }
    T_DONE();
}
