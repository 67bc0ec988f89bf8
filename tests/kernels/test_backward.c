/*
 * test_backward.c - the trainer's kernel table (backward.h): every backward
 * op of the double-precision reference against central finite differences
 * of its forward (relative error <= 1e-6), and every op of the optimized
 * table (OpenBLAS) against the float reference on the same inputs.
 *
 * Each check builds a scalar L = sum_i c_i y_i of the op's output with
 * random weights c (so dy = c), perturbs every input element by +-h and
 * compares (L+ - L-) / 2h with the analytic gradient.  The relative error
 * of an element is |g - fd| / max(|g|, |fd|, 1e-3 * max|g| of the tensor):
 * the floor keeps elements whose gradient is zero up to rounding from
 * dividing noise by noise.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backward.h"
#include "ops.h"
#include "../unit/t.h"

#define FD_H 1e-5
#define FD_TOL 1e-6

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* uniform in [-1, 1) */
static double
urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static double *
vec(int64_t n, double scale)
{
    double *v = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        v[i] = urand() * scale;
    return v;
}

static double *
zeros(int64_t n)
{
    return calloc((size_t)n, sizeof(double));
}

/* ---- the ops under test: one forward computing L, one backward ---- */

struct op {
    const char *name;
    double (*loss)(struct op *o);       /* L at the current inputs */
    void (*grad)(struct op *o);         /* the gradients of L into g[] */
    int n_in;
    double *in[4], *g[4];
    int64_t len[4];
    double *c;                  /* dy */
    double *y, *aux, *aux2;
    int64_t n, m, k, h, hkv, hd, rot;
    int style;
    double eps;
};

static double
dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* matmul: in x [n][k], w [m][k], b [m] */
static double
mm_loss(struct op *o)
{
    bw_matmul_fwd_ref64(o->y, o->in[0], o->in[1], o->in[2], o->n, o->m, o->k);
    return dot(o->y, o->c, o->n * o->m);
}

static void
mm_grad(struct op *o)
{
    bw_matmul_bwd_ref64(o->g[0], o->g[1], o->g[2], o->c, o->in[0], o->in[1], o->n, o->m, o->k);
}

/* rmsnorm: in x [n][k], w [k] */
static double
rms_loss(struct op *o)
{
    bw_rmsnorm_fwd_ref64(o->y, o->in[0], o->in[1], o->n, o->k, o->eps);
    return dot(o->y, o->c, o->n * o->k);
}

static void
rms_grad(struct op *o)
{
    bw_rmsnorm_bwd_ref64(o->g[0], o->g[1], o->c, o->in[0], o->in[1], o->n, o->k, o->eps);
}

/* silu_mul: in g [n], u [n] */
static double
silu_loss(struct op *o)
{
    bw_silu_mul_fwd_ref64(o->y, o->in[0], o->in[1], o->n);
    return dot(o->y, o->c, o->n);
}

static void
silu_grad(struct op *o)
{
    bw_silu_mul_bwd_ref64(o->g[0], o->g[1], o->c, o->in[0], o->in[1], o->n);
}

/* rope: in x [n][h * hd]; aux = the angles */
static double
rope_loss(struct op *o)
{
    int64_t len = o->n * o->h * o->hd;
    memcpy(o->y, o->in[0], (size_t)len * sizeof(double));
    bw_rope_fwd_ref64(o->y, o->n, o->h, o->hd, o->aux, o->rot, o->style);
    return dot(o->y, o->c, len);
}

static void
rope_grad(struct op *o)
{
    int64_t len = o->n * o->h * o->hd;
    double *t = zeros(len);
    memcpy(t, o->c, (size_t)len * sizeof(double));
    bw_rope_bwd_ref64(t, o->n, o->h, o->hd, o->aux, o->rot, o->style);
    for (int64_t i = 0; i < len; i++)
        o->g[0][i] += t[i];
    free(t);
}

/* attention: in q, k, v; aux = p, aux2 = scratch */
static double
attn_loss(struct op *o)
{
    bw_attn_fwd_ref64(o->y, o->aux, o->in[0], o->in[1], o->in[2], o->n, o->h, o->hkv, o->hd,
                      o->eps);
    return dot(o->y, o->c, o->n * o->h * o->hd);
}

static void
attn_grad(struct op *o)
{
    attn_loss(o);
    bw_attn_bwd_ref64(o->g[0], o->g[1], o->g[2], o->c, o->aux, o->in[0], o->in[1], o->in[2],
                      o->n, o->h, o->hkv, o->hd, o->eps, o->aux2);
}

/* training-time-test attention at step s = rot: in q [n][h * hd], k and v
 * [s + 1][n][hkv * hd]; aux = p, aux2 = scratch */
static double
attn_ttt_loss(struct op *o)
{
    bw_attn_ttt_fwd_ref64(o->y, o->aux, o->in[0], o->in[1], o->in[2], o->n, o->rot, o->h, o->hkv,
                          o->hd, o->eps);
    return dot(o->y, o->c, o->n * o->h * o->hd);
}

static void
attn_ttt_grad(struct op *o)
{
    attn_ttt_loss(o);
    bw_attn_ttt_bwd_ref64(o->g[0], o->g[1], o->g[2], o->c, o->aux, o->in[0], o->in[1], o->in[2],
                          o->n, o->rot, o->h, o->hkv, o->hd, o->eps, o->aux2);
}

/* soft cross-entropy: in z [n][k], t [n][k]; c = row weights */
static double
xent_loss(struct op *o)
{
    bw_xent_fwd_ref64(o->y, o->in[0], o->in[1], o->n, o->k);
    return dot(o->y, o->c, o->n);
}

static void
xent_grad(struct op *o)
{
    bw_xent_bwd_ref64(o->g[0], o->in[0], o->in[1], o->c, o->n, o->k);
}

/* smoothl1: in a [n][k]; aux = b */
static double
sl1_loss(struct op *o)
{
    bw_smoothl1_fwd_ref64(o->y, o->in[0], o->aux, o->n, o->k);
    return dot(o->y, o->c, o->n);
}

static void
sl1_grad(struct op *o)
{
    bw_smoothl1_bwd_ref64(o->g[0], o->in[0], o->aux, o->c, o->n, o->k);
}

/* the largest relative error over input i (inputs with g[i] == NULL are
 * not checked: no gradient is defined for them, e.g. the CE targets) */
static double
fd_check(struct op *o)
{
    double worst = 0;
    o->grad(o);
    for (int i = 0; i < o->n_in; i++) {
        if (!o->g[i])
            continue;
        double gmax = 0;
        for (int64_t j = 0; j < o->len[i]; j++)
            gmax = fmax(gmax, fabs(o->g[i][j]));
        for (int64_t j = 0; j < o->len[i]; j++) {
            double x0 = o->in[i][j];
            o->in[i][j] = x0 + FD_H;
            double lp = o->loss(o);
            o->in[i][j] = x0 - FD_H;
            double lm = o->loss(o);
            o->in[i][j] = x0;
            double fd = (lp - lm) / (2 * FD_H), g = o->g[i][j];
            double den = fmax(fmax(fabs(g), fabs(fd)), 1e-3 * gmax);
            double rel = den > 0 ? fabs(g - fd) / den : 0;
            if (rel > worst)
                worst = rel;
        }
    }
    printf("%-10s fd max rel err %.3g\n", o->name, worst);
    return worst;
}

static void
op_free(struct op *o)
{
    for (int i = 0; i < o->n_in; i++)
        free(o->in[i]), free(o->g[i]);
    free(o->c), free(o->y), free(o->aux), free(o->aux2);
}

static void
add_in(struct op *o, int64_t len, double scale, int with_grad)
{
    o->in[o->n_in] = vec(len, scale);
    o->g[o->n_in] = with_grad ? zeros(len) : NULL;
    o->len[o->n_in++] = len;
}

static void
test_fd(void)
{
    struct op o;

    memset(&o, 0, sizeof o);
    o.name = "matmul", o.loss = mm_loss, o.grad = mm_grad, o.n = 3, o.m = 5, o.k = 7;
    add_in(&o, o.n * o.k, 1, 1), add_in(&o, o.m * o.k, 1, 1), add_in(&o, o.m, 1, 1);
    o.c = vec(o.n * o.m, 1), o.y = zeros(o.n * o.m);
    CHECK(fd_check(&o) <= FD_TOL);
    op_free(&o);

    memset(&o, 0, sizeof o);
    o.name = "rmsnorm", o.loss = rms_loss, o.grad = rms_grad, o.n = 3, o.k = 16, o.eps = 1e-5;
    add_in(&o, o.n * o.k, 1, 1), add_in(&o, o.k, 1, 1);
    o.c = vec(o.n * o.k, 1), o.y = zeros(o.n * o.k);
    CHECK(fd_check(&o) <= FD_TOL);
    op_free(&o);

    memset(&o, 0, sizeof o);
    o.name = "silu_mul", o.loss = silu_loss, o.grad = silu_grad, o.n = 40;
    add_in(&o, o.n, 4, 1), add_in(&o, o.n, 2, 1);
    o.c = vec(o.n, 1), o.y = zeros(o.n);
    CHECK(fd_check(&o) <= FD_TOL);
    op_free(&o);

    for (int style = 0; style <= 2; style += 2) {
        memset(&o, 0, sizeof o);
        o.name = style ? "rope-neox" : "rope";
        o.loss = rope_loss, o.grad = rope_grad, o.n = 3, o.h = 2, o.hd = 8, o.rot = 6;
        o.style = style;
        add_in(&o, o.n * o.h * o.hd, 1, 1);
        o.aux = zeros(o.n * o.rot);
        for (int64_t t = 0; t < o.n; t++)
            for (int64_t i = 0; i < o.rot / 2; i++) {
                double th = 3 * urand();
                o.aux[t * o.rot + i] = cos(th), o.aux[t * o.rot + o.rot / 2 + i] = sin(th);
            }
        o.c = vec(o.n * o.h * o.hd, 1), o.y = zeros(o.n * o.h * o.hd);
        CHECK(fd_check(&o) <= FD_TOL);
        op_free(&o);
    }

    memset(&o, 0, sizeof o);
    o.name = "attention", o.loss = attn_loss, o.grad = attn_grad;
    o.n = 5, o.h = 4, o.hkv = 2, o.hd = 4, o.eps = 0.5;
    add_in(&o, o.n * o.h * o.hd, 1, 1), add_in(&o, o.n * o.hkv * o.hd, 1, 1);
    add_in(&o, o.n * o.hkv * o.hd, 1, 1);
    o.aux = zeros(o.h * o.n * o.n), o.aux2 = zeros(o.n * o.n);
    o.c = vec(o.n * o.h * o.hd, 1), o.y = zeros(o.n * o.h * o.hd);
    CHECK(fd_check(&o) <= FD_TOL);
    op_free(&o);

    /* step 0 is causal attention; steps 1 and 3 add the diagonals of the
     * unrolled steps, whose keys get gradients of their own */
    for (int64_t st = 0; st <= 3; st += 1 + (st > 0)) {
        memset(&o, 0, sizeof o);
        o.name = "attn_ttt", o.loss = attn_ttt_loss, o.grad = attn_ttt_grad;
        o.n = 5, o.h = 4, o.hkv = 2, o.hd = 4, o.eps = 0.5, o.rot = st;
        add_in(&o, o.n * o.h * o.hd, 1, 1), add_in(&o, (st + 1) * o.n * o.hkv * o.hd, 1, 1);
        add_in(&o, (st + 1) * o.n * o.hkv * o.hd, 1, 1);
        o.aux = zeros(o.h * o.n * (o.n + st)), o.aux2 = zeros(o.n + st);
        o.c = vec(o.n * o.h * o.hd, 1), o.y = zeros(o.n * o.h * o.hd);
        CHECK(fd_check(&o) <= FD_TOL);
        if (st == 0) {          /* the same numbers as attn_fwd */
            double *y0 = zeros(o.n * o.h * o.hd), *p0 = zeros(o.h * o.n * o.n), dm = 0;
            attn_ttt_loss(&o);
            bw_attn_fwd_ref64(y0, p0, o.in[0], o.in[1], o.in[2], o.n, o.h, o.hkv, o.hd, o.eps);
            for (int64_t i = 0; i < o.n * o.h * o.hd; i++)
                dm = fmax(dm, fabs(y0[i] - o.y[i]));
            CHECK(dm <= 1e-12);
            free(y0), free(p0);
        }
        op_free(&o);
    }

    memset(&o, 0, sizeof o);
    o.name = "xent", o.loss = xent_loss, o.grad = xent_grad, o.n = 3, o.k = 11;
    add_in(&o, o.n * o.k, 3, 1), add_in(&o, o.n * o.k, 1, 0);
    for (int64_t r = 0; r < o.n; r++) {     /* targets: a distribution per row */
        double s = 0, *t = o.in[1] + r * o.k;
        for (int64_t j = 0; j < o.k; j++)
            s += t[j] = exp(2 * t[j]);
        for (int64_t j = 0; j < o.k; j++)
            t[j] /= s;
    }
    o.c = vec(o.n, 1), o.y = zeros(o.n);
    CHECK(fd_check(&o) <= FD_TOL);
    op_free(&o);

    /* both branches of SmoothL1, no difference within h of the kink */
    memset(&o, 0, sizeof o);
    o.name = "smoothl1", o.loss = sl1_loss, o.grad = sl1_grad, o.n = 3, o.k = 16;
    add_in(&o, o.n * o.k, 2.5, 1);
    o.aux = vec(o.n * o.k, 0.5);
    for (int64_t i = 0; i < o.n * o.k; i++)
        if (fabs(fabs(o.in[0][i] - o.aux[i]) - 1) < 1e-3)
            o.in[0][i] += 0.01;
    o.c = vec(o.n, 1), o.y = zeros(o.n);
    CHECK(fd_check(&o) <= FD_TOL);
    op_free(&o);
}

/* ---- the optimized table against the float reference ---- */

static float *
fvec(int64_t n, float scale)
{
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)urand() * scale;
    return v;
}

static float *
fzeros(int64_t n)
{
    return calloc((size_t)n, sizeof(float));
}

/* max |a - b| / max(max|b|, 1e-30) */
static double
fdiff(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / fmax(m, 1e-30);
}

#define OPT_TOL 1e-5

static void
test_opt(const struct backend_backward_ops *opt, const struct backend_backward_ops *ref)
{
    /* shapes with odd sizes: no multiple of any SIMD width */
    int64_t n = 37, m = 29, k = 45;
    float *x = fvec(n * k, 1), *w = fvec(m * k, 1), *b = fvec(m, 1), *dy = fvec(n * m, 1);
    float *y0 = fzeros(n * m), *y1 = fzeros(n * m);
    float *dx0 = fvec(n * k, 1), *dx1 = fzeros(n * k), *dw0 = fvec(m * k, 1), *dw1 = fzeros(m * k);
    float *db0 = fvec(m, 1), *db1 = fzeros(m);
    memcpy(dx1, dx0, (size_t)(n * k) * sizeof(float));     /* accumulation onto nonzero */
    memcpy(dw1, dw0, (size_t)(m * k) * sizeof(float));
    memcpy(db1, db0, (size_t)m * sizeof(float));
    ref->matmul_fwd(y0, x, w, b, n, m, k);
    opt->matmul_fwd(y1, x, w, b, n, m, k);
    CHECK(fdiff(y1, y0, n * m) <= OPT_TOL);
    ref->matmul_bwd(dx0, dw0, db0, dy, x, w, n, m, k);
    opt->matmul_bwd(dx1, dw1, db1, dy, x, w, n, m, k);
    CHECK(fdiff(dx1, dx0, n * k) <= OPT_TOL);
    CHECK(fdiff(dw1, dw0, m * k) <= OPT_TOL);
    CHECK(fdiff(db1, db0, m) <= OPT_TOL);
    printf("matmul     %s vs ref: y %.3g dx %.3g dw %.3g\n", opt->name, fdiff(y1, y0, n * m),
           fdiff(dx1, dx0, n * k), fdiff(dw1, dw0, m * k));
    free(x), free(w), free(b), free(dy), free(y0), free(y1);
    free(dx0), free(dx1), free(dw0), free(dw1), free(db0), free(db1);

    int64_t nt = 23, h = 6, hkv = 2, hd = 16, qd = h * hd, kd = hkv * hd;
    float *q = fvec(nt * qd, 1), *kk = fvec(nt * kd, 1), *v = fvec(nt * kd, 1);
    float *dout = fvec(nt * qd, 1), *o0 = fzeros(nt * qd), *o1 = fzeros(nt * qd);
    float *p0 = fzeros(h * nt * nt), *p1 = fzeros(h * nt * nt), *scr = fzeros(nt * nt);
    float *g0[3] = { fzeros(nt * qd), fzeros(nt * kd), fzeros(nt * kd) };
    float *g1[3] = { fzeros(nt * qd), fzeros(nt * kd), fzeros(nt * kd) };
    float sc = 1.0f / sqrtf((float)hd);
    ref->attn_fwd(o0, p0, q, kk, v, nt, h, hkv, hd, sc);
    opt->attn_fwd(o1, p1, q, kk, v, nt, h, hkv, hd, sc);
    CHECK(fdiff(o1, o0, nt * qd) <= OPT_TOL);
    CHECK(fdiff(p1, p0, h * nt * nt) <= OPT_TOL);
    ref->attn_bwd(g0[0], g0[1], g0[2], dout, p0, q, kk, v, nt, h, hkv, hd, sc, scr);
    opt->attn_bwd(g1[0], g1[1], g1[2], dout, p1, q, kk, v, nt, h, hkv, hd, sc, scr);
    CHECK(fdiff(g1[0], g0[0], nt * qd) <= OPT_TOL);
    CHECK(fdiff(g1[1], g0[1], nt * kd) <= OPT_TOL);
    CHECK(fdiff(g1[2], g0[2], nt * kd) <= OPT_TOL);
    printf("attention  %s vs ref: out %.3g dq %.3g dk %.3g dv %.3g\n", opt->name,
           fdiff(o1, o0, nt * qd), fdiff(g1[0], g0[0], nt * qd), fdiff(g1[1], g0[1], nt * kd),
           fdiff(g1[2], g0[2], nt * kd));
    free(q), free(kk), free(v), free(dout), free(o0), free(o1), free(p0), free(p1), free(scr);
    for (int i = 0; i < 3; i++)
        free(g0[i]), free(g1[i]);

    /* the training-time-test attention at step 2: step 0's causal keys and
     * the two diagonal columns; the gradients accumulate onto nonzero */
    int64_t st = 2, wt = nt + st;
    q = fvec(nt * qd, 1), kk = fvec((st + 1) * nt * kd, 1), v = fvec((st + 1) * nt * kd, 1);
    dout = fvec(nt * qd, 1), o0 = fzeros(nt * qd), o1 = fzeros(nt * qd);
    p0 = fzeros(h * nt * wt), p1 = fzeros(h * nt * wt), scr = fzeros(nt * wt);
    int64_t gn[3] = { nt * qd, (st + 1) * nt * kd, (st + 1) * nt * kd };
    for (int i = 0; i < 3; i++) {
        g0[i] = fvec(gn[i], 1), g1[i] = fzeros(gn[i]);
        memcpy(g1[i], g0[i], (size_t)gn[i] * sizeof(float));
    }
    ref->attn_ttt_fwd(o0, p0, q, kk, v, nt, st, h, hkv, hd, sc);
    opt->attn_ttt_fwd(o1, p1, q, kk, v, nt, st, h, hkv, hd, sc);
    CHECK(fdiff(o1, o0, nt * qd) <= OPT_TOL);
    CHECK(fdiff(p1, p0, h * nt * wt) <= OPT_TOL);
    ref->attn_ttt_bwd(g0[0], g0[1], g0[2], dout, p0, q, kk, v, nt, st, h, hkv, hd, sc, scr);
    opt->attn_ttt_bwd(g1[0], g1[1], g1[2], dout, p1, q, kk, v, nt, st, h, hkv, hd, sc, scr);
    for (int i = 0; i < 3; i++)
        CHECK(fdiff(g1[i], g0[i], gn[i]) <= OPT_TOL);
    printf("attn_ttt   %s vs ref: out %.3g dq %.3g dk %.3g dv %.3g\n", opt->name,
           fdiff(o1, o0, nt * qd), fdiff(g1[0], g0[0], gn[0]), fdiff(g1[1], g0[1], gn[1]),
           fdiff(g1[2], g0[2], gn[2]));
    /* without dq and dk (a frozen input's gradient): dv alone, the same */
    memset(g1[2], 0, (size_t)gn[2] * sizeof(float));
    memset(g0[2], 0, (size_t)gn[2] * sizeof(float));
    ref->attn_ttt_bwd(NULL, NULL, g0[2], dout, p0, q, kk, v, nt, st, h, hkv, hd, sc, scr);
    opt->attn_ttt_bwd(NULL, NULL, g1[2], dout, p1, q, kk, v, nt, st, h, hkv, hd, sc, scr);
    CHECK(fdiff(g1[2], g0[2], gn[2]) <= OPT_TOL);
    free(q), free(kk), free(v), free(dout), free(o0), free(o1), free(p0), free(p1), free(scr);
    for (int i = 0; i < 3; i++)
        free(g0[i]), free(g1[i]);

    /* the element-wise entries: the same functions, or the same results */
    int64_t ne = 64;
    float *a = fvec(ne, 2), *c = fvec(ne, 2), *e0 = fzeros(ne), *e1 = fzeros(ne);
    ref->silu_mul_fwd(e0, a, c, ne);
    opt->silu_mul_fwd(e1, a, c, ne);
    CHECK(fdiff(e1, e0, ne) <= OPT_TOL);
    ref->rmsnorm_fwd(e0, a, c, 4, 16, 1e-5f);
    opt->rmsnorm_fwd(e1, a, c, 4, 16, 1e-5f);
    CHECK(fdiff(e1, e0, ne) <= OPT_TOL);
    ref->smoothl1_fwd(e0, a, c, 4, 16);
    opt->smoothl1_fwd(e1, a, c, 4, 16);
    CHECK(fdiff(e1, e0, 4) <= OPT_TOL);
    free(a), free(c), free(e0), free(e1);

    /* the soft cross-entropy over rows of several widths (a SIMD table's
     * tails: 8 and 16 lanes and what is left), logits up to +-40 (the
     * exp's reduction over a wide range), targets softmaxed or one-hot,
     * the gradient weighted and accumulated onto nonzero */
    int64_t vs[] = { 1, 7, 8, 17, 37, 4096 + 13 }, nr = 5;
    for (size_t iv = 0; iv < sizeof vs / sizeof vs[0]; iv++) {
        int64_t V = vs[iv];
        float *z = fvec(nr * V, 40), *t = fvec(nr * V, 1), *wr = fvec(nr, 1);
        float *l0 = fzeros(nr), *l1 = fzeros(nr), *d0 = fvec(nr * V, 1), *d1 = fzeros(nr * V);
        memcpy(d1, d0, (size_t)(nr * V) * sizeof(float));
        for (int64_t r = 0; r < nr; r++) {
            float *tr = t + r * V;
            if (r == 1) {           /* one-hot */
                memset(tr, 0, (size_t)V * sizeof(float));
                tr[V / 2] = 1;
            } else {
                ops_softmax_ref(tr, V);
            }
        }
        ref->xent_fwd(l0, z, t, nr, V);
        opt->xent_fwd(l1, z, t, nr, V);
        CHECK(fdiff(l1, l0, nr) <= OPT_TOL);
        ref->xent_bwd(d0, z, t, wr, nr, V);
        opt->xent_bwd(d1, z, t, wr, nr, V);
        CHECK(fdiff(d1, d0, nr * V) <= OPT_TOL);
        ref->xent_bwd(d0, z, t, NULL, nr, V);
        opt->xent_bwd(d1, z, t, NULL, nr, V);
        CHECK(fdiff(d1, d0, nr * V) <= OPT_TOL);
        if (V == 4096 + 13)
            printf("xent       %s vs ref: loss %.3g dz %.3g (%lld logits)\n", opt->name,
                   fdiff(l1, l0, nr), fdiff(d1, d0, nr * V), (long long)V);
        free(z), free(t), free(wr), free(l0), free(l1), free(d0), free(d1);
    }
    /* logits of -inf (masked entries) get a gradient of 0, as the
     * reference's (whose loss is NaN then: 0 x inf) */
    float zi[19], ti[19], di[19] = { 0 }, dr[19] = { 0 };
    for (int j = 0; j < 19; j++)
        zi[j] = j % 3 ? (float)j / 7 : -INFINITY, ti[j] = j % 3 ? 1.0f / 12 : 0;
    ref->xent_bwd(dr, zi, ti, NULL, 1, 19);
    opt->xent_bwd(di, zi, ti, NULL, 1, 19);
    CHECK(fdiff(di, dr, 19) <= OPT_TOL);
    for (int j = 0; j < 19; j += 3)
        CHECK(di[j] == 0.0f);
}

/* the float reference agrees with the double one (the template compiled
 * twice), so the FD checks vouch for the float table too */
static void
test_f32_vs_f64(void)
{
    int64_t n = 4, m = 6, k = 10;
    double *x = vec(n * k, 1), *w = vec(m * k, 1), *dy = vec(n * m, 1);
    double *y = zeros(n * m), *dx = zeros(n * k);
    float *xf = fzeros(n * k), *wf = fzeros(m * k), *dyf = fzeros(n * m), *yf = fzeros(n * m),
          *dxf = fzeros(n * k);
    for (int64_t i = 0; i < n * k; i++)
        xf[i] = (float)x[i], x[i] = xf[i];
    for (int64_t i = 0; i < m * k; i++)
        wf[i] = (float)w[i], w[i] = wf[i];
    for (int64_t i = 0; i < n * m; i++)
        dyf[i] = (float)dy[i], dy[i] = dyf[i];
    bw_matmul_fwd_ref64(y, x, w, NULL, n, m, k);
    backward_ops_ref.matmul_fwd(yf, xf, wf, NULL, n, m, k);
    bw_rmsnorm_bwd_ref64(dx, NULL, y, x, NULL, 1, n * k < m * n ? n * k : n * m, 1e-6);
    backward_ops_ref.rmsnorm_bwd(dxf, NULL, yf, xf, NULL, 1, n * k < m * n ? n * k : n * m, 1e-6f);
    for (int64_t i = 0; i < n * m; i++)
        CHECK_NEAR(yf[i], y[i], 1e-5);
    for (int64_t i = 0; i < n * k; i++)
        CHECK_NEAR(dxf[i], dx[i], 1e-5);
    free(x), free(w), free(dy), free(y), free(dx), free(xf), free(wf), free(dyf), free(yf),
        free(dxf);
}

int
main(void)
{
    struct backend *be;
    char why[256];

    test_fd();
    test_f32_vs_f64();
    test_opt(&backward_ops_blas, &backward_ops_ref);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        test_opt(&backward_ops_blas_avx2, &backward_ops_ref);

    /* the CPU backend hands out the table by kernel */
    struct backend_config cfg = { 1, "ref" };
    CHECK(backend_cpu_open(&be, &cfg, why, sizeof why) == 0);
    if (be) {
        CHECK(be->ops->backward == &backward_ops_ref);
        backend_close(be);
    }
    cfg.kernel = "auto";
    CHECK(backend_cpu_open(&be, &cfg, why, sizeof why) == 0);
    if (be) {
        CHECK(be->ops->backward ==
              (strcmp(be->kernel, "ref") ? &backward_ops_blas_avx2 : &backward_ops_ref));
        backend_close(be);
    }
    T_DONE();
}
